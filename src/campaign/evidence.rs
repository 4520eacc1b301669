//! The evidence a cut's validity rests on, kept with the judged cut
//! ([`super::CutRecord::evidence`]) and shown with it in every output of a campaign
//! (`docs/campaign.md`, "What valid requires"): the boot ids before and after the cut,
//! how long power stayed off, how long before the driver's "off" the runs last
//! acknowledged, the driver's status after "off", and per run its verify report's cut
//! evidence (`docs/formats.md`, "Cut evidence": the moment of the cut, the exposure
//! before it, the canary) and the drives' power-loss counters of its storage section.
//!
//! Built from the same facts the judge reads ([`super::CutFacts`]), so what is shown is
//! what was judged.

use super::{CutFacts, Outcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a cut's validity rests on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The boot id the cut's runs started under (`""`: unknown).
    pub boot_before: String,
    /// The boot id of the agent that verified them (`""`: not verified, or unknown).
    pub boot_after: String,
    /// How long power stayed off, ms: from the driver's "off" returning to the call of
    /// its "on", both on the listener's clock (`None`: the "off" failed).
    pub off_ms: Option<u64>,
    /// How long before the driver's "off" returned the listener received the runs'
    /// last acknowledgement, ms; negative when it came after (`None`: none came).
    pub last_ack_before_off_ms: Option<i64>,
    /// The driver's status read after "off" (`on`, `off`; `None`: it has none, or
    /// the "off" failed).
    pub driver_status: Option<String>,
    /// Per verified run, its verify report's evidence; empty when not verified.
    pub runs: Vec<RunEvidence>,
}

/// One verified run's evidence, from its stored verify report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunEvidence {
    /// The run, 16 hex digits.
    pub run: String,
    /// The report's `cut` object (`None`: the report has none, e.g. verify could not
    /// run).
    pub cut: Option<RunCut>,
    /// The drives' power-loss counters, at the run's start and at its verify (the
    /// report's `storage.probe.evidence` and `storage.evidence_after`), by disk.
    pub drives: Vec<DriveCounters>,
}

/// A verify report's `cut` object, without its sentences.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCut {
    /// How the moment of the cut is known: `device_error`, `server_lost`,
    /// `last_heard`, `witness_stopped` or `finished`.
    pub cut: String,
    /// The moment, ms after the run's start on the acks' clock.
    pub cut_ms: Option<u64>,
    /// Acknowledgements in the 100 ms before it.
    pub acks_last_100ms: u64,
    /// Acknowledgements in the 1 s before it.
    pub acks_last_1s: u64,
    /// How long before it the last acknowledgement was, ms.
    pub last_ack_before_cut_ms: Option<u64>,
    /// The volatile canary.
    pub canary: Canary,
    /// Whether the cut could have failed.
    pub measured: bool,
}

/// A verify report's `cut.canary`, without its sentence.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Canary {
    /// `lost`, `survived`, `not_needed` or `not_measured`.
    pub state: String,
    /// The newest record the agent reported written.
    pub issued: u64,
    /// The newest record found on the medium.
    pub on_medium: Option<u64>,
}

/// One drive's power-loss counters before the run and after the cut.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DriveCounters {
    /// Kernel name, e.g. `nvme0n1`.
    pub disk: String,
    /// Its unsafe shutdowns (NVMe "Unsafe Shutdowns", ATA attribute 174) at the run's
    /// start.
    pub unsafe_shutdowns_before: Option<u64>,
    /// The same at the verify.
    pub unsafe_shutdowns_after: Option<u64>,
    /// Power cycles at the run's start.
    pub power_cycles_before: Option<u64>,
    /// Power cycles at the verify.
    pub power_cycles_after: Option<u64>,
}

/// The evidence of the cut `f` describes: `on_at_ms` is when the controller called
/// the driver's "on" (listener clock; `None`: not yet), `reports` the verified runs'
/// outcomes with their parsed reports.
pub fn of(f: &CutFacts, reports: &[(&Outcome, Value)]) -> Evidence {
    let off_ok = f.off_error.is_none();
    Evidence {
        boot_before: f.pulling.boot_id.clone(),
        boot_after: f.verified.map(|(_, b)| b.to_string()).unwrap_or_default(),
        off_ms: f
            .on_at_ms
            .filter(|_| off_ok)
            .map(|on| on.saturating_sub(f.off_at_ms)),
        last_ack_before_off_ms: (f.last_ack_ms > 0)
            .then(|| f.off_at_ms as i64 - f.last_ack_ms as i64),
        driver_status: f.status_after.filter(|_| off_ok).map(str::to_string),
        runs: reports
            .iter()
            .map(|(o, r)| RunEvidence {
                run: o.run.to_string(),
                cut: run_cut(&r["cut"]),
                drives: drives(&r["storage"]),
            })
            .collect(),
    }
}

