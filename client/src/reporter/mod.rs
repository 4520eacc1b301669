//! The agent's reporter: carries acknowledgements to the listener without ever
//! putting a network round trip between two writes.
//!
//! Workload threads hand each ack to an [`AckSink`] (a queue of the thread's own,
//! `lanes`: it never blocks). One task batches what arrives within [`LINGER`] (up to [`BATCH_MAX`] acks), sends
//! batches back to back without waiting, and counts an ack as acknowledged only when
//! the listener answers `Confirmed` for its batch, which it does after its ledger's
//! `fdatasync`. If the connection breaks, the task reconnects (250 ms after each failed
//! attempt), sends `ResumeRun`, drops the batches the listener already holds and
//! resends the rest (batches are idempotent by number). Writers pause, with a message on stderr,
//! while more than `--max-unconfirmed` acks wait for confirmation or the listener
//! has confirmed nothing for `--max-unconfirmed-secs` while acks wait, so a run never
//! goes on unwitnessed for long; after [`STALL_WARNING`] without a confirmation the
//! reporter says so.
//!
//! Witness faults end the run (exit 2), never a reconnect: a frame that fails its MAC
//! (forged or altered on the way), a `Confirmed`/`Resumed` below what the listener
//! had already confirmed (it lost what it had made durable) or above what was sent,
//! and a listener that cannot write its ledger (ENOSPC, EIO). Writers stop
//! ([`AckSink::failed`]); the reporter tries to mark the run invalid in the ledger
//! over a new connection, so `verify` refuses it too.
//!
//! On SIGINT, the end of the run (`finish`/`invalidate`) gets [`INTERRUPT_GRACE`]
//! to be confirmed, then gives up with a failure.
//!
//! * this module — the public face: [`Reporter`] (start, finish, device error), its
//!   options, the stall watch.
//! * `sink` — [`AckSink`], what workload threads hand acks to, and the counters that
//!   tell writers to pause.
//! * `lanes` — the hand-over from sinks to the task: a queue per sink, and how the
//!   task is woken.
//! * `outbox` — the pure batching, resend and idempotency state machine.
//! * `task` — the connect, resume and reconnect loop that drives the outbox.
//! * `fault` — witness faults: which failures are faults, and ending the run on one.

mod fault;
mod lanes;
mod outbox;
mod sink;
mod task;

pub use sink::AckSink;

use crate::net;
use crate::Error;
use outbox::Outbox;
use plugpull::auth::Secret;
use plugpull::ledger::{DeviceError, Manifest, RunSummary};
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use sink::Shared;
use std::sync::Arc;
use std::time::{Duration, Instant};
use task::{Ctrl, Task};
use tokio::sync::{mpsc, oneshot};

/// How long the reporter waits for more acks before sending a batch that is not
/// full: a few ms of confirmation latency buy far fewer frames and ledger syncs
/// (one per commit otherwise, for pgbench).
pub const LINGER: Duration = Duration::from_millis(2);
/// Most acks in one batch.
pub const BATCH_MAX: usize = 8192;
/// Most acks handed over but not yet confirmed before writers pause.
/// Default of `--max-unconfirmed` for the file workload.
pub const FILE_MAX_UNCONFIRMED: u64 = 1_000_000;
/// Default of `--max-unconfirmed` for the files workload: small, because the
/// verifier allows this many steps (+ 2) per worker after its last confirmed one to
/// have happened unconfirmed, and a long window explains away more losses; 16 still
/// keeps a few workers pipelined (no round trip between two steps).
pub const FILES_MAX_UNCONFIRMED: u64 = 16;
/// Default of `--max-unconfirmed` for the pgbench workload.
pub const PG_MAX_UNCONFIRMED: u64 = 100_000;
/// How long `finish` keeps trying to reach a listener that went away.
pub const FINISH_DEADLINE: Duration = Duration::from_secs(60);
/// After how long without a confirmation (while acks wait) the reporter warns.
pub const STALL_WARNING: Duration = Duration::from_secs(2);
/// Default of `--max-unconfirmed-secs`.
pub const MAX_UNCONFIRMED_SECS: f64 = 5.0;
/// How long the end of the run may take after SIGINT.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(1);
/// Prefix of the error a witness fault records in the ledger as `Invalid`.
pub const WITNESS_FAULT: &str = "witness fault";

