//! `plugpull report` end to end (issue 13): a real run on a lying simfs device cut
//! under load, so acknowledged writes ARE lost; the HTML report is loaded in headless
//! Chromium and checked from the DOM it dumps (every figure drawn with a non-zero
//! box, no script error, no console error), and its numbers are verify's.
//!
//! The report has no script. The test injects one into a copy (`tests/src/browser.rs`):
//! it records window errors, and for each `<figure>` whether its SVG has a non-zero
//! bounding box, into the `data-check` attribute of `<body>`, which `--dump-dom` then
//! shows.

use plugpull_tests::browser::{self, skip_without_browser};
use plugpull_tests::pg::PgCluster;
use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::*;
use std::path::{Path, PathBuf};

/// Loads `html` in the browser and asserts it shows exactly `figures` figures, each
/// SVG with a non-zero box, with no window error and no console line.
fn browser_shows(html: &Path, dir: &Path, figures: usize) {
    let loaded = browser::load(html, dir);
    assert_eq!(
        loaded.check(),
        format!("figures={figures};shown={figures};errors=0")
    );
    assert!(
        loaded.console().is_empty(),
        "console lines: {:?}",
        loaded.console()
    );
}

/// The value in `<td>NAME</td><td class="n">VALUE</td>` of the report's table.
fn cell(html: &str, name: &str) -> u64 {
    let key = format!("<td>{name}</td><td class=\"n\">");
    let at = html.find(&key).unwrap_or_else(|| panic!("no row {name}")) + key.len();
    html[at..].split('<').next().unwrap().parse().unwrap()
}

/// Runs `plugpull write file` on a lying simfs mount, SIGKILLs it once `acks` are
/// confirmed, cuts the power and remounts honest; returns the run id and the target.
fn lying_run(l: &Listener, sim: &mut SimFs, acks: u64) -> (String, PathBuf) {
    let target = sim.mnt().join("t.dat");
    let mut w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--size",
        "64MiB",
        "--jobs",
        "2",
        "--duration",
        "120s",
        "--progress",
        "0.05",
        "--seed",
        "5",
        "--target",
        target.to_str().unwrap(),
    ]);
    w.wait_acknowledged(acks);
    sigkill(&mut w.child);
    sim.cut();
    sim.remount("honest");
    (w.run, target)
}

