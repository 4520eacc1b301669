//! The clients: pgbench's built-in "TPC-B (sort of)" script, one connection per
//! client, the clients spread over `jobs` OS threads (each with one `poll` loop
//! over its clients' sockets), like `pgbench -c C -j J`.
//!
//! One transaction, with pgbench's distributions (uniform integers, inclusive):
//! `aid` in 1..=100000·scale, `bid` in 1..=scale, `tid` in 1..=10·scale, `delta` in
//! -5000..=5000:
//!
//! ```sql
//! BEGIN;
//! UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
//! SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
//! UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
//! UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
//! INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler)
//!     VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP, :tag);
//! END;
//! ```
//!
//! One round trip per statement in both modes, as pgbench: `simple` sends each
//! statement as text with the values in it; `prepared` prepares the seven statements
//! once per connection and then binds and executes them.
//!
//! What happens to a transaction:
//! * `COMMIT` succeeded → acknowledged: `sink.pg_ack(client, seq)`, and the client's
//!   next transaction gets `seq + 1`. Sequence numbers advance only on commits, so a
//!   client's committed tags are always `1..=n`.
//! * serialization failure or deadlock (SQLSTATE 40001, 40P01) → rolled back, counted
//!   as failed; the client goes on with the same `seq`.
//! * the connection breaks → the client stops ("lost"). When it broke during `COMMIT`
//!   the transaction is *in flight*: it may or may not have committed.
//! * any other error → the client stops ("aborted"), as in pgbench.
//!
//! A client never runs more than `max_unconfirmed` acknowledgements (of all clients)
//! ahead of what the listener confirmed, so after a cut each client's surviving seqs
//! are bounded by the ledger: `seq ≤ A_c + max_unconfirmed`.
//!
//! * this module — the run's parameters and totals, starting the threads, the start
//!   signal, SIGINT.
//! * `wire` — one client's PostgreSQL connection: a plain socket, messages framed by
//!   `postgres-protocol`, authentication.
//! * `script` — the transaction's statements, their expected answers, its values.
//! * `session` — one client's transaction on it, per protocol, as a state machine.
//! * `client` — a job's poll loop: tag, run, acknowledge, handle failures.
//! * `interval` — the figures between two `-P` progress lines, and their printer.

mod client;
mod interval;
mod script;
mod session;
mod wire;

use super::Protocol;
use crate::latency::LatencyStats;
use crate::reporter::AckSink;
use client::{run_job, ClientEnd, ClientResult};
use interval::Interval;
use plugpull::RunId;
use session::Session;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// When the clients stop.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    /// Start no transaction after this long (pgbench `-T`).
    Duration(Duration),
    /// Run this many transactions per client, failed ones included (pgbench `-t`).
    Transactions(u64),
}

/// What the clients need to run.
#[derive(Clone, Debug)]
pub struct Params {
    /// Connection settings, one connection per client.
    pub cfg: crate::pg::ConnConfig,
    /// The identity of the server the setup checked
    /// ([`crate::pg::SERVER_IDENTITY_SQL`]): a client connects only there.
    pub server: String,
    /// pgbench scale factor.
    pub scale: u32,
    /// Number of clients.
    pub clients: u32,
    /// Number of OS threads.
    pub jobs: u32,
    /// When to stop.
    pub limit: Limit,
    /// Query protocol.
    pub protocol: Protocol,
    /// Progress report interval, if any.
    pub progress: Option<Duration>,
    /// Acknowledgements the clients may run ahead of the listener's confirmations.
    pub max_unconfirmed: u64,
    /// Seed of the random values; client `c` uses `seed + c`.
    pub seed: u64,
    /// Send BEGIN and the five statements without waiting for each answer
    /// (prepared protocol only); COMMIT still goes alone.
    pub pipeline: bool,
}

