use super::*;

mod reset;

fn def(cuts: u32) -> Definition {
    Definition {
        name: "c1".into(),
        hosts: vec![HostPlan {
            host: "h1".into(),
            power: "exec:true".into(),
        }],
        workloads: vec!["file --target /t --size 1MiB".into()],
        cuts,
        cut_after_ms: (1000, 2000),
        off_ms: 500,
        boot_timeout_ms: 60_000,
        created_unix_ms: 1,
    }
}

fn started(number: u32, run: u64, boot: &str) -> Event {
    Event::Started {
        host: "h1".into(),
        number,
        runs: vec![RunId(run)],
        boot_id: boot.into(),
        at_ms: 10,
    }
}

fn pulling(index: u32, number: u32, boot: &str) -> Pulling {
    Pulling {
        host: "h1".into(),
        index,
        number,
        runs: vec![RunId(number as u64)],
        boot_id: boot.into(),
        delay_ms: 1500,
        driver: "simfs".into(),
        kind: "simulated".into(),
        at_ms: 100,
    }
}

fn file_report(exit: u8, acknowledged: u64, findings: u64) -> Outcome {
    let summary = if exit == 0 { "PASS: x" } else { "FAIL: y" };
    Outcome {
        run: RunId(1),
        exit,
        report_json: serde_json::json!({
            "workload": "file", "acknowledged": acknowledged, "findings_total": findings,
            "summary": summary,
            "lost_lag_histogram": [
                {"from_secs": 0.0, "to_secs": 0.01, "count": findings},
                {"from_secs": 0.5, "to_secs": 1.0, "count": findings / 2},
                {"from_secs": 1.0, "to_secs": 5.0, "count": 0}
            ],
            "storage": {}
        })
        .to_string(),
    }
}

fn facts<'a>(p: &'a Pulling, v: Option<(&'a [Outcome], &'a str)>) -> CutFacts<'a> {
    CutFacts {
        pulling: p,
        off_error: None,
        off_at_ms: 1000,
        last_ack_ms: 900,
        status_after: None,
        on_at_ms: Some(1600),
        came_back: Ok(()),
        verified: v,
        verify_boot_at_ms: Some(1500),
    }
}

#[test]
fn names_and_ranges() {
    assert_eq!(check_name("nvme-plp_1.a"), Ok(()));
    for bad in ["", ".x", "a/b", "a b", &"x".repeat(65)] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
    assert_eq!(parse_range("20s..90s"), Ok((20_000, 90_000)));
    assert_eq!(parse_range("30s"), Ok((30_000, 30_000)));
    assert_eq!(
        parse_range("9s..2s"),
        Err("range \"9s..2s\": the first duration is longer than the second".into())
    );
}

#[test]
fn the_agent_runs_verifies_and_stops_after_the_last_cut() {
    let mut c = Campaign {
        definition: def(2),
        events: vec![],
    };
    let run = |n| Instruction::Run {
        campaign: "c1".into(),
        number: n,
        workloads: vec!["file --target /t --size 1MiB".into()],
    };
    assert_eq!(c.next_for("h1"), run(1));
    c.events.push(started(1, 1, "b1"));
    let verify1 = Instruction::Verify {
        campaign: "c1".into(),
        number: 1,
        runs: vec![RunId(1)],
        workloads: vec!["file --target /t --size 1MiB".into()],
    };
    assert_eq!(c.next_for("h1"), verify1);
    c.events.push(Event::Pulling(pulling(1, 1, "b1")));
    c.events.push(Event::Verified {
        host: "h1".into(),
        number: 1,
        outcomes: vec![file_report(0, 5, 0)],
        boot_id: "b2".into(),
        at_ms: 20,
    });
    // Cut 1 is in progress (pulled, not judged): one more cut is wanted.
    assert_eq!(c.next_for("h1"), run(2));
    let p1 = pulling(1, 1, "b1");
    let ok = [file_report(0, 5, 0)];
    c.events
        .push(Event::Cut(judge(&facts(&p1, Some((&ok, "b2"))))));
    c.events.push(started(2, 2, "b2"));
    c.events.push(Event::Pulling(pulling(2, 2, "b2")));
    let v = c.host("h1");
    assert_eq!(
        (v.cuts_made(), v.open_run_set().map(|s| s.number)),
        (2, Some(2))
    );
    c.events.push(Event::Verified {
        host: "h1".into(),
        number: 2,
        outcomes: vec![file_report(0, 5, 0)],
        boot_id: "b3".into(),
        at_ms: 30,
    });
    assert_eq!(
        c.next_for("h1"),
        Instruction::Wait {
            reason: "campaign \"c1\" has made its 2 cuts of h1".into()
        }
    );
    assert_eq!(
        c.next_for("h9"),
        Instruction::Wait {
            reason: "host \"h9\" is not in campaign \"c1\"".into()
        }
    );
}

