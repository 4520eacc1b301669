//! The reporter task: one tokio task per run that gathers the acks the sinks hand
//! over, sends them to the listener in numbered batches, counts what the listener
//! confirms, and keeps the connection alive.
//!
//! Connected, it waits for whichever comes first: an ack (gathered; the batch goes
//! out when full, or [`LINGER`] after its first ack; while acks keep coming it looks
//! again every [`LINGER`] rather than being woken by each), the end of the run (every
//! queued ack, then `Finish`/`DeviceError`), or an answer. While acks flow (a
//! linger runs) answers are read at the linger ticks instead, so a confirmation
//! costs no wake-up of its own (see [`crate::net::Polled`]), unless more than half
//! of `--max-unconfirmed` acks wait or the end of the run was sent. When the
//! connection breaks it reconnects (250 ms after each failed attempt), sends
//! `ResumeRun`, and resends what the listener does not hold (the [`Outbox`] decides
//! what). A witness fault ends the
//! run instead: writers stop and the run is marked invalid in the ledger if the
//! listener can still record that. A [`super::Reporter`] dropped without an end (a
//! workload's error path) leaves the task, for as long as its runtime lives, to send
//! and confirm every ack already handed over; then it ends (or, unreachable for
//! [`FINISH_DEADLINE`], gives up and stops the writers). It never spins on the closed
//! control channel.

use super::fault::step_of;
use super::lanes::Lanes;
use super::outbox::{Outbox, Stamp};
use super::sink::Shared;
use super::{BATCH_MAX, FINISH_DEADLINE, LINGER};
use crate::net::{self, NetError, Polled};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{Ack, AckBatch, Acks, DeviceError, RunSummary, HEARTBEAT_MS};
use plugpull::wire::{Request, Response};
use plugpull::RunId;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Where the end of the run gets its answer: the acks confirmed, or why not.
pub(super) type Reply = oneshot::Sender<Result<u64, Error>>;

/// How the run ends, as the [`super::Reporter`] asks for it.
pub(super) enum Ctrl {
    /// The run finished normally.
    Finish(RunSummary, Reply),
    /// The run ended by a device error.
    DeviceError(DeviceError, Reply),
}

/// The state of the reporter task.
pub(super) struct Task {
    pub(super) addr: String,
    pub(super) secret: Secret,
    pub(super) run: RunId,
    /// Proof of ownership for `ResumeRun`.
    pub(super) token: [u8; 32],
    pub(super) shared: Arc<Shared>,
    pub(super) outbox: Outbox,
    pub(super) ack_log: Option<std::io::BufWriter<std::fs::File>>,
    /// Acks from the sinks, a lane each.
    pub(super) lanes: Arc<Lanes>,
    /// What the last look at the lanes took (kept for its capacity).
    pub(super) taken: Vec<Ack>,
    /// The end of the run, when it is asked for.
    pub(super) ctrl: mpsc::UnboundedReceiver<Ctrl>,
    /// The end-of-run request and where its answer goes, once asked for.
    pub(super) ending: Option<(Request, Reply)>,
    /// Whether `ending` was sent on the current connection.
    pub(super) ending_sent: bool,
    /// False once every sink is gone.
    pub(super) acks_open: bool,
    /// True once the [`super::Reporter`] was dropped without asking for the end of
    /// the run: the task still sends and confirms every ack handed over, then ends.
    pub(super) abandoned: bool,
    /// When the acks gathered so far must go out even if no more come.
    pub(super) linger_until: Option<tokio::time::Instant>,
    /// When to send what the socket did not take, while no linger runs.
    pub(super) poll_at: Option<tokio::time::Instant>,
    /// More than half of `--max-unconfirmed` acks wait (and have not fallen to a
    /// quarter since): answers are read the moment they arrive.
    pub(super) near_bound: bool,
    /// When a sealed batch carries the leaf disks' flush counters.
    pub(super) flush_clock: crate::storage::FlushClock,
    /// The newest canary record written (`crate::canary`), stamped on every batch.
    pub(super) canary: Arc<std::sync::atomic::AtomicU64>,
    /// The workload's kind of acks with none in it: a heartbeat batch's.
    pub(super) empty: Acks,
    /// When the last batch was sealed: a heartbeat follows [`HEARTBEAT_MS`] later.
    pub(super) last_batch: tokio::time::Instant,
}

/// What one step on a live connection came to.
pub(super) enum Step {
    Continue,
    Done,
    Lost(Error),
    /// A witness fault: the run ends, no reconnect.
    Fault(Error),
}

/// [`HEARTBEAT_MS`] as a duration.
fn heartbeat() -> Duration {
    Duration::from_millis(u64::from(HEARTBEAT_MS))
}

