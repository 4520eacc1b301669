//! A pgbench run's acknowledged ranges folded per client as the ledger is read
//! ([`PgRanges`]): every range the batches carried, in ledger order, packed as
//! varints per client instead of kept in the batches that carried them.

use super::batches::{get_varint, put_varint, unzigzag, zigzag};
use super::{AckBatch, Acks};
use std::collections::BTreeMap;

/// One acknowledged range as folded: a [`PgAckRange`](super::PgAckRange) of its
/// client with its batch's promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgRange {
    /// First acknowledged per-client sequence number in the range.
    pub first: u64,
    /// Last acknowledged per-client sequence number in the range.
    pub last: u64,
    /// Milliseconds after the run's start when `last`'s `COMMIT` returned.
    pub ms: u32,
    /// Whether the configuration promised durability for its batch's acks
    /// ([`AckBatch::promised`]).
    pub promised: bool,
}

/// A pgbench run's acknowledged ranges per client, each client's in ledger order
/// (the batches' first copies, every range as sent, valid or not: the verdict
/// judges them). Memory: per range, three varints — its start after the client's
/// previous range's end, its length, its time after the previous one's with the
/// promise — 3 to 5 bytes while a client's ranges follow each other, against a
/// 24-byte range plus its share of a whole batch held before.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PgRanges {
    clients: BTreeMap<u32, Log>,
}

/// One client's ranges, packed.
#[derive(Clone, Debug, Default, PartialEq)]
struct Log {
    bytes: Vec<u8>,
    /// The previous range's `last + 1` (0 before the first).
    next: u64,
    /// The previous range's time (0 before the first).
    ms: u32,
}

impl PgRanges {
    /// Folds the pgbench ranges of batch `b`, the next in ledger order (a batch of
    /// another workload's acks adds nothing).
    pub fn add(&mut self, b: &AckBatch) {
        let Acks::Pg(v) = &b.acks else { return };
        for r in v {
            let log = self.clients.entry(r.client).or_default();
            put_varint(
                &mut log.bytes,
                zigzag(r.first.wrapping_sub(log.next) as i64),
            );
            put_varint(&mut log.bytes, r.last.wrapping_sub(r.first));
            let ms = zigzag(i64::from(r.ms) - i64::from(log.ms));
            put_varint(&mut log.bytes, ms << 1 | u64::from(b.promised));
            log.next = r.last.wrapping_add(1);
            log.ms = r.ms;
        }
    }

    /// `batches` folded in order: for tests and tools that build them in memory.
    pub fn of(batches: &[AckBatch]) -> PgRanges {
        let mut p = PgRanges::default();
        for b in batches {
            p.add(b);
        }
        p
    }

    /// Every client with a range, ascending, with its ranges in ledger order.
    pub fn clients(&self) -> impl Iterator<Item = (u32, impl Iterator<Item = PgRange> + '_)> + '_ {
        self.clients.iter().map(|(&c, log)| (c, log.ranges()))
    }

    /// Client `c`'s ranges in ledger order (none when it has none).
    pub fn client(&self, c: u32) -> impl Iterator<Item = PgRange> + '_ {
        self.clients.get(&c).into_iter().flat_map(Log::ranges)
    }
}

impl Log {
    /// The client's ranges, in ledger order.
    fn ranges(&self) -> impl Iterator<Item = PgRange> + '_ {
        let (mut at, mut next, mut ms) = (0usize, 0u64, 0u32);
        std::iter::from_fn(move || {
            if at >= self.bytes.len() {
                return None;
            }
            let first = next.wrapping_add(unzigzag(get_varint(&self.bytes, &mut at)) as u64);
            let last = first.wrapping_add(get_varint(&self.bytes, &mut at));
            let t = get_varint(&self.bytes, &mut at);
            ms = (i64::from(ms) + unzigzag(t >> 1)) as u32;
            next = last.wrapping_add(1);
            Some(PgRange {
                first,
                last,
                ms,
                promised: t & 1 == 1,
            })
        })
    }
}

/// A test batch (number 1) of one client's ranges `(client, first, last, ms)`, all
/// `promised` or not.
#[cfg(test)]
pub(crate) fn pg_batch(promised: bool, ranges: &[(u32, u64, u64, u32)]) -> AckBatch {
    AckBatch {
        batch: 1,
        promised,
        acks: Acks::Pg(
            ranges
                .iter()
                .map(|&(client, first, last, ms)| super::PgAckRange {
                    client,
                    first,
                    last,
                    ms,
                })
                .collect(),
        ),
        flushes: None,
        canary: 0,
        sealed_ms: 0,
        oldest_in_flight_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::pg_batch as b;

    #[test]
    fn each_clients_ranges_read_back_as_sent_in_ledger_order_odd_ones_too() {
        let all = [
            b(true, &[(1, 1, 5, 10), (0, 1, 1, 9)]),
            b(
                false,
                &[(1, 6, 9, 12), (1, 3, 2, 4), (0, 0, u64::MAX, u32::MAX)],
            ),
            b(true, &[(1, u64::MAX, 7, 0), (0, 2, 2, 3)]),
        ];
        let p = PgRanges::of(&all);
        let mut want: BTreeMap<u32, Vec<PgRange>> = BTreeMap::new();
        for x in &all {
            let Acks::Pg(v) = &x.acks else { unreachable!() };
            for r in v {
                want.entry(r.client).or_default().push(PgRange {
                    first: r.first,
                    last: r.last,
                    ms: r.ms,
                    promised: x.promised,
                });
            }
        }
        let got: BTreeMap<u32, Vec<PgRange>> =
            p.clients().map(|(c, rs)| (c, rs.collect())).collect();
        assert_eq!(got, want);
        assert_eq!(p.client(1).collect::<Vec<_>>(), want[&1]);
        assert_eq!(p.client(2).count(), 0);
        let mut file = b(true, &[]);
        file.acks = Acks::File(Vec::new());
        assert_eq!(PgRanges::of(&[file]).clients().count(), 0);
    }
}
