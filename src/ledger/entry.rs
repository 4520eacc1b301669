//! The entries a ledger records after the manifest: batches of acknowledgements
//! ([`AckBatch`] — the same type is the wire payload the agent sends, the ledger entry
//! the listener appends and the verifier's input) and how the run ended.

use super::Manifest;
use serde::{Deserialize, Serialize};

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

/// One acknowledged step of a files run: the namespace state it promises for one
/// name, once its last durability call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesAck {
    /// The step's sequence number: `k · jobs + j + 1` for worker `j`'s `k`-th step
    /// (from 0), so each worker's steps are in its schedule's order.
    pub seq: u64,
    /// The file number (the name is `w{f mod jobs}-{f div jobs}`).
    pub file: u32,
    /// Whether the name exists after the step.
    pub exists: bool,
    /// The file's size after the step, in bytes (a multiple of 512).
    pub size: u64,
    /// The newest content seq among the file's records after the step (0: empty or gone).
    pub content_seq: u64,
    /// False when the step skipped a durability call (`--unsafe-steps`): its loss
    /// is then expected, not a failure.
    pub promised: bool,
    /// Milliseconds after the run's start when the step's last durability call returned.
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
    /// Files (namespace) workload acks, one per step.
    Files(Vec<FilesAck>),
}

impl Acks {
    /// Number of acknowledgements (commits for pgbench).
    pub fn count(&self) -> u64 {
        match self {
            Acks::File(v) => v.len() as u64,
            Acks::Pg(v) => v.iter().map(|r| r.last + 1 - r.first).sum(),
            Acks::Files(v) => v.len() as u64,
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
    /// The leaf disks' flush counters when the batch was sealed (after each of its
    /// acks was acknowledged): at most one batch a second carries one; the run's end
    /// ([`RunSummary::flushes`], [`DeviceError::flushes`]) carries the last.
    pub flushes: Option<super::FlushSample>,
    /// Milliseconds after the run's start (the acks' clock) when the agent sealed the
    /// batch. The agent seals a batch with no acks (a heartbeat) when it sealed none
    /// for [`HEARTBEAT_MS`], so the last batch of a run that was cut tells, within
    /// that, when the listener last heard from it: the cut, for the exposure
    /// (`verdict::cut`).
    pub sealed_ms: u32,
    /// The highest volatile-canary record the agent had written when it sealed the
    /// batch (0: none yet, or the run has no canary; `docs/formats.md`, "Canary").
    pub canary: u64,
    /// When the oldest write (or transaction) the agent had in flight when it sealed
    /// the batch was issued, ms after the run's start (`None`: none was). A storage
    /// that hangs before it fails, or a cut while a write waits, shows here as a
    /// write issued long before the batch: the writes stopped then.
    pub oldest_in_flight_ms: Option<u32>,
}

/// Longest time, in ms, between two batches an agent seals while a run goes on: a
/// batch with no acks is sealed after this much silence.
pub const HEARTBEAT_MS: u32 = 100;

/// How a run ended, as the agent reported it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct RunSummary {
    /// Writes (or transactions) issued.
    pub issued: u64,
    /// Acknowledgements the agent made (the ledger holds the confirmed ones).
    pub acknowledged: u64,
    /// Length of the run in milliseconds.
    pub duration_ms: u64,
    /// The leaf disks' flush counters when the run ended, after its last ack (set by
    /// the reporter; `None` when the run has no leaf disk).
    pub flushes: Option<super::FlushSample>,
    /// When the run saw what it writes to go away without a device error, in ms after
    /// the run's start: a pgbench run's first client lost to a server crash (the
    /// server lost power). `None`: the run ended by itself (its `-T`, its count, an
    /// interrupt), so nothing it wrote was in flight at a later cut.
    pub lost_ms: Option<u64>,
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
    /// EROFS, ESHUTDOWN: see [`is_device_errno`](super::is_device_errno)). `false`
    /// (EINVAL, EBADF, EFBIG, EDQUOT, a short write, …) means the run itself went
    /// wrong: then nothing it measured counts and verify refuses it.
    pub device: bool,
    /// The leaf disks' flush counters after the error (set by the reporter; a disk
    /// that went away reads `None`).
    pub flushes: Option<super::FlushSample>,
}

/// A torn tail the listener cut off a run's ledger when it restarted: `bytes` bytes
/// from byte `offset` on (kept beside the ledger as `<run>.ledger.torn-<offset>`).
/// A crash inside a group commit leaves one that held nothing confirmed; storage that
/// lost synced data leaves one that did, so [`check_record`](super::check_record) only
/// lets a run with one pass when the agent's own `Finished` count vouches for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TornTail {
    /// Byte offset in the ledger where the torn tail began (the ledger's length after).
    pub offset: u64,
    /// Bytes cut off.
    pub bytes: u64,
}
