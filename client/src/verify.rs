//! `plugpull verify`: fetch the run's ledger from the listener and check it whole,
//! apply the device-error rule, dispatch on the workload (a file run to
//! [`crate::file::verify`], a files run to [`crate::files::verify`], a pgbench run to
//! [`crate::pgbench`]), print one report, and
//! exit 0 (nothing acknowledged lost or damaged), 1 (findings) or 2 (could not verify).

use crate::manifest::hostname;
use crate::net;
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{self, AckBatch, Acks, DeviceError, Entry, Manifest, Tail, Workload};
use plugpull::report::Report;
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use std::path::PathBuf;

use crate::file::print::print_file_report;
use crate::file::verify::{verify_file_run, FileVerifyOptions};

/// Options of `plugpull verify`.
#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    /// Run to verify (default: the latest run whose manifest names this host).
    #[arg(long)]
    pub run: Option<RunId>,
    /// Host name to pick the latest run of (default: this host).
    #[arg(long)]
    pub host: Option<String>,
    /// Read this path instead of the manifest's target (a device renamed after reboot).
    #[arg(long)]
    pub target: Option<PathBuf>,
    /// Print exactly one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub json: bool,
    /// Findings to list in the human report.
    #[arg(long, default_value_t = 10)]
    pub show: usize,
    /// Instead: every run of the host (--host, default this host) judged as a cut by
    /// hand from what each `verify` recorded, and their roll-up with its confidence
    /// bound (docs/campaign.md, "Cuts by hand").
    #[arg(long, conflicts_with_all = ["run", "target"])]
    pub history: bool,
}

/// A fetched and checked ledger.
pub struct RunLedger {
    /// The run.
    pub run: RunId,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its ack batches, in ledger order.
    pub batches: Vec<AckBatch>,
    /// Whether the agent finished normally.
    pub finished: bool,
    /// The leaf disks' flush counters at the run's end (its `Finished` or
    /// `DeviceError` entry), when recorded.
    pub end_flushes: Option<plugpull::ledger::FlushSample>,
    /// How the run ended, when a device error ended it.
    pub device_error: Option<DeviceError>,
    /// Acknowledgements the ledger holds after its device-error entry (the agent
    /// sends none; any makes the run unverifiable).
    pub acks_after_error: u64,
    /// How the run was chosen, in words (`given with --run`, or the newest run of
    /// the host by the listener's record).
    pub chosen: String,
}

/// Fetches a run's ledger and checks every entry's CRC.
///
/// Errors: unreachable listener, unknown run, damaged ledger (naming the offset).
pub async fn fetch(
    listener: &str,
    secret: &Secret,
    run: Option<RunId>,
    host: &str,
) -> Result<RunLedger, Error> {
    let (mut r, mut w) = net::connect(listener, secret).await?;
    w.send(&Request::FetchLedger {
        run,
        host: host.to_string(),
    })
    .await?;
    w.flush().await?;
    let mut bytes = Vec::new();
    let (run, torn) = loop {
        match r.recv().await? {
            Response::LedgerChunk {
                run,
                bytes: b,
                last,
                torn,
            } => {
                bytes.extend_from_slice(&b);
                if last {
                    break (run, torn);
                }
            }
            other => {
                return Err(Error(format!(
                    "listener answered FetchLedger with {other:?}"
                )))
            }
        }
    };
    let mut manifest = None;
    let mut batches = Vec::new();
    let mut finished = None;
    let mut invalid = None;
    let mut device_error: Option<DeviceError> = None;
    let mut acks_after_error = 0;
    let (id, tail) = ledger::scan(&bytes, |_, e| match e {
        Entry::Manifest(m) => manifest = Some(*m),
        Entry::Acks(b) => {
            if device_error.is_some() {
                acks_after_error += b.acks.count();
            }
            batches.push(b)
        }
        Entry::Finished(s) => finished = Some(s),
        Entry::DeviceError(d) => device_error = Some(d),
        Entry::Invalid { error } => invalid = Some(error),
    })
    .map_err(|e| Error(format!("cannot verify run {run}: {e}")))?;
    if id != run {
        return Err(Error(format!(
            "listener sent the ledger of run {id} when asked for run {run}"
        )));
    }
    if let Tail::Torn { valid_len, .. } = tail {
        return Err(Error(format!("cannot verify run {run}: the ledger the listener sent ends in a torn entry at byte {valid_len}")));
    }
    // The witness's record must be whole (issue 9): gap-free, the agent's own count
    // matched, torn tails accounted for; a witness fault the agent recorded is final.
    if let Some(e) = invalid {
        return Err(Error(format!("run {run} cannot be judged: {e}")));
    }
    let record = ledger::check_record(&mut batches, finished.as_ref(), &torn)
        .map_err(|e| Error(format!("run {run}: {e}")))?;
    if let Some(end) = &device_error {
        ledger::check_device_error_count(record.acks, end)
            .map_err(|e| Error(format!("run {run}: {e}")))?;
    }
    Ok(RunLedger {
        run,
        manifest: manifest.expect("scan guarantees a manifest"),
        batches,
        end_flushes: finished
            .as_ref()
            .and_then(|f| f.flushes.clone())
            .or_else(|| device_error.as_ref().and_then(|d| d.flushes.clone())),
        finished: finished.is_some(),
        device_error,
        acks_after_error,
        chosen: String::new(),
    })
}

