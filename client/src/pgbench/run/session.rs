//! One client's connection and its transaction: the seven statements of pgbench's
//! "TPC-B (sort of)" script, sent as text (`simple`), prepared once per connection
//! and bound (`prepared`), or prepared and pipelined (`--pipeline`), and the random
//! values each transaction draws, with pgbench's distributions.
//!
//! A session is driven by its job's poll loop: [`Session::start`] sends the first
//! statement, [`Session::on_ready`] reads what arrived and sends the next one, until
//! it returns [`Step::Committed`] or [`Step::Failed`] ([`Step::RolledBack`] after
//! [`Session::start_rollback`]). A failed transaction says whether it failed at
//! COMMIT, the one place where it may or may not have committed.

use super::wire::{Conn, PgError};
use super::Params;
use crate::pgbench::schema;
use crate::pgbench::Protocol;
use postgres_protocol::message::backend::Message;
use rand::rngs::SmallRng;
use rand::Rng;
use std::fmt::Write as _;

/// The statements of the transaction, in order; `$n` are the prepared protocol's
/// parameters. [`Session::queue`] writes each one's values.
const SQL: [&str; 7] = [
    "BEGIN",
    "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
    "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
    "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
    "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) \
     VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP, $5)",
    "END",
];

/// Index of END in [`SQL`]: its answer is the commit.
const END: usize = 6;

/// The first word of each statement's command tag, by index in [`SQL`] (protocol
/// docs, CommandComplete): END's is COMMIT (ROLLBACK when it did not commit).
const TAGS: [&str; 7] = [
    "BEGIN", "UPDATE", "SELECT", "UPDATE", "UPDATE", "INSERT", "COMMIT",
];

/// What a session's transaction (or ROLLBACK) came to, so far.
pub(super) enum Step {
    /// Still waiting for answers.
    Pending,
    /// END's answer was the command tag `COMMIT` and then ReadyForQuery with the
    /// session idle (`I`): the transaction committed.
    Committed,
    /// The transaction did not commit.
    Failed(TxError),
    /// The ROLLBACK was answered (`Err` when the connection broke meanwhile).
    RolledBack(Result<(), PgError>),
}

/// Why a transaction did not commit.
pub(super) enum TxError {
    /// A statement failed; `true` when it was the COMMIT (END).
    Db(bool, PgError),
    /// A statement touched other than exactly one row (e.g. a missing account), or
    /// END answered other than COMMIT: the tables are not pgbench's as expected; the
    /// client stops.
    Rows(String),
}

/// One client's connection and the transaction it runs.
pub(super) struct Session {
    conn: Conn,
    protocol: Protocol,
    /// BEGIN and the five statements go without waiting for each answer.
    pipeline: bool,
    /// Statements of the current transaction sent.
    sent: usize,
    /// Of those, statements answered (ReadyForQuery received).
    done: usize,
    /// The row count of the current statement's command tag, once its
    /// CommandComplete arrived.
    tag_rows: Option<Result<u64, String>>,
    /// END's command tag was `COMMIT`.
    commit_tag: bool,
    /// The transaction's first failure.
    failure: Option<TxError>,
    /// A ROLLBACK is out instead of a transaction.
    rolling_back: bool,
    /// The current transaction's values and tag.
    v: Values,
    tag: String,
    /// Scratch text for a statement's values.
    text: String,
}

