//! End-to-end tests of what the verifier concludes (issue 8, file workload): a total
//! loss on a reused target is a FAIL, every finding names its evidence, a misdirected
//! write is one fault, unserializable names its proof, and the run verified is the
//! run that was cut. Real listener, writer and verifier on real files.

mod verify_common;

use plugpull::record::Encoder;
use plugpull::RunId;
use plugpull_tests::*;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::path::Path;
use verify_common::*;

/// Item 4: run B reuses run A's target; the device then loses everything B wrote
/// (the target is back at A's bytes). Only A's records are there, and A was on the
/// target when B started: every acknowledged block of B is lost — FAIL, not exit 2.
#[test]
fn total_loss_on_a_reused_target_is_a_fail() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run_a = write_run(&l, &target, "256KiB", &strs(&sequential(64)));
    let after_a = std::fs::read(&target).unwrap();
    let run_b = write_run(&l, &target, "256KiB", &strs(&sequential(64)));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap();
    f.write_all_at(&after_a, 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let (code, v, err) = verify_json(&l, &["--run", &run_b]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(v["verdicts"], verdicts(&[("lost_write", 64)]));
    assert_eq!(target_finding_kinds(&v), vec!["no_record_of_run"]);
    assert_eq!(
        v["target_findings"][0]["detail"],
        json!(format!("no record of run {run_b} survived anywhere on the target (only records of runs {run_a}, which were on it before this run started)"))
    );
    let f = &v["findings"][0];
    assert_eq!(
        f["sectors"],
        json!([{"first": 0, "last": 7, "content": {"kind": "other_run", "run": run_a, "seq": 1}}])
    );
    // A run the start-of-run scan did not see (the target was zeroed before run C,
    // then only A's records came back): the listener created A before C, so its
    // records are prior contents and C lost everything.
    std::fs::write(&target, vec![0u8; 256 << 10]).unwrap();
    let run_c = write_run(&l, &target, "256KiB", &strs(&sequential(64)));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap()
        .write_all_at(&after_a, 0)
        .unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run_c]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(v["verdicts"], verdicts(&[("lost_write", 64)]));
    assert_eq!(target_finding_kinds(&v), vec!["no_record_of_run"]);
    // An earlier run's records on another file are no prior contents of this run's
    // target: a wrong --target, exit 2.
    let elsewhere = dir.path().join("elsewhere.dat");
    let run_e = write_run(&l, &elsewhere, "256KiB", &strs(&sequential(64)));
    let fresh = dir.path().join("fresh.dat");
    let run_f = write_run(&l, &fresh, "256KiB", &strs(&sequential(64)));
    let (code, v, err) = verify_json(
        &l,
        &["--run", &run_f, "--target", elsewhere.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "(runs {run_e}, which were not on the target when run {run_f} started)"
        )),
        "{err}"
    );
    // The same target zeroed: nothing of any run left — still a total loss.
    std::fs::write(&target, vec![0u8; 256 << 10]).unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run_b]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(v["verdicts"], verdicts(&[("lost_write", 64)]));
    assert_eq!(
        v["findings"][0]["sectors"][0]["content"],
        json!({"kind": "zeros"})
    );
}

/// Items 8, 16 and 22: forced foreign bytes, a damaged record, a shorn block and
/// another run's record, each named for what it is.
#[test]
fn every_finding_names_its_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    std::fs::write(&target, vec![0xABu8; 64 * BS as usize]).unwrap();
    let run = write_run(
        &l,
        &target,
        "256KiB",
        &[strs(&sequential(64)), vec!["--force"]].concat(),
    );
    let other = write_run(
        &l,
        &dir.path().join("other.dat"),
        "256KiB",
        &strs(&sequential(64)),
    );
    let enc = Encoder::new(run.parse::<RunId>().unwrap());
    let version = |block: u64, seq: u64| {
        let mut b = vec![0u8; BS as usize];
        enc.encode_block(&mut b, block, seq, seq - 1);
        b
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&target)
        .unwrap();
    // Block 63 (the last write, seq 64) back to the foreign bytes it held: lost.
    f.write_all_at(&[0xAB; BS as usize], 63 * BS).unwrap();
    // Block 20 (seq 21): three bits flipped in sector 3's payload.
    let at = 20 * BS + 3 * 512 + 100;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0b1011], at).unwrap();
    // Block 30 (seq 31): its last sector is foreign bytes.
    f.write_all_at(&[0xAB; 512], 30 * BS + 7 * 512).unwrap();
    // Block 40 (seq 41): another run's record of that block.
    let theirs = std::fs::read(dir.path().join("other.dat")).unwrap();
    f.write_all_at(&theirs[40 * BS as usize..41 * BS as usize], 40 * BS)
        .unwrap();
    // Block 50 (seq 51): sectors 4–7 foreign bytes inside a block of this run: damage.
    f.write_all_at(&version(50, 51)[..2048], 50 * BS).unwrap();
    f.write_all_at(&[0xAB; 2048], 50 * BS + 2048).unwrap();
    drop(f);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", 59), ("lost_write", 2), ("corrupt", 3)])
    );
    let by_block = |b: u64| {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["block"] == json!(b))
            .unwrap_or_else(|| panic!("no finding for block {b}: {v}"))
            .clone()
    };
    let f63 = by_block(63);
    assert_eq!(f63["verdict"], json!("lost_write"));
    assert_eq!(
        f63["sectors"],
        json!([{"first": 0, "last": 7, "content": {"kind": "foreign"}}])
    );
    let f20 = by_block(20);
    assert_eq!(f20["verdict"], json!("corrupt"));
    assert_eq!(
        f20["sectors"][1],
        json!({"first": 3, "last": 3, "content": {"kind": "bad_crc", "seq": 21, "flipped_bits": 3}})
    );
    let f30 = by_block(30);
    assert_eq!(f30["verdict"], json!("corrupt"));
    assert_eq!(
        f30["sectors"][1],
        json!({"first": 7, "last": 7, "content": {"kind": "foreign"}})
    );
    let f40 = by_block(40);
    assert_eq!(f40["verdict"], json!("lost_write"));
    assert_eq!(
        f40["sectors"],
        json!([{"first": 0, "last": 7, "content": {"kind": "other_run", "run": other, "seq": 41}}])
    );
    assert_eq!(by_block(50)["verdict"], json!("corrupt"));
    // The human report names the same evidence.
    let o = plugpull(&["verify", "--listener", l.addr(), "--run", &run]);
    let out = stdout(&o);
    assert!(out.contains("block 20: corrupt, expected seq 21, acknowledged"));
    assert!(out.contains("found sectors 0–2: seq 21; 3: this run's record of seq 21 with a bad CRC (3 bits differ from the regenerated record); 4–7: seq 21"), "{out}");
    assert!(
        out.contains(&format!("found run {other}'s record seq 41")),
        "{out}"
    );
}

