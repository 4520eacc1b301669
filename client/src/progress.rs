//! The `-P` progress line both workloads print to stderr, formatted and parsed in one
//! place (the demo and the tests read the acknowledged count back from it).
//!
//! Shape, after pgbench's `-P` line:
//! `progress: 5.0 s, 812.4 writes/s, lat 1.226 ms stddev 0.311, 4062 acknowledged`
//! (pgbench adds `, N failed` before the acknowledged count and says `tps`; when the
//! run's leaf disks are known, `, 1.00 flushes/write` — or `/commit` — comes before it:
//! the fewest flushes any leaf disk completed per operation in the interval).

/// The prefix every progress line starts with.
pub const PREFIX: &str = "progress:";

/// One progress interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Seconds since the run started.
    pub elapsed_s: f64,
    /// Operations per second during the interval (writes or transactions).
    pub rate: f64,
    /// `"writes/s"` or `"tps"`.
    pub unit: &'static str,
    /// Mean latency during the interval, ms.
    pub lat_ms: f64,
    /// Standard deviation of the latency during the interval, ms.
    pub stddev_ms: f64,
    /// Transactions rolled back during the interval (pgbench only).
    pub failed: Option<u64>,
    /// Flush requests per operation during the interval, on the leaf disk that
    /// completed the fewest (`crate::storage::FlushCounters::fewest_per_op`);
    /// `None` when not counted (no leaf disk, no operation).
    pub flushes_per_op: Option<f64>,
    /// Acknowledgements the listener has confirmed so far (whole run).
    pub acknowledged: u64,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{PREFIX} {:.1} s, {:.1} {}, lat {:.3} ms stddev {:.3}, ",
            self.elapsed_s, self.rate, self.unit, self.lat_ms, self.stddev_ms
        )?;
        if let Some(n) = self.failed {
            write!(f, "{n} failed, ")?;
        }
        if let Some(x) = self.flushes_per_op {
            let per = if self.unit == "tps" {
                "commit"
            } else {
                "write"
            };
            write!(f, "{x:.2} flushes/{per}, ")?;
        }
        write!(f, "{} acknowledged", self.acknowledged)
    }
}

/// The acknowledged count of a progress line (`…, N acknowledged`); `None` for any
/// other line.
pub fn acknowledged(line: &str) -> Option<u64> {
    line.strip_prefix(PREFIX)?
        .strip_suffix(" acknowledged")?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_formats_as_pgbench_does_and_parses_back() {
        let p = Progress {
            elapsed_s: 5.0,
            rate: 812.44,
            unit: "tps",
            lat_ms: 1.2261,
            stddev_ms: 0.3109,
            failed: Some(3),
            flushes_per_op: None,
            acknowledged: 4062,
        };
        let line = p.to_string();
        assert_eq!(
            line,
            "progress: 5.0 s, 812.4 tps, lat 1.226 ms stddev 0.311, 3 failed, 4062 acknowledged"
        );
        assert_eq!(acknowledged(&line), Some(4062));
        let file = Progress {
            unit: "writes/s",
            failed: None,
            ..p
        }
        .to_string();
        assert_eq!(
            file,
            "progress: 5.0 s, 812.4 writes/s, lat 1.226 ms stddev 0.311, 4062 acknowledged"
        );
        assert_eq!(acknowledged(&file), Some(4062));
        let flushed = Progress {
            unit: "writes/s",
            failed: None,
            flushes_per_op: Some(1.004),
            ..p
        }
        .to_string();
        assert_eq!(
            flushed,
            "progress: 5.0 s, 812.4 writes/s, lat 1.226 ms stddev 0.311, 1.00 flushes/write, 4062 acknowledged"
        );
        assert_eq!(acknowledged(&flushed), Some(4062));
        let committed = Progress {
            flushes_per_op: Some(0.5),
            ..p
        };
        assert_eq!(
            committed.to_string(),
            "progress: 5.0 s, 812.4 tps, lat 1.226 ms stddev 0.311, 3 failed, 0.50 flushes/commit, 4062 acknowledged"
        );
        assert_eq!(
            acknowledged("interrupted: finishing the writes in flight"),
            None
        );
    }
}
