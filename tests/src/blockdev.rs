//! Loop devices and mounts for tests that need real block devices and filesystems,
//! each undone on drop (also when the test panics), and a loud skip where they
//! cannot be made (not root, no loop devices, a tool missing: `scripts/deps` installs
//! the tools).

use crate::{is_root, skipped};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `cmd ARGS`, panicking with its stderr when it fails; returns stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether `tool` runs at all (`tool --version` or `tool -V`).
pub fn have(tool: &str) -> bool {
    ["--version", "-V"].iter().any(|a| {
        Command::new(tool)
            .arg(a)
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Returns true (after a loud SKIPPED line) when loop devices cannot be used here.
pub fn skip_without_loop(test: &str, tools: &[&str]) -> bool {
    let why = if !is_root() {
        Some("not root (loop devices need root)".to_string())
    } else if !Path::new("/dev/loop-control").exists() {
        Some("no /dev/loop-control".to_string())
    } else {
        tools
            .iter()
            .chain(&["losetup"])
            .find(|t| !have(t))
            .map(|t| format!("{t} is missing (scripts/deps installs it)"))
    };
    match why {
        Some(w) => {
            skipped(test, &w);
            true
        }
        None => false,
    }
}

/// ext4 made on a sparse image file `img` of `size` bytes, on a loop device over it,
/// mounted at `at` with the extra `mount` arguments `opts` (e.g. `["-o",
/// "barrier=0"]`). Unmounted and detached on drop.
pub fn ext4_on_loop(img: &Path, size: u64, opts: &[&str], at: &Path) -> (Mount, Loop) {
    std::fs::File::create(img).unwrap().set_len(size).unwrap();
    run("mkfs.ext4", &["-q", "-F", img.to_str().unwrap()]);
    let lo = Loop::attach(img, &[]);
    let mut args = opts.to_vec();
    args.push(lo.dev.as_str());
    (Mount::new(&args, at), lo)
}

/// A loop device over a file; detached on drop.
pub struct Loop {
    /// The device path, e.g. `/dev/loop3`.
    pub dev: String,
}

impl Loop {
    /// `losetup --find --show EXTRA FILE`.
    pub fn attach(file: &Path, extra: &[&str]) -> Loop {
        let mut args = vec!["--find", "--show"];
        args.extend_from_slice(extra);
        args.push(file.to_str().unwrap());
        Loop {
            dev: run("losetup", &args).trim().to_string(),
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dev).output();
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A mount; unmounted (lazily if busy) on drop, unless [`Mount::umount`] did it.
pub struct Mount {
    /// The mountpoint.
    pub at: PathBuf,
    mounted: bool,
}

impl Mount {
    /// `mount ARGS AT` (AT created if missing).
    pub fn new(args: &[&str], at: &Path) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        let mut a = args.to_vec();
        a.push(at.to_str().unwrap());
        run("mount", &a);
        Mount {
            at: at.to_path_buf(),
            mounted: true,
        }
    }

    /// Unmounts now, panicking if `umount` fails (a test that needs the filesystem
    /// gone must not go on with it still mounted).
    pub fn umount(&mut self) {
        if self.mounted {
            run("umount", &[self.at.to_str().unwrap()]);
            self.mounted = false;
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        let ok = Command::new("umount").arg(&self.at).status();
        if !ok.is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}
