//! [`Tally::merge`]: ranges of a target tallied apart (on several threads) and merged
//! in order finish exactly as one pass over the target.

use super::*;

/// Blocks 0–7 with every kind of fact a tally keeps: intact blocks, a tie of the
/// highest watermark (blocks 1 and 5), a write in flight that survived, a lost write
/// that is unserializable, two later runs' records, and a stray record of block 6
/// found at block 4.
fn mixed_blocks() -> (AckTable, Vec<(u64, Vec<u8>)>) {
    let enc = Encoder::new(RUN);
    let mut acks = AckTable::new(8);
    for (seq, b, ms) in [
        (5, 0, 100),
        (21, 1, 200),
        (10, 2, 300),
        (7, 3, 400),
        (25, 5, 500),
        (30, 6, 600),
        (1, 7, 700),
    ] {
        acks.add(seq, b, ms);
    }
    let blocks = vec![
        (0, block(&enc, 0, 5, 4)),
        (1, block(&enc, 1, 21, 20)),
        (2, block(&enc, 2, 3, 2)),
        (3, block(&Encoder::new(RunId(0x55)), 3, 9, 0)),
        (4, block(&enc, 6, 30, 29)),
        (5, block(&enc, 5, 40, 20)),
        (6, vec![0; B]),
        (7, block(&Encoder::new(RunId(0x66)), 7, 9, 0)),
    ];
    (acks, blocks)
}

#[test]
fn ranges_tallied_apart_and_merged_in_order_finish_as_one_pass() {
    let (acks, blocks) = mixed_blocks();
    let whole = tally(&acks, &blocks).finish(&[]);
    assert_eq!(
        whole.counts,
        VerdictCounts::of(&[
            (Verdict::Intact, 3),
            (Verdict::LostWrite, 3),
            (Verdict::Unserializable, 1),
            (Verdict::Misdirected, 1),
        ])
    );
    assert_eq!(
        (whole.checked, whole.in_flight_survived, whole.max_watermark),
        (8, 1, 20)
    );
    assert_eq!((whole.run_data_blocks, whole.other_run_blocks), (5, 2));
    assert_eq!(whole.other_runs, vec![RunId(0x55), RunId(0x66)]);
    let found: Vec<(u64, Verdict, Option<u64>)> = whole
        .findings
        .iter()
        .map(|f| (f.block, f.verdict, f.found_at_block))
        .collect();
    assert_eq!(
        found,
        vec![
            (2, Verdict::Unserializable, None),
            (3, Verdict::LostWrite, None),
            (4, Verdict::Misdirected, None),
            (6, Verdict::LostWrite, Some(4)),
            (7, Verdict::LostWrite, None),
        ]
    );
    assert_eq!(
        whole.findings[0].proof,
        Some(LaterWrite {
            block: 1,
            seq: 21,
            watermark: 20,
            acked_secs_before_end: Some(0.5)
        })
    );
    for k in 0..=blocks.len() {
        for j in k..=blocks.len() {
            let mut t = tally(&acks, &blocks[..k]);
            t.merge(tally(&acks, &blocks[k..j]));
            t.merge(tally(&acks, &blocks[j..]));
            assert_eq!(t.finish(&[]), whole, "split at blocks {k} and {j}");
        }
    }
}
