//! Issue 15, atomic-write qualification: `write file --expect-atomic` on simfs `torn`
//! with `--atomic-unit`, cut with the writer alive (the drive loses power under a
//! running writer, which then stops on EIO: a valid cut, `docs/procedure.md`), so
//! the writes in flight at the cut are cached and torn as on a real device; and
//! `--atomic rwf` (`pwritev2(…, RWF_ATOMIC)`) with its refusal (`rwf.rs`).
//!
//! Compared exactly with the ground truth: every block a write cached at the cut
//! tore (`fate: torn`) is a `torn_in_flight` finding, and no other block is. Each
//! block is written by one worker, one write at a time, so a block has at most one
//! write in flight at the cut, and a torn write leaves its block holding two seqs.

use plugpull_tests::simfs::{skip_without_fuse, Fate, SimFs, Truth};
use plugpull_tests::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Instant;

mod rwf;

/// Bytes per block, the unit under test: a PostgreSQL page.
const BS: u64 = 8192;
/// Blocks in the target.
const BLOCKS: u64 = 256;

/// One cut of a `--expect-atomic` run with 8 KiB blocks on a fresh `torn` mount with
/// `--atomic-unit unit` and the mount options `sim_extra`: the writer runs `jobs`
/// jobs, the power goes once `acks` writes are confirmed, the writer stops on EIO
/// (exit 1, a device error); with `tearable`, at the first moment after that when a
/// write the cut could tear is cached (`plugpull-simfs cut --when-tearable`). Returns
/// the ground truth, `verify --json` of the backing
/// file, and the human report's atomic lines.
fn cut_with_writer_alive(
    unit: u64,
    seed: u64,
    acks: u64,
    jobs: &str,
    sim_extra: &[&str],
    tearable: bool,
) -> (Truth, i32, Value, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let unit = unit.to_string();
    let opts = [&["--atomic-unit", &unit][..], sim_extra].concat();
    let mut sim = SimFs::mount_with(dir.path(), "torn", seed, &opts);
    let target = sim.mnt().join("t.dat");
    let (size, seed_s) = ((BLOCKS * BS).to_string(), seed.to_string());
    let mut w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        &size,
        "--block-size",
        &BS.to_string(),
        "--jobs",
        jobs,
        "--seed",
        &seed_s,
        "--expect-atomic",
        "-T",
        "120s",
        "-P",
        "0.05",
    ]);
    w.wait_acknowledged(acks);
    let truth = if tearable {
        sim.cut_when_tearable(30.0)
    } else {
        sim.cut()
    };
    let run = w.run.clone();
    let (status, out, err) = w.finish();
    assert_eq!(
        status.code(),
        Some(1),
        "the writer saw the cut: {out}\n{err}"
    );
    assert!(err.contains("ended by a device error"), "{err}");
    assert!(
        out.contains(&format!(
            "atomic writes expected: {BS}-byte writes (plain writes)"
        )),
        "{out}"
    );
    assert_eq!(truth.summary.fsynced_at_cut, 0, "torn: fsync destages");
    sim.umount();
    let backing = sim.backing().join("t.dat");
    let (code, v, verr) = verify_json(&l, &["--run", &run, "--target", backing.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "verify exit {code}: {verr}");
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--target",
        backing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(code), "{}", stderr(&o));
    let lines = stdout(&o)
        .lines()
        .filter(|x| x.starts_with("atomic writes"))
        .map(String::from)
        .collect();
    (truth, code, v, lines)
}

/// The human report's two atomic lines: what was expected and claimed, and the answer.
fn check_lines(lines: &[String], v: &Value) {
    assert_eq!(
        lines,
        [
            format!(
                "atomic writes expected: {BS}-byte writes (plain writes); claimed: {}",
                v["atomic"]["claims"].as_str().unwrap()
            ),
            format!(
                "atomic writes: {}",
                v["atomic"]["sentence"].as_str().unwrap()
            ),
        ]
    );
}

/// The blocks the ground truth says a write cached at the cut tore, after checking
/// that every write of the file was one whole 8 KiB block.
fn torn_blocks(truth: &Truth) -> BTreeSet<u64> {
    let mut torn = BTreeSet::new();
    for t in truth.of_file("t.dat") {
        assert_eq!((t.offset % BS, t.len), (0, BS), "{t:?}");
        let k = t.kept_sectors.expect("torn mode reports kept_sectors");
        match t.fate {
            Fate::Torn => {
                assert!(0 < k && k < BS / 512, "{t:?}");
                assert!(torn.insert(t.block(BS)), "two torn writes of one block");
            }
            Fate::Destaged => assert_eq!(k, BS / 512, "{t:?}"),
            Fate::Dropped => assert_eq!(k, 0, "{t:?}"),
            Fate::Misdirected => panic!("torn mode misdirected {t:?}"),
        }
    }
    torn
}