#[test]
fn judged_cuts_roll_up() {
    let p = pulling(1, 1, "b1");
    let pass = [file_report(0, 40, 0)];
    let fail = [file_report(1, 40, 6)];
    let r = judge(&facts(&p, Some((&pass, "b2"))));
    assert_eq!((r.validity.clone(), r.acknowledged), (Validity::Valid, 40));
    assert_eq!(
        r.verdict,
        Some(CutVerdict {
            failed: false,
            summary: "PASS: x".into(),
            findings: 0,
            max_lag_secs: None,
            torn: None,
            in_flight: None,
        })
    );
    let f = judge(&facts(&p, Some((&fail, "b2"))));
    assert_eq!(
        f.verdict,
        Some(CutVerdict {
            failed: true,
            summary: "FAIL: y".into(),
            findings: 6,
            max_lag_secs: Some(0.5),
            torn: None,
            in_flight: None,
        })
    );
    let same = judge(&facts(&p, Some((&pass, "b1"))));
    // A drive-only cut keeps the host up: the same boot id is expected.
    let mut dp = p.clone();
    dp.kind = "device".into();
    assert_eq!(
        judge(&facts(&dp, Some((&pass, "b1")))).validity,
        Validity::Valid
    );
    assert_eq!(
        same.validity,
        Validity::NotMeasured("the boot id did not change: the machine did not lose power (or the agent was only restarted)".into())
    );
    let r2 = RollUp::of(&[r, f, same]);
    assert_eq!(
        r2.line(),
        "3 cuts: 2 valid (1 failed, 1 passed), 1 not measured, 0 invalid"
    );
}

