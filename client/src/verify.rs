//! `plugpull verify`: fetch the run's ledger from the listener, read what survived,
//! classify it, report, and exit 0 (nothing acknowledged lost or damaged), 1
//! (findings) or 2 (could not verify).

use crate::manifest::hostname;
use crate::medium::{aligned, locate, open_target, read_full_at, Opened};
use crate::net;
use crate::target_id;
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{
    self, AckBatch, Acks, DeviceError, Entry, FileManifest, Manifest, Tail, Workload,
};
use plugpull::report::{FileReport, ReportHead, TargetFinding};
use plugpull::units::human_bytes;
use plugpull::verdict::{classify_block, AckTable, Tally, Verdict};
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use std::fs::File;
use std::path::PathBuf;

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

/// Set when verify printed its report and still ends with a [`Error`] (a pgbench run
/// that measured nothing): `main` then prints no second JSON object.
pub static REPORT_PRINTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// What verification concluded: `Ok(true)` = nothing acknowledged lost or damaged.
pub async fn verify(
    args: &VerifyArgs,
    listener: &str,
    secret: &Secret,
    pg: &crate::pgbench::PgVerifyArgs,
) -> Result<bool, Error> {
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
    match &l.manifest.workload {
        Workload::File(fm) => {
            let report = verify_file_run(&l, fm, args, listener, secret).await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("report serializes")
                );
            } else {
                print_file_report(&report, args.show);
            }
            Ok(report.ok)
        }
        Workload::Pgbench(pm) => {
            device_error_rule(&l)?;
            let report =
                crate::pgbench::verify(l.run, &l.manifest, pm, &l.batches, l.finished, pg).await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("report serializes")
                );
            } else {
                crate::pgbench::print::print_human(&report, args.show);
            }
            if report.not_measured {
                // Exit 2 with the report already printed (one JSON object with --json).
                REPORT_PRINTED.store(true, std::sync::atomic::Ordering::SeqCst);
                return Err(Error(report.summary));
            }
            Ok(report.ok)
        }
    }
}

/// Verifies a file run: the device-error rule, then reads its target and classifies
/// every block. Used by `plugpull verify` and by `plugpull demo`.
///
/// Runs whose records are on the target are the target's prior contents when the
/// manifest's `prior_runs` lists them, or when the listener created them before this
/// run on the same target (a sampled start-of-run scan of a large target can miss
/// them; their ledgers are fetched from `listener` to tell). Any other run's record
/// is a later run's: it excuses a lost write from `unserializable`, and a target
/// holding only such records is refused as the wrong one.
///
/// Errors (exit 2): writes acknowledged after a device error; nothing was acknowledged
/// ("not measured"); the target is not the run's (a block device with another
/// identity; only records of runs that were not on it when the run started); its
/// filesystem is not mounted; a writer still holds it; it exists but cannot be read.
/// A file gone from the right filesystem is a finding: every acknowledged block is
/// then missing.
pub async fn verify_file_run(
    l: &RunLedger,
    fm: &FileManifest,
    args: &VerifyArgs,
    listener: &str,
    secret: &Secret,
) -> Result<FileReport, Error> {
    let device_error = device_error_rule(l)?;
    let read = read_file_target(l, fm, args)?;
    let mut prior = fm.prior_runs.clone();
    let mut reused_by = Vec::new();
    for &r in read.tally.other_runs() {
        if prior.contains(&r) {
            continue;
        }
        let Ok(o) = fetch(listener, secret, Some(r), "").await else {
            continue;
        };
        let same = match &o.manifest.workload {
            Workload::File(ofm) => {
                ofm.target == fm.target || target_id::same_target(&ofm.identity, &fm.identity)
            }
            Workload::Pgbench(_) => false,
        };
        let order = o.manifest.listener_order;
        if same && order > 0 && order < l.manifest.listener_order {
            prior.push(r);
        } else if same && order > l.manifest.listener_order {
            reused_by.push(r);
        }
    }
    let mut report = judge_file(l, fm, read, &prior, &reused_by)?;
    report.device_error = device_error;
    Ok(report)
}

