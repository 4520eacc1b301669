//! The rules' finer edges: whose record a sector holds (the wrong sector, another
//! block size, a run id a few bits off), damage on a block never acknowledged, a block
//! cut short holding another run's records, when a block holds a write in flight, what
//! the ack table keeps, and what a tally counts and names as the proof of a reordering.

use super::*;

#[test]
fn a_block_holding_exactly_its_acknowledged_seq_is_no_write_in_flight() {
    let enc = Encoder::new(RUN);
    // Block 0 holds its acknowledged seq 5, issued when seq 4 was the watermark: no
    // surviving watermark covers seq 5, yet it was acknowledged, so nothing that was in
    // flight at the cut survived. Block 1 holds seq 7, never acknowledged: in flight.
    let mut acks = AckTable::new(2);
    acks.add(5, 0, 100);
    let o = tally(&acks, &[(0, block(&enc, 0, 5, 4))]).finish(&[]);
    assert_eq!(
        (
            o.counts.get(Verdict::Intact),
            o.max_watermark,
            o.in_flight_survived
        ),
        (1, 4, 0)
    );
    let o = tally(
        &acks,
        &[(0, block(&enc, 0, 5, 4)), (1, block(&enc, 1, 7, 5))],
    )
    .finish(&[]);
    assert_eq!(
        (
            o.counts.get(Verdict::Intact),
            o.max_watermark,
            o.in_flight_survived
        ),
        (2, 5, 1)
    );
}

#[test]
fn damage_on_a_block_never_acknowledged_is_no_failure() {
    let enc = Encoder::new(RUN);
    // A write in flight at the cut, never acknowledged, left sector 2 damaged: nothing
    // was promised, so the block is what the write left, not corrupt.
    let mut bad = block(&enc, 3, 9, 8);
    bad[2 * SECTOR + 100] ^= 1;
    assert_eq!(verdict(3, 0, &bad), Some((Verdict::Intact, Some(9))));
    assert_eq!(verdict(3, 9, &bad), Some((Verdict::Corrupt, None)));
    // Foreign bytes in its last sector: torn by the write in flight, no failure.
    let mut foreign = block(&enc, 3, 9, 8);
    foreign[7 * SECTOR..].fill(0xAB);
    assert_eq!(
        verdict(3, 0, &foreign),
        Some((Verdict::TornInFlight, Some(0)))
    );
    assert_eq!(verdict(3, 9, &foreign), Some((Verdict::Corrupt, None)));
}

#[test]
fn a_record_of_the_right_block_in_the_wrong_sector_or_of_another_block_size_is_misdirected() {
    let enc = Encoder::new(RUN);
    let v = block(&enc, 3, 9, 8);
    // Sectors 0 and 1 swapped: each record names block 3, but the other sector.
    let mut swapped = v.clone();
    swapped[..SECTOR].copy_from_slice(&v[SECTOR..2 * SECTOR]);
    swapped[SECTOR..2 * SECTOR].copy_from_slice(&v[..SECTOR]);
    let c = classify_block(RUN, 3, B, 9, &swapped, true).unwrap();
    assert_eq!(
        (c.verdict, c.found_seq, c.found_block),
        (Verdict::Misdirected, Some(9), Some(3))
    );
    assert_eq!(
        c.spans[..2],
        [
            SectorSpan {
                first: 0,
                last: 0,
                content: Content::Stray {
                    block: 3,
                    sector: 1,
                    seq: 9
                }
            },
            SectorSpan {
                first: 1,
                last: 1,
                content: Content::Stray {
                    block: 3,
                    sector: 0,
                    seq: 9
                }
            }
        ]
    );
    // The first half of block 3 written as an 8 KiB block: right block, right sector
    // indices, another block size.
    let mut big = vec![0u8; 2 * B];
    enc.encode_block(&mut big, 3, 9, 8);
    let c = classify_block(RUN, 3, B, 9, &big[..B], true).unwrap();
    assert_eq!(
        (c.verdict, c.found_seq, c.strays.len()),
        (Verdict::Misdirected, Some(9), 8)
    );
}

#[test]
fn a_damaged_record_is_this_runs_when_its_run_id_is_at_most_four_bits_off() {
    // A run id with many bits set: `|` or `&` in place of `^` would misjudge it.
    let run = RunId(0xDEAD_BEEF_0BAD_F00D);
    let enc = Encoder::new(run);
    let mut v = vec![0u8; B];
    enc.encode_block(&mut v, 3, 9, 8);
    // Every sector damaged: the block holds this run's records with bad CRCs, which
    // an acknowledged block may not; no sector is a valid record.
    for s in 0..8 {
        v[s * SECTOR + 100] ^= 1;
    }
    let c = classify_block(run, 3, B, 9, &v, true).unwrap();
    assert_eq!(c.verdict, Verdict::Corrupt);
    assert_eq!(
        c.spans,
        [SectorSpan {
            first: 0,
            last: 7,
            content: Content::BadCrc {
                seq: 9,
                flipped_bits: 1
            }
        }]
    );
    // The run id itself damaged in four bits: still this run's record.
    let mut four = v.clone();
    four[8] ^= 0x0F;
    let c = classify_block(run, 3, B, 9, &four, true).unwrap();
    assert_eq!(c.verdict, Verdict::Corrupt);
    assert!(matches!(c.spans[0].content, Content::BadCrc { seq: 9, .. }));
    // Another run's damaged records (five bits off and more) are foreign bytes: on a
    // target that may have held foreign data, this run's write was lost.
    let mut five = v.clone();
    for s in 0..8 {
        five[s * SECTOR + 8] ^= 0x1F;
    }
    let c = classify_block(run, 3, B, 9, &five, true).unwrap();
    assert_eq!((c.verdict, c.found_seq), (Verdict::LostWrite, Some(0)));
    let other = classify_block(RunId(0x1000_0000), 3, B, 9, &v, true).unwrap();
    assert_eq!(
        (other.verdict, &other.spans[0].content),
        (Verdict::LostWrite, &Content::Foreign)
    );
}