/// A running reporter for one run.
pub struct Reporter {
    canary: crate::canary::Canary,
    sink: AckSink,
    ctrl: mpsc::UnboundedSender<Ctrl>,
    task: tokio::task::JoinHandle<()>,
}

/// Reporter settings beyond the listener's address.
#[derive(clap::Args, Debug, Clone)]
pub struct ReporterOptions {
    /// Append every ack the listener confirmed to this file, one per line
    /// (`seq block` for file runs, `seq file size content_seq` for files runs,
    /// `client first last` for pgbench ranges): the agent's own record, to compare
    /// with the ledger.
    #[arg(long)]
    pub ack_log: Option<std::path::PathBuf>,
    /// Pause writing while more than this many acks await the listener's confirmation
    /// [default: 1000000 for file runs; 16 for files runs, where it bounds the steps
    /// the verifier allows in flight; 100000 for pgbench, where it also bounds which
    /// sequence numbers can exist after a cut]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unconfirmed: Option<u64>,
    /// Also pause writing while acks wait and the listener has confirmed nothing for
    /// this many seconds (a warning comes after 2 s)
    #[arg(long, value_parser = plugpull::units::non_negative_secs, default_value_t = MAX_UNCONFIRMED_SECS)]
    pub max_unconfirmed_secs: f64,
    /// Write the run's volatile canary (records with no durability call, read back
    /// after the cut to tell a power loss from a clean shutdown) in this directory, on
    /// a persistent local filesystem of the host whose power is cut [default: a file
    /// target's directory, a files run's directory's parent (the directory itself when
    /// it is a mount point); none for a block device or pgbench, whose PASS is then
    /// not measured unless a device error was the cut]
    #[arg(long, value_name = "DIR")]
    pub canary_dir: Option<std::path::PathBuf>,
}

impl ReporterOptions {
    /// `--max-unconfirmed`, or `default` when it was not given.
    pub fn max_unconfirmed_or(&self, default: u64) -> u64 {
        self.max_unconfirmed.unwrap_or(default)
    }
}

