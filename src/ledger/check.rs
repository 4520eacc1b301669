//! What verify checks in the witness's record itself, before it judges the target:
//! that no acknowledged batch is missing or contradicted ([`check_record`]), that a
//! run a device error ended holds every acknowledgement the agent handed over
//! ([`check_device_error_count`]), and which errors are a device's ([`is_device_errno`]).

use super::prints::Prints;
use super::{AckBatch, DeviceError, RunSummary, TornTail, ENTRY_HEADER_LEN};

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
/// recorded twice (same number, same contents) from `batches`, keeping ledger order:
/// [`BatchRecord`] over a list held whole.
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
    let mut record = BatchRecord::default();
    batches.retain(|b| {
        let mut payload = Vec::new();
        super::encode_entry(&super::Entry::Acks(b.clone()), &mut payload);
        record.add(
            b.batch,
            fingerprint(&payload[ENTRY_HEADER_LEN..]),
            b.acks.count(),
        )
    });
    record.check(finished, torn)
}

/// The fingerprint of an entry's payload (its bytes after length and CRC) that tells
/// two copies of a batch apart: `(length in bytes, 64-bit SipHash)` — std's
/// `DefaultHasher` with its fixed keys, so two different copies of one length pass
/// as the same with a chance of about 2⁻⁶⁴ (a CRC-32, 2⁻³², was judged too weak for
/// the record's one check that needs the copies' contents).
pub fn fingerprint(payload: &[u8]) -> (usize, u64) {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write(payload);
    (payload.len(), h.finish())
}

/// [`check_record`] for a ledger read as it streams: each batch is added as it is
/// read ([`BatchRecord::add`] says whether it is the first copy, the one to keep),
/// then [`BatchRecord::check`] applies the rules. Memory: a fingerprint per
/// distinct batch (12 bytes in a table indexed by batch number), never the
/// acknowledgements.
#[derive(Clone, Debug, Default)]
pub struct BatchRecord {
    /// Batch number → the fingerprint of its first copy.
    seen: Prints,
    duplicates: u64,
    /// The first batch recorded twice with different fingerprints.
    conflict: Option<u64>,
    /// Acknowledgements in the distinct batches.
    acks: u64,
}

impl BatchRecord {
    /// Adds batch number `batch` holding `acks` acknowledgements, whose entry's
    /// payload has [`fingerprint`] `print`. Returns whether it is the first copy of
    /// that number (a later copy is counted as a duplicate, or a conflict when its
    /// fingerprint differs, and is not to be used).
    pub fn add(&mut self, batch: u64, print: (usize, u64), acks: u64) -> bool {
        match self.seen.get(batch) {
            Some(first) => {
                if first != print && self.conflict.is_none() {
                    self.conflict = Some(batch);
                }
                self.duplicates += 1;
                false
            }
            None => {
                self.seen.put(batch, print);
                self.acks += acks;
                true
            }
        }
    }

    /// Applies [`check_record`]'s rules to the batches added.
    ///
    /// Errors: as [`check_record`].
    pub fn check(
        self,
        finished: Option<&RunSummary>,
        torn: &[TornTail],
    ) -> Result<RecordCheck, WitnessLoss> {
        let acks = self.acks;
        let duplicates = self.duplicates;
        let lost = finished
            .and_then(|f| f.acknowledged.checked_sub(acks))
            .filter(|&n| n > 0);
        let fail = |evidence: String| Err(WitnessLoss { lost, evidence });
        if let Some(b) = self.conflict {
            return fail(format!(
                "batch {b} is recorded twice with different contents"
            ));
        }
        let mut prev = 0;
        for n in self.seen.numbers() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::*;

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
            flushes: None,
            canary: Default::default(),
            sealed_ms: 0,
            oldest_in_flight_ms: None,
        }
    }

    fn fin(acknowledged: u64) -> RunSummary {
        RunSummary {
            issued: acknowledged,
            acknowledged,
            duration_ms: 1,
            flushes: None,
            lost_ms: None,
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
        // The first conflict in ledger order is named.
        let mut v = vec![b(1, 3), b(2, 1), b(2, 2), b(1, 2)];
        assert_eq!(
            check_record(&mut v, None, &[]).unwrap_err().evidence,
            "batch 2 is recorded twice with different contents"
        );
    }

    #[test]
    fn a_streamed_record_keeps_the_first_copy_and_tells_copies_by_length_and_hash() {
        let mut r = BatchRecord::default();
        assert!(r.add(1, fingerprint(b"abc"), 3));
        assert!(!r.add(1, fingerprint(b"abc"), 3));
        assert!(r.add(2, fingerprint(b"de"), 2));
        assert_eq!(
            r.clone().check(Some(&fin(5)), &[]),
            Ok(RecordCheck {
                acks: 5,
                duplicates: 1
            })
        );
        assert_ne!(fingerprint(b"abc"), fingerprint(b"abd"));
        assert_ne!(fingerprint(b"abc"), fingerprint(b"abc\0"));
        assert!(!r.add(2, fingerprint(b"dx"), 2));
        assert_eq!(
            r.check(None, &[]).unwrap_err().evidence,
            "batch 2 is recorded twice with different contents"
        );
    }

    #[test]
    fn a_loss_the_finished_count_agrees_with_loses_an_unknown_number_not_zero() {
        // Batch 2 is missing and batch 1 conflicts, yet the agent's count equals the
        // ledger's: the record is broken, how many writes it lost is not known.
        let mut v = vec![b(1, 3), b(3, 2)];
        let e = check_record(&mut v, Some(&fin(5)), &[]).unwrap_err();
        assert_eq!(e.lost, None);
        assert_eq!(e.to_string(), "the witness lost acknowledged writes (how many is unknown): this run cannot be judged (batch 2 is missing: batch numbers jump from 1 to 3)");
        let mut v = vec![b(1, 3), b(1, 2)];
        let e = check_record(&mut v, Some(&fin(3)), &[]).unwrap_err();
        assert_eq!(
            (e.lost, e.evidence.as_str()),
            (None, "batch 1 is recorded twice with different contents")
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
}
