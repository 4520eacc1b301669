//! The OCP extended SMART log parser on output shaped exactly as nvme-cli prints
//! it, and the lines `compare` adds. There is no NVMe drive on the build machine:
//! the log fixtures are written from nvme-cli's printer source (the versions named
//! on each), with made-up counter values; none was captured from a drive. Only the
//! failed run on a non-NVMe disk was recorded here.

use super::super::{compare, CutEvidence, Snapshot};
use super::*;

/// nvme-cli 2.16, `nvme ocp smart-add-log /dev/nvme0n1 -o json` (default
/// `--output-format-version=1`): `json_smart_extended_log_v1` in
/// `plugins/ocp/ocp-print-json.c`, json-c's pretty printer, a drive with log page
/// version 3. 2.4–2.10 (`plugins/ocp/ocp-smart-extended-log.c`) print the same keys
/// with the same value types.
const V2_16: &str = r#"{
  "Physical media units written":{
    "hi":0,
    "lo":5248319635456
  },
  "Physical media units read":{
    "hi":0,
    "lo":3914521231360
  },
  "Bad user nand blocks - Raw":0,
  "Bad user nand blocks - Normalized":100,
  "Bad system nand blocks - Raw":0,
  "Bad system nand blocks - Normalized":100,
  "XOR recovery count":0,
  "Uncorrectable read error count":0,
  "Soft ecc error count":0,
  "End to end detected errors":0,
  "End to end corrected errors":0,
  "System data percent used":1,
  "Refresh counts":0,
  "Max User data erase counts":38,
  "Min User data erase counts":12,
  "Number of Thermal throttling events":0,
  "Current throttling status":0,
  "PCIe correctable error count":0,
  "Incomplete shutdowns":3,
  "Percent free blocks":9,
  "Capacitor health":87,
  "Unaligned I/O":0,
  "Security Version Number":1,
  "NUSE - Namespace utilization":1875385008,
  "PLP start count":41,
  "Endurance estimate":14000000,
  "Log page version":3,
  "Log page GUID":"0xafd514c97c6f4f9ca4f2bfea2810afc5",
  "Errata Version Field":0,
  "Point Version Field":0,
  "Minor Version Field":0,
  "Major Version Field":2,
  "NVMe Base Errata Version":0,
  "PCIe Link Retraining Count":0,
  "Power State Change Count":4
}
"#;

/// nvme-cli 2.16 with `--output-format-version=2`: `json_smart_extended_log_v2` in
/// `plugins/ocp/ocp-print-json.c` (2.12 and later), the same drive a cut later.
const V2_16_FORMAT_2: &str = r#"{
  "physical_media_units_written":{
    "hi":0,
    "lo":5248320159744
  },
  "physical_media_units_read":{
    "hi":0,
    "lo":3914521755648
  },
  "bad_user_nand_blocks_raw":0,
  "bad_user_nand_blocks_normalized":100,
  "bad_system_nand_blocks_raw":0,
  "bad_system_nand_blocks_normalized":100,
  "xor_recovery_count":0,
  "uncorrectable_read_errors":0,
  "soft_ecc_error_count":0,
  "end_to_end_detected_errors":0,
  "end_to_end_corrected_errors":0,
  "system_data_percent_used":1,
  "refresh_count":0,
  "max_user_data_erase_count":38,
  "min_user_data_erase_count":12,
  "thermal_throttling_events":0,
  "current_throttling_status":0,
  "pcie_correctable_errors":0,
  "incomplete_shutdowns":4,
  "percent_free_blocks":9,
  "capacitor_health":86,
  "unaligned_io":0,
  "security_version_number":1,
  "nuse_namespace_utilization":1875385008,
  "plp_start_count":42,
  "endurance_estimate":14000000,
  "log_page_version":3,
  "log_page_guid":"0xafd514c97c6f4f9ca4f2bfea2810afc5",
  "errata_version_field":0,
  "point_version_field":0,
  "minor_version_field":0,
  "major_version_field":2,
  "nvme_base_errata_version":0,
  "pcie_link_retraining_count":0,
  "power_state_change_count":5
}
"#;

/// nvme-cli 2.3: `ocp_print_C0_log_json` in `plugins/ocp/ocp-nvme.c`. The old
/// shape: the 128-bit PLP start count as a decimal string, "End to end corrected
/// errors" before "detected", "NVMe Errata Version", no "Power State Change Count".
const V2_3: &str = r#"{
  "Physical media units written":{
    "hi":0,
    "lo":5248319635456
  },
  "Physical media units read":{
    "hi":0,
    "lo":3914521231360
  },
  "Bad user nand blocks - Raw":0,
  "Bad user nand blocks - Normalized":100,
  "Bad system nand blocks - Raw":0,
  "Bad system nand blocks - Normalized":100,
  "XOR recovery count":0,
  "Uncorrectable read error count":0,
  "Soft ecc error count":0,
  "End to end corrected errors":0,
  "End to end detected errors":0,
  "System data percent used":1,
  "Refresh counts":0,
  "Max User data erase counts":38,
  "Min User data erase counts":12,
  "Number of Thermal throttling events":0,
  "Current throttling status":0,
  "PCIe correctable error count":0,
  "Incomplete shutdowns":3,
  "Percent free blocks":9,
  "Capacitor health":87,
  "Unaligned I/O":0,
  "Security Version Number":1,
  "NUSE - Namespace utilization":1875385008,
  "PLP start count":"41",
  "Endurance estimate":"14000000",
  "Log page version":3,
  "Log page GUID":"0xafd514c97c6f4f9ca4f2bfea2810afc5",
  "Errata Version Field":0,
  "Point Version Field":0,
  "Minor Version Field":0,
  "Major Version Field":2,
  "NVMe Errata Version":0,
  "PCIe Link Retraining Count":0
}
"#;

