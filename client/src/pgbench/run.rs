//! The clients: pgbench's built-in "TPC-B (sort of)" script, one connection per
//! client, the clients spread over `jobs` OS threads (each with its own
//! single-threaded tokio runtime), like `pgbench -c C -j J`.
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

use super::conn::{self, describe, is_connection_error};
use super::tag;
use super::Protocol;
use crate::latency::LatencyStats;
use crate::reporter::AckSink;
use plugpull::RunId;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Statement};

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
    pub cfg: Config,
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
    /// Whether `pgbench_accounts.aid` is `bigint` (scale ≥ 20000).
    pub aid_big: bool,
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

#[derive(Default)]
struct Interval {
    count: u64,
    sum_ms: f64,
    sum_sq_ms: f64,
    failed: u64,
}

/// The start signal: what every client needs once the run exists.
struct Go {
    run: RunId,
    sink: AckSink,
    deadline: Option<Instant>,
}

/// Per-client result.
struct ClientResult {
    stats: LatencyStats,
    attempts: u64,
    committed: u64,
    failed: u64,
    end: ClientEnd,
}

enum ClientEnd {
    Done,
    Lost { in_flight: bool },
    Aborted,
}

/// Clients connected and waiting for the start signal.
pub struct Prepared {
    threads: Vec<std::thread::JoinHandle<Vec<ClientResult>>>,
    go: watch::Sender<Option<Arc<Go>>>,
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
    let (go_tx, go_rx) = watch::channel(None);
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
        let rx = go_rx.clone();
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
        drop(go_tx);
        join_all(threads).await;
        return Err(e);
    }
    Ok(Prepared {
        threads,
        go: go_tx,
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
        let _ = self.go.send(Some(Arc::new(Go {
            run,
            sink: sink.clone(),
            deadline,
        })));
        let progress = self.params.progress.map(|every| {
            let shared = self.shared.clone();
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut tick =
                    tokio::time::interval_at(tokio::time::Instant::from_std(start + every), every);
                let mut last = start;
                loop {
                    tick.tick().await;
                    let now = Instant::now();
                    let iv = std::mem::take(&mut *shared.interval.lock().unwrap());
                    let secs = now.duration_since(last).as_secs_f64().max(1e-9);
                    last = now;
                    let (mean, sd) = if iv.count > 0 {
                        let m = iv.sum_ms / iv.count as f64;
                        (m, (iv.sum_sq_ms / iv.count as f64 - m * m).max(0.0).sqrt())
                    } else {
                        (0.0, 0.0)
                    };
                    let line = crate::progress::Progress {
                        elapsed_s: now.duration_since(start).as_secs_f64(),
                        rate: iv.count as f64 / secs,
                        unit: "tps",
                        lat_ms: mean,
                        stddev_ms: sd,
                        failed: Some(iv.failed),
                        acknowledged: sink.confirmed(),
                    };
                    eprintln!("{line}");
                }
            })
        });
        // SIGINT or SIGTERM: the first stops the clients after their current transaction (the
        // run then finishes normally); a second one quits at once. The task stays
        // for the rest of the process, since tokio keeps the handler installed.
        {
            let shared = self.shared.clone();
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
        let results = join_all(self.threads).await;
        let elapsed = start.elapsed();
        if let Some(p) = progress {
            p.abort();
        }
        let mut out = RunStats {
            stats: LatencyStats::new(),
            attempts: 0,
            committed: 0,
            failed: 0,
            lost_clients: 0,
            in_flight: 0,
            aborted_clients: 0,
            conn_time: self.conn_time,
            elapsed,
            interrupted: self.shared.stop.load(Ordering::SeqCst),
        };
        for r in results.into_iter().flatten() {
            out.stats.merge(&r.stats);
            out.attempts += r.attempts;
            out.committed += r.committed;
            out.failed += r.failed;
            match r.end {
                ClientEnd::Done => {}
                ClientEnd::Lost { in_flight } => {
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
/// signal, runs its clients concurrently on a single-threaded runtime.
fn thread_main(
    p: Params,
    clients: Vec<u32>,
    shared: Arc<Shared>,
    ready: oneshot::Sender<Result<Duration, String>>,
    mut go_rx: watch::Receiver<Option<Arc<Go>>>,
) -> Vec<ClientResult> {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot start a runtime: {e}")));
            return Vec::new();
        }
    };
    rt.block_on(async move {
        let t0 = Instant::now();
        let mut sessions = Vec::new();
        for &c in &clients {
            match Session::open(&p, c).await {
                Ok(s) => sessions.push((c, s)),
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return Vec::new();
                }
            }
        }
        let _ = ready.send(Ok(t0.elapsed()));
        let go = loop {
            if let Some(go) = go_rx.borrow_and_update().clone() {
                break go;
            }
            if go_rx.changed().await.is_err() {
                return Vec::new(); // aborted before the start
            }
        };
        let mut set = tokio::task::JoinSet::new();
        for (c, s) in sessions {
            let go = go.clone();
            let shared = shared.clone();
            let p = p.clone();
            set.spawn(async move { client_loop(c, s, &p, &go, &shared).await });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(r) = r {
                out.push(r);
            }
        }
        out
    })
}

/// The prepared statements of one connection.
struct Stmts {
    begin: Statement,
    upd_acc: Statement,
    sel_acc: Statement,
    upd_tel: Statement,
    upd_br: Statement,
    ins_hist: Statement,
    end: Statement,
}

/// One client's connection.
struct Session {
    client: Client,
    stmts: Option<Stmts>,
}

impl Session {
    async fn open(p: &Params, c: u32) -> Result<Session, String> {
        let client = conn::connect(&p.cfg).await.map_err(|e| {
            format!(
                "client {c}: cannot connect to PostgreSQL at {}: {}",
                conn::redacted(&p.cfg),
                describe(&e)
            )
        })?;
        let stmts = match p.protocol {
            Protocol::Simple => None,
            Protocol::Prepared => {
                let prep = |sql: &'static str| {
                    let client = &client;
                    async move {
                        client.prepare(sql).await.map_err(|e| {
                            format!("client {c}: cannot prepare {sql:?}: {}", describe(&e))
                        })
                    }
                };
                Some(Stmts {
                    begin: prep("BEGIN").await?,
                    upd_acc: prep(
                        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
                    )
                    .await?,
                    sel_acc: prep("SELECT abalance FROM pgbench_accounts WHERE aid = $1").await?,
                    upd_tel: prep(
                        "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
                    )
                    .await?,
                    upd_br: prep(
                        "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
                    )
                    .await?,
                    ins_hist: prep(
                        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) \
                         VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP, $5)",
                    )
                    .await?,
                    end: prep("END").await?,
                })
            }
        };
        Ok(Session { client, stmts })
    }

    /// Runs one transaction. `Err(TxError::Db(at_commit, error))` when a statement
    /// failed; `Err(TxError::Rows(..))` when an UPDATE or the INSERT touched other than
    /// exactly one row (then nothing was committed: the caller rolls back).
    ///
    /// The COMMIT's command tag (`COMMIT`, or `ROLLBACK` for a transaction already
    /// aborted) is not visible through tokio-postgres; END is only sent after every
    /// statement of the transaction succeeded, so the transaction cannot be in the
    /// aborted state that turns END into ROLLBACK.
    async fn transaction(
        &self,
        v: &Values,
        tag: &str,
        aid_big: bool,
        pipeline: bool,
    ) -> Result<(), TxError> {
        let before = |e| TxError::Db(false, e);
        match &self.stmts {
            None => {
                let c = &self.client;
                let (aid, bid, tid, delta) = (v.aid, v.bid, v.tid, v.delta);
                c.simple_query("BEGIN").await.map_err(before)?;
                let m = c
                    .simple_query(&format!(
                        "UPDATE pgbench_accounts SET abalance = abalance + {delta} WHERE aid = {aid}"
                    ))
                    .await
                    .map_err(before)?;
                one_row(simple_rows(&m), "UPDATE pgbench_accounts", aid)?;
                c.simple_query(&format!(
                    "SELECT abalance FROM pgbench_accounts WHERE aid = {aid}"
                ))
                .await
                .map_err(before)?;
                let m = c
                    .simple_query(&format!(
                        "UPDATE pgbench_tellers SET tbalance = tbalance + {delta} WHERE tid = {tid}"
                    ))
                    .await
                    .map_err(before)?;
                one_row(simple_rows(&m), "UPDATE pgbench_tellers", tid)?;
                let m = c
                    .simple_query(&format!(
                        "UPDATE pgbench_branches SET bbalance = bbalance + {delta} WHERE bid = {bid}"
                    ))
                    .await
                    .map_err(before)?;
                one_row(simple_rows(&m), "UPDATE pgbench_branches", bid)?;
                let m = c
                    .simple_query(&format!(
                        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) \
                         VALUES ({tid}, {bid}, {aid}, {delta}, CURRENT_TIMESTAMP, '{tag}')"
                    ))
                    .await
                    .map_err(before)?;
                one_row(simple_rows(&m), "INSERT INTO pgbench_history", tid)?;
                c.simple_query("END")
                    .await
                    .map_err(|e| TxError::Db(true, e))?;
            }
            Some(s) if pipeline => {
                let c = &self.client;
                let aid4 = v.aid as i32;
                let aid: &(dyn ToSql + Sync) = if aid_big { &v.aid } else { &aid4 };
                let (bid, tid, delta) = (v.bid as i32, v.tid as i32, v.delta as i32);
                // BEGIN and the five statements are pipelined: tokio-postgres sends
                // each request when its future is first polled, and try_join! polls them
                // in order, so the server runs them in order in one transaction without
                // a round trip between them. COMMIT goes alone: its answer is the ack.
                let p_acc: [&(dyn ToSql + Sync); 2] = [&delta, aid];
                let p_sel: [&(dyn ToSql + Sync); 1] = [aid];
                let p_tel: [&(dyn ToSql + Sync); 2] = [&delta, &tid];
                let p_br: [&(dyn ToSql + Sync); 2] = [&delta, &bid];
                let p_hist: [&(dyn ToSql + Sync); 5] = [&tid, &bid, aid, &delta, &tag];
                let (_, n_acc, _, n_tel, n_br, n_hist) = tokio::try_join!(
                    c.execute(&s.begin, &[]),
                    c.execute(&s.upd_acc, &p_acc),
                    c.query(&s.sel_acc, &p_sel),
                    c.execute(&s.upd_tel, &p_tel),
                    c.execute(&s.upd_br, &p_br),
                    c.execute(&s.ins_hist, &p_hist),
                )
                .map_err(before)?;
                one_row(n_acc, "UPDATE pgbench_accounts", v.aid)?;
                one_row(n_tel, "UPDATE pgbench_tellers", v.tid)?;
                one_row(n_br, "UPDATE pgbench_branches", v.bid)?;
                one_row(n_hist, "INSERT INTO pgbench_history", v.tid)?;
                c.execute(&s.end, &[])
                    .await
                    .map_err(|e| TxError::Db(true, e))?;
            }
            Some(s) => {
                let c = &self.client;
                let aid4 = v.aid as i32;
                let aid: &(dyn ToSql + Sync) = if aid_big { &v.aid } else { &aid4 };
                let (bid, tid, delta) = (v.bid as i32, v.tid as i32, v.delta as i32);
                c.execute(&s.begin, &[]).await.map_err(before)?;
                let n = c
                    .execute(&s.upd_acc, &[&delta, aid])
                    .await
                    .map_err(before)?;
                one_row(n, "UPDATE pgbench_accounts", v.aid)?;
                c.query(&s.sel_acc, &[aid]).await.map_err(before)?;
                let n = c
                    .execute(&s.upd_tel, &[&delta, &tid])
                    .await
                    .map_err(before)?;
                one_row(n, "UPDATE pgbench_tellers", v.tid)?;
                let n = c
                    .execute(&s.upd_br, &[&delta, &bid])
                    .await
                    .map_err(before)?;
                one_row(n, "UPDATE pgbench_branches", v.bid)?;
                let n = c
                    .execute(&s.ins_hist, &[&tid, &bid, aid, &delta, &tag])
                    .await
                    .map_err(before)?;
                one_row(n, "INSERT INTO pgbench_history", v.tid)?;
                c.execute(&s.end, &[])
                    .await
                    .map_err(|e| TxError::Db(true, e))?;
            }
        }
        Ok(())
    }
}

