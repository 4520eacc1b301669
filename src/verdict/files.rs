//! The rules of the files (namespace) workload: what survived, name by name.
//!
//! Every worker follows a deterministic [`Schedule`](schedule::Schedule) (see
//! [`schedule`]), so the verifier replays it from the manifest's seed: the ledger's
//! fold ([`FilesAcks`]) checks each ack against its step as the ledger streams and
//! keeps per worker and per name only what the rules below need, and
//! [`judge_folded`] replays the schedule once more, folding each step into its name
//! (`files/replay.rs`). For each worker `j`, `K_j` is its last step
//! the ledger holds (its acks are a prefix of its schedule: the reporter sends them in
//! order and the ledger is gap-free); every acknowledgement must match its scheduled
//! step (name, exists, size, content seq), else the run cannot be judged. For file `f`,
//! `S₀` is its state after its worker's steps up to `K_j` (the *promised* state: which
//! blocks it has and which step wrote each); the worker's next `window` steps may have
//! happened before the cut without being confirmed (*in flight*, as a write newer than
//! its block's acknowledged one in the file workload).
//!
//! What the walk found for `f` is **intact** when it is `S₀` exactly, or what one
//! in-flight step of `f` may leave from the state before it: a create or append
//! partly done (the new blocks hold the step's records or zeros, the size is between
//! the old and the new), a truncate done or not (the old state, or the target size with
//! the blocks below it unchanged: no size between), a replace before or after its
//! rename (with `presync` skipped, after it the new blocks may be partly written), an
//! unlink done or not. `NAME.tmp` may exist only while a replace of `f` is in flight.
//! Otherwise, first rule that applies, against `S₀`:
//!
//! 1. `S₀` exists, the name is gone → **lost_file**;
//! 2. `S₀` does not exist (acknowledged unlink, or never acknowledged), the name is
//!    there → **resurrected**;
//! 3. the file is empty, `S₀` is not → **zero_length**;
//! 4. a block is no record of this file at this place (bad CRC, foreign bytes, another
//!    run's or another file's record) → **corrupt**;
//! 5. the file is exactly an earlier acknowledged state of `f` that an acknowledged
//!    replace superseded → **stale_rename** (old content under the new name);
//! 6. the size differs from `S₀`'s → **wrong_size**;
//! 7. some blocks hold `S₀`'s records and some an older seq or zeros → **torn**; none
//!    does → **stale**;
//! 8. the file is `S₀` but `NAME.tmp` is there too (only one may be) → **stale_rename**.
//!
//! A finding is *unpromised* (reported, counted apart, not a failure) when the
//! durability calls the run skips (`--unsafe-steps`) may have left what was found: an
//! entry of the name since its last returned directory fsync, holding the last content
//! an fsync of that file covered (any part of a replace's records while no fsync
//! covered them), and `NAME.tmp` only after a replace whose directory fsync was skipped
//! (see `files/promise.rs`). A loss a returned call covered fails the run.
//! Every finding names its evidence: the name, its last acknowledged step (seq and
//! operation), the expected and found existence, size and newest seq.

mod blocks;
mod promise;
mod replay;
pub use crate::schedule;

use super::Counts;
use crate::ledger::{FilesAck, FilesAcks};
use crate::RunId;
use blocks::{decode, describe, is_state, newest, Block};
use replay::{replay, Name, View};
use schedule::{file_name, Unsafe, BLOCK};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

crate::verdict_kind! {
    /// The verdict on one name.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
    #[serde(rename_all = "snake_case")]
    pub enum FilesVerdict {
        /// The promised state, or one an in-flight step may leave.
        Intact = "intact",
        /// An acknowledged file is gone.
        LostFile = "lost_file" fails,
        /// An acknowledged unlink (or a never acknowledged create) is undone: the name exists.
        Resurrected = "resurrected" fails,
        /// The size differs from the promised one.
        WrongSize = "wrong_size" fails,
        /// The file is empty where it should hold data.
        ZeroLength = "zero_length" fails,
        /// Old content under the new name after an acknowledged replace, or `NAME.tmp` left.
        StaleRename = "stale_rename" fails,
        /// Some blocks hold the promised records, others older ones or zeros.
        Torn = "torn" fails,
        /// A block is no record of this file at this place.
        Corrupt = "corrupt" fails,
        /// No block holds the promised records (older ones or zeros), size right.
        Stale = "stale" fails,
    }
}

/// Names per verdict (each checked name once), with the unpromised ones apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesCounts {
    /// Names per verdict (flattened into the JSON object beside `unpromised`).
    #[serde(flatten)]
    pub by_verdict: Counts<FilesVerdict>,
    /// Names with a non-intact verdict whose loss was not promised (`--unsafe-steps`).
    pub unpromised: u64,
}

