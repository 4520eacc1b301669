//! Finding the run's device and filesystem again: by identity (another device is
//! refused), a partition by its number and first sector, a mount point whose name ends
//! in a space, and targets the guard refuses (a character device, a directory).

use super::*;

/// Item 20: verify reads the disk the run wrote: a device renamed after the run is
/// found again by its identity; another device given with --target is refused.
#[test]
fn the_device_is_found_by_identity_and_another_device_is_refused() {
    let name = "the_device_is_found_by_identity_and_another_device_is_refused";
    if skip_without_loop(name, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = backing(dir.path(), "a.img", 4 << 20);
    let other_img = backing(dir.path(), "b.img", 4 << 20);
    let a = Loop::attach(&img, &[]);
    // Written through a stable name (as /dev/disk/by-id/… would be): stored as given.
    let link = dir.path().join("by-id-disk");
    std::os::unix::fs::symlink(&a.dev, &link).unwrap();
    let run = write_run(&l, &link, "4MiB", &strs(&sequential(1500)));
    let old_name = link.display().to_string();
    let a_dev = a.dev.clone();
    drop(a);
    // Another disk now has the old name; the run's disk comes back under a new one.
    let b = Loop::attach(&other_img, &[]);
    let mut a2 = Loop::attach(&img, &[]);
    // Tests running beside this one free and take loop devices too: when the run's
    // disk got its old number back, park another device there and attach it again.
    let mut parked = Vec::new();
    while a2.dev == a_dev {
        drop(a2);
        parked.push(Loop::attach(&other_img, &[]));
        a2 = Loop::attach(&img, &[]);
    }
    assert_ne!(a2.dev, a_dev);
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["target"], json!(a2.dev));
    assert_eq!(v["verdicts"], verdicts(&[("intact", 1024)]));
    assert!(stderr(&o).contains(&format!(
        "the run's device {old_name} is now {} (found by its identity: loop device backed by {}",
        a2.dev,
        img.display()
    )));
    // Told to read the other disk: refused, nothing blamed on the drive.
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", &b.dev]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "target {} is not the device run's data was written to (its loop backing file is {} where the run's device had {})",
            b.dev,
            other_img.display(),
            img.display()
        )),
        "{err}"
    );
}

/// A loop device over `img` (which holds a partition table) with its partitions
/// under `/dev`: `losetup -P` scans them where the kernel parses the table; where it
/// cannot (no MSDOS/EFI partition support built in), `partx --add` reads the table in
/// user space and adds them.
fn partitioned_loop(img: &Path, parts: u32) -> blockdev::Loop {
    let d = blockdev::Loop::attach(img, &["-P"]);
    let last = format!("{}p{parts}", d.dev);
    if !Path::new(&last).exists() {
        blockdev::run("partx", &["--add", &d.dev]);
    }
    assert!(
        wait_for(std::time::Duration::from_secs(5), || Path::new(&last)
            .exists()),
        "{last} did not appear"
    );
    d
}

/// Review finding 3: partitions of one disk share its serial, WWN and (for a loop
/// device) backing file. A run on partition 2 of a disk that comes back under
/// another name is found again as that partition (by its number and first sector),
/// not as the whole disk; the disk's other partition and the whole disk, given with
/// --target, are refused (exit 2) instead of read at the wrong offsets and blamed.
#[test]
fn a_partition_is_found_again_by_its_number_and_first_sector() {
    let name = "a_partition_is_found_again_by_its_number_and_first_sector";
    if blockdev::skip_without_loop(name, &["sfdisk", "partx"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    // 8 MiB, GPT: partition 1 at sector 2048, partition 2 at sector 8192, 3 MiB each.
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'label: gpt\\nsize=3MiB\\nsize=3MiB\\n' | sfdisk -q '{}'",
            img.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let disk = partitioned_loop(&img, 2);
    let old = format!("{}p2", disk.dev);
    let run = write_run(&l, Path::new(&old), "3MiB", &strs(&sequential(768)));
    // Renumbered: the disk comes back under another name (attached again before the
    // old name is let go, so the new name cannot be the old one), the old name gone.
    let again = partitioned_loop(&img, 2);
    assert_ne!(again.dev, disk.dev);
    drop(disk);
    assert!(!Path::new(&old).exists());
    let new = format!("{}p2", again.dev);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["target"], json!(new));
    assert_eq!(v["acknowledged"], json!(768));
    assert_eq!(v["verdicts"], verdicts(&[("intact", 768)]));
    assert!(
        err.contains(&format!(
            "the run's device {old} is now {new} (found by its identity: loop device backed by {}, partition 2 from sector 8192, 3 MiB)",
            img.display()
        )),
        "{err}"
    );
    // The disk's other partition: same backing file, another partition.
    let p1 = format!("{}p1", again.dev);
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", &p1]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "target {p1} is not the device run's data was written to (it is partition 1 from sector 2048 where the run wrote partition 2 from sector 8192)"
        )),
        "{err}"
    );
    // The whole disk: same backing file, offset 0 of the disk.
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", &again.dev]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "target {} is not the device run's data was written to (it is the whole device where the run wrote partition 2 from sector 8192)",
            again.dev
        )),
        "{err}"
    );
}

/// Review finding 15: a mount point whose name ends in an escaped character
/// (`\040`, a space, at the very end of its `/proc/self/mountinfo` field) is the
/// run's filesystem: verify reads the file there (PASS), and once it is unmounted
/// names that filesystem ("not mounted?", exit 2) — not the root filesystem under
/// it, which would make the file "gone" (a false FAIL).
#[test]
fn a_mount_point_ending_in_a_space_is_the_runs_filesystem() {
    let name = "a_mount_point_ending_in_a_space_is_the_runs_filesystem";
    if !is_root() {
        skipped(name, "not root (mounting tmpfs needs root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mnt = dir.path().join("mnt ");
    let m = blockdev::Mount::new(&["-t", "tmpfs", "-o", "size=4m", "tmpfs"], &mnt);
    let target = mnt.join("t.dat");
    let run = write_run(&l, &target, "256KiB", &strs(&sequential(64)));
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err} {v}");
    assert_eq!(v["verdicts"], verdicts(&[("intact", 64)]));
    drop(m);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "but the run's target was on tmpfs from tmpfs mounted at {} — not mounted?",
            mnt.display()
        )),
        "{err}"
    );
}

/// Review finding 10: verify refuses a target that is neither a regular file nor a
/// block device with the writer's own guard, before opening it (exit 2).
#[test]
fn a_character_device_or_directory_target_is_refused_by_the_guard() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let run = write_run(
        &l,
        &dir.path().join("t.dat"),
        "256KiB",
        &strs(&sequential(64)),
    );
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", "/dev/null"]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(
            "target /dev/null is a character device: give a regular file or a block device"
        ),
        "{err}"
    );
    let d = dir.path().display().to_string();
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", &d]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains(&format!(
            "target {d} is a directory: give a regular file or a block device"
        )),
        "{err}"
    );
}
