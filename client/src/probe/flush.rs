//! The timed flush loop: single-job 4096-byte `pwrite` + `fdatasync` on a scratch
//! file beside the target, with every given leaf disk's "flush requests completed"
//! counter (`/sys/block/DISK/stat` field 16) sampled before and after. The rules
//! over the result are in the core ([`plugpull::probe::flush`]).
//! The leaf disks are the probe's own (`Probe::leaves`, from the stack walk in
//! `probe/stack.rs`).

use crate::latency::LatencyStats;
use crate::Error;
use plugpull::probe::flush::{DiskFlushes, DiskStat, FlushMeasurement, WriteCache};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The refusal for a raw block device target without `--force`.
pub const RAW_DEVICE_REFUSED: &str =
    "--seconds on a block device writes its first 4 KiB (put back after the loop): give --force to allow it";
/// Bytes each `pwrite` writes (at offset 0 of the scratch file, or of the device).
pub const WRITE_SIZE: usize = 4096;
/// What each `pwrite` writes: [`WRITE_SIZE`] bytes of this value.
pub const WRITE_BYTE: u8 = 0x5a;

/// Where the loop writes: a scratch file, created `O_EXCL` and unlinked at once so
/// nothing is left behind however the probe ends (error, panic, Ctrl-C, SIGKILL),
/// or (`--force`) a block device itself, opened exclusively.
struct Scratch {
    path: PathBuf,
    file: File,
    /// A device's first [`WRITE_SIZE`] bytes as they were before the loop, written
    /// back after it.
    saved: Option<Vec<u8>>,
}

impl Scratch {
    fn create(dir: &Path) -> Result<Scratch, Error> {
        let path = dir.join(format!(".plugpull-probe-{}", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| {
                Error::Msg(format!(
                    "cannot create scratch file {}: {e}",
                    path.display()
                ))
            })?;
        std::fs::remove_file(&path).map_err(|e| {
            Error::Msg(format!(
                "cannot unlink scratch file {}: {e}",
                path.display()
            ))
        })?;
        Ok(Scratch {
            path,
            file,
            saved: None,
        })
    }

    /// The block device `dev` itself, opened as `write file` opens one
    /// ([`crate::blockdev::open_block_exclusive`]: `O_EXCL`, so a mounted or held
    /// device is refused with EBUSY).
    /// Its first [`WRITE_SIZE`] bytes are read first, to be put back ([`Scratch::restore`]).
    fn device(dev: &Path) -> Result<Scratch, Error> {
        let file = crate::blockdev::open_block_exclusive(dev)?;
        let mut saved = vec![0u8; WRITE_SIZE];
        file.read_exact_at(&mut saved, 0).map_err(|e| {
            Error::Msg(format!(
                "cannot read the first {WRITE_SIZE} bytes of {} to restore them after the loop: {e}",
                dev.display()
            ))
        })?;
        Ok(Scratch {
            path: dev.to_path_buf(),
            file,
            saved: Some(saved),
        })
    }

    /// Writes a device's saved bytes back and syncs them; the note saying so. Errors
    /// name the device and that its first 4 KiB now hold the loop's bytes.
    fn restore(&self) -> Result<Option<String>, Error> {
        let Some(saved) = &self.saved else {
            return Ok(None);
        };
        self.file
            .write_all_at(saved, 0)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| {
                Error::Msg(format!(
                    "could not restore the first {WRITE_SIZE} bytes of {} after the loop ({e}): they now hold 0x{WRITE_BYTE:02x}",
                    self.path.display()
                ))
            })?;
        Ok(Some(format!(
            "{}: the loop wrote its first {WRITE_SIZE} bytes; what they held before was written back and synced",
            self.path.display()
        )))
    }
}

/// `path`, or its parent directory when `path` does not exist yet (a target
/// `write` has still to create); `None` when neither exists.
/// Symbolic links are resolved, so the scratch file lands on the filesystem the
/// stack was probed on.
fn existing(path: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
    let (followed, existing) = super::existing_of(path);
    let real = std::fs::canonicalize(&existing).ok()?;
    let md = std::fs::metadata(&real).ok()?;
    // A target not created yet stands for its directory, never for another file.
    (existing == followed || md.is_dir()).then_some((real, md))
}

/// Where the loop writes for `target`: a scratch file in `target` itself when it is
/// a directory, else in its parent (also when `target` does not exist yet); a block
/// device itself only with `force` (else [`RAW_DEVICE_REFUSED`]).
fn sink(target: &Path, force: bool) -> Result<Scratch, Error> {
    let Some((path, md)) = existing(target) else {
        let e = std::fs::metadata(target).err();
        let why = e.map_or_else(|| "not found".to_string(), |e| e.to_string());
        return Err(Error::Msg(format!(
            "cannot probe {}: {why}",
            target.display()
        )));
    };
    if md.file_type().is_block_device() {
        if !force {
            return Err(Error::Msg(RAW_DEVICE_REFUSED.into()));
        }
        return Scratch::device(&path);
    }
    if md.is_dir() {
        return Scratch::create(&path);
    }
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => Scratch::create(p),
        _ => Scratch::create(Path::new(".")),
    }
}

