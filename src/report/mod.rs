//! Verification reports: one typed model per workload, shared by the human output
//! and `--json` (one JSON object; field names are a stable interface for scripts).
//!
//! * [`file`](mod@file) — [`FileReport`], the report of a file run, built from the verdict
//!   engine's [`Classification`](crate::verdict::Classification).
//! * [`pgbench`] — [`PgReport`], the report of a pgbench run, and its parts.
//! * [`files`](mod@files) — [`FilesReport`], the report of a files (namespace) run.
//! * [`Report`] — any of them, for code that handles both workloads alike.
//! * Here: the "acknowledged N s before the end" histogram both reports carry.
//!
//! The reports are data; the client renders them (text) or serializes them (JSON).

pub mod file;
pub mod files;
pub mod pgbench;
pub mod storage;

pub use file::{percent_floor, AtomicReport, FileReport, ReportHead, TargetFinding};
pub use files::{FilesHead, FilesReport};
pub use pgbench::{
    Amcheck, Invariant, Page, PgFinding, PgFindingKind, PgReport, RunSettings, Timings,
};
pub use storage::{RunFlushes, StorageReport};

use serde::{Deserialize, Serialize};

/// The report of verifying one run, whatever its workload.
///
/// Serialized untagged: the JSON is exactly the inner report's (each carries its own
/// `workload` field, `"file"`, `"pgbench"` or `"files"`).
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)] // one per verification, moved, never in a collection
pub enum Report {
    /// A file run.
    File(FileReport),
    /// A pgbench run.
    Pgbench(PgReport),
    /// A files (namespace) run.
    Files(FilesReport),
}

/// How the summary of a PASS that `verify --read-back` accepted without a power cut
/// begins (a measured PASS begins `PASS: `).
pub const READ_BACK_PASS: &str = "PASS (read-back only, no power cut): ";

impl Report {
    /// True when nothing acknowledged (and promised) was lost or damaged.
    pub fn ok(&self) -> bool {
        match self {
            Report::File(r) => r.ok,
            Report::Pgbench(r) => r.ok,
            Report::Files(r) => r.ok,
        }
    }

    /// True when the run measured nothing (a pgbench run without an acknowledged,
    /// promised commit): neither a PASS nor a FAIL — the verifier exits 2.
    pub fn not_measured(&self) -> bool {
        match self {
            Report::File(r) => r.not_measured,
            Report::Pgbench(r) => r.not_measured,
            Report::Files(r) => r.not_measured,
        }
    }

    /// The storage section ("stack under test").
    pub fn storage(&self) -> &StorageReport {
        match self {
            Report::File(r) => &r.storage,
            Report::Pgbench(r) => &r.storage,
            Report::Files(r) => &r.storage,
        }
    }

    /// Sets the line that says a device error ended the run and what is judged
    /// ([`crate::verdict::device_error_rule`]). A pgbench report has no such line (its
    /// clients end on the server's errors, never on a device error of their own).
    pub fn set_device_error(&mut self, line: Option<String>) {
        match self {
            Report::File(r) => r.device_error = line,
            Report::Files(r) => r.device_error = line,
            Report::Pgbench(_) => {}
        }
    }

    /// Sets the cut evidence. A PASS whose cut could not have failed becomes NOT
    /// MEASURED (`ok` false, `not_measured` true, the summary says why and keeps what
    /// was read back), unless `read_back` accepts a read-back check (the run
    /// finished on this boot and the caller asked for one: `verify --read-back`);
    /// then its summary begins [`READ_BACK_PASS`] instead of `PASS: `, so a pasted
    /// line never passes for a power cut's. A FAIL stays a FAIL.
    pub fn set_cut(&mut self, cut: crate::verdict::cut::CutReport, read_back: bool) {
        let unmeasured_pass = self.ok() && !cut.measured;
        let accepted = read_back && cut.read_back;
        let (ok, not_measured, summary, slot) = match self {
            Report::File(r) => (&mut r.ok, &mut r.not_measured, &mut r.summary, &mut r.cut),
            Report::Files(r) => (&mut r.ok, &mut r.not_measured, &mut r.summary, &mut r.cut),
            Report::Pgbench(r) => (&mut r.ok, &mut r.not_measured, &mut r.summary, &mut r.cut),
        };
        if unmeasured_pass && !accepted {
            let read = summary.strip_prefix("PASS: ").unwrap_or(summary);
            *summary = format!("NOT MEASURED: {}; read back: {read}", cut.not_measured);
            (*ok, *not_measured) = (false, true);
        } else if unmeasured_pass {
            if let Some(rest) = summary.strip_prefix("PASS: ") {
                *summary = format!("{READ_BACK_PASS}{rest}");
            }
        }
        *slot = cut;
    }

