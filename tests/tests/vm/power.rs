//! The `qemu://DIR` power driver through `plugpull power`: a guest whose disk image
//! sits on a lying simfs mount is turned on (simfs mounted, QEMU started from the
//! recorded command line), read (QMP `query-status`), cut (QEMU SIGKILLed, simfs cut
//! at once: its ground truth written, the mount taken down) and read again.

use super::bundle;
use crate::power::ok;
use plugpull_client::rig::proc;
use plugpull_client::rig::vm::{self, machine, qemu};
use plugpull_tests::{bin, wait_for};
use std::time::Duration;

#[test]
fn qemu_driver_boots_reads_and_cuts_a_guest_on_simfs() {
    let test = "vm::power::qemu_driver_boots_reads_and_cuts_a_guest_on_simfs";
    let Some(_guests) = super::guest_on_simfs(test) else {
        return;
    };
    let b = bundle();
    let tmp = tempfile::tempdir().unwrap();
    let spec = qemu::Spec {
        kernel: b.kernel,
        initrd: b.initrd,
        image: tmp.path().join("vm1/disk/disk.img"),
        cache: "writeback".into(),
        settings: vm::settings(&[], "hang", None),
        mem_mib: 512,
        cpus: 1,
    };
    let sd = machine::SimDisk {
        bin: bin("plugpull-simfs"),
        mode: "lying".into(),
        seed: 7,
        args: vec!["--destage-delay-ms".into(), "10000".into()],
    };
    let dir = machine::create(&tmp.path().join("vm1"), &spec, Some(sd)).unwrap();
    vm::make_image(&dir.join("backing/disk.img"), 32).unwrap();
    let uri = format!("qemu://{}", dir.display());
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, vm)\n"));
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, vm)\n"));
    assert_eq!(ok(&uri, "status"), "on\n");
    let console = dir.join("console.log");
    let booted = wait_for(Duration::from_secs(120), || {
        std::fs::read_to_string(&console).is_ok_and(|c| c.contains("waiting for the power cut"))
    });
    assert!(
        booted,
        "{}",
        std::fs::read_to_string(&console).unwrap_or_default()
    );
    let st = machine::state(&dir).unwrap();
    let pid = st.qemu_pid.unwrap();
    assert_eq!((st.on, st.boots), (true, 1));
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    // Gone or a zombie: the container's init may never reap the orphan.
    assert!(!proc::alive(pid), "QEMU {pid} survived the cut");
    let truth = std::fs::read_to_string(dir.join("truth-1.jsonl")).unwrap();
    assert!(!truth.is_empty(), "no ground truth of boot 1");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let disk = dir.join("disk").display().to_string();
    assert!(!mounts.contains(&disk), "simfs still mounted");
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    // Power comes back: boot 2 on a fresh simfs mount, cut again while it boots.
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, vm)\n"));
    assert_eq!(ok(&uri, "status"), "on\n");
    assert_eq!(machine::state(&dir).unwrap().boots, 2);
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    assert!(
        dir.join("truth-2.jsonl").exists(),
        "no ground truth of boot 2"
    );
    let off = machine::VmState {
        on: false,
        boots: 2,
        qemu_pid: None,
        simfs_pid: None,
    };
    assert_eq!(machine::state(&dir).unwrap(), off);
}
