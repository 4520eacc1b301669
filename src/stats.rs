//! Statistics over cuts: how sure a campaign makes us of a configuration's loss rate,
//! how many cuts a plan needs, and whether two configurations differ.
//!
//! The unit of inference is the **cut**: a valid cut failed when any acknowledged write
//! or commit was lost, torn, corrupt, misdirected or unserializable. Cuts are taken as
//! independent Bernoulli trials with one unknown per-cut failure rate `p`.
//!
//! * [`failure_rate`]: the exact (Clopper–Pearson) confidence interval for `p` from `k`
//!   failed of `n` valid cuts — C. J. Clopper, E. S. Pearson, "The use of confidence or
//!   fiducial limits illustrated in the case of the binomial", Biometrika 26 (1934) — by
//!   the beta quantiles of `statrs`. For `k = 0` the one-sided bound is `1 − α^(1/n)`.
//! * [`cuts_needed`] / [`rate_shown`]: the planner, `⌈ln(1−c) / ln(1−p)⌉` and its inverse.
//! * [`fisher_exact`]: Fisher's exact test on the 2×2 table of two campaigns, by the
//!   hypergeometric distribution of `statrs`; the two-sided p-value sums the tables no
//!   more probable than the one observed (the rule of R's `fisher.test`).
//!
//! Pure functions; percentages are fractions in `0.0..=1.0` throughout.

use serde::Serialize;
use statrs::distribution::{Beta, ContinuousCDF, Discrete, Hypergeometric};

/// The confidence level used when none is given: 95 %.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;

/// What `k` failed of `n` valid cuts say about the per-cut failure rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateBound {
    /// Failed valid cuts.
    pub failed: u32,
    /// Valid cuts.
    pub valid: u32,
    /// The confidence level, e.g. `0.95`.
    pub confidence: f64,
    /// The point estimate `k / n`.
    pub estimate: f64,
    /// The two-sided Clopper–Pearson interval's lower end (0 when `k = 0`).
    pub lower: f64,
    /// The two-sided Clopper–Pearson interval's upper end (1 when `k = n`).
    pub upper: f64,
    /// The one-sided upper confidence bound: the rate is below it with `confidence`.
    pub upper_one_sided: f64,
    /// The one-sided lower confidence bound: the rate is above it with `confidence`
    /// (0 when nothing failed).
    pub lower_one_sided: f64,
}

/// Checks a confidence level or a rate is strictly between 0 and 1.
fn fraction(what: &str, x: f64) -> Result<f64, String> {
    if x > 0.0 && x < 1.0 {
        Ok(x)
    } else {
        Err(format!(
            "{what} must be above 0 and below 1 (or above 0 % and below 100 %), not {x}"
        ))
    }
}

/// The `q` quantile of Beta(a, b).
fn beta_quantile(a: f64, b: f64, q: f64) -> f64 {
    Beta::new(a, b)
        .expect("shape parameters are positive")
        .inverse_cdf(q)
}

/// The exact confidence interval and one-sided bound for `failed` of `valid` cuts.
///
/// Errors: `failed > valid`, or `confidence` not strictly between 0 and 1. Returns
/// `Ok(None)` when `valid = 0`: nothing was measured, and no bound is given.
pub fn failure_rate(failed: u32, valid: u32, confidence: f64) -> Result<Option<RateBound>, String> {
    let c = fraction("the confidence level", confidence)?;
    if failed > valid {
        return Err(format!("{failed} failed cuts of {valid} valid cuts"));
    }
    if valid == 0 {
        return Ok(None);
    }
    let (k, n) = (f64::from(failed), f64::from(valid));
    let alpha = 1.0 - c;
    let lower = if failed == 0 {
        0.0
    } else {
        beta_quantile(k, n - k + 1.0, alpha / 2.0)
    };
    let (upper, upper_one_sided) = if failed == valid {
        (1.0, 1.0)
    } else if failed == 0 {
        // Beta(1, n)'s quantile in closed form: exact, and what people check by hand.
        (1.0 - (alpha / 2.0).powf(1.0 / n), 1.0 - alpha.powf(1.0 / n))
    } else {
        (
            beta_quantile(k + 1.0, n - k, 1.0 - alpha / 2.0),
            beta_quantile(k + 1.0, n - k, c),
        )
    };
    let lower_one_sided = if failed == 0 {
        0.0
    } else {
        beta_quantile(k, n - k + 1.0, alpha)
    };
    Ok(Some(RateBound {
        failed,
        valid,
        confidence: c,
        estimate: k / n,
        lower,
        upper,
        upper_one_sided,
        lower_one_sided,
    }))
}

