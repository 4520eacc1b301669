//! `ipmi://` against OpenIPMI's `ipmi_sim` (Debian `openipmi`), reached by the real
//! `ipmitool -I lanplus` (Debian `ipmitool`) on a free UDP port.
//!
//! ipmi_sim's own chassis power follows a `startcmd` process, and refuses power
//! control while no VM is attached to it; so the simulated BMC gets a
//! `chassis_control` program instead (ipmi_lan(5); called as `PROG get power` /
//! `PROG set power 0|1`), which keeps the power state in a file the test reads.
//! ipmi_sim does not answer ipmitool's cipher-suite query (ipmitool waits 10 s and
//! falls back), so the URI names cipher suite 3 (`&cipher=3`).

use super::{fails, free_udp_port, have, ok, write_mode};
use plugpull_tests::skipped;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running ipmi_sim with user `admin` / password `s3cret`; killed on drop.
struct IpmiSim {
    child: Child,
    port: u16,
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path) -> IpmiSim {
    let port = free_udp_port();
    let ctl = dir.join("chassis.sh");
    write_mode(
        &ctl,
        r#"#!/bin/sh
# ipmi_sim chassis_control: DEVICE get PARM... | DEVICE set PARM VALUE...
f="$(dirname "$0")/power"
shift
op=$1; shift
case $op in
get) for p in "$@"; do
       case $p in
       power) [ -f "$f" ] || echo 1 > "$f"; echo "power:$(cat "$f")" ;;
       boot) echo "boot:default" ;;
       *) echo "no $p"; exit 1 ;;
       esac
     done ;;
set) while [ $# -ge 2 ]; do
       [ "$1" = power ] && echo "$2" > "$f"
       shift 2
     done ;;
*) exit 1 ;;
esac
"#,
        0o755,
    );
    let auths = "none md2 md5 straight";
    let conf = format!(
        "name \"plugpull\"\nset_working_mc 0x20\n  startlan 1\n    addr 127.0.0.1 {port}\n    priv_limit admin\n    allowed_auths_callback {auths}\n    allowed_auths_user {auths}\n    allowed_auths_operator {auths}\n    allowed_auths_admin {auths}\n    guid a123456789abcdefa123456789abcdef\n  endlan\n  chassis_control \"{} 0x20\"\n  user 2 true \"admin\" \"s3cret\" admin 10 {auths}\n",
        ctl.display()
    );
    std::fs::write(dir.join("lan.conf"), conf).unwrap();
    // The BMC itself: without `mc_setbmc` before `mc_add`, ipmi_sim 1.0.13 crashes.
    std::fs::write(
        dir.join("bmc.emu"),
        "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\nmc_enable 0x20\n",
    )
    .unwrap();
    std::fs::create_dir(dir.join("state")).unwrap();
    let child = Command::new("ipmi_sim")
        .arg("-c")
        .arg(dir.join("lan.conf"))
        .arg("-f")
        .arg(dir.join("bmc.emu"))
        .arg("-s")
        .arg(dir.join("state"))
        .arg("-n")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ipmi_sim");
    IpmiSim { child, port }
}

#[test]
fn ipmi_sim_off_status_on_status() {
    if !have("ipmi_sim") || !have("ipmitool") {
        skipped(
            "power::ipmi_sim_off_status_on_status",
            "ipmi_sim or ipmitool missing: run scripts/deps (Debian openipmi, ipmitool)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("bmc.pw");
    write_mode(&pw, "s3cret\n", 0o600);
    let mut sim = start(dir.path());
    let uri = format!(
        "ipmi://admin@127.0.0.1:{}?password-file={}&cipher=3",
        sim.port,
        pw.display()
    );
    // Wait for the simulator to answer (it binds its port after reading its files).
    let t = Instant::now();
    while super::power(&uri, "status", false).status.code() != Some(0) {
        if let Ok(Some(st)) = sim.child.try_wait() {
            panic!("ipmi_sim exited: {st}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "ipmi_sim never answered"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let power_file = dir.path().join("power");
    assert_eq!(ok(&uri, "status"), "on\n");
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, dc)\n"));
    assert_eq!(std::fs::read_to_string(&power_file).unwrap(), "0\n");
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, dc)\n"));
    assert_eq!(std::fs::read_to_string(&power_file).unwrap(), "1\n");
    assert_eq!(ok(&uri, "status"), "on\n");
    // A wrong password: ipmitool cannot open a session; the error names the action.
    write_mode(&pw, "wrong\n", 0o600);
    let e = fails(&uri, "off");
    assert!(
        e.starts_with(&format!(
            "plugpull: ipmi: `ipmitool ... chassis power off` on 127.0.0.1:{} failed: ",
            sim.port
        )),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&power_file).unwrap(), "1\n");
}
