//! The ack table keeps the same seqs and times whether it maps the blocks written or
//! covers every block of the target, and across the switch from one to the other.

use super::*;

#[test]
fn the_map_of_blocks_written_and_the_table_over_every_block_hold_the_same() {
    let blocks = 1000u64;
    let mut acks = AckTable::new(blocks);
    let (mut seq, mut ms) = (vec![0u64; blocks as usize], vec![0u32; blocks as usize]);
    let mut x = 12345u64;
    let mut switched_at = None;
    for n in 1..=3000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let b = (x >> 33) % blocks;
        // Seqs mostly rising, now and then an older one confirmed late.
        let s = if n % 7 == 0 { n / 2 } else { n };
        let t = n as u32 * 3;
        assert!(acks.add(s, b, t));
        if s > seq[b as usize] {
            seq[b as usize] = s;
            ms[b as usize] = t;
        }
        if switched_at.is_none() && acks.covers_every_block() {
            switched_at = Some(n);
        }
        if n % 97 == 0 || switched_at == Some(n) {
            for c in 0..blocks {
                let i = c as usize;
                assert_eq!(acks.seq(c), seq[i], "block {c} after {n} acks");
                assert_eq!(acks.acked_ms(c), (seq[i] > 0).then_some(ms[i]));
            }
        }
    }
    // 12 bytes a block over the target against 28 a block written: the switch comes
    // at the 429th block written.
    let switch = switched_at.expect("the table covers every block");
    assert!(switch > 428, "switched after {switch} acks");
    assert_eq!((acks.acknowledged, acks.end_ms), (3000, 9000));
    assert!(!acks.add(1, blocks, 1));
    assert_eq!((acks.seq(blocks), acks.acked_ms(blocks)), (0, None));
}

#[test]
fn a_big_target_with_few_blocks_written_keeps_a_map_of_them() {
    // 16 GiB of 4 KiB blocks: the table over every block would take 50 MB.
    let mut acks = AckTable::new(4 << 20);
    for b in 0..100_000u64 {
        assert!(acks.add(b + 1, b * 41, 7));
    }
    assert!(!acks.covers_every_block());
    assert_eq!(
        (acks.seq(41 * 99_999), acks.seq(42), acks.seq(0)),
        (100_000, 0, 1)
    );
    assert_eq!(acks.acknowledged, 100_000);
}

#[test]
fn the_table_covers_every_block_once_the_map_would_take_more_and_keeps_the_first_time_of_a_seq() {
    // 7 blocks: a table of 84 bytes; 3 blocks mapped take 84 (kept), 4 take 112.
    let mut acks = AckTable::new(7);
    for b in 0..3 {
        assert!(acks.add(b + 1, b, 10));
    }
    assert!(
        !acks.covers_every_block(),
        "3 blocks mapped take no more than the table"
    );
    assert!(acks.add(4, 3, 10));
    assert!(acks.covers_every_block());
    // The same seq confirmed again keeps its first time, in the table as in the map.
    assert!(acks.add(4, 3, 99));
    assert_eq!((acks.seq(3), acks.acked_ms(3)), (4, Some(10)));
    let mut mapped = AckTable::new(1000);
    assert!(mapped.add(4, 3, 10) && mapped.add(4, 3, 99));
    assert_eq!((mapped.seq(3), mapped.acked_ms(3)), (4, Some(10)));
}
