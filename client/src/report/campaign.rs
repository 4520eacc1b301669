//! `plugpull report --campaign NAME`: a campaign as one self-contained HTML page, from
//! its record alone (the cuts' stored verify reports; no target is read again, later
//! runs have overwritten it):
//!
//! * the plan and the roll-up with its confidence bound ([`plugpull::stats`]);
//! * a strip of all cuts in the order they were made, coloured by outcome (passed,
//!   failed, not measured, invalid), with a legend counting each;
//! * for each failed cut, how long before the cut its oldest lost write was
//!   acknowledged;
//! * the per-cut table (validity, reason, verdict, the evidence validity rests on) and
//!   the configurations with their own roll-ups.

use super::figures::{self, hex, FAIL, WIDTH};
use super::html::Page;
use crate::campaign::print::CONFIDENCE;
use crate::Error;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plugpull::campaign::{Campaign, CutRecord, RollUp, Validity};

/// A cut's outcome, as the strip colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Valid, nothing acknowledged lost or damaged.
    Passed,
    /// Valid, and its verify found acknowledged writes lost or damaged.
    Failed,
    /// Not a measurement (the reason says why).
    NotMeasured,
    /// The cut went wrong.
    Invalid,
}

impl Outcome {
    /// The outcome of `c`.
    pub fn of(c: &CutRecord) -> Outcome {
        match (&c.validity, &c.verdict) {
            (Validity::Valid, Some(v)) if v.failed => Outcome::Failed,
            (Validity::Valid, _) => Outcome::Passed,
            (Validity::NotMeasured(_), _) => Outcome::NotMeasured,
            (Validity::Invalid(_), _) => Outcome::Invalid,
        }
    }

    /// Its name in the legend.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::NotMeasured => "not measured",
            Outcome::Invalid => "invalid",
        }
    }

    /// Its colour.
    pub fn color(self) -> RGBColor {
        match self {
            Outcome::Passed => RGBColor(0x2E, 0x7D, 0x32),
            Outcome::Failed => FAIL,
            Outcome::NotMeasured => RGBColor(0xBD, 0xBD, 0xBD),
            Outcome::Invalid => RGBColor(0x42, 0x42, 0x42),
        }
    }
}

const ALL: [Outcome; 4] = [
    Outcome::Passed,
    Outcome::Failed,
    Outcome::NotMeasured,
    Outcome::Invalid,
];

/// Cells per row of the strip.
pub const STRIP_COLUMNS: usize = 50;
/// Side of one strip cell, px.
const STRIP_CELL: i32 = 14;

