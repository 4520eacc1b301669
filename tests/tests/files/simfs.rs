//! The files workload on simfs, cut under load: honest mode passes; lying mode's
//! findings are exactly the names whose acknowledged content the ground truth says
//! was dropped, or whose fsynced metadata (create, rename, unlink, size) the
//! metadata journal (`--metadata posix`, the default) undid.

use super::files_acks;
use plugpull::verdict::files::schedule::{file_name, Schedule, Unsafe, BLOCK};
use plugpull_tests::simfs::*;
use plugpull_tests::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const JOBS: u32 = 2;
const FILES: u32 = 16;

/// A files run on simfs in `mode` in a directory that predates the mount, SIGKILLed
/// once `acks` steps are confirmed, then the power cut: the ground truth, the run's
/// acks and `verify --json` on what survived.
fn cut_run(
    mode: &str,
    seed: u64,
    acks: u64,
) -> (Truth, Vec<plugpull::ledger::FilesAck>, i32, Value) {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    // The run's directory is made on the backing store before the mount, so the cut
    // cannot drop it (a cut that does is `a_lying_cut_that_drops_the_directory_…`).
    std::fs::create_dir_all(dir.path().join("backing").join("d")).unwrap();
    let mut sim = SimFs::mount(dir.path(), mode, seed);
    let target = sim.mnt().join("d");
    let seed_s = seed.to_string();
    let mut w = Writer::spawn(&[
        "write",
        "files",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "-j",
        "2",
        "--files",
        "16",
        "-T",
        "120s",
        "-P",
        "0.05",
        "--seed",
        &seed_s,
        // A small in-flight window: at most 1 ack waits for the listener.
        "--max-unconfirmed",
        "1",
    ]);
    w.wait_acknowledged(acks);
    sigkill(&mut w.child);
    let truth = sim.cut();
    sim.umount();
    let backing = sim.backing().join("d");
    let (code, v, err) = verify_json(
        &l,
        &["--run", &w.run, "--target", backing.to_str().unwrap()],
    );
    assert!(code == 0 || code == 1, "{err}");
    (truth, files_acks(&l.ledger_path(&w.run)), code, v)
}

/// The names whose acknowledged content the ground truth says was lost: a write the
/// application had fsynced that did not reach the backing store, the newest write
/// cached at the cut over its block, inside the name's promised size.
fn lost_by_truth(truth: &Truth, acks: &[plugpull::ledger::FilesAck]) -> BTreeSet<String> {
    let mut promised: BTreeMap<String, u64> = BTreeMap::new();
    for a in acks {
        promised.insert(file_name(a.file, JOBS), if a.exists { a.size } else { 0 });
    }
    let mut newest: BTreeMap<(String, u64), &TruthWrite> = BTreeMap::new();
    for t in &truth.writes {
        let Some(name) = t.file.strip_prefix("d/") else {
            continue;
        };
        for b in t.offset / BLOCK..(t.offset + t.len).div_ceil(BLOCK) {
            newest.insert((name.to_string(), b), t);
        }
    }
    newest
        .into_iter()
        .filter(|((name, b), t)| {
            t.fsynced
                && t.fate != Fate::Destaged
                && promised.get(name).is_some_and(|&size| b * BLOCK < size)
        })
        .map(|((name, _), _)| name)
        .collect()
}

/// The workload's names (`d/NAME`, a `NAME.tmp` counted as `NAME`) with a metadata
/// operation a durability call had covered (`synced`) that the cut undid.
fn meta_lost_by_truth(truth: &Truth) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in truth
        .meta
        .iter()
        .filter(|m| m.synced && m.fate != MetaFate::Kept)
    {
        for p in std::iter::once(&m.path).chain(m.to.iter()) {
            if let Some(name) = p.strip_prefix("d/") {
                out.insert(name.trim_end_matches(".tmp").to_string());
            }
        }
    }
    out
}

/// The names a step after each worker's last acknowledged one may have touched (the
/// verifier's in-flight window of 3 steps).
fn in_window(acks: &[plugpull::ledger::FilesAck], seed: u64) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for j in 0..JOBS {
        let last = acks
            .iter()
            .filter(|a| (a.seq - 1) % u64::from(JOBS) == u64::from(j))
            .map(|a| (a.seq - 1) / u64::from(JOBS))
            .max();
        let mut s = Schedule::new(seed, JOBS, j, FILES, Unsafe::default());
        let first = last.map_or(0, |k| k + 1);
        for k in 0..first + 3 {
            let st = s.next_step().unwrap();
            if k >= first {
                out.insert(file_name(st.file, JOBS));
            }
        }
    }
    out
}