/// Bytes queued on the connection beyond what its socket took, past which no
/// further batch is queued (the outbox keeps it until the socket takes more).
const QUEUE_AHEAD: usize = 1 << 20;

/// Queues, on the current connection, the pending batches not yet sent on it (as
/// long as fewer than [`QUEUE_AHEAD`] bytes wait there), and sends as much as the
/// socket takes.
fn send_unsent(outbox: &mut Outbox, run: RunId, c: &mut Polled) -> Result<(), Error> {
    loop {
        while c.queued() < QUEUE_AHEAD {
            let Some(b) = outbox.next_unsent() else { break };
            let batch = b.batch;
            c.queue(&Request::Acks {
                run,
                batch: b.clone(),
            });
            outbox.sent(batch);
        }
        c.push()?;
        if c.unsent() || outbox.next_unsent().is_none() {
            return Ok(());
        }
    }
}

impl Task {
    /// Runs until the end of the run is confirmed, or cannot be; answers it.
    pub(super) async fn run(mut self, c: Polled) {
        let mut conn: Option<Polled> = Some(c);
        let mut lost_since: Option<Instant> = None;
        let mut last_said: Option<Instant> = None;
        loop {
            if self.abandoned
                && !self.acks_open
                && self.outbox.gathered() == 0
                && self.outbox.is_empty()
            {
                // Dropped without an end, and every ack handed over is confirmed.
                return;
            }
            let Some(c) = conn.as_mut() else {
                // Disconnected: retry 250 ms after each failed attempt (fixed, not
                // growing: the writers pause after --max-unconfirmed-secs, so a slower
                // retry would only stretch the pause); keep gathering acks meanwhile.
                let since = *lost_since.get_or_insert_with(Instant::now);
                if (self.ending.is_some() || self.abandoned) && since.elapsed() > FINISH_DEADLINE {
                    let e = Error::Msg(format!(
                        "listener {} unreachable for {} s: {} acknowledgements were never confirmed",
                        self.addr,
                        FINISH_DEADLINE.as_secs(),
                        self.shared.waiting()
                    ));
                    // A writer still holding a sink stops rather than pausing forever.
                    self.shared.failed.store(true, Ordering::Relaxed);
                    match self.ending.take() {
                        Some((_, reply)) => drop(reply.send(Err(e))),
                        None => eprintln!("{e}"),
                    }
                    return;
                }
                match self.reconnect().await {
                    Ok(c) => {
                        conn = Some(c);
                        lost_since = None;
                        self.ending_sent = false;
                        self.poll_at = None;
                        // What the listener does not hold goes out at once: waiting
                        // for the next ack would wait forever once the writers have
                        // paused for want of confirmations.
                        if self.outbox.next_unsent().is_some() {
                            self.linger_until
                                .get_or_insert_with(tokio::time::Instant::now);
                        }
                    }
                    Err(e) => {
                        let e = match step_of(e) {
                            Step::Lost(e) => e,
                            fault => {
                                let reply = self.ending.take().map(|(_, r)| r);
                                self.fault(fault, reply).await;
                                return;
                            }
                        };
                        // Say why once every 5 s, not every attempt.
                        if last_said.is_none_or(|t: Instant| t.elapsed() >= Duration::from_secs(5))
                        {
                            eprintln!("still reconnecting to listener {}: {e}", self.addr);
                            last_said = Some(Instant::now());
                        }
                        self.pause_before_retry().await;
                    }
                }
                continue;
            };
            match self.step(c).await.unwrap_or_else(Step::Lost) {
                Step::Continue => {}
                Step::Done => {
                    let (_, reply) = self.ending.take().unwrap();
                    let _ = reply.send(Ok(self.shared.confirmed.load(Ordering::Relaxed)));
                    return;
                }
                Step::Lost(e) => {
                    last_said = None;
                    eprintln!("listener connection lost: {e}; reconnecting");
                    conn = None;
                }
                Step::Fault(e) => {
                    let reply = self.ending.take().map(|(_, r)| r);
                    self.fault(Step::Fault(e), reply).await;
                    return;
                }
            }
        }
    }

    /// Waits 250 ms before the next reconnect, gathering acks (and taking the end of
    /// the run) meanwhile.
    async fn pause_before_retry(&mut self) {
        let pause = tokio::time::sleep(Duration::from_millis(250));
        tokio::pin!(pause);
        loop {
            tokio::select! {
                _ = &mut pause => break,
                _ = self.lanes.wait(), if self.ending.is_none() && self.acks_open => {
                    if self.drain() > 0 {
                        self.linger_until.get_or_insert_with(tokio::time::Instant::now);
                    }
                }
                c = self.ctrl.recv(), if self.ending.is_none() && !self.abandoned => self.asked(c),
            }
        }
    }

