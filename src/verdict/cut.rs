//! Whether a run's cut could have failed: the evidence a PASS must carry
//! (`docs/procedure.md`, "What makes a cut count").
//!
//! A PASS says the storage kept every acknowledged write across a power loss. It is
//! worth that only when (1) there was a cut while the run wrote — not a run that
//! finished by itself and was read back, (2) writes were at risk at the cut — some
//! were acknowledged in the last second before it, and (3) the host's memory lost
//! power — the volatile canary's newest records, written with no durability call,
//! are gone from the medium (a clean shutdown or a `sync` keeps them). A drive-only
//! cut (a device error: the drive went away under a running host) needs no canary.
//! Without this evidence a PASS is NOT MEASURED; a FAIL stays a FAIL.
//!
//! The moment of the cut, on the acks' clock (ms after the run's start), is the
//! device error's, else the server loss a finished run recorded
//! ([`RunSummary::lost_ms`](crate::ledger::RunSummary::lost_ms)), else the last time
//! the listener heard from the agent: the newest batch's
//! [`sealed_ms`](crate::ledger::AckBatch::sealed_ms) (the agent seals one at least
//! every [`HEARTBEAT_MS`](crate::ledger::HEARTBEAT_MS) while it runs).

use crate::ledger::RunLedger;
use serde::{Deserialize, Serialize};

/// The short exposure window before the cut, ms.
pub const SHORT_WINDOW_MS: u64 = 100;
/// How many of the newest canary records the agent reported must all be on the
/// medium for the canary to have survived (16 records: about 320 ms of writing). A
/// device that keeps a random part of its cache may keep the newest one alone.
pub const CANARY_RECENT: u64 = 16;
/// The long exposure window before the cut, ms: a PASS with no acknowledgement in it
/// is NOT MEASURED (the workload was idle at the cut).
pub const LONG_WINDOW_MS: u64 = 1000;

/// How the moment of the cut is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CutKind {
    /// A write or durability call failed with a device error: the drive went away.
    DeviceError,
    /// A finished pgbench run lost its server (it crashed: the server lost power).
    ServerLost,
    /// The run ended without a word (the agent's host went down): the cut is the
    /// last time the listener heard from the agent.
    LastHeard,
    /// The witness stopped recording the run (its ledger append failed: its disk is
    /// full) and the writer stopped with it: no cut happened while it wrote.
    WitnessStopped,
    /// The run ended by itself (its duration, its count, an interrupt): no cut
    /// happened while it wrote.
    #[default]
    Finished,
}

/// What the canary tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum CanaryState {
    /// Its newest records are gone from the medium: the host's memory lost power.
    Lost,
    /// Every record the agent reported is on the medium: a clean shutdown or a sync.
    Survived,
    /// A drive-only cut (device error): the host kept running; no canary is needed.
    NotNeeded,
    /// The run has no canary, or it could not be read.
    #[default]
    NotMeasured,
}

/// What verify read of the run's canary on the medium (the client reads it; the
/// layout is in `docs/formats.md`, "Canary").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CanaryRead {
    /// The run has no canary, or its files could not be read: why.
    Missing(String),
    /// The record numbers of this run's canary found on the medium, ascending.
    Found {
        /// Its records there.
        seqs: Vec<u64>,
    },
}

/// The canary's part of the cut evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CanaryReport {
    /// What it tells.
    pub state: CanaryState,
    /// The newest record the agent reported written (its last batch's `canary`).
    pub issued: u64,
    /// The newest record found on the medium (`None`: not read).
    pub on_medium: Option<u64>,
    /// One sentence for the report.
    pub detail: String,
}

