//! `plugpull probe` on real stacks built here: ext4 on a loop device with and
//! without `barrier=0`, tmpfs, simfs (FUSE), and the probe run under `eatmydata`.
//! Expected layers, leaves and warning ids come from what each test built and from
//! this machine (its disk under the image file, `systemd-detect-virt`).

use plugpull_tests::blockdev::{ext4_on_loop, have, run, skip_without_loop, Loop, Mount};
use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::{bin, is_root, skipped};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod pg;
mod seconds;
mod targets;
mod write_run;

/// `[wrapper] plugpull probe --target TARGET [--json]`, asserting exit 0 within 1 s.
fn probe(wrapper: &[&str], target: &Path, json: bool) -> Output {
    let pp = bin("plugpull");
    let mut argv: Vec<&std::ffi::OsStr> = wrapper.iter().map(|s| s.as_ref()).collect();
    argv.extend([
        pp.as_os_str(),
        "probe".as_ref(),
        "--target".as_ref(),
        target.as_os_str(),
    ]);
    if json {
        argv.push("--json".as_ref());
    }
    let t = Instant::now();
    let o = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "probe took {:?}",
        t.elapsed()
    );
    assert!(
        o.status.success(),
        "probe: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn probe_json(target: &Path) -> Value {
    serde_json::from_slice(&probe(&[], target, true).stdout).unwrap()
}

/// Whether this machine is a VM as the probe decides it: `systemd-detect-virt --vm`
/// says something other than `none`, or (without it) the `hypervisor` CPU flag.
fn virtualized() -> bool {
    if let Ok(o) = Command::new("systemd-detect-virt").arg("--vm").output() {
        let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !v.is_empty() {
            return v != "none";
        }
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap();
    cpu.lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == "hypervisor"))
}

