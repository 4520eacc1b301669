//! The OCP extended SMART log: the power-loss counters of a datacenter NVMe drive.
//!
//! A drive built to the OCP Datacenter NVMe SSD Specification (2.0) keeps a
//! vendor-specific log page C0h, "SMART / Health Information Extended", told apart
//! from other vendors' C0h pages by its log page GUID
//! (AFD514C97C6F4F9CA4F2BFEA2810AFC5h). Three of its fields say what a power cut
//! did to the drive's power-loss protection (PLP):
//!
//! * PLP Start Count (16 bytes): how many times the drive's PLP started;
//! * Capacitor Health (2 bytes): the PLP capacitors' health, percent remaining;
//! * Incomplete Shutdowns (4 bytes): shutdowns the drive did not complete.
//!
//! nvme-cli's OCP plugin (since 2.0) prints the page: `nvme ocp smart-add-log DEV
//! -o json`. Its JSON printer was in `plugins/ocp/ocp-nvme.c` (2.0–2.3), then in
//! `plugins/ocp/ocp-smart-extended-log.c` (2.4–2.10), and is in
//! `plugins/ocp/ocp-print-json.c` since 2.11.
//! It prints the page only when the GUID matches: a drive without the page, or with
//! another vendor's C0h page, makes it print errors on stderr, nothing on stdout,
//! and exit non-zero. An nvme-cli without the OCP plugin (1.x) calls `ocp` an
//! invalid sub-command and exits non-zero. Both mean "not available" here.
//!
//! The keys and value types differ between nvme-cli versions; [`parse_ocp_smart_add_log`]
//! reads all of them:
//!
//! | nvme-cli | keys | PLP start count |
//! |---|---|---|
//! | 2.0–2.1 | `"PLP start count"`, `"Capacitor health"`, `"Incomplete shutdowns"` | a number (the 128-bit counter converted through a double) |
//! | 2.2–2.3 | the same | a decimal string (`"42"`) |
//! | 2.4 and later, default | the same | a bare decimal number, up to 128 bits |
//! | 2.12 and later, `--output-format-version=2` | `plp_start_count`, `capacitor_health`, `incomplete_shutdowns` | a bare decimal number |
//!
//! Capacitor health and incomplete shutdowns are JSON numbers in every version
//! (2.1–2.3 print them as signed 32-bit integers: a count from 2^31 up comes out
//! negative and is read as unknown). A key is matched whatever its case and with
//! `_` for a space, so `"PLP Start Count"` (the spec's own spelling) reads too.

use super::{counter, counter_line};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One NVMe disk's OCP extended SMART counters at one moment; `None`: not in the
/// output, or not a count (negative, over 64 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OcpCounters {
    /// PLP Start Count: how many times the drive started its power-loss protection.
    pub plp_start_count: Option<u64>,
    /// Capacitor Health, percent (0–100; a drive may report a value outside it).
    pub capacitor_health: Option<u16>,
    /// Incomplete Shutdowns: shutdowns the drive did not complete.
    pub incomplete_shutdowns: Option<u64>,
}

/// A key as nvme-cli spells it in any version, made comparable: lower case, `_` as
/// a space (`"PLP start count"`, `"plp_start_count"` → `plp start count`).
fn normalized(key: &str) -> String {
    key.trim().to_ascii_lowercase().replace('_', " ")
}

/// Parses `nvme ocp smart-add-log DEV -o json` (nvme-cli, any version in the module
/// table, either `--output-format-version`) of the disk `disk` (kernel name, used in
/// errors): the OCP Datacenter NVMe SSD Specification's "SMART / Health Information
/// Extended" log page C0h. Values may be JSON numbers or decimal strings; a missing
/// field is `None`. Errors when the output is not a JSON object, or holds none of
/// the three fields (then it is not this log page).
///
/// ```
/// let j = r#"{"Incomplete shutdowns":3,"Capacitor health":87,"PLP start count":41}"#;
/// let c = plugpull::probe::evidence::parse_ocp_smart_add_log("nvme0n1", j).unwrap();
/// assert_eq!(c.plp_start_count, Some(41));
/// ```
pub fn parse_ocp_smart_add_log(disk: &str, json: &str) -> Result<OcpCounters, String> {
    let v: Value = serde_json::from_str(json)
        .map_err(|e| format!("{disk}: nvme ocp smart-add-log output is not JSON: {e}"))?;
    let Some(log) = v.as_object() else {
        return Err(format!(
            "{disk}: nvme ocp smart-add-log output is not a JSON object"
        ));
    };
    let field = |name: &str| {
        log.iter()
            .find(|(k, _)| normalized(k) == name)
            .map(|(_, v)| v)
    };
    let (plp, cap, inc) = (
        field("plp start count"),
        field("capacitor health"),
        field("incomplete shutdowns"),
    );
    if plp.is_none() && cap.is_none() && inc.is_none() {
        return Err(format!(
            "{disk}: nvme ocp smart-add-log printed no PLP start count, capacitor health or incomplete shutdowns"
        ));
    }
    Ok(OcpCounters {
        plp_start_count: counter(plp),
        capacitor_health: counter(cap).and_then(|h| u16::try_from(h).ok()),
        incomplete_shutdowns: counter(inc),
    })
}

