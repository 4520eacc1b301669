//! The target of `plugpull write file`, before the first write: its kind, the checks
//! that keep a run from destroying a user's data or starting a run it cannot complete
//! (what it holds, by [`super::contents`]; the filesystem's free space; `O_DIRECT`
//! alignment), then creating, locking, zeroing under `--force` and preallocating it.

use super::contents::{erase_signatures, foreign_data, run_span};
use super::medium::{len_of, AlignedBuf};
use crate::Error;
use plugpull::units::human_bytes;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The target's metadata: `None` when it does not exist yet.
///
/// Errors: it exists but is neither a regular file nor a block device (a FIFO,
/// socket, character device or directory: reading or writing one could block
/// forever or mean nothing), or it cannot be looked up.
pub fn target_kind(path: &Path) -> Result<Option<Metadata>, Error> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Msg(format!("cannot look up target {shown}: {e}"))),
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
            Err(Error::Msg(format!(
                "target {shown} is {kind}: give a regular file or a block device"
            )))
        }
    }
}

/// Total bytes of the filesystem holding `f` (`fstatvfs`: `f_blocks × f_frsize`) and
/// the bytes available to us (`f_bavail × f_frsize`).
pub fn fs_space(f: &File) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::fstatvfs(f)?;
    Ok((st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize))
}

/// The `O_DIRECT` offset/length alignment of `f` in bytes, and where it came from:
/// `BLKSSZGET` (the logical block size) for block devices, `statx`'s
/// `dio_offset_align` for files where the kernel reports it (Linux 6.1+). `None`
/// when neither says (the caller then probes).
pub fn direct_alignment(f: &File, block_device: bool) -> Option<(u64, &'static str)> {
    if block_device {
        return match rustix::fs::ioctl_blksszget(f) {
            Ok(ssz) if ssz > 0 => Some((ssz as u64, "the device's logical block size (BLKSSZGET)")),
            _ => None,
        };
    }
    let stx = rustix::fs::statx(
        f,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::DIOALIGN,
    )
    .ok()?;
    if stx.stx_mask & rustix::fs::StatxFlags::DIOALIGN.bits() != 0 && stx.stx_dio_offset_align > 0 {
        return Some((
            stx.stx_dio_offset_align as u64,
            "statx dio_offset_align of the file",
        ));
    }
    None
}

/// Why target `path` could not be opened: a missing directory is named as such.
fn open_failure(path: &Path, e: &std::io::Error) -> String {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) if e.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() => format!(
            "cannot open target {}: its directory {} does not exist (create it first)",
            path.display(),
            dir.display()
        ),
        _ => format!("cannot open target {}: {e}", path.display()),
    }
}

/// The target of a run, locked (`flock`, exclusive; block devices also opened
/// `O_EXCL`) against a second writer and against mounting until dropped.
pub struct LockedTarget {
    _lock: File,
}

