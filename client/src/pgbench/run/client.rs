//! One job's clients, driven by one `poll` loop as pgbench drives its clients: each
//! client draws its values, tags the transaction with its next sequence number,
//! runs it, and acknowledges it when `COMMIT` succeeded; stays within
//! `max_unconfirmed` acknowledgements of the listener; stops when the run's limit is
//! reached, on SIGINT, on a witness fault, or when it is lost or aborted (see the
//! parent module for what happens to a transaction).

use super::script::Values;
use super::session::{Session, Step, TxError};
use super::{Go, Limit, Params, Shared};
use crate::latency::LatencyStats;
use crate::pgbench::tag;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// SQLSTATEs after which pgbench retries the transaction: serialization failure
/// and deadlock detected.
const RETRYABLE: [&str; 2] = ["40001", "40P01"];

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
    /// When it stopped (`None` while it runs).
    pub(super) ended_at: Option<std::time::Instant>,
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

/// Where a client is.
enum State {
    /// Between transactions.
    Idle,
    /// Running a transaction (the client's `seq`).
    InTx,
    /// Rolling back; then as [`After`] says.
    RollingBack(After),
    /// Stopped.
    Stopped,
}

/// One client of the job.
struct Client {
    c: u32,
    s: Session,
    rng: SmallRng,
    seq: u64,
    t0: Instant,
    state: State,
    r: ClientResult,
}

/// What a client does once its ROLLBACK was answered.
enum After {
    /// A serialization failure or deadlock: count it as failed and go on with the
    /// same seq.
    Retry,
    /// Stop as this says.
    Stop(ClientEnd),
}

/// What an idle client does next.
enum Next {
    Start,
    /// Wait for the listener's confirmations (or the reporter's pause) to leave room.
    Wait,
    Stop,
}

/// Runs a job's clients until every one of them stopped; their results in the
/// order given.
pub(super) fn run_job(
    sessions: Vec<(u32, Session)>,
    p: &Params,
    go: &Go,
    shared: &Shared,
) -> Vec<ClientResult> {
    let mut clients: Vec<Client> = sessions
        .into_iter()
        .map(|(c, s)| Client {
            c,
            s,
            rng: SmallRng::seed_from_u64(p.seed.wrapping_add(c as u64)),
            seq: 1,
            t0: Instant::now(),
            state: State::Idle,
            r: ClientResult {
                stats: LatencyStats::new(),
                attempts: 0,
                committed: 0,
                failed: 0,
                end: ClientEnd::Done,
                ended_at: None,
            },
        })
        .collect();
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(clients.len());
    let mut polled: Vec<usize> = Vec::with_capacity(clients.len());
    loop {
        let mut waiting = false;
        for cl in clients.iter_mut() {
            if matches!(cl.state, State::Idle) {
                match next(cl, p, go, shared) {
                    Next::Start => {
                        let v = Values::draw(&mut cl.rng, p.scale as i64);
                        let t = tag::encode(go.run, cl.c, cl.seq);
                        cl.r.attempts += 1;
                        cl.t0 = Instant::now();
                        cl.state = State::InTx;
                        let step = cl.s.start(v, &t);
                        handle(cl, step, shared, go);
                    }
                    Next::Wait => waiting = true,
                    Next::Stop => stop(cl, ClientEnd::Done),
                }
            }
        }
        // The oldest transaction whose COMMIT is in flight, for the heartbeats: when
        // the server's storage hangs, or the server dies while a COMMIT waits, that is
        // when the commits stopped (a client waiting on a lock is no storage stall).
        let oldest = clients
            .iter()
            .filter(|cl| matches!(cl.state, State::InTx) && cl.s.commit_in_flight())
            .map(|cl| cl.t0)
            .min();
        go.sink.in_flight_since(oldest);
        fds.clear();
        polled.clear();
        for (i, cl) in clients.iter().enumerate() {
            if matches!(cl.state, State::InTx | State::RollingBack(_)) {
                let mut events = libc::POLLIN;
                if cl.s.wants_write() {
                    events |= libc::POLLOUT;
                }
                fds.push(libc::pollfd {
                    fd: cl.s.fd(),
                    events,
                    revents: 0,
                });
                polled.push(i);
            }
        }
        if fds.is_empty() && !waiting {
            // Nobody runs a transaction or waits for room (a client idle after
            // `handle` starts one on the next round).
            if clients.iter().all(|cl| matches!(cl.state, State::Stopped)) {
                break;
            }
            continue;
        }
        // Waiting for room: no socket signals it (the listener's confirmations reach
        // the reporter, not this loop), so look again in 1 ms.
        let timeout = if waiting { 1 } else { -1 };
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // poll itself failed (EINVAL/ENOMEM): no client can go on; a COMMIT
            // out is in flight.
            eprintln!("pgbench job: poll failed: {e}; stopping its clients");
            for cl in clients.iter_mut() {
                let end = match cl.state {
                    State::InTx => ClientEnd::Lost {
                        in_flight: cl.s.commit_in_flight(),
                    },
                    State::RollingBack(_) => ClientEnd::Lost { in_flight: false },
                    _ => continue,
                };
                stop(cl, end);
            }
            break;
        }
        for (f, &i) in fds.iter().zip(&polled) {
            if f.revents == 0 {
                continue;
            }
            // An error or hang-up (or a descriptor poll refuses) is read, and the
            // read says what happened.
            let readable =
                f.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
            let writable = f.revents & libc::POLLOUT != 0;
            let cl = &mut clients[i];
            let step = cl.s.on_ready(readable, writable);
            handle(cl, step, shared, go);
        }
    }
    clients.into_iter().map(|cl| cl.r).collect()
}

