//! The sections of the HTML report, in order: the verdict (the report `verify`
//! made), the figures of the run's workload, the stack under test. Each section has a
//! heading and a one-line "how to read it".

use super::figures::{bars_svg, lag_svg, map_svg, timeline_svg};
use super::html::Page;
use super::run::{ack_times, file_map, lost_per_client, run_end, timeline};
use crate::Error;
use plugpull::ledger::RunLedger;
use plugpull::report::{FileReport, FilesReport, LagBucket, PgReport, Report};

/// The whole HTML document for run `l` judged as `report`.
///
/// Errors: a chart could not be drawn.
pub fn render(l: &RunLedger, report: &Report) -> Result<String, Error> {
    let mut p = Page::default();
    sections(&mut p, l, report)?;
    let kind = match report {
        Report::File(_) => "file",
        Report::Pgbench(_) => "pgbench",
        Report::Files(_) => "files",
    };
    Ok(p.finish(&format!(
        "plugpull report: run {} ({kind}) on {}",
        l.run, l.manifest.host
    )))
}

/// Adds run `l`'s sections, judged as `report`, to `p`: the verdict, the figures of its
/// workload, the stack under test (several runs can share one page: the demo's).
///
/// Errors: a chart could not be drawn.
pub fn sections(p: &mut Page, l: &RunLedger, report: &Report) -> Result<(), Error> {
    let (_kind, what) = match report {
        Report::File(_) => ("file", "acknowledged writes"),
        Report::Pgbench(_) => ("pgbench", "acknowledged commits"),
        Report::Files(_) => ("files", "acknowledged steps"),
    };
    verdict(p, report, l);
    let standing = Standing::of(report);
    let acks = ack_times(l);
    let (end_ms, end_label) = run_end(l, &acks);
    let t = timeline(&acks, end_ms, end_label);
    match report {
        Report::File(r) => {
            p.figure(
                "ack-rate",
                "Acknowledgement rate over time",
                &format!(
                    "bars are acknowledged writes per second (bins of {} s) since the run's start; \
                     the red line is the run's end, where the cut came",
                    t.bin_secs
                ),
                &timeline_svg(&t, "acknowledgements/s").map_err(Error::Msg)?,
                "",
            );
            lag(
                p,
                standing,
                0,
                &r.lost_lag_histogram,
                "lost, unserializable or torn-acknowledged write",
                "lost, unserializable or torn-acknowledged writes",
            );
            target_map(p, l, r)?;
        }
        Report::Pgbench(r) => {
            p.figure(
                "tps",
                "Transactions per second (tps) over time",
                &format!(
                    "bars are acknowledged commits per second (bins of {} s) since the run's start, \
                     as pgbench counts tps; the red line is the run's end, where the cut came",
                    t.bin_secs
                ),
                &timeline_svg(&t, "tps").map_err(Error::Msg)?,
                "",
            );
            lag(
                p,
                standing,
                r.unpromised_lost,
                &r.lost_lag_histogram,
                "lost commit",
                "lost commits",
            );
            per_client(p, standing, r)?;
        }
        Report::Files(r) => {
            p.figure(
                "step-rate",
                "Acknowledged steps per second over time",
                &format!(
                    "bars are acknowledged namespace steps per second (bins of {} s) since the run's \
                     start; the red line is the run's end, where the cut came",
                    t.bin_secs
                ),
                &timeline_svg(&t, "steps/s").map_err(Error::Msg)?,
                "",
            );
            lag(
                p,
                standing,
                r.verdicts.unpromised,
                &r.lost_lag_histogram,
                "name whose acknowledged step was lost",
                "names whose acknowledged steps were lost",
            );
        }
    }
    stack(p, report, what);
    Ok(())
}

/// When the host whose storage is under test did not reboot between the run and this
/// check (the same boot id: file runs by verify's own boot relation, pgbench runs by
/// their cut-evidence snapshots), the notice that the verdict says nothing about a
/// power loss of the host; `None` when it rebooted or it cannot be told.
pub fn no_reboot(report: &Report) -> Option<String> {
    // The storage alone lost power: a drive-only cut (a device error ended the run),
    // or a simulated one (a plugpull-simfs disk), said by [`simulated`] instead.
    if report.cut().cut == plugpull::verdict::cut::CutKind::DeviceError || simulated(report) {
        return None;
    }
    let same = match report {
        Report::File(r) => r.boot == "same_boot",
        Report::Pgbench(_) | Report::Files(_) => {
            let s = report.storage();
            let before = s
                .probe
                .as_ref()
                .and_then(|p| p.evidence.as_ref())
                .map(|e| e.boot_id.as_str());
            let after = s.evidence_after.as_ref().map(|e| e.boot_id.as_str());
            matches!((before, after), (Some(b), Some(a)) if !b.is_empty() && b == a)
        }
    };
    same.then(|| {
        "Not a power cut of the host: it did not reboot between the run and this check (the \
         same boot id). Unless the storage alone lost power (a drive-only or a simulated cut), \
         this verdict says nothing about what a power loss does; `verify --history` counts such \
         a run as not measured."
            .to_string()
    })
}

