//! The listener refuses to serve a run still being written to a verifier, whatever path
//! the verifier reads the target by: here the simfs backing file of a target a live
//! writer writes through the mount, which the verifier's own lock check cannot see.
//! Real listener, writer, simfs (FUSE) and verifier.

use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::*;
use serde_json::json;

/// A live writer on a simfs mount; verify reads the backing file (another path to the
/// same data): exit 2 with the listener's refusal, not a verdict. Once the writer is
/// SIGKILLed (its connection closes at once), the same verify passes.
#[test]
fn a_live_run_is_refused_through_another_path() {
    let name = "a_live_run_is_refused_through_another_path";
    if skip_without_fuse(name) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 1);
    let target = sim.mnt().join("pp.dat");
    let backing = sim.backing().join("pp.dat");
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
        "0.2",
    ]);
    w.wait_acknowledged(1);
    let target_arg = backing.to_str().unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &w.run, "--target", target_arg]);
    assert_eq!(code, 2, "{err} {v}");
    let prefix = format!(
        "plugpull: listener {} refused: run {} is still being written: its agent is \
         connected and was last heard from ",
        l.addr(),
        w.run
    );
    let suffix = " ms ago (its acknowledgements, or its heartbeat every 100 ms); verify after the writer has ended (or the machine was cut)";
    let err = err.trim();
    let ms = err
        .strip_prefix(&prefix)
        .and_then(|r| r.strip_suffix(suffix))
        .unwrap_or_else(|| panic!("stderr {err:?} is not {prefix:?}N{suffix:?}"));
    let ms: u64 = ms.parse().unwrap_or_else(|_| panic!("N {ms:?} in {err:?}"));
    assert!(ms < 2000, "{err}");
    let message = err.strip_prefix("plugpull: ").unwrap();
    assert_eq!(v, json!({"ok": false, "error": message}));
    // A SIGKILLed writer's connection closes at once: the run is then served and the
    // honest device, cut, kept every acknowledged write (the canary's cached records
    // went with the cut: the cut is measured).
    sigkill(&mut w.child);
    sim.cut();
    let (code, v, err) = verify_json(&l, &["--run", &w.run, "--target", target_arg]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["ok"], json!(true), "{v}");
    drop(sim);
}

/// The verifier's own check stays behind the listener's: a target whose lock a writer
/// holds (here this test, as a writer the listener does not see appending) is refused
/// with exit 2 even though the run itself has ended.
#[test]
fn a_locked_target_of_an_ended_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run = write_run(&l, &target, "1MiB", &["-T", "1s"]);
    let held = std::fs::File::open(&target).unwrap();
    held.lock().unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2, "{err} {v}");
    let message = format!(
        "target {} is still being written: a plugpull writer holds its lock; \
         verify after the writer has ended (or the machine was cut and rebooted)",
        target.display()
    );
    assert_eq!(err.trim(), format!("plugpull: {message}"));
    assert_eq!(v, json!({"ok": false, "error": message}));
    held.unlock().unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["ok"], json!(true), "{v}");
}
