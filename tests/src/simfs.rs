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

use crate::bin;
use plugpull_client::rig::simfs::SimMount;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Whether `path` (absolute, canonical) is a mountpoint, per `/proc/self/mountinfo`.
pub use plugpull_client::rig::simfs::is_mountpoint;

/// True when FUSE mounts can be made here: `/dev/fuse` exists, `fusermount3` is on
/// the `PATH`, and we are root (simfs mounts with `allow_other`).
pub fn fuse_available() -> bool {
    plugpull_client::rig::simfs::fuse_unavailable().is_none()
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
    let why = match plugpull_client::rig::simfs::fuse_unavailable() {
        Some("there is no /dev/fuse") => "no /dev/fuse",
        Some("fusermount3 is not installed (package fuse3)") => "no fusermount3 on PATH",
        _ => "not root",
    };
    let required = std::env::var("PLUGPULL_REQUIRE_FUSE").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "{test}: PLUGPULL_REQUIRE_FUSE is set but FUSE is unusable here: {why}"
    );
    crate::skipped(test, &format!("no /dev/fuse (simfs needs FUSE): {why}"));
    true
}

/// The ground-truth types are simfs's own: one definition of the format for the
/// writer and the tests.
pub use plugpull_simfs::truth::{Fate, MetaFate, Truth, TruthMeta, TruthSummary, TruthWrite};

/// A running `plugpull-simfs mount`; unmounted and killed on drop. The rig's
/// [`SimMount`] with one ground truth per mount (`truth-N.jsonl`), panicking where
/// that returns an error, and the ground truth parsed and checked at each cut.
pub struct SimFs(SimMount);

impl SimFs {
    /// Mounts simfs in `mode` with `seed` over `dir/backing` at `dir/mnt` (both
    /// created if missing) and returns once the mount is live.
    pub fn mount(dir: &Path, mode: &str, seed: u64) -> SimFs {
        SimFs::mount_with(dir, mode, seed, &[])
    }

    /// The same, with extra `mount` options (`--destage-delay-ms 50`, …).
    pub fn mount_with(dir: &Path, mode: &str, seed: u64, extra: &[&str]) -> SimFs {
        let dir = dir.canonicalize().expect("simfs dir exists");
        SimMount::mount(&bin("plugpull-simfs"), &dir, mode, seed, extra, true)
            .map(SimFs)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The mountpoint.
    pub fn mnt(&self) -> &Path {
        &self.0.mnt
    }

    /// The backing directory: after [`SimFs::umount`] it holds exactly what survived.
    pub fn backing(&self) -> &Path {
        &self.0.backing
    }

    /// The mode of the current (or last) mount.
    pub fn mode(&self) -> &str {
        &self.0.mode
    }

    /// The ground-truth path of the current (or last) mount.
    pub fn truth_path(&self) -> PathBuf {
        self.0.truth_path()
    }

    /// Whether the mount process is running.
    pub fn is_running(&self) -> bool {
        self.0.is_running()
    }

    /// The mount process's log (all mounts so far).
    pub fn log_text(&self) -> String {
        self.0.log_text()
    }

    /// Pulls the plug and returns the ground truth (written and fsynced when `cut`
    /// returns). Every operation on the mount fails with EIO afterwards.
    pub fn cut(&mut self) -> Truth {
        let out = self.0.cut();
        self.truth_of_cut(out)
    }

    /// [`SimFs::cut`] at the first moment within `secs` seconds that the cache holds a
    /// write the cut could tear (torn mode: longer than the atomic unit).
    pub fn cut_when_tearable(&mut self, secs: f64) -> Truth {
        let out = self.0.cut_when_tearable(secs);
        self.truth_of_cut(out)
    }

    /// The ground truth a cut that printed `out` wrote, checked against it.
    fn truth_of_cut(&mut self, out: Result<String, plugpull_client::Error>) -> Truth {
        let out = out.unwrap_or_else(|e| panic!("{e}\nlog:\n{}", self.log_text()));
        let text = std::fs::read_to_string(self.truth_path())
            .unwrap_or_else(|e| panic!("ground truth {}: {e}", self.truth_path().display()));
        let truth = Truth::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text.lines().last().map(str::trim),
            Some(out.trim()),
            "cut printed another summary than the ground truth's last line"
        );
        assert!(
            truth.summary.cut
                && truth.summary.mode == self.mode()
                && truth.summary.seed == self.0.seed,
            "{:?}",
            truth.summary
        );
        truth
    }

    /// The mount's counters (`plugpull-simfs stats`), as JSON.
    pub fn stats(&self) -> Value {
        let out = self.0.stats().unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("stats said {out:?}: {e}"))
    }

    /// Unmounts (`plugpull-simfs umount`: lazily if busy) and waits for the mount
    /// process to exit. Without a cut this is a clean shutdown (the cache is flushed).
    pub fn umount(&mut self) {
        self.0.umount().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Unmounts (if mounted) and mounts the same backing directory again in `mode`,
    /// with the same seed and options.
    pub fn remount(&mut self, mode: &str) {
        self.0.remount(mode).unwrap_or_else(|e| panic!("{e}"));
    }
}