/// How the run went.
pub struct RunStats {
    /// Latency of committed transactions.
    pub stats: LatencyStats,
    /// Transactions started (committed, failed, and the last of lost or aborted clients).
    pub attempts: u64,
    /// Transactions committed and acknowledged.
    pub committed: u64,
    /// Transactions rolled back after a serialization failure or deadlock.
    pub failed: u64,
    /// Clients whose connection broke.
    pub lost_clients: u32,
    /// Of those, clients whose connection broke during `COMMIT` (in flight).
    pub in_flight: u32,
    /// Clients stopped by another error.
    pub aborted_clients: u32,
    /// Average time to open a client connection.
    pub conn_time: Duration,
    /// From the start signal until the last client stopped.
    pub elapsed: Duration,
    /// Whether the run was interrupted (SIGINT).
    pub interrupted: bool,
    /// When the last client that lost its connection lost it: the server went away
    /// by then (one client's earlier network trouble does not move it), if any.
    pub server_lost: Option<Instant>,
}

/// State shared by every client of the run.
struct Shared {
    /// Acknowledgements made so far, all clients.
    acked: AtomicU64,
    /// Set on SIGINT: clients stop after their current transaction.
    stop: AtomicBool,
    /// Figures since the last progress line.
    interval: Mutex<Interval>,
}

/// The start signal: what every client of one job needs once the run exists (each
/// job gets its own, with a sink of its own).
struct Go {
    /// The run id the tags carry.
    run: RunId,
    /// Where commits are acknowledged.
    sink: AckSink,
    /// When to start no more transactions (`-T`).
    deadline: Option<Instant>,
}

/// Clients connected and waiting for the start signal.
pub struct Prepared {
    threads: Vec<std::thread::JoinHandle<Vec<ClientResult>>>,
    /// One per thread: the start signal (dropped unsent: the run is called off).
    go: Vec<mpsc::Sender<Go>>,
    shared: Arc<Shared>,
    conn_time: Duration,
    params: Params,
}

/// Opens every client's connection (and prepares its statements) on its thread.
///
/// Errors: the first connection or preparation error, naming the client.
pub async fn prepare(params: &Params) -> Result<Prepared, String> {
    let shared = Arc::new(Shared {
        acked: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        interval: Mutex::new(Interval::default()),
    });
    let mut go_txs = Vec::new();
    let mut threads = Vec::new();
    let mut readies = Vec::new();
    for job in 0..params.jobs {
        // Contiguous blocks of clients per thread, as pgbench assigns them.
        let clients: Vec<u32> = (0..params.clients)
            .filter(|c| (*c as u64 * params.jobs as u64 / params.clients as u64) as u32 == job)
            .collect();
        let (ready_tx, ready_rx) = oneshot::channel();
        readies.push(ready_rx);
        let p = params.clone();
        let sh = shared.clone();
        let (go_tx, rx) = mpsc::channel();
        go_txs.push(go_tx);
        let handle = std::thread::Builder::new()
            .name(format!("pgbench-job-{job}"))
            .spawn(move || thread_main(p, clients, sh, ready_tx, rx))
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        threads.push(handle);
    }
    let mut conn_total = Duration::ZERO;
    let mut first_err = None;
    for r in readies {
        match r.await {
            Ok(Ok(d)) => conn_total += d,
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert("a client thread died while connecting".into());
            }
        }
    }
    if let Some(e) = first_err {
        drop(go_txs);
        join_all(threads).await;
        return Err(e);
    }
    Ok(Prepared {
        threads,
        go: go_txs,
        shared,
        conn_time: conn_total / params.clients.max(1),
        params: params.clone(),
    })
}

async fn join_all(
    threads: Vec<std::thread::JoinHandle<Vec<ClientResult>>>,
) -> Vec<Vec<ClientResult>> {
    tokio::task::spawn_blocking(move || {
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect()
    })
    .await
    .unwrap_or_default()
}

impl Prepared {
    /// Starts the clients for `run`, reporting acknowledgements to `sink`; prints
    /// progress lines on stderr every `params.progress`; returns when every client
    /// stopped.
    pub async fn go(self, run: RunId, sink: AckSink) -> RunStats {
        let start = Instant::now();
        let deadline = match self.params.limit {
            Limit::Duration(d) => Some(start + d),
            Limit::Transactions(_) => None,
        };
        // Each job has a sink of its own, so a lane of its own to the reporter (a
        // client's commits stay in order on it; the jobs do not share its lock).
        for tx in &self.go {
            let _ = tx.send(Go {
                run,
                sink: sink.clone(),
                deadline,
            });
        }
        let progress = self
            .params
            .progress
            .map(|every| interval::spawn_progress(every, start, self.shared.clone(), sink.clone()));
        on_interrupt(self.shared.clone());
        let results = join_all(self.threads).await;
        let elapsed = start.elapsed();
        if let Some(p) = progress {
            p.abort();
        }
        RunStats::tally(
            results.into_iter().flatten(),
            self.conn_time,
            elapsed,
            self.shared.stop.load(Ordering::SeqCst),
        )
    }
}

