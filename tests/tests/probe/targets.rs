//! `plugpull probe` on targets that are not a plain file on a disk: RAM-backed
//! stacks (tmpfs, a loop device over an image on tmpfs, zram), raw devices with
//! and without `--force`, mounted devices, read-only mounts, FIFOs, sockets and
//! character devices; the exit codes and messages of what could not be done; and
//! the VM and container this machine runs in.

use super::*;
use plugpull_tests::{plugpull, stderr, stdout};

/// What every `volatile-memory` message ends with.
const LOST: &str = "a power cut loses all of it, acknowledged writes included";

/// The first line of a failed probe's stderr, which must have exited 2.
fn exit_2(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{}{}", stdout(o), stderr(o));
    stderr(o).lines().next().unwrap_or_default().to_string()
}

fn messages(v: &Value, id: &str) -> Vec<String> {
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["id"] == id)
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect()
}

pub(super) fn notes(v: &Value) -> Vec<String> {
    v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// A `size`-byte image in `dir` filled with 0xa5 (not the probe's own 0x5a) on a
/// loop device.
fn image_on_loop(dir: &Path, size: usize) -> (std::path::PathBuf, Loop) {
    let img = dir.join("disk.img");
    std::fs::write(&img, vec![0xa5; size]).unwrap();
    let lo = Loop::attach(&img, &[]);
    (img, lo)
}

/// A 32 MiB ext4 image at `img` on a loop device, mounted with `opts` beside it
/// (`disk.img` → `disk.mnt`); the mount drops first.
fn ext4_on_loop_at(img: &Path, opts: &[&str]) -> (Mount, Loop) {
    ext4_on_loop(img, 32 << 20, opts, &img.with_extension("mnt"))
}

#[test]
fn a_file_on_tmpfs_warns_volatile_memory() {
    let test = "a_file_on_tmpfs_warns_volatile_memory";
    if !is_root() {
        return skipped(test, "not root (mounting tmpfs needs root)");
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = Mount::new(
        &["-t", "tmpfs", "-o", "size=4m", "ppram"],
        &dir.path().join("t"),
    );
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    let v = probe_json(&mp.join("f"));
    assert_eq!(
        messages(&v, "volatile-memory"),
        [format!("tmpfs at {} is in RAM: {LOST}", mp.display())]
    );
}

#[test]
fn ext4_on_a_loop_device_over_an_image_on_tmpfs_warns_volatile_memory() {
    let test = "ext4_on_a_loop_device_over_an_image_on_tmpfs_warns_volatile_memory";
    if skip_without_loop(test, &["mkfs.ext4", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ram = Mount::new(
        &["-t", "tmpfs", "-o", "size=40m", "ppram"],
        &dir.path().join("ram"),
    );
    let img = std::fs::canonicalize(&ram.at).unwrap().join("disk.img");
    let (mnt, lo) = ext4_on_loop_at(&img, &[]);
    let v = probe_json(&mnt.at.join("plugpull.dat"));
    let name = lo.dev.trim_start_matches("/dev/");
    assert_eq!(v["layers"][1]["kind"], "loop");
    assert_eq!(v["layers"][1]["backing_fs"], "tmpfs");
    assert_eq!(v["leaves"], json!([]));
    assert_eq!(
        messages(&v, "volatile-memory"),
        [format!(
            "{name}'s backing file {} is on tmpfs, in RAM: {LOST}",
            img.display()
        )]
    );
    assert_eq!(ids(&v), expected_ids(vec!["volatile-memory"]));
}

#[test]
fn a_zram_device_warns_volatile_memory() {
    let test = "a_zram_device_warns_volatile_memory";
    let Some(dev) = ["/dev/zram0", "/dev/zram1"]
        .into_iter()
        .find(|d| Path::new(d).exists())
    else {
        return skipped(test, "no /dev/zramN on this machine");
    };
    let v = probe_json(Path::new(dev));
    let name = dev.trim_start_matches("/dev/");
    assert_eq!(v["layers"], json!([{"kind": "disk", "name": name}]));
    assert_eq!(
        messages(&v, "volatile-memory"),
        [format!(
            "{name} is a compressed RAM disk (zram), in RAM: {LOST}"
        )]
    );
}

/// What `systemd-detect-virt FLAG` prints, run here by the test itself.
fn detect_virt(flag: &str) -> Option<String> {
    let o = Command::new("systemd-detect-virt")
        .arg(flag)
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

#[test]
fn the_vm_and_the_container_are_recorded_apart() {
    let test = "the_vm_and_the_container_are_recorded_apart";
    let (Some(vm), Some(container)) = (detect_virt("--vm"), detect_virt("--container")) else {
        return skipped(test, "systemd-detect-virt is missing");
    };
    let dir = tempfile::tempdir().unwrap();
    let v = probe_json(dir.path());
    assert_eq!(v["environment"]["virtualization"], json!(vm));
    assert_eq!(v["environment"]["container"], json!(container));
    let tail = "the host's cache mode decides whether a flush reaches a disk";
    let inside = if container == "none" {
        String::new()
    } else {
        format!(" (inside a {container} container)")
    };
    let want: Vec<String> = if vm == "none" {
        vec![]
    } else {
        vec![format!("running under {vm}{inside}: {tail}")]
    };
    assert_eq!(messages(&v, "virtualized"), want);
    let text = stdout(&probe(&[], dir.path(), false));
    let line = match container.as_str() {
        "none" => format!("virtualization: {vm}"),
        c => format!("virtualization: {vm}, container: {c}"),
    };
    assert!(text.lines().any(|l| l == line), "{text}");
    let note = format!("running in a {container} container on bare metal: a container has no cache mode of its own, flushes go to this machine's disks");
    assert_eq!(
        notes(&v).contains(&note),
        vm == "none" && container != "none",
        "{:?}",
        notes(&v)
    );
}

#[test]
fn seconds_on_a_raw_device_without_force_is_not_measured_exit_2() {
    let test = "seconds_on_a_raw_device_without_force_is_not_measured_exit_2";
    if skip_without_loop(test, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, lo) = image_on_loop(dir.path(), 1 << 20);
    let o = plugpull(&["probe", "--seconds", "1", "--json", "--target", &lo.dev]);
    let cause = "--seconds on a block device writes its first 4 KiB (put back after the loop): give --force to allow it";
    assert_eq!(
        exit_2(&o),
        format!("plugpull: flush accounting not measured: {cause}")
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["flush"], Value::Null);
    assert!(
        notes(&v).contains(&format!("flush accounting not measured: {cause}")),
        "{v}"
    );
    assert!(
        std::fs::read(&img).unwrap().iter().all(|&b| b == 0xa5),
        "the device was written"
    );
}

#[test]
fn seconds_on_a_read_only_mount_is_not_measured_exit_2() {
    let test = "seconds_on_a_read_only_mount_is_not_measured_exit_2";
    if skip_without_loop(test, &["mkfs.ext4", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mnt, _lo) = ext4_on_loop_at(&dir.path().join("disk.img"), &["-o", "ro"]);
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    let child = Command::new(bin("plugpull"))
        .args(["probe", "--seconds", "1", "--target"])
        .arg(mp.join("pp.dat"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let cause = format!(
        "cannot create scratch file {}/.plugpull-probe-{pid}: Read-only file system (os error 30)",
        mp.display()
    );
    assert_eq!(
        exit_2(&o),
        format!("plugpull: flush accounting not measured: {cause}")
    );
    let text = stdout(&o);
    assert!(
        text.lines()
            .any(|l| l == format!("  flush accounting not measured: {cause}")),
        "{text}"
    );
    assert!(text.starts_with(&format!(
        "stack under test: {}",
        mp.join("pp.dat").display()
    )));
}

#[test]
fn force_runs_the_loop_on_the_device_and_restores_its_first_4_kib() {
    let test = "force_runs_the_loop_on_the_device_and_restores_its_first_4_kib";
    if skip_without_loop(test, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, lo) = image_on_loop(dir.path(), 1 << 20);
    let name = lo.dev.trim_start_matches("/dev/");
    let writes = || -> u64 {
        let s = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        s.split_whitespace().nth(4).unwrap().parse().unwrap()
    };
    let before = writes();
    let o = plugpull(&[
        "probe",
        "--seconds",
        "1",
        "--force",
        "--json",
        "--target",
        &lo.dev,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = v["flush"]["fdatasyncs"].as_u64().unwrap();
    assert!(n >= 1, "{v}");
    // Every loop write and the restore went to the device itself.
    assert!(
        writes() - before > n,
        "{} writes for {n} fdatasyncs",
        writes() - before
    );
    let note = format!(
        "{}: the loop wrote its first 4096 bytes; what they held before was written back and synced",
        lo.dev
    );
    assert_eq!(v["flush"]["notes"], json!([note]), "{v}");
    let mut head = vec![0u8; 1 << 20];
    std::io::Read::read_exact(&mut std::fs::File::open(&lo.dev).unwrap(), &mut head).unwrap();
    assert!(
        head.iter().all(|&b| b == 0xa5),
        "restored, the rest untouched"
    );
    drop(lo);
    let on_disk = std::fs::read(&img).unwrap();
    assert!(
        on_disk.iter().all(|&b| b == 0xa5),
        "restored on the image too"
    );
}

#[test]
fn a_mounted_device_gets_a_note_and_force_is_refused_exit_2() {
    let test = "a_mounted_device_gets_a_note_and_force_is_refused_exit_2";
    if skip_without_loop(test, &["mkfs.ext4", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mnt, lo) = ext4_on_loop_at(&dir.path().join("disk.img"), &[]);
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    let dev = lo.dev.as_str();
    let refused = format!(
        "target {dev} is in use: it is mounted, or held by LVM, MD RAID, device-mapper or another program (the kernel refused an exclusive open: Device or resource busy (os error 16)); unmount or release it first"
    );
    let note = format!(
        "{dev} is mounted at {}: `write file` refuses it, also with --force ({refused})",
        mp.display()
    );
    let v = probe_json(Path::new(dev));
    assert!(notes(&v).contains(&note), "{:?}", notes(&v));
    let o = plugpull(&["probe", "--seconds", "1", "--force", "--target", dev]);
    assert_eq!(
        exit_2(&o),
        format!("plugpull: flush accounting not measured: {refused}")
    );
    assert!(
        stdout(&o).contains(&format!("  {note}\n")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_fifo_a_socket_and_a_char_device_are_refused_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let sock = dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for t in [fifo.as_path(), sock.as_path(), Path::new("/dev/null")] {
        let o = plugpull(&["probe", "--target", t.to_str().unwrap()]);
        assert_eq!(
            exit_2(&o),
            format!(
                "plugpull: cannot probe {}: not a regular file, directory or block device",
                t.display()
            )
        );
        assert_eq!(stdout(&o), "");
    }
}

#[test]
fn json_failures_print_one_ok_false_object() {
    let o = plugpull(&["probe", "--json", "--target", "/dev/null"]);
    let err = "cannot probe /dev/null: not a regular file, directory or block device";
    assert_eq!(exit_2(&o), format!("plugpull: {err}"));
    assert_eq!(
        stdout(&o),
        format!("{}\n", json!({"ok": false, "error": err}))
    );
}

#[test]
fn seconds_above_an_hour_and_force_without_seconds_are_usage_errors() {
    let o = plugpull(&["probe", "--seconds", "3601", "--target", "/tmp"]);
    assert_eq!(
        exit_2(&o),
        "error: invalid value '3601' for '--seconds <SECONDS>': \"3601\" is above 3600 seconds (one hour), the longest a probe runs"
    );
    let ok = Command::new(bin("plugpull"))
        .args(["probe", "--seconds", "3600", "--target", "/tmp"])
        .env("PLUGPULL_CHECK_ARGS", "1")
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", stderr(&ok));
    let o = plugpull(&["probe", "--force", "--target", "/tmp"]);
    assert_eq!(
        exit_2(&o),
        "error: the following required arguments were not provided:"
    );
    assert_eq!(stderr(&o).lines().nth(1), Some("  --seconds <SECONDS>"));
}

#[test]
fn btrfs_on_two_loop_devices_follows_both() {
    let test = "btrfs_on_two_loop_devices_follows_both";
    if skip_without_loop(test, &["mkfs.btrfs", "mount"]) {
        return;
    }
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap();
    if !fs
        .lines()
        .any(|l| l.split_whitespace().last() == Some("btrfs"))
    {
        return skipped(test, "the kernel has no btrfs");
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((below, disk)) = plain_disk_under(dir.path()) else {
        return skipped(
            test,
            "the temp dir's filesystem is not on a plain disk or partition",
        );
    };
    let mut loops = Vec::new();
    for n in ["a.img", "b.img"] {
        let img = dir.path().join(n);
        std::fs::File::create(&img)
            .unwrap()
            .set_len(200 << 20)
            .unwrap();
        loops.push((
            std::fs::canonicalize(&img).unwrap(),
            Loop::attach(&img, &[]),
        ));
    }
    let devs: Vec<&str> = loops.iter().map(|(_, l)| l.dev.as_str()).collect();
    let mut args = vec!["-q", "-f", "-d", "raid1", "-m", "raid1"];
    args.extend(&devs);
    run("mkfs.btrfs", &args);
    let mnt = Mount::new(&[devs[0]], &dir.path().join("mnt"));
    let v = probe_json(&mnt.at.join("pp.dat"));
    loops.sort_by(|a, b| a.1.dev.cmp(&b.1.dev));
    let loop_layer = |(img, lo): &(std::path::PathBuf, Loop)| {
        json!({"kind": "loop", "name": lo.dev.trim_start_matches("/dev/"),
            "backing_file": img.to_str().unwrap(), "direct_io": false,
            "backing_fs": fstype_of(dir.path())})
    };
    // Each device once: the disk under both images is walked below the first only.
    let mut want = vec![loop_layer(&loops[0])];
    want.extend(below);
    want.push(loop_layer(&loops[1]));
    assert_eq!(v["layers"][0]["fstype"], "btrfs");
    assert_eq!(v["layers"].as_array().unwrap()[1..], want[..]);
    assert_eq!(v["leaves"].as_array().unwrap().len(), 1);
    assert_eq!(v["leaves"][0]["name"], disk.as_str());
    drop(mnt);
}

#[test]
fn seconds_in_a_directory_the_user_cannot_write_is_not_measured_exit_2() {
    let test = "seconds_in_a_directory_the_user_cannot_write_is_not_measured_exit_2";
    if !is_root() || !have("setpriv") {
        return skipped(test, "not root, or setpriv (util-linux) missing");
    }
    // Root's directory, readable by all, writable by root only; probed as `nobody`.
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    for d in [dir.path(), ro.as_path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin("plugpull"))
        .args(["probe", "--seconds", "1", "--target"])
        .arg(&ro)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // setpriv execs plugpull: the same pid names the scratch file.
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    if o.status.code() == Some(127) || stderr(&o).starts_with("setpriv:") {
        return skipped(test, &format!("nobody cannot run plugpull: {}", stderr(&o)));
    }
    let cause = format!(
        "cannot create scratch file {}/.plugpull-probe-{pid}: Permission denied (os error 13)",
        ro.display()
    );
    assert_eq!(
        exit_2(&o),
        format!("plugpull: flush accounting not measured: {cause}")
    );
    assert!(
        stdout(&o).contains(&format!("\n  flush accounting not measured: {cause}\n")),
        "{}",
        stdout(&o)
    );
}
