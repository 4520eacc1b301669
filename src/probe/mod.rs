//! What `plugpull probe` found: the storage stack under a target, layer by layer
//! from the mount down to every whole disk, the facts of each disk, the machine's
//! environment, and the warnings those facts raise. Pure data and rules; the
//! collector that reads sysfs and runs tools is `plugpull_client::probe`.
//!
//! * [`mountinfo`] — one `/proc/self/mountinfo` line, mount options → flags.
//! * [`sysfs`] — small parsers for sysfs files and `dmsetup table` lines.
//! * [`rules`] — the warnings, each with a stable id (`docs/probe.md`); the
//!   `volatile-memory` rule is in `volatile.rs`.
//!
//! * [`flush`] — the timed `fdatasync` loop's accounting (`--seconds`) and its rules.
//! * [`evidence`] — the counters a power loss moves (cut evidence), and their deltas.
//! * [`pg`] — the PostgreSQL part (`--dsn`): settings, the data directory's stack,
//!   the backend's libraries, and the `pg-*` rules.

pub mod evidence;
pub mod flush;
pub mod mountinfo;
pub mod pg;
pub mod rules;
pub mod sysfs;
mod volatile;

use serde::{Deserialize, Serialize};

/// Everything one probe found about one target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The path probed, as given.
    pub target: String,
    /// The stack from the top (the mount) down, depth first; a layer with several
    /// devices under it (dm, md) is followed by each one's layers in turn.
    pub layers: Vec<Layer>,
    /// Every whole disk at the bottom of the stack, each once.
    pub leaves: Vec<Leaf>,
    /// Virtualisation and preloaded libraries.
    pub environment: Environment,
    /// What could not be found out and why (a tool not installed, no block device
    /// under the filesystem), one sentence each.
    pub notes: Vec<String>,
    /// What the rules found ([`rules::warnings`]).
    pub warnings: Vec<Warning>,
    /// The timed flush measurement (`plugpull probe --seconds N`); `None` when not
    /// asked for or not measured (then a note says why).
    #[serde(default)]
    pub flush: Option<flush::FlushMeasurement>,
    /// The cut-evidence snapshot of the leaf disks: boot id, uptime, and the
    /// counters a power loss moves.
    #[serde(default)]
    pub evidence: Option<evidence::Snapshot>,
    /// The PostgreSQL server (`plugpull probe --dsn`): its settings, its data
    /// directory's stack and its backend; `None` without `--dsn`.
    #[serde(default)]
    pub postgres: Option<pg::PgProbe>,
}

/// One layer of the stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layer {
    /// The filesystem holding the target (`/proc/self/mountinfo`).
    Mount {
        /// Mount source, e.g. `/dev/loop3`.
        source: String,
        /// Filesystem type, e.g. `ext4`.
        fstype: String,
        /// Mount point.
        mountpoint: String,
        /// Per-mount then superblock options, e.g. `rw,relatime,nobarrier`.
        options: Vec<String>,
    },
    /// A partition (sysfs `partition` file) of the disk below it.
    Partition {
        /// Kernel name, e.g. `sda1`.
        name: String,
        /// Partition number.
        number: u32,
    },
    /// A device-mapper device (sysfs `dm/name`, `dmsetup table`).
    Dm {
        /// Kernel name, e.g. `dm-0`.
        name: String,
        /// Its mapper name, e.g. `vg-root`.
        dm_name: String,
        /// Target types of its table, in order, e.g. `["linear"]`, `["crypt"]`.
        targets: Vec<String>,
        /// `writeback`, `writethrough` or `passthrough` for a `cache` or
        /// `writecache` target (`writecache` is always `writeback`).
        cache_mode: Option<String>,
    },
    /// An MD RAID device (`/sys/block/mdX/md/level`).
    Md {
        /// Kernel name, e.g. `md0`.
        name: String,
        /// RAID level, e.g. `raid1`.
        level: String,
    },
    /// A loop device (`/sys/block/loopN/loop/`).
    Loop {
        /// Kernel name, e.g. `loop3`.
        name: String,
        /// Its backing file.
        backing_file: String,
        /// Whether it uses direct I/O on the backing file (`loop/dio`).
        direct_io: Option<bool>,
        /// The type of the filesystem holding the backing file (`ext4`, `tmpfs` …,
        /// from `/proc/self/mountinfo`); `None` when the backing file is a block
        /// device, is gone, or its mount could not be found.
        #[serde(default)]
        backing_fs: Option<String>,
    },
    /// A bcache device (`/sys/block/bcacheN/bcache/cache_mode`).
    Bcache {
        /// Kernel name, e.g. `bcache0`.
        name: String,
        /// The selected mode: `writethrough`, `writeback`, `writearound`, `none`.
        cache_mode: String,
    },
    /// A ZFS dataset (`zfs get sync,logbias`).
    Zfs {
        /// Dataset name, e.g. `tank/data`.
        dataset: String,
        /// `standard`, `always` or `disabled`; `None` when `zfs` could not say.
        sync: Option<String>,
        /// `latency` or `throughput`.
        logbias: Option<String>,
    },
    /// A whole disk: the bottom of the stack; its facts are in [`Probe::leaves`].
    Disk {
        /// Kernel name, e.g. `sda`, `nvme0n1`, `vda`.
        name: String,
    },
}

