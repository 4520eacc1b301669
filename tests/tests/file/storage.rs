//! The storage under a run: `write` probes its target when it starts and records
//! the probe in the manifest; `verify` reports it ("stack under test"), with the
//! flushes each leaf disk completed per acknowledged write and the cut evidence.
//! Compared with what `plugpull probe` says of the same target, and with the
//! kernel's own flush counter.

use super::*;
use plugpull_tests::blockdev::{ext4_on_loop, skip_without_loop};

/// `plugpull probe --target T --json`.
fn probe_json(target: &std::path::Path) -> Value {
    let o = plugpull(&["probe", "--target", target.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "probe: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Field 16 of `/sys/block/DISK/stat`: flush requests completed.
fn flush_counter(disk: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/sys/block/{disk}/stat")).unwrap();
    s.split_whitespace().nth(15).unwrap().parse().unwrap()
}

#[test]
fn a_run_records_the_stack_under_its_target_and_verify_counts_flushes_per_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    std::fs::write(&target, b"").unwrap();
    let want = probe_json(&target);
    let disks: Vec<String> = want["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    let before: Vec<u64> = disks.iter().map(|d| flush_counter(d)).collect();
    write_run(&l, &target, "1MiB", &["--writes", "400"]);
    let after: Vec<u64> = disks.iter().map(|d| flush_counter(d)).collect();
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{err}");
    let s = &v["storage"];
    assert_eq!(s["not_probed"], "");
    let p = &s["probe"];
    assert_eq!(p["target"], target.to_str().unwrap());
    assert_eq!(p["layers"], want["layers"]);
    assert_eq!(p["leaves"], want["leaves"]);
    assert_eq!(p["warnings"], want["warnings"]);
    assert_eq!(p["flush"], Value::Null, "no --probe-seconds: no timed loop");
    let flushes = s["flushes"].as_array().unwrap();
    assert_eq!(flushes.len(), disks.len());
    for (i, f) in flushes.iter().enumerate() {
        assert_eq!(f["disk"], disks[i].as_str());
        // The run's end sample comes after its last ack: every ack is counted.
        let acked = f["acknowledged"].as_u64().unwrap();
        assert_eq!(acked, 400, "{f}");
        // Counted between the run's start and its last sample: within what the
        // kernel counted around the whole run.
        let n = f["flushes"].as_u64().unwrap();
        assert!(
            n <= after[i] - before[i],
            "{f}: kernel counted {}",
            after[i] - before[i]
        );
        let leaf = &want["leaves"][i];
        if leaf["write_cache"] == "write back" {
            // Every fdatasync on ext4 with barriers sends this disk a flush.
            assert!(n >= acked, "{f}");
            assert_eq!(f["per_ack"].as_f64().unwrap(), n as f64 / acked as f64);
        }
    }
    let lines: Vec<&str> = s["cut_evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(
        lines[0],
        "same boot id: the machine did not reboot \u{2014} the host kept power (only its storage may have lost it)"
    );
}

#[test]
fn a_run_on_ext4_mounted_without_barriers_carries_the_warning_into_write_and_verify() {
    let test = "a_run_on_ext4_mounted_without_barriers_carries_the_warning_into_write_and_verify";
    if skip_without_loop(test, &["mkfs.ext4", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let (mnt, lo) = ext4_on_loop(
        &dir.path().join("disk.img"),
        64 << 20,
        &["-o", "barrier=0"],
        &dir.path().join("mnt"),
    );
    let target = mnt.at.join("t.dat");
    let out = stdout(&write_file(&l, &target, "1MiB", &["--writes", "50"]));
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    let nobarrier = format!(
        "  nobarrier: ext4 at {} is mounted without barriers: it sends no cache flushes, so a volatile write cache can lose fsynced data",
        mp.display()
    );
    assert!(
        out.contains(&format!("stack under test: {}\n", target.display())),
        "{out}"
    );
    assert!(out.contains(&format!("\n{nobarrier}\n")), "{out}");
    let v = plugpull(&["verify", "--read-back", "--listener", l.addr()]);
    assert_eq!(v.status.code(), Some(0), "{}", stderr(&v));
    let text = stdout(&v);
    assert!(
        text.contains(&format!(
            "stack under test (probed when the run started): {}\n",
            target.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("warnings (they never change the verdict):\n"),
        "{text}"
    );
    assert!(text.contains(&format!("\n{nobarrier}\n")), "{text}");
    let (_, j, _) = verify_json(&l, &[]);
    let ids: Vec<&str> = j["storage"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"nobarrier"), "{ids:?}");
    assert_eq!(
        j["storage"]["probe"]["layers"][0]["source"],
        lo.dev.as_str()
    );
    // `write --json` names the same warnings in its summary.
    let o = write_file(&l, &target, "1MiB", &["--writes", "5", "--json"]);
    let w: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(w["storage_warnings"], j["storage"]["probe"]["warnings"]);
}

#[test]
fn a_run_under_eatmydata_is_told_its_fdatasyncs_flushed_nothing() {
    let test = "a_run_under_eatmydata_is_told_its_fdatasyncs_flushed_nothing";
    if Command::new("eatmydata").arg("true").status().is_err() {
        plugpull_tests::skipped(
            test,
            "eatmydata is not installed (scripts/deps installs it)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let o = Command::new("eatmydata")
        .arg(bin("plugpull"))
        .args(["write", "file", "--listener", l.addr(), "--target"])
        .arg(&target)
        .args(["--size", "1MiB", "-T", "1s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (code, v, err) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{err}");
    let s = &v["storage"];
    let ids: Vec<&str> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"eatmydata"), "{ids:?}");
    let acked = v["acknowledged"].as_u64().unwrap();
    for f in s["flushes"].as_array().unwrap() {
        // Without eatmydata every fdatasync sends a flush (the test above); here only
        // the rest of the machine's I/O does, a few per second at most.
        let n = f["flushes"].as_u64().unwrap();
        let sampled = f["acknowledged"].as_u64().unwrap();
        assert_eq!(sampled, acked, "{f}");
        assert!(
            n * 10 < sampled,
            "{n} flushes over {sampled} acknowledged writes"
        );
        let disk = f["disk"].as_str().unwrap();
        let leaf = s["probe"]["leaves"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == disk)
            .unwrap();
        let warned = s["warnings"].as_array().unwrap().iter().any(|w| {
            w["id"] == "flushes-not-reaching-device"
                && w["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{disk}: "))
        });
        // One writer: under half a flush per ack warns (here under a tenth).
        assert_eq!(warned, leaf["write_cache"] == "write back", "{s:#}");
    }
}
