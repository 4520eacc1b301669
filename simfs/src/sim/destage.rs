//! Destaging: how cached writes reach the backing store before the cut — on fsync
//! ([`Sim::destage_ino`]), under cache pressure ([`Sim::make_room`]), after their
//! delay ([`Sim::destage_due`]), at a clean shutdown ([`Sim::flush_all`]) — and, in
//! `misdirect` mode, where a destaged block lands instead.

use std::io;

use rand::Rng;

use super::{Cached, Mode, Sim, Store, TruthEntry};
use crate::truth::Fate;

impl Sim {
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
                file_write_id: w.file_write_id,
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