impl Reporter {
    /// Connects to `listener`, starts a run described by `manifest` and returns the
    /// reporter and the run id the listener assigned. The manifest's `promised` flag
    /// (pgbench) marks whether these acks are durability promises.
    ///
    /// Errors: the listener cannot be reached or refuses; the ack log cannot be created.
    pub async fn start_with(
        listener: &str,
        secret: &Secret,
        mut manifest: Manifest,
        opts: &ReporterOptions,
    ) -> Result<(Reporter, RunId), Error> {
        let mut canary =
            crate::canary::Canary::create(opts.canary_dir.as_deref(), &manifest.workload)?;
        manifest.canary = canary.manifest();
        if manifest.canary.files.is_empty() {
            eprintln!(
                "warning: this run has no volatile canary ({}): only a device error can make its cut count, and a PASS after a power cut will be NOT MEASURED",
                manifest.canary.none_because
            );
        }
        let empty = plugpull::ledger::Acks::empty_for(&manifest.workload);
        let ack_log = match &opts.ack_log {
            Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
                |e| Error::Msg(format!("cannot create ack log {}: {e}", p.display())),
            )?)),
            None => None,
        };
        let (promised, max_unconfirmed) = match &manifest.workload {
            plugpull::ledger::Workload::Pgbench(p) => {
                (p.promised, opts.max_unconfirmed_or(PG_MAX_UNCONFIRMED))
            }
            plugpull::ledger::Workload::File(_) => {
                (true, opts.max_unconfirmed_or(FILE_MAX_UNCONFIRMED))
            }
            // Each files ack says itself whether it was promised.
            plugpull::ledger::Workload::Files(f) => (true, f.max_unconfirmed),
        };
        let counters = crate::storage::FlushCounters::new(manifest.storage.disks.clone());
        let flush_clock = crate::storage::FlushClock::new(counters.clone());
        let (mut r, mut w) = net::connect(listener, secret).await?;
        w.send(&Request::StartRun {
            manifest: Box::new(manifest),
        })
        .await?;
        w.flush().await?;
        let (run, token) = match r.recv().await? {
            Response::RunStarted { run, token } => (run, token),
            other => {
                return Err(Error::Msg(format!(
                    "listener answered StartRun with {other:?}"
                )))
            }
        };
        let shared = Arc::new(Shared::new(
            max_unconfirmed,
            opts.max_unconfirmed_secs,
            counters,
        ));
        tokio::spawn(watch(Arc::downgrade(&shared)));
        let start = shared.start;
        canary.start(move || start.elapsed().as_millis() as u64);
        let lanes = Arc::new(lanes::Lanes::default());
        let lane = lanes.open();
        let (ctrl, ctrl_rx) = mpsc::unbounded_channel();
        let state = Task {
            addr: listener.to_string(),
            secret: secret.clone(),
            run,
            token,
            shared: shared.clone(),
            outbox: Outbox::new(promised),
            ack_log,
            lanes,
            taken: Vec::new(),
            ctrl: ctrl_rx,
            ending: None,
            ending_sent: false,
            acks_open: true,
            abandoned: false,
            linger_until: None,
            poll_at: None,
            near_bound: false,
            flush_clock,
            canary: canary.issued(),
            empty,
            last_batch: tokio::time::Instant::now(),
        };
        let task = tokio::spawn(state.run(net::into_polled(r, w)?));
        Ok((
            Reporter {
                canary,
                sink: AckSink { lane, shared },
                ctrl,
                task,
            },
            run,
        ))
    }

    /// A sink for workload threads.
    pub fn sink(&self) -> AckSink {
        self.sink.clone()
    }

    /// Sends every queued ack and the run's summary, waits until the listener confirmed
    /// all of them, and returns how many acks it confirmed.
    ///
    /// Errors: the listener stayed unreachable for [`FINISH_DEADLINE`].
    pub async fn finish(mut self, summary: RunSummary) -> Result<u64, Error> {
        self.canary.stop();
        let (tx, rx) = oneshot::channel();
        let _ = self.ctrl.send(Ctrl::Finish(summary, tx));
        self.wait(rx).await
    }

    /// Records in the ledger that the run ended by a device error, after sending every
    /// queued ack (all were handed over before the error); returns the confirmed count.
    ///
    /// Errors: the listener stayed unreachable for [`FINISH_DEADLINE`].
    pub async fn device_error(mut self, end: DeviceError) -> Result<u64, Error> {
        self.canary.stop();
        let (tx, rx) = oneshot::channel();
        let _ = self.ctrl.send(Ctrl::DeviceError(end, tx));
        self.wait(rx).await
    }

    async fn wait(self, rx: oneshot::Receiver<Result<u64, Error>>) -> Result<u64, Error> {
        let shared = self.sink.shared.clone();
        drop(self.sink);
        tokio::pin!(rx);
        let r = loop {
            tokio::select! {
                r = &mut rx => break r.unwrap_or_else(|_| Err(Error::Msg("the reporter stopped unexpectedly".into()))),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    let since = *shared.interrupted.lock().unwrap();
                    if since.is_some_and(|t| t.elapsed() >= INTERRUPT_GRACE) {
                        self.task.abort();
                        return Err(Error::Msg(format!(
                            "interrupted: the listener did not confirm the end of the run within {} s; {} acknowledgements were never confirmed",
                            INTERRUPT_GRACE.as_secs_f64(),
                            shared.waiting()
                        )));
                    }
                }
            }
        };
        let _ = self.task.await;
        r
    }
}

/// Warns on stderr while the listener confirms nothing and acks wait (after
/// [`STALL_WARNING`], then every 5 s), and notes when SIGINT arrives. Ends with the run.
async fn watch(shared: std::sync::Weak<Shared>) {
    let mut said: Option<Instant> = None;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut interrupted = false;
    loop {
        tokio::select! {
            r = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                if r.is_ok() {
                    let Some(sh) = shared.upgrade() else { return };
                    *sh.interrupted.lock().unwrap() = Some(Instant::now());
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        let Some(sh) = shared.upgrade() else { return };
        if sh.waiting() == 0 {
            // Nothing waits: a stall can only start from now (a writer idle for long,
            // e.g. on a slow fsync, must not find an old time here).
            sh.progress();
        }
        let stalled = sh.stalled();
        if stalled < STALL_WARNING || sh.failed.load(std::sync::atomic::Ordering::Relaxed) {
            said = None;
            continue;
        }
        if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
            eprintln!(
                "witness has not confirmed for {:.1} s, {} acknowledgements waiting",
                stalled.as_secs_f64(),
                sh.waiting()
            );
            said = Some(Instant::now());
        }
    }
}
