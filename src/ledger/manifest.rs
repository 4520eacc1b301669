//! The run's description, the first entry of every ledger: who ran what, where, with
//! which settings, and what the target or database was when the run started. The
//! agent fills it in; the listener adds its own order and clock; verify compares it
//! with what it finds.

use crate::probe::pg::PgSettings;
use crate::RunId;
use serde::{Deserialize, Serialize};

/// The description of a run, stored as the first ledger entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Host name of the machine under test.
    pub host: String,
    /// Start of the run, milliseconds since the Unix epoch (agent clock).
    pub started_unix_ms: u64,
    /// Version of the agent that wrote the run.
    pub tool_version: String,
    /// The workload and its settings.
    pub workload: Workload,
    /// The agent host's boot id (`/proc/sys/kernel/random/boot_id`) at the run's
    /// start; empty when unknown. Verify compares it with its own.
    pub boot_id: String,
    /// Set by the listener when it creates the run: its creation order in the
    /// listener's data directory (1, 2, …; what the agent sends is ignored).
    pub listener_order: u64,
    /// Set by the listener: its own clock when it created the run, ms since the epoch.
    pub listener_created_unix_ms: u64,
    /// The storage under test as the agent found it when the run started.
    pub storage: Storage,
    /// The run's volatile canary: records written with no durability call while the
    /// run writes, read back after the cut to tell a power loss from a clean shutdown.
    pub canary: CanaryManifest,
}

/// Where a run's volatile canary lives (`docs/formats.md`, "Canary"): files on a
/// persistent local filesystem of the host under test, filled with zeros and made
/// durable before the run, then overwritten in place with 512-byte records that are
/// never synced while they are the newest. After a power cut the newest ones are
/// gone; after a clean shutdown or a `sync` they are all there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct CanaryManifest {
    /// The canary files, absolute paths, in the order they are written (empty: the
    /// run has no canary, see `none_because`).
    pub files: Vec<String>,
    /// Random number every record of this run's canary carries.
    pub nonce: u64,
    /// Records per file (each 512 bytes); a turn's `k`-th record (from 0) goes to
    /// slot `k mod slots` of the turn's file.
    pub slots: u32,
    /// Milliseconds each file is written before the next one takes over (three files
    /// in turn; the one to be written next is fsynced at each switch, so none ages
    /// into the kernel's writeback while it holds the newest records).
    pub turn_ms: u64,
    /// Why the run has no canary (empty when it has one), e.g. `the target is a block
    /// device: give --canary-dir`.
    pub none_because: String,
}

#[cfg(any(test, feature = "testing"))]
impl Manifest {
    /// A file run's manifest for tests: host `host`, target `target` of `size` bytes in
    /// blocks of `block_size` bytes, one job, `fdatasync`, random pattern, no identity,
    /// no prior runs, no atomic claim; listener order 0, started at 1 ms after the epoch.
    /// (Feature `testing`.)
    pub fn example_file(host: &str, target: &str, size: u64, block_size: u32) -> Manifest {
        Manifest {
            host: host.into(),
            started_unix_ms: 1,
            tool_version: "test".into(),
            workload: Workload::File(FileManifest {
                target: target.into(),
                size,
                block_size,
                jobs: 1,
                sync: crate::modes::SyncMode::Fdatasync,
                pattern: crate::modes::Pattern::Random,
                identity: TargetIdentity::default(),
                prior_runs: Vec::new(),
                prior_foreign: false,
                atomic: None,
            }),
            boot_id: String::new(),
            listener_order: 0,
            listener_created_unix_ms: 0,
            storage: Storage::default(),
            canary: CanaryManifest::default(),
        }
    }

    /// A pgbench run's manifest for tests: host `host`, default settings
    /// ([`PgManifest::default`]), otherwise as [`Manifest::example_file`].
    /// (Feature `testing`.)
    pub fn example_pgbench(host: &str) -> Manifest {
        Manifest {
            workload: Workload::Pgbench(PgManifest::default()),
            ..Manifest::example_file(host, "", 0, 512)
        }
    }
}

/// The storage under a run, recorded at its start (`docs/probe.md`): the probe of
/// the target (a file run) or of PostgreSQL's data directory (a pgbench run), and
/// the leaf disks whose flush counters the run samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Storage {
    /// The probe ([`crate::probe::Probe`]) as its JSON object, as `plugpull probe
    /// --json` prints it; empty when the storage was not probed. JSON because the
    /// probe's model is self-describing (tagged layers) and postcard is not; read it
    /// with [`Storage::probe`].
    pub probe_json: String,
    /// Why the storage was not probed (e.g. the data directory is on another host);
    /// empty when it was.
    pub not_probed: String,
    /// The leaf disks (kernel names, e.g. `vda`) whose "flush requests completed"
    /// counters the run samples, in the order of every [`FlushSample`]'s counts.
    pub disks: Vec<String>,
    /// Their counters just before the first write.
    pub flushes_start: FlushSample,
}