/// Whether the run's storage is a `plugpull-simfs` mount (its probe's mount source,
/// [`plugpull::probe::simfs_mode`]): its cut was simulated, the host kept running.
pub fn simulated(report: &Report) -> bool {
    report.storage().probe.as_ref().is_some_and(|p| {
        p.layers.iter().any(|l| {
            matches!(l, plugpull::probe::Layer::Mount { source, .. }
                if plugpull::probe::simfs_mode(source).is_some())
        })
    })
}

/// The plain note of a run on a simulated disk ([`simulated`]): what its cut was.
pub const SIMULATED: &str = "A simulated cut: the plugpull-simfs disk lost its volatile \
     cache while this host kept running (a rehearsal of the procedure, docs/procedure.md).";

/// The page class of `report`'s verdict line: `pass`, `fail`, or `warn` for a run
/// that measured nothing.
pub fn verdict_class(report: &Report) -> &'static str {
    Standing::of(report).class()
}

/// Where a run's verdict stands, for the page's colours: green for a PASS, red for a
/// FAIL, and for a run that measured nothing neither (it is not a PASS and not a
/// FAIL; `verify` exits 2 for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Pass,
    Fail,
    NotMeasured,
}

impl Standing {
    fn of(report: &Report) -> Standing {
        if report.not_measured() {
            Standing::NotMeasured
        } else if report.ok() {
            Standing::Pass
        } else {
            Standing::Fail
        }
    }

    /// The CSS class of the verdict's summary line.
    fn class(self) -> &'static str {
        match self {
            Standing::Pass => "pass",
            Standing::Fail => "fail",
            Standing::NotMeasured => "warn",
        }
    }

    /// The class of a sentence saying that nothing of one kind was lost: green only
    /// when the run passed (on a FAIL the findings are of another kind; on a run
    /// that measured nothing the sentence is empty of meaning).
    fn none_lost(self) -> &'static str {
        match self {
            Standing::Pass => "pass",
            Standing::Fail | Standing::NotMeasured => "",
        }
    }
}

/// The verdict section: the summary line, how the run ended, the counts.
fn verdict(p: &mut Page, report: &Report, l: &RunLedger) {
    p.heading(
        "Verdict",
        &format!(
            "the verdict `plugpull verify --run {}` gives: PASS (green) = nothing acknowledged was lost or \
             damaged, FAIL (red) = findings, NOT MEASURED (amber) = nothing was lost but the cut could \
             not have shown a loss (the cut evidence below says why), or nothing acknowledged was \
             promised durable; the table counts blocks (file), commits (pgbench) or names (files) by verdict",
            l.run
        ),
    );
    let standing = Standing::of(report);
    p.para(report.summary(), standing.class());
    // The cut evidence: when, what was exposed, the canary (docs/procedure.md).
    let cut = report.cut();
    let class = if cut.measured { "" } else { "warn" };
    p.pre_class(&crate::storage::cut_text(cut), class);
    if let Some(why) = no_reboot(report) {
        p.para(&why, "warn");
    } else if simulated(report) {
        p.para(SIMULATED, "");
    }
    match report {
        Report::File(r) => {
            if let Some(d) = &r.device_error {
                p.para(d, "");
            }
            let items: Vec<String> = r.target_findings.iter().map(|f| f.detail.clone()).collect();
            if !items.is_empty() {
                p.list(&items);
            }
            p.table(("verdict", "blocks"), &file_rows(r));
            if let Some(a) = &r.atomic {
                let class = if a.held { "pass" } else { "fail" };
                p.para(&format!("atomic writes: {}", a.sentence), class);
                p.para(&format!("claimed: {}", a.claims), "");
            }
        }
        Report::Pgbench(r) => {
            if r.run_settings.settings.full_page_writes == "off" {
                p.para(crate::pgbench::FPW_OFF_LABEL, "warn");
            }
            if !r.notes.is_empty() {
                p.list(&r.notes);
            }
            p.table(("count", "commits"), &pg_rows(r));
        }
        Report::Files(r) => {
            if let Some(d) = &r.device_error {
                p.para(d, "");
            }
            if let Some(g) = &r.directory_gone {
                // Red only when the run failed: on a PASS every name's acknowledged
                // state was "absent" (nothing was lost with the directory).
                let class = match standing {
                    Standing::Fail => "fail",
                    Standing::Pass | Standing::NotMeasured => "warn",
                };
                p.para(g, class);
            }
            p.table(("verdict", "names"), &files_rows(r));
        }
    }
}

