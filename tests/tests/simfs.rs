//! The file workload on the power-cut simulator: a real listener, a real
//! `plugpull write file` on a `plugpull-simfs` mount, a cut under load, and
//! `plugpull verify --json` compared exactly with what the simulator says happened.
//!
//! # The order at the cut: SIGKILL the writer, then cut
//!
//! A real power cut stops the writer and the device in the same instant: the writer
//! never learns that anything failed. If we cut first, the writer's next `pwrite` or
//! `fdatasync` fails with EIO and the run ends by a device error (a drive-only cut:
//! `tests/tests/write_truth.rs` covers it) — a race between the agent's device-error
//! entry and our SIGKILL. To model a whole-machine cut, we
//! SIGKILL the writer and reap it first, then cut. In between, the device keeps its
//! power for a few milliseconds more than the CPU; that is the order of a real
//! machine losing power (the drive's capacitors outlive the CPU), and it changes
//! nothing acknowledged: the ground truth records whatever was still cached at the
//! cut. The writer is dead before the cut, so it acknowledges nothing the device
//! could then lose "after the fact".
//!
//! # Three independent sources, compared exactly
//!
//! * **the ground truth** of simfs: every write cached at the cut (dropped, torn) and
//!   every write misdirected before it, with `fsynced`;
//! * **the backing file**, read by this test with `plugpull::record::decode_sector`
//!   (what survived, sector by sector; simfs is unmounted, so nothing is cached);
//! * **the ledger file** of the listener, parsed by this test with
//!   `plugpull::ledger::scan`: `A(b)`, the highest acknowledged seq of each block.
//!
//! What the ledger holds is not "every write whose fsync returned": the agent
//! reports acks asynchronously, so the last acks before the SIGKILL may never reach
//! the listener. Those writes are not judged — rightly, nobody was told they were
//! durable. And `fsynced: true` in the ground truth is not "acknowledged" either: with
//! several jobs on one file, job 1's fdatasync marks job 2's write fsynced before
//! job 2's own fdatasync returned. So neither the truth alone nor the ledger alone
//! predicts the findings; the exact prediction needs all three:
//!
//! * Each block is written by one worker, one write at a time, and simfs destages
//!   overlapping writes in arrival order in every mode. So the writes of block `b`
//!   that the cut dropped are a *suffix* of `b`'s writes, the backing file holds the
//!   last write before that suffix (seq `s(b)`), and the acknowledged writes of `b`
//!   in the ledger are a *prefix* of `b`'s writes. Hence: `b`'s acknowledged write was
//!   lost ⇔ `A(b) > s(b)`; and then the ground truth must list, for block `b`,
//!   at least `a_b` dropped writes (the ledger's acks of `b` above `s(b)`), and the
//!   first `a_b` of them (by `write_id`) must be `fsynced: true`. Both are asserted.
//! * With one job, write ids and seqs coincide (`write_id == seq`: the writer is the
//!   only process writing on a fresh mount and it preallocates with `fallocate`,
//!   which is no write), which the test checks against the ledger for every truth
//!   line it covers. Then the lost set follows from the truth and the ledger alone,
//!   without the backing file: `{b : some dropped write to b has write_id ≤ A(b)}`.
//! * The verdict of every block (not only the mode's headline verdict) is computed
//!   from the backing file and the ledger by a small model of the rules in
//!   `src/verdict.rs`, written independently here, and the verifier's counts and
//!   findings must equal it; the headline numbers must equal what the ground truth
//!   says (per mode, below).
//!
//! The ledger is read before and after `verify`; if the listener was still
//! committing the dead writer's last batch, `verify` runs again, so the verifier and
//! the model always judge the same ledger.

use plugpull::ledger::{self, Acks, Entry, FileAck};
use plugpull::record::{decode_sector, Sector, SECTOR};
use plugpull::RunId;
use plugpull_tests::simfs::{skip_without_fuse, Fate, SimFs, Truth};
use plugpull_tests::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

const BS: u64 = 4096;
const SPB: usize = BS as usize / SECTOR;
/// The target's name inside the mount.
const FILE: &str = "t.dat";

/// Starts a `plugpull write file` on `target` (inside a mount) and returns once it
/// printed its run id.
fn start_writer(l: &Listener, target: &Path, size: &str, jobs: u32, seed: u64) -> Writer {
    let (jobs, seed) = (jobs.to_string(), seed.to_string());
    Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--size",
        size,
        "--jobs",
        &jobs,
        "--duration",
        "120s",
        "--progress",
        "0.05",
        "--seed",
        &seed,
        "--target",
        target.to_str().unwrap(),
    ])
}