impl FilesCounts {
    /// Zero for every verdict.
    pub fn new() -> Self {
        FilesCounts::default()
    }

    /// The count of `v`.
    pub fn get(&self, v: FilesVerdict) -> u64 {
        self.by_verdict.get(v)
    }

    /// Names that failed: non-intact and promised.
    pub fn failures(&self) -> u64 {
        self.by_verdict.failures() - self.unpromised
    }
}

/// One name as the directory walk found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its size, bytes.
    pub size: u64,
    /// Its first bytes (all of them up to [`READ_CAP`]).
    pub data: Vec<u8>,
}

/// Most bytes of one file the walk reads: more than any file of the run holds.
pub const READ_CAP: u64 = 4 * schedule::MAX_BLOCKS * BLOCK;

/// What the walk of the directory found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Each file of the run present, by number.
    pub names: BTreeMap<u32, Found>,
    /// Each `NAME.tmp` present, by file number.
    pub tmps: BTreeMap<u32, Found>,
    /// Other entries of the directory (not the run's), by name.
    pub foreign: Vec<String>,
}

/// What the verdict needs of the run besides its acks.
#[derive(Clone, Debug)]
pub struct FilesRun {
    /// The run.
    pub run: RunId,
    /// Workers.
    pub jobs: u32,
    /// File names.
    pub files: u32,
    /// The schedule's seed.
    pub seed: u64,
    /// Skipped durability calls.
    pub unsafe_steps: Unsafe,
    /// Steps per worker that may have happened after its last one in the ledger
    /// (0 when the run finished normally).
    pub window: u64,
}

/// One finding: a name whose state is not one the ledger allows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesFinding {
    /// The name (`w0-3`).
    pub name: String,
    /// The verdict.
    pub verdict: FilesVerdict,
    /// The seq of the name's last acknowledged step (0: none).
    pub step_seq: u64,
    /// That step's operation (`""`: none).
    pub step: String,
    /// Whether what was found breaks a promise: false when the durability calls the run
    /// skips (`--unsafe-steps`) may have left it (module doc).
    pub promised: bool,
    /// Whether the name should exist.
    pub expected_exists: bool,
    /// Its promised size, bytes.
    pub expected_size: u64,
    /// The newest seq among its promised records (0: none).
    pub expected_seq: u64,
    /// Whether it exists.
    pub found_exists: bool,
    /// Its size found, bytes.
    pub found_size: u64,
    /// The newest seq among its valid records found (0: none).
    pub found_seq: u64,
    /// Seconds between the last acknowledged step of the name and the last of the run.
    pub acked_secs_before_end: Option<f64>,
    /// The evidence in words.
    pub evidence: String,
}

/// The outcome of judging every name.
#[derive(Clone, Debug, PartialEq)]
pub struct FilesOutcome {
    /// Names per verdict.
    pub counts: FilesCounts,
    /// Names judged (with a step or found on disk).
    pub checked: u64,
    /// Names in a state only an in-flight step explains.
    pub in_flight_survived: u64,
    /// Every non-intact name, by file number.
    pub findings: Vec<FilesFinding>,
    /// Acknowledged steps in the ledger, and how many of them were unpromised.
    pub acknowledged: (u64, u64),
    /// Entries of the directory that are not the run's.
    pub foreign: Vec<String>,
}

/// Judges every name of the run from its acknowledged steps and what the walk found:
/// [`judge_folded`] of `acks` folded in their order.
///
/// Errors: the acks do not match the run's schedule (the ledger is not this
/// manifest's, or the agent is another version).
pub fn judge(r: &FilesRun, acks: &[FilesAck], walk: &Walk) -> Result<FilesOutcome, String> {
    let mut fold = FilesAcks::new(r.seed, r.jobs, r.files, r.unsafe_steps);
    for a in acks {
        fold.add(a);
    }
    judge_folded(r, &fold, walk)
}

