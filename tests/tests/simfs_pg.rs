//! PostgreSQL on the power-cut simulator: a cluster whose data directory lives on a
//! `plugpull-simfs` mount, `plugpull write pgbench` under load, a cut, the whole
//! server killed with it, unmount, mount again (honest), crash recovery, and
//! `plugpull verify --json`.
//!
//! Order at each cut, as in `tests/simfs/`: the agent is SIGKILLed first (so it
//! never sees the server fail and every ack it made is judged), then the power is
//! cut, then every PostgreSQL process is SIGKILLed (the postmaster is stopped first
//! so it cannot fork meanwhile; its pid was read from `postmaster.pid` through the
//! mount before the cut — after the cut the mount answers EIO, and on a lying device
//! the backing file may not hold the pid yet).
//!
//! * `honest`: 10 cuts on one cluster — recovery always succeeds, not one
//!   acknowledged commit is lost, the balance invariant holds, amcheck is clean.
//! * `lying`: fsync returns before the data is durable — never `ok`: either
//!   acknowledged commits are lost, or PostgreSQL does not recover (reported as
//!   such, with its log).

use plugpull_tests::pg::{expected_counts, report_counts, PgCluster};
use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::*;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// Starts `plugpull write pgbench` and returns once it printed its run id (after
/// `--init`); its volatile canary goes on the simfs mount `canary`, with the data
/// directory, so the cut takes it as it takes PostgreSQL's unsynced writes.
fn start_pg_writer(l: &Listener, dsn: &str, init: bool, seed: u64, canary: &Path) -> Writer {
    let seed = seed.to_string();
    let mut args = vec![
        "write",
        "pgbench",
        "--canary-dir",
        canary.to_str().unwrap(),
        "--listener",
        l.addr(),
        "--dsn",
        dsn,
        "--scale",
        "1",
        "--clients",
        "4",
        "--jobs",
        "2",
        "--duration",
        "120s",
        "--progress",
        "1",
        "--random-seed",
        &seed,
    ];
    if init {
        args.push("--init");
    }
    Writer::spawn(&args)
}

/// Waits for `lines` progress lines, the last one reporting at least one commit
/// confirmed by the listener; returns the confirmed count.
fn wait_progress(w: &mut Writer, lines: u32) -> u64 {
    let mut seen = 0;
    let line = w.wait_stderr(|l| {
        progress_acknowledged(l).is_some_and(|n| {
            seen += 1;
            seen >= lines && n > 0
        })
    });
    progress_acknowledged(line.trim_end()).unwrap()
}

/// The postmaster's pid from `postmaster.pid` (read through the mount, before the cut).
fn postmaster_pid(data: &Path) -> u32 {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).expect("postmaster.pid");
    text.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("postmaster.pid says {text:?}"))
}

/// One cut: agent SIGKILLed, power cut, PostgreSQL SIGKILLed, remount honest.
/// Returns the ground truth.
fn cut(sim: &mut SimFs, w: &mut Writer, postmaster: u32) -> plugpull_simfs::truth::Truth {
    sigkill(&mut w.child);
    let truth = sim.cut();
    plugpull_tests::pg::kill_postgres(postmaster);
    sim.remount("honest");
    eprintln!(
        "cut: {} writes, {} cached ({} fsynced); {} metadata operations, {} not kept",
        truth.summary.writes_total,
        truth.summary.cached_at_cut,
        truth.summary.fsynced_at_cut,
        truth.summary.meta_ops,
        truth.summary.meta_lost
    );
    truth
}

