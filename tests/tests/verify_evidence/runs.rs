//! Which run a verdict is about: the run verify picks is the run that was cut, a
//! prior run's record on a lost block proves the device unserializable, and runs
//! started at once get distinct listener orders.

use super::*;

/// Item 19: the run verify picks is the newest by the listener's record, not by the
/// agent's clock; several unfinished runs written at the same time are listed, and
/// verify asks for --run.
#[test]
fn the_run_verify_picks_is_the_run_that_was_cut() {
    use plugpull::ledger::{FileManifest, Manifest, RunSummary, Workload};
    use plugpull::wire::{Request, Response};
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    // An earlier run recorded while the agent's clock was a day ahead.
    let mut c = RawConn::connect(l.addr());
    assert_eq!(
        c.handshake(&plugpull::auth::Secret::default()),
        Some(Response::Welcome)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    c.send(&Request::StartRun {
        manifest: Box::new(Manifest {
            host: this_host(),
            started_unix_ms: now + 86_400_000,
            tool_version: "test".into(),
            workload: Workload::File(FileManifest {
                target: dir.path().join("old.dat").display().to_string(),
                size: 4096,
                block_size: 4096,
                jobs: 1,
                sync: plugpull::modes::SyncMode::Fdatasync,
                pattern: plugpull::modes::Pattern::Random,
                identity: Default::default(),
                prior_runs: Vec::new(),
                prior_foreign: false,
                atomic: None,
            }),
            boot_id: String::new(),
            listener_order: 0,
            listener_created_unix_ms: 0,
            storage: Default::default(),
            canary: Default::default(),
        }),
    });
    let Some(Response::RunStarted { run: early, .. }) = c.recv() else {
        panic!("no run started")
    };
    c.send(&Request::Finish {
        run: early,
        summary: RunSummary::default(),
    });
    assert!(matches!(c.recv(), Some(Response::Confirmed { .. })));
    drop(c);
    // The run that was cut: killed while writing.
    let target = dir.path().join("t.dat");
    let spawn = |t: &Path| {
        Writer::spawn(&[
            "write",
            "file",
            "--listener",
            l.addr(),
            "--target",
            t.to_str().unwrap(),
            "--size",
            "1MiB",
            "-T",
            "60s",
            "-P",
            "0.2",
        ])
    };
    let mut w = spawn(&target);
    w.wait_acknowledged(1);
    sigkill(&mut w.child);
    plugpull_tests::lose_canary(dir.path());
    let o = plugpull(&["verify", "--read-back", "--listener", l.addr(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["run_id"], json!(w.run));
    assert!(v["run_chosen"].as_str().unwrap().starts_with(&format!(
        "the newest run of host {} by the listener's record",
        this_host()
    )));
    assert!(
        stderr(&o).contains(&format!("verifying run {}, the newest run of host", w.run)),
        "{}",
        stderr(&o)
    );
    // Two runs of this host written at the same time and both cut: which one? Ask.
    let mut x = spawn(&dir.path().join("x.dat"));
    let mut y = spawn(&dir.path().join("y.dat"));
    x.wait_acknowledged(1);
    y.wait_acknowledged(1);
    sigkill(&mut x.child);
    sigkill(&mut y.child);
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains("2 unfinished runs of host")
            && err.contains(&x.run)
            && err.contains(&y.run)
            && err.trim_end().ends_with(&format!(
                "give --run (`plugpull verify --listener {} --history [--host HOST]` lists \
                 the runs it holds for this host or HOST)",
                l.addr()
            )),
        "{err}"
    );
    plugpull_tests::lose_canary(dir.path());
    let (code, _, err) = verify_json(&l, &["--run", &y.run]);
    assert_eq!(code, 0, "{err}");
}

/// Review finding 5: the procedure reuses the target for every cut, so from the
/// second cut on a block whose acknowledged write the device lost holds the previous
/// run's record. With a later write surviving (block 62, seq 127, issued after seq
/// 126 was acknowledged), that block is `unserializable`: the previous run's record
/// is its old contents, not an overwrite. Whether that run is known from the
/// start-of-run scan (`prior_runs`) or only from the listener's order (the target was
/// zeroed before the run); a record of a run the listener created later (or on
/// another target) still excuses the block (overwritten: `lost_write`).
#[test]
fn a_lost_block_holding_a_prior_runs_record_is_unserializable() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run_a = write_run(&l, &target, "256KiB", &strs(&sequential(64)));
    let a_block0 = std::fs::read(&target).unwrap()[..BS as usize].to_vec();
    // The device lost seq 65 of block 0 (A's seq 1 is still there) and everything of
    // block 63 (zeros where seq 128 was acknowledged; nothing issued after it survived).
    let cut = |at: &Path, block0: &[u8]| {
        let f = std::fs::OpenOptions::new().write(true).open(at).unwrap();
        f.write_all_at(block0, 0).unwrap();
        f.write_all_at(&[0u8; BS as usize], 63 * BS).unwrap();
        f.sync_all().unwrap();
    };
    let check = |run: &str, block0: (&str, &str, u64)| {
        let (code, v, err) = verify_json(&l, &["--run", run]);
        assert_eq!(code, 1, "{err} {v}");
        let (verdict, other, seq) = block0;
        let expect = if verdict == "unserializable" {
            verdicts(&[("intact", 62), ("lost_write", 1), ("unserializable", 1)])
        } else {
            verdicts(&[("intact", 62), ("lost_write", 2)])
        };
        assert_eq!(v["verdicts"], expect);
        let f = &v["findings"][0];
        assert_eq!((&f["block"], &f["verdict"]), (&json!(0), &json!(verdict)));
        assert_eq!(
            f["sectors"],
            json!([{"first": 0, "last": 7, "content": {"kind": "other_run", "run": other, "seq": seq}}])
        );
        if verdict == "unserializable" {
            assert_eq!(
                (
                    &f["proof"]["block"],
                    &f["proof"]["seq"],
                    &f["proof"]["watermark"]
                ),
                (&json!(62), &json!(127), &json!(126))
            );
        }
        assert_eq!(
            (&v["findings"][1]["block"], &v["findings"][1]["verdict"]),
            (&json!(63), &json!("lost_write"))
        );
    };
    // B: A's records were on the target when B started (its prior_runs).
    let run_b = write_run(&l, &target, "256KiB", &strs(&sequential(128)));
    cut(&target, &a_block0);
    check(&run_b, ("unserializable", &run_a, 1));
    // C: the target zeroed first, so C's scan saw no run; A comes back at block 0.
    // The listener created A before C on this target: still C's old contents.
    std::fs::write(&target, vec![0u8; 256 << 10]).unwrap();
    let run_c = write_run(&l, &target, "256KiB", &strs(&sequential(128)));
    cut(&target, &a_block0);
    check(&run_c, ("unserializable", &run_a, 1));
    // D, created after C (on another file): its record at C's block 0 is an
    // overwrite by a later run, which proves nothing about the device's ordering.
    let elsewhere = dir.path().join("d.dat");
    let run_d = write_run(&l, &elsewhere, "256KiB", &strs(&sequential(64)));
    let d_block0 = std::fs::read(&elsewhere).unwrap()[..BS as usize].to_vec();
    cut(&target, &d_block0);
    check(&run_c, ("lost_write", &run_d, 1));
    // E, a later run on C's own target that wrote blocks 0–9 before C was verified:
    // the target was reused, and the blocks E overwrote cannot be judged (exit 2).
    let run_e = write_run(&l, &target, "256KiB", &strs(&sequential(10)));
    let (code, v, err) = verify_json(&l, &["--run", &run_c]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["ok"], json!(false));
    assert_eq!(
        err.trim(),
        format!(
            "plugpull: target {} holds records of run {run_c} but also of later runs on the same target \
             ({run_e}): the target was reused before run {run_c} was verified, and the blocks they \
             overwrote cannot be judged",
            target.display()
        )
    );
}

/// Review finding 6: runs started at the same moment get distinct creation orders
/// (the order is taken atomically, not read under a lock released before the run is
/// recorded), and a restarted listener goes on after the highest order it recovered.
#[test]
fn runs_started_at_once_get_distinct_listener_orders() {
    use plugpull::ledger::Entry;
    use plugpull::wire::{Request, Response};
    const N: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let mut l = Listener::start(dir.path());
    let start_runs = |addr: &str, n: usize| -> Vec<String> {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|i| {
                let (addr, gate) = (addr.to_string(), gate.clone());
                std::thread::spawn(move || {
                    let mut c = RawConn::connect(&addr);
                    assert_eq!(
                        c.handshake(&plugpull::auth::Secret::default()),
                        Some(Response::Welcome)
                    );
                    gate.wait();
                    c.send(&Request::StartRun {
                        manifest: raw_manifest("h", &format!("/t{i}"), 4096, 4096),
                    });
                    match c.recv() {
                        Some(Response::RunStarted { run, .. }) => run.to_string(),
                        other => panic!("StartRun answered {other:?}"),
                    }
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    };
    let order_of = |l: &Listener, run: &str| -> u64 {
        plugpull_tests::ledger_file::entries(&l.ledger_path(run))
            .into_iter()
            .find_map(|(_, _, e)| match e {
                Entry::Manifest(m) => Some(m.listener_order),
                _ => None,
            })
            .unwrap()
    };
    let runs = start_runs(l.addr(), N);
    let mut orders: Vec<u64> = runs.iter().map(|r| order_of(&l, r)).collect();
    orders.sort();
    assert_eq!(orders, (1..=N as u64).collect::<Vec<_>>());
    l.restart();
    let next = start_runs(l.addr(), 1);
    assert_eq!(order_of(&l, &next[0]), N as u64 + 1);
}
