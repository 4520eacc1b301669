//! A `plugpull-simfs` mount: the power-cut simulator over a backing directory, with
//! `cut`, `stats`, `umount` and `remount`, and a `Drop` that leaves nothing mounted
//! and nothing running, also on an error or an interrupt.
//!
//! Layout under the directory given to [`SimMount::mount`]: `backing/` (what
//! survives a cut), `mnt/` (the mountpoint), `simfs.log` (the mount process's stderr,
//! appended over remounts) and, when asked for, `truth-N.jsonl` (the ground truth of
//! the N-th mount; otherwise simfs writes its default beside the mountpoint).

use super::proc;
use crate::Error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// How long a mount may take to print `mounted MNT`.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `plugpull-simfs mount`.
pub struct SimMount {
    bin: PathBuf,
    dir: PathBuf,
    /// The backing directory: after [`SimMount::umount`] it holds exactly what survived.
    pub backing: PathBuf,
    /// The mountpoint.
    pub mnt: PathBuf,
    /// The mount process's stderr, appended over remounts.
    pub log: PathBuf,
    /// The mode of the current (or last) mount (`honest`, `lying`, …).
    pub mode: String,
    /// The seed of the simulator's random choices.
    pub seed: u64,
    extra: Vec<String>,
    truth_per_mount: bool,
    mounts: u32,
    child: Option<Child>,
    _stdout: Option<Receiver<String>>,
}

