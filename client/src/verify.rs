//! `plugpull verify`: fetch the run's ledger from the listener, read what survived,
//! classify it, report, and exit 0 (nothing acknowledged lost or damaged), 1
//! (findings) or 2 (could not verify).

use crate::common::{hostname, human_bytes};
use crate::net;
use crate::Failure;
use plugpull::auth::Secret;
use plugpull::ledger::{self, AckBatch, Acks, Entry, FileManifest, Manifest, Tail, Workload};
use plugpull::report::{FileReport, ReportHead};
use plugpull::verdict::{classify_block, AckTable, Tally, Verdict};
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use std::fs::File;
use std::io::Read;
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
    /// The error that made the run invalid, if any.
    pub invalid: Option<String>,
}

/// Fetches a run's ledger and checks every entry's CRC.
///
/// Errors: unreachable listener, unknown run, damaged ledger (naming the offset).
pub async fn fetch(
    listener: &str,
    secret: &Secret,
    run: Option<RunId>,
    host: &str,
) -> Result<RunLedger, Failure> {
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
                return Err(Failure(format!(
                    "listener answered FetchLedger with {other:?}"
                )))
            }
        }
    };
    let mut manifest = None;
    let mut batches = Vec::new();
    let mut finished = None;
    let mut invalid = None;
    let (id, tail) = ledger::scan(&bytes, |_, e| match e {
        Entry::Manifest(m) => manifest = Some(*m),
        Entry::Acks(b) => batches.push(b),
        Entry::Finished(s) => finished = Some(s),
        Entry::Invalid { error } => invalid = Some(error),
    })
    .map_err(|e| Failure(format!("cannot verify run {run}: {e}")))?;
    if id != run {
        return Err(Failure(format!(
            "listener sent the ledger of run {id} when asked for run {run}"
        )));
    }
    if let Tail::Torn { valid_len, .. } = tail {
        return Err(Failure(format!("cannot verify run {run}: the ledger the listener sent ends in a torn entry at byte {valid_len}")));
    }
    // The witness's record must be whole (issue 9): gap-free, the agent's own count
    // matched, torn tails accounted for; a witness fault the agent recorded is final.
    if let Some(e) = invalid
        .as_deref()
        .filter(|e| e.starts_with(crate::reporter::WITNESS_FAULT))
    {
        return Err(Failure(format!("run {run} cannot be judged: {e}")));
    }
    ledger::check_record(&mut batches, finished.as_ref(), &torn)
        .map_err(|e| Failure(format!("run {run}: {e}")))?;
    Ok(RunLedger {
        run,
        manifest: manifest.expect("scan guarantees a manifest"),
        batches,
        finished: finished.is_some(),
        invalid,
    })
}

/// What verification concluded: `Ok(true)` = nothing acknowledged lost or damaged.
pub async fn verify(
    args: &VerifyArgs,
    listener: &str,
    secret: &Secret,
    pg: &crate::pgbench::VerifyArgs,
) -> Result<bool, Failure> {
    let host = args.host.clone().unwrap_or_else(hostname);
    let l = fetch(listener, secret, args.run, &host).await?;
    if let Some(e) = &l.invalid {
        return Err(Failure(format!("run {} is invalid: the agent's durability call failed ({e}); nothing it measured can be trusted", l.run)));
    }
    match &l.manifest.workload {
        Workload::File(fm) => {
            let report = verify_file(&l, fm, args)?;
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
            let report =
                crate::pgbench::verify(l.run, &l.manifest, pm, &l.batches, l.finished, pg).await?;
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("report serializes")
                );
            } else {
                report.print_human(args.show);
            }
            Ok(report.ok)
        }
    }
}

