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
                .map_err(|e| Error::Msg(format!("cannot create {}: {e}", d.display())))?;
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
            return Err(Error::Msg(format!(
                "simfs is already mounted at {}",
                self.mnt.display()
            )));
        }
        self.mounts += 1;
        let truth = self.truth_path();
        let (child, out) = MountCmd {
            bin: &self.bin,
            backing: &self.backing,
            mnt: &self.mnt,
            mode: &self.mode,
            seed: self.seed,
            truth: self.truth_per_mount.then_some(truth.as_path()),
            extra: &self.extra,
            log: &self.log,
        }
        .start(proc::command(&self.bin))?;
        self.child = Some(child);
        self._stdout = Some(out);
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
        self.ctl_with(sub, &[])
    }

    /// [`SimMount::ctl`] with `args` after the mountpoint.
    fn ctl_with(&self, sub: &str, args: &[&str]) -> Result<String, Error> {
        let mut c = proc::command(&self.bin);
        c.arg(sub).arg("--mountpoint").arg(&self.mnt).args(args);
        let o = proc::output_ok(c, &format!("plugpull-simfs {sub}"))?;
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// Pulls the plug: what was cached and not destaged is gone, and every operation
    /// on the mount fails with EIO afterwards. Returns the summary line (the ground
    /// truth's last line, JSON); the ground truth is written and fsynced by then.
    pub fn cut(&self) -> Result<String, Error> {
        self.ctl("cut")
    }

    /// [`SimMount::cut`] at the first moment within `secs` seconds that the cache
    /// holds a write the cut could tear (`plugpull-simfs cut --when-tearable`; torn
    /// mode only).
    ///
    /// Errors: no such write came in time (nothing is cut), or as [`SimMount::cut`].
    pub fn cut_when_tearable(&self, secs: f64) -> Result<String, Error> {
        self.ctl_with("cut", &["--when-tearable", &secs.to_string()])
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
            return Err(Error::Msg(format!("{e}\nlog:\n{log}")));
        }
        let st = child
            .wait()
            .map_err(|e| Error::Msg(format!("wait for plugpull-simfs: {e}")))?;
        self._stdout = None;
        if !st.success() {
            return Err(Error::Msg(format!(
                "simfs mount process exited with {st}; log:\n{}",
                self.log_text()
            )));
        }
        if is_mountpoint(&self.mnt) {
            return Err(Error::Msg(format!(
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
        force_down(&self.bin, &self.mnt, self.child.take(), None);
        self._stdout = None;
    }
}

impl Drop for SimMount {
    fn drop(&mut self) {
        self.force_down();
    }
}

/// One `plugpull-simfs mount`: what [`SimMount`] and the simulated machine's power
/// driver (`simfs://`) both start.
pub struct MountCmd<'a> {
    /// The `plugpull-simfs` binary.
    pub bin: &'a Path,
    /// The backing directory (exists).
    pub backing: &'a Path,
    /// The mountpoint (exists; absolute and canonical, as `mounted MNT` prints it).
    pub mnt: &'a Path,
    /// `honest`, `lying`, `reorder`, `torn` or `misdirect`.
    pub mode: &'a str,
    /// The seed of the simulator's random choices.
    pub seed: u64,
    /// `--ground-truth`; `None` for simfs's default beside the mountpoint.
    pub truth: Option<&'a Path>,
    /// Further `mount` options (`--destage-delay-ms`, `50`, …).
    pub extra: &'a [String],
    /// The file the mount process's stderr is appended to.
    pub log: &'a Path,
}

impl MountCmd<'_> {
    /// Starts the mount with `cmd` (a `Command` of [`MountCmd::bin`], set up by the
    /// caller: process group, session) and returns once it printed `mounted MNT`,
    /// within [`MOUNT_TIMEOUT`], with the child and its stdout's lines. On any
    /// failure the mount is forced down ([`force_down`]) and the error quotes the
    /// log's last lines.
    pub fn start(&self, mut cmd: Command) -> Result<(Child, Receiver<String>), Error> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log)
            .map_err(|e| Error::Msg(format!("{}: {e}", self.log.display())))?;
        cmd.arg("mount")
            .arg("--backing")
            .arg(self.backing)
            .arg("--mountpoint")
            .arg(self.mnt)
            .args(["--mode", self.mode, "--seed", &self.seed.to_string()]);
        if let Some(t) = self.truth {
            cmd.arg("--ground-truth").arg(t);
        }
        let mut child = cmd
            .args(self.extra)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                Error::Msg(format!(
                    "cannot start plugpull-simfs ({}): {e}",
                    self.bin.display()
                ))
            })?;
        let out = proc::lines(child.stdout.take().expect("piped stdout"));
        let first = match proc::recv_line(&out, MOUNT_TIMEOUT) {
            Ok(l) => l,
            Err(e) => {
                force_down(self.bin, self.mnt, Some(child), None);
                return Err(e);
            }
        };
        let want = format!("mounted {}", self.mnt.display());
        if first.as_deref() == Some(want.as_str()) {
            return Ok((child, out));
        }
        // Its stdout ends as it exits, a moment before it can be waited for.
        let mut exited = child.try_wait();
        for _ in 0..100 {
            if first.is_some() || !matches!(exited, Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            exited = child.try_wait();
        }
        let said = match (first, exited) {
            (Some(l), _) => format!("said {l:?}, expected {want:?}"),
            (None, Ok(Some(st))) => format!("exited with {st} without mounting"),
            (None, _) => format!("did not mount within {} s", MOUNT_TIMEOUT.as_secs()),
        };
        force_down(self.bin, self.mnt, Some(child), None);
        Err(Error::Msg(format!(
            "plugpull-simfs mount at {} {said}; {} ends:\n{}",
            self.mnt.display(),
            self.log.display(),
            tail(self.log, 20)
        )))
    }
}

