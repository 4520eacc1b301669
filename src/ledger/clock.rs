//! When a run's acknowledgements were made, as a count per millisecond of the acks'
//! clock (ms after the run's start): what the cut's exposure windows, the
//! device-error rule and the rate timeline need of every acknowledgement, without
//! keeping one.

use std::collections::BTreeMap;

/// Milliseconds per page of counts.
const PAGE: u32 = 1024;

/// Acknowledgements per millisecond after the run's start, filled as a ledger is
/// read ([`AckClock::add`]). Memory: per 1,024 ms that hold any acknowledgement, a
/// page of counts each as wide as the page's largest needs (1, 2, 4 or 8 bytes),
/// whatever the number of acknowledgements: 1 KB per second of a run that
/// acknowledges fewer than 256 writes a millisecond all along, 2 KB below 65,536.
///
/// A millisecond whose count is 0 holds no acknowledgement (a pgbench range of no
/// commit adds nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AckClock {
    /// Page number (`ms / 1024`) → the counts of its 1,024 ms.
    pages: BTreeMap<u32, Page>,
}

/// The counts of one page's 1,024 ms, each as wide as the largest needs.
#[derive(Clone, Debug, PartialEq)]
enum Page {
    U8(Box<[u8; PAGE as usize]>),
    U16(Box<[u16; PAGE as usize]>),
    U32(Box<[u32; PAGE as usize]>),
    U64(Box<[u64; PAGE as usize]>),
}

impl Page {
    /// The count of millisecond `i` of the page.
    fn get(&self, i: usize) -> u64 {
        match self {
            Page::U8(c) => u64::from(c[i]),
            Page::U16(c) => u64::from(c[i]),
            Page::U32(c) => u64::from(c[i]),
            Page::U64(c) => c[i],
        }
    }

    /// Sets the count of millisecond `i` to `n`, widening the page when `n` needs it.
    fn set(&mut self, i: usize, n: u64) {
        let fits = match self {
            Page::U8(c) => u8::try_from(n).map(|n| c[i] = n).is_ok(),
            Page::U16(c) => u16::try_from(n).map(|n| c[i] = n).is_ok(),
            Page::U32(c) => u32::try_from(n).map(|n| c[i] = n).is_ok(),
            Page::U64(c) => {
                c[i] = n;
                true
            }
        };
        if !fits {
            let all: Vec<u64> = (0..PAGE as usize).map(|j| self.get(j)).collect();
            *self = if n <= u64::from(u16::MAX) {
                Page::U16(Box::new(std::array::from_fn(|j| all[j] as u16)))
            } else if n <= u64::from(u32::MAX) {
                Page::U32(Box::new(std::array::from_fn(|j| all[j] as u32)))
            } else {
                Page::U64(Box::new(std::array::from_fn(|j| all[j])))
            };
            self.set(i, n);
        }
    }

    /// The page's milliseconds holding acknowledgements, `(index, count)`, ascending.
    fn counts(&self) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
        (0..PAGE)
            .map(move |i| (i, self.get(i as usize)))
            .filter(|&(_, n)| n > 0)
    }
}

impl AckClock {
    /// Adds `n` acknowledgements made at `ms` ms after the run's start.
    pub fn add(&mut self, ms: u32, n: u64) {
        let page = self
            .pages
            .entry(ms / PAGE)
            .or_insert_with(|| Page::U8(Box::new([0; PAGE as usize])));
        let i = (ms % PAGE) as usize;
        page.set(i, page.get(i).wrapping_add(n));
    }

    /// Every millisecond holding acknowledgements and their count, `(ms, count)`,
    /// ascending.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
        self.pages
            .iter()
            .flat_map(|(&p, page)| page.counts().map(move |(i, n)| (p * PAGE + i, n)))
    }

    /// The milliseconds holding acknowledgements at or before `at`, newest first,
    /// `(ms, count)`.
    pub fn down_from(&self, at: u64) -> impl Iterator<Item = (u32, u64)> + '_ {
        let last_page = (at.min(u64::from(u32::MAX)) / u64::from(PAGE)) as u32;
        self.pages
            .range(..=last_page)
            .rev()
            .flat_map(|(&p, page)| page.counts().rev().map(move |(i, n)| (p * PAGE + i, n)))
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

    #[test]
    fn a_page_widens_its_counts_as_they_grow_and_keeps_the_others() {
        let mut c = AckClock::default();
        c.add(10, 200);
        c.add(11, 1);
        c.add(10, 100);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![(10, 300), (11, 1)]);
        c.add(12, 70_000);
        c.add(11, u64::from(u32::MAX));
        c.add(13, u64::MAX);
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            vec![
                (10, 300),
                (11, u64::from(u32::MAX) + 1),
                (12, 70_000),
                (13, u64::MAX)
            ]
        );
        // A count wraps as a u64 would.
        c.add(13, 2);
        assert_eq!(c.down_from(13).next(), Some((13, 1)));
        let mut d = AckClock::default();
        for (ms, n) in [
            (13, u64::MAX),
            (12, 70_000),
            (11, u64::from(u32::MAX)),
            (10, 300),
            (11, 1),
            (13, 2),
        ] {
            d.add(ms, n);
        }
        assert_eq!(c, d);
    }
}