/// What one run of `nvme ocp smart-add-log DEV -o json` means: `Ok(None)`, silently,
/// when it exited non-zero or printed no JSON (not an OCP drive, an nvme-cli
/// without the OCP plugin: its help text); else [`parse_ocp_smart_add_log`] of its
/// stdout, whose error is worth a note (JSON that is not the C0h page).
pub fn ocp_from_smart_add_log(
    disk: &str,
    exited_ok: bool,
    stdout: &str,
) -> Result<Option<OcpCounters>, String> {
    if !exited_ok || serde_json::from_str::<Value>(stdout).is_err() {
        return Ok(None);
    }
    parse_ocp_smart_add_log(disk, stdout).map(Some)
}

/// A capacitor health as a percentage, or the raw value when it is not one.
fn percent(h: u16) -> String {
    if h <= 100 {
        format!("{h} %")
    } else {
        format!("{h} (not a percentage)")
    }
}

/// The capacitor health line: the value after the cut, and the one at run start
/// when it differs; `None` when neither snapshot has it.
fn capacitor_line(before: Option<u16>, after: Option<u16>) -> Option<String> {
    Some(match (before, after) {
        (Some(b), Some(a)) if a != b => {
            format!(
                "capacitor health {} ({} at run start)",
                percent(a),
                percent(b)
            )
        }
        (_, Some(a)) => format!("capacitor health {}", percent(a)),
        (Some(b), None) => format!(
            "capacitor health unknown after the cut ({} at run start)",
            percent(b)
        ),
        (None, None) => return None,
    })
}

/// The OCP lines of one disk between the snapshot at run start (`before`) and the
/// one after the cut, without the disk's name: the PLP start count's rise
/// ("PLP fired 1 time during the cut (PLP start count 41 → 42)"), the capacitor
/// health ("capacitor health 87 %"), the incomplete shutdowns' rise ("incomplete
/// shutdowns rose by 1 (3 → 4)"). A field neither snapshot has gives no line, so a
/// drive without the log gives none; one only one snapshot has is "unknown".
pub fn lines(before: Option<&OcpCounters>, after: Option<&OcpCounters>) -> Vec<String> {
    let (b, a) = (
        before.copied().unwrap_or_default(),
        after.copied().unwrap_or_default(),
    );
    let mut out = Vec::new();
    if b.plp_start_count.is_some() || a.plp_start_count.is_some() {
        out.push(counter_line(
            "PLP start count",
            b.plp_start_count,
            a.plp_start_count,
            |b, a| match a - b {
                0 => format!("PLP did not fire during the cut (PLP start count {b} \u{2192} {a})"),
                1 => format!("PLP fired 1 time during the cut (PLP start count {b} \u{2192} {a})"),
                n => {
                    format!("PLP fired {n} times during the cut (PLP start count {b} \u{2192} {a})")
                }
            },
        ));
    }
    out.extend(capacitor_line(b.capacitor_health, a.capacitor_health));
    if b.incomplete_shutdowns.is_some() || a.incomplete_shutdowns.is_some() {
        out.push(counter_line(
            "incomplete shutdowns",
            b.incomplete_shutdowns,
            a.incomplete_shutdowns,
            |b, a| match a - b {
                0 => format!("incomplete shutdowns unchanged ({b} \u{2192} {a})"),
                n => format!("incomplete shutdowns rose by {n} ({b} \u{2192} {a})"),
            },
        ));
    }
    out
}

#[cfg(test)]
mod tests;
