//! A files run's acknowledgements folded as the ledger streams ([`FilesAcks`]): each ack
//! is checked against its scheduled step as it arrives, then dropped; the fold keeps
//! only what the verdict needs of them.
//!
//! Every state is the [`Schedule`]'s, so the verdict needs of the acks only: each
//! worker's last acknowledged step `K_j`, each name's last acknowledged step and its
//! time, the totals (acks, unpromised acks, the latest time), and whether every ack
//! states what its step leaves. The fold holds one schedule cursor per worker and one
//! entry per name; beyond that it holds only
//!
//! * per worker, what each step the cursor passed before its ack arrived must state
//!   (an ack out of order; the entry goes when the ack comes, unless that ack was
//!   already kept for the replay: then it stays, counted by [`FilesAcks::awaited`]
//!   until the end), and
//! * the acks to check again when the schedule is replayed: each later copy of a seq
//!   (the last copy counts) and each ack that disagrees with its step,
//!
//! so its memory grows with the names and workers, and with reordered, repeated or
//! wrong acks, never with the length of the run. An ack more than [`MAX_AHEAD`] steps
//! past its worker's cursor, or past [`MAX_AWAITED`] steps awaiting theirs, and every
//! ack of a manifest no writer makes (no worker, more than [`MAX_JOBS`] or
//! [`MAX_FILES`]) is kept to be checked in the replay instead, so that no ledger makes
//! the fold step through a schedule far beyond its acks or hold more than that. The
//! replay steps a worker at most [`MAX_REPLAY_AHEAD`] past where the fold stopped; an
//! ack beyond is reported as beyond the schedule. A manifest no writer makes is replayed
//! as its acks say, as before the fold: a wild seq there still makes verify step far.

use super::FilesAck;
use crate::schedule::{Op, Schedule, Step, Unsafe, BLOCK, MAX_FILES, MAX_JOBS};
use std::collections::BTreeMap;

/// Most steps an ack may lie past its worker's cursor to be checked as it comes.
pub const MAX_AHEAD: u64 = 1 << 16;
/// Most steps of one worker awaiting their ack (passed over by a later one).
pub const MAX_AWAITED: usize = 1 << 16;
/// Most steps the replay takes past where the fold stopped stepping a worker: an ack
/// beyond (a seq no writer reaches) is reported as beyond the schedule.
pub const MAX_REPLAY_AHEAD: u64 = 1 << 24;

/// What the ack of one step must state: the step and the state it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expect {
    op: Op,
    file: u32,
    exists: bool,
    size: u64,
    top: u64,
    promised: bool,
}

impl Expect {
    /// What step `st`, leaving its file as `state` (`None`: no name), must be acked as.
    pub(crate) fn of(st: &Step, state: Option<&[u64]>) -> Expect {
        Expect {
            op: st.op,
            file: st.file,
            exists: state.is_some(),
            size: state.map_or(0, |s| s.len() as u64 * BLOCK),
            top: state.and_then(|s| s.iter().max().copied()).unwrap_or(0),
            promised: st.promised,
        }
    }

    /// Checks that ack `a` states what its step leaves.
    ///
    /// Errors: the field that differs, in words.
    pub(crate) fn check(&self, a: &FilesAck) -> Result<(), String> {
        if a.file != self.file
            || a.exists != self.exists
            || a.size != self.size
            || a.content_seq != self.top
            || a.promised != self.promised
        {
            return Err(format!(
                "acknowledged step seq {} (file {}, exists {}, {} bytes, content seq {}) is not its scheduled step ({} of file {}: exists {}, {} bytes, content seq {}): the ledger and the manifest's schedule disagree",
                a.seq, a.file, a.exists, a.size, a.content_seq, self.op.name(), self.file,
                self.exists, self.size, self.top
            ));
        }
        Ok(())
    }
}

/// One worker's acks so far.
#[derive(Clone, Debug)]
pub(crate) struct Worker {
    /// Its schedule, advanced to the highest step acknowledged so far.
    sched: Schedule,
    /// Steps taken from `sched`.
    taken: u64,
    /// Its highest acknowledged step (`K_j`), by index from 0.
    pub(crate) last: Option<u64>,
    /// Steps `sched` passed whose ack has not come, by seq: what it must state.
    pub(crate) gaps: BTreeMap<u64, Expect>,
}

/// A files run's acknowledgements, folded one by one ([`FilesAcks::add`]) in ledger
/// order; [`judge_folded`](crate::verdict::files::judge_folded) judges the run from
/// it.
///
/// ```
/// use plugpull::ledger::FilesAck;
/// use plugpull::ledger::FilesAcks;
/// use plugpull::schedule::{Schedule, Unsafe};
///
/// let mut s = Schedule::new(7, 1, 0, 3, Unsafe::default());
/// let st = s.next_step().unwrap();
/// let blocks = s.state(st.file).unwrap();
/// let mut fold = FilesAcks::new(7, 1, 3, Unsafe::default());
/// fold.add(&FilesAck {
///     seq: st.seq,
///     file: st.file,
///     exists: true,
///     size: blocks.len() as u64 * 512,
///     content_seq: st.seq,
///     promised: true,
///     ms: 12,
/// });
/// assert_eq!(fold.acknowledged(), (1, 0));
/// ```
#[derive(Clone, Debug)]
pub struct FilesAcks {
    pub(crate) seed: u64,
    pub(crate) jobs: u32,
    pub(crate) files: u32,
    pub(crate) unsafe_steps: Unsafe,
    /// Per worker (none when the manifest is beyond what a writer makes).
    pub(crate) workers: Vec<Worker>,
    /// The highest acknowledged step of each worker without a `Worker`, by worker.
    pub(crate) lasts: BTreeMap<u32, u64>,
    /// Per file: the index and time (ms) of its highest acknowledged step checked.
    pub(crate) names: Vec<Option<(u64, u32)>>,
    /// Acks the replay checks against their step, by seq (the last copy of each).
    pub(crate) recheck: BTreeMap<u64, FilesAck>,
    /// Whether an ack has seq 0.
    pub(crate) seq_zero: bool,
    /// The lowest seq of a worker that owns no file.
    pub(crate) beyond: Option<u64>,
    count: u64,
    unpromised: u64,
    pub(crate) end_ms: u32,
}

