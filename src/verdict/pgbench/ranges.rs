//! A pgbench run's acknowledged ranges as the verdict reads them, straight from the
//! packed fold ([`PgRanges`]) and never all unpacked at once.
//!
//! The verdict's order ([`client_ranges`]): a client's valid ranges (`1 ≤ first ≤
//! last`) sorted by `(first, last, promised, ms)`, one of each `(first, last)` (the
//! first in that order; a repeat is a resent range). A client whose ranges the ledger
//! holds in that order already (ascending, none repeated: what an agent sends) is read
//! straight from the fold, lazily; only a client whose ranges are not is unpacked
//! and sorted, for that read alone.
//!
//! From that order, each a pass per client: the merged ranges ([`merge_ranges`],
//! normally one per client), the run's last acknowledgement ([`end_ms`]), when listed
//! lost commits were acknowledged ([`ack_times`]) and the lags of the lost promised
//! commits ([`LostLags`], fed the lost seqs as PostgreSQL streams them).

use super::{AckRange, ClientAcks};
use crate::ledger::{AckBatch, PgRange, PgRanges};
use std::collections::BTreeMap;
use std::iter::Peekable;

/// One client's ranges in the verdict's order, lazily: read from the fold, or
/// unpacked and sorted (a client whose ranges the ledger holds out of that order).
pub enum Ordered<'a> {
    /// Read from the fold as they are needed.
    Fold(Box<dyn Iterator<Item = AckRange> + 'a>),
    /// Unpacked, sorted, the repeats dropped.
    Sorted(std::vec::IntoIter<AckRange>),
}

impl Iterator for Ordered<'_> {
    type Item = AckRange;

    fn next(&mut self) -> Option<AckRange> {
        match self {
            Ordered::Fold(rs) => rs.next(),
            Ordered::Sorted(rs) => rs.next(),
        }
    }
}

/// Ranges read one by one.
type Ranges<'a> = Box<dyn Iterator<Item = AckRange> + 'a>;

/// Whether a range is one the verdict judges (`1 ≤ first ≤ last`).
fn valid(r: &PgRange) -> bool {
    r.first >= 1 && r.last >= r.first
}

fn ack(r: PgRange) -> AckRange {
    AckRange {
        first: r.first,
        last: r.last,
        promised: r.promised,
        ms: r.ms,
    }
}

/// Client `c`'s valid ranges in the verdict's order (see the module doc): read from
/// the fold when it holds them ascending with none repeated (one pass checks that),
/// else unpacked, sorted and the repeats dropped.
pub fn client_ranges(ranges: &PgRanges, c: u32) -> Ordered<'_> {
    let read = move || ranges.client(c).filter(valid).map(ack);
    let mut prev: Option<(u64, u64)> = None;
    let in_order = read().all(|r| {
        let ok = prev.is_none_or(|p| p < (r.first, r.last));
        prev = Some((r.first, r.last));
        ok
    });
    if in_order {
        return Ordered::Fold(Box::new(read()));
    }
    let mut v: Vec<AckRange> = read().collect();
    v.sort();
    v.dedup_by_key(|r| (r.first, r.last));
    Ordered::Sorted(v.into_iter())
}

