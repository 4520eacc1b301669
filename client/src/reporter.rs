//! The agent's reporter: carries acknowledgements to the listener without ever
//! putting a network round trip between two writes.
//!
//! Workload threads hand each ack to an [`AckSink`] (an unbounded channel: it never
//! blocks). One task batches what arrives within [`LINGER`] (up to [`BATCH_MAX`] acks), sends
//! batches back to back without waiting, and counts an ack as acknowledged only when
//! the listener answers `Confirmed` for its batch, which it does after its ledger's
//! `fdatasync`. If the connection breaks, the task reconnects with backoff, sends
//! `ResumeRun`, drops the batches the listener already holds and resends the rest
//! (batches are idempotent by number). Writers pause, with a message on stderr,
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

use crate::net::{self, NetError, Reader, Writer};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{AckBatch, Acks, DeviceError, FileAck, Manifest, PgAckRange, RunSummary};
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
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

enum Msg {
    File(FileAck),
    Pg { client: u32, seq: u64, ms: u32 },
}

struct Shared {
    start: Instant,
    handed: AtomicU64,
    confirmed: AtomicU64,
    paused: AtomicBool,
    last_pause_said: std::sync::Mutex<Option<Instant>>,
    max_unconfirmed: u64,
    /// Ms since `start` of the last confirmation, or of the moment acks began to wait.
    progress_ms: AtomicU64,
    /// Pause when nothing was confirmed for this long while acks wait, in ms.
    max_stall_ms: u64,
    /// Set once a witness fault ended the run.
    failed: AtomicBool,
    /// When SIGINT arrived, if it did.
    interrupted: std::sync::Mutex<Option<Instant>>,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn waiting(&self) -> u64 {
        self.handed
            .load(Ordering::Relaxed)
            .saturating_sub(self.confirmed.load(Ordering::Relaxed))
    }

    /// How long nothing was confirmed while acks waited (zero when none wait).
    fn stalled(&self) -> Duration {
        if self.waiting() == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.progress_ms.load(Ordering::Relaxed)),
        )
    }

    fn progress(&self) {
        self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
    }
}

/// Where workload threads put acknowledgements. Cheap to clone; never blocks.
#[derive(Clone)]
pub struct AckSink {
    tx: mpsc::UnboundedSender<Msg>,
    shared: Arc<Shared>,
}

impl AckSink {
    fn ms(&self) -> u32 {
        self.ms_at(Instant::now())
    }

    /// Milliseconds from the run's start to `t`: the time stamp of an ack made at `t`.
    pub fn ms_at(&self, t: Instant) -> u32 {
        t.saturating_duration_since(self.shared.start)
            .as_millis()
            .min(u32::MAX as u128) as u32
    }

    fn hand(&self, n: u64, m: Msg) {
        self.shared.handed.fetch_add(n, Ordering::Relaxed);
        // The reporter outlives every sink until `finish`; a send can only fail after
        // it gave up, and then `finish` reports the failure.
        let _ = self.tx.send(m);
    }

    /// Hands over one durable write (its durability call returned) at once: a
    /// writer never holds an ack back; batching is the reporter task's job.
    pub fn file_ack(&self, ack: FileAck) {
        self.hand(1, Msg::File(ack));
    }

    /// Records that client `client`'s transaction `seq` (per client, from 1, in order) committed.
    pub fn pg_ack(&self, client: u32, seq: u64) {
        let ms = self.ms();
        self.hand(1, Msg::Pg { client, seq, ms });
    }

    /// Acks the listener has confirmed so far.
    pub fn confirmed(&self) -> u64 {
        self.shared.confirmed.load(Ordering::Relaxed)
    }

    /// True while writers should pause: too many acks are unconfirmed, or nothing was
    /// confirmed for `--max-unconfirmed-secs` while acks wait, or a witness fault
    /// ended the run.
    pub fn paused(&self) -> bool {
        self.count_bound()
            || self.shared.stalled().as_millis() as u64 > self.shared.max_stall_ms
            || self.failed()
    }