/// The facts of one whole disk, from sysfs (`/sys/block/NAME/…`) and, when
/// installed, `hdparm`, `smartctl`, `nvme`. `None` or `""` where the kernel does not
/// expose the fact.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaf {
    /// Kernel name, e.g. `sda`.
    pub name: String,
    /// `device/model`.
    pub model: String,
    /// `device/firmware_rev` (NVMe) or `device/rev` (SCSI/ATA).
    pub firmware: String,
    /// `device/serial` or the disk's own `serial` (virtio).
    pub serial: String,
    /// `device/wwid` or the disk's own `wwid`.
    pub wwn: String,
    /// `nvme`, `ata`, `usb`, `scsi`, `virtio`, `mmc`, `virtual` … from the device path.
    pub transport: String,
    /// `queue/rotational`.
    pub rotational: Option<bool>,
    /// `queue/logical_block_size`, bytes.
    pub logical_block_size: Option<u64>,
    /// `queue/physical_block_size`, bytes.
    pub physical_block_size: Option<u64>,
    /// `queue/write_cache`: `write back` (volatile cache, the kernel sends flushes)
    /// or `write through`; `None` when unreadable or another value.
    pub write_cache: Option<flush::WriteCache>,
    /// `queue/fua`: the device honours Force Unit Access writes.
    pub fua: Option<bool>,
    /// SCSI `scsi_disk/*/cache_type` or virtio's `cache_type`, where present.
    pub cache_type: Option<String>,
    /// `queue/atomic_write_unit_min_bytes`, where present (Linux 6.11+).
    pub atomic_write_unit_min: Option<u64>,
    /// `queue/atomic_write_unit_max_bytes`, where present.
    pub atomic_write_unit_max: Option<u64>,
    /// What the drive itself says of its write cache (`hdparm -W`, `smartctl -g
    /// wcache`, `nvme id-ctrl` VWC), one line, when a tool could ask it.
    pub drive_write_cache: Option<String>,
}

/// The machine around the stack.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// The virtual machine the probe runs in: `systemd-detect-virt --vm` (`none` on
    /// bare metal, else `kvm`, `vmware`, `microsoft`…), else `vm` from the
    /// `hypervisor` CPU flag; `None` when unknown. A container is not a VM: see
    /// [`Environment::container`].
    pub virtualization: Option<String>,
    /// The container the probe runs in: `systemd-detect-virt --container` (`none`
    /// outside one, else `docker`, `lxc`, `podman`…); `None` when unknown. A container
    /// has no cache mode of its own: flushes go to the (real or virtual) machine's
    /// disks.
    #[serde(default)]
    pub container: Option<String>,
    /// Where `libeatmydata` is preloaded: `LD_PRELOAD`, `/etc/ld.so.preload`.
    pub eatmydata_in: Vec<String>,
}

/// One warning: a stable id and a one-line explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    /// Stable id (JSON `"nobarrier"` …).
    pub id: WarningId,
    /// One line: what was found, where.
    pub message: String,
}

/// The stable warning ids (`docs/probe.md` explains each and what to do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningId {
    /// The filesystem is mounted without barriers.
    Nobarrier,
    /// ext3/4 `data=writeback`.
    DataWriteback,
    /// SCSI/virtio `cache_type` disagrees with `queue/write_cache`.
    KernelCacheViewOverridden,
    /// A dm `cache` in writeback mode or a dm `writecache`.
    DmWritebackCache,
    /// bcache in writeback mode.
    BcacheWriteback,
    /// A ZFS dataset with `sync=disabled`.
    ZfsSyncDisabled,
    /// libeatmydata is preloaded: fsync does nothing.
    Eatmydata,
    /// Running in a VM or container: the host decides what a flush does.
    Virtualized,
    /// A volatile write cache, and no flush counted during `fdatasync`s.
    FlushesNotReachingDevice,
    /// A rotational disk completing more `fdatasync`s per second than it turns.
    FsyncTooFastForRotational,
    /// A volatile write cache and a median `fdatasync` under 100 µs: a hint.
    WriteBackCacheFastFlush,
    /// The `fdatasync` loop's writes reached no leaf disk (none counted a write, or
    /// `fdatasync` returned faster than a device can complete one).
    WritesNotReachingDevice,
    /// The target lives in RAM (tmpfs, ramfs, a RAM disk, zram, or a loop device
    /// whose image is on one): a power cut loses all of it, acknowledged or not.
    VolatileMemory,
    /// PostgreSQL `fsync=off`.
    PgFsyncOff,
    /// PostgreSQL `synchronous_commit=off`.
    PgSynchronousCommitOff,
    /// PostgreSQL `full_page_writes=off`.
    PgFullPageWritesOff,
    /// PostgreSQL `data_sync_retry=on`.
    PgDataSyncRetryOn,
}