/// What reading a file run's target found, before the other runs' records on it are
/// placed as earlier or later than the run.
struct TargetRead {
    acks: AckTable,
    tally: Tally,
    target_findings: Vec<TargetFinding>,
    shown_path: PathBuf,
    read_mode: &'static str,
    read_note: String,
    /// A file given with `--target` that is provably not the file the run wrote
    /// (another inode or filesystem): what it is, for the refusal when it holds
    /// nothing of the run.
    other_file: Option<String>,
}

/// Reads the target of a file run (or finds it gone) and adds every block's check.
fn read_file_target(
    l: &RunLedger,
    fm: &FileManifest,
    args: &VerifyArgs,
) -> Result<TargetRead, Error> {
    let blocks = fm.blocks();
    let bs = fm.block_size as usize;
    let mut acks = AckTable::new(blocks);
    for b in &l.batches {
        if let Acks::File(v) = &b.acks {
            for a in v {
                if !acks.add(a.seq, a.block, a.ms) {
                    return Err(Error(format!("ledger of run {} acknowledges block {} beyond the target's {blocks} blocks", l.run, a.block)));
                }
            }
        }
    }
    if acks.acknowledged == 0 {
        return Err(Error(format!(
            "not measured: run {} has no acknowledged writes in the ledger",
            l.run
        )));
    }
    let mut tally = Tally::default();
    let mut target_findings = Vec::new();
    let mut shown_path = args
        .target
        .clone()
        .unwrap_or_else(|| PathBuf::from(&fm.target));
    let (mut read_mode, mut read_note) = ("none", String::new());
    let mut other_file = None;
    match locate(fm, args.target.as_deref())? {
        None => {
            target_findings.push(TargetFinding {
                kind: "file_gone".into(),
                detail: format!(
                    "the file is gone: {} does not exist on its filesystem",
                    shown_path.display()
                ),
            });
            for b in 0..blocks {
                if let Some(c) =
                    classify_block(l.run, b, bs, acks.seq[b as usize], &[], fm.prior_foreign)
                {
                    tally.add(b, c, &acks);
                }
            }
        }
        Some(path) => {
            let o = open_target(&path)?;
            shown_path = o.path.clone();
            if args.target.is_some() && fm.identity.kind == "file" {
                if let Ok(have) = target_id::identify(&path) {
                    if !target_id::same_target(&have, &fm.identity) {
                        other_file = Some(format!(
                            "inode {} on device {}, where the run wrote {} (inode {} on device {})",
                            have.inode, have.dev, fm.target, fm.identity.inode, fm.identity.dev
                        ));
                    }
                }
            }
            if o.is_block && fm.identity.size > 0 && o.len != fm.identity.size {
                target_findings.push(TargetFinding {
                    kind: "capacity_changed".into(),
                    detail: format!(
                        "device capacity changed {} → {}",
                        human_bytes(fm.identity.size),
                        human_bytes(o.len)
                    ),
                });
            } else if o.len < fm.size {
                target_findings.push(TargetFinding {
                    kind: "target_shorter".into(),
                    detail: format!(
                        "target is shorter than the run's: {} ({} bytes) where the run used {} ({} bytes)",
                        human_bytes(o.len),
                        o.len,
                        human_bytes(fm.size),
                        fm.size
                    ),
                });
            }
            let (mode, note) = read_blocks(l, fm, &acks, args, o, &mut tally)?;
            (read_mode, read_note) = (mode, note);
        }
    }
    Ok(TargetRead {
        acks,
        tally,
        target_findings,
        shown_path,
        read_mode,
        read_note,
        other_file,
    })
}

