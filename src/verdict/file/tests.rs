//! Unit tests of the file rules: each rule on a crafted block, the evidence a finding
//! names, and the passes of [`Tally::finish`](super::Tally::finish).

use super::*;
use crate::record::Encoder;
use crate::verdict::describe_spans;

mod acks;
mod merge;
mod sectors;

const B: usize = 4096;
const RUN: RunId = RunId(77);

fn block(enc: &Encoder, b: u64, seq: u64, wm: u64) -> Vec<u8> {
    let mut v = vec![0u8; B];
    enc.encode_block(&mut v, b, seq, wm);
    v
}

fn verdict(b: u64, acked: u64, data: &[u8]) -> Option<(Verdict, Option<u64>)> {
    classify_block(RUN, b, B, acked, data, true).map(|c| (c.verdict, c.found_seq))
}

#[test]
fn each_rule() {
    let enc = Encoder::new(RUN);
    let v5 = block(&enc, 3, 5, 4);
    let v9 = block(&enc, 3, 9, 8);
    assert_eq!(verdict(3, 5, &v5), Some((Verdict::Intact, Some(5))));
    assert_eq!(verdict(3, 5, &v9), Some((Verdict::Intact, Some(9))));
    assert_eq!(verdict(3, 9, &v5), Some((Verdict::LostWrite, Some(5))));
    assert_eq!(verdict(3, 9, &[0; B]), Some((Verdict::LostWrite, Some(0))));
    assert_eq!(verdict(3, 0, &[0; B]), None);
    assert_eq!(verdict(3, 0, &[0xAB; B]), None);
    let mut torn = v9.clone();
    torn[..B / 2].copy_from_slice(&v5[..B / 2]);
    assert_eq!(
        verdict(3, 9, &torn),
        Some((Verdict::TornAcknowledged, Some(5)))
    );
    assert_eq!(verdict(3, 5, &torn), Some((Verdict::TornInFlight, Some(5))));
    let mut half_new = vec![0u8; B];
    half_new[..B / 2].copy_from_slice(&v9[..B / 2]);
    assert_eq!(
        verdict(3, 0, &half_new),
        Some((Verdict::TornInFlight, Some(0)))
    );
    let mut bad = v9.clone();
    bad[100] ^= 1;
    assert_eq!(verdict(3, 9, &bad), Some((Verdict::Corrupt, None)));
    let other = block(&enc, 4, 9, 8);
    assert_eq!(verdict(3, 9, &other), Some((Verdict::Misdirected, Some(9))));
    assert_eq!(verdict(3, 0, &other), Some((Verdict::Misdirected, Some(9))));
    assert_eq!(
        classify_block(RUN, 3, B, 9, &other, true)
            .unwrap()
            .found_block,
        Some(4)
    );
    assert_eq!(verdict(3, 9, &v9[..B - 1]), Some((Verdict::Missing, None)));
    assert_eq!(verdict(3, 0, &v9[..0]), None);
    // Another run's valid sectors are prior contents, not damage.
    let foreign = block(&Encoder::new(RunId(1)), 3, 99, 0);
    assert_eq!(verdict(3, 9, &foreign), Some((Verdict::LostWrite, Some(0))));
    let c = classify_block(RUN, 3, B, 9, &foreign, true).unwrap();
    assert_eq!((c.has_run_data, c.has_other_run), (false, true));
    let c = classify_block(RUN, 3, B, 9, &torn, true).unwrap();
    assert_eq!((c.has_run_data, c.has_other_run), (true, false));
}

#[test]
fn a_lost_write_below_a_surviving_watermark_is_unserializable() {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(3);
    acks.add(10, 0, 1000);
    acks.add(11, 1, 2000);
    acks.add(12, 2, 3000);
    let mut t = Tally::default();
    // Block 0 lost its seq 10; block 1 holds seq 11, issued when 9 was the watermark.
    t.add(
        0,
        classify_block(RUN, 0, B, 10, &[0; B], true).unwrap(),
        &acks,
    );
    t.add(
        1,
        classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 9), true).unwrap(),
        &acks,
    );
    // Block 2 lost seq 12: nothing issued after it was acknowledged survived.
    t.add(
        2,
        classify_block(RUN, 2, B, 12, &block(&enc, 2, 2, 1), true).unwrap(),
        &acks,
    );
    let o = t.finish(&[]);
    assert_eq!(
        o.counts,
        VerdictCounts::of(&[(Verdict::Intact, 1), (Verdict::LostWrite, 2)])
    );
    let mut t = Tally::default();
    t.add(
        0,
        classify_block(RUN, 0, B, 10, &[0; B], true).unwrap(),
        &acks,
    );
    t.add(
        1,
        classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10), true).unwrap(),
        &acks,
    );
    let o = t.finish(&[]);
    assert_eq!(
        o.counts,
        VerdictCounts::of(&[(Verdict::Intact, 1), (Verdict::Unserializable, 1)])
    );
    assert_eq!(o.findings[0].acked_secs_before_end, Some(2.0));
}

