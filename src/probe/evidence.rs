//! Cut evidence: the counters a power loss moves, read before and after a cut.
//!
//! A drive that lost power without a clean shutdown says so in its SMART data:
//!
//! * NVMe: the SMART / Health Information log page (02h) counts "Unsafe Shutdowns"
//!   and "Power Cycles". `nvme smart-log DEV -o json` (nvme-cli) prints them as
//!   top-level keys `unsafe_shutdowns` and `power_cycles`; `smartctl -j -A DEV`
//!   prints the same page under `nvme_smart_health_information_log`.
//! * ATA: `smartctl -j -A DEV` lists the attributes in `ata_smart_attributes.table`
//!   (`id`, `raw.value`): 12 Power Cycle Count, 174 Unexpected Power Loss Count
//!   (named `Unsafe_Shutdown_Count` on Intel drives), 192 Power-off Retract Count
//!   (hard disks: heads retracted in an emergency).
//! * OCP NVMe: a drive built to the OCP Datacenter NVMe SSD specification also
//!   keeps the "SMART / Health Information Extended" log page (C0h) with its PLP
//!   start count, capacitor health and incomplete shutdowns (module [`ocp`]).
//!
//! [`parse_nvme_cli`] and [`parse_smartctl`] read one snapshot per disk
//! ([`CutEvidence`]), [`parse_ocp_smart_add_log`] its OCP counters; a whole
//! [`Snapshot`] adds the boot id and uptime; [`compare`] turns two snapshots into
//! the lines `verify` prints ("unsafe shutdowns +1: the drive saw a power loss").

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod ocp;
pub use ocp::{ocp_from_smart_add_log, parse_ocp_smart_add_log, OcpCounters};

/// One disk's power-loss counters at one moment. `None`: the drive or tool does not report it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CutEvidence {
    /// The disk's kernel name (`nvme0n1`, `sda`).
    pub disk: String,
    /// NVMe "Unsafe Shutdowns", or ATA attribute 174 (unexpected power loss count).
    pub unsafe_shutdowns: Option<u64>,
    /// NVMe "Power Cycles", or ATA attribute 12 (power cycle count).
    pub power_cycles: Option<u64>,
    /// ATA attribute 192 (power-off retract count); NVMe has none.
    pub power_off_retracts: Option<u64>,
    /// The OCP extended SMART log's counters (`nvme ocp smart-add-log`); `None` (and
    /// no `ocp` key in the JSON): not an OCP drive, nvme-cli could not read the log,
    /// or a snapshot taken before plugpull read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocp: Option<OcpCounters>,
}

/// The cut-evidence snapshot of a whole machine: taken at run start and again by `verify`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// `/proc/sys/kernel/random/boot_id` (a UUID that changes at every boot); `""` if unreadable.
    pub boot_id: String,
    /// `/proc/uptime`'s first field, seconds since boot.
    pub uptime_s: f64,
    /// One entry per leaf disk.
    pub disks: Vec<CutEvidence>,
    /// What could not be read ("nvme-cli not installed: unsafe shutdowns of nvme0n1 unknown").
    pub notes: Vec<String>,
}

/// A counter as a number or a decimal string (nvme-cli prints 128-bit counters as strings).
fn counter(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.replace(',', "").trim().parse().ok(),
        _ => None,
    }
}

fn parse_json(json: &str, tool: &str) -> Result<Value, String> {
    serde_json::from_str(json).map_err(|e| format!("{tool} output is not JSON: {e}"))
}

/// Reads the NVMe health counters of an object holding `unsafe_shutdowns` / `power_cycles`.
fn nvme_counters(disk: &str, log: &Value) -> CutEvidence {
    CutEvidence {
        disk: disk.to_string(),
        unsafe_shutdowns: counter(log.get("unsafe_shutdowns")),
        power_cycles: counter(log.get("power_cycles")),
        power_off_retracts: None,
        ocp: None,
    }
}

/// Parses `nvme smart-log DEV -o json` (nvme-cli): top-level `unsafe_shutdowns`
/// and `power_cycles`, numbers or decimal strings.
pub fn parse_nvme_cli(disk: &str, json: &str) -> Result<CutEvidence, String> {
    let v = parse_json(json, "nvme smart-log")?;
    if v.get("unsafe_shutdowns").is_none() && v.get("power_cycles").is_none() {
        return Err("nvme smart-log output has neither unsafe_shutdowns nor power_cycles".into());
    }
    Ok(nvme_counters(disk, &v))
}

