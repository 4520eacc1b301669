//! How the benchmarks say whether a target is met when the machine is noisy: the two
//! sides of a benchmark run in alternating rounds, so each round gives one ratio
//! `B / A` taken under the same conditions, and the spread of those ratios says how
//! far one run can be trusted.
//!
//! Reads one round per line on stdin, `A B` (two positive numbers, e.g. pgbench's tps
//! and plugpull's tps of the same round), and prints one line:
//!
//! ```text
//! tps C=8: B/A by round 1.021 0.964 1.047; geometric mean 1.010, 95 % interval 0.909-1.122 (t, 2 df); range 0.964-1.047; target >= 1.00: within noise
//! ```
//!
//! The mean and interval are those of the ratios' logarithms (a ratio and its inverse
//! weigh the same), with Student's t quantile for `n − 1` degrees of freedom
//! (`statrs`), exponentiated back. The verdict against `--target` (when one is given;
//! without one the line is a measurement only): **met** when the whole interval is on
//! the good side of it, **not met** when the whole interval is on the bad side,
//! **within noise** when the interval holds it, and **not judged** with one round (no
//! interval: one ratio says nothing of the noise). Two rounds give a wide interval
//! (t = 12.7 for 1 degree of freedom); use four or more, an even number, so that the
//! alternating order puts each side first equally often.
//!
//! Exit status: 0 (whatever the verdict: the verdict is in the text), 2 on bad input.

use clap::{Parser, ValueEnum};
use statrs::distribution::{ContinuousCDF, StudentsT};

/// Which side of the target is good.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Better {
    /// The ratio should be at least the target (a rate: tps, writes/s, MiB/s).
    Higher,
    /// The ratio should be at most the target (a cost: CPU time per transaction).
    Lower,
}

/// Paired ratios of two benchmark sides, round by round, against a target.
#[derive(Parser)]
struct Args {
    /// What the line is about, printed first (e.g. "tps C=8").
    #[arg(long, default_value = "B/A")]
    label: String,
    /// The target for the ratio B/A (e.g. 1.0 for parity); without one, no verdict.
    #[arg(long, requires = "better")]
    target: Option<f64>,
    /// Whether a ratio above the target is good (`higher`) or below it (`lower`).
    #[arg(long, value_enum, requires = "target")]
    better: Option<Better>,
}

/// The summary of `n ≥ 1` paired ratios.
#[derive(Debug, PartialEq)]
struct Summary {
    /// The ratios, in round order.
    ratios: Vec<f64>,
    /// Their geometric mean.
    mean: f64,
    /// The 95 % interval of the geometric mean (none for one round).
    interval: Option<(f64, f64)>,
}

/// The geometric mean of `b/a` over the rounds `pairs` and its 95 % t-interval.
///
/// Errors: no rounds, or a value that is not a positive finite number.
fn summarize(pairs: &[(f64, f64)]) -> Result<Summary, String> {
    if pairs.is_empty() {
        return Err("no rounds on stdin (want lines \"A B\")".into());
    }
    if let Some((a, b)) = pairs
        .iter()
        .find(|(a, b)| !(a.is_finite() && b.is_finite() && *a > 0.0 && *b > 0.0))
    {
        return Err(format!("not a pair of positive numbers: {a} {b}"));
    }
    let ratios: Vec<f64> = pairs.iter().map(|(a, b)| b / a).collect();
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let n = logs.len() as f64;
    let m = logs.iter().sum::<f64>() / n;
    let interval = if logs.len() < 2 {
        None
    } else {
        let var = logs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
        let t = StudentsT::new(0.0, 1.0, n - 1.0)
            .map_err(|e| e.to_string())?
            .inverse_cdf(0.975);
        let half = t * (var / n).sqrt();
        Some(((m - half).exp(), (m + half).exp()))
    };
    Ok(Summary {
        ratios,
        mean: m.exp(),
        interval,
    })
}