#[test]
fn lost_write_over_foreign_bytes_is_lost_not_corrupt() {
    let junk = [0xABu8; B];
    let c = classify_block(RUN, 3, B, 9, &junk, true).unwrap();
    assert_eq!((c.verdict, c.found_seq), (Verdict::LostWrite, Some(0)));
    assert_eq!(
        c.spans,
        vec![SectorSpan {
            first: 0,
            last: 7,
            content: Content::Foreign
        }]
    );
    assert_eq!(
        c.spans[0].content.describe(),
        "foreign bytes (no plugpull record)"
    );
    // A target that held nothing foreign when the run started: the bytes are damage.
    let c = classify_block(RUN, 3, B, 9, &junk, false).unwrap();
    assert_eq!(c.verdict, Verdict::Corrupt);
    // Foreign bytes inside a block holding this run's records are damage either way.
    let enc = Encoder::new(RUN);
    let mut mixed = block(&enc, 3, 9, 8);
    mixed[B - SECTOR..].fill(0xAB);
    let c = classify_block(RUN, 3, B, 9, &mixed, true).unwrap();
    assert_eq!(c.verdict, Verdict::Corrupt);
    assert_eq!(
        describe_spans(&c.spans),
        "sectors 0–6: seq 9; 7: foreign bytes (no plugpull record)"
    );
}

#[test]
fn a_damaged_record_names_its_sector_and_flipped_bits() {
    let enc = Encoder::new(RUN);
    let mut bad = block(&enc, 3, 9, 8);
    bad[2 * SECTOR + 100] ^= 0b101; // two bits in sector 2's payload
    let c = classify_block(RUN, 3, B, 9, &bad, true).unwrap();
    assert_eq!(c.verdict, Verdict::Corrupt);
    assert_eq!(c.spans.len(), 3);
    assert_eq!(c.spans[1].first, 2);
    assert_eq!(
        c.spans[1].content,
        Content::BadCrc {
            seq: 9,
            flipped_bits: 2
        }
    );
    let mut one = block(&enc, 3, 9, 8);
    one[5 * SECTOR + 200] ^= 0x10;
    let c = classify_block(RUN, 3, B, 9, &one, true).unwrap();
    assert_eq!(
        c.spans[1],
        SectorSpan {
            first: 5,
            last: 5,
            content: Content::BadCrc {
                seq: 9,
                flipped_bits: 1
            }
        }
    );
    assert_eq!(
        describe_spans(&c.spans),
        "sectors 0–4: seq 9; 5: this run's record of seq 9 with a bad CRC (1 bits differ from the regenerated record); 6–7: seq 9"
    );
}

#[test]
fn a_shorn_block_names_which_sectors_hold_which_seq() {
    let enc = Encoder::new(RUN);
    let mut shorn = block(&enc, 3, 9, 8);
    shorn[B / 2..].copy_from_slice(&block(&enc, 3, 5, 4)[B / 2..]);
    let mut t = Tally::default();
    let mut acks = AckTable::new(4);
    acks.add(5, 3, 100);
    acks.add(9, 3, 200);
    t.add(
        3,
        classify_block(RUN, 3, B, 9, &shorn, true).unwrap(),
        &acks,
    );
    let o = t.finish(&[]);
    assert_eq!(o.counts.get(Verdict::TornAcknowledged), 1);
    assert_eq!(
        o.findings[0].evidence(),
        "sectors 0–3: seq 9; 4–7: seq 5 (shorn: seq 5 < acknowledged seq 9)"
    );
}

#[test]
fn a_misdirected_write_is_one_fault_reported_once() {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(3);
    acks.add(10, 0, 1000);
    acks.add(11, 1, 2000);
    acks.add(12, 2, 3000);
    let mut t = Tally::default();
    // Block 0's acknowledged seq 10 landed on block 2 (over its seq 12); block 0
    // holds its older seq 4; block 1 holds seq 11 issued after 10 was acknowledged.
    t.add(
        0,
        classify_block(RUN, 0, B, 10, &block(&enc, 0, 4, 3), true).unwrap(),
        &acks,
    );
    t.add(
        1,
        classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10), true).unwrap(),
        &acks,
    );
    t.add(
        2,
        classify_block(RUN, 2, B, 12, &block(&enc, 0, 10, 9), true).unwrap(),
        &acks,
    );
    let o = t.finish(&[]);
    assert_eq!(
        o.counts,
        VerdictCounts::of(&[
            (Verdict::Intact, 1),
            (Verdict::LostWrite, 1),
            (Verdict::Misdirected, 1)
        ])
    );
    let lost = &o.findings[0];
    assert_eq!(
        (
            lost.block,
            lost.verdict,
            lost.found_at_block,
            lost.proof.is_some()
        ),
        (0, Verdict::LostWrite, Some(2), false)
    );
    assert_eq!(
        lost.evidence(),
        "seq 4; its acknowledged write was found at block 2"
    );
    assert_eq!(
        (o.findings[1].block, o.findings[1].found_block),
        (2, Some(0))
    );
}

