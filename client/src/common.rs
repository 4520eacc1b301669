//! Pieces every workload uses: the run manifest's common fields and latency statistics.

use hdrhistogram::Histogram;
use plugpull::ledger::{Manifest, Workload};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// This machine's host name (as `gethostname(2)` gives it), or `"unknown"`.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A manifest for `workload` on this host, started now.
pub fn make_manifest(workload: Workload) -> Manifest {
    Manifest {
        host: hostname(),
        started_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        workload,
        boot_id: crate::target_id::boot_id(),
        listener_order: 0,
        listener_created_unix_ms: 0,
    }
}

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

/// Formats a byte count the way the command line accepts it (`64 MiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Completes at the next SIGINT (Ctrl-C) or SIGTERM (`kill`, `systemctl stop`): a
/// writer treats both alike, stopping its workers and finishing the run properly.
///
/// Errors: the signal handlers cannot be installed.
pub async fn interrupted() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
