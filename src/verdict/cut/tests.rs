use super::*;
use crate::ledger::{AckBatch, Acks, DeviceError, FileAck, Manifest, PgAckRange};
use crate::RunId;

/// The canary found on the medium: records 1..=n.
fn found(n: u64) -> CanaryRead {
    CanaryRead::Found {
        seqs: (1..=n).collect(),
    }
}

fn ledger(batches: Vec<AckBatch>) -> RunLedger {
    let manifest = Manifest::example_file("sut", "/t", 1 << 20, 4096);
    RunLedger::of_batches(RunId(7), manifest, batches)
}

/// A batch sealed at `sealed` with file acks at `ms`, canary record `canary`.
fn batch(n: u64, ms: &[u32], sealed: u32, canary: u64) -> AckBatch {
    AckBatch {
        batch: n,
        promised: true,
        acks: Acks::File(
            ms.iter()
                .enumerate()
                .map(|(i, &ms)| FileAck {
                    seq: i as u64 + 1,
                    block: 0,
                    ms,
                })
                .collect(),
        ),
        flushes: None,
        sealed_ms: sealed,
        canary,
        oldest_in_flight_ms: None,
    }
}

#[test]
fn a_run_the_witness_stopped_recording_was_not_cut() {
    let mut l = ledger(vec![
        batch(1, &[100, 1000, 1050], 1060, 190),
        batch(2, &[], 1070, 195),
    ]);
    l.witness_stopped =
        Some("cannot append to ledger /w/r.ledger: No space left on device (os error 28)".into());
    // Even a lost canary (the host lost power later) does not make it a cut: the
    // writer had stopped.
    let r = judge_cut(&l, Some(false), found(160));
    assert_eq!((r.cut, r.cut_ms), (CutKind::WitnessStopped, Some(1070)));
    assert!(!r.measured);
    assert_eq!(r.not_measured, "the witness could not record the run's acknowledgements (cannot append to ledger /w/r.ledger: No space left on device (os error 28)), so the writer stopped the run and no power was cut while it wrote: free space on the witness's ledger disk and run again");
    assert_eq!(
        r.lines()[0],
        "cut: none while the run wrote: the witness stopped recording it at 1.070 s into the run, and the writer stopped with it"
    );
    assert_eq!(r.lines().len(), 2, "no exposure line: {:?}", r.lines());
    assert_eq!(r.ended(), "the witness stopped recording it (see cut)");
    assert_eq!(
        r.no_end_note(false),
        " (no end recorded: the witness stopped recording the run, and the writer stopped with it)"
    );
}

#[test]
fn a_host_cut_with_acks_in_the_last_second_and_a_lost_canary_is_measured() {
    let l = ledger(vec![
        batch(1, &[100, 3000, 3950, 4000], 4002, 190),
        batch(2, &[], 4100, 195),
    ]);
    let r = judge_cut(&l, Some(false), found(160));
    assert_eq!((r.cut, r.cut_ms), (CutKind::LastHeard, Some(4100)));
    assert_eq!((r.acks_last_100ms, r.acks_last_1s), (0, 2));
    assert_eq!(r.last_ack_before_cut_ms, Some(100));
    assert_eq!(r.canary.state, CanaryState::Lost);
    assert_eq!((r.canary.issued, r.canary.on_medium), (195, Some(160)));
    assert!(r.measured, "{}", r.not_measured);
    assert_eq!(r.not_measured, "");
    assert_eq!(
        r.lines(),
        vec![
            "cut: the witness last heard from the agent at 4.100 s into the run".to_string(),
            "exposure: 0 acknowledged in the last 100 ms before the cut, 2 in the last 1 s (the last 0.100 s before it)".to_string(),
            "canary: lost: 16 of the newest 16 records written with no durability call (180..=195) are not on the medium (the newest there is 160): the host's memory lost power".to_string(),
        ]
    );
}

#[test]
fn a_canary_whole_up_to_the_last_record_reported_is_a_clean_shutdown() {
    let l = ledger(vec![batch(1, &[3990], 4000, 195)]);
    for newest in [195, 230] {
        let r = judge_cut(&l, Some(false), found(newest));
        assert_eq!(r.canary.state, CanaryState::Survived, "{newest}");
        assert!(!r.measured);
        assert_eq!(
            r.not_measured,
            "the canary survived the cut (its newest record, 195, is on the medium): the host's memory did not lose power — a clean shutdown, or a sync before the cut"
        );
    }
}

