//! Helpers shared by the verifier's end-to-end tests (`verify_truth/` and
//! `verify_evidence/`, which include it by path): runs, exact verdict objects,
//! backing files (loop devices and mounts come from `plugpull_tests::blockdev`).
#![allow(dead_code)] // each test crate uses a part of it

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const BS: u64 = 4096;

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