/// The device-error rule: a run that a device error ended is judged on the acks
/// confirmed before the error, unless writes were acknowledged after it (ledger
/// entries after the error, or acks stamped later than it): then nothing it measured
/// can be trusted. Returns the line the report shows, if a device error ended the run.
///
/// Errors (exit 2): acknowledgements after the device error.
pub fn device_error_rule(l: &RunLedger) -> Result<Option<String>, Error> {
    let Some(end) = &l.device_error else {
        return Ok(None);
    };
    let later = l.acks_after_error
        + l.batches
            .iter()
            .map(|b| match &b.acks {
                Acks::File(v) => v.iter().filter(|a| a.ms as u64 > end.ms).count() as u64,
                Acks::Files(v) => v.iter().filter(|a| a.ms as u64 > end.ms).count() as u64,
                Acks::Pg(_) => 0,
            })
            .sum::<u64>();
    let at = end.ms as f64 / 1000.0;
    if !end.device {
        return Err(Error(format!(
            "run {}: the writer stopped at {at:.3} s into the run on an error that is not a device failure ({}): \
             the run itself went wrong, so nothing it measured counts",
            l.run, end.error
        )));
    }
    if later > 0 {
        return Err(Error(format!(
            "run {}: writes were acknowledged after its device error at {at:.3} s into the run ({}): \
             a success after a failed write or durability call cannot be trusted, so nothing this run measured counts",
            l.run, end.error
        )));
    }
    Ok(Some(format!(
        "run ended by a device error at {at:.3} s into the run: {} (the device lost power or went away; \
         if it came back under a new name, give --target); the {} acknowledgements confirmed before it are judged",
        end.error, end.acknowledged
    )))
}

/// How `plugpull verify` ended once it printed its report (one JSON object with
/// `--json`). An `Err` from [`verify`] means no report was printed.
#[derive(Debug)]
pub enum Reported {
    /// The run was judged: `true` = nothing acknowledged lost or damaged (exit 0),
    /// `false` = findings (exit 1).
    Judged(bool),
    /// The report says the run measured nothing (a pgbench run whose acknowledged
    /// commits were all made under a configuration that did not promise durability):
    /// exit 2 with this cause on stderr, and no second JSON object.
    NotMeasured(Error),
}

/// `plugpull verify` as the command runs it: `secret` is the loaded secret or why it
/// could not be loaded. Returns the exit's meaning: `Ok(true)` exit 0, `Ok(false)`
/// exit 1, `Err` exit 2. With `--json`, stdout holds exactly one JSON object also when
/// verification could not run (`{"ok":false,"error":…}`).
pub async fn command(
    args: &VerifyArgs,
    listener: &str,
    secret: Result<Secret, Error>,
    pg: &crate::pgbench::PgVerifyArgs,
) -> Result<bool, Error> {
    if args.history {
        let host = args.host.clone().unwrap_or_else(hostname);
        return crate::history::command(listener, secret, &host, args.json).await;
    }
    let result = match secret {
        Ok(s) => verify(args, listener, &s, pg).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(Reported::Judged(ok)) => Ok(ok),
        Ok(Reported::NotMeasured(e)) => Err(e),
        Err(e) => {
            if args.json {
                println!("{}", serde_json::json!({ "ok": false, "error": e.0 }));
            }
            Err(e)
        }
    }
}

