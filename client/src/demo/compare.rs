//! The two devices side by side, from their typed reports: the file workload's
//! [`FileReport`], the files workload's [`FilesReport`] and, when the PostgreSQL part ran, the pgbench [`PgReport`]. Also
//! each device's one-line verdict.

use crate::pgbench::PgReport;
use plugpull::report::{FileReport, FilesReport};

/// What one simulated device produced.
pub(super) struct DeviceResult {
    /// `honest` or `lying`.
    pub mode: &'static str,
    /// The file run's report.
    pub file: FileReport,
    /// The files (namespace) run's report.
    pub files: FilesReport,
    /// The pgbench run's report, when the PostgreSQL part ran.
    pub pg: Option<PgReport>,
    /// Each verified run's ledger and report, for the demo's HTML report.
    pub runs: Vec<(plugpull::ledger::RunLedger, plugpull::report::Report)>,
}

impl DeviceResult {
    /// Blocks that lost or damaged acknowledged data.
    fn lost(&self) -> u64 {
        self.file.failures()
    }

    /// Whether every report of this device passed.
    pub fn passed(&self) -> bool {
        self.file.ok && self.files.ok && self.pg.as_ref().is_none_or(|p| p.ok)
    }

    /// When nothing failed but a report measured nothing (its cut could not have
    /// failed: `plugpull::verdict::cut`), that report's summary.
    fn not_measured(&self) -> Option<&str> {
        let failed = !self.file.ok && !self.file.not_measured
            || !self.files.ok && !self.files.not_measured
            || self.pg.as_ref().is_some_and(|p| !p.ok && !p.not_measured);
        if failed {
            return None;
        }
        [
            (self.file.not_measured, &self.file.summary),
            (self.files.not_measured, &self.files.summary),
        ]
        .into_iter()
        .chain(self.pg.as_ref().map(|p| (p.not_measured, &p.summary)))
        .find(|(n, _)| *n)
        .map(|(_, s)| s.as_str())
    }

    /// The verdict word of the device: `PASS`, `FAIL` or `NOT MEASURED`.
    fn word(&self) -> &'static str {
        match (self.passed(), self.not_measured()) {
            (true, _) => "PASS",
            (false, Some(_)) => "NOT MEASURED",
            (false, None) => "FAIL",
        }
    }

    /// `honest device: PASS, N acknowledged (W writes, C commits), 0 lost`, or
    /// `lying device: FAIL, N acknowledged writes lost, C commits lost…`, or
    /// `honest device: NOT MEASURED: …` when nothing failed but a cut showed nothing.
    pub fn verdict_line(&self) -> String {
        if let Some(why) = self.not_measured() {
            return format!("{} device: {why}", self.mode);
        }
        let commits = self.pg.as_ref().map(|p| p.acknowledged_commits);
        if self.passed() {
            let (w, n) = (self.file.acknowledged, self.files.acknowledged);
            let total = w + n + commits.unwrap_or(0);
            let parts = match commits {
                Some(c) => format!(" ({w} writes, {n} steps, {c} commits)"),
                None => format!(" ({w} writes, {n} steps)"),
            };
            return format!(
                "{} device: PASS, {total} acknowledged{parts}, 0 lost",
                self.mode
            );
        }
        let mut s = format!(
            "{} device: FAIL, {} acknowledged writes lost, {} names lost or damaged",
            self.mode,
            self.lost(),
            self.files.verdicts.failures()
        );
        if let Some(p) = &self.pg {
            if !p.server_reachable {
                s.push_str(", PostgreSQL did not recover");
            } else {
                s.push_str(&format!(", {} commits lost", p.lost_commits));
                if !p.invariant.holds {
                    s.push_str(", balance invariant broken");
                }
            }
        }
        s
    }
}

/// Prints the two devices' key figures in two columns.
pub(super) fn side_by_side(a: &DeviceResult, b: &DeviceResult) {
    let row = |name: &str, f: &dyn Fn(&DeviceResult) -> String| {
        println!("{name:<26} {:>16} {:>16}", f(a), f(b));
    };
    row("", &|d| format!("{} device", d.mode));
    row("acknowledged writes", &|d| d.file.acknowledged.to_string());
    row("blocks lost or damaged", &|d| d.lost().to_string());
    row("acknowledged steps", &|d| d.files.acknowledged.to_string());
    row("names lost or damaged", &|d| {
        d.files.verdicts.failures().to_string()
    });
    if a.pg.is_some() || b.pg.is_some() {
        let pg = |figure: fn(&PgReport) -> u64| {
            move |d: &DeviceResult| match &d.pg {
                Some(p) if !p.server_reachable => "no recovery".to_string(),
                Some(p) => figure(p).to_string(),
                None => "-".to_string(),
            }
        };
        row("acknowledged commits", &pg(|p| p.acknowledged_commits));
        row("lost commits", &pg(|p| p.lost_commits));
        row("balance invariant", &|d| match &d.pg {
            Some(p) if p.invariant.holds => "holds".to_string(),
            Some(_) => "broken".to_string(),
            None => "-".to_string(),
        });
    }
    row("verdict", &|d| d.word().to_string());
}
