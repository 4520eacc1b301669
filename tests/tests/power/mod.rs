//! `plugpull power --power URI off|on|status [--json]` against real parts: a shell
//! script (`exec:`), OpenIPMI's `ipmi_sim` (`ipmi://`), net-snmp's `snmpd` with a
//! writable PDU outlet table (`apc-snmp://`), and local HTTP servers speaking the
//! Redfish, Tasmota and Shelly Gen2 APIs (`device.rs`), the simulated machine on
//! real simfs mounts (`simfs://`, `sim.rs`). Every test asserts the exact
//! states the command printed and what the device received.

use plugpull_tests::{bin, stderr, stdout};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

mod device;
mod http;
mod ipmi;
mod limits;
mod sim;
mod snmp;

/// `plugpull power --power URI ACTION [--json]`.
pub fn power(uri: &str, action: &str, json: bool) -> Output {
    let mut c = Command::new(bin("plugpull"));
    c.args(["power", "--power", uri, action]);
    if json {
        c.arg("--json");
    }
    c.output().expect("run plugpull power")
}

/// Runs the action, asserting exit 0 and nothing on stderr; its stdout.
pub fn ok(uri: &str, action: &str) -> String {
    let o = power(uri, action, false);
    assert_eq!(o.status.code(), Some(0), "{action} {uri}: {}", stderr(&o));
    assert_eq!(stderr(&o), "", "{action} {uri}");
    stdout(&o)
}

/// Runs the action, asserting exit 2 and nothing on stdout; its stderr.
pub fn fails(uri: &str, action: &str) -> String {
    let o = power(uri, action, false);
    assert_eq!(o.status.code(), Some(2), "{action} {uri}: {}", stdout(&o));
    assert_eq!(stdout(&o), "", "{action} {uri}");
    stderr(&o)
}

/// Writes `text` to `path` with `mode`.
pub fn write_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A UDP port free on 127.0.0.1 a moment ago.
pub fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// True when `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// An `exec:` script that records each action in `actions` and keeps the state
/// in `state`; `status` prints it; `fail` as the state makes every action exit 3.
fn exec_rig(dir: &Path) -> String {
    let script = dir.join("relay.sh");
    write_mode(
        &script,
        r#"#!/bin/sh
d=$(dirname "$0")
echo "$1" >> "$d/actions"
[ "$(cat "$d/state" 2>/dev/null)" = fail ] && { echo "relay jammed" >&2; exit 3; }
case $1 in
  status) cat "$d/state" ;;
  on|off) echo "$1" > "$d/state" ;;
esac
"#,
        0o755,
    );
    std::fs::write(dir.join("state"), "on\n").unwrap();
    format!("exec:{} {{action}}", script.display())
}

#[test]
fn exec_off_status_on_status() {
    let dir = tempfile::tempdir().unwrap();
    let uri = exec_rig(dir.path());
    let shown = uri.clone();
    assert_eq!(ok(&uri, "status"), "on\n");
    assert_eq!(ok(&uri, "off"), format!("off: done ({shown}, ac)\n"));
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "on"), format!("on: done ({shown}, ac)\n"));
    let o = power(&uri, "status", true);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"uri": shown, "kind": "ac", "action": "status", "ok": true,
                           "state": "on", "load_w": null})
    );
    let actions = std::fs::read_to_string(dir.path().join("actions")).unwrap();
    assert_eq!(actions, "status\noff\nstatus\non\nstatus\n");
}

#[test]
fn exec_failure_names_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let uri = exec_rig(dir.path());
    std::fs::write(dir.path().join("state"), "fail\n").unwrap();
    let script = dir.path().join("relay.sh");
    assert_eq!(
        fails(&uri, "off"),
        format!(
            "plugpull: exec: `{} off` failed with exit status 3: relay jammed\n",
            script.display()
        )
    );
    std::fs::write(dir.path().join("state"), "half\n").unwrap();
    assert_eq!(ok(&uri, "status"), "unknown (half)\n");
}