/// Writes cached at the cut that reached the medium whole or in part.
fn kept_writes(truth: &Truth) -> u64 {
    truth
        .of_file("t.dat")
        .filter(|t| matches!(t.fate, Fate::Torn | Fate::Destaged))
        .count() as u64
}

/// `--atomic-unit 8192` with 8 KiB blocks: the truth tears nothing, verify finds
/// nothing torn and passes, and says what the cut saw without claiming atomicity
/// (one cut never says "consistent"). A cut falls between a `pwrite` and its `fdatasync` only now and then, so
/// the cuts repeat until 8 writes were cached at cuts and 3 of them reached the
/// medium (or 150 s passed); at least one write must have been cached at a cut.
#[test]
fn an_atomic_unit_of_8k_tears_no_8k_write_and_the_run_passes() {
    if skip_without_fuse("an_atomic_unit_of_8k_tears_no_8k_write_and_the_run_passes") {
        return;
    }
    let (t0, mut kept_total, mut cached_total, mut cuts) = (Instant::now(), 0, 0, 0);
    for seed in 100..400u64 {
        if cached_total >= 8 && kept_total >= 3 || t0.elapsed().as_secs() >= 150 {
            break;
        }
        cuts += 1;
        let (truth, code, v, lines) =
            cut_with_writer_alive(8192, seed, 150 + 50 * (seed % 4), "12", &[], false);
        check_lines(&lines, &v);
        assert_eq!(torn_blocks(&truth), BTreeSet::new());
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["ok"], json!(true));
        assert_eq!(v["verdicts"]["torn_in_flight"], json!(0));
        assert_eq!(v["findings"], json!([]));
        let a = &v["atomic"];
        assert_eq!(a["unit"], json!(BS));
        assert_eq!(a["mode"], json!("none"));
        assert_eq!(a["torn"], json!(0));
        assert_eq!(a["held"], json!(true));
        // Writes in flight found on the medium: at least the truth's kept ones (a
        // write another job's fdatasync destaged before its own failed counts too).
        let in_flight = a["in_flight"].as_u64().unwrap();
        let kept = kept_writes(&truth);
        assert!(in_flight >= kept, "{in_flight} < {kept}: {v}");
        let sentence = a["sentence"].as_str().unwrap();
        if in_flight > 0 {
            assert_eq!(
                sentence,
                format!(
                    "0 torn of {in_flight} writes in flight at the cut: one cut shows little about \
                     8 KiB atomic writes; the claim is the campaign's bound over its cuts with writes \
                     in flight"
                )
            );
        }
        kept_total += kept;
        cached_total += truth.summary.cached_at_cut;
    }
    eprintln!(
        "atomic 8 KiB: {cached_total} writes cached at {cuts} cuts, {kept_total} reached the medium, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(cached_total > 0, "no write was in flight at {cuts} cuts");
}

