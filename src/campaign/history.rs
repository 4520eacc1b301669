//! Runs cut by hand (`plugpull verify --history`): every `plugpull verify` records its
//! outcome at the listener ([`VerifyRecord`]); the history judges each run of a host
//! as a campaign judges a cut, by the rules that need no controller (below), so the
//! same roll-up and confidence bound ([`super::RollUp`]) come out for people who pull
//! the plug themselves.
//!
//! A run's outcome is its first verify from another boot than the one that wrote it
//! (the first verify after the cut), else its first verify. First match wins:
//!
//! 1. never verified → not measured;
//! 2. the report measured nothing (a pgbench run with no promised commit) → not measured;
//! 3. a boot id is unknown, or the verify ran in the boot that wrote the run (the
//!    host did not lose power: a killed writer, a verify before the cut) → not
//!    measured — unless a device error ended the run (a drive-only cut);
//! 4. nothing acknowledged → not measured;
//! 5. a drive that counts unsafe shutdowns did not count this one → not measured;
//! 6. otherwise valid, failed when the verify found acknowledged data lost or damaged.

use super::judge::{acks_of, unsafe_shutdown_not_counted, verdict_of};
use super::{CutRecord, Outcome, Validity};
use crate::RunId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One `plugpull verify` of a run, as the listener keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerifyRecord {
    /// The run.
    pub run: RunId,
    /// verify's exit code: 0 passed, 1 findings, 2 the report measured nothing.
    pub exit: u8,
    /// The boot id of the host when the run started (its manifest's).
    pub run_boot_id: String,
    /// The boot id of the host that verified.
    pub verify_boot_id: String,
    /// When verify ran, ms since the epoch (verifier's clock).
    pub at_unix_ms: u64,
    /// The report (`verify --json`), slimmed ([`super::judge::slim_report`]).
    pub report_json: String,
}

/// A run of a host and its verifies, oldest verify first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HandRun {
    /// The run.
    pub run: RunId,
    /// When the listener created it, ms since the epoch (listener clock).
    pub created_unix_ms: u64,
    /// Whether it ended cleanly (`Finish`) or by a device error.
    pub ended: bool,
    /// Its verifies.
    pub verifies: Vec<VerifyRecord>,
}

/// The verify that counts for `r`: the first from another boot than the run's, else
/// the first.
pub fn counting(r: &HandRun) -> Option<&VerifyRecord> {
    r.verifies
        .iter()
        .find(|v| !v.verify_boot_id.is_empty() && v.verify_boot_id != v.run_boot_id)
        .or_else(|| r.verifies.first())
}

/// `r` judged as a cut (host `host`, number `index`, at its creation time; driver and
/// kind `hand`), by the rules of the module doc.
pub fn judge_hand(host: &str, index: u32, r: &HandRun) -> CutRecord {
    let mut cut = CutRecord {
        host: host.to_string(),
        index,
        at_ms: r.created_unix_ms,
        driver: "hand".into(),
        kind: "hand".into(),
        delay_ms: 0,
        number: 0,
        runs: vec![r.run],
        acknowledged: 0,
        validity: Validity::NotMeasured("never verified".into()),
        verdict: None,
    };
    let Some(v) = counting(r) else {
        return cut;
    };
    let report: Value = serde_json::from_str(&v.report_json).unwrap_or(Value::Null);
    cut.acknowledged = acks_of(&report);
    cut.validity = hand_validity(v, &report, cut.acknowledged);
    if cut.validity == Validity::Valid {
        let o = Outcome {
            run: v.run,
            exit: v.exit,
            report_json: String::new(),
        };
        cut.verdict = Some(verdict_of(&[(&o, report)]));
    }
    cut
}

