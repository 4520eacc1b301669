//! Helpers shared by the verifier's end-to-end tests (`verify_truth.rs`,
//! `verify_evidence.rs`): runs, exact verdict objects, loop devices and mounts with
//! drop guards, loud skips.
#![allow(dead_code)] // each test crate uses a part of it

use plugpull_tests::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const BS: u64 = 4096;

/// The verdict object with `counts` set and every other verdict 0.
pub fn verdicts(counts: &[(&str, u64)]) -> Value {
    let mut v = json!({"intact": 0, "lost_write": 0, "torn_in_flight": 0, "torn_acknowledged": 0,
        "corrupt": 0, "misdirected": 0, "unserializable": 0, "missing": 0});
    for (k, n) in counts {
        v[*k] = json!(n);
    }
    v
}

pub fn write_run(l: &Listener, target: &Path, size: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        size,
    ];
    args.extend_from_slice(extra);
    let o = plugpull(&args);
    assert_eq!(o.status.code(), Some(0), "write failed: {}", stderr(&o));
    run_id(&o)
}

/// `n` sequential writes by one job: write `s` goes to block `(s-1) % blocks`.
pub fn sequential(n: u64) -> Vec<String> {
    vec![
        "--writes".into(),
        n.to_string(),
        "--pattern".into(),
        "sequential".into(),
        "--jobs".into(),
        "1".into(),
    ]
}

pub fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A loop device over a backing file, detached on drop.
pub struct Loop {
    pub dev: String,
}

impl Loop {
    pub fn attach(backing: &Path) -> Loop {
        let o = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(backing)
            .output()
            .expect("run losetup");
        assert!(
            o.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        Loop {
            dev: String::from_utf8_lossy(&o.stdout).trim().to_string(),
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A mounted filesystem, unmounted on drop.
pub struct Mount {
    dir: PathBuf,
    mounted: bool,
}

impl Mount {
    pub fn new(dev: &str, dir: &Path) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount").arg(dev).arg(dir).status().unwrap();
        assert!(ok.success(), "mount {dev}");
        Mount {
            dir: dir.to_path_buf(),
            mounted: true,
        }
    }
    pub fn umount(&mut self) {
        if self.mounted {
            let ok = Command::new("umount").arg(&self.dir).status().unwrap();
            assert!(ok.success(), "umount");
            self.mounted = false;
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
    }
}

/// True when loop devices can be used here; otherwise logs the skip loudly.
pub fn loop_devices_available(test: &str) -> bool {
    if !is_root() {
        skipped(test, "loop devices need root");
        return false;
    }
    let probe = tempfile::NamedTempFile::new().unwrap();
    probe.as_file().set_len(1 << 20).unwrap();
    let o = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(probe.path())
        .output();
    match o {
        Ok(o) if o.status.success() => {
            let dev = String::from_utf8_lossy(&o.stdout).trim().to_string();
            let _ = Command::new("losetup").args(["-d", &dev]).status();
            true
        }
        Ok(o) => {
            skipped(
                test,
                &format!("losetup failed: {}", String::from_utf8_lossy(&o.stderr)),
            );
            false
        }
        Err(e) => {
            skipped(test, &format!("no losetup: {e}"));
            false
        }
    }
}

pub fn backing(dir: &Path, name: &str, size: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

pub fn target_finding_kinds(v: &Value) -> Vec<String> {
    v["target_findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

pub fn ext4_uuid(dev: &str) -> String {
    let o = Command::new("blkid")
        .args(["-s", "UUID", "-o", "value", dev])
        .output()
        .expect("blkid");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

pub fn this_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    assert_eq!(
        unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) },
        0
    );
    let end = buf.iter().position(|&b| b == 0).unwrap();
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
