//! A small ext4 filesystem on a loop device, mounted in a temporary directory: the
//! full disk of the witness tests. Unmounted and detached on drop.

use crate::blockdev::{have, run, Loop, Mount};
use std::path::{Path, PathBuf};

/// A mounted loop filesystem; unmounted and its loop device detached on drop.
pub struct LoopFs {
    // Field order is drop order: unmount, then detach, then remove the image.
    mount: Mount,
    _dev: Loop,
    image: PathBuf,
}

impl LoopFs {
    /// Makes a `size_kib` KiB ext4 image under `dir`, attaches it to a free loop
    /// device and mounts it at `dir/mnt`. `Err` says why it cannot (not root, no
    /// loop devices, no mkfs.ext4): callers skip loudly with [`crate::skipped`].
    pub fn mount(dir: &Path, size_kib: u64) -> Result<LoopFs, String> {
        if !crate::is_root() {
            return Err("not root: cannot attach loop devices".into());
        }
        for tool in ["mkfs.ext4", "losetup"] {
            if !have(tool) {
                return Err(format!("{tool} is missing (scripts/deps installs it)"));
            }
        }
        let image = dir.join("loopfs.img");
        let f = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        f.set_len(size_kib * 1024).map_err(|e| e.to_string())?;
        drop(f);
        run(
            "mkfs.ext4",
            &["-q", "-F", "-m", "0", image.to_str().unwrap()],
        );
        let dev = Loop::attach(&image, &[]);
        let mount = Mount::new(&[&dev.dev], &dir.join("mnt"));
        Ok(LoopFs {
            mount,
            _dev: dev,
            image,
        })
    }

    /// Where it is mounted.
    pub fn mnt(&self) -> &Path {
        &self.mount.at
    }

    /// Free bytes (statvfs `f_bavail` × `f_frsize`).
    pub fn free_bytes(&self) -> u64 {
        let c = std::ffi::CString::new(self.mnt().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
        unsafe {
            let mut s: libc::statvfs = std::mem::zeroed();
            assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0, "statvfs");
            s.f_bavail as u64 * s.f_frsize as u64
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // The loop device keeps the unlinked image open; then the mount and loop
        // guards undo themselves, in field order.
        let _ = std::fs::remove_file(&self.image);
    }
}
