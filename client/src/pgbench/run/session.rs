//! One client's connection and its transaction: the seven statements of pgbench's
//! "TPC-B (sort of)" script, sent as text (`simple`), prepared once per connection
//! and bound (`prepared`), or prepared and pipelined (`--pipeline`), and the random
//! values each transaction draws, with pgbench's distributions.
//!
//! A transaction either commits (the client then acknowledges it) or fails with a
//! [`TxError`] that says whether it failed at COMMIT, the one place where it may or
//! may not have committed.

use super::Params;
use crate::pgbench::conn::{self, describe};
use crate::pgbench::schema;
use crate::pgbench::Protocol;
use rand::rngs::SmallRng;
use rand::Rng;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

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
pub(super) struct Session {
    /// The connection (the client loop sends ROLLBACK on it).
    pub(super) client: Client,
    /// The prepared statements (`None` for the simple protocol).
    stmts: Option<Stmts>,
}

impl Session {
    /// Connects client `c` and, for the prepared protocol, prepares its statements.
    ///
    /// Errors: the connection or a preparation failed (the message names the client).
    pub(super) async fn open(p: &Params, c: u32) -> Result<Session, String> {
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
    pub(super) async fn transaction(
        &self,
        v: &Values,
        tag: &str,
        aid_big: bool,
        pipeline: bool,
    ) -> Result<(), TxError> {
        match &self.stmts {
            None => self.simple(v, tag).await,
            Some(s) if pipeline => self.pipelined(s, v, tag, aid_big).await,
            Some(s) => self.prepared(s, v, tag, aid_big).await,
        }
    }

    /// The transaction in the simple protocol: each statement as text, values in it.
    async fn simple(&self, v: &Values, tag: &str) -> Result<(), TxError> {
        let before = |e| TxError::Db(false, e);
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
        Ok(())
    }

    /// The transaction with prepared statements, BEGIN and the five statements
    /// pipelined, COMMIT alone.
    async fn pipelined(
        &self,
        s: &Stmts,
        v: &Values,
        tag: &str,
        aid_big: bool,
    ) -> Result<(), TxError> {
        let before = |e| TxError::Db(false, e);
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
        Ok(())
    }

    /// The transaction with prepared statements, one round trip each.
    async fn prepared(
        &self,
        s: &Stmts,
        v: &Values,
        tag: &str,
        aid_big: bool,
    ) -> Result<(), TxError> {
        let before = |e| TxError::Db(false, e);
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
        Ok(())
    }
}

/// Why a transaction did not commit.
pub(super) enum TxError {
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
pub(super) struct Values {
    aid: i64,
    bid: i64,
    tid: i64,
    delta: i64,
}

impl Values {
    /// pgbench's `random(lo, hi)`: uniform over the integers `lo..=hi`.
    pub(super) fn draw(rng: &mut SmallRng, scale: i64) -> Values {
        Values {
            aid: rng.random_range(1..=schema::NACCOUNTS * scale),
            bid: rng.random_range(1..=schema::NBRANCHES * scale),
            tid: rng.random_range(1..=schema::NTELLERS * scale),
            delta: rng.random_range(-5000..=5000),
        }
    }
}
