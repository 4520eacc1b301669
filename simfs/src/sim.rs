//! The volatile write cache and its fault policy, with no FUSE and no files in it.
//!
//! [`Sim`] holds every write the filesystem has accepted but not yet destaged, in
//! order of arrival, and decides — per [`Mode`] and from one seeded RNG — which write
//! reaches the backing store next, where it lands, and what survives the cut. It
//! talks to the backing store only through the [`Store`] trait, so the whole policy
//! is unit-tested against an in-memory store (see the tests at the bottom).
//!
//! Vocabulary:
//! * a **write** is one FUSE `write` request: an inode, a byte offset and the bytes;
//!   it gets a `write_id` (1, 2, 3, … in order of arrival) that never changes;
//! * to **destage** a write is to copy it to the backing store and forget it;
//! * a write is **fsynced** once an fsync/fdatasync on its inode that started after
//!   the write arrived has returned success to the application;
//! * the **cut** empties the cache by the mode's rule and reports one [`TruthEntry`] per
//!   write that was still cached, plus one per write misdirected earlier.
//!
//! Invariant (asserted): two cached writes of one inode that overlap reach the store
//! in order of arrival, in every mode, so an older write never overwrites a newer one
//! — reordering only happens between writes that do not overlap.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// How the simulated device treats writes, fsync and the power cut.
///
/// See the crate documentation for the full fault model of each mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// fsync destages the file's writes; background destage is FIFO; the cut drops
    /// only writes never fsynced.
    Honest,
    /// fsync returns at once; writes destage FIFO after a delay or under cache
    /// pressure; the cut drops everything cached, fsynced or not.
    Lying,
    /// Like `lying`, but writes destage in random (seeded) order.
    Reorder,
    /// Honest fsync; at the cut each cached write keeps a random prefix of its sectors.
    Torn,
    /// Honest fsync; now and then a destaged block lands at a wrong block of its file.
    Misdirect,
}

impl Mode {
    /// The mode's name as written on the command line and in the ground truth.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Honest => "honest",
            Mode::Lying => "lying",
            Mode::Reorder => "reorder",
            Mode::Torn => "torn",
            Mode::Misdirect => "misdirect",
        }
    }

    /// Whether fsync/fdatasync destages the file's cached writes before returning.
    pub fn fsync_destages(self) -> bool {
        matches!(self, Mode::Honest | Mode::Torn | Mode::Misdirect)
    }
}

/// Tunables of the simulated device. Every field has a unit; see [`SimConfig::default`].
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The fault model.
    pub mode: Mode,
    /// Seed of the one RNG behind every random choice.
    pub seed: u64,
    /// Milliseconds a write stays cached before the background destager may write it
    /// out. In `reorder` mode each write's delay is drawn uniformly from
    /// `0..=2 * destage_delay_ms`.
    pub destage_delay_ms: u64,
    /// Bytes of cached write data above which writes are destaged at once (oldest
    /// first, or a random victim in `reorder` mode) until the cache fits again.
    pub cache_bytes: u64,
    /// Bytes per sector: the unit a `torn` cut keeps or drops. Sectors are aligned to
    /// absolute file offsets (multiples of `sector`), not to the write's start.
    pub sector: u64,
    /// Bytes per block for `misdirect`: only writes whose offset and length are
    /// multiples of `misdirect_block` can be misdirected, and they land at another
    /// multiple of it.
    pub misdirect_block: u64,
    /// In `misdirect` mode, an eligible destaged write is misdirected with chance
    /// 1 in `misdirect_every` (0 never misdirects).
    pub misdirect_every: u64,
    /// Milliseconds every fsync/fdatasync (and `O_SYNC`/`O_DSYNC` write) sleeps after
    /// doing its work and before it returns: a slow cache flush (the data is as
    /// durable as the mode makes it before the call returns, which is late). 0: none.
    pub flush_delay_ms: u64,
    /// Answer `statfs` with 0 blocks in all, free and available, as FUSE filesystems
    /// that implement no `statfs` do.
    pub statfs_zero: bool,
}

