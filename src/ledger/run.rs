//! A run's ledger as verify reads it: the bytes the listener sent, scanned, folded and
//! checked as they arrive ([`LedgerReader`], [`RunLedger::from_bytes`]), before any
//! workload judges its target.
//!
//! The checks, in order: every entry's length and CRC ([`scan`](super::scan)); the ledger is the
//! run asked for; no torn tail at its end; no witness fault the agent recorded
//! ([`Entry::Invalid`](super::Entry::Invalid)); the record of acknowledgements is whole
//! ([`check_record`](super::check_record));
//! and a run a device error ended holds every acknowledgement the agent handed over
//! ([`check_device_error_count`](super::check_device_error_count)).

use super::read::{Fold, LedgerReader};
use super::{
    AckBatch, AckClock, AckTable, Batches, DeviceError, FilesAcks, FlushSample, LedgerError,
    Manifest, PgRanges, TornTail, WitnessLoss,
};
use crate::RunId;

/// A fetched and checked ledger: what every workload's verify starts from. Its
/// acknowledgements are folded as the ledger is read ([`LedgerReader`]): per block
/// for a file run, per millisecond for their times, per client for a pgbench run
/// (every range, packed), checked against its schedule for a files run (per worker
/// and per name).
#[derive(Clone, Debug)]
pub struct RunLedger {
    /// The run.
    pub run: RunId,
    /// Its manifest.
    pub manifest: Manifest,
    /// Its ack batches (each recorded once), folded without their
    /// acknowledgements.
    pub batches: Batches,
    /// When its file and files acknowledgements were made (each once).
    pub clock: AckClock,
    /// When its pgbench commits were made (a range's commits at its `ms`).
    pub pg_clock: AckClock,
    /// A file run's acknowledged state per block (`None` for other workloads).
    pub file_acks: Option<FileAcks>,
    /// A files run's acknowledged steps, folded in ledger order (`None` for other
    /// workloads).
    pub files_acks: Option<FilesAcks>,
    /// A pgbench run's ranges per client, in ledger order.
    pub pg_ranges: PgRanges,
    /// Whether the agent finished normally.
    pub finished: bool,
    /// When a finished run saw what it writes go away ([`RunSummary::lost_ms`](super::RunSummary::lost_ms)):
    /// a pgbench run's server crash.
    pub lost_ms: Option<u64>,
    /// The leaf disks' flush counters at the run's end (its `Finished` or
    /// `DeviceError` entry), when recorded.
    pub end_flushes: Option<FlushSample>,
    /// How the run ended, when a device error ended it.
    pub device_error: Option<DeviceError>,
    /// Acknowledgements the ledger holds after its device-error entry (the agent
    /// sends none; any makes the run unverifiable).
    pub acks_after_error: u64,
    /// How the run was chosen, in words (`given with --run`, or the newest run of
    /// the host by the listener's record); empty until the verifier sets it.
    pub chosen: String,
    /// Why the witness stopped recording the run (a failed ledger append: its disk
    /// is full), as the listener said when it sent the ledger; `None` when it did not
    /// (the listener restarted since, or nothing failed).
    pub witness_stopped: Option<String>,
}

/// A file run's acknowledgements folded per block.
#[derive(Clone, Debug)]
pub struct FileAcks {
    /// Per block of the target, the highest acknowledged seq and when.
    pub table: AckTable,
    /// The first acknowledged block at or beyond the target's blocks, in ledger
    /// order (such acks are not in `table`; verify refuses the run).
    pub beyond: Option<u64>,
}

/// Why a run's ledger cannot be judged (verify exits 2). The messages name the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunLedgerError {
    /// The bytes are not a readable ledger ([`LedgerError`]).
    Unreadable {
        /// The run asked for.
        run: RunId,
        /// What is wrong with the bytes.
        source: LedgerError,
    },
    /// The ledger is another run's.
    OtherRun {
        /// The run asked for.
        asked: RunId,
        /// The run the ledger's header names.
        sent: RunId,
    },
    /// The ledger ends in a torn entry.
    TornTail {
        /// The run.
        run: RunId,
        /// Bytes before the torn entry.
        valid_len: u64,
    },
    /// The agent recorded a witness fault ([`Entry::Invalid`](super::Entry::Invalid)).
    WitnessFault {
        /// The run.
        run: RunId,
        /// What the agent saw (starts with `witness fault`).
        error: String,
    },
    /// The witness's record is provably incomplete ([`check_record`](super::check_record),
    /// [`check_device_error_count`](super::check_device_error_count)).
    WitnessLoss {
        /// The run.
        run: RunId,
        /// The inconsistency.
        source: WitnessLoss,
    },
}