/// Reads the target of a file run and classifies every block.
///
/// Errors: nothing was acknowledged ("not measured"), or the target exists but
/// cannot be read. A target that is gone is not an error: every acknowledged block
/// is then missing.
pub fn verify_file(
    l: &RunLedger,
    fm: &FileManifest,
    args: &VerifyArgs,
) -> Result<FileReport, Failure> {
    let blocks = fm.blocks();
    let bs = fm.block_size as usize;
    let mut acks = AckTable::new(blocks);
    for b in &l.batches {
        if let Acks::File(v) = &b.acks {
            for a in v {
                if !acks.add(a.seq, a.block, a.ms) {
                    return Err(Failure(format!("ledger of run {} acknowledges block {} beyond the target's {blocks} blocks", l.run, a.block)));
                }
            }
        }
    }
    if acks.acknowledged == 0 {
        return Err(Failure(format!(
            "not measured: run {} has no acknowledged writes in the ledger",
            l.run
        )));
    }
    let path = args
        .target
        .clone()
        .unwrap_or_else(|| PathBuf::from(&fm.target));
    let mut tally = Tally::default();
    match File::open(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "target {} is gone: every acknowledged block is missing \
                 (if its filesystem is not mounted, or the device has a new name, mount it or give --target)",
                path.display()
            );
            for b in 0..blocks {
                if let Some(c) = classify_block(l.run, b, bs, acks.seq[b as usize], &[]) {
                    tally.add(b, c, &acks);
                }
            }
        }
        Err(e) => {
            return Err(Failure(format!(
                "cannot read target {}: {e}",
                path.display()
            )))
        }
        Ok(mut f) => {
            let bar = progress_bar(blocks * bs as u64, args.json);
            let per_read = ((4 << 20) / bs).max(1);
            let mut buf = vec![0u8; per_read * bs];
            let mut block = 0u64;
            let mut eof = false;
            while block < blocks {
                let want = ((blocks - block) as usize).min(per_read) * bs;
                let got = if eof {
                    0
                } else {
                    read_full(&mut f, &mut buf[..want]).map_err(|e| {
                        Failure(format!(
                            "reading target {} at byte {}: {e}",
                            path.display(),
                            block * bs as u64
                        ))
                    })?
                };
                if got < want {
                    eof = true;
                }
                for i in 0..want / bs {
                    let b = block + i as u64;
                    let data = &buf[(i * bs).min(got)..((i + 1) * bs).min(got)];
                    if let Some(c) = classify_block(l.run, b, bs, acks.seq[b as usize], data) {
                        tally.add(b, c, &acks);
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
        }
    }
    let head = ReportHead {
        run_id: l.run.to_string(),
        host: l.manifest.host.clone(),
        target: path.display().to_string(),
        block_size: fm.block_size,
        blocks,
        finished: l.finished,
        acknowledged: acks.acknowledged,
    };
    let outcome = tally.finish();
    if outcome.run_data_blocks == 0 && outcome.other_run_blocks > 0 {
        return Err(Failure(format!(
            "target {} holds no record of run {} but records of other plugpull runs in {} blocks: \
             wrong --target, or a later run reused this target",
            path.display(),
            l.run,
            outcome.other_run_blocks
        )));
    }
    Ok(FileReport::new(head, outcome))
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
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
        if r.finished {
            ""
        } else {
            " (no end recorded: the run was cut short, or is still running)"
        }
    );
    println!("blocks checked: {}", r.blocks_checked);
    println!(
        "blocks holding a write newer than their last acknowledged one (in flight at the cut): {}",
        r.in_flight_survived
    );
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
    if !r.findings.is_empty() {
        println!();
        println!("first findings ({} in all):", r.findings_total);
        for f in r.findings.iter().take(show) {
            let found = f
                .found_seq
                .map(|s| {
                    if s == 0 {
                        "nothing of this run".to_string()
                    } else {
                        format!("seq {s}")
                    }
                })
                .map(|s| match f.found_block {
                    Some(b) => format!("{s} written for block {b}"),
                    None => s,
                })
                .unwrap_or_else(|| "-".into());
            let lag = f
                .acked_secs_before_end
                .map(|s| format!(", acknowledged {s:.3} s before the end"))
                .unwrap_or_default();
            println!(
                "  block {}: {}, expected seq {}, found {found}{lag}",
                f.block,
                f.verdict.name().replace('_', " "),
                f.expected_seq
            );
        }
        let total: u64 = r.lost_lag_histogram.iter().map(|b| b.count).sum();
        if total > 0 {
            println!();
            println!("lost acknowledged writes by how long before the end they were acknowledged:");
            let max = r
                .lost_lag_histogram
                .iter()
                .map(|b| b.count)
                .max()
                .unwrap_or(1)
                .max(1);
            for b in &r.lost_lag_histogram {
                let range = match b.to_secs {
                    Some(t) => format!("{:>7} - {:<7} s", b.from_secs, t),
                    None => format!("{:>7} s or more  ", b.from_secs),
                };
                println!(
                    "  {range} {:>8} {}",
                    b.count,
                    "#".repeat((40 * b.count).div_ceil(max) as usize)
                );
            }
        }
    }
    println!();
    println!("{}", r.summary);
}
