//! Whole-machine rehearsal: a QEMU guest with a real kernel whose disk is a raw image
//! on the host, cut by killing QEMU (the guest's memory, page cache and journal
//! state are lost as in a power cut). [`bundle`] builds the guest's kernel and
//! initramfs; [`qemu`] runs one guest; this file holds what the demo and the tests
//! do around it: the image ([`make_image`]), the guest's settings
//! ([`write_settings`]), and reading the image back on the host after the cut
//! ([`HostMount`]: loop mount, so ext4 replays its journal as a reboot would).
//!
//! What the image sits on decides what a cut can lose: a plain file keeps every
//! write QEMU completed (the host's page cache survives: an over-honest disk); a
//! file on a `plugpull-simfs` mount is a disk with a volatile cache and ground
//! truth (kill QEMU first, then cut simfs at once: simfs keeps destaging between
//! the two).

pub mod bundle;
pub mod cpio;
pub mod machine;
pub mod pg;
pub mod qemu;

use crate::rig::proc;
use crate::Error;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/deps` puts the kernel package (`apt-get download`) and where
/// bundles are cached, unless `PLUGPULL_VM_CACHE` names another directory.
pub const CACHE: &str = "/var/cache/plugpull/vm";

/// The static busybox (Debian's `busybox-static`).
pub const BUSYBOX: &str = "/bin/busybox";

/// The host as the guest sees it (QEMU user-mode networking).
pub const HOST_FROM_GUEST: &str = "10.0.2.2";

/// The cache directory: `PLUGPULL_VM_CACHE`, else [`CACHE`].
pub fn cache_dir() -> PathBuf {
    std::env::var_os("PLUGPULL_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CACHE))
}

/// Why a guest cannot run here, if it cannot: QEMU, busybox, a kernel package in
/// the cache directory, the tools the bundle and the image need, root (loop mounts).
pub fn unavailable() -> Option<String> {
    if !proc::is_root() {
        return Some("not root (the image is loop-mounted on the host)".into());
    }
    for tool in [
        qemu::QEMU,
        "dpkg-deb",
        "depmod",
        "strip",
        "ldd",
        "mkfs.ext4",
    ] {
        if !proc::on_path(tool) {
            return Some(format!("{tool} is missing (scripts/deps installs it)"));
        }
    }
    if !Path::new(BUSYBOX).exists() {
        return Some(format!(
            "{BUSYBOX} is missing (apt-get install busybox-static)"
        ));
    }
    if bundle::find_kernel_deb(&cache_dir()).is_none() {
        return Some(format!(
            "no linux-image-*.deb in {} (scripts/deps downloads it with apt-get download)",
            cache_dir().display()
        ));
    }
    None
}

/// Builds (or finds in the cache) the bundle running `plugpull` (the binary at
/// `me`) with the newest kernel package of the cache directory.
pub fn default_bundle(me: &Path) -> Result<bundle::Bundle, Error> {
    bundle_with(me, &bundle::Extra::default())
}

/// [`default_bundle`] with `extra` added (a bundle variant, cached apart: PostgreSQL's
/// server, [`pg::extra`]). Errors: as [`bundle::build`], or no kernel package.
pub fn bundle_with(me: &Path, extra: &bundle::Extra) -> Result<bundle::Bundle, Error> {
    let cache = cache_dir();
    let deb = bundle::find_kernel_deb(&cache).ok_or_else(|| {
        Error::Msg(format!(
            "no linux-image-*.deb in {}: run scripts/deps (apt-get download)",
            cache.display()
        ))
    })?;
    bundle::build(&bundle::Inputs {
        kernel_deb: &deb,
        plugpull: me,
        busybox: Path::new(BUSYBOX),
        cache: &cache,
        extra,
    })
}

/// Creates the raw image `path` of `mib` MiB (sparse) holding an empty ext4
/// filesystem of 4 KiB blocks made on the host (`mkfs.ext4`). Errors: the file or mkfs, named.
pub fn make_image(path: &Path, mib: u64) -> Result<(), Error> {
    let f = std::fs::File::create(path)
        .and_then(|f| f.set_len(mib << 20).map(|()| f))
        .map_err(|e| Error::Msg(format!("cannot create {}: {e}", path.display())))?;
    f.sync_all()
        .map_err(|e| Error::Msg(format!("{}: {e}", path.display())))?;
    let mut c = Command::new("mkfs.ext4");
    c.args(["-q", "-F", "-m", "0", "-b", "4096"]).arg(path);
    proc::output_ok(c, &format!("mkfs.ext4 {}", path.display()))?;
    Ok(())
}

/// Waits up to `limit` until the guest's console file `console` shows the run id
/// `plugpull write` prints (`run id: ID`); the run id.
///
/// Errors: no run id within `limit` (the message ends with the console's last 15
/// lines), or one that does not parse.
pub fn guest_run_id(console: &Path, limit: std::time::Duration) -> Result<plugpull::RunId, Error> {
    let end = std::time::Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(console).unwrap_or_default();
        if let Some((_, id)) = text.lines().find_map(|l| l.split_once("run id: ")) {
            return id.trim().parse().map_err(Error::Msg);
        }
        if std::time::Instant::now() >= end {
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            return Err(Error::Msg(format!(
                "the guest started no run within {} s; {} ends:\n{}",
                limit.as_secs(),
                console.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }
        proc::sleep(std::time::Duration::from_millis(200))?;
    }
}

/// The guest's kernel command line settings for `plugpull ARGS` (each argument free
/// of spaces and commas), then `end` (`hang` or `poweroff`, init.sh), and a clean
/// shutdown `shutdown_s` seconds after the command started, when given.
pub fn settings(args: &[String], end: &str, shutdown_s: Option<u32>) -> Vec<String> {
    let mut s = vec![
        format!("plugpull.args={}", args.join(",")),
        format!("plugpull.end={end}"),
    ];
    s.extend(shutdown_s.map(|t| format!("plugpull.shutdown={t}")));
    s
}

/// `write file` arguments for the guest: the listener at the host's `port`, the
/// target `/mnt/NAME` on the guest's ext4, and `load` (options separated by spaces).
pub fn write_settings(port: u16, name: &str, load: &str) -> Vec<String> {
    ["write", "file", "--listener"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("{HOST_FROM_GUEST}:{port}"),
            "--target".into(),
            format!("/mnt/{name}"),
        ])
        .chain(load.split(' ').map(String::from))
        .collect()
}

/// An image's filesystem mounted on the host through a loop device (`mount -o
/// loop`; ext4 replays its journal, as at the guest's next boot); unmounted (and the
/// loop device released) on drop.
pub struct HostMount {
    /// Where it is mounted.
    pub at: PathBuf,
    mounted: bool,
}