impl std::fmt::Display for RunLedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunLedgerError::Unreadable { run, source } => {
                write!(f, "cannot verify run {run}: {source}")
            }
            RunLedgerError::OtherRun { asked, sent } => write!(
                f,
                "listener sent the ledger of run {sent} when asked for run {asked}"
            ),
            RunLedgerError::TornTail { run, valid_len } => write!(
                f,
                "cannot verify run {run}: the ledger the listener sent ends in a torn entry at byte {valid_len}"
            ),
            RunLedgerError::WitnessFault { run, error } => {
                write!(f, "run {run} cannot be judged: {error}")
            }
            RunLedgerError::WitnessLoss { run, source } => write!(f, "run {run}: {source}"),
        }
    }
}

impl std::error::Error for RunLedgerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunLedgerError::Unreadable { source, .. } => Some(source),
            RunLedgerError::WitnessLoss { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl RunLedger {
    /// Reads the ledger file `bytes` of run `run`, with the `torn` tails the listener
    /// cut off it when it restarted, and checks it whole (the module's list): a
    /// [`LedgerReader`] given all of it at once.
    ///
    /// Errors: [`RunLedgerError`], the first check that fails.
    pub fn from_bytes(
        run: RunId,
        bytes: &[u8],
        torn: &[TornTail],
    ) -> Result<RunLedger, RunLedgerError> {
        let mut r = LedgerReader::new(run);
        r.push(bytes)?;
        r.finish(torn)
    }

    /// The ledger of run `run` holding `manifest` and the ack `batches` in that
    /// order, folded as a read ledger folds them, with no check and no end: for
    /// tests and tools that build a ledger in memory.
    pub fn of_batches(run: RunId, manifest: Manifest, batches: Vec<AckBatch>) -> RunLedger {
        let mut f = Fold::new(&manifest);
        for b in batches {
            f.batch(b);
        }
        f.into_ledger(run, manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LedgerReader;
    use crate::ledger::{encode_entry, header, Acks, Entry, FileAck, RunSummary};

    const RUN: RunId = RunId(0x1000_0000_0000_00a7);

    fn acks(batch: u64, n: u64) -> Entry {
        Entry::Acks(AckBatch {
            batch,
            promised: true,
            acks: Acks::File(
                (0..n)
                    .map(|i| FileAck {
                        seq: batch * 100 + i,
                        block: i,
                        ms: 10,
                    })
                    .collect(),
            ),
            flushes: None,
            canary: Default::default(),
            sealed_ms: 0,
            oldest_in_flight_ms: None,
        })
    }

    /// The ledger file of run `run` holding a file manifest, then `entries`.
    fn ledger(run: RunId, entries: &[Entry]) -> Vec<u8> {
        let mut out = header(run).to_vec();
        let m = Manifest::example_file("sut", "/mnt/t.dat", 1 << 20, 4096);
        encode_entry(&Entry::Manifest(Box::new(m)), &mut out);
        for e in entries {
            encode_entry(e, &mut out);
        }
        out
    }

    fn device_error(acknowledged: u64) -> Entry {
        Entry::DeviceError(DeviceError {
            error: "fdatasync after block 1: Input/output error (os error 5)".into(),
            ms: 40,
            issued: 9,
            acknowledged,
            last_seq: 201,
            device: true,
            flushes: None,
        })
    }

    #[test]
    fn a_whole_ledger_reads_into_its_manifest_batches_and_end() {
        let fin = Entry::Finished(RunSummary {
            issued: 5,
            acknowledged: 5,
            duration_ms: 50,
            flushes: None,
            lost_ms: None,
        });
        let bytes = ledger(RUN, &[acks(1, 3), acks(2, 2), acks(2, 2), fin]);
        let l = RunLedger::from_bytes(RUN, &bytes, &[]).unwrap();
        assert_eq!(l.run, RUN);
        assert_eq!(l.manifest.host, "sut");
        // The batch recorded twice is kept once.
        assert_eq!(l.batches.count, 2);
        assert_eq!(l.batches.acks, 5);
        assert!(l.finished);
        assert_eq!((l.device_error, l.acks_after_error), (None, 0));
    }

    #[test]
    fn another_runs_ledger_a_torn_tail_and_a_witness_fault_are_refused_by_name() {
        let other = RunId(7);
        assert_eq!(
            RunLedger::from_bytes(RUN, &ledger(other, &[acks(1, 1)]), &[]).unwrap_err(),
            RunLedgerError::OtherRun {
                asked: RUN,
                sent: other
            }
        );
        let mut torn = ledger(RUN, &[acks(1, 1)]);
        let whole = torn.len() as u64;
        torn.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
        let e = RunLedger::from_bytes(RUN, &torn, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot verify run 10000000000000a7: the ledger the listener sent ends in a torn entry at byte {whole}"
            )
        );
        let fault = Entry::Invalid {
            error: "witness fault: a confirmation below one already given".into(),
        };
        assert_eq!(
            RunLedger::from_bytes(RUN, &ledger(RUN, &[acks(1, 1), fault]), &[])
                .unwrap_err()
                .to_string(),
            "run 10000000000000a7 cannot be judged: witness fault: a confirmation below one already given"
        );
        let mut bad = ledger(RUN, &[acks(1, 1)]);
        bad[3] = b'X';
        assert_eq!(
            RunLedger::from_bytes(RUN, &bad, &[]).unwrap_err(),
            RunLedgerError::Unreadable {
                run: RUN,
                source: LedgerError::BadHeader
            }
        );
    }

    #[test]
    fn a_missing_batch_or_a_short_device_error_count_is_a_witness_loss() {
        let gap = RunLedger::from_bytes(RUN, &ledger(RUN, &[acks(1, 1), acks(3, 1)]), &[]);
        assert!(matches!(
            gap,
            Err(RunLedgerError::WitnessLoss { run: RUN, .. })
        ));
        let short = RunLedger::from_bytes(RUN, &ledger(RUN, &[acks(1, 2), device_error(3)]), &[])
            .unwrap_err();
        assert_eq!(
            short.to_string(),
            "run 10000000000000a7: the witness lost 1 acknowledged writes: this run cannot be judged \
             (the agent handed over 3 acknowledgements before its device error, the ledger holds 2)"
        );
    }

    #[test]
    fn a_ledger_read_in_chunks_folds_as_the_whole_and_keeps_the_first_copy_of_a_batch() {
        let mut beyond = acks(3, 2);
        if let Entry::Acks(b) = &mut beyond {
            if let Acks::File(v) = &mut b.acks {
                v[1].block = 1 << 20; // beyond the target's 256 blocks
            }
        }
        let bytes = ledger(RUN, &[acks(1, 3), acks(2, 2), acks(2, 2), beyond]);
        let whole = RunLedger::from_bytes(RUN, &bytes, &[]).unwrap();
        for size in [1, 7, 64, bytes.len()] {
            let mut r = LedgerReader::new(RUN);
            for c in bytes.chunks(size) {
                r.push(c).unwrap();
            }
            let l = r.finish(&[]).unwrap();
            assert_eq!(l.batches, whole.batches);
            assert_eq!(l.clock, whole.clock);
            let f = l.file_acks.as_ref().unwrap();
            assert_eq!(f.beyond, Some(1 << 20));
            assert_eq!(f.table.acknowledged, 6);
            assert_eq!(
                (f.table.seq(0), f.table.seq(1), f.table.seq(2)),
                (300, 201, 102)
            );
            assert_eq!(f.table.acked_ms(0), Some(10));
        }
        assert_eq!(whole.batches.acks, 7);
        assert_eq!(whole.clock.iter().collect::<Vec<_>>(), vec![(10, 7)]);
        let built = RunLedger::of_batches(RUN, whole.manifest.clone(), Vec::new());
        assert_eq!(
            (
                built.batches.count,
                built.file_acks.unwrap().table.acknowledged
            ),
            (0, 0)
        );
    }

    #[test]
    fn acknowledgements_after_a_device_error_are_counted_for_the_rule() {
        let bytes = ledger(RUN, &[acks(1, 2), device_error(2), acks(2, 3)]);
        let l = RunLedger::from_bytes(RUN, &bytes, &[]).unwrap();
        assert_eq!(l.acks_after_error, 3);
        assert_eq!(l.device_error.as_ref().map(|d| d.acknowledged), Some(2));
        assert!(!l.finished);
    }
}
