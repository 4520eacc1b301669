use super::schedule::*;
use super::*;
use crate::record::{Encoder, SECTOR};

mod findings;
mod fold;
mod in_flight;
mod records;
mod reference;
mod unpromised;

const RUN: RunId = RunId(0x1234_5678_9abc_def0);

fn run(window: u64, unsafe_steps: Unsafe) -> FilesRun {
    FilesRun {
        run: RUN,
        jobs: 2,
        files: 6,
        seed: 42,
        unsafe_steps,
        window,
    }
}

/// The acks of the first `n` steps of each worker, and the schedules after them.
fn acks(r: &FilesRun, n: u64) -> (Vec<FilesAck>, Vec<Schedule>) {
    acks_each(r, &vec![n; r.jobs as usize])
}

/// The acks of the first `n[j]` steps of each worker `j`, and the schedules after them.
fn acks_each(r: &FilesRun, n: &[u64]) -> (Vec<FilesAck>, Vec<Schedule>) {
    let mut out = Vec::new();
    let mut scheds = Vec::new();
    for j in 0..r.jobs {
        let mut s = Schedule::new(r.seed, r.jobs, j, r.files, r.unsafe_steps);
        for k in 0..n[j as usize] {
            let st = s.next_step().unwrap();
            let state = s.state(st.file);
            out.push(FilesAck {
                seq: st.seq,
                file: st.file,
                exists: state.is_some(),
                size: state.map_or(0, |b| b.len() as u64 * BLOCK),
                content_seq: state.and_then(|b| b.iter().max().copied()).unwrap_or(0),
                promised: st.promised,
                ms: (k * 10) as u32,
            });
        }
        scheds.push(s);
    }
    (out, scheds)
}

/// File `f` of run [`RUN`] holding one record per block, of the seqs `blocks`.
fn content(f: u32, blocks: &[u64]) -> Found {
    content_in(RUN, f, blocks)
}

/// File `f` of `run` holding one record per block, of the seqs `blocks` (0: zeros).
fn content_in(run: RunId, f: u32, blocks: &[u64]) -> Found {
    thread_local! {
        // An encoder builds its CRC tables at its first block: one per run per thread.
        static ENCODERS: std::cell::RefCell<BTreeMap<u64, std::rc::Rc<Encoder>>> =
            Default::default();
    }
    let enc = ENCODERS.with(|e| {
        e.borrow_mut()
            .entry(run.0)
            .or_insert_with(|| std::rc::Rc::new(Encoder::new(run)))
            .clone()
    });
    let mut data = vec![0u8; blocks.len() * SECTOR];
    for (i, &seq) in blocks.iter().enumerate().filter(|(_, &seq)| seq != 0) {
        enc.encode_block(
            &mut data[i * SECTOR..(i + 1) * SECTOR],
            record_block(f, i as u64),
            seq,
            0,
        );
    }
    Found {
        size: data.len() as u64,
        data,
    }
}

/// The directory exactly as the schedules left it.
fn walk_of(r: &FilesRun, scheds: &[Schedule]) -> Walk {
    let mut w = Walk::default();
    for f in 0..r.files {
        if let Some(b) = scheds[(f % r.jobs) as usize].state(f) {
            w.names.insert(f, content_in(r.run, f, b));
        }
    }
    w
}

fn verdicts(o: &FilesOutcome) -> Vec<(String, FilesVerdict)> {
    o.findings
        .iter()
        .map(|f| (f.name.clone(), f.verdict))
        .collect()
}

/// A name's acknowledged steps, each with the blocks it left (`None`: no name).
type Hist = Vec<(Step, Option<Vec<u64>>)>;

/// A one-worker run found by [`search`].
struct Cut {
    /// The run (one worker; window 1 when `next` is in flight, else 0).
    r: FilesRun,
    /// The acknowledged steps.
    acks: Vec<FilesAck>,
    /// The directory exactly as the acknowledged steps left it.
    walk: Walk,
    /// The step the search stopped at: in flight, or the last acknowledged one.
    next: Step,
    /// The blocks of `next`'s name before it (`None`: no name).
    prev: Option<Vec<u64>>,
    /// `next`'s name's acknowledged steps before `next`.
    hist: Hist,
}

impl Cut {
    /// Judges `walk` against the cut's acks.
    fn judge(&self, walk: &Walk) -> FilesOutcome {
        judge(&self.r, &self.acks, walk).unwrap()
    }

    /// The name of `next`'s file.
    fn name(&self) -> String {
        file_name(self.next.file, 1)
    }
}

