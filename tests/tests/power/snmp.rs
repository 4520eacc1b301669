//! `apc-snmp://` against a real net-snmp `snmpd` (Debian `snmpd`) on a free UDP
//! port, driven by the real `snmpset`/`snmpget` (Debian `snmp`). snmpd hands the
//! APC outlet subtree to a `pass` script (snmpd.conf(5)) that stores each outlet's
//! value in a file, so writes to the control OID really change the state OID.

use super::{fails, free_udp_port, have, ok, write_mode};
use plugpull_tests::skipped;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running snmpd with write community `pducomm`; killed on drop.
struct Snmpd {
    child: Child,
    port: u16,
}

impl Drop for Snmpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> Snmpd {
    let port = free_udp_port();
    let pass = dir.join("pdu.sh");
    write_mode(
        &pass,
        r#"#!/bin/sh
# snmpd `pass` handler: -g OID | -s OID TYPE VALUE; outlet N's value in outlet.N.
d=$(dirname "$0")
ctl=.1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.
sta=.1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.
echo "$*" >> "$d/requests"
case $2 in
  $ctl*) n=${2#$ctl} ;;
  $sta*) n=${2#$sta} ;;
  *) exit 0 ;;
esac
case $n in *[!0-9]*|'') exit 0 ;; esac
f="$d/outlet.$n"
[ -f "$f" ] || exit 0
case $1 in
  -g) printf '%s\ninteger\n%s\n' "$2" "$(cat "$f")" ;;
  -s) case $2 in
        $ctl*) [ "$3" = integer ] && echo "$4" > "$f" || echo wrong-type ;;
        *) echo not-writable ;;
      esac ;;
esac
"#,
        0o755,
    );
    let conf = format!(
        "agentAddress udp:127.0.0.1:{port}\nrwcommunity pducomm 127.0.0.1\npass .1.3.6.1.4.1.318.1.1.12.3 {}\n",
        pass.display()
    );
    std::fs::write(dir.join("snmpd.conf"), conf).unwrap();
    let child = Command::new("snmpd")
        .args(["-f", "-Lo", "-C", "-c"])
        .arg(dir.join("snmpd.conf"))
        .arg("-p")
        .arg(dir.join("snmpd.pid"))
        .env("MIBS", "")
        .env("SNMP_PERSISTENT_DIR", dir.join("persist"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start snmpd");
    Snmpd { child, port }
}

fn skip() -> bool {
    if have("snmpd") && have("snmpset") && have("snmpget") {
        return false;
    }
    skipped(
        "power::snmp",
        "snmpd, snmpset or snmpget missing: run scripts/deps (Debian snmpd, snmp)",
    );
    true
}

fn wait_ready(sim: &mut Snmpd, uri: &str) {
    let t = Instant::now();
    while super::power(uri, "status", false).status.code() != Some(0) {
        if let Ok(Some(st)) = sim.child.try_wait() {
            panic!("snmpd exited: {st}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "snmpd never answered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn outlet(dir: &Path, n: u32) -> String {
    std::fs::read_to_string(dir.join(format!("outlet.{n}"))).unwrap()
}

#[test]
fn apc_outlet_off_status_on_status() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("outlet.3"), "1\n").unwrap();
    let comm = d.join("pdu.community");
    write_mode(&comm, "pducomm\n", 0o600);
    let mut sim = start(d);
    let uri = format!(
        "apc-snmp://127.0.0.1:{}/3?community-file={}",
        sim.port,
        comm.display()
    );
    wait_ready(&mut sim, &uri);
    let shown = format!("{uri}&on=1&off=2");
    std::fs::remove_file(d.join("requests")).unwrap();
    assert_eq!(ok(&uri, "status"), "on\n");
    assert_eq!(ok(&uri, "off"), format!("off: done ({shown}, ac)\n"));
    assert_eq!(outlet(d, 3), "2\n");
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "on"), format!("on: done ({shown}, ac)\n"));
    assert_eq!(outlet(d, 3), "1\n");
    assert_eq!(ok(&uri, "status"), "on\n");
    let sets: Vec<String> = std::fs::read_to_string(d.join("requests"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("-s"))
        .map(String::from)
        .collect();
    assert_eq!(
        sets,
        [
            "-s .1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.3 integer 2",
            "-s .1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.3 integer 1"
        ]
    );
    // The wrong community: snmpd does not answer it.
    write_mode(&comm, "public\n", 0o600);
    assert_eq!(
        fails(&uri, "status"),
        format!(
            "plugpull: apc-snmp: snmpget 1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.3 on udp:127.0.0.1:{0} failed: Timeout: No Response from udp:127.0.0.1:{0}.\n",
            sim.port
        )
    );
}

#[test]
fn tripp_lite_reversed_values() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("outlet.5"), "2\n").unwrap();
    let comm = d.join("pdu.community");
    write_mode(&comm, "pducomm\n", 0o600);
    let mut sim = start(d);
    let uri = format!(
        "apc-snmp://127.0.0.1:{}/5?community-file={}&on=2&off=1",
        sim.port,
        comm.display()
    );
    wait_ready(&mut sim, &uri);
    assert_eq!(ok(&uri, "status"), "on\n");
    ok(&uri, "off");
    assert_eq!(outlet(d, 5), "1\n");
    assert_eq!(ok(&uri, "status"), "off\n");
    ok(&uri, "on");
    assert_eq!(outlet(d, 5), "2\n");
    assert_eq!(ok(&uri, "status"), "on\n");
    // A value that is neither: reported as unknown, with the device's answer.
    std::fs::write(d.join("outlet.6"), "7\n").unwrap();
    let odd = uri.replace("/5?", "/6?");
    assert_eq!(ok(&odd, "status"), "unknown (7)\n");
}
