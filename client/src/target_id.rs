//! What a target is: its identity and facts, recorded by `write file` in the manifest
//! and compared by `verify`, so that the verifier reads the disk the run wrote and can
//! tell a total loss on a reused target from a wrong target.
//!
//! * A **file** is identified by the filesystem holding it (UUID where one can be
//!   found — `/dev/disk/by-uuid`, or the ext2/3/4 or XFS superblock of the mount's
//!   source — else type, source and mount point from `/proc/self/mountinfo`) and by
//!   `st_dev` + inode (informative only: FUSE and some others renumber both at
//!   remount).
//! * A **block device** by what sysfs says of it (`/sys/dev/block/MAJ:MIN`): WWN
//!   (`wwid`), serial, model, a loop device's backing file, and its capacity. A
//!   partition carries its disk's WWN, serial and backing file, so it is told apart by
//!   its partition number and first sector (sysfs `partition`, `start`).
//!
//! Only a difference in a stable, known identifier (a filesystem UUID, a WWN, a
//! serial, a loop backing file, a partition's number or first sector) proves that a
//! target is not the run's; everything else is reported but decides nothing.

use plugpull::ledger::TargetIdentity;
use plugpull::probe::mountinfo;
use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The variable through which the simulated machine (`simfs://`, `docs/power.md`)
/// gives its agent and the agent's runs the boot id of the simulated boot.
pub const SIMULATED_BOOT_ID_ENV: &str = "PLUGPULL_SIMULATED_BOOT_ID";

/// Whether a host whose boot id is `here` still runs boot `run` (a run's manifest's):
/// `None` when either is unknown (`""`).
pub fn same_boot(run: &str, here: &str) -> Option<bool> {
    (!run.is_empty() && !here.is_empty()).then(|| run == here)
}

