use super::*;
use crate::ledger::{AckBatch, Acks, FileAck, FlushSample};
use crate::probe::evidence::CutEvidence;
use crate::probe::Leaf;

fn batch(n: u64, acks: u64, sample: Option<Vec<Option<u64>>>) -> AckBatch {
    AckBatch {
        batch: n,
        promised: true,
        acks: Acks::File(
            (0..acks)
                .map(|i| FileAck {
                    seq: n * 100 + i,
                    block: i,
                    ms: 1,
                })
                .collect(),
        ),
        flushes: sample.map(|counts| FlushSample { counts }),
        canary: Default::default(),
        sealed_ms: 0,
        oldest_in_flight_ms: None,
    }
}

/// `batches` folded in order, as a read ledger folds them.
fn fold<const N: usize>(batches: [AckBatch; N]) -> Batches {
    let mut f = Batches::default();
    for b in &batches {
        f.add(b);
    }
    f
}

fn storage(disks: &[&str], start: Vec<Option<u64>>, probe: Option<&Probe>) -> Storage {
    Storage {
        probe_json: probe.map_or(String::new(), |p| serde_json::to_string(p).unwrap()),
        not_probed: if probe.is_none() {
            "data directory hidden".into()
        } else {
            String::new()
        },
        disks: disks.iter().map(|d| d.to_string()).collect(),
        flushes_start: FlushSample { counts: start },
    }
}

fn probe(cache: &str) -> Probe {
    Probe {
        target: "/t".into(),
        leaves: vec![Leaf {
            name: "vda".into(),
            write_cache: crate::probe::flush::WriteCache::parse(cache),
            ..Leaf::default()
        }],
        ..Probe::default()
    }
}

fn facts<'a>(
    batches: &'a Batches,
    end: Option<&'a FlushSample>,
    device_error: bool,
) -> RunFacts<'a> {
    RunFacts {
        batches,
        end,
        device_error,
        uses_flush: true,
        serial: false,
        what: "acknowledged writes",
    }
}

#[test]
fn the_end_sample_counts_every_ack_and_a_disk_gone_at_the_end_keeps_its_last_count() {
    let s = storage(&["vda", "sdb"], vec![Some(100), Some(50)], None);
    let batches = fold([
        batch(1, 3, Some(vec![Some(104), Some(53)])),
        batch(2, 2, None),
    ]);
    // The end: vda counted on; sdb went away at a device error (or reads a reset counter).
    let end = FlushSample {
        counts: vec![Some(106), Some(0)],
    };
    let (f, note) = run_flushes(&s, None, &batches, Some(&end));
    assert_eq!(note, "");
    let got: Vec<_> = f
        .iter()
        .map(|f| (f.disk.as_str(), f.flushes, f.acknowledged))
        .collect();
    assert_eq!(got, [("vda", Some(6), 5), ("sdb", Some(3), 3)]);
}

#[test]
fn flushes_count_from_the_start_to_the_latest_known_sample_over_the_acks_up_to_it() {
    let s = storage(&["vda", "vdb"], vec![Some(100), Some(7)], None);
    let batches = fold([
        batch(1, 3, Some(vec![Some(103), Some(7)])),
        batch(2, 2, None),
        batch(3, 5, Some(vec![Some(110), None])),
        batch(4, 4, None),
    ]);
    let (f, note) = run_flushes(&s, None, &batches, None);
    assert_eq!(note, "");
    assert_eq!(
        f,
        [
            RunFlushes {
                disk: "vda".into(),
                flushes: Some(10),
                acknowledged: 10,
                per_ack: Some(1.0),
            },
            // Unknown in the last sample: counted up to the sample before.
            RunFlushes {
                disk: "vdb".into(),
                flushes: Some(0),
                acknowledged: 3,
                per_ack: Some(0.0),
            },
        ]
    );
}

#[test]
fn without_disks_or_samples_nothing_is_counted_and_the_note_says_why() {
    let (f, note) = run_flushes(
        &storage(&[], vec![], None),
        None,
        &fold([batch(1, 3, None)]),
        None,
    );
    assert!(f.is_empty());
    assert_eq!(note, "no leaf disk under the target: flushes not counted");
    let (f, note) = run_flushes(
        &storage(&["vda"], vec![Some(1)], None),
        None,
        &fold([batch(1, 3, None)]),
        None,
    );
    assert!(f.is_empty());
    assert!(
        note.starts_with("no flush sample after the run's start"),
        "{note}"
    );
}

