//! The evidence a judged cut keeps, built from the judge's own facts.

use super::*;
use crate::campaign::{judge, CutRecord, Pulling, Validity};
use crate::RunId;

fn pulling() -> Pulling {
    Pulling {
        host: "h1".into(),
        index: 3,
        number: 3,
        runs: vec![RunId(0xab), RunId(0xcd)],
        boot_id: "1a2b3c4d-0000-4000-8000-000000000001".into(),
        delay_ms: 1500,
        driver: "ipmi".into(),
        kind: "dc".into(),
        at_ms: 100,
    }
}

/// A file run's verify report with a `cut` object and the drives' snapshots.
fn report(run: u64, canary: &str, acks_1s: u64, disks: (Value, Value)) -> Outcome {
    Outcome {
        run: RunId(run),
        exit: 0,
        report_json: serde_json::json!({
            "workload": "file", "acknowledged": 5000, "findings_total": 0,
            "summary": "PASS: 5000 acknowledged writes",
            "cut": {
                "cut": "last_heard", "cut_ms": 41_300, "moved_back_ms": null,
                "acks_last_100ms": 37, "acks_last_1s": acks_1s,
                "last_ack_before_cut_ms": 2,
                "canary": {"state": canary, "issued": 812, "on_medium": 790,
                           "detail": "a sentence"},
                "measured": true, "not_measured": "", "read_back": false
            },
            "storage": {
                "probe": {"evidence": {"boot_id": "x", "disks": disks.0}},
                "evidence_after": {"boot_id": "y", "disks": disks.1},
                "cut_evidence": []
            }
        })
        .to_string(),
    }
}

fn facts<'a>(p: &'a Pulling, v: Option<(&'a [Outcome], &'a str)>) -> CutFacts<'a> {
    CutFacts {
        pulling: p,
        off_error: None,
        off_at_ms: 1_000_000,
        last_ack_ms: 999_960,
        status_after: Some("off"),
        on_at_ms: Some(1_006_012),
        came_back: Ok(()),
        verified: v,
        verify_boot_at_ms: Some(1_030_000),
    }
}

const AFTER: &str = "9f3c5e6a-0000-4000-8000-000000000002";

fn nvme(unsafe_shutdowns: u64, power_cycles: u64) -> Value {
    serde_json::json!([{"disk": "nvme0n1", "unsafe_shutdowns": unsafe_shutdowns,
        "power_cycles": power_cycles, "power_off_retracts": null}])
}

#[test]
fn a_valid_cut_keeps_the_evidence_it_was_judged_on() {
    let p = pulling();
    let outcomes = [
        report(0xab, "lost", 402, (nvme(12, 40), nvme(13, 41))),
        report(0xcd, "lost", 96, (nvme(12, 40), nvme(13, 41))),
    ];
    let cut = judge(&facts(&p, Some((&outcomes, AFTER))));
    assert_eq!(cut.validity, Validity::Valid);
    let run_cut = RunCut {
        cut: "last_heard".into(),
        cut_ms: Some(41_300),
        acks_last_100ms: 37,
        acks_last_1s: 402,
        last_ack_before_cut_ms: Some(2),
        canary: Canary {
            state: "lost".into(),
            issued: 812,
            on_medium: Some(790),
        },
        measured: true,
    };
    let drive = DriveCounters {
        disk: "nvme0n1".into(),
        unsafe_shutdowns_before: Some(12),
        unsafe_shutdowns_after: Some(13),
        power_cycles_before: Some(40),
        power_cycles_after: Some(41),
    };
    let want = Evidence {
        boot_before: "1a2b3c4d-0000-4000-8000-000000000001".into(),
        boot_after: AFTER.into(),
        off_ms: Some(6012),
        last_ack_before_off_ms: Some(40),
        driver_status: Some("off".into()),
        runs: vec![
            RunEvidence {
                run: "00000000000000ab".into(),
                cut: Some(run_cut.clone()),
                drives: vec![drive.clone()],
            },
            RunEvidence {
                run: "00000000000000cd".into(),
                cut: Some(RunCut {
                    acks_last_1s: 96,
                    ..run_cut
                }),
                drives: vec![drive],
            },
        ],
    };
    let e = *cut.evidence.clone().unwrap();
    assert_eq!(e, want);
    // One line: the acks of both runs summed, the shared drive named once.
    assert_eq!(
        e.line(),
        "evidence: boot 1a2b3c4d… → 9f3c5e6a…, off 6.0 s, last ack 0.04 s before off, \
         driver: off, canary lost, 498 acks in the last 1 s, \
         nvme0n1 unsafe shutdowns 12 → 13 / power cycles 40 → 41"
    );
    let props = e.properties();
    let get = |k: &str| {
        props
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{k} not in {props:?}"))
    };
    assert_eq!(get("boot_after"), AFTER);
    assert_eq!(get("off_ms"), "6012");
    assert_eq!(get("last_ack_before_off_ms"), "40");
    assert_eq!(get("driver_status"), "off");
    assert_eq!(get("run 00000000000000cd acks_last_1s"), "96");
    assert_eq!(get("run 00000000000000ab canary"), "lost");
    assert_eq!(get("run 00000000000000ab canary_on_medium"), "790");
    assert_eq!(get("run 00000000000000ab measured"), "true");
    assert_eq!(
        get("run 00000000000000ab drive nvme0n1 unsafe_shutdowns"),
        "12 → 13"
    );
    assert_eq!(props.len(), 5 + 2 * (9 + 2), "{props:?}");
    // Through the campaign file's JSON and back.
    let json = serde_json::to_string(&cut).unwrap();
    assert_eq!(serde_json::from_str::<CutRecord>(&json).unwrap(), cut);
}

