//! End-to-end tests of the file workload: a real listener, a real writer, a real
//! verifier, real bytes on disk, exact counts.

use plugpull::record::Encoder;
use plugpull::RunId;
use plugpull_tests::*;
use serde_json::{json, Value};
use std::os::unix::fs::FileExt;
use std::process::Command;
use std::time::Duration;

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
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["ok"], json!(true));
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

/// A finished run over `N` blocks with `2N` sequential writes by one job, so write
/// `s` went to block `(s-1) % N` and carried watermark `s-1`: every block holds its
/// second version, seq `N + b + 1`.
struct Doctored {
    _dir: tempfile::TempDir,
    l: Listener,
    run: RunId,
    target: std::path::PathBuf,
    dir: std::path::PathBuf,
}

const N: u64 = 64;

fn finished_sequential_run() -> Doctored {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let size = format!("{}", N * BS);
    let run = write_run(
        &l,
        &target,
        &size,
        &[
            "--writes",
            &(2 * N).to_string(),
            "--pattern",
            "sequential",
            "--jobs",
            "1",
        ],
    );
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["verdicts"], verdicts(&[("intact", N)]));
    let p = dir.path().to_path_buf();
    Doctored {
        _dir: dir,
        l,
        run: run.parse().unwrap(),
        target,
        dir: p,
    }
}

impl Doctored {
    /// A copy of the target changed by `f`, verified: (exit code, report).
    fn check(&self, name: &str, f: impl FnOnce(&std::fs::File)) -> (i32, Value) {
        let copy = self.dir.join(name);
        std::fs::copy(&self.target, &copy).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&copy)
            .unwrap();
        f(&file);
        drop(file);
        let (code, v, err) = verify_json(&self.l, &["--target", copy.to_str().unwrap()]);
        assert!(code == 0 || code == 1, "{err}");
        (code, v)
    }

    /// The bytes of write `seq` to `block`, as the writer made them.
    fn version(&self, block: u64, seq: u64) -> Vec<u8> {
        let mut b = vec![0u8; BS as usize];
        Encoder::new(self.run).encode_block(&mut b, block, seq, seq - 1);
        b
    }
}

fn only_finding(v: &Value) -> &Value {
    let f = v["findings"].as_array().unwrap();
    assert_eq!(f.len(), 1, "{v}");
    &f[0]
}