impl RateBound {
    /// One sentence a person can sign, e.g. `0 of 30 valid cuts failed: the loss rate
    /// per cut is below 9.51 % with 95 % confidence`, or with failures `5 of 30 valid
    /// cuts failed (16.7 %; 95 % interval 5.64 %–34.8 %): the loss rate per cut is at
    /// least 6.8 % with 95 % confidence`. Upper bounds are rounded up and lower bounds
    /// down ([`percent_up`], [`percent_down`]), so the sentence never claims more than
    /// was computed.
    pub fn sentence(&self) -> String {
        let conf = percent(self.confidence);
        if self.failed == 0 {
            format!(
                "0 of {} valid cuts failed: the loss rate per cut is below {} with {conf} confidence",
                self.valid,
                percent_up(self.upper_one_sided)
            )
        } else {
            format!(
                "{} of {} valid cuts failed ({}; {conf} interval {}–{}): the loss rate per cut is \
                 at least {} with {conf} confidence",
                self.failed,
                self.valid,
                percent(self.estimate),
                percent_down(self.lower),
                percent_up(self.upper),
                percent_down(self.lower_one_sided)
            )
        }
    }
}

/// The valid cuts needed to see at least one failure with probability `confidence`
/// when the true per-cut failure rate is `rate`: `⌈ln(1−c) / ln(1−p)⌉`
/// (p = 0.25 → 11, 0.10 → 29, 0.05 → 59, 0.01 → 299 at c = 0.95).
///
/// Errors: `rate` or `confidence` not strictly between 0 and 1.
pub fn cuts_needed(rate: f64, confidence: f64) -> Result<u32, String> {
    let p = fraction("the failure rate", rate)?;
    let c = fraction("the confidence level", confidence)?;
    // ln(1−p) by ln_1p: exact for small p, where 1−p rounds to 1.
    let ln_miss = (-p).ln_1p();
    let x = (1.0 - c).ln() / ln_miss;
    if !x.is_finite() || x > f64::from(u32::MAX) {
        return Err(format!(
            "a rate of {rate} needs more than {} cuts",
            u32::MAX
        ));
    }
    // Rounding must not add a cut when x is a whole number up to float error.
    let mut n = (x - 1e-9).ceil().max(1.0);
    if (n * ln_miss).exp() > (1.0 - c) * (1.0 + 1e-12) {
        n += 1.0;
    }
    Ok(n as u32)
}

/// The rate that `clean` valid cuts with no failure show the per-cut failure rate to
/// be below, with `confidence`: `1 − (1−c)^(1/n)` (60 → 4.87 % at 95 %).
///
/// Errors: `clean = 0`, or `confidence` not strictly between 0 and 1.
pub fn rate_shown(clean: u32, confidence: f64) -> Result<f64, String> {
    let c = fraction("the confidence level", confidence)?;
    if clean == 0 {
        return Err("0 cuts show nothing: give at least 1 cut".into());
    }
    Ok(1.0 - (1.0 - c).powf(1.0 / f64::from(clean)))
}

/// Fisher's exact test on two campaigns' valid cuts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fisher {
    /// `[[A failed, A passed], [B failed, B passed]]`.
    pub table: [[u32; 2]; 2],
    /// Two-sided p-value: the probability, were both failure rates equal, of a table
    /// no more probable than this one.
    pub two_sided: f64,
    /// One-sided p-value for "A fails more often than B".
    pub a_worse: f64,
    /// One-sided p-value for "B fails more often than A".
    pub b_worse: f64,
}

/// Fisher's exact test of A (`a_failed` of `a_valid` cuts) against B.
///
/// Errors: more failed than valid cuts in either.
pub fn fisher_exact(
    a_failed: u32,
    a_valid: u32,
    b_failed: u32,
    b_valid: u32,
) -> Result<Fisher, String> {
    if a_failed > a_valid || b_failed > b_valid {
        return Err(format!(
            "more failed than valid cuts: {a_failed} of {a_valid}, {b_failed} of {b_valid}"
        ));
    }
    if a_valid == 0 || b_valid == 0 {
        return Err("a side without a valid cut: nothing to compare".into());
    }
    let table = [
        [a_failed, a_valid - a_failed],
        [b_failed, b_valid - b_failed],
    ];
    let population = u64::from(a_valid) + u64::from(b_valid);
    let failures = u64::from(a_failed) + u64::from(b_failed);
    // X = A's failures, given the margins: hypergeometric.
    let h = Hypergeometric::new(population, failures, u64::from(a_valid))
        .map_err(|e| format!("Fisher's exact test: {e}"))?;
    let lo = failures.saturating_sub(u64::from(b_valid));
    let hi = failures.min(u64::from(a_valid));
    let observed = u64::from(a_failed);
    let p_obs = h.pmf(observed);
    let (mut two, mut ge, mut le) = (0.0, 0.0, 0.0);
    for x in lo..=hi {
        let p = h.pmf(x);
        if p <= p_obs * (1.0 + 1e-7) {
            two += p;
        }
        if x >= observed {
            ge += p;
        }
        if x <= observed {
            le += p;
        }
    }
    Ok(Fisher {
        table,
        two_sided: two.min(1.0),
        a_worse: ge.min(1.0),
        b_worse: le.min(1.0),
    })
}