impl HostMount {
    /// Mounts the filesystem in `image` at `at` (created when missing). Errors:
    /// `mount` failed (a filesystem the journal cannot repair), with its message.
    pub fn mount(image: &Path, at: &Path) -> Result<HostMount, Error> {
        std::fs::create_dir_all(at)
            .map_err(|e| Error::Msg(format!("cannot create {}: {e}", at.display())))?;
        let mut c = Command::new("mount");
        c.args(["-t", "ext4", "-o", "loop"]).arg(image).arg(at);
        let o = proc::output(c, "mount -o loop")?;
        if !o.status.success() {
            return Err(Error::Msg(format!(
                "cannot mount the image {} on the host: {}",
                image.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Ok(HostMount {
            at: at.to_path_buf(),
            mounted: true,
        })
    }

    /// Unmounts now. Errors: `umount` failed, with its message.
    pub fn umount(&mut self) -> Result<(), Error> {
        if !std::mem::take(&mut self.mounted) {
            return Ok(());
        }
        let mut c = Command::new("umount");
        c.arg(&self.at);
        let o = proc::output(c, "umount")?;
        if !o.status.success() {
            return Err(Error::Msg(format!(
                "cannot unmount {}: {}",
                self.at.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Ok(())
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = self.umount();
    }
}