impl WarningId {
    /// The id as JSON and the text output spell it, e.g. `nobarrier`.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningId::Nobarrier => "nobarrier",
            WarningId::DataWriteback => "data-writeback",
            WarningId::KernelCacheViewOverridden => "kernel-cache-view-overridden",
            WarningId::DmWritebackCache => "dm-writeback-cache",
            WarningId::BcacheWriteback => "bcache-writeback",
            WarningId::ZfsSyncDisabled => "zfs-sync-disabled",
            WarningId::Eatmydata => "eatmydata",
            WarningId::Virtualized => "virtualized",
            WarningId::FlushesNotReachingDevice => flush::FLUSHES_NOT_REACHING_DEVICE,
            WarningId::FsyncTooFastForRotational => flush::FSYNC_TOO_FAST_FOR_ROTATIONAL,
            WarningId::WriteBackCacheFastFlush => flush::WRITE_BACK_CACHE_FAST_FLUSH,
            WarningId::WritesNotReachingDevice => flush::WRITES_NOT_REACHING_DEVICE,
            WarningId::VolatileMemory => "volatile-memory",
            WarningId::PgFsyncOff => "pg-fsync-off",
            WarningId::PgSynchronousCommitOff => "pg-synchronous-commit-off",
            WarningId::PgFullPageWritesOff => "pg-full-page-writes-off",
            WarningId::PgDataSyncRetryOn => "pg-data-sync-retry-on",
        }
    }
}

/// The fault model of a `plugpull-simfs` mount, read from its mount source: simfs
/// mounts with the source `plugpull-simfs:MODE` (`honest`, `lying`, `reorder`,
/// `torn`, `misdirect`; `simfs/src/cmd.rs`). `Some("")` for a simfs that does not name
/// its mode (older builds mount as plain `plugpull-simfs`), `None` for any other
/// filesystem.
pub fn simfs_mode(source: &str) -> Option<&str> {
    match source.strip_prefix("plugpull-simfs") {
        Some("") => Some(""),
        Some(rest) => rest.strip_prefix(':'),
        None => None,
    }
}