impl Default for SimConfig {
    /// `honest`, seed 0, 2000 ms delay, 64 MiB cache, 512-byte sectors, 4096-byte
    /// blocks, misdirect 1 in 50, no flush delay, a true `statfs`.
    fn default() -> Self {
        SimConfig {
            mode: Mode::Honest,
            seed: 0,
            destage_delay_ms: 2000,
            cache_bytes: 64 << 20,
            sector: 512,
            misdirect_block: 4096,
            misdirect_every: 50,
            flush_delay_ms: 0,
            statfs_zero: false,
        }
    }
}

/// The backing store the cache destages into, addressed by inode number.
pub trait Store {
    /// Writes all of `data` at byte `offset` of inode `ino`'s backing file.
    ///
    /// # Errors
    /// Any I/O error of the backing file.
    fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()>;

    /// The current length in bytes of inode `ino`'s backing file.
    ///
    /// # Errors
    /// Any I/O error of the backing file.
    fn len(&mut self, ino: u64) -> io::Result<u64>;
}

/// What became of a write, as recorded in the ground truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    /// Cached at the cut; none of its bytes reached the backing store.
    Dropped,
    /// Cached at the cut, but all of it reached the backing store (a `torn` cut that
    /// kept every sector).
    Destaged,
    /// Cached at the cut; only its first `kept_sectors` sectors reached the store.
    Torn,
    /// Destaged before the cut, but to `landed_at` instead of its own offset, which
    /// kept its old contents.
    Misdirected,
}

/// One ground-truth line, without the file name (the filesystem adds it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruthEntry {
    /// Order of arrival, from 1.
    pub write_id: u64,
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

/// A cached write.
#[derive(Clone, Debug)]
struct Cached {
    ino: u64,
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

    /// Destages every cached write of `ino`, in order of arrival.
    ///
    /// # Errors
    /// The first store error; the failing write is lost, later ones stay cached.
    pub fn destage_ino(&mut self, ino: u64, store: &mut dyn Store) -> io::Result<()> {
        while let Some(id) = self.by_ino.get(&ino).and_then(|ids| ids.first().copied()) {
            self.destage(id, store)?;
        }
        Ok(())
    }

    /// Destages writes until at most `cache_bytes` bytes stay cached: oldest first,
    /// or random victims in `reorder` mode. Returns how many writes were destaged.
    ///
    /// # Errors
    /// The first store error.
    pub fn make_room(&mut self, store: &mut dyn Store) -> io::Result<usize> {
        let mut n = 0;
        while self.bytes > self.config.cache_bytes {
            let Some(id) = self.pick_victim() else {
                break;
            };
            self.destage(id, store)?;
            n += 1;
        }
        Ok(n)
    }

    /// Destages at most `limit` writes whose delay has passed at `now_ms` (earliest
    /// due first; overlapping writes in arrival order). Returns how many.
    ///
    /// # Errors
    /// The first store error.
    pub fn destage_due(
        &mut self,
        now_ms: u64,
        limit: usize,
        store: &mut dyn Store,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < limit {
            let Some(&(due, id)) = self.by_due.first() else {
                break;
            };
            if due > now_ms {
                break;
            }
            let id = self.oldest_overlapping(id);
            self.destage(id, store)?;
            n += 1;
        }
        Ok(n)
    }

