//! The acks folded as they stream ([`FilesAcks`]) give the verdict, counts, findings and
//! errors the reference that keeps every ack and step gives, whatever their order.

use super::reference::reference;
use super::*;
use crate::record::splitmix64;

const ALL: [Unsafe; 4] = [
    Unsafe {
        dirsync: false,
        presync: false,
    },
    Unsafe {
        dirsync: true,
        presync: false,
    },
    Unsafe {
        dirsync: false,
        presync: true,
    },
    Unsafe {
        dirsync: true,
        presync: true,
    },
];

/// The folded verdict, checked equal to the reference's (every ack of a prefix of
/// each worker's schedule: no step left awaiting its ack).
fn both(r: &FilesRun, acks: &[FilesAck], w: &Walk) -> Result<FilesOutcome, String> {
    let mut fold = FilesAcks::new(r.seed, r.jobs, r.files, r.unsafe_steps);
    acks.iter().for_each(|a| fold.add(a));
    assert_eq!(fold.awaited(), 0);
    let folded = judge_folded(r, &fold, w);
    assert_eq!(folded, reference(r, acks, w));
    folded
}

/// `acks` with each moved up to `reach` places later (`rng` picks), some repeated
/// (`dup` in 8: a copy right after, with its time one ms later).
fn shuffled(acks: &[FilesAck], rng: &mut u64, reach: u64, dup: u64) -> Vec<FilesAck> {
    let mut v = acks.to_vec();
    for i in 0..v.len() {
        let to = (i + (splitmix64(rng) % (reach + 1)) as usize).min(v.len() - 1);
        v.swap(i, to);
    }
    let mut out = Vec::new();
    for a in v {
        out.push(a);
        if splitmix64(rng) % 8 < dup {
            out.push(FilesAck { ms: a.ms + 1, ..a });
        }
    }
    out
}

/// A directory after a cut: per name, the state at half the acknowledged steps, at
/// all of them or at `extra` more, then dropped, cut short, zeroed, overwritten or
/// given a `NAME.tmp` (`rng` picks).
fn cut_walk(r: &FilesRun, n: &[u64], extra: u64, rng: &mut u64) -> Walk {
    let mut w = Walk::default();
    for f in 0..r.files {
        let j = f % r.jobs;
        let mut s = Schedule::new(r.seed, r.jobs, j, r.files, r.unsafe_steps);
        let upto = match splitmix64(rng) % 3 {
            0 => n[j as usize] / 2,
            1 => n[j as usize],
            _ => n[j as usize] + extra,
        };
        for _ in 0..upto {
            s.next_step();
        }
        let mut b = s.state(f).map(<[u64]>::to_vec);
        match (splitmix64(rng) % 7, b.as_mut()) {
            (0, _) => b = None,
            (1, Some(x)) => {
                x.pop();
            }
            (2, Some(x)) if !x.is_empty() => x[0] = 0,
            (3, Some(x)) => x.push(x.len() as u64 + 1),
            (4, _) => {
                w.tmps.insert(f, content_in(r.run, f, &[1]));
            }
            _ => {}
        }
        if let Some(x) = b {
            let mut fd = content_in(r.run, f, &x);
            if splitmix64(rng).is_multiple_of(9) && !fd.data.is_empty() {
                fd.data[7] ^= 0x40;
            }
            w.names.insert(f, fd);
        }
    }
    w
}