#[test]
fn each_rule_names_its_reason() {
    let p = pulling(1, 1, "b1");
    let pass = [file_report(0, 40, 0)];
    let nothing = [file_report(0, 0, 0)];
    let broken = [Outcome {
        run: RunId(7),
        exit: 2,
        report_json: r#"{"ok":false,"error":"no ledger"}"#.into(),
    }];
    let mut f = facts(&p, Some((&pass, "b2")));
    f.last_ack_ms = 3500;
    assert_eq!(
        judge(&f).validity,
        Validity::NotMeasured("the agent kept acknowledging writes 2.5 s after the driver's off: the driver did not cut this machine".into())
    );
    f.last_ack_ms = 3000; // within the grace
    assert_eq!(judge(&f).validity, Validity::Valid);
    f.status_after = Some("on");
    assert_eq!(
        judge(&f).validity,
        Validity::NotMeasured("the driver reports power on after its off".into())
    );
    f.status_after = None;
    f.came_back = Err("did not come back".into());
    assert_eq!(
        judge(&f).validity,
        Validity::Invalid("did not come back".into())
    );
    f.came_back = Ok(());
    f.off_error = Some("ipmitool: timed out");
    assert_eq!(
        judge(&f).validity,
        Validity::Invalid("the driver's off failed: ipmitool: timed out".into())
    );
    let mut early = facts(&p, Some((&pass, "b2")));
    let ended = Validity::NotMeasured("run set 1 was verified by a boot that began before the driver's off: its runs had ended before the cut (a reboot or an agent restart)".into());
    for at in [999, 1000] {
        // Announced before "off" returned, or at that very millisecond: a boot that
        // began before the cut.
        early.verify_boot_at_ms = Some(at);
        assert_eq!(judge(&early).validity, ended);
    }
    early.verify_boot_at_ms = Some(1001);
    assert_eq!(judge(&early).validity, Validity::Valid);
    // Verified by the boot the runs ran in (announced before "off" since the run
    // started): the machine did not reboot, whatever stopped the agent.
    // Even when a verify could not run (rule 5 comes later).
    let mut same = facts(&p, Some((&pass, "b1")));
    same.verify_boot_at_ms = Some(50);
    let same_boot = Validity::NotMeasured("the boot id did not change: the machine did not lose power (or the agent was only restarted)".into());
    assert_eq!(judge(&same).validity, same_boot);
    same.verified = Some((&broken, "b1"));
    assert_eq!(judge(&same).validity, same_boot);
    // No boot id at all on either side: the early boot alone says the runs had ended.
    let unknown = pulling(1, 1, "");
    let mut blank = facts(&unknown, Some((&pass, "")));
    blank.verify_boot_at_ms = Some(50);
    assert_eq!(judge(&blank).validity, ended);
    assert_eq!(
        judge(&facts(&p, Some((&pass, "")))).validity,
        Validity::NotMeasured(
            "the boot id is unknown: whether the machine lost power cannot be told".into()
        )
    );
    let f = facts(&p, Some((&broken, "b2")));
    assert_eq!(
        judge(&f).validity,
        Validity::Invalid("verify of run 0000000000000007 could not run: no ledger".into())
    );
    let f = facts(&p, Some((&nothing, "b2")));
    assert_eq!(
        judge(&f).validity,
        Validity::NotMeasured("the workload had acknowledged nothing yet".into())
    );
    let clean = [Outcome {
        run: RunId(1),
        exit: 0,
        report_json: serde_json::json!({"acknowledged": 3, "summary": "PASS: x", "storage": {
            "probe": {"evidence": {"disks": [{"disk": "nvme0n1", "unsafe_shutdowns": 4}]}},
            "evidence_after": {"disks": [{"disk": "nvme0n1", "unsafe_shutdowns": 4}]}}})
        .to_string(),
    }];
    assert_eq!(
        judge(&facts(&p, Some((&clean, "b2")))).validity,
        Validity::NotMeasured("nvme0n1's unsafe-shutdown counter did not move (4 → 4): the drive saw a clean shutdown or kept power".into())
    );
}

#[test]
fn campaign_file_round_trips_and_cuts_a_torn_tail() {
    let mut text = record::line(&def(3));
    text.push_str(&record::line(&started(1, 1, "b1")));
    let whole = text.len();
    let s = record::scan(text.as_bytes()).unwrap();
    assert_eq!(
        (s.definition, s.events.len(), s.valid_len, s.torn),
        (def(3), 1, whole, None)
    );
    // A crash inside the last append: the half line is reported, the rest kept.
    let half = record::line(&started(2, 2, "b2"));
    let torn = format!("{text}{}", &half[..half.len() / 2]);
    let s = record::scan(torn.as_bytes()).unwrap();
    assert_eq!((s.events.len(), s.valid_len), (1, whole));
    assert_eq!(s.torn, Some("line 3: no line end".into()));
    // The same damage before the last line is refused.
    let damaged = torn.replacen("\"b1\"", "\"bX\"", 1);
    assert_eq!(
        record::scan(format!("{damaged}\n{half}").as_bytes()).unwrap_err(),
        "campaign file damaged at line 2: CRC mismatch"
    );
}