#[test]
fn no_acknowledgement_in_the_last_second_is_an_idle_cut() {
    let l = ledger(vec![
        batch(1, &[2000, 2999], 3000, 10),
        batch(2, &[], 4000, 60),
    ]);
    let r = judge_cut(&l, Some(false), found(5));
    assert_eq!(
        (r.acks_last_100ms, r.acks_last_1s, r.last_ack_before_cut_ms),
        (0, 0, Some(1001))
    );
    assert_eq!(r.canary.state, CanaryState::Lost);
    assert_eq!(
        r.not_measured,
        "the workload was idle at the cut: nothing was acknowledged in the last second before it (the last one 1.001 s before it)"
    );
    // One ms later the ack is inside the window.
    let l = ledger(vec![
        batch(1, &[2000, 3001], 3002, 10),
        batch(2, &[], 4000, 60),
    ]);
    let r = judge_cut(&l, Some(false), found(5));
    assert_eq!((r.acks_last_1s, r.measured), (1, true));
}

#[test]
fn a_device_error_is_the_cut_and_needs_no_canary() {
    let mut l = ledger(vec![batch(1, &[900, 1000, 1210, 1250], 1260, 0)]);
    l.device_error = Some(DeviceError {
        error: "fdatasync: Input/output error (os error 5)".into(),
        ms: 1300,
        device: true,
        ..DeviceError::default()
    });
    let r = judge_cut(
        &l,
        Some(true),
        CanaryRead::Missing("the target is a block device: give --canary-dir".into()),
    );
    assert_eq!((r.cut, r.cut_ms), (CutKind::DeviceError, Some(1300)));
    assert_eq!(
        (r.acks_last_100ms, r.acks_last_1s, r.last_ack_before_cut_ms),
        (2, 4, Some(50))
    );
    assert_eq!(r.canary.state, CanaryState::NotNeeded);
    assert!(r.measured);
}

#[test]
fn a_finished_run_is_a_read_back_on_the_same_boot_and_not_measured_after_a_reboot() {
    let mut l = ledger(vec![batch(1, &[900], 1000, 50)]);
    l.finished = true;
    let r = judge_cut(&l, Some(true), found(0));
    assert_eq!(
        (r.cut, r.cut_ms, r.measured, r.read_back),
        (CutKind::Finished, None, false, true)
    );
    assert!(
        r.not_measured.starts_with("read-back check: "),
        "{}",
        r.not_measured
    );
    let r = judge_cut(&l, Some(false), found(0));
    assert_eq!((r.measured, r.read_back), (false, false));
    assert!(
        r.not_measured
            .starts_with("the run finished by itself before the cut"),
        "{}",
        r.not_measured
    );
    let r = judge_cut(&l, None, found(0));
    assert_eq!((r.measured, r.read_back), (false, false));
}

#[test]
fn a_pgbench_server_loss_is_the_cut_and_counts_commits_of_a_range() {
    let mut l = ledger(vec![AckBatch {
        batch: 1,
        promised: true,
        acks: Acks::Pg(vec![
            PgAckRange {
                client: 0,
                first: 1,
                last: 40,
                ms: 501,
            },
            PgAckRange {
                client: 1,
                first: 1,
                last: 7,
                ms: 1450,
            },
        ]),
        flushes: None,
        sealed_ms: 1452,
        canary: 70,
        oldest_in_flight_ms: None,
    }]);
    l.finished = true;
    l.lost_ms = Some(1500);
    let r = judge_cut(&l, Some(false), found(20));
    assert_eq!((r.cut, r.cut_ms), (CutKind::ServerLost, Some(1500)));
    assert_eq!(r.ended(), "the server was lost (see cut)");
    assert_eq!(r.no_end_note(true), "");
    assert_eq!(
        (r.acks_last_100ms, r.acks_last_1s, r.last_ack_before_cut_ms),
        (7, 47, Some(50))
    );
    assert_eq!((r.canary.state, r.measured), (CanaryState::Lost, true));
}

