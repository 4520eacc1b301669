//! The listener's ledger: one append-only file per run, the ground truth of what
//! was acknowledged.
//!
//! ## File format (all integers little-endian)
//!
//! ```text
//! offset 0   8 bytes  magic "PPLEDGR2" (the digit is the format version)
//! offset 8   8 bytes  run id
//! offset 16  entries, each:
//!              4 bytes  payload length L (1 ..= MAX_ENTRY)
//!              4 bytes  CRC-32 (IEEE) of the payload
//!              L bytes  payload: one postcard-encoded [`Entry`]
//! ```
//!
//! The first entry is the run's [`Manifest`]; then [`Entry::Acks`] batches, each with
//! the agent's batch number (batches are idempotent: a resent batch whose number is
//! not above the highest in the ledger is ignored by the listener); a run may end
//! with [`Entry::Finished`], [`Entry::DeviceError`] or (a witness fault) [`Entry::Invalid`].
//!
//! The listener writes one group commit with one `write` and `fdatasync`s before it
//! confirms anything in it. A crash can therefore only damage the last commit: a
//! *torn tail* is an incomplete or CRC-failing entry that starts within the last
//! [`MAX_COMMIT`] bytes, is followed by nothing but zeros or the end of the file, and
//! has no valid entry anywhere after it (so a damaged length field in the middle,
//! which would make an entry seem to run past the end, is still caught).
//! Anything else that fails to parse is *damage in the middle*, and the ledger is
//! refused ([`LedgerError::Damaged`] names the byte offset).
//!
//! Sizes: a file ack is about 10 bytes (postcard varints: seq, block, ms); a
//! pgbench batch stores one contiguous range per client.

use crate::RunId;
use serde::{Deserialize, Serialize};

/// Magic at byte 0 of every ledger file.
pub const MAGIC: [u8; 8] = *b"PPLEDGR2";
/// Bytes before the first entry.
pub const HEADER_LEN: usize = 16;
/// Bytes of an entry's length + CRC prefix.
pub const ENTRY_HEADER_LEN: usize = 8;
/// Largest entry payload, in bytes (8 MiB).
pub const MAX_ENTRY: u32 = 8 << 20;
/// Largest group commit, in bytes: a torn tail can only lie within this many bytes of the end.
pub const MAX_COMMIT: u64 = 32 << 20;

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
}

impl Workload {
    /// `"file"` or `"pgbench"`.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::File(_) => "file",
            Workload::Pgbench(_) => "pgbench",
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
}

/// The PostgreSQL settings a pgbench run records, as `pg_settings` shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct PgSettings {
    /// `server_version`.
    pub server_version: String,
    /// `fsync`.
    pub fsync: String,
    /// `synchronous_commit` as the agent's session sees it (role and database settings apply).
    pub synchronous_commit: String,
    /// `full_page_writes`.
    pub full_page_writes: String,
    /// `wal_sync_method`.
    pub wal_sync_method: String,
    /// `data_checksums`.
    pub data_checksums: String,
    /// `data_directory` (`(hidden)` without `pg_read_all_settings`).
    pub data_directory: String,
}

/// One acknowledged write of a file run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileAck {
    /// Write sequence number.
    pub seq: u64,
    /// Block index.
    pub block: u64,
    /// Milliseconds after the run's start when the durability call returned.
    pub ms: u32,
}

/// Acknowledged commits `first ..= last` of one pgbench client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgAckRange {
    /// Client number, from 0.
    pub client: u32,
    /// First acknowledged per-client sequence number in the range (from 1).
    pub first: u64,
    /// Last acknowledged per-client sequence number in the range.
    pub last: u64,
    /// Milliseconds after the run's start when `last`'s `COMMIT` returned.
    pub ms: u32,
}

/// The acknowledgements of one batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Acks {
    /// File workload acks.
    File(Vec<FileAck>),
    /// pgbench workload acks.
    Pg(Vec<PgAckRange>),
}

