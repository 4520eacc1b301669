//! Unit tests of the cache and its fault policy against an in-memory [`Store`].

use std::collections::{BTreeSet, HashMap};
use std::io;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::truth::Fate;

/// An in-memory store: one byte vector per inode.
#[derive(Default)]
struct MemStore {
    files: HashMap<u64, Vec<u8>>,
    log: Vec<(u64, u64, usize)>,
}

impl Store for MemStore {
    fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let f = self.files.entry(ino).or_default();
        let end = offset as usize + data.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[offset as usize..end].copy_from_slice(data);
        self.log.push((ino, offset, data.len()));
        Ok(())
    }

    fn len(&mut self, ino: u64) -> io::Result<u64> {
        Ok(self.files.get(&ino).map_or(0, |f| f.len() as u64))
    }
}

fn sim(mode: Mode, seed: u64) -> Sim {
    Sim::new(SimConfig {
        mode,
        seed,
        destage_delay_ms: 100,
        cache_bytes: 1 << 20,
        ..SimConfig::default()
    })
}

#[test]
fn overlay_newest_wins_and_extends_size() {
    let mut s = sim(Mode::Lying, 1);
    s.write(7, 2, b"aaaa", 0);
    s.write(7, 4, b"bb", 0);
    s.write(8, 0, b"zz", 0);
    let mut buf = *b"........";
    s.overlay(7, 0, &mut buf);
    assert_eq!(&buf, b"..aabb..");
    let mut buf = *b"...";
    s.overlay(7, 3, &mut buf);
    assert_eq!(&buf, b"abb");
    assert_eq!(s.cached_end(7), Some(6));
    assert_eq!(s.cached_end(8), Some(2));
    assert_eq!(s.cached_end(9), None);
    assert_eq!(s.cached_bytes(), 8);
}

#[test]
fn truncate_discards_and_shortens() {
    let mut s = sim(Mode::Lying, 1);
    s.write(1, 0, b"0123456789", 0);
    s.write(1, 8, b"xy", 0);
    s.write(1, 20, b"zz", 0);
    s.truncate(1, 5);
    assert_eq!(s.cached_writes(), 1);
    assert_eq!(s.cached_bytes(), 5);
    assert_eq!(s.cached_end(1), Some(5));
    let mut st = MemStore::default();
    let out = s.cut(&mut st);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].write_id, out[0].len), (1, 5));
}

#[test]
fn fifo_destage_after_delay() {
    let mut s = sim(Mode::Lying, 1);
    s.write(1, 0, b"a", 0);
    s.write(2, 0, b"b", 50);
    s.write(1, 1, b"c", 60);
    let mut st = MemStore::default();
    assert_eq!(s.destage_due(99, 10, &mut st).unwrap(), 0);
    assert_eq!(s.destage_due(155, 10, &mut st).unwrap(), 2);
    assert_eq!(st.log, vec![(1, 0, 1), (2, 0, 1)]);
    assert_eq!(s.next_due_ms(), Some(160));
    assert_eq!(s.destage_due(1000, 10, &mut st).unwrap(), 1);
    assert_eq!(st.files[&1], b"ac");
}

#[test]
fn lying_fsync_marks_but_keeps_and_cut_drops() {
    let mut s = sim(Mode::Lying, 1);
    s.write(1, 0, b"a", 0);
    s.write(2, 0, b"b", 0);
    let upto = s.next_write_id();
    s.write(1, 1, b"c", 0);
    s.mark_fsynced(1, upto);
    let mut st = MemStore::default();
    let out = s.cut(&mut st);
    let summary: Vec<(u64, bool, Fate)> = out
        .iter()
        .map(|o| (o.write_id, o.fsynced, o.fate))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, true, Fate::Dropped),
            (2, false, Fate::Dropped),
            (3, false, Fate::Dropped)
        ]
    );
    assert!(st.files.is_empty());
    assert_eq!(s.cached_writes(), 0);
    assert_eq!(s.writes_total(), 3);
}

#[test]
fn honest_fsync_destages_only_that_file_in_order() {
    let mut s = sim(Mode::Honest, 1);
    s.write(1, 0, b"aa", 0);
    s.write(2, 0, b"bb", 0);
    s.write(1, 1, b"c", 0);
    let mut st = MemStore::default();
    s.destage_ino(1, &mut st).unwrap();
    assert_eq!(st.log, vec![(1, 0, 2), (1, 1, 1)]);
    assert_eq!(st.files[&1], b"ac");
    assert!(!s.has_cached(1));
    assert!(s.has_cached(2));
}