/// An honest device: 10 cuts under load, each followed by crash recovery and a
/// verification that finds every acknowledged commit and a consistent database.
#[test]
fn postgres_on_an_honest_device_survives_ten_cuts() {
    if skip_without_fuse("postgres_on_an_honest_device_survives_ten_cuts")
        || PgCluster::skip("postgres_on_an_honest_device_survives_ten_cuts")
    {
        return;
    }
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 7);
    let data = sim.mnt().join("pg").join("data");
    let mut pg = PgCluster::init_at(&data);
    pg.start();
    for i in 0..10u64 {
        let pid = postmaster_pid(&data);
        let mut w = start_pg_writer(&l, &pg.conninfo(), i == 0, i, sim.mnt());
        let confirmed = wait_progress(&mut w, 1 + (i % 2) as u32);
        let truth = cut(&mut sim, &mut w, pid);
        // The metadata journal is on (posix rules, the default): the run made
        // metadata operations, and every one an fsync made durable survived.
        assert_eq!(truth.summary.metadata, "posix", "cut {i}");
        assert!(truth.summary.meta_ops > 0, "cut {i}");
        let broken: Vec<_> = truth
            .meta
            .iter()
            .filter(|m| m.synced && m.fate == plugpull_simfs::truth::MetaFate::Lost)
            .collect();
        assert_eq!(
            broken,
            Vec::<&plugpull_simfs::truth::TruthMeta>::new(),
            "cut {i}"
        );
        pg.try_start().unwrap_or_else(|e| {
            panic!("cut {i}: PostgreSQL did not recover on an honest device: {e}")
        });
        let (code, v, err) = verify_json(&l, &["--run", &w.run, "--dsn", &pg.conninfo()]);
        assert_eq!(code, 0, "cut {i}: {err}\n{v}");
        assert_eq!(report_counts(&v), expected_counts(&[]), "cut {i}: {v}");
        let acked = v["acknowledged_commits"].as_u64().unwrap();
        assert!(
            acked >= confirmed,
            "cut {i}: {acked} acknowledged < {confirmed} confirmed"
        );
        assert!(
            v["present_commits"].as_u64().unwrap() >= acked,
            "cut {i}: {v}"
        );
        eprintln!(
            "cut {i}: {acked} acknowledged commits, all present; {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    pg.stop();
    sim.umount();
}

/// A lying device: every cut under load loses acknowledged commits or leaves a
/// database PostgreSQL cannot recover — `verify` is never `ok`.
#[test]
fn postgres_on_a_lying_device_is_caught() {
    if skip_without_fuse("postgres_on_a_lying_device_is_caught")
        || PgCluster::skip("postgres_on_a_lying_device_is_caught")
    {
        return;
    }
    for seed in [1u64, 2, 3] {
        let t0 = Instant::now();
        let dir = tempfile::tempdir().unwrap();
        let l = Listener::start(dir.path());
        let mut sim = SimFs::mount(dir.path(), "lying", seed);
        let data = sim.mnt().join("pg").join("data");
        let mut pg = PgCluster::init_at(&data);
        pg.start();
        let pid = postmaster_pid(&data);
        let mut w = start_pg_writer(&l, &pg.conninfo(), true, seed, sim.mnt());
        // Load for a few seconds: what the cut drops (the last ~2 s destage delay)
        // then holds commits acknowledged long before it.
        wait_progress(&mut w, 3);
        cut(&mut sim, &mut w, pid);
        let started = pg.try_start();
        let (code, v, err) = if started.is_ok() {
            verify_json(&l, &["--run", &w.run, "--dsn", &pg.conninfo()])
        } else {
            let log = pg.log.to_str().unwrap().to_string();
            verify_json(
                &l,
                &[
                    "--run",
                    &w.run,
                    "--dsn",
                    &pg.conninfo(),
                    "--pg-wait",
                    "1s",
                    "--pg-log",
                    &log,
                ],
            )
        };
        assert_eq!(code, 1, "seed {seed}: {err}\n{v}");
        assert_eq!(v["ok"], json!(false), "seed {seed}: {v}");
        match &started {
            Ok(()) => {
                assert_eq!(v["server_reachable"], json!(true));
                assert!(
                    v["lost_commits"].as_u64().unwrap() > 0,
                    "seed {seed}: recovered, but no lost commit counted: {v}"
                );
            }
            Err(e) => {
                assert_eq!(v["server_reachable"], json!(false), "seed {seed}: {v}");
                assert!(
                    v["findings"][0]["kind"] == json!("server_unavailable"),
                    "seed {seed}: {v}"
                );
                eprintln!("seed {seed}: PostgreSQL did not recover: {e}");
            }
        }
        eprintln!(
            "lying seed {seed}: {} — {:.1} s",
            v["summary"].as_str().unwrap_or_default(),
            t0.elapsed().as_secs_f64()
        );
        if started.is_ok() {
            pg.stop();
        }
        sim.umount();
    }
}

/// Issue 14's finding: PostgreSQL (15) fsyncs a new relation file at the checkpoint
/// but never its directory (`base/DBOID/`). With the metadata rules of POSIX alone
/// (`--metadata posix`) the files `pgbench -i` created are lost at a cut after a
/// checkpoint, and crash recovery, which replays only the WAL after it, cannot
/// bring them back whole: verify fails on an honest device. With the rules of ext4
/// and XFS (`--metadata journal`: a file's fsync commits its directory entry too)
/// the same sequence passes.
#[test]
fn relation_files_pgbench_created_survive_a_checkpoint_only_with_journal_rules() {
    let name = "relation_files_pgbench_created_survive_a_checkpoint_only_with_journal_rules";
    if skip_without_fuse(name) || PgCluster::skip(name) {
        return;
    }
    for metadata in ["posix", "journal"] {
        let dir = tempfile::tempdir().unwrap();
        let l = Listener::start(dir.path());
        let mut sim = SimFs::mount_with(dir.path(), "honest", 5, &["--metadata", metadata]);
        // The canary on a simfs of its own, cut with the first: simfs has one cache
        // for what a host holds in its page cache and what a disk holds in its own,
        // and with journal rules every fsync (PostgreSQL's WAL) destages all of it,
        // which a real flush never does to another file's dirty pages.
        let cdir = dir.path().join("canary");
        std::fs::create_dir(&cdir).unwrap();
        // It keeps what it caches for a minute: PostgreSQL's kill after the cut takes
        // seconds, and the canary's unsynced records must still be cached when it is
        // cut.
        let mut csim = SimFs::mount_with(&cdir, "honest", 6, &["--destage-delay-ms", "60000"]);
        let data = sim.mnt().join("pg").join("data");
        let mut pg = PgCluster::init_at(&data);
        pg.start();
        let pid = postmaster_pid(&data);
        let mut w = start_pg_writer(&l, &pg.conninfo(), true, 5, csim.mnt());
        wait_progress(&mut w, 1);
        pg.psql("CHECKPOINT");
        wait_progress(&mut w, 1);
        let truth = cut(&mut sim, &mut w, pid);
        csim.cut();
        csim.remount("honest");
        let lost: Vec<&str> = truth
            .meta
            .iter()
            .filter(|m| m.op == "create" && is_relation_file(&m.path))
            .filter(|m| m.fate != plugpull_simfs::truth::MetaFate::Kept)
            .map(|m| m.path.as_str())
            .collect();
        let started = pg.try_start();
        let log = pg.log.to_str().unwrap().to_string();
        let (code, v, err) = verify_json(
            &l,
            &[
                "--run",
                &w.run,
                "--dsn",
                &pg.conninfo(),
                "--pg-wait",
                "1s",
                "--pg-log",
                &log,
            ],
        );
        eprintln!(
            "{metadata}: {} relation files lost ({lost:?}); recovery {started:?}; {}",
            lost.len(),
            v["summary"].as_str().unwrap_or_default()
        );
        if metadata == "posix" {
            assert!(!lost.is_empty(), "{metadata}: {:?}", truth.meta.len());
            assert_eq!(code, 1, "{metadata}: {err}\n{v}");
            assert_eq!(v["ok"], json!(false), "{metadata}: {v}");
        } else {
            assert_eq!(lost, Vec::<&str>::new(), "{metadata}");
            assert_eq!(code, 0, "{metadata}: {err}\n{v}");
            assert_eq!(v["ok"], json!(true), "{metadata}: {v}");
        }
        if started.is_ok() {
            pg.stop();
        }
        sim.umount();
        csim.umount();
    }
}

/// Whether `path` is a relation file's main fork: `pg/data/base/DBOID/RELFILENODE`.
fn is_relation_file(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.len() == 5
        && parts[..3] == ["pg", "data", "base"]
        && parts[3..]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}
