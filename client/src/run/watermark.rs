//! The acknowledged watermark every write of the file workload carries: the highest
//! seq `w` with every seq `≤ w` acknowledged at the write's issue (docs/formats.md,
//! the sector header's field at byte 40), kept without a lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// The acknowledged watermark: the highest `w` with every seq `≤ w` acknowledged
/// (its durability call returned), computed from what each worker has in flight, with
/// no lock.
///
/// Each worker has one slot: 0 when it has no write in flight, else a lower bound of
/// the seq of the write it has in flight. [`Watermark::issue`] publishes the bound
/// before it takes a seq from the run's counter, so a reader that loads the counter
/// first and the slots after sees every seq at or below the counter that is not
/// acknowledged yet (through its slot) and answers below it. A write that failed, or
/// whose success is not trusted, keeps its slot: the watermark never passes it.
pub struct Watermark {
    /// The last seq issued (the next write takes one more).
    next: AtomicU64,
    /// One per worker, each on its own cache line: a worker's stores do not
    /// invalidate the line of another's slot (the slots were one line before).
    slots: Box<[Slot]>,
}

/// One worker's slot, alone on a 128-byte line (two 64-byte lines: the adjacent-line
/// prefetcher of x86 pulls pairs).
#[repr(align(128))]
struct Slot(AtomicU64);

impl Watermark {
    /// The watermark of a run with `jobs` workers, before any write.
    pub fn new(jobs: usize) -> Self {
        Watermark {
            next: AtomicU64::new(0),
            slots: (0..jobs).map(|_| Slot(AtomicU64::new(0))).collect(),
        }
    }

    /// Worker `id` takes the next seq (from 1); it is in flight until
    /// [`Watermark::complete`].
    ///
    /// Panics if `id` is not below the `jobs` of [`Watermark::new`].
    pub fn issue(&self, id: usize) -> u64 {
        let slot = &self.slots[id].0;
        slot.store(self.next.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
        let seq = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        slot.store(seq, Ordering::SeqCst);
        seq
    }

    /// Worker `id`'s write in flight is acknowledged.
    pub fn complete(&self, id: usize) {
        self.slots[id].0.store(0, Ordering::SeqCst);
    }

    /// The current watermark (0 before the first seq is acknowledged).
    pub fn get(&self) -> u64 {
        let issued = self.next.load(Ordering::SeqCst);
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::SeqCst))
            .filter(|&s| s != 0)
            .min()
            .map_or(issued, |s| (s - 1).min(issued))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_watermark_waits_for_the_write_in_flight_then_jumps_over_every_seq_done_behind_it() {
        let w = Watermark::new(3);
        assert_eq!(w.get(), 0);
        assert_eq!((w.issue(0), w.issue(1), w.issue(2)), (1, 2, 3));
        w.complete(1);
        w.complete(2);
        assert_eq!(w.get(), 0);
        w.complete(0);
        assert_eq!(w.get(), 3);
        assert_eq!((w.issue(0), w.issue(1)), (4, 5));
        w.complete(1);
        assert_eq!(w.get(), 3);
        w.complete(0);
        assert_eq!(w.get(), 5);
        // A write that never completes (failed) holds the watermark below it.
        assert_eq!((w.issue(2), w.issue(0)), (6, 7));
        w.complete(0);
        assert_eq!(w.get(), 5);
    }

    #[test]
    fn under_concurrent_workers_the_watermark_never_passes_a_seq_in_flight() {
        const N: u64 = 200_000;
        let w = Watermark::new(4);
        let done: Vec<AtomicBool> = (0..=N + 8).map(|_| AtomicBool::new(false)).collect();
        let late = AtomicU64::new(0);
        std::thread::scope(|s| {
            for id in 0..4 {
                let (w, done, late) = (&w, &done, &late);
                s.spawn(move || loop {
                    let seq = w.issue(id);
                    if seq > N {
                        w.complete(id);
                        break;
                    }
                    let mark = w.get();
                    assert!(mark < seq, "watermark {mark} at the issue of {seq}");
                    // Every seq at or below the watermark had completed.
                    let lo = mark.saturating_sub(64).max(1);
                    for x in lo..=mark {
                        if !done[x as usize].load(Ordering::SeqCst) {
                            late.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    done[seq as usize].store(true, Ordering::SeqCst);
                    w.complete(id);
                });
            }
        });
        assert_eq!(late.load(Ordering::SeqCst), 0);
        assert_eq!(w.get(), N + 4);
    }
}
