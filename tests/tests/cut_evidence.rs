//! Whether a cut could have failed (`plugpull::verdict::cut`): real writer, listener,
//! simfs and verifier. A PASS needs a cut while the run wrote, writes acknowledged
//! in the last second before it, and a volatile canary the cut took; a clean
//! shutdown, an idle workload and a run that finished by itself are NOT MEASURED
//! (exit 2, the reason named), and a loss is a FAIL whatever the evidence.

use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Starts `write file` on the simfs mount (1 MiB, `jobs` jobs, until killed).
fn writer(l: &Listener, sim: &SimFs, jobs: &str) -> Writer {
    let target = sim.mnt().join("t.dat");
    Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
        "-j",
        jobs,
        "-T",
        "120s",
        "-P",
        "0.05",
    ])
}

/// `verify --json --run RUN` of a target on the remounted simfs.
fn verify(l: &Listener, run: &str) -> (i32, Value, String) {
    let o = plugpull(&["verify", "--listener", l.addr(), "--run", run, "--json"]);
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code().unwrap_or(-1), v, stderr(&o))
}

/// The canary files of the run on the mount (`.plugpull-canary-*`).
fn canaries(sim: &SimFs) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(sim.mnt())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".plugpull-canary-")
        })
        .map(|p| p.display().to_string())
        .collect();
    v.sort();
    v
}