#[test]
fn folded_acks_give_the_reference_verdict_over_many_cuts_orders_and_repeats() {
    let mut rng = 5;
    let mut seen = std::collections::BTreeSet::new();
    let mut judged = 0;
    for seed in 0..240u64 {
        let u = ALL[(seed % 4) as usize];
        let r = FilesRun {
            run: RUN,
            jobs: 1 + (seed % 3) as u32,
            files: 2 + (seed % 7) as u32,
            seed,
            unsafe_steps: u,
            window: [0, 3, 40][(seed % 3) as usize],
        };
        // A worker that owns no name takes no step.
        let n: Vec<u64> = (0..r.jobs)
            .map(|j| splitmix64(&mut rng) % 60 * u64::from(j < r.files))
            .collect();
        let (a, _) = acks_each(&r, &n);
        let a = shuffled(&a, &mut rng, seed % 5, seed % 3);
        let w = cut_walk(&r, &n, 1 + seed % 4, &mut rng);
        let o = both(&r, &a, &w).unwrap();
        seen.extend(o.findings.iter().map(|f| (f.verdict, f.promised)));
        judged += o.checked;
    }
    // Every verdict came up among the 1 154 names judged, promised and not (a corrupt
    // block is no state a skipped call leaves: always promised).
    use FilesVerdict::*;
    assert_eq!(judged, 1154);
    let want = [
        LostFile,
        Resurrected,
        WrongSize,
        ZeroLength,
        StaleRename,
        Torn,
        Stale,
    ]
    .into_iter()
    .flat_map(|v| [(v, false), (v, true)])
    .chain([(Corrupt, true)]);
    assert_eq!(seen, want.collect());
}

#[test]
fn a_late_ack_is_checked_against_the_step_passed_over_and_leaves_nothing_behind() {
    let r = run(2, Unsafe::default());
    let (a, s) = acks(&r, 6);
    // Worker 0's acks are a[0..6], worker 1's a[6..12].
    let mut fold = FilesAcks::new(r.seed, r.jobs, r.files, r.unsafe_steps);
    let mut order = Vec::new();
    let mut add = |i: usize, fold: &mut FilesAcks| {
        fold.add(&a[i]);
        order.push(a[i]);
        fold.awaited()
    };
    assert_eq!(add(0, &mut fold), 0);
    assert_eq!(add(3, &mut fold), 2);
    assert_eq!(add(9, &mut fold), 5);
    assert_eq!(add(2, &mut fold), 4);
    assert_eq!(add(1, &mut fold), 3);
    for i in [6, 7, 8, 4, 5, 10, 11] {
        add(i, &mut fold);
    }
    assert_eq!(fold.awaited(), 0);
    assert!(fold.recheck.is_empty());
    assert_eq!(fold.acknowledged(), (12, 0));
    let w = walk_of(&r, &s);
    let o = judge_folded(&r, &fold, &w).unwrap();
    assert_eq!(o, reference(&r, &order, &w).unwrap());
    assert_eq!(o, judge(&r, &a, &w).unwrap());
    assert_eq!((o.checked, o.findings.len()), (6, 0));
}

#[test]
fn every_copy_of_a_repeated_ack_counts_and_its_last_copy_is_the_one_checked() {
    let r = run(0, Unsafe::default());
    let (mut a, s) = acks(&r, 5);
    let w = walk_of(&r, &s);
    // Worker 0's last ack of a name that exists after it, again, 100 ms after the
    // last ack; that name is then lost.
    let i = (0..5)
        .rev()
        .find(|&i| a[i].exists && a[i + 1..5].iter().all(|b| b.file != a[i].file))
        .unwrap();
    let last = FilesAck {
        ms: a[4].ms + 100,
        ..a[i]
    };
    a.push(last);
    let mut gone = w.clone();
    gone.names.remove(&last.file);
    let o = both(&r, &a, &gone).unwrap();
    assert_eq!(o.acknowledged, (11, 0));
    assert_eq!(o.findings.len(), 1);
    assert_eq!(o.findings[0].step_seq, last.seq);
    assert_eq!(o.findings[0].acked_secs_before_end, Some(0.0));
    // A last copy that disagrees with its step is refused, a first one is not.
    let wrong = FilesAck {
        size: last.size + BLOCK,
        ..last
    };
    let mut b = a.clone();
    b.push(wrong);
    let e = both(&r, &b, &w).unwrap_err();
    assert_eq!(
        e,
        format!(
            "acknowledged step seq {} (file {}, exists true, {} bytes, content seq {}) is not its scheduled step ({} of file {}: exists true, {} bytes, content seq {}): the ledger and the manifest's schedule disagree",
            last.seq, last.file, wrong.size, last.content_seq, last_step(&r, 0, i as u64).op.name(), last.file, last.size, last.content_seq
        )
    );
    let mut c = a.clone();
    c.insert(i, wrong);
    assert_eq!(both(&r, &c, &w).unwrap().acknowledged, (12, 0));
}