/// Items 15 and 16: block 5's acknowledged write landed on block 40. Block 40 is
/// misdirected, block 5 a lost write found at block 40 — never unserializable,
/// although later writes survived. A shorn block names its sector ranges.
#[test]
fn a_misdirected_write_is_reported_once_and_a_shorn_block_names_its_sectors() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    // 128 writes over 64 blocks: block b holds seq 64+b+1; its first was seq b+1.
    let run = write_run(&l, &target, "256KiB", &strs(&sequential(128)));
    let enc = Encoder::new(run.parse::<RunId>().unwrap());
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&target)
        .unwrap();
    let mut b5 = vec![0u8; BS as usize];
    f.read_exact_at(&mut b5, 5 * BS).unwrap();
    f.write_all_at(&b5, 40 * BS).unwrap();
    let mut old = vec![0u8; BS as usize];
    enc.encode_block(&mut old, 5, 6, 5);
    f.write_all_at(&old, 5 * BS).unwrap();
    // Block 10 (seq 75): sectors 4–7 still hold its first version, seq 11.
    let mut first = vec![0u8; BS as usize];
    enc.encode_block(&mut first, 10, 11, 10);
    f.write_all_at(&first[2048..], 10 * BS + 2048).unwrap();
    drop(f);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(
        v["verdicts"],
        verdicts(&[
            ("intact", 61),
            ("lost_write", 1),
            ("misdirected", 1),
            ("torn_acknowledged", 1)
        ])
    );
    let fs = v["findings"].as_array().unwrap();
    assert_eq!(
        (
            &fs[0]["block"],
            &fs[0]["verdict"],
            &fs[0]["found_at_block"],
            &fs[0]["proof"]
        ),
        (&json!(5), &json!("lost_write"), &json!(40), &Value::Null)
    );
    assert_eq!(
        (&fs[2]["block"], &fs[2]["verdict"], &fs[2]["found_block"]),
        (&json!(40), &json!("misdirected"), &json!(5))
    );
    assert_eq!(
        fs[1]["sectors"],
        json!([
            {"first": 0, "last": 3, "content": {"kind": "seq", "seq": 75}},
            {"first": 4, "last": 7, "content": {"kind": "seq", "seq": 11}}
        ])
    );
    let o = plugpull(&["verify", "--listener", l.addr(), "--run", &run]);
    let out = stdout(&o);
    assert!(
        out.contains("found seq 6; its acknowledged write was found at block 40"),
        "{out}"
    );
    assert!(
        out.contains(
            "found sectors 0–3: seq 75; 4–7: seq 11 (shorn: seq 11 < acknowledged seq 75)"
        ),
        "{out}"
    );
}

/// Item 16: an unserializable finding names the later write that proves it.
#[test]
fn an_unserializable_finding_names_the_later_write() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run = write_run(&l, &target, "256KiB", &strs(&sequential(128)));
    let enc = Encoder::new(run.parse::<RunId>().unwrap());
    // Block 0 back at its first version (seq 1) while seq 65 was acknowledged; the
    // newest survivor, block 62 seq 127, was issued with watermark 126 ≥ 65. (Block
    // 63, seq 128, is zeroed too: it carries the highest watermark otherwise.)
    let mut first = vec![0u8; BS as usize];
    enc.encode_block(&mut first, 0, 1, 0);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap();
    f.write_all_at(&first, 0).unwrap();
    f.write_all_at(&[0u8; BS as usize], 63 * BS).unwrap();
    drop(f);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err} {v}");
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", 62), ("lost_write", 1), ("unserializable", 1)])
    );
    let u = &v["findings"][0];
    assert_eq!(u["verdict"], json!("unserializable"));
    assert_eq!(u["proof"]["block"], json!(62));
    assert_eq!(u["proof"]["seq"], json!(127));
    assert_eq!(u["proof"]["watermark"], json!(126));
    // Block 63 holds zeros where seq 128 was acknowledged; nothing issued after it
    // survived, so it is a plain lost write.
    assert_eq!(v["findings"][1]["verdict"], json!("lost_write"));
}

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
            }),
            boot_id: String::new(),
            listener_order: 0,
            listener_created_unix_ms: 0,
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
    let o = plugpull(&["verify", "--listener", l.addr(), "--json"]);
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
            && err.trim_end().ends_with("give --run"),
        "{err}"
    );
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