/// The cut evidence of one run, in every verify report (text, `--json`, HTML, JUnit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CutReport {
    /// How the moment of the cut is known.
    pub cut: CutKind,
    /// The cut, ms after the run's start on the acks' clock (`None`: the run
    /// finished, or the witness heard nothing after the start): the moment below, or
    /// earlier when a write was then in flight since before it (the storage hung
    /// first: the issue time of the oldest write in flight, as the newest batch
    /// sealed by then says).
    pub cut_ms: Option<u64>,
    /// How long before the moment the oldest write then in flight had been issued,
    /// ms, when the cut was moved back to it (`None`: not moved).
    pub moved_back_ms: Option<u64>,
    /// Acknowledgements (commits for pgbench) in the [`SHORT_WINDOW_MS`] before the cut.
    pub acks_last_100ms: u64,
    /// Acknowledgements in the [`LONG_WINDOW_MS`] before the cut.
    pub acks_last_1s: u64,
    /// How long before the cut the last acknowledgement was, ms (`None`: none).
    pub last_ack_before_cut_ms: Option<u64>,
    /// The canary.
    pub canary: CanaryReport,
    /// Whether the cut could have failed: a PASS without it is NOT MEASURED.
    pub measured: bool,
    /// Why not, one sentence (empty when measured).
    pub not_measured: String,
    /// The run finished and the host did not restart since: a read-back check of a
    /// run no power cut touched (`verify --read-back` accepts it as one).
    pub read_back: bool,
    /// The cut was a reset, not a power cut (`verify --reset`; [`after_reset`]): the
    /// disks kept power and with it their volatile write caches.
    #[serde(default)]
    pub disk_kept_power: bool,
}

impl CutReport {
    /// How the run ended, in a few words, for a report's head (`ended: …`): a
    /// finished pgbench run that lost its server did not finish by itself.
    pub fn ended(&self) -> &'static str {
        match self.cut {
            CutKind::Finished => "by itself (its duration or count, or an interrupt)",
            CutKind::ServerLost => "the server was lost (see cut)",
            CutKind::DeviceError => "a device error (see cut)",
            CutKind::WitnessStopped => "the witness stopped recording it (see cut)",
            CutKind::LastHeard => "no end recorded: cut short, or still running",
        }
    }

    /// The note after a report's acknowledged count when the ledger holds no end
    /// (`ended`: it holds a `Finished` or a device-error entry): why there is none.
    pub fn no_end_note(&self, ended: bool) -> &'static str {
        match (ended, self.cut) {
            (true, _) => "",
            (false, CutKind::WitnessStopped) => {
                " (no end recorded: the witness stopped recording the run, and the writer stopped with it)"
            }
            (false, _) => " (no end recorded: the run was cut short, or is still running)",
        }
    }

    /// The report's lines for the human text, e.g. `cut: the device error at 4.210 s;
    /// 37 acknowledgements in the last 100 ms, 402 in the last 1 s (the last 0.002 s
    /// before it)` and `canary: …`.
    pub fn lines(&self) -> Vec<String> {
        let when = |ms: u64| format!("{:.3} s", ms as f64 / 1000.0);
        let moment = self.cut_ms.map(|c| c + self.moved_back_ms.unwrap_or(0));
        let cut = match (self.cut, moment) {
            (CutKind::Finished, _) => "none while the run wrote: it finished by itself".to_string(),
            (CutKind::WitnessStopped, Some(ms)) => format!(
                "none while the run wrote: the witness stopped recording it at {} into the run, and the writer stopped with it",
                when(ms)
            ),
            (CutKind::WitnessStopped, None) => "none while the run wrote: the witness stopped recording it, and the writer stopped with it".to_string(),
            (CutKind::DeviceError, Some(ms)) => {
                format!("the device error at {} into the run", when(ms))
            }
            (CutKind::ServerLost, Some(ms)) => {
                format!("the server was lost at {} into the run", when(ms))
            }
            (CutKind::LastHeard, Some(ms)) => {
                format!(
                    "the witness last heard from the agent at {} into the run",
                    when(ms)
                )
            }
            (_, None) => "unknown: the witness heard nothing after the run's start".to_string(),
        };
        let cut = match (self.moved_back_ms, self.cut_ms) {
            (Some(back), Some(ms)) => format!(
                "{cut}; taken at {}: the oldest write then in flight had been issued {} before",
                when(ms),
                when(back)
            ),
            _ => cut,
        };
        let mut out = vec![format!("cut: {cut}")];
        if self.disk_kept_power {
            out.push(RESET_LINE.into());
        }
        let no_cut = matches!(self.cut, CutKind::Finished | CutKind::WitnessStopped);
        if !no_cut && self.cut_ms.is_some() {
            let last = match self.last_ack_before_cut_ms {
                Some(ms) => format!("the last {} before it", when(ms)),
                None => "none at all".to_string(),
            };
            out.push(format!(
                "exposure: {} acknowledged in the last 100 ms before the cut, {} in the last 1 s ({last})",
                self.acks_last_100ms, self.acks_last_1s
            ));
        }
        out.push(format!("canary: {}", self.canary.detail));
        out
    }
}

