//! The lazy reads against the verdict's rules as they were written over every range
//! unpacked (`unpacked`, `sorted`, `merged`, `time_of`, `lags_of` below: a sort of
//! all a client's ranges, then one pass), on an agent's ledger and on an odd one
//! (out of order, repeated, overlapping, invalid and unpromised ranges), with the
//! exact values besides.

use super::*;
use crate::ledger::pg_batch as batch;
use std::collections::BTreeSet;

fn range(first: u64, last: u64, promised: bool, ms: u32) -> AckRange {
    AckRange {
        first,
        last,
        promised,
        ms,
    }
}

/// Client 0 out of order, repeated (with other times: the first in order is kept)
/// and overlapping across flags, with two invalid ranges; client 1 as an agent sends
/// them; client 2 with an invalid range only; client 3 in order, its second range
/// inside its first, ending with it.
fn odd() -> PgRanges {
    PgRanges::of(&[
        batch(true, &[(0, 5, 9, 20), (1, 1, 3, 7)]),
        batch(false, &[(0, 1, 4, 10), (2, 0, 0, 70)]),
        batch(true, &[(0, 5, 9, 30), (1, 4, 8, 15)]),
        batch(true, &[(0, 3, 6, 25), (0, 0, 2, 50), (3, 1, 5, 10)]),
        batch(true, &[(3, 3, 5, 20)]),
        batch(false, &[(0, 1, 4, 5), (0, 9, 8, 60)]),
    ])
}

/// A run of 3 clients × 200 batches as an agent sends them, every tenth unpromised.
fn agents() -> PgRanges {
    let batches: Vec<AckBatch> = (0..200u64)
        .map(|n| {
            let rs: Vec<(u32, u64, u64, u32)> = (0..3u32)
                .map(|c| {
                    (
                        c,
                        n * 3 + 1,
                        n * 3 + 3 - u64::from(c),
                        (n * 5 + u64::from(c)) as u32,
                    )
                })
                .collect();
            batch(n % 10 != 9, &rs)
        })
        .collect();
    PgRanges::of(&batches)
}

/// Every valid range, per client, in ledger order, unpacked.
fn unpacked(p: &PgRanges) -> BTreeMap<u32, Vec<AckRange>> {
    let mut raw: BTreeMap<u32, Vec<AckRange>> = BTreeMap::new();
    for (c, rs) in p.clients() {
        for r in rs.filter(valid) {
            raw.entry(c).or_default().push(ack(r));
        }
    }
    raw
}

/// Each client's valid ranges sorted, repeats of `(first, last)` dropped.
fn sorted(p: &PgRanges) -> BTreeMap<u32, Vec<AckRange>> {
    let mut raw = unpacked(p);
    for v in raw.values_mut() {
        v.sort();
        v.dedup_by_key(|r| (r.first, r.last));
    }
    raw
}

/// The merge over every range sorted (repeats kept).
fn merged(p: &PgRanges) -> BTreeMap<u32, ClientAcks> {
    let mut out = BTreeMap::new();
    for (c, mut v) in unpacked(p) {
        v.sort();
        let mut m: Vec<AckRange> = Vec::new();
        for r in v {
            match m.last_mut() {
                Some(x) if x.promised == r.promised && r.first <= x.last + 1 => {
                    if r.last > x.last {
                        (x.last, x.ms) = (r.last, r.ms);
                    }
                }
                Some(x) if r.first <= x.last => {
                    if r.last > x.last {
                        let first = x.last + 1;
                        m.push(AckRange { first, ..r });
                    }
                }
                _ => m.push(r),
            }
        }
        out.insert(c, ClientAcks { ranges: m });
    }
    out
}

/// When `s` was acknowledged, by the position of its first range in `v`.
fn time_of(v: &[AckRange], s: u64, end: u32) -> String {
    let Some(i) = v.iter().position(|r| r.first <= s && s <= r.last) else {
        return "acknowledged at an unknown time".into();
    };
    let (r, from) = (v[i], if i > 0 { v[i - 1].ms } else { 0 });
    let secs = |ms: u32| ms as f64 / 1000.0;
    let before = |ms: u32| secs(end.saturating_sub(ms));
    if s == r.last {
        return format!(
            "acknowledged {:.3} s before the end, {:.3} s into the run",
            before(r.ms),
            secs(r.ms)
        );
    }
    format!(
        "acknowledged between {:.3} and {:.3} s before the end ({:.3}–{:.3} s into the run; \
         its range, seqs {} to {}, was acknowledged by {:.3} s)",
        before(from),
        before(r.ms),
        secs(from),
        secs(r.ms),
        r.first,
        r.last,
        secs(r.ms)
    )
}

/// A lag per lost seq per promised sorted range holding it, ascending.
fn lags_of(p: &PgRanges, lost: &BTreeSet<(u32, u64)>, end: u32) -> Vec<f64> {
    let mut lags = Vec::new();
    for (c, v) in sorted(p) {
        for r in v.iter().filter(|r| r.promised) {
            for s in r.first..=r.last {
                if lost.contains(&(c, s)) {
                    lags.push((i64::from(end) - i64::from(r.ms)).max(0) as f64 / 1000.0);
                }
            }
        }
    }
    lags.sort_by(f64::total_cmp);
    lags
}