    /// When the next cached write becomes due, in the caller's milliseconds.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.by_due.first().map(|&(due, _)| due)
    }

    /// Destages everything still cached, in order of arrival (the clean shutdown).
    ///
    /// # Errors
    /// The first store error.
    pub fn flush_all(&mut self, store: &mut dyn Store) -> io::Result<()> {
        while let Some(&id) = self.writes.keys().next() {
            self.destage(id, store)?;
        }
        Ok(())
    }

    /// Pulls the plug: empties the cache by the mode's rule and returns the ground
    /// truth, ordered by write_id.
    ///
    /// * `honest`, `lying`, `reorder`, `misdirect`: every cached write is dropped —
    ///   none of its bytes reach the store.
    /// * `torn`: cached writes are visited in order of arrival; each is split at
    ///   absolute multiples of `sector` into `n` pieces (the first and last may be
    ///   partial sectors), a count `k` is drawn uniformly from `0..=n`, and the first
    ///   `k` pieces are written to the store. `k == 0` is reported `dropped`,
    ///   `k == n` `destaged`, anything between `torn`.
    ///
    /// Writes misdirected earlier are reported too (fate `misdirected`). Store
    /// errors while writing torn prefixes are ignored: the power is already off.
    pub fn cut(&mut self, store: &mut dyn Store) -> Vec<TruthEntry> {
        let mut out = self.misdirected.clone();
        let writes = std::mem::take(&mut self.writes);
        self.by_ino.clear();
        self.by_due.clear();
        self.bytes = 0;
        for (id, w) in writes {
            let len = w.data.len() as u64;
            let (fate, kept_sectors) = if self.config.mode == Mode::Torn {
                let bounds = sector_bounds(w.offset, len, self.config.sector);
                let n = bounds.len() as u64;
                let k = self.rng.random_range(0..=n);
                if k > 0 {
                    let keep = (bounds[k as usize - 1] - w.offset) as usize;
                    if let Err(e) = store.write_at(w.ino, w.offset, &w.data[..keep]) {
                        tracing::warn!("torn prefix of write {id} not stored: {e}");
                    }
                }
                let fate = match k {
                    0 => Fate::Dropped,
                    k if k == n => Fate::Destaged,
                    _ => Fate::Torn,
                };
                (fate, Some(k))
            } else {
                (Fate::Dropped, None)
            };
            out.push(TruthEntry {
                write_id: id,
                ino: w.ino,
                offset: w.offset,
                len,
                fsynced: w.fsynced,
                fate,
                kept_sectors,
                landed_at: None,
            });
        }
        out.sort_by_key(|o| o.write_id);
        out
    }

    /// Writes one cached write out (possibly misdirected) and forgets it.
    fn destage(&mut self, id: u64, store: &mut dyn Store) -> io::Result<()> {
        let w = self.remove(id);
        debug_assert!(
            self.by_ino.get(&w.ino).is_none_or(|ids| ids
                .range(..id)
                .all(|older| !self.writes[older].overlaps(&w))),
            "write {id} destaged before an older overlapping write"
        );
        let len = w.data.len() as u64;
        if let Some(target) = self.misdirect_target(&w, store)? {
            store.write_at(w.ino, target, &w.data)?;
            self.misdirected.push(TruthEntry {
                write_id: id,
                ino: w.ino,
                offset: w.offset,
                len,
                fsynced: w.fsynced,
                fate: Fate::Misdirected,
                kept_sectors: None,
                landed_at: Some(target),
            });
            return Ok(());
        }
        store.write_at(w.ino, w.offset, &w.data)
    }

    /// In `misdirect` mode, decides whether `w` lands elsewhere and where: `w` must be
    /// block-aligned in offset and length; with chance 1 in `misdirect_every` it goes
    /// to a block index drawn uniformly among those `j != offset / block` with
    /// `j * block + len <= file length`. No such block: not misdirected.
    fn misdirect_target(&mut self, w: &Cached, store: &mut dyn Store) -> io::Result<Option<u64>> {
        let block = self.config.misdirect_block;
        let len = w.data.len() as u64;
        let eligible = self.config.mode == Mode::Misdirect
            && self.config.misdirect_every > 0
            && w.offset.is_multiple_of(block)
            && len.is_multiple_of(block);
        if !eligible || self.rng.random_range(0..self.config.misdirect_every) != 0 {
            return Ok(None);
        }
        let file_len = store.len(w.ino)?;
        Ok(
            pick_misdirect_block(w.offset / block, len, file_len, block, &mut self.rng)
                .map(|j| j * block),
        )
    }

    /// The victim when the cache is over its byte limit.
    fn pick_victim(&mut self) -> Option<u64> {
        if self.writes.is_empty() {
            return None;
        }
        let id = if self.config.mode == Mode::Reorder {
            let k = self.rng.random_range(0..self.writes.len());
            *self.writes.keys().nth(k).expect("k < len")
        } else {
            *self.writes.keys().next().expect("not empty")
        };
        Some(self.oldest_overlapping(id))
    }

    /// The oldest cached write of the same inode that overlaps `id` (transitively),
    /// or `id` itself: it must reach the store first.
    fn oldest_overlapping(&self, mut id: u64) -> u64 {
        loop {
            let w = &self.writes[&id];
            let older = self.by_ino[&w.ino]
                .range(..id)
                .find(|older| self.writes[older].overlaps(w));
            match older {
                Some(&older) => id = older,
                None => return id,
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

/// The ends (absolute byte offsets) of the sector pieces of `[offset, offset + len)`,
/// split at multiples of `sector`. A zero-length range has no pieces.
pub fn sector_bounds(offset: u64, len: u64, sector: u64) -> Vec<u64> {
    let end = offset + len;
    let mut bounds = Vec::new();
    let mut at = offset;
    while at < end {
        let next = ((at / sector) + 1) * sector;
        at = next.min(end);
        bounds.push(at);
    }
    bounds
}

/// Draws the block index a misdirected write of `len` bytes meant for block `own`
/// lands at: uniform among the indices `j != own` with `j * block + len <= file_len`.
/// `None` when there is no such index.
pub fn pick_misdirect_block(
    own: u64,
    len: u64,
    file_len: u64,
    block: u64,
    rng: &mut impl Rng,
) -> Option<u64> {
    if file_len < len {
        return None;
    }
    let count = (file_len - len) / block + 1; // candidates 0..count
    let own_in_range = own < count;
    let choices = count - u64::from(own_in_range);
    if choices == 0 {
        return None;
    }
    let k = rng.random_range(0..choices);
    Some(if own_in_range && k >= own { k + 1 } else { k })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory store: one byte vector per inode.
    #[derive(Default)]
    struct MemStore {
        files: HashMap<u64, Vec<u8>>,
        log: Vec<(u64, u64, usize)>,
    }

    impl Store for MemStore {
        fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()> {
            let f = self.files.entry(ino).or_default();
            let end = offset as usize + data.len();
            if f.len() < end {
                f.resize(end, 0);
            }
            f[offset as usize..end].copy_from_slice(data);
            self.log.push((ino, offset, data.len()));
            Ok(())
        }

        fn len(&mut self, ino: u64) -> io::Result<u64> {
            Ok(self.files.get(&ino).map_or(0, |f| f.len() as u64))
        }
    }

    fn sim(mode: Mode, seed: u64) -> Sim {
        Sim::new(SimConfig {
            mode,
            seed,
            destage_delay_ms: 100,
            cache_bytes: 1 << 20,
            ..SimConfig::default()
        })
    }

    #[test]
    fn overlay_newest_wins_and_extends_size() {
        let mut s = sim(Mode::Lying, 1);
        s.write(7, 2, b"aaaa", 0);
        s.write(7, 4, b"bb", 0);
        s.write(8, 0, b"zz", 0);
        let mut buf = *b"........";
        s.overlay(7, 0, &mut buf);
        assert_eq!(&buf, b"..aabb..");
        let mut buf = *b"...";
        s.overlay(7, 3, &mut buf);
        assert_eq!(&buf, b"abb");
        assert_eq!(s.cached_end(7), Some(6));
        assert_eq!(s.cached_end(8), Some(2));
        assert_eq!(s.cached_end(9), None);
        assert_eq!(s.cached_bytes(), 8);
    }

    #[test]
    fn truncate_discards_and_shortens() {
        let mut s = sim(Mode::Lying, 1);
        s.write(1, 0, b"0123456789", 0);
        s.write(1, 8, b"xy", 0);
        s.write(1, 20, b"zz", 0);
        s.truncate(1, 5);
        assert_eq!(s.cached_writes(), 1);
        assert_eq!(s.cached_bytes(), 5);
        assert_eq!(s.cached_end(1), Some(5));
        let mut st = MemStore::default();
        let out = s.cut(&mut st);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].write_id, out[0].len), (1, 5));
    }

    #[test]
    fn fifo_destage_after_delay() {
        let mut s = sim(Mode::Lying, 1);
        s.write(1, 0, b"a", 0);
        s.write(2, 0, b"b", 50);
        s.write(1, 1, b"c", 60);
        let mut st = MemStore::default();
        assert_eq!(s.destage_due(99, 10, &mut st).unwrap(), 0);
        assert_eq!(s.destage_due(155, 10, &mut st).unwrap(), 2);
        assert_eq!(st.log, vec![(1, 0, 1), (2, 0, 1)]);
        assert_eq!(s.next_due_ms(), Some(160));
        assert_eq!(s.destage_due(1000, 10, &mut st).unwrap(), 1);
        assert_eq!(st.files[&1], b"ac");
    }

    #[test]
    fn lying_fsync_marks_but_keeps_and_cut_drops() {
        let mut s = sim(Mode::Lying, 1);
        s.write(1, 0, b"a", 0);
        s.write(2, 0, b"b", 0);
        let upto = s.next_write_id();
        s.write(1, 1, b"c", 0);
        s.mark_fsynced(1, upto);
        let mut st = MemStore::default();
        let out = s.cut(&mut st);
        let summary: Vec<(u64, bool, Fate)> = out
            .iter()
            .map(|o| (o.write_id, o.fsynced, o.fate))
            .collect();
        assert_eq!(
            summary,
            vec![
                (1, true, Fate::Dropped),
                (2, false, Fate::Dropped),
                (3, false, Fate::Dropped)
            ]
        );
        assert!(st.files.is_empty());
        assert_eq!(s.cached_writes(), 0);
        assert_eq!(s.writes_total(), 3);
    }

    #[test]
    fn honest_fsync_destages_only_that_file_in_order() {
        let mut s = sim(Mode::Honest, 1);
        s.write(1, 0, b"aa", 0);
        s.write(2, 0, b"bb", 0);
        s.write(1, 1, b"c", 0);
        let mut st = MemStore::default();
        s.destage_ino(1, &mut st).unwrap();
        assert_eq!(st.log, vec![(1, 0, 2), (1, 1, 1)]);
        assert_eq!(st.files[&1], b"ac");
        assert!(!s.has_cached(1));
        assert!(s.has_cached(2));
    }

    #[test]
    fn reorder_keeps_overlapping_writes_in_order_and_varies_otherwise() {
        // Each write's delay is random; overlapping writes still destage in order.
        let mut orders = BTreeSet::new();
        for seed in 0..20 {
            let mut s = sim(Mode::Reorder, seed);
            for i in 0..6u64 {
                s.write(1, i * 10, b"x", 0);
            }
            s.write(1, 0, b"y", 0); // overlaps write 1
            let mut st = MemStore::default();
            s.destage_due(10_000, 100, &mut st).unwrap();
            assert_eq!(st.files[&1][0], b'y', "seed {seed}");
            orders.insert(st.log.clone());
        }
        assert!(orders.len() > 1, "reorder mode never reordered");
    }

    #[test]
    fn reorder_is_reproducible_from_seed() {
        let run = |seed| {
            let mut s = sim(Mode::Reorder, seed);
            for i in 0..10u64 {
                s.write(1 + i % 3, i * 100, &[i as u8; 10], i);
            }
            let mut st = MemStore::default();
            s.destage_due(150, 100, &mut st).unwrap();
            let out = s.cut(&mut st);
            (st.log, out)
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42).0, run(43).0);
    }

    #[test]
    fn cache_pressure_destages_oldest_first() {
        let mut s = Sim::new(SimConfig {
            mode: Mode::Lying,
            cache_bytes: 4,
            ..SimConfig::default()
        });
        let mut st = MemStore::default();
        s.write(1, 0, b"abc", 0);
        assert_eq!(s.make_room(&mut st).unwrap(), 0);
        s.write(1, 3, b"de", 0);
        assert_eq!(s.make_room(&mut st).unwrap(), 1);
        assert_eq!(st.log, vec![(1, 0, 3)]);
        assert_eq!(s.cached_bytes(), 2);
    }

    #[test]
    fn sector_bounds_are_absolute() {
        assert_eq!(sector_bounds(0, 1024, 512), vec![512, 1024]);
        assert_eq!(sector_bounds(100, 1000, 512), vec![512, 1024, 1100]);
        assert_eq!(sector_bounds(512, 1, 512), vec![513]);
        assert_eq!(sector_bounds(5, 0, 512), Vec::<u64>::new());
    }

    #[test]
    fn torn_cut_keeps_a_prefix_of_sectors() {
        let mut s = sim(Mode::Torn, 7);
        let data: Vec<u8> = (0..4096u32).map(|i| (i / 512) as u8 + 1).collect();
        s.write(1, 0, &data, 0);
        s.write(1, 8192, &data, 0);
        let mut st = MemStore::default();
        let out = s.cut(&mut st);
        assert_eq!(out.len(), 2);
        // Replay the draws: one per write, in write_id order, uniform in 0..=8.
        let mut rng = StdRng::seed_from_u64(7);
        let k1: u64 = rng.random_range(0..=8);
        let k2: u64 = rng.random_range(0..=8);
        assert_eq!(out[0].kept_sectors, Some(k1));
        assert_eq!(out[1].kept_sectors, Some(k2));
        for (o, k) in out.iter().zip([k1, k2]) {
            let fate = match k {
                0 => Fate::Dropped,
                8 => Fate::Destaged,
                _ => Fate::Torn,
            };
            assert_eq!(o.fate, fate);
        }
        let f = st.files.get(&1).cloned().unwrap_or_default();
        let expect_len = if k2 > 0 { 8192 + 512 * k2 } else { 512 * k1 };
        assert_eq!(f.len() as u64, expect_len);
        for (i, b) in f.iter().enumerate() {
            let i = i as u64;
            let want = if i < 512 * k1 {
                (i / 512) as u8 + 1
            } else if (8192..8192 + 512 * k2).contains(&i) {
                ((i - 8192) / 512) as u8 + 1
            } else {
                0
            };
            assert_eq!(*b, want, "byte {i}");
        }
    }

    #[test]
    fn misdirect_block_choice() {
        let mut rng = StdRng::seed_from_u64(3);
        // File of 4 blocks, write of 1 block at block 1: candidates 0, 2, 3.
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            seen.insert(pick_misdirect_block(1, 4096, 4 * 4096, 4096, &mut rng).unwrap());
        }
        assert_eq!(seen, BTreeSet::from([0, 2, 3]));
        // Two-block write in a 3-block file: candidates 0 and 1, own is 1.
        for _ in 0..20 {
            assert_eq!(
                pick_misdirect_block(1, 8192, 3 * 4096, 4096, &mut rng),
                Some(0)
            );
        }
        // Own block past the candidates (write extends the file): any candidate.
        assert_eq!(pick_misdirect_block(5, 4096, 4096, 4096, &mut rng), Some(0));
        // Only the own block fits, or the file is too short: nowhere to go.
        assert_eq!(pick_misdirect_block(0, 4096, 4096, 4096, &mut rng), None);
        assert_eq!(pick_misdirect_block(0, 8192, 4096, 4096, &mut rng), None);
    }

    #[test]
    fn misdirect_lands_elsewhere_and_keeps_old_contents() {
        let mut s = Sim::new(SimConfig {
            mode: Mode::Misdirect,
            seed: 11,
            misdirect_every: 1, // every eligible write
            ..SimConfig::default()
        });
        let mut st = MemStore::default();
        st.write_at(1, 0, &[0xAA; 4 * 4096]).unwrap();
        st.log.clear();
        s.write(1, 4096, &[0x55; 4096], 0); // eligible
        s.write(1, 100, b"small", 0); // not block-aligned: never misdirected
        let upto = s.next_write_id();
        s.destage_ino(1, &mut st).unwrap();
        s.mark_fsynced(1, upto);
        let m = s.misdirected().to_vec();
        assert_eq!(m.len(), 1);
        let at = m[0].landed_at.unwrap();
        assert_ne!(at, 4096);
        assert_eq!(at % 4096, 0);
        assert!(at < 4 * 4096);
        let f = &st.files[&1];
        assert!(f[4096..8192].iter().all(|&b| b == 0xAA), "own block kept");
        assert!(f[at as usize..at as usize + 4096]
            .iter()
            .all(|&b| b == 0x55));
        assert_eq!(&f[100..105], b"small");
        let out = s.cut(&mut st);
        assert_eq!(out.len(), 1);
        assert_eq!(
            out[0],
            TruthEntry {
                write_id: 1,
                ino: 1,
                offset: 4096,
                len: 4096,
                fsynced: true,
                fate: Fate::Misdirected,
                kept_sectors: None,
                landed_at: Some(at),
            }
        );
    }

    #[test]
    fn flush_all_empties_in_order() {
        let mut s = sim(Mode::Reorder, 5);
        s.write(1, 0, b"ab", 0);
        s.write(1, 0, b"c", 0);
        let mut st = MemStore::default();
        s.flush_all(&mut st).unwrap();
        assert_eq!(st.files[&1], b"cb");
        assert_eq!(s.cached_writes(), 0);
        assert!(s.cut(&mut st).is_empty());
    }
}
