//! The "stack under test" section every verify report carries (`docs/probe.md`): the
//! probe the agent recorded when the run started, the flushes each leaf disk counted
//! per acknowledged write during the run, the warnings both raise, and the cut
//! evidence (the counters a power loss moves, run start against verify time).
//!
//! Warnings never change a verdict: they say what a PASS is worth.

use crate::ledger::{Batches, FlushSample, Storage};
use crate::probe::evidence::{compare, Snapshot};
use crate::probe::flush::WriteCache;
use crate::probe::{Probe, Warning, WarningId};
use serde::{Deserialize, Serialize};

/// The storage section of a report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageReport {
    /// The probe recorded at the run's start; `None` when the storage was not
    /// probed (`not_probed` says why).
    pub probe: Option<Probe>,
    /// Why there is no probe; empty when there is one.
    pub not_probed: String,
    /// Flushes each leaf disk counted during the run, in the manifest's disk order.
    pub flushes: Vec<RunFlushes>,
    /// Why flushes per acknowledged write could not be counted; empty when they were.
    pub flushes_note: String,
    /// The probe's warnings at the run's start, then the run's own
    /// (`flushes-not-reaching-device` over the run's acknowledged writes).
    pub warnings: Vec<Warning>,
    /// What changed between the cut-evidence snapshot at the run's start and the
    /// one verify took, one line each ([`compare`]); or why there is no comparison.
    pub cut_evidence: Vec<String>,
    /// The snapshot verify took; `None` when it took none.
    pub evidence_after: Option<Snapshot>,
}

/// One leaf disk's flushes over a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunFlushes {
    /// Kernel name, e.g. `vda`.
    pub disk: String,
    /// Flush requests the disk completed between the run's start and its last flush
    /// sample (the whole disk's: other I/O on it counts too); `None` when a counter
    /// was not read or went down.
    pub flushes: Option<u64>,
    /// Acknowledgements (writes or commits) handed over up to that sample.
    pub acknowledged: u64,
    /// `flushes / acknowledged`; `None` when either is unknown or zero acks.
    pub per_ack: Option<f64>,
}

/// The flushes per acknowledgement of every disk of `storage` over `batches` (in
/// ledger order) and the run's end sample `end` (taken after its last ack): per
/// disk, from `storage.flushes_start` to the latest sample in which its counter is
/// known and not below the start (a disk that went away at a device error keeps
/// its count up to then), counting the acks up to that sample. The note is empty,
/// or says why nothing could be counted (`probe`: the stored probe, read once by
/// the caller).
pub fn run_flushes(
    storage: &Storage,
    probe: Option<&Probe>,
    batches: &Batches,
    end: Option<&FlushSample>,
) -> (Vec<RunFlushes>, String) {
    if storage.disks.is_empty() {
        let why = match probe {
            Some(p) if !p.storage_is_here() => {
                "the run's storage was not found on its host: flushes not counted"
            }
            _ => "no leaf disk under the target: flushes not counted",
        };
        return (Vec::new(), why.into());
    }
    let acked = batches.acks;
    let mut samples: Vec<(&FlushSample, u64)> =
        batches.samples.iter().map(|(s, n)| (s, *n)).collect();
    if let Some(e) = end {
        samples.push((e, acked));
    }
    if samples.is_empty() {
        return (
            Vec::new(),
            "no flush sample after the run's start in the ledger (the run acknowledged nothing): flushes not counted".into(),
        );
    }
    let get = |v: &[Option<u64>], i: usize| v.get(i).copied().flatten();
    let flushes = storage
        .disks
        .iter()
        .enumerate()
        .map(|(i, disk)| {
            let start = get(&storage.flushes_start.counts, i);
            let latest = samples.iter().rev().find_map(|(s, acked)| {
                let (a, b) = (start?, get(&s.counts, i)?);
                // A counter that went backwards (a disk replaced or reset) says nothing.
                b.checked_sub(a).map(|f| (f, *acked))
            });
            let acknowledged = latest.map_or(acked, |(_, n)| n);
            let flushes = latest.map(|(f, _)| f);
            RunFlushes {
                disk: disk.clone(),
                flushes,
                acknowledged,
                per_ack: flushes
                    .filter(|_| acknowledged > 0)
                    .map(|f| f as f64 / acknowledged as f64),
            }
        })
        .collect();
    (flushes, String::new())
}

/// Below this many flushes per acknowledgement a single writer's run warns: each of
/// its `fsync`/`fdatasync` calls, one after another, must send the disk a flush, so
/// fewer than half means most did not (other I/O on the disk only adds flushes).
pub const SERIAL_MIN_FLUSHES_PER_ACK: f64 = 0.5;

