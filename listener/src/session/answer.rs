//! The writing half of a connection: answers go out in the order the requests came,
//! each sealed with the session's MAC, as soon as it is ready.
//!
//! The reading half queues a [`Pending`] per answer. Acks are pipelined: the answer to
//! an append waits for the run's writer (its group's `fdatasync`) while later requests
//! are already being read. Answers are flushed only when nothing else is ready, so
//! they batch up under load. A closing answer (an error) ends the connection.

use crate::store::AppendResult;
use plugpull::auth::Direction;
use plugpull::wire::{self, ErrorKind, Response};
use plugpull::RunId;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// An answer to send: ready now, or when a run's writer confirms.
pub(super) enum Pending {
    /// This answer; `true` = close the connection after it.
    Now(Response, bool),
    /// `Confirmed{run, batch}` (or `Resumed` when `resume`) once the writer answers.
    Confirm {
        run: RunId,
        rx: oneshot::Receiver<AppendResult>,
        resume: bool,
        batch: u64,
    },
    /// A ledger, sent as `LedgerChunk`s with its torn tails and why the witness
    /// stopped recording it (if it did) on the last one.
    Ledger(
        RunId,
        Vec<u8>,
        Vec<plugpull::ledger::TornTail>,
        Option<String>,
    ),
}

/// The writing half: sends each answer in order, sealed, once it is ready.
pub(super) async fn answer_in_order<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut seal: Direction,
    mut rx: mpsc::UnboundedReceiver<Pending>,
) -> Result<(), String> {
    while let Some(p) = rx.recv().await {
        let (msg, close) = match p {
            Pending::Now(msg, close) => (msg, close),
            Pending::Confirm {
                run,
                rx,
                resume,
                batch,
            } => confirmation(run, rx.await, resume, batch),
            Pending::Ledger(run, bytes, torn, stopped) => {
                send_ledger(&mut wr, &mut seal, run, &bytes, (torn, stopped)).await?;
                continue;
            }
        };
        wr.write_all(&wire::encode_sealed(&msg, &mut seal))
            .await
            .map_err(|e| e.to_string())?;
        // Flush only when nothing else is ready, so answers batch up under load.
        if rx.is_empty() || close {
            wr.flush().await.map_err(|e| e.to_string())?;
        }
        if close {
            return Err(match msg {
                Response::Error { message, .. } => message,
                _ => "closed".into(),
            });
        }
    }
    wr.flush().await.map_err(|e| e.to_string())
}

/// The answer to an append once its writer has answered (`answer`), and whether the
/// connection closes after it (when the append failed).
fn confirmation(
    run: RunId,
    answer: Result<AppendResult, oneshot::error::RecvError>,
    resume: bool,
    batch: u64,
) -> (Response, bool) {
    match answer {
        Ok(Ok(highest)) if resume => (
            Response::Resumed {
                run,
                confirmed_batch: highest,
            },
            false,
        ),
        Ok(Ok(_)) => (Response::Confirmed { run, batch }, false),
        Ok(Err(e)) => (
            Response::Error {
                kind: e.kind(),
                message: e.to_string(),
            },
            true,
        ),
        Err(_) => (
            Response::Error {
                kind: ErrorKind::Io,
                message: format!("ledger writer of run {run} stopped after an I/O error"),
            },
            true,
        ),
    }
}

/// Sends `run`'s ledger `bytes` as sealed `LedgerChunk`s of at most 1 MiB (one empty
/// chunk for an empty ledger), `end` (its torn tails, why the witness stopped
/// recording it) on the last one, then flushes.
async fn send_ledger<W: AsyncWrite + Unpin>(
    wr: &mut W,
    seal: &mut Direction,
    run: RunId,
    bytes: &[u8],
    end: (Vec<plugpull::ledger::TornTail>, Option<String>),
) -> Result<(), String> {
    let (mut torn, mut stopped) = end;
    const CHUNK: usize = 1 << 20;
    let n = bytes.len().div_ceil(CHUNK).max(1);
    for (i, c) in bytes
        .chunks(CHUNK)
        .chain((bytes.is_empty()).then_some(&[][..]))
        .enumerate()
    {
        let last = i + 1 == n;
        let frame = wire::encode_sealed(
            &Response::LedgerChunk {
                run,
                bytes: c.to_vec(),
                last,
                torn: if last {
                    std::mem::take(&mut torn)
                } else {
                    Vec::new()
                },
                witness_stopped: if last { stopped.take() } else { None },
            },
            seal,
        );
        wr.write_all(&frame).await.map_err(|e| e.to_string())?;
    }
    wr.flush().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_writer_answer_becomes_confirmed_resumed_or_a_closing_io_error() {
        let run = RunId(0x2a);
        assert_eq!(
            confirmation(run, Ok(Ok(7)), false, 5),
            (Response::Confirmed { run, batch: 5 }, false)
        );
        assert_eq!(
            confirmation(run, Ok(Ok(7)), true, 0),
            (
                Response::Resumed {
                    run,
                    confirmed_batch: 7
                },
                false
            )
        );
        let failed = "cannot append to ledger /d/x.ledger: No space left on device (os error 28)";
        assert_eq!(
            confirmation(run, Ok(Err(StoreError::Failed(failed.into()))), false, 5),
            (
                Response::Error {
                    kind: ErrorKind::Io,
                    message: failed.into()
                },
                true
            )
        );
        let (tx, rx) = oneshot::channel::<AppendResult>();
        drop(tx);
        let gone = rx.blocking_recv();
        assert_eq!(
            confirmation(run, gone, false, 5),
            (
                Response::Error {
                    kind: ErrorKind::Io,
                    message: "ledger writer of run 000000000000002a stopped after an I/O error"
                        .into()
                },
                true
            )
        );
    }
}