/// Whether idle client `cl` starts a transaction, waits, or stops.
fn next(cl: &mut Client, p: &Params, go: &Go, shared: &Shared) -> Next {
    let stop = shared.stop.load(Ordering::Relaxed)
        || go.sink.failed()
        || matches!(p.limit, Limit::Transactions(n) if cl.r.attempts >= n)
        || go.deadline.is_some_and(|d| Instant::now() >= d);
    if stop {
        return Next::Stop;
    }
    if cl.seq > tag::MAX_SEQ {
        eprintln!("client {} stopped: sequence numbers exhausted", cl.c);
        return Next::Stop;
    }
    // Not more than `max_unconfirmed` acknowledgements (of all clients) ahead of
    // the listener, and not while the reporter says to pause (its time bound; a
    // witness fault).
    if shared
        .acked
        .load(Ordering::SeqCst)
        .saturating_sub(go.sink.confirmed())
        >= p.max_unconfirmed
        || go.sink.paused()
    {
        return Next::Wait;
    }
    Next::Start
}

/// Acts on what a client's session came to.
fn handle(cl: &mut Client, step: Step, shared: &Shared, go: &Go) {
    match step {
        Step::Pending => {}
        Step::Committed => {
            go.sink.pg_ack(cl.c, cl.seq);
            shared.acked.fetch_add(1, Ordering::SeqCst);
            let lat = cl.t0.elapsed();
            cl.r.stats.record(lat);
            cl.r.committed += 1;
            cl.seq += 1;
            shared
                .interval
                .lock()
                .unwrap()
                .commit(lat.as_secs_f64() * 1000.0);
            cl.state = State::Idle;
        }
        Step::Failed(e) => after_failure(cl, e, shared),
        Step::RolledBack(r) => {
            let then = match std::mem::replace(&mut cl.state, State::Idle) {
                State::RollingBack(then) => then,
                _ => After::Retry,
            };
            match r {
                Err(e) if e.is_connection_error() => {
                    eprintln!("client {} lost its connection: {e}", cl.c);
                    stop(cl, ClientEnd::Lost { in_flight: false });
                }
                // Other ROLLBACK errors are ignored: the client's next step decides.
                _ => match then {
                    After::Stop(end) => stop(cl, end),
                    After::Retry => {
                        cl.r.failed += 1;
                        shared.interval.lock().unwrap().fail();
                        cl.state = State::Idle;
                    }
                },
            }
        }
    }
}

/// Stops client `cl` as `end` and ends its session.
fn stop(cl: &mut Client, end: ClientEnd) {
    cl.r.end = end;
    cl.r.ended_at = Some(std::time::Instant::now());
    cl.state = State::Stopped;
    cl.s.close();
}

/// What a transaction that did not commit does to the client: it stops (lost or
/// aborted), or, after a serialization failure or deadlock, it is counted as failed
/// and goes on with the same `seq`. A transaction that failed before COMMIT is
/// rolled back first.
fn after_failure(cl: &mut Client, e: TxError, shared: &Shared) {
    let (c, seq) = (cl.c, cl.seq);
    match e {
        TxError::Rows(why) => {
            eprintln!("client {c} aborted in transaction {seq}: {why}");
            rollback_then(cl, After::Stop(ClientEnd::Aborted));
        }
        TxError::Db(at_commit, e) if e.is_connection_error() => {
            if at_commit {
                eprintln!(
                    "client {c} lost its connection during COMMIT of seq {seq} (in flight: it may or may not have committed): {e}"
                );
            } else {
                eprintln!("client {c} lost its connection: {e}");
            }
            stop(
                cl,
                ClientEnd::Lost {
                    in_flight: at_commit,
                },
            );
        }
        TxError::Db(at_commit, e) => {
            let retryable = e.code().is_some_and(|code| RETRYABLE.contains(&code));
            if !retryable {
                eprintln!(
                    "client {c} aborted in transaction {seq}{}: {e}",
                    if at_commit { " at COMMIT" } else { "" },
                );
            }
            match (at_commit, retryable) {
                // A failed COMMIT ended the transaction on the server already.
                (true, true) => {
                    cl.r.failed += 1;
                    shared.interval.lock().unwrap().fail();
                    cl.state = State::Idle;
                }
                (true, false) => stop(cl, ClientEnd::Aborted),
                // Counted as failed once the ROLLBACK is answered.
                (false, true) => rollback_then(cl, After::Retry),
                (false, false) => rollback_then(cl, After::Stop(ClientEnd::Aborted)),
            }
        }
    }
}

/// Sends ROLLBACK; then as `then` says.
fn rollback_then(cl: &mut Client, then: After) {
    cl.state = State::RollingBack(then);
    let step = cl.s.start_rollback();
    if let Step::RolledBack(Err(e)) = step {
        eprintln!("client {} lost its connection: {e}", cl.c);
        stop(cl, ClientEnd::Lost { in_flight: false });
    }
}