/// A lying disk (it ignores flushes and destages 1.5 s late): a real cut under load
/// is a FAIL naming the lost writes; the same disk shut down cleanly — the writer
/// stopped, the disk given the time to write its cache out, then the cut — keeps
/// everything, its canary too, and its PASS is NOT MEASURED.
#[test]
fn a_clean_shutdown_of_a_lying_disk_is_not_measured_and_a_real_cut_fails() {
    let name = "a_clean_shutdown_of_a_lying_disk_is_not_measured_and_a_real_cut_fails";
    if skip_without_fuse(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let delay = ["--destage-delay-ms", "1500"];
    let mut sim = SimFs::mount_with(dir.path(), "lying", 11, &delay);

    // The real cut: the writer and the disk's cache go at once, 3 s into the run
    // (the target's and the canary's creation destaged by then).
    let mut w = writer(&l, &sim, "2");
    w.wait_acknowledged(300);
    std::thread::sleep(Duration::from_secs(3));
    sigkill(&mut w.child);
    sim.cut();
    sim.remount("honest");
    let (code, v, err) = verify(&l, &w.run);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(v["ok"], json!(false));
    assert!(v["verdicts"]["lost_write"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["cut"]["cut"], json!("last_heard"));
    assert_eq!(v["cut"]["canary"]["state"], json!("lost"));
    assert!(v["cut"]["acks_last_1s"].as_u64().unwrap() > 0, "{v}");
    assert!(v["summary"].as_str().unwrap().starts_with("FAIL: "), "{v}");

    // The clean shutdown: the writer stops, the disk writes its cache out.
    sim.umount();
    let mut sim = SimFs::mount_with(dir.path(), "lying", 12, &delay);
    let mut w = writer(&l, &sim, "2");
    w.wait_acknowledged(300);
    sigkill(&mut w.child);
    std::thread::sleep(Duration::from_millis(2500));
    let truth = sim.cut();
    assert_eq!(
        truth.summary.cached_at_cut, 0,
        "the disk wrote its cache out"
    );
    sim.remount("honest");
    let (code, v, err) = verify(&l, &w.run);
    assert_eq!(code, 2, "{err} {v}");
    assert_eq!(
        (&v["ok"], &v["not_measured"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(v["verdicts"]["lost_write"], json!(0));
    assert_eq!(v["cut"]["canary"]["state"], json!("survived"));
    let issued = v["cut"]["canary"]["issued"].as_u64().unwrap();
    assert!(issued > 0, "{v}");
    let summary = v["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!(
            "NOT MEASURED: the canary survived the cut (its newest record, {issued}, is on the medium): the host's memory did not lose power — a clean shutdown, or a sync before the cut; read back: "
        )),
        "{summary}"
    );
    assert!(err.contains(summary), "{err}");
    sim.umount();
}

/// An honest disk: a cut under load keeps every acknowledged write and takes the
/// canary's unsynced records (PASS, exit 0, the evidence in the report); the same
/// cut after a `sync` of the canary files (coreutils `sync FILE…`: fsync) is NOT
/// MEASURED — what a shutdown's sync does to the host's page cache.
#[test]
fn a_cut_takes_the_canary_and_a_sync_before_it_makes_the_pass_not_measured() {
    let name = "a_cut_takes_the_canary_and_a_sync_before_it_makes_the_pass_not_measured";
    if skip_without_fuse(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 21);
    let mut w = writer(&l, &sim, "1");
    w.wait_acknowledged(200);
    sigkill(&mut w.child);
    sim.cut();
    sim.remount("honest");
    let (code, v, err) = verify(&l, &w.run);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(
        (&v["ok"], &v["not_measured"]),
        (&json!(true), &json!(false))
    );
    let cut = &v["cut"];
    assert_eq!(
        (&cut["cut"], &cut["measured"]),
        (&json!("last_heard"), &json!(true))
    );
    assert_eq!(cut["canary"]["state"], json!("lost"));
    assert!(
        cut["canary"]["on_medium"].as_u64() < cut["canary"]["issued"].as_u64(),
        "{cut}"
    );
    assert!(cut["acks_last_1s"].as_u64().unwrap() > 0, "{cut}");
    assert!(
        cut["last_ack_before_cut_ms"].as_u64().unwrap() < 1000,
        "{cut}"
    );
    // The text names the evidence, one line each.
    let o = plugpull(&["verify", "--listener", l.addr(), "--run", &w.run]);
    let out = stdout(&o);
    assert!(
        out.contains("\ncut: the witness last heard from the agent at "),
        "{out}"
    );
    assert!(out.contains("\nexposure: "), "{out}");
    assert!(out.contains("\ncanary: lost: "), "{out}");
    assert!(
        out.trim_end().lines().last().unwrap().starts_with("PASS: "),
        "{out}"
    );

    let mut w = writer(&l, &sim, "1");
    w.wait_acknowledged(200);
    sigkill(&mut w.child);
    let files = canaries(&sim);
    assert_eq!(
        files.len(),
        6,
        "two runs, three canary files each: {files:?}"
    );
    let synced = std::process::Command::new("sync")
        .args(&files)
        .status()
        .unwrap();
    assert!(synced.success());
    sim.cut();
    sim.remount("honest");
    let (code, v, err) = verify(&l, &w.run);
    assert_eq!(code, 2, "{err} {v}");
    assert_eq!(v["not_measured"], json!(true));
    assert_eq!(v["cut"]["canary"]["state"], json!("survived"));
    assert_eq!(v["verdicts"]["lost_write"], json!(0));
    sim.umount();
}

/// A workload idle at the cut: the witness syncs its ledger in 2.5 s and the writer
/// may have only one acknowledgement unconfirmed (`--max-unconfirmed 1`), so it
/// writes, then waits with nothing in flight. Cut 1.5 s into such a wait: the agent
/// was alive (its heartbeats reached the witness), the canary was lost, but nothing
/// was acknowledged in the last second and nothing was in flight: NOT MEASURED,
/// naming the idleness.
#[test]
fn a_workload_idle_at_the_cut_is_not_measured() {
    let name = "a_workload_idle_at_the_cut_is_not_measured";
    if skip_without_fuse(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start_with(dir.path(), &["--test-sync-delay-ms", "2500"]);
    let mut sim = SimFs::mount(dir.path(), "honest", 31);
    let target = sim.mnt().join("t.dat");
    let mut w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
        "--max-unconfirmed",
        "1",
        "-T",
        "120s",
        "-P",
        "0.05",
    ]);
    // The first confirmation ends the first wait; the next one is 2.5 s away.
    w.wait_acknowledged(1);
    std::thread::sleep(Duration::from_millis(1500));
    sigkill(&mut w.child);
    sim.cut();
    sim.remount("honest");
    // The witness commits what it received before the connection closed.
    let ledger = l.ledger_path(&w.run);
    let mut len = 0;
    assert!(wait_for(Duration::from_secs(20), || {
        std::thread::sleep(Duration::from_millis(3000));
        let now = std::fs::metadata(&ledger).unwrap().len();
        std::mem::replace(&mut len, now) == now
    }));
    let (code, v, err) = verify(&l, &w.run);
    assert_eq!(code, 2, "{err} {v}");
    let cut = &v["cut"];
    assert_eq!(
        (&cut["acks_last_100ms"], &cut["acks_last_1s"]),
        (&json!(0), &json!(0)),
        "{cut}"
    );
    assert_eq!(
        (&cut["moved_back_ms"], &cut["canary"]["state"]),
        (&Value::Null, &json!("lost")),
        "{cut}"
    );
    let before = cut["last_ack_before_cut_ms"].as_u64().unwrap();
    assert!((1000..2500).contains(&before), "{cut}");
    assert!(
        v["summary"].as_str().unwrap().starts_with(&format!(
            "NOT MEASURED: the workload was idle at the cut: nothing was acknowledged in the last second before it (the last one {:.3} s before it); read back: ",
            before as f64 / 1000.0
        )),
        "{v}"
    );
    sim.umount();
}

/// A run that finished by itself and was verified on the same boot measured no power
/// cut: NOT MEASURED as a read-back check (exit 2, the counts in the JSON), and with
/// `--read-back`, asked for as one, exit 0.
#[test]
fn a_finished_run_is_a_read_back_check_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run = write_run(&l, &target, "1MiB", &["-T", "1s"]);
    let (code, v, err) = {
        let o = plugpull(&["verify", "--listener", l.addr(), "--run", &run, "--json"]);
        (
            o.status.code(),
            serde_json::from_slice::<Value>(&o.stdout).unwrap(),
            stderr(&o),
        )
    };
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        (&v["ok"], &v["not_measured"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(v["verdicts"]["lost_write"], json!(0));
    assert!(v["acknowledged"].as_u64().unwrap() > 0);
    assert_eq!(
        (
            &v["cut"]["cut"],
            &v["cut"]["cut_ms"],
            &v["cut"]["read_back"]
        ),
        (&json!("finished"), &Value::Null, &json!(true))
    );
    assert!(v["summary"].as_str().unwrap().starts_with(
        "NOT MEASURED: read-back check: the run finished by itself and the host has not restarted since, so no power was cut while it wrote (verify --read-back accepts this as a read-back check); read back: "
    ), "{v}");
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (&v["ok"], &v["not_measured"]),
        (&json!(true), &json!(false))
    );
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("PASS (read-back only, no power cut): "),
        "a read-back PASS never passes for a power cut's: {v}"
    );
}

/// Issue 41, item 7: a rehearsal whose cut lost the target's allocation and every
/// write leaves the backing file empty. Verify reads it through the simulator's
/// backing directory (`--target`, as the rehearsal does): it is the run's file
/// (simfs keeps the name; its inode numbers differ), so the loss is a FAIL naming
/// every missing block — not "wrong --target?".
#[test]
fn an_emptied_rehearsal_target_read_through_the_backing_directory_fails() {
    let name = "an_emptied_rehearsal_target_read_through_the_backing_directory_fails";
    if skip_without_fuse(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 51);
    let mut w = writer(&l, &sim, "1");
    w.wait_acknowledged(100);
    sigkill(&mut w.child);
    sim.cut();
    sim.umount();
    let backing = sim.backing().join("t.dat");
    std::fs::File::options()
        .write(true)
        .open(&backing)
        .unwrap()
        .set_len(0)
        .unwrap();
    let o = plugpull(&[
        "verify",
        "--listener",
        l.addr(),
        "--run",
        &w.run,
        "--target",
        backing.to_str().unwrap(),
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(o.status.code(), Some(1), "{} {v}", stderr(&o));
    assert_eq!(v["ok"], json!(false));
    let kinds: Vec<&str> = v["target_findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["target_shorter", "no_record_of_run"], "{v}");
    assert_eq!(v["verdicts"]["missing"], v["blocks_checked"], "{v}");
}
