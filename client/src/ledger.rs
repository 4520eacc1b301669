//! Fetching a run's ledger from the listener: the network half of reading a ledger;
//! the checks are the core's ([`RunLedger::from_bytes`]).

use crate::net;
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::RunLedger;
use plugpull::wire::{Request, Response};
use plugpull::RunId;

/// Fetches run `run`'s ledger (else the newest run of `host` by the listener's record)
/// and checks it whole ([`RunLedger::from_bytes`]).
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
    let mut bytes = Vec::new();
    let (run, torn, witness_stopped) = loop {
        match r.recv().await? {
            Response::LedgerChunk {
                run,
                bytes: b,
                last,
                torn,
                witness_stopped,
            } => {
                bytes.extend_from_slice(&b);
                if last {
                    break (run, torn, witness_stopped);
                }
            }
            other => {
                return Err(Error::Msg(format!(
                    "listener answered FetchLedger with {other:?}"
                )))
            }
        }
    };
    let mut ledger = RunLedger::from_bytes(run, &bytes, &torn)?;
    ledger.witness_stopped = witness_stopped;
    Ok(ledger)
}
