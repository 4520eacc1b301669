//! Checks `plugpull write file` makes before it writes anything, so it never destroys
//! a user's data and never starts a run it cannot complete: the target's kind, the
//! signatures of filesystems, volume managers, RAID members and partition tables on
//! it, the filesystem's size, and `O_DIRECT` alignment.
//!
//! Signatures are found by util-linux's `wipefs --no-act --json`, which probes with
//! libblkid every place those formats keep a superblock or label (first MiB, 1 KiB,
//! 4 KiB, 64 KiB, end-of-device backups: ext*, xfs, btrfs, LVM, MD, GPT/MBR, swap,
//! ZFS, …) without writing anything.

use crate::Error;
use std::fs::{File, Metadata};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;

/// The target's metadata: `None` when it does not exist yet.
///
/// Errors: it exists but is neither a regular file nor a block device (a FIFO,
/// socket, character device or directory: reading or writing one could block
/// forever or mean nothing), or it cannot be looked up.
pub fn target_kind(path: &Path) -> Result<Option<Metadata>, Error> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error(format!("cannot look up target {shown}: {e}"))),
        Ok(m) => {
            let t = m.file_type();
            if t.is_file() || t.is_block_device() {
                return Ok(Some(m));
            }
            let kind = if t.is_fifo() {
                "a FIFO (named pipe)"
            } else if t.is_socket() {
                "a socket"
            } else if t.is_char_device() {
                "a character device"
            } else if t.is_dir() {
                "a directory"
            } else {
                "neither a regular file nor a block device"
            };
            Err(Error(format!(
                "target {shown} is {kind}: give a regular file or a block device"
            )))
        }
    }
}

/// Why the target's contents are not plugpull's, if they are not: the signatures
/// `wipefs` finds (see [`signatures`]), else a first sector that is neither zeros nor a
/// plugpull record. Where `wipefs` cannot run, a block device counts as foreign (its
/// filesystems cannot be ruled out); a file falls back to the first-sector check.
pub fn foreign_data(path: &Path, f: &File, block_device: bool) -> Option<String> {
    match signatures(path) {
        Ok(sigs) if !sigs.is_empty() => {
            let list: Vec<String> = sigs
                .iter()
                .map(|s| format!("{} signature at byte {}", s.kind, s.offset))
                .collect();
            return Some(format!("wipefs found: {}", list.join(", ")));
        }
        Ok(_) => {}
        Err(e) if block_device => {
            return Some(format!(
                "{e}: a filesystem, volume or partition table on it cannot be ruled out"
            ))
        }
        Err(e) => eprintln!(
            "warning: {e}; only the first sector of target {} is checked for foreign data",
            path.display()
        ),
    }
    holds_foreign_data(f)
        .then(|| "its first sector is neither zeros nor a plugpull record".to_string())
}

/// True when the first sector holds something other than zeros or a plugpull record.
fn holds_foreign_data(f: &File) -> bool {
    let mut s = [0u8; plugpull::record::SECTOR];
    let n = f.read_at(&mut s, 0).unwrap_or(0);
    if n < plugpull::record::SECTOR {
        return s[..n].iter().any(|&b| b != 0);
    }
    matches!(
        plugpull::record::decode_sector(&s),
        plugpull::record::Sector::Invalid(_)
    )
}

/// One signature `wipefs` found: what and at which byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// libblkid's name of the format, e.g. `ext4`, `xfs`, `LVM2_member`, `gpt`.
    pub kind: String,
    /// Where its magic is, as wipefs prints it (e.g. `0x438`).
    pub offset: String,
}

/// The signatures on `path` (a file or block device), per `wipefs --no-act --json`.
///
/// Errors: `wipefs` is missing or failed (its message).
pub fn signatures(path: &Path) -> Result<Vec<Signature>, String> {
    let o = Command::new("wipefs")
        .args(["--no-act", "--json"])
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run wipefs (util-linux): {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "wipefs --no-act {} failed ({}): {}",
            path.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&o.stdout);
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("wipefs printed no JSON ({e}): {text}"))?;
    Ok(v["signatures"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| Signature {
                    kind: s["type"].as_str().unwrap_or("unknown").to_string(),
                    offset: s["offset"].as_str().unwrap_or("?").to_string(),
                })
                .collect()
        })
        .unwrap_or_default())
}

/// Opens a block device read-write and exclusively (`O_EXCL`): the kernel refuses
/// while it is mounted or held by device-mapper, LVM, MD or another exclusive opener.
///
/// Errors: busy (named as such), or cannot be opened.
pub fn open_block_exclusive(path: &Path) -> Result<File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                Error(format!(
                    "target {} is in use: it is mounted, or held by LVM, MD RAID, device-mapper or \
                     another program (the kernel refused an exclusive open: {e}); unmount or release it first",
                    path.display()
                ))
            } else {
                Error(format!("cannot open target {}: {e}", path.display()))
            }
        })
}

/// Total bytes of the filesystem holding `f` (`fstatvfs`: `f_blocks × f_frsize`) and
/// the bytes available to us (`f_bavail × f_frsize`).
pub fn fs_space(f: &File) -> std::io::Result<(u64, u64)> {
    // SAFETY: fstatvfs fills the zeroed struct on success.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(f.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize))
}

/// The `O_DIRECT` offset/length alignment of `f` in bytes, and where it came from:
/// `BLKSSZGET` (the logical block size) for block devices, `statx`'s
/// `dio_offset_align` for files where the kernel reports it (Linux 6.1+). `None`
/// when neither says (the caller then probes).
pub fn direct_alignment(f: &File, block_device: bool) -> Option<(u64, &'static str)> {
    let fd = f.as_raw_fd();
    if block_device {
        let mut ssz: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int.
        if unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut ssz) } == 0 && ssz > 0 {
            return Some((ssz as u64, "the device's logical block size (BLKSSZGET)"));
        }
        return None;
    }
    // SAFETY: statx fills the zeroed struct on success; the empty path with
    // AT_EMPTY_PATH means the descriptor itself.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0 {
        return Some((
            stx.stx_dio_offset_align as u64,
            "statx dio_offset_align of the file",
        ));
    }
    None
}
