//! What workload threads hand acknowledgements to: the [`AckSink`], and the counters
//! it shares with the reporter task.
//!
//! A sink never blocks a write: an ack goes onto the sink's own lane (`lanes`) and a
//! counter (`handed`). The reporter task counts `confirmed` as the listener confirms batches.
//! From the two, and the time of the last confirmation, a writer learns whether it must
//! pause ([`AckSink::paused`]): too many acks wait, or the witness has been silent too
//! long while they wait, or a witness fault ended the run.

use super::lanes::LaneTx;
use super::outbox::over_bound;
use plugpull::ledger::Ack;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The counters the sinks and the reporter task share.
pub(super) struct Shared {
    /// When the run started: ack time stamps count from here.
    pub(super) start: Instant,
    /// Acks handed to a sink so far.
    pub(super) handed: AtomicU64,
    /// Acks the listener confirmed so far.
    pub(super) confirmed: AtomicU64,
    /// Whether a writer said "paused" and has not yet said "resumed".
    pub(super) paused: AtomicBool,
    /// When a writer last said "paused".
    pub(super) last_pause_said: Mutex<Option<Instant>>,
    /// `--max-unconfirmed`.
    pub(super) max_unconfirmed: u64,
    /// Ms since `start` of the last confirmation, or of the moment acks began to wait.
    pub(super) progress_ms: AtomicU64,
    /// Pause when nothing was confirmed for this long while acks wait, in ms.
    pub(super) max_stall_ms: u64,
    /// Set once a witness fault ended the run.
    pub(super) failed: AtomicBool,
    /// When SIGINT arrived, if it did.
    pub(super) interrupted: Mutex<Option<Instant>>,
    /// The run's leaf disks, whose flush counters the `-P` lines sample.
    pub(super) flushes: crate::storage::FlushCounters,
}

impl Shared {
    /// Fresh counters for a run starting now.
    pub(super) fn new(
        max_unconfirmed: u64,
        max_unconfirmed_secs: f64,
        flushes: crate::storage::FlushCounters,
    ) -> Shared {
        Shared {
            flushes,
            start: Instant::now(),
            handed: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            last_pause_said: Mutex::new(None),
            max_unconfirmed,
            progress_ms: AtomicU64::new(0),
            max_stall_ms: (max_unconfirmed_secs.max(0.0) * 1000.0) as u64,
            failed: AtomicBool::new(false),
            interrupted: Mutex::new(None),
        }
    }

    fn now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }

    /// Milliseconds from the run's start to `t` (0 for an instant before it).
    pub(super) fn ms_at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_millis() as u64
    }

    /// Acks handed over and not yet confirmed.
    pub(super) fn waiting(&self) -> u64 {
        self.handed
            .load(Ordering::Relaxed)
            .saturating_sub(self.confirmed.load(Ordering::Relaxed))
    }

    /// Whether writers are held up by `--max-unconfirmed` or soon may be: more than
    /// half of it waits, or, when it did (`was`), still more than a quarter (so a
    /// count hovering at half does not flip it at every look).
    pub(super) fn near_bound(&self, was: bool) -> bool {
        let w = self.waiting();
        if was {
            w.saturating_mul(4) > self.max_unconfirmed
        } else {
            w.saturating_mul(2) > self.max_unconfirmed
        }
    }

    /// How long nothing was confirmed while acks waited (zero when none wait).
    pub(super) fn stalled(&self) -> Duration {
        self.stalled_at(Instant::now())
    }

    /// [`Shared::stalled`] as of `now` (a clock read the caller already made).
    fn stalled_at(&self, now: Instant) -> Duration {
        if self.waiting() == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(
            self.ms_at(now)
                .saturating_sub(self.progress_ms.load(Ordering::Relaxed)),
        )
    }

    /// Notes that the witness made progress (or that acks began to wait) now.
    pub(super) fn progress(&self) {
        self.progress_ms.store(self.now_ms(), Ordering::Relaxed);
    }
}

/// Where workload threads put acknowledgements; never blocks. Each clone has a lane
/// of its own (see `lanes`): give each workload thread its own clone.
pub struct AckSink {
    pub(super) lane: LaneTx,
    pub(super) shared: Arc<Shared>,
}

impl Clone for AckSink {
    fn clone(&self) -> AckSink {
        AckSink {
            lane: self.lane.open_another(),
            shared: self.shared.clone(),
        }
    }
}

impl AckSink {
    fn ms(&self) -> u32 {
        self.ms_at(Instant::now())
    }

    /// Says this sink's oldest write (or transaction) still in flight was issued at
    /// `t`, or that none is (`None`). Heartbeats carry the oldest of every sink's:
    /// when storage hangs before it fails, or a machine is cut while a write waits,
    /// that is when the writes stopped, not the moment the error or the silence came
    /// (`plugpull::verdict::cut`).
    pub fn in_flight_since(&self, t: Option<Instant>) {
        self.lane.set_in_flight(t.map(|t| self.shared.ms_at(t)));
    }

    /// Milliseconds from the run's start to `t`: the time stamp of an ack made at `t`.
    pub fn ms_at(&self, t: Instant) -> u32 {
        self.shared.ms_at(t).min(u32::MAX as u64) as u32
    }