impl Acks {
    /// Number of acknowledgements (commits for pgbench).
    pub fn count(&self) -> u64 {
        match self {
            Acks::File(v) => v.len() as u64,
            Acks::Pg(v) => v.iter().map(|r| r.last + 1 - r.first).sum(),
        }
    }
}

/// A batch of acknowledgements as the agent sent it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AckBatch {
    /// The agent's batch number, from 1, increasing by one per batch.
    pub batch: u64,
    /// Whether the configuration promised durability for these acks.
    pub promised: bool,
    /// The acknowledgements.
    pub acks: Acks,
}

/// How a run ended, as the agent reported it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct RunSummary {
    /// Writes (or transactions) issued.
    pub issued: u64,
    /// Acknowledgements the agent made (the ledger holds the confirmed ones).
    pub acknowledged: u64,
    /// Length of the run in milliseconds.
    pub duration_ms: u64,
}

/// One ledger entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Entry {
    /// The run's manifest: always the first entry.
    Manifest(Box<Manifest>),
    /// A batch of acknowledgements.
    Acks(AckBatch),
    /// The agent finished normally.
    Finished(RunSummary),
    /// The run ended by a device error: a write or durability call failed (the
    /// device lost power or went away, or filled up). Every ack before this entry was
    /// confirmed before the error and is judged as usual; the agent sends none after it.
    DeviceError(DeviceError),
    /// The run cannot be judged: the agent saw a witness fault (a message that failed
    /// authentication, a confirmation below one already given) and recorded it here
    /// while it could still reach the listener. The error starts with `witness fault`.
    Invalid {
        /// What the agent saw.
        error: String,
    },
}

/// How a run that ended by a device error ended, as the agent reported it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct DeviceError {
    /// The first error the agent saw, e.g.
    /// `fdatasync after block 7: Input/output error (os error 5)`.
    pub error: String,
    /// Milliseconds after the run's start when the failed call returned (same clock as
    /// [`FileAck::ms`]); every ack the agent handed over has `ms ≤` this.
    pub ms: u64,
    /// Writes issued before the error (including the failed ones).
    pub issued: u64,
    /// Acknowledgements the agent handed over before the error.
    pub acknowledged: u64,
    /// Highest seq among them (0 when none).
    pub last_seq: u64,
    /// Whether the error is one a failing device gives (EIO, ENODEV, ENXIO, ENOSPC,
    /// EROFS, ESHUTDOWN: see [`is_device_errno`]). `false` (EINVAL, EBADF, EFBIG,
    /// EDQUOT, a short write, …) means the run itself went wrong: then nothing it
    /// measured counts and verify refuses it.
    pub device: bool,
}

/// Whether `errno` (from a failed `pwrite`/`fsync`/`fdatasync`) is what a device that
/// lost power, went away or filled up gives: EIO (the drive failed or lost power),
/// ENODEV/ENXIO (the device went away), ENOSPC (the filesystem or thin pool filled
/// up), EROFS (the filesystem turned read-only after an error), ESHUTDOWN (the
/// filesystem was shut down, e.g. XFS after an I/O error). Linux errno values
/// (`asm-generic/errno-base.h`, `errno.h`).
pub fn is_device_errno(errno: i32) -> bool {
    // EIO 5, ENXIO 6, ENODEV 19, ENOSPC 28, EROFS 30, ESHUTDOWN 108.
    matches!(errno, 5 | 6 | 19 | 28 | 30 | 108)
}

/// A torn tail the listener cut off a run's ledger when it restarted: `bytes` bytes
/// from byte `offset` on (kept beside the ledger as `<run>.ledger.torn-<offset>`).
/// A crash inside a group commit leaves one that held nothing confirmed; storage that
/// lost synced data leaves one that did, so [`check_record`] only lets a run with one
/// pass when the agent's own `Finished` count vouches for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TornTail {
    /// Byte offset in the ledger where the torn tail began (the ledger's length after).
    pub offset: u64,
    /// Bytes cut off.
    pub bytes: u64,
}

