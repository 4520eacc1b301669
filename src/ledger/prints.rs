//! The fingerprint of each batch number's first copy ([`Prints`]), as
//! [`BatchRecord`](super::BatchRecord) keeps them: batch numbers are dense (`1..=n`
//! in a whole record), so they index pages of a table rather than keys of a map.

use std::collections::HashMap;

/// Batch numbers per page of the table.
const PAGE: usize = 4096;
/// How many pages past the table's end a batch number may fall and still be put in
/// the table (the pages between are made); further ones go to the map, so a
/// ledger's odd batch number (say 2⁶⁰) costs one entry, not a table reaching it.
const REACH: usize = 16;

/// A page of fingerprints: payload lengths (0: no batch with that number yet; an
/// entry's payload is never empty) and hashes.
#[derive(Clone, Debug)]
struct Page {
    lens: Box<[u32; PAGE]>,
    hashes: Box<[u64; PAGE]>,
}

/// Batch number → the [`fingerprint`](super::fingerprint) of its first copy.
/// Memory: 12 bytes per batch number up to the highest in the table (a page of 4,096
/// at a time, 48 KiB), plus a map entry per batch number that falls far beyond it.
#[derive(Clone, Debug, Default)]
pub(super) struct Prints {
    pages: Vec<Page>,
    far: HashMap<u64, (usize, u64)>,
}

impl Prints {
    /// The fingerprint of batch `batch`'s first copy, if one was put.
    pub(super) fn get(&self, batch: u64) -> Option<(usize, u64)> {
        if let Some(&p) = self.far.get(&batch) {
            return Some(p);
        }
        let (page, i) = Self::place(batch)?;
        let p = self.pages.get(page)?;
        (p.lens[i] > 0).then(|| (p.lens[i] as usize, p.hashes[i]))
    }

    /// Puts `print` as batch `batch`'s, which has none yet ([`Prints::get`]).
    pub(super) fn put(&mut self, batch: u64, print: (usize, u64)) {
        let slot = Self::place(batch)
            .filter(|&(page, _)| page < self.pages.len() + REACH)
            .zip(u32::try_from(print.0).ok().filter(|&l| l > 0));
        let Some(((page, i), len)) = slot else {
            self.far.insert(batch, print);
            return;
        };
        while self.pages.len() <= page {
            self.pages.push(Page {
                lens: Box::new([0; PAGE]),
                hashes: Box::new([0; PAGE]),
            });
        }
        self.pages[page].lens[i] = len;
        self.pages[page].hashes[i] = print.1;
    }

    /// Every batch number put, ascending.
    pub(super) fn numbers(&self) -> impl Iterator<Item = u64> + '_ {
        let mut far: Vec<u64> = self.far.keys().copied().collect();
        far.sort_unstable();
        let table = self.pages.iter().enumerate().flat_map(|(p, page)| {
            page.lens
                .iter()
                .enumerate()
                .filter(|(_, &l)| l > 0)
                .map(move |(i, _)| (p * PAGE + i) as u64)
        });
        Merge {
            a: table.peekable(),
            b: far.into_iter().peekable(),
        }
    }

    /// The page and index of batch number `batch` in the table, if it can have one.
    fn place(batch: u64) -> Option<(usize, usize)> {
        let b = usize::try_from(batch).ok()?;
        Some((b / PAGE, b % PAGE))
    }
}

/// Two ascending iterators of distinct numbers merged into one ascending one.
struct Merge<A: Iterator<Item = u64>, B: Iterator<Item = u64>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator<Item = u64>, B: Iterator<Item = u64>> Iterator for Merge<A, B> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match (self.a.peek(), self.b.peek()) {
            (Some(&x), Some(&y)) if y < x => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_numbers_go_in_the_table_far_ones_in_the_map_and_all_read_back_in_order() {
        let mut p = Prints::default();
        assert_eq!(p.get(1), None);
        let put: [(u64, usize); 6] = [
            (3, 10),
            (1, 5),
            (0, 2),
            (70_000, 9),
            (1 << 60, 7),
            (5000, 8),
        ];
        for (b, len) in put {
            p.put(b, (len, b ^ 0xabc));
        }
        assert_eq!(p.pages.len(), 2);
        assert_eq!(p.far.len(), 2);
        for (b, len) in put {
            assert_eq!(p.get(b), Some((len, b ^ 0xabc)), "batch {b}");
        }
        assert_eq!(p.get(2), None);
        assert_eq!(p.get(69_999), None);
        // A number the table reaches later stays where it was put.
        for b in (6000..80_000).filter(|&b| b != 70_000) {
            p.put(b, (1, b));
        }
        assert_eq!(p.get(70_000), Some((9, 70_000 ^ 0xabc)));
        let all: Vec<u64> = p.numbers().collect();
        assert_eq!(&all[..4], &[0, 1, 3, 5000]);
        assert_eq!(all.len(), 6 + 73_999);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(all.last(), Some(&(1 << 60)));
    }
}
