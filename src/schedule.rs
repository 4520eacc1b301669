//! The step schedule of the files workload: which step each worker takes next.
//!
//! Every worker follows a deterministic schedule drawn from the run's seed and its own
//! number, so the verifier can replay it: the steps a worker took after its last
//! confirmed acknowledgement (in flight at the cut) are known exactly, names, operations
//! and sizes, and a state one of them produced is told from a loss.
//!
//! Worker `j` of `jobs` owns the file numbers `f ≡ j (mod jobs)` below `files`; its
//! `k`-th step (from 0) has seq `k · jobs + j + 1`. Each step picks one of its files at
//! random; a missing file is created (1 to 8 blocks); an existing one is appended to
//! (1 to 4 blocks, at most [`MAX_BLOCKS`] in all; else replaced), replaced (1 to 8
//! blocks), truncated (to fewer blocks, possibly 0) or unlinked, with weights 3, 3, 2, 2.
//! A block is [`BLOCK`] bytes: one self-describing record sector
//! ([`crate::record`]) whose block index is `f << 32 | i` (file `f`, block `i` of the
//! file) and whose seq is the step that wrote it.

use crate::record::splitmix64;
use serde::{Deserialize, Serialize};

/// Bytes per content block: one record sector.
pub const BLOCK: u64 = 512;
/// Most blocks a file holds.
pub const MAX_BLOCKS: u64 = 16;
/// Most workers a run has (`write files --jobs`).
pub const MAX_JOBS: u32 = 1024;
/// Most file names a run has (`write files --files`).
pub const MAX_FILES: u32 = 1 << 20;

/// What one step does to its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Write a new file, fsync it, fsync the directory.
    Create,
    /// Write blocks at the end, fsync.
    Append,
    /// Write `NAME.tmp`, fsync it, rename it over `NAME`, fsync the directory.
    Replace,
    /// Truncate to fewer blocks, fsync.
    Truncate,
    /// Unlink, fsync the directory.
    Unlink,
}

impl Op {
    /// The snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Append => "append",
            Op::Replace => "replace",
            Op::Truncate => "truncate",
            Op::Unlink => "unlink",
        }
    }
}

/// One scheduled step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Its seq (`k · jobs + j + 1`).
    pub seq: u64,
    /// The file number.
    pub file: u32,
    /// What it does.
    pub op: Op,
    /// Blocks of the file before the step (0 when it did not exist).
    pub from: u64,
    /// Blocks of the file after the step (0 after an unlink).
    pub to: u64,
    /// Whether the step makes every durability call (see [`Unsafe`]).
    pub promised: bool,
}

/// Durability calls the run skips (`--unsafe-steps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsafe {
    /// Skip the directory fsync after create, replace and unlink.
    pub dirsync: bool,
    /// Skip the fsync of `NAME.tmp` before the rename of a replace.
    pub presync: bool,
}

impl Unsafe {
    /// Whether a step `op` makes every durability call under these settings.
    pub fn promised(self, op: Op) -> bool {
        let dir = matches!(op, Op::Create | Op::Replace | Op::Unlink);
        !(self.dirsync && dir || self.presync && op == Op::Replace)
    }
}

/// The name of file `f` of a run with `jobs` workers: `w{f mod jobs}-{f div jobs}`.
pub fn file_name(f: u32, jobs: u32) -> String {
    format!("w{}-{}", f % jobs, f / jobs)
}

/// The worker and per-worker number of a name shaped `w{j}-{n}` (canonical decimals).
pub fn split_name(name: &str) -> Option<(u32, u32)> {
    let (w, n) = name.strip_prefix('w')?.split_once('-')?;
    let canon = |s: &str| {
        !s.is_empty() && (s == "0" || !s.starts_with('0')) && s.bytes().all(|b| b.is_ascii_digit())
    };
    if !canon(w) || !canon(n) {
        return None;
    }
    Some((w.parse().ok()?, n.parse().ok()?))
}

/// The file number of `name` (a [`file_name`] of a run with `jobs` workers and
/// `files` files), if it is one.
pub fn parse_name(name: &str, jobs: u32, files: u32) -> Option<u32> {
    let (w, n) = split_name(name)?;
    let f = u64::from(n) * u64::from(jobs) + u64::from(w);
    (w < jobs && f < u64::from(files)).then_some(f as u32)
}

/// The block index a record of block `i` of file `f` carries.
pub fn record_block(f: u32, i: u64) -> u64 {
    (u64::from(f) << 32) | i
}

/// One worker's schedule and the state of its files as the schedule leaves them.
#[derive(Clone, Debug)]
pub struct Schedule {
    jobs: u32,
    worker: u32,
    rng: u64,
    k: u64,
    unsafe_steps: Unsafe,
    /// Per owned file (`f = i · jobs + worker`): the seq of each block, `None` = absent.
    states: Vec<Option<Vec<u64>>>,
}

impl Schedule {
    /// The schedule of worker `worker` of `jobs` over `files` files with `seed`.
    pub fn new(seed: u64, jobs: u32, worker: u32, files: u32, unsafe_steps: Unsafe) -> Self {
        let owned = if worker < files {
            (files - worker).div_ceil(jobs)
        } else {
            0
        };
        Schedule {
            jobs,
            worker,
            rng: seed ^ u64::from(worker).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x46_494C_4553,
            k: 0,
            unsafe_steps,
            states: vec![None; owned as usize],
        }
    }

    fn draw(&mut self, n: u64) -> u64 {
        splitmix64(&mut self.rng) % n
    }

    /// The next step, applied to the schedule's state; `None` when the worker owns no file.
    pub fn next_step(&mut self) -> Option<Step> {
        if self.states.is_empty() {
            return None;
        }
        let seq = self.k * u64::from(self.jobs) + u64::from(self.worker) + 1;
        self.k += 1;
        let idx = self.draw(self.states.len() as u64) as usize;
        let file = idx as u32 * self.jobs + self.worker;
        let from = self.states[idx].as_ref().map_or(0, |b| b.len() as u64);
        let (op, to) = match self.states[idx] {
            None => (Op::Create, 1 + self.draw(8)),
            Some(_) => match self.draw(10) {
                0..=2 => {
                    let to = from + 1 + self.draw(4);
                    if to <= MAX_BLOCKS {
                        (Op::Append, to)
                    } else {
                        (Op::Replace, 1 + self.draw(8))
                    }
                }
                3..=5 => (Op::Replace, 1 + self.draw(8)),
                6 | 7 if from > 0 => (Op::Truncate, self.draw(from)),
                6 | 7 => (Op::Append, 1 + self.draw(4)),
                _ => (Op::Unlink, 0),
            },
        };
        let state = &mut self.states[idx];
        match op {
            Op::Create | Op::Replace => *state = Some(vec![seq; to as usize]),
            Op::Append => state.get_or_insert_with(Vec::new).resize(to as usize, seq),
            Op::Truncate => state.get_or_insert_with(Vec::new).truncate(to as usize),
            Op::Unlink => *state = None,
        }
        Some(Step {
            seq,
            file,
            op,
            from,
            to,
            promised: self.unsafe_steps.promised(op),
        })
    }

    /// The seq of each block of file `f` (one this worker owns) as the steps so far
    /// left it; `None` when it does not exist.
    pub fn state(&self, f: u32) -> Option<&[u64]> {
        self.states
            .get((f / self.jobs) as usize)
            .and_then(|s| s.as_deref())
    }
}
