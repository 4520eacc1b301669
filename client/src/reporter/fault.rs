//! Witness faults of the reporter task: which connection failures are faults, the
//! message of a confirmation that cannot be true, and ending the run on a fault
//! (writers stop; the run is marked invalid in the ledger if the listener can still
//! record that).

use super::outbox::BadConfirm;
use super::task::{Ctrl, Reply, Step, Task};
use super::WITNESS_FAULT;
use crate::net::{self, NetError};
use crate::Error;
use plugpull::wire::Request;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Sorts a failure from the connection: lost (reconnect) or a witness fault.
pub(super) fn step_of(e: NetError) -> Step {
    use plugpull::wire::ErrorKind::{Busy, Protocol};
    match e {
        // A refusal for a protocol slip (e.g. an idle timeout) or a full listener: a new
        // connection may work. Ledger, token, run and MAC refusals are faults.
        NetError::Lost(f) | NetError::Refused(Busy | Protocol, f) => Step::Lost(f),
        NetError::Refused(plugpull::wire::ErrorKind::Io, Error::Msg(m)) => {
            Step::Fault(Error::WitnessUnrecorded(m))
        }
        NetError::Refused(_, f) | NetError::Forged(f) => Step::Fault(f),
    }
}

impl Task {
    /// The message of a listener's confirmation that cannot be true.
    pub(super) fn bad_confirm(&self, e: BadConfirm, what: &str) -> Error {
        Error::WitnessFault(match e {
            BadConfirm::Regressed { batch, told } => format!(
                "{WITNESS_FAULT}: listener {} answered {what} for batch {batch} of run {}, after it had confirmed batch {told}: it lost acknowledgements it had made durable",
                self.addr, self.run
            ),
            BadConfirm::Unsent { batch, highest } => format!(
                "{WITNESS_FAULT}: listener {} answered {what} for batch {batch} of run {}, but only batches up to {highest} were sent",
                self.addr, self.run
            ),
        })
    }

    /// Ends the run on a witness fault: writers stop, the run is marked invalid in
    /// the ledger if the listener can still record that, and the end of the run
    /// (now, or when it is asked for) answers with the fault.
    pub(super) async fn fault(&mut self, step: Step, reply: Option<Reply>) {
        let (Step::Fault(f) | Step::Lost(f)) = step else {
            unreachable!("fault() is called with a failure")
        };
        self.shared.failed.store(true, Ordering::Relaxed);
        eprintln!("{f}; stopping the run");
        let error = match &f {
            Error::WitnessUnrecorded(_) => None,
            Error::WitnessFault(m) => Some(m.clone()),
            other => Some(format!("{WITNESS_FAULT}: {other}")),
        };
        if let Some(error) = error {
            self.mark_invalid(error).await;
        }
        let reply = match reply {
            Some(r) => Some(r),
            None => match self.ctrl.recv().await {
                Some(Ctrl::Finish(_, r) | Ctrl::DeviceError(_, r)) => Some(r),
                None => None,
            },
        };
        if let Some(r) = reply {
            let _ = r.send(Err(f));
        }
    }

    /// Tries, over a new connection and for at most 2 s, to record in the ledger that
    /// the run is invalid because of `error`; says on stderr how that went.
    pub(super) async fn mark_invalid(&self, error: String) {
        let mark = async {
            let (mut r, mut w) = net::connect(&self.addr, &self.secret).await?;
            w.send(&Request::ResumeRun {
                run: self.run,
                token: self.token,
            })
            .await?;
            w.send(&Request::Invalidate {
                run: self.run,
                error,
            })
            .await?;
            w.flush().await?;
            r.recv().await?;
            r.recv().await
        };
        match tokio::time::timeout(Duration::from_secs(2), mark).await {
            Ok(Ok(_)) => eprintln!("run {} is marked invalid in the ledger", self.run),
            Ok(Err(e)) => {
                eprintln!("could not mark run {} invalid in the ledger: {e}", self.run)
            }
            Err(_) => eprintln!(
                "could not mark run {} invalid in the ledger: no answer within 2 s",
                self.run
            ),
        }
    }
}
