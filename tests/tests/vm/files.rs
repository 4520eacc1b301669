//! The file workload inside a guest with ext4 on its virtio disk, the whole machine
//! cut (QEMU SIGKILLed), the image's filesystem then mounted on the host (loop:
//! ext4 replays its journal as at the next boot) and verified there against the
//! listener's ledger: an honest disk, a lying one, and a clean shutdown.

use super::{bundle, skip_without_vm};
use crate::power::ok;
use plugpull_client::rig::vm::{self, machine, qemu, HostMount};
use plugpull_tests::simfs::{Fate, Truth};
use plugpull_tests::{bin, ledger_file, verify_json, wait_for, Listener};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The guest's load: 256 blocks of 4 KiB.
const LOAD: &str = "--size 1MiB --block-size 4KiB";

/// The guest for `image` running the file workload against `l`, shut down cleanly
/// `shutdown_s` seconds after the workload started, when given.
fn spec(image: PathBuf, l: &Listener, shutdown_s: Option<u32>) -> qemu::Spec {
    let settings = vm::settings(
        &vm::write_settings(port(l), "target", LOAD),
        "hang",
        shutdown_s,
    );
    guest(bundle(), image, settings)
}

/// A guest of `b` (512 MiB, one CPU) with `image` as its disk (`cache=writeback`)
/// and `settings` on its kernel command line.
pub(super) fn guest(b: vm::bundle::Bundle, image: PathBuf, settings: Vec<String>) -> qemu::Spec {
    qemu::Spec {
        kernel: b.kernel,
        initrd: b.initrd,
        image,
        cache: "writeback".into(),
        settings,
        mem_mib: 512,
        cpus: 1,
    }
}

/// The listener's port on the host's loopback.
pub(super) fn port(l: &Listener) -> u16 {
    l.addr().rsplit_once(':').unwrap().1.parse().unwrap()
}

/// Waits for the guest (console file `console`) to start its run and for `l` to
/// record `n` acks of it; the run id.
pub(super) fn acked_run(console: &Path, l: &Listener, n: u64) -> String {
    let text = || std::fs::read_to_string(console).unwrap_or_default();
    let run = vm::guest_run_id(console, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("no run started: {e}"))
        .to_string();
    let ledger = l.ledger_path(&run);
    let acks = || {
        ledger_file::batches(&ledger)
            .values()
            .map(|b| b.1)
            .sum::<u64>()
    };
    let acked = wait_for(Duration::from_secs(60), || ledger.exists() && acks() >= n);
    assert!(acked, "fewer than {n} acks; console:\n{}", text());
    run
}

/// Mounts `image` on the host and verifies `run` there (`extra`: more verify
/// arguments): exit code, report, and
/// the target's extent map (`filefrag -v -b4096`: file block → image block).
pub(super) fn verify_image(
    image: &Path,
    at: &Path,
    l: &Listener,
    run: &str,
    extra: &[&str],
) -> (i32, Value, Vec<u64>) {
    let mut m = HostMount::mount(image, at).unwrap();
    let target = m.at.join("target");
    let mut args = vec!["--run", run, "--target", target.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, report, err) = verify_json(l, &args);
    let map = extent_map(&target);
    m.umount().unwrap();
    eprintln!("exit {code}; verdicts {}; {err}", report["verdicts"]);
    (code, report, map)
}

/// The image block (4 KiB) of each 4 KiB block of `file`, from `filefrag -v`'s
/// extent lines (`N: LOGICAL..END: PHYSICAL..END: LENGTH: FLAGS`).
fn extent_map(file: &Path) -> Vec<u64> {
    let o = std::process::Command::new("filefrag")
        .args(["-v", "-b4096"])
        .arg(file)
        .output()
        .expect("filefrag (e2fsprogs)");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut map = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(':').map(str::trim).collect();
        // The start of field `i` when it is a range `A..B` (the header is not).
        let start = |i: usize| {
            let (a, _) = f.get(i)?.split_once("..")?;
            a.trim().parse::<u64>().ok()
        };
        let (Some(logical), Some(physical)) = (start(1), start(2)) else {
            continue;
        };
        let len: u64 = f[3].parse().unwrap();
        assert_eq!(
            logical,
            map.len() as u64,
            "a hole in {}:\n{text}",
            file.display()
        );
        map.extend(physical..physical + len);
    }
    assert!(
        !map.is_empty(),
        "no extents:\n{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    map
}

/// Asserts that a verify `report` carries the evidence that its cut could have
/// failed: the cut measured, the guest's memory lost the canary's newest records.
pub(super) fn assert_cut_measured(report: &Value) {
    let cut = &report["cut"];
    assert_eq!(
        (&cut["measured"], &cut["canary"]["state"]),
        (&json!(true), &json!("lost")),
        "{report}"
    );
}

/// A machine in `tmp/vm` whose image sits on a lying simfs mount (destage after
/// 1 s), its guest running the file workload against `l`; its directory and URI.
pub(super) fn lying_machine(
    tmp: &Path,
    l: &Listener,
    shutdown_s: Option<u32>,
) -> (PathBuf, String) {
    let sd = machine::SimDisk {
        bin: bin("plugpull-simfs"),
        mode: "lying".into(),
        seed: 3,
        args: vec!["--destage-delay-ms".into(), "1000".into()],
    };
    let image = tmp.join("vm/disk/disk.img");
    let dir = machine::create(&tmp.join("vm"), &spec(image, l, shutdown_s), Some(sd)).unwrap();
    vm::make_image(&dir.join("backing/disk.img"), 32).unwrap();
    let uri = format!("qemu://{}", dir.display());
    (dir, uri)
}

