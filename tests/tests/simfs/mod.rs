//! The file workload on the power-cut simulator: a real listener, a real
//! `plugpull write file` on a `plugpull-simfs` mount, a cut under load, and
//! `plugpull verify --json` compared exactly with what the simulator says happened.
//!
//! # The order at the cut: SIGKILL the writer, then cut
//!
//! A real power cut stops the writer and the device in the same instant: the writer
//! never learns that anything failed. If we cut first, the writer's next `pwrite` or
//! `fdatasync` fails with EIO and the run ends by a device error (a drive-only cut:
//! `tests/tests/write_truth/` covers it) — a race between the agent's device-error
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
//! * With one job, the target's own write numbers and seqs coincide
//!   (`file_write_id == seq`: the writer is the only process writing the target on a
//!   fresh mount — its volatile canary writes other files — and it preallocates with
//!   `fallocate`, which is no write), which the test checks against the ledger for
//!   every truth line it covers. Then the lost set follows from the truth and the
//!   ledger alone, without the backing file:
//!   `{b : some dropped write to b has file_write_id ≤ A(b)}`.
//! * The verdict of every block (not only the mode's headline verdict) is computed
//!   from the backing file and the ledger by a small model of the rules in
//!   `src/verdict/file.rs`, written independently here, and the verifier's counts and
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

mod campaign;
mod meta;
mod model;
mod modes;
use model::*;

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
            Acks::Pg(_) | Acks::Files(_) => panic!("other acks in a file run"),
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
