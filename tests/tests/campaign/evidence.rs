//! What a cut's validity rests on, shown with every cut (`docs/campaign.md`, "What
//! valid requires"): on simulated machines, each cut's evidence in `status --json` is
//! checked against the campaign's own records (boot ids, "off", "on", the stored
//! verify reports), its text line, its JUnit properties and its column on the
//! campaign's page in a real browser; and a controller killed with the machine off
//! keeps it off for the rest of `--off` when rerun.

use super::sim::machine;
use super::*;
use plugpull_tests::machine::Machine;
use plugpull_tests::simfs::skip_without_fuse;
use plugpull_tests::{browser, wait_for};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Creates campaign `name` of `cuts` cuts of `m` (host `sim1`), 1–2 s into each run,
/// power off for `off`; turns the machine on.
fn create(w: &Witness, name: &str, m: &Machine, cuts: &str, off: &str) {
    let wl = format!(
        "file --target {} --size 1MiB",
        w.path("sim1/mnt/t.dat").display()
    );
    let o = w.campaign(
        "create",
        &[
            "--name",
            name,
            "--workload",
            &wl,
            "--host",
            "sim1",
            "--power",
            &m.uri,
            "--cuts",
            cuts,
            "--cut-after",
            "1s..2s",
            "--off",
            off,
            "--boot-timeout",
            "60s",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = plugpull(&["power", "--power", &m.uri, "on"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The campaign file of `name`: its events, each `{"Kind": {…}}` (the definition
/// line left out).
fn events(w: &Witness, name: &str) -> Vec<Value> {
    let file = w
        .listener
        .data_dir
        .join(format!("campaigns/{name}.campaign"));
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l.split_once(' ').unwrap().1).unwrap())
        .collect()
}

/// The events of kind `kind` (`Pulled`, `Restored`, …) for cut or run set `n`.
fn event(events: &[Value], kind: &str, key: &str, n: u64) -> Value {
    events
        .iter()
        .filter_map(|e| e.get(kind))
        .find(|e| e[key] == json!(n))
        .unwrap_or_else(|| panic!("no {kind} with {key} {n} in {events:?}"))
        .clone()
}

/// A controller killed right after it recorded "pulled" (the machine is off, 3 s
/// after the driver's "off" returned): the rerun keeps power off until `--off` 6 s
/// has passed since that "off", not 6 s more and not at once, and the cut records
/// its measured off time, from "off" to "on" on the listener's clock.
#[test]
fn a_resumed_cut_keeps_power_off_for_the_rest_of_off() {
    if skip_without_fuse("a_resumed_cut_keeps_power_off_for_the_rest_of_off") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat"]);
    let m = machine(&w, "sim1", "honest", 51);
    create(&w, "r", &m, "1", "6s");
    let mut ctl = Command::new(bin("plugpull"))
        .args([
            "campaign",
            "run",
            "--listener",
            w.listener.addr(),
            "--secret-file",
        ])
        .arg(&w.secret)
        .args(["--name", "r"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pulled = || events(&w, "r").iter().any(|e| e.get("Pulled").is_some());
    assert!(wait_for(Duration::from_secs(120), pulled));
    ctl.kill().unwrap();
    ctl.wait().unwrap();
    assert!(!m.state().on, "the machine is off when the controller dies");
    let o = w.campaign("run", &["--name", "r"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let ev = events(&w, "r");
    let off_at = event(&ev, "Pulled", "index", 1)["off_at_ms"]
        .as_u64()
        .unwrap();
    let on_at = event(&ev, "Restored", "index", 1)["on_at_ms"]
        .as_u64()
        .unwrap();
    let v = w.status("r");
    let off_ms = v["cuts"][0]["evidence"]["off_ms"].as_u64().unwrap();
    assert_eq!(off_ms, on_at - off_at, "{v}");
    assert!(off_ms >= 6000, "power was on again after {off_ms} ms");
    // The rest of --off, not a whole --off after the rerun began (3 s + 6 s).
    assert!(off_ms < 9000, "power stayed off {off_ms} ms");
    assert_eq!(cuts(&v), vec![(1, "valid".to_string(), String::new())]);
    assert_eq!(m.boots(), 2);
}

/// Two cuts: each cut's evidence in `status --json` is what the campaign recorded —
/// the boot ids of the run set and of its verify, the time from "off" to "on", from
/// the last acknowledgement to "off", the driver's status, and the verify report's
/// cut evidence (canary lost) and drives; the text prints it as one line under the
/// cut's line, JUnit as the case's properties, and the page in a column.
#[test]
fn every_cut_shows_the_evidence_it_was_judged_on() {
    if skip_without_fuse("every_cut_shows_the_evidence_it_was_judged_on") {
        return;
    }
    let w = Witness::start(&["sim1/mnt/t.dat"]);
    let m = machine(&w, "sim1", "honest", 52);
    create(&w, "e", &m, "2", "1s");
    let o = w.campaign("run", &["--name", "e"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let ev = events(&w, "e");
    let v = w.status("e");
    let lines: Vec<(String, bool)> = v["cuts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| check_cut(&ev, c))
        .collect();
    assert_eq!(lines.len(), 2);
    // The text: each cut's line, then its evidence line.
    let text = stdout(&w.campaign("status", &["--name", "e"]));
    let all: Vec<&str> = text.lines().collect();
    for (i, (head, counted)) in lines.iter().enumerate() {
        let at = all
            .iter()
            .position(|l| l.starts_with(&format!("{:>5}  sim1 ", i + 1)))
            .unwrap_or_else(|| panic!("cut {} in {text}", i + 1));
        let line = all[at + 1];
        if *counted {
            assert!(line.starts_with(&format!("{head}, ")), "{line}\n{head}");
        } else {
            assert_eq!(line, format!("{head}, no drive counters"), "{text}");
        }
    }
    junit_has_the_evidence(&w, &v);
    page_shows_the_evidence(&w, &text);
}

/// Checks cut `c` of `status --json` against the campaign's events `ev`; returns the
/// start of its expected text line and whether any drive counter was read.
fn check_cut(ev: &[Value], c: &Value) -> (String, bool) {
    let i = c["index"].as_u64().unwrap();
    assert_eq!(c["validity"], json!("valid"), "{c}");
    let e = &c["evidence"];
    let pulling = event(ev, "Pulling", "index", i);
    let pulled = event(ev, "Pulled", "index", i);
    let verified = event(
        ev,
        "Verified",
        "number",
        pulling["number"].as_u64().unwrap(),
    );
    let (off_at, last) = (
        pulled["off_at_ms"].as_u64().unwrap(),
        pulled["last_append_ms"].as_u64().unwrap(),
    );
    let on_at = event(ev, "Restored", "index", i)["on_at_ms"]
        .as_u64()
        .unwrap();
    assert_eq!(e["boot_before"], pulling["boot_id"], "{e}");
    assert_eq!(e["boot_after"], verified["boot_id"], "{e}");
    assert_ne!(e["boot_before"], e["boot_after"], "{e}");
    assert_eq!(e["off_ms"], json!(on_at - off_at), "{e}");
    assert!(on_at - off_at >= 1000, "{e}");
    assert_eq!(
        e["last_ack_before_off_ms"],
        json!(off_at as i64 - last as i64),
        "{e}"
    );
    assert_eq!(e["driver_status"], json!("off"), "{e}");
    // The run's evidence is its stored verify report's.
    let report: Value =
        serde_json::from_str(verified["outcomes"][0]["report_json"].as_str().unwrap()).unwrap();
    let run = &e["runs"][0];
    assert_eq!(e["runs"].as_array().unwrap().len(), 1, "{e}");
    assert_eq!(run["run"], c["runs"][0], "{e}");
    let rc = &report["cut"];
    let mut want = json!({});
    for k in [
        "cut",
        "cut_ms",
        "acks_last_100ms",
        "acks_last_1s",
        "last_ack_before_cut_ms",
        "measured",
    ] {
        want[k] = rc[k].clone();
    }
    want["canary"] = json!({"state": rc["canary"]["state"], "issued": rc["canary"]["issued"],
        "on_medium": rc["canary"]["on_medium"]});
    assert_eq!(run["cut"], want, "{e}");
    assert_eq!(
        (
            run["cut"]["canary"]["state"].as_str(),
            run["cut"]["measured"].as_bool()
        ),
        (Some("lost"), Some(true)),
        "{e}"
    );
    let acks = run["cut"]["acks_last_1s"].as_u64().unwrap();
    assert!(acks > 0, "{e}");
    let disks = |p: &str| -> Vec<Value> {
        report
            .pointer(p)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let before = disks("/storage/probe/evidence/disks");
    let names: Vec<&Value> = run["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["disk"])
        .collect();
    let want_names: Vec<&Value> = before.iter().map(|d| &d["disk"]).collect();
    assert_eq!(names, want_names, "{e}");
    let counted = run["drives"].as_array().unwrap().iter().any(|d| {
        [
            "unsafe_shutdowns_before",
            "unsafe_shutdowns_after",
            "power_cycles_before",
            "power_cycles_after",
        ]
        .iter()
        .any(|k| !d[k].is_null())
    });
    let short = |b: &Value| format!("{}…", &b.as_str().unwrap()[..8]);
    let last = off_at as i64 - last as i64;
    let head = format!(
        "       evidence: boot {} → {}, off {:.1} s, last ack {:.2} s {} off, \
         driver: off, canary lost, {acks} acks in the last 1 s",
        short(&e["boot_before"]),
        short(&e["boot_after"]),
        (on_at - off_at) as f64 / 1000.0,
        last.unsigned_abs() as f64 / 1000.0,
        if last >= 0 { "before" } else { "after" },
    );
    (head, counted)
}

/// `status --junit`: the evidence as each case's properties.
fn junit_has_the_evidence(w: &Witness, v: &Value) {
    let xml_path = w.path("e.xml");
    let o = w.campaign(
        "status",
        &["--name", "e", "--junit", xml_path.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let xml = std::fs::read_to_string(&xml_path).unwrap();
    for c in v["cuts"].as_array().unwrap() {
        let e = &c["evidence"];
        let run = e["runs"][0]["run"].as_str().unwrap();
        let s = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let want: Vec<(String, String)> = vec![
            ("boot_before".into(), s(&e["boot_before"])),
            ("boot_after".into(), s(&e["boot_after"])),
            ("off_ms".into(), s(&e["off_ms"])),
            (
                "last_ack_before_off_ms".into(),
                s(&e["last_ack_before_off_ms"]),
            ),
            ("driver_status".into(), "off".into()),
            (format!("run {run} canary"), "lost".into()),
            (
                format!("run {run} acks_last_1s"),
                s(&e["runs"][0]["cut"]["acks_last_1s"]),
            ),
        ];
        for (name, value) in want {
            let p = format!("<property name=\"{name}\" value=\"{value}\"/>");
            assert!(xml.contains(&p), "{p} not in {xml}");
        }
    }
}

/// `report --campaign e`: the table's evidence column holds each cut's evidence
/// line, in a real browser.
fn page_shows_the_evidence(w: &Witness, text: &str) {
    if browser::skip_without_browser("every_cut_shows_the_evidence_it_was_judged_on (page)") {
        return;
    }
    let html = w.path("e.html");
    let o = plugpull(&[
        "report",
        "--listener",
        w.listener.addr(),
        "--secret-file",
        w.secret.to_str().unwrap(),
        "--campaign",
        "e",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let loaded = browser::load(&html, w.dir.path());
    assert_eq!(loaded.check(), "figures=1;shown=1;errors=0");
    assert!(loaded.dom.contains("<th>evidence</th>"), "{}", loaded.dom);
    let cells: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("       evidence: "))
        .collect();
    assert_eq!(cells.len(), 2, "{text}");
    for cell in cells {
        let td = format!("<td>{cell}</td>");
        assert!(loaded.dom.contains(&td), "{td} not in {}", loaded.dom);
    }
}
