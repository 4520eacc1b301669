//! What makes metadata durable: a file's or a directory's fsync (by the
//! [`Metadata`] rules), the background commit of data modes that lie about fsync,
//! the release of held inodes nothing refers to any more, and the fates the ground
//! truth gives every operation at the cut.

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;

use super::{attic_name, Journal, Key, Metadata, OpKind, JOURNAL_DIR};
use crate::truth::{MetaFate, TruthMeta};

impl Journal {
    /// An fsync or fdatasync of the file `key` returned success: its size is durable
    /// (`posix`, fsync honoured), or every operation so far (`journal`).
    pub fn file_synced(&mut self, key: Key) {
        if !self.active() {
            return;
        }
        if self.metadata == Metadata::Journal {
            return self.all_synced();
        }
        for i in self.unsynced_file.remove(&key).unwrap_or_default() {
            if let Some(s) = self.ops[i].synced.last_mut() {
                *s = true;
            }
        }
        if self.honours_fsync {
            self.sizes.remove(&key);
        }
    }

    /// An fsync of the directory `key` returned success.
    pub fn dir_synced(&mut self, key: Key) {
        if !self.active() {
            return;
        }
        if self.metadata == Metadata::Journal {
            return self.all_synced();
        }
        for i in self.unsynced_dir.remove(&key).unwrap_or_default() {
            let op = &mut self.ops[i];
            for (c, s) in op.changes.iter().zip(op.synced.iter_mut()) {
                if c.dir == key {
                    *s = true;
                }
            }
        }
        if self.honours_fsync {
            if let Some(dj) = self.dirs.get_mut(&key) {
                dj.names.clear();
            }
            self.gc();
        }
    }

    /// `journal` rules: every operation so far is synced, and durable if fsync is
    /// honoured.
    fn all_synced(&mut self) {
        for op in &mut self.ops {
            op.synced.iter_mut().for_each(|s| *s = true);
        }
        self.unsynced_dir.clear();
        self.unsynced_file.clear();
        if self.honours_fsync {
            self.dirs.values_mut().for_each(|d| d.names.clear());
            self.sizes.clear();
            self.gc();
        }
    }

    /// Whether a durability call must destage every cached write first (`journal`).
    pub fn sync_destages_all(&self) -> bool {
        self.metadata == Metadata::Journal && self.honours_fsync
    }

    /// Background commit: makes durable every operation whose time has come. Returns
    /// how many were committed.
    pub fn commit_due(&mut self, now_ms: u64) -> usize {
        let mut due: Vec<usize> = Vec::new();
        self.uncommitted.retain(|&i| {
            let is_due = self.ops[i].due_ms.is_some_and(|d| d <= now_ms);
            if is_due {
                due.push(i);
            }
            !is_due
        });
        if due.is_empty() {
            return 0;
        }
        due.sort_by_key(|&i| (self.ops[i].due_ms, i));
        for &i in &due {
            self.commit(i);
        }
        self.gc();
        due.len()
    }

    /// Milliseconds since mount when the next background commit is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.uncommitted
            .iter()
            .filter_map(|&i| self.ops[i].due_ms)
            .min()
    }

    fn commit(&mut self, i: usize) {
        let op = &self.ops[i];
        for c in &op.changes {
            let Some(dj) = self.dirs.get_mut(&c.dir) else {
                continue;
            };
            if let Some(p) = dj.names.get_mut(&c.name) {
                if p.upto < op.id {
                    p.durable = c.after;
                    p.upto = op.id;
                }
                if p.upto >= p.last {
                    dj.names.remove(&c.name);
                }
            }
        }
        if let Some((key, new)) = op.resize {
            if let Some(sp) = self.sizes.get_mut(&key) {
                if sp.upto < op.id {
                    sp.durable = new;
                    sp.upto = op.id;
                }
                if sp.upto >= sp.last {
                    self.sizes.remove(&key);
                }
            }
        }
    }

    /// Releases held inodes no durable value and no uncommitted operation refers to.
    fn gc(&mut self) {
        self.release_unreferenced(None);
    }

    /// Releases held inodes (only those in `only`, if given) that no durable value
    /// and no uncommitted operation refers to: an attic link or a descriptor that
    /// the cut would never need. Called after every operation that held one, so a
    /// temporary file never fsynced into a durable name does not stay in the attic.
    pub fn release_unreferenced(&mut self, only: Option<&[Key]>) {
        if self.held.is_empty()
            || only.is_some_and(|k| !k.iter().any(|k| self.held.contains_key(k)))
        {
            return;
        }
        let mut wanted: HashSet<Key> = HashSet::new();
        for dj in self.dirs.values() {
            wanted.extend(dj.names.values().filter_map(|p| p.durable.map(|t| t.key)));
        }
        for &i in &self.uncommitted {
            wanted.extend(
                self.ops[i]
                    .changes
                    .iter()
                    .filter_map(|c| c.after.map(|t| t.key)),
            );
        }
        let attic = self.attic.as_ref().map(|a| a.as_raw_fd());
        self.held.retain(|key, fd| {
            if wanted.contains(key) || only.is_some_and(|k| !k.contains(key)) {
                return true;
            }
            if fd.is_none() {
                if let Some(attic) = attic {
                    let link = attic_name(*key);
                    // SAFETY: valid descriptor and NUL-terminated name.
                    unsafe { libc::unlinkat(attic, link.as_ptr(), 0) };
                }
            }
            false
        });
    }

    /// A clean unmount: everything is durable; removes the journal directory.
    pub fn discard(&mut self) {
        self.held.clear();
        self.attic = None;
        let _ = std::fs::remove_dir_all(self.root.join(JOURNAL_DIR));
    }

    /// The fate of every operation, for the ground truth, given which journaled
    /// directories are reachable from the root after [`Journal::cut`].
    pub(super) fn fates(&self, reachable: &HashMap<Key, bool>) -> Vec<TruthMeta> {
        self.ops
            .iter()
            .map(|op| {
                let mut kept = Vec::new();
                for c in &op.changes {
                    let k = self
                        .dirs
                        .get(&c.dir)
                        .and_then(|d| d.names.get(&c.name))
                        .is_none_or(|p| p.upto >= op.id);
                    kept.push(k);
                }
                if let Some((key, _)) = op.resize {
                    kept.push(self.sizes.get(&key).is_none_or(|s| s.upto >= op.id));
                }
                let fate = if kept.iter().all(|&k| k) {
                    let orphan = op
                        .changes
                        .iter()
                        .any(|c| reachable.get(&c.dir) == Some(&false));
                    if orphan {
                        MetaFate::Orphaned
                    } else {
                        MetaFate::Kept
                    }
                } else if kept.iter().any(|&k| k) {
                    MetaFate::Half
                } else {
                    MetaFate::Lost
                };
                TruthMeta {
                    meta_id: op.id,
                    op: op.kind.name().to_string(),
                    path: op.path.clone(),
                    to: op.to.clone(),
                    size: op.resize.map(|r| r.1),
                    synced: op.synced.iter().all(|&s| s),
                    fate,
                }
            })
            .collect()
    }
}

impl OpKind {
    /// The lowercase name of the ground truth.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Mkdir => "mkdir",
            OpKind::Mknod => "mknod",
            OpKind::Symlink => "symlink",
            OpKind::Link => "link",
            OpKind::Unlink => "unlink",
            OpKind::Rmdir => "rmdir",
            OpKind::Rename => "rename",
            OpKind::Exchange => "exchange",
            OpKind::Truncate => "truncate",
            OpKind::Extend => "extend",
            OpKind::Fallocate => "fallocate",
        }
    }
}
