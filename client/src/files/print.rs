//! The text a files run prints: the summary of `plugpull write files` (text or one
//! JSON object) and the human report of `plugpull verify` for a files run. The figures
//! are computed elsewhere; this only renders them.

use crate::run::SummaryHead;
use plugpull::report::FilesReport;
use plugpull::verdict::files::schedule::Unsafe;
use plugpull::verdict::VerdictKind;

/// `--unsafe-steps` in words: `none`, `dirsync`, `presync` or `dirsync,presync`.
pub fn unsafe_name(u: Unsafe) -> String {
    match (u.dirsync, u.presync) {
        (false, false) => "none".into(),
        (true, false) => "dirsync".into(),
        (false, true) => "presync".into(),
        (true, true) => "dirsync,presync".into(),
    }
}

/// The summary of a files write run, as printed (text or `--json`, whose field names these are).
#[derive(serde::Serialize)]
pub struct WriteSummary {
    /// The run, its directory, workers, duration, latency, device error and warnings.
    #[serde(flatten)]
    pub head: SummaryHead,
    /// File names.
    pub files: u32,
    /// The durability calls skipped ([`unsafe_name`]).
    pub unsafe_steps: String,
    /// Steps issued.
    pub steps_issued: u64,
    /// Steps the listener confirmed it holds.
    pub steps_acknowledged: u64,
    /// Steps acknowledged locally per second.
    pub steps_per_sec: f64,
    /// Names a step touched at least once.
    pub names_touched: u64,
}

/// Prints the summary of a write run: one JSON object with `json`, else pgbench-style lines.
pub fn print_write_summary(s: &WriteSummary, json: bool) {
    if json {
        println!("{}", serde_json::to_string(s).expect("summary serializes"));
        return;
    }
    s.head.print_text(
        "steps",
        s.steps_issued,
        s.steps_acknowledged,
        s.steps_per_sec,
    );
    println!("names touched: {} of {}", s.names_touched, s.files);
}

/// Prints the human report of a files run: pgbench-like head lines, the verdict
/// table, the first `show` findings with their evidence, the summary line.
pub fn print_files_report(r: &FilesReport, show: usize) {
    println!("run {} (files workload on host {})", r.run_id, r.host);
    if let Some(e) = &r.device_error {
        println!("{e}");
    }
    if let Some(g) = &r.directory_gone {
        println!("{g}");
    }
    println!(
        "target directory: {} ({} workers, {} file names); read with plain buffered reads",
        r.target, r.jobs, r.files
    );
    println!(
        "number of steps acknowledged: {}{}{}",
        r.acknowledged,
        if r.unpromised_acks > 0 {
            format!(" ({} not promised: --unsafe-steps)", r.unpromised_acks)
        } else {
            String::new()
        },
        r.cut.no_end_note(r.finished || r.device_error.is_some())
    );
    // As `write file`'s report: no "run chosen" when nothing chose it (a local run).
    let started = plugpull::units::utc(r.run_started_unix_ms);
    if r.run_chosen.is_empty() {
        println!("run started {started} (agent clock)");
    } else {
        println!(
            "run chosen: {}; started {started} (agent clock)",
            r.run_chosen
        );
    }
    println!(
        "names checked: {}; left by a step in flight at the cut: {}",
        r.names_checked, r.in_flight_survived
    );
    if !r.foreign_entries.is_empty() {
        println!(
            "other entries in the directory (not judged): {}",
            r.foreign_entries.join(", ")
        );
    }
    println!();
    for line in r.verdicts.by_verdict.table("names", |v| v.is_failure()) {
        println!("{line}");
    }
    if r.verdicts.unpromised > 0 {
        println!(
            "{:<20} {:>12}  (not failures)",
            "of them unpromised", r.verdicts.unpromised
        );
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
                "  {}: {}{}, last step seq {} ({}){lag}; expected {}, {} bytes, seq {}; found {}",
                f.name,
                f.verdict.name().replace('_', " "),
                if f.promised { "" } else { " (unpromised)" },
                f.step_seq,
                if f.step.is_empty() { "none" } else { &f.step },
                if f.expected_exists {
                    "present"
                } else {
                    "absent"
                },
                f.expected_size,
                f.expected_seq,
                f.evidence
            );
        }
    }
    println!();
    print!("{}", crate::storage::text(&r.storage, "acknowledged steps"));
    println!();
    print!("{}", crate::storage::cut_text(&r.cut));
    println!("{}", r.summary);
}