/// Worker `j`'s step `k` of run `r`.
fn last_step(r: &FilesRun, j: u32, k: u64) -> Step {
    let mut s = Schedule::new(r.seed, r.jobs, j, r.files, r.unsafe_steps);
    for _ in 0..k {
        s.next_step();
    }
    s.next_step().unwrap()
}

#[test]
fn an_ack_out_of_order_that_disagrees_is_refused_with_the_words_of_the_first_by_step() {
    let r = run(0, Unsafe::default());
    let (mut a, s) = acks(&r, 6);
    a[7].content_seq += 1;
    a[2].promised = false;
    a.swap(1, 3);
    a.swap(7, 11);
    let e = both(&r, &a, &walk_of(&r, &s)).unwrap_err();
    assert!(
        e.starts_with(&format!("acknowledged step seq {} ", a[2].seq)),
        "{e}"
    );
    a.insert(5, FilesAck { seq: 0, ..a[0] });
    assert_eq!(
        both(&r, &a, &walk_of(&r, &s)).unwrap_err(),
        "an acknowledged step has seq 0"
    );
    // Worker 2 of 3 owns no name of 2.
    let r = FilesRun {
        jobs: 3,
        files: 2,
        ..r
    };
    let (a, s) = acks(&r, 0);
    let beyond = FilesAck {
        seq: 6,
        file: 5,
        exists: true,
        size: BLOCK,
        content_seq: 6,
        promised: true,
        ms: 3,
    };
    let mut b = a.clone();
    b.extend([FilesAck { seq: 9, ..beyond }, beyond]);
    assert_eq!(
        both(&r, &b, &walk_of(&r, &s)).unwrap_err(),
        "acknowledged step seq 6 is beyond every worker's schedule"
    );
}

#[test]
fn names_lost_without_directory_fsyncs_fold_as_the_reference_every_one_unpromised() {
    for u in [ALL[1], ALL[3]] {
        let r = FilesRun {
            jobs: 3,
            files: 9,
            ..run(0, u)
        };
        let (a, s) = acks(&r, 50);
        let a = shuffled(&a, &mut 11, 3, 2);
        let present = (0..r.files)
            .filter(|&f| s[(f % 3) as usize].state(f).is_some())
            .count() as u64;
        let o = both(&r, &a, &Walk::default()).unwrap();
        assert_eq!(o.counts.get(FilesVerdict::LostFile), present);
        assert_eq!(o.findings.len() as u64, present);
        assert_eq!((o.counts.unpromised, o.counts.failures()), (present, 0));
    }
}

#[test]
fn an_acknowledged_state_a_later_acknowledged_replace_superseded_folds_as_stale_rename() {
    let c = search(2, Unsafe::default(), true, |h, nx| {
        nx.op == Op::Replace
            && h.last()
                .is_some_and(|(_, s)| s.as_ref().is_some_and(|b| !b.is_empty()))
    });
    let old = c.prev.clone().unwrap();
    let mut w = c.walk.clone();
    w.names.insert(c.next.file, content(c.next.file, &old));
    let o = both(&c.r, &c.acks, &w).unwrap();
    assert_eq!(
        summary(&o),
        (vec![(c.name(), FilesVerdict::StaleRename)], 1, 0, 0)
    );
    // The replace's own state is intact.
    let o = both(&c.r, &c.acks, &c.walk).unwrap();
    assert_eq!(summary(&o), (vec![], 0, 0, 0));
}