/// Creates or checks the target so it holds `size` bytes, durably (file and directory
/// entry), and locks it for this run.
///
/// Errors: not a regular file or block device; a block device that is mounted or held
/// (`O_EXCL` refused); another plugpull writer holds the target; the target holds a
/// filesystem, volume, RAID or partition-table signature (`wipefs`), or a first sector
/// that is neither zeros nor a plugpull record, and `force` is off; a block device
/// smaller than `size`; a filesystem without `size` bytes free (checked before
/// allocating; a file this call created is removed again). A filesystem whose
/// `statfs` reports 0 bytes in all has an unknown size: a warning, not an error.
pub fn prepare_target(path: &Path, size: u64, force: bool) -> Result<LockedTarget, Error> {
    let shown = path.display();
    let meta = target_kind(path)?;
    let block_device = meta
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    let created = meta.is_none();
    let f = if block_device {
        crate::blockdev::open_block_exclusive(path)?
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(created)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::Msg(open_failure(path, &e)))?
    };
    let fail = |msg: String| {
        if created {
            let _ = std::fs::remove_file(path);
        }
        Err(Error::Msg(msg))
    };
    // An exclusive flock(2), held until the run ends.
    if f.try_lock().is_err() {
        return fail(format!(
            "target {shown} is in use by another plugpull writer (it holds the target's lock)"
        ));
    }
    if !force && !created {
        if let Some(why) = foreign_data(path, &f, block_device, size) {
            return fail(format!(
                "target {shown} holds data that is not plugpull's ({why}); \
                 a run overwrites its first {}; --force zeroes them and erases the signatures \
                 wipefs finds on it: give --force to use it anyway",
                human_bytes(size)
            ));
        }
    }
    if block_device {
        let have =
            len_of(&f).map_err(|e| Error::Msg(format!("cannot size target {shown}: {e}")))?;
        if have < size {
            return Err(Error::Msg(format!(
                "target {shown} is too small: it holds {} ({have} bytes), --size asks for {} ({size} bytes)",
                human_bytes(have),
                human_bytes(size)
            )));
        }
    }
    if force && !created {
        if let Some(why) = foreign_data(path, &f, block_device, size) {
            erase_signatures(path, &f).map_err(Error::Msg)?;
            let len = run_span(&f, block_device, size);
            zero_range(&f, len, &shown.to_string()).map_err(|e| {
                Error::Msg(format!(
                    "--force: cannot zero the first {len} bytes of target {shown}: {e}"
                ))
            })?;
            f.sync_all().map_err(|e| {
                Error::Msg(format!("fsync of target {shown} after zeroing it: {e}"))
            })?;
            eprintln!(
                "--force: zeroed the first {} of target {shown}, which held data that is not plugpull's ({why})",
                human_bytes(len)
            );
        }
    }
    if block_device {
        return Ok(LockedTarget { _lock: f });
    }
    let allocated = f
        .metadata()
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .unwrap_or(0);
    let needed = size.saturating_sub(allocated);
    match fs_space(&f) {
        Ok((0, _)) => eprintln!(
            "warning: the filesystem of target {shown} reports a size of 0 bytes (statfs): its size is unknown, \
             so free space is not checked before preallocating {}",
            human_bytes(size)
        ),
        Ok((_, free)) if free < needed => {
            return fail(format!(
                "not enough free space for target {shown}: its filesystem has {} free, --size {} needs {} more",
                human_bytes(free),
                human_bytes(size),
                human_bytes(needed)
            ));
        }
        _ => {}
    }
    if let Err(e) = preallocate(&f, size, &shown.to_string()) {
        return fail(format!(
            "cannot preallocate {} ({size} bytes) for target {shown}: {e}",
            human_bytes(size)
        ));
    }
    f.sync_all()
        .map_err(|e| Error::Msg(format!("fsync of target {shown}: {e}")))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::Msg(format!("fsync of directory {}: {e}", dir.display())))?;
    Ok(LockedTarget { _lock: f })
}

/// Refuses `--sync direct-dsync` when `--block-size` is not a multiple of the target's
/// `O_DIRECT` alignment ([`direct_alignment`]); where the kernel does not say,
/// probes with one `O_DIRECT` read of a block at offset 0.
pub fn check_direct_alignment(f: &File, path: &Path, bs: u64) -> Result<(), Error> {
    let shown = path.display();
    let block_device = f.metadata().is_ok_and(|m| m.file_type().is_block_device());
    if let Some((align, source)) = direct_alignment(f, block_device) {
        if !bs.is_multiple_of(align) {
            return Err(Error::Msg(format!(
                "--sync direct-dsync: --block-size {bs} is not a multiple of {align} bytes, {source} of target {shown}, \
                 so O_DIRECT writes would fail; give --block-size {} (or a multiple of it), or --sync dsync",
                align.max(4096)
            )));
        }
        return Ok(());
    }
    let probe = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            Error::Msg(format!(
                "--sync direct-dsync: cannot open target {shown} with O_DIRECT: {e}"
            ))
        })?;
    let mut buf = AlignedBuf::new(bs as usize);
    match probe.read_at(buf.bytes_mut(), 0) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(Error::Msg(format!(
            "--sync direct-dsync: target {shown} refused an O_DIRECT read of one --block-size {bs} block ({e}): \
             its alignment is larger than {bs} bytes; give a larger --block-size, or --sync dsync"
        ))),
        _ => Ok(()),
    }
}

