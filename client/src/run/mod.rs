//! The skeleton every write workload shares (`write file`, `write files`): the state
//! its writer threads share ([`Shared`]), the seq counter and acknowledged watermark
//! ([`watermark::Watermark`]), the checks of its times ([`check_times`]), waiting for
//! the workers with the `-P` progress line ([`wait_for_workers`]), and the end of the
//! run ([`end_run`], [`device_error_end`]). A workload brings its own workers and
//! summary; `write pgbench` has its own clients and shares only the reporter.
//!
//! * `args.rs` — [`RunArgs`]: `-T`, `-P`, `--seed`, `--json`, `--force` and the
//!   reporter's options, flattened into each workload's arguments.
//! * `shared.rs` — [`Shared`], [`WorkerOut`], [`FirstError`].
//! * `watermark.rs` — [`watermark::Watermark`]: seqs issued, the acknowledged prefix.
//! * `end.rs` — [`RunEnd`], [`end_run`], [`device_error_end`].
//! * `summary.rs` — [`SummaryHead`], the head every write summary embeds.

mod args;
mod end;
mod shared;
mod summary;
pub mod watermark;

pub use args::{RunArgs, DEFAULT_DURATION};
pub use end::{device_error_end, end_run, RunEnd};
pub use shared::{FirstError, Shared, WorkerOut};
pub use summary::SummaryHead;

use crate::reporter::AckSink;
use crate::Error;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Refuses a `--duration` or `-P/--progress` of 0 s (every write workload's).
pub fn check_times(duration: Option<Duration>, progress: Option<Duration>) -> Result<(), Error> {
    if duration.is_some_and(|d| d.is_zero()) {
        return Err("--duration must be more than 0 s".into());
    }
    if progress.is_some_and(|d| d.is_zero()) {
        return Err("-P/--progress must be more than 0 s".into());
    }
    Ok(())
}

/// The counters behind the `-P` progress line, as of the last line printed.
struct ProgressMeter {
    at: Instant,
    done: u64,
    lat_us: u64,
    lat_us2: u64,
    flushes: plugpull::ledger::FlushSample,
}

impl ProgressMeter {
    /// The progress line since the last one: write rate and the mean and standard
    /// deviation of their latency (ms), with the listener's acknowledged count.
    fn line(&mut self, sh: &Shared, start: Instant, sink: &AckSink) -> crate::progress::Progress {
        let now = Instant::now();
        let flushes = sink.flush_sample();
        let (n, s1, s2) = sh.acked();
        let dn = (n - self.done) as f64;
        let (mean, sd) = if dn > 0.0 {
            let m = (s1 - self.lat_us) as f64 / dn;
            let var = ((s2 - self.lat_us2) as f64 / dn - m * m).max(0.0);
            (m / 1000.0, var.sqrt() / 1000.0)
        } else {
            (0.0, 0.0)
        };
        let line = crate::progress::Progress {
            elapsed_s: start.elapsed().as_secs_f64(),
            rate: dn / (now - self.at).as_secs_f64(),
            unit: "writes/s",
            lat_ms: mean,
            stddev_ms: sd,
            failed: None,
            flushes_per_op: crate::storage::FlushCounters::fewest_per_op(
                &self.flushes,
                &flushes,
                n - self.done,
            ),
            acknowledged: sink.confirmed(),
        };
        *self = ProgressMeter {
            at: now,
            done: n,
            lat_us: s1,
            lat_us2: s2,
            flushes,
        };
        line
    }
}

/// Waits for every writer thread, printing a progress line every `progress` on stderr;
/// an interrupt (Ctrl-C) stops the workers after their writes in flight.
pub async fn wait_for_workers(
    handles: Vec<JoinHandle<WorkerOut>>,
    sh: &Shared,
    sink: AckSink,
    progress: Option<Duration>,
    start: Instant,
) -> Vec<WorkerOut> {
    let joined = tokio::task::spawn_blocking(move || {
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread panicked"))
            .collect::<Vec<_>>()
    });
    tokio::pin!(joined);
    let mut tick = progress.map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
    let mut meter = ProgressMeter {
        at: Instant::now(),
        done: 0,
        lat_us: 0,
        lat_us2: 0,
        flushes: sink.flush_sample(),
    };
    let mut interrupted = false;
    let interrupt = crate::interrupt::interrupted();
    tokio::pin!(interrupt);
    loop {
        tokio::select! {
            r = &mut joined => break r.expect("join writers"),
            _ = async { tick.as_mut().unwrap().tick().await }, if tick.is_some() => {
                eprintln!("{}", meter.line(sh, start, &sink));
            }
            _ = &mut interrupt, if !interrupted => {
                interrupted = true;
                eprintln!("interrupted: finishing the writes in flight");
                sh.interrupted.store(true, Ordering::Relaxed);
                sh.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}
