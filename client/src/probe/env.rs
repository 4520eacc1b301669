//! The machine around the stack: virtualisation (`systemd-detect-virt`, else the
//! `hypervisor` CPU flag in `/proc/cpuinfo`) and libeatmydata preloaded through
//! `LD_PRELOAD` or `/etc/ld.so.preload`.

use plugpull::probe::Environment;
use std::process::Command;

/// This machine's environment; what could not be found out goes to `notes`.
pub fn environment(notes: &mut Vec<String>) -> Environment {
    Environment {
        virtualization: virtualization(notes),
        eatmydata_in: eatmydata(),
    }
}

fn virtualization(notes: &mut Vec<String>) -> Option<String> {
    // Exits 1 after printing "none" on bare metal: the answer is on stdout either way.
    let cmd = Command::new("systemd-detect-virt");
    if let Ok(o) =
        crate::rig::proc::output_within(cmd, "systemd-detect-virt", super::tools::TOOL_TIMEOUT)
    {
        let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !v.is_empty() {
            return Some(v);
        }
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpu.lines().find(|l| l.starts_with("flags"));
    if flags.is_some_and(|l| l.split_whitespace().any(|f| f == "hypervisor")) {
        return Some("vm".to_string());
    }
    notes.push("systemd-detect-virt not available: virtualisation unknown".to_string());
    None
}

fn eatmydata() -> Vec<String> {
    let mut v = Vec::new();
    if std::env::var("LD_PRELOAD").is_ok_and(|s| s.contains("eatmydata")) {
        v.push("LD_PRELOAD".to_string());
    }
    let pre = std::fs::read_to_string("/etc/ld.so.preload").unwrap_or_default();
    if pre
        .lines()
        .any(|l| !l.trim_start().starts_with('#') && l.contains("eatmydata"))
    {
        v.push("/etc/ld.so.preload".to_string());
    }
    v
}
