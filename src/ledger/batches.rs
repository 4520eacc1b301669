//! A run's ack batches folded as the ledger is read ([`Batches`]): what the cut
//! evidence and the flush counts need of them, without a record per batch.

use super::{AckBatch, FlushSample};

/// A run's ack batches (each batch number's first copy), folded in ledger order:
/// their count, acknowledgements, newest canary record and latest sealing; the flush
/// samples some carry (one a second); and each one's sealing time and oldest write in
/// flight, packed as varints (2 to 4 bytes a batch) for the cut's stall rule
/// ([`Batches::newest_sealed_by`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batches {
    /// Batches folded.
    pub count: u64,
    /// Their acknowledgements ([`Acks::count`](super::Acks::count): commits for
    /// pgbench).
    pub acks: u64,
    /// The highest canary record written when any was sealed
    /// ([`AckBatch::canary`]; 0: no batch).
    pub canary: u64,
    /// The latest sealing time, ms after the run's start ([`AckBatch::sealed_ms`];
    /// `None`: no batch).
    pub last_sealed_ms: Option<u32>,
    /// The flush samples batches carried ([`AckBatch::flushes`]), in ledger order,
    /// each with the acknowledgements of the batches up to its own (included).
    pub samples: Vec<(FlushSample, u64)>,
    /// Per batch, in ledger order: its sealing time as a zigzag varint of the
    /// difference from the previous batch's, then its oldest write in flight as a
    /// varint, 0 for none, else 1 + the zigzag of (sealing time − it).
    stamps: Vec<u8>,
    /// The previous batch's sealing time (0 before the first).
    prev_sealed_ms: u32,
}

impl Batches {
    /// Folds batch `b`, the next in ledger order.
    pub fn add(&mut self, b: &AckBatch) {
        self.count += 1;
        self.acks += b.acks.count();
        self.canary = self.canary.max(b.canary);
        self.last_sealed_ms = self.last_sealed_ms.max(Some(b.sealed_ms));
        if let Some(s) = &b.flushes {
            self.samples.push((s.clone(), self.acks));
        }
        let sealed = i64::from(b.sealed_ms);
        put_varint(
            &mut self.stamps,
            zigzag(sealed - i64::from(self.prev_sealed_ms)),
        );
        let oldest = b
            .oldest_in_flight_ms
            .map_or(0, |t| 1 + zigzag(sealed - i64::from(t)));
        put_varint(&mut self.stamps, oldest);
        self.prev_sealed_ms = b.sealed_ms;
    }

    /// Each batch's `(sealing time, oldest write in flight)`, ms after the run's
    /// start, in ledger order.
    pub fn stamps(&self) -> impl Iterator<Item = (u32, Option<u32>)> + '_ {
        let mut at = 0usize;
        let mut sealed = 0i64;
        std::iter::from_fn(move || {
            if at >= self.stamps.len() {
                return None;
            }
            sealed += unzigzag(get_varint(&self.stamps, &mut at));
            let oldest = match get_varint(&self.stamps, &mut at) {
                0 => None,
                v => Some((sealed - unzigzag(v - 1)) as u32),
            };
            Some((sealed as u32, oldest))
        })
    }

    /// The batch sealed latest at or before `at` (ms after the run's start; of
    /// several sealed then, the last in ledger order): its `(sealing time, oldest
    /// write in flight)`; `None` when no batch was sealed by then.
    pub fn newest_sealed_by(&self, at: u64) -> Option<(u32, Option<u32>)> {
        self.stamps().filter(|&(s, _)| u64::from(s) <= at).fold(
            None,
            |best: Option<(u32, Option<u32>)>, b| match best {
                Some(x) if x.0 > b.0 => Some(x),
                _ => Some(b),
            },
        )
    }
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn get_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Acks, FileAck};

    fn b(sealed_ms: u32, oldest: Option<u32>, canary: u64, acks: u64, sample: bool) -> AckBatch {
        AckBatch {
            batch: 1,
            promised: true,
            acks: Acks::File(
                (0..acks)
                    .map(|i| FileAck {
                        seq: i + 1,
                        block: i,
                        ms: 1,
                    })
                    .collect(),
            ),
            flushes: sample.then(|| FlushSample {
                counts: vec![Some(acks)],
            }),
            canary,
            sealed_ms,
            oldest_in_flight_ms: oldest,
        }
    }

    #[test]
    fn batches_fold_into_counts_samples_and_stamps_read_back_in_order() {
        let mut f = Batches::default();
        assert_eq!(
            (f.last_sealed_ms, f.newest_sealed_by(u64::MAX)),
            (None, None)
        );
        let all = [
            b(500, Some(20), 3, 2, true),
            b(0, None, 9, 1, false),
            b(u32::MAX, Some(u32::MAX), 4, 0, false),
            b(700, Some(900), 1, 3, true),
            b(700, Some(0), 0, 0, false),
            b(200, None, 0, 1, false),
        ];
        for x in &all {
            f.add(x);
        }
        let want: Vec<_> = all
            .iter()
            .map(|x| (x.sealed_ms, x.oldest_in_flight_ms))
            .collect();
        assert_eq!(f.stamps().collect::<Vec<_>>(), want);
        assert_eq!((f.count, f.acks, f.canary), (6, 7, 9));
        assert_eq!(f.last_sealed_ms, Some(u32::MAX));
        let acked: Vec<u64> = f.samples.iter().map(|s| s.1).collect();
        assert_eq!(acked, vec![2, 6]);
        // The latest sealed by then; of two sealed at 700, the later in the ledger.
        assert_eq!(f.newest_sealed_by(699), Some((500, Some(20))));
        assert_eq!(f.newest_sealed_by(700), Some((700, Some(0))));
        assert_eq!(f.newest_sealed_by(199), Some((0, None)));
        assert_eq!(
            f.newest_sealed_by(u64::MAX),
            Some((u32::MAX, Some(u32::MAX)))
        );
    }
}