/// The strip: one square per cut of `outcomes` (in order, [`STRIP_COLUMNS`] a row),
/// coloured by outcome, and a legend of the four outcomes with their counts.
///
/// Errors: plotters failed to draw.
pub fn strip_svg(outcomes: &[Outcome]) -> Result<String, String> {
    let err = |e: &dyn std::fmt::Debug| format!("drawing the cut strip failed: {e:?}");
    let rows = outcomes.len().div_ceil(STRIP_COLUMNS).max(1) as i32;
    let height = (rows * (STRIP_CELL + 2) + 44) as u32;
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        for (i, o) in outcomes.iter().enumerate() {
            let (x, y) = (
                10 + (i % STRIP_COLUMNS) as i32 * (STRIP_CELL + 1),
                10 + (i / STRIP_COLUMNS) as i32 * (STRIP_CELL + 2),
            );
            root.draw(&Rectangle::new(
                [(x, y), (x + STRIP_CELL - 1, y + STRIP_CELL - 1)],
                o.color().filled(),
            ))
            .map_err(|e| err(&e))?;
        }
        let y = 10 + rows * (STRIP_CELL + 2) + 12;
        let style =
            TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        for (k, o) in ALL.iter().enumerate() {
            let x = 10 + k as i32 * 180;
            let n = outcomes.iter().filter(|x| *x == o).count();
            root.draw(&Rectangle::new(
                [(x, y - 6), (x + 12, y + 6)],
                o.color().filled(),
            ))
            .map_err(|e| err(&e))?;
            root.draw(&Text::new(
                format!("{} ({n})", o.name()),
                (x + 18, y),
                style.clone(),
            ))
            .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(s)
}

/// The cuts of `c` in the order they were made (time, then host and index).
fn in_order(c: &Campaign) -> Vec<CutRecord> {
    let mut cuts = c.cuts();
    cuts.sort_by(|a, b| (a.at_ms, &a.host, a.index).cmp(&(b.at_ms, &b.host, b.index)));
    cuts
}

/// A cut's short name: `cut N`, or `HOST cut N` in a fleet.
fn cut_name(c: &Campaign, k: &CutRecord) -> String {
    if c.definition.hosts.len() > 1 {
        format!("{} cut {}", k.host, k.index)
    } else {
        format!("cut {}", k.index)
    }
}

/// The whole page of campaign `c`.
///
/// Errors: a chart could not be drawn.
pub fn render(c: &Campaign) -> Result<String, Error> {
    let d = &c.definition;
    let mut p = Page::default();
    p.para(
        &format!(
            "{} host(s) ({}), {} cuts each, cut {:.1}..{:.1} s into each run, power off {:.1} s; \
             workloads: {}",
            d.hosts.len(),
            d.hosts
                .iter()
                .map(|h| format!("{} by {}", h.host, driver_of(&h.power)))
                .collect::<Vec<_>>()
                .join(", "),
            d.cuts,
            d.cut_after_ms.0 as f64 / 1000.0,
            d.cut_after_ms.1 as f64 / 1000.0,
            d.off_ms as f64 / 1000.0,
            d.workloads.join(" | ")
        ),
        "",
    );
    for h in crate::campaign::summary::headlines(c) {
        p.para(&h.text, h.class);
    }
    if let Some(why) = c.cancelled() {
        p.para(&format!("cancelled: {why}"), "fail");
    }
    for h in &d.hosts {
        if let Some(why) = c.host(&h.host).paused {
            p.para(&format!("{}: paused: {why}", h.host), "fail");
        }
    }
    let cuts = in_order(c);
    let outcomes: Vec<Outcome> = cuts.iter().map(Outcome::of).collect();
    let strip = strip_svg(&outcomes).map_err(Error::Msg)?;
    p.figure(
        "cuts",
        "Every cut, in the order they were made",
        "one square per cut, left to right and row by row; green passed, red failed (a valid \
         cut lost or damaged acknowledged writes), light grey not measured and dark grey invalid \
         (neither counts in the statistics; the table below says why)",
        &strip,
        "",
    );
    lag_figure(&mut p, c, &cuts)?;
    cut_table(&mut p, c, &cuts);
    configurations(&mut p, c);
    Ok(p.finish(&format!("plugpull campaign {}", d.name)))
}

/// The driver's scheme of a power URI (`ipmi`, `simfs`, …), never its secrets.
fn driver_of(uri: &str) -> String {
    plugpull::power::PowerUri::parse(uri)
        .map(|u| u.scheme().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The lag figure: per failed cut, how long before the cut its oldest lost write was
/// acknowledged (whole seconds); a sentence instead when no cut failed.
fn lag_figure(p: &mut Page, c: &Campaign, cuts: &[CutRecord]) -> Result<(), Error> {
    let failed: Vec<&CutRecord> = cuts
        .iter()
        .filter(|k| Outcome::of(k) == Outcome::Failed)
        .collect();
    if failed.is_empty() {
        p.heading(
            "Lag of the oldest lost write per failed cut",
            "no valid cut failed, so there is no lost write to place in time",
        );
        return Ok(());
    }
    // The lower edge of the lag range of the cut's oldest lost write (verify's
    // histogram), in ms: the write was acknowledged at least that long before the cut.
    let lag_ms = |k: &CutRecord| {
        k.verdict
            .as_ref()
            .and_then(|v| v.max_lag_secs)
            .map(|l| (l * 1000.0).round() as u64)
    };
    let lags: Vec<u64> = failed.iter().map(|k| lag_ms(k).unwrap_or(0)).collect();
    let names: Vec<String> = failed.iter().map(|k| cut_name(c, k)).collect();
    let label = |i: usize| names.get(i).cloned().unwrap_or_default();
    let svg = figures::bars_svg(
        &lags,
        &label,
        "failed cut",
        "at least this many ms before the cut",
    )
    .map_err(Error::Msg)?;
    let no_bar: Vec<String> = failed
        .iter()
        .filter(|k| lag_ms(k).unwrap_or(0) == 0)
        .map(|k| match lag_ms(k) {
            Some(_) => format!("{} (under 10 ms)", cut_name(c, k)),
            None => format!(
                "{} (no timed write lost: a torn or damaged page)",
                cut_name(c, k)
            ),
        })
        .collect();
    p.figure(
        "lag",
        "Lag of the oldest lost write per failed cut",
        "one bar per failed cut: its oldest lost write was acknowledged at least this many \
         milliseconds before the cut (the lower edge of verify's lag range: under 10 ms, \
         10–100 ms, 100–500 ms, 0.5–1 s, 1–5 s, 5–30 s, 30–300 s, 300 s or more); a write \
         cache that holds data for seconds shows tall bars, a lost flush of the last instant \
         no bar (named below)",
        &svg,
        &if no_bar.is_empty() {
            String::new()
        } else {
            format!("no bar: {}", no_bar.join(", "))
        },
    );
    Ok(())
}

/// The per-cut table: the same columns as `campaign status`.
fn cut_table(p: &mut Page, c: &Campaign, cuts: &[CutRecord]) {
    p.heading(
        "Every cut",
        "validity first: only valid cuts count; for them the verdict of their verify",
    );
    let rows: Vec<Vec<String>> = cuts
        .iter()
        .map(|k| {
            let verdict = verdict_or_reason(k);
            vec![
                cut_name(c, k),
                crate::campaign::print::utc_secs(k.at_ms),
                format!("{} ({})", k.driver, k.kind),
                format!("{:.1} s", k.delay_ms as f64 / 1000.0),
                k.acknowledged.to_string(),
                Outcome::of(k).name().to_string(),
                verdict,
                evidence_cell(k),
            ]
        })
        .collect();
    p.grid(
        &[
            "cut",
            "time (UTC)",
            "driver (kind)",
            "delay",
            "acknowledged",
            "outcome",
            "verdict or reason",
            "evidence",
        ],
        &rows,
        &outcome_colors(cuts),
    );
}

/// A cut's evidence for the table: [`plugpull::campaign::Evidence::line`] without its
/// `evidence: ` prefix.
fn evidence_cell(k: &CutRecord) -> String {
    match &k.evidence {
        Some(e) => e.line().trim_start_matches("evidence: ").to_string(),
        None => "not recorded".into(),
    }
}

/// Each row's outcome colour, for the table.
fn outcome_colors(cuts: &[CutRecord]) -> Vec<String> {
    cuts.iter().map(|k| hex(Outcome::of(k).color())).collect()
}

/// The configurations: the hosts pooled by the stack their verified probes show, each
/// with its own roll-up and bound.
fn configurations(p: &mut Page, c: &Campaign) {
    let groups = c.configurations();
    p.heading(
        "Configuration",
        "the stack under test as the verified cuts' probes saw it (layers, disks' write \
         cache and FUA, PostgreSQL's durability settings); hosts with the same stack pool \
         their cuts",
    );
    if c.definition.hosts.len() > 1 {
        let hosts: Vec<String> = c
            .definition
            .hosts
            .iter()
            .map(|h| {
                let r = RollUp::of(&c.host(&h.host).cuts);
                format!("{}: {}; {}", h.host, r.line(), r.bound_line(CONFIDENCE))
            })
            .collect();
        p.para("per host:", "");
        p.list(&hosts);
    }
    if groups.is_empty() {
        p.para("not known: no verified cut stored a probe", "");
        return;
    }
    let items: Vec<String> = groups
        .iter()
        .map(|(config, hosts)| {
            let r = c.roll_up_of(hosts);
            format!(
                "{config} ({}): {}; {}",
                hosts.join(", "),
                r.line(),
                r.bound_line(CONFIDENCE)
            )
        })
        .collect();
    p.list(&items);
}

/// A cut's verdict line when it is valid, else why it is not measured or invalid.
fn verdict_or_reason(k: &CutRecord) -> String {
    match (&k.validity, &k.verdict) {
        (Validity::Valid, Some(v)) => v.summary.clone(),
        _ => k.validity.reason().to_string(),
    }
}

/// The Markdown summary of a campaign: its roll-up, bound, and one row per cut.
pub fn markdown(c: &Campaign) -> String {
    use super::html::md;
    // The first headline in bold, each one a paragraph of its own.
    let head: Vec<String> = crate::campaign::summary::headlines(c)
        .iter()
        .enumerate()
        .map(|(i, h)| match i {
            0 => format!("**{}**", md(&h.text)),
            _ => md(h.text.trim_start()),
        })
        .collect();
    let mut s = format!(
        "### plugpull campaign {}\n\n{}\n\n| cut | outcome | verdict or reason |\n| --- | --- | --- |\n",
        md(&c.definition.name),
        head.join("\n\n")
    );
    for k in in_order(c) {
        let why = verdict_or_reason(&k);
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            md(&cut_name(c, &k)),
            Outcome::of(&k).name(),
            md(&why)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strip_draws_one_square_per_cut_and_a_legend() {
        let mut outcomes = vec![Outcome::Passed; 60];
        outcomes[3] = Outcome::Failed;
        outcomes[7] = Outcome::NotMeasured;
        outcomes[59] = Outcome::Invalid;
        let svg = strip_svg(&outcomes).unwrap();
        // One square per cut plus one swatch per outcome.
        assert_eq!(svg.matches("<rect").count(), 1 + 60 + 4, "{svg}");
        assert_eq!(svg.matches(&format!("fill=\"{}\"", hex(FAIL))).count(), 2);
        for t in [
            "passed (57)",
            "failed (1)",
            "not measured (1)",
            "invalid (1)",
        ] {
            assert!(svg.contains(t), "{t} in {svg}");
        }
        // Two rows of 50.
        assert!(svg.contains("height=\"76\""), "{svg}");
    }
}
