//! The pgbench workload inside a guest: PostgreSQL (the host's server binaries, the
//! bundle's PostgreSQL variant) on ext4 on the guest's virtio disk, its cluster made
//! on the host in the image, `plugpull write pgbench` in the guest against it, the
//! whole machine cut, then the image loop-mounted on the host (ext4 replays its
//! journal), PostgreSQL started on it (crash recovery) and `plugpull verify` judging
//! the run. Each verdict is checked against an independent count: the commits the
//! ledger holds against the run's tags a `SELECT` finds in the recovered cluster.

use super::files::{acked_run, assert_cut_measured, guest, port};
use super::skip_without_vm;
use crate::power::ok;
use plugpull_client::rig::vm::{self, machine, pg, qemu};
use plugpull_tests::pg::{bin_dir, expected_counts, psql, report_counts, PgCluster};
use plugpull_tests::{bin, ledger_file, verify_json, wait_for, Listener};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The guest's load: 2 clients, until the cut.
const LOAD: &str = "--clients 2 --duration 1h --protocol prepared";

/// Commits acknowledged before a cut (the lying disk's: well past its destage delay,
/// so that some commits were destaged and some not).
const ACKS: u64 = 100;
const LYING_ACKS: u64 = 300;

/// The bundle with PostgreSQL's server, and the guest for `image` running the
/// pgbench workload against `l`.
fn spec(image: PathBuf, l: &Listener) -> qemu::Spec {
    let pgbin = bin_dir().expect("PostgreSQL");
    let b = vm::bundle_with(&bin("plugpull"), &pg::extra(&pgbin).unwrap()).expect("bundle");
    guest(b, image, pg::pgbench_settings(port(l), LOAD, "hang"))
}

/// Whether the test cannot run here (after a loud SKIPPED line): no guest, or no
/// PostgreSQL.
fn skip(test: &str) -> bool {
    skip_without_vm(test) || PgCluster::skip(test)
}

/// The recovered cluster's verdict on `run` (image `image`, mounted under `tmp`; the
/// guest's console `console` printed for the log): verify's exit code and JSON
/// report, and, when PostgreSQL started on the image, the commits the ledger holds
/// that the cluster has no tag of (the independent count).
fn judge(
    image: &Path,
    tmp: &Path,
    l: &Listener,
    run: &str,
    console: &Path,
) -> (i32, Value, Option<u64>) {
    let text = std::fs::read_to_string(console).unwrap_or_default();
    eprintln!("{}:\n{text}", console.display());
    let pgbin = bin_dir().unwrap();
    let rec = pg::Recovered::start(image, &tmp.join("host"), &pgbin, &tmp.join("rec")).unwrap();
    let dsn = rec.cluster.conninfo_db("postgres");
    let (canary, log) = (rec.canary_dir(), rec.cluster.log.clone());
    let data = rec.cluster.data.clone();
    let args = [
        "--run",
        run,
        "--dsn",
        &dsn,
        "--canary-dir",
        canary.to_str().unwrap(),
        "--pg-log",
        log.to_str().unwrap(),
        "--pgdata",
        data.to_str().unwrap(),
        "--pg-wait",
        "30s",
    ];
    let (code, report, err) = verify_json(l, &args);
    eprintln!("exit {code}; {}; {err}", report["summary"]);
    let lost = rec.started.is_ok().then(|| {
        let sql = format!(
            "SELECT substr(filler, 9, 4)::int || ' ' || substr(filler, 13, 10)::bigint \
             FROM pgbench_history WHERE filler LIKE '{}%'",
            &run[8..]
        );
        let text = psql(&rec.cluster, "postgres", &sql).unwrap();
        let present: BTreeSet<(u32, u64)> = text
            .lines()
            .map(|l| {
                let (c, s) = l.split_once(' ').unwrap();
                (c.parse().unwrap(), s.parse().unwrap())
            })
            .collect();
        let acked = ledger_file::pg_commits(&l.ledger_path(run));
        assert_eq!(
            report["acknowledged_commits"],
            json!(acked.len()),
            "{report}"
        );
        acked.difference(&present).count() as u64
    });
    rec.finish().unwrap();
    (code, report, lost)
}

/// A machine in `tmp/vm` whose image, holding a new cluster (`conf`: more
/// `postgresql.conf` lines), sits on a simfs mount in `mode` (destage after 1 s), its
/// guest running the pgbench workload against `l`, turned on; its directory, URI and
/// the image as the host keeps it.
fn simfs_machine(
    tmp: &Path,
    l: &Listener,
    mode: &str,
    seed: u64,
    conf: &str,
) -> (PathBuf, String, PathBuf) {
    let sd = machine::SimDisk {
        bin: bin("plugpull-simfs"),
        mode: mode.into(),
        seed,
        args: vec!["--destage-delay-ms".into(), "1000".into()],
    };
    let root = tmp.join("vm");
    let dir = machine::create(&root, &spec(root.join("disk/disk.img"), l), Some(sd)).unwrap();
    let image = dir.join("backing/disk.img");
    let pgbin = bin_dir().unwrap();
    pg::make_pg_image(&image, 256, &pgbin, &tmp.join("mk"), conf).unwrap();
    let uri = format!("qemu://{}", dir.display());
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, vm)\n"));
    (dir, uri, image)
}