/// Reads `/sys/block/DISK/stat`.
pub fn read_stat(disk: &str) -> Result<DiskStat, String> {
    let p = format!("/sys/block/{disk}/stat");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{p}: {e}"))?;
    DiskStat::parse(&text).map_err(|e| format!("{p}: {e}"))
}

fn queue_attr(disk: &str, name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/block/{disk}/queue/{name}")).ok()
}

/// Runs the loop for `seconds` (at least one `fdatasync`) on a scratch file in
/// `dir` (or beside it, when `dir` is a file), or with `force` on `dir` itself when
/// it is a block device (overwriting its first [`WRITE_SIZE`] bytes), counting the
/// flushes of `disks` (whole disks' kernel names: the probe's `leaves`). The scratch
/// file is unlinked as soon as it is created, so nothing is left however the probe
/// ends. Errors: a block device without `force` ([`RAW_DEVICE_REFUSED`]) or in use
/// (mounted, held), a bad `seconds`, a scratch file that cannot be created, or a
/// write or sync that fails.
pub fn measure(
    dir: &Path,
    seconds: f64,
    disks: &[String],
    force: bool,
) -> Result<FlushMeasurement, Error> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(Error::Msg(format!(
            "probe --seconds must be a number above 0, not {seconds}"
        )));
    }
    let scratch = sink(dir, force)?;
    let mut notes = Vec::new();
    if disks.is_empty() {
        notes.push(format!(
            "no leaf disk under {} (tmpfs, a network or FUSE filesystem?): flushes not counted",
            dir.display()
        ));
    }
    let before: Vec<_> = disks.iter().map(|d| read_stat(d)).collect();
    let ran = run_loop(&scratch, Duration::from_secs_f64(seconds));
    let after: Vec<_> = disks.iter().map(|d| read_stat(d)).collect();
    // Put a device's bytes back whether or not the loop went well.
    notes.extend(scratch.restore()?);
    drop(scratch);
    let (fdatasyncs, elapsed, lat) = ran?;
    let per_disk = disks
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(disk, (b, a))| disk_flushes(disk, b, a, fdatasyncs, &mut notes))
        .collect();
    let secs = elapsed.as_secs_f64();
    Ok(FlushMeasurement {
        seconds: secs,
        fdatasyncs,
        rate_per_s: fdatasyncs as f64 / secs,
        p50_us: (lat.percentile_ms(50.0) * 1000.0).round() as u64,
        p99_us: (lat.percentile_ms(99.0) * 1000.0).round() as u64,
        per_disk,
        notes,
    })
}

/// `pwrite` + `fdatasync` until `budget` has passed; returns the count, the time
/// taken and the `fdatasync` latencies.
fn run_loop(s: &Scratch, budget: Duration) -> Result<(u64, Duration, LatencyStats), Error> {
    let block = [WRITE_BYTE; WRITE_SIZE];
    let mut lat = LatencyStats::new();
    let mut n = 0u64;
    let start = Instant::now();
    while n == 0 || start.elapsed() < budget {
        s.file
            .write_all_at(&block, 0)
            .map_err(|e| Error::Msg(format!("pwrite {}: {e}", s.path.display())))?;
        let t = Instant::now();
        s.file
            .sync_data()
            .map_err(|e| Error::Msg(format!("fdatasync {}: {e}", s.path.display())))?;
        lat.record(t.elapsed());
        n += 1;
    }
    Ok((n, start.elapsed(), lat))
}

fn disk_flushes(
    disk: &str,
    before: &Result<DiskStat, String>,
    after: &Result<DiskStat, String>,
    fdatasyncs: u64,
    notes: &mut Vec<String>,
) -> DiskFlushes {
    let mut d = match (before, after) {
        (Ok(b), Ok(a)) => {
            if a.flush_ios.is_none() {
                notes.push(format!(
                    "{disk}: /sys/block/{disk}/stat has {} fields, no flush counter (kernel before 5.5): flushes unknown",
                    a.fields
                ));
            }
            DiskFlushes::between(disk, b, a, fdatasyncs)
        }
        (Err(e), _) | (_, Err(e)) => {
            notes.push(format!("{disk}: flushes unknown: {e}"));
            let none = DiskStat {
                fields: 0,
                write_ios: 0,
                flush_ios: None,
                flush_ticks_ms: None,
            };
            DiskFlushes::between(disk, &none, &none, fdatasyncs)
        }
    };
    if d.writes_delta == Some(0) && fdatasyncs > 0 {
        notes.push(format!(
            "{disk}: no write counted during the loop either, so its flush count proves nothing: the loop's writes did not reach it (eatmydata, a layer that swallows fsync), or its counters do not see this I/O (an NVMe multipath head without I/O accounting)"
        ));
    }
    d.rotational = queue_attr(disk, "rotational").map(|r| r.trim() == "1");
    d.write_cache = queue_attr(disk, "write_cache").and_then(|w| WriteCache::parse(&w));
    if d.rotational == Some(true) {
        d.rpm = super::evidence::rpm_of(disk);
    }
    d
}