/// The run's flush rule, for a disk whose write cache is "write back" when every ack
/// waited for a call that sends a flush (`uses_flush`: `fsync`/`fdatasync`; not
/// `O_DSYNC` writes, which a device with FUA completes without one): it completed
/// no flush over `acknowledged ≥ 1` acks; or, with one writer (`serial`), fewer
/// than [`SERIAL_MIN_FLUSHES_PER_ACK`] per ack (concurrent writers and group commit
/// may share one flush, so for them only zero proves it). `what` names the
/// acknowledgements (`acknowledged writes`, `acknowledged commits`).
pub fn run_warnings(
    probe: &Probe,
    flushes: &[RunFlushes],
    uses_flush: bool,
    serial: bool,
    what: &str,
) -> Vec<Warning> {
    if !uses_flush {
        return Vec::new();
    }
    let write_back = |disk: &str| {
        probe
            .leaves
            .iter()
            .any(|l| l.name == disk && l.write_cache == Some(WriteCache::WriteBack))
    };
    let mut out = Vec::new();
    for f in flushes
        .iter()
        .filter(|f| f.acknowledged > 0 && write_back(&f.disk))
    {
        let (Some(n), Some(per)) = (f.flushes, f.per_ack) else {
            continue;
        };
        let message = if n == 0 {
            format!(
                "{}: write cache \"write back\" but 0 flushes counted over the run's {} {what}",
                f.disk, f.acknowledged
            )
        } else if serial && per < SERIAL_MIN_FLUSHES_PER_ACK {
            format!(
                "{}: write cache \"write back\" but only {n} flushes counted over the run's {} {what} ({per:.2} per acknowledgement; one writer's every call should send one)",
                f.disk, f.acknowledged
            )
        } else {
            continue;
        };
        out.push(Warning {
            id: WarningId::FlushesNotReachingDevice,
            message,
        });
    }
    out
}

/// What the section needs to know of a run besides its storage record.
#[derive(Clone, Copy, Debug)]
pub struct RunFacts<'a> {
    /// The run's ack batches, folded.
    pub batches: &'a Batches,
    /// The flush counters at the run's end ([`crate::ledger::RunSummary::flushes`]
    /// or [`crate::ledger::DeviceError::flushes`]).
    pub end: Option<&'a FlushSample>,
    /// Whether a device error ended the run (the host may have stayed up: a
    /// drive-only cut).
    pub device_error: bool,
    /// Whether every ack waited for a flushing call ([`run_warnings`]).
    pub uses_flush: bool,
    /// Whether one writer made the acks one after another ([`run_warnings`]).
    pub serial: bool,
    /// What the run acknowledges (`acknowledged writes`, `acknowledged commits`).
    pub what: &'a str,
}

/// The boot-id line of a run a device error ended on a host that stayed up.
pub const DEVICE_ERROR_SAME_BOOT: &str = "same boot id: the host stayed up and the run ended by a device error (a drive-only cut?) \u{2014} the drive's counters below say whether it lost power";

impl StorageReport {
    /// The section for a run recorded with `storage`: `run` is how the run went;
    /// `after` is the cut-evidence snapshot taken at verify time, or why none was
    /// taken (the client's `storage::cut_evidence_now`).
    ///
    /// A stored probe this version cannot read is reported as not probed, naming why.
    pub fn build(
        storage: &Storage,
        run: &RunFacts,
        after: Result<Snapshot, String>,
    ) -> StorageReport {
        let RunFacts {
            batches,
            end,
            device_error,
            uses_flush,
            serial,
            what,
        } = *run;
        let (probe, not_probed) = match storage.probe() {
            Ok(Some(p)) => (Some(p), String::new()),
            Ok(None) => (None, storage.not_probed.clone()),
            Err(e) => (None, e),
        };
        let (flushes, flushes_note) = run_flushes(storage, probe.as_ref(), batches, end);
        let mut warnings = Vec::new();
        let mut cut_evidence = Vec::new();
        if let Some(p) = &probe {
            warnings.extend(p.warnings.iter().cloned());
            warnings.extend(run_warnings(p, &flushes, uses_flush, serial, what));
            match (&p.evidence, &after) {
                (_, Err(why)) => cut_evidence.push(why.clone()),
                (Some(before), Ok(a)) => {
                    cut_evidence = compare(before, a);
                    if device_error && before.boot_id == a.boot_id && !a.boot_id.is_empty() {
                        cut_evidence[0] = DEVICE_ERROR_SAME_BOOT.into();
                    }
                }
                (None, Ok(_)) => {
                    cut_evidence.push("no cut-evidence snapshot at the run's start".into())
                }
            }
        }
        StorageReport {
            probe,
            not_probed,
            flushes,
            flushes_note,
            warnings,
            cut_evidence,
            evidence_after: after.ok(),
        }
    }
}

#[cfg(test)]
mod tests;