fn finding_names(v: &Value) -> BTreeSet<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_honest_simfs_cut_under_load_passes() {
    if skip_without_fuse("an_honest_simfs_cut_under_load_passes") {
        return;
    }
    let (truth, acks, code, v) = cut_run("honest", 11, 200);
    assert_eq!(
        truth.summary.fsynced_at_cut, 0,
        "honest: nothing fsynced is cached at the cut"
    );
    assert!(acks.len() >= 200);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["ok"], Value::Bool(true));
    assert_eq!(v["findings"], serde_json::json!([]));
}

#[test]
fn a_lying_simfs_cut_loses_exactly_the_names_the_ground_truth_dropped() {
    if skip_without_fuse("a_lying_simfs_cut_loses_exactly_the_names_the_ground_truth_dropped") {
        return;
    }
    let mut meta_only = 0;
    for seed in [12, 13, 14] {
        let (truth, acks, code, v) = cut_run("lying", seed, 300);
        let lost = lost_by_truth(&truth, &acks);
        let meta = meta_lost_by_truth(&truth);
        let found = finding_names(&v);
        meta_only += found.difference(&lost).count();
        assert!(
            !lost.is_empty(),
            "seed {seed}: the lying device dropped nothing acknowledged: {:?}",
            truth.summary
        );
        assert_eq!(code, 1, "{v}");
        // Every finding is a name whose acknowledged content the device dropped, or
        // one a metadata operation the workload had fsynced was undone on …
        let explained: BTreeSet<String> = lost.union(&meta).cloned().collect();
        assert!(
            found.is_subset(&explained),
            "seed {seed}: findings {found:?} beyond the ground truth's {lost:?} and {meta:?}"
        );
        // … and every such name is found, unless a step in flight at the cut may explain it.
        let window = in_window(&acks, seed);
        let missed: BTreeSet<_> = lost
            .difference(&found)
            .filter(|n| !window.contains(*n))
            .collect();
        assert!(
            missed.is_empty(),
            "seed {seed}: dropped by the device, not found: {missed:?} (findings {found:?})"
        );
    }
    // The metadata journal is on (posix, the default): names lost by their metadata
    // alone (an fsynced create, rename, unlink or size undone) are found too.
    assert!(meta_only > 0, "no finding came from metadata alone");
}

#[test]
fn a_lying_cut_that_drops_the_directory_itself_loses_every_name_it_held() {
    if skip_without_fuse("a_lying_cut_that_drops_the_directory_itself_loses_every_name_it_held") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    // Nothing destages before the cut: the mkdir of the run's directory, fsynced in
    // its parent (the mount's root), is dropped with everything under it.
    let mut sim = SimFs::mount_with(dir.path(), "lying", 15, &["--destage-delay-ms", "600000"]);
    let target = sim.mnt().join("d");
    let o = plugpull(&[
        "write",
        "files",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "-j",
        "2",
        "--files",
        "16",
        "--steps",
        "200",
        "--seed",
        "15",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    let truth = sim.cut();
    let mkdir: Vec<_> = truth
        .meta
        .iter()
        .filter(|m| m.op == "mkdir" && m.path == "d")
        .collect();
    assert_eq!(mkdir.len(), 1, "{:?}", truth.meta);
    assert!(
        mkdir[0].synced && mkdir[0].fate != MetaFate::Kept,
        "{:?}",
        mkdir[0]
    );
    // Power back: the same filesystem mounted at the same place, the directory gone.
    sim.remount("honest");
    assert!(!target.exists());
    let acks = files_acks(&l.ledger_path(&run));
    let mut last: BTreeMap<u32, bool> = BTreeMap::new();
    for a in &acks {
        last.insert(a.file, a.exists);
    }
    let present = last.values().filter(|e| **e).count() as u64;
    assert!(present > 0);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["verdicts"]["lost_file"], Value::from(present), "{v}");
    assert_eq!(v["verdicts"]["intact"], Value::from(16 - present), "{v}");
    assert_eq!(v["findings_total"], Value::from(present), "{v}");
    let gone = v["directory_gone"].as_str().unwrap();
    assert!(
        gone.starts_with(&format!(
            "the run's directory is gone: {} does not exist on its filesystem, fuse from plugpull-simfs:honest mounted at {} (",
            target.display(),
            sim.mnt().display()
        )),
        "{gone}"
    );
    // Verified through the backing store instead, the same loss is not the run's to
    // judge: the path named with --target is not the run's directory.
    sim.umount();
    // With the filesystem not mounted, the mount point's directory is on another one:
    // not the run's to judge either.
    let (code, _, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "directory {} of directory {} is on ",
            sim.mnt().display(),
            target.display()
        )) && err.contains("— not mounted?"),
        "{err}"
    );
    let backing = sim.backing().join("d");
    let (code, _, err) = verify_json(&l, &["--run", &run, "--target", backing.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("(given with --target) does not exist; the run wrote "),
        "{err}"
    );
}
