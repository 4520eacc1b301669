//! Flush accounting: does `fdatasync` reach the device as a cache flush?
//!
//! The probe runs a timed single-job `pwrite` + `fdatasync` loop (the client's
//! `probe::flush::measure`) and samples each leaf disk's "flush requests completed"
//! counter before and after. This module holds the pure parts:
//!
//! * [`DiskStat::parse`] — one `/sys/block/DISK/stat` line. Its fields are those of
//!   the kernel's `Documentation/block/stat.rst`, in order: 1 read I/Os, 2 read
//!   merges, 3 read sectors, 4 read ticks (ms), 5 write I/Os, 6 write merges, 7 write
//!   sectors, 8 write ticks (ms), 9 in flight, 10 io ticks (ms), 11 time in queue
//!   (ms), 12–15 discard I/Os, merges, sectors, ticks (ms; Linux 4.18+), 16 flush
//!   requests completed, 17 time spent flushing (ms; Linux 5.5+). A line of 11 or 15
//!   fields (an older kernel) leaves the flush counters unknown.
//! * [`FlushMeasurement`] — what the loop measured, per disk ([`DiskFlushes`]).
//! * [`warnings`] — the flush rules, each with a stable id: [`FLUSHES_NOT_REACHING_DEVICE`],
//!   [`FSYNC_TOO_FAST_FOR_ROTATIONAL`], [`WRITE_BACK_CACHE_FAST_FLUSH`],
//!   [`WRITES_NOT_REACHING_DEVICE`].

use serde::{Deserialize, Serialize};

/// Warning id: the disk has a volatile ("write back") cache, yet no flush request
/// (or fewer than [`MIN_FLUSHES_PER_FDATASYNC`] per `fdatasync`) was counted while
/// the loop ran at least one `fdatasync`.
pub const FLUSHES_NOT_REACHING_DEVICE: &str = "flushes-not-reaching-device";
/// Warning id: a rotational disk completed more `fdatasync`s per second than it
/// makes revolutions (7200 rpm = 120/s when the rpm is not known).
pub const FSYNC_TOO_FAST_FOR_ROTATIONAL: &str = "fsync-too-fast-for-rotational";
/// Warning id (a hint, not proof): a volatile cache and a median `fdatasync` under
/// [`FAST_FLUSH_US`] µs.
pub const WRITE_BACK_CACHE_FAST_FLUSH: &str = "write-back-cache-fast-flush";
/// Warning id: the loop's writes did not reach any leaf disk, whatever its cache:
/// no disk under the target counted a write request while `fdatasync`s returned, or
/// the median `fdatasync` took under [`IMPLAUSIBLE_FDATASYNC_US`] µs, faster than
/// any device completes a write. What `eatmydata`, or another layer that swallows
/// `fsync`, does on an otherwise idle disk.
pub const WRITES_NOT_REACHING_DEVICE: &str = "writes-not-reaching-device";

/// The median `fdatasync` latency, µs, under which a write cannot have reached a
/// device: a request to any disk, NVMe included, takes longer than that to
/// complete (`eatmydata` returns in about 1 µs).
pub const IMPLAUSIBLE_FDATASYNC_US: u64 = 5;

/// The median `fdatasync` latency, µs, under which a volatile-cache disk is
/// suspected of acknowledging flushes without draining its cache.
pub const FAST_FLUSH_US: u64 = 100;
/// Below this many flushes per `fdatasync` the single-job loop raises
/// [`FLUSHES_NOT_REACHING_DEVICE`]: each of its calls must send one.
pub const MIN_FLUSHES_PER_FDATASYNC: f64 = 0.5;
/// The rpm assumed for a rotational disk whose rpm is not known.
pub const DEFAULT_RPM: u32 = 7200;

/// The counters of one `/sys/block/DISK/stat` line that flush accounting uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStat {
    /// How many fields the line had (11, 15 or 17 on the kernels stat.rst describes).
    pub fields: usize,
    /// Field 5: write requests completed.
    pub write_ios: u64,
    /// Field 16: flush requests completed; `None` when the line has fewer than 16 fields.
    pub flush_ios: Option<u64>,
    /// Field 17: time spent flushing, ms; `None` when the line has fewer than 17 fields.
    pub flush_ticks_ms: Option<u64>,
}

