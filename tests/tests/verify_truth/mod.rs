//! End-to-end tests of what the verifier reads (issue 8, file workload): the medium
//! and not the page cache, the disk the run wrote (found by identity), the run's
//! filesystem (not mounted → could not verify), never a target still being written;
//! facts about the target (shrunk, gone, rebooted since) are said. Real listener,
//! writer and verifier; real files, loop devices and ext4.

use crate::verify_common;

use plugpull::record::Encoder;
use plugpull_tests::blockdev::{skip_without_loop, Loop, Mount};
use plugpull_tests::*;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use verify_common::*;

mod devices;

/// Item 1: the run wrote a loop block device through its page cache; the medium
/// (the backing file) is then restored to its pre-run zeros underneath while the
/// device stays open, so the device's cached pages still hold every record. verify
/// drops them and reads with O_DIRECT: every block is lost, not PASS.
#[test]
fn verify_reads_the_medium_not_the_page_cache() {
    let name = "verify_reads_the_medium_not_the_page_cache";
    if skip_without_loop(name, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = backing(dir.path(), "medium.img", 8 << 20);
    let dev = Loop::attach(&img, &[]);
    let run = write_run(&l, Path::new(&dev.dev), "8MiB", &strs(&sequential(3000)));
    // Hold the device open so its page cache outlives the writer.
    let held = std::fs::File::open(&dev.dev).unwrap();
    let mut cached = vec![0u8; BS as usize];
    held.read_exact_at(&mut cached, 0).unwrap();
    assert_eq!(&cached[..8], b"PLGPULL1");
    // Restore the medium to its pre-run bytes behind the device's back.
    {
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(&vec![0u8; 8 << 20], 0).unwrap();
        f.sync_all().unwrap();
    }
    // The lie is in place: a buffered read of the device still shows the record.
    held.read_exact_at(&mut cached, 0).unwrap();
    assert_eq!(
        &cached[..8],
        b"PLGPULL1",
        "the device's page cache was dropped already: the test shows nothing"
    );
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(v["ok"], json!(false));
    assert_eq!(v["acknowledged"], json!(3000));
    // 3000 sequential writes over 2048 blocks: every block acknowledged, all gone.
    assert_eq!(v["verdicts"], verdicts(&[("lost_write", 2048)]));
    assert_eq!(v["read_mode"], json!("o_direct"));
    assert_eq!(v["boot"], json!("same_boot"));
    assert_eq!(target_finding_kinds(&v), vec!["no_record_of_run"]);
    // The human report says how it read and that the host did not reboot.
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("read: from the medium with O_DIRECT, cached pages dropped first"));
    assert!(out.contains("host: same boot as the run"));
    assert!(out.contains(&format!(
        "no record of run {run} survived anywhere on the target  FAILURE"
    )));
    drop(held);
}