/// The first one-worker run over `files` names (seeds from 0, then steps) where the
/// next step and its name's history before it satisfy `pred`; `acked` says whether that
/// step is acknowledged (window 0) or in flight (window 1).
fn search(files: u32, u: Unsafe, acked: bool, pred: impl Fn(&Hist, &Step) -> bool) -> Cut {
    for seed in 0..500 {
        let mut s = Schedule::new(seed, 1, 0, files, u);
        let mut hist: BTreeMap<u32, Hist> = BTreeMap::new();
        for n in 0..2000u64 {
            let next = s.clone().next_step().unwrap();
            let h = hist.remove(&next.file).unwrap_or_default();
            if pred(&h, &next) {
                let r = FilesRun {
                    run: RUN,
                    jobs: 1,
                    files,
                    seed,
                    unsafe_steps: u,
                    window: u64::from(!acked),
                };
                let (acks, scheds) = acks(&r, n + u64::from(acked));
                return Cut {
                    walk: walk_of(&r, &scheds),
                    r,
                    acks,
                    next,
                    prev: s.state(next.file).map(<[u64]>::to_vec),
                    hist: h,
                };
            }
            hist.insert(next.file, h);
            let st = s.next_step().unwrap();
            let after = s.state(st.file).map(<[u64]>::to_vec);
            hist.entry(st.file).or_default().push((st, after));
        }
    }
    panic!("no run of seeds 0..500 has the steps asked for");
}

/// `(verdicts, failures, unpromised, in_flight_survived)` of `o`.
fn summary(o: &FilesOutcome) -> (Vec<(String, FilesVerdict)>, u64, u64, u64) {
    (
        verdicts(o),
        o.counts.failures(),
        o.counts.unpromised,
        o.in_flight_survived,
    )
}

#[test]
fn names_parse_back_to_their_number_and_nothing_else_does() {
    assert_eq!(file_name(7, 3), "w1-2");
    assert_eq!(parse_name("w1-2", 3, 8), Some(7));
    assert_eq!(parse_name("w1-2", 3, 7), None);
    assert_eq!(parse_name("w01-2", 3, 8), None);
    assert_eq!(parse_name("w3-0", 3, 8), None);
    assert_eq!(parse_name("w1-2.tmp", 3, 8), None);
    assert_eq!(parse_name("x", 3, 8), None);
}

#[test]
fn the_schedule_is_deterministic_and_each_worker_keeps_to_its_files() {
    let mut a = Schedule::new(9, 3, 1, 10, Unsafe::default());
    let mut b = Schedule::new(9, 3, 1, 10, Unsafe::default());
    for k in 0..200 {
        let (x, y) = (a.next_step().unwrap(), b.next_step().unwrap());
        assert_eq!(x, y);
        assert_eq!(x.seq, k * 3 + 2);
        assert_eq!(x.file % 3, 1);
        assert!(x.to <= MAX_BLOCKS);
    }
    assert_eq!(
        Schedule::new(9, 3, 2, 2, Unsafe::default()).next_step(),
        None
    );
    let u = Unsafe {
        dirsync: true,
        presync: false,
    };
    assert!(!u.promised(Op::Create) && u.promised(Op::Append) && !u.promised(Op::Unlink));
    let p = Unsafe {
        dirsync: false,
        presync: true,
    };
    assert!(p.promised(Op::Create) && !p.promised(Op::Replace));
}

#[test]
fn a_directory_as_acknowledged_is_intact() {
    let r = run(0, Unsafe::default());
    let (a, s) = acks(&r, 40);
    let o = judge(&r, &a, &walk_of(&r, &s)).unwrap();
    assert!(o.findings.is_empty(), "{:?}", o.findings);
    assert_eq!(o.counts.get(FilesVerdict::Intact), o.checked);
    assert_eq!(o.checked, 6);
    assert_eq!(o.acknowledged, (80, 0));
}

