//! The walk down sysfs from a filesystem's device to every whole disk under it.
//! Each kernel block device is visited once (a disk under two dm legs is one leaf).
//! A btrfs filesystem is followed through every one of its devices
//! (`/sys/fs/btrfs/FSID/devices/`), not only the one its mount names.

use super::{mount_of, tools};
use plugpull::probe::{mountinfo::MountInfo, sysfs, Layer, Probe};
use std::collections::HashSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The devices visited so far.
#[derive(Default)]
pub struct Walk {
    seen: HashSet<String>,
}

/// Every device of the btrfs filesystem whose mount source is `source` (a btrfs
/// mount names one of its devices): the canonical sysfs directories behind
/// `/sys/fs/btrfs/FSID/devices/*` of the filesystem whose list holds the source's
/// kernel name, sorted; empty when none is found.
fn btrfs_devices(source: &str) -> Vec<PathBuf> {
    let Some(name) = std::fs::canonicalize(source)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_os_string()))
    else {
        return Vec::new();
    };
    let fs = std::fs::read_dir("/sys/fs/btrfs")
        .into_iter()
        .flatten()
        .flatten();
    for f in fs {
        let devices = f.path().join("devices");
        if devices.join(&name).exists() {
            return linked_dirs(&devices);
        }
    }
    Vec::new()
}

/// The canonical targets of the links in `dir` (sysfs `slaves/`, btrfs
/// `devices/`), sorted; empty when `dir` cannot be read.
fn linked_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::canonicalize(e.path()).ok())
        .collect();
    v.sort();
    v
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Walk {
    /// The layers under the filesystem `m` (whose `st_dev` is `dev`): its block
    /// device's, a ZFS dataset's, or a note that there is no block device under it.
    pub fn below_mount(&mut self, p: &mut Probe, m: &MountInfo, dev: u64) {
        if m.fstype == "zfs" {
            p.layers.push(tools::zfs(&m.source, &mut p.notes));
            return;
        }
        let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
        if Path::new(&sys).exists() {
            return self.device(p, dev);
        }
        if m.fstype == "btrfs" {
            let devices = btrfs_devices(&m.source);
            if !devices.is_empty() {
                for d in devices {
                    self.node(p, &d);
                }
                return;
            }
        }
        // btrfs and others give files an anonymous st_dev: the source names the device.
        if let Ok(md) = std::fs::metadata(&m.source) {
            if md.file_type().is_block_device() {
                return self.device(p, md.rdev());
            }
        }
        p.notes.push(format!(
            "{} at {} ({}) has no block device under it: nothing below the filesystem to probe",
            m.fstype, m.mountpoint, m.source
        ));
    }

    /// The layers from the block device `rdev` down.
    pub fn device(&mut self, p: &mut Probe, rdev: u64) {
        let sys = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
        match std::fs::canonicalize(&sys) {
            Ok(dir) => self.node(p, &dir),
            Err(e) => p
                .notes
                .push(format!("{sys}: {e}: the device is not in sysfs")),
        }
    }

    /// One block device, `dir` its canonical sysfs directory, and what is under it.
    fn node(&mut self, p: &mut Probe, dir: &Path) {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !self.seen.insert(name.clone()) {
            return;
        }
        if let Some(n) = read(&dir.join("partition")) {
            p.layers.push(Layer::Partition {
                name,
                number: n.parse().unwrap_or(0),
            });
            if let Some(disk) = dir.parent() {
                self.node(p, disk);
            }
        } else if dir.join("dm").is_dir() {
            let dm_name = read(&dir.join("dm/name")).unwrap_or_default();
            let (targets, cache_mode) = tools::dm_table(&dm_name, &mut p.notes);
            p.layers.push(Layer::Dm {
                name,
                dm_name,
                targets,
                cache_mode,
            });
            self.slaves(p, dir);
        } else if dir.join("md").is_dir() {
            let level = read(&dir.join("md/level")).unwrap_or_default();
            p.layers.push(Layer::Md {
                name: name.clone(),
                level,
            });
            // Spares and faulty members get no writes and no flushes: not leaves.
            for s in self.slave_dirs(dir) {
                let member = s.file_name().map(|n| n.to_string_lossy().into_owned());
                let member = member.unwrap_or_default();
                let state = read(&dir.join(format!("md/dev-{member}/state")));
                if sysfs::md_member_active(state.as_deref()) {
                    self.node(p, &s);
                } else {
                    p.notes.push(format!(
                        "{name}: member {member} is {}: not followed (it gets no writes or flushes)",
                        state.unwrap_or_default()
                    ));
                }
            }
        } else if dir.join("loop").is_dir() {
            self.loop_dev(p, dir, name);
        } else if name.starts_with("bcache") && dir.join("bcache").is_dir() {
            let mode = read(&dir.join("bcache/cache_mode")).unwrap_or_default();
            p.layers.push(Layer::Bcache {
                name,
                cache_mode: sysfs::selected(&mode),
            });
            self.slaves(p, dir);
        } else if !self.slave_dirs(dir).is_empty() {
            p.notes.push(format!(
                "{name}: an unknown kind of layer; following its slaves"
            ));
            self.slaves(p, dir);
        } else {
            p.layers.push(Layer::Disk { name: name.clone() });
            let leaf = tools::leaf(&name, dir, &mut p.notes);
            p.leaves.push(leaf);
        }
    }

    /// A loop device, then the filesystem (or device) holding its backing file.
    fn loop_dev(&mut self, p: &mut Probe, dir: &Path, name: String) {
        let backing = read(&dir.join("loop/backing_file")).unwrap_or_default();
        let direct_io = read(&dir.join("loop/dio")).and_then(|s| sysfs::flag(&s));
        let path = Path::new(&backing);
        let md = std::fs::metadata(path);
        let mount = match &md {
            Ok(md) if !md.file_type().is_block_device() => Some(mount_of(path, md.dev())),
            _ => None,
        };
        let backing_fs = match &mount {
            Some(Ok(m)) => Some(m.fstype.clone()),
            _ => None,
        };
        p.layers.push(Layer::Loop {
            name: name.clone(),
            backing_file: backing.clone(),
            direct_io,
            backing_fs,
        });
        let md = match md {
            Ok(md) => md,
            Err(_) => {
                p.notes
                    .push(format!("{name}: backing file {backing} is gone"));
                return;
            }
        };
        match mount {
            None => self.device(p, md.rdev()),
            Some(Ok(m)) => {
                p.notes.push(format!(
                    "{name}'s backing file is on {} {} at {} ({})",
                    m.fstype,
                    m.source,
                    m.mountpoint,
                    m.options.join(",")
                ));
                self.below_mount(p, &m, md.dev());
            }
            Some(Err(e)) => p.notes.push(format!("{name}: {e}")),
        }
    }

    fn slave_dirs(&self, dir: &Path) -> Vec<PathBuf> {
        linked_dirs(&dir.join("slaves"))
    }

    fn slaves(&mut self, p: &mut Probe, dir: &Path) {
        for s in self.slave_dirs(dir) {
            self.node(p, &s);
        }
    }
}
