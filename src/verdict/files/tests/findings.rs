//! What a finding states, and the acks and bytes the verdict refuses to take as they are.

use super::*;
use crate::verdict::files::blocks::{describe, Block};

#[test]
fn a_finding_states_the_last_step_and_what_was_expected_and_found() {
    let r = run(0, Unsafe::default());
    let (a, s) = acks(&r, 40);
    // Each name's last acknowledged step and its worker's step number `k`.
    let mut last: BTreeMap<u32, (u64, Step)> = BTreeMap::new();
    for j in 0..r.jobs {
        let mut sc = Schedule::new(r.seed, r.jobs, j, r.files, r.unsafe_steps);
        for k in 0..40 {
            let st = sc.next_step().unwrap();
            last.insert(st.file, (k, st));
        }
    }
    let (f, state, (k, step)) = (0..r.files)
        .filter_map(|f| Some((f, s[(f % 2) as usize].state(f)?.to_vec(), last[&f])))
        .find(|(_, b, (k, _))| b.len() >= 2 && *k < 39)
        .unwrap();
    let kept = &state[..state.len() - 1];
    let mut w = walk_of(&r, &s);
    w.names.insert(f, content(f, kept));
    let o = judge(&r, &a, &w).unwrap();
    let blocks: Vec<Block> = kept.iter().map(|&q| Block::Seq(q)).collect();
    let size = kept.len() as u64 * BLOCK;
    let want = FilesFinding {
        name: file_name(f, 2),
        verdict: FilesVerdict::WrongSize,
        step_seq: step.seq,
        step: step.op.name().to_string(),
        promised: true,
        expected_exists: true,
        expected_size: state.len() as u64 * BLOCK,
        expected_seq: *state.iter().max().unwrap(),
        found_exists: true,
        found_size: size,
        found_seq: *kept.iter().max().unwrap(),
        acked_secs_before_end: Some((390 - k * 10) as f64 / 1000.0),
        evidence: format!("{size} bytes: {}", describe(&blocks)),
    };
    assert_eq!(o.findings, vec![want]);
}

#[test]
fn a_tmp_file_beside_a_pending_replace_is_not_named_in_the_evidence_of_a_lost_name() {
    let c = search(2, Unsafe::default(), false, |h, nx| {
        nx.op == Op::Replace && !h.is_empty()
    });
    let mut w = c.walk.clone();
    w.names.remove(&c.next.file);
    w.tmps
        .insert(c.next.file, content(c.next.file, &[c.next.seq]));
    let o = c.judge(&w);
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::LostFile)], 1, 0, 0)
    );
    assert_eq!(o.findings[0].evidence, "the name does not exist");
}

#[test]
fn a_partial_last_block_is_zeros_or_foreign_bytes_as_it_holds() {
    let r = run(0, Unsafe::default());
    let (a, s) = acks(&r, 40);
    let base = walk_of(&r, &s);
    let f = *base.names.keys().next().unwrap();
    let name = file_name(f, r.jobs);
    for (byte, v) in [
        (0u8, FilesVerdict::WrongSize),
        (0xab, FilesVerdict::Corrupt),
    ] {
        let mut w = base.clone();
        let fd = w.names.get_mut(&f).unwrap();
        fd.data.extend([byte; 100]);
        fd.size += 100;
        let o = judge(&r, &a, &w).unwrap();
        assert_eq!(verdicts(&o), vec![(name.clone(), v)], "{byte}");
    }
}

#[test]
fn an_ack_that_differs_from_its_scheduled_step_in_any_one_field_is_refused() {
    let r = run(0, Unsafe::default());
    let (a, s) = acks(&r, 5);
    let doctor: [fn(&mut FilesAck); 5] = [
        |x| x.file += 2,
        |x| x.exists = !x.exists,
        |x| x.size += BLOCK,
        |x| x.content_seq += 1,
        |x| x.promised = !x.promised,
    ];
    for (i, d) in doctor.iter().enumerate() {
        let mut a = a.clone();
        d(&mut a[2]);
        let e = judge(&r, &a, &walk_of(&r, &s)).unwrap_err();
        assert!(e.contains("is not its scheduled step"), "field {i}: {e}");
    }
}

#[test]
fn the_schedule_of_a_seed_is_the_one_every_version_replays() {
    let mut s = Schedule::new(42, 2, 1, 6, Unsafe::default());
    let steps: Vec<(u64, u32, &str, u64, u64)> = (0..12)
        .map(|_| {
            let st = s.next_step().unwrap();
            (st.seq, st.file, st.op.name(), st.from, st.to)
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            (2, 1, "create", 0, 1),
            (4, 5, "create", 0, 4),
            (6, 1, "truncate", 1, 0),
            (8, 1, "append", 0, 2),
            (10, 5, "unlink", 4, 0),
            (12, 3, "create", 0, 5),
            (14, 3, "unlink", 5, 0),
            (16, 3, "create", 0, 7),
            (18, 3, "replace", 7, 3),
            (20, 1, "append", 2, 3),
            (22, 3, "unlink", 3, 0),
            (24, 1, "replace", 3, 6),
        ]
    );
    // The next 5000 steps, folded (FNV-1a over seq, file, operation, from and to).
    let fold = (0..5000).fold(0xcbf2_9ce4_8422_2325u64, |h, _| {
        let st = s.next_step().unwrap();
        [st.seq, u64::from(st.file), st.op as u64, st.from, st.to]
            .iter()
            .fold(h, |h, &x| (h ^ x).wrapping_mul(0x100_0000_01b3))
    });
    assert_eq!(fold, 2_593_735_022_265_258_386);
}

#[test]
fn every_step_keeps_to_the_sizes_its_operation_allows() {
    let mut s = Schedule::new(3, 1, 0, 4, Unsafe::default());
    let mut seen = BTreeMap::new();
    for _ in 0..5000 {
        let st = s.next_step().unwrap();
        *seen.entry(st.op.name()).or_insert(0u32) += 1;
        let ok = match st.op {
            Op::Create => st.from == 0 && (1..=8).contains(&st.to),
            Op::Append => (1..=4).contains(&(st.to - st.from)) && st.to <= MAX_BLOCKS,
            Op::Replace => (1..=8).contains(&st.to),
            Op::Truncate => st.to < st.from,
            Op::Unlink => st.to == 0,
        };
        assert!(ok, "{st:?}");
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
}