/// This host's boot id (`/proc/sys/kernel/random/boot_id`, a UUID that changes at
/// every boot), or `""` when it cannot be read; inside the simulated machine, the
/// simulated boot's (`PLUGPULL_SIMULATED_BOOT_ID`).
pub fn boot_id() -> String {
    if let Some(b) = std::env::var(SIMULATED_BOOT_ID_ENV)
        .ok()
        .filter(|b| !b.is_empty())
    {
        return b;
    }
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The filesystem a path lives on, as `/proc/self/mountinfo` and the UUID lookup see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsInfo {
    /// Filesystem UUID, `""` when unknown.
    pub uuid: String,
    /// Filesystem type, e.g. `ext4`.
    pub fstype: String,
    /// Mount source, e.g. `/dev/loop3`.
    pub source: String,
    /// Mount point.
    pub mountpoint: String,
}

/// A mount source as it identifies a filesystem: a `plugpull-simfs` mount is the
/// same simulated disk whatever fault model it was mounted with (its source names the
/// mode, [`plugpull::probe::simfs_mode`]; a rehearsal remounts it honest to read what
/// the cut left).
fn source_identity(source: &str) -> &str {
    match plugpull::probe::simfs_mode(source) {
        Some(_) => "plugpull-simfs",
        None => source,
    }
}

impl FsInfo {
    /// The filesystem recorded in `id` (a file target's identity).
    pub fn of_identity(id: &TargetIdentity) -> FsInfo {
        FsInfo {
            uuid: id.fs_uuid.clone(),
            fstype: id.fs_type.clone(),
            source: id.fs_source.clone(),
            mountpoint: id.fs_mountpoint.clone(),
        }
    }

    /// True when `other` is the same filesystem: equal UUIDs where both are known,
    /// else equal type, source and mount point.
    pub fn same_as(&self, other: &FsInfo) -> bool {
        if !self.uuid.is_empty() && !other.uuid.is_empty() {
            return self.uuid == other.uuid;
        }
        self.fstype == other.fstype
            && source_identity(&self.source) == source_identity(&other.source)
            && self.mountpoint == other.mountpoint
    }

    /// E.g. `ext4 (UUID 0b6c…) from /dev/loop3 mounted at /mnt/t`.
    pub fn describe(&self) -> String {
        let uuid = if self.uuid.is_empty() {
            String::new()
        } else {
            format!(" (UUID {})", self.uuid)
        };
        format!(
            "{}{uuid} from {} mounted at {}",
            self.fstype, self.source, self.mountpoint
        )
    }
}

/// The filesystem holding `path` (which must exist): the mountinfo entry with the
/// path's `st_dev` whose mount point is the longest prefix of the path; failing
/// that, the longest mount point prefix.
pub fn fs_of(path: &Path) -> std::io::Result<FsInfo> {
    let meta = std::fs::metadata(path)?;
    let canon = std::fs::canonicalize(path)?;
    let dev = meta.dev();
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let all = mountinfo::parse(&info);
    let best = mountinfo::mount_of(&all, &canon, libc::major(dev), libc::minor(dev));
    let mut fs = best
        .map(|m| FsInfo {
            uuid: String::new(),
            fstype: m.fstype.clone(),
            source: m.source.clone(),
            mountpoint: m.mountpoint.clone(),
        })
        .unwrap_or_default();
    fs.uuid = fs_uuid(&fs.source);
    Ok(fs)
}

/// Where a path a run wrote (a file target, a files run's directory) stands against
/// the filesystem the run recorded, as [`on_run_fs`] finds it.
#[derive(Debug)]
pub enum OnRunFs {
    /// The path exists (on the run's filesystem, where that could be checked).
    Present,
    /// The path is gone from the run's own filesystem (described here): its parent
    /// is there, on that filesystem, so the loss is the storage's.
    Gone(FsInfo),
}

/// Tells whether `path` (`noun` names it in messages: `target`, `directory`) is
/// there, gone from the run's filesystem (`id`'s `fs_*` fields), or cannot be judged.
/// `given` is true when `path` came from `--target` rather than the manifest (whose
/// path is `wrote`): such a path is not checked against the run's filesystem (a simfs
/// backing directory is on another one), and when it is missing nothing says the
/// run's data is lost.
///
/// Errors (a line for "could not verify"): `path` cannot be examined (an error other
/// than not found), or it exists on another filesystem, or it is missing and was
/// given, or its parent is missing, on another filesystem or under another mount
/// point (not mounted?), or the run recorded no filesystem to compare with.
pub fn on_run_fs(
    path: &Path,
    noun: &str,
    id: &TargetIdentity,
    given: bool,
    wrote: &str,
) -> Result<OnRunFs, String> {
    let shown = path.display();
    let want = FsInfo::of_identity(id);
    // Only "not found" is missing: any other error (EACCES, EIO) is not a loss.
    let exists = match std::fs::metadata(path) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(format!("cannot examine {noun} {shown}: {e}")),
    };
    if exists {
        if !given && !id.fs_type.is_empty() {
            if let Ok(have) = fs_of(path) {
                if !want.same_as(&have) {
                    return Err(format!(
                        "{noun} {shown} is on {}, but the run's target was on {} — not mounted?",
                        have.describe(),
                        want.describe()
                    ));
                }
            }
        }
        return Ok(OnRunFs::Present);
    }
    if given {
        return Err(format!(
            "{noun} {shown} (given with --target) does not exist; the run wrote {wrote}"
        ));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!(
            "directory {} of {noun} {shown} does not exist; the run's filesystem was {} — not mounted?",
            parent.display(),
            want.describe()
        ));
    }
    if id.fs_type.is_empty() {
        return Err(format!(
            "{noun} {shown} does not exist, and the run recorded no filesystem to tell a loss from a filesystem not mounted"
        ));
    }
    let have =
        fs_of(parent).map_err(|e| format!("cannot examine directory {}: {e}", parent.display()))?;
    // The same filesystem is not enough: the parent must be under the same mount
    // point too (btrfs subvolumes share one UUID, and a mount point's directory on
    // the filesystem below holds the same path while the run's is not mounted).
    if !want.same_as(&have) || (!want.mountpoint.is_empty() && want.mountpoint != have.mountpoint) {
        return Err(format!(
            "directory {} of {noun} {shown} is on {}, but the run's target was on {} — not mounted?",
            parent.display(),
            have.describe(),
            want.describe()
        ));
    }
    Ok(OnRunFs::Gone(have))
}

