//! A device error is the cut: a drive cut under a running writer (honest drive:
//! pass; lying drive: exactly the truth's lost set), a filesystem that fills up mid
//! run, and acks after a device error that make the run unverifiable.

use super::*;

/// Starts a writer on `target` with `jobs` jobs and `--progress 0.05`.
fn start(l: &Listener, target: &Path, size: &str, jobs: u32, seed: u64) -> Writer {
    Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        size,
        "--jobs",
        &jobs.to_string(),
        "--seed",
        &seed.to_string(),
        "-T",
        "120s",
        "-P",
        "0.05",
    ])
}

/// The writer ended by a device error: exit 1, the message names the error and the
/// rule; the ledger ends with the device-error entry, nothing after it, and holds
/// exactly the acks the agent says it made.
fn check_device_error_end(w: Writer, l: &Listener, error: &str) -> Vec<FileAck> {
    let run = w.run.clone();
    let (status, out, err) = w.finish();
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains(&format!("plugpull: run {run} ended by a device error")),
        "{err}"
    );
    assert!(err.contains(error), "{err}");
    assert!(
        err.contains("no acknowledgement was made after it"),
        "{err}"
    );
    let (acks, end, after) = read_ledger(&l.ledger_path(&run));
    let end = end.expect("a device-error entry");
    assert_eq!(after, 0, "entries after the device error");
    assert!(end.error.contains(error), "{end:?}");
    assert_eq!(end.acknowledged, acks.len() as u64, "{end:?}");
    assert_eq!(end.last_seq, acks.iter().map(|a| a.seq).max().unwrap_or(0));
    assert!(acks.iter().all(|a| a.ms as u64 <= end.ms), "{end:?}");
    acks
}

/// Item 3, honest device: `plugpull-simfs cut` while the writer runs (the device
/// loses power, the host does not). The writer gets EIO, stops, exits 1 and records
/// the device error; verify judges the acks confirmed before it: PASS, exit 0, with
/// the device-error line in JSON and in the human report.
#[test]
fn a_drive_cut_under_a_running_writer_is_judged_and_an_honest_drive_passes() {
    if skip_without_fuse("a_drive_cut_under_a_running_writer_is_judged_and_an_honest_drive_passes")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 7);
    let target = sim.mnt().join("t.dat");
    let mut w = start(&l, &target, "2MiB", 3, 7);
    w.wait_acknowledged(300);
    let truth = sim.cut();
    assert_eq!(truth.summary.fsynced_at_cut, 0);
    let run = w.run.clone();
    let acks = check_device_error_end(w, &l, "Input/output error (os error 5)");
    sim.umount();
    let backing = sim.backing().join("t.dat");
    let b = backing.to_str().unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", b]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["ok"], json!(true));
    assert_eq!(v["acknowledged"], json!(acks.len()));
    assert_eq!(v["findings"], json!([]));
    let line = v["device_error"]
        .as_str()
        .expect("device_error in the report");
    assert!(
        line.starts_with("run ended by a device error at "),
        "{line}"
    );
    assert!(line.contains("Input/output error (os error 5)"), "{line}");
    assert!(
        line.contains("if it came back under a new name, give --target"),
        "{line}"
    );
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--target",
        b,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(line), "{}", stdout(&o));
    assert!(stdout(&o).lines().last().unwrap().starts_with("PASS: "));
}