/// The lags [`LostLags`] gives for `lost` in their order, and sorted.
fn lags_given<'a>(
    p: &PgRanges,
    lost: impl Iterator<Item = &'a (u32, u64)>,
    end: u32,
) -> (Vec<f64>, Vec<f64>) {
    let mut l = LostLags::new(p, end);
    let mut got = Vec::new();
    for &(c, s) in lost {
        l.add(c, s, |lag| got.push(lag));
    }
    let mut ascending = got.clone();
    ascending.sort_by(f64::total_cmp);
    (got, ascending)
}

fn lazily(p: &PgRanges) -> BTreeMap<u32, Vec<AckRange>> {
    ordered(p)
        .map(|(c, rs)| (c, rs.collect::<Vec<_>>()))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

#[test]
fn an_odd_ledger_reads_in_the_verdicts_order_with_exact_values() {
    let p = odd();
    let want0 = vec![
        range(1, 4, false, 5),
        range(3, 6, true, 25),
        range(5, 9, true, 20),
    ];
    let want1 = vec![range(1, 3, true, 7), range(4, 8, true, 15)];
    // Only client 0's are unpacked to be sorted.
    let fold = |c| matches!(client_ranges(&p, c), Ordered::Fold(_));
    assert_eq!([0, 1, 2, 3, 4].map(fold), [false, true, true, true, true]);
    assert_eq!(client_ranges(&p, 0).collect::<Vec<_>>(), want0);
    assert_eq!(client_ranges(&p, 1).collect::<Vec<_>>(), want1);
    assert_eq!(client_ranges(&p, 2).count(), 0);
    assert_eq!(client_ranges(&p, 3).count(), 2);
    assert_eq!(client_ranges(&p, 4).count(), 0);
    assert_eq!(lazily(&p), sorted(&p));
    // Not the latest time of every valid range (30: a repeat's), nor of any range (70).
    assert_eq!(end_ms(&p), 25);
    let m = merge_ranges(&p);
    assert_eq!(m.keys().copied().collect::<Vec<_>>(), [0, 1, 3]);
    assert_eq!(m[&0].ranges, [range(1, 4, false, 5), range(5, 9, true, 20)]);
    assert_eq!(m[&1].ranges, [range(1, 8, true, 15)]);
    // A range inside the merged one, ending with it, leaves its time.
    assert_eq!(m[&3].ranges, [range(1, 5, true, 10)]);
    assert_eq!(m, merged(&p));
}

#[test]
fn lost_commits_times_are_those_of_their_first_range_in_order() {
    let p = odd();
    let seqs = [4, 6, 9, 3, 5, 10];
    let got = ack_times(client_ranges(&p, 0), &seqs, 25);
    assert_eq!(
        got,
        [
            "acknowledged 0.020 s before the end, 0.005 s into the run",
            "acknowledged 0.000 s before the end, 0.025 s into the run",
            "acknowledged 0.005 s before the end, 0.020 s into the run",
            "acknowledged between 0.025 and 0.020 s before the end (0.000–0.005 s into the run; \
             its range, seqs 1 to 4, was acknowledged by 0.005 s)",
            "acknowledged between 0.020 and 0.000 s before the end (0.005–0.025 s into the run; \
             its range, seqs 3 to 6, was acknowledged by 0.025 s)",
            "acknowledged at an unknown time",
        ]
    );
    let v = &sorted(&p)[&0];
    let each: Vec<String> = seqs.iter().map(|&s| time_of(v, s, 25)).collect();
    assert_eq!(got, each);
    assert_eq!(ack_times(client_ranges(&p, 2), &[1, 2], 25), ["", ""]);
}

#[test]
fn lost_lags_count_each_promised_range_holding_a_lost_seq_clients_in_any_order() {
    let p = odd();
    // Seq 2 only an unpromised range holds; 5 and 6 two promised ones.
    let lost: BTreeSet<(u32, u64)> = [(0, 2), (0, 5), (0, 6), (0, 9), (1, 4)].into();
    let (got, ascending) = lags_given(&p, lost.iter(), 25);
    assert_eq!(got, [0.0, 0.005, 0.0, 0.005, 0.005, 0.01]);
    assert_eq!(ascending, lags_of(&p, &lost, 25));
    // Client 1 first, and client 0 coming back after it.
    let mixed = [(1, 4), (0, 2), (0, 5), (1, 4), (0, 6), (0, 9)];
    let (got, _) = lags_given(&p, mixed.iter(), 25);
    assert_eq!(got, [0.01, 0.0, 0.005, 0.01, 0.0, 0.005, 0.005]);
}

#[test]
fn an_agents_ledger_reads_lazily_the_same_as_sorted() {
    let p = agents();
    let fold = |c| matches!(client_ranges(&p, c), Ordered::Fold(_));
    assert_eq!([0, 1, 2].map(fold), [true; 3]);
    assert_eq!(lazily(&p), sorted(&p));
    assert_eq!(lazily(&p)[&2].len(), 200);
    assert_eq!(end_ms(&p), 997);
    assert_eq!(merge_ranges(&p), merged(&p));
    assert_eq!(merge_ranges(&p)[&0].ranges.len(), 40);
    let lost: BTreeSet<(u32, u64)> = (1..=600).step_by(7).map(|s| (1, s)).collect();
    let (got, ascending) = lags_given(&p, lost.iter(), 1000);
    assert_eq!(ascending, lags_of(&p, &lost, 1000));
    assert_eq!(got.len(), 52);
    let seqs: Vec<u64> = (1..=601).step_by(50).collect();
    let v = &sorted(&p)[&1];
    let each: Vec<String> = seqs.iter().map(|&s| time_of(v, s, 997)).collect();
    assert_eq!(ack_times(client_ranges(&p, 1), &seqs, 997), each);
}
