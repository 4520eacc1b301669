//! When a run's acknowledgements were made, as a count per millisecond of the acks'
//! clock (ms after the run's start): what the cut's exposure windows, the
//! device-error rule and the rate timeline need of every acknowledgement, without
//! keeping one.

use std::collections::BTreeMap;

/// Milliseconds per page of counts: a second, so the report's timeline bins of a
/// second or more hold whole pages.
const PAGE: u32 = 1000;
/// Pages kept per millisecond behind the newest one (5 minutes); older ones keep
/// their total, first and last millisecond ([`AckClock`]).
const FINE_PAGES: u32 = 300;

/// Acknowledgements per millisecond after the run's start, filled as a ledger is
/// read ([`AckClock::add`]), at full resolution where the verdict needs it and per
/// second elsewhere.
///
/// Per millisecond: the last 300 s of acknowledgements (behind the newest page
/// added) and the second before the pinned time ([`AckClock::pin`]: the oldest
/// write in flight of the latest-sealed batch, where a stalled run's cut is put),
/// each page's counts as wide as its largest needs (1, 2, 4 or 8 bytes a ms). Older
/// seconds keep their total and their first and last millisecond holding any
/// (reported as the total at the last millisecond: [`AckClock::iter`]). So the cut's
/// windows (the second before the cut), the last acknowledgement before it, the
/// device-error rule's count after the error and the timeline (whose bins are whole
/// seconds for any run longer than 60 s and shorter than 120 h) are exact while the cut or error lies in
/// the last 300 s of acknowledgements or at the pinned time, as in a run the agent
/// recorded; a cut or error further back (a ledger with acknowledgements long after
/// its device error or server loss) is counted per second there. Memory: at most
/// 303 pages of up to 8 KB (0.3 to 2.4 MB), plus about 40 bytes per older second.
///
/// A millisecond whose count is 0 holds no acknowledgement (a pgbench range of no
/// commit adds nothing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AckClock {
    /// Page number (`ms / 1000`) → the counts of its 1,000 ms.
    pages: BTreeMap<u32, Page>,
    /// The newest page added.
    newest: Option<u32>,
    /// Pages below it are per second, except those in `exempt`.
    coarse_below: u32,
    /// Pages below `coarse_below` kept per millisecond while pinned.
    exempt: Vec<u32>,
    /// The pinned page: it and the one before stay per millisecond.
    pinned: Option<u32>,
}

/// The counts of one page's 1,000 ms, each as wide as the largest needs, or (an
/// older second) their total and the first and last millisecond holding any.
#[derive(Clone, Debug, PartialEq)]
enum Page {
    U8(Box<[u8; PAGE as usize]>),
    U16(Box<[u16; PAGE as usize]>),
    U32(Box<[u32; PAGE as usize]>),
    U64(Box<[u64; PAGE as usize]>),
    Second { total: u64, first: u16, last: u16 },
}

impl Page {
    /// The count of millisecond `i` of the page (0 for a page kept per second).
    fn get(&self, i: usize) -> u64 {
        match self {
            Page::U8(c) => u64::from(c[i]),
            Page::U16(c) => u64::from(c[i]),
            Page::U32(c) => u64::from(c[i]),
            Page::U64(c) => c[i],
            Page::Second { .. } => 0,
        }
    }

    /// Adds `n` acknowledgements at millisecond `i` of the page, widening it when the
    /// count needs it.
    fn add(&mut self, i: usize, n: u64) {
        if let Page::Second { total, first, last } = self {
            if n > 0 {
                let (f, l) = if *total == 0 {
                    (i as u16, i as u16)
                } else {
                    (*first, *last)
                };
                (*first, *last) = (f.min(i as u16), l.max(i as u16));
            }
            *total = total.wrapping_add(n);
            return;
        }
        let n = self.get(i).wrapping_add(n);
        let fits = match self {
            Page::U8(c) => u8::try_from(n).map(|n| c[i] = n).is_ok(),
            Page::U16(c) => u16::try_from(n).map(|n| c[i] = n).is_ok(),
            Page::U32(c) => u32::try_from(n).map(|n| c[i] = n).is_ok(),
            Page::U64(c) => {
                c[i] = n;
                true
            }
            Page::Second { .. } => unreachable!("handled above"),
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
            let old = all[i];
            self.add(i, n.wrapping_sub(old));
        }
    }

