//! Runs cut by hand (`plugpull verify --history`): every `plugpull verify` records its
//! outcome at the listener ([`VerifyRecord`]); the history judges each run of a host
//! as a campaign judges a cut, by the rules that need no controller (below), so the
//! same roll-up and confidence bound ([`super::RollUp`]) come out for people who pull
//! the plug themselves.
//!
//! A run's outcome is its first recorded verify: the one after the cut (a verify in
//! the same boot means the run had ended before any power loss). First match wins:
//!
//! 1. a run of a campaign → not measured here (its campaign judges the cut with the
//!    controller's evidence: `campaign status`);
//! 2. never verified → not measured;
//! 3. the report measured nothing (a pgbench run with no promised commit) → not measured;
//! 4. the run finished on its own (not ended by a device error) → not measured: it was
//!    not cut under load;
//! 5. unless a device error ended the run (a drive-only cut): the boot ids of the host
//!    whose storage is under test — the run's cut-evidence snapshots (before the run,
//!    after the cut) where the report has both, else, for a file run, the run's and
//!    the verifier's; a pgbench run without them → not measured (the server's storage
//!    was not probed where verify ran) — unknown → not measured, equal (the host did
//!    not lose power: the writer was killed, or verify ran before the cut) → not
//!    measured;
//! 6. nothing acknowledged → not measured;
//! 7. a drive that counts unsafe shutdowns did not count this one → not measured;
//! 8. otherwise valid, failed when the verify found acknowledged data lost or damaged.
//!
//! A clean reboot between a killed writer and its verify cannot be told from a power
//! cut, unless a drive's unsafe-shutdown counter shows it (rule 7): the history
//! trusts that a reboot before the verify was the cut.

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
    /// Whether it ended on its own: finished (`Finish`), by a device error, or
    /// invalidated; a run cut by a power loss has not ended.
    pub ended: bool,
    /// The campaign whose run it is, if any (its cut is judged there, with the
    /// controller's evidence, not here).
    #[serde(default)]
    pub campaign: Option<String>,
    /// Its verifies.
    pub verifies: Vec<VerifyRecord>,
}

/// The verify that counts for `r`: its first recorded one.
pub fn counting(r: &HandRun) -> Option<&VerifyRecord> {
    r.verifies.first()
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
        evidence: None,
    };
    if let Some(name) = &r.campaign {
        cut.validity = Validity::NotMeasured(format!(
            "a run of campaign {name}: `plugpull campaign status --name {name}` judges its cut"
        ));
        return cut;
    }
    let Some(v) = counting(r) else {
        return cut;
    };
    let report: Value = serde_json::from_str(&v.report_json).unwrap_or(Value::Null);
    cut.acknowledged = acks_of(&report);
    cut.validity = hand_validity(r, v, &report, cut.acknowledged);
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

fn hand_validity(r: &HandRun, v: &VerifyRecord, report: &Value, acknowledged: u64) -> Validity {
    use Validity::NotMeasured;
    if report["not_measured"] == true || v.exit == 2 {
        return NotMeasured(report["summary"].as_str().unwrap_or("not measured").into());
    }
    let drive_only = report["device_error"]
        .as_str()
        .is_some_and(|e| !e.is_empty());
    if r.ended && !drive_only {
        return NotMeasured(
            "the run finished on its own before any cut: it was not cut under load".into(),
        );
    }
    if !drive_only {
        let snap = |p: &str| {
            report
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (before, after) = (
            snap("/storage/probe/evidence/boot_id"),
            snap("/storage/evidence_after/boot_id"),
        );
        let pgbench = report.get("acknowledged_commits").is_some();
        let (before, after) = match (before.is_empty() || after.is_empty(), pgbench) {
            (false, _) => (before, after),
            (true, false) => (v.run_boot_id.as_str(), v.verify_boot_id.as_str()),
            (true, true) => {
                return NotMeasured(
                    "the PostgreSQL server's storage was not probed where verify ran: whether \
                     it lost power cannot be told"
                        .into(),
                )
            }
        };
        if before.is_empty() || after.is_empty() {
            return NotMeasured(
                "the boot id is unknown: whether the host lost power cannot be told".into(),
            );
        }
        if before == after {
            return NotMeasured(
                "verified in the boot that wrote the run: the host did not lose power (the \
                 writer was killed, or verify ran before the cut)"
                    .into(),
            );
        }
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
        judge_hand("h", 1, &hand(false, None, verifies))
    }

    fn hand(ended: bool, campaign: Option<&str>, verifies: Vec<VerifyRecord>) -> HandRun {
        HandRun {
            run: RunId(7),
            created_unix_ms: 5,
            ended,
            campaign: campaign.map(String::from),
            verifies,
        }
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
    fn the_first_verify_counts_and_later_ones_change_nothing() {
        let early = serde_json::json!({"acknowledged": 10, "summary": "PASS: early"});
        let after =
            serde_json::json!({"acknowledged": 10, "summary": "FAIL: after", "findings_total": 1});
        // Verified before any cut: a later verify after a reboot does not make it valid.
        let c = judged(vec![
            rec(0, "a", "a", early),
            rec(1, "a", "b", after.clone()),
        ]);
        assert!(nm(&c).starts_with("verified in the boot that wrote the run"));
        let later = serde_json::json!({"acknowledged": 10, "summary": "PASS: later"});
        let c = judged(vec![rec(1, "a", "b", after), rec(0, "a", "c", later)]);
        let v = c.verdict.unwrap();
        assert_eq!(
            (v.summary.as_str(), v.findings, v.failed),
            ("FAIL: after", 1, true)
        );
    }

    #[test]
    fn finished_campaign_and_remote_server_runs_are_not_measured() {
        let ok = serde_json::json!({"acknowledged": 10, "summary": "PASS: 10"});
        let c = judge_hand(
            "h",
            1,
            &hand(true, None, vec![rec(0, "a", "b", ok.clone())]),
        );
        assert_eq!(
            nm(&c),
            "the run finished on its own before any cut: it was not cut under load"
        );
        let c = judge_hand(
            "h",
            1,
            &hand(false, Some("plp"), vec![rec(0, "a", "b", ok)]),
        );
        assert_eq!(
            nm(&c),
            "a run of campaign plp: `plugpull campaign status --name plp` judges its cut"
        );
        // A pgbench run verified from another machine: the client's boot ids differ, but
        // the server's storage has no snapshot here.
        let pg = serde_json::json!({"acknowledged_commits": 10, "summary": "PASS"});
        assert!(nm(&judged(vec![rec(0, "a", "b", pg)]))
            .starts_with("the PostgreSQL server's storage was not probed"));
        // With the server's snapshots: their boot ids decide, not the client's.
        let pg = serde_json::json!({"acknowledged_commits": 10, "summary": "PASS", "storage": {
            "probe": {"evidence": {"boot_id": "s1", "disks": []}},
            "evidence_after": {"boot_id": "s2", "disks": []}}});
        assert_eq!(judged(vec![rec(0, "c", "c", pg)]).validity, Validity::Valid);
    }
}