/// The cut evidence of run `l`: `same_boot` is whether the verifying host still runs
/// the boot the run started in (`None`: unknown), `canary` what was read of the
/// canary. Pure: the client reads the canary and the boot id.
pub fn judge_cut(l: &RunLedger, same_boot: Option<bool>, canary: CanaryRead) -> CutReport {
    let (cut, moment) = if let Some(d) = &l.device_error {
        (CutKind::DeviceError, Some(d.ms))
    } else if l.finished {
        match l.lost_ms {
            Some(ms) => (CutKind::ServerLost, Some(ms)),
            None => (CutKind::Finished, None),
        }
    } else {
        let heard = l.batches.last_sealed_ms.map(u64::from);
        match l.witness_stopped {
            Some(_) => (CutKind::WitnessStopped, heard),
            None => (CutKind::LastHeard, heard),
        }
    };
    // A write in flight since well before the moment (the newest batch sealed by
    // then says since when): the storage stopped answering at its issue at the latest.
    let stalled = moment.and_then(|at| {
        let (_, oldest_in_flight_ms) = l.batches.newest_sealed_by(at)?;
        // A write in flight for less than a heartbeat's interval is a write, not a
        // stall.
        oldest_in_flight_ms
            .map(u64::from)
            .filter(|&t| t + u64::from(crate::ledger::HEARTBEAT_MS) <= at)
            .map(|t| (t, at - t))
    });
    let mut r = CutReport {
        cut,
        cut_ms: stalled.map(|(t, _)| t).or(moment),
        moved_back_ms: stalled.map(|(_, d)| d),
        ..CutReport::default()
    };
    let cut_ms = r.cut_ms;
    if let Some(at) = cut_ms {
        for clock in [&l.clock, &l.pg_clock] {
            for (ms, n) in clock.down_from(at) {
                let before = at - u64::from(ms);
                if before >= LONG_WINDOW_MS {
                    break;
                }
                r.acks_last_100ms += if before < SHORT_WINDOW_MS { n } else { 0 };
                r.acks_last_1s += n;
            }
            if let Some((ms, _)) = clock.down_from(at).next() {
                let before = at - u64::from(ms);
                r.last_ack_before_cut_ms =
                    Some(r.last_ack_before_cut_ms.map_or(before, |b| b.min(before)));
            }
        }
    }
    let issued = l.batches.canary;
    r.canary = canary_report(cut, issued, canary);
    let full = l
        .device_error
        .as_ref()
        .is_some_and(|d| errno_of(&d.error) == Some(ENOSPC));
    let why = if let Some(e) = &l.witness_stopped {
        // The writer stops the run when the witness cannot record it: a later cut
        // finds the run over.
        Some(format!("the witness could not record the run's acknowledgements ({e}), so the writer stopped the run and no power was cut while it wrote: free space on the witness's ledger disk and run again"))
    } else if full && r.canary.state == CanaryState::NotNeeded {
        // A full filesystem or thin pool ends a run with a device error, but nothing
        // lost power: the storage kept running.
        Some("the run ended because the storage filled up (ENOSPC): no power was cut".into())
    } else {
        not_measured(&r, same_boot)
    };
    r.measured = why.is_none();
    r.read_back = cut == CutKind::Finished && same_boot == Some(true);
    r.not_measured = why.unwrap_or_default();
    r
}

/// The report's line for a reset ([`after_reset`]).
pub const RESET_LINE: &str = "power: a reset, not a power cut: the machine's memory was lost, the disk kept power and its volatile write cache";

/// Why a PASS across a reset is NOT MEASURED ([`after_reset`]).
pub const RESET_NOT_MEASURED: &str = "the cut was a reset, not a power cut: the disk kept power, so its volatile write cache was never at risk; nothing acknowledged was lost across the machine's crash, which tests the stack above the disk (kernel, filesystem, application), not the disk";