/// The listener's order check: a second controller's `Pulling`, a `Pulled` or `Cut`
/// of another cut, a cut of a run set that does not exist, are refused.
#[test]
fn appends_must_follow_the_campaign_order() {
    let mut c = Campaign {
        definition: def(3),
        events: vec![started(1, 1, "b1")],
    };
    let p1 = pulling(1, 1, "b1");
    assert_eq!(
        c.check_append(&Event::Pulling(pulling(2, 1, "b1"))),
        Err("the next cut of h1 is 1, not 2".into())
    );
    assert_eq!(
        c.check_append(&Event::Pulling(pulling(1, 7, "b1"))),
        Err("h1 has no run set 7 with those runs".into())
    );
    assert_eq!(c.check_append(&Event::Pulling(p1.clone())), Ok(()));
    c.events.push(Event::Pulling(p1.clone()));
    assert_eq!(
        c.check_append(&Event::Pulling(p1.clone())),
        Err("cut 1 of h1 is in progress: cut 1 cannot start".into())
    );
    let pulled = |index| Event::Pulled {
        host: "h1".into(),
        index,
        off_at_ms: 1000,
        last_append_ms: 900,
        off_error: None,
        status_after: None,
    };
    assert_eq!(
        c.check_append(&pulled(2)),
        Err("cut 2 of h1 is not in progress".into())
    );
    let restored = Event::Restored {
        host: "h1".into(),
        index: 1,
        on_at_ms: 7000,
    };
    assert_eq!(
        c.check_append(&restored),
        Err("cut 1 of h1 was not pulled yet".into())
    );
    c.events.push(pulled(1));
    assert_eq!(
        c.check_append(&pulled(1)),
        Err("cut 1 of h1 was pulled already".into())
    );
    assert_eq!(c.check_append(&restored), Ok(()));
    c.events.push(restored.clone());
    assert_eq!(c.host("h1").restored, Some(7000));
    assert_eq!(
        c.check_append(&restored),
        Err("cut 1 of h1 was restored already".into())
    );
    let ok = [file_report(0, 5, 0)];
    let cut = Event::Cut(judge(&facts(&p1, Some((&ok, "b2")))));
    assert_eq!(c.check_append(&cut), Ok(()));
    c.events.push(cut.clone());
    assert_eq!(
        c.check_append(&cut),
        Err("cut 1 of h1 is not in progress".into())
    );
    assert_eq!(c.host("h1").restored, None);
    c.events.push(Event::Cancelled {
        reason: "wrong disk".into(),
        at_ms: 5,
    });
    assert_eq!(
        c.check_append(&Event::Pulling(pulling(2, 1, "b1"))),
        Err("campaign \"c1\" was cancelled (wrong disk): no more cuts".into())
    );
    assert!(c.done());
    let stranger = Event::Paused {
        host: "h9".into(),
        reason: "x".into(),
        at_ms: 1,
    };
    assert_eq!(
        c.check_append(&stranger),
        Err("host \"h9\" is not in campaign \"c1\"".into())
    );
}

/// A stored report keeps what the judge and the status need, and stays small.
#[test]
fn slim_reports_keep_counts_and_evidence() {
    let findings: Vec<serde_json::Value> = (0..500)
        .map(|b| serde_json::json!({"block": b, "verdict": "lost"}))
        .collect();
    let full = serde_json::json!({
        "acknowledged": 9, "findings_total": 500, "findings": findings, "summary": "FAIL: x",
        "storage": {"probe": {"layers": ["big"], "evidence": {"disks": [{"disk": "sda", "unsafe_shutdowns": 3}]}, "warnings": ["w"]},
                    "evidence_after": {"disks": [{"disk": "sda", "unsafe_shutdowns": 3}]}}
    })
    .to_string();
    let slim: serde_json::Value = serde_json::from_str(&judge::slim_report(&full)).unwrap();
    assert_eq!(
        slim["findings"].as_array().unwrap().len(),
        judge::SLIM_FINDINGS
    );
    assert_eq!(
        (slim["findings_total"].clone(), slim["acknowledged"].clone()),
        (serde_json::json!(500), serde_json::json!(9))
    );
    assert_eq!(
        slim["storage"]["probe"],
        // (No whole probe here, so no configuration.)
        serde_json::json!({"evidence": {"disks": [{"disk": "sda", "unsafe_shutdowns": 3}]}, "warnings": ["w"], "configuration": null})
    );
    assert_eq!(judge::slim_report("not json"), "not json");
    // The judge reads the slim report as it read the full one.
    let o = |report_json: String| {
        [Outcome {
            run: RunId(1),
            exit: 0,
            report_json,
        }]
    };
    let p = pulling(1, 1, "b1");
    let a = o(full);
    let slim_o = o(slim.to_string());
    assert_eq!(
        judge(&facts(&p, Some((&a, "b2")))).validity,
        judge(&facts(&p, Some((&slim_o, "b2")))).validity
    );
}