/// Parses `smartctl -j -A DEV`: an NVMe drive's `nvme_smart_health_information_log`,
/// or an ATA drive's attributes 12, 174 and 192 (raw values). Errors when the
/// output has neither (e.g. a SCSI disk, or smartctl could not open the device).
///
/// ```
/// let j = r#"{"ata_smart_attributes":{"table":[{"id":174,"raw":{"value":3}}]}}"#;
/// let e = plugpull::probe::evidence::parse_smartctl("sda", j).unwrap();
/// assert_eq!((e.unsafe_shutdowns, e.power_cycles), (Some(3), None));
/// ```
pub fn parse_smartctl(disk: &str, json: &str) -> Result<CutEvidence, String> {
    let v = parse_json(json, "smartctl")?;
    if let Some(log) = v.get("nvme_smart_health_information_log") {
        return Ok(nvme_counters(disk, log));
    }
    let Some(table) = v
        .pointer("/ata_smart_attributes/table")
        .and_then(Value::as_array)
    else {
        return Err(
            match v
                .pointer("/smartctl/messages/0/string")
                .and_then(Value::as_str)
            {
                Some(m) => format!("smartctl reported no attributes: {m}"),
                None => "smartctl reported no NVMe health log and no ATA attributes".into(),
            },
        );
    };
    let attr = |id: u64| {
        table
            .iter()
            .find(|a| a.get("id").and_then(Value::as_u64) == Some(id))
            .and_then(|a| counter(a.pointer("/raw/value")))
    };
    Ok(CutEvidence {
        disk: disk.to_string(),
        unsafe_shutdowns: attr(174),
        power_cycles: attr(12),
        power_off_retracts: attr(192),
        ocp: None,
    })
}

/// A hard disk's rpm from `smartctl -j -i DEV` (or any smartctl JSON holding
/// `rotation_rate`): `None` for a solid-state drive (0), an unknown rate, or
/// output that is not smartctl JSON. Feeds the rotational flush rule.
pub fn smartctl_rpm(json: &str) -> Option<u32> {
    let v: Value = serde_json::from_str(json).ok()?;
    let rpm = v.get("rotation_rate")?.as_u64()?;
    u32::try_from(rpm).ok().filter(|r| *r > 0)
}

/// The text of an "unsafe shutdowns" delta of `d`.
pub fn unsafe_shutdowns_text(d: u64) -> String {
    match d {
        0 => "unsafe shutdowns +0: the drive was shut down cleanly or kept power \u{2014} this cut may not have tested its cache".into(),
        1 => "unsafe shutdowns +1: the drive saw a power loss".into(),
        n => format!("unsafe shutdowns +{n}: the drive saw {n} power losses"),
    }
}

/// One counter's line: `text(before, after)` saying what the rise means, "went
/// down" (a different drive or a reset counter), or "unknown" when either snapshot
/// lacks it.
fn counter_line(
    name: &str,
    before: Option<u64>,
    after: Option<u64>,
    text: impl Fn(u64, u64) -> String,
) -> String {
    match (before, after) {
        (Some(b), Some(a)) if a >= b => text(b, a),
        (Some(b), Some(a)) => format!(
            "{name} went down ({b} \u{2192} {a}): not the same drive, or its counter was reset"
        ),
        _ => format!("{name} unknown: not reported in both snapshots"),
    }
}

/// What changed between the snapshot at run start and the one after the cut, one
/// line each: the boot id first, then per disk of `before` (matched by name) its
/// unsafe shutdowns, power cycles and, when reported, power-off retracts and the
/// OCP counters ([`ocp::lines`]: nothing when neither snapshot read the OCP log).
pub fn compare(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(if before.boot_id.is_empty() || after.boot_id.is_empty() {
        "boot id unknown: cannot tell whether the machine rebooted".to_string()
    } else if before.boot_id == after.boot_id {
        "same boot id: the machine did not reboot \u{2014} the host kept power (only its storage may have lost it)".to_string()
    } else {
        "boot id changed: the machine rebooted".to_string()
    });
    for b in &before.disks {
        let Some(a) = after.disks.iter().find(|a| a.disk == b.disk) else {
            lines.push(format!("{}: not in the second snapshot", b.disk));
            continue;
        };
        let us = counter_line(
            "unsafe shutdowns",
            b.unsafe_shutdowns,
            a.unsafe_shutdowns,
            |b, a| unsafe_shutdowns_text(a - b),
        );
        let pc = counter_line("power cycles", b.power_cycles, a.power_cycles, |b, a| {
            format!("power cycles +{}", a - b)
        });
        lines.push(format!("{}: {us}", b.disk));
        lines.push(format!("{}: {pc}", b.disk));
        if b.power_off_retracts.is_some() || a.power_off_retracts.is_some() {
            let r = counter_line(
                "power-off retracts",
                b.power_off_retracts,
                a.power_off_retracts,
                |b, a| format!("power-off retracts +{}", a - b),
            );
            lines.push(format!("{}: {r}", b.disk));
        }
        for l in ocp::lines(b.ocp.as_ref(), a.ocp.as_ref()) {
            lines.push(format!("{}: {l}", b.disk));
        }
    }
    lines
}

#[cfg(test)]
mod tests;