#[test]
fn bad_uris_exact_errors() {
    let cases = [
        (
            "ipmi://admin:hunter2@bmc?password-file=/x",
            "ipmi: a password in the URI is refused: put it in a file and use ?password-file=F",
        ),
        (
            "ipmi://admin@bmc",
            "ipmi: needs ?password-file=FILE (secrets come only from files)",
        ),
        (
            "apc-snmp://private@pdu/1?community-file=/x",
            "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F",
        ),
        ("tasmota://plug/two", "tasmota: the relay must be a number, not `two`"),
        ("shelly://plug:0", "shelly: bad port `0`"),
        (
            "redfish://root@bmc/redfish/v1/Chassis/1?password-file=/x",
            "redfish: needs the system's path: redfish://USER@BMC[:PORT]/redfish/v1/Systems/ID?password-file=F",
        ),
        (
            "gopher://x",
            "unknown power scheme `gopher`: expected exec, ipmi, redfish, redfish+http, apc-snmp, tasmota, shelly, simfs or qemu",
        ),
        (
            "simfs:///nonexistent/sim",
            "simfs: /nonexistent/machine.json not found: the simulated machine is set up by `plugpull demo --cuts` or the tests (see docs/power.md)",
        ),
    ];
    for (uri, want) in cases {
        let e = fails(uri, "status");
        assert_eq!(e, format!("plugpull: {want}\n"), "{uri}");
        assert!(!e.contains("hunter2") && !e.contains("private"), "{e}");
    }
    // Secrets holding `/`, `?`, `#`, `@`: refused before the URI is split, never quoted.
    let pw = "a password in the URI is refused: put it in a file and use ?password-file=F";
    let community = "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F";
    let secrets = [
        (
            "redfish://root:Zx9/q+w@bmc/redfish/v1/Systems/1?password-file=/x",
            format!("redfish: {pw}"),
            ["Zx9", "q+w"],
        ),
        (
            "ipmi://admin:s3cr?et@bmc",
            format!("ipmi: {pw}"),
            ["s3cr", "et@"],
        ),
        (
            "ipmi://admin:Hk#Qz@Wv@bmc?password-file=/x",
            format!("ipmi: {pw}"),
            ["Hk", "Qz@Wv"],
        ),
        (
            "apc-snmp://pub/lic@pdu/1",
            community.to_string(),
            ["pub", "lic"],
        ),
    ];
    for (uri, want, parts) in secrets {
        let e = fails(uri, "status");
        assert_eq!(e, format!("plugpull: {want}\n"), "{uri}");
        for p in parts {
            assert!(!e.contains(p), "{uri}: {e}");
        }
    }
    let o = power("tasmota://plug", "reboot", false);
    assert_eq!(o.status.code(), Some(2), "clap usage error");
}

#[test]
fn missing_and_shared_secret_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.pw");
    assert_eq!(
        fails(
            &format!("ipmi://admin@127.0.0.1?password-file={}", missing.display()),
            "status"
        ),
        format!(
            "plugpull: cannot read the IPMI password file {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let empty = dir.path().join("empty");
    write_mode(&empty, "", 0o600);
    assert_eq!(
        fails(
            &format!("apc-snmp://127.0.0.1/1?community-file={}", empty.display()),
            "status"
        ),
        format!(
            "plugpull: the SNMP community file {} is empty\n",
            empty.display()
        )
    );
    // A world-readable password file is used, with a warning; the password is never shown.
    let shared = dir.path().join("shared.pw");
    write_mode(&shared, "hunter2\n", 0o644);
    let o = power(
        &format!(
            "redfish+http://root@127.0.0.1:1/redfish/v1/Systems/1?password-file={}",
            shared.display()
        ),
        "status",
        false,
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.starts_with(&format!(
            "plugpull: warning: the Redfish password file {} is readable by others (mode 0644): chmod 600 it\n",
            shared.display()
        )),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
}

#[test]
fn missing_tools_name_their_package() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    write_mode(&secret, "s3cret\n", 0o600);
    let cases = [
        (
            format!("ipmi://admin@127.0.0.1?password-file={}", secret.display()),
            "ipmi: ipmitool not found: install the ipmitool package (Debian: apt-get install ipmitool)",
        ),
        (
            format!("apc-snmp://127.0.0.1/1?community-file={}", secret.display()),
            "apc-snmp: snmpget not found: install net-snmp's tools (Debian: apt-get install snmp)",
        ),
    ];
    for (uri, want) in cases {
        // An empty PATH: the tool cannot be found.
        let o = Command::new(bin("plugpull"))
            .args(["power", "--power", &uri, "status"])
            .env("PATH", dir.path())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{uri}");
        assert_eq!(stderr(&o), format!("plugpull: {want}\n"), "{uri}");
    }
}
