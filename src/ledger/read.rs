//! Reading a run's ledger as it arrives: [`LedgerReader`] scans each chunk
//! ([`Scanner`]), folds each batch the first time its number is seen ([`Fold`]) and,
//! at the end, applies [`RunLedger::from_bytes`]'s checks in their order. Its memory
//! is that of the fold (per block, per millisecond, per batch), not the ledger's.

use super::run::{FileAcks, RunLedger, RunLedgerError};
use super::FilesAcks;
use super::{
    check_device_error_count, fingerprint, AckBatch, AckClock, AckTable, Acks, BatchRecord,
    Batches, DeviceError, Entry, Manifest, PgRanges, RunSummary, Scanner, Tail, TornTail, Workload,
};
use crate::schedule::Unsafe;
use crate::RunId;

/// A run's acknowledgements folded batch by batch: the batches' metadata, the
/// acknowledgement times per millisecond, a file run's table per block, a files
/// run's steps checked against its schedule ([`FilesAcks`]) and a pgbench run's ranges.
#[derive(Debug)]
pub(super) struct Fold {
    batches: Batches,
    clock: AckClock,
    pg_clock: AckClock,
    file_acks: Option<FileAcks>,
    files_acks: Option<FilesAcks>,
    pg_ranges: PgRanges,
}

impl Fold {
    /// An empty fold for the run `manifest` describes.
    pub(super) fn new(manifest: &Manifest) -> Fold {
        let file_acks = match &manifest.workload {
            Workload::File(fm) => Some(FileAcks {
                table: AckTable::new(fm.blocks()),
                beyond: None,
            }),
            _ => None,
        };
        let files_acks = match &manifest.workload {
            Workload::Files(fm) => Some(FilesAcks::new(
                fm.seed,
                fm.jobs,
                fm.files,
                Unsafe {
                    dirsync: fm.skip_dirsync,
                    presync: fm.skip_presync,
                },
            )),
            _ => None,
        };
        Fold {
            batches: Batches::default(),
            clock: AckClock::default(),
            pg_clock: AckClock::default(),
            file_acks,
            files_acks,
            pg_ranges: PgRanges::default(),
        }
    }

    /// Folds batch `b` (its first copy in the ledger).
    pub(super) fn batch(&mut self, b: AckBatch) {
        // The cut of a stalled run is put at the latest-sealed batch's oldest write
        // in flight: the clocks keep the second before it per millisecond.
        if self.batches.last_sealed_ms.is_none_or(|s| b.sealed_ms >= s) {
            self.clock.pin(b.oldest_in_flight_ms);
            self.pg_clock.pin(b.oldest_in_flight_ms);
        }
        self.batches.add(&b);
        match &b.acks {
            Acks::File(v) => {
                self.clock.add_each(v.iter().map(|a| a.ms));
                for a in v {
                    if let Some(f) = &mut self.file_acks {
                        if !f.table.add(a.seq, a.block, a.ms) && f.beyond.is_none() {
                            f.beyond = Some(a.block);
                        }
                    }
                }
            }
            Acks::Files(v) => {
                self.clock.add_each(v.iter().map(|a| a.ms));
                if let Some(f) = &mut self.files_acks {
                    v.iter().for_each(|a| f.add(a));
                }
            }
            Acks::Pg(v) => {
                for r in v {
                    self.pg_clock.add(r.ms, (r.last + 1).wrapping_sub(r.first));
                }
                self.pg_ranges.add(&b);
            }
        }
    }

    /// The ledger of run `run` with `manifest`, holding what was folded; its end is
    /// left for the reader to set.
    pub(super) fn into_ledger(self, run: RunId, manifest: Manifest) -> RunLedger {
        RunLedger {
            run,
            manifest,
            batches: self.batches,
            clock: self.clock,
            pg_clock: self.pg_clock,
            file_acks: self.file_acks,
            files_acks: self.files_acks,
            pg_ranges: self.pg_ranges,
            finished: false,
            lost_ms: None,
            end_flushes: None,
            device_error: None,
            acks_after_error: 0,
            chosen: String::new(),
            witness_stopped: None,
        }
    }
}