#[test]
fn without_a_canary_or_a_heartbeat_nothing_shows_a_power_loss() {
    let l = ledger(vec![batch(1, &[990], 1000, 0)]);
    let r = judge_cut(
        &l,
        Some(false),
        CanaryRead::Missing("the run has no canary".into()),
    );
    assert_eq!(r.canary.state, CanaryState::NotMeasured);
    assert_eq!(
        r.not_measured,
        "nothing shows the host lost power: canary not measured: the run has no canary"
    );
    let r = judge_cut(&l, Some(false), found(0));
    assert_eq!(r.canary.state, CanaryState::NotMeasured);
    assert!(!r.measured);
    let r = judge_cut(&ledger(vec![]), Some(false), found(3));
    assert_eq!(
        (r.cut, r.cut_ms, r.measured),
        (CutKind::LastHeard, None, false)
    );
    // No moment: no exposure line, only the cut and the canary.
    assert_eq!(
        r.lines(),
        vec![
            "cut: unknown: the witness heard nothing after the run's start".to_string(),
            "canary: not measured: the agent reported no canary record written (found 3 on the medium)".to_string(),
        ]
    );
}

#[test]
fn the_newest_record_alone_on_the_medium_is_a_lost_canary_not_a_surviving_one() {
    // A device that keeps a random part of its cache kept record 195 but lost 190.
    let l = ledger(vec![batch(1, &[3990], 4000, 195)]);
    let seqs: Vec<u64> = (1..=195).filter(|&s| s != 190).collect();
    let r = judge_cut(&l, Some(false), CanaryRead::Found { seqs });
    assert_eq!(
        (r.canary.state, r.canary.on_medium),
        (CanaryState::Lost, Some(195))
    );
    assert_eq!(
        r.canary.detail,
        "lost: 1 of the newest 16 records written with no durability call (180..=195) are not on the medium (the newest there is 195): the host's memory lost power"
    );
    assert!(r.measured);
    // Record 179, older than the newest 16, missing: the canary survived.
    let seqs: Vec<u64> = (1..=195).filter(|&s| s != 179).collect();
    let r = judge_cut(&l, Some(false), CanaryRead::Found { seqs });
    assert_eq!(r.canary.state, CanaryState::Survived);
    // Fewer than 16 written: all of them count.
    let l = ledger(vec![batch(1, &[3990], 4000, 3)]);
    let r = judge_cut(&l, Some(false), CanaryRead::Found { seqs: vec![1, 3] });
    assert_eq!(r.canary.state, CanaryState::Lost);
    assert_eq!(r.canary.detail, "lost: 1 of the newest 3 records written with no durability call (1..=3) are not on the medium (the newest there is 3): the host's memory lost power");
}

#[test]
fn a_full_filesystem_is_no_power_cut() {
    let mut l = ledger(vec![batch(1, &[900, 1000], 1010, 0)]);
    l.device_error = Some(DeviceError {
        error: "pwrite of block 3 at byte 12288: No space left on device (os error 28)".into(),
        ms: 1020,
        device: true,
        ..DeviceError::default()
    });
    let r = judge_cut(&l, Some(true), found(0));
    assert_eq!(
        (r.cut, r.acks_last_1s, r.measured),
        (CutKind::DeviceError, 2, false)
    );
    assert_eq!(
        r.not_measured,
        "the run ended because the storage filled up (ENOSPC): no power was cut"
    );
    assert_eq!(
        errno_of("fdatasync after block 7: Input/output error (os error 5)"),
        Some(5)
    );
    assert_eq!(errno_of("a short write"), None);
}

