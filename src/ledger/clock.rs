//! When a run's acknowledgements were made, as a count per millisecond of the acks'
//! clock (ms after the run's start): what the cut's exposure windows, the
//! device-error rule and the rate timeline need of every acknowledgement, without
//! keeping one.

use std::collections::BTreeMap;

/// Milliseconds per page of counts.
const PAGE: u32 = 1024;

/// Acknowledgements per millisecond after the run's start, filled as a ledger is
/// read ([`AckClock::add`]). Memory: 8 KiB per 1,024 ms that hold any
/// acknowledgement (a page of `u64` counts), whatever the number of
/// acknowledgements: about 8 KB per second of a run that acknowledges all along.
///
/// A millisecond whose count is 0 holds no acknowledgement (a pgbench range of no
/// commit adds nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AckClock {
    /// Page number (`ms / 1024`) → the counts of its 1,024 ms.
    pages: BTreeMap<u32, Box<[u64; PAGE as usize]>>,
}

impl AckClock {
    /// Adds `n` acknowledgements made at `ms` ms after the run's start.
    pub fn add(&mut self, ms: u32, n: u64) {
        let page = self
            .pages
            .entry(ms / PAGE)
            .or_insert_with(|| Box::new([0; PAGE as usize]));
        let c = &mut page[(ms % PAGE) as usize];
        *c = c.wrapping_add(n);
    }

    /// Every millisecond holding acknowledgements and their count, `(ms, count)`,
    /// ascending.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
        self.pages.iter().flat_map(|(&p, counts)| {
            counts
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(move |(i, &n)| (p * PAGE + i as u32, n))
        })
    }

    /// The milliseconds holding acknowledgements at or before `at`, newest first,
    /// `(ms, count)`.
    pub fn down_from(&self, at: u64) -> impl Iterator<Item = (u32, u64)> + '_ {
        let last_page = (at.min(u64::from(u32::MAX)) / u64::from(PAGE)) as u32;
        self.pages
            .range(..=last_page)
            .rev()
            .flat_map(|(&p, counts)| {
                counts
                    .iter()
                    .enumerate()
                    .rev()
                    .filter(|(_, &n)| n > 0)
                    .map(move |(i, &n)| (p * PAGE + i as u32, n))
            })
            .filter(move |&(ms, _)| u64::from(ms) <= at)
    }

    /// Acknowledgements made after `ms` (strictly later).
    pub fn count_after(&self, ms: u64) -> u64 {
        self.iter()
            .rev()
            .take_while(|&(t, _)| u64::from(t) > ms)
            .fold(0u64, |sum, (_, n)| sum.wrapping_add(n))
    }

    /// The latest millisecond holding an acknowledgement (`None`: none).
    pub fn last(&self) -> Option<u32> {
        self.iter().next_back().map(|(ms, _)| ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_millisecond_across_pages_read_back_in_order() {
        let mut c = AckClock::default();
        assert_eq!((c.last(), c.count_after(0)), (None, 0));
        for (ms, n) in [
            (5000, 2),
            (3, 1),
            (1023, 4),
            (1024, 1),
            (3, 2),
            (u32::MAX, 7),
        ] {
            c.add(ms, n);
        }
        c.add(77, 0);
        let all: Vec<_> = c.iter().collect();
        assert_eq!(
            all,
            vec![(3, 3), (1023, 4), (1024, 1), (5000, 2), (u32::MAX, 7)]
        );
        assert_eq!(c.last(), Some(u32::MAX));
        assert_eq!(c.count_after(1023), 10);
        assert_eq!(c.count_after(1022), 14);
        assert_eq!(c.count_after(u64::from(u32::MAX)), 0);
        let down: Vec<_> = c.down_from(1024).collect();
        assert_eq!(down, vec![(1024, 1), (1023, 4), (3, 3)]);
        assert_eq!(c.down_from(1023).next(), Some((1023, 4)));
        assert_eq!(c.down_from(2).next(), None);
        assert_eq!(c.down_from(u64::MAX).next(), Some((u32::MAX, 7)));
    }
}