impl DiskStat {
    /// Parses one `/sys/block/DISK/stat` line (whitespace-separated decimal
    /// counters). Errors on fewer than 11 fields or a field that is not a number.
    ///
    /// ```
    /// use plugpull::probe::flush::DiskStat;
    /// let s = DiskStat::parse("1 0 8 0 2 0 16 0 0 4 4 0 0 0 0 7 3").unwrap();
    /// assert_eq!((s.write_ios, s.flush_ios, s.flush_ticks_ms), (2, Some(7), Some(3)));
    /// ```
    pub fn parse(line: &str) -> Result<DiskStat, String> {
        let nums: Vec<u64> = line
            .split_whitespace()
            .map(|f| {
                f.parse::<u64>()
                    .map_err(|_| format!("stat field {f:?} is not a counter"))
            })
            .collect::<Result<_, _>>()?;
        if nums.len() < 11 {
            return Err(format!(
                "stat line has {} fields, expected at least 11",
                nums.len()
            ));
        }
        Ok(DiskStat {
            fields: nums.len(),
            write_ios: nums[4],
            flush_ios: nums.get(15).copied(),
            flush_ticks_ms: nums.get(16).copied(),
        })
    }
}

/// A disk's write cache as the kernel sees it (`/sys/block/DISK/queue/write_cache`),
/// serialized (and displayed) as the kernel spells it: `"write back"`,
/// `"write through"`. One type for [`crate::probe::Leaf::write_cache`] and
/// [`DiskFlushes::write_cache`]. The earlier `"write-back"`/`"write-through"` of
/// `DiskFlushes` are still read (a probe stored in a run's manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteCache {
    /// "write back": a volatile cache; the kernel sends flushes (and FUA).
    #[serde(rename = "write back", alias = "write-back")]
    WriteBack,
    /// "write through": no volatile cache; the kernel drops flushes before the driver.
    #[serde(rename = "write through", alias = "write-through")]
    WriteThrough,
}

impl std::fmt::Display for WriteCache {
    /// The kernel's spelling, as in sysfs and the JSON.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteCache::WriteBack => "write back",
            WriteCache::WriteThrough => "write through",
        })
    }
}

impl WriteCache {
    /// Parses the sysfs text ("write back" / "write through", trailing newline allowed).
    pub fn parse(s: &str) -> Option<WriteCache> {
        match s.trim() {
            "write back" => Some(WriteCache::WriteBack),
            "write through" => Some(WriteCache::WriteThrough),
            _ => None,
        }
    }
}

/// One leaf disk's flush count over the timed loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskFlushes {
    /// The whole disk's kernel name (`vda`, `nvme0n1`, `sda`), never a partition.
    pub disk: String,
    /// Flush requests completed during the loop (field 16 after minus before);
    /// `None` when the kernel has no flush field or the counter could not be read.
    pub flushes_delta: Option<u64>,
    /// `flushes_delta / fdatasyncs`; `None` when either is unknown or zero fdatasyncs ran.
    pub per_fdatasync: Option<f64>,
    /// Write requests completed during the loop (field 5 after minus before); `None`
    /// when unknown. Zero means the disk's counters do not see the loop's I/O at all
    /// (e.g. an NVMe multipath head without I/O accounting): then its zero flushes
    /// prove nothing.
    #[serde(default)]
    pub writes_delta: Option<u64>,
    /// `queue/rotational`: `Some(true)` for a spinning disk (as the kernel reports it).
    pub rotational: Option<bool>,
    /// `queue/write_cache`.
    pub write_cache: Option<WriteCache>,
    /// Revolutions per minute when known (e.g. `smartctl` "rotation_rate"); the
    /// rotational rule assumes [`DEFAULT_RPM`] otherwise.
    pub rpm: Option<u32>,
}

impl DiskFlushes {
    /// The flush accounting of `disk` from its stat lines `before` and `after` a loop
    /// of `fdatasyncs` calls. A counter that went down (a disk re-attached) is unknown.
    pub fn between(disk: &str, before: &DiskStat, after: &DiskStat, fdatasyncs: u64) -> Self {
        let flushes_delta = match (before.flush_ios, after.flush_ios) {
            (Some(b), Some(a)) if a >= b => Some(a - b),
            _ => None,
        };
        let per_fdatasync = flushes_delta
            .filter(|_| fdatasyncs > 0)
            .map(|d| d as f64 / fdatasyncs as f64);
        let writes_delta = (before.fields > 0 && after.write_ios >= before.write_ios)
            .then(|| after.write_ios - before.write_ios);
        DiskFlushes {
            disk: disk.to_string(),
            flushes_delta,
            per_fdatasync,
            writes_delta,
            rotational: None,
            write_cache: None,
            rpm: None,
        }
    }
}

/// What one timed `pwrite` + `fdatasync` loop measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlushMeasurement {
    /// How long the loop ran, seconds.
    pub seconds: f64,
    /// `fdatasync` calls completed.
    pub fdatasyncs: u64,
    /// `fdatasyncs / seconds`.
    pub rate_per_s: f64,
    /// Median `fdatasync` latency, µs.
    pub p50_us: u64,
    /// 99th-percentile `fdatasync` latency, µs.
    pub p99_us: u64,
    /// The leaf disks' flush counts, in the order they were given.
    pub per_disk: Vec<DiskFlushes>,
    /// What could not be measured, one line each ("no leaf disk under /dev/shm …").
    pub notes: Vec<String>,
}

