//! `campaign status` (and the end of `campaign run`): one line per cut and one of its
//! evidence, the roll-up, `--json` (the whole campaign as one object) and `--junit
//! FILE` (one test case per cut: failure = a failed verdict, skipped = not measured,
//! error = invalid; the evidence as its properties).

use super::ShowArgs;
use crate::Error;
use plugpull::campaign::{Campaign, CutRecord, RollUp, Validity};
use plugpull::stats;
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

/// Prints `c` as `args` asks and writes the JUnit file when asked.
///
/// Errors: the JUnit file cannot be written.
pub fn show(c: &Campaign, args: &ShowArgs) -> Result<(), Error> {
    if args.json {
        println!("{}", json(c));
    } else {
        print!("{}", text(c));
    }
    if let Some(path) = &args.junit {
        let xml = junit(c)?;
        std::fs::write(path, xml)
            .map_err(|e| Error::Msg(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// The first line of `campaign run`: the campaign's shape and where this run starts
/// (`recorded` cuts were judged before it; `done`: nothing is left to cut). The cuts
/// this run makes are counted by the roll-up at its end, not here.
pub fn run_heading(name: &str, hosts: usize, cuts: u32, recorded: usize, done: bool) -> String {
    let start = match (recorded, done) {
        (_, true) => format!("{recorded} cut(s) recorded, done"),
        (0, false) => "no cut recorded yet, starting".to_string(),
        (_, false) => format!("{recorded} cut(s) recorded, resuming"),
    };
    format!("campaign {name}: {hosts} host(s), {cuts} cuts each; {start}")
}

/// The header of the cut lines.
pub const HEADER: &str =
    "  cut  host             time (UTC)           driver (kind)      delay  acknowledged  validity      verdict";

/// One cut as a line under [`HEADER`], with the reason or verdict summary after it.
pub fn cut_line(c: &CutRecord) -> String {
    let verdict = match (&c.validity, &c.verdict) {
        (Validity::Valid, Some(v)) if v.failed => {
            let lag = v
                .max_lag_secs
                .map(|l| {
                    format!(", the oldest lost write acknowledged at least {l} s before the cut")
                })
                .unwrap_or_default();
            format!("{} findings{lag}: {}", v.findings, v.summary)
        }
        (Validity::Valid, Some(v)) => v.summary.clone(),
        _ => format!("- ({})", c.validity.reason()),
    };
    // A cut by hand (`verify --history`) has no driver and no drawn delay.
    let (driver, delay) = if c.kind == "hand" {
        ("by hand".to_string(), "-".to_string())
    } else {
        (
            format!("{} ({})", c.driver, c.kind),
            format!("{:.1}s", c.delay_ms as f64 / 1000.0),
        )
    };
    format!(
        "{:>5}  {:<16} {:<20} {:<16} {:>7} {:>13}  {:<13} {verdict}",
        c.index,
        c.host,
        utc_secs(c.at_ms),
        driver,
        delay,
        c.acknowledged,
        c.validity.name(),
    )
}

/// The line under a cut's line: what its validity rests on, indented
/// ([`plugpull::campaign::Evidence::line`]), or that it was not recorded.
pub fn evidence_line(c: &CutRecord) -> String {
    let e = match &c.evidence {
        Some(e) => e.line(),
        None => "evidence: not recorded (judged without it, by an earlier plugpull)".into(),
    };
    format!("       {e}")
}

/// `2026-12-01T02:16:08Z`: [`plugpull::units::utc`] without the milliseconds.
pub fn utc_secs(ms: u64) -> String {
    plugpull::units::utc(ms - ms % 1000).replace(".000Z", "Z")
}

/// The whole text output.
pub fn text(c: &Campaign) -> String {
    let d = &c.definition;
    let mut s = format!(
        "campaign {}: {} host(s), {} cuts each; workloads: {}\n{HEADER}\n",
        d.name,
        d.hosts.len(),
        d.cuts,
        d.workloads.join(" | ")
    );
    for cut in c.cuts() {
        s.push_str(&cut_line(&cut));
        s.push('\n');
        s.push_str(&evidence_line(&cut));
        s.push('\n');
    }
    if let Some(why) = c.cancelled() {
        s.push_str(&format!("  cancelled: {why}\n"));
    }
    for h in &d.hosts {
        let v = c.host(&h.host);
        if let Some(p) = &v.pulling {
            s.push_str(&format!(
                "  cut {} of {} in progress (power cut at {})\n",
                p.index,
                h.host,
                plugpull::units::utc(p.at_ms)
            ));
        }
        if let Some(r) = &v.refused {
            s.push_str(&format!("  {}: the agent refused: {r}\n", h.host));
        }
        if let Some(r) = &v.paused {
            s.push_str(&format!("  {}: paused: {r}\n", h.host));
        }
    }
    s.push_str(&super::summary::text(c));
    s
}

/// The confidence level of the bounds `status` prints (95 %).
pub const CONFIDENCE: f64 = stats::DEFAULT_CONFIDENCE;

/// The campaign as one JSON object: definition, cuts, per-host state, roll-up.
pub fn json(c: &Campaign) -> serde_json::Value {
    let hosts: Vec<serde_json::Value> = c
        .definition
        .hosts
        .iter()
        .map(|h| {
            let v = c.host(&h.host);
            serde_json::json!({
                "host": h.host, "power": h.power,
                "cuts_judged": v.cuts.len(), "cut_in_progress": v.pulling.map(|p| p.index),
                "boot_id": v.boots.last().map(|b| b.0.clone()),
                "refused": v.refused, "paused": v.paused,
                "roll_up": RollUp::of(&v.cuts),
                "bound": RollUp::of(&v.cuts).bound(CONFIDENCE),
            })
        })
        .collect();
    let cuts: Vec<serde_json::Value> = c
        .cuts()
        .iter()
        .map(|k| {
            serde_json::json!({
                "host": k.host, "index": k.index, "at_unix_ms": k.at_ms, "driver": k.driver,
                "kind": k.kind, "delay_secs": k.delay_ms as f64 / 1000.0,
                "runs": k.runs.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
                "acknowledged": k.acknowledged, "validity": k.validity.name(),
                "reason": k.validity.reason(), "verdict": k.verdict,
                "evidence": k.evidence,
            })
        })
        .collect();
    let configurations: Vec<serde_json::Value> = c
        .configurations()
        .into_iter()
        .map(|(config, hosts)| {
            let r = c.roll_up_of(&hosts);
            serde_json::json!({"configuration": config, "hosts": hosts, "bound": r.bound(CONFIDENCE), "roll_up": r})
        })
        .collect();
    let pooled = super::summary::pooled(c);
    serde_json::json!({
        "name": c.definition.name, "definition": c.definition, "done": c.done(),
        "configurations": configurations,
        "cancelled": c.cancelled(),
        "hosts": hosts, "cuts": cuts, "roll_up": c.roll_up(),
        "pooled": pooled,
        "bound": pooled.as_ref().and_then(|_| c.roll_up().bound(CONFIDENCE)),
        "plan_rate_shown": stats::rate_shown(c.definition.cuts * c.definition.hosts.len() as u32, CONFIDENCE).ok(),
    })
}

/// The JUnit XML: one suite per configuration ([`Campaign::configurations`]: the
/// hosts whose verified probes show the same stack; a host not verified yet has a
/// suite of its own), one case per cut, named `cut N` with the host as its class.
///
/// Errors: the XML cannot be serialized.
pub fn junit(c: &Campaign) -> Result<String, Error> {
    let mut report = Report::new(format!("plugpull campaign {}", c.definition.name));
    let mut groups: Vec<(String, Vec<String>)> = c
        .configurations()
        .into_iter()
        .map(|(config, hosts)| (format!("configuration {config}"), hosts))
        .collect();
    for h in &c.definition.hosts {
        if !groups.iter().any(|g| g.1.contains(&h.host)) {
            groups.push((h.host.clone(), vec![h.host.clone()]));
        }
    }
    for (name, hosts) in groups {
        let mut suite = TestSuite::new(name);
        for k in hosts.iter().flat_map(|h| c.host(h).cuts) {
            let mut case = TestCase::new(format!("cut {}", k.index), junit_status(&k));
            case.set_classname(k.host.clone());
            for (name, value) in k.evidence.iter().flat_map(|e| e.properties()) {
                case.add_property(Property::new(name, value));
            }
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    // A finished campaign that measured nothing is never green: one error says so.
    let roll = c.roll_up();
    if c.done() && roll.valid == 0 {
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
        status.set_message(super::run::nothing_measured(&roll));
        let mut suite = TestSuite::new(format!("campaign {}", c.definition.name));
        suite.add_test_case(TestCase::new("nothing measured", status));
        report.add_test_suite(suite);
    }
    report
        .to_string()
        .map_err(|e| Error::Msg(format!("JUnit report: {e}")))
}

/// A cut's JUnit status: failure = a failed verdict, skipped = not measured, error =
/// invalid.
fn junit_status(k: &CutRecord) -> TestCaseStatus {
    match (&k.validity, &k.verdict) {
        (Validity::Valid, Some(v)) if v.failed => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(v.summary.clone());
            s
        }
        (Validity::Valid, _) => TestCaseStatus::success(),
        (Validity::NotMeasured(r), _) => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(format!("not measured: {r}"));
            s
        }
        (Validity::Invalid(r), _) => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
            s.set_message(format!("invalid: {r}"));
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_heading_says_where_the_run_starts() {
        assert_eq!(
            run_heading("r", 1, 2, 0, false),
            "campaign r: 1 host(s), 2 cuts each; no cut recorded yet, starting"
        );
        assert_eq!(
            run_heading("k", 1, 5, 2, false),
            "campaign k: 1 host(s), 5 cuts each; 2 cut(s) recorded, resuming"
        );
        assert_eq!(
            run_heading("h", 1, 10, 10, true),
            "campaign h: 1 host(s), 10 cuts each; 10 cut(s) recorded, done"
        );
    }
}