/// The verdict table of a files run: each verdict's name count, then the totals.
pub fn files_rows(r: &FilesReport) -> Vec<(String, String)> {
    let mut rows = r.verdicts.by_verdict.rows();
    rows.push((
        "of them unpromised".into(),
        r.verdicts.unpromised.to_string(),
    ));
    rows.push(("acknowledged steps".into(), r.acknowledged.to_string()));
    rows.push(("names checked".into(), r.names_checked.to_string()));
    rows
}

/// The verdict table of a file run: each verdict's block count, then the totals.
pub fn file_rows(r: &FileReport) -> Vec<(String, String)> {
    let mut rows = r.verdicts.rows();
    rows.push(("acknowledged writes".into(), r.acknowledged.to_string()));
    rows.push(("blocks checked".into(), r.blocks_checked.to_string()));
    rows.push((
        "in-flight writes that survived".into(),
        r.in_flight_survived.to_string(),
    ));
    rows
}

/// The count table of a pgbench run.
pub fn pg_rows(r: &PgReport) -> Vec<(String, String)> {
    let n = |k: &str, v: u64| (k.to_string(), v.to_string());
    vec![
        n("acknowledged_commits", r.acknowledged_commits),
        n("present_commits", r.present_commits),
        n("lost_commits", r.lost_commits),
        n("unpromised_lost", r.unpromised_lost),
        n("ordering_violations", r.ordering_violations),
        n("duplicates", r.duplicates),
        n("phantoms", r.phantoms),
        n("malformed_tags", r.malformed_tags),
        n("damaged_pages", r.damaged_pages),
        n("checksum_failures", r.checksum_failures),
        (
            "balance invariant".into(),
            match (r.invariant.checked, r.invariant.holds) {
                (false, _) => "not checked".into(),
                (true, true) => "holds".into(),
                (true, false) => "broken".into(),
            },
        ),
    ]
}

/// The lag histogram (one bar per lag range), or a sentence when it is empty. `one`
/// names a lost item (`lost commit`), `many` several; `unpromised` counts the losses
/// the run's configuration did not promise against, which the histogram leaves out.
fn lag(
    p: &mut Page,
    standing: Standing,
    unpromised: u64,
    buckets: &[LagBucket],
    one: &str,
    many: &str,
) {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    let title = format!("How long before the run's end each {one} was acknowledged");
    let how = format!(
        "each bar counts the {many} acknowledged that long before the run's end; bars only at the \
         left (short lags) mean a volatile cache lost its last moments, bars further right mean \
         data lost long after it was acknowledged"
    );
    if total == 0 {
        p.heading(&title, &how);
        p.para(
            &none_to_plot(standing, unpromised, many),
            standing.none_lost(),
        );
        return;
    }
    match lag_svg(buckets, many) {
        Ok(svg) => p.figure(
            "lag",
            &title,
            &how,
            &svg,
            &format!("{total} {many} in the histogram"),
        ),
        Err(e) => p.para(&e, "fail"),
    }
}

/// The target map of a file run.
fn target_map(p: &mut Page, l: &RunLedger, r: &FileReport) -> Result<(), Error> {
    let m = file_map(l, r);
    let mut note = format!(
        "{} blocks, {} per square, {} squares",
        r.blocks,
        m.blocks_per_cell,
        m.cells.len()
    );
    if m.unplaced_failures > 0 {
        note.push_str(&format!(
            "; {} failed blocks beyond the report's list of {} are not placed on the map",
            m.unplaced_failures,
            r.findings.len()
        ));
    }
    p.figure(
        "map",
        "Map of the target",
        "each square is a run of consecutive blocks from block 0, left to right and top to bottom, \
         coloured by the worst verdict among them and paler the fewer of its blocks failed \
         (legend below the map)",
        &map_svg(&m).map_err(Error::Msg)?,
        &note,
    );
    Ok(())
}