/// Two machines with the same stack give the same configuration text, whatever
/// their device names, serials and mount points; another write cache differs.
#[test]
fn configuration_names_the_stack_not_the_machine() {
    use crate::probe::{flush::WriteCache, Layer, Leaf, Probe};
    let probe = |dev: &str, serial: &str, cache| Probe {
        layers: vec![
            Layer::Mount {
                source: format!("/dev/mapper/{dev}"),
                fstype: "xfs".into(),
                mountpoint: format!("/srv/{dev}"),
                options: vec!["rw".into(), "noatime".into()],
            },
            Layer::Dm {
                name: "dm-0".into(),
                dm_name: dev.into(),
                targets: vec!["crypt".into()],
                cache_mode: None,
            },
            Layer::Disk { name: dev.into() },
        ],
        leaves: vec![Leaf {
            name: dev.into(),
            model: "Samsung SSD 990 PRO ".into(),
            firmware: "4B2QJXD7".into(),
            serial: serial.into(),
            write_cache: Some(cache),
            fua: Some(true),
            ..Leaf::default()
        }],
        ..Probe::default()
    };
    let a = probe("nvme0n1", "S1", WriteCache::WriteBack).configuration();
    assert_eq!(
        a,
        "xfs (rw,noatime) / dm [crypt] / disk Samsung SSD 990 PRO 4B2QJXD7 (write back, fua)"
    );
    assert_eq!(
        probe("nvme1n1", "S2", WriteCache::WriteBack).configuration(),
        a
    );
    assert_ne!(
        probe("nvme0n1", "S1", WriteCache::WriteThrough).configuration(),
        a
    );
}

/// What stops a host is what the agent said after this controller started: a
/// refusal, or a run set that ended without a cut of real power.
#[test]
fn news_since_a_controller_started() {
    let ended = |number| Event::Ended {
        host: "h1".into(),
        number,
        detail: "`plugpull write file` exit status: 2".into(),
        at_ms: 9,
    };
    let refused = Event::Refused {
        host: "h1".into(),
        reason: "target /t is not listed".into(),
        at_ms: 8,
    };
    let mut c = Campaign {
        definition: def(3),
        events: vec![refused.clone(), Event::Controller { id: 7, at_ms: 1 }],
    };
    assert_eq!(
        c.news_since(7, "h1"),
        None,
        "a refusal before the controller"
    );
    assert_eq!(c.news_since(8, "h1"), None, "not this controller");
    c.events.push(started(1, 1, "b1"));
    c.events.push(Event::Pulling(pulling(1, 1, "b1")));
    c.events.push(ended(1));
    assert_eq!(c.news_since(7, "h1"), None, "ended by the cut in progress");
    c.events.push(started(2, 2, "b2"));
    c.events.push(ended(2));
    assert_eq!(
        c.news_since(7, "h1"),
        Some("run set 2 ended before its cut: `plugpull write file` exit status: 2".into())
    );
    c.events.push(refused);
    assert_eq!(
        c.host("h1").paused.as_deref(),
        Some("run set 2 ended before its cut: `plugpull write file` exit status: 2")
    );
}