/// Item 3, lying device (fsync returns at once, the cut drops everything cached):
/// cut while one job runs. With one job write ids are seqs, so the blocks whose
/// acknowledged write was lost follow from the ground truth and the ledger alone:
/// `{b : a write to b the cut dropped has file_write_id ≤ A(b)}` (FIFO destage: once a
/// write of b is dropped, every later one is). verify must name exactly those, as
/// `lost_write` with the ledger's seq, and nothing else: exit 1.
#[test]
fn a_drive_cut_under_a_running_writer_on_a_lying_drive_loses_exactly_the_truths_set() {
    if skip_without_fuse(
        "a_drive_cut_under_a_running_writer_on_a_lying_drive_loses_exactly_the_truths_set",
    ) {
        return;
    }
    let mut lost_total = 0;
    for seed in [31u64, 32, 33] {
        let dir = tempfile::tempdir().unwrap();
        let l = Listener::start(dir.path());
        let mut sim = SimFs::mount_with(dir.path(), "lying", seed, &["--destage-delay-ms", "40"]);
        let target = sim.mnt().join("t.dat");
        let blocks = 512;
        let mut w = start(&l, &target, &(blocks * BS).to_string(), 1, seed);
        w.wait_acknowledged(1500);
        let truth = sim.cut();
        let run = w.run.clone();
        let acks = check_device_error_end(w, &l, "Input/output error (os error 5)");
        sim.umount();
        let mut a = vec![0u64; blocks as usize];
        for x in &acks {
            a[x.block as usize] = a[x.block as usize].max(x.seq);
        }
        let lost: BTreeMap<u64, u64> = truth
            .of_file("t.dat")
            .filter(|t| t.fate == Fate::Dropped && t.file_write_id <= a[t.block(BS) as usize])
            .map(|t| (t.block(BS), a[t.block(BS) as usize]))
            .collect();
        let backing = sim.backing().join("t.dat");
        let (code, v, err) =
            verify_json(&l, &["--run", &run, "--target", backing.to_str().unwrap()]);
        let found: BTreeMap<u64, u64> = v["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| {
                assert_eq!(f["verdict"], json!("lost_write"), "{f}");
                (
                    f["block"].as_u64().unwrap(),
                    f["expected_seq"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(found, lost, "seed {seed}: lost blocks vs the ground truth");
        assert_eq!(v["verdicts"]["lost_write"], json!(lost.len()));
        assert_eq!(code, if lost.is_empty() { 0 } else { 1 }, "{err}");
        assert!(v["device_error"]
            .as_str()
            .unwrap()
            .contains("Input/output error"));
        lost_total += lost.len();
    }
    assert!(lost_total > 0, "the lying drive lost nothing in 3 cuts");
}

/// Item 3, ENOSPC mid-run: a copy-on-write filesystem fills up while the run goes
/// on, because another file grows (btrfs, like ZFS, needs fresh space for every
/// overwrite, also of a preallocated file: a full pool fails writes to files that
/// were fully allocated). Built here as btrfs on a 256 MiB loop device with a 16 MiB
/// target and a second file that grows until the writer stops. The writer's next
/// `pwrite` (or `fdatasync`) fails with ENOSPC: it exits 1 naming the error, and the
/// ledger records it. After a remount (so verify reads the medium, not the cache),
/// verify judges every ack before the error — the device kept them all: PASS, exit
/// 0, with "No space left on device" in the report.
#[test]
fn a_filesystem_that_fills_up_mid_run_is_judged_with_the_error_named() {
    let test = "a_filesystem_that_fills_up_mid_run_is_judged_with_the_error_named";
    if skip_without_loop(test, &["mkfs.btrfs", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = dir.path().join("btrfs.img");
    run("truncate", &["-s", "256M", img.to_str().unwrap()]);
    let lo = Loop::attach(&img, &[]);
    run("mkfs.btrfs", &["-q", &lo.dev]);
    let mnt = dir.path().join("mnt");
    let m = Mount::new(&[&lo.dev], &mnt);
    let target = mnt.join("t.dat");
    let mut w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "16MiB",
        "-T",
        "60s",
        "-P",
        "0.1",
    ]);
    w.wait_acknowledged(50);
    // Another file grows until the filesystem is full, and keeps taking what frees up.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let filler = {
        let (stop, path) = (stop.clone(), mnt.join("filler"));
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            let (big, small) = (vec![7u8; 1 << 20], vec![7u8; 4096]);
            let t0 = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && t0.elapsed() < Duration::from_secs(60)
            {
                if f.write_all(&big).is_err() {
                    let _ = f.write_all(&small);
                }
            }
        })
    };
    let run_id = w.run.clone();
    let (status, out, err) = w.finish();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    filler.join().unwrap();
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    assert!(
        err.contains(&format!("plugpull: run {run_id} ended by a device error")),
        "{err}"
    );
    assert!(
        err.contains("No space left on device (os error 28)"),
        "{err}"
    );
    let (acks, end, after) = read_ledger(&l.ledger_path(&run_id));
    let end = end.expect("device-error entry");
    assert_eq!((after, end.acknowledged), (0, acks.len() as u64));
    assert!(end.error.contains("No space left on device"), "{end:?}");
    drop(m);
    let _m = Mount::new(&[&lo.dev], &mnt);
    let (code, v, err) = verify_json(
        &l,
        &["--run", &run_id, "--target", target.to_str().unwrap()],
    );
    // Every acknowledged write read back, but a full filesystem is no power cut.
    assert_eq!(code, 2, "{err} {v}");
    assert_eq!(
        (&v["ok"], &v["not_measured"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(v["acknowledged"], json!(acks.len()));
    assert_eq!(v["findings"], json!([]));
    assert!(
        v["summary"].as_str().unwrap().starts_with(
            "NOT MEASURED: the run ended because the storage filled up (ENOSPC): no power was cut; read back: "
        ),
        "{v}"
    );
    assert!(
        v["device_error"]
            .as_str()
            .unwrap()
            .contains("No space left on device (os error 28)"),
        "{v}"
    );
}

/// Item 3, the refusal: a ledger whose run acknowledged writes after its device error
/// (an ack entry after the `DeviceError` entry, or an ack stamped later than the
/// error), or whose writer stopped on an error that is not a device failure (EINVAL,
/// EBADF, …: the run itself went wrong), cannot be judged: verify exits 2 and says
/// why. Built by speaking the wire protocol by hand to a real listener, as a faulty
/// agent would.
#[test]
fn writes_acknowledged_after_a_device_error_make_the_run_unverifiable() {
    use plugpull::ledger::AckBatch;
    use plugpull::wire::{Request, Response};
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("never-read.dat");
    let ack = |seq: u64, ms: u32| FileAck {
        seq,
        block: seq,
        ms,
    };
    let batch = |n: u64, acks: Vec<FileAck>| AckBatch {
        batch: n,
        promised: true,
        acks: Acks::File(acks),
        flushes: None,
        canary: Default::default(),
        sealed_ms: 0,
        oldest_in_flight_ms: None,
    };
    let end = DeviceError {
        error: "fdatasync after block 3: Input/output error (os error 5)".into(),
        ms: 10,
        issued: 4,
        acknowledged: 3,
        last_seq: 3,
        device: true,
        flushes: None,
    };
    let not_device = DeviceError {
        error: "pwrite of block 4 at byte 16384: Invalid argument (os error 22)".into(),
        device: false,
        ..end.clone()
    };
    let after_error = "writes were acknowledged after its device error at 0.010 s into the run \
         (fdatasync after block 3: Input/output error (os error 5)): a success after a failed write or \
         durability call cannot be trusted, so nothing this run measured counts";
    let not_a_device_failure = "the writer stopped at 0.010 s into the run on an error that is not a \
         device failure (pwrite of block 4 at byte 16384: Invalid argument (os error 22)): the run itself \
         went wrong, so nothing it measured counts";
    let witness_lost =
        "the witness lost 1 acknowledged writes: this run cannot be judged (the agent \
         handed over 3 acknowledgements before its device error, the ledger holds 2)";
    // (acks before the error entry, the error entry, acks after it, the refusal)
    let cases = [
        (
            vec![ack(1, 5), ack(2, 6), ack(3, 10)],
            &end,
            vec![ack(4, 9)],
            after_error,
        ),
        (
            vec![ack(1, 5), ack(2, 6), ack(3, 11)],
            &end,
            vec![],
            after_error,
        ),
        (
            vec![ack(1, 5), ack(2, 6), ack(3, 10)],
            &not_device,
            vec![],
            not_a_device_failure,
        ),
        // The agent handed over 3 before the error; the witness kept 2.
        (vec![ack(1, 5), ack(2, 6)], &end, vec![], witness_lost),
    ];
    for (before, end, after, refusal) in cases {
        let mut c = RawConn::connect(l.addr());
        assert_eq!(
            c.handshake(&plugpull::auth::Secret::default()),
            Some(Response::Welcome)
        );
        c.send(&Request::StartRun {
            manifest: plugpull_tests::raw_manifest(
                "forged",
                &target.display().to_string(),
                64 * BS,
                BS as u32,
            ),
        });
        let Some(Response::RunStarted { run, .. }) = c.recv() else {
            panic!("no RunStarted")
        };
        c.send(&Request::Acks {
            run,
            batch: batch(1, before),
        });
        c.send(&Request::DeviceError {
            run,
            end: (*end).clone(),
        });
        let mut n = 2;
        if !after.is_empty() {
            c.send(&Request::Acks {
                run,
                batch: batch(2, after),
            });
            n = 3;
        }
        for _ in 0..n {
            assert!(matches!(c.recv(), Some(Response::Confirmed { .. })));
        }
        let (code, v, err) = verify_json(&l, &["--run", &run.to_string()]);
        assert_eq!(code, 2, "{v}");
        assert_eq!(v["ok"], json!(false));
        assert_eq!(err.trim(), format!("plugpull: run {run}: {refusal}"));
    }
}
