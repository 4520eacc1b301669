//! Time limits, redirects, read-backs and `--json` failures: an `exec:` command that
//! never ends (or leaves a child holding its output), an HTTP device that accepts the
//! connection and never answers, a BMC that redirects, a Shelly whose switch does not
//! follow.

use super::device::Device;
use plugpull_tests::{bin, stderr, stdout};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `plugpull power --power URI ACTION` with `PLUGPULL_POWER_TIMEOUT=1`; its output
/// and how long it took.
fn power_1s(uri: &str, action: &str, json: bool) -> (Output, Duration) {
    let t = Instant::now();
    let mut c = Command::new(bin("plugpull"));
    c.args(["power", "--power", uri, action])
        .env("PLUGPULL_POWER_TIMEOUT", "1");
    if json {
        c.arg("--json");
    }
    (c.output().unwrap(), t.elapsed())
}

#[test]
fn exec_past_its_limit_is_killed_with_its_group() {
    let (o, took) = power_1s("exec:sleep 1000", "off", false);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stdout(&o), "");
    assert_eq!(
        stderr(&o),
        "plugpull: exec: `sleep 1000` timed out after 1 s\n"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // The shell exits at once, but a background child keeps its stdout open: the
    // limit still applies, and the child dies with the group.
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let cmd = format!("sleep 1000 & echo $! > {}; echo on", pid.display());
    let (o, took) = power_1s(&format!("exec:{cmd}"), "status", false);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!("plugpull: exec: `{cmd}` timed out after 1 s\n")
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    let pid = std::fs::read_to_string(&pid).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    let t = Instant::now();
    // Gone, or a zombie waiting for its new parent to reap it.
    while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(t.elapsed() < Duration::from_secs(5), "sleep {pid} survived");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server that accepts connections and reads, but never answers.
fn silent() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 4096];
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(4) && s.read(&mut b).is_ok_and(|n| n > 0) {}
    });
    (addr, h)
}

#[test]
fn http_device_that_never_answers_times_out() {
    let (addr, h) = silent();
    let (o, took) = power_1s(&format!("tasmota://{addr}/1"), "off", false);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!("plugpull: tasmota: http://{addr}/cm?cmnd=Power1%20Off: timeout: global\n")
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    h.join().unwrap();
}

/// A BMC whose every answer is `302 Found` to its web UI; the requests it got.
fn redirecting() -> (std::net::SocketAddr, std::thread::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 4096];
        let n = s.read(&mut b).unwrap();
        s.write_all(b"HTTP/1.1 302 Found\r\nLocation: https://bmc.example/ui/login\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        String::from_utf8_lossy(&b[..n])
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    });
    (addr, h)
}

#[test]
fn redfish_redirect_is_an_error_naming_the_location() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("bmc.pw");
    super::write_mode(&pw, "hunter2\n", 0o600);
    let (addr, h) = redirecting();
    let uri = format!(
        "redfish+http://root@{addr}/redfish/v1/Systems/1?password-file={}",
        pw.display()
    );
    assert_eq!(
        super::fails(&uri, "off"),
        format!("plugpull: redfish: http://{addr}/redfish/v1/Systems/1/Actions/ComputerSystem.Reset answered HTTP 302, a redirect to https://bmc.example/ui/login: not followed (fix the URI)\n")
    );
    // One request, the POST: nothing followed.
    assert_eq!(
        h.join().unwrap(),
        "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset HTTP/1.1"
    );
    // A 2xx other than 200, 202, 204 did not reset.
    let bmc = Device::start(|_| (201, "{}".into()));
    let uri = format!(
        "redfish+http://root@{}/redfish/v1/Systems/1?password-file={}",
        bmc.addr,
        pw.display()
    );
    assert_eq!(
        super::fails(&uri, "on"),
        format!("plugpull: redfish: POST http://{}/redfish/v1/Systems/1/Actions/ComputerSystem.Reset answered HTTP 201, not 200, 202 or 204: no reset\n", bmc.addr)
    );
}