#[test]
fn an_ack_far_past_its_workers_cursor_is_kept_for_the_replay_not_stepped_to() {
    let r = run(0, Unsafe::default());
    let (mut a, _) = acks(&r, 3);
    // Worker 0's step MAX_AHEAD + 10, acknowledged as it is, with none between.
    let k = crate::ledger::MAX_AHEAD + 10;
    let mut s = Schedule::new(r.seed, r.jobs, 0, r.files, r.unsafe_steps);
    let (mut st, mut scheds) = (s.next_step().unwrap(), Vec::new());
    for _ in 0..k {
        st = s.next_step().unwrap();
    }
    let state = s.state(st.file);
    a.push(FilesAck {
        seq: st.seq,
        file: st.file,
        exists: state.is_some(),
        size: state.map_or(0, |b| b.len() as u64 * BLOCK),
        content_seq: state.and_then(|b| b.iter().max().copied()).unwrap_or(0),
        promised: true,
        ms: 5000,
    });
    let mut fold = FilesAcks::new(r.seed, r.jobs, r.files, r.unsafe_steps);
    a.iter().for_each(|x| fold.add(x));
    assert_eq!((fold.awaited(), fold.recheck.len()), (0, 1));
    scheds.push(s);
    scheds.push(acks(&r, 3).1.remove(1));
    let w = walk_of(&r, &scheds);
    let o = judge_folded(&r, &fold, &w).unwrap();
    assert_eq!(o, reference(&r, &a, &w).unwrap());
    // Worker 1's three steps touched two of its names.
    assert_eq!(
        (o.checked, o.findings.len(), o.acknowledged),
        (5, 0, (7, 0))
    );
}

#[test]
fn a_manifest_no_writer_makes_keeps_its_acks_whole_and_steps_no_schedule() {
    let ack = FilesAck {
        seq: 3,
        file: 0,
        exists: true,
        size: BLOCK,
        content_seq: 3,
        promised: true,
        ms: 1,
    };
    // No worker: every ack is beyond the schedule (the former replay divided by 0).
    let r = FilesRun {
        jobs: 0,
        ..run(0, Unsafe::default())
    };
    assert_eq!(
        judge(&r, &[ack], &Walk::default()).unwrap_err(),
        "acknowledged step seq 3 is beyond every worker's schedule"
    );
    // More names than a writer makes: no schedule while the ledger streams.
    let mut fold = FilesAcks::new(1, 1, crate::schedule::MAX_FILES + 1, Unsafe::default());
    fold.add(&ack);
    assert_eq!(
        (
            fold.workers.len(),
            fold.names.len(),
            fold.recheck.len(),
            fold.last(0)
        ),
        (0, 0, 1, Some(2))
    );
}

/// An ack no replay reaches is beyond the schedule, as the reference says, even where
/// its step plus the window overflows (`seq` = 2⁶⁴ − 1 on one worker, run unfinished),
/// and an ack more than [`MAX_REPLAY_AHEAD`](crate::ledger::MAX_REPLAY_AHEAD) steps
/// past where the fold stopped is not stepped to: it is beyond the schedule too.
#[test]
fn an_ack_no_replay_reaches_is_beyond_the_schedule() {
    let r = FilesRun {
        jobs: 1,
        ..run(5, Unsafe::default())
    };
    let (mut a, _) = acks(&r, 3);
    let wild = |seq| FilesAck {
        seq,
        file: 0,
        exists: true,
        size: BLOCK,
        content_seq: seq,
        promised: true,
        ms: 9,
    };
    a.push(wild(u64::MAX));
    let mut fold = FilesAcks::new(r.seed, r.jobs, r.files, r.unsafe_steps);
    a.iter().for_each(|x| fold.add(x));
    assert_eq!(
        judge_folded(&r, &fold, &Walk::default()).unwrap_err(),
        "acknowledged step seq 18446744073709551615 is beyond every worker's schedule"
    );
    let far = 3 + crate::ledger::MAX_REPLAY_AHEAD + 2;
    a.pop();
    a.push(wild(far));
    let mut fold = FilesAcks::new(r.seed, r.jobs, r.files, r.unsafe_steps);
    a.iter().for_each(|x| fold.add(x));
    assert_eq!(
        judge_folded(&r, &fold, &Walk::default()).unwrap_err(),
        format!("acknowledged step seq {far} is beyond every worker's schedule")
    );
}