/// The UUID of the filesystem on block device `source`: `/dev/disk/by-uuid`, else
/// the ext2/3/4 or XFS superblock; `""` when neither tells.
fn fs_uuid(source: &str) -> String {
    if !source.starts_with('/') {
        return String::new();
    }
    let Ok(dev) = std::fs::canonicalize(source) else {
        return String::new();
    };
    if let Ok(rd) = std::fs::read_dir("/dev/disk/by-uuid") {
        for e in rd.flatten() {
            if std::fs::canonicalize(e.path()).ok().as_ref() == Some(&dev) {
                return e.file_name().to_string_lossy().into_owned();
            }
        }
    }
    let Ok(f) = File::open(&dev) else {
        return String::new();
    };
    let mut sb = [0u8; 2048];
    if f.read_exact_at(&mut sb, 0).is_err() {
        return String::new();
    }
    if sb[1024 + 0x38..1024 + 0x3A] == [0x53, 0xEF] {
        return uuid_text(&sb[1024 + 0x68..1024 + 0x78]);
    }
    if &sb[..4] == b"XFSB" {
        return uuid_text(&sb[32..48]);
    }
    String::new()
}

fn sysfs_read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Identifies the target at `path` (a regular file or a block device) and measures
/// its size.
///
/// Errors: the path cannot be examined or opened for reading.
pub fn identify(path: &Path) -> std::io::Result<TargetIdentity> {
    let meta = std::fs::metadata(path)?;
    if meta.file_type().is_block_device() {
        let rdev = meta.rdev();
        let sys = PathBuf::from(format!(
            "/sys/dev/block/{}:{}",
            libc::major(rdev),
            libc::minor(rdev)
        ));
        // A partition's device attributes (and a loop partition's backing file) are
        // its disk's; its number and first sector are its own.
        let partition = sysfs_read(&sys.join("partition")).parse().unwrap_or(0);
        let disk = if partition > 0 {
            sys.join("..")
        } else {
            sys.clone()
        };
        let first = |names: &[&str]| {
            names
                .iter()
                .map(|n| sysfs_read(&disk.join(n)))
                .find(|s| !s.is_empty())
                .unwrap_or_default()
        };
        let size = {
            use std::io::{Seek, SeekFrom};
            let mut f = File::open(path)?;
            f.seek(SeekFrom::End(0))?
        };
        Ok(TargetIdentity {
            kind: "block".into(),
            size,
            dev: rdev,
            wwn: first(&["wwid", "device/wwid"]),
            serial: first(&["serial", "device/serial"]),
            model: first(&["device/model"]),
            loop_backing: sysfs_read(&disk.join("loop/backing_file")),
            partition,
            part_start: if partition > 0 {
                sysfs_read(&sys.join("start")).parse().unwrap_or(0)
            } else {
                0
            },
            ..Default::default()
        })
    } else {
        let fs = fs_of(path)?;
        Ok(TargetIdentity {
            kind: "file".into(),
            size: meta.len(),
            dev: meta.dev(),
            inode: meta.ino(),
            fs_uuid: fs.uuid,
            fs_type: fs.fstype,
            fs_source: fs.source,
            fs_mountpoint: fs.mountpoint,
            ..Default::default()
        })
    }
}

/// One line describing a block device's identity, e.g.
/// `model X, serial Y, WWN Z, 16.0 MiB` or `loop device backed by /tmp/img, 16.0 MiB`;
/// a partition adds `partition 2 from sector 8192`.
pub fn describe_device(id: &TargetIdentity) -> String {
    let mut parts = Vec::new();
    if !id.model.is_empty() {
        parts.push(format!("model {}", id.model));
    }
    if !id.serial.is_empty() {
        parts.push(format!("serial {}", id.serial));
    }
    if !id.wwn.is_empty() {
        parts.push(format!("WWN {}", id.wwn));
    }
    if !id.loop_backing.is_empty() {
        parts.push(format!("loop device backed by {}", id.loop_backing));
    }
    if parts.is_empty() {
        parts.push("no serial, WWN or backing file known".into());
    }
    if id.partition > 0 {
        parts.push(describe_partition(id));
    }
    parts.push(plugpull::units::human_bytes(id.size));
    parts.join(", ")
}