#[test]
fn a_write_in_flight_since_before_the_error_moves_the_cut_back_to_its_issue() {
    // Acks until 10.0 s; a write issued at 10.002 s hangs; heartbeats say so; the
    // device error comes 30 s later (an I/O timeout).
    let mut hung = batch(2, &[], 25_000, 500);
    hung.oldest_in_flight_ms = Some(10_002);
    let mut l = ledger(vec![batch(1, &[9_500, 9_990, 10_000], 10_001, 480), hung]);
    l.device_error = Some(DeviceError {
        error: "fdatasync after block 7: Input/output error (os error 5)".into(),
        ms: 40_002,
        device: true,
        ..DeviceError::default()
    });
    let r = judge_cut(&l, Some(true), found(0));
    assert_eq!((r.cut_ms, r.moved_back_ms), (Some(10_002), Some(30_000)));
    assert_eq!((r.acks_last_100ms, r.acks_last_1s), (2, 3));
    assert!(r.measured, "{}", r.not_measured);
    assert_eq!(
        r.lines()[0],
        "cut: the device error at 40.002 s into the run; taken at 10.002 s: the oldest write then in flight had been issued 30.000 s before"
    );
    // Nothing in flight at the newest batch: the moment stands.
    let mut l = ledger(vec![batch(1, &[9_990], 10_001, 480)]);
    l.device_error = l_error(10_050);
    let r = judge_cut(&l, Some(true), found(0));
    assert_eq!((r.cut_ms, r.moved_back_ms), (Some(10_050), None));
}

fn l_error(ms: u64) -> Option<DeviceError> {
    Some(DeviceError {
        error: "pwrite: Input/output error (os error 5)".into(),
        ms,
        device: true,
        ..DeviceError::default()
    })
}

#[test]
fn the_windows_are_half_open_and_acks_after_the_cut_do_not_count() {
    // Cut at 5000 (last heard). Acks exactly 100 ms and 1000 ms before fall outside
    // their windows; one at the cut counts in both.
    let l = ledger(vec![batch(1, &[4000, 4001, 4900, 4901, 5000], 5000, 10)]);
    let r = judge_cut(&l, Some(false), found(0));
    assert_eq!(r.cut_ms, Some(5000));
    assert_eq!((r.acks_last_100ms, r.acks_last_1s), (2, 4));
    assert_eq!(r.last_ack_before_cut_ms, Some(0));
    // A write stalled since 4100: the cut is taken there, and the acks of other
    // jobs after it are not counted as before it.
    let mut stalled = batch(2, &[4500, 4600], 5000, 12);
    stalled.oldest_in_flight_ms = Some(4100);
    let l = ledger(vec![batch(1, &[3200, 4050], 4060, 10), stalled]);
    let r = judge_cut(&l, Some(false), found(0));
    assert_eq!((r.cut_ms, r.moved_back_ms), (Some(4100), Some(900)));
    assert_eq!((r.acks_last_100ms, r.acks_last_1s), (1, 2));
    assert_eq!(r.last_ack_before_cut_ms, Some(50));
}

#[test]
fn a_write_in_flight_for_less_than_a_heartbeat_does_not_move_the_cut() {
    let mut b = batch(1, &[4950], 5000, 10);
    b.oldest_in_flight_ms = Some(4901);
    let r = judge_cut(&ledger(vec![b.clone()]), Some(false), found(0));
    assert_eq!((r.cut_ms, r.moved_back_ms), (Some(5000), None));
    // 100 ms in flight: a stall.
    b.oldest_in_flight_ms = Some(4900);
    let r = judge_cut(&ledger(vec![b]), Some(false), found(0));
    assert_eq!((r.cut_ms, r.moved_back_ms), (Some(4900), Some(100)));
}

#[test]
fn a_finished_run_has_no_exposure_line() {
    let mut l = ledger(vec![batch(1, &[900], 1000, 50)]);
    l.finished = true;
    let r = judge_cut(&l, Some(true), found(50));
    assert_eq!(
        r.lines(),
        vec![
            "cut: none while the run wrote: it finished by itself".to_string(),
            "canary: survived: records 35..=50, the newest the agent reported written with no durability call, are all on the medium (the newest there is 50), as after a clean shutdown or a sync".to_string(),
        ]
    );
}

#[test]
fn each_way_a_run_ended_has_its_words() {
    let words = |cut| {
        let r = CutReport {
            cut,
            ..CutReport::default()
        };
        (r.ended(), r.no_end_note(false), r.no_end_note(true))
    };
    let cut_short = " (no end recorded: the run was cut short, or is still running)";
    assert_eq!(
        words(CutKind::Finished),
        (
            "by itself (its duration or count, or an interrupt)",
            cut_short,
            ""
        )
    );
    assert_eq!(
        words(CutKind::DeviceError),
        ("a device error (see cut)", cut_short, "")
    );
    assert_eq!(
        words(CutKind::ServerLost),
        ("the server was lost (see cut)", cut_short, "")
    );
    assert_eq!(
        words(CutKind::LastHeard),
        (
            "no end recorded: cut short, or still running",
            cut_short,
            ""
        )
    );
    assert_eq!(
        words(CutKind::WitnessStopped),
        (
            "the witness stopped recording it (see cut)",
            " (no end recorded: the witness stopped recording the run, and the writer stopped with it)",
            ""
        )
    );
}

