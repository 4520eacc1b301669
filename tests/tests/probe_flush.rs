//! Flush accounting on real parts (issue 11): the machine's own root disk, ext4 on
//! a loop device, tmpfs, and a raw loop device (refused). Expected disks, caches
//! and counts are derived from sysfs and from the devices the tests create.

use plugpull::probe::flush::{
    warnings, FlushMeasurement, FLUSHES_NOT_REACHING_DEVICE, FSYNC_TOO_FAST_FOR_ROTATIONAL,
};
use plugpull_client::probe::flush::measure;

/// The leaf disks the probe finds under `path` (its stack walk).
fn leaves_of(path: &Path) -> Vec<String> {
    let p = plugpull_client::probe::probe(path).unwrap();
    p.leaves.into_iter().map(|l| l.name).collect()
}
use plugpull_tests::blockdev::{run, skip_without_loop, Loop, Mount};
use plugpull_tests::{is_root, skipped};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The whole disk holding `path`'s filesystem, from `/sys/dev/block/MAJ:MIN`, and
/// whether it has slaves (dm/md); `None` when st_dev is no block device.
fn disk_of(path: &Path) -> Option<(String, bool)> {
    let dev = std::fs::metadata(path).unwrap().dev();
    let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let real = std::fs::canonicalize(sys).ok()?;
    let disk = if real.join("partition").exists() {
        real.parent().unwrap().to_path_buf()
    } else {
        real
    };
    let name = disk.file_name().unwrap().to_string_lossy().into_owned();
    let has_slaves = std::fs::read_dir(format!("/sys/block/{name}/slaves"))
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    Some((name, has_slaves))
}

fn sysfs(disk: &str, file: &str) -> String {
    std::fs::read_to_string(format!("/sys/block/{disk}/{file}"))
        .unwrap()
        .trim()
        .to_string()
}

fn no_scratch_left(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".plugpull-probe-"))
        .collect();
    assert!(
        left.is_empty(),
        "scratch files left in {}: {left:?}",
        dir.display()
    );
}

/// The checks every measurement on a real disk must pass: fdatasyncs counted,
/// exactly the one leaf, and — when its cache is "write back" — at least one
/// flush per fdatasync reached the device's counter, so no such warning.
fn check_disk_measurement(test: &str, m: &FlushMeasurement, disk: &str) {
    assert!(m.fdatasyncs > 0, "{m:?}");
    assert_eq!(m.per_disk.len(), 1, "{m:?}");
    let d = &m.per_disk[0];
    assert_eq!(d.disk, disk);
    assert_eq!(d.rotational, Some(sysfs(disk, "queue/rotational") == "1"));
    let fields = sysfs(disk, "stat").split_whitespace().count();
    if fields < 16 {
        assert_eq!(d.flushes_delta, None);
        assert_eq!(m.notes.len(), 1, "{m:?}");
        skipped(
            test,
            &format!("/sys/block/{disk}/stat has {fields} fields: no flush counter"),
        );
        return;
    }
    assert!(m.notes.is_empty(), "{:?}", m.notes);
    let ids: Vec<String> = warnings(m).into_iter().map(|w| w.id).collect();
    // The rotational rule on real figures: fires exactly when the measured rate
    // beats the disk's revolutions per second (its rpm, or 7200 when unknown).
    let revs = f64::from(d.rpm.unwrap_or(7200)) / 60.0;
    let too_fast = d.rotational == Some(true) && m.rate_per_s > revs;
    assert_eq!(
        ids.iter().any(|i| i == FSYNC_TOO_FAST_FOR_ROTATIONAL),
        too_fast,
        "{m:?} {ids:?}"
    );
    if sysfs(disk, "queue/write_cache") == "write back" {
        let delta = d.flushes_delta.expect("flush delta");
        assert!(
            delta >= m.fdatasyncs,
            "{disk}: {delta} flushes for {} fdatasyncs",
            m.fdatasyncs
        );
        assert!(
            !ids.iter().any(|i| i == FLUSHES_NOT_REACHING_DEVICE),
            "{ids:?}"
        );
    } else {
        skipped(
            test,
            &format!("{disk} is write through: the kernel sends it no flushes"),
        );
    }
}