fn hand_validity(v: &VerifyRecord, report: &Value, acknowledged: u64) -> Validity {
    use Validity::NotMeasured;
    if report["not_measured"] == true || v.exit == 2 {
        return NotMeasured(report["summary"].as_str().unwrap_or("not measured").into());
    }
    let drive_only = report["device_error"]
        .as_str()
        .is_some_and(|e| !e.is_empty());
    if !drive_only && (v.run_boot_id.is_empty() || v.verify_boot_id.is_empty()) {
        return NotMeasured(
            "the boot id is unknown: whether the host lost power cannot be told".into(),
        );
    }
    if !drive_only && v.run_boot_id == v.verify_boot_id {
        return NotMeasured(
            "verified in the boot that wrote the run: the host did not lose power (the writer was \
             killed, or verify ran before the cut)"
                .into(),
        );
    }
    if acknowledged == 0 {
        return NotMeasured("the workload had acknowledged nothing".into());
    }
    if let Some(why) = unsafe_shutdown_not_counted(report) {
        return NotMeasured(why);
    }
    Validity::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(exit: u8, run_boot: &str, verify_boot: &str, report: Value) -> VerifyRecord {
        VerifyRecord {
            run: RunId(7),
            exit,
            run_boot_id: run_boot.into(),
            verify_boot_id: verify_boot.into(),
            at_unix_ms: 1,
            report_json: report.to_string(),
        }
    }

    fn judged(verifies: Vec<VerifyRecord>) -> CutRecord {
        let r = HandRun {
            run: RunId(7),
            created_unix_ms: 5,
            ended: false,
            verifies,
        };
        judge_hand("h", 1, &r)
    }

    fn nm(c: &CutRecord) -> &str {
        match &c.validity {
            Validity::NotMeasured(why) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_rule_in_order() {
        let ok = serde_json::json!({"acknowledged": 10, "summary": "PASS: 10"});
        assert_eq!(nm(&judged(vec![])), "never verified");
        let pg = serde_json::json!({"not_measured": true, "summary": "NOT MEASURED: x"});
        assert_eq!(nm(&judged(vec![rec(2, "a", "b", pg)])), "NOT MEASURED: x");
        assert_eq!(
            nm(&judged(vec![rec(0, "", "b", ok.clone())])),
            "the boot id is unknown: whether the host lost power cannot be told"
        );
        assert!(nm(&judged(vec![rec(0, "a", "a", ok.clone())]))
            .starts_with("verified in the boot that wrote the run"));
        // A drive-only cut: same boot, and valid.
        let dev = serde_json::json!({"acknowledged": 3, "summary": "FAIL: y",
            "device_error": "run ended by a device error", "findings_total": 2});
        let c = judged(vec![rec(1, "a", "a", dev)]);
        assert_eq!(c.validity, Validity::Valid);
        assert_eq!(
            c.verdict.as_ref().map(|v| (v.failed, v.findings)),
            Some((true, 2))
        );
        let none = serde_json::json!({"acknowledged": 0, "summary": "PASS"});
        assert_eq!(
            nm(&judged(vec![rec(0, "a", "b", none)])),
            "the workload had acknowledged nothing"
        );
        let kept_power = serde_json::json!({"acknowledged": 4, "storage": {
            "probe": {"evidence": {"disks": [{"disk": "nvme0n1", "unsafe_shutdowns": 9}]}},
            "evidence_after": {"disks": [{"disk": "nvme0n1", "unsafe_shutdowns": 9}]}}});
        assert!(nm(&judged(vec![rec(0, "a", "b", kept_power)]))
            .starts_with("nvme0n1's unsafe-shutdown counter did not move (9 → 9)"));
        let c = judged(vec![rec(0, "a", "b", ok)]);
        assert_eq!((c.validity, c.acknowledged), (Validity::Valid, 10));
        assert_eq!(c.verdict.map(|v| v.failed), Some(false));
    }

    #[test]
    fn the_first_verify_after_a_reboot_counts() {
        let before = serde_json::json!({"acknowledged": 10, "summary": "PASS: early"});
        let after =
            serde_json::json!({"acknowledged": 10, "summary": "FAIL: after", "findings_total": 1});
        let later =
            serde_json::json!({"acknowledged": 10, "summary": "FAIL: later", "findings_total": 9});
        let c = judged(vec![
            rec(0, "a", "a", before),
            rec(1, "a", "b", after),
            rec(1, "a", "c", later),
        ]);
        assert_eq!(c.validity, Validity::Valid);
        let v = c.verdict.unwrap();
        assert_eq!((v.summary.as_str(), v.findings), ("FAIL: after", 1));
    }
}