/// What [`check_record`] found consistent in a ledger's acknowledgements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordCheck {
    /// Acknowledgements in the distinct batches.
    pub acks: u64,
    /// Batches recorded more than once with the same contents (dropped from the list).
    pub duplicates: u64,
}

/// The witness's record is provably incomplete: a run with it cannot be judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WitnessLoss {
    /// Acknowledged writes known to be missing (when a `Finished` entry gives the
    /// agent's count), else `None`.
    pub lost: Option<u64>,
    /// The evidence, for a human.
    pub evidence: String,
}

impl std::fmt::Display for WitnessLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.lost {
            Some(n) => write!(f, "the witness lost {n} acknowledged writes: this run cannot be judged ({})", self.evidence),
            None => write!(f, "the witness lost acknowledged writes (how many is unknown): this run cannot be judged ({})", self.evidence),
        }
    }
}

impl std::error::Error for WitnessLoss {}

/// Checks that a ledger's record of acknowledgements is whole, and drops batches
/// recorded twice (same number, same contents) from `batches`, keeping ledger order.
///
/// Rules: batch numbers are exactly `1..=n` once duplicates are dropped (a jump means
/// the witness lost the batches between); a batch number recorded twice with different
/// contents is a loss; when `finished` (the last `Finished` entry) is given, its
/// `acknowledged` must equal the ledger's count; a `torn` tail the listener cut off is
/// a loss unless such a `Finished` count vouches for the whole record.
///
/// Errors: [`WitnessLoss`] naming the first inconsistency found and, when the agent's
/// count is known, how many acknowledged writes are missing.
pub fn check_record(
    batches: &mut Vec<AckBatch>,
    finished: Option<&RunSummary>,
    torn: &[TornTail],
) -> Result<RecordCheck, WitnessLoss> {
    let mut seen: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut kept: Vec<AckBatch> = Vec::with_capacity(batches.len());
    let mut duplicates = 0;
    let mut conflict = None;
    for b in batches.drain(..) {
        match seen.get(&b.batch) {
            Some(&i) => {
                if kept[i] != b && conflict.is_none() {
                    conflict = Some(b.batch);
                }
                duplicates += 1;
            }
            None => {
                seen.insert(b.batch, kept.len());
                kept.push(b);
            }
        }
    }
    *batches = kept;
    let acks: u64 = batches.iter().map(|b| b.acks.count()).sum();
    let lost = finished
        .and_then(|f| f.acknowledged.checked_sub(acks))
        .filter(|&n| n > 0);
    let fail = |evidence: String| Err(WitnessLoss { lost, evidence });
    if let Some(b) = conflict {
        return fail(format!(
            "batch {b} is recorded twice with different contents"
        ));
    }
    let mut numbers: Vec<u64> = batches.iter().map(|b| b.batch).collect();
    numbers.sort_unstable();
    let mut prev = 0;
    for &n in &numbers {
        if n != prev + 1 {
            return fail(if prev + 1 == n - 1 {
                format!(
                    "batch {} is missing: batch numbers jump from {prev} to {n}",
                    prev + 1
                )
            } else {
                format!(
                    "batches {} to {} are missing: batch numbers jump from {prev} to {n}",
                    prev + 1,
                    n - 1
                )
            });
        }
        prev = n;
    }
    if let Some(f) = finished {
        if f.acknowledged != acks {
            return match f.acknowledged.checked_sub(acks) {
                Some(_) => fail(format!("the agent finished with {} acknowledged, the ledger holds {acks}", f.acknowledged)),
                None => Err(WitnessLoss {
                    lost: None,
                    evidence: format!("the ledger holds {acks} acknowledgements but the agent finished with only {}", f.acknowledged),
                }),
            };
        }
    } else if let Some(t) = torn.first() {
        return fail(format!(
            "the listener cut a torn tail of {} bytes off the ledger at byte {} on a restart, and no Finished entry gives the agent's count to show nothing confirmed was in it",
            t.bytes, t.offset
        ));
    }
    Ok(RecordCheck { acks, duplicates })
}

