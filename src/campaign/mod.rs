//! Campaigns: many power cuts of one or more machines under load, each verified after
//! the machine came back, each judged valid, not measured or invalid
//! (`docs/campaign.md`).
//!
//! A campaign is its [`Definition`] plus an append-only list of [`Event`]s the
//! listener keeps durably (one `fdatasync` per event) in its data directory. Everything
//! else — which run the agent must verify, which cut comes next, the roll-up — is a
//! pure function of those two ([`state`]), so a controller killed at any moment
//! resumes from what was recorded, and nothing is counted twice. [`judge`] decides a
//! cut's validity and verdict from its facts.
//!
//! Who appends what:
//! * the listener: [`Event::Booted`] when an agent announces a boot id it has not
//!   seen for its host;
//! * the agent (`plugpull agent`): [`Event::Started`] (its runs for the next cut),
//!   [`Event::Verified`] (the verify reports of the runs the cut interrupted),
//!   [`Event::Refused`] (a workload its local configuration does not allow);
//! * the controller (`plugpull campaign run`): [`Event::Pulling`] just before the
//!   driver's "off", [`Event::Pulled`] once it knows whether the load dropped,
//!   [`Event::Restored`] just before the driver's "on", [`Event::Cut`] (the judged
//!   cut, with its [`evidence`]), [`Event::Paused`], and [`Event::Controller`]
//!   when it starts (only the newest controller cuts).

pub mod evidence;
pub mod history;
pub mod judge;
pub mod record;
pub mod rollup;
pub mod state;

use crate::RunId;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub use evidence::Evidence;
pub use judge::{judge, CutFacts};
pub use rollup::RollUp;
pub use state::{Campaign, HostView};

/// What `plugpull campaign create` records: the whole plan, fixed for the campaign's
/// life. Holds no secret (power URIs name secret *files*; `PowerUri::parse` refuses
/// passwords in URIs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    /// The campaign's name ([`check_name`]).
    pub name: String,
    /// The machines under test, each with its power driver.
    pub hosts: Vec<HostPlan>,
    /// The workloads every run starts, each the arguments of `plugpull write` as one
    /// shell-quoted line (`file --target /dev/nvme1n1 --size 8GiB --jobs 8`).
    pub workloads: Vec<String>,
    /// Cuts the controller makes per host, whatever their validity.
    pub cuts: u32,
    /// The delay between a run's start and its cut is drawn uniformly from this
    /// range, milliseconds (inclusive).
    pub cut_after_ms: (u64, u64),
    /// How long power stays off, milliseconds.
    pub off_ms: u64,
    /// How long a machine has to come back (a new boot id) after power is restored,
    /// milliseconds.
    pub boot_timeout_ms: u64,
    /// When the campaign was created, ms since the epoch (listener clock).
    pub created_unix_ms: u64,
}

/// One machine under test.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostPlan {
    /// Its host name, as its agent announces it.
    pub host: String,
    /// Its power-control URI (`docs/power.md`).
    pub power: String,
}

