//! The cut-evidence snapshot: boot id, uptime, and per leaf disk the counters a
//! power loss moves, read with `nvme smart-log DEV -o json` (NVMe, nvme-cli) or
//! `smartctl -j -A DEV` (ATA; NVMe when nvme-cli is missing), and on an NVMe drive
//! also the OCP extended SMART log (`nvme ocp smart-add-log DEV -o json`) when it
//! has one. A missing tool or an unreadable drive is a note, never an error; a drive
//! or nvme-cli without the OCP log is not even a note. The parsers and the deltas
//! are in the core ([`plugpull::probe::evidence`]).

use plugpull::probe::evidence::{
    ocp_from_smart_add_log, parse_nvme_cli, parse_smartctl, smartctl_rpm, CutEvidence, OcpCounters,
    Snapshot,
};
use std::process::Command;

/// What running one tool gave: its stdout, or why there is none.
enum Ran {
    Output(String),
    NotInstalled,
    Failed(String),
}

fn run(tool: &str, args: &[&str]) -> Ran {
    if !crate::rig::proc::on_path(tool) {
        return Ran::NotInstalled;
    }
    let mut c = Command::new(tool);
    c.args(args).stdin(std::process::Stdio::null());
    match crate::rig::proc::output_within(c, tool, super::tools::TOOL_TIMEOUT)
        .map_err(|e| e.to_string())
    {
        // smartctl's exit status is a bit mask of findings; its JSON is still valid.
        Ok(o) if !o.stdout.is_empty() => {
            Ran::Output(String::from_utf8_lossy(&o.stdout).into_owned())
        }
        Ok(o) => Ran::Failed(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Ran::Failed(e),
    }
}

/// An NVMe disk's OCP extended SMART counters (log page C0h) from `nvme ocp
/// smart-add-log DEV -o json`: `Ok(None)` when the drive has no such log or this
/// nvme-cli cannot read it (a non-zero exit, no JSON: an old nvme-cli's help text)
/// or it did not answer in time; `Err` (a note) only for JSON that is not the log.
fn ocp_counters(disk: &str, dev: &str) -> Result<Option<OcpCounters>, String> {
    let mut c = Command::new("nvme");
    c.args(["ocp", "smart-add-log", dev, "-o", "json"])
        .stdin(std::process::Stdio::null());
    match crate::rig::proc::output_within(c, "nvme", super::tools::TOOL_TIMEOUT) {
        Ok(o) => ocp_from_smart_add_log(
            disk,
            o.status.success(),
            &String::from_utf8_lossy(&o.stdout),
        ),
        Err(_) => Ok(None),
    }
}

/// One disk's counters, or the note saying why there are none. `notes` gets what
/// could be read only in part (an OCP log in an unknown shape).
fn disk_evidence(disk: &str, notes: &mut Vec<String>) -> Result<CutEvidence, String> {
    let dev = format!("/dev/{disk}");
    if disk.starts_with("nvme") {
        match run("nvme", &["smart-log", &dev, "-o", "json"]) {
            Ran::Output(out) => {
                let mut e = parse_nvme_cli(disk, &out).map_err(|e| format!("{disk}: {e}"))?;
                match ocp_counters(disk, &dev) {
                    Ok(o) => e.ocp = o,
                    Err(note) => notes.push(note),
                }
                return Ok(e);
            }
            Ran::Failed(e) => return Err(format!("{disk}: {e}")),
            Ran::NotInstalled => {}
        }
    }
    match run("smartctl", &["-j", "-n", "standby", "-A", &dev]) {
        Ran::Output(out) => parse_smartctl(disk, &out).map_err(|e| format!("{disk}: {e}")),
        Ran::Failed(e) => Err(format!("{disk}: {e}")),
        Ran::NotInstalled if disk.starts_with("nvme") => Err(format!(
            "nvme-cli and smartmontools not installed: unsafe shutdowns of {disk} unknown"
        )),
        Ran::NotInstalled => Err(format!(
            "smartmontools not installed: unsafe shutdowns of {disk} unknown"
        )),
    }
}

/// A rotational disk's rpm from `smartctl -j -i /dev/DISK`; `None` when smartctl
/// is missing or does not know it (a virtual disk, a drive without the field).
pub fn rpm_of(disk: &str) -> Option<u32> {
    match run(
        "smartctl",
        &["-j", "-n", "standby", "-i", &format!("/dev/{disk}")],
    ) {
        Ran::Output(out) => smartctl_rpm(&out),
        _ => None,
    }
}

/// Seconds since boot (`/proc/uptime`'s first field); 0 when unreadable.
pub fn uptime_s() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The snapshot of this machine now, for the leaf `disks` (kernel names). Every
/// disk whose counters cannot be read adds a note instead.
pub fn snapshot(disks: &[String]) -> Snapshot {
    let mut snap = Snapshot {
        boot_id: crate::target_id::boot_id(),
        uptime_s: uptime_s(),
        disks: Vec::new(),
        notes: Vec::new(),
    };
    for d in disks {
        match disk_evidence(d, &mut snap.notes) {
            Ok(e) => snap.disks.push(e),
            Err(note) => snap.notes.push(note),
        }
    }
    snap
}