impl Session {
    /// Connects client `c` and, for the prepared protocol, prepares its statements
    /// (named `s0`…`s6`, pgbench names them `P0_0`…).
    ///
    /// Errors: the connection or a preparation failed (the message names the client).
    pub(super) fn open(p: &Params, c: u32) -> Result<Session, String> {
        let mut conn = Conn::connect(&p.cfg, &p.server).map_err(|e| {
            format!(
                "client {c}: cannot connect to PostgreSQL at {}: {e}",
                crate::pgbench::conn::redacted(&p.cfg),
            )
        })?;
        if p.protocol == Protocol::Prepared {
            for (k, sql) in SQL.iter().enumerate() {
                conn.prepare(&format!("s{k}"), sql)
                    .map_err(|e| format!("client {c}: cannot prepare {sql:?}: {e}"))?;
            }
        }
        conn.set_nonblocking()
            .map_err(|e| format!("client {c}: {e}"))?;
        Ok(Session {
            conn,
            protocol: p.protocol,
            pipeline: p.pipeline,
            sent: 0,
            done: 0,
            tag_rows: None,
            commit_tag: false,
            failure: None,
            rolling_back: false,
            v: Values::default(),
            tag: String::new(),
            text: String::with_capacity(256),
        })
    }

    /// The socket, for `poll`.
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        self.conn.fd()
    }

    /// Whether END was sent and not answered: a COMMIT in flight.
    pub(super) fn commit_in_flight(&self) -> bool {
        !self.rolling_back && self.sent > END && self.done <= END
    }

    /// Ends the session (Terminate, then the socket shut down): a stopped client's
    /// backend must not hold locks the others wait for.
    pub(super) fn close(&mut self) {
        self.conn.close();
    }

    /// Whether the socket has bytes to take (poll for writing too).
    pub(super) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Starts a transaction with values `v`, tagged `tag`: sends BEGIN (and, when
    /// pipelined, the five statements after it). An error here is the connection's.
    pub(super) fn start(&mut self, v: Values, tag: &str) -> Step {
        self.v = v;
        self.tag.clear();
        self.tag.push_str(tag);
        self.sent = 0;
        self.done = 0;
        self.tag_rows = None;
        self.commit_tag = false;
        self.failure = None;
        self.rolling_back = false;
        let first = if self.pipeline { END } else { 1 };
        for k in 0..first {
            self.queue(k);
        }
        self.send()
    }

    /// Sends ROLLBACK (simple protocol); [`Step::RolledBack`] comes when answered.
    pub(super) fn start_rollback(&mut self) -> Step {
        self.rolling_back = true;
        self.sent = 0;
        self.done = 0;
        self.failure = None;
        self.tag_rows = None;
        self.conn.queue_query("ROLLBACK");
        self.sent = 1;
        match self.conn.flush() {
            Ok(()) => Step::Pending,
            Err(e) => Step::RolledBack(Err(e)),
        }
    }

    /// Flushes queued bytes; a failure of the socket fails the transaction.
    fn send(&mut self) -> Step {
        match self.conn.flush() {
            Ok(()) => Step::Pending,
            Err(e) => self.broken(e),
        }
    }

    /// The connection broke: in flight when END was sent and not answered.
    fn broken(&mut self, e: PgError) -> Step {
        if self.rolling_back {
            return Step::RolledBack(Err(e));
        }
        Step::Failed(TxError::Db(self.commit_in_flight(), e))
    }

    /// Queues statement `k` of the transaction with the current values.
    fn queue(&mut self, k: usize) {
        let Values {
            aid,
            bid,
            tid,
            delta,
        } = self.v;
        let t = &mut self.text;
        t.clear();
        match self.protocol {
            Protocol::Simple => {
                // Writing to a String cannot fail.
                let _ = match k {
                    1 => write!(
                        t,
                        "UPDATE pgbench_accounts SET abalance = abalance + {delta} WHERE aid = {aid}"
                    ),
                    2 => write!(t, "SELECT abalance FROM pgbench_accounts WHERE aid = {aid}"),
                    3 => write!(
                        t,
                        "UPDATE pgbench_tellers SET tbalance = tbalance + {delta} WHERE tid = {tid}"
                    ),
                    4 => write!(
                        t,
                        "UPDATE pgbench_branches SET bbalance = bbalance + {delta} WHERE bid = {bid}"
                    ),
                    5 => write!(
                        t,
                        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) \
                         VALUES ({tid}, {bid}, {aid}, {delta}, CURRENT_TIMESTAMP, '{}')",
                        self.tag
                    ),
                    _ => write!(t, "{}", SQL[k]),
                };
                self.conn.queue_query(t);
            }
            Protocol::Prepared => {
                // The values as text, one after another; `ends` marks where each stops.
                let mut ends = [0usize; 5];
                let vals: &[i64] = match k {
                    1 => &[delta, aid],
                    2 => &[aid],
                    3 => &[delta, tid],
                    4 => &[delta, bid],
                    5 => &[tid, bid, aid, delta],
                    _ => &[],
                };
                for (i, x) in vals.iter().enumerate() {
                    let _ = write!(t, "{x}");
                    ends[i] = t.len();
                }
                let mut n = vals.len();
                if k == 5 {
                    t.push_str(&self.tag);
                    ends[n] = t.len();
                    n += 1;
                }
                let mut params: [&[u8]; 5] = [&[]; 5];
                let mut from = 0;
                for i in 0..n {
                    params[i] = &t.as_bytes()[from..ends[i]];
                    from = ends[i];
                }
                self.conn.queue_execute(STMT_NAMES[k], &params[..n]);
            }
        }
        self.sent += 1;
    }

    /// After `poll`: sends what waits when `writable`, reads when `readable`, and
    /// handles every whole answer received.
    pub(super) fn on_ready(&mut self, readable: bool, writable: bool) -> Step {
        if writable {
            if let Err(e) = self.conn.flush() {
                return self.broken(e);
            }
        }
        if !readable {
            return Step::Pending;
        }
        if let Err(e) = self.conn.fill() {
            return self.broken(e);
        }
        loop {
            let m = match self.conn.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => return Step::Pending,
                Err(e) => return self.broken(e),
            };
            match m {
                Message::CommandComplete(b) => {
                    // The tag must be the one of the statement answered (an answer out
                    // of step would pair every later answer with the wrong statement).
                    let word = b.tag().ok().and_then(|t| t.split(' ').next());
                    let want = if self.rolling_back {
                        "ROLLBACK"
                    } else {
                        TAGS.get(self.done).copied().unwrap_or("(none)")
                    };
                    let rollback_at_end = self.done == END && word == Some("ROLLBACK");
                    if self.done >= self.sent || (word != Some(want) && !rollback_at_end) {
                        return self.broken(PgError::Protocol(format!(
                            "the command tag {:?} does not answer the statement sent ({want} \
                             expected): the answers are out of step",
                            b.tag().unwrap_or("?")
                        )));
                    }
                    self.tag_rows = Some(match b.tag() {
                        Ok(t) => Ok(command_rows(t)),
                        Err(e) => Err(format!("a command tag that is not text: {e}")),
                    });
                    if self.done == END && !self.rolling_back {
                        // END's tag is COMMIT, or ROLLBACK for an aborted transaction.
                        self.commit_tag = b.tag().ok() == Some("COMMIT");
                        if !self.commit_tag {
                            self.failure.get_or_insert(TxError::Rows(format!(
                                "END answered {:?}, not COMMIT: the transaction did not commit",
                                b.tag().unwrap_or("?")
                            )));
                        }
                    }
                }
                Message::ErrorResponse(b) => {
                    let e = super::wire::server_error(&b);
                    if e.is_connection_error() {
                        return self.broken(e);
                    }
                    if !self.rolling_back {
                        let at_commit = self.done == END;
                        self.failure.get_or_insert(TxError::Db(at_commit, e));
                    }
                }
                Message::ReadyForQuery(b) => {
                    if let Some(step) = self.answered(b.status()) {
                        return step;
                    }
                }
                Message::BindComplete
                | Message::DataRow(_)
                | Message::RowDescription(_)
                | Message::EmptyQueryResponse
                | Message::NoticeResponse(_)
                | Message::ParameterStatus(_)
                | Message::NotificationResponse(_) => {}
                _ => {
                    return self.broken(PgError::Protocol(
                        "a message out of place in a statement's answer".into(),
                    ))
                }
            }
        }
    }

    /// A statement was answered (its ReadyForQuery came, with transaction status
    /// `status`): checks its row count, sends the next one, or says how the
    /// transaction ended.
    fn answered(&mut self, status: u8) -> Option<Step> {
        let k = self.done;
        self.done += 1;
        let rows = self.tag_rows.take();
        if self.done > self.sent {
            return Some(self.broken(PgError::Protocol(
                "ReadyForQuery with no statement outstanding".into(),
            )));
        }
        if self.rolling_back {
            return Some(Step::RolledBack(Ok(())));
        }
        if k == END && self.failure.is_none() && !(self.commit_tag && status == b'I') {
            // Only a COMMIT tag and an idle session say the transaction committed.
            self.failure = Some(TxError::Rows(format!(
                "END was answered without the COMMIT tag and an idle session (tag seen: {}, \
                 status {:?}): the transaction is not acknowledged",
                self.commit_tag, status as char
            )));
        }
        if self.failure.is_none() {
            if let Some(check) = ROW_CHECKS[k] {
                let key = match check.1 {
                    Key::Aid => self.v.aid,
                    Key::Tid => self.v.tid,
                    Key::Bid => self.v.bid,
                };
                match rows {
                    Some(Ok(1)) => {}
                    Some(Ok(n)) => {
                        self.failure = Some(TxError::Rows(format!(
                            "{} (key {key}) touched {n} rows, not 1: the pgbench tables do not \
                             hold what the transaction expects",
                            check.0
                        )))
                    }
                    Some(Err(why)) => self.failure = Some(TxError::Rows(why)),
                    None => {
                        self.failure = Some(TxError::Rows(format!(
                            "{} (key {key}) answered no command tag",
                            check.0
                        )))
                    }
                }
            }
        }
        if self.done < self.sent {
            return None; // pipelined answers still to come
        }
        if let Some(f) = self.failure.take() {
            return Some(Step::Failed(f));
        }
        if self.done > END {
            return Some(Step::Committed);
        }
        self.queue(self.done);
        match self.send() {
            Step::Pending => None,
            step => Some(step),
        }
    }
}