/// Classifies what [`read_file_target`] found, `prior` being the runs whose records
/// were on the target before this run, and makes the report.
///
/// Errors (exit 2): the target holds no record of the run but records of runs not in
/// `prior`.
fn judge_file(
    l: &RunLedger,
    fm: &FileManifest,
    read: TargetRead,
    prior: &[RunId],
    reused_by: &[RunId],
) -> Result<FileReport, Error> {
    let TargetRead {
        acks,
        tally,
        mut target_findings,
        shown_path,
        read_mode,
        read_note,
        other_file,
    } = read;
    let blocks = fm.blocks();
    let outcome = tally.finish(prior);
    // Records of a run the listener created later on this same target mean the target
    // was reused before this run was verified: the blocks it overwrote cannot be
    // judged. (A later run's record from another target is evidence of a misdirected
    // write and stays a finding.)
    let later: Vec<String> = outcome
        .other_runs
        .iter()
        .filter(|r| reused_by.contains(r))
        .map(|r| r.to_string())
        .collect();
    if !later.is_empty() && outcome.run_data_blocks > 0 {
        return Err(Error(format!(
            "target {} holds records of run {} but also of later runs on the same target ({}): \
             the target was reused before run {} was verified, and the blocks they overwrote cannot be judged",
            shown_path.display(),
            l.run,
            later.join(", "),
            l.run
        )));
    }
    if read_mode != "none" && outcome.run_data_blocks == 0 {
        let unknown: Vec<String> = outcome
            .other_runs
            .iter()
            .filter(|r| !prior.contains(r))
            .map(|r| r.to_string())
            .collect();
        if !unknown.is_empty() {
            return Err(Error(format!(
                "target {} holds no record of run {} but records of other plugpull runs in {} blocks \
                 (runs {}, which were not on the target when run {} started): \
                 wrong --target, or a later run reused this target",
                shown_path.display(),
                l.run,
                outcome.other_run_blocks,
                unknown.join(", "),
                l.run
            )));
        }
        if let (Some(what), 0) = (&other_file, outcome.run_data_blocks) {
            return Err(Error(format!(
                        "target {} holds no record of run {} and is not the file the run wrote ({what}): wrong --target?",
                        shown_path.display(),
                        l.run
                )));
        }
        let earlier = if outcome.other_runs.is_empty() {
            String::new()
        } else {
            let r: Vec<String> = outcome.other_runs.iter().map(|r| r.to_string()).collect();
            format!(
                " (only records of runs {}, which were on it before this run started)",
                r.join(", ")
            )
        };
        target_findings.push(TargetFinding {
            kind: "no_record_of_run".into(),
            detail: format!(
                "no record of run {} survived anywhere on the target{earlier}",
                l.run
            ),
        });
    }
    let here = target_id::boot_id();
    let boot = if l.manifest.boot_id.is_empty() || here.is_empty() {
        "unknown"
    } else if l.manifest.boot_id == here {
        "same_boot"
    } else {
        "rebooted"
    };
    let head = ReportHead {
        run_id: l.run.to_string(),
        host: l.manifest.host.clone(),
        target: shown_path.display().to_string(),
        block_size: fm.block_size,
        blocks,
        finished: l.finished,
        acknowledged: acks.acknowledged,
        target_findings,
        read_mode: read_mode.into(),
        read_note,
        boot: boot.into(),
        run_started_unix_ms: l.manifest.started_unix_ms,
        run_chosen: l.chosen.clone(),
    };
    Ok(FileReport::new(head, outcome))
}