/// Why a transaction did not commit.
enum TxError {
    /// A statement failed; `true` when it was the COMMIT (END).
    Db(bool, tokio_postgres::Error),
    /// A statement touched other than exactly one row (e.g. a missing account):
    /// the tables are not pgbench's as expected; the client stops.
    Rows(String),
}

/// The row count of a simple-protocol statement's result.
fn simple_rows(m: &[tokio_postgres::SimpleQueryMessage]) -> u64 {
    m.iter()
        .find_map(|x| match x {
            tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// `Ok` when a statement touched exactly one row.
fn one_row(n: u64, what: &str, key: i64) -> Result<(), TxError> {
    if n == 1 {
        return Ok(());
    }
    Err(TxError::Rows(format!(
        "{what} (key {key}) touched {n} rows, not 1: the pgbench tables do not hold what the \
         transaction expects"
    )))
}

/// The random values of one transaction.
struct Values {
    aid: i64,
    bid: i64,
    tid: i64,
    delta: i64,
}

impl Values {
    /// pgbench's `random(lo, hi)`: uniform over the integers `lo..=hi`.
    fn draw(rng: &mut SmallRng, scale: i64) -> Values {
        Values {
            aid: rng.random_range(1..=super::schema::NACCOUNTS * scale),
            bid: rng.random_range(1..=super::schema::NBRANCHES * scale),
            tid: rng.random_range(1..=super::schema::NTELLERS * scale),
            delta: rng.random_range(-5000..=5000),
        }
    }
}

async fn client_loop(c: u32, s: Session, p: &Params, go: &Go, shared: &Shared) -> ClientResult {
    let mut r = ClientResult {
        stats: LatencyStats::new(),
        attempts: 0,
        committed: 0,
        failed: 0,
        end: ClientEnd::Done,
    };
    let mut rng = SmallRng::seed_from_u64(p.seed.wrapping_add(c as u64));
    let mut seq: u64 = 1;
    'run: loop {
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
        // Stay within max_unconfirmed acknowledgements of the listener (and within
        // the reporter's time bound; a witness fault ends the run).
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
                break 'run;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
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
                let ms = lat.as_secs_f64() * 1000.0;
                let mut iv = shared.interval.lock().unwrap();
                iv.count += 1;
                iv.sum_ms += ms;
                iv.sum_sq_ms += ms * ms;
            }
            Err(TxError::Rows(why)) => {
                if let Err(e2) = s.client.simple_query("ROLLBACK").await {
                    if is_connection_error(&e2) {
                        eprintln!("client {c} lost its connection: {}", describe(&e2));
                        r.end = ClientEnd::Lost { in_flight: false };
                        break;
                    }
                }
                eprintln!("client {c} aborted in transaction {seq}: {why}");
                r.end = ClientEnd::Aborted;
                break;
            }
            Err(TxError::Db(at_commit, e)) if is_connection_error(&e) => {
                if at_commit {
                    eprintln!(
                        "client {c} lost its connection during COMMIT of seq {seq} (in flight: it may or may not have committed): {}",
                        describe(&e)
                    );
                } else {
                    eprintln!("client {c} lost its connection: {}", describe(&e));
                }
                r.end = ClientEnd::Lost {
                    in_flight: at_commit,
                };
                break;
            }
            Err(TxError::Db(at_commit, e)) => {
                let retryable = e.code().is_some_and(|code| {
                    *code == SqlState::T_R_SERIALIZATION_FAILURE
                        || *code == SqlState::T_R_DEADLOCK_DETECTED
                });
                if !at_commit {
                    if let Err(e2) = s.client.simple_query("ROLLBACK").await {
                        if is_connection_error(&e2) {
                            eprintln!("client {c} lost its connection: {}", describe(&e2));
                            r.end = ClientEnd::Lost { in_flight: false };
                            break;
                        }
                    }
                }
                if retryable {
                    r.failed += 1;
                    shared.interval.lock().unwrap().failed += 1;
                } else {
                    eprintln!(
                        "client {c} aborted in transaction {seq}{}: {}",
                        if at_commit { " at COMMIT" } else { "" },
                        describe(&e)
                    );
                    r.end = ClientEnd::Aborted;
                    break;
                }
            }
        }
    }
    r
}
