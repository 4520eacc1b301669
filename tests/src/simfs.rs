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

/// What became of a write in the ground truth (`fate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Cached at the cut; no byte reached the backing file.
    Dropped,
    /// Cached at the cut, but a torn cut kept every piece.
    Destaged,
    /// Cached at the cut; only the first `kept_sectors` pieces reached the backing file.
    Torn,
    /// Destaged before the cut to `landed_at` instead of its own offset.
    Misdirected,
}

impl Fate {
    fn parse(s: &str) -> Fate {
        match s {
            "dropped" => Fate::Dropped,
            "destaged" => Fate::Destaged,
            "torn" => Fate::Torn,
            "misdirected" => Fate::Misdirected,
            other => panic!("unknown fate {other:?} in the ground truth"),
        }
    }
}

/// One write line of the ground truth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruthWrite {
    /// Order of arrival since mount, from 1.
    pub write_id: u64,
    /// Path relative to the mount root (` (deleted)` appended if unlinked).
    pub file: String,
    /// Byte offset the application wrote at.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// An fsync/fdatasync of the file that started after this write returned had succeeded.
    pub fsynced: bool,
    /// What became of it.
    pub fate: Fate,
    /// Torn cuts: leading sector pieces kept.
    pub kept_sectors: Option<u64>,
    /// Misdirected writes: the byte offset written to instead.
    pub landed_at: Option<u64>,
}

impl TruthWrite {
    /// The block of `block_size` bytes the application wrote to.
    pub fn block(&self, block_size: u64) -> u64 {
        self.offset / block_size
    }
}

/// The last line of the ground truth (also what `cut` prints).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruthSummary {
    /// True for a power cut, false for a clean unmount after misdirected writes.
    pub cut: bool,
    /// The mode's name.
    pub mode: String,
    /// The seed.
    pub seed: u64,
    /// Writes accepted since mount.
    pub writes_total: u64,
    /// Non-misdirected lines.
    pub cached_at_cut: u64,
    /// Those of them with `fsynced: true`.
    pub fsynced_at_cut: u64,
    /// Misdirected lines.
    pub misdirected: u64,
}

/// A parsed ground-truth log.
#[derive(Clone, Debug)]
pub struct Truth {
    /// The write lines, ordered by `write_id`.
    pub writes: Vec<TruthWrite>,
    /// The summary line.
    pub summary: TruthSummary,
}

impl Truth {
    /// Parses the JSON lines of a ground-truth log. Panics on anything malformed,
    /// and checks the summary's counts against the lines.
    pub fn parse(text: &str) -> Truth {
        let mut writes = Vec::new();
        let mut summary = None;
        for (i, line) in text.lines().enumerate() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("ground truth line {}: {e}: {line}", i + 1));
            assert!(
                summary.is_none(),
                "ground truth has a line after its summary: {line}"
            );
            let u = |k: &str| {
                v[k].as_u64()
                    .unwrap_or_else(|| panic!("ground truth line {}: no {k}: {line}", i + 1))
            };
            if v.get("write_id").is_some() {
                writes.push(TruthWrite {
                    write_id: u("write_id"),
                    file: v["file"].as_str().expect("file").to_string(),
                    offset: u("offset"),
                    len: u("len"),
                    fsynced: v["fsynced"].as_bool().expect("fsynced"),
                    fate: Fate::parse(v["fate"].as_str().expect("fate")),
                    kept_sectors: v["kept_sectors"].as_u64(),
                    landed_at: v["landed_at"].as_u64(),
                });
            } else {
                summary = Some(TruthSummary {
                    cut: v["cut"].as_bool().expect("cut"),
                    mode: v["mode"].as_str().expect("mode").to_string(),
                    seed: u("seed"),
                    writes_total: u("writes_total"),
                    cached_at_cut: u("cached_at_cut"),
                    fsynced_at_cut: u("fsynced_at_cut"),
                    misdirected: u("misdirected"),
                });
            }
        }
        let summary = summary.expect("ground truth without a summary line");
        assert!(
            writes.windows(2).all(|w| w[0].write_id < w[1].write_id),
            "ground truth not ordered by write_id"
        );
        let cached = writes
            .iter()
            .filter(|w| w.fate != Fate::Misdirected)
            .count() as u64;
        let fsynced = writes
            .iter()
            .filter(|w| w.fate != Fate::Misdirected && w.fsynced)
            .count() as u64;
        let misdirected = writes.len() as u64 - cached;
        assert_eq!(
            (cached, fsynced, misdirected),
            (
                summary.cached_at_cut,
                summary.fsynced_at_cut,
                summary.misdirected
            ),
            "ground truth summary disagrees with its lines"
        );
        Truth { writes, summary }
    }

    /// The write lines of `file` (relative to the mount root).
    pub fn of_file<'a>(&'a self, file: &'a str) -> impl Iterator<Item = &'a TruthWrite> + 'a {
        self.writes.iter().filter(move |w| w.file == file)
    }
}

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
        let out = self
            .0
            .cut()
            .unwrap_or_else(|e| panic!("{e}\nlog:\n{}", self.log_text()));
        let text = std::fs::read_to_string(self.truth_path())
            .unwrap_or_else(|e| panic!("ground truth {}: {e}", self.truth_path().display()));
        let truth = Truth::parse(&text);
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