/// The last `n` lines of the text file `path` (empty when unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Takes a simfs mount down, best effort, never failing and never blocking for
/// long: `plugpull-simfs umount` with a 10 s limit; then, while the mount process
/// (our `child`, or the process `pid` when it is not our child) still runs, a lazy
/// detach and its SIGKILL (which aborts the FUSE connection), its reaping (up to
/// 10 s for `pid`), and a lazy unmount of what is left at `mnt`.
pub fn force_down(bin: &Path, mnt: &Path, child: Option<Child>, pid: Option<u32>) {
    let quiet = |c: &mut Command| {
        let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
    };
    let running = child.is_some() || pid.is_some_and(proc::alive);

    if running {
        quiet(
            Command::new(bin)
                .args(["umount", "--timeout-secs", "10", "--mountpoint"])
                .arg(mnt),
        );
    }
    if let Some(mut child) = child {
        if !matches!(child.try_wait(), Ok(Some(_))) {
            quiet(Command::new("fusermount3").args(["-u", "-z"]).arg(mnt));
            let _ = child.kill();
        }
        let _ = child.wait();
    }
    // A recorded pid may have been reused by now: only a plugpull-simfs is killed.
    let simfs = |p: &u32| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .is_ok_and(|c| c.trim() == "plugpull-simfs")
    };
    if let Some(pid) = pid.filter(|p| proc::alive(*p) && simfs(p)) {
        quiet(Command::new("fusermount3").args(["-u", "-z"]).arg(mnt));
        let _ = proc::kill_group(None, None, &[pid], Duration::from_secs(10));
    }
    if is_mountpoint(mnt) {
        quiet(Command::new("fusermount3").args(["-u", "-z"]).arg(mnt));
    }
    if is_mountpoint(mnt) {
        quiet(Command::new("umount").arg("-l").arg(mnt));
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

/// How long `plugpull-simfs umount` may take before the mount is forced down.
const UMOUNT_SECS: u64 = 20;

/// Unmounts the simfs mount at `mnt` (its process `pid`, when known) with
/// `plugpull-simfs umount` (`bin`; a clean unmount destages the cache), forcing it
/// down ([`force_down`]) when that fails or takes over 20 s; reaps `pid` when it is
/// our child. `who` (`simfs`, `qemu`) names the power driver in messages. `Err` only
/// when the mountpoint stays mounted.
pub fn unmount_or_force(who: &str, bin: &Path, mnt: &Path, pid: Option<u32>) -> Result<(), Error> {
    let pid = pid.filter(|&p| proc::alive(p));
    if pid.is_none() && !is_mountpoint(mnt) {
        return Ok(());
    }
    let mut c = Command::new(bin);
    c.arg("umount")
        .arg("--mountpoint")
        .arg(mnt)
        .args(["--timeout-secs", &UMOUNT_SECS.to_string()]);
    let limit = Duration::from_secs(UMOUNT_SECS + 10);
    let clean =
        proc::output_within(c, "plugpull-simfs umount", limit).is_ok_and(|o| o.status.success());
    if !clean || pid.is_some_and(proc::alive) || is_mountpoint(mnt) {
        eprintln!(
            "plugpull: {who}: off: plugpull-simfs umount did not finish; forcing {} down",
            mnt.display()
        );
        force_down(bin, mnt, None, pid);
    }
    // A controller that turned the machine on is the mount process's parent.
    pid.into_iter().for_each(proc::reap);
    if is_mountpoint(mnt) {
        return Err(Error::Msg(format!(
            "{who}: off: {} is still mounted after a forced unmount",
            mnt.display()
        )));
    }
    Ok(())
}

/// How long `plugpull-simfs cut` may take.
const CUT_LIMIT: Duration = Duration::from_secs(60);

/// Cuts the simfs mount at `mnt` (`plugpull-simfs cut`, binary `bin`): its cache is
/// dropped and its ground truth written when this returns `Ok`. `Err` says why not
/// (`plugpull-simfs cut failed (STDERR)`, or no answer within 60 s).
pub fn cut_at(bin: &Path, mnt: &Path) -> Result<(), String> {
    let mut c = Command::new(bin);
    c.arg("cut").arg("--mountpoint").arg(mnt);
    let o = proc::output_within(c, "plugpull-simfs cut", CUT_LIMIT).map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!(
            "plugpull-simfs cut failed ({})",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(())
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