/// Runs a writer on `sim` until `min_acks` acks are confirmed, SIGKILLs it (and
/// reaps it), then cuts the power: returns the run id and the ground truth.
fn cut_under_load(
    l: &Listener,
    sim: &mut SimFs,
    size: &str,
    jobs: u32,
    seed: u64,
    min_acks: u64,
) -> (String, Truth) {
    let mut w = start_writer(l, &sim.mnt().join(FILE), size, jobs, seed);
    w.wait_acknowledged(min_acks);
    sigkill(&mut w.child);
    let truth = sim.cut();
    (w.run, truth)
}

/// The file acks of `run` in the listener's ledger file, in ledger order.
fn ledger_acks(bytes: &[u8]) -> Vec<FileAck> {
    let mut acks = Vec::new();
    let mut invalid = None;
    ledger::scan(bytes, |_, e| match e {
        Entry::Acks(b) => match b.acks {
            Acks::File(v) => acks.extend(v),
            Acks::Pg(_) => panic!("pgbench acks in a file run"),
        },
        Entry::DeviceError(d) => invalid = Some(d.error),
        _ => {}
    })
    .expect("ledger scans");
    assert_eq!(
        invalid, None,
        "the run ended by a device error: the writer saw the cut"
    );
    acks
}

/// `plugpull verify --json --run RUN --target TARGET` against a ledger that does not
/// change while it runs; returns the exit code, the report and the ledger's acks.
fn verify_stable(l: &Listener, run: &str, target: &Path) -> (i32, Value, Vec<FileAck>) {
    let path = l.ledger_path(run);
    for _ in 0..10 {
        let before = std::fs::read(&path).expect("ledger");
        let (code, v, err) = verify_json(l, &["--run", run, "--target", target.to_str().unwrap()]);
        assert!(code == 0 || code == 1, "verify exit {code}: {err}");
        if std::fs::read(&path).expect("ledger") == before {
            return (code, v, ledger_acks(&before));
        }
    }
    panic!("the ledger of {run} kept changing while verifying");
}

/// One sector of the backing file, as this test reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sec {
    /// A valid sector of the run: the header's block, sector index, sectors per block, seq, watermark.
    Ours {
        block: u64,
        sector: u32,
        spb: u32,
        seq: u64,
        wm: u64,
    },
    /// Zeros, or a valid sector of another run: contents from before the run.
    Prior,
    /// Anything else.
    Invalid,
}

/// The sectors of each of `blocks` blocks of `path` (fewer sectors where the file ends).
fn read_disk(path: &Path, run: RunId, blocks: u64) -> Vec<Vec<Sec>> {
    let data = std::fs::read(path).unwrap_or_default();
    (0..blocks as usize)
        .map(|b| {
            let start = (b * BS as usize).min(data.len());
            let end = ((b + 1) * BS as usize).min(data.len());
            data[start..end]
                .chunks_exact(SECTOR)
                .map(|s| match decode_sector(s.try_into().unwrap()) {
                    Sector::Valid(h) if h.run == run => Sec::Ours {
                        block: h.block,
                        sector: h.sector,
                        spb: h.sectors_per_block,
                        seq: h.seq,
                        wm: h.watermark,
                    },
                    Sector::Valid(_) | Sector::Blank => Sec::Prior,
                    Sector::Invalid(_) => Sec::Invalid,
                })
                .collect()
        })
        .collect()
}

/// The seq of the first sector of the run in the block that was written for another
/// place, if any.
fn misplaced(b: u64, secs: &[Sec]) -> Option<u64> {
    secs.iter().enumerate().find_map(|(i, s)| match *s {
        Sec::Ours {
            block,
            sector,
            spb,
            seq,
            ..
        } if block != b || sector != i as u32 || spb != SPB as u32 => Some(seq),
        _ => None,
    })
}

/// The seq of each sector (prior contents and invalid sectors count as 0).
fn seqs(secs: &[Sec]) -> Vec<u64> {
    secs.iter()
        .map(|s| {
            if let Sec::Ours { seq, .. } = s {
                *seq
            } else {
                0
            }
        })
        .collect()
}

/// The single seq a block holds, when all its sectors agree.
fn whole_seq(secs: &[Sec]) -> Option<u64> {
    let s = seqs(secs);
    (s.len() == SPB && s.iter().all(|&x| x == s[0])).then(|| s[0])
}

