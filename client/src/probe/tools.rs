//! Facts that need more than one sysfs file: a leaf disk's attributes, and what
//! `dmsetup`, `zfs`, `hdparm`, `smartctl` and `nvme` say when installed. A missing
//! tool adds a note ("nvme-cli not installed: VWC unknown"), so does one that ran
//! and failed (naming the tool, the disk and its reason); neither is fatal.

use crate::rig::proc::on_path;
use plugpull::probe::{flush::WriteCache, sysfs, Layer, Leaf};
use std::path::Path;
use std::process::Command;

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// How long a tool may take before it is killed (a sleeping or wedged device).
pub const TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `cmd ARGS`'s stdout when it ran and exited 0 within [`TOOL_TIMEOUT`], else why
/// not: `"CMD ARGS failed (exit status: N): REASON"`, the reason being the first
/// line of its stderr, else the first line of its stdout naming the device (the
/// last argument; smartctl prints its errors there), else nothing more.
fn run_or_why(cmd: &str, args: &[&str]) -> Result<String, String> {
    let mut c = Command::new(cmd);
    c.args(args).stdin(std::process::Stdio::null());
    let shown = format!("{cmd} {}", args.join(" "));
    let o = crate::rig::proc::output_within(c, cmd, TOOL_TIMEOUT)
        .map_err(|e| format!("{shown} failed: {e}"))?;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if o.status.success() {
        return Ok(out);
    }
    let err = String::from_utf8_lossy(&o.stderr);
    let dev = args.last().copied().unwrap_or_default();
    let first = |t: &str, keep: &dyn Fn(&str) -> bool| {
        t.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && keep(l))
            .map(String::from)
    };
    let why = first(&err, &|_| true)
        .or_else(|| first(&out, &|l| l.starts_with(dev)))
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    Err(format!("{shown} failed ({}){why}", o.status))
}

/// [`run_or_why`] for a fact of `disk`: a failure becomes a note naming the tool and
/// the disk, and what stays unknown.
fn ask(
    cmd: &str,
    args: &[&str],
    disk: &str,
    what: &str,
    notes: &mut Vec<String>,
) -> Option<String> {
    run_or_why(cmd, args)
        .map_err(|e| notes.push(format!("{disk}: {e}: {what} unknown")))
        .ok()
}

/// The first file of `names` under `dir` that reads as non-empty.
fn first(dir: &Path, names: &[&str]) -> String {
    names
        .iter()
        .find_map(|n| read(&dir.join(n)).filter(|s| !s.is_empty()))
        .unwrap_or_default()
}

/// A whole disk's facts; `dir` is its canonical sysfs directory.
pub fn leaf(name: &str, dir: &Path, notes: &mut Vec<String>) -> Leaf {
    let q = |f: &str| read(&dir.join("queue").join(f));
    let num = |f: &str| q(f).and_then(|s| s.parse().ok());
    let mut l = Leaf {
        name: name.to_string(),
        model: first(dir, &["device/model"]),
        firmware: first(dir, &["device/firmware_rev", "device/rev"]),
        serial: first(dir, &["device/serial", "serial"]),
        wwn: first(dir, &["device/wwid", "wwid"]),
        transport: sysfs::transport(&dir.to_string_lossy()),
        rotational: q("rotational").and_then(|s| sysfs::flag(&s)),
        logical_block_size: num("logical_block_size"),
        physical_block_size: num("physical_block_size"),
        write_cache: q("write_cache").and_then(|s| WriteCache::parse(&s)),
        fua: q("fua").and_then(|s| sysfs::flag(&s)),
        cache_type: scsi_cache_type(dir).or_else(|| read(&dir.join("cache_type"))),
        atomic_write_unit_min: num("atomic_write_unit_min_bytes"),
        atomic_write_unit_max: num("atomic_write_unit_max_bytes"),
        drive_write_cache: None,
    };
    l.drive_write_cache = drive_write_cache(&l, notes);
    l
}

/// `device/scsi_disk/*/cache_type` of a SCSI (or SATA through libata) disk.
fn scsi_cache_type(dir: &Path) -> Option<String> {
    let d = std::fs::read_dir(dir.join("device/scsi_disk")).ok()?;
    d.flatten().find_map(|e| read(&e.path().join("cache_type")))
}

