//! The verification report of a files (namespace) run: one model for the human report
//! and for `--json` (one JSON object; field names are a stable interface for scripts).

use super::{lag_histogram, LagBucket, MAX_FINDINGS};
use crate::verdict::files::{FilesCounts, FilesFinding, FilesOutcome, FilesVerdict};
use crate::verdict::VerdictKind;
use serde::{Deserialize, Serialize};

/// The report of verifying a files run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesReport {
    /// Run id, 16 hex digits.
    pub run_id: String,
    /// Always `"files"`.
    pub workload: String,
    /// Host that ran the agent.
    pub host: String,
    /// Directory that was walked.
    pub target: String,
    /// Workers of the run.
    pub jobs: u32,
    /// File names of the run.
    pub files: u32,
    /// Whether the agent finished (`true`) or the run was cut short (`false`).
    pub finished: bool,
    /// Acknowledged steps in the ledger.
    pub acknowledged: u64,
    /// Of them, steps that skipped a durability call (`--unsafe-steps`).
    pub unpromised_acks: u64,
    /// Names judged.
    pub names_checked: u64,
    /// Names per verdict.
    pub verdicts: FilesCounts,
    /// Names in a state only a step in flight at the cut explains.
    pub in_flight_survived: u64,
    /// Findings in all (the list holds the first [`MAX_FINDINGS`]).
    pub findings_total: u64,
    /// The first non-intact names, by file number.
    pub findings: Vec<FilesFinding>,
    /// Histogram of how long before the end the last step of each failed name was
    /// acknowledged.
    pub lost_lag_histogram: Vec<LagBucket>,
    /// Entries of the directory that are not the run's (not judged).
    pub foreign_entries: Vec<String>,
    /// How the files were read: always `buffered` (plain reads, see `docs/files.md`).
    pub read_mode: String,
    /// True when nothing acknowledged and promised was lost or damaged.
    pub ok: bool,
    /// True when the run acknowledged no promised step and has no failure: neither a
    /// PASS nor a FAIL.
    pub not_measured: bool,
    /// One line: `PASS: …`, `FAIL: …` or `NOT MEASURED: …`.
    pub summary: String,
    /// When the run started, ms since the epoch (agent clock).
    pub run_started_unix_ms: u64,
    /// How the run was chosen.
    pub run_chosen: String,
    /// When a device error ended the run, the line that says so.
    #[serde(default)]
    pub device_error: Option<String>,
    /// When the run's directory itself is gone from its filesystem (every name was
    /// judged absent), the line that says so and names that filesystem.
    #[serde(default)]
    pub directory_gone: Option<String>,
    /// The storage under test.
    #[serde(default)]
    pub storage: super::StorageReport,
    /// Whether the cut could have failed (`verdict::cut`): its moment, the
    /// acknowledgements exposed at it, the canary; a PASS without it is NOT MEASURED.
    #[serde(default)]
    pub cut: crate::verdict::cut::CutReport,
}

/// What the report says about the run, beside the verdicts.
#[derive(Clone, Debug, Default)]
pub struct FilesHead {
    /// Run id, 16 hex digits.
    pub run_id: String,
    /// Host that ran the agent.
    pub host: String,
    /// Directory that was walked.
    pub target: String,
    /// Workers.
    pub jobs: u32,
    /// File names.
    pub files: u32,
    /// Whether the agent finished normally.
    pub finished: bool,
    /// See [`FilesReport::run_started_unix_ms`].
    pub run_started_unix_ms: u64,
    /// See [`FilesReport::run_chosen`].
    pub run_chosen: String,
}

