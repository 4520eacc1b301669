//! The guest bundle: built from the kernel package, cached by content, boots a
//! guest that loads its modules, mounts its ext4 disk, runs `plugpull` with the
//! kernel command line's arguments and powers off.

use super::{bundle, skip_without_vm};
use plugpull_client::rig::vm::{self, qemu};
use std::time::Duration;

#[test]
fn bundle_boots_runs_plugpull_and_powers_off() {
    if skip_without_vm("vm::boot::bundle_boots_runs_plugpull_and_powers_off") {
        return;
    }
    let _guests = super::light();
    let b = bundle();
    assert_eq!(
        b.modules,
        [
            "virtio_ring",
            "virtio",
            "virtio_pci_modern_dev",
            "virtio_pci_legacy_dev",
            "virtio_pci",
            "virtio_blk",
            "failover",
            "net_failover",
            "virtio_net",
            "crc32c_generic",
            "jbd2",
            "mbcache",
            "crc16",
            "ext4"
        ]
    );
    // The second build of the same inputs is the cached one.
    let again = bundle();
    assert!(again.cached);
    assert_eq!(again.initrd, b.initrd);
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    vm::make_image(&image, 32).unwrap();
    let spec = qemu::Spec {
        kernel: b.kernel,
        initrd: b.initrd,
        image,
        cache: "writeback".into(),
        settings: vm::settings(&["--version".into()], "poweroff", None),
        mem_mib: 512,
        cpus: 1,
    };
    let mut g = qemu::Vm::start(&spec, dir.path()).unwrap();
    let booted = g
        .wait_console("plugpull-vm: booted", Duration::from_secs(120))
        .unwrap();
    let status = g.wait_exit(Duration::from_secs(60)).unwrap();
    let console = g.console_text();
    eprintln!(
        "{booted}; QEMU ran {:.1} s",
        g.started.elapsed().as_secs_f64()
    );
    assert!(status.success(), "{status}");
    let version = format!("plugpull {}", env!("CARGO_PKG_VERSION"));
    assert!(console.contains(&version), "{console}");
    assert!(
        console.contains("plugpull-vm: plugpull exited with status 0"),
        "{console}"
    );
    assert!(console.contains("plugpull-vm: unmounted /mnt"), "{console}");
    assert!(
        !console.contains("insmod"),
        "a module failed to load:\n{console}"
    );
}