/// nvme-cli 1.16 (no OCP plugin), `nvme ocp smart-add-log /dev/nvme0n1 -o json`:
/// exit status 231 (-ENOTTY), and on stdout (`plugin.c`: `handle_plugin`, then
/// `general_help`) the start of its help text.
const V1_16_NO_PLUGIN: &str = "ERROR: Invalid sub-command 'ocp'\nnvme-1.16\nusage: nvme <command> [<device>] [<args>]\n\n\n\nThe following are all implemented sub-commands:\n";

fn ocp(plp: u64, cap: u16, inc: u64) -> OcpCounters {
    OcpCounters {
        plp_start_count: Some(plp),
        capacitor_health: Some(cap),
        incomplete_shutdowns: Some(inc),
    }
}

#[test]
fn every_nvme_cli_shape() {
    assert_eq!(
        parse_ocp_smart_add_log("nvme0n1", V2_16),
        Ok(ocp(41, 87, 3))
    );
    assert_eq!(
        parse_ocp_smart_add_log("nvme0n1", V2_16_FORMAT_2),
        Ok(ocp(42, 86, 4))
    );
    assert_eq!(parse_ocp_smart_add_log("nvme0n1", V2_3), Ok(ocp(41, 87, 3)));
    // The spec's own spelling, and a missing field.
    let j = r#"{"PLP Start Count":"1,024","Capacitor Health":100}"#;
    assert_eq!(
        parse_ocp_smart_add_log("nvme0n1", j),
        Ok(OcpCounters {
            plp_start_count: Some(1024),
            capacitor_health: Some(100),
            incomplete_shutdowns: None,
        })
    );
}

#[test]
fn values_that_are_not_counts_are_unknown() {
    // 2.4 and later print the 128-bit count as a bare number: one past u64::MAX;
    // 2.1–2.3 print a 32-bit count from 2^31 up as a negative int.
    let j = V2_16
        .replace(
            "\"PLP start count\":41",
            "\"PLP start count\":18446744073709551616",
        )
        .replace(
            "\"Incomplete shutdowns\":3",
            "\"Incomplete shutdowns\":-2147483648",
        )
        .replace("\"Capacitor health\":87", "\"Capacitor health\":65536");
    assert_eq!(
        parse_ocp_smart_add_log("nvme0n1", &j),
        Ok(OcpCounters::default())
    );
}