#[test]
fn a_cut_judged_before_its_verify_shows_what_the_controller_saw() {
    let p = pulling();
    let mut f = facts(&p, None);
    // Acknowledged 2.5 s after "off": the driver did not cut this machine.
    f.last_ack_ms = 1_002_500;
    f.status_after = Some("on");
    f.on_at_ms = Some(1_003_100);
    let cut = judge(&f);
    assert!(matches!(cut.validity, Validity::NotMeasured(_)));
    let e = cut.evidence.unwrap();
    assert_eq!(
        (e.off_ms, e.last_ack_before_off_ms, e.boot_after.as_str()),
        (Some(3100), Some(-2500), "")
    );
    assert_eq!(
        e.line(),
        "evidence: boot 1a2b3c4d… → not verified, off 3.1 s, last ack 2.50 s after off, \
         driver: on, no verify report"
    );
    // The driver's off failed: no off time, no status, no ack.
    let mut f = facts(&p, None);
    f.off_error = Some("ipmitool exited 1");
    f.last_ack_ms = 0;
    let e = judge(&f).evidence.unwrap();
    assert_eq!(
        (
            e.off_ms,
            e.driver_status.as_deref(),
            e.last_ack_before_off_ms
        ),
        (None, None, None)
    );
    assert_eq!(
        e.line(),
        "evidence: boot 1a2b3c4d… → not verified, off time not measured, no ack, \
         driver: no status, no verify report"
    );
}

#[test]
fn reports_without_cut_evidence_or_drives_say_so() {
    let p = pulling();
    let plain = Outcome {
        run: RunId(0xab),
        exit: 2,
        report_json: r#"{"ok":false,"error":"target unreadable"}"#.into(),
    };
    let e = judge(&facts(&p, Some((&[plain], AFTER)))).evidence.unwrap();
    assert_eq!(
        e.runs,
        vec![RunEvidence {
            run: "00000000000000ab".into(),
            cut: None,
            drives: vec![],
        }]
    );
    assert!(
        e.line()
            .ends_with("driver: off, no cut evidence in the verify reports"),
        "{}",
        e.line()
    );
    // Two runs whose canaries tell different things; no drive counter read (a disk
    // listed with none, one only in the snapshot after).
    let none = serde_json::json!([{"disk": "sda", "unsafe_shutdowns": null, "power_cycles": null}]);
    let later =
        serde_json::json!([{"disk": "sdb", "unsafe_shutdowns": null, "power_cycles": null}]);
    let outcomes = [
        report(0xab, "lost", 10, (none.clone(), Value::Null)),
        report(0xcd, "not_measured", 0, (none, later)),
    ];
    let e = judge(&facts(&p, Some((&outcomes, AFTER))))
        .evidence
        .unwrap();
    let disks: Vec<&str> = e.runs[1].drives.iter().map(|d| d.disk.as_str()).collect();
    assert_eq!(disks, ["sda", "sdb"]);
    assert!(
        e.line().ends_with(
            "driver: off, canary lost/not measured, 10 acks in the last 1 s, no drive counters"
        ),
        "{}",
        e.line()
    );
}

#[test]
fn a_cut_recorded_without_evidence_still_loads() {
    let old = r#"{"host":"h1","index":1,"at_ms":5,"driver":"simfs","kind":"simulated",
        "delay_ms":1200,"number":1,"runs":[7],"acknowledged":9,"validity":"Valid",
        "verdict":null}"#;
    let c: CutRecord = serde_json::from_str(old).unwrap();
    assert_eq!((c.index, c.evidence), (1, None));
}