/// A tally of `blocks` (index, bytes), each classified against its acknowledged seq
/// in `acks`, on a target that may have held foreign bytes.
fn tally(acks: &AckTable, blocks: &[(u64, Vec<u8>)]) -> Tally {
    let mut t = Tally::default();
    for (b, data) in blocks {
        let acked = acks.seq(*b);
        t.add(
            *b,
            classify_block(RUN, *b, B, acked, data, true).unwrap(),
            acks,
        );
    }
    t
}

#[test]
fn unserializable_names_the_later_write_and_only_a_later_runs_record_excuses_it() {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(4);
    acks.add(2, 0, 100); // block 0: an earlier acknowledged write, seq 2
    acks.add(10, 0, 1000);
    acks.add(11, 1, 2000);
    acks.add(12, 2, 3000);
    acks.add(13, 3, 3500);
    // Block 0 holds its older seq 2: the reordering signature. Block 2 holds another
    // run's record: overwritten, not reordered.
    let other = block(&Encoder::new(RunId(0x55)), 2, 40, 0);
    let o = tally(
        &acks,
        &[
            (0, block(&enc, 0, 2, 1)),
            (1, block(&enc, 1, 11, 10)),
            (2, other.clone()),
        ],
    )
    .finish(&[]);
    assert_eq!(
        o.counts,
        VerdictCounts::of(&[
            (Verdict::Intact, 1),
            (Verdict::LostWrite, 1),
            (Verdict::Unserializable, 1)
        ])
    );
    let u = &o.findings[0];
    assert_eq!(u.verdict, Verdict::Unserializable);
    assert_eq!(
        u.proof,
        Some(LaterWrite {
            block: 1,
            seq: 11,
            watermark: 10,
            acked_secs_before_end: Some(1.5)
        })
    );
    assert_eq!(
        u.evidence(),
        "seq 2; block 1 holds seq 11, issued after seq 10 was acknowledged (watermark 10), acknowledged 1.500 s before the end"
    );
    assert_eq!(
        (o.findings[1].verdict, o.findings[1].evidence()),
        (
            Verdict::LostWrite,
            "run 0000000000000055's record seq 40".to_string()
        )
    );
    assert_eq!(o.other_runs, vec![RunId(0x55)]);
    // Block 2 is not excused only because A = 12 > W = 10 there. With block 3's
    // seq 13 (watermark 12) surviving, W = 12: run 0x55's record on block 2 is an
    // overwrite by a later run when 0x55 was not on the target before this run
    // (lost write), and block 2's old contents when it was (the previous cut's
    // run on a reused target): then the reordering stands.
    let fill = || {
        let t = tally(
            &acks,
            &[
                (0, block(&enc, 0, 2, 1)),
                (1, block(&enc, 1, 11, 10)),
                (2, other.clone()),
                (3, block(&enc, 3, 13, 12)),
            ],
        );
        assert_eq!(t.other_runs(), &[RunId(0x55)]);
        t
    };
    let later = fill().finish(&[]);
    assert_eq!(
        later.counts,
        VerdictCounts::of(&[
            (Verdict::Intact, 2),
            (Verdict::LostWrite, 1),
            (Verdict::Unserializable, 1)
        ])
    );
    assert_eq!(later.findings[1].verdict, Verdict::LostWrite);
    let prior = fill().finish(&[RunId(0x55)]);
    assert_eq!(
        prior.counts,
        VerdictCounts::of(&[(Verdict::Intact, 2), (Verdict::Unserializable, 2)])
    );
    assert_eq!(
        prior.findings[1].evidence(),
        "run 0000000000000055's record seq 40; block 3 holds seq 13, issued after seq 12 was acknowledged (watermark 12), acknowledged 0.000 s before the end"
    );
    // Zeros there: still unserializable, and the evidence says zeros.
    let o = tally(&acks, &[(0, vec![0; B]), (1, block(&enc, 1, 11, 10))]).finish(&[]);
    assert_eq!(
        (
            o.counts.get(Verdict::LostWrite),
            o.counts.get(Verdict::Unserializable)
        ),
        (0, 1)
    );
    assert!(o.findings[0]
        .evidence()
        .starts_with("zeros; block 1 holds seq 11"));
}

