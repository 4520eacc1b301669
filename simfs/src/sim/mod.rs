//! The volatile write cache and its fault policy, with no FUSE and no files in it.
//!
//! [`Sim`] holds every write the filesystem has accepted but not yet destaged, in
//! order of arrival, and decides — per [`Mode`] and from one seeded RNG — which write
//! reaches the backing store next, where it lands, and what survives the cut. It
//! talks to the backing store only through the [`Store`] trait, so the whole policy
//! is unit-tested against an in-memory store (`tests.rs`).
//!
//! Fault model per mode (the crate documentation states it in full):
//! * `honest` — fsync destages the file's writes in order; background destage is FIFO
//!   after `destage_delay_ms`; the cut drops only writes never fsynced.
//! * `lying` — fsync returns at once and destages nothing; the cut drops everything
//!   cached, fsynced or not.
//! * `reorder` — like `lying`, with a random (seeded) delay per write and random
//!   cache-pressure victims, so a later write may survive an earlier fsynced one.
//! * `torn` — honest fsync; at the cut each cached write keeps a random prefix of its
//!   sectors.
//! * `misdirect` — honest fsync; now and then a destaged block-aligned write lands at
//!   another block of its file, whose own location keeps its old contents.
//!
//! Vocabulary:
//! * a **write** is one FUSE `write` request: an inode, a byte offset and the bytes;
//!   it gets a `write_id` (1, 2, 3, … in order of arrival) that never changes;
//! * to **destage** a write is to copy it to the backing store and forget it
//!   (`destage.rs`);
//! * a write is **fsynced** once an fsync/fdatasync on its inode that started after
//!   the write arrived has returned success to the application;
//! * the **cut** empties the cache by the mode's rule and reports one [`TruthEntry`] per
//!   write that was still cached, plus one per write misdirected earlier (`cut.rs`).
//!
//! Invariant (asserted): two cached writes of one inode that overlap reach the store
//! in order of arrival, in every mode, so an older write never overwrites a newer one
//! — reordering only happens between writes that do not overlap.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod config;
mod cut;
mod destage;
mod store;
#[cfg(test)]
mod tests;

/// Re-exported from [`crate::truth`], where the ground-truth format lives.
pub use crate::truth::Fate;
use crate::truth::TruthWrite;
pub use config::{Mode, SimConfig};
pub use cut::sector_bounds;
pub use destage::pick_misdirect_block;
pub use store::Store;

/// One ground-truth line as the cache knows it: addressed by inode, not yet by path
/// (the filesystem names it with [`TruthEntry::named`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruthEntry {
    /// Order of arrival, from 1.
    pub write_id: u64,
    /// Order of arrival among the writes to its inode since mount, from 1.
    pub file_write_id: u64,
    /// Inode the write was made to.
    pub ino: u64,
    /// Byte offset the application wrote at.
    pub offset: u64,
    /// Length in bytes (after any truncate that shortened the cached write).
    pub len: u64,
    /// Whether an fsync/fdatasync covering this write had returned success.
    pub fsynced: bool,
    /// What became of it.
    pub fate: Fate,
    /// For a `torn` cut: how many leading sectors reached the store.
    pub kept_sectors: Option<u64>,
    /// For a misdirected write: the byte offset it was written to instead.
    pub landed_at: Option<u64>,
}

impl TruthEntry {
    /// The ground-truth line of this entry, its inode named by `file` (the path
    /// relative to the mount root).
    pub fn named(&self, file: String) -> TruthWrite {
        TruthWrite {
            write_id: self.write_id,
            file_write_id: self.file_write_id,
            file,
            offset: self.offset,
            len: self.len,
            fsynced: self.fsynced,
            fate: self.fate,
            kept_sectors: self.kept_sectors,
            landed_at: self.landed_at,
        }
    }
}

/// A cached write.
#[derive(Clone, Debug)]
struct Cached {
    ino: u64,
    file_write_id: u64,
    offset: u64,
    data: Vec<u8>,
    fsynced: bool,
    /// Milliseconds (on the caller's clock) after which background destage may run.
    due_ms: u64,
}

impl Cached {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }

    fn overlaps(&self, other: &Cached) -> bool {
        self.offset < other.end() && other.offset < self.end()
    }
}

/// The cache plus its policy. See the module documentation.
#[derive(Debug)]
pub struct Sim {
    config: SimConfig,
    rng: StdRng,
    /// Cached writes by write_id.
    writes: BTreeMap<u64, Cached>,
    /// write_ids cached per inode.
    by_ino: HashMap<u64, BTreeSet<u64>>,
    /// (due_ms, write_id) of every cached write.
    by_due: BTreeSet<(u64, u64)>,
    /// Bytes of data cached.
    bytes: u64,
    /// Next write_id to hand out.
    next_id: u64,
    /// Writes to each inode so far (its last `file_write_id`).
    per_ino: HashMap<u64, u64>,
    /// Misdirected writes so far, in order.
    misdirected: Vec<TruthEntry>,
}

