//! Counting a run's tags as they stream out of `pgbench_history`: the per-client
//! [`Counts`] the rules need, computed here rather than in SQL.
//!
//! The verifier streams one line per row whose `filler` starts with the run's
//! prefix (`COPY (SELECT filler::text … WHERE filler LIKE 'RRRRRRRR%') TO STDOUT`) and
//! hands each line to [`TagCounter::add`]. A valid tag is exactly 22 bytes whose
//! bytes 8..22 are decimal digits: client `8..12`, seq `12..22` (the format is in the
//! client's `pgbench::tag`); anything else with the prefix is malformed. PostgreSQL
//! then only scans and filters; grouping a million distinct tags in a hash aggregate
//! took it 1.6–4.2 s where sorting them here takes tens of milliseconds.
//!
//! Memory: 8 bytes per row of the run (a million commits: 8 MB), and the malformed
//! count.

use super::{ClientAcks, Counts};
use std::collections::BTreeMap;

/// The run's tags seen so far, per client, and the malformed rows.
#[derive(Clone, Debug, Default)]
pub struct TagCounter {
    seqs: BTreeMap<u32, Vec<u64>>,
    malformed: u64,
    /// The start of a line [`TagCounter::feed`] has not seen the end of yet.
    partial: Vec<u8>,
}

impl TagCounter {
    /// An empty counter.
    pub fn new() -> TagCounter {
        TagCounter::default()
    }

    /// One row's `filler` (as text: trailing spaces stripped), already known to start
    /// with the run's 8-character prefix.
    pub fn add(&mut self, filler: &[u8]) {
        match parse(filler) {
            Some((client, seq)) => self.seqs.entry(client).or_default().push(seq),
            None => self.malformed += 1,
        }
    }

    /// Some bytes of `COPY … TO STDOUT`'s text output: one `filler` per line, ended
    /// by `\n`, the lines split anywhere between calls (PostgreSQL sends a row per
    /// `CopyData` message, but nothing here depends on that). A last line without
    /// its `\n` is counted by [`TagCounter::counts`].
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                self.add(&bytes[..nl]);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..nl]);
                self.add(&line);
                line.clear();
                self.partial = line;
            }
            bytes = &bytes[nl + 1..];
        }
        self.partial.extend_from_slice(bytes);
    }

    /// Adds a valid tag's fields directly (client, seq).
    pub fn add_parsed(&mut self, client: u32, seq: u64) {
        self.seqs.entry(client).or_default().push(seq);
    }

    /// Rows seen so far, valid or not.
    pub fn rows(&self) -> u64 {
        self.seqs.values().map(|v| v.len() as u64).sum::<u64>() + self.malformed
    }

    /// The counts of every client that has tags, and the number of malformed rows.
    /// `bounds[c]` is `B_c` (a client beyond `bounds` is not one of the run's: all
    /// its tags are phantoms); `acks` are the merged acknowledgements.
    pub fn counts(
        mut self,
        bounds: &[u64],
        acks: &BTreeMap<u32, ClientAcks>,
    ) -> (BTreeMap<u32, Counts>, u64) {
        if !self.partial.is_empty() {
            let last = std::mem::take(&mut self.partial);
            self.add(&last);
        }
        let empty = ClientAcks::default();
        let mut out = BTreeMap::new();
        for (&c, seqs) in self.seqs.iter_mut() {
            seqs.sort_unstable();
            let bound = bounds.get(c as usize).copied();
            let ranges = &acks.get(&c).unwrap_or(&empty).ranges;
            let mut r = 0; // the first range whose last is ≥ the current seq
            let mut k = Counts::default();
            let mut i = 0;
            while i < seqs.len() {
                let s = seqs[i];
                let n = seqs[i..].iter().take_while(|&&x| x == s).count();
                i += n;
                k.dups += n as u64 - 1;
                if bound.is_some_and(|b| (1..=b).contains(&s)) {
                    k.inbound += 1;
                    k.top = k.top.max(s);
                } else {
                    k.phantoms += 1;
                }
                while r < ranges.len() && ranges[r].last < s {
                    r += 1;
                }
                if let Some(range) = ranges.get(r).filter(|x| x.first <= s) {
                    k.acked_present[usize::from(range.promised)] += 1;
                }
            }
            out.insert(c, k);
        }
        (out, self.malformed)
    }
}

/// `(client, seq)` of a valid tag: 22 bytes, bytes 8..22 decimal digits.
fn parse(f: &[u8]) -> Option<(u32, u64)> {
    if f.len() != 22 || !f[8..].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |b: &[u8]| b.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some((num(&f[8..12]) as u32, num(&f[12..22])))
}

#[cfg(test)]
mod tests {
    use super::super::AckRange;
    use super::*;

    fn acks(c: u32, ranges: &[(u64, u64, bool)]) -> BTreeMap<u32, ClientAcks> {
        let ranges = ranges
            .iter()
            .map(|&(first, last, promised)| AckRange {
                first,
                last,
                promised,
                ms: 0,
            })
            .collect();
        BTreeMap::from([(c, ClientAcks { ranges })])
    }