    fn hand(&self, n: u64, m: Ack) {
        self.shared.handed.fetch_add(n, Ordering::Relaxed);
        // Taken by the reporter task; after it gave up, `finish` reports the failure
        // and what is left on the lane is never sent.
        self.lane.push(m);
    }

    /// Hands over one acknowledgement (a durable write, an acknowledged step) at
    /// once: a writer never holds an ack back; batching is the reporter task's job.
    pub fn ack(&self, ack: Ack) {
        self.hand(1, ack);
    }

    /// Records that client `client`'s transaction `seq` (per client, from 1, in order) committed.
    pub fn pg_ack(&self, client: u32, seq: u64) {
        let ms = self.ms();
        self.hand(1, Ack::Pg { client, seq, ms });
    }

    /// The run's leaf disks' flush counters now (for the `-P` lines).
    pub fn flush_sample(&self) -> plugpull::ledger::FlushSample {
        self.shared.flushes.sample()
    }

    /// Acks the listener confirmed so far.
    pub fn confirmed(&self) -> u64 {
        self.shared.confirmed.load(Ordering::Relaxed)
    }

    /// True while writers should pause: too many acks are unconfirmed, or nothing was
    /// confirmed for `--max-unconfirmed-secs` while acks wait, or a witness fault
    /// ended the run.
    pub fn paused(&self) -> bool {
        self.paused_at(Instant::now())
    }

    /// [`AckSink::paused`] with the stall measured as of `now`, a clock read the
    /// caller made at most one write ago (one clock read fewer per write; the stall
    /// bound is in seconds).
    pub fn paused_at(&self, now: Instant) -> bool {
        self.count_bound()
            || self.shared.stalled_at(now).as_millis() as u64 > self.shared.max_stall_ms
            || self.failed()
    }

    fn count_bound(&self) -> bool {
        over_bound(self.shared.waiting(), self.shared.max_unconfirmed)
    }

    /// True once a witness fault ended the run: writers must stop writing (the
    /// reporter's `finish` then returns the fault).
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Blocks the calling thread while [`AckSink::paused`], saying so on stderr (at
    /// most once every 10 s, with the matching "resumed"; a pause at the count bound
    /// only once it lasted [`QUIET_PAUSE`]). Returns early when `stop` is set or at
    /// `deadline` (the run's `-T`: a silent witness does not stretch the run; its end
    /// then waits at most [`super::FINISH_DEADLINE`] for it).
    pub fn wait_while_paused(&self, stop: &AtomicBool, deadline: Option<Instant>) {
        if !self.paused() || self.failed() {
            return;
        }
        let since = Instant::now();
        while self.paused()
            && !stop.load(Ordering::Relaxed)
            && !self.failed()
            && deadline.is_none_or(|d| Instant::now() < d)
        {
            let count = self.count_bound();
            if !self.shared.paused.load(Ordering::Relaxed) && tell_pause(count, since.elapsed()) {
                self.announce(count);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.shared.paused.swap(false, Ordering::Relaxed) {
            if !self.paused() {
                eprintln!("resumed: the listener caught up");
            } else if !self.failed() && deadline.is_some_and(|d| Instant::now() >= d) {
                eprintln!(
                    "-T reached while paused: the run ends; {} acknowledgements still wait for the witness's confirmation",
                    self.shared.waiting()
                );
            }
        }
    }

    /// Says on stderr why writers pause (`count`: at the count bound), unless it was
    /// said less than 10 s ago or another writer is saying it.
    fn announce(&self, count: bool) {
        let say = {
            let mut last = self.shared.last_pause_said.lock().unwrap();
            let say = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
            if say {
                *last = Some(Instant::now());
            }
            say
        };
        if !say || self.shared.paused.swap(true, Ordering::Relaxed) {
            return;
        }
        if count {
            eprintln!("paused: more than {} acknowledgements are not yet confirmed by the listener; waiting for it", self.shared.max_unconfirmed);
        } else {
            eprintln!(
                "paused: the witness has not confirmed for {:.1} s, {} acknowledgements waiting; waiting for it",
                self.shared.stalled().as_secs_f64(),
                self.shared.waiting()
            );
        }
    }
}

/// How long a pause at the count bound lasts before it is told: `write files` meets
/// its small bound (16) at every burst of steps, for milliseconds, as flow control.
pub const QUIET_PAUSE: Duration = Duration::from_secs(1);

/// Whether a pause that has lasted `paused_for` is told now: a stalled witness at
/// once, a pause at the count bound (`count`) once it lasted [`QUIET_PAUSE`].
fn tell_pause(count: bool, paused_for: Duration) -> bool {
    !count || paused_for >= QUIET_PAUSE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_at_the_count_bound_is_told_only_once_it_lasts() {
        assert!(!tell_pause(true, Duration::ZERO));
        assert!(!tell_pause(true, Duration::from_millis(999)));
        assert!(tell_pause(true, Duration::from_secs(1)));
        assert!(tell_pause(false, Duration::ZERO));
    }
}