/// A plain image keeps every write QEMU completed: PostgreSQL recovers every
/// acknowledged commit, so verify passes (exit 0), no commit lost by its count or
/// by the independent one, the balances consistent, amcheck clean; and the PASS
/// carries its evidence: the cut measured, the canary lost with the guest's memory.
#[test]
fn honest_image_keeps_every_acknowledged_commit() {
    let test = "vm::pgbench::honest_image_keeps_every_acknowledged_commit";
    if skip(test) {
        return;
    }
    let _guests = super::light();
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let image = tmp.path().join("disk.img");
    let pgbin = bin_dir().unwrap();
    pg::make_pg_image(&image, 256, &pgbin, &tmp.path().join("mk"), "").unwrap();
    let mut g = qemu::Vm::start(&spec(image.clone(), &l), tmp.path()).unwrap();
    let run = acked_run(&g.console, &l, ACKS);
    g.kill();
    let (code, report, lost) = judge(&image, tmp.path(), &l, &run, &g.console);
    assert_eq!(lost, Some(0), "{report}");
    assert_eq!(report_counts(&report), expected_counts(&[]), "{report}");
    assert_eq!(code, 0, "{report}");
    assert_cut_measured(&report);
    assert!(
        report["summary"].as_str().unwrap().starts_with("PASS: "),
        "{report}"
    );
}

/// The image on a lying simfs mount (fsync returns at once, destage after 1 s), cut
/// through `qemu://` (QEMU killed, simfs cut at once): the WAL of the last seconds
/// is gone under the guest's ext4, PostgreSQL recovers to an earlier commit, and
/// verify fails (exit 1) with exactly the commits the ledger holds and the cluster
/// does not, and nothing else: no ordering violation, the balances consistent.
#[test]
fn lying_image_loses_acknowledged_commits() {
    let test = "vm::pgbench::lying_image_loses_acknowledged_commits";
    if skip(test) || plugpull_tests::simfs::skip_without_fuse(test) {
        return;
    }
    let _guests = super::light();
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let (dir, uri, image) = simfs_machine(tmp.path(), &l, "lying", 5, "");
    let console = dir.join("console.log");
    let run = acked_run(&console, &l, LYING_ACKS);
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    let (code, report, lost) = judge(&image, tmp.path(), &l, &run, &console);
    let lost = lost.expect("PostgreSQL started on the image");
    let acked = report["acknowledged_commits"].as_u64().unwrap();
    assert!(0 < lost && lost < acked, "{report}");
    let expected = expected_counts(&[("lost_commits", json!(lost)), ("ok", json!(false))]);
    assert_eq!(report_counts(&report), expected, "{report}");
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        report["summary"].as_str().unwrap(),
        format!("FAIL: {lost} lost commits out of {acked} acknowledged commits"),
        "{report}"
    );
}

/// The checkpoint window: simfs's `reorder` mode (each write destaged 0–2 s after
/// it came, in no order; fsync returns at once) under the image, a timed checkpoint
/// 30 s after PostgreSQL started (`checkpoint_timeout = 30s`, written at once), the
/// machine cut 1 s after the guest logged "checkpoint complete": the checkpoint's
/// pages, its WAL record and `pg_control` are each kept or lost at random, with the
/// WAL of the last commits. What PostgreSQL makes of it varies with which survived
/// (lost commits only; damaged data: amcheck corruptions and a broken balance
/// invariant; a server that cannot start), but never a PASS: verify fails (exit 1)
/// with lost commits or a server that did not come up, and names no kind a lost
/// write cannot cause (duplicates, phantoms, malformed tags).
#[test]
fn checkpoint_in_the_lost_window_fails() {
    let test = "vm::pgbench::checkpoint_in_the_lost_window_fails";
    if skip(test) || plugpull_tests::simfs::skip_without_fuse(test) {
        return;
    }
    let _guests = super::light();
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let conf = "checkpoint_timeout = 30s\ncheckpoint_completion_target = 0\n";
    let (dir, uri, image) = simfs_machine(tmp.path(), &l, "reorder", 8, conf);
    let console = dir.join("console.log");
    let run = acked_run(&console, &l, 10);
    let done = wait_for(Duration::from_secs(120), || {
        std::fs::read_to_string(&console).is_ok_and(|t| t.contains("checkpoint complete"))
    });
    assert!(done, "no checkpoint within 120 s");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    let (code, report, lost) = judge(&image, tmp.path(), &l, &run, &console);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["ok"], json!(false), "{report}");
    let summary = report["summary"].as_str().unwrap();
    assert!(summary.starts_with("FAIL: "), "{report}");
    for kind in [
        "duplicates",
        "phantoms",
        "malformed_tags",
        "unpromised_lost",
    ] {
        assert_eq!(report[kind], json!(0), "{kind}: {report}");
    }
    match lost {
        // PostgreSQL started: commits were lost, and where the data is whole (the
        // invariant holds, amcheck clean) exactly those the independent count finds.
        Some(lost) => {
            assert!(report["lost_commits"].as_u64().unwrap() > 0, "{report}");
            let whole = report["invariant"]["holds"] == json!(true)
                && report["amcheck"]["corruptions"] == json!(0);
            if whole {
                assert_eq!(report["lost_commits"], json!(lost), "{report}");
            }
        }
        None => assert_eq!(report["server_reachable"], json!(false), "{report}"),
    }
}