/// One flush warning: a stable id, the disk it concerns, one line of text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushWarning {
    /// One of [`FLUSHES_NOT_REACHING_DEVICE`], [`FSYNC_TOO_FAST_FOR_ROTATIONAL`],
    /// [`WRITE_BACK_CACHE_FAST_FLUSH`], [`WRITES_NOT_REACHING_DEVICE`].
    pub id: String,
    /// The disk's kernel name.
    pub disk: String,
    /// One line for a human.
    pub text: String,
}

/// The flush rules over a measurement, in disk order, each disk's warnings in the
/// order of the constants above. Warnings never fail a run.
pub fn warnings(m: &FlushMeasurement) -> Vec<FlushWarning> {
    let mut out = Vec::new();
    // The loop's writes must reach some leaf disk: a RAID spreads them, but one of
    // its members sees each.
    let no_disk_wrote =
        !m.per_disk.is_empty() && m.per_disk.iter().all(|d| d.writes_delta == Some(0));
    let too_fast = !m.per_disk.is_empty() && m.p50_us < IMPLAUSIBLE_FDATASYNC_US;
    if m.fdatasyncs >= 1 && (no_disk_wrote || too_fast) {
        let disks: Vec<&str> = m.per_disk.iter().map(|d| d.disk.as_str()).collect();
        let mut why = Vec::new();
        if no_disk_wrote {
            why.push(format!(
                "no write request was counted on {}",
                disks.join(", ")
            ));
        }
        if too_fast {
            why.push(format!(
                "the median fdatasync took {} µs (under {IMPLAUSIBLE_FDATASYNC_US} µs, faster than any device completes a write)",
                m.p50_us
            ));
        }
        out.push(FlushWarning {
            id: WRITES_NOT_REACHING_DEVICE.to_string(),
            disk: disks.join(","),
            text: format!(
                "over {} fdatasyncs {}: the loop's writes did not reach the disk (eatmydata, or a layer that swallows fsync)",
                m.fdatasyncs,
                why.join(", and ")
            ),
        });
    }
    for d in &m.per_disk {
        let mut warn = |id: &str, text: String| {
            out.push(FlushWarning {
                id: id.to_string(),
                disk: d.disk.clone(),
                text,
            })
        };
        let volatile = d.write_cache == Some(WriteCache::WriteBack);
        // Few flushes prove something only where the disk counted the loop's writes.
        // The loop is one writer: each fdatasync must send its own flush, and other
        // I/O on the disk only adds flushes.
        let counted = volatile && m.fdatasyncs >= 1 && d.writes_delta != Some(0);
        match (d.flushes_delta, d.per_fdatasync) {
            (Some(0), _) if counted => warn(
                FLUSHES_NOT_REACHING_DEVICE,
                format!(
                    "{}: write cache \"write back\" but 0 flushes counted over {} fdatasyncs",
                    d.disk, m.fdatasyncs
                ),
            ),
            (Some(n), Some(per)) if counted && per < MIN_FLUSHES_PER_FDATASYNC => warn(
                FLUSHES_NOT_REACHING_DEVICE,
                format!(
                    "{}: write cache \"write back\" but only {n} flushes counted over {} fdatasyncs ({per:.2} per fdatasync)",
                    d.disk, m.fdatasyncs
                ),
            ),
            _ => {}
        }
        let revs_per_s = f64::from(d.rpm.unwrap_or(DEFAULT_RPM)) / 60.0;
        if d.rotational == Some(true) && m.rate_per_s > revs_per_s {
            let rpm = match d.rpm {
                Some(r) => format!("{r} rpm"),
                None => format!("{DEFAULT_RPM} rpm assumed"),
            };
            warn(
                FSYNC_TOO_FAST_FOR_ROTATIONAL,
                format!(
                    "{}: rotational disk completed {:.0} fdatasyncs/s, above its {:.0} revolutions/s ({rpm})",
                    d.disk, m.rate_per_s, revs_per_s
                ),
            );
        }
        if volatile && m.fdatasyncs >= 1 && m.p50_us < FAST_FLUSH_US {
            warn(
                WRITE_BACK_CACHE_FAST_FLUSH,
                format!(
                    "{}: volatile write cache and median fdatasync {} µs (under {FAST_FLUSH_US} µs): a hint the cache is not drained",
                    d.disk, m.p50_us
                ),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests;
