//! The statistics of real campaigns: the confidence bound `status` prints, `campaign
//! compare` of a lying and an honest simulated machine cut concurrently, and the
//! planner. Expected numbers come from `plugpull::stats`, whose exact values are
//! checked against published ones in its unit tests; here the campaigns' own tables
//! go in.

use super::sim::{create, machine};
use super::*;
use plugpull::stats;
use plugpull_tests::browser;
use plugpull_tests::simfs::skip_without_fuse;

/// `campaign plan` prints the published planner values.
#[test]
fn plan_prints_the_cuts_a_rate_needs_and_what_clean_cuts_show() {
    let o = plugpull(&["campaign", "plan", "--rate", "0.10"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "to see at least one failed cut with 95 % confidence when 10 % of cuts lose acknowledged writes: 29 valid cuts\n\
         29 valid cuts with none failed would show the loss rate per cut is below 9.82 % with 95 % confidence\n\
         (valid cuts only: not-measured and invalid cuts do not count; a failed cut shows the rate is above 0)\n"
    );
    let o = plugpull(&["campaign", "plan", "--cuts", "60", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cuts"], json!(60));
    let shown = v["rate_shown"].as_f64().unwrap();
    assert!(
        (shown - (1.0 - 0.05f64.powf(1.0 / 60.0))).abs() < 1e-12,
        "{v}"
    );
    let o = plugpull(&["campaign", "plan", "--rate", "150%"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"150%\" must be above 0 and below 1 (or above 0 % and below 100 %)"),
        "{}",
        stderr(&o)
    );
}

/// A lying and an honest machine, five cuts each, their controllers running at once;
/// then `status` gives each campaign's bound and `compare` their Fisher test.
#[test]
fn compare_a_lying_and_an_honest_machine() {
    if skip_without_fuse("compare_a_lying_and_an_honest_machine") {
        return;
    }
    let w = Witness::start(&["lie/mnt/t.dat", "hon/mnt/t.dat"]);
    let lie = machine(&w, "lie", "lying", 31);
    let hon = machine(&w, "hon", "honest", 32);
    create(&w, "lie", &[("lie", &lie)], "5");
    create(&w, "hon", &[("hon", &hon)], "5");
    let a = w.run_in_background("lie");
    let b = w.run_in_background("hon");
    let (oa, ob) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!(
        ob.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&ob),
        stderr(&ob)
    );
    let vl = w.status("lie");
    let vh = w.status("hon");
    assert_eq!(vl["roll_up"]["valid"], json!(5), "{vl}");
    assert_eq!(vh["roll_up"]["valid"], json!(5), "{vh}");
    let failed = vl["roll_up"]["failed"].as_u64().unwrap() as u32;
    assert_eq!(
        oa.status.code(),
        Some(i32::from(failed > 0)),
        "{}",
        stderr(&oa)
    );
    assert!(
        failed > 0,
        "a lying disk cut under load loses acknowledged writes"
    );

    // The bound in --json, and as text under the roll-up.
    let want = stats::failure_rate(failed, 5, 0.95).unwrap().unwrap();
    same_numbers(&vl["bound"], &serde_json::to_value(&want).unwrap());
    let upper = vh["bound"]["upper_one_sided"].as_f64().unwrap();
    assert!((upper - (1.0 - 0.05f64.powf(0.2))).abs() < 1e-12, "{vh}");
    let text = stdout(&w.campaign("status", &["--name", "hon"]));
    assert!(
        text.ends_with(
            "5 cuts: 5 valid (0 failed, 5 passed), 0 not measured, 0 invalid\n\
             0 of 5 valid cuts failed: the loss rate per cut is below 45.1 % with 95 % confidence\n"
        ),
        "{text}"
    );

    // compare: the 2×2 table of the two campaigns, Fisher's test, the same stack.
    let f = stats::fisher_exact(failed, 5, 0, 5).unwrap();
    let o = w.campaign("compare", &["lie", "hon", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    same_numbers(&v["fisher"], &serde_json::to_value(&f).unwrap());
    assert_eq!(v["fisher"]["table"], json!([[failed, 5 - failed], [0, 5]]));
    // The two simulated disks differ in their fault model only.
    assert_eq!(v["only_in_a"], json!(["simulated disk lying"]));
    assert_eq!(v["only_in_b"], json!(["simulated disk honest"]));
    let o = w.campaign("compare", &["lie", "hon"]);
    let text = stdout(&o);
    let sentence = f.sentence("lie", "hon", 0.05);
    assert!(text.contains(&format!("\n{sentence}\n")), "{text}");
    assert!(
        text.contains(
            "\nconfiguration: only in lie: simulated disk lying\n               \
             only in hon: simulated disk honest\n"
        ),
        "{text}"
    );
    let row = format!(
        "\n{:<8}  {:>6}  {:>6}  {:>10}  ",
        "lie",
        failed,
        5 - failed,
        5
    );
    assert!(text.contains(&row), "{text}");

    report_of_the_lying_campaign(&w, failed);

    // A campaign compared with itself: refused.
    let o = w.campaign("compare", &["lie", "lie"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("campaign lie compared with itself: give two campaigns"),
        "{}",
        stderr(&o)
    );

    // A campaign that does not exist: exit 2, named.
    let o = w.campaign("compare", &["lie", "nosuch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nosuch"), "{}", stderr(&o));
}

/// `plugpull report --campaign lie`: the page (checked in the browser), the JUnit
/// file and the Markdown summary; exit 1, a valid cut failed.
fn report_of_the_lying_campaign(w: &Witness, failed: u32) {
    if browser::skip_without_browser("compare_a_lying_and_an_honest_machine (report)") {
        return;
    }
    let (html, xml, md) = (w.path("lie.html"), w.path("lie.xml"), w.path("lie.md"));
    let o = plugpull(&[
        "report",
        "--listener",
        w.listener.addr(),
        "--secret-file",
        w.secret.to_str().unwrap(),
        "--campaign",
        "lie",
        "--html",
        html.to_str().unwrap(),
        "--junit",
        xml.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let roll = format!(
        "5 cuts: 5 valid ({failed} failed, {} passed), 0 not measured, 0 invalid",
        5 - failed
    );
    assert!(
        stdout(&o).starts_with(&format!("{roll}\n")),
        "{}",
        stdout(&o)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(&format!(">{roll}</p>")), "{page}");
    for t in [
        format!("passed ({})", 5 - failed),
        format!("failed ({failed})"),
        "not measured (0)".to_string(),
    ] {
        assert!(page.contains(&t), "{t}");
    }
    let loaded = browser::load(&html, w.dir.path());
    // The strip and the lag figure, both drawn; no script error, nothing logged.
    assert_eq!(loaded.check(), "figures=2;shown=2;errors=0");
    assert_eq!(loaded.console(), Vec::<&str>::new());
    let xml = std::fs::read_to_string(&xml).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 5, "{xml}");
    assert_eq!(xml.matches("<failure").count(), failed as usize, "{xml}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.starts_with(&format!("### plugpull campaign lie\n\n**{roll}**\n")),
        "{md}"
    );
    assert_eq!(md.matches("| failed |").count(), failed as usize, "{md}");
}

/// `got` and `want` are the same JSON, numbers equal to 1e-12 (serde_json parses
/// floats to within one unit in the last place).
fn same_numbers(got: &Value, want: &Value) {
    match (got, want) {
        (Value::Number(g), Value::Number(w)) => {
            let (g, w) = (g.as_f64().unwrap(), w.as_f64().unwrap());
            assert!((g - w).abs() < 1e-12, "{g} != {w}");
        }
        (Value::Object(g), Value::Object(w)) => {
            assert_eq!(g.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>());
            for (k, x) in w {
                same_numbers(&g[k], x);
            }
        }
        (Value::Array(g), Value::Array(w)) => {
            assert_eq!(g.len(), w.len(), "{got} != {want}");
            for (x, y) in g.iter().zip(w) {
                same_numbers(x, y);
            }
        }
        _ => assert_eq!(got, want),
    }
}