/// A Shelly whose switch 0 stays on (41.5 W) whatever it is told, or whose status
/// read fails (HTTP 500) when `broken`.
fn stuck_shelly(broken: bool) -> Device {
    Device::start(move |r| match r.target.as_str() {
        "/rpc/Switch.Set?id=0&on=false" => (200, r#"{"was_on":true}"#.into()),
        "/rpc/Switch.GetStatus?id=0" if broken => (500, r#"{"code":-1}"#.into()),
        "/rpc/Switch.GetStatus?id=0" => (200, r#"{"id":0,"output":true,"apower":41.5}"#.into()),
        _ => (404, "{}".into()),
    })
}

#[test]
fn shelly_off_must_read_back_off() {
    let plug = stuck_shelly(false);
    let uri = format!("shelly://{}", plug.addr);
    assert_eq!(
        super::fails(&uri, "off"),
        "plugpull: shelly: off sent, but the switch still reports on (load 41.5 W)\n"
    );
    let plug = stuck_shelly(true);
    let uri = format!("shelly://{}", plug.addr);
    assert_eq!(
        super::fails(&uri, "off"),
        format!("plugpull: shelly: off sent, not confirmed: shelly: GET http://{}/rpc/Switch.GetStatus?id=0 answered HTTP 500: {{\"code\":-1}}\n", plug.addr)
    );
}

#[test]
fn json_failure_prints_one_object() {
    let (o, _) = power_1s("tasmota://plug/0", "off", true);
    assert_eq!(o.status.code(), Some(2));
    let want = "tasmota: relay 0 would switch every relay (Power0): give one relay from 1, or none for a single-relay plug";
    assert_eq!(
        stdout(&o),
        format!("{}\n", serde_json::json!({"ok": false, "error": want}))
    );
    assert_eq!(stderr(&o), format!("plugpull: {want}\n"));
    let (o, _) = power_1s("exec:sleep 1000", "status", true);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"ok": false, "error": "exec: `sleep 1000` timed out after 1 s"})
    );
}

/// `ipmitool` and `snmpget` replaced by PATH shims recording their arguments: the
/// IPMI password and the SNMP community are on no child command line.
#[test]
fn secrets_on_no_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = d.join("args");
    for (tool, answer) in [("ipmitool", "Chassis Power is on"), ("snmpget", "1")] {
        super::write_mode(
            &d.join(tool),
            &format!(
                "#!/bin/sh\nprintf '%s\\n' {tool} \"$@\" >> {}\necho '{answer}'\n",
                args.display()
            ),
            0o755,
        );
    }
    let secret = d.join("secret");
    super::write_mode(&secret, "Sq3-secret-Xv\n", 0o600);
    let path = format!("{}:{}", d.display(), std::env::var("PATH").unwrap());
    for uri in [
        format!("ipmi://admin@127.0.0.1?password-file={}", secret.display()),
        format!("apc-snmp://127.0.0.1/1?community-file={}", secret.display()),
    ] {
        let o = Command::new(bin("plugpull"))
            .args(["power", "--power", &uri, "status"])
            .env("PATH", &path)
            .output()
            .unwrap();
        assert_eq!(stdout(&o), "on\n", "{uri}: {}", stderr(&o));
    }
    let got = std::fs::read_to_string(&args).unwrap();
    assert_eq!(
        got,
        format!(
            "ipmitool\n-I\nlanplus\n-H\n127.0.0.1\n-p\n623\n-U\nadmin\n-f\n{}\nchassis\npower\nstatus\n\
             snmpget\n-On\n-Oqv\n-t\n3\n-r\n1\nudp:127.0.0.1:161\n1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.1\n",
            secret.display()
        )
    );
    assert!(!got.contains("Sq3-secret-Xv"), "{got}");
}

#[test]
fn shelly_off_json_holds_the_read_back_state() {
    let on = std::sync::Arc::new(std::sync::Mutex::new(true));
    let plug = Device::start(move |r| {
        let mut s = on.lock().unwrap();
        match r.target.as_str() {
            "/rpc/Switch.Set?id=0&on=false" => {
                *s = false;
                (200, r#"{"was_on":true}"#.into())
            }
            "/rpc/Switch.GetStatus?id=0" => {
                (200, format!(r#"{{"id":0,"output":{},"apower":0.0}}"#, *s))
            }
            _ => (404, "{}".into()),
        }
    });
    let uri = format!("shelly://{}", plug.addr);
    let (o, _) = power_1s(&uri, "off", true);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"uri": format!("shelly://{}/0", plug.addr), "kind": "ac",
                           "action": "off", "ok": true, "state": "off", "load_w": 0.0})
    );
}