/// Allocates `size` bytes with the `fallocate(2)` system call; where the filesystem
/// does not support it (EOPNOTSUPP: LazyFS, some FUSE filesystems), appends zeros
/// from the file's end in writes of 1 MiB (the first shorter by the end's offset in
/// its page), saying so on stderr (`shown` names the target). Bytes already in the file are never written. Not glibc's
/// `posix_fallocate`, whose emulation writes one byte per 512 bytes.
fn preallocate(f: &File, size: u64, shown: &str) -> std::io::Result<()> {
    match rustix::fs::fallocate(f, rustix::fs::FallocateFlags::empty(), 0, size) {
        Ok(()) => return Ok(()),
        Err(e) if e != rustix::io::Errno::OPNOTSUPP => return Err(e.into()),
        Err(_) => {}
    }
    let have = f.metadata()?.len();
    if have >= size {
        return Ok(());
    }
    eprintln!(
        "target {shown}: its filesystem cannot preallocate (no fallocate): writing {} of zeros",
        human_bytes(size - have)
    );
    write_zeros(f, have, size)
}

/// Zeroes the first `len` bytes of `f` (the part a run overwrites): `fallocate`
/// `FALLOC_FL_ZERO_RANGE` (on a block device the kernel's `blkdev_issue_zeroout`:
/// the drive's WRITE ZEROES where it has one), else, where that is not supported,
/// writes of zeros, saying so on stderr (`shown` names the target).
fn zero_range(f: &File, len: u64, shown: &str) -> std::io::Result<()> {
    use rustix::fs::FallocateFlags;
    if len == 0 {
        return Ok(());
    }
    match rustix::fs::fallocate(
        f,
        FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
        0,
        len,
    ) {
        Ok(()) => return Ok(()),
        Err(e) if e != rustix::io::Errno::OPNOTSUPP => return Err(e.into()),
        Err(_) => {}
    }
    eprintln!(
        "target {shown}: it cannot zero a range (no FALLOC_FL_ZERO_RANGE): writing {} of zeros",
        human_bytes(len)
    );
    write_zeros(f, 0, len)
}

