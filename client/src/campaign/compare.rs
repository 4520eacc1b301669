//! `campaign plan` (how many cuts a claim needs) and `campaign compare` (is A's
//! failure rate different from B's: Fisher's exact test on their valid cuts, and what
//! differs in their configurations). The arithmetic is [`plugpull::stats`].

use crate::Error;
use plugpull::campaign::Campaign;
use plugpull::stats::{self, percent, pvalue};

/// `campaign plan` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct PlanArgs {
    /// The per-cut failure rate to be able to catch: a fraction (0.1) or a percentage (10%).
    #[arg(long, value_parser = stats::parse_fraction, required_unless_present = "cuts")]
    pub rate: Option<f64>,
    /// The inverse: what this many valid cuts with none failed would show.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub cuts: Option<u32>,
    /// The confidence level.
    #[arg(long, default_value = "0.95", value_parser = stats::parse_confidence)]
    pub confidence: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Prints the plan. Errors: none beyond the arguments' (checked by their parsers).
pub fn plan(a: &PlanArgs) -> Result<bool, Error> {
    let need = a
        .rate
        .map(|r| stats::cuts_needed(r, a.confidence))
        .transpose()
        .map_err(Error::Msg)?;
    // What the planned number of cuts (or the given one) shows when none fails.
    let shown_by = a.cuts.or(need);
    let shown = shown_by
        .map(|n| stats::rate_shown(n, a.confidence))
        .transpose()
        .map_err(Error::Msg)?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"confidence": a.confidence, "rate": a.rate, "cuts_needed": need,
                "cuts": shown_by, "rate_shown": shown})
        );
        return Ok(true);
    }
    if let Some(r) = a.rate {
        println!(
            "{}",
            stats::need_sentence(r, a.confidence).map_err(Error::Msg)?
        );
    }
    if let Some(n) = shown_by {
        println!(
            "{}",
            stats::plan_sentence(n, a.confidence).map_err(Error::Msg)?
        );
    }
    println!(
        "(valid cuts only: not-measured and invalid cuts do not count; a failed cut shows the rate is above 0)"
    );
    Ok(true)
}