#[test]
fn the_report_of_a_lossy_run_shows_every_figure_and_verifys_counts() {
    const T: &str = "the_report_of_a_lossy_run_shows_every_figure_and_verifys_counts";
    if skip_without_fuse(T) || skip_without_browser(T) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    // Writes stay cached 300 ms: those acknowledged in the last 300 ms before the cut
    // are lost, the older ones reached the backing store.
    let mut sim = SimFs::mount_with(dir.path(), "lying", 5, &["--destage-delay-ms", "300"]);
    let (run, target) = lying_run(&l, &mut sim, 15000);
    let t = target.to_str().unwrap();
    let (code, v, err) = verify_json(&l, &["--run", &run, "--target", t]);
    assert_eq!(code, 1, "{err} {v}");
    let lost = v["verdicts"]["lost_write"].as_u64().unwrap();
    let unser = v["verdicts"]["unserializable"].as_u64().unwrap();
    assert!(lost + unser > 0, "the lying device lost nothing: {v}");
    let intact = v["verdicts"]["intact"].as_u64().unwrap();
    assert!(intact > 0, "the lying device kept nothing: {v}");

    let html = dir.path().join("run.html");
    let md = dir.path().join("run.md");
    let o = plugpull(&[
        "report",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--target",
        t,
        "--html",
        html.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    sim.umount();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let summary = v["summary"].as_str().unwrap();
    assert_eq!(stdout(&o).lines().next(), Some(summary));

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.len() < 1 << 20, "report is {} bytes", page.len());
    for banned in ["<script", "<link", "src=", "href=", "url(", "@import"] {
        assert!(
            !page.contains(banned),
            "the report loads something: {banned}"
        );
    }
    // Exactly verify's numbers.
    assert_eq!(cell(&page, "lost_write"), lost);
    assert_eq!(cell(&page, "unserializable"), unser);
    assert_eq!(cell(&page, "intact"), intact);
    assert_eq!(
        cell(&page, "acknowledged writes"),
        v["acknowledged"].as_u64().unwrap()
    );
    assert!(page.contains(&html_escape(summary)), "no summary line");
    // Three figures: acknowledgement rate, lag histogram, target map.
    assert!(page.contains("<body data-figures=\"3\">"));
    let lag_total: u64 = v["lost_lag_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert!(lag_total > 0);
    assert!(page.contains(&format!(
        "<figcaption>{lag_total} lost, unserializable or torn-acknowledged writes in the \
         histogram</figcaption>"
    )));
    map_shows_every_failed_block(&page, &v, summary);

    browser_shows(&html, dir.path(), 3);

    // A simulated cut (the host kept running, the simfs disk lost its cache): the
    // page says so plainly, in the Markdown too, and carries no "not a power cut of
    // the host" warning — that one is for a host that kept running under real
    // storage.
    let notice = "A simulated cut: the plugpull-simfs disk lost its volatile cache while \
                  this host kept running";
    assert_eq!(page.matches(notice).count(), 1, "no notice");
    assert!(!page.contains("Not a power cut of the host"), "{page}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains(&format!("\n{notice}")), "{md}");
    assert!(!md.contains("Not a power cut of the host"), "{md}");
    assert!(md.contains(&format!("**{summary}**")), "{md}");
    assert!(md.contains(&format!("| lost_write | {lost} |")), "{md}");
}

/// The target map of the lossy run's page: 16384 blocks, 16 per square; the squares
/// that lost blocks are red, paler the fewer of their blocks failed, and there are
/// at least as many as verify's (capped) list of findings names.
fn map_shows_every_failed_block(page: &str, v: &serde_json::Value, summary: &str) {
    // 16384 blocks: 16 per square. Every failed block is placed (verify's JSON lists
    // only the first 1000 findings; the map has them all).
    assert!(
        page.contains("<figcaption>16384 blocks, 16 per square, 1024 squares</figcaption>"),
        "map caption"
    );
    let map = &page[page.find("<figure class=\"fig\" id=\"map\">").unwrap()..];
    let map = &map[..map.find("</figure>").unwrap()];
    // A square with failed blocks is red, paler the fewer of its blocks failed: every
    // shade a share of f failed of a acknowledged blocks (1 ≤ f ≤ a ≤ 16) can take.
    use plugpull_client::report::figures::{cell_color, hex};
    use plugpull_client::report::run::{Cell, Class};
    let shades: std::collections::BTreeSet<String> = (1..=16u32)
        .flat_map(|a| (1..=a).map(move |f| (f, a)))
        .map(|(failed, acked)| {
            let c = cell_color(&Cell {
                class: Class::Lost,
                failed,
                acked,
            });
            format!("fill=\"{}\"", hex(c))
        })
        .collect();
    let red = map
        .split("<rect")
        .skip(1)
        .filter(|r| {
            let tag = r.split('>').next().unwrap();
            shades.iter().any(|s| tag.contains(s.as_str()))
        })
        .count();
    // Not every square that lost blocks lost all of them: some are paler.
    let full = map.matches("fill=\"#C62828\"").count();
    assert!(full < red, "{full} full-red squares of {red}");
    let mut listed: Vec<u64> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            ["lost_write", "unserializable", "missing"].contains(&f["verdict"].as_str().unwrap())
        })
        .map(|f| f["block"].as_u64().unwrap() / 16)
        .collect();
    listed.dedup();
    // One red swatch in the legend besides the squares.
    assert!(
        red > listed.len(),
        "{red} red squares, {} listed cells",
        listed.len()
    );
    eprintln!(
        "file report: {summary}; {} bytes, {red} red squares ({} from the listed findings)",
        page.len(),
        listed.len()
    );
}

/// The report's HTML escaping of text, for comparing with the JSON's.
fn html_escape(s: &str) -> String {
    plugpull_client::report::html::escape(s)
}

#[test]
fn report_refuses_json_and_an_unwritable_place_before_reading_the_run() {
    let o = plugpull(&[
        "report",
        "--listener",
        "127.0.0.1:1",
        "--run",
        "3f9c0e12a4b5d678",
        "--json",
        "--html",
        "/tmp/x.html",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        "plugpull: --json is verify's: `plugpull report` writes --html FILE (and --markdown FILE)"
    );
    let o = plugpull(&[
        "report",
        "--listener",
        "127.0.0.1:1",
        "--history",
        "--html",
        "/tmp/x.html",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        "plugpull: --history is verify's: `plugpull report` writes --html FILE (and --markdown FILE)"
    );
    let o = plugpull(&[
        "report",
        "--listener",
        "127.0.0.1:1",
        "--run",
        "3f9c0e12a4b5d678",
        "--html",
        "/nonexistent-dir/x.html",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        "plugpull: cannot write the report to /nonexistent-dir/x.html: directory /nonexistent-dir does not exist"
    );
}

/// A pgbench run on a lying simfs device, cut under load: the report shows the tps
/// timeline, and the lag histogram and lost commits per client when commits were
/// lost (PostgreSQL may also fail to recover: then verify's finding is the server),
/// with verify's counts.
#[test]
fn the_report_of_a_pgbench_run_on_a_lying_device_shows_verifys_counts() {
    const T: &str = "the_report_of_a_pgbench_run_on_a_lying_device_shows_verifys_counts";
    if skip_without_fuse(T) || PgCluster::skip(T) || skip_without_browser(T) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "lying", 1);
    let data = sim.mnt().join("pg").join("data");
    let mut pg = PgCluster::init_at(&data);
    pg.start();
    let pid: u32 = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut w = Writer::spawn(&[
        "write",
        "pgbench",
        "--listener",
        l.addr(),
        "--dsn",
        &pg.conninfo(),
        "--scale",
        "1",
        "--clients",
        "4",
        "--jobs",
        "2",
        "--duration",
        "120s",
        "--progress",
        "1",
        "--random-seed",
        "1",
        "--init",
    ]);
    let mut seen = 0;
    w.wait_stderr(|line| {
        progress_acknowledged(line).is_some_and(|n| {
            seen += 1;
            seen >= 3 && n > 0
        })
    });
    sigkill(&mut w.child);
    sim.cut();
    plugpull_tests::pg::kill_postgres(pid);
    sim.remount("honest");
    let started = pg.try_start();
    let log = pg.log.to_str().unwrap().to_string();
    let dsn = pg.conninfo();
    let mut args = vec!["--run", w.run.as_str(), "--dsn", dsn.as_str()];
    if started.is_err() {
        args.extend(["--pg-wait", "1s", "--pg-log", log.as_str()]);
    }
    let (code, v, err) = verify_json(&l, &args);
    assert_eq!(code, 1, "{err}\n{v}");
    let html = dir.path().join("pg.html");
    let mut rargs = vec!["report", "--listener", l.addr()];
    rargs.extend(args.iter().copied());
    rargs.extend(["--html", html.to_str().unwrap()]);
    let o = plugpull(&rargs);
    if started.is_ok() {
        pg.stop();
    }
    sim.umount();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    for k in ["acknowledged_commits", "present_commits", "lost_commits"] {
        assert_eq!(cell(&page, k), v[k].as_u64().unwrap(), "{k}");
    }
    let lagged: u64 = v["lost_lag_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    let lost = v["lost_commits"].as_u64().unwrap();
    let figures = 1 + usize::from(lagged > 0) + usize::from(lost > 0);
    assert!(page.contains(&format!("<body data-figures=\"{figures}\">")));
    let by_client: Vec<String> = v["lost_commits_by_client"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("client {} lost {}", p[0], p[1]))
        .collect();
    let sum: u64 = v["lost_commits_by_client"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .sum();
    assert_eq!(sum, lost, "{v}");
    if lost > 0 {
        let caption = format!(
            "<figcaption>{lost} lost commits: {}</figcaption>",
            by_client.join(", ")
        );
        assert!(page.contains(&caption), "{caption}");
    } else {
        assert!(page.contains("<p class=\"pass\">No client lost an acknowledged commit.</p>"));
    }
    browser_shows(&html, dir.path(), figures);
    eprintln!("pgbench report: {} — {figures} figures", v["summary"]);
}

/// A run that lost nothing: exit 0, the lag histogram is a sentence (no empty chart),
/// two figures (rate and map) drawn, the Markdown says PASS.
#[test]
fn the_report_of_a_clean_run_says_nothing_was_lost_in_words() {
    const T: &str = "the_report_of_a_clean_run_says_nothing_was_lost_in_words";
    if skip_without_browser(T) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let run = write_run(&l, &target, "1MiB", &["-T", "1s", "-j", "2"]);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err} {v}");
    let html = dir.path().join("clean.html");
    let md = dir.path().join("clean.md");
    let o = plugpull(&[
        "report",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--html",
        html.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<body data-figures=\"2\">"));
    assert!(page.contains(
        "<p class=\"pass\">Nothing acknowledged was lost or damaged: no lost, unserializable or \
         torn-acknowledged writes to plot.</p>"
    ));
    assert_eq!(
        cell(&page, "intact"),
        v["verdicts"]["intact"].as_u64().unwrap()
    );
    assert_eq!(cell(&page, "lost_write"), 0);
    browser_shows(&html, dir.path(), 2);
    let md = std::fs::read_to_string(&md).unwrap();
    let summary = v["summary"].as_str().unwrap();
    assert!(
        md.starts_with(&format!("### plugpull report: run {run} (file) on ")),
        "{md}"
    );
    assert!(md.contains(&format!("\n**{summary}**\n")), "{md}");
    // Real storage and the same boot: the warning that this says nothing about a
    // power loss of the host, on the page and in the Markdown; no simulated-cut note.
    let notice = "Not a power cut of the host: it did not reboot between the run and this check";
    assert_eq!(page.matches(notice).count(), 1, "{page}");
    assert!(md.contains(&format!("_{notice}")), "{md}");
    assert!(!page.contains("A simulated cut"), "{page}");
}
