//! A cut's validity and verdict from its facts (`docs/campaign.md`, "Cut validity").
//!
//! The rules, first match wins:
//! 1. the driver's "off" failed → **invalid**;
//! 2. the runs kept acknowledging more than [`SILENCE_GRACE_MS`] after "off", or the
//!    driver reads "on" after "off" → **not measured** (the driver did not cut this
//!    machine);
//! 3. the machine did not come back → **invalid**; its runs were verified by a boot
//!    that began before "off" (they had ended before the cut) → **not measured**, with
//!    rule 6's reason when that boot is the one they ran in (no reboot at all);
//! 4. a run measured nothing (pgbench: no promised commit) → **not measured**;
//! 5. a verify could not run (exit 2) → **invalid**;
//! 6. a boot id is unknown, or it did not change → **not measured** (no proof of a
//!    power loss), unless the driver cuts the drive only (`device`: the host stays up);
//! 7. nothing was acknowledged → **not measured**;
//! 8. a drive that counts unsafe shutdowns did not count this one → **not measured**
//!    (it saw a clean shutdown or kept power);
//! 9. otherwise **valid**, failed when any run's verify failed (exit 1).

use super::{CutRecord, CutVerdict, Outcome, Pulling, Validity};
use serde_json::Value;

/// How long after the driver's "off" returned an acknowledgement may still arrive
/// (in flight on the network, or power decaying) before the cut is judged "the
/// agent kept talking", ms.
pub const SILENCE_GRACE_MS: u64 = 2000;

/// Everything known of one cut.
#[derive(Clone, Debug)]
pub struct CutFacts<'a> {
    /// The controller's record before "off".
    pub pulling: &'a Pulling,
    /// The driver's "off" error, if it failed.
    pub off_error: Option<&'a str>,
    /// When "off" returned, ms since the epoch (listener clock: the controller asks
    /// the listener right after).
    pub off_at_ms: u64,
    /// When the listener received the cut's runs' last acknowledgement batch, ms since
    /// the epoch (listener clock); 0 when none.
    pub last_ack_ms: u64,
    /// The driver's status after "off" (`on`, `off`), when it has one.
    pub status_after: Option<&'a str>,
    /// When the controller called the driver's "on" (listener clock, as
    /// `off_at_ms`); `None` before it did.
    pub on_at_ms: Option<u64>,
    /// `Err(why)` when the machine did not come back.
    pub came_back: Result<(), String>,
    /// The verify outcomes and the boot id of the agent that verified.
    pub verified: Option<(&'a [Outcome], &'a str)>,
    /// When the verifying agent's boot was announced, ms since the epoch (listener
    /// clock); `None` when unknown.
    pub verify_boot_at_ms: Option<u64>,
}