/// What the drive says of its own write cache, asked with the tool its transport
/// takes; `None` (with a note) when the tool is missing or could not tell.
fn drive_write_cache(l: &Leaf, notes: &mut Vec<String>) -> Option<String> {
    let dev = format!("/dev/{}", l.name);
    match l.transport.as_str() {
        "nvme" => {
            if !on_path("nvme") {
                notes.push(format!("nvme-cli not installed: {}'s VWC unknown", l.name));
                return None;
            }
            let j = ask(
                "nvme",
                &["id-ctrl", "-o", "json", &dev],
                &l.name,
                "VWC",
                notes,
            )?;
            let v: serde_json::Value = serde_json::from_str(&j).ok()?;
            // NVMe base spec, Identify Controller: VWC bit 0 = a volatile write cache
            // is present; AWUN/AWUPF = atomic write unit (normal / power fail), in
            // logical blocks, 0's based.
            let vwc = v.get("vwc")?.as_u64()?;
            let n = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_u64())
                    .map_or("?".to_string(), |x| (x + 1).to_string())
            };
            Some(format!(
                "nvme id-ctrl: volatile write cache {}, atomic write unit {} blocks normal, {} on power fail",
                if vwc & 1 == 1 { "present" } else { "absent" },
                n("awun"),
                n("awupf")
            ))
        }
        "ata" | "scsi" | "usb" => {
            const WHAT: &str = "its own write-cache setting";
            if on_path("hdparm") {
                let o = ask("hdparm", &["-W", &dev], &l.name, WHAT, notes)?;
                return o
                    .lines()
                    .find(|x| x.contains("write-caching"))
                    .map(|x| format!("hdparm -W: {}", x.trim()));
            }
            if on_path("smartctl") {
                let args = ["-n", "standby", "-g", "wcache", &dev];
                let o = ask("smartctl", &args, &l.name, WHAT, notes)?;
                return o
                    .lines()
                    .find(|x| x.starts_with("Write cache"))
                    .map(|x| format!("smartctl: {}", x.trim()));
            }
            notes.push(format!(
                "hdparm and smartctl not installed: {}'s own write-cache setting unknown",
                l.name
            ));
            None
        }
        _ => None,
    }
}

/// A dm device's target types and cache mode from `dmsetup table NAME`; a note
/// when `dmsetup` is not installed or fails.
pub fn dm_table(dm_name: &str, notes: &mut Vec<String>) -> (Vec<String>, Option<String>) {
    if !on_path("dmsetup") {
        notes.push(format!(
            "dmsetup not installed: {dm_name}'s target types unknown"
        ));
        return (Vec::new(), None);
    }
    match ask(
        "dmsetup",
        &["table", dm_name],
        dm_name,
        "target types",
        notes,
    ) {
        Some(t) => sysfs::dm_table(&t),
        None => (Vec::new(), None),
    }
}

/// A ZFS dataset's `sync` and `logbias` (`zfs get -H -o value sync,logbias`).
pub fn zfs(dataset: &str, notes: &mut Vec<String>) -> Layer {
    let got = if on_path("zfs") {
        let args = ["get", "-H", "-o", "value", "sync,logbias", dataset];
        ask("zfs", &args, dataset, "sync setting", notes)
    } else {
        notes.push(format!(
            "zfs not installed: {dataset}'s sync setting unknown"
        ));
        None
    };
    let mut v = got
        .as_deref()
        .unwrap_or("")
        .lines()
        .map(|s| s.trim().to_string());
    Layer::Zfs {
        dataset: dataset.to_string(),
        sync: v.next(),
        logbias: v.next(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real tool run on a real device that is no drive (`/dev/null`, posing as an
    /// ATA disk): it fails, and the note names the tool, its exit and the disk.
    #[test]
    fn a_drive_tool_that_fails_is_a_note_naming_tool_and_disk() {
        let l = Leaf {
            name: "null".into(),
            transport: "ata".into(),
            ..Leaf::default()
        };
        let mut notes = Vec::new();
        assert_eq!(drive_write_cache(&l, &mut notes), None);
        let want = if on_path("hdparm") {
            let o = Command::new("hdparm")
                .args(["-W", "/dev/null"])
                .output()
                .unwrap();
            let e = String::from_utf8_lossy(&o.stderr);
            let first = e
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap()
                .to_string();
            format!("null: hdparm -W /dev/null failed ({}): {first}: its own write-cache setting unknown", o.status)
        } else if on_path("smartctl") {
            "null: smartctl -n standby -g wcache /dev/null failed (exit status: 1): /dev/null: Unable to detect device type: its own write-cache setting unknown".to_string()
        } else {
            "hdparm and smartctl not installed: null's own write-cache setting unknown".to_string()
        };
        assert_eq!(notes, [want]);
    }
}
