//! The text a file run prints: the summary of `plugpull write file` (text or one JSON
//! object) and the human report of `plugpull verify` for a file run. The figures are
//! computed elsewhere (the writers, [`plugpull::report::FileReport`]); this only
//! renders them.

use crate::run::SummaryHead;
use plugpull::report::FileReport;
use plugpull::units::human_bytes;
use plugpull::verdict::VerdictKind;
use plugpull::RunId;
use std::path::Path;

use super::WriteArgs;

/// The summary of a write run, as printed (text or `--json`, whose field names these are).
#[derive(serde::Serialize)]
pub struct WriteSummary {
    /// The run, its target, writers, duration, latency, device error and warnings.
    #[serde(flatten)]
    pub head: SummaryHead,
    /// Bytes of the target used.
    pub size: u64,
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks on the target.
    pub blocks: u64,
    /// The durability call, by name.
    pub sync: &'static str,
    /// The order of blocks, by name.
    pub pattern: &'static str,
    /// Writes issued.
    pub writes_issued: u64,
    /// Writes the listener confirmed it holds.
    pub writes_acknowledged: u64,
    /// Writes acknowledged locally per second.
    pub writes_per_sec: f64,
    /// Percent of blocks written at least once, rounded down.
    pub coverage_percent: f64,
    /// Blocks written at least once.
    pub blocks_written: u64,
}

/// Prints the two lines a text-mode write run starts with: its run id and its setup.
pub fn print_write_head(run: RunId, target: &Path, size: u64, args: &WriteArgs) {
    let (blocks, bs) = (size / args.block_size, args.block_size);
    println!("run id: {run}");
    println!(
        "target: {} ({}, {blocks} blocks of {bs} bytes); sync: {}; jobs: {}; pattern: {}",
        target.display(),
        human_bytes(size),
        args.sync.name(),
        args.jobs,
        args.pattern.name()
    );
}

/// Prints the summary of a write run: one JSON object with `json`, else pgbench-style lines.
pub fn print_write_summary(s: &WriteSummary, json: bool) {
    if json {
        println!("{}", serde_json::to_string(s).expect("summary serializes"));
        return;
    }
    s.head.print_text(
        "writes",
        s.writes_issued,
        s.writes_acknowledged,
        s.writes_per_sec,
    );
    println!(
        "coverage: {:.1}% of blocks written at least once ({} of {})",
        s.coverage_percent, s.blocks_written, s.blocks
    );
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
        r.cut.no_end_note(r.finished || r.device_error.is_some())
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
    // A block written but never acknowledged (in flight at the end) is checked too:
    // more blocks than acknowledged writes is no error.
    println!(
        "blocks checked: {} (every block the run wrote, acknowledged or in flight)",
        r.blocks_checked
    );
    println!();
    for line in r.verdicts.table("blocks", |v| v.fails(r.atomic.is_some())) {
        println!("{line}");
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
    print_atomic(r);
    println!();
    print!(
        "{}",
        crate::storage::text(&r.storage, "acknowledged writes")
    );
    println!();
    print!("{}", crate::storage::cut_text(&r.cut));
    println!("{}", r.summary);
}

/// With `--expect-atomic`: the unit tested, how, the stack's claims, and whether this
/// cut upheld them (`docs/atomic.md`).
fn print_atomic(r: &FileReport) {
    let Some(a) = &r.atomic else {
        return;
    };
    println!();
    println!(
        "atomic writes expected: {}-byte writes ({}); claimed: {}",
        a.unit,
        super::atomic::mode_words(a.claimed.mode),
        a.claims
    );
    println!("atomic writes: {}", a.sentence);
}
