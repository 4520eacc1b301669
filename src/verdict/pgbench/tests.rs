//! Unit tests of the pgbench rules, without PostgreSQL: [`scan`] counts the tags as
//! the verifier does ([`tags::TagCounter`]).

use super::*;
use crate::ledger::{AckBatch, Acks, PgAckRange, PgRanges};

/// A batch of promised or unpromised ranges `(client, first, last)`, acknowledged
/// `n` ms into the run.
fn batch(n: u64, promised: bool, ranges: &[(u32, u64, u64)]) -> AckBatch {
    AckBatch {
        batch: n,
        promised,
        acks: Acks::Pg(
            ranges
                .iter()
                .map(|&(client, first, last)| PgAckRange {
                    client,
                    first,
                    last,
                    ms: n as u32,
                })
                .collect(),
        ),
        flushes: None,
        canary: Default::default(),
        sealed_ms: 0,
        oldest_in_flight_ms: None,
    }
}

fn range(first: u64, last: u64, promised: bool, ms: u32) -> AckRange {
    AckRange {
        first,
        last,
        promised,
        ms,
    }
}

/// The counts of a scan that found `tags` (client, seq), by the verifier's own
/// counter.
fn scan(
    tags: &[(u32, u64)],
    acks: &BTreeMap<u32, ClientAcks>,
    bounds: &[u64],
) -> BTreeMap<u32, Counts> {
    let mut t = tags::TagCounter::new();
    for &(c, s) in tags {
        t.add_parsed(c, s);
    }
    t.counts(bounds, acks).0
}

/// Tallies a finished run (unless `max_unconfirmed` > 0: then cut short) of
/// `clients` clients.
fn run(batches: &[AckBatch], clients: u32, max_unconfirmed: u64, tags: &[(u32, u64)]) -> Tally {
    let acks = merge_acks(batches);
    let clients = super::clients(clients, &acks);
    let b = bounds(
        &acks,
        clients,
        max_unconfirmed == 0,
        max_unconfirmed,
        9_999_999_999,
    );
    tally(&acks, &scan(tags, &acks, &b), clients, true)
}

fn seqs(client: u32, s: impl IntoIterator<Item = u64>) -> Vec<(u32, u64)> {
    s.into_iter().map(|s| (client, s)).collect()
}

#[test]
fn all_acknowledged_commits_present_is_a_pass() {
    let t = run(&[batch(1, true, &[(0, 1, 5)])], 1, 0, &seqs(0, 1..=5));
    assert_eq!(
        t,
        Tally {
            present: 5,
            ..Tally::default()
        }
    );
    let f = Failures {
        lost_commits: t.lost,
        ..Failures::default()
    };
    assert_eq!(f.problems(true), 0);
    assert_eq!(judge(0, 5, 0), (true, false));
}

#[test]
fn one_acknowledged_seq_missing_is_one_lost_commit() {
    let t = run(
        &[batch(1, true, &[(0, 1, 5)])],
        1,
        0,
        &seqs(0, [1, 2, 4, 5]),
    );
    assert_eq!(t.present, 4);
    assert_eq!(t.lost, 1);
    assert_eq!(t.ordering_violations, 0);
    assert_eq!(t.unpromised_lost, 0);
    let f = Failures {
        lost_commits: t.lost,
        ..Failures::default()
    };
    assert_eq!(f.problems(true), 1);
    assert_eq!(judge(f.problems(true), 5, 0), (false, false));
}

