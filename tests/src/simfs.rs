//! A `plugpull-simfs` mount for tests: the power-cut simulator over a backing
//! directory, with `cut` (returning the parsed ground truth), `umount` and
//! `remount`, and a `Drop` that always leaves nothing mounted and nothing running,
//! also when the test panics.
//!
//! Layout under the directory given to [`SimFs::mount`]: `backing/` (what survives),
//! `mnt/` (the mountpoint), `simfs.log` (the mount process's stderr, appended over
//! remounts), `truth-N.jsonl` (the ground truth of the N-th mount) and the control
//! socket `.mnt.simfs.sock`.
//!
//! FUSE needs `/dev/fuse`, `fusermount3` and (for `allow_other`) root. Where they
//! are missing, [`skip_without_fuse`] prints a loud `SKIPPED` line and the test
//! returns; with `PLUGPULL_REQUIRE_FUSE=1` (set it in CI) it panics instead, so a
//! CI machine that lost FUSE cannot pass by skipping.

use crate::{bin, is_root};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a mount may take to print `mounted MNT`.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// True when FUSE mounts can be made here: `/dev/fuse` exists, `fusermount3` is on
/// the `PATH`, and we are root (simfs mounts with `allow_other`).
pub fn fuse_available() -> bool {
    Path::new("/dev/fuse").exists() && on_path("fusermount3") && is_root()
}

/// Whether an executable named `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// Returns true (after printing `SKIPPED <test>: no /dev/fuse (simfs needs FUSE)`)
/// when FUSE is not available; the test should return at once then.
///
/// Panics instead when `PLUGPULL_REQUIRE_FUSE` is set to a non-empty value other
/// than `0`: where FUSE is expected (CI), a missing FUSE is a failure, not a skip.
pub fn skip_without_fuse(test: &str) -> bool {
    if fuse_available() {
        return false;
    }
    let why = if !Path::new("/dev/fuse").exists() {
        "no /dev/fuse"
    } else if !on_path("fusermount3") {
        "no fusermount3 on PATH"
    } else {
        "not root"
    };
    let required = std::env::var("PLUGPULL_REQUIRE_FUSE").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "{test}: PLUGPULL_REQUIRE_FUSE is set but FUSE is unusable here: {why}"
    );
    crate::skipped(test, &format!("no /dev/fuse (simfs needs FUSE): {why}"));
    true
}

