//! The writing half of a connection: answers go out in the order the requests came,
//! each sealed with the session's MAC, as soon as it is ready.
//!
//! The reading half queues a [`Pending`] per answer. Acks are pipelined: the answer to
//! an append waits for the run's writer (its group's `fdatasync`) while later requests
//! are already being read. Answers are flushed only when nothing else is ready, so
//! they batch up under load. A closing answer (an error) ends the connection.

use crate::store::{AppendResult, LedgerFile};
use plugpull::auth::Direction;
use plugpull::wire::{self, ErrorKind, Response};
use plugpull::RunId;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
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
    /// A ledger, read from its file and sent as `LedgerChunk`s with its torn tails
    /// and why the witness stopped recording it (if it did) on the last one.
    Ledger(
        RunId,
        LedgerFile,
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
            Pending::Ledger(run, ledger, torn, stopped) => {
                send_ledger(&mut wr, &mut seal, run, ledger, (torn, stopped)).await?;
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

/// Sends the first `ledger.len` bytes of `run`'s ledger file as sealed `LedgerChunk`s
/// of at most [`LEDGER_CHUNK`] bytes (one empty chunk for an empty ledger), `end` (its
/// torn tails, why the witness stopped recording it) on the last one, then flushes.
/// Reads one chunk at a time, so the listener's memory does not grow with the ledger
/// (a 200 M-acknowledgement ledger is about 2 GB).
///
/// Errors: the file cannot be read to its durable length (the connection closes
/// before the last chunk, so the verifier stops with an error), or the peer is gone.
async fn send_ledger<W: AsyncWrite + Unpin>(
    wr: &mut W,
    seal: &mut Direction,
    run: RunId,
    ledger: LedgerFile,
    end: (Vec<plugpull::ledger::TornTail>, Option<String>),
) -> Result<(), String> {
    let (mut torn, mut stopped) = end;
    let LedgerFile { file, len, path } = ledger;
    let mut file = tokio::fs::File::from_std(file);
    let mut left = len;
    let mut chunk = Vec::with_capacity(LEDGER_CHUNK.min(len as usize));
    loop {
        let n = left.min(LEDGER_CHUNK as u64) as usize;
        chunk.resize(n, 0);
        file.read_exact(&mut chunk)
            .await
            .map_err(|e| format!("cannot read ledger {}: {e}", path.display()))?;
        left -= n as u64;
        let last = left == 0;
        let frame = wire::encode_sealed(
            &Response::LedgerChunk {
                run,
                bytes: std::mem::take(&mut chunk),
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
        if last {
            return wr.flush().await.map_err(|e| e.to_string());
        }
    }
}

/// Largest ledger chunk the listener sends, in bytes.
const LEDGER_CHUNK: usize = 1 << 20;

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
