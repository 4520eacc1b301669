//! The cut-evidence snapshot on this machine (issue 11): boot id and uptime from
//! /proc, and for the root disk either its counters or a note saying why not —
//! "not installed" exactly when the tool is missing here.

use plugpull_client::probe::evidence::snapshot;
use plugpull_tests::blockdev::have;
use plugpull_tests::skipped;
use std::os::unix::fs::MetadataExt;

/// The whole disk holding `/`, or `None` when it is on no block device.
fn root_disk() -> Option<String> {
    let dev = std::fs::metadata("/").unwrap().dev();
    let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
    let real = std::fs::canonicalize(sys).ok()?;
    let disk = if real.join("partition").exists() {
        real.parent()?.to_path_buf()
    } else {
        real
    };
    Some(disk.file_name()?.to_string_lossy().into_owned())
}

#[test]
fn snapshot_of_the_root_disk() {
    let test = "snapshot_of_the_root_disk";
    let Some(disk) = root_disk() else {
        return skipped(test, "the root filesystem is on no block device");
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let snap = snapshot(std::slice::from_ref(&disk));
    assert_eq!(snap.boot_id, boot.trim());
    assert!(snap.uptime_s > 0.0, "{snap:?}");
    // Exactly one of: counters for the disk, or one note about it.
    assert_eq!(snap.disks.len() + snap.notes.len(), 1, "{snap:?}");
    let nvme_tool = disk.starts_with("nvme") && have("nvme");
    if !nvme_tool && !have("smartctl") {
        let expected = if disk.starts_with("nvme") {
            format!("nvme-cli and smartmontools not installed: unsafe shutdowns of {disk} unknown")
        } else {
            format!("smartmontools not installed: unsafe shutdowns of {disk} unknown")
        };
        assert_eq!(snap.notes, [expected]);
    } else if let Some(e) = snap.disks.first() {
        assert_eq!(e.disk, disk);
    } else {
        assert!(snap.notes[0].starts_with(&format!("{disk}: ")), "{snap:?}");
    }
}