#[test]
fn a_seq_beyond_the_bound_is_a_phantom() {
    let b = [batch(1, true, &[(0, 1, 5)])];
    let acks = merge_acks(&b);
    // Finished: one in flight at most, so 6 may exist and 7 may not.
    assert_eq!(bounds(&acks, 2, true, 3, 9_999_999_999), vec![6, 1]);
    // Cut short: up to max_unconfirmed beyond the acknowledged, capped by the tag.
    assert_eq!(bounds(&acks, 2, false, 3, 9_999_999_999), vec![8, 3]);
    assert_eq!(bounds(&acks, 1, false, 3, 7), vec![7]);
    assert_eq!(
        bounds(&acks, 1, false, 0, u64::MAX),
        vec![5 + i64::MAX as u64 / 4]
    );

    let mut tags = seqs(0, 1..=5);
    tags.push((0, 7));
    let t = run(&b, 1, 0, &tags);
    assert_eq!((t.present, t.phantoms, t.ordering_violations), (5, 1, 0));
    let f = Failures {
        phantoms: t.phantoms,
        ..Failures::default()
    };
    // No configuration permits a phantom.
    assert_eq!((f.problems(true), f.problems(false)), (1, 1));

    // Cut short with max_unconfirmed 3: seq 7 may exist, but 6 is missing below it.
    let t = run(&b, 1, 3, &tags);
    assert_eq!(t.phantoms, 0);
    assert_eq!(t.present, 6);
    assert_eq!(t.unacknowledged_present, 1);
    assert_eq!(t.ordering_violations, 1);
    assert_eq!(t.ordering_gaps, vec![(0, 6, 7)]);
}

#[test]
fn an_unacknowledged_survivor_is_fine() {
    let t = run(&[batch(1, true, &[(0, 1, 5)])], 1, 0, &seqs(0, 1..=6));
    assert_eq!(
        t,
        Tally {
            present: 6,
            unacknowledged_present: 1,
            ..Tally::default()
        }
    );
}

#[test]
fn a_rolled_back_transaction_leaves_no_gap_and_no_failure() {
    // Client 0's seq 4 failed and rolled back; it was retried with the same seq and
    // acknowledged in the next batch. Seq 7 was failing at the cut: neither
    // acknowledged nor present.
    let b = [batch(1, true, &[(0, 1, 3)]), batch(2, true, &[(0, 4, 6)])];
    let acks = merge_acks(&b);
    assert_eq!(acks[&0].ranges, vec![range(1, 6, true, 2)]);
    let t = run(&b, 1, 4, &seqs(0, 1..=6));
    assert_eq!(
        t,
        Tally {
            present: 6,
            ..Tally::default()
        }
    );
    // Had the rolled-back attempt left its row as well, that is a duplicate.
    let mut tags = seqs(0, 1..=6);
    tags.push((0, 4));
    let t = run(&b, 1, 4, &tags);
    assert_eq!((t.present, t.duplicates, t.lost), (6, 1, 0));
}

#[test]
fn two_interleaved_clients_are_counted_apart() {
    let b = [
        batch(1, true, &[(0, 1, 2), (1, 1, 1)]),
        batch(2, true, &[(1, 2, 3), (0, 3, 3)]),
        batch(3, true, &[(0, 4, 5), (1, 4, 4)]),
    ];
    let acks = merge_acks(&b);
    assert_eq!(acks[&0].ranges, vec![range(1, 5, true, 3)]);
    assert_eq!(acks[&1].ranges, vec![range(1, 4, true, 3)]);
    // Client 0 lost seq 4; client 1's seq 5 was in flight and survived; a tag of a
    // client 2 the run did not have is a phantom.
    let mut tags = seqs(0, [1, 2, 3, 5]);
    tags.extend(seqs(1, 1..=5));
    tags.push((2, 1));
    let t = run(&b, 2, 0, &tags);
    assert_eq!(
        t,
        Tally {
            present: 9,
            unacknowledged_present: 1,
            lost: 1,
            lost_by_client: vec![(0, 1)],
            phantoms: 1,
            ..Tally::default()
        }
    );
}