impl FilesReport {
    /// Builds the report from the verdict engine's outcome.
    pub fn new(head: FilesHead, o: FilesOutcome) -> Self {
        let (acknowledged, unpromised_acks) = o.acknowledged;
        let failures = o.counts.failures();
        // Damage the run's own data shows is a FAIL even when every acknowledged step
        // was unpromised (a name with no acknowledged step that holds what none of
        // its steps made): only a run with nothing wrong measured nothing.
        let not_measured = failures == 0 && acknowledged == unpromised_acks;
        let ok = failures == 0 && !not_measured;
        // The failures by verdict: the names of each verdict less those whose finding
        // is unpromised (every non-intact name has one finding), so the
        // parentheses add up to the failures they explain.
        let lost: Vec<String> = FilesVerdict::ALL[1..]
            .iter()
            .map(|&v| {
                let unpromised = o
                    .findings
                    .iter()
                    .filter(|f| f.verdict == v && !f.promised)
                    .count() as u64;
                (v, o.counts.get(v).saturating_sub(unpromised))
            })
            .filter(|&(_, n)| n > 0)
            .map(|(v, n)| format!("{n} {}", v.name().replace('_', " ")))
            .collect();
        let unpromised = match o.counts.unpromised {
            0 => String::new(),
            1 => "; 1 name lost unpromised steps (--unsafe-steps), as expected".into(),
            n => format!("; {n} names lost unpromised steps (--unsafe-steps), as expected"),
        };
        let summary = if not_measured {
            format!("NOT MEASURED: none of the {acknowledged} acknowledged steps promised durability (--unsafe-steps){unpromised}")
        } else if ok {
            format!(
                "PASS: {acknowledged} acknowledged steps, {} names checked, nothing acknowledged was lost or damaged{unpromised}",
                o.checked
            )
        } else {
            format!(
                "FAIL: {failures} of {} checked names lost or damaged acknowledged steps ({}) out of {acknowledged} acknowledged steps{unpromised}",
                o.checked,
                lost.join(", ")
            )
        };
        let lags: Vec<f64> = o
            .findings
            .iter()
            .filter(|f| f.promised)
            .filter_map(|f| f.acked_secs_before_end)
            .collect();
        FilesReport {
            run_id: head.run_id,
            workload: "files".into(),
            host: head.host,
            target: head.target,
            jobs: head.jobs,
            files: head.files,
            finished: head.finished,
            acknowledged,
            unpromised_acks,
            names_checked: o.checked,
            verdicts: o.counts,
            in_flight_survived: o.in_flight_survived,
            findings_total: o.findings.len() as u64,
            findings: o.findings.into_iter().take(MAX_FINDINGS).collect(),
            lost_lag_histogram: lag_histogram(&lags),
            foreign_entries: o.foreign,
            read_mode: "buffered".into(),
            ok,
            not_measured,
            summary,
            run_started_unix_ms: head.run_started_unix_ms,
            run_chosen: head.run_chosen,
            device_error: None,
            directory_gone: None,
            storage: super::StorageReport::default(),
            cut: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outcome of `acknowledged` steps, `unpromised` of them unpromised, with
    /// `resurrected` names (promised failures) and `lost_unpromised` names that lost
    /// unpromised steps.
    fn outcome(
        acknowledged: u64,
        unpromised: u64,
        resurrected: u64,
        lost_unpromised: u64,
    ) -> FilesOutcome {
        let mut counts = FilesCounts::new();
        *counts.by_verdict.get_mut(FilesVerdict::Resurrected) = resurrected;
        *counts.by_verdict.get_mut(FilesVerdict::LostFile) = lost_unpromised;
        counts.unpromised = lost_unpromised;
        let finding = |i: u64, verdict, promised| FilesFinding {
            name: format!("w0-{i}"),
            verdict,
            step_seq: i + 1,
            step: "create".into(),
            promised,
            expected_exists: true,
            expected_size: 4096,
            expected_seq: i + 1,
            found_exists: false,
            found_size: 0,
            found_seq: 0,
            acked_secs_before_end: None,
            evidence: String::new(),
        };
        let findings = (0..resurrected)
            .map(|i| finding(i, FilesVerdict::Resurrected, true))
            .chain(
                (resurrected..resurrected + lost_unpromised)
                    .map(|i| finding(i, FilesVerdict::LostFile, false)),
            )
            .collect();
        FilesOutcome {
            counts,
            checked: 8,
            in_flight_survived: 0,
            findings,
            acknowledged: (acknowledged, unpromised),
            foreign: Vec::new(),
        }
    }

    #[test]
    fn a_failure_is_a_fail_even_when_every_acknowledged_step_was_unpromised() {
        let r = FilesReport::new(FilesHead::default(), outcome(5, 5, 1, 2));
        assert_eq!((r.ok, r.not_measured), (false, false));
        assert_eq!(
            r.summary,
            "FAIL: 1 of 8 checked names lost or damaged acknowledged steps (1 resurrected) \
             out of 5 acknowledged steps; 2 names lost unpromised steps (--unsafe-steps), as \
             expected"
        );
        // Without the failure the same run measured nothing.
        let r = FilesReport::new(FilesHead::default(), outcome(5, 5, 0, 2));
        assert_eq!((r.ok, r.not_measured), (false, true));
        assert_eq!(
            r.summary,
            "NOT MEASURED: none of the 5 acknowledged steps promised durability \
             (--unsafe-steps); 2 names lost unpromised steps (--unsafe-steps), as expected"
        );
        let r = FilesReport::new(FilesHead::default(), outcome(5, 4, 0, 2));
        assert_eq!((r.ok, r.not_measured), (true, false));
        // One name: singular.
        let r = FilesReport::new(FilesHead::default(), outcome(5, 4, 2, 1));
        assert_eq!(
            r.summary,
            "FAIL: 2 of 8 checked names lost or damaged acknowledged steps (2 resurrected) \
             out of 5 acknowledged steps; 1 name lost unpromised steps (--unsafe-steps), as \
             expected"
        );
    }
}
