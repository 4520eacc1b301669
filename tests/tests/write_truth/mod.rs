//! The write side of `plugpull write file` tells the truth (issue 8, items 2 and 3):
//! an ack reaches the listener the moment its durability call returns; a device
//! error is the cut, judged on the acks confirmed before it. (The target guards are
//! in `target_guard.rs`.)
//!
//! Real parts only: a listener process, the `plugpull` binary, `plugpull-simfs` over
//! FUSE, btrfs on a loop device. Tests that need root, loop devices, FUSE or a missing
//! tool say so with a `SKIPPED` line (see `plugpull_tests::skipped`).

use plugpull::ledger::{self, Acks, DeviceError, Entry, FileAck};
use plugpull::record::{decode_sector, Sector, SECTOR};
use plugpull::RunId;
use plugpull_tests::blockdev::{run, skip_without_loop, Loop, Mount};
use plugpull_tests::simfs::{skip_without_fuse, Fate, SimFs};
use plugpull_tests::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

mod device_error;

const BS: u64 = 4096;

/// The acks and the device-error entry of a ledger file, and the number of entries
/// after the device error.
fn read_ledger(path: &Path) -> (Vec<FileAck>, Option<DeviceError>, usize) {
    let bytes = std::fs::read(path).expect("ledger");
    let (mut acks, mut end, mut after) = (Vec::new(), None, 0);
    ledger::scan(&bytes, |_, e| {
        if end.is_some() {
            after += 1;
        }
        match e {
            Entry::Acks(b) => match b.acks {
                Acks::File(v) => acks.extend(v),
                Acks::Pg(_) | Acks::Files(_) => panic!("other acks in a file run"),
            },
            Entry::DeviceError(d) => end = Some(d),
            _ => {}
        }
    })
    .expect("ledger scans");
    (acks, end, after)
}

/// The highest seq of `run` held by a whole, correctly placed block of `path`
/// (block size [`BS`]), and for each block the seq it holds whole (0: none).
fn seqs_on_medium(path: &Path, run: RunId, blocks: u64) -> Vec<u64> {
    let data = std::fs::read(path).expect("backing file");
    (0..blocks as usize)
        .map(|b| {
            let blk = &data[b * BS as usize..(b + 1) * BS as usize];
            let s: Vec<u64> = blk
                .chunks_exact(SECTOR)
                .map(|s| match decode_sector(s.try_into().unwrap()) {
                    Sector::Valid(h) if h.run == run && h.block == b as u64 => h.seq,
                    _ => 0,
                })
                .collect();
            if s.iter().all(|&x| x == s[0]) {
                s[0]
            } else {
                0
            }
        })
        .collect()
}

/// Whether the ledger file stopped changing (two reads 200 ms apart agree).
fn wait_ledger_stable(path: &Path) {
    let mut last = std::fs::read(path).expect("ledger");
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = std::fs::read(path).expect("ledger");
        if now == last {
            return;
        }
        last = now;
    }
    panic!("ledger {} kept changing", path.display());
}

/// Item 2: one job, `--sync dsync`, on simfs honest whose flushes take 200 ms. The
/// test waits until write `w` arrives at the device (simfs's `writes_total`; with one
/// job, write ids are seqs), so write `w - 1`'s durability call has just returned;
/// 100 ms later, in the middle of `w`'s slow flush, it SIGKILLs the writer and cuts.
/// Write `w` reached the medium (honest: destaged before the delay) but its call never
/// returned, so it is the in-flight write; write `w - 1` was acknowledged 100 ms before
/// the kill, so it must be in the ledger: the ledger holds exactly seqs `1 ..= w - 1`
/// and the medium's highest seq is `w`. (A writer that keeps its newest ack until its
/// next write completes leaves `w - 1` out: the ledger would end at `w - 2`.)
#[test]
fn an_ack_reaches_the_ledger_the_moment_its_durability_call_returns() {
    if skip_without_fuse("an_ack_reaches_the_ledger_the_moment_its_durability_call_returns") {
        return;
    }
    for seed in [1u64, 2] {
        let dir = tempfile::tempdir().unwrap();
        let l = Listener::start(dir.path());
        let mut sim = SimFs::mount_with(dir.path(), "honest", seed, &["--flush-delay-ms", "200"]);
        let target = sim.mnt().join("t.dat");
        let blocks = 64;
        let mut w = Writer::spawn(&[
            "write",
            "file",
            "--listener",
            l.addr(),
            "--target",
            target.to_str().unwrap(),
            "--size",
            &(blocks * BS).to_string(),
            "--sync",
            "dsync",
            "--seed",
            &seed.to_string(),
            "-T",
            "120s",
            "-P",
            "0.05",
            // The canary off the mount: simfs's write count is then the target's alone.
            "--canary-dir",
            dir.path().to_str().unwrap(),
        ]);
        w.wait_acknowledged(2);
        let writes = || sim.stats()["writes_total"].as_u64().unwrap();
        let t0 = Instant::now();
        let mut w0 = writes();
        // Until write `arrived` is seen arriving and is still the newest 100 ms later
        // (a slow poll on a busy machine starts over, it never kills at a wrong phase).
        let arrived = loop {
            assert!(t0.elapsed() < Duration::from_secs(30), "no write arrived");
            let n = writes();
            if n == w0 {
                continue;
            }
            std::thread::sleep(Duration::from_millis(100));
            w0 = writes();
            if w0 == n {
                break n;
            }
        };
        sigkill(&mut w.child);
        let truth = sim.cut();
        sim.umount();
        assert_eq!(truth.summary.fsynced_at_cut, 0, "honest");
        let path = l.ledger_path(&w.run);
        wait_ledger_stable(&path);
        let (acks, end, _) = read_ledger(&path);
        assert_eq!(end, None, "the writer was killed, not cut");
        let seqs: BTreeSet<u64> = acks.iter().map(|a| a.seq).collect();
        let expect: BTreeSet<u64> = (1..arrived).collect();
        assert_eq!(
            seqs, expect,
            "seed {seed}: the ledger holds every write up to the one in flight ({arrived})"
        );
        let medium = seqs_on_medium(&sim.backing().join("t.dat"), w.run.parse().unwrap(), blocks);
        assert_eq!(
            medium.iter().copied().max(),
            Some(arrived),
            "seed {seed}: the in-flight write reached the medium"
        );
        let ack_of: BTreeMap<u64, u64> = acks.iter().map(|a| (a.seq, a.block)).collect();
        for (b, &s) in medium.iter().enumerate() {
            if s > 0 && s < arrived {
                assert_eq!(ack_of[&s], b as u64, "seq {s} acknowledged for its block");
            }
        }
    }
}
