//! Finding the target of a file run and reading it from the medium (not from the
//! page cache), and the `O_DIRECT` buffer the writers and the verifier read and write with.
//!
//! The target is located by the manifest's path or `--target`, checked against the
//! run's identity (see [`crate::target_id`]), refused while a writer holds it, and read
//! with `O_DIRECT` after its cached pages are dropped: the host may not have rebooted
//! (a SAN array or an enclosure cut while the host stayed up), and its page cache
//! would still hold what the device lost.

use crate::target_id::{self, OnRunFs};
use crate::Error;
use plugpull::ledger::FileManifest;
use std::fs::File;
use std::path::{Path, PathBuf};

/// `ioctl` that writes back and drops a block device's cached blocks (`_IO(0x12, 97)`
/// in `<linux/fs.h>`; needs CAP_SYS_ADMIN).
const BLKFLSBUF: libc::c_ulong = 0x1261;

/// Where and how the target of a file run is read.
pub struct Opened {
    /// The path read.
    pub path: PathBuf,
    /// Open for reading: `O_DIRECT` unless `read_mode` is `buffered`.
    pub file: File,
    /// Bytes in the file, or the device's capacity.
    pub len: u64,
    /// True for a block device.
    pub is_block: bool,
    /// `o_direct` or `buffered`.
    pub read_mode: &'static str,
    /// Why buffered, or what could not drop the cache; `""` otherwise.
    pub read_note: String,
}

/// Finds the path to read: `target` (`--target`), else the manifest's path; a block device is
/// checked (and, without `--target`, found again) by its identity; a file whose
/// directory is gone or on another filesystem is "not mounted?".
///
/// Returns `Ok(None)` when the file is gone from the right filesystem.
pub fn locate(fm: &FileManifest, target: Option<&Path>) -> Result<Option<PathBuf>, Error> {
    let id = &fm.identity;
    let given = target.is_some();
    let path = target
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(&fm.target));
    let shown = path.display().to_string();
    if id.kind == "block" {
        let actual = target_id::identify(&path);
        let problem = match &actual {
            Ok(a) if a.kind != "block" => Some(format!("{shown} is not a block device")),
            Ok(a) => target_id::device_mismatch(id, a),
            Err(e) => Some(format!("{shown}: {e}")),
        };
        let Some(problem) = problem else {
            return Ok(Some(path));
        };
        if !given {
            if let Some(found) = target_id::find_device(id) {
                eprintln!(
                    "the run's device {shown} is now {} (found by its identity: {})",
                    found.display(),
                    target_id::describe_device(id)
                );
                return Ok(Some(found));
            }
        }
        return Err(Error::Msg(format!(
            "target {shown} is not the device run's data was written to ({problem}); the run wrote {}; \
             give --target with the device that has this identity",
            target_id::describe_device(id)
        )));
    }
    match target_id::on_run_fs(&path, "target", id, given, &fm.target) {
        Ok(OnRunFs::Present) => Ok(Some(path)),
        Ok(OnRunFs::Gone(_)) => Ok(None),
        Err(e) => Err(Error::Msg(format!("cannot verify: {e}"))),
    }
}

/// Opens the target for reading from the medium: refuses a target a writer still
/// holds (exit 2 "still being written"), drops its cached pages (`BLKFLSBUF` for a
/// block device, `posix_fadvise(DONTNEED)` for a file) and opens it `O_DIRECT`,
/// falling back to a buffered read, said in the report, where `O_DIRECT` is refused.
pub fn open_target(path: &Path) -> Result<Opened, Error> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let shown = path.display();
    // A FIFO or other non-file would block the open or mean nothing: refused at once,
    // before the open, by the writer's own guard.
    let Some(meta) = super::target::target_kind(path)? else {
        return Err(Error::Msg(format!(
            "cannot read target {shown}: it does not exist"
        )));
    };
    let is_block = meta.file_type().is_block_device();
    let plain =
        File::open(path).map_err(|e| Error::Msg(format!("cannot read target {shown}: {e}")))?;
    // The writer holds an exclusive flock(2) for the whole run.
    if let Err(std::fs::TryLockError::WouldBlock) = plain.try_lock_shared() {
        return Err(Error::Msg(format!(
            "target {shown} is still being written: a plugpull writer holds its lock; \
             verify after the writer has ended (or the machine was cut and rebooted)"
        )));
    }
    let mut notes = Vec::new();
    let fd = plain.as_raw_fd();
    if is_block {
        // SAFETY: BLKFLSBUF takes no argument; fd is a valid block device descriptor.
        let rc = unsafe { libc::ioctl(fd, BLKFLSBUF as _, 0) };
        if rc != 0 {
            notes.push(format!(
                "BLKFLSBUF failed ({}): cached blocks may not have been dropped",
                std::io::Error::last_os_error()
            ));
        }
    } else {
        // SAFETY: plain syscall on a valid descriptor.
        let rc = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            notes.push(format!(
                "posix_fadvise(DONTNEED) failed ({})",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
    }
    let len = len_of(&plain).map_err(|e| Error::Msg(format!("cannot size target {shown}: {e}")))?;
    let (file, mode) = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => (f, "o_direct"),
        Err(e) => {
            notes.insert(0, format!("O_DIRECT refused ({e})"));
            (plain, "buffered")
        }
    };
    Ok(Opened {
        path: path.to_path_buf(),
        file,
        len,
        is_block,
        read_mode: mode,
        read_note: notes.join("; "),
    })
}

/// A zeroed heap buffer aligned to 4096 bytes, as `O_DIRECT` reads and writes need;
/// owned, so a writer thread can hold its own.
pub struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is owned by one worker thread at a time.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` zeroed bytes (`len` > 0) at an address that is a multiple of 4096.
    pub fn new(len: usize) -> Self {
        assert!(len > 0, "an aligned buffer of 0 bytes");
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("valid layout");
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        AlignedBuf { ptr, layout }
    }
    /// The whole buffer, to read.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() bytes; shared borrow.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
    /// The whole buffer.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Bytes in a file, or a block device's capacity (a seek to the end: `st_size` is 0
/// for a block device).
pub fn len_of(f: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::End(0))
}

/// Reads up to `buf.len()` bytes at `at`, fewer only at the end of the target.
pub fn read_full_at(f: &File, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aligned_buffer_is_zeroed_4096_aligned_and_exactly_as_long_as_asked() {
        let mut b = AlignedBuf::new(3 * 4096 + 512);
        let s = b.bytes_mut();
        assert_eq!(s.len(), 12800);
        assert_eq!(s.as_ptr() as usize % 4096, 0);
        assert!(s.iter().all(|&x| x == 0));
    }
}
