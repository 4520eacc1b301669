//! Group commit: the one writer task of a run, and the pure encoder it runs on.
//!
//! The writer takes every request queued at that moment (a group, at most
//! [`MAX_GROUP`]), encodes their entries with [`encode_group`], writes them with one
//! positioned write at the run's durable length, calls `fdatasync`, and only then
//! records the new durable length in the run's entry and answers the group. A group
//! with nothing to write (only barriers and batches already held) is answered at once.
//!
//! A failed write or sync is final for the run: the file is cut back to its durable
//! length (so the ledger never holds an entry that was not confirmed), the run is
//! marked failed, and this and every later request is answered with the error.

use super::run::{Append, Request};
use super::{io_msg, Store, StoreError, WRITER_IDLE};
use plugpull::ledger::{self, Entry};
use plugpull::RunId;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Most requests one group takes.
pub const MAX_GROUP: usize = 4096;

/// What a group of appends comes to, once encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    /// The run's highest batch once the group is durable.
    pub highest: u64,
    /// Whether the group ends the run (holds a `Finished`, `DeviceError` or `Invalid`).
    pub ended: bool,
    /// Whether a batch the group wrote holds acks (a heartbeat batch holds none: it
    /// says the agent runs, not that a write was acknowledged).
    pub acked: bool,
}

/// Appends to `out` the ledger entries of `group`, in order, for a run whose highest
/// durable batch is `highest`.
///
/// Batches are idempotent: a batch whose number is not above the highest so far (the
/// ledger's, or one earlier in the group) is skipped, and answered like the others once
/// the group is durable. A [`Append::Barrier`] writes nothing.
pub fn encode_group<'a>(
    mut highest: u64,
    group: impl IntoIterator<Item = &'a Append>,
    out: &mut Vec<u8>,
) -> Encoded {
    let mut ended = false;
    let mut acked = false;
    for req in group {
        match req {
            Append::Batch(b) if b.batch > highest => {
                highest = b.batch;
                acked |= b.acks.count() > 0;
                ledger::encode_entry(&Entry::Acks(b.clone()), out);
            }
            Append::Batch(_) | Append::Barrier => {}
            Append::Finished(s) => {
                ended = true;
                ledger::encode_entry(&Entry::Finished(s.clone()), out);
            }
            Append::DeviceError(e) => {
                ended = true;
                ledger::encode_entry(&Entry::DeviceError(e.clone()), out);
            }
            Append::Invalid(e) => {
                ended = true;
                ledger::encode_entry(&Entry::Invalid { error: e.clone() }, out);
            }
        }
    }
    Encoded {
        highest,
        ended,
        acked,
    }
}

/// The group-commit loop of one run: the run's only writer while it is registered.
/// Ends when it retires (idle for [`WRITER_IDLE`], no connection holding it), or after
/// a failed append once the last connection holding it has let go.
pub(super) async fn writer(
    store: Arc<Store>,
    run: RunId,
    file: File,
    path: PathBuf,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    let file = Arc::new(file);
    let mut buf = Vec::new();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = tokio::time::sleep(WRITER_IDLE) => {
                if store.retire(run, &rx) {
                    return;
                }
                continue;
            }
        };
        let Some(first) = first else { return };
        let mut group = vec![first];
        while let Ok(next) = rx.try_recv() {
            group.push(next);
            if group.len() >= MAX_GROUP {
                break;
            }
        }
        let (highest, len) = store.durable(run);
        buf.clear();
        let done = encode_group(highest, group.iter().map(|(req, _)| req), &mut buf);
        let result = if buf.is_empty() {
            Ok(len)
        } else {
            let data = std::mem::take(&mut buf);
            let (res, data) = write_durably(file.clone(), data, len, store.sync_delay).await;
            let n = data.len() as u64;
            buf = data;
            res.map(|()| len + n)
                .map_err(|e| StoreError::Failed(io_msg("cannot append to ledger", &path, e)))
        };
        match result {
            Ok(len) => {
                store.committed(run, &done, len);
                for (_, reply) in group {
                    let _ = reply.send(Ok(done.highest));
                }
            }
            Err(e) => {
                tracing::error!(%run, error = %e, "ledger append failed; refusing further appends to this run");
                store.fail(run, &e);
                for (_, reply) in group {
                    let _ = reply.send(Err(e.clone()));
                }
                // Answer whatever is still queued or arrives from connections that
                // still hold the handle; ends when the last of them lets go.
                while let Some((_, reply)) = rx.recv().await {
                    let _ = reply.send(Err(e.clone()));
                }
                return;
            }
        }
    }
}