#[test]
fn each_doctored_name_gets_its_verdict_with_evidence() {
    let r = run(0, Unsafe::default());
    let (a, s) = acks(&r, 40);
    let base = walk_of(&r, &s);
    let f = *base.names.keys().next().unwrap();
    let name = file_name(f, r.jobs);
    let state = s[(f % 2) as usize].state(f).unwrap().to_vec();
    let one = |w: Walk| verdicts(&judge(&r, &a, &w).unwrap());

    let mut w = base.clone();
    w.names.remove(&f);
    assert_eq!(one(w), vec![(name.clone(), FilesVerdict::LostFile)]);

    let mut w = base.clone();
    w.names.get_mut(&f).unwrap().size = 0;
    w.names.get_mut(&f).unwrap().data.clear();
    assert_eq!(one(w), vec![(name.clone(), FilesVerdict::ZeroLength)]);

    let mut w = base.clone();
    w.names.get_mut(&f).unwrap().data[3] ^= 1;
    assert_eq!(one(w), vec![(name.clone(), FilesVerdict::Corrupt)]);

    let mut w = base.clone();
    let mut longer = state.clone();
    longer.push(*state.last().unwrap());
    w.names.insert(f, content(f, &longer));
    assert_eq!(one(w), vec![(name.clone(), FilesVerdict::WrongSize)]);

    let mut w = base.clone();
    let older: Vec<u64> = state.iter().map(|_| 0).collect();
    w.names
        .get_mut(&f)
        .unwrap()
        .data
        .iter_mut()
        .for_each(|b| *b = 0);
    assert_eq!(one(w.clone()), vec![(name.clone(), FilesVerdict::Stale)]);
    let _ = older;

    let mut w = base.clone();
    w.tmps.insert(f, content(f, &state));
    let o = judge(&r, &a, &w).unwrap();
    assert_eq!(
        verdicts(&o),
        vec![(name.clone(), FilesVerdict::StaleRename)]
    );
    assert!(
        o.findings[0].evidence.contains(".tmp exists"),
        "{}",
        o.findings[0].evidence
    );

    // A name absent by the ledger that exists: resurrected.
    let gone = (0..r.files).find(|g| !base.names.contains_key(g));
    if let Some(g) = gone {
        let mut w = base.clone();
        w.names.insert(g, content(g, &[1]));
        assert_eq!(one(w), vec![(file_name(g, 2), FilesVerdict::Resurrected)]);
    }
}

#[test]
fn old_content_under_a_replaced_name_is_a_stale_rename() {
    let r = run(0, Unsafe::default());
    // Find a worker-0 prefix ending in an acknowledged replace of an existing file.
    let mut s = Schedule::new(r.seed, r.jobs, 0, r.files, r.unsafe_steps);
    let mut before: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut n = 0;
    let (f, old) = loop {
        let st = s.next_step().unwrap();
        n += 1;
        if st.op == Op::Replace {
            break (st.file, before[&st.file].clone());
        }
        before.insert(
            st.file,
            s.state(st.file).map(<[u64]>::to_vec).unwrap_or_default(),
        );
    };
    let r1 = FilesRun { jobs: 2, ..r };
    let (mut a, sc) = acks(&r1, n);
    a.retain(|x| (x.seq - 1) % 2 == 0);
    let mut w = walk_of(&r1, &sc);
    w.names.retain(|g, _| g % 2 == 0);
    w.names.insert(f, content(f, &old));
    let o = judge(&r1, &a, &w).unwrap();
    assert_eq!(
        verdicts(&o),
        vec![(file_name(f, 2), FilesVerdict::StaleRename)]
    );
    assert_eq!(o.counts.failures(), 1);
}

#[test]
fn an_in_flight_step_may_leave_its_state_and_an_unpromised_loss_is_not_a_failure() {
    let r = run(3, Unsafe::default());
    let (a, _) = acks(&r, 20);
    let (_, later) = acks(&r, 21);
    // The directory after one more step of each worker, none of them confirmed.
    let o = judge(&r, &a, &walk_of(&r, &later)).unwrap();
    assert!(o.findings.is_empty(), "{:?}", o.findings);
    // Without a window the same directory fails where the later steps changed it.
    let strict = run(0, Unsafe::default());
    let o = judge(&strict, &a, &walk_of(&strict, &later)).unwrap();
    assert!(o.counts.failures() > 0);

    let u = run(
        0,
        Unsafe {
            dirsync: true,
            presync: true,
        },
    );
    let (a, s) = acks(&u, 20);
    assert!(a.iter().any(|x| !x.promised));
    let mut w = walk_of(&u, &s);
    let f = *w.names.keys().next().unwrap();
    w.names.remove(&f);
    let o = judge(&u, &a, &w).unwrap();
    assert_eq!(o.findings.len(), 1);
    assert!(!o.findings[0].promised);
    assert_eq!((o.counts.failures(), o.counts.unpromised), (0, 1));
}

#[test]
fn an_ack_that_is_not_its_scheduled_step_is_refused() {
    let r = run(0, Unsafe::default());
    let (mut a, s) = acks(&r, 5);
    a[2].size += BLOCK;
    let e = judge(&r, &a, &walk_of(&r, &s)).unwrap_err();
    assert!(e.contains("is not its scheduled step"), "{e}");
}