/// Writes zeros to bytes `from..to` of `f`, 1 MiB at a time (the first write shorter
/// by `from`'s offset in its page).
fn write_zeros(f: &File, from: u64, to: u64) -> std::io::Result<()> {
    // Each write's bytes start at the same place in a memory page as in the file
    // (a page-aligned buffer, entered at the file offset's place in its page): the
    // kernel then copies whole pages, and a FUSE filesystem is sent one request per
    // write (up to its max_write). From a buffer straddling pages, the kernel sent
    // the first MiB as 512 requests of 4080 and 16 bytes while it faulted them in.
    let zeros = AlignedBuf::new(1 << 20);
    let zeros = zeros.bytes();
    let mut at = from;
    while at < to {
        let skew = (at % 4096) as usize;
        let n = (to - at).min((zeros.len() - skew) as u64) as usize;
        f.write_all_at(&zeros[skew..skew + n], at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::contents::{scan, scan_prior, signatures, Foreign};
    use super::*;
    use plugpull::record::Encoder;
    use plugpull::RunId;
    use std::process::Command;

    #[test]
    fn a_target_in_a_missing_directory_says_so() {
        let gone = std::env::temp_dir().join(format!("plugpull-nodir-{}", std::process::id()));
        let path = gone.join("x.dat");
        assert_eq!(
            prepare_target(&path, 1 << 20, false)
                .err()
                .unwrap()
                .to_string(),
            format!(
                "cannot open target {}: its directory {} does not exist (create it first)",
                path.display(),
                gone.display()
            )
        );
        let denied = std::io::Error::from_raw_os_error(13);
        assert_eq!(
            open_failure(Path::new("/x.dat"), &denied),
            "cannot open target /x.dat: Permission denied (os error 13)"
        );
    }

    /// A file of `blocks` 4 KiB blocks in a fresh directory, each block written by `fill`.
    fn file_with(name: &str, blocks: usize, fill: impl Fn(usize, &mut [u8])) -> (File, u64) {
        let dir =
            std::env::temp_dir().join(format!("plugpull-target-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = vec![0u8; blocks * 4096];
        for (i, b) in bytes.chunks_exact_mut(4096).enumerate() {
            fill(i, b);
        }
        let path = dir.join("t.dat");
        std::fs::write(&path, &bytes).unwrap();
        let f = File::open(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        (f, bytes.len() as u64)
    }

    #[test]
    fn the_prior_scan_names_each_earlier_run_once_and_tells_foreign_bytes_from_zeros() {
        let (a, b) = (Encoder::new(RunId(0xa)), Encoder::new(RunId(0xb)));
        let (f, size) = file_with("runs", 4, |i, buf| match i {
            0 | 2 => a.encode_block(buf, i as u64, i as u64 + 1, 0),
            3 => b.encode_block(buf, 3, 1, 0),
            _ => {}
        });
        assert_eq!(scan_prior(&f, size), (vec![RunId(0xa), RunId(0xb)], false));
        let (f, size) = file_with("zeros", 2, |_, _| {});
        assert_eq!(scan_prior(&f, size), (vec![], false));
        let (f, size) = file_with("foreign", 2, |i, buf| {
            if i == 1 {
                buf[512..517].copy_from_slice(b"ext4!");
            }
        });
        assert_eq!(scan_prior(&f, size), (vec![], true));
        // The guard names the first foreign sector, past a first block of zeros.
        assert_eq!(scan(&f, size).foreign_at, Some(Foreign::At(4096 + 512)));
        // A partial last sector that is not zeros is foreign (a run writes whole
        // sectors); the runs met before it still count.
        let (f, _) = file_with("tail", 2, |i, buf| {
            if i == 1 {
                a.encode_block(buf, 1, 2, 0)
            }
        });
        let got = scan(&f, 8192 - 100);
        assert_eq!(got.runs, vec![RunId(0xa)]);
        assert_eq!(got.foreign_at, Some(Foreign::At(7680)));
        let (f, _) = file_with("text", 1, |_, buf| buf[600..605].copy_from_slice(b"hello"));
        let got = scan(&f, 700);
        assert_eq!(
            (got.foreign_at, got.sampled),
            (Some(Foreign::At(512)), false)
        );
    }

    #[test]
    fn a_file_with_a_zero_first_sector_and_data_after_it_is_refused_and_force_erases_signatures() {
        let dir = std::env::temp_dir().join(format!("plugpull-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join("zerohead.dat");
        let mut bytes = vec![0u8; 4096];
        bytes.extend_from_slice(b"1\n2\n3\n");
        std::fs::write(&t, &bytes).unwrap();
        let e = prepare_target(&t, 1 << 20, false)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            format!(
                "target {} holds data that is not plugpull's (the sector at byte 4096 is neither zeros \
                 nor a plugpull record); a run overwrites its first 1 MiB; --force zeroes them and \
                 erases the signatures wipefs finds on it: give --force to use it anyway",
                t.display()
            )
        );
        assert_eq!(std::fs::read(&t).unwrap(), bytes, "refused: not touched");
        // An ext4 image: refused, then erased by --force, then plugpull's to reuse.
        let img = dir.join("ext4.img");
        std::fs::write(&img, vec![0u8; 4 << 20]).unwrap();
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&img)
            .status();
        if mkfs.is_ok_and(|s| s.success()) {
            let e = prepare_target(&img, 1 << 20, false)
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("(wipefs found: ext4 signature at byte 0x438)"),
                "{e}"
            );
            drop(prepare_target(&img, 1 << 20, true).unwrap());
            assert_eq!(signatures(&img).unwrap(), vec![]);
            let f = File::open(&img).unwrap();
            assert_eq!(
                foreign_data(&img, &f, false, 1 << 20),
                None,
                "plugpull's now"
            );
        } else {
            eprintln!("SKIPPED the --force half: mkfs.ext4 is missing");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