/// Every client with a range (valid or not), ascending, with its valid ranges in the
/// verdict's order.
pub fn ordered(ranges: &PgRanges) -> impl Iterator<Item = (u32, Ordered<'_>)> + '_ {
    ranges
        .clients()
        .map(move |(c, _)| (c, client_ranges(ranges, c)))
}

/// [`merge_ranges`] of `batches` (in ledger order) folded per client.
pub fn merge_acks(batches: &[AckBatch]) -> BTreeMap<u32, ClientAcks> {
    merge_ranges(&PgRanges::of(batches))
}

/// Merges the ledger's ranges into per-client ranges: adjacent or overlapping
/// ranges with the same promise flag become one (taking the later `ms`); where
/// ranges of different flags overlap, the first keeps the overlap. Clients with no
/// valid range are left out.
pub fn merge_ranges(ranges: &PgRanges) -> BTreeMap<u32, ClientAcks> {
    let mut out = BTreeMap::new();
    for (c, rs) in ordered(ranges) {
        let mut merged: Vec<AckRange> = Vec::new();
        for r in rs {
            match merged.last_mut() {
                Some(m) if m.promised == r.promised && r.first <= m.last + 1 => {
                    if r.last > m.last {
                        m.last = r.last;
                        m.ms = r.ms;
                    }
                }
                Some(m) if r.first <= m.last => {
                    // Overlap with a different promise flag: keep the first.
                    if r.last > m.last {
                        let rest = AckRange {
                            first: m.last + 1,
                            ..r
                        };
                        merged.push(rest);
                    }
                }
                _ => merged.push(r),
            }
        }
        if !merged.is_empty() {
            out.insert(c, ClientAcks { ranges: merged });
        }
    }
    out
}

/// The run's last acknowledgement, ms after its start (0 with none).
pub fn end_ms(ranges: &PgRanges) -> u32 {
    ordered(ranges)
        .flat_map(|(_, rs)| rs.map(|r| r.ms))
        .max()
        .unwrap_or(0)
}

/// When each of `seqs` of one client was acknowledged, from that client's `ranges`
/// in the verdict's order ([`client_ranges`]), in one pass: exactly, when it ends the
/// first range holding it; else between the previous range's time (0 for the first
/// range) and its range's time. Said as seconds before the run's last acknowledgement
/// (`end_ms`) and into the run; "at an unknown time" for a seq no range holds, and
/// nothing (empty strings) for a client without ranges.
pub fn ack_times(ranges: impl Iterator<Item = AckRange>, seqs: &[u64], end_ms: u32) -> Vec<String> {
    let mut sorted: Vec<(u64, usize)> = seqs.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    let mut found: Vec<Option<(AckRange, u32)>> = vec![None; seqs.len()];
    let (mut prev_ms, mut any) = (0u32, false);
    for r in ranges {
        any = true;
        let from = sorted.partition_point(|&(s, _)| s < r.first);
        for &(_, i) in sorted[from..].iter().take_while(|&&(s, _)| s <= r.last) {
            found[i].get_or_insert((r, prev_ms));
        }
        prev_ms = r.ms;
    }
    if !any {
        return vec![String::new(); seqs.len()];
    }
    let secs = |ms: u32| ms as f64 / 1000.0;
    let before = |ms: u32| secs(end_ms.saturating_sub(ms));
    seqs.iter()
        .zip(found)
        .map(|(&s, f)| match f {
            None => "acknowledged at an unknown time".into(),
            Some((r, _)) if s == r.last => format!(
                "acknowledged {:.3} s before the end, {:.3} s into the run",
                before(r.ms),
                secs(r.ms)
            ),
            Some((r, from)) => format!(
                "acknowledged between {:.3} and {:.3} s before the end ({:.3}–{:.3} s into \
                 the run; its range, seqs {} to {}, was acknowledged by {:.3} s)",
                before(from),
                before(r.ms),
                secs(from),
                secs(r.ms),
                r.first,
                r.last,
                secs(r.ms)
            ),
        })
        .collect()
}

/// The lags of the lost promised commits, as their seqs arrive: each lost seq has a
/// lag at the time of every promised range holding it (in the verdict's order), in
/// seconds before `end_ms` (the latest the commit can have been acknowledged, so the
/// lag is a lower bound). Memory: the ranges of the current client that hold the
/// current seq, read from the fold; for a client whose ranges are not ascending
/// without repeats ([`Ordered::Sorted`]), all of that client's ranges, unpacked and
/// sorted.
pub struct LostLags<'a> {
    ranges: &'a PgRanges,
    end_ms: u32,
    /// The client being read, its promised ranges not reached yet, and those
    /// reached that may still hold a later seq.
    client: Option<u32>,
    ahead: Peekable<Ranges<'a>>,
    holding: Vec<AckRange>,
}

impl<'a> LostLags<'a> {
    /// No lost commit yet, for the run's `ranges` and last acknowledgement `end_ms`.
    pub fn new(ranges: &'a PgRanges, end_ms: u32) -> LostLags<'a> {
        LostLags {
            ranges,
            end_ms,
            client: None,
            ahead: (Box::new(std::iter::empty()) as Ranges<'a>).peekable(),
            holding: Vec::new(),
        }
    }

    /// Gives `lag` the lags of client `c`'s lost seq `s`, one per promised range
    /// holding it. Each client's seqs must come ascending (as `ORDER BY client, seq`
    /// returns them); the clients in any order, a client's ranges read again each
    /// time it comes back.
    pub fn add(&mut self, c: u32, s: u64, mut lag: impl FnMut(f64)) {
        if self.client != Some(c) {
            let promised = client_ranges(self.ranges, c).filter(|r| r.promised);
            self.ahead = (Box::new(promised) as Ranges<'a>).peekable();
            self.holding.clear();
        }
        self.client = Some(c);
        while let Some(r) = self.ahead.next_if(|r| r.first <= s) {
            self.holding.push(r);
        }
        self.holding.retain(|r| r.last >= s);
        for r in &self.holding {
            lag((i64::from(self.end_ms) - i64::from(r.ms)).max(0) as f64 / 1000.0);
        }
    }
}

#[cfg(test)]
mod tests;
