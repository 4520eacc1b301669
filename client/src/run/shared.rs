//! What the writer threads of one run share ([`Shared`]): the seq counter and
//! watermark, the stop conditions, the first failed call and the per-worker counters
//! the progress line and the summary add up; and what each worker returns
//! ([`WorkerOut`]).

use super::watermark::Watermark;
use crate::latency::LatencyStats;
use crate::reporter::AckSink;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The first failed call of a run: its message, when it returned, and whether it is a
/// device error ([`plugpull::ledger::is_device_errno`]).
pub type FirstError = (String, Instant, bool);

/// What the workers of one run share: the seq counter, the stop conditions, the
/// watermark, the first error and the counters the progress line and summary read.
pub struct Shared {
    /// `--writes`: no seq above it is issued.
    pub limit: Option<u64>,
    /// The end of `--duration`.
    pub deadline: Option<Instant>,
    /// Set to stop every worker after its write in flight.
    pub stop: AtomicBool,
    /// Set when an interrupt (Ctrl-C, SIGINT) stopped the run before its `-T` or
    /// `--writes`/`--steps`.
    pub interrupted: AtomicBool,
    /// The seq counter and the acknowledged watermark each write carries.
    pub watermark: Watermark,
    /// Set (SeqCst) the moment a write or durability call failed: from then on no
    /// worker hands over an ack (fsyncgate: a later success cannot be trusted).
    failed: AtomicBool,
    /// The first error.
    error: Mutex<Option<FirstError>>,
    /// Per worker: what the progress line and the summary add up. One cache line
    /// each, so the workers do not contend for them.
    counters: Box<[Counters]>,
}

/// Adds `v` to a counter only one worker writes: a load and a store, no locked
/// read-modify-write.
fn add(a: &AtomicU64, v: u64) {
    a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
}

/// One worker's counters.
#[derive(Default)]
#[repr(align(128))]
struct Counters {
    /// Highest seq handed over as an ack.
    last_seq: AtomicU64,
    /// Writes issued.
    issued: AtomicU64,
    /// Writes acknowledged.
    done: AtomicU64,
    /// Sum of the acknowledged writes' latencies, µs.
    lat_us: AtomicU64,
    /// Sum of their squares, µs².
    lat_us2: AtomicU64,
}

impl Shared {
    /// A run of `jobs` workers that stops after `limit` writes or at `deadline` (or
    /// both, or neither).
    pub fn new(limit: Option<u64>, deadline: Option<Instant>, jobs: usize) -> Self {
        Shared {
            limit,
            deadline,
            stop: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            watermark: Watermark::new(jobs),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            counters: (0..jobs.max(1)).map(|_| Counters::default()).collect(),
        }
    }

    /// Records a failed call: stops every worker, and no ack is handed over after this.
    pub(crate) fn fail(&self, e: String, device: bool) {
        self.failed.store(true, Ordering::SeqCst);
        let at = Instant::now();
        self.error.lock().unwrap().get_or_insert((e, at, device));
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Counts one write issued by worker `id`.
    ///
    /// Panics if `id` is not below the run's `jobs`.
    pub(crate) fn count_issue(&self, id: usize) {
        add(&self.counters[id].issued, 1);
    }

    /// Waits while the reporter says to pause, then whether the worker stops: the
    /// deadline passed at `now` (or now, after a pause), the run was stopped, or
    /// the witness failed (all of which a pause may have brought about).
    pub(crate) fn pause_then_over(&self, sink: &AckSink, now: Instant) -> bool {
        let mut now = now;
        if sink.paused_at(now) {
            sink.wait_while_paused(&self.stop, self.deadline);
            now = Instant::now();
        }
        self.deadline.is_some_and(|d| now >= d)
            || self.stop.load(Ordering::Relaxed)
            || sink.failed()
    }

    /// Counts worker `id`'s acknowledgement with seq `seq` whose durability call
    /// took `lat` (the `-P` line's rate and latency figures).
    pub(crate) fn count_ack(&self, id: usize, seq: u64, lat: std::time::Duration) {
        let c = &self.counters[id];
        let us = lat.as_micros() as u64;
        c.last_seq.store(
            c.last_seq.load(Ordering::Relaxed).max(seq),
            Ordering::Relaxed,
        );
        add(&c.lat_us, us);
        add(&c.lat_us2, us * us);
        add(&c.done, 1);
    }

    /// Writes issued, all workers.
    pub fn issued(&self) -> u64 {
        self.sum(|c| &c.issued)
    }

    /// Writes acknowledged, the sum of their latencies (µs) and of their squares
    /// (µs²), all workers.
    pub fn acked(&self) -> (u64, u64, u64) {
        (
            self.sum(|c| &c.done),
            self.sum(|c| &c.lat_us),
            self.sum(|c| &c.lat_us2),
        )
    }

    /// Highest seq handed over as an ack (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.last_seq.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    fn sum(&self, f: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        self.counters
            .iter()
            .map(|c| f(c).load(Ordering::Relaxed))
            .sum()
    }

    /// Whether a call failed: from then on no worker hands over an ack.
    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// The first failed call, if one failed.
    pub fn first_error(&self) -> Option<FirstError> {
        self.error.lock().unwrap().clone()
    }
}

/// One worker's result: its latencies and how many of its blocks it wrote at least once.
pub struct WorkerOut {
    /// Latency of every acknowledged write.
    pub hist: LatencyStats,
    /// Blocks it owns that it wrote at least once.
    pub covered: u64,
}