/// Checks a run that a device error ended against the agent's own count: `acks`
/// (the ledger's acknowledgements, from [`check_record`]) must not be fewer than the
/// `acknowledged` the agent handed over before the error, since it sends every one of
/// them before the [`DeviceError`] entry. More is the device-error rule's business
/// (acknowledged after the error), not a loss.
///
/// Errors: [`WitnessLoss`] with the number missing.
pub fn check_device_error_count(acks: u64, end: &DeviceError) -> Result<(), WitnessLoss> {
    match end.acknowledged.checked_sub(acks).filter(|&n| n > 0) {
        None => Ok(()),
        Some(n) => Err(WitnessLoss {
            lost: Some(n),
            evidence: format!(
                "the agent handed over {} acknowledgements before its device error, the ledger holds {acks}",
                end.acknowledged
            ),
        }),
    }
}

/// Why a ledger cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerError {
    /// The 16-byte header is missing or has the wrong magic.
    BadHeader,
    /// An entry in the middle fails its length or CRC check, or does not decode.
    Damaged {
        /// Byte offset of the entry.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The first entry is not a manifest.
    NoManifest,
    /// The header is a plugpull ledger of another format version (magic `PPLEDGR`
    /// followed by another digit): written by an older or newer plugpull.
    OtherVersion {
        /// The version digit found (e.g. `'1'`).
        found: char,
    },
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::BadHeader => {
                f.write_str("ledger header is missing or has the wrong magic")
            }
            LedgerError::Damaged { offset, reason } => {
                write!(f, "ledger damaged at byte {offset}: {reason}")
            }
            LedgerError::NoManifest => f.write_str("ledger does not start with a manifest"),
            LedgerError::OtherVersion { found } => write!(
                f,
                "ledger format {found} was written by another plugpull version (this one reads format {}): \
                 verify it with the plugpull that wrote it",
                MAGIC[7] as char
            ),
        }
    }
}

impl std::error::Error for LedgerError {}

/// The 16-byte header of a new ledger for `run`.
pub fn header(run: RunId) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..].copy_from_slice(&run.0.to_le_bytes());
    h
}

/// Appends one encoded entry (length, CRC, payload) to `out`.
pub fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; ENTRY_HEADER_LEN]);
    let out2 =
        postcard::to_extend(entry, std::mem::take(out)).expect("ledger entries always serialize");
    *out = out2;
    let len = (out.len() - start - ENTRY_HEADER_LEN) as u32;
    let crc = crc32fast::hash(&out[start + ENTRY_HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What the end of a scanned ledger looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belongs to a valid entry.
    Clean,
    /// A torn last commit: bytes from `valid_len` on are not a valid entry.
    Torn {
        /// Length of the valid prefix, in bytes (truncate the file here).
        valid_len: u64,
        /// Bytes after it.
        torn_bytes: u64,
    },
}

/// Scans a whole ledger, calling `f(offset, entry)` for each valid entry in order.
///
/// Returns the run id and how the file ends. Errors: [`LedgerError::BadHeader`], or
/// [`LedgerError::Damaged`] for damage that is not a torn tail (see the module doc),
/// or [`LedgerError::NoManifest`].
pub fn scan(bytes: &[u8], mut f: impl FnMut(u64, Entry)) -> Result<(RunId, Tail), LedgerError> {
    if bytes.len() >= HEADER_LEN && bytes[..7] == MAGIC[..7] && bytes[7] != MAGIC[7] {
        return Err(LedgerError::OtherVersion {
            found: bytes[7] as char,
        });
    }
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC {
        return Err(LedgerError::BadHeader);
    }
    let run = RunId(u64::from_le_bytes(bytes[8..16].try_into().unwrap()));
    let total = bytes.len() as u64;
    let mut at = HEADER_LEN;
    let mut first = true;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let problem = entry_problem(rest);
        match problem {
            None => {
                let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                let payload = &rest[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + len];
                match postcard::from_bytes::<Entry>(payload) {
                    Ok(entry) => {
                        if first && !matches!(entry, Entry::Manifest(_)) {
                            return Err(LedgerError::NoManifest);
                        }
                        first = false;
                        f(at as u64, entry);
                        at += ENTRY_HEADER_LEN + len;
                    }
                    Err(e) => {
                        return Err(LedgerError::Damaged {
                            offset: at as u64,
                            reason: format!("entry passes its CRC but does not decode ({e})"),
                        })
                    }
                }
            }
            Some((reason, end)) => {
                let after_is_zero = end
                    .map(|e| rest[e.min(rest.len())..].iter().all(|&b| b == 0))
                    .unwrap_or(true);
                let near_end = total - at as u64 <= MAX_COMMIT;
                // A valid entry further on means the bad one is not the last write: a
                // damaged length in the middle must never pass for a torn tail.
                if let Some(k) = (1..rest.len()).find(|&k| entry_problem(&rest[k..]).is_none()) {
                    return Err(LedgerError::Damaged {
                        offset: at as u64,
                        reason: format!("{reason}, yet a valid entry follows at byte {}", at + k),
                    });
                }
                if near_end && after_is_zero {
                    return Ok((
                        run,
                        Tail::Torn {
                            valid_len: at as u64,
                            torn_bytes: total - at as u64,
                        },
                    ));
                }
                return Err(LedgerError::Damaged {
                    offset: at as u64,
                    reason,
                });
            }
        }
    }
    if first {
        return Err(LedgerError::NoManifest);
    }
    Ok((run, Tail::Clean))
}