/// One durable fact of a campaign. Times are ms since the epoch; `listener clock`
/// where the listener stamps them, else the clock of whoever appended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// An agent announced a boot id not seen before for its host (listener clock).
    Booted {
        /// Host.
        host: String,
        /// Its boot id.
        boot_id: String,
        /// When.
        at_ms: u64,
    },
    /// The agent started the runs of its `number`-th run set (1, 2, …).
    Started {
        /// Host.
        host: String,
        /// 1 for the host's first run set, then 2, …
        number: u32,
        /// One run per workload, in the definition's order.
        runs: Vec<RunId>,
        /// The boot id the runs started under.
        boot_id: String,
        /// When.
        at_ms: u64,
    },
    /// The agent verified run set `number` after it ended (a cut, or the agent's
    /// restart).
    Verified {
        /// Host.
        host: String,
        /// The run set.
        number: u32,
        /// One outcome per run, in the run set's order.
        outcomes: Vec<Outcome>,
        /// The boot id of the agent that verified.
        boot_id: String,
        /// When.
        at_ms: u64,
    },
    /// The agent refused a workload its local configuration does not allow; the
    /// campaign cannot go on for this host.
    Refused {
        /// Host.
        host: String,
        /// Why, naming the workload and the configuration file.
        reason: String,
        /// When.
        at_ms: u64,
    },
    /// The agent's run set ended while the agent ran on (not by a cut of the
    /// machine: a write failed, or a run exited): the campaign cannot cut it.
    Ended {
        /// Host.
        host: String,
        /// The run set.
        number: u32,
        /// How each run ended (`plugpull write file exited 1: …`).
        detail: String,
        /// When (agent clock).
        at_ms: u64,
    },
    /// The controller is about to call the driver's "off" for cut `index`.
    Pulling(Pulling),
    /// What the controller saw right after "off" of cut `index`.
    Pulled {
        /// Host.
        host: String,
        /// The cut.
        index: u32,
        /// When "off" returned (listener clock: the controller asks it right after).
        off_at_ms: u64,
        /// The last acknowledgement batch the listener received from the cut's runs,
        /// ms since the epoch (listener clock); 0 when none.
        last_append_ms: u64,
        /// The driver's "off" failed: the error.
        off_error: Option<String>,
        /// The driver's status read after "off", when it has one (`on`/`off`).
        status_after: Option<String>,
    },
    /// The controller is about to call the driver's "on" for cut `index`: power has
    /// been off since its `Pulled` record's `off_at_ms`. A controller resuming the cut
    /// calls "on" again (every driver does it idempotently) and keeps this time.
    Restored {
        /// Host.
        host: String,
        /// The cut.
        index: u32,
        /// When (listener clock, as `Pulled`'s `off_at_ms`).
        on_at_ms: u64,
    },
    /// A judged cut.
    Cut(CutRecord),
    /// The campaign was cancelled (`plugpull campaign cancel`): no more cuts; an
    /// agent verifies its open run set and then waits.
    Cancelled {
        /// Why, as the user gave it.
        reason: String,
        /// When (the canceller's clock).
        at_ms: u64,
    },
    /// A controller (`campaign run`) started; from then on it alone may cut. An
    /// earlier controller still running sees it and stops.
    Controller {
        /// A random id the controller chose.
        id: u64,
        /// When (its clock).
        at_ms: u64,
    },
    /// The controller paused the campaign for this host (rerunning `campaign run`
    /// resumes it).
    Paused {
        /// Host.
        host: String,
        /// Why.
        reason: String,
        /// When.
        at_ms: u64,
    },
}

impl Event {
    /// The host the event is about (`""` for [`Event::Controller`], which is about
    /// the whole campaign).
    pub fn host(&self) -> &str {
        match self {
            Event::Controller { .. } | Event::Cancelled { .. } => "",
            Event::Booted { host, .. }
            | Event::Started { host, .. }
            | Event::Verified { host, .. }
            | Event::Refused { host, .. }
            | Event::Ended { host, .. }
            | Event::Pulled { host, .. }
            | Event::Restored { host, .. }
            | Event::Paused { host, .. } => host,
            Event::Pulling(p) => &p.host,
            Event::Cut(c) => &c.host,
        }
    }
}

/// The controller's record of a cut it is about to make.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pulling {
    /// Host.
    pub host: String,
    /// The cut, 1 for the host's first.
    pub index: u32,
    /// The run set the cut interrupts.
    pub number: u32,
    /// Its runs.
    pub runs: Vec<RunId>,
    /// The boot id before the cut.
    pub boot_id: String,
    /// The drawn delay: the runs had been running this long, ms.
    pub delay_ms: u64,
    /// The driver's scheme (`ipmi`, `simfs`, …).
    pub driver: String,
    /// What the driver cuts: `ac`, `dc`, `device`, `simulated`, `vm` or `reset`.
    pub kind: String,
    /// When (controller clock).
    pub at_ms: u64,
}

/// One verified run of a run set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The run.
    pub run: RunId,
    /// `plugpull verify`'s exit code: 0 passed, 1 failed, 2 could not verify.
    pub exit: u8,
    /// Its `--json` object (a [`crate::report::Report`]), or `{"ok":false,"error":…}`.
    pub report_json: String,
}

/// Whether a cut counts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Validity {
    /// A real power loss under load: counted in the statistics.
    Valid,
    /// Not a measurement (the reason says why); excluded from the statistics, counted
    /// and shown.
    NotMeasured(String),
    /// The cut went wrong (the reason says how); excluded, counted and shown.
    Invalid(String),
}

impl Validity {
    /// `valid`, `not measured` or `invalid`.
    pub fn name(&self) -> &'static str {
        match self {
            Validity::Valid => "valid",
            Validity::NotMeasured(_) => "not measured",
            Validity::Invalid(_) => "invalid",
        }
    }

    /// The reason, empty for a valid cut.
    pub fn reason(&self) -> &str {
        match self {
            Validity::Valid => "",
            Validity::NotMeasured(r) | Validity::Invalid(r) => r,
        }
    }
}