#[test]
fn unpromised_losses_are_expected_and_measure_nothing() {
    let b = [batch(1, true, &[(0, 1, 2)]), batch(2, false, &[(0, 3, 5)])];
    let t = run(&b, 1, 0, &seqs(0, [1, 2, 3]));
    assert_eq!((t.lost, t.unpromised_lost), (0, 2));
    let all_unpromised = [batch(1, false, &[(0, 1, 5)])];
    let t = run(&all_unpromised, 1, 0, &seqs(0, [1, 2, 5]));
    assert_eq!(
        (t.lost, t.unpromised_lost, t.ordering_violations),
        (0, 2, 0)
    );
    let f = Failures {
        ordering_violations: 1,
        missing_tables: 1,
        invariant_broken: true,
        ..Failures::default()
    };
    assert_eq!((f.problems(true), f.problems(false)), (3, 0));
    // Nothing failed, but every acknowledgement was unpromised: not measured.
    assert_eq!(judge(0, 5, 5), (false, true));
    assert_eq!(judge(0, 5, 3), (true, false));
    assert_eq!(judge(1, 5, 5), (false, false));
}

#[test]
fn without_the_tables_or_a_count_nothing_present() {
    let b = [
        batch(1, true, &[(0, 1, 4), (1, 1, 2)]),
        batch(2, false, &[(0, 5, 5)]),
    ];
    let acks = merge_acks(&b);
    let t = tally(&acks, &BTreeMap::new(), 2, true);
    assert_eq!((t.present, t.lost, t.unpromised_lost), (0, 6, 1));
    assert_eq!(tally(&acks, &BTreeMap::new(), 2, false), Tally::default());
}

#[test]
fn each_lost_commit_gets_its_own_time() {
    let p = PgRanges::of(&[
        batch(1, true, &[(0, 1, 4)]),
        batch(2, true, &[(0, 5, 9)]),
        batch(2, true, &[(0, 5, 9)]), // resent
    ]);
    // Ascending, but with a repeat: unpacked to drop it.
    assert!(matches!(client_ranges(&p, 0), ranges::Ordered::Sorted(_)));
    let raw: Vec<AckRange> = client_ranges(&p, 0).collect();
    assert_eq!(raw, vec![range(1, 4, true, 1), range(5, 9, true, 2)]);
    assert_eq!(end_ms(&p), 2);
    // seq 4 ends its range: exact; seq 1 and 6 lie inside ranges: a window.
    let end = 1002;
    let times = ack_times(client_ranges(&p, 0), &[4, 6, 1, 10], end);
    assert_eq!(
        times,
        [
            "acknowledged 1.001 s before the end, 0.001 s into the run",
            "acknowledged between 1.001 and 1.000 s before the end (0.001–0.002 s into the run; \
             its range, seqs 5 to 9, was acknowledged by 0.002 s)",
            "acknowledged between 1.002 and 1.001 s before the end (0.000–0.001 s into the run; \
             its range, seqs 1 to 4, was acknowledged by 0.001 s)",
            "acknowledged at an unknown time",
        ]
    );
    assert_eq!(ack_times(client_ranges(&p, 1), &[4], end), [""]);
}

#[test]
fn ranges_merge_per_client_and_flag() {
    let m = merge_acks(&[
        batch(1, true, &[(0, 1, 5), (1, 1, 2)]),
        batch(2, true, &[(0, 6, 9), (1, 3, 3)]),
        batch(3, false, &[(0, 10, 12)]),
        batch(4, true, &[(0, 6, 9)]), // a resent batch
    ]);
    assert_eq!(
        m[&0].ranges,
        vec![range(1, 9, true, 2), range(10, 12, false, 3)]
    );
    assert_eq!(m[&1].ranges, vec![range(1, 3, true, 2)]);
    assert_eq!(m[&0].top(), 12);
    assert_eq!(m[&0].count(true), 9);
    assert_eq!(m[&0].count(false), 3);
    assert_eq!(m[&0].count_upto(10), 10);
    assert_eq!(m[&0].gaps_upto(15), vec![(13, 15)]);
    assert_eq!(m[&0].gaps_upto(12), vec![]);
    let holes = merge_acks(&[batch(1, true, &[(0, 3, 4), (0, 8, 9)])]);
    assert_eq!(holes[&0].gaps_upto(10), vec![(1, 2), (5, 7), (10, 10)]);
    // An unpromised range overlapping a promised one keeps only its new part.
    let mixed = merge_acks(&[batch(1, true, &[(0, 1, 5)]), batch(2, false, &[(0, 4, 8)])]);
    assert_eq!(
        mixed[&0].ranges,
        vec![range(1, 5, true, 1), range(6, 8, false, 2)]
    );
}