/// Fetches the run `args` names (else the newest run of the host), verifies it by its
/// workload and prints one report: human text, or one JSON object with `--json`.
///
/// Errors (exit 2, nothing printed on stdout): the listener, the ledger or the target
/// could not be used, or the run cannot be judged.
pub async fn verify(
    args: &VerifyArgs,
    listener: &str,
    secret: &Secret,
    pg: &crate::pgbench::PgVerifyArgs,
) -> Result<Reported, Error> {
    let (l, report) = judge(args, listener, secret, pg).await?;
    print_report(&report, args.json, args.show);
    crate::history::record(listener, secret, &l, &report).await;
    if report.not_measured() {
        // Exit 2 with the report already printed (one JSON object with --json).
        return Ok(Reported::NotMeasured(Error(report.summary().to_string())));
    }
    Ok(Reported::Judged(report.ok()))
}

/// Fetches the run `args` names (else the newest run of the host) and judges it by its
/// workload, printing nothing on stdout: the ledger and the report that `verify` prints
/// (and `plugpull report` renders).
///
/// Errors (exit 2): as [`verify`].
pub async fn judge(
    args: &VerifyArgs,
    listener: &str,
    secret: &Secret,
    pg: &crate::pgbench::PgVerifyArgs,
) -> Result<(RunLedger, Report), Error> {
    let host = args.host.clone().unwrap_or_else(hostname);
    let mut l = fetch(listener, secret, args.run, &host).await?;
    l.chosen = match args.run {
        Some(_) => "given with --run".into(),
        None => format!(
            "the newest run of host {host} by the listener's record (created {} by the listener's clock)",
            plugpull::units::utc(l.manifest.listener_created_unix_ms)
        ),
    };
    if args.run.is_none() {
        eprintln!(
            "verifying run {}, {}; it started {} (agent clock)",
            l.run,
            l.chosen,
            plugpull::units::utc(l.manifest.started_unix_ms)
        );
    }
    // The cut evidence (boot id, the drives' power-loss counters through smartctl and
    // nvme, tens of ms to seconds) is taken while the run's data is read, not after.
    let evidence = {
        let (storage, host) = (l.manifest.storage.clone(), l.manifest.host.clone());
        tokio::task::spawn_blocking(move || crate::storage::cut_evidence_now(&storage, &host))
    };
    let mut report: Report = match &l.manifest.workload {
        Workload::File(fm) => {
            verify_file_run(&l, fm, &FileVerifyOptions::from(args), listener, secret)
                .await?
                .into()
        }
        Workload::Files(fm) => {
            let t = args.target.as_ref();
            tokio::task::block_in_place(|| crate::files::verify::verify_files_run(&l, fm, t))?
                .into()
        }
        Workload::Pgbench(pm) => {
            device_error_rule(&l)?;
            crate::pgbench::verify(l.run, &l.manifest, pm, &l.batches, l.finished, pg)
                .await?
                .into()
        }
    };
    let evidence = evidence
        .await
        .map_err(|e| Error(format!("the cut-evidence snapshot failed: {e}")))?;
    report.set_storage(storage_with(&l, evidence));
    Ok((l, report))
}

/// The "stack under test" section of the report on run `l` (`StorageReport::build`),
/// with the cut-evidence snapshot taken now (its tools run in `block_in_place`).
pub fn storage_of(l: &RunLedger) -> plugpull::report::StorageReport {
    let evidence = tokio::task::block_in_place(|| {
        crate::storage::cut_evidence_now(&l.manifest.storage, &l.manifest.host)
    });
    storage_with(l, evidence)
}