/// What the verifier must say, per the rules (independent model of `src/verdict.rs`).
#[derive(Debug, Default)]
struct Model {
    /// Blocks per verdict (every verdict present, as in the report).
    verdicts: BTreeMap<&'static str, u64>,
    /// Failed blocks: block → (verdict, expected seq, found seq).
    findings: BTreeMap<u64, (&'static str, u64, Option<u64>)>,
    /// Blocks classified.
    checked: u64,
    /// Blocks holding a seq above their acknowledged one.
    in_flight_survived: u64,
}

impl Model {
    fn new(disk: &[Vec<Sec>], acked: &[u64]) -> Model {
        let mut m = Model::default();
        for v in [
            "intact",
            "lost_write",
            "torn_in_flight",
            "torn_acknowledged",
            "corrupt",
            "misdirected",
            "unserializable",
            "missing",
        ] {
            m.verdicts.insert(v, 0);
        }
        let mut max_wm = 0;
        let mut lost = Vec::new();
        // Records of the run written for another block: (block written for, seq).
        let strays: Vec<(u64, u64)> = disk
            .iter()
            .enumerate()
            .flat_map(|(b, secs)| {
                secs.iter().enumerate().filter_map(move |(i, s)| match *s {
                    Sec::Ours {
                        block,
                        sector,
                        spb,
                        seq,
                        ..
                    } if block != b as u64 || sector != i as u32 || spb != SPB as u32 => {
                        Some((block, seq))
                    }
                    _ => None,
                })
            })
            .collect();
        // A block whose acknowledged write was found elsewhere is a lost write, never
        // unserializable: one misdirection is one fault.
        let found_elsewhere = |b: u64, a: u64| strays.iter().any(|&(sb, sq)| sb == b && sq >= a);
        for (b, secs) in disk.iter().enumerate() {
            let (b, a) = (b as u64, acked[b]);
            let ours = secs.iter().any(|s| matches!(s, Sec::Ours { .. }));
            if secs.len() < SPB {
                if a > 0 {
                    m.checked += 1;
                    m.fail(b, "missing", a, None);
                }
                continue;
            }
            if a == 0 && !ours {
                continue;
            }
            m.checked += 1;
            // The watermark of every correctly placed sector of the run counts.
            for (i, s) in secs.iter().enumerate() {
                if let Sec::Ours {
                    block,
                    sector,
                    spb,
                    wm,
                    ..
                } = *s
                {
                    if block == b && sector == i as u32 && spb == SPB as u32 {
                        max_wm = max_wm.max(wm);
                    }
                }
            }
            if let Some(stray) = misplaced(b, secs) {
                m.fail(b, "misdirected", a, Some(stray));
                continue;
            }
            let s = seqs(secs);
            let (min, max) = (*s.iter().min().unwrap(), *s.iter().max().unwrap());
            if max > a {
                m.in_flight_survived += 1;
            }
            if a > 0 && secs.contains(&Sec::Invalid) {
                m.fail(b, "corrupt", a, None);
            } else if min == max && min >= a {
                *m.verdicts.get_mut("intact").unwrap() += 1;
            } else if min == max {
                lost.push((b, a, min));
            } else if min < a && found_elsewhere(b, a) {
                m.fail(b, "lost_write", a, Some(min));
            } else if min < a {
                m.fail(b, "torn_acknowledged", a, Some(min));
            } else {
                *m.verdicts.get_mut("torn_in_flight").unwrap() += 1;
            }
        }
        for (b, a, found) in lost {
            m.fail(
                b,
                if a <= max_wm && !found_elsewhere(b, a) {
                    "unserializable"
                } else {
                    "lost_write"
                },
                a,
                Some(found),
            );
        }
        m
    }

    fn fail(&mut self, b: u64, v: &'static str, a: u64, found: Option<u64>) {
        *self.verdicts.get_mut(v).unwrap() += 1;
        self.findings.insert(b, (v, a, found));
    }

    /// Blocks with a lost acknowledged write (lost_write or unserializable).
    fn lost(&self) -> BTreeSet<u64> {
        self.findings
            .iter()
            .filter(|(_, f)| f.0 == "lost_write" || f.0 == "unserializable")
            .map(|(b, _)| *b)
            .collect()
    }
}

/// Everything one cut produced, checked against the model.
struct Checked {
    report: Value,
    code: i32,
    model: Model,
    disk: Vec<Vec<Sec>>,
    acks: Vec<FileAck>,
    acked: Vec<u64>,
    truth: Truth,
    jobs: u32,
}

impl Checked {
    /// Block indices of the report's findings with one of `verdicts`.
    fn found(&self, verdicts: &[&str]) -> BTreeSet<u64> {
        let f = self.report["findings"].as_array().expect("findings");
        assert_eq!(
            f.len() as u64,
            self.report["findings_total"].as_u64().unwrap(),
            "findings list truncated"
        );
        f.iter()
            .filter(|x| verdicts.contains(&x["verdict"].as_str().unwrap()))
            .map(|x| x["block"].as_u64().unwrap())
            .collect()
    }

