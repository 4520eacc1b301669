//! `plugpull report`: one run's verdict as a self-contained HTML file with pictures
//! (and, with `--markdown`, a short summary for a ticket).
//!
//! The run is judged exactly as `plugpull verify` judges it ([`crate::verify::judge`]:
//! same arguments, same code, same report); this module only renders that report and
//! the run's ledger:
//!
//! * [`run`] — the data the figures draw (acks binned per second, the target's blocks
//!   binned into a map, lost commits per client);
//! * [`figures`] — the charts, drawn with `plotters` into inline SVG;
//! * [`html`] — the page shell and escaping; [`page`] — its sections in order.
//!
//! Exit codes as verify's: 0 nothing acknowledged lost or damaged, 1 findings, 2 could
//! not do the job (nothing written).

pub mod campaign;
pub mod figures;
pub mod html;
pub mod page;
pub mod run;

use crate::net::ListenerArgs;
use crate::pgbench::PgVerifyArgs;
use crate::verify::{judge, VerifyArgs};
use crate::Error;
use plugpull::report::Report;
use std::path::{Path, PathBuf};

/// Where `plugpull report` writes.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Write the HTML report (one self-contained file) here.
    #[arg(long, value_name = "FILE")]
    pub html: PathBuf,
    /// Also write a short Markdown summary (verdict line, counts, warnings) here.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write a JUnit XML file: one test case for the run, or with --campaign one
    /// per cut, a test suite per configuration.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Report on this campaign (its plan, every cut, the statistics) instead of one run.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["run", "target", "host"])]
    pub campaign: Option<String>,
}

/// `plugpull report` as the command runs it: judges the run as `plugpull verify` does,
/// writes the HTML (and Markdown) files and prints the verdict line and where the report
/// is. Returns `Ok(true)` (exit 0) when nothing acknowledged was lost or damaged,
/// `Ok(false)` (exit 1) on findings.
///
/// Errors (exit 2): verify's (listener, ledger, target, secret), `--json` or
/// `--history` given, an output file that cannot be written, a run that measured
/// nothing (the files are written first).
pub async fn command(
    listener: &ListenerArgs,
    args: &VerifyArgs,
    pg: &PgVerifyArgs,
    out: &ReportArgs,
) -> Result<bool, Error> {
    if args.json || args.history {
        let flag = if args.json { "--json" } else { "--history" };
        return Err(Error::Msg(format!(
            "{flag} is verify's: `plugpull report` writes --html FILE (and --markdown FILE)"
        )));
    }
    check_writable(&out.html)?;
    for p in out.markdown.iter().chain(&out.junit) {
        check_writable(p)?;
    }
    let secret = listener.secret()?;
    if let Some(name) = &out.campaign {
        return campaign_command(listener, &secret, name, out).await;
    }
    let (l, report) = judge(args, &listener.listener, &secret, pg).await?;
    let html = page::render(&l, &report)?;
    write(&out.html, &html)?;
    if let Some(md) = &out.markdown {
        write(md, &markdown(&report))?;
    }
    if let Some(path) = &out.junit {
        write(path, &run_junit(&report)?)?;
    }
    println!("{}", report.summary());
    println!("report: {} ({} bytes)", out.html.display(), html.len());
    if report.not_measured() {
        return Err(Error::NotMeasured(report.summary().to_string()));
    }
    Ok(report.ok())
}

/// `plugpull report --campaign NAME`: the campaign page from its record (and the
/// Markdown and JUnit files). `Ok(true)` when every valid cut passed, `Ok(false)` when
/// one failed; an error (exit 2) when no cut was valid, after the files are written.
async fn campaign_command(
    listener: &ListenerArgs,
    secret: &plugpull::auth::Secret,
    name: &str,
    out: &ReportArgs,
) -> Result<bool, Error> {
    let c = crate::campaign::load(&listener.listener, secret, name).await?;
    let html = campaign::render(&c)?;
    write(&out.html, &html)?;
    if let Some(md) = &out.markdown {
        write(md, &campaign::markdown(&c))?;
    }
    if let Some(path) = &out.junit {
        write(path, &crate::campaign::print::junit(&c)?)?;
    }
    let r = c.roll_up();
    print!("{}", crate::campaign::summary::text(&c));
    println!("report: {} ({} bytes)", out.html.display(), html.len());
    if r.valid == 0 {
        return Err(Error::Msg(format!(
            "campaign {name} has no valid cut: it measured nothing ({})",
            r.line()
        )));
    }
    Ok(r.failed == 0)
}

