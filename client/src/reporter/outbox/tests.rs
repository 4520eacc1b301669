use super::*;
use plugpull::ledger::{FileAck, PgAckRange};

/// An outbox holding `n` sealed batches of one file ack each (seq = batch).
fn with_batches(n: u64) -> Outbox {
    let mut o = Outbox::new(true);
    for seq in 1..=n {
        o.add(Ack::File(FileAck {
            seq,
            block: seq * 10,
            ms: 0,
        }));
        o.seal(None, Stamp::default());
    }
    o
}

/// Sends every unsent batch, as the task does; returns their numbers.
fn send_all(o: &mut Outbox) -> Vec<u64> {
    let mut out = Vec::new();
    while let Some(b) = o.next_unsent() {
        let n = b.batch;
        o.sent(n);
        out.push(n);
    }
    out
}

fn numbers(v: &[AckBatch]) -> Vec<u64> {
    v.iter().map(|b| b.batch).collect()
}

#[test]
fn a_flush_sample_goes_with_the_last_batch_sealed_and_is_dropped_when_none_is() {
    let mut o = Outbox::new(true);
    let sample = |n| {
        Some(FlushSample {
            counts: vec![Some(n)],
        })
    };
    assert!(!o.seal(sample(1), Stamp::default()));
    o.add(Ack::File(FileAck {
        seq: 1,
        block: 7,
        ms: 3,
    }));
    o.add(Ack::Pg {
        client: 0,
        seq: 1,
        ms: 4,
    });
    o.seal(sample(2), Stamp::default());
    o.add(Ack::File(FileAck {
        seq: 2,
        block: 8,
        ms: 5,
    }));
    o.seal(None, Stamp::default());
    let flushes: Vec<_> = o
        .pending
        .iter()
        .map(|b| (b.batch, b.flushes.clone()))
        .collect();
    assert_eq!(flushes, [(1, None), (2, sample(2)), (3, None)]);
}

#[test]
fn seal_numbers_batches_from_one_and_says_when_acks_begin_to_wait() {
    let mut o = Outbox::new(false);
    assert!(
        !o.seal(None, Stamp::default()),
        "nothing gathered: nothing begins to wait"
    );
    o.add(Ack::File(FileAck {
        seq: 1,
        block: 7,
        ms: 3,
    }));
    o.add(Ack::Pg {
        client: 2,
        seq: 1,
        ms: 4,
    });
    assert_eq!(o.gathered(), 2);
    assert!(o.seal(None, Stamp::default()));
    assert_eq!(o.gathered(), 0);
    o.add(Ack::Pg {
        client: 2,
        seq: 2,
        ms: 5,
    });
    assert!(
        !o.seal(None, Stamp::default()),
        "batches already wait: no new start of a stall"
    );
    let sent: Vec<AckBatch> = std::iter::from_fn(|| {
        let b = o.next_unsent()?.clone();
        o.sent(b.batch);
        Some(b)
    })
    .collect();
    assert_eq!(
        sent,
        vec![
            AckBatch {
                batch: 1,
                promised: false,
                acks: Acks::File(vec![FileAck {
                    seq: 1,
                    block: 7,
                    ms: 3
                }]),
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
            },
            AckBatch {
                batch: 2,
                promised: false,
                acks: Acks::Pg(vec![PgAckRange {
                    client: 2,
                    first: 1,
                    last: 1,
                    ms: 4
                }]),
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
            },
            AckBatch {
                batch: 3,
                promised: false,
                acks: Acks::Pg(vec![PgAckRange {
                    client: 2,
                    first: 2,
                    last: 2,
                    ms: 5
                }]),
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
            },
        ]
    );
    assert_eq!(o.unconfirmed(), 3);
}

#[test]
fn a_batch_confirmed_is_dropped_with_every_batch_before_it() {
    let mut o = with_batches(4);
    assert_eq!(send_all(&mut o), vec![1, 2, 3, 4]);
    assert_eq!(numbers(&o.confirm(2).unwrap()), vec![1, 2]);
    assert_eq!(o.unconfirmed(), 2);
    assert!(!o.is_empty());
    assert_eq!(numbers(&o.confirm(4).unwrap()), vec![3, 4]);
    assert_eq!(o.unconfirmed(), 0);
    assert!(o.is_empty());
    assert_eq!(send_all(&mut o), Vec::<u64>::new());
}