/// The sentence that stands for an empty lag histogram of `many` (e.g. "lost
/// commits"): it claims that nothing was lost only for a run that passed, and then
/// only what was promised when `unpromised` losses (which the histogram leaves out)
/// were found.
fn none_to_plot(standing: Standing, unpromised: u64, many: &str) -> String {
    match standing {
        Standing::Pass if unpromised > 0 => format!(
            "Nothing promised was lost or damaged: no {many} to plot ({unpromised} {} the \
             configuration did not promise durability for {} left out).",
            if unpromised == 1 { "loss" } else { "losses" },
            if unpromised == 1 { "is" } else { "are" }
        ),
        Standing::Pass => format!("Nothing acknowledged was lost or damaged: no {many} to plot."),
        Standing::Fail => {
            format!("No {many} to plot: the findings are of other kinds (see the verdict).")
        }
        Standing::NotMeasured => format!("Nothing was measured: no {many} to plot."),
    }
}

/// Lost commits per client of a pgbench run, or a sentence when none was lost.
fn per_client(p: &mut Page, standing: Standing, r: &PgReport) -> Result<(), Error> {
    let title = "Lost commits per client";
    let how = "one bar per pgbench client that lost acknowledged commits; one client alone losing \
               points at its connection, all clients alike at the storage";
    if r.lost_commits == 0 {
        p.heading(title, how);
        let sentence = if r.unpromised_lost > 0 {
            format!(
                "No client lost a promised commit ({} unpromised {} lost, as the \
                 configuration allows).",
                r.unpromised_lost,
                if r.unpromised_lost == 1 {
                    "commit"
                } else {
                    "commits"
                }
            )
        } else {
            "No client lost an acknowledged commit.".to_string()
        };
        p.para(&sentence, standing.none_lost());
        return Ok(());
    }
    let per = lost_per_client(r);
    let svg = bars_svg(&per, &|i| i.to_string(), "client", "lost commits").map_err(Error::Msg)?;
    let note = format!(
        "{} lost commits: {}",
        r.lost_commits,
        r.lost_commits_by_client
            .iter()
            .map(|(c, n)| format!("client {c} lost {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    p.figure("clients", title, how, &svg, &note);
    Ok(())
}

/// The stack under test, as verify prints it, and the probe's warnings.
fn stack(p: &mut Page, report: &Report, what: &str) {
    let s = report.storage();
    p.heading(
        "Stack under test",
        "the storage from the mount down to each disk as probed at the run's start, the flushes \
         each disk completed per acknowledgement, and the drives' counters before and after the cut",
    );
    p.pre(&crate::storage::text(s, what));
    p.heading(
        "Probe warnings",
        "what in the stack can make a durability call a lie; warnings never change the verdict",
    );
    if s.warnings.is_empty() {
        p.para("none", "");
    } else {
        let items: Vec<String> = s
            .warnings
            .iter()
            .map(|w| format!("{}: {}", w.id.as_str(), w.message))
            .collect();
        p.list(&items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pass_is_green_and_a_run_that_measured_nothing_is_neither_colour() {
        let classes: Vec<_> = [Standing::Pass, Standing::Fail, Standing::NotMeasured]
            .iter()
            .map(|s| (s.class(), s.none_lost()))
            .collect();
        assert_eq!(classes, vec![("pass", "pass"), ("fail", ""), ("warn", "")]);
    }

    #[test]
    fn an_empty_lag_histogram_claims_nothing_lost_only_on_a_pass() {
        assert_eq!(
            none_to_plot(Standing::Pass, 0, "lost commits"),
            "Nothing acknowledged was lost or damaged: no lost commits to plot."
        );
        assert_eq!(
            none_to_plot(Standing::Pass, 3, "lost commits"),
            "Nothing promised was lost or damaged: no lost commits to plot (3 losses the \
             configuration did not promise durability for are left out)."
        );
        assert_eq!(
            none_to_plot(Standing::Pass, 1, "lost commits"),
            "Nothing promised was lost or damaged: no lost commits to plot (1 loss the \
             configuration did not promise durability for is left out)."
        );
        assert_eq!(
            none_to_plot(Standing::Fail, 0, "lost commits"),
            "No lost commits to plot: the findings are of other kinds (see the verdict)."
        );
        assert_eq!(
            none_to_plot(Standing::NotMeasured, 1, "lost commits"),
            "Nothing was measured: no lost commits to plot."
        );
    }
}
