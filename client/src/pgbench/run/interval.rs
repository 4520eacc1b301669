//! The progress lines of `-P SECONDS`: the clients add each commit's latency and
//! each failed transaction to an [`Interval`]; every `SECONDS` a task takes the
//! figures gathered since the last line and prints one `progress:` line on stderr
//! (pgbench's format, plus the acknowledgements the listener confirmed so far).

use super::Shared;
use crate::reporter::AckSink;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Figures since the last progress line.
#[derive(Default, Debug)]
pub(super) struct Interval {
    /// Transactions committed.
    count: u64,
    /// Sum of their latencies, in ms.
    sum_ms: f64,
    /// Sum of the squares of their latencies, in ms².
    sum_sq_ms: f64,
    /// Transactions failed (serialization failure or deadlock).
    failed: u64,
}

impl Interval {
    /// Adds one committed transaction that took `ms` milliseconds.
    pub(super) fn commit(&mut self, ms: f64) {
        self.count += 1;
        self.sum_ms += ms;
        self.sum_sq_ms += ms * ms;
    }

    /// Adds one failed transaction.
    pub(super) fn fail(&mut self) {
        self.failed += 1;
    }

    /// Mean and standard deviation of the committed transactions' latencies, in ms
    /// (`(0, 0)` when none committed).
    fn mean_sd(&self) -> (f64, f64) {
        if self.count == 0 {
            return (0.0, 0.0);
        }
        let m = self.sum_ms / self.count as f64;
        (
            m,
            (self.sum_sq_ms / self.count as f64 - m * m).max(0.0).sqrt(),
        )
    }
}

/// Starts the task that prints a progress line on stderr every `every` from `start`,
/// with the figures the clients gathered in `shared` and the confirmed count of
/// `sink`. It runs until aborted.
pub(super) fn spawn_progress(
    every: Duration,
    start: Instant,
    shared: Arc<Shared>,
    sink: AckSink,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::from_std(start + every), every);
        let mut last = start;
        let mut flushes = sink.flush_sample();
        loop {
            tick.tick().await;
            let now = Instant::now();
            let iv = std::mem::take(&mut *shared.interval.lock().unwrap());
            let secs = now.duration_since(last).as_secs_f64().max(1e-9);
            last = now;
            let (mean, sd) = iv.mean_sd();
            let now_flushes = sink.flush_sample();
            let per_commit =
                crate::storage::FlushCounters::fewest_per_op(&flushes, &now_flushes, iv.count);
            flushes = now_flushes;
            let line = crate::progress::Progress {
                elapsed_s: now.duration_since(start).as_secs_f64(),
                rate: iv.count as f64 / secs,
                unit: "tps",
                lat_ms: mean,
                stddev_ms: sd,
                failed: Some(iv.failed),
                flushes_per_op: per_commit,
                acknowledged: sink.confirmed(),
            };
            eprintln!("{line}");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_stddev_of_an_interval() {
        let mut iv = Interval::default();
        assert_eq!(iv.mean_sd(), (0.0, 0.0));
        iv.commit(1.0);
        iv.commit(3.0);
        iv.fail();
        assert_eq!(iv.mean_sd(), (2.0, 1.0));
        assert_eq!(iv.count, 2);
        assert_eq!(iv.failed, 1);
        let mut one = Interval::default();
        one.commit(4.5);
        assert_eq!(one.mean_sd(), (4.5, 0.0));
        let taken = std::mem::take(&mut iv);
        assert_eq!((taken.count, taken.failed), (2, 1));
        assert_eq!((iv.count, iv.failed, iv.mean_sd()), (0, 0, (0.0, 0.0)));
    }
}
