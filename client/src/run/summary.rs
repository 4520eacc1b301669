//! The head every write workload's summary embeds ([`SummaryHead`]): what the run
//! skeleton knows of any run, printed the same way (text lines, or fields of the one
//! `--json` object) by `write file` and `write files`.

use super::RunEnd;
use crate::latency::LatencySummary;
use plugpull::RunId;
use std::path::Path;
use std::time::Duration;

/// The run skeleton's part of a write summary. `--json` flattens these fields into the
/// workload's summary object.
#[derive(serde::Serialize)]
pub struct SummaryHead {
    /// The run.
    pub run_id: String,
    /// The target (file or directory), absolute.
    pub target: String,
    /// Writers.
    pub jobs: u32,
    /// Seconds from the first operation to the last worker's end.
    pub duration_secs: f64,
    /// Latency of the acknowledged operations, ms.
    pub latency_ms: LatencySummary,
    /// The failed call that ended the run, when a device error ended it.
    pub device_error: Option<String>,
    /// Whether an interrupt (Ctrl-C, SIGINT) ended the run before its `-T` or
    /// `--writes`/`--steps`.
    pub interrupted: bool,
    /// The probe's warnings about the storage under the target at the run's start
    /// (`docs/probe.md`); they never fail a run.
    pub storage_warnings: Vec<plugpull::probe::Warning>,
}

impl SummaryHead {
    /// The head of run `run` on `target` with `jobs` writers, `elapsed` long, ended as
    /// `end` says, with the probe's `storage_warnings`.
    pub fn new(
        run: RunId,
        target: &Path,
        jobs: u32,
        elapsed: Duration,
        end: &RunEnd,
        storage_warnings: Vec<plugpull::probe::Warning>,
    ) -> Self {
        SummaryHead {
            run_id: run.to_string(),
            target: target.display().to_string(),
            jobs,
            duration_secs: elapsed.as_secs_f64(),
            latency_ms: LatencySummary::of(&end.hist),
            device_error: end.device_error.as_ref().map(|e| e.error.clone()),
            interrupted: end.interrupted,
            storage_warnings,
        }
    }

    /// Operations acknowledged locally per second of [`SummaryHead::duration_secs`].
    pub fn per_sec(&self, end: &RunEnd) -> f64 {
        end.hist.count() as f64 / self.duration_secs
    }

    /// Prints the pgbench-style lines of the run's operations (`unit`: `writes`,
    /// `steps`): duration, issued, acknowledged, rate, latency.
    pub fn print_text(&self, unit: &str, issued: u64, acknowledged: u64, per_sec: f64) {
        if self.interrupted {
            println!("interrupted: the run ended early (SIGINT)");
        }
        println!("duration: {:.3} s", self.duration_secs);
        println!("{unit} issued: {issued}");
        println!("{unit} acknowledged: {acknowledged} (confirmed by the listener)");
        println!("{unit}/s = {per_sec:.1}");
        crate::latency::print_latency(&self.latency_ms);
    }
}