/// Writes `data` at byte `at` of `file` and syncs it (after sleeping `delay`, tests
/// only), off the async threads. On failure the file is cut back to `at`: whatever
/// part of `data` reached it is not durable. Gives `data` back for reuse.
async fn write_durably(
    file: Arc<File>,
    data: Vec<u8>,
    at: u64,
    delay: Duration,
) -> (std::io::Result<()>, Vec<u8>) {
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let r = file.write_all_at(&data, at).and_then(|_| {
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            file.sync_data()
        });
        if r.is_err() {
            let _ = file.set_len(at).and_then(|_| file.sync_data());
        }
        (r, data)
    })
    .await
    .expect("ledger write task panicked")
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugpull::ledger::{AckBatch, Acks, FileAck, RunSummary};

    fn batch(batch: u64) -> AckBatch {
        AckBatch {
            batch,
            promised: true,
            acks: Acks::File(vec![FileAck {
                seq: batch,
                block: batch * 10,
                ms: 7,
            }]),
            flushes: None,
            canary: Default::default(),
            sealed_ms: 0,
            oldest_in_flight_ms: None,
        }
    }

    #[test]
    fn batches_not_above_the_highest_are_skipped_and_the_rest_encoded_in_order() {
        let summary = RunSummary {
            issued: 9,
            acknowledged: 7,
            duration_ms: 1000,
            flushes: None,
            lost_ms: None,
        };
        let group = [
            Append::Batch(batch(4)),
            Append::Batch(batch(5)),
            Append::Batch(batch(6)),
            Append::Barrier,
            Append::Batch(batch(6)),
            Append::Batch(batch(7)),
            Append::Finished(summary.clone()),
        ];
        let mut out = vec![0xAA];
        let done = encode_group(5, &group, &mut out);
        assert_eq!(
            done,
            Encoded {
                highest: 7,
                ended: true,
                acked: true
            }
        );
        let mut want = vec![0xAA];
        ledger::encode_entry(&Entry::Acks(batch(6)), &mut want);
        ledger::encode_entry(&Entry::Acks(batch(7)), &mut want);
        ledger::encode_entry(&Entry::Finished(summary), &mut want);
        assert_eq!(out, want);
        // 1 + two acks entries of 8 + 12 bytes + a Finished entry of 8 + 7 bytes.
        assert_eq!(out.len(), 56);
    }

    #[test]
    fn a_group_of_old_batches_and_barriers_writes_nothing() {
        let group = [
            Append::Barrier,
            Append::Batch(batch(1)),
            Append::Batch(batch(3)),
        ];
        let mut out = Vec::new();
        let done = encode_group(3, &group, &mut out);
        assert_eq!(
            done,
            Encoded {
                highest: 3,
                ended: false,
                acked: false
            }
        );
        assert!(out.is_empty());
    }

    #[test]
    fn a_heartbeat_batch_is_written_but_acknowledges_nothing() {
        let mut beat = batch(4);
        beat.acks = Acks::File(Vec::new());
        let mut out = Vec::new();
        let done = encode_group(3, &[Append::Batch(beat.clone())], &mut out);
        assert_eq!(
            done,
            Encoded {
                highest: 4,
                ended: false,
                acked: false
            }
        );
        let mut want = Vec::new();
        ledger::encode_entry(&Entry::Acks(beat), &mut want);
        assert_eq!(out, want);
    }

    #[test]
    fn device_error_and_invalid_end_the_run() {
        let mut out = Vec::new();
        let e = plugpull::ledger::DeviceError {
            error: "fdatasync after block 7: Input/output error (os error 5)".into(),
            ..Default::default()
        };
        let done = encode_group(0, &[Append::DeviceError(e.clone())], &mut out);
        assert_eq!(
            done,
            Encoded {
                highest: 0,
                ended: true,
                acked: false
            }
        );
        let mut want = Vec::new();
        ledger::encode_entry(&Entry::DeviceError(e), &mut want);
        assert_eq!(out, want);

        out.clear();
        let done = encode_group(2, &[Append::Invalid("witness fault: x".into())], &mut out);
        assert_eq!(
            done,
            Encoded {
                highest: 2,
                ended: true,
                acked: false
            }
        );
        let mut want = Vec::new();
        ledger::encode_entry(
            &Entry::Invalid {
                error: "witness fault: x".into(),
            },
            &mut want,
        );
        assert_eq!(out, want);
    }
}
