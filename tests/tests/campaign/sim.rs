//! Whole campaigns on the simulated machine (`simfs://`): a `plugpull-simfs` mount
//! and a process group holding `plugpull agent` and its runs; "off" freezes the
//! group, cuts simfs (its volatile cache is dropped as the mode says), kills the
//! group and unmounts; "on" mounts again and boots a fresh agent with a new boot id.
//! Each verdict is checked against simfs's ground truth of that boot.

use super::*;
use plugpull::ledger::{Acks, Entry};
use plugpull_tests::ledger_file::entries;
use plugpull_tests::machine::Machine;
use plugpull_tests::simfs::{skip_without_fuse, Fate};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};

const BS: u64 = 4096;

/// A machine for `host` in `w`'s dir (`HOST/mnt/t.dat` is its target, listed in the
/// agent configuration by [`Witness::start`]).
pub(super) fn machine(w: &Witness, host: &str, mode: &str, seed: u64) -> Machine {
    let argv = w.agent_argv(host);
    let argv: Vec<&str> = argv.iter().map(|s| s.as_str()).collect();
    Machine::create(
        &w.path(host),
        mode,
        seed,
        &["--destage-delay-ms", "2000"],
        &argv,
    )
}

/// Creates campaign `name` over `(host, machine)` pairs with `cuts` cuts of
/// 1–2 s, power off 0 s, and turns the machines on.
pub(super) fn create(w: &Witness, name: &str, hosts: &[(&str, &Machine)], cuts: &str) {
    let uris: Vec<(&str, &str)> = hosts.iter().map(|(h, m)| (*h, m.uri.as_str())).collect();
    create_with(w, name, &uris, cuts);
}