/// `--atomic-unit 4096` with 8 KiB blocks: 8 KiB writes are torn at sector
/// boundaries. verify's `torn_in_flight` findings are exactly the truth's torn
/// blocks, each a failure with `--expect-atomic`: exit 1, and the summary says the
/// device tore an 8192-byte write it was expected to write atomically. Cuts repeat
/// until 3 blocks were torn (or 150 s); at least one must be.
#[test]
fn an_atomic_unit_of_4k_tears_8k_writes_exactly_as_the_truth_says_and_fails() {
    if skip_without_fuse("an_atomic_unit_of_4k_tears_8k_writes_exactly_as_the_truth_says_and_fails")
    {
        return;
    }
    let (t0, mut torn_total, mut cuts) = (Instant::now(), 0, 0);
    for seed in 500..800u64 {
        if torn_total >= 3 || t0.elapsed().as_secs() >= 150 {
            break;
        }
        cuts += 1;
        let (truth, code, v, lines) =
            cut_with_writer_alive(4096, seed, 150 + 50 * (seed % 4), "12", &[], false);
        check_lines(&lines, &v);
        let torn = torn_blocks(&truth);
        let found: BTreeSet<u64> = v["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| {
                assert_eq!(f["verdict"], json!("torn_in_flight"), "{f}");
                f["block"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(found, torn, "seed {seed}: torn blocks vs the ground truth");
        assert_eq!(v["verdicts"]["torn_in_flight"], json!(torn.len()));
        assert_eq!(v["atomic"]["torn"], json!(torn.len()));
        let in_flight = v["atomic"]["in_flight"].as_u64().unwrap();
        assert!(in_flight >= kept_writes(&truth), "{v}");
        if torn.is_empty() {
            assert_eq!(code, 0, "{v}");
            assert_eq!(v["atomic"]["held"], json!(true));
        } else {
            assert_eq!(code, 1, "{v}");
            assert_eq!(v["ok"], json!(false));
            assert_eq!(v["atomic"]["held"], json!(false));
            let summary = v["summary"].as_str().unwrap();
            assert!(
                summary.contains(&format!(
                    "{} torn in flight (the device tore an 8192-byte write it was expected to write atomically)",
                    torn.len()
                )),
                "{summary}"
            );
            assert_eq!(
                v["atomic"]["sentence"],
                json!(format!(
                    "the device tore {} of {in_flight} writes in flight at the cut: 8 KiB writes are not atomic on this stack",
                    torn.len()
                ))
            );
        }
        torn_total += torn.len();
    }
    eprintln!(
        "atomic 4 KiB: {torn_total} blocks torn in {cuts} cuts, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(torn_total > 0, "no torn block in {cuts} cuts");
}

/// The rehearsal `docs/atomic.md` gives (issue 41, item 3): `torn --atomic-unit 4096
/// --flush-latency-ms 20`, 8 KiB blocks, 6 jobs. A flush that takes 20 ms keeps each
/// job's write cached while it runs, so a cut finds writes there: within 5 cuts one
/// tears (exit 1), and no cut's sentence says "consistent". Each cut waits for a
/// cached 8 KiB write (`cut --when-tearable`): FUSE runs a file's `fsync` under the
/// lock its writes take, so at most one is cached, and a cut between a `fdatasync` and
/// the next `pwrite` found none (one cut in eight, traced). A write that can tear
/// tears with chance 15/17 (its kept sectors drawn from `0..=16`): no tear in five
/// cuts has a chance of (2/17)^5, 2 in 100,000. The seeds come from the clock (and are
/// printed): with fixed ones the 8 KiB write's draw followed about 100 canary writes'
/// every run, so a seed drew nearly the same outcome run after run.
#[test]
fn the_documented_atomic_rehearsal_tears_within_five_cuts() {
    if skip_without_fuse("the_documented_atomic_rehearsal_tears_within_five_cuts") {
        return;
    }
    let latency = ["--flush-latency-ms", "20"];
    let mut cached = Vec::new();
    let mut failed_at = None;
    // Seeds from the clock, as the documented rehearsal's mount takes (no --seed): a
    // cut's draws follow about 100 canary writes cached before the 8 KiB one, so
    // fixed seeds would give nearly the same draw for it run after run.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let seeds: Vec<u64> = (0..5).map(|i| base.wrapping_add(i)).collect();
    // Printed first, so that any assertion below that fails shows them.
    eprintln!("atomic rehearsal seeds: {seeds:?}");
    for (i, &seed) in seeds.iter().enumerate() {
        let (truth, code, v, lines) = cut_with_writer_alive(4096, seed, 100, "6", &latency, true);
        check_lines(&lines, &v);
        let at_cut = truth.of_file("t.dat").count();
        assert!(at_cut >= 1, "cut --when-tearable: no 8 KiB write cached");
        let sentence = v["atomic"]["sentence"].as_str().unwrap();
        assert!(!sentence.contains("consistent"), "{sentence}");
        cached.push(truth.summary.cached_at_cut);
        let torn = torn_blocks(&truth);
        assert_eq!(v["atomic"]["torn"], json!(torn.len()), "{v}");
        if !torn.is_empty() {
            assert_eq!(code, 1, "{v}");
            failed_at = Some(i + 1);
            break;
        }
        assert_eq!(code, 0, "{v}");
    }
    eprintln!("atomic rehearsal: seeds {seeds:?}, cached at each cut {cached:?}; torn at cut {failed_at:?}");
    assert!(
        failed_at.is_some(),
        "no tear in 5 cuts (seeds {seeds:?}; writes cached at each: {cached:?})"
    );
}
