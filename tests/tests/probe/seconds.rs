//! `plugpull probe --seconds`: the timed flush loop through the command, beside the
//! right filesystem, never leaving its scratch file (raw devices: `targets.rs`).

use super::*;

/// `plugpull probe --target TARGET --seconds 1 --json`, asserting exit 0.
fn probe_timed(target: &Path) -> Value {
    let o = Command::new(bin("plugpull"))
        .args(["probe", "--seconds", "1", "--json", "--target"])
        .arg(target)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "probe: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn seconds_counts_each_leaf_disks_flushes_and_every_probe_snapshots_cut_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let v = probe_timed(&dir.path().join("x.dat"));
    let f = &v["flush"];
    let n = f["fdatasyncs"].as_u64().unwrap();
    assert!(n > 0, "{f}");
    let leaves: Vec<&str> = v["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    let disks: Vec<&str> = f["per_disk"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["disk"].as_str().unwrap())
        .collect();
    assert_eq!(disks, leaves);
    let mut too_fast = false;
    for d in f["per_disk"].as_array().unwrap() {
        let name = d["disk"].as_str().unwrap();
        let wc = std::fs::read_to_string(format!("/sys/block/{name}/queue/write_cache")).unwrap();
        let rotational =
            std::fs::read_to_string(format!("/sys/block/{name}/queue/rotational")).unwrap();
        assert_eq!(d["rotational"], json!(rotational.trim() == "1"), "{d}");
        // The counter also counts other processes' flushes, never fewer than ours.
        if wc.trim() == "write back" && !d["flushes_delta"].is_null() {
            assert!(
                d["flushes_delta"].as_u64().unwrap() >= n,
                "{d}: {n} fdatasyncs"
            );
        }
        let rpm = d["rpm"].as_u64().unwrap_or(7200) as f64;
        let fast = rotational.trim() == "1" && f["rate_per_s"].as_f64().unwrap() > rpm / 60.0;
        // A virtual disk's rotational flag says nothing about a platter: a note, no warning.
        let leaf = v["leaves"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == d["disk"])
            .unwrap();
        let virt = v["environment"]["virtualization"]
            .as_str()
            .is_some_and(|s| s != "none")
            || ["virtio", "virtual", ""].contains(&leaf["transport"].as_str().unwrap());
        let note = format!("{name}: the kernel calls it rotational, but it is a virtual disk: a flush faster than a disk can spin is no sign of a lie here");
        let noted = v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == &json!(note));
        assert_eq!(noted, fast && virt, "{}", v["notes"]);
        too_fast |= fast && !virt;
    }
    assert_eq!(
        ids(&v).contains(&"fsync-too-fast-for-rotational".to_string()),
        too_fast,
        "{}",
        v["warnings"]
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the scratch file is removed"
    );
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let e = &v["evidence"];
    assert_eq!(e["boot_id"], json!(boot.trim()));
    // Each leaf disk has its counters or a note naming it.
    for l in &leaves {
        let counted = e["disks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["disk"] == json!(l));
        let noted = e["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s.as_str().unwrap().contains(l));
        assert!(counted || noted, "{l}: {e}");
    }
}

#[test]
fn a_link_to_a_file_not_yet_written_is_probed_where_it_points() {
    let test = "a_link_to_a_file_not_yet_written_is_probed_where_it_points";
    if !is_root() {
        skipped(test, "not root (mounting tmpfs needs root)");
        return;
    }
    // The link lives on the temp dir's filesystem; the file `write` would create is
    // on a tmpfs: the probe (and its flush loop) must describe the tmpfs.
    let dir = tempfile::tempdir().unwrap();
    let mnt = Mount::new(
        &["-t", "tmpfs", "-o", "size=4m", "pplink"],
        &dir.path().join("t"),
    );
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    let link = dir.path().join("link.dat");
    std::os::unix::fs::symlink(mp.join("later.dat"), &link).unwrap();
    let v = probe_timed(&link);
    assert_eq!(v["layers"].as_array().unwrap().len(), 1, "{}", v["layers"]);
    assert_eq!(v["layers"][0]["fstype"], "tmpfs");
    assert_eq!(v["layers"][0]["source"], "pplink");
    assert_eq!(v["leaves"], json!([]));
    assert_eq!(v["flush"]["per_disk"], json!([]));
    assert!(v["flush"]["fdatasyncs"].as_u64().unwrap() > 0);
    assert!(!mp.join("later.dat").exists());
    assert_eq!(
        std::fs::read_dir(&mp).unwrap().count(),
        0,
        "the scratch file is gone"
    );
}

#[test]
fn a_loop_whose_fdatasyncs_eatmydata_swallows_is_flagged_and_a_real_one_is_not() {
    let test = "a_loop_whose_fdatasyncs_eatmydata_swallows_is_flagged_and_a_real_one_is_not";
    if Command::new("eatmydata").arg("true").status().is_err() {
        skipped(test, "eatmydata is missing (scripts/deps installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("x.dat");
    let o = Command::new("eatmydata")
        .arg(bin("plugpull"))
        .args(["probe", "--seconds", "1", "--json", "--target"])
        .arg(&target)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let warned: Vec<&Value> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["id"] == json!("writes-not-reaching-device"))
        .collect();
    assert_eq!(warned.len(), 1, "{v:#}");
    let p50 = v["flush"]["p50_us"].as_u64().unwrap();
    assert!(p50 < 5, "eatmydata's fdatasync took {p50} µs");
    let text = warned[0]["message"].as_str().unwrap();
    assert!(
        text.ends_with(
            "the loop's writes did not reach the disk (eatmydata, or a layer that swallows fsync)"
        ),
        "{text}"
    );
    // The same loop without eatmydata reaches the disk.
    let plain = probe_timed(&target);
    assert!(
        !ids(&plain).contains(&"writes-not-reaching-device".to_string()),
        "{plain:#}"
    );
}