#[test]
fn reorder_keeps_overlapping_writes_in_order_and_varies_otherwise() {
    // Each write's delay is random; overlapping writes still destage in order.
    let mut orders = BTreeSet::new();
    for seed in 0..20 {
        let mut s = sim(Mode::Reorder, seed);
        for i in 0..6u64 {
            s.write(1, i * 10, b"x", 0);
        }
        s.write(1, 0, b"y", 0); // overlaps write 1
        let mut st = MemStore::default();
        s.destage_due(10_000, 100, &mut st).unwrap();
        assert_eq!(st.files[&1][0], b'y', "seed {seed}");
        orders.insert(st.log.clone());
    }
    assert!(orders.len() > 1, "reorder mode never reordered");
}

#[test]
fn reorder_is_reproducible_from_seed() {
    let run = |seed| {
        let mut s = sim(Mode::Reorder, seed);
        for i in 0..10u64 {
            s.write(1 + i % 3, i * 100, &[i as u8; 10], i);
        }
        let mut st = MemStore::default();
        s.destage_due(150, 100, &mut st).unwrap();
        let out = s.cut(&mut st);
        (st.log, out)
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42).0, run(43).0);
}

#[test]
fn cache_pressure_destages_oldest_first() {
    let mut s = Sim::new(SimConfig {
        mode: Mode::Lying,
        cache_bytes: 4,
        ..SimConfig::default()
    });
    let mut st = MemStore::default();
    s.write(1, 0, b"abc", 0);
    assert_eq!(s.make_room(&mut st).unwrap(), 0);
    s.write(1, 3, b"de", 0);
    assert_eq!(s.make_room(&mut st).unwrap(), 1);
    assert_eq!(st.log, vec![(1, 0, 3)]);
    assert_eq!(s.cached_bytes(), 2);
}

#[test]
fn sector_bounds_are_absolute() {
    assert_eq!(sector_bounds(0, 1024, 512), vec![512, 1024]);
    assert_eq!(sector_bounds(100, 1000, 512), vec![512, 1024, 1100]);
    assert_eq!(sector_bounds(512, 1, 512), vec![513]);
    assert_eq!(sector_bounds(5, 0, 512), Vec::<u64>::new());
}

#[test]
fn torn_cut_keeps_a_prefix_of_sectors() {
    let mut s = sim(Mode::Torn, 7);
    let data: Vec<u8> = (0..4096u32).map(|i| (i / 512) as u8 + 1).collect();
    s.write(1, 0, &data, 0);
    s.write(1, 8192, &data, 0);
    let mut st = MemStore::default();
    let out = s.cut(&mut st);
    assert_eq!(out.len(), 2);
    // Replay the draws: one per write, in write_id order, uniform in 0..=8.
    let mut rng = StdRng::seed_from_u64(7);
    let k1: u64 = rng.random_range(0..=8);
    let k2: u64 = rng.random_range(0..=8);
    assert_eq!(out[0].kept_sectors, Some(k1));
    assert_eq!(out[1].kept_sectors, Some(k2));
    for (o, k) in out.iter().zip([k1, k2]) {
        let fate = match k {
            0 => Fate::Dropped,
            8 => Fate::Destaged,
            _ => Fate::Torn,
        };
        assert_eq!(o.fate, fate);
    }
    let f = st.files.get(&1).cloned().unwrap_or_default();
    let expect_len = if k2 > 0 { 8192 + 512 * k2 } else { 512 * k1 };
    assert_eq!(f.len() as u64, expect_len);
    for (i, b) in f.iter().enumerate() {
        let i = i as u64;
        let want = if i < 512 * k1 {
            (i / 512) as u8 + 1
        } else if (8192..8192 + 512 * k2).contains(&i) {
            ((i - 8192) / 512) as u8 + 1
        } else {
            0
        };
        assert_eq!(*b, want, "byte {i}");
    }
}

/// With `atomic_unit` 8192, writes of 4096 and 8192 bytes are kept or dropped whole
/// (one even-chance draw each, replayed here); a 12288-byte write, larger than the
/// unit, keeps any number of its 24 sectors.
#[test]
fn torn_cut_never_tears_a_write_within_the_atomic_unit() {
    for seed in 0..20u64 {
        let mut s = Sim::new(SimConfig {
            mode: Mode::Torn,
            seed,
            atomic_unit: 8192,
            ..SimConfig::default()
        });
        s.write(1, 0, &[1u8; 4096], 0);
        s.write(1, 8192, &[2u8; 8192], 0);
        s.write(1, 65536, &[3u8; 12288], 0);
        let out = s.cut(&mut MemStore::default());
        let mut rng = StdRng::seed_from_u64(seed);
        let k1 = 8 * u64::from(rng.random_bool(0.5));
        let k2 = 16 * u64::from(rng.random_bool(0.5));
        let k3: u64 = rng.random_range(0..=24);
        let kept: Vec<Option<u64>> = out.iter().map(|o| o.kept_sectors).collect();
        assert_eq!(kept, vec![Some(k1), Some(k2), Some(k3)], "seed {seed}");
        assert_ne!(out[0].fate, Fate::Torn);
        assert_ne!(out[1].fate, Fate::Torn);
    }
}

