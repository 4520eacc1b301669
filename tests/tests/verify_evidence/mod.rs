//! End-to-end tests of what the verifier concludes (issue 8, file workload): a total
//! loss on a reused target is a FAIL, every finding names its evidence, a misdirected
//! write is one fault, unserializable names its proof, and the run verified is the
//! run that was cut. Real listener, writer and verifier on real files.

use crate::verify_common;

use plugpull::record::Encoder;
use plugpull::RunId;
use plugpull_tests::*;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::path::Path;
use verify_common::*;

mod runs;

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

/// Items 8, 16 and 22: a block back to what `--force` left (zeros, not the foreign
/// bytes it zeroed), a damaged record, a shorn block and another run's record, each
/// named for what it is.
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
    // Block 63 (the last write, seq 64) back to the zeros --force left: lost.
    f.write_all_at(&[0; BS as usize], 63 * BS).unwrap();
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
        json!([{"first": 0, "last": 7, "content": {"kind": "zeros"}}])
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
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
    ]);
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
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
    ]);
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