/// What the entries read so far said, before the ledger's checks.
#[derive(Debug, Default)]
struct Seen {
    manifest: Option<(Manifest, Fold)>,
    record: BatchRecord,
    finished: Option<RunSummary>,
    invalid: Option<String>,
    device_error: Option<DeviceError>,
    acks_after_error: u64,
}

impl Seen {
    /// Takes in the entry whose payload is `payload`.
    fn entry(&mut self, payload: &[u8], e: Entry) {
        match e {
            // A later manifest (the listener writes one) replaces the first, as the
            // batches folded under it stay.
            Entry::Manifest(m) => match &mut self.manifest {
                Some((first, _)) => *first = *m,
                None => {
                    let fold = Fold::new(&m);
                    self.manifest = Some((*m, fold));
                }
            },
            Entry::Acks(b) => {
                let n = b.acks.count();
                if self.device_error.is_some() {
                    self.acks_after_error += n;
                }
                if self.record.add(b.batch, fingerprint(payload), n) {
                    if let Some((_, fold)) = &mut self.manifest {
                        fold.batch(b);
                    }
                }
            }
            Entry::Finished(s) => self.finished = Some(s),
            Entry::DeviceError(d) => self.device_error = Some(d),
            Entry::Invalid { error } => self.invalid = Some(error),
        }
    }
}

/// A run's ledger read as the listener sends it, chunk by chunk
/// ([`LedgerReader::push`]), then checked ([`LedgerReader::finish`]): the same
/// ledger, checks, errors and messages as [`RunLedger::from_bytes`] of the whole.
#[derive(Debug)]
pub struct LedgerReader {
    run: RunId,
    scanner: Scanner,
    seen: Seen,
}

impl LedgerReader {
    /// A reader of the ledger of run `run` (the run asked for).
    pub fn new(run: RunId) -> LedgerReader {
        LedgerReader {
            run,
            scanner: Scanner::default(),
            seen: Seen::default(),
        }
    }

    /// Reads the next chunk of the ledger file.
    ///
    /// Errors: [`RunLedgerError::Unreadable`] when the bytes so far are not a
    /// readable ledger, whatever follows (the reader is then done).
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), RunLedgerError> {
        let seen = &mut self.seen;
        let mut f = |_: u64, payload: &[u8], e: Entry| seen.entry(payload, e);
        let run = self.run;
        self.scanner
            .push(chunk, &mut f)
            .map_err(|source| RunLedgerError::Unreadable { run, source })
    }

    /// Ends the ledger, with the `torn` tails the listener cut off it when it
    /// restarted, and checks it (the module list of [`RunLedger`]'s).
    ///
    /// Errors: [`RunLedgerError`], the first check that fails.
    pub fn finish(self, torn: &[TornTail]) -> Result<RunLedger, RunLedgerError> {
        let run = self.run;
        let (id, tail) = self
            .scanner
            .finish()
            .map_err(|source| RunLedgerError::Unreadable { run, source })?;
        if id != run {
            return Err(RunLedgerError::OtherRun {
                asked: run,
                sent: id,
            });
        }
        if let Tail::Torn { valid_len, .. } = tail {
            return Err(RunLedgerError::TornTail { run, valid_len });
        }
        let seen = self.seen;
        if let Some(error) = seen.invalid {
            return Err(RunLedgerError::WitnessFault { run, error });
        }
        let loss = |source| RunLedgerError::WitnessLoss { run, source };
        let record = seen
            .record
            .check(seen.finished.as_ref(), torn)
            .map_err(loss)?;
        if let Some(end) = &seen.device_error {
            check_device_error_count(record.acks, end).map_err(loss)?;
        }
        let (manifest, fold) = seen.manifest.expect("scan guarantees a manifest");
        let finished = seen.finished;
        Ok(RunLedger {
            end_flushes: finished
                .as_ref()
                .and_then(|f| f.flushes.clone())
                .or_else(|| seen.device_error.as_ref().and_then(|d| d.flushes.clone())),
            finished: finished.is_some(),
            lost_ms: finished.as_ref().and_then(|f| f.lost_ms),
            device_error: seen.device_error,
            acks_after_error: seen.acks_after_error,
            ..fold.into_ledger(run, manifest)
        })
    }
}
