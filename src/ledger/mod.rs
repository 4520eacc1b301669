//! The listener's ledger: one append-only file per run, the ground truth of what
//! was acknowledged.
//!
//! ## File format (all integers little-endian)
//!
//! ```text
//! offset 0   8 bytes  magic "PPLEDGR6" (the digit is the format version)
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
//!
//! ## Where things are
//!
//! * `manifest.rs` — the run's description: [`Manifest`], [`Workload`],
//!   [`FileManifest`], [`TargetIdentity`], [`PgManifest`], [`PgSettings`],
//!   [`Storage`], [`FlushSample`].
//! * `entry.rs` — what the ledger records after it: [`Entry`], [`AckBatch`] (the one
//!   type that is wire payload, ledger entry and verifier input), [`Acks`],
//!   [`FileAck`], [`PgAckRange`], [`RunSummary`], [`DeviceError`], [`TornTail`].
//! * `format.rs` — the bytes: [`header`], [`encode_entry`], [`scan`] with its torn-tail
//!   rule and [`Scanner`] (the same over chunks), [`Tail`], [`LedgerError`].
//! * `check.rs` — what verify checks in the record itself: [`check_record`] (and
//!   [`BatchRecord`], the same as a ledger streams), [`check_device_error_count`],
//!   [`is_device_errno`].
//! * `gather.rs` — acks on their way into a batch: [`Ack`] as a workload hands one
//!   over, [`Gather`] the next batch's, [`Acks::write_log`] the ack log's lines.
//! * `run.rs` — a run's ledger as verify reads it: [`RunLedger`] (its batches and
//!   acknowledgements folded), [`RunLedger::from_bytes`], [`RunLedgerError`].
//! * `batches.rs` — [`Batches`]: a run's ack batches folded for the cut evidence and
//!   the flush counts.
//! * `read.rs` — [`LedgerReader`]: the ledger read, folded and checked chunk by chunk.
//! * `acks.rs` — [`AckTable`]: a file run's highest acknowledged seq per block.
//! * `clock.rs` — [`AckClock`]: acknowledgements per millisecond of the run.
//! * `pg_ranges.rs` — [`PgRanges`]: a pgbench run's ranges per client, packed.
//! * `prints.rs` — the fingerprint of each batch number's first copy, for
//!   [`BatchRecord`].

mod acks;
mod batches;
mod check;
mod clock;
mod entry;
mod files_acks;
mod format;
mod gather;
mod manifest;
mod pg_ranges;
#[cfg(test)]
pub(crate) use pg_ranges::pg_batch;
mod prints;
mod read;
mod run;

pub use crate::probe::pg::PgSettings;
pub use acks::AckTable;
pub use batches::Batches;
pub use check::{
    check_device_error_count, check_record, fingerprint, is_device_errno, BatchRecord, RecordCheck,
    WitnessLoss,
};
pub use clock::AckClock;
pub use entry::{
    AckBatch, Acks, DeviceError, Entry, FileAck, FilesAck, PgAckRange, RunSummary, TornTail,
    HEARTBEAT_MS,
};
pub(crate) use files_acks::Expect;
pub use files_acks::{FilesAcks, MAX_AHEAD, MAX_AWAITED, MAX_REPLAY_AHEAD};
pub use format::{
    encode_entry, header, scan, LedgerError, Scanner, Tail, ENTRY_HEADER_LEN, HEADER_LEN, MAGIC,
    MAX_COMMIT, MAX_ENTRY,
};
pub use gather::{Ack, Gather};
pub use manifest::{
    CanaryManifest, FileManifest, FilesManifest, FlushSample, Manifest, PgManifest, PgRelation,
    Storage, TargetIdentity, Workload,
};
pub use pg_ranges::{PgRange, PgRanges};
pub use read::LedgerReader;
pub use run::{FileAcks, RunLedger, RunLedgerError};
