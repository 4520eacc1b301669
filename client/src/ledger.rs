//! Fetching a run's ledger from the listener: the network half of reading a ledger;
//! the scan, fold and checks are the core's ([`LedgerReader`]), chunk by chunk as the
//! listener sends them, so the ledger is never held whole.

use crate::net::{self, NetError};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{LedgerReader, RunLedger};
use plugpull::wire::{ErrorKind, Request, Response};
use plugpull::RunId;

/// Fetches run `run`'s ledger (else the newest run of `host` by the listener's record)
/// and reads it as it arrives ([`LedgerReader`]: scanned, folded, then checked whole).
///
/// Errors: unreachable listener, unknown run, damaged ledger (naming the offset), a
/// witness record that cannot be judged.
pub async fn fetch(
    listener: &str,
    secret: &Secret,
    run: Option<RunId>,
    host: &str,
) -> Result<RunLedger, Error> {
    let (mut r, mut w) = net::connect(listener, secret).await?;
    w.send(&Request::FetchLedger {
        run,
        host: host.to_string(),
    })
    .await?;
    w.flush().await?;
    let mut reader: Option<LedgerReader> = None;
    let (reader, torn, witness_stopped) = loop {
        match r
            .recv_checked()
            .await
            .map_err(|e| unknown_run_hint(e, listener))?
        {
            Response::LedgerChunk {
                run,
                bytes: b,
                last,
                torn,
                witness_stopped,
            } => {
                let r = reader.get_or_insert_with(|| LedgerReader::new(run));
                r.push(&b)?;
                if last {
                    break (
                        reader.unwrap_or_else(|| LedgerReader::new(run)),
                        torn,
                        witness_stopped,
                    );
                }
            }
            other => {
                return Err(Error::Msg(format!(
                    "listener answered FetchLedger with {other:?}"
                )))
            }
        }
    };
    let mut ledger = reader.finish(&torn)?;
    ledger.witness_stopped = witness_stopped;
    Ok(ledger)
}

/// The failure `e` of a ledger fetch from `listener`; a run it does not know names the
/// command that lists the runs it does.
fn unknown_run_hint(e: NetError, listener: &str) -> Error {
    match e {
        NetError::Refused(ErrorKind::UnknownRun, f) => Error::Msg(format!(
            "{f} (`plugpull verify --listener {listener} --history [--host HOST]` lists the runs it holds for this host or HOST)"
        )),
        other => other.failure(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_run_names_the_command_that_lists_the_runs() {
        let refused = |kind| {
            NetError::Refused(
                kind,
                Error::Msg("listener w:1 refused: unknown run 00000000000000ab".into()),
            )
        };
        assert_eq!(
            unknown_run_hint(refused(ErrorKind::UnknownRun), "w:1").to_string(),
            "listener w:1 refused: unknown run 00000000000000ab (`plugpull verify --listener w:1 --history [--host HOST]` lists the runs it holds for this host or HOST)"
        );
        assert_eq!(
            unknown_run_hint(refused(ErrorKind::Live), "w:1").to_string(),
            "listener w:1 refused: unknown run 00000000000000ab"
        );
    }
}