impl Storage {
    /// The stored probe; `Ok(None)` when the storage was not probed.
    ///
    /// Errors: `probe_json` is not a probe this version can read (the text says why).
    pub fn probe(&self) -> Result<Option<crate::probe::Probe>, String> {
        if self.probe_json.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&self.probe_json)
            .map(Some)
            .map_err(|e| format!("the run's stored probe cannot be read: {e}"))
    }
}

/// The leaf disks' "flush requests completed" counters (field 16 of
/// `/sys/block/DISK/stat`, kernel `Documentation/block/stat.rst`) at one moment, in
/// the order of [`Storage::disks`]; `None` where the counter could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FlushSample {
    /// One counter per disk.
    pub counts: Vec<Option<u64>>,
}

/// Which workload a run drives.
// One manifest per run: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Workload {
    /// Checksummed blocks written to a file or block device.
    File(FileManifest),
    /// pgbench TPC-B transactions against PostgreSQL.
    Pgbench(PgManifest),
    /// Namespace steps (create, append, replace, truncate, unlink) in a directory.
    Files(FilesManifest),
}

impl Workload {
    /// `"file"` or `"pgbench"`.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::File(_) => "file",
            Workload::Pgbench(_) => "pgbench",
            Workload::Files(_) => "files",
        }
    }

    /// What the run acknowledges, for a sentence: `acknowledged writes` or
    /// `acknowledged commits`.
    pub fn acks_name(&self) -> &'static str {
        match self {
            Workload::File(_) => "acknowledged writes",
            Workload::Pgbench(_) => "acknowledged commits",
            Workload::Files(_) => "acknowledged steps",
        }
    }

    /// The path the run wrote (a file run's target, a files run's directory), as the
    /// manifest records it; `None` for pgbench.
    pub fn target(&self) -> Option<&str> {
        match self {
            Workload::File(f) => Some(&f.target),
            Workload::Files(f) => Some(&f.target),
            Workload::Pgbench(_) => None,
        }
    }

    /// Whether one writer made every acknowledgement, each durability call after the
    /// last returned (a file run with `--jobs 1`): then no two calls can share one
    /// flush, and every `fsync`/`fdatasync` must send its own.
    pub fn single_writer(&self) -> bool {
        match self {
            Workload::File(f) => f.jobs == 1,
            Workload::Files(f) => f.jobs == 1,
            Workload::Pgbench(_) => false,
        }
    }

    /// Whether every acknowledgement waited for a call that sends the device a cache
    /// flush whenever its write cache is volatile: `fsync`/`fdatasync` (a file run's
    /// `--sync`; for pgbench, a configuration that promised durability — `fsync=on`,
    /// `synchronous_commit` not `off` — with `wal_sync_method` `fsync`, `fdatasync`
    /// or `fsync_writethrough`). Writes opened `O_DSYNC` may be completed with FUA
    /// instead of a flush, so they do not count.
    pub fn acks_wait_for_flush(&self) -> bool {
        use crate::modes::SyncMode;
        match self {
            Workload::File(f) => matches!(f.sync, SyncMode::Fsync | SyncMode::Fdatasync),
            Workload::Pgbench(p) => {
                p.promised
                    && matches!(
                        p.settings.wal_sync_method.as_str(),
                        "fsync" | "fdatasync" | "fsync_writethrough"
                    )
            }
            // Every step ends in fsync (of the file or of the directory).
            Workload::Files(_) => true,
        }
    }
}

/// Settings of a file run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileManifest {
    /// Path of the target as the agent opened it.
    pub target: String,
    /// Bytes of the target under test.
    pub size: u64,
    /// Bytes per block (a multiple of 512).
    pub block_size: u32,
    /// Number of concurrent writers.
    pub jobs: u32,
    /// Durability call.
    pub sync: crate::modes::SyncMode,
    /// Which block each worker writes next.
    pub pattern: crate::modes::Pattern,
    /// What the target was when the run started (identity, size, device facts).
    pub identity: TargetIdentity,
    /// Other plugpull runs whose records were on the target when the run started
    /// (at most 64), so a total loss on a reused target is told from a wrong target.
    pub prior_runs: Vec<RunId>,
    /// True when the target held bytes that are neither zeros nor plugpull records
    /// when the run started (`--force`), or when that could not be checked.
    pub prior_foreign: bool,
    /// With `--expect-atomic`: the write unit under test and the stack's claimed
    /// atomic units ([`crate::atomic`]); a block torn by a write in flight is then a
    /// failure. `None`: atomic writes are not expected.
    pub atomic: Option<crate::atomic::AtomicClaim>,
}