#[test]
fn a_batch_is_sent_once_per_connection() {
    let mut o = with_batches(2);
    assert_eq!(send_all(&mut o), vec![1, 2]);
    assert_eq!(send_all(&mut o), Vec::<u64>::new());
    o.add(Ack::File(FileAck {
        seq: 3,
        block: 30,
        ms: 0,
    }));
    o.seal(None, Stamp::default());
    assert_eq!(send_all(&mut o), vec![3]);
}

#[test]
fn a_duplicate_confirmation_is_ignored() {
    let mut o = with_batches(3);
    send_all(&mut o);
    assert_eq!(numbers(&o.confirm(2).unwrap()), vec![1, 2]);
    assert_eq!(o.confirm(2), Ok(vec![]));
    assert_eq!(o.unconfirmed(), 1);
    assert_eq!(send_all(&mut o), Vec::<u64>::new());
}

#[test]
fn after_a_reconnect_every_unconfirmed_batch_is_resent_in_order() {
    let mut o = with_batches(5);
    assert_eq!(send_all(&mut o), vec![1, 2, 3, 4, 5]);
    assert_eq!(numbers(&o.confirm(1).unwrap()), vec![1]);
    // The connection broke; the listener holds up to batch 2 (its confirmation
    // was lost with the connection).
    assert_eq!(numbers(&o.resume(2).unwrap()), vec![2]);
    assert_eq!(send_all(&mut o), vec![3, 4, 5]);
    assert_eq!(o.unconfirmed(), 3);
}

#[test]
fn a_resume_at_what_was_confirmed_resends_everything_after_it() {
    let mut o = with_batches(3);
    send_all(&mut o);
    o.confirm(1).unwrap();
    assert_eq!(o.resume(1), Ok(vec![]));
    assert_eq!(send_all(&mut o), vec![2, 3]);
}

#[test]
fn a_confirmation_below_an_earlier_one_is_refused_and_changes_nothing() {
    let mut o = with_batches(3);
    send_all(&mut o);
    o.confirm(2).unwrap();
    assert_eq!(
        o.confirm(1),
        Err(BadConfirm::Regressed { batch: 1, told: 2 })
    );
    assert_eq!(
        o.resume(0),
        Err(BadConfirm::Regressed { batch: 0, told: 2 })
    );
    assert_eq!(o.unconfirmed(), 1);
    assert_eq!(
        send_all(&mut o),
        Vec::<u64>::new(),
        "resume refused: no resend"
    );
}

#[test]
fn a_confirmation_above_the_highest_batch_sealed_is_refused() {
    let mut o = Outbox::new(true);
    assert_eq!(
        o.confirm(1),
        Err(BadConfirm::Unsent {
            batch: 1,
            highest: 0
        })
    );
    let mut o = with_batches(2);
    send_all(&mut o);
    assert_eq!(
        o.confirm(3),
        Err(BadConfirm::Unsent {
            batch: 3,
            highest: 2
        })
    );
    assert_eq!(o.unconfirmed(), 2);
    assert_eq!(o.confirm(0), Ok(vec![]));
}

#[test]
fn the_unconfirmed_bound_blocks_above_exactly_n_and_releases_at_n() {
    assert!(!over_bound(0, 3));
    assert!(!over_bound(3, 3), "exactly N waiting: writers go on");
    assert!(over_bound(4, 3), "N + 1 waiting: writers pause");
    assert!(!over_bound(3, 3), "back to N: writers go on again");
    assert!(over_bound(2, 1));
    assert!(!over_bound(1, 1));
}

#[test]
fn every_batch_sealed_and_every_heartbeat_carries_the_stamp() {
    let mut o = Outbox::new(true);
    let stamp = Stamp {
        ms: 1234,
        canary: 61,
        oldest_in_flight_ms: Some(1200),
    };
    o.add(Ack::File(FileAck {
        seq: 1,
        block: 0,
        ms: 1230,
    }));
    o.seal(None, stamp);
    o.heartbeat(
        Acks::File(Vec::new()),
        Stamp {
            ms: 1334,
            canary: 66,
            oldest_in_flight_ms: None,
        },
    );
    let got: Vec<(u64, u64, u32, u64, Option<u32>)> = std::iter::from_fn(|| {
        let b = o.next_unsent()?.clone();
        o.sent(b.batch);
        Some((
            b.batch,
            b.acks.count(),
            b.sealed_ms,
            b.canary,
            b.oldest_in_flight_ms,
        ))
    })
    .collect();
    assert_eq!(got, [(1, 1, 1234, 61, Some(1200)), (2, 0, 1334, 66, None)]);
}