/// `--expect-atomic`: a block torn by a write in flight is a finding (and a failure of
/// the run's counts), where without it the same block is a harmless verdict.
#[test]
fn a_block_torn_in_flight_fails_only_when_atomic_writes_are_expected() {
    let enc = Encoder::new(RUN);
    let (v5, v9) = (block(&enc, 0, 5, 4), block(&enc, 0, 9, 8));
    let mut torn = v5.clone();
    torn[..B / 2].copy_from_slice(&v9[..B / 2]);
    let mut acks = AckTable::new(2);
    acks.add(5, 0, 1000);
    acks.add(6, 1, 2000);
    for expect in [false, true] {
        let mut t = Tally::expecting_atomic(expect);
        t.add(0, classify_block(RUN, 0, B, 5, &torn, true).unwrap(), &acks);
        let b1 = block(&enc, 1, 6, 5);
        t.add(1, classify_block(RUN, 1, B, 6, &b1, true).unwrap(), &acks);
        let o = t.finish(&[]);
        assert_eq!(o.expect_atomic, expect);
        assert_eq!(
            (
                o.counts.get(Verdict::TornInFlight),
                o.counts.get(Verdict::Intact)
            ),
            (1, 1)
        );
        assert_eq!(o.in_flight_survived, 1);
        assert_eq!(o.counts.failures(), 0);
        assert_eq!(o.counts.failures_expecting(expect), u64::from(expect));
        let found: Vec<(u64, Verdict)> = o.findings.iter().map(|f| (f.block, f.verdict)).collect();
        let want = if expect {
            vec![(0, Verdict::TornInFlight)]
        } else {
            vec![]
        };
        assert_eq!(found, want);
    }
}

#[test]
fn a_block_cut_short_by_the_end_of_the_target_names_what_its_sectors_before_the_end_hold() {
    let enc = Encoder::new(RUN);
    let v5 = block(&enc, 3, 5, 4);
    // The target ends 2 KiB into the block: sectors 0–3 hold seq 5, 4–7 are gone.
    let c = classify_block(RUN, 3, B, 5, &v5[..B / 2 + 100], true).unwrap();
    assert_eq!(c.verdict, Verdict::Missing);
    assert!(c.has_run_data);
    assert_eq!(
        c.spans,
        [
            SectorSpan {
                first: 0,
                last: 3,
                content: Content::Seq { seq: 5 }
            },
            SectorSpan {
                first: 4,
                last: 7,
                content: Content::BeyondEnd
            }
        ]
    );
    assert_eq!(
        describe_spans(&c.spans),
        "sectors 0–3: seq 5; 4–7: nothing (beyond the end of the target)"
    );
    // A block wholly beyond the end holds nothing of the run.
    let gone = classify_block(RUN, 3, B, 5, &v5[..100], true).unwrap();
    assert_eq!(
        (gone.verdict, gone.has_run_data, gone.spans.len()),
        (Verdict::Missing, false, 0)
    );
    // Nothing acknowledged: not checked, as before.
    assert_eq!(verdict(3, 0, &v5[..B / 2]), None);
}

#[test]
fn a_newer_write_a_surviving_watermark_covers_was_not_in_flight_at_the_cut() {
    let enc = Encoder::new(RUN);
    // The ledger holds seqs 1 and 2 (blocks 0 and 1). Blocks 2 and 3 hold seqs 3 and 5,
    // which the listener never confirmed; seq 5 was issued with watermark 3: seq 3's
    // fdatasync had returned by then, so only seq 5 was in flight at the cut.
    let mut acks = AckTable::new(4);
    acks.add(1, 0, 100);
    acks.add(2, 1, 200);
    let o = tally(
        &acks,
        &[
            (0, block(&enc, 0, 1, 0)),
            (1, block(&enc, 1, 2, 1)),
            (2, block(&enc, 2, 3, 2)),
            (3, block(&enc, 3, 5, 3)),
        ],
    )
    .finish(&[]);
    assert_eq!(o.counts.get(Verdict::Intact), 4);
    assert_eq!(o.max_watermark, 3);
    assert_eq!(o.in_flight_survived, 1);
    // Without seq 5 on the medium nothing covers seq 3: it may have been in flight.
    let o = tally(
        &acks,
        &[
            (0, block(&enc, 0, 1, 0)),
            (1, block(&enc, 1, 2, 1)),
            (2, block(&enc, 2, 3, 2)),
        ],
    )
    .finish(&[]);
    assert_eq!((o.max_watermark, o.in_flight_survived), (2, 1));
}
