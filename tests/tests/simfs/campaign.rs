//! Many cuts in a row (a hundred honest cuts, no false finding) and the demo's file
//! runs judged with the verifier's own function.

use super::*;

/// 100 cuts under load on an honest device: not one false finding. One listener,
/// one mount directory, a small target per cut, verified on the backing file.
#[test]
fn a_hundred_honest_cuts_give_no_false_finding() {
    if skip_without_fuse("a_hundred_honest_cuts_give_no_false_finding") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount(dir.path(), "honest", 100);
    let t0 = Instant::now();
    let mut acked_total = 0;
    for i in 0..100u64 {
        if i > 0 {
            sim.remount("honest");
        }
        let name = format!("c{i}.dat");
        let mut w = start_writer(&l, &sim.mnt().join(&name), "256KiB", 2, i);
        w.wait_acknowledged(1 + 20 * (i % 5));
        sigkill(&mut w.child);
        let truth = sim.cut();
        sim.umount();
        assert_eq!(truth.summary.fsynced_at_cut, 0, "cut {i}");
        let (code, v, err) = verify_json(
            &l,
            &[
                "--run",
                &w.run,
                "--target",
                sim.backing().join(&name).to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "cut {i}: {err} {v}");
        assert_eq!(v["ok"], json!(true), "cut {i}");
        assert_eq!(v["findings"], json!([]), "cut {i}");
        acked_total += v["acknowledged"].as_u64().unwrap();
    }
    eprintln!(
        "100 honest cuts, {acked_total} acknowledged writes, 0 findings, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// The demo's page: each device's file run as a part, a coloured summary of every
/// run's verdict before the first part, the simulated-cut note (never the
/// no-reboot warning), every figure drawn in the browser.
fn demo_page_shows_every_run(report: &std::path::Path, dir: &std::path::Path) {
    let page = std::fs::read_to_string(report).unwrap();
    assert_eq!(
        page.matches("<h1>honest device: file workload (run ")
            .count(),
        1
    );
    assert_eq!(
        page.matches("<h1>lying device: file workload (run ")
            .count(),
        1
    );
    // A summary at the top, before the first part: each run's verdict, coloured.
    let top = &page[..page.find("<hr>").unwrap()];
    assert_eq!(
        top.matches("<p class=\"pass\">honest device, file workload: PASS")
            .count(),
        1,
        "{top}"
    );
    assert_eq!(
        top.matches("<p class=\"pass\">honest device, files workload: PASS")
            .count(),
        1,
        "{top}"
    );
    assert_eq!(
        top.matches("<p class=\"fail\">lying device, file workload: FAIL")
            .count(),
        1,
        "{top}"
    );
    assert_eq!(
        top.matches("<p class=\"fail\">lying device, files workload: FAIL")
            .count(),
        1,
        "{top}"
    );
    // The cuts were simulated: no "not a power cut of the host" warning anywhere.
    assert!(!page.contains("Not a power cut of the host"), "{page}");
    assert_eq!(
        page.matches("A simulated cut: the plugpull-simfs disk")
            .count(),
        4
    );
    if !plugpull_tests::browser::skip_without_browser(
        "the_demo_judges_its_file_runs_with_the_verifiers_function",
    ) {
        let loaded = plugpull_tests::browser::load(report, dir);
        // The files runs add their step rate each, and the lying one its lag histogram.
        assert_eq!(loaded.check(), "figures=8;shown=8;errors=0");
        assert_eq!(loaded.console(), Vec::<&str>::new());
    }
}

/// Review finding 8: `plugpull demo` verifies its file runs with `plugpull verify`'s
/// own function (device-error rule, earlier runs from the listener, report): on the
/// simulator the honest device passes with nothing lost, the lying one is caught, and
/// each device's file report is the verifier's (its summary line, its verdict table).
#[test]
fn the_demo_judges_its_file_runs_with_the_verifiers_function() {
    if skip_without_fuse("the_demo_judges_its_file_runs_with_the_verifiers_function") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("demo.html");
    let o = plugpull(&[
        "demo",
        "--no-pg",
        // Long enough for the lying device to destage the target's creation (its
        // metadata, like its data, destages 2 s after it was made).
        "--cut-after",
        "2.5",
        "--report",
        report.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    // It ends by writing its report: both devices' file and files runs on one page.
    // The honest file run has two figures (its lag histogram is a sentence: nothing
    // lost), the lying one three; the honest files run one, the lying one two.
    let size = std::fs::metadata(&report).unwrap().len();
    assert!(
        out.contains(&format!(
            "\nreport: {} ({size} bytes; open it in a browser)\n",
            report.display()
        )),
        "{out}"
    );
    demo_page_shows_every_run(&report, dir.path());
    let page = std::fs::read_to_string(&report).unwrap();
    let line = |prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{out}"))
            .to_string()
    };
    let honest = line("honest device: ");
    assert!(
        honest.starts_with("honest device: PASS, ") && honest.ends_with(" steps), 0 lost"),
        "{honest}"
    );
    let lying = line("lying device: ");
    assert!(lying.starts_with("lying device: FAIL, "), "{lying}");
    // Two file and two files reports, each ending with the verifier's summary line.
    assert_eq!(
        out.lines().filter(|l| l.starts_with("PASS: ")).count(),
        2,
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("FAIL: ")).count(),
        2,
        "{out}"
    );
    assert_eq!(
        page.matches("<h1>lying device: files workload (run ")
            .count(),
        1
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("blocks checked: "))
            .count(),
        2,
        "{out}"
    );
    // The demo's figures are the reports' figures.
    // `honest device: PASS, T acknowledged (W writes, S steps), 0 lost`.
    let acked: u64 = honest
        .split(" (")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        line("PASS: ").starts_with(&format!("PASS: {acked} acknowledged writes, ")),
        "{out}"
    );
    let lost: u64 = lying["lying device: FAIL, ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(lost > 0, "{lying}");
    assert!(
        line("FAIL: ").starts_with(&format!("FAIL: {lost} of ")),
        "{out}"
    );
}