fn ids(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn expected_ids(mut ids: Vec<&str>) -> Vec<String> {
    if virtualized() {
        ids.push("virtualized");
    }
    let mut v: Vec<String> = ids.into_iter().map(String::from).collect();
    v.sort();
    v
}

/// The type of the filesystem holding `path`, as util-linux's `findmnt` reads it.
fn fstype_of(path: &Path) -> String {
    let t = run(
        "findmnt",
        &["-n", "-o", "FSTYPE", "--target", path.to_str().unwrap()],
    );
    t.trim().to_string()
}

/// The layers under the filesystem holding `dir` when it sits on a partition or a
/// whole disk (and the disk's name); `None` for anything else (stacked, no device).
fn plain_disk_under(dir: &Path) -> Option<(Vec<Value>, String)> {
    let dev = std::fs::metadata(dir).unwrap().dev();
    let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let d = std::fs::canonicalize(sys).ok()?;
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let mut layers = Vec::new();
    let disk = if let Ok(n) = std::fs::read_to_string(d.join("partition")) {
        let number: u32 = n.trim().parse().unwrap();
        layers.push(json!({"kind": "partition", "name": name(&d), "number": number}));
        d.parent().unwrap().to_path_buf()
    } else {
        d
    };
    let slaves = std::fs::read_dir(disk.join("slaves")).map_or(0, |r| r.count());
    if slaves > 0 || disk.join("loop").exists() {
        return None;
    }
    layers.push(json!({"kind": "disk", "name": name(&disk)}));
    Some((layers, name(&disk)))
}

/// ext4 on a loop device over an image file in a temp dir, mounted with `opts`;
/// checks the exact layers, leaves and warning ids.
fn ext4_on_loop_case(test: &str, opts: Option<&str>, want: Vec<&str>) {
    if skip_without_loop(test, &["mkfs.ext4", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((below, disk)) = plain_disk_under(dir.path()) else {
        skipped(
            test,
            "the temp dir's filesystem is not on a plain disk or partition",
        );
        return;
    };
    let img = dir.path().join("disk.img");
    let extra: Vec<&str> = opts.map(|o| vec!["-o", o]).unwrap_or_default();
    let (mnt, lo) = ext4_on_loop(&img, 64 << 20, &extra, &dir.path().join("mnt"));
    let v = probe_json(&mnt.at.join("plugpull.dat"));
    let layers = v["layers"].as_array().unwrap();
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    assert_eq!(layers[0]["kind"], "mount");
    assert_eq!(layers[0]["source"], lo.dev.as_str());
    assert_eq!(layers[0]["fstype"], "ext4");
    assert_eq!(layers[0]["mountpoint"], mp.to_str().unwrap());
    let options: Vec<&str> = layers[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect();
    let off = options
        .iter()
        .any(|o| *o == "nobarrier" || *o == "barrier=0");
    assert_eq!(off, opts.is_some(), "options {options:?}");
    let name = lo.dev.trim_start_matches("/dev/");
    let backing = std::fs::canonicalize(&img).unwrap();
    let want_loop = json!({"kind": "loop", "name": name,
        "backing_file": backing.to_str().unwrap(), "direct_io": false,
        "backing_fs": fstype_of(dir.path())});
    assert_eq!(layers[1], want_loop);
    assert_eq!(layers[2..], below[..]);
    assert_eq!(v["leaves"].as_array().unwrap().len(), 1);
    let leaf = &v["leaves"][0];
    assert_eq!(leaf["name"], disk.as_str());
    let q = |f: &str| {
        let s = std::fs::read_to_string(format!("/sys/block/{disk}/queue/{f}")).unwrap();
        s.trim().to_string()
    };
    assert_eq!(leaf["write_cache"], q("write_cache"));
    assert_eq!(leaf["rotational"], q("rotational") == "1");
    assert_eq!(leaf["fua"], q("fua") == "1");
    let lbs: u64 = q("logical_block_size").parse().unwrap();
    let pbs: u64 = q("physical_block_size").parse().unwrap();
    assert_eq!(leaf["logical_block_size"], lbs);
    assert_eq!(leaf["physical_block_size"], pbs);
    assert_eq!(ids(&v), expected_ids(want));
}

#[test]
fn ext4_on_loop_mounted_barrier_0_warns_nobarrier() {
    ext4_on_loop_case(
        "ext4_on_loop_mounted_barrier_0_warns_nobarrier",
        Some("barrier=0"),
        vec!["nobarrier"],
    );
}

#[test]
fn ext4_on_loop_mounted_with_barriers_does_not_warn_nobarrier() {
    ext4_on_loop_case(
        "ext4_on_loop_mounted_with_barriers_does_not_warn_nobarrier",
        None,
        vec![],
    );
}

#[test]
fn tmpfs_is_one_mount_layer_with_no_leaves_and_a_note() {
    let test = "tmpfs_is_one_mount_layer_with_no_leaves_and_a_note";
    if !is_root() {
        skipped(test, "not root (mounting tmpfs needs root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = Mount::new(
        &["-t", "tmpfs", "-o", "size=4m", "pptmp"],
        &dir.path().join("t"),
    );
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    let mps = mp.to_str().unwrap();
    let v = probe_json(&mp.join("f"));
    assert_eq!(v["target"], mp.join("f").to_str().unwrap());
    assert_eq!(v["layers"].as_array().unwrap().len(), 1);
    assert_eq!(v["layers"][0]["kind"], "mount");
    assert_eq!(v["layers"][0]["fstype"], "tmpfs");
    assert_eq!(v["layers"][0]["source"], "pptmp");
    assert_eq!(v["layers"][0]["mountpoint"], mps);
    assert_eq!(v["leaves"], json!([]));
    let note = format!("tmpfs at {mps} (pptmp) has no block device under it: nothing below the filesystem to probe");
    // The walk's note comes first; environment notes (if any) follow.
    assert_eq!(v["notes"][0], json!(note));
    assert_eq!(ids(&v), expected_ids(vec!["volatile-memory"]));
    assert_eq!(v["environment"]["eatmydata_in"], json!([]));
}

#[test]
fn simfs_is_one_fuse_mount_layer() {
    let test = "simfs_is_one_fuse_mount_layer";
    if skip_without_fuse(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sim = SimFs::mount(dir.path(), "honest", 1);
    let mp = std::fs::canonicalize(sim.mnt()).unwrap();
    let v = probe_json(&mp.join("plugpull.dat"));
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["kind"], "mount");
    // simfs asks for fsname `plugpull-simfs:MODE` and subtype `plugpull-simfs`; whether the kernel shows the
    // type as `fuse` or `fuse.plugpull-simfs` depends on how the mount was made:
    // util-linux's `findmnt` reads the same mount independently.
    let fm = run("findmnt", &["-n", "-o", "FSTYPE", mp.to_str().unwrap()]);
    assert!(fm.trim().starts_with("fuse"), "{fm}");
    assert_eq!(layers[0]["fstype"], fm.trim());
    assert_eq!(layers[0]["source"], "plugpull-simfs:honest");
    // The simulated disk's fault model is part of the stack's configuration.
    let p: plugpull::probe::Probe = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(
        p.configuration(),
        format!(
            "{} ({}) / simulated disk honest",
            fm.trim(),
            layers[0]["options"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_str().unwrap())
                .collect::<Vec<_>>()
                .join(",")
        )
    );
    assert_eq!(layers[0]["mountpoint"], mp.to_str().unwrap());
    assert_eq!(v["leaves"], json!([]));
    assert_eq!(ids(&v), expected_ids(vec![]));
}

#[test]
fn eatmydata_wrapping_the_probe_warns_eatmydata() {
    let test = "eatmydata_wrapping_the_probe_warns_eatmydata";
    if !have("eatmydata") && Command::new("eatmydata").arg("true").status().is_err() {
        skipped(test, "eatmydata is missing (scripts/deps installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let preload = std::fs::read_to_string("/etc/ld.so.preload").unwrap_or_default();
    let system_wide = preload.contains("eatmydata");
    let o = probe(&["eatmydata"], dir.path(), true);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut want = vec!["LD_PRELOAD"];
    if system_wide {
        want.push("/etc/ld.so.preload");
    }
    assert_eq!(v["environment"]["eatmydata_in"], json!(want));
    assert!(ids(&v).contains(&"eatmydata".to_string()), "{:?}", ids(&v));
    let text = String::from_utf8(probe(&["eatmydata"], dir.path(), false).stdout).unwrap();
    let line = "  eatmydata: libeatmydata is preloaded (";
    assert_eq!(
        text.lines().filter(|l| l.starts_with(line)).count(),
        1,
        "{text}"
    );
    if !system_wide {
        let plain = probe_json(dir.path());
        assert!(!ids(&plain).contains(&"eatmydata".to_string()));
        assert_eq!(plain["environment"]["eatmydata_in"], json!([]));
    }
}

#[test]
fn text_output_names_the_target_and_a_path_that_cannot_be_probed_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("x.dat");
    let text = String::from_utf8(probe(&[], &target, false).stdout).unwrap();
    let first = format!("stack under test: {}", target.display());
    assert_eq!(text.lines().next(), Some(first.as_str()));
    assert!(
        text.lines().nth(1).unwrap().starts_with("  mount   "),
        "{text}"
    );
    let gone = dir.path().join("no/such/dir/x.dat");
    let o = Command::new(bin("plugpull"))
        .args(["probe", "--target"])
        .arg(&gone)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "plugpull: cannot probe {}: its directory {} does not exist (No such file or directory (os error 2))",
            gone.display(),
            dir.path().join("no/such/dir").display()
        )
    );
}

#[test]
fn a_partition_of_a_loop_device_given_as_the_target_is_partition_loop_disk() {
    let test = "a_partition_of_a_loop_device_given_as_the_target_is_partition_loop_disk";
    if skip_without_loop(test, &["sfdisk", "partx"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((below, disk)) = plain_disk_under(dir.path()) else {
        skipped(
            test,
            "the temp dir's filesystem is not on a plain disk or partition",
        );
        return;
    };
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let sh = format!(
        "printf 'label: gpt\\nsize=3MiB\\nsize=3MiB\\n' | sfdisk -q '{}'",
        img.display()
    );
    let o = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lo = Loop::attach(&img, &["-P"]);
    let part = format!("{}p2", lo.dev);
    if !Path::new(&part).exists() {
        run("partx", &["--add", &lo.dev]);
    }
    let t = Instant::now();
    while !Path::new(&part).exists() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = probe_json(Path::new(&part));
    let name = lo.dev.trim_start_matches("/dev/");
    let backing = std::fs::canonicalize(&img).unwrap();
    let mut want = vec![
        json!({"kind": "partition", "name": format!("{name}p2"), "number": 2}),
        json!({"kind": "loop", "name": name, "backing_file": backing.to_str().unwrap(),
            "direct_io": false, "backing_fs": fstype_of(dir.path())}),
    ];
    want.extend(below);
    assert_eq!(v["layers"], json!(want));
    let leaves: Vec<&str> = v["leaves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(leaves, [disk.as_str()]);
    assert_eq!(ids(&v), expected_ids(vec![]));
}
