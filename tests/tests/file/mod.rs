//! End-to-end tests of the file workload: a real listener, a real writer, a real
//! verifier, real bytes on disk, exact counts.

use plugpull::record::Encoder;
use plugpull::RunId;
use plugpull_tests::*;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::Duration;

mod doctored;
mod refusals;
mod storage;

const BS: u64 = 4096;

#[test]
fn a_clean_run_verifies_ok_with_every_written_block_intact() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run = write_run(&l, &target, "2MiB", &["--writes", "3000", "--jobs", "3"]);
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["run_id"], json!(run));
    assert_eq!(v["workload"], json!("file"));
    assert_eq!(v["acknowledged"], json!(3000));
    assert_eq!(v["ok"], json!(true));
    let checked = v["blocks_checked"].as_u64().unwrap();
    // 3000 random writes over 512 blocks leave (almost surely) every block written;
    // count exactly what the file shows: blocks that are not all zeros.
    let data = std::fs::read(&target).unwrap();
    let written = data
        .chunks(BS as usize)
        .filter(|b| b.iter().any(|&x| x != 0))
        .count() as u64;
    assert_eq!(checked, written);
    assert_eq!(v["verdicts"], verdicts(&[("intact", written)]));
    assert_eq!(v["findings"], json!([]));
}

#[test]
fn a_writer_killed_mid_run_verifies_ok_and_its_in_flight_block_is_classified() {
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
        "8MiB",
        "-j",
        "4",
        "-T",
        "60s",
        "-P",
        "0.2",
    ]);
    // Let it write and have acks confirmed, then kill it without warning.
    w.wait_acknowledged(1);
    sigkill(&mut w.child);
    // Killing the writer cut no power: the canary it wrote without a durability call
    // is whole on the medium, and the PASS it would give measures nothing.
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 2, "{err} {v}");
    assert_eq!(
        (&v["ok"], &v["not_measured"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(v["cut"]["cut"], json!("last_heard"));
    assert_eq!(v["cut"]["canary"]["state"], json!("survived"));
    // The canary thread may have written a record after the last batch said.
    let canary = &v["cut"]["canary"];
    assert!(
        canary["on_medium"].as_u64() >= canary["issued"].as_u64(),
        "{canary}"
    );
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("NOT MEASURED: the canary survived the cut"),
        "{v}"
    );
    // The page cache lost by hand, as a power cut would: now the cut is measured.
    assert_eq!(plugpull_tests::lose_canary(dir.path()), 3);
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["ok"], json!(true));
    assert_eq!(v["cut"]["canary"]["state"], json!("lost"));
    assert_eq!(v["cut"]["canary"]["on_medium"], json!(0));
    assert!(v["acknowledged"].as_u64().unwrap() > 0);
    let data = std::fs::read(&target).unwrap();
    let written = data
        .chunks(BS as usize)
        .filter(|b| b.iter().any(|&x| x != 0))
        .count() as u64;
    // Every block with bytes of the run is classified, acknowledged or not.
    assert_eq!(v["blocks_checked"].as_u64().unwrap(), written);
    let failures: u64 = [
        "lost_write",
        "torn_acknowledged",
        "corrupt",
        "misdirected",
        "unserializable",
        "missing",
    ]
    .iter()
    .map(|k| v["verdicts"][k].as_u64().unwrap())
    .sum();
    assert_eq!(failures, 0);
    assert_eq!(
        v["verdicts"]["intact"].as_u64().unwrap()
            + v["verdicts"]["torn_in_flight"].as_u64().unwrap(),
        written
    );
}

#[test]
fn acks_confirmed_before_the_listener_was_killed_survive_its_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run = write_run(&l, &target, "1MiB", &["--writes", "1000"]);
    l.restart(); // SIGKILL, then start on the same data directory
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["acknowledged"], json!(1000));

    // A torn tail (half an entry appended by a crash mid-commit) is cut off on start.
    l.kill();
    let ledger = l.ledger_path(&run);
    let len = std::fs::metadata(&ledger).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&ledger)
        .unwrap()
        .write_all_at(&[40, 0, 0, 0, 1, 2, 3, 4, 5, 6], len)
        .unwrap();
    l.restart();
    assert!(
        l.log_text().contains("truncated torn tail of ledger"),
        "{}",
        l.log_text()
    );
    assert!(l.log_text().contains("torn_bytes=10"), "{}", l.log_text());
    assert_eq!(std::fs::metadata(&ledger).unwrap().len(), len);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["acknowledged"], json!(1000));

    // Damage in the middle: verify refuses (exit 2) and says where.
    l.kill();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ledger)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 200).unwrap();
    f.write_all_at(&[b[0] ^ 0xff], 200).unwrap();
    l.restart();
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2);
    // --json still prints one object: not ok, and why.
    assert_eq!(v["ok"], json!(false));
    assert_eq!(
        format!("plugpull: {}", v["error"].as_str().unwrap()),
        err.trim()
    );
    assert!(err.contains("damaged at byte"), "{err}");
    assert!(l.log_text().contains("ledger damaged"), "{}", l.log_text());
}

/// SIGTERM (`kill`, `systemctl stop`) stops a writer like Ctrl-C: the run is finished
/// properly (exit 0, a summary), and verify finds every acknowledged write.
#[test]
fn sigterm_finishes_the_run_like_ctrl_c() {
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
        "1",
    ]);
    w.wait_acknowledged(1);
    let run = w.run.clone();
    // SAFETY: kill(2) with a valid pid and signal number.
    unsafe { libc::kill(w.child.id() as i32, libc::SIGTERM) };
    let (status, out, err) = w.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("interrupted: finishing the writes in flight"),
        "{err}"
    );
    let acknowledged: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("writes acknowledged: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["acknowledged"], json!(acknowledged));
    assert_eq!(v["finished"], json!(true));
}