/// [`create`] with each host's power given as a URI (a machine behind another
/// driver).
pub(super) fn create_with(w: &Witness, name: &str, hosts: &[(&str, &str)], cuts: &str) {
    // One workload line for every host: `{host}` is each agent's host name.
    let wl = format!(
        "file --target {} --size 1MiB",
        w.path("{host}/mnt/t.dat").display()
    );
    let mut args = vec!["--name".to_string(), name.into(), "--workload".into(), wl];
    for (h, uri) in hosts {
        args.extend([
            "--host".into(),
            h.to_string(),
            "--power".into(),
            uri.to_string(),
        ]);
    }
    args.extend(
        [
            "--cuts",
            cuts,
            "--cut-after",
            "1s..2s",
            "--off",
            "0s",
            "--boot-timeout",
            "60s",
        ]
        .map(String::from),
    );
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let o = w.campaign("create", &a);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (_, uri) in hosts {
        let o = plugpull(&["power", "--power", uri, "on"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
}

/// The blocks of `run` whose last acknowledged write the ground truth of `boot`
/// says was dropped: `{b : a dropped write to b has file_write_id <= A(b)}`, with one job
/// (`file_write_id == seq`, checked against the ledger for every truth line it covers).
fn lost_by_truth(w: &Witness, m: &Machine, boot: u32, run: &str) -> BTreeSet<u64> {
    let mut acked: BTreeMap<u64, u64> = BTreeMap::new(); // block -> highest acked seq
    let mut block_of: BTreeMap<u64, u64> = BTreeMap::new(); // seq -> block
    for (_, _, e) in entries(&w.listener.ledger_path(run)) {
        if let Entry::Acks(b) = e {
            let Acks::File(v) = b.acks else {
                panic!("not a file run")
            };
            for a in v {
                block_of.insert(a.seq, a.block);
                let x = acked.entry(a.block).or_insert(0);
                *x = (*x).max(a.seq);
            }
        }
    }
    let truth = m.truth(boot);
    assert!(truth.summary.cut, "boot {boot} ended by a cut");
    let mut lost = BTreeSet::new();
    for t in truth.writes.iter().filter(|t| t.file == "t.dat") {
        let b = t.offset / BS;
        if let Some(&acked_block) = block_of.get(&t.file_write_id) {
            assert_eq!(
                acked_block, b,
                "boot {boot}: file_write_id {} is seq {} of another block",
                t.file_write_id, t.file_write_id
            );
        }
        if t.fate == Fate::Dropped && acked.get(&b).is_some_and(|&a| t.file_write_id <= a) {
            lost.insert(b);
        }
    }
    lost
}

/// Ten cuts of a machine whose simulated disk is honest: ten valid cuts (a new boot
/// id each), all passed; exit 0.
#[test]
fn ten_cuts_of_an_honest_machine_all_pass() {
    if skip_without_fuse("ten_cuts_of_an_honest_machine_all_pass") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat"]);
    let m = machine(&w, "sim1", "honest", 11);
    create(&w, "h", &[("sim1", &m)], "10");
    let o = w.campaign(
        "run",
        &["--name", "h", "--junit", w.path("h.xml").to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let v = w.status("h");
    let want: Vec<(u64, String, String)> = (1..=10)
        .map(|i| (i, "valid".into(), String::new()))
        .collect();
    assert_eq!(cuts(&v), want);
    for c in v["cuts"].as_array().unwrap() {
        assert_eq!(
            (c["kind"].as_str(), c["verdict"]["failed"].as_bool()),
            (Some("simulated"), Some(false)),
            "{c}"
        );
        assert!(c["acknowledged"].as_u64().unwrap() > 0, "{c}");
    }
    assert_eq!(
        v["roll_up"],
        json!({"cuts": 10, "valid": 10, "not_measured": 0, "invalid": 0, "failed": 0, "passed": 10})
    );
    // One boot before the first cut, one after each.
    assert_eq!(m.boots(), 11);
    // Run again when done: nothing to do, the same outcome.
    let again = w.campaign("run", &["--name", "h"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stdout(&again)
        .starts_with("campaign h: 1 host(s), 10 cuts each; 10 cut(s) recorded, done\n"));
    let xml = std::fs::read_to_string(w.path("h.xml")).unwrap();
    assert_eq!(xml.matches("<testcase name=\"cut ").count(), 10, "{xml}");
    assert!(xml.contains("tests=\"10\" failures=\"0\""), "{xml}");
}

/// Ten cuts of a machine whose simulated disk lies (fsync returns at once, writes
/// stay cached 2 s): every cut valid, and each cut's verdict and findings are what
/// simfs's ground truth of that boot says was lost; exit 1.
#[test]
fn ten_cuts_of_a_lying_machine_fail_as_the_ground_truth_says() {
    if skip_without_fuse("ten_cuts_of_a_lying_machine_fail_as_the_ground_truth_says") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat"]);
    let m = machine(&w, "sim1", "lying", 21);
    create(&w, "l", &[("sim1", &m)], "10");
    let o = w.campaign("run", &["--name", "l"]);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let v = w.status("l");
    let mut failed = 0;
    for (i, c) in v["cuts"].as_array().unwrap().iter().enumerate() {
        assert_eq!(c["validity"], json!("valid"), "{c}");
        let run = c["runs"][0].as_str().unwrap();
        let lost = lost_by_truth(&w, &m, i as u32 + 1, run);
        let verdict = &c["verdict"];
        assert_eq!(
            verdict["failed"],
            json!(!lost.is_empty()),
            "cut {}: {verdict}",
            i + 1
        );
        assert_eq!(
            verdict["findings"],
            json!(lost.len()),
            "cut {}: {verdict}",
            i + 1
        );
        failed += u64::from(!lost.is_empty());
    }
    assert_eq!(v["roll_up"]["valid"], json!(10));
    assert_eq!(v["roll_up"]["failed"], json!(failed));
    assert!(
        failed > 0,
        "a lying disk cut under load loses acknowledged writes"
    );
}

/// The controller killed mid-campaign twice (SIGKILL): once just after it recorded
/// cut 2's "pulling" (before or while it cut), once just after cut 3's "pulled" (the
/// machine is off, or already back). Each rerun resumes at the same cut; no cut is
/// pulled twice or judged twice: five cuts, five boots after the first.
#[test]
fn a_killed_controller_resumes_at_the_same_cut() {
    if skip_without_fuse("a_killed_controller_resumes_at_the_same_cut") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat"]);
    let m = machine(&w, "sim1", "honest", 31);
    create(&w, "k", &[("sim1", &m)], "5");
    let file = w.listener.data_dir.join("campaigns/k.campaign");
    let count = |what: &str| {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .matches(what)
            .count()
    };
    for (what, n) in [("{\"Pulling\"", 2), ("{\"Pulled\"", 3)] {
        let mut ctl = Command::new(bin("plugpull"))
            .args([
                "campaign",
                "run",
                "--listener",
                w.listener.addr(),
                "--secret-file",
            ])
            .arg(&w.secret)
            .args(["--name", "k"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        assert!(plugpull_tests::wait_for(
            std::time::Duration::from_secs(120),
            || count(what) >= n
        ));
        ctl.kill().unwrap();
        ctl.wait().unwrap();
    }
    let o = w.campaign("run", &["--name", "k"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("campaign k: 1 host(s), 5 cuts each; 2 cut(s) recorded, resuming\n"),
        "{}",
        stdout(&o)
    );
    let v = w.status("k");
    let want: Vec<(u64, String, String)> = (1..=5)
        .map(|i| (i, "valid".into(), String::new()))
        .collect();
    assert_eq!(cuts(&v), want);
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        (
            text.matches("{\"Pulling\"").count(),
            text.matches("{\"Pulled\"").count(),
            text.matches("{\"Cut\"").count()
        ),
        (5, 5, 5),
        "{text}"
    );
    assert_eq!(m.boots(), 6);
}

/// A fleet of two simulated machines cut concurrently: three valid, passed cuts
/// each, with a roll-up per host.
#[test]
fn a_two_host_fleet_is_cut_concurrently() {
    if skip_without_fuse("a_two_host_fleet_is_cut_concurrently") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat", "sim2/mnt/t.dat"]);
    let m1 = machine(&w, "sim1", "honest", 41);
    let m2 = machine(&w, "sim2", "honest", 42);
    create(&w, "f", &[("sim1", &m1), ("sim2", &m2)], "3");
    let o = w.campaign("run", &["--name", "f"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let v = w.status("f");
    for (i, h) in ["sim1", "sim2"].iter().enumerate() {
        assert_eq!(v["hosts"][i]["host"], json!(h));
        assert_eq!(v["hosts"][i]["roll_up"]["valid"], json!(3));
        assert_eq!(v["hosts"][i]["roll_up"]["passed"], json!(3));
    }
    assert_eq!((m1.boots(), m2.boots()), (4, 4));
    // One stack: the campaign-wide bound pools both hosts, and says so.
    assert_eq!(v["pooled"], json!(["sim1", "sim2"]));
    assert_eq!(v["bound"]["valid"], json!(6), "{v}");
    assert_eq!(v["hosts"][0]["bound"]["valid"], json!(3), "{v}");
    let text = stdout(&w.campaign("status", &["--name", "f"]));
    assert!(
        text.ends_with(
            "sim1: 3 cuts: 3 valid (0 failed, 3 passed), 0 not measured, 0 invalid\n  \
             0 of 3 valid cuts failed: the loss rate per cut is below 63.2 % with 95 % confidence\n\
             sim2: 3 cuts: 3 valid (0 failed, 3 passed), 0 not measured, 0 invalid\n  \
             0 of 3 valid cuts failed: the loss rate per cut is below 63.2 % with 95 % confidence\n\
             pooled over sim1, sim2 (their probes show one stack): 6 cuts: 6 valid (0 failed, 6 passed), 0 not measured, 0 invalid\n  \
             0 of 6 valid cuts failed: the loss rate per cut is below 39.4 % with 95 % confidence\n\
             2 hosts: 6 cuts: 6 valid (0 failed, 6 passed), 0 not measured, 0 invalid\n"
        ),
        "{text}"
    );
    // The same stack on both: one configuration pooling all six cuts.
    let configs = v["configurations"].as_array().unwrap();
    assert_eq!(configs.len(), 1, "{configs:?}");
    assert_eq!(configs[0]["hosts"], json!(["sim1", "sim2"]));
    assert_eq!(configs[0]["roll_up"]["valid"], json!(6));
    assert!(
        configs[0]["configuration"]
            .as_str()
            .unwrap()
            .starts_with("fuse"),
        "{configs:?}"
    );
    // JUnit: one suite for that configuration, its six cuts classed by host.
    let xml_path = w.path("f.xml");
    let o = w.campaign(
        "status",
        &["--name", "f", "--junit", xml_path.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let xml = std::fs::read_to_string(&xml_path).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), 1, "{xml}");
    let suite = format!(
        "<testsuite name=\"configuration {}\" tests=\"6\"",
        configs[0]["configuration"].as_str().unwrap()
    );
    assert!(xml.contains(&suite), "{suite} not in {xml}");
    for h in ["sim1", "sim2"] {
        let n = format!("classname=\"{h}\"");
        assert_eq!(xml.matches(&n).count(), 3, "{xml}");
    }
}

/// `plugpull demo --cuts 2`: two simulated machines, two cuts each, cut 1–1.5 s into
/// each run. The lying disk keeps writes cached 2 s, longer than any run lasts, so
/// every one of its cuts loses acknowledged writes; the honest one loses nothing.
#[test]
fn the_demo_runs_a_campaign_of_n_cuts() {
    if skip_without_fuse("the_demo_runs_a_campaign_of_n_cuts") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("demo.html");
    let o = plugpull(&[
        "demo",
        "--cuts",
        "2",
        "--cut-after",
        "1",
        "--report",
        report.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    let tail: Vec<&str> = out.lines().rev().take(6).collect();
    let size = std::fs::metadata(&report).unwrap().len();
    let report_line = format!(
        "report: {} ({size} bytes; open it in a browser)",
        report.display()
    );
    assert_eq!(
        tail,
        vec![
            report_line.as_str(),
            "the tool works: every valid cut of the honest machine passed, the lying machine was caught losing acknowledged writes",
            "  2 of 2 valid cuts failed (100 %; 95 % interval 15.8 %–100 %): the loss rate per cut is at least 22.3 % with 95 % confidence",
            "lying machine: 2 cuts: 2 valid (2 failed, 0 passed), 0 not measured, 0 invalid",
            "  0 of 2 valid cuts failed: the loss rate per cut is below 77.7 % with 95 % confidence",
            "honest machine: 2 cuts: 2 valid (0 failed, 2 passed), 0 not measured, 0 invalid",
        ]
    );
    assert_eq!(out.matches(" simfs (simulated) ").count(), 4, "{out}");
    // The two machines' stacks differ in their simulated disk: each has its own
    // headline and bound, and nothing is pooled across them.
    let honest = "sim-honest: 2 cuts: 2 valid (0 failed, 2 passed), 0 not measured, 0 invalid";
    let lying = "sim-lying: 2 cuts: 2 valid (2 failed, 0 passed), 0 not measured, 0 invalid";
    for (line, bound) in [
        (honest, "  0 of 2 valid cuts failed: the loss rate per cut is below 77.7 % with 95 % confidence"),
        (lying, "  2 of 2 valid cuts failed (100 %; 95 % interval 15.8 %–100 %): the loss rate per cut is at least 22.3 % with 95 % confidence"),
    ] {
        assert!(out.contains(&format!("\n{line}\n{bound}\n")), "{out}");
    }
    let not_pooled = out
        .lines()
        .find(|l| l.starts_with("not pooled across stacks: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        not_pooled.starts_with("not pooled across stacks: the hosts' probes show 2 stacks (sim-honest: ")
            && not_pooled.contains(" / simulated disk honest; sim-lying: ")
            && not_pooled.ends_with(
                " / simulated disk lying); `plugpull campaign compare` tests two campaigns against each other"
            ),
        "{not_pooled}"
    );
    assert!(!out.contains("pooled over"), "{out}");
    assert!(
        out.contains(
            "\n2 hosts: 4 cuts: 4 valid (2 failed, 2 passed), 0 not measured, 0 invalid\n"
        ),
        "{out}"
    );
    // The campaign page: the two per-host headlines at the top, coloured by outcome;
    // the strip of four cuts, two of them failed.
    let page = std::fs::read_to_string(&report).unwrap();
    assert!(
        page.contains(&format!("<p class=\"pass\">{honest}</p>\n"))
            && page.contains(&format!("<p class=\"fail\">{lying}</p>\n")),
        "{page}"
    );
    assert!(
        page.contains("\npassed (2)\n") && page.contains("\nfailed (2)\n"),
        "{page}"
    );
    if !plugpull_tests::browser::skip_without_browser("the_demo_runs_a_campaign_of_n_cuts") {
        let loaded = plugpull_tests::browser::load(&report, dir.path());
        assert_eq!(loaded.check(), "figures=2;shown=2;errors=0");
    }
}