/// Judges every name of the run from its acknowledgements as `fold` folded them and
/// what the walk found, replaying each worker's schedule once more (its memory is per
/// name, not per step).
///
/// Errors: the acks do not match the run's schedule (the ledger is not this
/// manifest's, or the agent is another version); `fold` follows another schedule.
pub fn judge_folded(r: &FilesRun, fold: &FilesAcks, walk: &Walk) -> Result<FilesOutcome, String> {
    if fold.seq_zero {
        return Err("an acknowledged step has seq 0".into());
    }
    if fold.schedule() != (r.seed, r.jobs, r.files, r.unsafe_steps) {
        return Err("the acknowledgements were folded under another schedule (seed, workers, names or skipped calls) than the run's manifest states".into());
    }
    let blocks: Vec<Option<Vec<Block>>> = (0..r.files)
        .map(|f| walk.names.get(&f).map(|fd| decode(r.run, f, fd)))
        .collect();
    let views: Vec<View> = (0..r.files)
        .map(|f| {
            walk.names
                .get(&f)
                .map(|fd| fd.size)
                .zip(blocks[f as usize].as_deref())
        })
        .collect();
    let (names, unreached) = replay(r, fold, &views)?;
    let beyond = match (fold.beyond, unreached) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(seq) = beyond {
        return Err(format!(
            "acknowledged step seq {seq} is beyond every worker's schedule"
        ));
    }
    let mut counts = FilesCounts::new();
    let (mut checked, mut in_flight) = (0, 0);
    let mut findings = Vec::new();
    for (f, n) in (0..r.files).zip(&names) {
        let found = walk.names.get(&f);
        let tmp = walk.tmps.contains_key(&f);
        if !n.stepped && found.is_none() && !tmp {
            continue;
        }
        checked += 1;
        let (verdict, later, finding) = judge_name(r, f, n, views[f as usize], tmp, fold.end_ms);
        *counts.by_verdict.get_mut(verdict) += 1;
        in_flight += later as u64;
        if let Some(fi) = finding {
            counts.unpromised += !fi.promised as u64;
            findings.push(fi);
        }
    }
    Ok(FilesOutcome {
        counts,
        checked,
        in_flight_survived: in_flight,
        findings,
        acknowledged: fold.acknowledged(),
        foreign: walk.foreign.clone(),
    })
}

/// One name: its verdict, whether only an in-flight step explains it, and the finding.
fn judge_name(
    r: &FilesRun,
    f: u32,
    n: &Name,
    view: View,
    tmp: bool,
    end_ms: u32,
) -> (FilesVerdict, bool, Option<FilesFinding>) {
    let s0 = n.s0.as_deref();
    let exact = match view {
        None => s0.is_none(),
        Some((size, b)) => is_state(size, b, s0),
    };
    let by_later = n.later.as_ref().is_some_and(|l| l.fits);
    let tmp_ok = !tmp || n.later.as_ref().is_some_and(|l| l.replace);
    if (exact || by_later) && tmp_ok {
        return (FilesVerdict::Intact, !exact, None);
    }
    let verdict = classify(n.superseded, s0, view, exact);
    // `S₀` itself is among the states `unsynced` explains.
    let excused = (by_later || n.unsynced.explains(view)) && (tmp_ok || n.unsynced.explains_tmp());
    let last = n.last;
    let mut evidence = match view {
        None => "the name does not exist".to_string(),
        Some((size, b)) => format!("{size} bytes: {}", describe(b)),
    };
    if tmp && !tmp_ok {
        evidence.push_str(&format!(
            "; {}.tmp exists, and no replace of it was in flight",
            file_name(f, r.jobs)
        ));
    }
    let finding = FilesFinding {
        name: file_name(f, r.jobs),
        verdict,
        step_seq: last.map_or(0, |s| s.seq),
        step: last.map_or("", |s| s.op.name()).to_string(),
        promised: !excused,
        expected_exists: s0.is_some(),
        expected_size: s0.map_or(0, |s| s.len() as u64 * BLOCK),
        expected_seq: s0.and_then(|s| s.iter().max().copied()).unwrap_or(0),
        found_exists: view.is_some(),
        found_size: view.map_or(0, |(size, _)| size),
        found_seq: view.map_or(0, |(_, b)| newest(b)),
        acked_secs_before_end: n.ms.map(|(_, ms)| (end_ms - ms) as f64 / 1000.0),
        evidence,
    };
    (verdict, false, Some(finding))
}

/// Rules 1–8 of the module doc for a name whose state no step explains;
/// `superseded`: an acknowledged replace came after an acknowledged state equal to
/// the one found (rule 5).
fn classify(superseded: bool, s0: Option<&[u64]>, view: View, exact: bool) -> FilesVerdict {
    let (exp, (size, b)) = match (s0, view) {
        (Some(_), None) => return FilesVerdict::LostFile,
        (None, Some(_)) => return FilesVerdict::Resurrected,
        (None, None) => return FilesVerdict::StaleRename,
        (Some(e), Some(v)) => (e, v),
    };
    if exact {
        return FilesVerdict::StaleRename;
    }
    if size == 0 && !exp.is_empty() {
        return FilesVerdict::ZeroLength;
    }
    if b.iter().any(|x| matches!(x, Block::Damaged(_))) {
        return FilesVerdict::Corrupt;
    }
    if superseded {
        return FilesVerdict::StaleRename;
    }
    if size != exp.len() as u64 * BLOCK {
        return FilesVerdict::WrongSize;
    }
    let good = b
        .iter()
        .zip(exp)
        .filter(|(x, &e)| **x == Block::Seq(e))
        .count();
    if good == 0 {
        FilesVerdict::Stale
    } else {
        FilesVerdict::Torn
    }
}

#[cfg(test)]
mod tests;