#[test]
fn a_block_cut_short_holding_another_runs_records_counts_as_such() {
    let v5 = block(&Encoder::new(RUN), 3, 5, 4);
    let c = classify_block(RUN, 3, B, 5, &v5[..B / 2], true).unwrap();
    assert_eq!((c.has_run_data, c.has_other_run), (true, false));
    let other = block(&Encoder::new(RunId(0x55)), 3, 40, 0);
    let c = classify_block(RUN, 3, B, 5, &other[..B / 2], true).unwrap();
    assert_eq!(
        (c.verdict, c.has_run_data, c.has_other_run, c.other_runs),
        (Verdict::Missing, false, true, vec![RunId(0x55)])
    );
}

#[test]
fn the_ack_table_counts_every_ack_and_keeps_each_blocks_highest_with_its_first_time() {
    let mut acks = AckTable::new(3);
    assert!(acks.add(4, 1, 300));
    assert!(acks.add(2, 1, 500)); // an older seq of block 1, confirmed later
    assert!(acks.add(4, 1, 700)); // seq 4 again: it was acknowledged at 300 ms
    assert!(acks.add(3, 0, 100));
    assert!(!acks.add(5, 3, 900)); // no block 3: ignored
    let seqs: Vec<u64> = (0..4).map(|b| acks.seq(b)).collect();
    let times: Vec<Option<u32>> = (0..4).map(|b| acks.acked_ms(b)).collect();
    assert_eq!(
        (acks.acknowledged, acks.end_ms, seqs, times),
        (
            4,
            700,
            vec![3, 4, 0, 0],
            vec![Some(100), Some(300), None, None]
        )
    );
    // Block 2, never acknowledged, holds block 0's seq 3: the finding gives no time
    // of acknowledgement; block 1 lost its seq 4, acknowledged 0.4 s before the end.
    let enc = Encoder::new(RUN);
    let o = tally(
        &acks,
        &[
            (0, block(&enc, 0, 3, 2)),
            (1, block(&enc, 1, 2, 1)),
            (2, block(&enc, 0, 3, 2)),
        ],
    )
    .finish(&[]);
    let found: Vec<(u64, Verdict, Option<f64>)> = o
        .findings
        .iter()
        .map(|f| (f.block, f.verdict, f.acked_secs_before_end))
        .collect();
    assert_eq!(
        found,
        [
            (1, Verdict::LostWrite, Some(0.4)),
            (2, Verdict::Misdirected, None)
        ]
    );
}

#[test]
fn a_tally_counts_the_blocks_checked_and_whose_records_they_hold() {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(3);
    acks.add(5, 0, 100);
    acks.add(6, 1, 200);
    acks.add(7, 2, 300);
    let other = block(&Encoder::new(RunId(0x55)), 2, 40, 0);
    let o = tally(
        &acks,
        &[
            (0, block(&enc, 0, 5, 4)),
            (1, block(&enc, 1, 6, 5)),
            (2, other),
        ],
    )
    .finish(&[]);
    assert_eq!(
        (o.checked, o.run_data_blocks, o.other_run_blocks),
        (3, 2, 1)
    );
}

#[test]
fn the_proof_of_an_unserializable_write_is_the_first_block_carrying_the_highest_watermark() {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(4);
    acks.add(10, 0, 1000);
    acks.add(11, 1, 2000);
    acks.add(12, 2, 2500);
    acks.add(3, 3, 500);
    // Block 0 lost seq 10. Blocks 1 and 2 hold seqs 11 and 12, both issued when seq 10
    // was the watermark; block 3, checked last, holds seq 3 (watermark 2).
    let o = tally(
        &acks,
        &[
            (0, vec![0; B]),
            (1, block(&enc, 1, 11, 10)),
            (2, block(&enc, 2, 12, 10)),
            (3, block(&enc, 3, 3, 2)),
        ],
    )
    .finish(&[]);
    assert_eq!(
        o.counts,
        VerdictCounts::of(&[(Verdict::Intact, 3), (Verdict::Unserializable, 1)])
    );
    assert_eq!(o.max_watermark, 10);
    assert_eq!(
        o.findings[0].proof,
        Some(LaterWrite {
            block: 1,
            seq: 11,
            watermark: 10,
            acked_secs_before_end: Some(0.5)
        })
    );
}

#[test]
fn a_stray_of_another_block_does_not_explain_a_lost_write() {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(3);
    acks.add(10, 0, 1000);
    acks.add(11, 1, 2000);
    acks.add(12, 2, 3000);
    // Block 0 holds its older seq 4; block 2 holds block 1's seq 11 (issued when 10
    // was the watermark), which block 1 holds too. No record of block 0 went astray:
    // block 0's loss is a reordering, not the misdirection at block 2.
    let o = tally(
        &acks,
        &[
            (0, block(&enc, 0, 4, 3)),
            (1, block(&enc, 1, 11, 10)),
            (2, block(&enc, 1, 11, 10)),
        ],
    )
    .finish(&[]);
    assert_eq!(
        o.counts,
        VerdictCounts::of(&[
            (Verdict::Intact, 1),
            (Verdict::Unserializable, 1),
            (Verdict::Misdirected, 1)
        ])
    );
    assert_eq!(
        (o.findings[0].verdict, o.findings[0].found_at_block),
        (Verdict::Unserializable, None)
    );
}