#[test]
fn zero_flushes_on_a_write_back_disk_warn_only_when_the_sync_call_flushes() {
    let f = [RunFlushes {
        disk: "vda".into(),
        flushes: Some(0),
        acknowledged: 42,
        per_ack: Some(0.0),
    }];
    let w = run_warnings(&probe("write back"), &f, true, false, "acknowledged writes");
    assert_eq!(
        w,
        [Warning {
            id: WarningId::FlushesNotReachingDevice,
            message: "vda: write cache \"write back\" but 0 flushes counted over the run's 42 acknowledged writes".into(),
        }]
    );
    assert_eq!(
        run_warnings(&probe("write back"), &f, false, false, "x"),
        []
    );
    assert_eq!(
        run_warnings(&probe("write through"), &f, true, false, "x"),
        []
    );
    let one = [RunFlushes {
        flushes: Some(1),
        ..f[0].clone()
    }];
    assert_eq!(
        run_warnings(&probe("write back"), &one, true, false, "x"),
        []
    );
}

#[test]
fn a_single_writer_warns_below_half_a_flush_per_ack_and_concurrent_writers_only_at_zero() {
    let few = [RunFlushes {
        disk: "vda".into(),
        flushes: Some(857),
        acknowledged: 16298,
        per_ack: Some(857.0 / 16298.0),
    }];
    let p = probe("write back");
    assert_eq!(
        run_warnings(&p, &few, true, true, "acknowledged writes"),
        [Warning {
            id: WarningId::FlushesNotReachingDevice,
            message: "vda: write cache \"write back\" but only 857 flushes counted over the run's 16298 acknowledged writes (0.05 per acknowledgement; one writer's every call should send one)".into(),
        }]
    );
    assert_eq!(run_warnings(&p, &few, true, false, "x"), []);
    let enough = [RunFlushes {
        flushes: Some(8150),
        per_ack: Some(8150.0 / 16298.0),
        ..few[0].clone()
    }];
    assert_eq!(run_warnings(&p, &enough, true, true, "x"), []);
}

#[test]
fn the_section_carries_the_probe_its_warnings_and_the_cut_evidence_deltas() {
    let mut p = probe("write back");
    p.warnings.push(Warning {
        id: WarningId::Nobarrier,
        message: "ext4 mounted nobarrier".into(),
    });
    let disk = |us| CutEvidence {
        disk: "vda".into(),
        unsafe_shutdowns: Some(us),
        power_cycles: Some(9),
        power_off_retracts: None,
        ocp: None,
    };
    p.evidence = Some(Snapshot {
        boot_id: "a".into(),
        uptime_s: 50.0,
        disks: vec![disk(3)],
        notes: vec![],
    });
    let s = storage(&["vda"], vec![Some(5)], Some(&p));
    let after = Snapshot {
        boot_id: "b".into(),
        uptime_s: 2.0,
        disks: vec![disk(4)],
        notes: vec![],
    };
    let batches = fold([batch(1, 2, Some(vec![Some(5)]))]);
    let r = StorageReport::build(&s, &facts(&batches, None, false), Ok(after.clone()));
    assert_eq!(r.not_probed, "");
    assert_eq!(
        r.warnings.iter().map(|w| w.id).collect::<Vec<_>>(),
        [WarningId::Nobarrier, WarningId::FlushesNotReachingDevice]
    );
    assert_eq!(
        r.cut_evidence,
        [
            "boot id changed: the machine rebooted",
            "vda: unsafe shutdowns +1: the drive saw a power loss",
            "vda: power cycles +0",
        ]
    );
    assert_eq!(r.evidence_after.as_ref(), Some(&after));
    let why = "verify runs on host b, the run ran on host a: no cut evidence taken";
    let r = StorageReport::build(
        &s,
        &facts(&Batches::default(), None, false),
        Err(why.into()),
    );
    assert_eq!(r.cut_evidence, [why]);
    assert_eq!(r.evidence_after, None);
    // A device error on a host that stayed up: not "its power was not cut".
    let same = Snapshot {
        boot_id: "a".into(),
        ..after.clone()
    };
    let r = StorageReport::build(
        &s,
        &facts(&Batches::default(), None, true),
        Ok(same.clone()),
    );
    assert_eq!(r.cut_evidence[0], DEVICE_ERROR_SAME_BOOT);
    let r = StorageReport::build(&s, &facts(&Batches::default(), None, false), Ok(same));
    assert_eq!(
        r.cut_evidence[0],
        "same boot id: the machine did not reboot \u{2014} the host kept power (only its storage may have lost it)"
    );
}

#[test]
fn an_unprobed_run_says_why_and_a_probe_this_version_cannot_read_is_named() {
    let s = storage(&[], vec![], None);
    let r = StorageReport::build(
        &s,
        &facts(&Batches::default(), None, false),
        Err("x".into()),
    );
    assert_eq!(
        (r.probe, r.not_probed.as_str()),
        (None, "data directory hidden")
    );
    let bad = Storage {
        probe_json: "{\"layers\":7}".into(),
        ..Storage::default()
    };
    let r = StorageReport::build(
        &bad,
        &facts(&Batches::default(), None, false),
        Err("x".into()),
    );
    assert!(
        r.not_probed
            .starts_with("the run's stored probe cannot be read: "),
        "{}",
        r.not_probed
    );
}