    /// The verdict count `v` of the report.
    fn count(&self, v: &str) -> u64 {
        self.report["verdicts"][v].as_u64().unwrap()
    }

    /// The truth lines of the target.
    fn truth_writes(&self) -> impl Iterator<Item = &plugpull_tests::simfs::TruthWrite> {
        self.truth.of_file(FILE)
    }

    /// Checks a lost set against the ground truth (see the module doc): for each
    /// block, the writes the cut dropped, by write_id, start with at least `a_b`
    /// fsynced ones, where `a_b` counts the ledger's acks of the block above the seq
    /// on disk; the blocks with `a_b > 0` are exactly `lost`.
    fn check_lost_against_truth(&self, lost: &BTreeSet<u64>) {
        let mut dropped: BTreeMap<u64, Vec<bool>> = BTreeMap::new();
        for w in self.truth_writes().filter(|w| w.fate == Fate::Dropped) {
            assert_eq!(
                (w.offset % BS, w.len),
                (0, BS),
                "a dropped write that is not one block: {w:?}"
            );
            dropped.entry(w.block(BS)).or_default().push(w.fsynced);
        }
        let mut expect = BTreeSet::new();
        for (b, secs) in self.disk.iter().enumerate() {
            let Some(on_disk) = whole_seq(secs) else {
                continue;
            };
            let a_b = self
                .acks
                .iter()
                .filter(|a| a.block == b as u64 && a.seq > on_disk)
                .count();
            if a_b == 0 {
                continue;
            }
            expect.insert(b as u64);
            let d = dropped.get(&(b as u64)).map(Vec::as_slice).unwrap_or(&[]);
            assert!(d.len() >= a_b, "block {b}: {a_b} acknowledged writes above seq {on_disk} on disk, but the truth dropped only {} writes of it", d.len());
            assert!(d[..a_b].iter().all(|&f| f), "block {b}: one of the first {a_b} dropped writes was not fsynced per the truth: {d:?}");
        }
        assert_eq!(
            &expect, lost,
            "lost blocks per ledger+disk+truth vs the verifier"
        );
        if self.jobs == 1 {
            // write_id == seq: check it on every truth line the ledger covers, then
            // predict the lost set from the truth and the ledger alone.
            let by_seq: BTreeMap<u64, u64> = self.acks.iter().map(|a| (a.seq, a.block)).collect();
            let top = by_seq.keys().next_back().copied().unwrap_or(0);
            assert_eq!(
                by_seq.len() as u64,
                top,
                "one job: the ledger holds seqs 1..={top} without a gap"
            );
            for w in self.truth_writes() {
                if w.write_id <= top {
                    assert_eq!(
                        by_seq[&w.write_id],
                        w.block(BS),
                        "write_id {} is seq {} but went to another block: {w:?}",
                        w.write_id,
                        w.write_id
                    );
                }
            }
            let from_truth: BTreeSet<u64> = self
                .truth_writes()
                .filter(|w| {
                    w.fate == Fate::Dropped && w.write_id <= self.acked[w.block(BS) as usize]
                })
                .map(|w| w.block(BS))
                .collect();
            assert_eq!(
                &from_truth, lost,
                "one job: lost blocks from the truth and the ledger alone"
            );
        }
    }
}

/// Verifies `run` on `target` (read through the given path) and checks the report
/// against the independent model built from the backing file and the ledger.
fn verify_and_model(
    l: &Listener,
    run: &str,
    target: &Path,
    backing_file: &Path,
    blocks: u64,
    truth: Truth,
    jobs: u32,
) -> Checked {
    let (code, report, acks) = verify_stable(l, run, target);
    let mut acked = vec![0u64; blocks as usize];
    for a in &acks {
        acked[a.block as usize] = acked[a.block as usize].max(a.seq);
    }
    let disk = read_disk(backing_file, run.parse().unwrap(), blocks);
    let model = Model::new(&disk, &acked);
    assert_eq!(report["run_id"], json!(run));
    assert_eq!(
        report["acknowledged"],
        json!(acks.len()),
        "acks in the ledger"
    );
    assert_eq!(
        report["verdicts"],
        json!(model.verdicts),
        "verdict counts vs the model (code {code})"
    );
    assert_eq!(report["blocks_checked"], json!(model.checked));
    assert_eq!(
        report["in_flight_survived"],
        json!(model.in_flight_survived)
    );
    let findings: BTreeMap<u64, (String, u64, Option<u64>)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["block"].as_u64().unwrap(),
                (
                    f["verdict"].as_str().unwrap().to_string(),
                    f["expected_seq"].as_u64().unwrap(),
                    f["found_seq"].as_u64(),
                ),
            )
        })
        .collect();
    let want: BTreeMap<u64, (String, u64, Option<u64>)> = model
        .findings
        .iter()
        .map(|(b, f)| (*b, (f.0.to_string(), f.1, f.2)))
        .collect();
    assert_eq!(findings, want, "findings vs the model");
    let failures: u64 = model.findings.len() as u64;
    assert_eq!(code, if failures == 0 { 0 } else { 1 }, "exit code");
    assert_eq!(report["ok"], json!(failures == 0));
    Checked {
        report,
        code,
        model,
        disk,
        acks,
        acked,
        truth,
        jobs,
    }
}

