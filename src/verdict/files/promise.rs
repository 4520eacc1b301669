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
struct Version {
    seq: u64,
    blocks: Vec<u64>,
    synced: bool,
}

/// The states of one name that its acknowledged steps' skipped calls leave possible.
pub(super) struct Unsynced {
    versions: Vec<Version>,
    /// The entries since the last durable one: `None` = no name, `Some(i)` =
    /// `versions[i]`.
    entries: Vec<Option<usize>>,
    /// Whether a replace whose directory fsync was skipped may have left `NAME.tmp`.
    tmp: bool,
}

impl Unsynced {
    /// Follows the name's acknowledged steps (each with the blocks it left) under the
    /// run's skipped calls `u`.
    pub(super) fn of(u: Unsafe, acked: &[(Step, Option<Vec<u64>>)]) -> Self {
        let mut n = Unsynced {
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
    pub(super) fn explains(&self, found: Option<(u64, &[Block])>) -> bool {
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
    pub(super) fn explains_tmp(&self) -> bool {
        self.tmp
    }
}