    #[test]
    fn parses_valid_tags_and_counts_everything_else_as_malformed() {
        assert_eq!(parse(b"a1b2c3d400070000000042"), Some((7, 42)));
        assert_eq!(
            parse(b"a1b2c3d499999999999999"),
            Some((9999, 9_999_999_999))
        );
        assert_eq!(parse(b"a1b2c3d4000700000000420"), None); // 23 bytes
        assert_eq!(parse(b"a1b2c3d40007000000004"), None); // 21 bytes
        assert_eq!(parse(b"a1b2c3d4000x0000000042"), None);
        assert_eq!(parse(b"a1b2c3d4\\n070000000042"), None); // COPY's escape of a newline
        let mut t = TagCounter::new();
        for f in [
            &b"a1b2c3d400070000000042"[..],
            b"a1b2c3d4",
            b"a1b2c3d4 junk",
        ] {
            t.add(f);
        }
        assert_eq!(t.rows(), 3);
        let (counts, malformed) = t.counts(&[0; 8], &BTreeMap::new());
        assert_eq!(malformed, 2);
        assert_eq!(counts.len(), 1);
        assert_eq!(counts[&7].phantoms, 1); // bound 0: seq 42 is beyond it
    }

    #[test]
    fn counts_distinct_seqs_in_and_out_of_bound_duplicates_and_acknowledged_ones() {
        // Client 1, bound 10: acked 1..=3 promised, 4..=5 unpromised, 8..=8 promised.
        // Present: 1, 2, 2, 2, 5, 6, 9, 0 (phantom: below 1), 11, 11 (phantom, dup).
        let mut t = TagCounter::new();
        for s in [9, 2, 1, 2, 5, 11, 6, 2, 0, 11] {
            t.add_parsed(1, s);
        }
        t.add_parsed(3, 4); // a client the run did not have (bounds has 2 entries)
        let a = acks(1, &[(1, 3, true), (4, 5, false), (8, 8, true)]);
        let (counts, malformed) = t.counts(&[5, 10], &a);
        assert_eq!(malformed, 0);
        assert_eq!(
            counts[&1],
            Counts {
                inbound: 5, // 1, 2, 5, 6, 9
                top: 9,
                dups: 3,               // 2 three times, 11 twice
                phantoms: 2,           // 0, 11
                acked_present: [1, 2], // 5 unpromised; 1, 2 promised
            }
        );
        assert_eq!(
            counts[&3],
            Counts {
                phantoms: 1,
                ..Counts::default()
            }
        );
        assert_eq!(counts.len(), 2);
    }

    /// The counts by their definition, one distinct `(client, seq)` at a time with
    /// a linear search of the ranges: the model the counter must agree with.
    fn model(
        tags: &[(u32, u64)],
        bounds: &[u64],
        acks: &BTreeMap<u32, ClientAcks>,
    ) -> BTreeMap<u32, Counts> {
        let mut found: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        for &t in tags {
            *found.entry(t).or_default() += 1;
        }
        let mut counts: BTreeMap<u32, Counts> = BTreeMap::new();
        for (&(c, s), &n) in &found {
            let k = counts.entry(c).or_default();
            if bounds.get(c as usize).is_some_and(|&b| 1 <= s && s <= b) {
                k.inbound += 1;
                k.top = k.top.max(s);
            } else {
                k.phantoms += 1;
            }
            k.dups += n - 1;
            let hit = acks
                .get(&c)
                .and_then(|a| a.ranges.iter().find(|r| r.first <= s && s <= r.last));
            if let Some(r) = hit {
                k.acked_present[usize::from(r.promised)] += 1;
            }
        }
        counts
    }

    proptest::proptest! {
        /// The counter agrees with the model on random tags, bounds and ranges
        /// (sorted, not overlapping, as `merge_acks` makes them), with seq 0,
        /// seqs beyond the bound and clients beyond the bounds among them.
        #[test]
        fn the_counter_agrees_with_the_definition(
            tags in proptest::collection::vec((0u32..4, 0u64..40), 0..200),
            bounds in proptest::collection::vec(0u64..40, 0..4),
            spans in proptest::collection::vec(
                (0u32..3, proptest::collection::vec((0u64..5, 0u64..6, proptest::bool::ANY), 0..6)),
                0..3,
            ),
            cuts in proptest::collection::vec(0usize..5000, 0..8),
        ) {
            let mut a: BTreeMap<u32, ClientAcks> = BTreeMap::new();
            for (c, v) in spans {
                let mut next = 1;
                let ranges = v
                    .into_iter()
                    .map(|(gap, len, promised)| {
                        let first = next + gap;
                        next = first + len + 1;
                        AckRange { first, last: first + len, promised, ms: 0 }
                    })
                    .collect();
                a.insert(c, ClientAcks { ranges });
            }
            // The lines of a COPY, fed in pieces cut at `cuts` (the last line
            // without its newline).
            let text: Vec<u8> = tags
                .iter()
                .map(|(c, s)| format!("a1b2c3d4{c:04}{s:010}"))
                .collect::<Vec<_>>()
                .join("\n")
                .into_bytes();
            let mut at: Vec<usize> = cuts.iter().map(|&x| x % (text.len() + 1)).collect();
            at.push(0);
            at.push(text.len());
            at.sort_unstable();
            let mut t = TagCounter::new();
            for w in at.windows(2) {
                t.feed(&text[w[0]..w[1]]);
            }
            proptest::prop_assert_eq!(t.rows(), tags.len() as u64 - u64::from(!tags.is_empty()));
            let (counts, malformed) = t.counts(&bounds, &a);
            proptest::prop_assert_eq!(malformed, 0);
            proptest::prop_assert_eq!(counts, model(&tags, &bounds, &a));
        }
    }
}