/// One cut in `mode`: mount, write under load, SIGKILL, cut, remount honest, verify
/// through the mount, compare with the model; returns the checked result.
fn one_cut(
    mode: &str,
    seed: u64,
    extra: &[&str],
    size_blocks: u64,
    jobs: u32,
    min_acks: u64,
) -> Checked {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount_with(dir.path(), mode, seed, extra);
    let t0 = Instant::now();
    let (run, truth) = cut_under_load(
        &l,
        &mut sim,
        &(size_blocks * BS).to_string(),
        jobs,
        seed,
        min_acks,
    );
    assert!(truth.summary.writes_total > 0);
    sim.remount("honest");
    let target = sim.mnt().join(FILE);
    let c = verify_and_model(
        &l,
        &run,
        &target,
        &sim.backing().join(FILE),
        size_blocks,
        truth,
        jobs,
    );
    sim.umount();
    eprintln!(
        "{mode} seed {seed} jobs {jobs}: {} writes, {} cached at the cut ({} fsynced), {} misdirected; ledger {} acks; verdicts {}; {:.1} s",
        c.truth.summary.writes_total,
        c.truth.summary.cached_at_cut,
        c.truth.summary.fsynced_at_cut,
        c.truth.summary.misdirected,
        c.acks.len(),
        c.report["verdicts"],
        t0.elapsed().as_secs_f64()
    );
    c
}

/// Honest mode: fsync destages, so nothing fsynced is cached at the cut and
/// nothing acknowledged is lost: exit 0, `ok`, not one failure verdict.
#[test]
fn honest_device_loses_nothing_acknowledged() {
    if skip_without_fuse("honest_device_loses_nothing_acknowledged") {
        return;
    }
    for (seed, jobs) in [(1, 3), (2, 1), (3, 4), (4, 2)] {
        let c = one_cut("honest", seed, &[], 512, jobs, 300 * seed);
        assert_eq!(
            c.truth.summary.fsynced_at_cut, 0,
            "honest: nothing fsynced may be cached at the cut"
        );
        assert_eq!(c.code, 0);
        assert_eq!(c.report["ok"], json!(true));
        assert_eq!(c.model.findings.len(), 0);
        assert_eq!(c.report["findings"], json!([]));
        assert!(c.count("intact") > 0);
    }
}

/// Lying mode: fsync returns at once, the cut drops every cached write. The blocks
/// the verifier calls lost are exactly those whose acknowledged write the truth
/// dropped (module doc); FIFO destage never reorders across a flush, so none is
/// unserializable.
#[test]
fn lying_device_lost_blocks_match_the_ground_truth() {
    if skip_without_fuse("lying_device_lost_blocks_match_the_ground_truth") {
        return;
    }
    let mut total_lost = 0;
    for (seed, jobs) in [(11, 1), (12, 3), (13, 3), (14, 1), (15, 4), (16, 2)] {
        let c = one_cut(
            "lying",
            seed,
            &["--destage-delay-ms", "40"],
            512,
            jobs,
            1500 + 500 * (seed % 3),
        );
        let lost = c.found(&["lost_write", "unserializable"]);
        c.check_lost_against_truth(&lost);
        assert_eq!(
            c.count("unserializable"),
            0,
            "FIFO destage cannot reorder across a flush"
        );
        assert_eq!(c.count("lost_write"), lost.len() as u64);
        for v in [
            "torn_in_flight",
            "torn_acknowledged",
            "corrupt",
            "misdirected",
            "missing",
        ] {
            assert_eq!(c.count(v), 0, "{v}");
        }
        assert!(
            c.truth.summary.fsynced_at_cut > 0,
            "lying: fsynced writes were cached at the cut"
        );
        total_lost += lost.len();
    }
    assert!(
        total_lost > 0,
        "a lying device lost acknowledged writes in none of the cuts"
    );
}