impl Fisher {
    /// A plain sentence at significance level `alpha` (e.g. 0.05), naming the
    /// campaigns `a` and `b`.
    pub fn sentence(&self, a: &str, b: &str, alpha: f64) -> String {
        let rate = |r: [u32; 2]| {
            let n = r[0] + r[1];
            if n == 0 {
                "no valid cut".to_string()
            } else {
                format!("{} of {n} cuts failed", r[0])
            }
        };
        let (ra, rb) = (self.table[0], self.table[1]);
        let more = |x: [u32; 2], y: [u32; 2]| {
            u64::from(x[0]) * u64::from(y[0] + y[1]) > u64::from(y[0]) * u64::from(x[0] + x[1])
        };
        let level = percent(alpha);
        let p = format!("two-sided p = {}", pvalue(self.two_sided));
        let (worse, better) = if more(ra, rb) {
            (a, b)
        } else if more(rb, ra) {
            (b, a)
        } else {
            return format!(
                "{a}: {}, {b}: {}: the same observed rate; the test finds no difference ({p}), \
                 which does not show they are equal",
                rate(ra),
                rate(rb)
            );
        };
        if self.two_sided < alpha {
            format!(
                "{a}: {}, {b}: {}: {worse} fails more often than {better}, significant at the {level} level ({p})",
                rate(ra),
                rate(rb)
            )
        } else {
            format!(
                "{a}: {}, {b}: {}: {worse} failed more often than {better}, but the difference is not \
                 significant at the {level} level ({p}); more cuts can tell",
                rate(ra),
                rate(rb)
            )
        }
    }
}

/// Parses a rate or confidence level written as a fraction (`0.1`) or a percentage
/// (`10%`, `10 %`), for the command line. Errors: not a number, or not strictly
/// between 0 and 1 (0 % and 100 %).
pub fn parse_fraction(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a fraction (0.1) or a percentage (10%)"))?;
    fraction("the value", v / scale)
        .map_err(|_| format!("{s:?} must be above 0 and below 1 (or above 0 % and below 100 %)"))
}

/// Parses a confidence level ([`parse_fraction`]) of at least 50 %: `0.95`, `99%`.
/// Errors: as [`parse_fraction`], or below 50 % (`0.95%` is 0.95 %, surely a slip).
pub fn parse_confidence(s: &str) -> Result<f64, String> {
    let c = parse_fraction(s)?;
    if c < 0.5 {
        return Err(format!(
            "{s:?} is a confidence level of {}: give at least 50 % (0.95 or 95%)",
            percent(c)
        ));
    }
    Ok(c)
}

/// The plan's promise: what `cuts` valid cuts with none failed would show, e.g.
/// `60 valid cuts with none failed would show the loss rate per cut is below 4.87 %
/// with 95 % confidence`. Errors as [`rate_shown`].
pub fn plan_sentence(cuts: u32, confidence: f64) -> Result<String, String> {
    let r = rate_shown(cuts, confidence)?;
    Ok(format!(
        "{cuts} valid cuts with none failed would show the loss rate per cut is below {} with {} confidence",
        percent_up(r),
        percent(confidence)
    ))
}

/// The planner's sentence for `rate`, e.g. `to see at least one failed cut with 95 %
/// confidence when 10 % of cuts lose acknowledged writes: 29 valid cuts`. Errors as
/// [`cuts_needed`].
pub fn need_sentence(rate: f64, confidence: f64) -> Result<String, String> {
    let n = cuts_needed(rate, confidence)?;
    Ok(format!(
        "to see at least one failed cut with {} confidence when {} of cuts lose acknowledged writes: {n} valid cuts",
        percent(confidence),
        percent(rate)
    ))
}

/// A fraction as a percentage with three significant digits, trailing zeros dropped:
/// 0.0950 → `9.5 %`, 0.0295 → `2.95 %`, 0.451 → `45.1 %`, 1.0 → `100 %`.
pub fn percent(x: f64) -> String {
    format!("{} %", significant(x * 100.0))
}

/// [`percent`] rounded up at its last digit: for upper bounds (0.095034 → `9.51 %`).
pub fn percent_up(x: f64) -> String {
    format!("{} %", directed(x * 100.0, true))
}

/// [`percent`] rounded down at its last digit: for lower bounds (0.068056 → `6.8 %`).
pub fn percent_down(x: f64) -> String {
    format!("{} %", directed(x * 100.0, false))
}

/// `v` to three significant digits, rounded up (`up`) or down, trailing zeros
/// dropped. A value within 1e-9 of a digit is taken as that digit (9.5 stays 9.5).
fn directed(v: f64, up: bool) -> String {
    if v <= 0.0 || !v.is_finite() {
        return significant(v.max(0.0));
    }
    let digits = 2 - v.log10().floor() as i32;
    let scale = 10f64.powi(digits);
    let scaled = v * scale;
    let r = if up {
        (scaled - 1e-9).ceil()
    } else {
        (scaled + 1e-9).floor()
    } / scale;
    significant(r)
}

/// A p-value to three significant digits: `0.0522`, `0.21`, `1`.
pub fn pvalue(p: f64) -> String {
    significant(p)
}

fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests;
