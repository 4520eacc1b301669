//! The verification report of a file run: one model for the human report and for
//! `--json` (one JSON object; field names are a stable interface for scripts).

use super::{lag_histogram, LagBucket, MAX_FINDINGS};
use crate::atomic::{atomic_sentence, torn_words, AtomicClaim};
use crate::verdict::{Classification, Finding, Verdict, VerdictCounts, VerdictKind};
use serde::{Deserialize, Serialize};

/// The report of verifying a file run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileReport {
    /// Run id, 16 hex digits.
    pub run_id: String,
    /// Always `"file"`.
    pub workload: String,
    /// Host that ran the agent.
    pub host: String,
    /// Path that was read.
    pub target: String,
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks in the run's target.
    pub blocks: u64,
    /// Whether the agent finished (`true`) or the run was cut short (`false`).
    pub finished: bool,
    /// Acknowledgements in the ledger.
    pub acknowledged: u64,
    /// Blocks classified (written by the run or acknowledged).
    pub blocks_checked: u64,
    /// Blocks per verdict.
    pub verdicts: VerdictCounts,
    /// Blocks holding a write newer than their last acknowledged one.
    pub in_flight_survived: u64,
    /// Findings in all (the list holds the first [`MAX_FINDINGS`]).
    pub findings_total: u64,
    /// The first failed blocks, by block index.
    pub findings: Vec<Finding>,
    /// Histogram of how long before the end each lost or shorn write was acknowledged.
    pub lost_lag_histogram: Vec<LagBucket>,
    /// True when nothing acknowledged was lost or damaged, and the cut could have
    /// shown it (`cut`).
    pub ok: bool,
    /// True when nothing failed but the cut could not have shown a loss (`cut`):
    /// neither a PASS nor a FAIL — the verifier exits 2.
    #[serde(default)]
    pub not_measured: bool,
    /// One line: `PASS: …`, `FAIL: …` or `NOT MEASURED: …`.
    pub summary: String,
    /// Findings about the target as a whole (gone, shrunk, nothing of the run left);
    /// each is a failure besides the per-block verdicts.
    pub target_findings: Vec<TargetFinding>,
    /// How the target was read: `o_direct` (from the medium, cached pages dropped
    /// first) or `buffered` (O_DIRECT refused; the page cache may have answered).
    pub read_mode: String,
    /// Why the read was buffered, or what could not drop the cache; `""` otherwise.
    pub read_note: String,
    /// `same_boot` (the host has not rebooted since the run started), `rebooted`, or
    /// `unknown` (a boot id is missing).
    pub boot: String,
    /// When the run started, ms since the epoch (agent clock).
    pub run_started_unix_ms: u64,
    /// How the run was chosen: `--run`, or the newest run of the host by the listener's record.
    pub run_chosen: String,
    /// When a device error ended the run: `run ended by a device error at T s into
    /// the run: ERROR` (the acks confirmed before it are judged as usual).
    #[serde(default)]
    pub device_error: Option<String>,
    /// The storage under test: the probe at the run's start, flushes per
    /// acknowledged write, warnings, cut evidence.
    #[serde(default)]
    pub storage: super::StorageReport,
    /// Whether the cut could have failed (`verdict::cut`): its moment, the
    /// acknowledgements exposed at it, the canary; a PASS without it is NOT MEASURED.
    #[serde(default)]
    pub cut: crate::verdict::cut::CutReport,
    /// With `--expect-atomic`: the unit under test, the stack's claims and whether
    /// this cut upheld them (`docs/atomic.md`); `None` otherwise.
    #[serde(default)]
    pub atomic: Option<AtomicReport>,
    /// Every failed block with its verdict, by block index: the whole list, where
    /// `findings` holds the first [`MAX_FINDINGS`] (for `plugpull report`'s map; not
    /// in the JSON).
    #[serde(skip)]
    pub failed_blocks: Vec<(u64, Verdict)>,
}

