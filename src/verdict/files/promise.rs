//! What the durability calls a run skips (`--unsafe-steps`) leave unpromised for one
//! name, so that a finding they explain is reported as unpromised and every other one
//! fails.
//!
//! By the POSIX rules, an fsync of a file makes its data and size durable, an fsync of
//! the directory its entries. A step that skips a call leaves only what that call
//! would have covered unpromised, until a later step's returned call covers it:
//!
//! * `dirsync` (no directory fsync after create, replace, unlink): the name's *entry*
//!   may be any one it had since its last entry step whose directory fsync returned
//!   (the run's start counts as one: the directory was fsynced with no name in it), and
//!   `NAME.tmp` may be left by a replace since then. A file the entry leads to holds
//!   that file's last acknowledged content when an fsync of the file covered it.
//! * `presync` (no fsync of `NAME.tmp` before the rename): the replace's new file may
//!   hold any part of its records (zeros in place of some, any size), until an append
//!   or truncate of the name, whose fsync covers the whole file, makes it durable.
//!
//! Anything else — a lost fsynced append or truncate, an undone unlink or rename
//! whose directory fsync returned, content that is no state of the name — breaks a
//! promise.

use super::blocks::{is_state, Block};
use super::schedule::{Op, Step, Unsafe, BLOCK, MAX_BLOCKS};

/// One file the name led to: the step that made it, its last acknowledged blocks, and
/// whether a returned fsync covers them.
#[derive(Debug)]
struct Version {
    seq: u64,
    blocks: Vec<u64>,
    synced: bool,
}

impl Version {
    /// Whether an entry leading to this file (`None`: to no name) explains the name as
    /// found (`None`: no name).
    fn explains(v: Option<&Version>, found: Option<(u64, &[Block])>) -> bool {
        match (v, found) {
            (None, None) => true,
            (Some(v), Some((size, blocks))) => {
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
        }
    }
}

/// The states of one name that its acknowledged steps' skipped calls leave possible,
/// followed step by step against what the walk found: only the newest entry's file
/// still changes (an append or truncate rewrites it), so each older entry is kept as
/// whether it explains the name as found.
#[derive(Debug, Default)]
pub(super) struct Unsynced {
    /// Whether an entry since the last durable one, before the newest, explains the
    /// name as found.
    older: bool,
    /// The newest entry: `None` = no name (the run's start has none), `Some` = the
    /// file it leads to.
    newest: Option<Version>,
    /// Whether a replace whose directory fsync was skipped may have left `NAME.tmp`.
    tmp: bool,
}

impl Unsynced {
    /// Follows the name's next acknowledged step `st` (leaving the blocks `after`) under
    /// the run's skipped calls `u`; `found` is the name as the walk found it.
    pub(super) fn step(
        &mut self,
        u: Unsafe,
        st: &Step,
        after: Option<&[u64]>,
        found: Option<(u64, &[Block])>,
    ) {
        let blocks = after.unwrap_or_default().to_vec();
        let entry = match st.op {
            Op::Create | Op::Replace => Some(Version {
                seq: st.seq,
                blocks,
                synced: st.op == Op::Create || !u.presync,
            }),
            Op::Append | Op::Truncate => {
                if let Some(v) = &mut self.newest {
                    v.blocks = blocks;
                    v.synced = true;
                }
                return;
            }
            Op::Unlink => None,
        };
        if u.dirsync {
            self.older |= Version::explains(self.newest.as_ref(), found);
            self.tmp |= st.op == Op::Replace;
        } else {
            self.older = false;
            self.tmp = false;
        }
        self.newest = entry;
    }

    /// Whether the name as found (`None`: no name) — the one given to every
    /// [`Unsynced::step`] — is a state the skipped calls may have left.
    pub(super) fn explains(&self, found: Option<(u64, &[Block])>) -> bool {
        self.older || Version::explains(self.newest.as_ref(), found)
    }

    /// Whether the skipped calls may have left `NAME.tmp`.
    pub(super) fn explains_tmp(&self) -> bool {
        self.tmp
    }
}
