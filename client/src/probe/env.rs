//! The machine around the stack: the virtual machine (`systemd-detect-virt --vm`,
//! else the `hypervisor` CPU flag in `/proc/cpuinfo`) and the container
//! (`systemd-detect-virt --container`) the probe runs in, each on its own (a
//! container inside a VM names both), and libeatmydata preloaded through
//! `LD_PRELOAD` or `/etc/ld.so.preload`.

use plugpull::probe::Environment;
use std::process::Command;

/// This machine's environment; what could not be found out goes to `notes`.
pub fn environment(notes: &mut Vec<String>) -> Environment {
    let container = detect_virt("--container");
    Environment {
        virtualization: vm(notes),
        container,
        eatmydata_in: eatmydata(),
    }
}

/// `systemd-detect-virt FLAG`'s answer (`none` included); `None` when it did not run.
fn detect_virt(flag: &str) -> Option<String> {
    // Exits 1 after printing "none": the answer is on stdout either way.
    let mut cmd = Command::new("systemd-detect-virt");
    cmd.arg(flag);
    let o = crate::rig::proc::output_within(cmd, "systemd-detect-virt", super::tools::TOOL_TIMEOUT)
        .ok()?;
    let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (!v.is_empty()).then_some(v)
}

fn vm(notes: &mut Vec<String>) -> Option<String> {
    if let Some(v) = detect_virt("--vm") {
        return Some(v);
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