impl Sim {
    /// An empty cache.
    ///
    /// # Panics
    /// If `sector` or `misdirect_block` is 0.
    pub fn new(config: SimConfig) -> Sim {
        assert!(config.sector > 0, "sector must be positive");
        assert!(
            config.misdirect_block > 0,
            "misdirect block must be positive"
        );
        Sim {
            rng: StdRng::seed_from_u64(config.seed),
            config,
            writes: BTreeMap::new(),
            by_ino: HashMap::new(),
            by_due: BTreeSet::new(),
            bytes: 0,
            next_id: 1,
            per_ino: HashMap::new(),
            misdirected: Vec::new(),
        }
    }

    /// The configuration this cache runs with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Number of writes accepted so far (cached, destaged or dropped).
    pub fn writes_total(&self) -> u64 {
        self.next_id - 1
    }

    /// The write_id the next write will get; an fsync that starts now covers every
    /// write with a smaller id.
    pub fn next_write_id(&self) -> u64 {
        self.next_id
    }

    /// Bytes of write data currently cached.
    pub fn cached_bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of writes currently cached.
    pub fn cached_writes(&self) -> usize {
        self.writes.len()
    }

    /// Whether inode `ino` has cached writes.
    pub fn has_cached(&self, ino: u64) -> bool {
        self.by_ino.get(&ino).is_some_and(|ids| !ids.is_empty())
    }

    /// Misdirected writes so far.
    pub fn misdirected(&self) -> &[TruthEntry] {
        &self.misdirected
    }

    /// Caches a write of `data` at byte `offset` of `ino`, made at `now_ms`, and
    /// returns its write_id. An empty write is counted but not cached.
    ///
    /// The caller should then call [`Sim::make_room`].
    pub fn write(&mut self, ino: u64, offset: u64, data: &[u8], now_ms: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let nth = self.per_ino.entry(ino).or_insert(0);
        *nth += 1;
        let file_write_id = *nth;
        if data.is_empty() {
            return id;
        }
        let delay = match self.config.mode {
            Mode::Reorder => self
                .rng
                .random_range(0..=self.config.destage_delay_ms.saturating_mul(2)),
            _ => self.config.destage_delay_ms,
        };
        let due_ms = now_ms.saturating_add(delay);
        self.bytes += data.len() as u64;
        self.by_ino.entry(ino).or_default().insert(id);
        self.by_due.insert((due_ms, id));
        self.writes.insert(
            id,
            Cached {
                ino,
                file_write_id,
                offset,
                data: data.to_vec(),
                fsynced: false,
                due_ms,
            },
        );
        id
    }

    /// Copies the cached data of `ino` that overlaps `[offset, offset + buf.len())`
    /// over `buf`, newest write last, so `buf` becomes what a reader must see when it
    /// held the backing file's bytes before.
    pub fn overlay(&self, ino: u64, offset: u64, buf: &mut [u8]) {
        let Some(ids) = self.by_ino.get(&ino) else {
            return;
        };
        let end = offset + buf.len() as u64;
        for id in ids {
            let w = &self.writes[id];
            let lo = w.offset.max(offset);
            let hi = w.end().min(end);
            if lo < hi {
                let src = &w.data[(lo - w.offset) as usize..(hi - w.offset) as usize];
                buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
            }
        }
    }

    /// The end (offset + length, in bytes) of the furthest cached write of `ino`, if
    /// any: the file's size is at least this.
    pub fn cached_end(&self, ino: u64) -> Option<u64> {
        self.by_ino
            .get(&ino)?
            .iter()
            .map(|id| self.writes[id].end())
            .max()
    }

    /// Applies a truncate of `ino` to `size` bytes to the cache: cached writes that
    /// start at or past `size` are discarded, writes that straddle it are shortened.
    /// (The caller truncates the backing file itself.)
    pub fn truncate(&mut self, ino: u64, size: u64) {
        let Some(ids) = self.by_ino.get(&ino) else {
            return;
        };
        let ids: Vec<u64> = ids.iter().copied().collect();
        for id in ids {
            let w = self.writes.get_mut(&id).expect("indexed write exists");
            if w.offset >= size {
                self.remove(id);
            } else if w.end() > size {
                let keep = (size - w.offset) as usize;
                self.bytes -= (w.data.len() - keep) as u64;
                w.data.truncate(keep);
            }
        }
    }

    /// Marks every write of `ino` with a write_id below `upto` as fsynced, cached or
    /// already misdirected. Call it when an fsync that started when
    /// [`Sim::next_write_id`] was `upto` returns success.
    pub fn mark_fsynced(&mut self, ino: u64, upto: u64) {
        if let Some(ids) = self.by_ino.get(&ino) {
            for id in ids.range(..upto) {
                self.writes
                    .get_mut(id)
                    .expect("indexed write exists")
                    .fsynced = true;
            }
        }
        for m in &mut self.misdirected {
            if m.ino == ino && m.write_id < upto {
                m.fsynced = true;
            }
        }
    }

    fn remove(&mut self, id: u64) -> Cached {
        let w = self.writes.remove(&id).expect("write is cached");
        let ids = self.by_ino.get_mut(&w.ino).expect("indexed");
        ids.remove(&id);
        if ids.is_empty() {
            self.by_ino.remove(&w.ino);
        }
        self.by_due.remove(&(w.due_ms, id));
        self.bytes -= w.data.len() as u64;
        w
    }
}
