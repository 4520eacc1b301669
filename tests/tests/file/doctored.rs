//! A finished run's target copied and doctored block by block (zeroed, an older
//! version, reordered, misplaced, corrupt, shorn, torn in flight, truncated), each copy
//! verified: every verdict the rules know, with exact counts and evidence.

use super::*;

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

/// Block of the last write (seq 2N); the watermark of the survivors' newest is 2N-2.
const LAST: u64 = N - 1;

/// One block of zeros.
fn zero() -> Vec<u8> {
    vec![0u8; BS as usize]
}

/// Every doctored copy of one finished run, verdict by verdict (one helper per kind
/// of damage, in this order).
#[test]
fn doctored_files_give_exact_verdicts() {
    let d = finished_sequential_run();
    a_zeroed_or_older_last_block_is_a_lost_write(&d);
    an_older_block_0_is_unserializable(&d);
    a_copied_block_is_misdirected_and_a_flipped_byte_corrupt(&d);
    a_half_old_block_is_torn_acknowledged_and_half_new_torn_in_flight(&d);
    a_truncated_file_is_missing_blocks_and_a_wrong_target_is_refused(&d);
}

fn a_zeroed_or_older_last_block_is_a_lost_write(d: &Doctored) {
    let last = LAST;
    let zero = zero();
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
}

fn an_older_block_0_is_unserializable(d: &Doctored) {
    let zero = zero();
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
}

fn a_copied_block_is_misdirected_and_a_flipped_byte_corrupt(d: &Doctored) {
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
}

fn a_half_old_block_is_torn_acknowledged_and_half_new_torn_in_flight(d: &Doctored) {
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
}

fn a_truncated_file_is_missing_blocks_and_a_wrong_target_is_refused(d: &Doctored) {
    // Truncate the file to 40 blocks and a half: 24 blocks are missing.
    let (_, v) = d.check("truncated", |f| f.set_len(40 * BS + BS / 2).unwrap());
    assert_eq!(
        v["verdicts"],
        verdicts(&[("intact", 40), ("missing", N - 40)])
    );
    // Cut inside block 0: its first 4 sectors still hold the acknowledged seq, and the
    // report names them instead of saying nothing of the run survived.
    let (code, v) = d.check("cut-in-block-0", |f| f.set_len(BS / 2).unwrap());
    assert_eq!(code, 1);
    assert_eq!(v["verdicts"], verdicts(&[("missing", N)]));
    let block0 = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["block"] == json!(0))
        .expect("block 0 is a finding");
    assert_eq!(
        block0["sectors"],
        json!([
            {"first": 0, "last": 3, "content": {"kind": "seq", "seq": N + 1}},
            {"first": 4, "last": 7, "content": {"kind": "beyond_end"}}
        ])
    );
    let kinds: Vec<&Value> = v["target_findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["kind"])
        .collect();
    assert_eq!(kinds, [&json!("target_shorter")], "{v}");

    // A --target that does not exist names nothing of the run: could not verify.
    // (The run's own file gone from its filesystem is a finding: tests/tests/verify_truth/.)
    let gone = d.dir.join("no-such-file");
    let run = d.run.to_string();
    let (code, v, err) = verify_json(&d.l, &["--run", &run, "--target", gone.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(
        err.trim(),
        format!(
            "plugpull: cannot verify: target {} (given with --target) does not exist; the run wrote {}",
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
        "--read-back",
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
