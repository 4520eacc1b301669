//! Redfish, Tasmota and Shelly Gen2 drivers against local servers that speak each
//! device's documented API and keep its power state.

use super::device::{Device, Request};
use super::{fails, ok, write_mode};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn get(target: &str) -> Request {
    Request {
        method: "GET".into(),
        target: target.into(),
        auth: None,
        content_type: None,
        body: String::new(),
    }
}

/// A Redfish BMC with system `/redfish/v1/Systems/1` (DMTF ComputerSystem), user
/// `root`, password `hunter2` (basic auth).
fn redfish_bmc() -> Device {
    let state = Arc::new(Mutex::new("On".to_string()));
    Device::start(move |r| {
        if r.auth.as_deref() != Some("Basic cm9vdDpodW50ZXIy") {
            return (
                401,
                r#"{"error":{"code":"Base.1.0.NoValidSession"}}"#.into(),
            );
        }
        let mut s = state.lock().unwrap();
        match (r.method.as_str(), r.target.as_str()) {
            ("GET", "/redfish/v1/Systems/1") => (
                200,
                format!(r#"{{"@odata.id":"/redfish/v1/Systems/1","Id":"1","PowerState":"{s}"}}"#),
            ),
            ("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset") => {
                let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
                match v["ResetType"].as_str() {
                    Some("ForceOff") => *s = "Off".into(),
                    Some("On") => *s = "On".into(),
                    _ => {
                        return (
                            400,
                            r#"{"error":{"code":"Base.1.0.PropertyValueNotInList"}}"#.into(),
                        )
                    }
                }
                (204, String::new())
            }
            _ => (404, "{}".into()),
        }
    })
}

#[test]
fn redfish_force_off_and_on() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("bmc.pw");
    write_mode(&pw, "hunter2\n", 0o600);
    let bmc = redfish_bmc();
    let uri = format!(
        "redfish+http://root@{}/redfish/v1/Systems/1?password-file={}",
        bmc.addr,
        pw.display()
    );
    assert_eq!(ok(&uri, "status"), "on\n");
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, dc)\n"));
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, dc)\n"));
    assert_eq!(ok(&uri, "status"), "on\n");
    let auth = Some("Basic cm9vdDpodW50ZXIy".to_string());
    let status = Request {
        auth: auth.clone(),
        ..get("/redfish/v1/Systems/1")
    };
    let reset = |t: &str| Request {
        method: "POST".into(),
        target: "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset".into(),
        auth: auth.clone(),
        content_type: Some("application/json".into()),
        body: format!(r#"{{"ResetType":"{t}"}}"#),
    };
    assert_eq!(
        bmc.take(),
        vec![
            status.clone(),
            reset("ForceOff"),
            status.clone(),
            reset("On"),
            status
        ]
    );
    // A wrong password: the BMC's 401 is an error naming the request, never the password.
    write_mode(&pw, "wrong\n", 0o600);
    let e = fails(&uri, "off");
    assert_eq!(
        e,
        format!(
            "plugpull: redfish: POST http://{}/redfish/v1/Systems/1/Actions/ComputerSystem.Reset answered HTTP 401: {{\"error\":{{\"code\":\"Base.1.0.NoValidSession\"}}}}\n",
            bmc.addr
        )
    );
    assert!(!e.contains("wrong"));
}

