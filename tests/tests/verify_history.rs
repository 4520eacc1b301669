//! `plugpull verify --history` end to end: runs cut by hand on the power-cut simulator,
//! each verified by `plugpull verify` (which keeps its outcome at the listener), then
//! judged as cuts and rolled up. The boots are simulated (`PLUGPULL_SIMULATED_BOOT_ID`):
//! a verify from another boot than the run's is a verify after a power loss.

use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::*;
use serde_json::{json, Value};
use std::process::{Command, Output};

const BOOT: &str = "PLUGPULL_SIMULATED_BOOT_ID";

/// A file run on the mount, in simulated boot `boot`, SIGKILLed once `acks` are
/// confirmed; returns its id.
fn run(l: &Listener, sim: &SimFs, boot: &str, acks: u64) -> String {
    let target = sim.mnt().join("t.dat");
    let mut w = Writer::spawn_env(
        &[
            "write",
            "file",
            "--listener",
            l.addr(),
            "--size",
            "1MiB",
            "--duration",
            "120s",
            "--progress",
            "0.05",
            "--target",
            target.to_str().unwrap(),
        ],
        &[(BOOT, boot)],
    );
    w.wait_acknowledged(acks);
    sigkill(&mut w.child);
    w.run
}

/// `plugpull verify --listener L ARGS` in simulated boot `boot`.
fn verify(l: &Listener, boot: &str, args: &[&str]) -> Output {
    Command::new(bin("plugpull"))
        .args(["verify", "--listener", l.addr()])
        .args(args)
        .env(BOOT, boot)
        .env_remove("PLUGPULL_SECRET")
        .output()
        .unwrap()
}

/// A run on a lying disk cut and verified after a (simulated) reboot: valid, failed.
/// One on an honest disk cut and verified after a reboot: valid, passed. One whose
/// writer was only killed, verified in the same boot: not measured. The history rolls
/// them up as a campaign would: 1 failed of 2 valid.
#[test]
fn the_history_judges_each_run_as_a_cut_by_hand() {
    if skip_without_fuse("the_history_judges_each_run_as_a_cut_by_hand") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount_with(dir.path(), "lying", 9, &["--destage-delay-ms", "2000"]);

    let a = run(&l, &sim, "boot-1", 2000);
    sim.cut();
    sim.remount("honest");
    let o = verify(&l, "boot-2", &["--run", &a]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));

    let b = run(&l, &sim, "boot-2", 2000);
    sim.cut();
    sim.remount("honest");
    let o = verify(&l, "boot-3", &["--run", &b]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));

    let c = run(&l, &sim, "boot-3", 500);
    let o = verify(&l, "boot-3", &["--run", &c]);
    // No power was cut: simfs still holds the canary's records (its destage delay
    // passed, or they are still cached and readable), so verify itself says so.
    assert_eq!(o.status.code(), Some(2), "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("NOT MEASURED: the canary survived the cut"),
        "{}",
        stdout(&o)
    );
    sim.umount();

    let o = verify(&l, "boot-3", &["--history", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = v["runs"].as_array().unwrap();
    let got: Vec<(&str, &str, Option<bool>)> = runs
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap(),
                r["validity"].as_str().unwrap(),
                r["verdict"]["failed"].as_bool(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (a.as_str(), "valid", Some(true)),
            (b.as_str(), "valid", Some(false)),
            (c.as_str(), "not measured", None),
        ]
    );
    // Its own verify said why it measured nothing: the canary.
    let reason = runs[2]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("NOT MEASURED: the canary survived the cut"),
        "{reason}"
    );
    assert_eq!(
        v["roll_up"],
        json!({"cuts": 3, "valid": 2, "not_measured": 1, "invalid": 0, "failed": 1, "passed": 1})
    );
    let want = plugpull::stats::failure_rate(1, 2, 0.95).unwrap().unwrap();
    let upper = v["bound"]["upper"].as_f64().unwrap();
    assert!((upper - want.upper).abs() < 1e-12, "{v}");

    // The text: one line per run, then the roll-up and the bound.
    let o = verify(&l, "boot-3", &["--history"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let tail: Vec<&str> = out.lines().rev().take(2).collect();
    assert_eq!(
        tail,
        vec![
            want.sentence().as_str(),
            "3 cuts: 2 valid (1 failed, 1 passed), 1 not measured, 0 invalid",
        ]
    );
    // Cut by hand: no driver, no drawn delay.
    let by_hand = format!(" {:<16} {:>7} ", "by hand", "-");
    assert_eq!(out.matches(&by_hand).count(), 3, "{out}");
    assert!(
        !out.contains("hand (hand)") && !out.contains(" 0.0s "),
        "{out}"
    );

    // A host with no run: exit 2, named; with --json one object saying so.
    let o = verify(&l, "boot-3", &["--history", "--host", "nosuch", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["error"],
        json!("no run of host nosuch is recorded at this listener (a run's host is the `host` of `plugpull verify --run ID --json`)")
    );
}
