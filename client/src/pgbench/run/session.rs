//! One client's connection and its transaction: the seven statements of pgbench's
//! "TPC-B (sort of)" script, sent as text (`simple`), prepared once per connection
//! and bound (`prepared`), or prepared and pipelined (`--pipeline`), and the random
//! values each transaction draws, with pgbench's distributions.
//!
//! A statement is answered by its CommandComplete (or its ErrorResponse); each Sync
//! by one ReadyForQuery. Unpipelined, every statement has its Sync; pipelined, BEGIN
//! and the five statements share one, as between pgbench's `\startpipeline` and
//! `\endpipeline`, and COMMIT has its own (its answer is the acknowledgement).
//!
//! A session is driven by its job's poll loop: [`Session::start`] sends the first
//! statement, [`Session::on_ready`] reads what arrived and sends the next one, until
//! it returns [`Step::Committed`] or [`Step::Failed`] ([`Step::RolledBack`] after
//! [`Session::start_rollback`]). A failed transaction says whether it failed at
//! COMMIT, the one place where it may or may not have committed.

use super::script::{
    command_rows, substitute, Key, Values, END, ROW_CHECKS, SQL, STMT_NAMES, TAGS,
};
use super::wire::{Conn, PgError};
use super::Params;
use crate::pgbench::Protocol;
use postgres_protocol::message::backend::Message;
use std::fmt::Write as _;

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
    /// Of those, statements answered (CommandComplete received).
    done: usize,
    /// Syncs sent and not yet answered by their ReadyForQuery.
    syncs: usize,
    /// END's command tag was `COMMIT`.
    commit_tag: bool,
    /// The transaction's first failure.
    failure: Option<TxError>,
    /// The server answered a statement with an ErrorResponse since the last
    /// ReadyForQuery: it skips what follows up to the next Sync, so no command tag
    /// may come before that Sync's answer.
    server_error: bool,
    /// A ROLLBACK is out instead of a transaction.
    rolling_back: bool,
    /// The current transaction's values and tag.
    v: Values,
    tag: String,
    /// Scratch text for a statement's values.
    text: String,
    /// Scratch text for a simple-protocol statement.
    query: String,
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
                crate::pg::redacted(&p.cfg),
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
            syncs: 0,
            commit_tag: false,
            failure: None,
            server_error: false,
            rolling_back: false,
            v: Values::default(),
            tag: String::new(),
            text: String::with_capacity(256),
            query: String::with_capacity(256),
        })
    }

    /// The socket, for `poll`.
    pub(super) fn fd(&self) -> std::os::fd::RawFd {
        self.conn.fd()
    }

    /// Whether END was sent and its ReadyForQuery has not come: a COMMIT in flight
    /// (END goes alone, once every earlier Sync was answered).
    pub(super) fn commit_in_flight(&self) -> bool {
        !self.rolling_back && self.sent > END && self.syncs > 0
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
        self.syncs = 0;
        self.commit_tag = false;
        self.failure = None;
        self.server_error = false;
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
        self.done = 0;
        self.failure = None;
        self.server_error = false;
        self.conn.queue_query("ROLLBACK");
        self.sent = 1;
        self.syncs = 1;
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

    /// Queues statement `k` of the transaction with the current values: for the
    /// prepared protocol, Bind and Execute of `s{k}` with the values as text, and a
    /// Sync unless `k` is pipelined and not the pipeline's last; for the simple one,
    /// [`SQL`]`[k]` with each `$n` replaced by its value (the tag quoted).
    fn queue(&mut self, k: usize) {
        let Values {
            aid,
            bid,
            tid,
            delta,
        } = self.v;
        let vals: &[i64] = match k {
            1 => &[delta, aid],
            2 => &[aid],
            3 => &[delta, tid],
            4 => &[delta, bid],
            5 => &[tid, bid, aid, delta],
            _ => &[],
        };
        // The values as text, one after another; `ends` marks where each stops.
        let t = &mut self.text;
        t.clear();
        let mut ends = [0usize; 5];
        for (i, x) in vals.iter().enumerate() {
            // Writing to a String cannot fail.
            let _ = write!(t, "{x}");
            ends[i] = t.len();
        }
        let mut n = vals.len();
        if k == 5 {
            t.push_str(&self.tag);
            ends[n] = t.len();
            n += 1;
        }
        let mut params: [&str; 5] = [""; 5];
        let mut from = 0;
        for i in 0..n {
            params[i] = &t[from..ends[i]];
            from = ends[i];
        }
        match self.protocol {
            Protocol::Simple => {
                let q = &mut self.query;
                q.clear();
                substitute(q, SQL[k], &params[..n], k == 5);
                self.conn.queue_query(q);
                self.syncs += 1;
            }
            Protocol::Prepared => {
                let mut bytes: [&[u8]; 5] = [&[]; 5];
                for (b, p) in bytes.iter_mut().zip(&params[..n]) {
                    *b = p.as_bytes();
                }
                let sync = !self.pipeline || k + 1 >= END;
                self.conn.queue_execute(STMT_NAMES[k], &bytes[..n], sync);
                self.syncs += sync as usize;
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
                    if self.server_error
                        || self.done >= self.sent
                        || (word != Some(want) && !rollback_at_end)
                    {
                        return self.broken(PgError::Protocol(format!(
                            "the command tag {:?} does not answer the statement sent ({want} \
                             expected): the answers are out of step",
                            b.tag().unwrap_or("?")
                        )));
                    }
                    // A tag that is not text failed the check above.
                    let rows = b.tag().map(command_rows).unwrap_or(0);
                    let k = self.done;
                    self.done += 1;
                    if self.rolling_back {
                        continue;
                    }
                    self.check_rows(k, rows);
                    if k == END {
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
                    self.server_error = true;
                    if !self.rolling_back {
                        // COMMIT goes alone, once every earlier Sync was answered:
                        // an error after it was sent is COMMIT's.
                        let at_commit = self.sent > END;
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

    /// Statement `k` was answered with a command tag of `rows` rows: the first
    /// failure is a count other than 1 where the script expects exactly one row.
    fn check_rows(&mut self, k: usize, rows: u64) {
        if self.failure.is_some() {
            return;
        }
        let Some(check) = ROW_CHECKS[k] else { return };
        let key = match check.1 {
            Key::Aid => self.v.aid,
            Key::Tid => self.v.tid,
            Key::Bid => self.v.bid,
        };
        if rows != 1 {
            self.failure = Some(TxError::Rows(format!(
                "{} (key {key}) touched {rows} rows, not 1: the pgbench tables do not hold \
                 what the transaction expects",
                check.0
            )));
        }
    }

    /// A Sync was answered (its ReadyForQuery came, with transaction status
    /// `status`): when it was the last one out, says how the transaction ended or
    /// sends the next statement.
    fn answered(&mut self, status: u8) -> Option<Step> {
        if self.syncs == 0 {
            return Some(self.broken(PgError::Protocol(
                "ReadyForQuery with no statement outstanding".into(),
            )));
        }
        // The server's skipping after an error ends at this Sync.
        let server_error = std::mem::take(&mut self.server_error);
        if self.rolling_back {
            self.syncs -= 1;
            return (self.syncs == 0).then_some(Step::RolledBack(Ok(())));
        }
        // A statement the server failed makes it skip the rest up to the Sync;
        // otherwise every statement sent must have been answered by the last Sync's
        // answer (a failed row count is ours: the server skipped nothing). Checked
        // before the Sync counts, so a COMMIT sent stays in flight.
        if self.syncs == 1 && !server_error && self.done != self.sent {
            return Some(self.broken(PgError::Protocol(format!(
                "ReadyForQuery after {} of {} statements were answered: the answers are out \
                 of step",
                self.done, self.sent
            ))));
        }
        self.syncs -= 1;
        if self.syncs > 0 {
            return None; // another Sync's answer still to come
        }
        if self.done > END && self.failure.is_none() && !(self.commit_tag && status == b'I') {
            // Only a COMMIT tag and an idle session say the transaction committed.
            self.failure = Some(TxError::Rows(format!(
                "END was answered without the COMMIT tag and an idle session (tag seen: {}, \
                 status {:?}): the transaction is not acknowledged",
                self.commit_tag, status as char
            )));
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
