//! A small ext4 filesystem on a loop device, mounted in a temporary directory: the
//! full disk of the witness tests. Unmounted and detached on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted loop filesystem; unmounted and its loop device detached on drop.
pub struct LoopFs {
    image: PathBuf,
    dev: String,
    mnt: PathBuf,
}

impl LoopFs {
    /// Makes a `size_kib` KiB ext4 image under `dir`, attaches it to a free loop
    /// device and mounts it at `dir/mnt`. `Err` says why it cannot (not root, no
    /// loop devices, no mkfs.ext4): callers skip loudly with [`crate::skipped`].
    pub fn mount(dir: &Path, size_kib: u64) -> Result<LoopFs, String> {
        if !crate::is_root() {
            return Err("not root: cannot attach loop devices".into());
        }
        let image = dir.join("loopfs.img");
        let f = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        f.set_len(size_kib * 1024).map_err(|e| e.to_string())?;
        drop(f);
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&image))?;
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&image)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        let fs = LoopFs { image, dev, mnt };
        run(Command::new("mount").arg(&fs.dev).arg(&fs.mnt))?;
        Ok(fs)
    }

    /// Where it is mounted.
    pub fn mnt(&self) -> &Path {
        &self.mnt
    }

    /// Free bytes (statvfs `f_bavail` × `f_frsize`).
    pub fn free_bytes(&self) -> u64 {
        let c = std::ffi::CString::new(self.mnt.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
        unsafe {
            let mut s: libc::statvfs = std::mem::zeroed();
            assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0, "statvfs");
            s.f_bavail as u64 * s.f_frsize as u64
        }
    }
}

fn run(c: &mut Command) -> Result<(), String> {
    let o = c.output().map_err(|e| format!("{c:?}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{c:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.image);
    }
}