/// A plain image keeps every write QEMU completed (the host's page cache survives
/// the kill): an honest disk under a real filesystem, so nothing acknowledged is
/// lost: exit 0, `ok`, no finding.
#[test]
fn honest_image_loses_nothing_acknowledged() {
    if skip_without_vm("vm::files::honest_image_loses_nothing_acknowledged") {
        return;
    }
    let _guests = super::light();
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let image = tmp.path().join("disk.img");
    vm::make_image(&image, 32).unwrap();
    let mut g = qemu::Vm::start(&spec(image.clone(), &l, None), tmp.path()).unwrap();
    let run = acked_run(&g.console, &l, 200);
    g.kill();
    let (code, report, _) = verify_image(&image, &tmp.path().join("host"), &l, &run, &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["ok"], json!(true));
    assert_eq!(report["findings"], json!([]));
    assert_cut_measured(&report);
    assert!(
        report["verdicts"]["intact"].as_u64().unwrap() > 0,
        "{report}"
    );
}

/// The image on a lying simfs mount (fsync returns at once, destage after 1 s),
/// cut through the `qemu://` driver (QEMU killed, simfs cut at once): the writes
/// of the last second before the cut are gone under the guest's ext4, so verify
/// fails with lost writes, and nothing else.
#[test]
fn lying_image_loses_acknowledged_writes() {
    let test = "vm::files::lying_image_loses_acknowledged_writes";
    let Some(_guests) = super::guest_on_simfs(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let (dir, uri) = lying_machine(tmp.path(), &l, None);
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, vm)\n"));
    let run = acked_run(&dir.join("console.log"), &l, 400);
    // The guest's ext4 committed the target's creation and allocation when the run
    // began (its fsyncs): cut well after simfs destaged that commit, so what the cut
    // loses is the run's writes, not the file (a loaded host delays the destaging).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    let image = dir.join("backing/disk.img");
    let (code, report, map) = verify_image(&image, &tmp.path().join("host"), &l, &run, &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["ok"], json!(false));
    let v = &report["verdicts"];
    assert!(v["lost_write"].as_u64().unwrap() > 0, "{report}");
    for other in ["torn_acknowledged", "corrupt", "misdirected", "missing"] {
        assert_eq!(v[other], json!(0), "{other}: {report}");
    }
    // Every lost block lies where simfs dropped a write to the image at the cut.
    let text = std::fs::read_to_string(dir.join("truth-1.jsonl")).unwrap();
    let truth = Truth::parse(&text).unwrap();
    let dropped: Vec<(u64, u64)> = truth
        .of_file("disk.img")
        .filter(|w| w.fate == Fate::Dropped)
        .map(|w| (w.offset, w.offset + w.len))
        .collect();
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(
        findings.len() as u64,
        report["findings_total"].as_u64().unwrap()
    );
    for f in findings {
        let at = map[f["block"].as_u64().unwrap() as usize] * 4096;
        let hit = dropped.iter().any(|&(a, b)| a < at + 4096 && at < b);
        assert!(
            hit,
            "lost block {f} (image bytes {at}..) was not dropped by simfs"
        );
    }
}

/// The lying machine shut down cleanly (the workload killed 4 s after it started,
/// `sync`, unmount, power off; then `off` unmounts simfs cleanly, destaging its
/// cache): the volatile canary beside the target survives, so verify cannot tell a
/// power loss from this shutdown: NOT MEASURED (exit 2), no finding.
#[test]
fn clean_shutdown_is_not_measured() {
    let test = "vm::files::clean_shutdown_is_not_measured";
    let Some(_guests) = super::guest_on_simfs(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let (dir, uri) = lying_machine(tmp.path(), &l, Some(4));
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, vm)\n"));
    let run = acked_run(&dir.join("console.log"), &l, 1);
    let down = wait_for(Duration::from_secs(90), || ok(&uri, "status") == "off\n");
    let console = std::fs::read_to_string(dir.join("console.log")).unwrap();
    assert!(down, "the guest did not power off:\n{console}");
    assert!(console.contains("plugpull-vm: unmounted /mnt"), "{console}");
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, vm)\n"));
    let image = dir.join("backing/disk.img");
    let (code, report, _) = verify_image(&image, &tmp.path().join("host"), &l, &run, &[]);
    assert_eq!(code, 2, "{report}");
    let canary = &report["cut"]["canary"];
    assert_eq!(
        (&report["not_measured"], &report["ok"], &canary["state"]),
        (&json!(true), &json!(false), &json!("survived")),
        "{report}"
    );
    // Every record the agent reported written is on the medium; the canary may have
    // written one more before the shutdown stopped it.
    assert!(
        canary["on_medium"].as_u64() >= canary["issued"].as_u64(),
        "{report}"
    );
    assert_eq!(report["findings"], json!([]));
    assert_eq!(report["verdicts"]["lost_write"], json!(0));
}