/// Reorder mode: random destage order. Lost blocks as in lying mode; a lost write
/// `X` is unserializable when a surviving sector's watermark is `≥ X`'s seq — computed
/// here from the backing file (watermarks) and the ledger, and seen at least once.
#[test]
fn reordering_device_is_caught_unserializable() {
    if skip_without_fuse("reordering_device_is_caught_unserializable") {
        return;
    }
    let mut unserializable = 0;
    for (seed, jobs) in [(21, 3), (22, 1), (23, 3), (24, 4), (25, 1)] {
        let c = one_cut(
            "reorder",
            seed,
            &["--destage-delay-ms", "40"],
            512,
            jobs,
            1500 + 400 * (seed % 3),
        );
        let lost = c.found(&["lost_write", "unserializable"]);
        c.check_lost_against_truth(&lost);
        // Surviving watermark: the highest carried by a correctly placed sector of the run.
        let w = c
            .disk
            .iter()
            .enumerate()
            .filter(|(b, secs)| misplaced(*b as u64, secs).is_none())
            .flat_map(|(_, secs)| secs.iter())
            .filter_map(|s| {
                if let Sec::Ours { wm, .. } = s {
                    Some(*wm)
                } else {
                    None
                }
            })
            .max()
            .unwrap_or(0);
        let expect: BTreeSet<u64> = lost
            .iter()
            .copied()
            .filter(|&b| c.acked[b as usize] <= w)
            .collect();
        assert_eq!(
            c.found(&["unserializable"]),
            expect,
            "unserializable blocks (surviving watermark {w})"
        );
        assert_eq!(c.count("unserializable"), expect.len() as u64);
        assert_eq!(c.count("lost_write"), (lost.len() - expect.len()) as u64);
        for v in [
            "torn_in_flight",
            "torn_acknowledged",
            "corrupt",
            "misdirected",
            "missing",
        ] {
            assert_eq!(c.count(v), 0, "{v}");
        }
        unserializable += expect.len();
    }
    assert!(
        unserializable > 0,
        "no cut caught the device reordering across a flush"
    );
}

