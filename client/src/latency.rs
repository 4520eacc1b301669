//! Latency statistics every workload reports: an HDR histogram of microseconds and
//! the summary (mean, percentiles, ms) its report prints.

use hdrhistogram::Histogram;
use std::time::Duration;

/// Latency statistics: an HDR histogram of microseconds (1 µs to 1 hour, 3 significant digits).
#[derive(Clone)]
pub struct LatencyStats(Histogram<u64>);

impl Default for LatencyStats {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyStats {
    /// An empty histogram.
    pub fn new() -> Self {
        LatencyStats(
            Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
        )
    }

    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        self.0.saturating_record((d.as_micros() as u64).max(1));
    }

    /// Adds another histogram's samples.
    pub fn merge(&mut self, other: &LatencyStats) {
        self.0.add(&other.0).expect("same bounds");
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// Mean, ms.
    pub fn mean_ms(&self) -> f64 {
        self.0.mean() / 1000.0
    }

    /// Standard deviation, ms.
    pub fn stddev_ms(&self) -> f64 {
        self.0.stdev() / 1000.0
    }

    /// Percentile `p` (0–100), ms.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        self.0.value_at_quantile(p / 100.0) as f64 / 1000.0
    }

    /// Maximum, ms.
    pub fn max_ms(&self) -> f64 {
        self.0.max() as f64 / 1000.0
    }
}

/// Latency figures in ms, as the `--json` summaries of both workloads give them.
#[derive(serde::Serialize)]
pub struct LatencySummary {
    /// Mean.
    pub average: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl LatencySummary {
    /// The figures of `h`.
    pub fn of(h: &LatencyStats) -> Self {
        LatencySummary {
            average: h.mean_ms(),
            stddev: h.stddev_ms(),
            p50: h.percentile_ms(50.0),
            p99: h.percentile_ms(99.0),
            max: h.max_ms(),
        }
    }
}

/// Prints the pgbench-style latency lines of a write run (average, stddev, p50, p99, max; ms).
pub fn print_latency(l: &LatencySummary) {
    println!("latency average = {:.3} ms", l.average);
    println!("latency stddev = {:.3} ms", l.stddev);
    println!("latency p50 = {:.3} ms", l.p50);
    println!("latency p99 = {:.3} ms", l.p99);
    println!("latency max = {:.3} ms", l.max);
}