#[test]
fn misdirect_block_choice() {
    let mut rng = StdRng::seed_from_u64(3);
    // File of 4 blocks, write of 1 block at block 1: candidates 0, 2, 3.
    let mut seen = BTreeSet::new();
    for _ in 0..200 {
        seen.insert(pick_misdirect_block(1, 4096, 4 * 4096, 4096, &mut rng).unwrap());
    }
    assert_eq!(seen, BTreeSet::from([0, 2, 3]));
    // Two-block write in a 3-block file: candidates 0 and 1, own is 1.
    for _ in 0..20 {
        assert_eq!(
            pick_misdirect_block(1, 8192, 3 * 4096, 4096, &mut rng),
            Some(0)
        );
    }
    // Own block past the candidates (write extends the file): any candidate.
    assert_eq!(pick_misdirect_block(5, 4096, 4096, 4096, &mut rng), Some(0));
    // Only the own block fits, or the file is too short: nowhere to go.
    assert_eq!(pick_misdirect_block(0, 4096, 4096, 4096, &mut rng), None);
    assert_eq!(pick_misdirect_block(0, 8192, 4096, 4096, &mut rng), None);
}

#[test]
fn misdirect_lands_elsewhere_and_keeps_old_contents() {
    let mut s = Sim::new(SimConfig {
        mode: Mode::Misdirect,
        seed: 11,
        misdirect_every: 1, // every eligible write
        ..SimConfig::default()
    });
    let mut st = MemStore::default();
    st.write_at(1, 0, &[0xAA; 4 * 4096]).unwrap();
    st.log.clear();
    s.write(1, 4096, &[0x55; 4096], 0); // eligible
    s.write(1, 100, b"small", 0); // not block-aligned: never misdirected
    let upto = s.next_write_id();
    s.destage_ino(1, &mut st).unwrap();
    s.mark_fsynced(1, upto);
    let m = s.misdirected().to_vec();
    assert_eq!(m.len(), 1);
    let at = m[0].landed_at.unwrap();
    assert_ne!(at, 4096);
    assert_eq!(at % 4096, 0);
    assert!(at < 4 * 4096);
    let f = &st.files[&1];
    assert!(f[4096..8192].iter().all(|&b| b == 0xAA), "own block kept");
    assert!(f[at as usize..at as usize + 4096]
        .iter()
        .all(|&b| b == 0x55));
    assert_eq!(&f[100..105], b"small");
    let out = s.cut(&mut st);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0],
        TruthEntry {
            write_id: 1,
            file_write_id: 1,
            ino: 1,
            offset: 4096,
            len: 4096,
            fsynced: true,
            fate: Fate::Misdirected,
            kept_sectors: None,
            landed_at: Some(at),
        }
    );
}

#[test]
fn flush_all_empties_in_order() {
    let mut s = sim(Mode::Reorder, 5);
    s.write(1, 0, b"ab", 0);
    s.write(1, 0, b"c", 0);
    let mut st = MemStore::default();
    s.flush_all(&mut st).unwrap();
    assert_eq!(st.files[&1], b"cb");
    assert_eq!(s.cached_writes(), 0);
    assert!(s.cut(&mut st).is_empty());
}

/// `can_tear` answers whether a cut now could tear a write: only in `torn` mode, only
/// for a cached write longer than the atomic unit and spanning two sector pieces or
/// more, and no longer once the cut has emptied the cache.
#[test]
fn can_tear_needs_a_cached_write_longer_than_the_atomic_unit() {
    let torn = |atomic_unit| {
        Sim::new(SimConfig {
            mode: Mode::Torn,
            seed: 1,
            atomic_unit,
            ..SimConfig::default()
        })
    };
    let mut s = torn(4096);
    assert!(!s.can_tear(), "nothing cached");
    s.write(1, 0, &[1u8; 4096], 0);
    assert!(
        !s.can_tear(),
        "a write of the atomic unit is kept or dropped whole"
    );
    s.write(1, 8192, &[2u8; 8192], 0);
    assert!(s.can_tear(), "an 8 KiB write over a 4 KiB unit");
    s.cut(&mut MemStore::default());
    assert!(!s.can_tear(), "the cut emptied the cache");
    // Without an atomic unit any write of two sectors can tear; one sector cannot.
    let mut s = torn(0);
    s.write(1, 512, &[3u8; 512], 0);
    assert!(!s.can_tear(), "one sector piece");
    s.write(1, 1000, &[4u8; 100], 0);
    assert!(s.can_tear(), "bytes 1000..1100 span sectors 1 and 2");
    let mut s = sim(Mode::Lying, 7);
    s.write(1, 0, &[5u8; 8192], 0);
    assert!(!s.can_tear(), "only torn mode tears");
}