/// What a run that expected atomic writes shows: `torn_in_flight` blocks are its
/// failures, and the sentence says whether the claim held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtomicReport {
    /// Bytes per write under test (the block size).
    pub unit: u32,
    /// `none` (plain writes) or `rwf` (`pwritev2(…, RWF_ATOMIC)`).
    pub mode: String,
    /// The claims recorded at the run's start, in one line ([`AtomicClaim::describe`]).
    pub claims: String,
    /// The claims as recorded.
    pub claimed: AtomicClaim,
    /// Blocks torn by a write in flight at the cut (each a failure).
    pub torn: u64,
    /// Blocks holding a write in flight at the cut, whole or torn: the writes whose
    /// atomicity the cut tested (a write dropped whole leaves no trace).
    pub in_flight: u64,
    /// True when no write was torn.
    pub held: bool,
    /// One sentence: `0 torn of 3 writes in flight at the cut: one cut shows little
    /// about 8 KiB atomic writes; …` ([`atomic_sentence`]).
    pub sentence: String,
}

/// A finding about the target as a whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFinding {
    /// `file_gone`, `target_shorter`, `capacity_changed` or `no_record_of_run`.
    pub kind: String,
    /// What was seen, in words (e.g. `device capacity changed 16.0 MiB → 8.0 MiB`).
    pub detail: String,
}

/// `100·n/d` rounded down to one decimal, so 4094 of 4096 is 99.9 and never 100.0
/// (0 when `d` is 0).
pub fn percent_floor(n: u64, d: u64) -> f64 {
    if d == 0 {
        return 0.0;
    }
    ((1000u128 * n as u128) / d as u128) as f64 / 10.0
}

impl FileReport {
    /// Blocks that fail the run: [`VerdictCounts::failures`], plus `torn_in_flight`
    /// when atomic writes were expected.
    pub fn failures(&self) -> u64 {
        self.verdicts.failures_expecting(self.atomic.is_some())
    }

    /// Builds the report from the verdict engine's outcome.
    pub fn new(head: ReportHead, outcome: Classification) -> Self {
        let expect = outcome.expect_atomic;
        let failures = outcome.counts.failures_expecting(expect);
        let ok = failures == 0 && head.target_findings.is_empty();
        let atomic = head.atomic.map(|c| {
            let torn = outcome.counts.get(Verdict::TornInFlight);
            let in_flight = outcome.in_flight_survived;
            AtomicReport {
                unit: c.unit,
                mode: c.mode.name().into(),
                claims: c.describe(),
                sentence: atomic_sentence(c.unit as u64, torn, in_flight),
                claimed: c,
                torn,
                in_flight,
                held: torn == 0,
            }
        });
        let summary = if ok {
            format!(
                "PASS: {} acknowledged writes, {} blocks checked, nothing acknowledged was lost or damaged",
                head.acknowledged, outcome.checked
            )
        } else {
            let mut parts: Vec<String> = head
                .target_findings
                .iter()
                .map(|f| f.detail.clone())
                .collect();
            parts.extend(
                Verdict::ALL
                    .iter()
                    .filter(|v| v.fails(expect) && outcome.counts.get(**v) > 0)
                    .map(|&v| {
                        let n = outcome.counts.get(v);
                        let mut p = format!("{n} {}", v.name().replace('_', " "));
                        if v == Verdict::TornInFlight {
                            p.push_str(&format!(" ({})", torn_words(head.block_size as u64)));
                        }
                        p
                    }),
            );
            format!(
                "FAIL: {} of {} checked blocks lost or damaged acknowledged data ({}) out of {} acknowledged writes",
                failures,
                outcome.checked,
                parts.join(", "),
                head.acknowledged
            )
        };
        let lags: Vec<f64> = outcome
            .findings
            .iter()
            .filter(|f| {
                matches!(
                    f.verdict,
                    Verdict::LostWrite | Verdict::Unserializable | Verdict::TornAcknowledged
                )
            })
            .filter_map(|f| f.acked_secs_before_end)
            .collect();
        let failed_blocks = outcome
            .findings
            .iter()
            .map(|f| (f.block, f.verdict))
            .collect();
        FileReport {
            failed_blocks,
            run_id: head.run_id,
            workload: "file".into(),
            host: head.host,
            target: head.target,
            block_size: head.block_size,
            blocks: head.blocks,
            finished: head.finished,
            acknowledged: head.acknowledged,
            blocks_checked: outcome.checked,
            verdicts: outcome.counts,
            in_flight_survived: outcome.in_flight_survived,
            findings_total: outcome.findings.len() as u64,
            findings: outcome.findings.into_iter().take(MAX_FINDINGS).collect(),
            lost_lag_histogram: lag_histogram(&lags),
            ok,
            summary,
            target_findings: head.target_findings,
            read_mode: head.read_mode,
            read_note: head.read_note,
            boot: head.boot,
            run_started_unix_ms: head.run_started_unix_ms,
            run_chosen: head.run_chosen,
            device_error: None,
            storage: super::StorageReport::default(),
            atomic,
            cut: Default::default(),
            not_measured: false,
        }
    }
}

