//! Claiming a block device for a run: an exclusive open (`O_EXCL`) that the kernel
//! refuses while the device is mounted or held (device-mapper, LVM, MD, another
//! exclusive opener). Used by `write file` on a device target and by the probe's
//! flush check and stack walk.

use crate::Error;
use std::fs::File;
use std::path::Path;

/// Opens a block device read-write and exclusively (`O_EXCL`): the kernel refuses
/// while it is mounted or held by device-mapper, LVM, MD or another exclusive opener.
///
/// Errors: busy (named as such), or cannot be opened.
pub fn open_block_exclusive(path: &Path) -> Result<File, Error> {
    claim_block(path, true).map_err(|(_, e)| e)
}

/// Whether the kernel refuses block device `path` an exclusive open (mounted or
/// held): the refusal [`open_block_exclusive`] would give, asked with a read-only
/// `O_EXCL` open (closing it sends udev no change event). `None` when it is free,
/// or when that cannot be told (no permission, no such device).
pub fn block_in_use(path: &Path) -> Option<Error> {
    match claim_block(path, false) {
        Err((true, e)) => Some(e),
        _ => None,
    }
}

/// `open(path, O_EXCL | (write ? O_RDWR : O_RDONLY))`; the error says whether the
/// device was busy (EBUSY).
fn claim_block(path: &Path, write: bool) -> Result<File, (bool, Error)> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                (true, Error::Msg(format!(
                    "target {} is in use: it is mounted, or held by LVM, MD RAID, device-mapper or \
                     another program (the kernel refused an exclusive open: {e}); unmount or release it first",
                    path.display()
                )))
            } else {
                (false, Error::Msg(format!("cannot open target {}: {e}", path.display())))
            }
        })
}
