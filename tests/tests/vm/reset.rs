//! The second cut kind of `qemu://`: `?cut=reset` (QMP `system_reset`). The lying
//! machine of `files.rs` is reset instead of cut: its memory is lost, but its disk
//! keeps power, so the lying simfs cache under the image is destaged, not dropped.

use super::files::{acked_run, lying_machine, verify_image};
use crate::power::ok;
use plugpull_tests::Listener;
use serde_json::json;
use std::time::Duration;

/// The lying machine reset while its workload writes: nothing acknowledged is lost
/// (the disk's volatile cache kept power), the canary is lost (the guest's memory
/// was), no ground truth is written (simfs was not cut), and `verify --reset`
/// reports a reset, not a power cut: NOT MEASURED (exit 2), no finding.
#[test]
fn reset_keeps_the_disk_cache_and_is_not_a_power_cut() {
    let test = "vm::reset::reset_keeps_the_disk_cache_and_is_not_a_power_cut";
    let Some(_guests) = super::guest_on_simfs(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let l = Listener::start(tmp.path());
    let (dir, uri) = lying_machine(tmp.path(), &l, None);
    let uri = format!("{uri}?cut=reset");
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, reset)\n"));
    let run = acked_run(&dir.join("console.log"), &l, 400);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, reset)\n"));
    assert_eq!(ok(&uri, "status"), "off\n");
    assert!(!dir.join("truth-1.jsonl").exists(), "simfs was cut");
    let qemu_log = std::fs::read_to_string(dir.join("qemu.log")).unwrap();
    let image = dir.join("backing/disk.img");
    let host = tmp.path().join("host");
    let (code, report, _) = verify_image(&image, &host, &l, &run, &["--reset"]);
    assert_eq!(code, 2, "{report}\n{qemu_log}");
    let cut = &report["cut"];
    assert_eq!(
        (
            &report["not_measured"],
            &cut["measured"],
            &cut["disk_kept_power"],
            &cut["canary"]["state"],
        ),
        (&json!(true), &json!(false), &json!(true), &json!("lost")),
        "{report}"
    );
    assert_eq!(
        cut["not_measured"],
        json!(plugpull::verdict::cut::RESET_NOT_MEASURED)
    );
    assert_eq!(report["findings"], json!([]));
    let v = &report["verdicts"];
    for kind in [
        "lost_write",
        "torn_acknowledged",
        "corrupt",
        "misdirected",
        "missing",
    ] {
        assert_eq!(v[kind], json!(0), "{kind}: {report}");
    }
    assert!(v["intact"].as_u64().unwrap() > 0, "{report}");
    // Without --reset the same evidence passes as a power cut: the flag is what
    // tells verify the disk kept power.
    let (code, report, _) = verify_image(&image, &host, &l, &run, &[]);
    assert_eq!((code, &report["ok"]), (0, &json!(true)), "{report}");
}