/// Item 1: the report says whether the host rebooted since the run: a run whose
/// manifest carries another boot id (made by hand here, with its records written by
/// this test) reads "rebooted since the run"; a real run on this host "same boot".
#[test]
fn the_report_says_whether_the_host_rebooted_since_the_run() {
    use plugpull::ledger::{AckBatch, Acks, FileAck, FileManifest, Manifest, Workload};
    use plugpull::wire::{Request, Response};
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    std::fs::write(&target, vec![0u8; 4 * BS as usize]).unwrap();
    let canary = dir.path().join(".plugpull-canary-1-0");
    std::fs::write(&canary, vec![0u8; 128 * 512]).unwrap();
    let mut c = RawConn::connect(l.addr());
    assert_eq!(
        c.handshake(&plugpull::auth::Secret::default()),
        Some(Response::Welcome)
    );
    c.send(&Request::StartRun {
        manifest: Box::new(Manifest {
            host: "elsewhere".into(),
            started_unix_ms: 1,
            tool_version: "test".into(),
            workload: Workload::File(FileManifest {
                target: target.display().to_string(),
                size: 4 * BS,
                block_size: BS as u32,
                jobs: 1,
                sync: plugpull::modes::SyncMode::Fdatasync,
                pattern: plugpull::modes::Pattern::Sequential,
                identity: Default::default(),
                prior_runs: Vec::new(),
                prior_foreign: false,
                atomic: None,
            }),
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            listener_order: 0,
            listener_created_unix_ms: 0,
            storage: Default::default(),
            // A canary whose 3 records the cut took: none reached the medium.
            canary: plugpull::ledger::CanaryManifest {
                files: vec![canary.display().to_string()],
                nonce: 1,
                slots: 128,
                turn_ms: 10_000,
                none_because: String::new(),
            },
        }),
    });
    let Some(Response::RunStarted { run, .. }) = c.recv() else {
        panic!("no run started")
    };
    let enc = Encoder::new(run);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap();
    let mut acks = Vec::new();
    for b in 0..4u64 {
        let mut buf = vec![0u8; BS as usize];
        enc.encode_block(&mut buf, b, b + 1, b);
        f.write_all_at(&buf, b * BS).unwrap();
        acks.push(FileAck {
            seq: b + 1,
            block: b,
            ms: b as u32,
        });
    }
    drop(f);
    c.send(&Request::Acks {
        run,
        batch: AckBatch {
            batch: 1,
            promised: true,
            acks: Acks::File(acks),
            flushes: None,
            canary: 3,
            sealed_ms: 3,
            oldest_in_flight_ms: None,
        },
    });
    assert!(matches!(c.recv(), Some(Response::Confirmed { .. })));
    drop(c);
    let (code, v, err) = verify_json(&l, &["--run", &run.to_string()]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(
        (
            &v["cut"]["cut_ms"],
            &v["cut"]["acks_last_1s"],
            &v["cut"]["canary"]["state"]
        ),
        (&json!(3), &json!(4), &json!("lost"))
    );
    assert_eq!(v["verdicts"], verdicts(&[("intact", 4)]));
    assert_eq!(v["boot"], json!("rebooted"));
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run.to_string(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("\nhost: rebooted since the run\n"));
}

/// Items 5 and 17: a target on an unmounted filesystem is "could not verify" naming
/// the filesystem; a file gone from the mounted filesystem is a finding.
#[test]
fn an_unmounted_filesystem_is_could_not_verify_and_a_gone_file_is_a_finding() {
    let name = "an_unmounted_filesystem_is_could_not_verify_and_a_gone_file_is_a_finding";
    if skip_without_loop(name, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = backing(dir.path(), "fs.img", 32 << 20);
    let dev = Loop::attach(&img, &[]);
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F", &dev.dev])
        .status()
        .unwrap();
    assert!(ok.success(), "mkfs.ext4");
    let mnt = dir.path().join("mnt");
    let mut m = Mount::new(&[&dev.dev], &mnt);
    let target = mnt.join("t.dat");
    let run = write_run(&l, &target, "256KiB", &strs(&sequential(64)));
    m.umount();
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "cannot verify: directory {} of target {} is on ",
            mnt.display(),
            target.display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "but the run's target was on ext4 (UUID {}) from {} mounted at {} — not mounted?",
            ext4_uuid(&dev.dev),
            dev.dev,
            mnt.display()
        )),
        "{err}"
    );
    // Mounted again, the run verifies.
    let mut m = Mount::new(&[&dev.dev], &mnt);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["verdicts"], verdicts(&[("intact", 64)]));
    // The file gone from the right filesystem: missing, and said as a finding.
    std::fs::remove_file(&target).unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(v["verdicts"], verdicts(&[("missing", 64)]));
    assert_eq!(target_finding_kinds(&v), vec!["file_gone"]);
    assert_eq!(
        v["target_findings"][0]["detail"],
        json!(format!(
            "the file is gone: {} does not exist on its filesystem (if you moved or \
             renamed it, verify its new path with --target)",
            target.display()
        ))
    );
    m.umount();
}

/// Item 7: verify refuses a target its writer still holds.
#[test]
fn a_target_still_being_written_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let mut w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
        "-T",
        "60s",
        "-P",
        "0.2",
    ]);
    w.wait_acknowledged(1);
    let (code, v, err) = verify_json(&l, &["--run", &w.run]);
    assert_eq!(code, 2, "{v}");
    // The listener, which knows the run is live, refuses before the target is opened
    // (tests/tests/verify_live.rs checks the whole message).
    let refused = format!(
        "plugpull: listener {} refused: run {} is still being written: its agent is \
         connected and was last heard from ",
        l.addr(),
        w.run
    );
    assert!(err.trim().starts_with(&refused), "{err}");
    sigkill(&mut w.child);
    plugpull_tests::lose_canary(dir.path());
    let (code, v, err) = verify_json(&l, &["--run", &w.run]);
    assert_eq!(code, 0, "{err} {v}");
}

/// Item 17: a device whose capacity shrank is its own finding besides the missing
/// blocks; coverage is never rounded up to 100 %.
#[test]
fn a_shrunken_device_is_a_finding_and_coverage_never_rounds_up() {
    let name = "a_shrunken_device_is_a_finding_and_coverage_never_rounds_up";
    if skip_without_loop(name, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = backing(dir.path(), "dev.img", 16 << 20);
    let dev = Loop::attach(&img, &[]);
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        &dev.dev,
        "--size",
        "16MiB",
        "--writes",
        "4094",
        "--pattern",
        "sequential",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["coverage_percent"], json!(99.9));
    assert_eq!(s["blocks_written"], json!(4094));
    let run = s["run_id"].as_str().unwrap().to_string();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let ok = Command::new("losetup")
        .args(["-c", &dev.dev])
        .status()
        .unwrap();
    assert!(ok.success(), "losetup -c");
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", 2048), ("missing", 2046)])
    );
    assert_eq!(target_finding_kinds(&v), vec!["capacity_changed"]);
    assert_eq!(
        v["target_findings"][0]["detail"],
        json!("device capacity changed 16 MiB → 8 MiB")
    );
    assert!(v["summary"]
        .as_str()
        .unwrap()
        .contains("device capacity changed 16 MiB → 8 MiB, 2046 missing"));
}