    fn count_bound(&self) -> bool {
        self.shared.waiting() > self.shared.max_unconfirmed
    }

    /// True once a witness fault ended the run: writers must stop writing (the
    /// reporter's `finish` then returns the fault).
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Blocks the calling thread while [`AckSink::paused`], saying so on stderr (at
    /// most once every 10 s, with the matching "resumed"). Returns early when `stop`
    /// is set.
    pub fn wait_while_paused(&self, stop: &AtomicBool) {
        if !self.paused() {
            return;
        }
        let say = {
            let mut last = self.shared.last_pause_said.lock().unwrap();
            let say = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
            if say {
                *last = Some(Instant::now());
            }
            say
        };
        if self.failed() {
            return;
        }
        if say && !self.shared.paused.swap(true, Ordering::Relaxed) {
            if self.count_bound() {
                eprintln!("paused: more than {} acknowledgements are not yet confirmed by the listener; waiting for it", self.shared.max_unconfirmed);
            } else {
                eprintln!(
                    "paused: the witness has not confirmed for {:.1} s, {} acknowledgements waiting; waiting for it",
                    self.shared.stalled().as_secs_f64(),
                    self.shared.waiting()
                );
            }
        }
        while self.paused() && !stop.load(Ordering::Relaxed) && !self.failed() {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.shared.paused.swap(false, Ordering::Relaxed) {
            eprintln!("resumed: the listener caught up");
        }
    }
}

enum Ctrl {
    Finish(RunSummary, oneshot::Sender<Result<u64, Error>>),
    DeviceError(DeviceError, oneshot::Sender<Result<u64, Error>>),
}

/// A running reporter for one run.
pub struct Reporter {
    sink: AckSink,
    ctrl: mpsc::UnboundedSender<Ctrl>,
    task: tokio::task::JoinHandle<()>,
}

/// Reporter settings beyond the listener's address.
#[derive(clap::Args, Debug, Clone)]
pub struct ReporterOptions {
    /// Append every ack the listener confirmed to this file, one per line
    /// (`seq block` for files, `client first last` for pgbench ranges): the agent's own
    /// record, to compare with the ledger.
    #[arg(long)]
    pub ack_log: Option<std::path::PathBuf>,
    /// Pause writing while more than this many acks await the listener's confirmation
    /// [default: 1000000 for files; 100000 for pgbench, where it also bounds which
    /// sequence numbers can exist after a cut]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unconfirmed: Option<u64>,
    /// Also pause writing while acks wait and the listener has confirmed nothing for
    /// this many seconds (a warning comes after 2 s)
    #[arg(long, default_value_t = MAX_UNCONFIRMED_SECS)]
    pub max_unconfirmed_secs: f64,
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
        manifest: Manifest,
        opts: &ReporterOptions,
    ) -> Result<(Reporter, RunId), Error> {
        let ack_log = match &opts.ack_log {
            Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
                |e| Error(format!("cannot create ack log {}: {e}", p.display())),
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
        };
        let (mut r, mut w) = net::connect(listener, secret).await?;
        w.send(&Request::StartRun {
            manifest: Box::new(manifest),
        })
        .await?;
        w.flush().await?;
        let (run, token) = match r.recv().await? {
            Response::RunStarted { run, token } => (run, token),
            other => return Err(Error(format!("listener answered StartRun with {other:?}"))),
        };
        let shared = Arc::new(Shared {
            start: Instant::now(),
            handed: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            last_pause_said: std::sync::Mutex::new(None),
            max_unconfirmed,
            progress_ms: AtomicU64::new(0),
            max_stall_ms: (opts.max_unconfirmed_secs.max(0.0) * 1000.0) as u64,
            failed: AtomicBool::new(false),
            interrupted: std::sync::Mutex::new(None),
        });
        tokio::spawn(watch(Arc::downgrade(&shared)));
        let (tx, rx) = mpsc::unbounded_channel();
        let (ctrl, ctrl_rx) = mpsc::unbounded_channel();
        let state = Task {
            addr: listener.to_string(),
            secret: secret.clone(),
            run,
            token,
            promised,
            shared: shared.clone(),
            pending: VecDeque::new(),
            next_batch: 1,
            sent_upto: 0,
            told: 0,
            ack_log,
        };
        let task = tokio::spawn(state.run(r, w, rx, ctrl_rx));
        Ok((
            Reporter {
                sink: AckSink { tx, shared },
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
    pub async fn finish(self, summary: RunSummary) -> Result<u64, Error> {
        let (tx, rx) = oneshot::channel();
        let _ = self.ctrl.send(Ctrl::Finish(summary, tx));
        self.wait(rx).await
    }

    /// Records in the ledger that the run ended by a device error, after sending every
    /// queued ack (all were handed over before the error); returns the confirmed count.
    ///
    /// Errors: the listener stayed unreachable for [`FINISH_DEADLINE`].
    pub async fn device_error(self, end: DeviceError) -> Result<u64, Error> {
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
                r = &mut rx => break r.unwrap_or_else(|_| Err(Error("the reporter stopped unexpectedly".into()))),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    let since = *shared.interrupted.lock().unwrap();
                    if since.is_some_and(|t| t.elapsed() >= INTERRUPT_GRACE) {
                        self.task.abort();
                        return Err(Error(format!(
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
        if stalled < STALL_WARNING || sh.failed.load(Ordering::Relaxed) {
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

struct Task {
    addr: String,
    secret: Secret,
    run: RunId,
    /// Proof of ownership for `ResumeRun`.
    token: [u8; 32],
    promised: bool,
    shared: Arc<Shared>,
    pending: VecDeque<AckBatch>,
    next_batch: u64,
    sent_upto: u64,
    /// Highest batch the listener has said is durable.
    told: u64,
    ack_log: Option<std::io::BufWriter<std::fs::File>>,
}

/// Acks being gathered into the next batch.
#[derive(Default)]
struct Gather {
    file: Vec<FileAck>,
    pg: Vec<PgAckRange>,
    pg_at: HashMap<u32, usize>,
    n: usize,
}

impl Gather {
    fn add(&mut self, m: Msg) {
        match m {
            Msg::File(a) => {
                self.n += 1;
                self.file.push(a);
            }
            Msg::Pg { client, seq, ms } => {
                self.n += 1;
                if let Some(&i) = self.pg_at.get(&client) {
                    let r = &mut self.pg[i];
                    if r.last + 1 == seq {
                        r.last = seq;
                        r.ms = ms;
                        return;
                    }
                }
                self.pg_at.insert(client, self.pg.len());
                self.pg.push(PgAckRange {
                    client,
                    first: seq,
                    last: seq,
                    ms,
                });
            }
        }
    }

    fn take(&mut self) -> Vec<Acks> {
        let mut out = Vec::new();
        if !self.file.is_empty() {
            out.push(Acks::File(std::mem::take(&mut self.file)));
        }
        if !self.pg.is_empty() {
            out.push(Acks::Pg(std::mem::take(&mut self.pg)));
        }
        self.pg_at.clear();
        self.n = 0;
        out
    }
}

type Conn = (mpsc::UnboundedReceiver<Result<Response, NetError>>, Writer);

fn spawn_reader(mut r: Reader) -> mpsc::UnboundedReceiver<Result<Response, NetError>> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let m = r.recv_checked().await;
            let stop = m.is_err();
            if tx.send(m).is_err() || stop {
                return;
            }
        }
    });
    rx
}

enum Step {
    Continue,
    Done,
    Lost(Error),
    /// A witness fault: the run ends, no reconnect.
    Fault(Error),
}

/// Sorts a failure from the connection: lost (reconnect) or a witness fault.
fn step_of(e: NetError) -> Step {
    use plugpull::wire::ErrorKind::{Busy, Protocol};
    match e {
        // A refusal for a protocol slip (e.g. an idle timeout) or a full listener: a new
        // connection may work. Ledger, token, run and MAC refusals are faults.
        NetError::Lost(f) | NetError::Refused(Busy | Protocol, f) => Step::Lost(f),
        NetError::Refused(plugpull::wire::ErrorKind::Io, Error(m)) => Step::Fault(Error(format!(
            "the witness could not record acknowledgements: {m}"
        ))),
        NetError::Refused(_, f) | NetError::Forged(f) => Step::Fault(f),
    }
}

impl Task {
    async fn run(
        mut self,
        r: Reader,
        w: Writer,
        mut rx: mpsc::UnboundedReceiver<Msg>,
        mut ctrl: mpsc::UnboundedReceiver<Ctrl>,
    ) {
        let mut conn: Option<Conn> = Some((spawn_reader(r), w));
        let mut gather = Gather::default();
        let mut ending: Option<(Request, oneshot::Sender<Result<u64, Error>>)> = None;
        let mut ending_sent = false;
        let mut lost_since: Option<Instant> = None;
        let mut acks_open = true;
        let mut last_said: Option<Instant> = None;
        // When the acks gathered so far must go out even if no more come.
        let mut linger_until: Option<tokio::time::Instant> = None;
        loop {
            let Some((resp, w)) = conn.as_mut() else {
                // Disconnected: retry with backoff; keep gathering acks meanwhile.
                let since = *lost_since.get_or_insert_with(Instant::now);
                if ending.is_some() && since.elapsed() > FINISH_DEADLINE {
                    let unconfirmed: u64 = self.pending.iter().map(|b| b.acks.count()).sum();
                    let (_, reply) = ending.take().unwrap();
                    let _ = reply.send(Err(Error(format!(
                        "listener {} unreachable for {} s: {unconfirmed} acknowledgements were never confirmed",
                        self.addr,
                        FINISH_DEADLINE.as_secs()
                    ))));
                    return;
                }
                match self.reconnect().await {
                    Ok(c) => {
                        conn = Some(c);
                        lost_since = None;
                        ending_sent = false;
                    }
                    Err(e) => {
                        let e = match step_of(e) {
                            Step::Lost(e) => e,
                            fault => {
                                self.fault(fault, ending.take().map(|(_, r)| r), &mut ctrl)
                                    .await;
                                return;
                            }
                        };
                        // Say why once every 5 s, not every attempt.
                        if last_said.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(5))
                        {
                            eprintln!("still reconnecting to listener {}: {e}", self.addr);
                            last_said = Some(Instant::now());
                        }
                        let backoff = tokio::time::sleep(Duration::from_millis(250));
                        tokio::pin!(backoff);
                        loop {
                            tokio::select! {
                                _ = &mut backoff => break,
                                m = rx.recv(), if ending.is_none() && acks_open => match m {
                                    Some(m) => {
                                        gather.add(m);
                                        linger_until.get_or_insert_with(tokio::time::Instant::now);
                                        if gather.n >= BATCH_MAX { self.seal(&mut gather); }
                                    }
                                    None => acks_open = false,
                                },
                                c = ctrl.recv(), if ending.is_none() => if let Some(c) = c { ending = Some(self.ending(c, &mut rx, &mut gather)); },
                            }
                        }
                    }
                }
                continue;
            };
            let step = async {
                if let Some((req, _)) = &ending {
                    if !ending_sent {
                        self.send_unsent(w).await?;
                        w.send(req).await?;
                        w.flush().await?;
                        ending_sent = true;
                    }
                }
                tokio::select! {
                    m = rx.recv(), if ending.is_none() && acks_open => {
                        if m.is_none() { acks_open = false; }
                        if let Some(m) = m {
                            gather.add(m);
                            while gather.n < BATCH_MAX {
                                match rx.try_recv() { Ok(m) => gather.add(m), Err(_) => break }
                            }
                            if gather.n >= BATCH_MAX {
                                linger_until = None;
                                self.seal(&mut gather);
                                self.send_unsent(w).await?;
                                w.flush().await?;
                            } else if linger_until.is_none() {
                                linger_until = Some(tokio::time::Instant::now() + LINGER);
                            }
                        }
                        Ok(Step::Continue)
                    }
                    _ = tokio::time::sleep_until(linger_until.unwrap_or_else(tokio::time::Instant::now)), if linger_until.is_some() => {
                        linger_until = None;
                        self.seal(&mut gather);
                        self.send_unsent(w).await?;
                        w.flush().await?;
                        Ok(Step::Continue)
                    }
                    c = ctrl.recv(), if ending.is_none() => {
                        if let Some(c) = c { ending = Some(self.ending(c, &mut rx, &mut gather)); }
                        Ok(Step::Continue)
                    }
                    r = resp.recv() => match r {
                        Some(Ok(Response::Confirmed { batch: 0, .. })) if ending_sent && self.pending.is_empty() => Ok(Step::Done),
                        Some(Ok(Response::Confirmed { batch: 0, .. })) => Ok(Step::Continue),
                        Some(Ok(Response::Confirmed { batch, .. })) => Ok(self.told(batch, "Confirmed").map_or_else(Step::Fault, |_| Step::Continue)),
                        Some(Ok(other)) => Err(Error(format!("unexpected answer from listener: {other:?}"))),
                        Some(Err(e)) => Ok(step_of(e)),
                        None => Err(Error("listener connection closed".into())),
                    }
                }
            }
            .await
            .unwrap_or_else(Step::Lost);
            match step {
                Step::Continue => {}
                Step::Done => {
                    let (_, reply) = ending.take().unwrap();
                    let _ = reply.send(Ok(self.shared.confirmed.load(Ordering::Relaxed)));
                    return;
                }
                Step::Lost(e) => {
                    last_said = None;
                    eprintln!("listener connection lost: {e}; reconnecting");
                    conn = None;
                }
                Step::Fault(e) => {
                    self.fault(Step::Fault(e), ending.take().map(|(_, r)| r), &mut ctrl)
                        .await;
                    return;
                }
            }
        }
    }

    /// Checks a `Confirmed`/`Resumed` for `batch` against what the listener said
    /// before and what was sent, and counts the newly confirmed acks.
    fn told(&mut self, batch: u64, what: &str) -> Result<(), Error> {
        if batch < self.told {
            return Err(Error(format!(
                "{WITNESS_FAULT}: listener {} answered {what} for batch {batch} of run {}, after it had confirmed batch {}: it lost acknowledgements it had made durable",
                self.addr, self.run, self.told
            )));
        }
        if batch >= self.next_batch {
            return Err(Error(format!(
                "{WITNESS_FAULT}: listener {} answered {what} for batch {batch} of run {}, but only batches up to {} were sent",
                self.addr, self.run, self.next_batch - 1
            )));
        }
        self.told = batch;
        self.confirm_upto(batch);
        Ok(())
    }

    /// Ends the run on a witness fault: writers stop, the run is marked invalid in
    /// the ledger if the listener can still record that, and the end of the run
    /// (now, or when it is asked for) answers with the fault.
    async fn fault(
        &mut self,
        step: Step,
        reply: Option<oneshot::Sender<Result<u64, Error>>>,
        ctrl: &mut mpsc::UnboundedReceiver<Ctrl>,
    ) {
        let (Step::Fault(f) | Step::Lost(f)) = step else {
            unreachable!("fault() is called with a failure")
        };
        self.shared.failed.store(true, Ordering::Relaxed);
        eprintln!("{f}; stopping the run");
        if !f.0.starts_with("the witness could not record") {
            let error = if f.0.starts_with(WITNESS_FAULT) {
                f.0.clone()
            } else {
                format!("{WITNESS_FAULT}: {f}")
            };
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
        let reply = match reply {
            Some(r) => Some(r),
            None => match ctrl.recv().await {
                Some(Ctrl::Finish(_, r) | Ctrl::DeviceError(_, r)) => Some(r),
                None => None,
            },
        };
        if let Some(r) = reply {
            let _ = r.send(Err(f));
        }
    }

    fn ending(
        &mut self,
        c: Ctrl,
        rx: &mut mpsc::UnboundedReceiver<Msg>,
        gather: &mut Gather,
    ) -> (Request, oneshot::Sender<Result<u64, Error>>) {
        // Every ack handed over before the end goes into the ledger first.
        while let Ok(m) = rx.try_recv() {
            gather.add(m);
            if gather.n >= BATCH_MAX {
                self.seal(gather);
            }
        }
        self.seal(gather);
        match c {
            Ctrl::Finish(summary, reply) => (
                Request::Finish {
                    run: self.run,
                    summary,
                },
                reply,
            ),
            Ctrl::DeviceError(end, reply) => (Request::DeviceError { run: self.run, end }, reply),
        }
    }

    /// Turns gathered acks into numbered batches waiting to be sent.
    fn seal(&mut self, gather: &mut Gather) {
        if self.pending.is_empty() && gather.n > 0 {
            // Acks begin to wait now: a stall is measured from here.
            self.shared.progress();
        }
        for acks in gather.take() {
            self.pending.push_back(AckBatch {
                batch: self.next_batch,
                promised: self.promised,
                acks,
            });
            self.next_batch += 1;
        }
    }

    /// Sends, on the current connection, every pending batch not yet sent on it.
    async fn send_unsent(&mut self, w: &mut Writer) -> Result<(), Error> {
        for b in &self.pending {
            if b.batch > self.sent_upto {
                w.send(&Request::Acks {
                    run: self.run,
                    batch: b.clone(),
                })
                .await?;
                self.sent_upto = b.batch;
            }
        }
        Ok(())
    }

    fn confirm_upto(&mut self, batch: u64) {
        while self.pending.front().is_some_and(|b| b.batch <= batch) {
            let b = self.pending.pop_front().unwrap();
            if let Some(log) = &mut self.ack_log {
                use std::io::Write;
                let r = match &b.acks {
                    Acks::File(v) => v
                        .iter()
                        .try_for_each(|a| writeln!(log, "{} {}", a.seq, a.block)),
                    Acks::Pg(v) => v
                        .iter()
                        .try_for_each(|a| writeln!(log, "{} {} {}", a.client, a.first, a.last)),
                };
                if let Err(e) = r.and_then(|_| log.flush()) {
                    eprintln!("ack log: {e}; no longer written");
                    self.ack_log = None;
                }
            }
            self.shared
                .confirmed
                .fetch_add(b.acks.count(), Ordering::Relaxed);
            self.shared.progress();
        }
    }

    async fn reconnect(&mut self) -> Result<Conn, NetError> {
        let (mut r, mut w) = net::connect(&self.addr, &self.secret)
            .await
            .map_err(NetError::Lost)?;
        w.send(&Request::ResumeRun {
            run: self.run,
            token: self.token,
        })
        .await
        .map_err(NetError::Lost)?;
        w.flush().await.map_err(NetError::Lost)?;
        match r.recv_checked().await? {
            Response::Resumed {
                confirmed_batch, ..
            } => {
                self.told(confirmed_batch, "Resumed")
                    .map_err(NetError::Forged)?;
                self.sent_upto = confirmed_batch;
                eprintln!(
                    "reconnected to listener {}: run {} resumed after batch {}",
                    self.addr, self.run, confirmed_batch
                );
                Ok((spawn_reader(r), w))
            }
            other => Err(NetError::Lost(Error(format!(
                "listener answered ResumeRun with {other:?}"
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_commits_of_a_client_gather_into_one_range() {
        let mut g = Gather::default();
        for (client, seq, ms) in [(0, 1, 5), (1, 1, 6), (0, 2, 7), (0, 3, 8), (1, 3, 9)] {
            g.add(Msg::Pg { client, seq, ms });
        }
        let got = g.take();
        assert_eq!(
            got,
            vec![Acks::Pg(vec![
                PgAckRange {
                    client: 0,
                    first: 1,
                    last: 3,
                    ms: 8
                },
                PgAckRange {
                    client: 1,
                    first: 1,
                    last: 1,
                    ms: 6
                },
                PgAckRange {
                    client: 1,
                    first: 3,
                    last: 3,
                    ms: 9
                },
            ])]
        );
        assert_eq!(g.n, 0);
        assert!(g.take().is_empty());
    }
}