/// Marks `r` as the evidence of a reset (`qemu://DIR?cut=reset`'s QMP
/// `system_reset`, a reset button, a watchdog): the machine's memory was lost (the
/// canary says so), but the disk kept power. A PASS then cannot show that the disk
/// keeps what it acknowledged across a power loss: it is NOT MEASURED with
/// [`RESET_NOT_MEASURED`]; an evidence already not measured keeps its own reason (a
/// FAIL stays a FAIL: a loss is real however the machine went down).
pub fn after_reset(r: &mut CutReport) {
    r.disk_kept_power = true;
    if r.measured {
        r.measured = false;
        r.not_measured = RESET_NOT_MEASURED.into();
    }
}

/// ENOSPC on Linux (`errno.h`).
pub(crate) const ENOSPC: i32 = 28;

/// The errno a device error's message ends with: Rust's `std::io::Error` prints
/// an OS error as `… (os error N)`.
pub(crate) fn errno_of(msg: &str) -> Option<i32> {
    let (_, tail) = msg.rsplit_once("(os error ")?;
    tail.strip_suffix(')')?.parse().ok()
}

fn canary_report(cut: CutKind, issued: u64, read: CanaryRead) -> CanaryReport {
    let mut c = CanaryReport {
        issued,
        ..CanaryReport::default()
    };
    if cut == CutKind::DeviceError {
        c.state = CanaryState::NotNeeded;
        c.detail =
            "not needed: a drive-only cut (a device error while the host kept running)".into();
        if let CanaryRead::Found { seqs } = read {
            c.on_medium = Some(seqs.last().copied().unwrap_or(0));
        }
        return c;
    }
    match read {
        CanaryRead::Missing(why) => {
            c.state = CanaryState::NotMeasured;
            c.detail = format!("not measured: {why}");
        }
        CanaryRead::Found { seqs } => {
            let newest = seqs.last().copied().unwrap_or(0);
            c.on_medium = Some(newest);
            let first = issued.saturating_sub(CANARY_RECENT - 1).max(1);
            let missing: Vec<u64> = (first..=issued)
                .filter(|s| seqs.binary_search(s).is_err())
                .collect();
            if issued == 0 {
                c.state = CanaryState::NotMeasured;
                c.detail = format!(
                    "not measured: the agent reported no canary record written (found {newest} on the medium)"
                );
            } else if !missing.is_empty() {
                c.state = CanaryState::Lost;
                c.detail = format!(
                    "lost: {} of the newest {} records written with no durability call ({}..={issued}) are not on the medium (the newest there is {newest}): the host's memory lost power",
                    missing.len(),
                    issued + 1 - first,
                    first
                );
            } else {
                c.state = CanaryState::Survived;
                c.detail = format!(
                    "survived: records {first}..={issued}, the newest the agent reported written with no durability call, are all on the medium (the newest there is {newest}), as after a clean shutdown or a sync"
                );
            }
        }
    }
    c
}

/// Why a PASS of this cut would measure nothing, or `None` when it could have failed.
fn not_measured(r: &CutReport, same_boot: Option<bool>) -> Option<String> {
    if r.cut == CutKind::Finished {
        return Some(match same_boot {
            Some(true) => "read-back check: the run finished by itself and the host has not restarted since, so no power was cut while it wrote (verify --read-back accepts this as a read-back check)".into(),
            _ => "the run finished by itself before the cut, so nothing it wrote was in flight when the power went: cut while the run writes".into(),
        });
    }
    let Some(_) = r.cut_ms else {
        return Some("the witness heard nothing from the agent after the run's start, so the moment of the cut is unknown".into());
    };
    if r.acks_last_1s == 0 {
        let last = match r.last_ack_before_cut_ms {
            Some(ms) => format!("the last one {:.3} s before it", ms as f64 / 1000.0),
            None => "none at all".into(),
        };
        return Some(format!(
            "the workload was idle at the cut: nothing was acknowledged in the last second before it ({last})"
        ));
    }
    match r.canary.state {
        CanaryState::Lost | CanaryState::NotNeeded => None,
        CanaryState::Survived => Some(format!(
            "the canary survived the cut (its newest record, {}, is on the medium): the host's memory did not lose power — a clean shutdown, or a sync before the cut",
            r.canary.issued
        )),
        CanaryState::NotMeasured => Some(format!(
            "nothing shows the host lost power: canary {}",
            r.canary.detail
        )),
    }
}

#[cfg(test)]
mod tests;