/// The JUnit XML of one run: a suite named after the run, one case (failure = findings,
/// skipped = not measured).
///
/// Errors: the XML cannot be serialized.
pub fn run_junit(report: &Report) -> Result<String, Error> {
    use quick_junit::{NonSuccessKind, Report as Junit, TestCase, TestCaseStatus, TestSuite};
    let (id, host) = match report {
        Report::File(r) => (r.run_id.to_string(), r.host.clone()),
        Report::Pgbench(r) => (r.run_id.to_string(), r.host.clone()),
        Report::Files(r) => (r.run_id.to_string(), r.host.clone()),
    };
    let status = if report.not_measured() {
        let mut s = TestCaseStatus::skipped();
        s.set_message(report.summary().to_string());
        s
    } else if report.ok() {
        TestCaseStatus::success()
    } else {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
        s.set_message(report.summary().to_string());
        s
    };
    let mut case = TestCase::new(format!("run {id}"), status);
    case.set_classname(host);
    // The cut evidence (docs/formats.md, "Cut evidence"), one property each.
    let c = report.cut();
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    let cut = serde_json::to_value(c.cut).expect("a cut kind serializes");
    let canary = serde_json::to_value(c.canary.state).expect("a canary state serializes");
    for (k, v) in [
        ("cut", cut.as_str().unwrap_or_default().to_string()),
        ("cut_ms", opt(c.cut_ms)),
        ("acks_last_100ms", c.acks_last_100ms.to_string()),
        ("acks_last_1s", c.acks_last_1s.to_string()),
        ("last_ack_before_cut_ms", opt(c.last_ack_before_cut_ms)),
        ("canary", canary.as_str().unwrap_or_default().to_string()),
        ("canary_issued", c.canary.issued.to_string()),
        ("canary_on_medium", opt(c.canary.on_medium)),
        ("measured", c.measured.to_string()),
        ("not_measured", c.not_measured.clone()),
    ] {
        case.add_property(quick_junit::Property::new(k, v));
    }
    let mut suite = TestSuite::new(format!("plugpull run {id}"));
    suite.add_test_case(case);
    let mut j = Junit::new("plugpull report");
    j.add_test_suite(suite);
    j.to_string()
        .map_err(|e| Error::Msg(format!("JUnit report: {e}")))
}

/// Refuses early (before the run is read) an output path whose directory does not
/// exist, or that is a directory.
fn check_writable(p: &Path) -> Result<(), Error> {
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::Msg(format!(
            "cannot write the report to {}: directory {} does not exist",
            p.display(),
            dir.display()
        )));
    }
    if p.is_dir() {
        return Err(Error::Msg(format!(
            "cannot write the report to {}: it is a directory",
            p.display()
        )));
    }
    Ok(())
}

fn write(p: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(p, text)
        .map_err(|e| Error::Msg(format!("cannot write the report to {}: {e}", p.display())))
}

/// The short Markdown summary: a heading naming the run, the verdict line, the counts
/// table, the probe's warnings.
pub fn markdown(report: &Report) -> String {
    let (head, rows) = match report {
        Report::File(r) => (
            format!("run {} (file) on {}: {}", r.run_id, r.host, r.target),
            page::file_rows(r),
        ),
        Report::Pgbench(r) => (
            format!("run {} (pgbench) on {}", r.run_id, r.host),
            page::pg_rows(r),
        ),
        Report::Files(r) => (
            format!("run {} (files) on {}: {}", r.run_id, r.host, r.target),
            page::files_rows(r),
        ),
    };
    use html::md;
    let mut s = format!(
        "### plugpull report: {}\n\n**{}**\n\n",
        md(&head),
        md(report.summary())
    );
    if let Some(why) = page::no_reboot(report) {
        s.push_str(&format!("_{}_\n\n", md(&why)));
    } else if page::simulated(report) {
        s.push_str(&format!("{}\n\n", md(page::SIMULATED)));
    }
    s.push_str("| count | value |\n| --- | ---: |\n");
    for (k, v) in rows {
        s.push_str(&format!("| {} | {} |\n", md(&k), md(&v)));
    }
    let w = &report.storage().warnings;
    if w.is_empty() {
        s.push_str("\nProbe warnings: none\n");
    } else {
        s.push_str("\nProbe warnings (they never change the verdict):\n\n");
        for w in w {
            s.push_str(&format!("- `{}`: {}\n", w.id.as_str(), md(&w.message)));
        }
    }
    s
}