/// A two-relay Tasmota (`Power1`, `Power2`), both on; answers `{"POWER<n>":"ON"}`.
fn tasmota() -> Device {
    let relays = Arc::new(Mutex::new([true, true]));
    Device::start(move |r| {
        let Some(cmnd) = r.target.strip_prefix("/cm?cmnd=") else {
            return (404, "{}".into());
        };
        let (name, arg) = cmnd.split_once("%20").unwrap_or((cmnd, ""));
        let n: usize = match name.strip_prefix("Power").map(|n| n.parse()) {
            Some(Ok(n @ 1..=2)) => n,
            _ => return (200, r#"{"Command":"Unknown"}"#.into()),
        };
        let mut s = relays.lock().unwrap();
        match arg {
            "On" => s[n - 1] = true,
            "Off" => s[n - 1] = false,
            "" => {}
            _ => return (200, r#"{"Command":"Error"}"#.into()),
        }
        let v = if s[n - 1] { "ON" } else { "OFF" };
        (200, format!(r#"{{"POWER{n}":"{v}"}}"#))
    })
}

#[test]
fn tasmota_relay_two() {
    let plug = tasmota();
    let uri = format!("tasmota://{}/2", plug.addr);
    assert_eq!(ok(&uri, "off"), format!("off: done ({uri}, ac)\n"));
    assert_eq!(ok(&uri, "status"), "off\n");
    assert_eq!(ok(&uri, "on"), format!("on: done ({uri}, ac)\n"));
    assert_eq!(ok(&uri, "status"), "on\n");
    assert_eq!(
        plug.take(),
        vec![
            get("/cm?cmnd=Power2%20Off"),
            get("/cm?cmnd=Power2"),
            get("/cm?cmnd=Power2%20On"),
            get("/cm?cmnd=Power2"),
        ]
    );
    // Relay 3 does not exist: the device's answer is named.
    let bad = format!("tasmota://{}/3", plug.addr);
    assert_eq!(
        fails(&bad, "status"),
        format!(
            "plugpull: tasmota: GET http://{}/cm?cmnd=Power3: no POWER3 in the answer: {{\"Command\":\"Unknown\"}}\n",
            plug.addr
        )
    );
}

/// A Shelly Gen2 with switch 1 on, drawing 41.5 W when on and 0 W when off.
fn shelly() -> Device {
    let on = Arc::new(Mutex::new(true));
    Device::start(move |r| {
        let mut s = on.lock().unwrap();
        match r.target.as_str() {
            "/rpc/Switch.Set?id=1&on=false" | "/rpc/Switch.Set?id=1&on=true" => {
                let was = *s;
                *s = r.target.ends_with("true");
                (200, format!(r#"{{"was_on":{was}}}"#))
            }
            "/rpc/Switch.GetStatus?id=1" => {
                let w = if *s { 41.5 } else { 0.0 };
                (
                    200,
                    format!(
                        r#"{{"id":1,"source":"HTTP","output":{},"apower":{w:.1},"voltage":230.2,"current":0.18}}"#,
                        *s
                    ),
                )
            }
            _ => (
                404,
                r#"{"code":404,"message":"No handler for this id"}"#.into(),
            ),
        }
    })
}

#[test]
fn shelly_switch_and_load() {
    let plug = shelly();
    let uri = format!("shelly://{}/1", plug.addr);
    assert_eq!(ok(&uri, "status"), "on (load 41.5 W)\n");
    assert_eq!(
        ok(&uri, "off"),
        format!("off: done ({uri}, ac); load now 0 W\n")
    );
    assert_eq!(ok(&uri, "status"), "off (load 0 W)\n");
    let o = super::power(&uri, "status", true);
    let v: serde_json::Value = serde_json::from_str(&plugpull_tests::stdout(&o)).unwrap();
    assert_eq!(v["state"], "off");
    assert_eq!(v["load_w"], 0.0);
    assert_eq!(
        ok(&uri, "on"),
        format!("on: done ({uri}, ac); load now 41.5 W\n")
    );
    let status = get("/rpc/Switch.GetStatus?id=1");
    assert_eq!(
        plug.take(),
        vec![
            status.clone(),
            get("/rpc/Switch.Set?id=1&on=false"),
            status.clone(),
            status.clone(),
            status.clone(),
            get("/rpc/Switch.Set?id=1&on=true"),
            status,
        ]
    );
    let bad = format!("shelly://{}/7", plug.addr);
    assert_eq!(
        fails(&bad, "off"),
        format!(
            "plugpull: shelly: GET http://{}/rpc/Switch.Set?id=7&on=false answered HTTP 404: {{\"code\":404,\"message\":\"No handler for this id\"}}\n",
            plug.addr
        )
    );
}

/// HTTPS: `openssl s_server -WWW` (a real TLS server, serving files) answers the
/// status GET with a self-signed certificate: accepted with `&insecure`, refused without.
#[test]
fn redfish_https_self_signed() {
    if !super::have("openssl") {
        plugpull_tests::skipped(
            "power::redfish_https_self_signed",
            "openssl missing: run scripts/deps",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let www = d.join("www/redfish/v1/Systems");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("1"), r#"{"Id":"1","PowerState":"Off"}"#).unwrap();
    let pw = d.join("bmc.pw");
    write_mode(&pw, "hunter2\n", 0o600);
    let gen = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-keyout", "key.pem", "-out", "cert.pem", "-subj", "/CN=bmc"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(gen.status.success(), "{}", plugpull_tests::stderr(&gen));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("openssl")
        .args(["s_server", "-accept", &format!("127.0.0.1:{port}")])
        .args([
            "-cert",
            "../cert.pem",
            "-key",
            "../key.pem",
            "-WWW",
            "-quiet",
        ])
        .current_dir(d.join("www"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!(
        "redfish://root@127.0.0.1:{port}/redfish/v1/Systems/1?password-file={}",
        pw.display()
    );
    let insecure = format!("{base}&insecure");
    let t = Instant::now();
    while super::power(&insecure, "status", false).status.code() != Some(0) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "s_server never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ok(&insecure, "status"), "off\n");
    let e = fails(&base, "status");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        e.starts_with(&format!(
            "plugpull: redfish: https://127.0.0.1:{port}/redfish/v1/Systems/1: "
        )) && e.contains("invalid peer certificate"),
        "{e}"
    );
}