/// Reads every block of an opened target and adds its check to `tally`. Returns the
/// read mode and note (a refused `O_DIRECT` read falls back to buffered reads).
fn read_blocks(
    l: &RunLedger,
    fm: &FileManifest,
    acks: &AckTable,
    args: &VerifyArgs,
    o: Opened,
    tally: &mut Tally,
) -> Result<(&'static str, String), Error> {
    let blocks = fm.blocks();
    let bs = fm.block_size as usize;
    let (mut mode, mut note) = (o.read_mode, o.read_note);
    let mut f = o.file;
    let bar = progress_bar(blocks * bs as u64, args.json);
    let per_read = ((4 << 20) / bs).max(1);
    let mut storage = Vec::new();
    let buf = aligned(&mut storage, per_read * bs);
    let mut block = 0u64;
    let mut eof = false;
    while block < blocks {
        let want = ((blocks - block) as usize).min(per_read) * bs;
        let at = block * bs as u64;
        let got = if eof {
            0
        } else {
            match read_full_at(&f, &mut buf[..want], at) {
                Err(e) if mode == "o_direct" && e.raw_os_error() == Some(libc::EINVAL) => {
                    // O_DIRECT refused at read time (alignment, some FUSE): read buffered.
                    let plain = File::open(&o.path).map_err(|e| {
                        Error(format!("cannot read target {}: {e}", o.path.display()))
                    })?;
                    let n = if note.is_empty() { "" } else { "; " };
                    note = format!("O_DIRECT read refused ({e}){n}{note}");
                    mode = "buffered";
                    f = plain;
                    read_full_at(&f, &mut buf[..want], at)
                }
                r => r,
            }
            .map_err(|e| {
                Error(format!(
                    "reading target {} at byte {at}: {e}",
                    o.path.display()
                ))
            })?
        };
        if got < want {
            eof = true;
        }
        for i in 0..want / bs {
            let b = block + i as u64;
            let data = &buf[(i * bs).min(got)..((i + 1) * bs).min(got)];
            if let Some(c) =
                classify_block(l.run, b, bs, acks.seq[b as usize], data, fm.prior_foreign)
            {
                tally.add(b, c, acks);
            }
        }
        block += (want / bs) as u64;
        if let Some(bar) = &bar {
            bar.set_position(block * bs as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok((mode, note))
}

fn progress_bar(total: u64, quiet: bool) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() || total < (256 << 20) {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "reading target {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
        )
        .expect("valid template"),
    );
    Some(bar)
}

/// Prints the human report of a file run.
pub fn print_file_report(r: &FileReport, show: usize) {
    println!("run {} (file workload on host {})", r.run_id, r.host);
    if let Some(e) = &r.device_error {
        println!("{e}");
    }
    println!(
        "target: {} ({}, {} blocks of {} bytes)",
        r.target,
        human_bytes(r.blocks * r.block_size as u64),
        r.blocks,
        r.block_size
    );
    println!(
        "acknowledged writes in ledger: {}{}",
        r.acknowledged,
        if r.finished || r.device_error.is_some() {
            ""
        } else {
            " (no end recorded: the run was cut short, or is still running)"
        }
    );
    if r.run_chosen.is_empty() {
        println!(
            "run started {} (agent clock)",
            plugpull::units::utc(r.run_started_unix_ms)
        );
    } else {
        println!(
            "run chosen: {}; started {} (agent clock)",
            r.run_chosen,
            plugpull::units::utc(r.run_started_unix_ms)
        );
    }
    println!(
        "host: {}",
        match r.boot.as_str() {
            "same_boot" => "same boot as the run (not rebooted since: only a read from the medium tells what the device kept)",
            "rebooted" => "rebooted since the run",
            _ => "boot id unknown",
        }
    );
    match r.read_mode.as_str() {
        "o_direct" => println!(
            "read: from the medium with O_DIRECT, cached pages dropped first{}",
            if r.read_note.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.read_note)
            }
        ),
        "buffered" => println!(
            "read: BUFFERED, through the page cache: {}; if the host did not reboot, cached pages may hide a loss",
            r.read_note
        ),
        _ => println!("read: nothing (the target is gone)"),
    }
    println!("blocks checked: {}", r.blocks_checked);
    println!();
    println!("{:<20} {:>12}", "verdict", "blocks");
    for v in Verdict::ALL {
        let n = r.verdicts.get(v);
        let note = if v.is_failure() && n > 0 {
            "  FAILURE"
        } else {
            ""
        };
        println!("{:<20} {:>12}{note}", v.name().replace('_', " "), n);
    }
    if !r.target_findings.is_empty() {
        println!();
        println!("target findings:");
        for f in &r.target_findings {
            println!("  {}  FAILURE", f.detail);
        }
    }
    if !r.findings.is_empty() {
        println!();
        println!("first findings ({} in all):", r.findings_total);
        for f in r.findings.iter().take(show) {
            let lag = f
                .acked_secs_before_end
                .map(|s| format!(", acknowledged {s:.3} s before the end"))
                .unwrap_or_default();
            println!(
                "  block {}: {}, expected seq {}{lag}; found {}",
                f.block,
                f.verdict.name().replace('_', " "),
                f.expected_seq,
                f.evidence()
            );
        }
        let total: u64 = r.lost_lag_histogram.iter().map(|b| b.count).sum();
        if total > 0 {
            println!();
            println!("lost acknowledged writes by how long before the end they were acknowledged:");
            print!(
                "{}",
                plugpull::report::lag_histogram_text(&r.lost_lag_histogram)
            );
        }
    }
    println!();
    println!("{}", r.summary);
}