#[test]
fn not_the_ocp_log() {
    assert_eq!(
        parse_ocp_smart_add_log("nvme0n1", r#"{"unsafe_shutdowns":3}"#),
        Err("nvme0n1: nvme ocp smart-add-log printed no PLP start count, capacitor health or incomplete shutdowns".into())
    );
    assert_eq!(
        parse_ocp_smart_add_log("nvme0n1", "[1]"),
        Err("nvme0n1: nvme ocp smart-add-log output is not a JSON object".into())
    );
    assert!(parse_ocp_smart_add_log("nvme0n1", V1_16_NO_PLUGIN)
        .unwrap_err()
        .starts_with("nvme0n1: nvme ocp smart-add-log output is not JSON: "));
}

#[test]
fn a_drive_or_nvme_cli_without_the_log_is_silently_none() {
    // Recorded on the build machine, nvme-cli 2.3 on a virtio disk:
    // `nvme ocp smart-add-log /dev/vda -o json` exits 1 with nothing on stdout and
    // "/dev/vda: Operation not permitted" and its usage on stderr. On an NVMe drive
    // without the page (or with another vendor's C0h) nvme-cli 2.x, by its source,
    // also exits 1 with nothing on stdout ("ERROR : OCP : Unable to read C0 data
    // from buffer" or "Unknown GUID in C0 Log Page data" on stderr).
    assert_eq!(ocp_from_smart_add_log("vda", false, ""), Ok(None));
    assert_eq!(ocp_from_smart_add_log("nvme0n1", false, ""), Ok(None));
    assert_eq!(
        ocp_from_smart_add_log("nvme0n1", false, V1_16_NO_PLUGIN),
        Ok(None)
    );
    // Help text is no JSON, whatever the exit status; a failed run's JSON is ignored.
    assert_eq!(
        ocp_from_smart_add_log("nvme0n1", true, V1_16_NO_PLUGIN),
        Ok(None)
    );
    assert_eq!(ocp_from_smart_add_log("nvme0n1", false, V2_16), Ok(None));
    assert_eq!(
        ocp_from_smart_add_log("nvme0n1", true, V2_16),
        Ok(Some(ocp(41, 87, 3)))
    );
    // JSON that is not the page is worth a note.
    assert!(ocp_from_smart_add_log("nvme0n1", true, "{}").is_err());
}

fn snap(boot: &str, o: Option<OcpCounters>) -> Snapshot {
    Snapshot {
        boot_id: boot.into(),
        uptime_s: 1.0,
        disks: vec![CutEvidence {
            disk: "nvme0n1".into(),
            unsafe_shutdowns: Some(12),
            power_cycles: Some(16),
            power_off_retracts: None,
            ocp: o,
        }],
        notes: vec![],
    }
}

#[test]
fn compare_adds_the_ocp_lines() {
    let before = parse_ocp_smart_add_log("nvme0n1", V2_16).unwrap();
    let after = parse_ocp_smart_add_log("nvme0n1", V2_16_FORMAT_2).unwrap();
    let mut a = snap("b", Some(after));
    a.disks[0].unsafe_shutdowns = Some(13);
    a.disks[0].power_cycles = Some(17);
    assert_eq!(
        compare(&snap("a", Some(before)), &a),
        [
            "boot id changed: the machine rebooted",
            "nvme0n1: unsafe shutdowns +1: the drive saw a power loss",
            "nvme0n1: power cycles +1",
            "nvme0n1: PLP fired 1 time during the cut (PLP start count 41 \u{2192} 42)",
            "nvme0n1: capacitor health 86 % (87 % at run start)",
            "nvme0n1: incomplete shutdowns rose by 1 (3 \u{2192} 4)",
        ]
    );
}

#[test]
fn no_log_no_lines() {
    let lines = compare(&snap("a", None), &snap("b", None));
    assert_eq!(
        lines,
        [
            "boot id changed: the machine rebooted",
            "nvme0n1: unsafe shutdowns +0: the drive was shut down cleanly or kept power \u{2014} this cut may not have tested its cache",
            "nvme0n1: power cycles +0",
        ]
    );
}

#[test]
fn each_ocp_line() {
    let l = |b: Option<OcpCounters>, a: Option<OcpCounters>| lines(b.as_ref(), a.as_ref());
    assert_eq!(
        l(Some(ocp(41, 87, 3)), Some(ocp(41, 87, 3))),
        [
            "PLP did not fire during the cut (PLP start count 41 \u{2192} 41)",
            "capacitor health 87 %",
            "incomplete shutdowns unchanged (3 \u{2192} 3)",
        ]
    );
    assert_eq!(
        l(Some(ocp(41, 87, 3)), Some(ocp(44, 65535, 1))),
        [
            "PLP fired 3 times during the cut (PLP start count 41 \u{2192} 44)",
            "capacitor health 65535 (not a percentage) (87 % at run start)",
            "incomplete shutdowns went down (3 \u{2192} 1): not the same drive, or its counter was reset",
        ]
    );
    // Read after the cut only (nvme-cli installed meanwhile), or before only.
    assert_eq!(
        l(None, Some(ocp(42, 87, 4))),
        [
            "PLP start count unknown: not reported in both snapshots",
            "capacitor health 87 %",
            "incomplete shutdowns unknown: not reported in both snapshots",
        ]
    );
    let only_plp = OcpCounters {
        plp_start_count: Some(5),
        ..OcpCounters::default()
    };
    assert_eq!(
        l(Some(ocp(5, 90, 0)), Some(only_plp)),
        [
            "PLP did not fire during the cut (PLP start count 5 \u{2192} 5)",
            "capacitor health unknown after the cut (90 % at run start)",
            "incomplete shutdowns unknown: not reported in both snapshots",
        ]
    );
    assert_eq!(l(None, None), Vec::<String>::new());
}

#[test]
fn reports_without_the_field_read_and_stay_the_same() {
    // A snapshot stored before OCP counters existed reads with `ocp: None`, and one
    // without them serializes without the key.
    let old =
        r#"{"disk":"nvme0n1","unsafe_shutdowns":12,"power_cycles":16,"power_off_retracts":null}"#;
    let e: CutEvidence = serde_json::from_str(old).unwrap();
    assert_eq!(e.ocp, None);
    assert_eq!(serde_json::to_string(&e).unwrap(), old);
    let with = CutEvidence {
        ocp: Some(ocp(41, 87, 3)),
        ..e
    };
    let j = serde_json::to_string(&with).unwrap();
    assert_eq!(
        j,
        r#"{"disk":"nvme0n1","unsafe_shutdowns":12,"power_cycles":16,"power_off_retracts":null,"ocp":{"plp_start_count":41,"capacitor_health":87,"incomplete_shutdowns":3}}"#
    );
    assert_eq!(serde_json::from_str::<CutEvidence>(&j).unwrap(), with);
}