/// "met", "not met" or "within noise" for `s` against `target`; "not judged" for
/// one round.
fn verdict(s: &Summary, target: f64, better: Better) -> &'static str {
    let Some((lo, hi)) = s.interval else {
        return "not judged (one round)";
    };
    let (good, bad) = match better {
        Better::Higher => (lo >= target, hi < target),
        Better::Lower => (hi <= target, lo > target),
    };
    match (good, bad) {
        (true, _) => "met",
        (_, true) => "not met",
        _ => "within noise",
    }
}

fn main() {
    let a = Args::parse();
    let mut pairs = Vec::new();
    for (i, line) in std::io::stdin().lines().enumerate() {
        let line = line.unwrap_or_else(|e| fail(&format!("stdin: {e}")));
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let num = |s: &str| {
            s.parse::<f64>()
                .unwrap_or_else(|_| fail(&format!("line {}: {s:?} is not a number", i + 1)))
        };
        if f.len() != 2 {
            fail(&format!("line {}: want \"A B\", got {line:?}", i + 1));
        }
        pairs.push((num(f[0]), num(f[1])));
    }
    let s = summarize(&pairs).unwrap_or_else(|e| fail(&e));
    let by_round: Vec<String> = s.ratios.iter().map(|r| format!("{r:.3}")).collect();
    let (min, max) = s
        .ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let interval = match s.interval {
        Some((lo, hi)) => format!(
            "95 % interval {lo:.3}-{hi:.3} (t, {} df)",
            s.ratios.len() - 1
        ),
        None => "no interval (one round)".into(),
    };
    let judged = match (a.target, a.better) {
        (Some(t), Some(b)) => {
            let op = match b {
                Better::Higher => ">=",
                Better::Lower => "<=",
            };
            format!("; target {op} {t:.2}: {}", verdict(&s, t, b))
        }
        _ => String::new(),
    };
    println!(
        "{}: B/A by round {}; geometric mean {:.3}, {interval}; range {min:.3}-{max:.3}{judged}",
        a.label,
        by_round.join(" "),
        s.mean,
    );
}

fn fail(msg: &str) -> ! {
    eprintln!("paired-ratio: {msg}");
    std::process::exit(2);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_the_t_interval_of_the_log_ratios() {
        // Ratios 1.1, 1.0, 0.9: logs 0.095310, 0, −0.105361; mean −0.003350,
        // sd 0.100377, t(0.975, 2) = 4.302653, half width 0.249351.
        let s = summarize(&[(10.0, 11.0), (10.0, 10.0), (10.0, 9.0)]).unwrap();
        assert_eq!(s.ratios.len(), 3);
        assert!((s.mean - 0.996655).abs() < 1e-6, "{}", s.mean);
        let (lo, hi) = s.interval.unwrap();
        assert!((lo - 0.776700).abs() < 1e-6, "{lo}");
        assert!((hi - 1.278901).abs() < 1e-6, "{hi}");
        assert_eq!(verdict(&s, 1.0, Better::Higher), "within noise");
        assert_eq!(verdict(&s, 0.7, Better::Higher), "met");
        assert_eq!(verdict(&s, 1.3, Better::Higher), "not met");
        assert_eq!(verdict(&s, 1.3, Better::Lower), "met");
        assert_eq!(verdict(&s, 0.7, Better::Lower), "not met");
    }

    #[test]
    fn one_round_has_no_interval_and_no_verdict() {
        let s = summarize(&[(4.0, 5.0)]).unwrap();
        assert_eq!(
            s,
            Summary {
                ratios: vec![1.25],
                mean: 1.25,
                interval: None
            }
        );
        assert_eq!(verdict(&s, 1.0, Better::Higher), "not judged (one round)");
    }

    #[test]
    fn bad_input_is_named() {
        assert_eq!(
            summarize(&[]).unwrap_err(),
            "no rounds on stdin (want lines \"A B\")"
        );
        assert_eq!(
            summarize(&[(1.0, 2.0), (0.0, 3.0)]).unwrap_err(),
            "not a pair of positive numbers: 0 3"
        );
    }
}