/// Prepared statement names, by index in [`SQL`].
const STMT_NAMES: [&str; 7] = ["s0", "s1", "s2", "s3", "s4", "s5", "s6"];

/// Which value a statement's row check names.
#[derive(Clone, Copy)]
enum Key {
    Aid,
    Tid,
    Bid,
}

/// The statements that must touch exactly one row, by index in [`SQL`].
const ROW_CHECKS: [Option<(&str, Key)>; 7] = [
    None,
    Some(("UPDATE pgbench_accounts", Key::Aid)),
    None,
    Some(("UPDATE pgbench_tellers", Key::Tid)),
    Some(("UPDATE pgbench_branches", Key::Bid)),
    Some(("INSERT INTO pgbench_history", Key::Tid)),
    None,
];

/// The row count of a command tag: its last word when that is a number
/// (`UPDATE 1`, `INSERT 0 1`, `SELECT 1`), else 0 (`BEGIN`, `COMMIT`). The protocol
/// docs, "Message Formats" → CommandComplete.
fn command_rows(tag: &str) -> u64 {
    tag.rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(0)
}

/// The random values of one transaction.
#[derive(Clone, Copy, Default)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_rows_is_the_tags_last_number() {
        assert_eq!(command_rows("UPDATE 1"), 1);
        assert_eq!(command_rows("INSERT 0 1"), 1);
        assert_eq!(command_rows("UPDATE 0"), 0);
        assert_eq!(command_rows("SELECT 12"), 12);
        assert_eq!(command_rows("BEGIN"), 0);
        assert_eq!(command_rows("COMMIT"), 0);
    }
}
