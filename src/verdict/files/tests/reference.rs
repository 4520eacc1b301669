//! The verdict as it was computed before the acks were folded: every ack kept, every
//! step of every name collected with a copy of its state. The fold's tests compare
//! [`judge`](super::judge) with it.

use crate::ledger::FilesAck;
use crate::verdict::files::blocks::{decode, describe, fits, is_state, newest, Block};
use crate::verdict::files::schedule::{file_name, Op, Schedule, Step, Unsafe, BLOCK, MAX_BLOCKS};
use crate::verdict::files::{
    FilesCounts, FilesFinding, FilesOutcome, FilesRun, FilesVerdict, Found, Walk,
};
use std::collections::BTreeMap;

/// The history of one name from the replayed schedule.
#[derive(Default)]
struct History {
    /// Acknowledged steps (up to the worker's `K`), each with the state after it.
    acked: Vec<(Step, Option<Vec<u64>>)>,
    /// Steps that may have been in flight, each with the state after it.
    later: Vec<(Step, Option<Vec<u64>>)>,
    /// Time of the last acknowledged step, ms after the run's start.
    ms: Option<u32>,
}

/// Replays every worker's schedule over its acknowledged steps and the `window`
/// after them, checking each ack against its step.
///
/// Errors: an ack names a seq, file or state its schedule does not.
fn replay(r: &FilesRun, acks: &[FilesAck]) -> Result<BTreeMap<u32, History>, String> {
    let jobs = u64::from(r.jobs.max(1));
    let mut by_seq: BTreeMap<u64, &FilesAck> = BTreeMap::new();
    let mut last_k = vec![None::<u64>; jobs as usize];
    for a in acks {
        if a.seq == 0 {
            return Err("an acknowledged step has seq 0".into());
        }
        let (j, k) = (((a.seq - 1) % jobs) as usize, (a.seq - 1) / jobs);
        last_k[j] = last_k[j].max(Some(k));
        by_seq.insert(a.seq, a);
    }
    let mut out: BTreeMap<u32, History> = BTreeMap::new();
    for (j, last) in last_k.iter().enumerate() {
        let mut s = Schedule::new(r.seed, r.jobs, j as u32, r.files, r.unsafe_steps);
        let end = last.map_or(0, |k| k + 1) + r.window;
        for k in 0..end {
            let Some(st) = s.next_step() else { break };
            let state = s.state(st.file).map(<[u64]>::to_vec);
            let h = out.entry(st.file).or_default();
            if last.is_some_and(|l| k <= l) {
                if let Some(a) = by_seq.get(&st.seq) {
                    check_ack(a, &st, state.as_deref())?;
                    h.ms = Some(a.ms);
                }
                h.acked.push((st, state));
            } else {
                h.later.push((st, state));
            }
        }
    }
    if let Some(a) = by_seq.values().find(|a| {
        !out.values()
            .any(|h| h.acked.iter().any(|(s, _)| s.seq == a.seq))
    }) {
        return Err(format!(
            "acknowledged step seq {} is beyond every worker's schedule",
            a.seq
        ));
    }
    Ok(out)
}

/// Checks that ack `a` states what its scheduled step `st` leaves (`state`).
fn check_ack(a: &FilesAck, st: &Step, state: Option<&[u64]>) -> Result<(), String> {
    let size = state.map_or(0, |s| s.len() as u64 * BLOCK);
    let top = state.and_then(|s| s.iter().max().copied()).unwrap_or(0);
    if a.file != st.file
        || a.exists != state.is_some()
        || a.size != size
        || a.content_seq != top
        || a.promised != st.promised
    {
        return Err(format!(
            "acknowledged step seq {} (file {}, exists {}, {} bytes, content seq {}) is not its scheduled step ({} of file {}: exists {}, {size} bytes, content seq {top}): the ledger and the manifest's schedule disagree",
            a.seq, a.file, a.exists, a.size, a.content_seq, st.op.name(), st.file, state.is_some()
        ));
    }
    Ok(())
}

/// The verdict as `judge` gave it when it kept every ack and every step: the reference
/// the fold must match.
///
/// Errors: the acks do not match the run's schedule (the ledger is not this
/// manifest's, or the agent is another version).
pub(super) fn reference(
    r: &FilesRun,
    acks: &[FilesAck],
    walk: &Walk,
) -> Result<FilesOutcome, String> {
    let hist = replay(r, acks)?;
    let end_ms = acks.iter().map(|a| a.ms).max().unwrap_or(0);
    let mut counts = FilesCounts::new();
    let (mut checked, mut in_flight) = (0, 0);
    let mut findings = Vec::new();
    let empty = History::default();
    for f in 0..r.files {
        let h = hist.get(&f).unwrap_or(&empty);
        let found = walk.names.get(&f);
        if h.acked.is_empty()
            && h.later.is_empty()
            && found.is_none()
            && !walk.tmps.contains_key(&f)
        {
            continue;
        }
        checked += 1;
        let (verdict, later, finding) =
            judge_name(r, f, h, found, walk.tmps.contains_key(&f), end_ms);
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
        acknowledged: (
            acks.len() as u64,
            acks.iter().filter(|a| !a.promised).count() as u64,
        ),
        foreign: walk.foreign.clone(),
    })
}