impl FilesAcks {
    /// An empty fold for a run of `jobs` workers over `files` names whose schedule has
    /// `seed` and skips the calls `unsafe_steps` (the run's manifest says each).
    pub fn new(seed: u64, jobs: u32, files: u32, unsafe_steps: Unsafe) -> FilesAcks {
        let made = (1..=MAX_JOBS).contains(&jobs) && files <= MAX_FILES;
        let workers = (0..if made { jobs } else { 0 })
            .map(|j| Worker {
                sched: Schedule::new(seed, jobs, j, files, unsafe_steps),
                taken: 0,
                last: None,
                gaps: BTreeMap::new(),
            })
            .collect();
        FilesAcks {
            seed,
            jobs,
            files,
            unsafe_steps,
            workers,
            lasts: BTreeMap::new(),
            names: vec![None; if made { files as usize } else { 0 }],
            recheck: BTreeMap::new(),
            seq_zero: false,
            beyond: None,
            count: 0,
            unpromised: 0,
            end_ms: 0,
        }
    }

    /// Folds the next ack of the ledger.
    pub fn add(&mut self, a: &FilesAck) {
        self.count += 1;
        self.unpromised += u64::from(!a.promised);
        self.end_ms = self.end_ms.max(a.ms);
        if a.seq == 0 {
            self.seq_zero = true;
            return;
        }
        let jobs = u64::from(self.jobs.max(1));
        let (j, k) = (((a.seq - 1) % jobs) as u32, (a.seq - 1) / jobs);
        if self.jobs == 0 || j >= self.files {
            self.beyond = Some(self.beyond.map_or(a.seq, |b| b.min(a.seq)));
            return;
        }
        let Some(w) = self.workers.get_mut(j as usize) else {
            let last = self.lasts.entry(j).or_insert(k);
            *last = (*last).max(k);
            self.recheck.insert(a.seq, *a);
            return;
        };
        w.last = w.last.max(Some(k));
        let far = k >= w.taken
            && (k - w.taken > MAX_AHEAD
                || w.gaps.len() as u64 + (k - w.taken) > MAX_AWAITED as u64);
        if far || self.recheck.contains_key(&a.seq) {
            // The last copy of a seq kept is the one checked.
            self.recheck.insert(a.seq, *a);
            return;
        }
        let expect = if k >= w.taken {
            let mut at_k = None;
            while w.taken <= k {
                let Some(st) = w.sched.next_step() else { break };
                let e = Expect::of(&st, w.sched.state(st.file));
                if w.taken == k {
                    at_k = Some(e);
                } else {
                    w.gaps.insert(st.seq, e);
                }
                w.taken += 1;
            }
            at_k.expect("a worker below `files` owns a file: its schedule never ends")
        } else if let Some(e) = w.gaps.remove(&a.seq) {
            e
        } else {
            self.recheck.insert(a.seq, *a);
            return;
        };
        if expect.check(a).is_err() {
            self.recheck.insert(a.seq, *a);
            return;
        }
        let name = &mut self.names[a.file as usize];
        if name.is_none_or(|(nk, _)| nk <= k) {
            *name = Some((k, a.ms));
        }
    }

    /// Acks folded (every copy), and how many of them were unpromised.
    pub fn acknowledged(&self) -> (u64, u64) {
        (self.count, self.unpromised)
    }

    /// The highest acknowledged step of worker `j` (`K_j`), by index from 0.
    pub(crate) fn last(&self, j: u32) -> Option<u64> {
        match self.workers.get(j as usize) {
            Some(w) => w.last,
            None => self.lasts.get(&j).copied(),
        }
    }

    /// The highest step of worker `j` the replay steps to as acknowledged: its `K`, but
    /// at most [`MAX_REPLAY_AHEAD`] past the steps the fold took in order (an ack beyond
    /// that was kept and is never reached, so the replay reports it as beyond the
    /// schedule rather than step towards a seq no writer reaches). `None`: no ack.
    pub(crate) fn replay_last(&self, j: u32) -> Option<u64> {
        let last = self.last(j)?;
        Some(match self.workers.get(j as usize) {
            Some(w) => last.min(w.taken.saturating_add(MAX_REPLAY_AHEAD)),
            None => last,
        })
    }

    /// Steps passed over by a later ack whose own ack has not come (yet), all workers.
    pub fn awaited(&self) -> usize {
        self.workers.iter().map(|w| w.gaps.len()).sum()
    }

    /// The schedule the acks are checked against: its seed, workers, names and
    /// skipped calls.
    pub fn schedule(&self) -> (u64, u32, u32, Unsafe) {
        (self.seed, self.jobs, self.files, self.unsafe_steps)
    }
}