    /// The page kept per second: its total, first and last millisecond holding any.
    fn per_second(&self) -> Page {
        if let Page::Second { .. } = self {
            return self.clone();
        }
        let mut s = Page::Second {
            total: 0,
            first: 0,
            last: 0,
        };
        for (i, n) in self.counts() {
            s.add(i as usize, n);
        }
        s
    }

    /// The page's milliseconds holding acknowledgements, `(index, count)`, ascending;
    /// of a page kept per second, its total at its last millisecond.
    fn counts(&self) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
        let (fine, second) = match self {
            Page::Second { total, last, .. } => {
                (0..0, (*total > 0).then_some((u32::from(*last), *total)))
            }
            _ => (0..PAGE, None),
        };
        fine.map(move |i| (i, self.get(i as usize)))
            .filter(|&(_, n)| n > 0)
            .chain(second)
    }
}

impl AckClock {
    /// Adds `n` acknowledgements made at `ms` ms after the run's start.
    pub fn add(&mut self, ms: u32, n: u64) {
        let p = ms / PAGE;
        if self.newest.is_none_or(|x| p > x) {
            self.newest = Some(p);
            self.keep_per_second(p.saturating_sub(FINE_PAGES));
        }
        let per_second = p < self.coarse_below && !self.is_pinned(p);
        let page = self.pages.entry(p).or_insert_with(|| {
            if per_second {
                Page::Second {
                    total: 0,
                    first: 0,
                    last: 0,
                }
            } else {
                Page::U8(Box::new([0; PAGE as usize]))
            }
        });
        page.add((ms % PAGE) as usize, n);
        if !per_second && p < self.coarse_below && !self.exempt.contains(&p) {
            self.exempt.push(p);
        }
    }

    /// Keeps `ms` and the second before it per millisecond, in place of the time
    /// pinned before (`None`: none): the oldest write in flight of the latest-sealed
    /// batch, where the cut of a stalled run is put however long ago it was issued. A
    /// time already kept per second stays so.
    pub fn pin(&mut self, ms: Option<u32>) {
        self.pinned = ms.map(|ms| ms / PAGE);
    }

    /// Whether page `p` is kept per millisecond for the pinned time.
    fn is_pinned(&self, p: u32) -> bool {
        self.pinned
            .is_some_and(|q| p == q || p.saturating_add(1) == q)
    }

    /// Keeps every page below `limit` per second, but the pinned ones.
    fn keep_per_second(&mut self, limit: u32) {
        let mut keep = std::mem::take(&mut self.exempt);
        if limit > self.coarse_below {
            keep.extend(self.pages.range(self.coarse_below..limit).map(|(&p, _)| p));
            self.coarse_below = limit;
        }
        for p in keep {
            if self.is_pinned(p) {
                self.exempt.push(p);
            } else if let Some(page) = self.pages.get_mut(&p) {
                *page = page.per_second();
            }
        }
    }

    /// Adds one acknowledgement made at each of `times` (ms after the run's start),
    /// as [`AckClock::add`] of each would: a run of equal times is added at once.
    pub fn add_each(&mut self, times: impl IntoIterator<Item = u32>) {
        let mut run: Option<(u32, u64)> = None;
        for ms in times {
            match &mut run {
                Some((t, n)) if *t == ms => *n += 1,
                _ => {
                    if let Some((t, n)) = run.replace((ms, 1)) {
                        self.add(t, n);
                    }
                }
            }
        }
        if let Some((t, n)) = run {
            self.add(t, n);
        }
    }