/// `campaign compare` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// Campaign A (e.g. barriers off).
    pub a: String,
    /// Campaign B (e.g. barriers on).
    pub b: String,
    /// The significance level of the sentence.
    #[arg(long, default_value = "0.05", value_parser = stats::parse_fraction)]
    pub alpha: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The parts of two configuration texts ([`plugpull::probe::Probe::configuration`],
/// `" / "`-separated, `" + "` between workloads' stacks) that are in one and not the
/// other: `(only in a, only in b)`.
pub fn config_difference(a: &str, b: &str) -> (Vec<String>, Vec<String>) {
    let parts = |s: &str| -> Vec<String> {
        s.split(" | ")
            .flat_map(|x| x.split(" + "))
            .flat_map(|x| x.split(" / "))
            .map(str::to_string)
            .collect()
    };
    let (pa, pb) = (parts(a), parts(b));
    let only = |x: &[String], y: &[String]| -> Vec<String> {
        let mut v: Vec<String> = x.iter().filter(|p| !y.contains(p)).cloned().collect();
        v.dedup();
        v
    };
    (only(&pa, &pb), only(&pb, &pa))
}

/// The campaign's configurations, `" | "`-joined when its hosts differ; `None` when no
/// host was verified yet.
fn configuration(c: &Campaign) -> Option<String> {
    let all: Vec<String> = c.configurations().into_iter().map(|(c, _)| c).collect();
    (!all.is_empty()).then(|| all.join(" | "))
}

/// Compares campaigns `a` and `b` (already loaded) and prints the table, the test and
/// the difference. `Ok(true)` always once computed (a difference is no error).
///
/// Errors: a campaign has no valid cut (nothing to compare).
pub fn compare(a: &Campaign, b: &Campaign, args: &CompareArgs) -> Result<bool, Error> {
    if a.definition.name == b.definition.name {
        return Err(Error::Msg(format!(
            "campaign {} compared with itself: give two campaigns",
            a.definition.name
        )));
    }
    let (ra, rb) = (a.roll_up(), b.roll_up());
    for (c, r) in [(a, &ra), (b, &rb)] {
        if r.valid == 0 {
            return Err(Error::Msg(format!(
                "campaign {} has no valid cut ({}): nothing to compare",
                c.definition.name,
                r.line()
            )));
        }
    }
    let (na, nb) = (&a.definition.name, &b.definition.name);
    let f = stats::fisher_exact(ra.failed, ra.valid, rb.failed, rb.valid).map_err(Error::Msg)?;
    let (ca, cb) = (configuration(a), configuration(b));
    let diff = match (&ca, &cb) {
        (Some(x), Some(y)) => Some(config_difference(x, y)),
        _ => None,
    };
    let workloads_differ = a.definition.workloads != b.definition.workloads;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "a": {"name": na, "roll_up": ra, "bound": ra.bound(stats::DEFAULT_CONFIDENCE),
                      "configuration": ca, "workloads": a.definition.workloads},
                "b": {"name": nb, "roll_up": rb, "bound": rb.bound(stats::DEFAULT_CONFIDENCE),
                      "configuration": cb, "workloads": b.definition.workloads},
                "fisher": f, "alpha": args.alpha,
                "sentence": f.sentence(na, nb, args.alpha),
                "only_in_a": diff.as_ref().map(|d| &d.0), "only_in_b": diff.as_ref().map(|d| &d.1),
            })
        );
        return Ok(true);
    }
    let w = na.len().max(nb.len()).max(8);
    println!(
        "{:<w$}  {:>6}  {:>6}  {:>10}  failure rate (95 % interval)",
        "campaign", "failed", "passed", "valid cuts"
    );
    for (n, r) in [(na, &ra), (nb, &rb)] {
        let b = r.bound(stats::DEFAULT_CONFIDENCE).expect("valid > 0");
        println!(
            "{n:<w$}  {:>6}  {:>6}  {:>10}  {} ({}–{})",
            r.failed,
            r.passed,
            r.valid,
            percent(b.estimate),
            stats::percent_down(b.lower),
            stats::percent_up(b.upper)
        );
    }
    println!(
        "Fisher's exact test: two-sided p = {}; one-sided p = {} ({na} fails more often), {} ({nb} fails more often)",
        pvalue(f.two_sided),
        pvalue(f.a_worse),
        pvalue(f.b_worse)
    );
    println!("{}", f.sentence(na, nb, args.alpha));
    match diff {
        Some((x, y)) if x.is_empty() && y.is_empty() => {
            println!("configuration: the same stack ({})", ca.unwrap_or_default())
        }
        Some((x, y)) => {
            println!("configuration: only in {na}: {}", list(&x));
            println!("               only in {nb}: {}", list(&y));
        }
        None => println!(
            "configuration: not known for {} (no verified cut stored a probe)",
            if ca.is_none() { na } else { nb }
        ),
    }
    if workloads_differ {
        println!(
            "workloads differ: {na}: {}",
            a.definition.workloads.join(" | ")
        );
        println!(
            "                  {nb}: {}",
            b.definition.workloads.join(" | ")
        );
    }
    Ok(true)
}

fn list(parts: &[String]) -> String {
    if parts.is_empty() {
        "(nothing)".into()
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_difference_names_the_parts_each_side_alone_has() {
        let a = "postgresql 15.4 (fsync on, synchronous_commit on, full_page_writes off, wal_sync_method fdatasync, data_checksums on) / ext4 (rw,nobarrier) / disk X 1 (write back, fua)";
        let b = "postgresql 15.4 (fsync on, synchronous_commit on, full_page_writes on, wal_sync_method fdatasync, data_checksums on) / ext4 (rw) / disk X 1 (write back, fua)";
        let (x, y) = config_difference(a, b);
        assert_eq!(
            x,
            vec![
                "postgresql 15.4 (fsync on, synchronous_commit on, full_page_writes off, wal_sync_method fdatasync, data_checksums on)".to_string(),
                "ext4 (rw,nobarrier)".to_string()
            ]
        );
        assert_eq!(
            y,
            vec![
                "postgresql 15.4 (fsync on, synchronous_commit on, full_page_writes on, wal_sync_method fdatasync, data_checksums on)".to_string(),
                "ext4 (rw)".to_string()
            ]
        );
        assert_eq!(config_difference(a, a), (vec![], vec![]));
    }
}
