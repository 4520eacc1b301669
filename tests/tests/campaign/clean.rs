//! Issue 42, item 1: a clean shutdown is no power cut. The simulated machine behind
//! an `exec:` driver whose "off" stops the agent, lets the disk write its cache out
//! (what a shutdown's sync gives a disk that honours it, and the time a lying one
//! needs), then cuts: nothing volatile is left to lose, the canary survives, and
//! every cut is "not measured" — never a valid PASS.

use super::*;
use plugpull_tests::simfs::skip_without_fuse;

/// Three cuts of a lying disk, each a clean shutdown: 0 valid, 3 not measured
/// ("the canary survived the cut"), and the campaign exits 2: nothing measured.
#[test]
fn a_clean_shutdown_campaign_measures_nothing() {
    if skip_without_fuse("a_clean_shutdown_campaign_measures_nothing") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat"]);
    let m = super::sim::machine(&w, "sim1", "lying", 41);
    let shutdown = script(
        &w.path("sim1"),
        "shutdown-power",
        &format!(
            "M={mnt}\nD={dir}\nPP={pp}\ncase \"$1\" in\noff)\n  P=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(\"boot_pgid\") or \"\")' $D/machine-state.json)\n  [ -n \"$P\" ] && kill -KILL -$P\n  sleep 3\n  exec $PP power --power simfs://$M off ;;\n*) exec $PP power --power simfs://$M \"$1\" ;;\nesac\n",
            mnt = m.mnt.display(),
            dir = m.dir.display(),
            pp = bin("plugpull").display()
        ),
    );
    let uri = format!("exec:{} {{action}}", shutdown.display());
    super::sim::create_with(&w, "clean", &[("sim1", &uri)], "3");
    let o = w.campaign("run", &["--name", "clean"]);
    assert_eq!(o.status.code(), Some(2), "{}\n{}", stdout(&o), stderr(&o));
    let v = w.status("clean");
    let got = cuts(&v);
    assert_eq!(got.len(), 3, "{v}");
    for (i, (index, validity, reason)) in got.iter().enumerate() {
        assert_eq!(
            (*index, validity.as_str()),
            (i as u64 + 1, "not measured"),
            "{v}"
        );
        assert!(
            reason.contains("the canary survived the cut"),
            "cut {index}: {reason}"
        );
    }
    assert_eq!(
        v["roll_up"],
        json!({"cuts": 3, "valid": 0, "not_measured": 3, "invalid": 0, "failed": 0, "passed": 0})
    );
    let o = plugpull(&[
        "power",
        "--power",
        &format!("simfs://{}", m.mnt.display()),
        "off",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