/// What the report says about the run, beside the verdicts.
#[derive(Clone, Debug)]
pub struct ReportHead {
    /// Run id, 16 hex digits.
    pub run_id: String,
    /// Host that ran the agent.
    pub host: String,
    /// Path that was read.
    pub target: String,
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks in the target.
    pub blocks: u64,
    /// Whether the agent finished normally.
    pub finished: bool,
    /// Acknowledgements in the ledger.
    pub acknowledged: u64,
    /// See [`FileReport::target_findings`].
    pub target_findings: Vec<TargetFinding>,
    /// See [`FileReport::read_mode`].
    pub read_mode: String,
    /// See [`FileReport::read_note`].
    pub read_note: String,
    /// See [`FileReport::boot`].
    pub boot: String,
    /// See [`FileReport::run_started_unix_ms`].
    pub run_started_unix_ms: u64,
    /// See [`FileReport::run_chosen`].
    pub run_chosen: String,
    /// The run's atomic-write claim (`--expect-atomic`), see [`FileReport::atomic`].
    pub atomic: Option<AtomicClaim>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(atomic: Option<AtomicClaim>) -> ReportHead {
        ReportHead {
            run_id: "r".into(),
            host: "h".into(),
            target: "t".into(),
            block_size: 8192,
            blocks: 4,
            finished: false,
            acknowledged: 9,
            target_findings: Vec::new(),
            read_mode: "o_direct".into(),
            read_note: String::new(),
            boot: "rebooted".into(),
            run_started_unix_ms: 0,
            run_chosen: String::new(),
            atomic,
        }
    }

    #[test]
    fn a_torn_block_fails_a_run_that_expected_atomic_writes_and_says_so() {
        let claim = AtomicClaim {
            unit: 8192,
            mode: crate::modes::AtomicMode::None,
            statx: None,
            disks: Vec::new(),
        };
        let outcome = |expect_atomic| Classification {
            expect_atomic,
            counts: VerdictCounts::of(&[(Verdict::Intact, 3), (Verdict::TornInFlight, 1)]),
            checked: 4,
            in_flight_survived: 2,
            max_watermark: 0,
            run_data_blocks: 4,
            other_run_blocks: 0,
            other_runs: Vec::new(),
            findings: Vec::new(),
        };
        let r = FileReport::new(head(Some(claim)), outcome(true));
        assert!(!r.ok);
        assert_eq!(r.failures(), 1);
        assert_eq!(
            r.summary,
            "FAIL: 1 of 4 checked blocks lost or damaged acknowledged data (1 torn in flight (the device \
             tore an 8192-byte write it was expected to write atomically)) out of 9 acknowledged writes"
        );
        let a = r.atomic.unwrap();
        assert_eq!((a.torn, a.in_flight, a.held), (1, 2, false));
        assert_eq!(
            a.sentence,
            "the device tore 1 of 2 writes in flight at the cut: 8 KiB writes are not atomic on this stack"
        );
        let r = FileReport::new(head(None), outcome(false));
        assert!(r.ok && r.atomic.is_none());
        assert_eq!(r.failures(), 0);
    }

    #[test]
    fn percent_never_rounds_up_to_100() {
        assert_eq!(percent_floor(4094, 4096), 99.9);
        assert_eq!(percent_floor(4096, 4096), 100.0);
        assert_eq!(percent_floor(1, 3), 33.3);
        assert_eq!(percent_floor(0, 0), 0.0);
    }
}