/// Torn mode: at the cut each cached write keeps a random prefix of its sectors.
/// Every write the truth calls torn (0 < kept < 8 sectors of one block) leaves that
/// block as `kept` sectors of the newer write over the older one — torn in flight,
/// never acknowledged (fsync destages in this mode); the counts equal the truth's
/// torn blocks exactly. A write is cached only between its `pwrite` and the next
/// fsync of the file, so with a writer that fsyncs every write few are cached at a
/// cut: this runs short cuts until at least 3 blocks were torn (or 200 cuts or 90 s
/// passed) and requires at least one.
#[test]
fn torn_writes_match_the_ground_truth() {
    if skip_without_fuse("torn_writes_match_the_ground_truth") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount_with(dir.path(), "torn", 31, &["--threads", "2"]);
    let (mut torn_total, mut cached_total, mut cuts) = (0, 0, 0);
    let t0 = Instant::now();
    for i in 0..200u64 {
        if torn_total >= 3 || t0.elapsed().as_secs() >= 90 {
            break;
        }
        cuts += 1;
        if i > 0 {
            sim.remount("torn");
        }
        let blocks = 128;
        let name = format!("t{i}.dat");
        let mut w = start_writer(
            &l,
            &sim.mnt().join(&name),
            &(blocks * BS).to_string(),
            12,
            31 + i,
        );
        w.wait_acknowledged(200 + 100 * (i % 4));
        sigkill(&mut w.child);
        let truth = sim.cut();
        sim.umount();
        assert_eq!(
            truth.summary.fsynced_at_cut, 0,
            "torn: nothing fsynced may be cached at the cut"
        );
        let backing = sim.backing().join(&name);
        let (code, report, acks) = verify_stable(&l, &w.run, &backing);
        let mut acked = vec![0u64; blocks as usize];
        for a in &acks {
            acked[a.block as usize] = acked[a.block as usize].max(a.seq);
        }
        let disk = read_disk(&backing, w.run.parse().unwrap(), blocks);
        let model = Model::new(&disk, &acked);
        assert_eq!(report["verdicts"], json!(model.verdicts));
        let mut torn_blocks = BTreeSet::new();
        for t in truth.of_file(&name) {
            assert_eq!((t.offset % BS, t.len), (0, BS), "{t:?}");
            let b = t.block(BS);
            let k = t.kept_sectors.expect("torn mode reports kept_sectors") as usize;
            let s = seqs(&disk[b as usize]);
            match t.fate {
                Fate::Torn => {
                    assert!(0 < k && k < SPB, "{t:?}");
                    // The first k sectors are the newer write, the rest one older version.
                    assert!(
                        s[..k].iter().all(|&x| x == s[0])
                            && s[k..].iter().all(|&x| x == s[k])
                            && s[0] > s[k],
                        "block {b} after a torn write keeping {k}: seqs {s:?}"
                    );
                    assert!(
                        s[k] >= acked[b as usize],
                        "the older half is the acknowledged version"
                    );
                    torn_blocks.insert(b);
                }
                Fate::Destaged => assert!(
                    k == SPB && whole_seq(&disk[b as usize]).is_some_and(|x| x > acked[b as usize]),
                    "block {b}: {s:?}"
                ),
                Fate::Dropped => assert!(
                    k == 0 && whole_seq(&disk[b as usize]).is_some_and(|x| x >= acked[b as usize]),
                    "block {b}: {s:?}"
                ),
                Fate::Misdirected => panic!("torn mode misdirected {t:?}"),
            }
        }
        assert_eq!(
            report["verdicts"]["torn_in_flight"].as_u64().unwrap()
                + report["verdicts"]["torn_acknowledged"].as_u64().unwrap(),
            torn_blocks.len() as u64
        );
        assert_eq!(report["verdicts"]["torn_acknowledged"], json!(0));
        assert_eq!(code, 0, "{report}");
        assert_eq!(report["findings"], json!([]));
        torn_total += torn_blocks.len();
        cached_total += truth.summary.cached_at_cut;
    }
    eprintln!(
        "torn: {cached_total} writes cached at {cuts} cuts, {torn_total} blocks torn, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(torn_total > 0, "no torn block in {cuts} cuts");
}

/// Misdirect mode: now and then a destaged block lands at another block. The
/// verifier's `misdirected` count is exactly the number of distinct destination
/// blocks (per the truth) that still hold data of a write misdirected there, and no
/// other block holds foreign data; the lost and unserializable blocks are exactly
/// the model's, and each is the source of a misdirected, fsynced write.
#[test]
fn misdirected_writes_match_the_ground_truth() {
    if skip_without_fuse("misdirected_writes_match_the_ground_truth") {
        return;
    }
    let mut seen = 0;
    for (seed, jobs) in [(41, 1), (42, 3), (43, 3), (44, 1), (45, 4)] {
        let c = one_cut(
            "misdirect",
            seed,
            &["--misdirect-every", "40"],
            512,
            jobs,
            600 + 300 * (seed % 3),
        );
        assert_eq!(
            c.truth.summary.fsynced_at_cut, 0,
            "misdirect: fsync destages"
        );
        let mis: Vec<_> = c
            .truth_writes()
            .filter(|w| w.fate == Fate::Misdirected)
            .collect();
        assert_eq!(mis.len() as u64, c.truth.summary.misdirected);
        let mut by_dest: BTreeMap<u64, Vec<&plugpull_tests::simfs::TruthWrite>> = BTreeMap::new();
        for w in &mis {
            let at = w.landed_at.expect("landed_at");
            assert_eq!((w.offset % BS, at % BS, w.len), (0, 0, BS), "{w:?}");
            assert_ne!(at, w.offset);
            by_dest.entry(at / BS).or_default().push(w);
        }
        // A destination still holds misdirected data when its sectors name one of
        // the source blocks the truth sent there (with one job, also the very write:
        // seq == write_id).
        let mut holding = BTreeSet::new();
        for (&d, ws) in &by_dest {
            let secs = &c.disk[d as usize];
            let named: BTreeSet<(u64, u64)> = secs
                .iter()
                .filter_map(|s| {
                    if let Sec::Ours { block, seq, .. } = *s {
                        (block != d).then_some((block, seq))
                    } else {
                        None
                    }
                })
                .collect();
            if named.is_empty() {
                continue;
            }
            assert_eq!(
                named.len(),
                1,
                "block {d} holds sectors of several foreign writes: {named:?}"
            );
            let (src, seq) = *named.iter().next().unwrap();
            assert!(ws.iter().any(|w| w.block(BS) == src && (c.jobs > 1 || w.write_id == seq)), "block {d} holds seq {seq} of block {src}, which the truth never sent there: {ws:?}");
            holding.insert(d);
        }
        let all_foreign: BTreeSet<u64> = (0..c.disk.len() as u64)
            .filter(|&b| misplaced(b, &c.disk[b as usize]).is_some())
            .collect();
        assert_eq!(
            all_foreign, holding,
            "blocks holding foreign data vs the truth's destinations still holding it"
        );
        assert_eq!(c.count("misdirected"), holding.len() as u64);
        assert_eq!(c.found(&["misdirected"]), holding);
        // Lost acknowledged writes: only sources of misdirected, fsynced writes.
        let sources: BTreeSet<u64> = mis
            .iter()
            .filter(|w| w.fsynced)
            .map(|w| w.block(BS))
            .collect();
        let lost = c.found(&["lost_write", "unserializable"]);
        assert_eq!(lost, c.model.lost());
        assert!(
            lost.is_subset(&sources),
            "lost blocks {lost:?} that no fsynced write was misdirected from ({sources:?})"
        );
        for v in ["torn_in_flight", "torn_acknowledged", "corrupt", "missing"] {
            assert_eq!(c.count(v), 0, "{v}");
        }
        seen += holding.len();
    }
    assert!(seen > 0, "no misdirected block survived in any cut");
}

/// 100 cuts under load on an honest device: not one false finding. One listener,
/// one mount directory, a small target per cut, verified on the backing file.
#[test]
fn a_hundred_honest_cuts_give_no_false_finding() {
    if skip_without_fuse("a_hundred_honest_cuts_give_no_false_finding") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 100);
    let t0 = Instant::now();
    let mut acked_total = 0;
    for i in 0..100u64 {
        if i > 0 {
            sim.remount("honest");
        }
        let name = format!("c{i}.dat");
        let mut w = start_writer(&l, &sim.mnt().join(&name), "256KiB", 2, i);
        w.wait_acknowledged(1 + 20 * (i % 5));
        sigkill(&mut w.child);
        let truth = sim.cut();
        sim.umount();
        assert_eq!(truth.summary.fsynced_at_cut, 0, "cut {i}");
        let (code, v, err) = verify_json(
            &l,
            &[
                "--run",
                &w.run,
                "--target",
                sim.backing().join(&name).to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "cut {i}: {err} {v}");
        assert_eq!(v["ok"], json!(true), "cut {i}");
        assert_eq!(v["findings"], json!([]), "cut {i}");
        acked_total += v["acknowledged"].as_u64().unwrap();
    }
    eprintln!(
        "100 honest cuts, {acked_total} acknowledged writes, 0 findings, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// Review finding 8: `plugpull demo` verifies its file runs with `plugpull verify`'s
/// own function (device-error rule, earlier runs from the listener, report): on the
/// simulator the honest device passes with nothing lost, the lying one is caught, and
/// each device's file report is the verifier's (its summary line, its verdict table).
#[test]
fn the_demo_judges_its_file_runs_with_the_verifiers_function() {
    if skip_without_fuse("the_demo_judges_its_file_runs_with_the_verifiers_function") {
        return;
    }
    let o = plugpull(&["demo", "--no-pg", "--cut-after", "1"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    let line = |prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{out}"))
            .to_string()
    };
    let honest = line("honest device: ");
    assert!(
        honest.starts_with("honest device: PASS, ") && honest.ends_with(" acknowledged, 0 lost"),
        "{honest}"
    );
    let lying = line("lying device: ");
    assert!(lying.starts_with("lying device: FAIL, "), "{lying}");
    // Two file reports, each ending with the verifier's summary line.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("PASS: ")).count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("FAIL: ")).count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("blocks checked: "))
            .count(),
        2,
        "{out}"
    );
    // The demo's figures are the reports' figures.
    let acked: u64 = honest["honest device: PASS, ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        line("PASS: ").starts_with(&format!("PASS: {acked} acknowledged writes, ")),
        "{out}"
    );
    let lost: u64 = lying["lying device: FAIL, ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(lost > 0, "{lying}");
    assert!(
        line("FAIL: ").starts_with(&format!("FAIL: {lost} of ")),
        "{out}"
    );
}
