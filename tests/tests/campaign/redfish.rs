//! A campaign driven through a real Redfish service: `sushy-emulator` (PyPI's
//! `sushy-tools`, installed by `scripts/deps`) with its fake system, which applies a
//! reset 1–11 s after it answered, as real BMCs may. The agent runs on this host and
//! nothing cuts it: the point is the controller's reading of power, not a loss.

use super::*;
use plugpull_tests::{skipped, wait_for};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// sushy-emulator's default fake system.
const SYSTEM: &str = "/redfish/v1/Systems/27946b59-9e44-4fa7-8e91-f3527a1ef094";

/// sushy-emulator serving its fake system on a free loopback port, its state in
/// `dir`; killed on drop.
struct Sushy {
    child: Child,
    port: u16,
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `tool` is on the PATH.
fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Starts sushy-emulator and waits until it serves its systems.
fn sushy(dir: &Path) -> Sushy {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let state = dir.join("sushy-state");
    std::fs::create_dir_all(&state).unwrap();
    let conf = dir.join("sushy.conf");
    std::fs::write(
        &conf,
        format!(
            "SUSHY_EMULATOR_STATE_DIR = {:?}\nSUSHY_EMULATOR_FAKE_DRIVER = True\n",
            state.display().to_string()
        ),
    )
    .unwrap();
    let child = Command::new("sushy-emulator")
        .arg("--config")
        .arg(&conf)
        .args(["-i", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sushy-emulator");
    let s = Sushy { child, port };
    let up = wait_for(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "sushy-emulator did not listen on {port}");
    s
}

/// `plugpull power --power URI ACTION`'s stdout, trimmed; panics when it fails.
fn power(uri: &str, action: &str) -> String {
    let o = plugpull(&["power", "--power", uri, action]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    stdout(&o).trim().to_string()
}

/// A Redfish BMC that applies ForceOff and On seconds late: the controller reads the
/// status until each has taken, so every cut records "driver: off", the next cut
/// starts with power on, and the campaign ends with the system on. Nothing cut the
/// agent, so both cuts are not measured (exit 2). Before the first run the fake
/// system is off: the controller says so at once instead of waiting for an agent.
#[test]
fn a_late_redfish_bmc_is_read_until_its_state_settles() {
    if !on_path("sushy-emulator") {
        skipped(
            "campaign::redfish::a_late_redfish_bmc_is_read_until_its_state_settles",
            "sushy-emulator missing: run scripts/deps (PyPI sushy-tools)",
        );
        return;
    }
    let w = Witness::start(&["t.dat"]);
    let bmc = sushy(w.dir.path());
    let pw = w.path("bmc.pw");
    std::fs::write(&pw, "unused\n").unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let uri = format!(
        "redfish+http://admin@127.0.0.1:{}{SYSTEM}?password-file={}",
        bmc.port,
        pw.display()
    );
    assert_eq!(power(&uri, "status"), "off");
    let wl = format!("file --target {} --size 1MiB", w.path("t.dat").display());
    w.create(
        "r",
        "h1",
        &uri,
        &wl,
        &["--cuts", "2", "--cut-after", "1s", "--off", "0s"],
    );
    let mut agent = Command::new(bin("plugpull"))
        .args(&w.agent_argv("h1")[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // Off before the first cut: named at once, the agent not blamed.
    let o = w.campaign("run", &["--name", "r"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        "plugpull: campaign r stopped: h1: machine h1 is off (driver says off): nothing runs \
         there to be cut; power it on (`plugpull power --power URI on`); rerun `plugpull \
         campaign run --name r` to resume"
    );

    power(&uri, "on");
    assert!(wait_for(Duration::from_secs(20), || power(&uri, "status") == "on"));
    let o = w.campaign("run", &["--name", "r"]);
    // The system is on the moment the controller is done: its last "on" had taken.
    assert_eq!(power(&uri, "status"), "on");
    let _ = agent.kill();
    let _ = agent.wait();
    assert_eq!(o.status.code(), Some(2), "{}\n{}", stdout(&o), stderr(&o));
    assert_eq!(
        stderr(&o),
        "plugpull: no valid cut (2 cuts: 0 valid (0 failed, 0 passed), 2 not measured, 0 \
         invalid): nothing was measured\n"
    );
    let v = w.status("r");
    let c = cuts(&v);
    assert_eq!(c.len(), 2, "{c:?}");
    for (i, (index, validity, reason)) in c.into_iter().enumerate() {
        assert_eq!((index, validity.as_str()), (i as u64 + 1, "not measured"));
        assert!(
            reason.starts_with("the agent kept acknowledging writes "),
            "{reason}"
        );
        // ForceOff had taken when the cut was recorded, whenever sushy applied it.
        assert_eq!(v["cuts"][i]["evidence"]["driver_status"], json!("off"));
    }
    assert_eq!(v["cuts"][0]["driver"], json!("redfish+http"));
    assert_eq!(v["cuts"][0]["kind"], json!("dc"));
}