/// `partition N from sector S`, or `the whole device`.
fn describe_partition(id: &TargetIdentity) -> String {
    if id.partition == 0 {
        "the whole device".into()
    } else {
        format!("partition {} from sector {}", id.partition, id.part_start)
    }
}

/// Why block device identity `actual` is provably not `expected` (a known identifier
/// differs, or it is another partition of the disk, or the whole disk where the run
/// wrote a partition, or the reverse), or `None`.
pub fn device_mismatch(expected: &TargetIdentity, actual: &TargetIdentity) -> Option<String> {
    let fields = [
        ("WWN", &expected.wwn, &actual.wwn),
        ("serial", &expected.serial, &actual.serial),
        (
            "loop backing file",
            &expected.loop_backing,
            &actual.loop_backing,
        ),
    ];
    let id = fields
        .iter()
        .find(|(_, e, a)| !e.is_empty() && e != a)
        .map(|(what, e, a)| {
            format!(
                "its {what} is {} where the run's device had {e}",
                if a.is_empty() { "unknown" } else { a.as_str() }
            )
        });
    // Partitions of one disk share its identifiers: the region read must be the
    // run's, or its blocks are read at other offsets of the disk.
    id.or_else(|| {
        ((expected.partition, expected.part_start) != (actual.partition, actual.part_start)).then(
            || {
                format!(
                    "it is {} where the run wrote {}",
                    describe_partition(actual),
                    describe_partition(expected)
                )
            },
        )
    })
}

/// True when two runs' identities name the same target: for block devices a known
/// identifier matches and none differs; for files the same filesystem and inode.
pub fn same_target(a: &TargetIdentity, b: &TargetIdentity) -> bool {
    if a.kind != b.kind || a.kind.is_empty() {
        return false;
    }
    if a.kind == "block" {
        return device_has_identity(a) && device_mismatch(a, b).is_none();
    }
    a.inode == b.inode && FsInfo::of_identity(a).same_as(&FsInfo::of_identity(b))
}

/// True when `id` carries an identifier that can find the device again.
pub fn device_has_identity(id: &TargetIdentity) -> bool {
    !(id.wwn.is_empty() && id.serial.is_empty() && id.loop_backing.is_empty())
}

/// The block device or partition under `/dev` whose identity matches `expected`
/// (WWN, serial or loop backing file, and partition number and first sector), if
/// exactly one does.
pub fn find_device(expected: &TargetIdentity) -> Option<PathBuf> {
    if !device_has_identity(expected) {
        return None;
    }
    let mut found = Vec::new();
    for e in std::fs::read_dir("/sys/class/block").ok()?.flatten() {
        let dev = Path::new("/dev").join(e.file_name());
        if !dev.exists() {
            continue;
        }
        if let Ok(id) = identify(&dev) {
            if device_mismatch(expected, &id).is_none() {
                found.push(dev);
            }
        }
    }
    (found.len() == 1).then(|| found.remove(0))
}

/// 16 bytes as a UUID's text form: 8-4-4-4-12 lowercase hex digits.
pub fn uuid_text(u: &[u8]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated disk remounted in another fault model is the same filesystem; a
    /// different source, or another mount point, is not.
    #[test]
    fn a_simfs_mount_is_the_same_filesystem_in_any_mode() {
        let fs = |source: &str, mnt: &str| FsInfo {
            uuid: String::new(),
            fstype: "fuse".into(),
            source: source.into(),
            mountpoint: mnt.into(),
        };
        let lying = fs("plugpull-simfs:lying", "/m");
        assert!(lying.same_as(&fs("plugpull-simfs:honest", "/m")));
        assert!(lying.same_as(&fs("plugpull-simfs", "/m")));
        assert!(!lying.same_as(&fs("plugpull-simfs:honest", "/n")));
        assert!(!lying.same_as(&fs("sshfs", "/m")));
        assert!(!fs("/dev/loop1", "/m").same_as(&fs("/dev/loop2", "/m")));
    }
}
