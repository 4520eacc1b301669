//! The cut-evidence parsers on published real `smartctl -j` output and one
//! captured on the build machine (`tests/fixtures/README.md` names the sources),
//! and the delta texts.

use super::*;

const NVME: &str = include_str!("../../../tests/fixtures/smartctl-nvme-samsung-970-evo-plus.json");
const ATA: &str = include_str!("../../../tests/fixtures/smartctl-ata-intel-s3520-excerpt.json");
const HDD: &str = include_str!("../../../tests/fixtures/smartctl-ata-hgst-hus726040-excerpt.json");
const NO_SMART: &str = include_str!("../../../tests/fixtures/smartctl-vda-unable-to-detect.json");

#[test]
fn smartctl_nvme_health_log() {
    let e = parse_smartctl("nvme0n1", NVME).unwrap();
    assert_eq!(
        e,
        CutEvidence {
            disk: "nvme0n1".into(),
            unsafe_shutdowns: Some(12),
            power_cycles: Some(16),
            power_off_retracts: None,
            ocp: None,
        }
    );
}

#[test]
fn smartctl_ata_attributes() {
    let e = parse_smartctl("sdm", ATA).unwrap();
    assert_eq!(
        (e.unsafe_shutdowns, e.power_cycles, e.power_off_retracts),
        (Some(167), Some(186), None)
    );
}

#[test]
fn smartctl_hard_disk_retracts_and_rpm() {
    let e = parse_smartctl("sda", HDD).unwrap();
    assert_eq!(
        (e.unsafe_shutdowns, e.power_cycles, e.power_off_retracts),
        (None, Some(11), Some(2256))
    );
    assert_eq!(smartctl_rpm(HDD), Some(7200));
    assert_eq!(smartctl_rpm(ATA), None, "an SSD reports rotation_rate 0");
    assert_eq!(smartctl_rpm(NVME), None);
    assert_eq!(smartctl_rpm(NO_SMART), None);
}

#[test]
fn a_hard_disk_cut() {
    let mut before = snap("a", None, None);
    before.disks = vec![parse_smartctl("sda", HDD).unwrap()];
    let mut after = before.clone();
    after.boot_id = "b".into();
    after.disks[0].power_cycles = Some(12);
    after.disks[0].power_off_retracts = Some(2257);
    assert_eq!(
        compare(&before, &after),
        [
            "boot id changed: the machine rebooted",
            "sda: unsafe shutdowns unknown: not reported in both snapshots",
            "sda: power cycles +1",
            "sda: power-off retracts +1",
        ]
    );
}

#[test]
fn nvme_cli_counters_as_numbers_or_strings() {
    // The nvme-cli shape: the log page's keys at top level. The input is the
    // NVMe fixture's health log lifted to top level, once as numbers and once as
    // decimal strings (as nvme-cli 2.x prints 128-bit counters).
    let v: Value = serde_json::from_str(NVME).unwrap();
    let log = v["nvme_smart_health_information_log"].clone();
    let e = parse_nvme_cli("nvme0n1", &log.to_string()).unwrap();
    assert_eq!((e.unsafe_shutdowns, e.power_cycles), (Some(12), Some(16)));
    let mut s = log.clone();
    s["unsafe_shutdowns"] = Value::String("12".into());
    s["power_cycles"] = Value::String("16".into());
    let e = parse_nvme_cli("nvme0n1", &s.to_string()).unwrap();
    assert_eq!((e.unsafe_shutdowns, e.power_cycles), (Some(12), Some(16)));
    assert_eq!(
        parse_nvme_cli("nvme0n1", ATA).unwrap_err(),
        "nvme smart-log output has neither unsafe_shutdowns nor power_cycles"
    );
    assert!(parse_nvme_cli("nvme0n1", "not json")
        .unwrap_err()
        .starts_with("nvme smart-log output is not JSON: "));
}

#[test]
fn smartctl_without_attributes_is_an_error() {
    assert_eq!(
        parse_smartctl("vda", NO_SMART).unwrap_err(),
        "smartctl reported no attributes: /dev/vda: Unable to detect device type"
    );
}

fn snap(boot: &str, us: Option<u64>, pc: Option<u64>) -> Snapshot {
    let mut e = parse_smartctl("nvme0n1", NVME).unwrap();
    e.unsafe_shutdowns = us;
    e.power_cycles = pc;
    Snapshot {
        boot_id: boot.into(),
        uptime_s: 1.0,
        disks: vec![e],
        notes: vec![],
    }
}

#[test]
fn a_cut_the_drive_saw() {
    let lines = compare(
        &snap("a", Some(12), Some(16)),
        &snap("b", Some(13), Some(17)),
    );
    assert_eq!(
        lines,
        [
            "boot id changed: the machine rebooted",
            "nvme0n1: unsafe shutdowns +1: the drive saw a power loss",
            "nvme0n1: power cycles +1",
        ]
    );
}

#[test]
fn a_cut_the_drive_did_not_see() {
    let lines = compare(
        &snap("a", Some(12), Some(16)),
        &snap("b", Some(12), Some(17)),
    );
    assert_eq!(
        lines[1],
        "nvme0n1: unsafe shutdowns +0: the drive was shut down cleanly or kept power \u{2014} this cut may not have tested its cache"
    );
}

#[test]
fn no_reboot_unknown_and_reset_counters() {
    let lines = compare(&snap("a", Some(12), None), &snap("a", Some(3), Some(16)));
    assert_eq!(
        lines,
        [
            "same boot id: the machine did not reboot \u{2014} the host kept power (only its storage may have lost it)",
            "nvme0n1: unsafe shutdowns went down (12 \u{2192} 3): not the same drive, or its counter was reset",
            "nvme0n1: power cycles unknown: not reported in both snapshots",
        ]
    );
    let mut gone = snap("", None, None);
    gone.disks.clear();
    assert_eq!(
        compare(&snap("a", Some(1), Some(1)), &gone),
        [
            "boot id unknown: cannot tell whether the machine rebooted",
            "nvme0n1: not in the second snapshot",
        ]
    );
    assert_eq!(
        unsafe_shutdowns_text(2),
        "unsafe shutdowns +2: the drive saw 2 power losses"
    );
}