/// One name: its verdict, whether only an in-flight step explains it, and the finding.
fn judge_name(
    r: &FilesRun,
    f: u32,
    h: &History,
    found: Option<&Found>,
    tmp: bool,
    end_ms: u32,
) -> (FilesVerdict, bool, Option<FilesFinding>) {
    let s0 = h.acked.last().and_then(|(_, s)| s.as_deref());
    let blocks = found.map(|fd| decode(r.run, f, fd));
    let view = found.zip(blocks.as_deref()).map(|(fd, b)| (fd.size, b));
    let exact = match view {
        None => s0.is_none(),
        Some((size, b)) => is_state(size, b, s0),
    };
    let mut prev = s0;
    let mut by_later = false;
    for (st, after) in &h.later {
        by_later |= fits(prev, st, r.unsafe_steps, view);
        prev = after.as_deref();
    }
    let tmp_ok = !tmp || h.later.iter().any(|(s, _)| s.op == Op::Replace);
    if (exact || by_later) && tmp_ok {
        return (FilesVerdict::Intact, !exact, None);
    }
    let verdict = classify(h, s0, view, exact);
    let unsynced = RefUnsynced::of(r.unsafe_steps, &h.acked);
    // `S₀` itself is among the states `unsynced` explains.
    let excused = (by_later || unsynced.explains(view)) && (tmp_ok || unsynced.explains_tmp());
    let last = h.acked.last().map(|(s, _)| *s);
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
        found_exists: found.is_some(),
        found_size: found.map_or(0, |fd| fd.size),
        found_seq: blocks.as_deref().map_or(0, newest),
        acked_secs_before_end: h.ms.map(|ms| (end_ms - ms) as f64 / 1000.0),
        evidence,
    };
    (verdict, false, Some(finding))
}

/// Rules 1–8 of the module doc for a name whose state no step explains.
fn classify(
    h: &History,
    s0: Option<&[u64]>,
    view: Option<(u64, &[Block])>,
    exact: bool,
) -> FilesVerdict {
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
    let earlier = h
        .acked
        .iter()
        .position(|(_, s)| is_state(size, b, s.as_deref()));
    if let Some(i) = earlier {
        if h.acked[i + 1..].iter().any(|(s, _)| s.op == Op::Replace) {
            return FilesVerdict::StaleRename;
        }
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

/// One file the name led to: the step that made it, its last acknowledged blocks, and
/// whether a returned fsync covers them.
struct Version {
    seq: u64,
    blocks: Vec<u64>,
    synced: bool,
}

/// The states of one name that its acknowledged steps' skipped calls leave possible.
struct RefUnsynced {
    versions: Vec<Version>,
    /// The entries since the last durable one: `None` = no name, `Some(i)` =
    /// `versions[i]`.
    entries: Vec<Option<usize>>,
    /// Whether a replace whose directory fsync was skipped may have left `NAME.tmp`.
    tmp: bool,
}

impl RefUnsynced {
    /// Follows the name's acknowledged steps (each with the blocks it left) under the
    /// run's skipped calls `u`.
    fn of(u: Unsafe, acked: &[(Step, Option<Vec<u64>>)]) -> Self {
        let mut n = RefUnsynced {
            versions: Vec::new(),
            entries: vec![None],
            tmp: false,
        };
        for (st, after) in acked {
            let blocks = after.clone().unwrap_or_default();
            let entry = match st.op {
                Op::Create | Op::Replace => {
                    n.versions.push(Version {
                        seq: st.seq,
                        blocks,
                        synced: st.op == Op::Create || !u.presync,
                    });
                    Some(n.versions.len() - 1)
                }
                Op::Append | Op::Truncate => {
                    if let Some(Some(i)) = n.entries.last() {
                        n.versions[*i] = Version {
                            blocks,
                            synced: true,
                            ..n.versions[*i]
                        };
                    }
                    continue;
                }
                Op::Unlink => None,
            };
            if u.dirsync {
                n.entries.push(entry);
                n.tmp |= st.op == Op::Replace;
            } else {
                n.entries = vec![entry];
                n.tmp = false;
            }
        }
        n
    }

    /// Whether the name as found (`None`: no name) is a state the skipped calls may
    /// have left.
    fn explains(&self, found: Option<(u64, &[Block])>) -> bool {
        self.entries.iter().any(|e| match (e, found) {
            (None, None) => true,
            (Some(i), Some((size, blocks))) => {
                let v = &self.versions[*i];
                if v.synced {
                    is_state(size, blocks, Some(&v.blocks))
                } else {
                    size <= MAX_BLOCKS * BLOCK
                        && blocks.iter().all(|b| {
                            *b == Block::Zeros || matches!(b, Block::Seq(s) if *s >= v.seq)
                        })
                }
            }
            _ => false,
        })
    }

    /// Whether the skipped calls may have left `NAME.tmp`.
    fn explains_tmp(&self) -> bool {
        self.tmp
    }
}