    /// One step on a live connection: sends the end of the run if it is due, then
    /// handles whichever comes first of an ack, a tick (the linger deadline, or a
    /// look for answers), the end of the run and, while the socket is watched, an
    /// answer. `Err` when the connection broke.
    async fn step(&mut self, c: &mut Polled) -> Result<Step, Error> {
        if let Some((req, _)) = &self.ending {
            if !self.ending_sent {
                send_unsent(&mut self.outbox, self.run, c)?;
                // After every batch: the end goes once they are all queued.
                if self.outbox.next_unsent().is_none() {
                    c.queue(req);
                    c.push()?;
                    self.ending_sent = true;
                }
            }
        }
        // The socket is watched except while acks flow (a linger runs), whose ticks
        // read the answers: a confirmation then costs no wake-up of its own. Watched
        // otherwise, so the end of the run and writers at or near the count bound
        // get their answer at once, and a connection that breaks while the run is
        // idle is noticed then.
        self.near_bound = self.shared.near_bound(self.near_bound);
        c.watch(self.linger_until.is_none() || self.ending_sent || self.near_bound)?;
        // What the socket did not take goes at the next tick (a linger tick's, or
        // one of its own).
        let stuck = c.unsent() || self.outbox.next_unsent().is_some();
        if !stuck || self.linger_until.is_some() {
            self.poll_at = None;
        } else if self.poll_at.is_none() {
            self.poll_at = Some(tokio::time::Instant::now() + LINGER);
        }
        let beat = self.beating().then(|| self.last_batch + heartbeat());
        let tick = [self.linger_until, self.poll_at, beat]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            // While a batch lingers the lanes are not waited on: acks still go onto
            // them the moment they are made, but the task does not say it sleeps, so
            // handing one over costs the writer no wake-up of this task (a futex call
            // and a context switch per ack otherwise); the linger's end takes them all.
            _ = self.lanes.wait(), if self.ending.is_none() && self.acks_open && self.linger_until.is_none() => {
                self.gathered(c)?;
                Ok(Step::Continue)
            }
            _ = tokio::time::sleep_until(tick.unwrap_or_else(tokio::time::Instant::now)), if tick.is_some() => {
                self.tick(c)
            }
            c = self.ctrl.recv(), if self.ending.is_none() && !self.abandoned => {
                self.asked(c);
                Ok(Step::Continue)
            }
            _ = c.readable() => self.answers(c),
        }
    }

    /// A tick: at the linger deadline, seals what was gathered (while acks keep
    /// coming, the task looks again one [`LINGER`] from now instead of being woken
    /// by the next one: the writers then never wake it, and no ack waits longer than
    /// [`LINGER`]; a look that finds none goes back to waiting on the lanes). Every
    /// tick sends what waits to be sent and reads the answers that arrived.
    fn tick(&mut self, c: &mut Polled) -> Result<Step, Error> {
        let now = tokio::time::Instant::now();
        if self.linger_until.is_some_and(|t| t <= now) {
            let more = self.drain() > 0;
            self.linger_until = more.then(|| now + LINGER);
            self.seal();
        }
        if self.beating() && now >= self.last_batch + heartbeat() {
            let stamp = self.stamp();
            self.outbox.heartbeat(self.empty.clone(), stamp);
            self.last_batch = now;
        }
        self.poll_at = None;
        send_unsent(&mut self.outbox, self.run, c)?;
        self.answers(c)
    }

    /// Whether heartbeats go out: while the run goes on and no linger gathers acks.
    fn beating(&self) -> bool {
        self.ending.is_none() && !self.abandoned && self.linger_until.is_none()
    }

    /// What a batch sealed now carries: the run's clock, the newest canary record
    /// written, the oldest write in flight.
    fn stamp(&self) -> Stamp {
        let ms = |v: u64| v.min(u64::from(u32::MAX)) as u32;
        Stamp {
            ms: ms(self.shared.ms_at(Instant::now())),
            canary: self.canary.load(Ordering::Acquire),
            oldest_in_flight_ms: self.lanes.oldest_in_flight().map(ms),
        }
    }

    /// Handles every answer that arrived.
    fn answers(&mut self, c: &mut Polled) -> Result<Step, Error> {
        loop {
            let r = match c.answer() {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(Step::Continue),
                Err(e) => return Ok(step_of(e)),
            };
            match r {
                Response::Confirmed { batch: 0, .. }
                    if self.ending_sent && self.outbox.is_empty() =>
                {
                    return Ok(Step::Done)
                }
                Response::Confirmed { batch: 0, .. } => {}
                Response::Confirmed { batch, .. } => {
                    if let Err(f) = self.told(batch, "Confirmed") {
                        return Ok(Step::Fault(f));
                    }
                }
                other => {
                    return Err(Error::Msg(format!(
                        "unexpected answer from listener: {other:?}"
                    )))
                }
            }
        }
    }

    /// Gathers whatever is queued on the lanes; sends full batches at once, and
    /// starts the linger for what is left of a partial one.
    fn gathered(&mut self, c: &mut Polled) -> Result<(), Error> {
        self.drain();
        if self.outbox.next_unsent().is_some() {
            send_unsent(&mut self.outbox, self.run, c)?;
        }
        if self.outbox.gathered() > 0 && self.linger_until.is_none() {
            self.linger_until = Some(tokio::time::Instant::now() + LINGER);
        }
        Ok(())
    }

    /// Checks a `Confirmed` for `batch` against what the listener said before and
    /// what was sent, and counts the newly confirmed acks.
    fn told(&mut self, batch: u64, what: &str) -> Result<(), Error> {
        let done = self
            .outbox
            .confirm(batch)
            .map_err(|e| self.bad_confirm(e, what))?;
        self.count_confirmed(done);
        Ok(())
    }

    /// Gathers every ack queued on the lanes now, sealing each full batch; returns
    /// how many messages it took. Notes when no ack can come any more (every sink
    /// gone and every lane taken).
    fn drain(&mut self) -> usize {
        let mut taken = std::mem::take(&mut self.taken);
        let n = self.lanes.take(&mut taken);
        for m in taken.drain(..) {
            self.outbox.add(m);
            if self.outbox.gathered() >= BATCH_MAX {
                self.seal();
            }
        }
        self.taken = taken;
        if n == 0 && self.lanes.closed() {
            self.acks_open = false;
        }
        n
    }

    /// Takes what the control channel gave: the end of the run, or `None` when the
    /// [`super::Reporter`] was dropped without one (a closed channel is ready at
    /// every poll, so it is not polled again).
    fn asked(&mut self, c: Option<Ctrl>) {
        match c {
            Some(c) => self.ending = Some(self.ending_of(c)),
            None => self.abandoned = true,
        }
    }

    /// The request that ends the run, after sealing every ack handed over before it.
    fn ending_of(&mut self, c: Ctrl) -> (Request, Reply) {
        // Every ack handed over before the end goes into the ledger first.
        self.drain();
        self.seal();
        // The counters after the last ack: the run's flush count ends here.
        let flushes = self.flush_clock.due(true);
        match c {
            Ctrl::Finish(mut summary, reply) => {
                summary.flushes = flushes;
                (
                    Request::Finish {
                        run: self.run,
                        summary,
                    },
                    reply,
                )
            }
            Ctrl::DeviceError(mut end, reply) => {
                end.flushes = flushes;
                (Request::DeviceError { run: self.run, end }, reply)
            }
        }
    }

    /// Turns gathered acks into numbered batches waiting to be sent, the last one
    /// carrying the leaf disks' flush counters when a sample is due (once a second).
    fn seal(&mut self) {
        let flushes = if self.outbox.gathered() > 0 {
            self.flush_clock.due(false)
        } else {
            None
        };
        let stamp = self.stamp();
        let before = self.outbox.next_batch();
        let began = self.outbox.seal(flushes, stamp);
        if self.outbox.next_batch() > before {
            self.last_batch = tokio::time::Instant::now();
        }
        if began {
            // Acks begin to wait now: a stall is measured from here.
            self.shared.progress();
        }
    }

    /// Counts batches the listener confirmed, and appends them to the ack log.
    fn count_confirmed(&mut self, done: Vec<AckBatch>) {
        for b in done {
            if let Some(log) = &mut self.ack_log {
                use std::io::Write;
                let r = b.acks.write_log(log);
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

    async fn reconnect(&mut self) -> Result<Polled, NetError> {
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
                let done = self
                    .outbox
                    .resume(confirmed_batch)
                    .map_err(|e| NetError::Forged(self.bad_confirm(e, "Resumed")))?;
                self.count_confirmed(done);
                eprintln!(
                    "reconnected to listener {}: run {} resumed after batch {}",
                    self.addr, self.run, confirmed_batch
                );
                net::into_polled(r, w).map_err(NetError::Lost)
            }
            other => Err(NetError::Lost(Error::Msg(format!(
                "listener answered ResumeRun with {other:?}"
            )))),
        }
    }
}