/// Checks the entry at the start of `rest`. `None` = a complete entry with a good CRC.
/// Otherwise the reason and, where the entry's extent is known, its end.
fn entry_problem(rest: &[u8]) -> Option<(String, Option<usize>)> {
    if rest.len() < ENTRY_HEADER_LEN {
        return Some((
            format!("{} bytes cannot hold an entry header", rest.len()),
            None,
        ));
    }
    let len = u32::from_le_bytes(rest[..4].try_into().unwrap());
    if len == 0 || len > MAX_ENTRY {
        return Some((
            format!("entry length {len} is outside 1..={MAX_ENTRY}"),
            Some(0),
        ));
    }
    let end = ENTRY_HEADER_LEN + len as usize;
    if end > rest.len() {
        return Some((
            format!("entry of {len} bytes runs past the end of the file"),
            None,
        ));
    }
    let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap());
    if crc32fast::hash(&rest[ENTRY_HEADER_LEN..end]) != crc {
        return Some(("entry CRC does not match".to_string(), Some(end)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Entry {
        Entry::Manifest(Box::new(Manifest {
            host: "h".into(),
            started_unix_ms: 1,
            tool_version: "0".into(),
            workload: Workload::File(FileManifest {
                target: "/t".into(),
                size: 8192,
                block_size: 4096,
                jobs: 1,
                sync: crate::modes::SyncMode::Fdatasync,
                pattern: crate::modes::Pattern::Random,
                identity: Default::default(),
                prior_runs: Vec::new(),
                prior_foreign: false,
            }),
            boot_id: String::new(),
            listener_order: 0,
            listener_created_unix_ms: 0,
        }))
    }

    fn acks(batch: u64, n: u64) -> Entry {
        Entry::Acks(AckBatch {
            batch,
            promised: true,
            acks: Acks::File(
                (0..n)
                    .map(|i| FileAck {
                        seq: 1000 * batch + i,
                        block: i,
                        ms: 5,
                    })
                    .collect(),
            ),
        })
    }

    fn ledger(entries: &[Entry]) -> Vec<u8> {
        let mut out = header(RunId(9)).to_vec();
        for e in entries {
            encode_entry(e, &mut out);
        }
        out
    }

    fn collect(bytes: &[u8]) -> Result<(Vec<Entry>, Tail), LedgerError> {
        let mut v = Vec::new();
        let (run, tail) = scan(bytes, |_, e| v.push(e))?;
        assert_eq!(run, RunId(9));
        Ok((v, tail))
    }

    #[test]
    fn round_trip() {
        let es = vec![
            manifest(),
            acks(1, 3),
            acks(2, 2),
            Entry::Finished(RunSummary::default()),
        ];
        let (got, tail) = collect(&ledger(&es)).unwrap();
        assert_eq!(got, es);
        assert_eq!(tail, Tail::Clean);
    }

    #[test]
    fn a_cut_short_last_entry_is_a_torn_tail() {
        let full = ledger(&[manifest(), acks(1, 3), acks(2, 4)]);
        let good = ledger(&[manifest(), acks(1, 3)]).len();
        for cut in good + 1..full.len() {
            let (got, tail) = collect(&full[..cut]).unwrap();
            assert_eq!(got.len(), 2);
            assert_eq!(
                tail,
                Tail::Torn {
                    valid_len: good as u64,
                    torn_bytes: (cut - good) as u64
                }
            );
        }
        // Zeros after the valid prefix (a file extended but not written) are a torn tail too.
        let mut z = full[..good].to_vec();
        z.extend_from_slice(&[0; 100]);
        assert_eq!(
            collect(&z).unwrap().1,
            Tail::Torn {
                valid_len: good as u64,
                torn_bytes: 100
            }
        );
    }

    #[test]
    fn damage_in_the_middle_is_refused_with_its_offset() {
        let mut b = ledger(&[manifest(), acks(1, 3), acks(2, 4)]);
        let second = ledger(&[manifest()]).len();
        b[second + 10] ^= 0xff;
        assert_eq!(
            collect(&b).unwrap_err(),
            LedgerError::Damaged {
                offset: second as u64,
                reason: format!(
                    "entry CRC does not match, yet a valid entry follows at byte {}",
                    ledger(&[manifest(), acks(1, 3)]).len()
                )
            }
        );
    }

    #[test]
    fn a_damaged_length_in_the_middle_is_not_a_torn_tail() {
        let mut b = ledger(&[manifest(), acks(1, 3), acks(2, 4)]);
        let second = ledger(&[manifest()]).len();
        b[second + 2] = 0x01; // the length (now 64 KiB more) runs past the end of the file
        let err = collect(&b).unwrap_err();
        let third = ledger(&[manifest(), acks(1, 3)]).len();
        assert_eq!(
            err,
            LedgerError::Damaged {
                offset: second as u64,
                reason: format!("entry of {} bytes runs past the end of the file, yet a valid entry follows at byte {third}", u32::from_le_bytes(b[second..second + 4].try_into().unwrap())),
            }
        );
    }

    #[test]
    fn bad_magic_and_missing_manifest_are_refused() {
        assert_eq!(
            collect(b"NOTALEDGER012345").unwrap_err(),
            LedgerError::BadHeader
        );
        assert_eq!(
            collect(&ledger(&[acks(1, 1)])).unwrap_err(),
            LedgerError::NoManifest
        );
        assert_eq!(collect(&ledger(&[])).unwrap_err(), LedgerError::NoManifest);
    }

    #[test]
    fn file_acks_cost_at_most_16_bytes_each() {
        let n = 4096u64;
        let e = Entry::Acks(AckBatch {
            batch: 1,
            promised: true,
            acks: Acks::File(
                (0..n)
                    .map(|i| FileAck {
                        seq: 5_000_000 + i,
                        block: (i * 7919) % 262_144,
                        ms: 100_000,
                    })
                    .collect(),
            ),
        });
        let mut out = Vec::new();
        encode_entry(&e, &mut out);
        assert!(
            out.len() as u64 <= 16 * n,
            "{} bytes for {n} acks",
            out.len()
        );
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    fn b(batch: u64, n: u64) -> AckBatch {
        AckBatch {
            batch,
            promised: true,
            acks: Acks::File(
                (0..n)
                    .map(|i| FileAck {
                        seq: batch * 100 + i,
                        block: i,
                        ms: 1,
                    })
                    .collect(),
            ),
        }
    }

    fn fin(acknowledged: u64) -> RunSummary {
        RunSummary {
            issued: acknowledged,
            acknowledged,
            duration_ms: 1,
        }
    }

    #[test]
    fn a_whole_record_passes_and_duplicates_are_dropped() {
        let mut v = vec![b(1, 3), b(2, 2), b(1, 3), b(3, 1)];
        assert_eq!(
            check_record(&mut v, Some(&fin(6)), &[]),
            Ok(RecordCheck {
                acks: 6,
                duplicates: 1
            })
        );
        assert_eq!(v.iter().map(|b| b.batch).collect::<Vec<_>>(), vec![1, 2, 3]);
        let mut none = vec![];
        assert_eq!(
            check_record(&mut none, None, &[]),
            Ok(RecordCheck {
                acks: 0,
                duplicates: 0
            })
        );
    }

    #[test]
    fn a_jump_in_batch_numbers_is_a_loss() {
        let mut v = vec![b(1, 3), b(4, 2)];
        let e = check_record(&mut v, Some(&fin(9)), &[]).unwrap_err();
        assert_eq!(e.lost, Some(4));
        assert_eq!(e.to_string(), "the witness lost 4 acknowledged writes: this run cannot be judged (batches 2 to 3 are missing: batch numbers jump from 1 to 4)");
        let mut v = vec![b(2, 1)];
        assert_eq!(
            check_record(&mut v, None, &[]).unwrap_err().to_string(),
            "the witness lost acknowledged writes (how many is unknown): this run cannot be judged (batch 1 is missing: batch numbers jump from 0 to 2)"
        );
    }

    #[test]
    fn a_finished_count_above_the_ledger_is_a_loss() {
        let mut v = vec![b(1, 3), b(2, 2)];
        let e = check_record(&mut v, Some(&fin(14_012)), &[]).unwrap_err();
        assert_eq!(e.lost, Some(14_007));
        assert_eq!(e.to_string(), "the witness lost 14007 acknowledged writes: this run cannot be judged (the agent finished with 14012 acknowledged, the ledger holds 5)");
        let mut v = vec![b(1, 3)];
        assert_eq!(
            check_record(&mut v, Some(&fin(2)), &[]).unwrap_err().lost,
            None
        );
    }

    #[test]
    fn a_conflicting_duplicate_is_a_loss() {
        let mut v = vec![b(1, 3), b(1, 2)];
        assert_eq!(
            check_record(&mut v, None, &[]).unwrap_err().evidence,
            "batch 1 is recorded twice with different contents"
        );
    }

    #[test]
    fn a_torn_tail_passes_only_when_the_finished_count_vouches() {
        let torn = [TornTail {
            offset: 500,
            bytes: 77,
        }];
        let mut v = vec![b(1, 3)];
        assert_eq!(
            check_record(&mut v, Some(&fin(3)), &torn),
            Ok(RecordCheck {
                acks: 3,
                duplicates: 0
            })
        );
        let mut v = vec![b(1, 3)];
        assert_eq!(
            check_record(&mut v, None, &torn).unwrap_err().to_string(),
            "the witness lost acknowledged writes (how many is unknown): this run cannot be judged (the listener cut a torn tail of 77 bytes off the ledger at byte 500 on a restart, and no Finished entry gives the agent's count to show nothing confirmed was in it)"
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_device_error_run_holding_fewer_acks_than_the_agent_handed_over_lost_some() {
        let end = DeviceError {
            acknowledged: 3,
            device: true,
            ..Default::default()
        };
        assert_eq!(check_device_error_count(3, &end), Ok(()));
        assert_eq!(check_device_error_count(4, &end), Ok(()));
        let e = check_device_error_count(1, &end).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the witness lost 2 acknowledged writes: this run cannot be judged \
             (the agent handed over 3 acknowledgements before its device error, the ledger holds 1)"
        );
    }

    #[test]
    fn a_ledger_of_another_format_version_is_named_as_such() {
        let mut old = Vec::from(*b"PPLEDGR1");
        old.extend_from_slice(&7u64.to_le_bytes());
        let e = scan(&old, |_, _| {}).unwrap_err();
        assert_eq!(e, LedgerError::OtherVersion { found: '1' });
        assert_eq!(
            e.to_string(),
            "ledger format 1 was written by another plugpull version (this one reads format 2): \
             verify it with the plugpull that wrote it"
        );
    }

    #[test]
    fn only_the_errors_a_failing_device_gives_are_device_errors() {
        let device: Vec<i32> = (0..200).filter(|&e| is_device_errno(e)).collect();
        let mut want = vec![
            libc::EIO,
            libc::ENXIO,
            libc::ENODEV,
            libc::ENOSPC,
            libc::EROFS,
            libc::ESHUTDOWN,
        ];
        want.sort();
        assert_eq!(device, want);
        for e in [
            libc::EINVAL,
            libc::EBADF,
            libc::EFBIG,
            libc::EDQUOT,
            libc::EPERM,
        ] {
            assert!(!is_device_errno(e), "errno {e}");
        }
    }

    fn ledger_of(batches: &[Vec<(u64, u64)>]) -> (Vec<u8>, Vec<Entry>) {
        let mut entries = vec![Entry::Manifest(Box::new(Manifest {
            host: "p".into(),
            started_unix_ms: 0,
            tool_version: "t".into(),
            workload: Workload::Pgbench(PgManifest::default()),
            boot_id: String::new(),
            listener_order: 0,
            listener_created_unix_ms: 0,
        }))];
        for (i, b) in batches.iter().enumerate() {
            entries.push(Entry::Acks(AckBatch {
                batch: i as u64 + 1,
                promised: true,
                acks: Acks::File(
                    b.iter()
                        .map(|&(seq, block)| FileAck { seq, block, ms: 1 })
                        .collect(),
                ),
            }));
        }
        let mut out = header(RunId(3)).to_vec();
        for e in &entries {
            encode_entry(e, &mut out);
        }
        (out, entries)
    }

    proptest! {
        /// Arbitrary bytes after a valid header never panic the scanner.
        #[test]
        fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..400)) {
            let mut b = header(RunId(1)).to_vec();
            b.extend_from_slice(&tail);
            let _ = scan(&b, |_, _| {});
        }

        /// A ledger cut anywhere reads back as a prefix of its entries, never as
        /// something else; a cut inside the manifest is refused.
        #[test]
        fn truncation_yields_a_prefix(batches in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u64>()), 1..20), 0..6), cut in any::<prop::sample::Index>()) {
            let (bytes, entries) = ledger_of(&batches);
            let at = cut.index(bytes.len() + 1);
            let mut got = Vec::new();
            match scan(&bytes[..at], |_, e| got.push(e)) {
                Ok((_, tail)) => {
                    prop_assert_eq!(&got[..], &entries[..got.len()]);
                    if at == bytes.len() { prop_assert_eq!(tail, Tail::Clean); prop_assert_eq!(got.len(), entries.len()); }
                }
                Err(e) => prop_assert!(matches!(e, LedgerError::BadHeader | LedgerError::NoManifest | LedgerError::OtherVersion { .. }), "{e}"),
            }
        }

        /// One flipped byte is never read as a different valid entry.
        #[test]
        fn a_flipped_byte_is_detected(batches in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u64>()), 1..20), 1..6), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let (mut bytes, entries) = ledger_of(&batches);
            let at = HEADER_LEN + pos.index(bytes.len() - HEADER_LEN);
            bytes[at] ^= 1 << bit;
            let mut got = Vec::new();
            if scan(&bytes, |_, e| got.push(e)).is_ok() {
                // Accepted only as a torn tail of the last entry: everything before it is intact.
                prop_assert_eq!(got.len(), entries.len() - 1);
                prop_assert_eq!(&got[..], &entries[..got.len()]);
            }
        }
    }
}
