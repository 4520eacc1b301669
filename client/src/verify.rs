//! `plugpull verify`: fetch the run's ledger from the listener and check it whole,
//! apply the device-error rule, dispatch on the workload (a file run to
//! [`crate::file::verify`], a files run to [`crate::files::verify`], a pgbench run to
//! [`crate::pgbench`]), print one report, and
//! exit 0 (nothing acknowledged lost or damaged), 1 (findings) or 2 (could not verify).

use crate::ledger::fetch;
use crate::manifest::hostname;
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{RunLedger, Workload};
use plugpull::report::Report;
use plugpull::verdict::device_error_rule;
use plugpull::RunId;
use std::path::{Path, PathBuf};

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
    /// Accept a read-back check: a run that finished by itself on this boot (no power
    /// was cut while it wrote) is judged on what reads back, exit 0 when all is there.
    /// Without it such a run is NOT MEASURED (exit 2); a cut run is judged the same
    /// either way.
    #[arg(long, conflicts_with = "history")]
    pub read_back: bool,
    /// The run was cut by a reset, not a power cut (`qemu://DIR?cut=reset`, a reset
    /// button, a watchdog): the disk kept power. Its PASS shows only that the stack
    /// above the disk kept what it acknowledged across a crash: NOT MEASURED as a
    /// power cut (exit 2); a FAIL stays a FAIL.
    #[arg(long, conflicts_with = "history")]
    pub reset: bool,
    /// Where the run's canary directory is now, when its filesystem is mounted
    /// elsewhere than the run saw it (a virtual machine's image mounted on the host):
    /// the canary files are read there by name.
    #[arg(long, value_name = "DIR", conflicts_with = "history")]
    pub canary_dir: Option<PathBuf>,
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
                println!(
                    "{}",
                    serde_json::json!({ "ok": false, "error": e.to_string() })
                );
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
        return Ok(Reported::NotMeasured(Error::NotMeasured(
            report.summary().to_string(),
        )));
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
    let opts = VerifyOptions::of(args, pg);
    let report = judge_ledger(&l, &opts, listener, secret).await?;
    Ok((l, report))
}

/// What verifying a run needs besides its ledger, for every workload.
#[derive(Debug, Clone)]
pub struct VerifyOptions<'a> {
    /// Read this path instead of the manifest's target (`--target`: a device renamed
    /// after reboot, or a copy; a files run's directory).
    pub target: Option<PathBuf>,
    /// No progress bar on stderr (`--json`).
    pub quiet: bool,
    /// How to reach and check the run's PostgreSQL server (pgbench runs).
    pub pg: &'a crate::pgbench::PgVerifyArgs,
    /// Accept a read-back check of a run that finished on this boot (`--read-back`).
    pub read_back: bool,
    /// The run was cut by a reset: the disk kept power (`--reset`).
    pub reset: bool,
    /// Where the run's canary directory is now (`--canary-dir`), over where the
    /// manifest (or `target`) puts it.
    pub canary_dir: Option<PathBuf>,
}

impl<'a> VerifyOptions<'a> {
    /// The options of a plain `plugpull verify --run RUN` with server options `pg`:
    /// the manifest's target and canary, a progress bar, a power cut.
    pub fn plain(pg: &'a crate::pgbench::PgVerifyArgs) -> VerifyOptions<'a> {
        VerifyOptions {
            target: None,
            quiet: false,
            pg,
            read_back: false,
            reset: false,
            canary_dir: None,
        }
    }

    /// The options `plugpull verify`'s arguments give.
    pub fn of(args: &VerifyArgs, pg: &'a crate::pgbench::PgVerifyArgs) -> VerifyOptions<'a> {
        VerifyOptions {
            target: args.target.clone(),
            quiet: args.json,
            pg,
            read_back: args.read_back,
            reset: args.reset,
            canary_dir: args.canary_dir.clone(),
        }
    }
}

/// Judges the run whose checked ledger is `l`, whatever its workload: the
/// device-error rule first ([`device_error_rule`]), then the workload's own verify
/// (file: its target block by block; files: its directory name by name; pgbench: its
/// server's commits, invariant and pages), then the "stack under test" section with
/// the cut evidence, taken while the run's data is read. Prints nothing on stdout.
/// `listener` and `secret` reach the other runs a file run's target holds.
///
/// Errors (exit 2): writes acknowledged after a device error, or the workload's own
/// refusals (the target or server could not be used, nothing was acknowledged).
pub async fn judge_ledger(
    l: &RunLedger,
    opts: &VerifyOptions<'_>,
    listener: &str,
    secret: &Secret,
) -> Result<Report, Error> {
    let device_error = device_error_rule(l)?;
    // The cut evidence (boot id, the drives' power-loss counters through smartctl and
    // nvme, tens of ms to seconds) is taken while the run's data is read, not after.
    let evidence = {
        let (storage, host) = (l.manifest.storage.clone(), l.manifest.host.clone());
        tokio::task::spawn_blocking(move || crate::storage::cut_evidence_now(&storage, &host))
    };
    let mut report: Report = match &l.manifest.workload {
        Workload::File(fm) => {
            let fo = FileVerifyOptions {
                target: opts.target.clone(),
                quiet: opts.quiet,
            };
            let others = crate::file::others::ListenerRuns {
                addr: listener,
                secret,
            };
            verify_file_run(l, fm, &fo, &others).await?.into()
        }
        Workload::Files(fm) => {
            let t = opts.target.as_ref();
            tokio::task::block_in_place(|| crate::files::verify::verify_files_run(l, fm, t))?.into()
        }
        Workload::Pgbench(pm) => {
            crate::pgbench::verify(l.run, &l.manifest, pm, &l.pg_ranges, l.finished, opts.pg)
                .await?
                .into()
        }
    };
    report.set_device_error(device_error);
    let canary = match (&opts.canary_dir, &opts.target, l.manifest.workload.target()) {
        (Some(dir), _, _) => crate::canary::in_dir(&l.manifest.canary, dir),
        (None, Some(at), Some(target)) => {
            crate::canary::moved(&l.manifest.canary, Path::new(target), at)
        }
        _ => l.manifest.canary.clone(),
    };
    let read = tokio::task::spawn_blocking(move || crate::canary::read(&canary))
        .await
        .map_err(|e| Error::Msg(format!("reading the canary failed: {e}")))?;
    let same_boot = crate::target_id::same_boot(&l.manifest.boot_id, &crate::target_id::boot_id());
    let mut cut = plugpull::verdict::cut::judge_cut(l, same_boot, read);
    if opts.reset {
        plugpull::verdict::cut::after_reset(&mut cut);
    }
    report.set_cut(cut, opts.read_back);
    let evidence = evidence
        .await
        .map_err(|e| Error::Msg(format!("the cut-evidence snapshot failed: {e}")))?;
    report.set_storage(storage_with(l, evidence));
    Ok(report)
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

    #[test]
    fn the_verify_command_line_gives_the_fields_a_run_reads() {
        let args = VerifyArgs {
            run: None,
            host: Some("sut".into()),
            target: Some(PathBuf::from("/dev/sdb")),
            json: true,
            show: 3,
            history: false,
            read_back: false,
            reset: true,
            canary_dir: Some(PathBuf::from("/mnt/image/canary")),
        };
        let pg = crate::pgbench::PgVerifyArgs::default();
        let o = VerifyOptions::of(&args, &pg);
        assert_eq!(o.target, Some(PathBuf::from("/dev/sdb")));
        assert!(o.quiet);
        assert!(o.reset);
        assert_eq!(o.canary_dir, Some(PathBuf::from("/mnt/image/canary")));
    }
}