impl Probe {
    /// The configuration of the stack, without what names one machine's parts
    /// (device names, mount points, serials, sizes): each layer's kind and settings
    /// from the top, then each disk's model, firmware, write cache and FUA, e.g.
    /// `ext4 (rw,relatime) / dm [crypt] / disk Samsung SSD 990 PRO 4B2QJXD7 (write
    /// back, fua)`; with a PostgreSQL server, its version and the settings that decide
    /// durability come first: `postgresql 15.4 (fsync on, synchronous_commit on,
    /// full_page_writes on, wal_sync_method fdatasync, data_checksums off)`. A
    /// `plugpull-simfs` mount names its fault model as its disk ([`simfs_mode`]):
    /// `fuse (rw,…) / simulated disk lying`. Machines
    /// whose probes give the same text run the same configuration, and a campaign
    /// pools their cuts; `campaign compare` shows the parts that differ.
    pub fn configuration(&self) -> String {
        let pg = self.postgres.as_ref().map(|pg| {
            let s = &pg.settings;
            format!(
                "postgresql {} (fsync {}, synchronous_commit {}, full_page_writes {}, \
                 wal_sync_method {}, data_checksums {})",
                s.server_version,
                s.fsync,
                s.synchronous_commit,
                s.full_page_writes,
                s.wal_sync_method,
                s.data_checksums
            )
        });
        let mut parts: Vec<String> = self
            .layers
            .iter()
            .filter_map(|l| {
                Some(match l {
                    Layer::Mount {
                        fstype,
                        options,
                        source,
                        ..
                    } => match simfs_mode(source).filter(|m| !m.is_empty()) {
                        // The simulated disk is the stack's disk: its fault model is
                        // its model, so an honest and a lying one never pool.
                        Some(mode) => {
                            format!("{fstype} ({}) / simulated disk {mode}", options.join(","))
                        }
                        None => format!("{fstype} ({})", options.join(",")),
                    },
                    Layer::Partition { .. } => "partition".into(),
                    Layer::Dm {
                        targets,
                        cache_mode,
                        ..
                    } => match cache_mode {
                        Some(m) => format!("dm [{}] {m}", targets.join(",")),
                        None => format!("dm [{}]", targets.join(",")),
                    },
                    Layer::Md { level, .. } => format!("md {level}"),
                    Layer::Loop {
                        direct_io,
                        backing_fs,
                        ..
                    } => format!(
                        "loop (dio {}, on {})",
                        direct_io.map_or("?".into(), |d| d.to_string()),
                        backing_fs.as_deref().unwrap_or("?")
                    ),
                    Layer::Bcache { cache_mode, .. } => format!("bcache {cache_mode}"),
                    Layer::Zfs { sync, logbias, .. } => format!(
                        "zfs (sync {}, logbias {})",
                        sync.as_deref().unwrap_or("?"),
                        logbias.as_deref().unwrap_or("?")
                    ),
                    // Its facts come from the leaves below.
                    Layer::Disk { .. } => return None,
                })
            })
            .collect();
        let mut disks: Vec<String> = self
            .leaves
            .iter()
            .map(|d| {
                let cache = d
                    .write_cache
                    .map_or("write cache ?".into(), |c| c.to_string());
                let fua = match d.fua {
                    Some(true) => ", fua",
                    Some(false) => ", no fua",
                    None => "",
                };
                format!(
                    "disk {} {} ({cache}{fua})",
                    d.model.trim(),
                    d.firmware.trim()
                )
            })
            .collect();
        disks.sort();
        parts.extend(disks);
        pg.into_iter().chain(parts).collect::<Vec<_>>().join(" / ")
    }

    /// Whether the leaf disks under this probe are the storage under test on this
    /// host: the walk found a stack, and (for a PostgreSQL server) its backend was
    /// not found to be elsewhere ([`pg::PgProbe::server_on_this_host`]). Flush
    /// accounting and cut evidence use the leaves only then.
    pub fn storage_is_here(&self) -> bool {
        !self.layers.is_empty()
            && self
                .postgres
                .as_ref()
                .is_none_or(|pg| pg.server_on_this_host != Some(false))
    }
}

impl From<&flush::FlushWarning> for Warning {
    /// A flush rule's warning as one of the probe's (its id is one of the flush
    /// constants; the message names the disk).
    fn from(w: &flush::FlushWarning) -> Self {
        let id = match w.id.as_str() {
            flush::FLUSHES_NOT_REACHING_DEVICE => WarningId::FlushesNotReachingDevice,
            flush::FSYNC_TOO_FAST_FOR_ROTATIONAL => WarningId::FsyncTooFastForRotational,
            flush::WRITES_NOT_REACHING_DEVICE => WarningId::WritesNotReachingDevice,
            _ => WarningId::WriteBackCacheFastFlush,
        };
        Warning {
            id,
            message: w.text.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated disk's fault model is its model: an honest and a lying simfs never
    /// show one stack, whatever their mount points.
    #[test]
    fn a_simulated_disk_names_its_mode_in_the_configuration() {
        let probe = |source: &str, mnt: &str| Probe {
            layers: vec![Layer::Mount {
                source: source.into(),
                fstype: "fuse".into(),
                mountpoint: mnt.into(),
                options: vec!["rw".into(), "default_permissions".into()],
            }],
            ..Probe::default()
        };
        let honest = probe("plugpull-simfs:honest", "/m1").configuration();
        assert_eq!(
            honest,
            "fuse (rw,default_permissions) / simulated disk honest"
        );
        assert_eq!(
            probe("plugpull-simfs:honest", "/m2").configuration(),
            honest
        );
        assert_eq!(
            probe("plugpull-simfs:lying", "/m1").configuration(),
            "fuse (rw,default_permissions) / simulated disk lying"
        );
        assert_eq!(
            probe("plugpull-simfs", "/m1").configuration(),
            "fuse (rw,default_permissions)"
        );
        assert_eq!(
            probe("plugpull-simfsx:lying", "/m1").configuration(),
            "fuse (rw,default_permissions)"
        );
        assert_eq!(simfs_mode("plugpull-simfs:torn"), Some("torn"));
        assert_eq!(simfs_mode("plugpull-simfs"), Some(""));
        assert_eq!(simfs_mode("plugpull-simfsx"), None);
        assert_eq!(simfs_mode("/dev/sda1"), None);
    }
}