#[test]
fn a_run_the_witness_stopped_before_any_batch_names_no_moment() {
    let mut l = ledger(Vec::new());
    l.witness_stopped = Some("disk full".into());
    let r = judge_cut(&l, None, CanaryRead::Missing("no canary".into()));
    assert_eq!((r.cut, r.cut_ms), (CutKind::WitnessStopped, None));
    assert_eq!(
        r.lines()[0],
        "cut: none while the run wrote: the witness stopped recording it, and the writer stopped with it"
    );
}

/// A reset (`verify --reset`): the same lost canary and exposure as a power cut, but
/// the disk kept power, so the PASS is NOT MEASURED and the report says why; an
/// evidence already not measured (idle) keeps its own reason.
#[test]
fn a_reset_is_no_power_cut_of_the_disk() {
    let l = ledger(vec![
        batch(1, &[100, 3000, 3950, 4000], 4002, 190),
        batch(2, &[], 4100, 195),
    ]);
    let mut r = judge_cut(&l, Some(false), found(160));
    assert_eq!((r.measured, r.disk_kept_power), (true, false));
    assert_eq!(r.lines().len(), 3);
    after_reset(&mut r);
    assert_eq!(
        (r.measured, r.disk_kept_power, r.canary.state),
        (false, true, CanaryState::Lost)
    );
    assert_eq!(r.not_measured, RESET_NOT_MEASURED);
    assert_eq!(
        r.lines(),
        vec![
            "cut: the witness last heard from the agent at 4.100 s into the run".to_string(),
            "power: a reset, not a power cut: the machine's memory was lost, the disk kept power and its volatile write cache".to_string(),
            "exposure: 0 acknowledged in the last 100 ms before the cut, 2 in the last 1 s (the last 0.100 s before it)".to_string(),
            "canary: lost: 16 of the newest 16 records written with no durability call (180..=195) are not on the medium (the newest there is 160): the host's memory lost power".to_string(),
        ]
    );
    let idle = ledger(vec![batch(1, &[2000], 3000, 10), batch(2, &[], 4000, 60)]);
    let mut r = judge_cut(&idle, Some(false), found(5));
    let why = r.not_measured.clone();
    assert!(why.starts_with("the workload was idle at the cut"), "{why}");
    after_reset(&mut r);
    assert_eq!(
        (r.measured, r.disk_kept_power, r.not_measured),
        (false, true, why)
    );
}

/// Batch `n` sealed at `sealed`, holding one pgbench range of `commits` commits at `ms`.
fn pg_batch(n: u64, commits: u64, ms: u32, sealed: u32) -> AckBatch {
    AckBatch {
        acks: Acks::Pg(vec![PgAckRange {
            client: 0,
            first: 1,
            last: commits,
            ms,
        }]),
        ..batch(n, &[], sealed, 10)
    }
}

#[test]
fn file_and_pgbench_acks_both_count_and_the_newest_of_either_is_the_last() {
    // The file clock's newest is 30 ms before the cut, the pgbench clock's 10 ms.
    let l = ledger(vec![
        batch(1, &[3000, 4500, 4970], 4980, 10),
        pg_batch(2, 3, 4990, 5000),
    ]);
    let r = judge_cut(&l, Some(false), found(0));
    assert_eq!(r.cut_ms, Some(5000));
    assert_eq!((r.acks_last_100ms, r.acks_last_1s), (4, 5));
    assert_eq!(r.last_ack_before_cut_ms, Some(10));
    // The other way round: the file ack is the newer one.
    let l = ledger(vec![
        batch(1, &[4996], 4998, 10),
        pg_batch(2, 2, 4800, 5000),
    ]);
    let r = judge_cut(&l, Some(false), found(0));
    assert_eq!((r.acks_last_100ms, r.acks_last_1s), (1, 3));
    assert_eq!(r.last_ack_before_cut_ms, Some(4));
}