/// A report's `cut` object, when it has one.
fn run_cut(c: &Value) -> Option<RunCut> {
    let n = |k: &str| c[k].as_u64();
    Some(RunCut {
        cut: c["cut"].as_str()?.to_string(),
        cut_ms: n("cut_ms"),
        acks_last_100ms: n("acks_last_100ms").unwrap_or(0),
        acks_last_1s: n("acks_last_1s").unwrap_or(0),
        last_ack_before_cut_ms: n("last_ack_before_cut_ms"),
        canary: Canary {
            state: c["canary"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            issued: c["canary"]["issued"].as_u64().unwrap_or(0),
            on_medium: c["canary"]["on_medium"].as_u64(),
        },
        measured: c["measured"].as_bool().unwrap_or(false),
    })
}

/// The drives of a report's storage section: every disk of the snapshot at the run's
/// start, then those only in the one verify took, each with both snapshots' counters.
fn drives(storage: &Value) -> Vec<DriveCounters> {
    let empty = Vec::new();
    let before = storage["probe"]["evidence"]["disks"]
        .as_array()
        .unwrap_or(&empty);
    let after = storage["evidence_after"]["disks"]
        .as_array()
        .unwrap_or(&empty);
    let find = |list: &[Value], disk: &str| {
        list.iter()
            .find(|d| d["disk"].as_str() == Some(disk))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut names: Vec<&str> = Vec::new();
    for d in before.iter().chain(after) {
        if let Some(n) = d["disk"].as_str().filter(|n| !names.contains(n)) {
            names.push(n);
        }
    }
    names
        .into_iter()
        .map(|disk| {
            let (b, a) = (find(before, disk), find(after, disk));
            DriveCounters {
                disk: disk.to_string(),
                unsafe_shutdowns_before: b["unsafe_shutdowns"].as_u64(),
                unsafe_shutdowns_after: a["unsafe_shutdowns"].as_u64(),
                power_cycles_before: b["power_cycles"].as_u64(),
                power_cycles_after: a["power_cycles"].as_u64(),
            }
        })
        .collect()
}

/// A boot id as the line shows it: its first 8 characters (a UUID's first group) and
/// `…`, or `?` when unknown.
fn short_boot(b: &str) -> String {
    match b.char_indices().nth(8) {
        _ if b.is_empty() => "?".into(),
        Some((i, _)) => format!("{}…", &b[..i]),
        None => b.to_string(),
    }
}

/// Seconds with `digits` decimals.
fn secs(ms: u64, digits: usize) -> String {
    format!("{:.digits$} s", ms as f64 / 1000.0)
}

impl Evidence {
    /// The cut's evidence as one line: `evidence: boot 1a2b3c4d… → 9f3c5e6a…, off
    /// 6.0 s, last ack 0.04 s before off, driver: off, canary lost, 402 acks in the
    /// last 1 s, no drive counters`.
    pub fn line(&self) -> String {
        let after = if self.boot_after.is_empty() && self.runs.is_empty() {
            "not verified".to_string()
        } else {
            short_boot(&self.boot_after)
        };
        let mut parts = vec![format!("boot {} → {after}", short_boot(&self.boot_before))];
        parts.push(match self.off_ms {
            Some(ms) => format!("off {}", secs(ms, 1)),
            None => "off time not measured".into(),
        });
        parts.push(match self.last_ack_before_off_ms {
            Some(ms) if ms >= 0 => format!("last ack {} before off", secs(ms as u64, 2)),
            Some(ms) => format!("last ack {} after off", secs(ms.unsigned_abs(), 2)),
            None => "no ack".into(),
        });
        parts.push(format!(
            "driver: {}",
            self.driver_status.as_deref().unwrap_or("no status")
        ));
        parts.extend(self.runs_part());
        format!("evidence: {}", parts.join(", "))
    }

    /// The runs' part of [`Evidence::line`]: canary, exposure, drives.
    fn runs_part(&self) -> Vec<String> {
        let cuts: Vec<&RunCut> = self.runs.iter().filter_map(|r| r.cut.as_ref()).collect();
        if cuts.is_empty() {
            return vec![if self.runs.is_empty() {
                "no verify report".into()
            } else {
                "no cut evidence in the verify reports".into()
            }];
        }
        let mut states: Vec<String> = Vec::new();
        for c in &cuts {
            let s = c.canary.state.replace('_', " ");
            if !states.contains(&s) {
                states.push(s);
            }
        }
        let acks: u64 = cuts.iter().map(|c| c.acks_last_1s).sum();
        let mut out = vec![
            format!("canary {}", states.join("/")),
            format!("{acks} acks in the last 1 s"),
        ];
        let count = |b: Option<u64>, a: Option<u64>| {
            let v = |x: Option<u64>| x.map_or("?".to_string(), |n| n.to_string());
            format!("{} → {}", v(b), v(a))
        };
        let drives: Vec<String> = self
            .runs
            .iter()
            .flat_map(|r| &r.drives)
            .filter(|d| {
                d.unsafe_shutdowns_before.is_some()
                    || d.unsafe_shutdowns_after.is_some()
                    || d.power_cycles_before.is_some()
                    || d.power_cycles_after.is_some()
            })
            .map(|d| {
                format!(
                    "{} unsafe shutdowns {} / power cycles {}",
                    d.disk,
                    count(d.unsafe_shutdowns_before, d.unsafe_shutdowns_after),
                    count(d.power_cycles_before, d.power_cycles_after)
                )
            })
            .collect();
        if drives.is_empty() {
            out.push("no drive counters".into());
        } else {
            let mut seen: Vec<String> = Vec::new();
            for d in drives {
                if !seen.contains(&d) {
                    seen.push(d);
                }
            }
            out.extend(seen);
        }
        out
    }

    /// The evidence as `(name, value)` pairs, for JUnit properties: `boot_before`,
    /// `boot_after`, `off_ms`, `last_ack_before_off_ms`, `driver_status`, then per run
    /// `run RUN cut`, `… cut_ms`, `… acks_last_100ms`, `… acks_last_1s`,
    /// `… last_ack_before_cut_ms`, `… canary`, `… canary_issued`,
    /// `… canary_on_medium`, `… measured` and per drive `run RUN drive DISK
    /// unsafe_shutdowns` and `… power_cycles` (`before → after`). An unknown value
    /// is left out.
    pub fn properties(&self) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = vec![
            ("boot_before".into(), self.boot_before.clone()),
            ("boot_after".into(), self.boot_after.clone()),
        ];
        p.retain(|(_, v)| !v.is_empty());
        let mut opt = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                p.push((k.to_string(), v));
            }
        };
        opt("off_ms", self.off_ms.map(|v| v.to_string()));
        opt(
            "last_ack_before_off_ms",
            self.last_ack_before_off_ms.map(|v| v.to_string()),
        );
        opt("driver_status", self.driver_status.clone());
        for r in &self.runs {
            let k = |name: &str| format!("run {} {name}", r.run);
            if let Some(c) = &r.cut {
                let n = |v: Option<u64>| v.map(|v| v.to_string());
                opt(&k("cut"), Some(c.cut.clone()));
                opt(&k("cut_ms"), n(c.cut_ms));
                opt(&k("acks_last_100ms"), n(Some(c.acks_last_100ms)));
                opt(&k("acks_last_1s"), n(Some(c.acks_last_1s)));
                opt(&k("last_ack_before_cut_ms"), n(c.last_ack_before_cut_ms));
                opt(&k("canary"), Some(c.canary.state.clone()));
                opt(&k("canary_issued"), n(Some(c.canary.issued)));
                opt(&k("canary_on_medium"), n(c.canary.on_medium));
                opt(&k("measured"), Some(c.measured.to_string()));
            }
            for d in &r.drives {
                let v = |x: Option<u64>| x.map_or("?".to_string(), |n| n.to_string());
                let both = |b, a| Some(format!("{} → {}", v(b), v(a)));
                let name = |what: &str| k(&format!("drive {} {what}", d.disk));
                opt(
                    &name("unsafe_shutdowns"),
                    both(d.unsafe_shutdowns_before, d.unsafe_shutdowns_after),
                );
                opt(
                    &name("power_cycles"),
                    both(d.power_cycles_before, d.power_cycles_after),
                );
            }
        }
        p
    }
}

#[cfg(test)]
mod tests;