/// A judged cut.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CutRecord {
    /// Host.
    pub host: String,
    /// 1 for the host's first cut.
    pub index: u32,
    /// When "off" was called, ms since the epoch (controller clock).
    pub at_ms: u64,
    /// The driver's scheme.
    pub driver: String,
    /// `ac`, `dc`, `device`, `simulated`, `vm` or `reset`.
    pub kind: String,
    /// How long the runs had run when they were cut, ms.
    pub delay_ms: u64,
    /// The run set, 0 when none was running.
    pub number: u32,
    /// Its runs.
    pub runs: Vec<RunId>,
    /// Acknowledged writes and commits of those runs (from the verify reports; 0 when
    /// not verified).
    pub acknowledged: u64,
    /// Valid, not measured or invalid.
    pub validity: Validity,
    /// The verdict, for a verified cut.
    pub verdict: Option<CutVerdict>,
    /// What the validity rests on (`None`: a cut judged without it, by hand or by an
    /// earlier version).
    #[serde(default)]
    pub evidence: Option<Box<Evidence>>,
}

/// The verdict of a verified cut: failed when any run's verify failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CutVerdict {
    /// True when any acknowledged write or commit was lost or damaged.
    pub failed: bool,
    /// The runs' summary lines (`PASS: …` / `FAIL: …`), joined with `; `.
    pub summary: String,
    /// Findings summed over the runs: failed blocks of a file run, lost or damaged
    /// commits of a pgbench run (each report's `findings_total`).
    pub findings: u64,
    /// The largest ack-to-cut lag of a lost write, seconds: the lower edge of the
    /// highest non-empty lag-histogram bucket (`None` when nothing was lost).
    pub max_lag_secs: Option<f64>,
    /// Blocks torn by a write in flight, summed over the runs that expected atomic
    /// writes (`--expect-atomic`, `docs/atomic.md`; each report's `atomic.torn`);
    /// `None` when no run did.
    #[serde(default)]
    pub torn: Option<u64>,
    /// Writes in flight at the cut, summed over the same runs (each report's
    /// `atomic.in_flight`: writes whose durability call had not returned and that
    /// reached the medium whole or torn); `None` when no run expected atomic writes.
    #[serde(default)]
    pub in_flight: Option<u64>,
}

/// What the listener tells an agent to do next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Instruction {
    /// Verify these runs (run set `number` of `campaign`), then report.
    Verify {
        /// The campaign.
        campaign: String,
        /// The run set.
        number: u32,
        /// Its runs, in workload order.
        runs: Vec<RunId>,
        /// The workloads, in the same order (the agent waits for their targets to
        /// come back after a drive-only cut).
        workloads: Vec<String>,
    },
    /// Start run set `number`: one `plugpull write` per workload.
    Run {
        /// The campaign.
        campaign: String,
        /// The run set.
        number: u32,
        /// The workloads (`plugpull write` arguments).
        workloads: Vec<String>,
    },
    /// Nothing to do now; ask again later.
    Wait {
        /// Why (for the agent's log).
        reason: String,
    },
}

/// What the listener knows of a run without reading its ledger, for the controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The run.
    pub run: RunId,
    /// Whether the listener knows it.
    pub known: bool,
    /// Listener clock at its creation, ms since the epoch.
    pub created_ms: u64,
    /// Listener clock at its last append (acknowledgements or its end), ms since the
    /// epoch.
    pub last_append_ms: u64,
    /// Listener clock when its last acknowledgement batch became durable, ms since the
    /// epoch (what "the agent kept talking" is judged by: a device-error or finish
    /// entry after a cut is no acknowledgement).
    pub last_ack_ms: u64,
    /// Listener clock now, ms since the epoch (so the controller compares the
    /// listener's times with the listener's clock).
    pub now_ms: u64,
    /// Whether it ended (finished, device error, invalidated, damaged).
    pub ended: bool,
    /// Whether an agent connection holds it.
    pub held: bool,
}

/// Checks a campaign name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.`
/// (it names a file in the listener's data directory).
///
/// Errors: the name, and what is wrong with it.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "campaign name {name:?}: use 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.`"
        ))
    }
}

/// Parses `--cut-after`: `20s..90s` (two durations, the first not above the second)
/// or one duration (`30s`: always that delay). Returns milliseconds.
///
/// Errors: a part that is not a duration, or `A..B` with A > B.
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let ms = |p: &str| -> Result<u64, String> {
        crate::units::parse_duration(p.trim()).map(|d: Duration| d.as_millis() as u64)
    };
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (ms(a)?, ms(b)?),
        None => {
            let v = ms(s)?;
            (v, v)
        }
    };
    if lo > hi {
        return Err(format!(
            "range {s:?}: the first duration is longer than the second"
        ));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests;