    /// The cut evidence.
    pub fn cut(&self) -> &crate::verdict::cut::CutReport {
        match self {
            Report::File(r) => &r.cut,
            Report::Files(r) => &r.cut,
            Report::Pgbench(r) => &r.cut,
        }
    }

    /// Sets the storage section.
    pub fn set_storage(&mut self, s: StorageReport) {
        match self {
            Report::File(r) => r.storage = s,
            Report::Pgbench(r) => r.storage = s,
            Report::Files(r) => r.storage = s,
        }
    }

    /// The one-line verdict: `PASS: …`, `FAIL: …` or (pgbench) `NOT MEASURED: …`.
    pub fn summary(&self) -> &str {
        match self {
            Report::File(r) => &r.summary,
            Report::Pgbench(r) => &r.summary,
            Report::Files(r) => &r.summary,
        }
    }
}

impl From<FileReport> for Report {
    fn from(r: FileReport) -> Self {
        Report::File(r)
    }
}

impl From<FilesReport> for Report {
    fn from(r: FilesReport) -> Self {
        Report::Files(r)
    }
}

impl From<PgReport> for Report {
    fn from(r: PgReport) -> Self {
        Report::Pgbench(r)
    }
}

/// How many findings a report lists at most.
pub const MAX_FINDINGS: usize = 1000;

/// Upper edges, in seconds, of the "acknowledged N s before the end" histogram
/// buckets; the last bucket is open-ended.
pub const LAG_EDGES_SECS: [f64; 7] = [0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 300.0];

/// One bucket of the lag histogram: lost acknowledged writes whose ack came
/// `from_secs ≤ lag < to_secs` before the last ack of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LagBucket {
    /// Lower edge, seconds (inclusive).
    pub from_secs: f64,
    /// Upper edge, seconds (exclusive); `None` for the open last bucket.
    pub to_secs: Option<f64>,
    /// Lost writes in the bucket.
    pub count: u64,
}

/// Buckets lags (seconds) by [`LAG_EDGES_SECS`]; empty input gives empty buckets.
pub fn lag_histogram(lags: &[f64]) -> Vec<LagBucket> {
    let mut out = Vec::new();
    let mut from = 0.0;
    for i in 0..=LAG_EDGES_SECS.len() {
        let to = LAG_EDGES_SECS.get(i).copied();
        out.push(LagBucket {
            from_secs: from,
            to_secs: to,
            count: 0,
        });
        if let Some(t) = to {
            from = t;
        }
    }
    for &l in lags {
        add_lags(&mut out, l, 1);
    }
    out
}

/// Adds `n` lags of `lag` seconds to `buckets`, a histogram [`lag_histogram`] made
/// (which counts its own lags with it): the bucket with `from_secs ≤ lag < to_secs`.
pub fn add_lags(buckets: &mut [LagBucket], lag: f64, n: u64) {
    let bucket = buckets
        .iter_mut()
        .find(|b| lag >= b.from_secs && b.to_secs.is_none_or(|t| lag < t));
    if let Some(b) = bucket {
        b.count += n;
    }
}

/// The histogram as text lines, one per bucket (`   0.01 - 0.1     s        3 ###`),
/// bars scaled to the largest count; the same for every workload's report.
pub fn lag_histogram_text(buckets: &[LagBucket]) -> String {
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    let mut s = String::new();
    for b in buckets {
        let range = match b.to_secs {
            Some(t) => format!("{:>7} - {:<7} s", b.from_secs, t),
            None => format!("{:>7} s or more  ", b.from_secs),
        };
        s.push_str(&format!(
            "  {range} {:>8} {}\n",
            b.count,
            "#".repeat((40 * b.count).div_ceil(max) as usize)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let h = lag_histogram(&[0.0, 0.05, 0.05, 2.0, 1000.0]);
        let counts: Vec<u64> = h.iter().map(|b| b.count).collect();
        assert_eq!(counts, vec![1, 2, 0, 0, 1, 0, 0, 1]);
        assert_eq!(h[7].to_secs, None);
    }

    #[test]
    fn lags_added_in_counts_land_where_the_histogram_puts_them() {
        let mut h = lag_histogram(&[]);
        for (lag, n) in [
            (0.0, 1),
            (0.05, 2),
            (0.1, 3),
            (2.0, 1),
            (299.999, 4),
            (1000.0, 5),
        ] {
            add_lags(&mut h, lag, n);
        }
        let counts: Vec<u64> = h.iter().map(|b| b.count).collect();
        assert_eq!(counts, vec![1, 2, 3, 0, 1, 0, 4, 5]);
        let each: Vec<f64> = [
            (0.0, 1),
            (0.05, 2),
            (0.1, 3),
            (2.0, 1),
            (299.999, 4),
            (1000.0, 5),
        ]
        .iter()
        .flat_map(|&(l, n)| std::iter::repeat_n(l, n))
        .collect();
        assert_eq!(lag_histogram(&each), h);
    }
}