/// The "stack under test" section of the report on run `l`, with the cut evidence
/// `evidence` ([`crate::storage::cut_evidence_now`]).
fn storage_with(
    l: &RunLedger,
    evidence: Result<plugpull::probe::evidence::Snapshot, String>,
) -> plugpull::report::StorageReport {
    let w = &l.manifest.workload;
    let facts = plugpull::report::storage::RunFacts {
        batches: &l.batches,
        end: l.end_flushes.as_ref(),
        device_error: l.device_error.is_some(),
        uses_flush: w.acks_wait_for_flush(),
        serial: w.single_writer(),
        what: w.acks_name(),
    };
    plugpull::report::StorageReport::build(&l.manifest.storage, &facts, evidence)
}

/// Prints `report`: one JSON object with `json`, else the human report listing at most
/// `show` findings of each kind.
pub fn print_report(report: &Report, json: bool, show: usize) {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("report serializes")
        );
        return;
    }
    match report {
        Report::File(r) => print_file_report(r, show),
        Report::Pgbench(r) => crate::pgbench::print::print_human(r, show),
        Report::Files(r) => crate::files::print::print_files_report(r, show),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugpull::ledger::{FileAck, FileManifest, TargetIdentity};
    use plugpull::modes::{Pattern, SyncMode};

    /// A file run's ledger holding acks stamped at `ms`, ended by `end`.
    fn ledger(ms: &[u32], end: Option<DeviceError>) -> RunLedger {
        let acks = ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| FileAck {
                seq: i as u64 + 1,
                block: i as u64,
                ms,
            })
            .collect();
        RunLedger {
            run: RunId(0x3f9c_0e12_a4b5_d678),
            manifest: Manifest {
                host: "sut".into(),
                started_unix_ms: 0,
                tool_version: "0".into(),
                workload: Workload::File(FileManifest {
                    target: "/mnt/t.dat".into(),
                    size: 1 << 20,
                    block_size: 4096,
                    jobs: 1,
                    sync: SyncMode::Fdatasync,
                    pattern: Pattern::Random,
                    identity: TargetIdentity::default(),
                    prior_runs: Vec::new(),
                    prior_foreign: false,
                    atomic: None,
                }),
                boot_id: String::new(),
                listener_order: 1,
                listener_created_unix_ms: 0,
                storage: Default::default(),
            },
            batches: vec![AckBatch {
                batch: 1,
                promised: true,
                acks: Acks::File(acks),
                flushes: None,
            }],
            finished: false,
            end_flushes: None,
            device_error: end,
            acks_after_error: 0,
            chosen: String::new(),
        }
    }

    fn eio(ms: u64, device: bool) -> DeviceError {
        DeviceError {
            error: "fdatasync after block 7: Input/output error (os error 5)".into(),
            ms,
            issued: 3,
            acknowledged: 2,
            last_seq: 2,
            device,
            flushes: None,
        }
    }

    #[test]
    fn the_device_error_rule_judges_acks_before_the_error_and_refuses_any_after_it() {
        assert_eq!(device_error_rule(&ledger(&[10, 20], None)).unwrap(), None);
        assert_eq!(
            device_error_rule(&ledger(&[10, 1500], Some(eio(1500, true)))).unwrap(),
            Some(
                "run ended by a device error at 1.500 s into the run: fdatasync after block 7: \
                 Input/output error (os error 5) (the device lost power or went away; if it came \
                 back under a new name, give --target); the 2 acknowledgements confirmed before it \
                 are judged"
                    .to_string()
            )
        );
        assert_eq!(
            device_error_rule(&ledger(&[10, 1501], Some(eio(1500, true))))
                .unwrap_err()
                .0,
            "run 3f9c0e12a4b5d678: writes were acknowledged after its device error at 1.500 s into \
             the run (fdatasync after block 7: Input/output error (os error 5)): a success after a \
             failed write or durability call cannot be trusted, so nothing this run measured counts"
        );
        let mut after = ledger(&[10], Some(eio(1500, true)));
        after.acks_after_error = 1;
        assert!(device_error_rule(&after)
            .unwrap_err()
            .0
            .contains("writes were acknowledged after its device error"));
        assert_eq!(
            device_error_rule(&ledger(&[10], Some(eio(250, false))))
                .unwrap_err()
                .0,
            "run 3f9c0e12a4b5d678: the writer stopped at 0.250 s into the run on an error that is \
             not a device failure (fdatasync after block 7: Input/output error (os error 5)): the run \
             itself went wrong, so nothing it measured counts"
        );
    }
}
