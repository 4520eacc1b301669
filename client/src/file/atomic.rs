//! `write file --expect-atomic [--atomic rwf|none]` (`docs/atomic.md`): the options,
//! the claimed atomic units the manifest records ([`plugpull::atomic::AtomicClaim`]),
//! the refusal of an `RWF_ATOMIC` write size the kernel, filesystem or device does not
//! offer, and the `pwritev2(…, RWF_ATOMIC)` every write then is.
//!
//! Sources: `man 2 statx` (`STATX_WRITE_ATOMIC`, Linux 6.11+), `man 2 pwritev2`
//! (`RWF_ATOMIC`: a power-of-two length within the statx limits, at an offset aligned
//! to it, with `O_DIRECT`), kernel `Documentation/ABI/stable/sysfs-block`
//! (`queue/atomic_write_unit_{min,max}_bytes`). The constants come from the `libc`
//! crate (`RWF_ATOMIC` = 0x40, `include/uapi/linux/fs.h`; `STATX_WRITE_ATOMIC` =
//! 0x10000, `include/uapi/linux/stat.h`).

use crate::Error;
use plugpull::atomic::{AtomicClaim, DiskAtomic, StatxAtomic};
use plugpull::modes::{AtomicMode, SyncMode};
use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// The atomic-write options of `plugpull write file`.
#[derive(clap::Args, Debug, Clone)]
pub struct AtomicArgs {
    /// Qualify atomic writes of --block-size bytes (8192: PostgreSQL pages, 16384:
    /// InnoDB's): a block torn by a write in flight at the cut is then a failure, and
    /// verify says whether the stack's claim held (docs/atomic.md).
    #[arg(long)]
    pub expect_atomic: bool,
    /// With --expect-atomic: `none` writes plainly (tests the device's natural
    /// behaviour, what PostgreSQL's own writes get); `rwf` asks the kernel for an
    /// untorn write each time (Linux 6.11+ atomic writes; needs --sync direct-dsync,
    /// refused where the file, filesystem or device does not offer --block-size).
    #[arg(long, value_enum, default_value = "none", requires = "expect_atomic")]
    pub atomic: AtomicMode,
}

/// Refuses `--atomic rwf` without `--sync direct-dsync` (the kernel takes
/// `RWF_ATOMIC` only on `O_DIRECT` writes).
pub fn check_atomic_args(a: &AtomicArgs, sync: SyncMode) -> Result<(), Error> {
    if a.atomic == AtomicMode::Rwf && sync != SyncMode::DirectDsync {
        return Err(format!(
            "--atomic rwf needs --sync direct-dsync (it was {}): the kernel takes RWF_ATOMIC writes only with O_DIRECT (man 2 pwritev2)",
            sync.name()
        )
        .into());
    }
    Ok(())
}

/// `statx(path, STATX_WRITE_ATOMIC)`: the atomic-write limits of the file or block
/// device, `None` when the kernel does not report them (before Linux 6.11, or a
/// filesystem that does not fill them in).
///
/// Errors: statx itself failed.
pub fn statx_atomic(path: &Path) -> std::io::Result<Option<StatxAtomic>> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statx is a plain struct of integers; all zeros is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a buffer of the right type.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            0,
            libc::STATX_WRITE_ATOMIC,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if stx.stx_mask & libc::STATX_WRITE_ATOMIC == 0 {
        return Ok(None);
    }
    Ok(Some(StatxAtomic {
        unit_min: stx.stx_atomic_write_unit_min,
        unit_max: stx.stx_atomic_write_unit_max,
        segments_max: stx.stx_atomic_write_segments_max,
    }))
}