/// Whether `path` (absolute, canonical) is a mountpoint, per `/proc/self/mountinfo`.
pub fn is_mountpoint(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .map(unescape_mountinfo)
            .is_some_and(|p| p == want)
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The ground-truth types are simfs's own: one definition of the format for the
/// writer and the tests.
pub use plugpull_simfs::truth::{Fate, Truth, TruthSummary, TruthWrite};

/// A running `plugpull-simfs mount`; unmounted and killed on drop.
pub struct SimFs {
    child: Option<Child>,
    dir: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
    log: PathBuf,
    mode: String,
    seed: u64,
    extra: Vec<String>,
    mounts: u32,
}

impl SimFs {
    /// Mounts simfs in `mode` with `seed` over `dir/backing` at `dir/mnt` (both
    /// created if missing) and returns once the mount is live.
    pub fn mount(dir: &Path, mode: &str, seed: u64) -> SimFs {
        SimFs::mount_with(dir, mode, seed, &[])
    }

    /// The same, with extra `mount` options (`--destage-delay-ms 50`, …).
    pub fn mount_with(dir: &Path, mode: &str, seed: u64, extra: &[&str]) -> SimFs {
        let dir = dir.canonicalize().expect("simfs dir exists");
        let backing = dir.join("backing");
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&backing).expect("create backing dir");
        std::fs::create_dir_all(&mnt).expect("create mountpoint");
        let mut s = SimFs {
            child: None,
            log: dir.join("simfs.log"),
            dir,
            backing,
            mnt,
            mode: mode.to_string(),
            seed,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            mounts: 0,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        assert!(
            self.child.is_none(),
            "simfs is already mounted at {}",
            self.mnt.display()
        );
        self.mounts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("simfs log");
        let mut child = Command::new(bin("plugpull-simfs"))
            .arg("mount")
            .arg("--backing")
            .arg(&self.backing)
            .arg("--mountpoint")
            .arg(&self.mnt)
            .args(["--mode", &self.mode, "--seed", &self.seed.to_string()])
            .arg("--ground-truth")
            .arg(self.truth_path())
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn plugpull-simfs");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(MOUNT_TIMEOUT).unwrap_or_default();
        self.child = Some(child);
        let want = format!("mounted {}", self.mnt.display());
        if line.trim_end() != want {
            let log = self.log_text();
            self.force_down();
            panic!("plugpull-simfs mount said {line:?}, expected {want:?}; log:\n{log}");
        }
    }

    /// The mountpoint.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// The backing directory: after [`SimFs::umount`] it holds exactly what survived.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// The mode of the current (or last) mount.
    pub fn mode(&self) -> &str {
        &self.mode
    }

    /// The ground-truth path of the current (or last) mount.
    pub fn truth_path(&self) -> PathBuf {
        self.dir.join(format!("truth-{}.jsonl", self.mounts))
    }

    /// Whether the mount process is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The mount process's log (all mounts so far).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs `plugpull-simfs SUB --mountpoint MNT`; returns (success, stdout, stderr).
    fn ctl(&self, sub: &str) -> (bool, String, String) {
        let o = Command::new(bin("plugpull-simfs"))
            .arg(sub)
            .arg("--mountpoint")
            .arg(&self.mnt)
            .output()
            .expect("run plugpull-simfs");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// Pulls the plug and returns the ground truth (written and fsynced when `cut`
    /// returns). Every operation on the mount fails with EIO afterwards.
    pub fn cut(&mut self) -> Truth {
        let (ok, out, err) = self.ctl("cut");
        assert!(
            ok,
            "plugpull-simfs cut failed: {err}\nlog:\n{}",
            self.log_text()
        );
        let text = std::fs::read_to_string(self.truth_path())
            .unwrap_or_else(|e| panic!("ground truth {}: {e}", self.truth_path().display()));
        let truth = Truth::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text.lines().last().map(str::trim),
            Some(out.trim()),
            "cut printed another summary than the ground truth's last line"
        );
        assert!(
            truth.summary.cut && truth.summary.mode == self.mode && truth.summary.seed == self.seed,
            "{:?}",
            truth.summary
        );
        truth
    }

    /// The mount's counters (`plugpull-simfs stats`), as JSON.
    pub fn stats(&self) -> Value {
        let (ok, out, err) = self.ctl("stats");
        assert!(ok, "plugpull-simfs stats failed: {err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("stats said {out:?}: {e}"))
    }

    /// Unmounts (`plugpull-simfs umount`: lazily if busy) and waits for the mount
    /// process to exit. Without a cut this is a clean shutdown (the cache is flushed).
    pub fn umount(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let (ok, _, err) = self.ctl("umount");
        if !ok {
            self.child = Some(child);
            let log = self.log_text();
            self.force_down();
            panic!("plugpull-simfs umount failed: {err}\nlog:\n{log}");
        }
        let st = child.wait().expect("wait for simfs");
        assert!(
            st.success(),
            "simfs mount process exited with {st}; log:\n{}",
            self.log_text()
        );
        assert!(
            !is_mountpoint(&self.mnt),
            "{} still mounted after umount",
            self.mnt.display()
        );
    }

    /// Unmounts (if mounted) and mounts the same backing directory again in `mode`,
    /// with the same seed and options.
    pub fn remount(&mut self, mode: &str) {
        self.umount();
        self.mode = mode.to_string();
        self.spawn();
    }

    /// Detaches the mount lazily, kills the mount process (aborting the FUSE
    /// connection) and reaps it; best effort, never panics.
    fn force_down(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if is_mountpoint(&self.mnt) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
        }
        if is_mountpoint(&self.mnt) {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for SimFs {
    fn drop(&mut self) {
        self.force_down();
    }
}
