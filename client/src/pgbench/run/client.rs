//! One client's loop: draw the values, tag the transaction with the client's next
//! sequence number, run it, and acknowledge it when `COMMIT` succeeded; stay within
//! `max_unconfirmed` acknowledgements of the listener; stop when the run's limit is
//! reached, on SIGINT, on a witness fault, or when the client is lost or aborted
//! (see the parent module for what happens to a transaction).

use super::session::{Session, TxError, Values};
use super::{Go, Limit, Params, Shared};
use crate::latency::LatencyStats;
use crate::pgbench::conn::{describe, is_connection_error};
use crate::pgbench::tag;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio_postgres::error::SqlState;

/// What one client did.
pub(super) struct ClientResult {
    /// Latency of its committed transactions.
    pub(super) stats: LatencyStats,
    /// Transactions started.
    pub(super) attempts: u64,
    /// Transactions committed and acknowledged.
    pub(super) committed: u64,
    /// Transactions rolled back after a serialization failure or deadlock.
    pub(super) failed: u64,
    /// How the client stopped.
    pub(super) end: ClientEnd,
}

/// How a client stopped.
pub(super) enum ClientEnd {
    /// The run's limit, SIGINT or a witness fault.
    Done,
    /// Its connection broke; `in_flight` when that was during `COMMIT`.
    Lost { in_flight: bool },
    /// Another error stopped it.
    Aborted,
}

/// Runs client `c` on its session `s` until it stops.
pub(super) async fn client_loop(
    c: u32,
    s: Session,
    p: &Params,
    go: &Go,
    shared: &Shared,
) -> ClientResult {
    let mut r = ClientResult {
        stats: LatencyStats::new(),
        attempts: 0,
        committed: 0,
        failed: 0,
        end: ClientEnd::Done,
    };
    let mut rng = SmallRng::seed_from_u64(p.seed.wrapping_add(c as u64));
    let mut seq: u64 = 1;
    loop {
        if shared.stop.load(Ordering::Relaxed) || go.sink.failed() {
            break;
        }
        match p.limit {
            Limit::Transactions(n) if r.attempts >= n => break,
            _ => {}
        }
        if go.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if !wait_for_room(p, go, shared).await {
            break;
        }
        if seq > tag::MAX_SEQ {
            eprintln!("client {c} stopped: sequence numbers exhausted");
            break;
        }
        let v = Values::draw(&mut rng, p.scale as i64);
        let t = tag::encode(go.run, c, seq);
        r.attempts += 1;
        let t0 = Instant::now();
        match s.transaction(&v, &t, p.aid_big, p.pipeline).await {
            Ok(()) => {
                go.sink.pg_ack(c, seq);
                shared.acked.fetch_add(1, Ordering::SeqCst);
                let lat = t0.elapsed();
                r.stats.record(lat);
                r.committed += 1;
                seq += 1;
                shared
                    .interval
                    .lock()
                    .unwrap()
                    .commit(lat.as_secs_f64() * 1000.0);
            }
            Err(e) => {
                if let Some(end) = after_failure(c, seq, &s, e, &mut r, shared).await {
                    r.end = end;
                    break;
                }
            }
        }
    }
    r
}

/// Waits while the client would run `max_unconfirmed` acknowledgements (of all
/// clients) ahead of the listener, or the reporter says to pause (its time bound; a
/// witness fault). False when the run ends meanwhile.
async fn wait_for_room(p: &Params, go: &Go, shared: &Shared) -> bool {
    while shared
        .acked
        .load(Ordering::SeqCst)
        .saturating_sub(go.sink.confirmed())
        >= p.max_unconfirmed
        || go.sink.paused()
    {
        if shared.stop.load(Ordering::Relaxed)
            || go.sink.failed()
            || go.deadline.is_some_and(|d| Instant::now() >= d)
        {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// What transaction `seq` of client `c`, which did not commit, does to the client:
/// `Some(end)` when the client stops; `None` when it goes on with the same `seq`
/// (a serialization failure or deadlock, rolled back and counted as failed).
async fn after_failure(
    c: u32,
    seq: u64,
    s: &Session,
    e: TxError,
    r: &mut ClientResult,
    shared: &Shared,
) -> Option<ClientEnd> {
    match e {
        TxError::Rows(why) => {
            if let Some(lost) = rollback(c, s).await {
                return Some(lost);
            }
            eprintln!("client {c} aborted in transaction {seq}: {why}");
            Some(ClientEnd::Aborted)
        }
        TxError::Db(at_commit, e) if is_connection_error(&e) => {
            if at_commit {
                eprintln!(
                    "client {c} lost its connection during COMMIT of seq {seq} (in flight: it may or may not have committed): {}",
                    describe(&e)
                );
            } else {
                eprintln!("client {c} lost its connection: {}", describe(&e));
            }
            Some(ClientEnd::Lost {
                in_flight: at_commit,
            })
        }
        TxError::Db(at_commit, e) => {
            let retryable = e.code().is_some_and(|code| {
                *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
            });
            if !at_commit {
                if let Some(lost) = rollback(c, s).await {
                    return Some(lost);
                }
            }
            if retryable {
                r.failed += 1;
                shared.interval.lock().unwrap().fail();
                None
            } else {
                eprintln!(
                    "client {c} aborted in transaction {seq}{}: {}",
                    if at_commit { " at COMMIT" } else { "" },
                    describe(&e)
                );
                Some(ClientEnd::Aborted)
            }
        }
    }
}

/// Rolls back the open transaction; `Some(Lost)` when the connection broke meanwhile
/// (other ROLLBACK errors are ignored: the client's next step decides).
async fn rollback(c: u32, s: &Session) -> Option<ClientEnd> {
    let e2 = s.client.simple_query("ROLLBACK").await.err()?;
    if !is_connection_error(&e2) {
        return None;
    }
    eprintln!("client {c} lost its connection: {}", describe(&e2));
    Some(ClientEnd::Lost { in_flight: false })
}
