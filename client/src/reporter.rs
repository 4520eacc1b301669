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
//! while more than `--max-unconfirmed` acks wait for confirmation, so a run never
//! goes on unwitnessed for long.

use crate::net::{self, Reader, Writer};
use crate::Failure;
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

    /// True while writers should pause because too many acks are unconfirmed.
    pub fn paused(&self) -> bool {
        self.shared.handed.load(Ordering::Relaxed) - self.shared.confirmed.load(Ordering::Relaxed)
            > self.shared.max_unconfirmed
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
        if say && !self.shared.paused.swap(true, Ordering::Relaxed) {
            eprintln!("paused: more than {} acknowledgements are not yet confirmed by the listener; waiting for it", self.shared.max_unconfirmed);
        }
        while self.paused() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.shared.paused.swap(false, Ordering::Relaxed) {
            eprintln!("resumed: the listener caught up");
        }
    }
}

enum Ctrl {
    Finish(RunSummary, oneshot::Sender<Result<u64, Failure>>),
    DeviceError(DeviceError, oneshot::Sender<Result<u64, Failure>>),
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
    ) -> Result<(Reporter, RunId), Failure> {
        let ack_log = match &opts.ack_log {
            Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
                |e| Failure(format!("cannot create ack log {}: {e}", p.display())),
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
        let run = match r.recv().await? {
            Response::RunStarted { run } => run,
            other => {
                return Err(Failure(format!(
                    "listener answered StartRun with {other:?}"
                )))
            }
        };
        let shared = Arc::new(Shared {
            start: Instant::now(),
            handed: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            last_pause_said: std::sync::Mutex::new(None),
            max_unconfirmed,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let (ctrl, ctrl_rx) = mpsc::unbounded_channel();
        let state = Task {
            addr: listener.to_string(),
            secret: secret.clone(),
            run,
            promised,
            shared: shared.clone(),
            pending: VecDeque::new(),
            next_batch: 1,
            sent_upto: 0,
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
    pub async fn finish(self, summary: RunSummary) -> Result<u64, Failure> {
        let (tx, rx) = oneshot::channel();
        let _ = self.ctrl.send(Ctrl::Finish(summary, tx));
        self.wait(rx).await
    }

    /// Records in the ledger that the run ended by a device error, after sending every
    /// queued ack (all were handed over before the error); returns the confirmed count.
    ///
    /// Errors: the listener stayed unreachable for [`FINISH_DEADLINE`].
    pub async fn device_error(self, end: DeviceError) -> Result<u64, Failure> {
        let (tx, rx) = oneshot::channel();
        let _ = self.ctrl.send(Ctrl::DeviceError(end, tx));
        self.wait(rx).await
    }

    async fn wait(self, rx: oneshot::Receiver<Result<u64, Failure>>) -> Result<u64, Failure> {
        drop(self.sink);
        let r = rx
            .await
            .unwrap_or_else(|_| Err(Failure("the reporter stopped unexpectedly".into())));
        let _ = self.task.await;
        r
    }
}

struct Task {
    addr: String,
    secret: Secret,
    run: RunId,
    promised: bool,
    shared: Arc<Shared>,
    pending: VecDeque<AckBatch>,
    next_batch: u64,
    sent_upto: u64,
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

type Conn = (mpsc::UnboundedReceiver<Result<Response, Failure>>, Writer);

fn spawn_reader(mut r: Reader) -> mpsc::UnboundedReceiver<Result<Response, Failure>> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let m = r.recv().await;
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
    Lost(Failure),
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
        let mut ending: Option<(Request, oneshot::Sender<Result<u64, Failure>>)> = None;
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
                    let _ = reply.send(Err(Failure(format!(
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
                        Some(Ok(Response::Confirmed { batch, .. })) => { self.confirm_upto(batch); Ok(Step::Continue) }
                        Some(Ok(other)) => Err(Failure(format!("unexpected answer from listener: {other:?}"))),
                        Some(Err(e)) => Err(e),
                        None => Err(Failure("listener connection closed".into())),
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
            }
        }
    }

    fn ending(
        &mut self,
        c: Ctrl,
        rx: &mut mpsc::UnboundedReceiver<Msg>,
        gather: &mut Gather,
    ) -> (Request, oneshot::Sender<Result<u64, Failure>>) {
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
    async fn send_unsent(&mut self, w: &mut Writer) -> Result<(), Failure> {
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
        }
    }

    async fn reconnect(&mut self) -> Result<Conn, Failure> {
        let (mut r, mut w) = net::connect(&self.addr, &self.secret).await?;
        w.send(&Request::ResumeRun { run: self.run }).await?;
        w.flush().await?;
        match r.recv().await? {
            Response::Resumed {
                confirmed_batch, ..
            } => {
                self.confirm_upto(confirmed_batch);
                self.sent_upto = confirmed_batch;
                eprintln!(
                    "reconnected to listener {}: run {} resumed after batch {}",
                    self.addr, self.run, confirmed_batch
                );
                Ok((spawn_reader(r), w))
            }
            other => Err(Failure(format!(
                "listener answered ResumeRun with {other:?}"
            ))),
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