impl SimMount {
    /// Mounts the simfs binary `bin` in `mode` with `seed` over `dir/backing` at
    /// `dir/mnt` (both created if missing), with `extra` mount options; returns once
    /// the mount is live. With `truth_per_mount` each mount writes its ground truth to
    /// `dir/truth-N.jsonl` ([`SimMount::truth_path`]).
    pub fn mount(
        bin: &Path,
        dir: &Path,
        mode: &str,
        seed: u64,
        extra: &[&str],
        truth_per_mount: bool,
    ) -> Result<SimMount, Error> {
        let backing = dir.join("backing");
        let mnt = dir.join("mnt");
        for d in [&backing, &mnt] {
            std::fs::create_dir_all(d)
                .map_err(|e| Error(format!("cannot create {}: {e}", d.display())))?;
        }
        let mut m = SimMount {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            backing,
            mnt,
            log: dir.join("simfs.log"),
            mode: mode.to_string(),
            seed,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            truth_per_mount,
            mounts: 0,
            child: None,
            _stdout: None,
        };
        m.spawn()?;
        Ok(m)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        if self.child.is_some() {
            return Err(Error(format!(
                "simfs is already mounted at {}",
                self.mnt.display()
            )));
        }
        self.mounts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| Error(format!("{}: {e}", self.log.display())))?;
        let mut cmd = proc::command(&self.bin);
        cmd.arg("mount")
            .arg("--backing")
            .arg(&self.backing)
            .arg("--mountpoint")
            .arg(&self.mnt)
            .args(["--mode", &self.mode, "--seed", &self.seed.to_string()]);
        if self.truth_per_mount {
            cmd.arg("--ground-truth").arg(self.truth_path());
        }
        let mut child = cmd
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| Error(format!("cannot start plugpull-simfs: {e}")))?;
        let out = proc::lines(child.stdout.take().expect("piped stdout"));
        self.child = Some(child);
        let first = proc::recv_line(&out, MOUNT_TIMEOUT);
        self._stdout = Some(out);
        let first = match first {
            Ok(l) => l.unwrap_or_default(),
            Err(e) => {
                self.force_down();
                return Err(e);
            }
        };
        let want = format!("mounted {}", self.mnt.display());
        if first != want {
            let log = self.log_text();
            self.force_down();
            return Err(Error(format!(
                "plugpull-simfs mount said {first:?}, expected {want:?}; log:\n{log}"
            )));
        }
        Ok(())
    }

    /// The ground-truth path of the current (or last) mount, when each mount has its own.
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

    /// Runs `plugpull-simfs SUB --mountpoint MNT`; its stdout, trimmed, or `Err` with
    /// its stderr when it fails.
    fn ctl(&self, sub: &str) -> Result<String, Error> {
        let mut c = proc::command(&self.bin);
        c.arg(sub).arg("--mountpoint").arg(&self.mnt);
        let o = proc::output(c, &format!("plugpull-simfs {sub}"))?;
        if !o.status.success() {
            return Err(Error(format!(
                "plugpull-simfs {sub} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// Pulls the plug: what was cached and not destaged is gone, and every operation
    /// on the mount fails with EIO afterwards. Returns the summary line (the ground
    /// truth's last line, JSON); the ground truth is written and fsynced by then.
    pub fn cut(&self) -> Result<String, Error> {
        self.ctl("cut")
    }

    /// The mount's counters (`plugpull-simfs stats`), one line of JSON.
    pub fn stats(&self) -> Result<String, Error> {
        self.ctl("stats")
    }

    /// Unmounts (`plugpull-simfs umount`: lazily if busy) and waits for the mount
    /// process, which must exit 0 and leave the mountpoint unmounted. Without a cut
    /// this is a clean shutdown (the cache is flushed).
    pub fn umount(&mut self) -> Result<(), Error> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        if let Err(e) = self.ctl("umount") {
            self.child = Some(child);
            let log = self.log_text();
            self.force_down();
            return Err(Error(format!("{e}\nlog:\n{log}")));
        }
        let st = child
            .wait()
            .map_err(|e| Error(format!("wait for plugpull-simfs: {e}")))?;
        self._stdout = None;
        if !st.success() {
            return Err(Error(format!(
                "simfs mount process exited with {st}; log:\n{}",
                self.log_text()
            )));
        }
        if is_mountpoint(&self.mnt) {
            return Err(Error(format!(
                "{} still mounted after umount",
                self.mnt.display()
            )));
        }
        Ok(())
    }

    /// Unmounts (if mounted) and mounts the same backing directory again in `mode`,
    /// with the same seed and options.
    pub fn remount(&mut self, mode: &str) -> Result<(), Error> {
        self.umount()?;
        self.mode = mode.to_string();
        self.spawn()
    }

    /// Best effort, never fails and never blocks for long: `plugpull-simfs umount`
    /// with a timeout, then a lazy detach and SIGKILL of the mount process (which
    /// aborts the FUSE connection), its reaping, and a lazy unmount of what is left.
    pub fn force_down(&mut self) {
        let quiet = |c: &mut Command| {
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        };
        if let Some(mut child) = self.child.take() {
            quiet(
                Command::new(&self.bin)
                    .args(["umount", "--timeout-secs", "10", "--mountpoint"])
                    .arg(&self.mnt),
            );
            if !matches!(child.try_wait(), Ok(Some(_))) {
                quiet(
                    Command::new("fusermount3")
                        .args(["-u", "-z"])
                        .arg(&self.mnt),
                );
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if is_mountpoint(&self.mnt) {
            quiet(
                Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(&self.mnt),
            );
        }
        if is_mountpoint(&self.mnt) {
            quiet(Command::new("umount").arg("-l").arg(&self.mnt));
        }
        self._stdout = None;
    }
}

impl Drop for SimMount {
    fn drop(&mut self) {
        self.force_down();
    }
}

/// Why FUSE mounts cannot be made here, if they cannot: no `/dev/fuse`, no
/// `fusermount3` on the `PATH`, or not root (simfs mounts with `allow_other`).
pub fn fuse_unavailable() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        Some("there is no /dev/fuse")
    } else if !proc::on_path("fusermount3") {
        Some("fusermount3 is not installed (package fuse3)")
    } else if !proc::is_root() {
        Some("the simulator mounts with allow_other, which needs root")
    } else {
        None
    }
}

/// Whether `path` (absolute, canonical) is a mountpoint, per `/proc/self/mountinfo`.
pub fn is_mountpoint(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    plugpull::probe::mountinfo::parse(&info)
        .iter()
        .any(|m| m.mountpoint == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountpoints_are_found_in_mountinfo() {
        assert!(is_mountpoint(Path::new("/proc")));
        assert!(!is_mountpoint(Path::new("/proc/self")));
    }
}