    /// Every millisecond holding acknowledgements and their count, `(ms, count)`,
    /// ascending; of a second kept per second, its total at its last millisecond.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u32, u64)> + '_ {
        self.pages
            .iter()
            .flat_map(|(&p, page)| page.counts().map(move |(i, n)| (p * PAGE + i, n)))
    }

    /// The milliseconds holding acknowledgements at or before `at`, newest first,
    /// `(ms, count)` (as [`AckClock::iter`]).
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
        for (ms, n) in [(5000, 2), (3, 1), (999, 4), (1000, 1), (3, 2), (250_000, 7)] {
            c.add(ms, n);
        }
        c.add(77, 0);
        let mut each = AckClock::default();
        each.add_each([5000, 5000, 3, 999, 999, 999, 999, 1000, 3, 3]);
        each.add_each([250_000; 7]);
        each.add_each([]);
        assert_eq!(each, c);
        let all: Vec<_> = c.iter().collect();
        assert_eq!(
            all,
            vec![(3, 3), (999, 4), (1000, 1), (5000, 2), (250_000, 7)]
        );
        assert_eq!(c.last(), Some(250_000));
        assert_eq!(c.count_after(999), 10);
        assert_eq!(c.count_after(998), 14);
        assert_eq!(c.count_after(250_000), 0);
        let down: Vec<_> = c.down_from(1000).collect();
        assert_eq!(down, vec![(1000, 1), (999, 4), (3, 3)]);
        assert_eq!(c.down_from(999).next(), Some((999, 4)));
        assert_eq!(c.down_from(2).next(), None);
        assert_eq!(c.down_from(u64::MAX).next(), Some((250_000, 7)));
    }

    #[test]
    fn seconds_five_minutes_behind_the_newest_keep_their_total_unless_pinned() {
        let mut c = AckClock::default();
        for (ms, n) in [(1_500, 2), (1_700, 3), (10_020, 1), (10_500, 2)] {
            c.add(ms, n);
        }
        // The second before 11,000 ms (pages 10 and 11) stays per millisecond.
        c.pin(Some(11_000));
        c.add(400_000, 5);
        let all: Vec<_> = c.iter().collect();
        assert_eq!(
            all,
            vec![(1_700, 5), (10_020, 1), (10_500, 2), (400_000, 5)]
        );
        // An older second counts whole after a time before its last acknowledgement.
        assert_eq!(c.count_after(1_700), 8);
        assert_eq!(c.count_after(1_600), 13);
        assert_eq!(c.down_from(1_699).next(), None);
        assert_eq!(c.down_from(10_499).next(), Some((10_020, 1)));
        // A late acknowledgement in an older second joins its total.
        c.add(1_100, 1);
        c.add(1_800, 0);
        assert_eq!(c.iter().next(), Some((1_700, 6)));
        // Pinned again elsewhere, page 10 goes per second at the next newest page; a
        // pinned page made late stays per millisecond.
        c.pin(Some(50_000));
        c.add(49_500, 1);
        c.add(49_600, 1);
        c.add(500_000, 1);
        let all: Vec<_> = c.iter().collect();
        assert_eq!(
            all,
            vec![
                (1_700, 6),
                (10_500, 3),
                (49_500, 1),
                (49_600, 1),
                (400_000, 5),
                (500_000, 1)
            ]
        );
        c.pin(None);
        c.add(u32::MAX, 7);
        let all: Vec<_> = c.iter().collect();
        assert_eq!(
            all,
            vec![
                (1_700, 6),
                (10_500, 3),
                (49_600, 2),
                (400_000, 5),
                (500_000, 1),
                (u32::MAX, 7)
            ]
        );
        assert_eq!(c.down_from(u64::MAX).next(), Some((u32::MAX, 7)));
        assert_eq!(c.count_after(u64::from(u32::MAX)), 0);
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