#[test]
fn root_disk_counts_a_flush_per_fdatasync() {
    let test = "root_disk_counts_a_flush_per_fdatasync";
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root_dev = std::fs::metadata("/").unwrap().dev();
    if std::fs::metadata(dir.path()).unwrap().dev() != root_dev {
        return skipped(test, "the target directory is not on the root filesystem");
    }
    let Some((disk, has_slaves)) = disk_of(Path::new("/")) else {
        return skipped(test, "the root filesystem is on no block device");
    };
    if has_slaves {
        return skipped(
            test,
            &format!("root disk {disk} is dm/md: expected leaves not derived here"),
        );
    }
    let leaves = leaves_of(dir.path());
    assert_eq!(leaves, std::slice::from_ref(&disk));
    let m = measure(dir.path(), 1.0, &leaves, false).unwrap();
    no_scratch_left(dir.path());
    eprintln!("{test}: {m:?}");
    check_disk_measurement(test, &m, &disk);
    assert!(m.seconds >= 1.0, "{m:?}");
    assert!(m.p50_us <= m.p99_us, "{m:?}");
}

#[test]
fn ext4_on_a_loop_device_counts_its_flushes() {
    let test = "ext4_on_a_loop_device_counts_its_flushes";
    if skip_without_loop(test, &["mkfs.ext4"]) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let lp = Loop::attach(&img, &[]);
    run("mkfs.ext4", &["-q", &lp.dev]);
    let mnt = Mount::new(&[&lp.dev], &dir.path().join("mnt"));
    // The probe follows the loop device to the disk under its image file: a flush
    // sent to the loop device becomes an fsync of the image, so that disk counts it.
    let Some((loop_name, false)) = disk_of(dir.path()) else {
        return skipped(
            test,
            "the image's filesystem is on dm/md or no block device",
        );
    };
    let leaves = leaves_of(&mnt.at);
    assert_eq!(leaves, std::slice::from_ref(&loop_name));
    // A file target: the scratch file goes beside it.
    let target = mnt.at.join("target");
    std::fs::write(&target, b"x").unwrap();
    let m = measure(&target, 0.5, &leaves, false).unwrap();
    no_scratch_left(&mnt.at);
    check_disk_measurement(test, &m, &loop_name);
    // A target `write` has yet to create: its directory is probed.
    let later = mnt.at.join("not-yet");
    assert_eq!(leaves_of(&later), std::slice::from_ref(&loop_name));
    let m = measure(&later, 0.2, &leaves, false).unwrap();
    assert!(!later.exists());
    no_scratch_left(&mnt.at);
    check_disk_measurement(test, &m, &loop_name);
    let gone = mnt.at.join("no-dir/not-yet");
    let err = measure(&gone, 0.2, &leaves, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot probe {}: No such file or directory (os error 2)",
            gone.display()
        )
    );
}

#[test]
fn tmpfs_has_no_leaf_disk() {
    let test = "tmpfs_has_no_leaf_disk";
    if !is_root() {
        return skipped(test, "not root (mounting tmpfs needs root)");
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = Mount::new(&["-t", "tmpfs", "tmpfs"], &dir.path().join("t"));
    let leaves = leaves_of(&mnt.at);
    assert!(leaves.is_empty(), "{leaves:?}");
    let m = measure(&mnt.at, 0.2, &leaves, false).unwrap();
    no_scratch_left(&mnt.at);
    assert!(m.fdatasyncs > 0);
    assert!(m.per_disk.is_empty());
    assert_eq!(
        m.notes,
        [format!(
            "no leaf disk under {} (tmpfs, a network or FUSE filesystem?): flushes not counted",
            mnt.at.display()
        )]
    );
    assert!(warnings(&m).is_empty());
}

#[test]
fn a_raw_device_is_refused() {
    let test = "a_raw_device_is_refused";
    if skip_without_loop(test, &[]) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let lp = Loop::attach(&img, &[]);
    let before = std::fs::read(&img).unwrap();
    let err = measure(Path::new(&lp.dev), 0.2, &[], false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--seconds on a block device writes its first 4 KiB (put back after the loop): give --force to allow it"
    );
    assert_eq!(
        std::fs::read(&img).unwrap(),
        before,
        "the device was written"
    );
}

/// The scratch file is created `O_EXCL`: a file already there under its name is
/// an error and is left alone (neither written nor removed); bad durations are
/// refused before anything is created.
#[test]
fn an_existing_scratch_name_is_never_clobbered() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let name = dir
        .path()
        .join(format!(".plugpull-probe-{}", std::process::id()));
    std::fs::write(&name, b"someone else's").unwrap();
    let err = measure(dir.path(), 0.1, &[], false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot create scratch file {}: File exists (os error 17)",
            name.display()
        )
    );
    assert_eq!(std::fs::read(&name).unwrap(), b"someone else's");
    std::fs::remove_file(&name).unwrap();
    for bad in [0.0, -1.0, f64::NAN] {
        let err = measure(dir.path(), bad, &[], false).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("probe --seconds must be a number above 0, not {bad}")
        );
    }
    no_scratch_left(dir.path());
}