#[test]
fn the_gaps_up_to_a_seq_end_there_and_leave_out_a_range_starting_at_it() {
    let a = merge_acks(&[batch(1, true, &[(0, 1, 3), (0, 5, 7), (0, 9, 9)])]);
    assert_eq!(a[&0].gaps_upto(4), vec![(4, 4)]);
    assert_eq!(a[&0].gaps_upto(5), vec![(4, 4)]);
    assert_eq!(a[&0].gaps_upto(8), vec![(4, 4), (8, 8)]);
    assert_eq!(a[&0].gaps_upto(11), vec![(4, 4), (8, 8), (10, 11)]);
}

#[test]
fn a_range_from_seq_0_or_ending_before_it_starts_is_no_acknowledgement() {
    let b = [batch(1, true, &[(0, 0, 3), (0, 5, 4), (0, 6, 7)])];
    assert_eq!(merge_acks(&b)[&0].ranges, vec![range(6, 7, true, 1)]);
    let p = PgRanges::of(&b);
    assert_eq!(
        client_ranges(&p, 0).collect::<Vec<_>>(),
        vec![range(6, 7, true, 1)]
    );
}

#[test]
fn every_kind_of_failure_counts_once_in_the_problems() {
    // Powers of two: a sum that drops, subtracts or multiplies any one is another number.
    let f = Failures {
        lost_commits: 1,
        ordering_violations: 2,
        amcheck_corruptions: 4,
        damaged_pages: 8,
        unattributed_checksum_failures: 16,
        missing_tables: 32,
        invariant_broken: true,
        duplicates: 128,
        phantoms: 256,
        malformed_tags: 512,
    };
    assert_eq!((f.permitted(), f.always()), (64, 896));
    assert_eq!((f.problems(true), f.problems(false)), (960, 896));
}

#[test]
fn a_client_the_ledger_acknowledged_beyond_the_recorded_count_is_judged() {
    let b = [batch(1, true, &[(0, 1, 2), (3, 1, 4)])];
    let acks = merge_acks(&b);
    assert_eq!(super::clients(2, &acks), 4);
    assert_eq!(super::clients(6, &acks), 6);
    // Client 3's four acknowledged commits are all gone: four lost, not zero.
    let t = run(&b, 2, 0, &seqs(0, 1..=2));
    assert_eq!((t.lost, t.lost_by_client.clone()), (4, vec![(3, 4)]));
}

#[test]
fn an_unpromised_range_ending_where_the_promised_one_ends_adds_nothing() {
    let m = merge_acks(&[batch(1, true, &[(0, 1, 5)]), batch(2, false, &[(0, 3, 5)])]);
    assert_eq!(m[&0].ranges, vec![range(1, 5, true, 1)]);
    assert_eq!((m[&0].count(true), m[&0].count(false)), (5, 0));
}

#[test]
fn a_run_that_acknowledged_nothing_and_lost_nothing_is_ok_for_the_verifier_to_call_not_measured() {
    // The verifier reads ok with no acknowledged commit as "not measured: run R has no
    // acknowledged commits in the ledger" (exit 2); not_measured here is only for
    // acknowledgements that were all unpromised.
    assert_eq!(judge(0, 0, 0), (true, false));
    assert_eq!(judge(1, 0, 0), (false, false));
}