/// SIGINT or SIGTERM: the first stops the clients after their current transaction (the
/// run then finishes normally); a second one quits at once. The task stays
/// for the rest of the process, since tokio keeps the handler installed.
fn on_interrupt(shared: Arc<Shared>) {
    tokio::spawn(async move {
        if crate::interrupt::interrupted().await.is_ok() {
            eprintln!(
                "interrupted: stopping the clients after their current transaction \
                 (interrupt again to quit at once)"
            );
            shared.stop.store(true, Ordering::SeqCst);
        }
        if crate::interrupt::interrupted().await.is_ok() {
            eprintln!("interrupted again: quitting");
            std::process::exit(130);
        }
    });
}

impl RunStats {
    /// Adds up the clients' results.
    fn tally(
        results: impl Iterator<Item = ClientResult>,
        conn_time: Duration,
        elapsed: Duration,
        interrupted: bool,
    ) -> RunStats {
        let mut out = RunStats {
            stats: LatencyStats::new(),
            attempts: 0,
            committed: 0,
            failed: 0,
            lost_clients: 0,
            in_flight: 0,
            aborted_clients: 0,
            conn_time,
            elapsed,
            interrupted,
            server_lost: None,
        };
        for r in results {
            out.stats.merge(&r.stats);
            out.attempts += r.attempts;
            out.committed += r.committed;
            out.failed += r.failed;
            match r.end {
                ClientEnd::Done => {}
                ClientEnd::Lost { in_flight } => {
                    out.server_lost = match (out.server_lost, r.ended_at) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                    out.lost_clients += 1;
                    out.in_flight += in_flight as u32;
                }
                ClientEnd::Aborted => out.aborted_clients += 1,
            }
        }
        out
    }
}

/// One OS thread: connects its clients, reports readiness, waits for the start
/// signal, runs its clients with one poll loop.
fn thread_main(
    p: Params,
    clients: Vec<u32>,
    shared: Arc<Shared>,
    ready: oneshot::Sender<Result<Duration, String>>,
    go_rx: mpsc::Receiver<Go>,
) -> Vec<ClientResult> {
    let t0 = Instant::now();
    let mut sessions = Vec::new();
    for &c in &clients {
        match Session::open(&p, c) {
            Ok(s) => sessions.push((c, s)),
            Err(e) => {
                let _ = ready.send(Err(e));
                return Vec::new();
            }
        }
    }
    let _ = ready.send(Ok(t0.elapsed()));
    let Ok(go) = go_rx.recv() else {
        return Vec::new(); // called off before the start
    };
    run_job(sessions, &p, &go, &shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(committed: u64, failed: u64, end: ClientEnd) -> ClientResult {
        let mut stats = LatencyStats::new();
        for _ in 0..committed {
            stats.record(Duration::from_millis(2));
        }
        ClientResult {
            stats,
            attempts: committed + failed + 1,
            committed,
            failed,
            end,
            ended_at: None,
        }
    }

    #[test]
    fn tally_adds_up_the_clients_and_counts_how_they_ended() {
        let results = vec![
            client(5, 1, ClientEnd::Done),
            client(3, 0, ClientEnd::Lost { in_flight: true }),
            client(2, 2, ClientEnd::Lost { in_flight: false }),
            client(1, 0, ClientEnd::Aborted),
        ];
        let out = RunStats::tally(
            results.into_iter(),
            Duration::from_millis(7),
            Duration::from_secs(3),
            true,
        );
        assert_eq!(out.committed, 11);
        assert_eq!(out.failed, 3);
        assert_eq!(out.attempts, 18);
        assert_eq!(out.stats.count(), 11);
        assert_eq!(
            (out.lost_clients, out.in_flight, out.aborted_clients),
            (2, 1, 1)
        );
        assert_eq!(out.conn_time, Duration::from_millis(7));
        assert_eq!(out.elapsed, Duration::from_secs(3));
        assert!(out.interrupted);
    }
}
