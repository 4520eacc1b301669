//! Drive-only cuts (`exec+device:`): the host and its agent stay up, the simulated
//! drive (a `plugpull-simfs` mount) loses power under load. The runs end with the
//! device error, the agent waits for the target to come back, verifies, and starts
//! the next run; no new boot id is expected.

use super::*;
use plugpull_tests::simfs::skip_without_fuse;
use std::process::{Child, Command, Stdio};

/// Kills the agent and unmounts the drive, whatever happened.
struct Rig {
    agent: Option<Child>,
    mnt: PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        let _ = Command::new(bin("plugpull-simfs"))
            .args([
                "umount",
                "--mountpoint",
                self.mnt.to_str().unwrap(),
                "--timeout-secs",
                "10",
            ])
            .output();
    }
}

/// The drive's power script: "off" cuts the simfs mount (every operation fails
/// with EIO from then on), "on" unmounts it and mounts the backing directory again.
fn drive_script(w: &Witness, mode: &str) -> String {
    let simfs = bin("plugpull-simfs");
    let (b, m) = (w.path("backing"), w.path("mnt"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(&m).unwrap();
    let body = format!(
        "S={simfs}; B={b}; M={m}\n\
         up() {{ grep -q \" $M fuse\" /proc/mounts; }}\n\
         case \"$1\" in\n\
         off) $S cut --mountpoint $M > /dev/null; echo off > $B/../drive-state ;;\n\
         on) if up; then $S umount --mountpoint $M --timeout-secs 30; fi\n\
             setsid $S mount --backing $B --mountpoint $M --mode {mode} --destage-delay-ms 2000 >> $B/../simfs.log 2>&1 < /dev/null &\n\
             for i in $(seq 100); do up && echo on > $B/../drive-state && exit 0; sleep 0.1; done; echo 'simfs did not mount' >&2; exit 1 ;;\n\
         status) cat $B/../drive-state ;;\n\
         esac\n",
        simfs = simfs.display(),
        b = b.display(),
        m = m.display()
    );
    let s = script(w.dir.path(), "drive", &body);
    format!("exec+device:{} {{action}}", s.display())
}

fn device_campaign(mode: &str, cuts: &str) -> (Witness, Rig, Output) {
    let w = Witness::start(&["mnt/t.dat"]);
    let uri = drive_script(&w, mode);
    let s = uri
        .strip_prefix("exec+device:")
        .unwrap()
        .replace("{action}", "on");
    assert!(Command::new("sh")
        .args(["-c", &s])
        .status()
        .unwrap()
        .success());
    let mut rig = Rig {
        agent: None,
        mnt: w.path("mnt"),
    };
    let log = std::fs::File::create(w.path("agent.log")).unwrap();
    rig.agent = Some(
        Command::new(bin("plugpull"))
            .args(&w.agent_argv("h1")[1..])
            .args(["--device-timeout", "60"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let wl = format!(
        "file --target {} --size 1MiB",
        w.path("mnt/t.dat").display()
    );
    let args = [
        "--name",
        "d",
        "--host",
        "h1",
        "--power",
        &uri,
        "--workload",
        &wl,
    ];
    let plan = [
        "--cuts",
        cuts,
        "--cut-after",
        "1s..2s",
        "--off",
        "1s",
        "--boot-timeout",
        "60s",
    ];
    let o = w.campaign("create", &[&args[..], &plan[..]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = w.campaign("run", &["--name", "d"]);
    (w, rig, o)
}

/// An honest drive cut alone twice: both cuts valid (the same boot id is expected),
/// kind `device`, both verified after the agent waited for the target, both PASS.
#[test]
fn drive_only_cuts_on_an_honest_drive_pass() {
    if skip_without_fuse("drive_only_cuts_on_an_honest_drive_pass") {
        return;
    }
    let (w, _rig, o) = device_campaign("honest", "2");
    let log = std::fs::read_to_string(w.path("agent.log")).unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}\n{log}",
        stdout(&o),
        stderr(&o)
    );
    let v = w.status("d");
    assert_eq!(
        cuts(&v),
        vec![
            (1, "valid".into(), String::new()),
            (2, "valid".into(), String::new())
        ]
    );
    for c in v["cuts"].as_array().unwrap() {
        assert_eq!(
            (c["kind"].as_str(), c["verdict"]["failed"].as_bool()),
            (Some("device"), Some(false))
        );
        assert!(c["acknowledged"].as_u64().unwrap() > 0, "{c}");
    }
    assert!(
        log.contains(&format!(
            "waiting for target {} to come back",
            w.path("mnt/t.dat").display()
        )),
        "{log}"
    );
    // One boot id all along: the host never went down.
    assert_eq!(v["hosts"][0]["boot_id"].as_str().map(|b| b.len()), Some(36));
}

/// A lying drive (fsync returns before the data is durable) cut alone: the cut is
/// valid and failed, with lost acknowledged writes; `campaign run` exits 1.
#[test]
fn a_drive_only_cut_on_a_lying_drive_fails() {
    if skip_without_fuse("a_drive_only_cut_on_a_lying_drive_fails") {
        return;
    }
    let (w, _rig, o) = device_campaign("lying", "1");
    let log = std::fs::read_to_string(w.path("agent.log")).unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}\n{}\n{log}",
        stdout(&o),
        stderr(&o)
    );
    let v = w.status("d");
    assert_eq!(cuts(&v), vec![(1, "valid".into(), String::new())]);
    let verdict = &v["cuts"][0]["verdict"];
    assert_eq!(verdict["failed"], json!(true));
    assert!(verdict["findings"].as_u64().unwrap() > 0, "{verdict}");
    assert!(
        verdict["summary"].as_str().unwrap().starts_with("FAIL: "),
        "{verdict}"
    );
}
