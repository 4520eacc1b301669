//! The cut: what happens to the writes still cached when the power goes, per mode.

use rand::Rng;

use super::{Mode, Sim, Store, TruthEntry};
use crate::truth::Fate;

impl Sim {
    /// Whether a cut now could tear a write: `torn` mode, and a cached write spans
    /// more than one sector piece and is longer than `atomic_unit` (so its `k` is
    /// drawn from `0..=n`, see [`Sim::cut`]). Always false in the other modes.
    pub fn can_tear(&self) -> bool {
        self.config.mode == Mode::Torn
            && self.writes.values().any(|w| {
                let len = w.data.len() as u64;
                len > self.config.atomic_unit
                    && sector_bounds(w.offset, len, self.config.sector).len() > 1
            })
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
    ///   `k == n` `destaged`, anything between `torn`. A write of at most
    ///   `atomic_unit` bytes (when that is not 0) is atomic: `k` is drawn from
    ///   `{0, n}` with equal chances, so it is never `torn`.
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
                let atomic = len <= self.config.atomic_unit;
                let k = if atomic {
                    n * u64::from(self.rng.random_bool(0.5))
                } else {
                    self.rng.random_range(0..=n)
                };
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
                file_write_id: w.file_write_id,
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
