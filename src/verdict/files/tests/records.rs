//! Which records count as a block of a name, and runs with many workers.

use super::*;

#[test]
fn a_valid_record_of_another_run_file_block_or_sector_is_corrupt() {
    let r = run(0, Unsafe::default());
    let (a, s) = acks(&r, 40);
    let base = walk_of(&r, &s);
    let (&f, _) = base
        .names
        .iter()
        .find(|(_, fd)| fd.size >= 2 * BLOCK)
        .unwrap();
    let state = s[(f % 2) as usize].state(f).unwrap().to_vec();
    let (seq, name) = (state[0], file_name(f, r.jobs));
    let other_run = RunId(RUN.0 ^ (1 << 32));
    let record = |run: RunId, block: u64, sector: u32| {
        let mut b = [0u8; SECTOR];
        let h = crate::record::SectorHeader {
            run,
            block,
            sector,
            sectors_per_block: 1,
            seq,
            watermark: 0,
        };
        Encoder::new(run).encode_sector(&mut b, &h);
        b
    };
    let g = f ^ 1;
    let cases = [
        (
            record(other_run, record_block(f, 0), 0),
            format!("run {other_run}'s record seq {seq}"),
        ),
        (
            record(RUN, record_block(g, 0), 0),
            format!(
                "seq {seq} written for block {} sector 0",
                record_block(g, 0)
            ),
        ),
        (
            record(RUN, record_block(f, 1), 0),
            format!(
                "seq {seq} written for block {} sector 0",
                record_block(f, 1)
            ),
        ),
        (
            record(RUN, record_block(f, 0), 1),
            format!(
                "seq {seq} written for block {} sector 1",
                record_block(f, 0)
            ),
        ),
    ];
    for (bytes, said) in cases {
        let mut w = base.clone();
        w.names.get_mut(&f).unwrap().data[..SECTOR].copy_from_slice(&bytes);
        let o = judge(&r, &a, &w).unwrap();
        assert_eq!(verdicts(&o), vec![(name.clone(), FilesVerdict::Corrupt)]);
        assert_eq!(o.counts.failures(), 1);
        let rest = &o.findings[0].evidence;
        assert!(
            rest.starts_with(&format!(
                "{} bytes: blocks 0: {said}; ",
                state.len() as u64 * BLOCK
            )),
            "{rest}"
        );
    }
}

#[test]
fn three_workers_and_a_run_id_above_u32_max_are_judged_name_by_name() {
    let r = FilesRun {
        run: RunId(u64::from(u32::MAX) + 1),
        jobs: 3,
        files: 9,
        seed: 5,
        unsafe_steps: Unsafe::default(),
        window: 2,
    };
    let n = [30, 17, 24];
    let (a, s) = acks_each(&r, &n);
    let exact = walk_of(&r, &s);
    let o = judge(&r, &a, &exact).unwrap();
    assert_eq!(summary(&o), (vec![], 0, 0, 0));
    assert_eq!((o.checked, o.acknowledged), (9, (71, 0)));

    // One more step of each worker, none confirmed: three names changed in flight.
    let (_, later) = acks_each(&r, &n.map(|k| k + 1));
    let o = judge(&r, &a, &walk_of(&r, &later)).unwrap();
    assert_eq!(summary(&o), (vec![], 0, 0, 3));

    // A name of worker 2 that no step in flight touches, lost.
    let mut next = s[2].clone();
    let touched = [
        next.next_step().unwrap().file,
        next.next_step().unwrap().file,
    ];
    let f = (0..r.files)
        .find(|&g| g % 3 == 2 && exact.names.contains_key(&g) && !touched.contains(&g))
        .unwrap();
    let mut w = exact.clone();
    w.names.remove(&f);
    let o = judge(&r, &a, &w).unwrap();
    assert_eq!(
        summary(&o),
        (vec![(file_name(f, 3), FilesVerdict::LostFile)], 1, 0, 0)
    );
    assert_eq!(o.findings[0].name, format!("w2-{}", f / 3));
}

#[test]
fn the_walk_reads_enough_of_the_largest_file_to_judge_its_every_block() {
    let c = search(2, Unsafe::default(), true, |_, nx| {
        nx.op == Op::Append && nx.to == MAX_BLOCKS
    });
    let f = c.next.file;
    let full = c.walk.names[&f].clone();
    let read = |fd: &Found| Found {
        size: fd.size,
        data: fd.data[..fd.data.len().min(READ_CAP as usize)].to_vec(),
    };
    let mut w = c.walk.clone();
    w.names.insert(f, read(&full));
    assert_eq!(summary(&c.judge(&w)), (vec![], 0, 0, 0));
    let mut lost = full.clone();
    lost.data[(MAX_BLOCKS - 1) as usize * SECTOR..].fill(0);
    w.names.insert(f, read(&lost));
    assert_eq!(
        summary(&c.judge(&w)),
        (vec![(c.name(), FilesVerdict::Torn)], 1, 0, 0)
    );
}

#[test]
fn a_file_grown_past_the_largest_state_with_foreign_bytes_beyond_8196_is_corrupt() {
    // No run makes a file longer than MAX_BLOCKS blocks (8192 bytes), but a broken
    // filesystem may: its blocks past them are read up to READ_CAP (32 KiB) and judged.
    let c = search(2, Unsafe::default(), true, |_, nx| {
        nx.op == Op::Append && nx.to == MAX_BLOCKS
    });
    let f = c.next.file;
    let mut grown = c.walk.names[&f].clone();
    let mut extra = [0u8; SECTOR];
    extra[100] = 0xAB;
    grown.data.extend_from_slice(&extra);
    grown.size = grown.data.len() as u64;
    let read = Found {
        size: grown.size,
        data: grown.data[..grown.data.len().min(READ_CAP as usize)].to_vec(),
    };
    let mut w = c.walk.clone();
    w.names.insert(f, read);
    let o = c.judge(&w);
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::Corrupt)], 1, 0, 0)
    );
    let x = &o.findings[0];
    assert_eq!(
        (x.expected_size, x.found_size, x.found_seq),
        (8192, 8704, c.next.seq)
    );
    assert_eq!(
        x.evidence,
        "8704 bytes: blocks 0: seq 1032; 1–3: seq 1035; 4–7: seq 1037; 8–9: seq 1039; \
         10–11: seq 1040; 12–15: seq 1044; 16: foreign bytes (no plugpull record)"
    );
}