/// The whole disk under `path` (a file: its filesystem's device; a block device:
/// itself) and its sysfs atomic-write limits, found through `/sys/dev/block/MAJ:MIN`
/// (a partition's limits are its disk's).
pub fn sysfs_atomic(path: &Path) -> Option<DiskAtomic> {
    let md = std::fs::metadata(path).ok()?;
    let dev = if md.file_type().is_block_device() {
        md.rdev()
    } else {
        md.dev()
    };
    let sys =
        Path::new("/sys/dev/block").join(format!("{}:{}", libc::major(dev), libc::minor(dev)));
    let mut dir = std::fs::canonicalize(sys).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let num = |f: &str| {
        std::fs::read_to_string(dir.join("queue").join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    Some(DiskAtomic {
        name: dir.file_name()?.to_string_lossy().into_owned(),
        unit_min: num("atomic_write_unit_min_bytes"),
        unit_max: num("atomic_write_unit_max_bytes"),
        nvme: String::new(),
    })
}

/// With `--atomic rwf`: refuses (exit 2) a target on which statx does not offer
/// `RWF_ATOMIC` writes of `block_size` bytes, naming what statx and sysfs say.
/// Nothing to check with `--atomic none`.
pub fn check_rwf(a: &AtomicArgs, target: &Path, block_size: u64) -> Result<(), Error> {
    if a.atomic != AtomicMode::Rwf {
        return Ok(());
    }
    let sysfs = match sysfs_atomic(target) {
        Some(d) => format!(
            "; sysfs: {} atomic_write_unit_max_bytes {}",
            d.name,
            d.unit_max
                .map_or("not present (kernel before 6.11)".to_string(), |m| m
                    .to_string())
        ),
        None => String::new(),
    };
    let t = target.display();
    let why = match statx_atomic(target) {
        Err(e) => format!("statx of {t} failed: {e}"),
        Ok(None) => format!(
            "the kernel reports no atomic-write limits for {t} (statx STATX_WRITE_ATOMIC, Linux 6.11+; \
             the filesystem may not support atomic writes)"
        ),
        Ok(Some(s)) if s.unit_min == 0 => {
            format!("{t} offers no atomic writes (statx: atomic write unit 0 bytes)")
        }
        Ok(Some(s)) if !s.offers(block_size) => format!(
            "{t} does not offer atomic writes of {block_size} bytes (statx: powers of two from {} to {} bytes)",
            s.unit_min, s.unit_max
        ),
        Ok(Some(_)) => return Ok(()),
    };
    Err(Error::Msg(format!(
        "--atomic rwf refused: {why}{sysfs}. RWF_ATOMIC writes of --block-size {block_size} are not offered by \
         the kernel, the filesystem or the device here; choose a --block-size they offer, or --atomic none to \
         test the device's natural behaviour"
    )))
}

/// The claims the manifest records: statx of `target`, and each leaf disk of the
/// probe (sysfs limits; NVMe AWUN/AWUPF from `nvme id-ctrl`, or `not available`),
/// or without a probe the disk [`sysfs_atomic`] finds.
pub fn claim(
    a: &AtomicArgs,
    block_size: u64,
    target: &Path,
    probe: Option<&plugpull::probe::Probe>,
) -> AtomicClaim {
    let disks = match probe {
        Some(p) if !p.leaves.is_empty() => p
            .leaves
            .iter()
            .map(|l| DiskAtomic {
                name: l.name.clone(),
                unit_min: l.atomic_write_unit_min,
                unit_max: l.atomic_write_unit_max,
                nvme: nvme_units(&l.transport, l.drive_write_cache.as_deref()),
            })
            .collect(),
        _ => sysfs_atomic(target).into_iter().collect(),
    };
    AtomicClaim {
        unit: block_size as u32,
        mode: a.atomic,
        statx: statx_atomic(target).ok().flatten(),
        disks,
    }
}

/// What an NVMe disk says of AWUN/AWUPF (the probe's `nvme id-ctrl` line), or `not
/// available` when nvme-cli is missing or silent; `""` for a disk that is not NVMe.
fn nvme_units(transport: &str, drive: Option<&str>) -> String {
    if transport != "nvme" {
        return String::new();
    }
    match drive.and_then(|d| d.find("atomic write unit").map(|i| &d[i..])) {
        Some(units) => units.to_string(),
        None => "not available (nvme-cli missing or silent)".to_string(),
    }
}

/// The write head's line for a run that expects atomic writes: `atomic writes
/// expected: 8192-byte writes (plain writes); claimed: …`; `None` otherwise.
pub fn head_line(m: &plugpull::ledger::Manifest) -> Option<String> {
    match &m.workload {
        plugpull::ledger::Workload::File(f) => f.atomic.as_ref().map(|c| {
            format!(
                "atomic writes expected: {}-byte writes ({}); claimed: {}",
                c.unit,
                mode_words(c.mode),
                c.describe()
            )
        }),
        _ => None,
    }
}

/// `plain writes` or `pwritev2 with RWF_ATOMIC`.
pub fn mode_words(m: AtomicMode) -> &'static str {
    match m {
        AtomicMode::None => "plain writes",
        AtomicMode::Rwf => "pwritev2 with RWF_ATOMIC",
    }
}

/// Writes all of `buf` at byte `at` of `file` as one `pwritev2(…, RWF_ATOMIC)`.
///
/// Errors: the call failed (EINVAL: a size or alignment the file does not offer), or
/// wrote fewer bytes than asked (an atomic write is never partial: reported as EIO).
pub fn pwrite_atomic(file: &File, buf: &[u8], at: u64) -> std::io::Result<()> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over a live buffer; the descriptor is open for writing.
    let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, at as i64, libc::RWF_ATOMIC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != buf.len() {
        return Err(std::io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rwf_needs_direct_dsync_and_none_needs_nothing() {
        let rwf = AtomicArgs {
            expect_atomic: true,
            atomic: AtomicMode::Rwf,
        };
        assert_eq!(
            check_atomic_args(&rwf, SyncMode::Fdatasync).unwrap_err().to_string(),
            "--atomic rwf needs --sync direct-dsync (it was fdatasync): the kernel takes RWF_ATOMIC writes only with O_DIRECT (man 2 pwritev2)"
        );
        assert!(check_atomic_args(&rwf, SyncMode::DirectDsync).is_ok());
        let none = AtomicArgs {
            expect_atomic: true,
            atomic: AtomicMode::None,
        };
        assert!(check_atomic_args(&none, SyncMode::Fsync).is_ok());
        assert!(check_rwf(&none, Path::new("/nonexistent"), 8192).is_ok());
    }

    #[test]
    fn nvme_units_come_from_the_probe_line_or_say_not_available() {
        let line = "nvme id-ctrl: volatile write cache present, atomic write unit 1 blocks normal, 1 on power fail";
        assert_eq!(
            nvme_units("nvme", Some(line)),
            "atomic write unit 1 blocks normal, 1 on power fail"
        );
        assert_eq!(
            nvme_units("nvme", None),
            "not available (nvme-cli missing or silent)"
        );
        assert_eq!(nvme_units("virtio", None), "");
    }
}