#[test]
fn doctored_files_give_exact_verdicts() {
    let d = finished_sequential_run();
    let last = N - 1; // block of the last write, seq 2N; watermark of the survivors' newest is 2N-2
    let zero = vec![0u8; BS as usize];

    // Zero the most recently acknowledged block: a lost write (nothing issued after it survived).
    let (code, v) = d.check("zeroed", |f| f.write_all_at(&zero, last * BS).unwrap());
    assert_eq!(code, 1);
    assert_eq!(v["ok"], json!(false));
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("lost_write", 1)])
    );
    let f = only_finding(&v);
    assert_eq!(
        (
            f["block"].clone(),
            f["verdict"].clone(),
            f["expected_seq"].clone(),
            f["found_seq"].clone()
        ),
        (json!(last), json!("lost_write"), json!(2 * N), json!(0))
    );

    // Restore an older full version of that block (its first write, seq N).
    let (_, v) = d.check("older", |f| {
        f.write_all_at(&d.version(last, N), last * BS).unwrap()
    });
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("lost_write", 1)])
    );
    assert_eq!(only_finding(&v)["found_seq"], json!(N));

    // Block 0 back at its first version, seq 1: its seq N+1 was acknowledged before
    // later writes that survived were issued (their watermark ≥ N+1): the device
    // reordered across a flush.
    let (_, v) = d.check("unserializable", |f| {
        f.write_all_at(&d.version(0, 1), 0).unwrap()
    });
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("unserializable", 1)])
    );
    assert_eq!(only_finding(&v)["expected_seq"], json!(N + 1));
    // Zeros there instead: the same proof, and the evidence says zeros.
    let (_, v) = d.check("zeroed-0", |f| f.write_all_at(&zero, 0).unwrap());
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("unserializable", 1)])
    );
    assert_eq!(
        only_finding(&v)["sectors"],
        json!([{"first": 0, "last": 7, "content": {"kind": "zeros"}}])
    );

    // Copy block 3 over block 9.
    let (_, v) = d.check("misdirected", |f| {
        let mut b = vec![0u8; BS as usize];
        f.read_exact_at(&mut b, 3 * BS).unwrap();
        f.write_all_at(&b, 9 * BS).unwrap();
    });
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("misdirected", 1)])
    );
    let f = only_finding(&v);
    // Block 9 (acknowledged seq N+10) holds block 3's sectors of seq N+4.
    assert_eq!(
        (
            f["block"].clone(),
            f["expected_seq"].clone(),
            f["found_seq"].clone(),
            f["found_block"].clone()
        ),
        (json!(9), json!(N + 10), json!(N + 4), json!(3))
    );

    // Flip one payload byte of block 5.
    let (_, v) = d.check("corrupt", |f| {
        let mut b = [0u8; 1];
        let at = 5 * BS + 1024 + 100;
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x40], at).unwrap();
    });
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("corrupt", 1)])
    );

    // The older version's sectors in the first half of block 7 (acknowledged seq N+8).
    let (_, v) = d.check("shorn", |f| {
        f.write_all_at(&d.version(7, 8)[..BS as usize / 2], 7 * BS)
            .unwrap()
    });
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("torn_acknowledged", 1)])
    );
    assert_eq!(only_finding(&v)["found_seq"], json!(8));

    // A newer, never acknowledged write half-landed on block 7: torn in flight, not a failure.
    let (code, v) = d.check("torn-in-flight", |f| {
        f.write_all_at(&d.version(7, 2 * N + 1)[..BS as usize / 2], 7 * BS)
            .unwrap()
    });
    assert_eq!(code, 0);
    assert_eq!(v["ok"], json!(true));
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", N - 1), ("torn_in_flight", 1)])
    );

    // Truncate the file to 40 blocks and a half: 24 blocks are missing.
    let (_, v) = d.check("truncated", |f| f.set_len(40 * BS + BS / 2).unwrap());
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", 40), ("missing", N - 40)])
    );

    // A --target that does not exist names nothing of the run: could not verify.
    // (The run's own file gone from its filesystem is a finding: verify_truth.rs.)
    let gone = d.dir.join("no-such-file");
    let run = d.run.to_string();
    let (code, v, err) = verify_json(&d.l, &["--run", &run, "--target", gone.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(
        err.trim(),
        format!(
            "plugpull: target {} (given with --target) does not exist; the run wrote {}",
            gone.display(),
            d.target.display()
        )
    );
    // Another file, holding nothing of the run: a wrong --target, not a total loss.
    let other = d.dir.join("zeros.dat");
    std::fs::write(&other, vec![0u8; (N * BS) as usize]).unwrap();
    let (code, v, err) = verify_json(&d.l, &["--run", &run, "--target", other.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    let prefix = format!(
        "plugpull: target {} holds no record of run {} and is not the file the run wrote (inode ",
        other.display(),
        d.run
    );
    assert!(err.trim().starts_with(&prefix), "{err}");
    assert!(err.trim().ends_with("): wrong --target?"), "{err}");
}

#[test]
fn the_human_report_ends_with_one_summary_line() {
    let d = finished_sequential_run();
    let copy = d.dir.join("human");
    std::fs::copy(&d.target, &copy).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&copy)
        .unwrap()
        .write_all_at(&[0u8; 4096], (N - 1) * BS)
        .unwrap();
    let o = plugpull(&[
        "verify",
        "--listener",
        d.l.addr(),
        "--target",
        copy.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let last = out.lines().last().unwrap();
    assert_eq!(last, format!("FAIL: 1 of {N} checked blocks lost or damaged acknowledged data (1 lost write) out of {} acknowledged writes", 2 * N));
    assert!(
        out.contains(&format!(
            "block {}: lost write, expected seq {}, acknowledged 0.000 s before the end; found zeros",
            N - 1,
            2 * N
        )),
        "{out}"
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

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());

    // Garbage bytes, then an oversized length prefix: each connection dropped with a reason logged.
    let mut s = std::net::TcpStream::connect(l.addr()).unwrap();
    s.write_all(&[3, 0, 0, 0, 0xff, 0xfe, 0xfd]).unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    let mut s = std::net::TcpStream::connect(l.addr()).unwrap();
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let _ = s.read_to_end(&mut sink);
    assert!(
        wait_for(Duration::from_secs(5), || l
            .log_text()
            .contains("malformed frame")),
        "{}",
        l.log_text()
    );
    assert!(
        wait_for(Duration::from_secs(5), || l
            .log_text()
            .contains("frame of 4294967295 bytes exceeds")),
        "{}",
        l.log_text()
    );

    // The listener still serves others.
    let target = dir.path().join("t.dat");
    write_run(&l, &target, "1MiB", &["--writes", "10"]);

    // Unknown run id.
    let (code, _, err) = verify_json(&l, &["--run", "123456789abcdef"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown run 0123456789abcdef"), "{err}");

    // Unreachable listener.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let o = plugpull(&["verify", "--listener", &free]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("cannot reach listener at {free}")),
        "{}",
        stderr(&o)
    );
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        &free,
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot reach listener"),
        "{}",
        stderr(&o)
    );

    // Bad sizes.
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
        "--block-size",
        "1000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--block-size 1000 is not a multiple of 512"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_target_smaller_than_size_is_refused() {
    if !is_root() {
        skipped(
            "a_target_smaller_than_size_is_refused",
            "mounting a 1 MiB tmpfs needs root",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mnt = dir.path().join("tiny");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(ok.success(), "mount tmpfs");
    let target = mnt.join("t.dat");
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "64MiB",
    ]);
    let left_behind = target.exists();
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        !left_behind,
        "the refused target was left on the full filesystem"
    );
    assert!(
        stderr(&o).contains(&format!(
            "not enough free space for target {}: its filesystem has 1 MiB free, --size 64 MiB needs 64 MiB more",
            target.display()
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_target_in_use_or_holding_other_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());

    // A file that is not plugpull's is not overwritten without --force.
    let precious = dir.path().join("precious.txt");
    std::fs::write(&precious, "the only copy of something\n").unwrap();
    let p = precious.to_str().unwrap();
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        p,
        "--size",
        "64KiB",
        "--writes",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("target {p} holds data that is not plugpull's")),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "the only copy of something\n"
    );
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        p,
        "--size",
        "64KiB",
        "--writes",
        "5",
        "--force",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A second writer on a target in use is refused; the first goes on and verifies.
    let target = dir.path().join("t.dat");
    let t = target.to_str().unwrap();
    let mut first = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        t,
        "--size",
        "1MiB",
        "-T",
        "30s",
        "-P",
        "0.1",
    ]);
    first.wait_acknowledged(1);
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        t,
        "--size",
        "1MiB",
        "--writes",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).trim(), format!("plugpull: target {t} is in use by another plugpull writer (it holds the target's lock)"));
    unsafe { libc::kill(first.child.id() as i32, libc::SIGINT) };
    let (status, _, err) = first.finish();
    assert!(status.success(), "{err}");
    let (code, v, err) = verify_json(&l, &["--target", t]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["ok"], json!(true));
}

#[test]
fn a_target_of_another_run_is_refused_not_judged() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let (a, b) = (dir.path().join("a.dat"), dir.path().join("b.dat"));
    let run_a = write_run(&l, &a, "256KiB", &["--writes", "200"]);
    write_run(&l, &b, "256KiB", &["--writes", "200"]);
    let (code, v, err) = verify_json(&l, &["--run", &run_a, "--target", b.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["ok"], json!(false));
    assert!(
        err.contains(&format!(
            "target {} holds no record of run {run_a} but records of other plugpull runs",
            b.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("wrong --target, or a later run reused this target"),
        "{err}"
    );
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