/// Judges one cut.
pub fn judge(f: &CutFacts) -> CutRecord {
    let p = f.pulling;
    let reports: Vec<(&Outcome, Value)> = f
        .verified
        .map(|(o, _)| {
            o.iter()
                .map(|o| {
                    (
                        o,
                        serde_json::from_str(&o.report_json).unwrap_or(Value::Null),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let acknowledged = reports.iter().map(|(_, r)| acks_of(r)).sum();
    let validity = validity(f, &reports, acknowledged);
    let verdict = (validity == Validity::Valid).then(|| verdict_of(&reports));
    let evidence = super::evidence::of(f, &reports);
    CutRecord {
        host: p.host.clone(),
        index: p.index,
        at_ms: p.at_ms,
        driver: p.driver.clone(),
        kind: p.kind.clone(),
        delay_ms: p.delay_ms,
        number: p.number,
        runs: p.runs.clone(),
        acknowledged,
        validity,
        verdict,
        evidence: Some(Box::new(evidence)),
    }
}

fn validity(f: &CutFacts, reports: &[(&Outcome, Value)], acknowledged: u64) -> Validity {
    use Validity::{Invalid, NotMeasured};
    if let Some(e) = f.off_error {
        return Invalid(format!("the driver's off failed: {e}"));
    }
    if f.last_ack_ms > f.off_at_ms + SILENCE_GRACE_MS {
        return NotMeasured(format!(
            "the agent kept acknowledging writes {:.1} s after the driver's off: the driver did not cut this machine",
            (f.last_ack_ms - f.off_at_ms) as f64 / 1000.0
        ));
    }
    if f.status_after == Some("on") {
        return NotMeasured("the driver reports power on after its off".into());
    }
    if let Err(why) = &f.came_back {
        return Invalid(why.clone());
    }
    let Some((_, boot_id)) = f.verified else {
        return Invalid("the cut's runs were not verified".into());
    };
    let device = f.pulling.kind == "device";
    // A boot announced by the time "off" returned began before it (a boot takes
    // seconds): the moment itself is before the cut. The boot the runs started in is
    // always announced before "off": verified by it, the machine did not reboot at all,
    // and rule 6's reason says so.
    if !device && f.verify_boot_at_ms.is_some_and(|at| at <= f.off_at_ms) {
        if !boot_id.is_empty() && boot_id == f.pulling.boot_id {
            return NotMeasured(SAME_BOOT.into());
        }
        return NotMeasured(format!(
            "run set {} was verified by a boot that began before the driver's off: its runs had ended before the cut (a reboot or an agent restart)",
            f.pulling.number
        ));
    }
    if let Some((o, r)) = reports.iter().find(|(_, r)| r["not_measured"] == true) {
        return NotMeasured(format!("run {}: {}", o.run, text(r, "summary")));
    }
    if let Some((o, r)) = reports.iter().find(|(o, _)| o.exit == 2) {
        let why = [text(r, "error"), text(r, "summary")].concat();
        return Invalid(format!("verify of run {} could not run: {why}", o.run));
    }
    if !device && (f.pulling.boot_id.is_empty() || boot_id.is_empty()) {
        return NotMeasured(
            "the boot id is unknown: whether the machine lost power cannot be told".into(),
        );
    }
    if !device && boot_id == f.pulling.boot_id {
        return NotMeasured(SAME_BOOT.into());
    }
    if acknowledged == 0 {
        return NotMeasured("the workload had acknowledged nothing yet".into());
    }
    if let Some(why) = reports
        .iter()
        .find_map(|(_, r)| unsafe_shutdown_not_counted(r))
    {
        return NotMeasured(why);
    }
    // A reset (`qemu://DIR?cut=reset`): the disk kept power. A loss is real however
    // the machine went down; a pass says nothing of the disk's cache.
    if f.pulling.kind == "reset" && !reports.iter().any(|(o, _)| o.exit == 1) {
        return NotMeasured(crate::verdict::cut::RESET_NOT_MEASURED.into());
    }
    Validity::Valid
}

/// Rule 6's reason when the runs were verified by the boot they ran in.
const SAME_BOOT: &str =
    "the boot id did not change: the machine did not lose power (or the agent was only restarted)";

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

/// Acknowledged writes (file) or commits (pgbench) of one verify report.
pub fn acks_of(r: &Value) -> u64 {
    r["acknowledged"]
        .as_u64()
        .or_else(|| r["acknowledged_commits"].as_u64())
        .unwrap_or(0)
}

/// The first drive whose unsafe-shutdown counter was read before the run and after
/// the cut and did not move: the drive did not lose power unexpectedly.
pub fn unsafe_shutdown_not_counted(r: &Value) -> Option<String> {
    let storage = &r["storage"];
    let before = storage["probe"]["evidence"]["disks"].as_array()?;
    let after = storage["evidence_after"]["disks"].as_array()?;
    before.iter().find_map(|b| {
        let disk = b["disk"].as_str()?;
        let n0 = b["unsafe_shutdowns"].as_u64()?;
        let a = after.iter().find(|a| a["disk"].as_str() == Some(disk))?;
        let n1 = a["unsafe_shutdowns"].as_u64()?;
        (n1 == n0).then(|| {
            format!("{disk}'s unsafe-shutdown counter did not move ({n0} → {n1}): the drive saw a clean shutdown or kept power")
        })
    })
}

/// The verdict of verified runs (their outcomes and parsed reports): failed when any
/// verify exited 1; the summaries joined; the findings summed; the largest lag of a
/// lost write.
pub fn verdict_of(reports: &[(&Outcome, Value)]) -> CutVerdict {
    let max_lag_secs = reports
        .iter()
        .filter_map(|(_, r)| {
            r["lost_lag_histogram"]
                .as_array()?
                .iter()
                .filter(|b| b["count"].as_u64().unwrap_or(0) > 0)
                .filter_map(|b| b["from_secs"].as_f64())
                .reduce(f64::max)
        })
        .reduce(f64::max);
    CutVerdict {
        failed: reports.iter().any(|(o, _)| o.exit == 1),
        summary: reports
            .iter()
            .map(|(_, r)| text(r, "summary"))
            .collect::<Vec<_>>()
            .join("; "),
        findings: reports
            .iter()
            .map(|(_, r)| r["findings_total"].as_u64().unwrap_or(0))
            .sum(),
        max_lag_secs,
        torn: reports
            .iter()
            .filter_map(|(_, r)| r["atomic"]["torn"].as_u64())
            .reduce(|a, b| a + b),
        in_flight: reports
            .iter()
            .filter_map(|(_, r)| r["atomic"]["in_flight"].as_u64())
            .reduce(|a, b| a + b),
    }
}

/// How many findings a report keeps when it is stored in a campaign.
pub const SLIM_FINDINGS: usize = 10;

/// A verify report (`plugpull verify --json`) as a campaign stores it: the whole
/// object but its `findings` list cut to the first [`SLIM_FINDINGS`] (the count stays
/// in `findings_total`; `plugpull verify --run R` prints them all again from the
/// ledger) and, of the stack under test's probe, only its cut-evidence snapshot,
/// warnings and configuration ([`crate::probe::Probe::configuration`]; the run's
/// manifest keeps the whole probe). A campaign of hundreds of
/// failed cuts so stays a few kilobytes per cut. Text that is not a JSON object is
/// kept as it is.
pub fn slim_report(json: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(json) else {
        return json.to_string();
    };
    if let Some(f) = v.get_mut("findings").and_then(Value::as_array_mut) {
        f.truncate(SLIM_FINDINGS);
    }
    if let Some(p) = v.pointer_mut("/storage/probe").filter(|p| p.is_object()) {
        let configuration = serde_json::from_value::<crate::probe::Probe>(p.clone())
            .map(|p| p.configuration())
            .ok();
        let keep = serde_json::json!({"evidence": p["evidence"], "warnings": p["warnings"],
            "configuration": configuration});
        *p = keep;
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_verdict_sums_the_torn_blocks_of_the_runs_that_expected_atomic_writes() {
        let o = |exit| Outcome {
            run: crate::RunId(1),
            exit,
            report_json: String::new(),
        };
        let (pass, fail) = (o(0), o(1));
        let atomic = |torn: u64| serde_json::json!({"summary": "s", "atomic": {"torn": torn}});
        let plain = serde_json::json!({"summary": "s", "atomic": null});
        let v = verdict_of(&[
            (&fail, atomic(2)),
            (&pass, plain.clone()),
            (&pass, atomic(1)),
        ]);
        assert_eq!((v.failed, v.torn), (true, Some(3)));
        assert_eq!(verdict_of(&[(&pass, plain)]).torn, None);
        assert_eq!(verdict_of(&[(&pass, atomic(0))]).torn, Some(0));
    }

    #[test]
    fn a_cut_verdict_sums_the_writes_in_flight_that_survived_in_each_run() {
        let pass = Outcome {
            run: crate::RunId(1),
            exit: 0,
            report_json: String::new(),
        };
        let atomic =
            |n: u64| serde_json::json!({"summary": "s", "atomic": {"torn": 0, "in_flight": n}});
        let plain = serde_json::json!({"summary": "s", "atomic": null});
        let v = verdict_of(&[
            (&pass, atomic(2)),
            (&pass, plain.clone()),
            (&pass, atomic(3)),
        ]);
        assert_eq!((v.torn, v.in_flight), (Some(0), Some(5)));
        assert_eq!(verdict_of(&[(&pass, plain)]).in_flight, None);
    }
}
