//! One run as the store keeps it: the [`Run`] entry (everything known of the run, said
//! once, under the store's one lock), the handle of its live writer ([`RunHandle`]),
//! and what can be asked of that writer ([`Append`]).
//!
//! The entry is filled from the manifest when the run is created, or from the ledger's
//! scan when the listener starts ([`super::recover`]); from then on only the run's
//! writer changes its durable length and highest batch ([`super::commit`]).

use super::StoreError;
use plugpull::ledger::{AckBatch, DeviceError, Manifest, RunSummary};
use plugpull::RunId;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Everything the store knows of one run without reading its ledger.
#[derive(Debug)]
pub(super) struct Run {
    /// Host of the agent (the manifest's `host`).
    pub host: String,
    /// Creation order in this data directory (the manifest's `listener_order`).
    pub order: u64,
    /// The listener's clock when it created the run, ms since the epoch.
    pub created_unix_ms: u64,
    /// The listener's clock at the run's last append (the ledger file's mtime after a
    /// restart), ms since the epoch.
    pub last_append_unix_ms: u64,
    /// The listener's clock when the run's last acknowledgement batch became durable
    /// (not the end entries), ms since the epoch; the last append after a restart.
    pub last_ack_unix_ms: u64,
    /// Highest batch number durable in the ledger (0 before the first).
    pub highest_batch: u64,
    /// Durable length of the ledger file, bytes: what has been confirmed or recovered.
    /// Bytes past it are never served.
    pub len: u64,
    /// True once the run has a `Finished`, `DeviceError` or `Invalid` entry (and for a
    /// damaged ledger).
    pub ended: bool,
    /// Why the ledger cannot be served, if it was found damaged on start.
    pub damaged: Option<String>,
    /// The append error that ended the run's ledger, if one did.
    pub failed: Option<String>,
    /// The run's one writer, while it is registered (see [`super::WRITER_IDLE`]).
    pub writer: Option<Arc<RunHandle>>,
}

impl Run {
    /// A sound run whose ledger holds `manifest` and is `len` bytes long, not ended,
    /// with no batch yet; it appended last at `last_append_unix_ms`.
    pub fn new(manifest: &Manifest, len: u64, last_append_unix_ms: u64) -> Run {
        Run {
            host: manifest.host.clone(),
            order: manifest.listener_order,
            created_unix_ms: manifest.listener_created_unix_ms,
            last_append_unix_ms,
            last_ack_unix_ms: last_append_unix_ms,
            highest_batch: 0,
            len,
            ended: false,
            damaged: None,
            failed: None,
            writer: None,
        }
    }

    /// A run whose ledger is damaged (`why`): never served, never appended to. It keeps
    /// the host and order of its manifest, if that could be read, so "the latest run of
    /// this host" still finds (and refuses) it.
    pub fn damaged(why: String, manifest: Option<&Manifest>) -> Run {
        Run {
            host: manifest.map(|m| m.host.clone()).unwrap_or_default(),
            order: manifest.map_or(0, |m| m.listener_order),
            created_unix_ms: manifest.map_or(0, |m| m.listener_created_unix_ms),
            last_append_unix_ms: 0,
            last_ack_unix_ms: 0,
            highest_batch: 0,
            len: 0,
            ended: true,
            damaged: Some(why),
            failed: None,
            writer: None,
        }
    }

    /// The run, if its ledger can be served. Errors: [`StoreError::Damaged`].
    pub fn sound(&self, run: RunId) -> Result<&Run, StoreError> {
        match &self.damaged {
            Some(why) => Err(StoreError::Damaged {
                run,
                why: why.clone(),
            }),
            None => Ok(self),
        }
    }

    /// Whether a connection holds the run's writer (the store holds one reference).
    pub fn held(&self) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|h| Arc::strong_count(h) > 1)
    }
}

/// An append request to a run's writer.
#[derive(Debug)]
pub enum Append {
    /// A batch of acks.
    Batch(AckBatch),
    /// The end of the run.
    Finished(RunSummary),
    /// The run ended by a device error.
    DeviceError(DeviceError),
    /// The run cannot be judged: a witness fault the agent saw.
    Invalid(String),
    /// No entry; answers with the highest durable batch (used by `ResumeRun`).
    Barrier,
}

/// Answer to an [`Append`]: the run's highest durable batch once the group holding it
/// is durable, or [`StoreError::Failed`] when the append (or an earlier one) failed.
pub type AppendResult = Result<u64, StoreError>;

/// What a run's writer receives: a request and where to answer it.
pub(super) type Request = (Append, oneshot::Sender<AppendResult>);

/// The live writer of one run. The store holds one reference while the writer is
/// registered; each connection bound to the run holds another.
#[derive(Debug)]
pub struct RunHandle {
    /// The run.
    pub run: RunId,
    pub(super) tx: mpsc::UnboundedSender<Request>,
}

impl RunHandle {
    /// Queues `req`; the returned receiver answers after the group's `fdatasync` (its
    /// sender is dropped unanswered if the writer has stopped).
    pub fn append(&self, req: Append) -> oneshot::Receiver<AppendResult> {
        let (tx, rx) = oneshot::channel();
        // If the writer died (I/O error), the dropped sender answers the caller with an error.
        let _ = self.tx.send((req, tx));
        rx
    }
}