/// Settings of a files (namespace) run: see `docs/files.md` and
/// [`crate::verdict::files`] for the schedule every worker follows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesManifest {
    /// The directory the files live in, as the agent opened it (absolute).
    pub target: String,
    /// Number of concurrent workers; worker `j` owns the file numbers `f ≡ j (mod jobs)`.
    pub jobs: u32,
    /// Number of file names (`--files`), numbered from 0.
    pub files: u32,
    /// Seed of every worker's step schedule (worker `j` mixes in its number).
    pub seed: u64,
    /// Steps whose directory fsync was skipped (`--unsafe-steps dirsync`).
    pub skip_dirsync: bool,
    /// Replaces whose fsync before the rename was skipped (`--unsafe-steps presync`).
    pub skip_presync: bool,
    /// Acknowledgements (all workers together) the agent may be ahead of the
    /// listener's confirmations (`--max-unconfirmed`): bounds the steps that may
    /// have happened after a worker's last confirmed one. 0 = unbounded.
    pub max_unconfirmed: u64,
    /// What the directory was when the run started (identity of its filesystem).
    pub identity: TargetIdentity,
}

/// The identity and facts of a target, recorded when the run starts and compared at
/// verify. Empty strings and zeros mean "unknown".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct TargetIdentity {
    /// `file` or `block`.
    pub kind: String,
    /// Bytes of the file or block device (its capacity) when the run started.
    pub size: u64,
    /// For a file: `st_dev` of its filesystem; for a block device: its `st_rdev`.
    pub dev: u64,
    /// For a file: its inode number.
    pub inode: u64,
    /// UUID of the filesystem holding the file (or its directory).
    pub fs_uuid: String,
    /// Type of that filesystem (`/proc/self/mountinfo`), e.g. `ext4`, `fuse.simfs`.
    pub fs_type: String,
    /// Source of that filesystem's mount, e.g. `/dev/loop3`.
    pub fs_source: String,
    /// Mount point of that filesystem.
    pub fs_mountpoint: String,
    /// Block device: World Wide Name from sysfs (`wwid`).
    pub wwn: String,
    /// Block device: serial number from sysfs.
    pub serial: String,
    /// Block device: model from sysfs.
    pub model: String,
    /// Loop device: its backing file (a partition's: its disk's).
    pub loop_backing: String,
    /// Block device: its partition number (sysfs `partition`); 0 for a whole device.
    pub partition: u32,
    /// Block device partition: its first sector on the disk, in 512-byte units
    /// (sysfs `start`); 0 for a whole device.
    pub part_start: u64,
}

impl FileManifest {
    /// Number of whole blocks in the target.
    pub fn blocks(&self) -> u64 {
        self.size / self.block_size as u64
    }
}

/// Settings of a pgbench run, including the server configuration that decides
/// whether a `COMMIT` promised durability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct PgManifest {
    /// Connection string with any password removed.
    pub conninfo: String,
    /// pgbench scale factor.
    pub scale: u32,
    /// Number of clients (connections).
    pub clients: u32,
    /// Number of threads the clients are spread over.
    pub jobs: u32,
    /// Query protocol (pgbench's `-M`).
    pub protocol: crate::modes::Protocol,
    /// The server settings that decide durability (nested here; postcard encodes it
    /// as if its fields stood in its place).
    pub settings: PgSettings,
    /// Whether this configuration promises that a successful `COMMIT` is durable.
    pub promised: bool,
    /// Acknowledgements (all clients together) the agent may be ahead of the
    /// listener's confirmations; bounds the sequence numbers that can exist after a
    /// cut (`seq ≤ A_c + max_unconfirmed`). 0 = unbounded.
    pub max_unconfirmed: u64,
    /// `sum(abalance)`, `sum(tbalance)`, `sum(bbalance)` and `sum(pgbench_history.delta)`
    /// when the run started: every transaction adds the same delta to each, so the
    /// four differences from these stay equal.
    pub start_sums: [i64; 4],
    /// The mount beneath `data_directory` as the agent's host sees it
    /// (`device mountpoint fstype options`, from `/proc/mounts`); empty when the
    /// directory is hidden or not on the agent's host.
    pub data_mount: String,
    /// `pg_stat_database.checksum_failures` of the run's database when the run
    /// started (0 when checksums are off): verify counts only the rise since.
    pub checksum_failures_start: i64,
    /// `pg_stat_database.stats_reset` of the run's database when the run started, as
    /// text (empty when NULL): the epoch of that counter.
    pub stats_reset_start: String,
    /// Whether each transaction was sent as one pipeline (`--pipeline`).
    pub pipeline: bool,
    /// The pgbench tables' files when the run started (after `--init`): a table
    /// rewritten or emptied since (`TRUNCATE`, `pgbench -i`, `VACUUM FULL`, dropped and
    /// created again) has another file, and its rows can no longer be judged.
    pub relations: Vec<PgRelation>,
}

/// One table's identity and file (`pg_class.oid`, `pg_relation_filenode`): a
/// rewrite gives it a new file number, taken from the OID counter, so a later one is
/// higher (`src/backend/catalog/catalog.c`, `GetNewRelFileNumber`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PgRelation {
    /// The table's name (`pgbench_history`, …).
    pub name: String,
    /// Its `pg_class` OID.
    pub oid: u32,
    /// Its file number (`pg_relation_filenode`).
    pub filenode: u32,
}
