//! The transaction's script: pgbench's built-in "TPC-B (sort of)" statements, the
//! command tag and row count each must answer with, the prepared statements' names,
//! the simple protocol's text with the values in it, and the random values with
//! pgbench's distributions.

use crate::pgbench::schema;
use rand::rngs::SmallRng;
use rand::Rng;

/// The statements of the transaction, in order; `$n` are the prepared protocol's
/// parameters. `Session::queue` writes each one's values.
pub(super) const SQL: [&str; 7] = [
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
pub(super) const END: usize = 6;

/// The first word of each statement's command tag, by index in [`SQL`] (protocol
/// docs, CommandComplete): END's is COMMIT (ROLLBACK when it did not commit).
pub(super) const TAGS: [&str; 7] = [
    "BEGIN", "UPDATE", "SELECT", "UPDATE", "UPDATE", "INSERT", "COMMIT",
];

/// Appends `sql` to `out` with each `$n` (1-based, one digit) replaced by
/// `params[n-1]`, the last one in single quotes when `quote_last` (the tag, the one
/// text value; it holds only hex digits, so it needs no escaping).
pub(super) fn substitute(out: &mut String, sql: &str, params: &[&str], quote_last: bool) {
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digit = rest.as_bytes().get(at + 1).copied().unwrap_or(b'0');
        let n = (digit - b'0') as usize;
        assert!(
            (1..=params.len()).contains(&n),
            "{sql:?}: ${n} has no value"
        );
        if quote_last && n == params.len() {
            out.push('\'');
            out.push_str(params[n - 1]);
            out.push('\'');
        } else {
            out.push_str(params[n - 1]);
        }
        rest = &rest[at + 2..];
    }
    out.push_str(rest);
}

/// Prepared statement names, by index in [`SQL`].
pub(super) const STMT_NAMES: [&str; 7] = ["s0", "s1", "s2", "s3", "s4", "s5", "s6"];

/// Which value a statement's row check names.
#[derive(Clone, Copy)]
pub(super) enum Key {
    Aid,
    Tid,
    Bid,
}

/// The statements that must touch exactly one row, by index in [`SQL`].
pub(super) const ROW_CHECKS: [Option<(&str, Key)>; 7] = [
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
pub(super) fn command_rows(tag: &str) -> u64 {
    tag.rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or(0)
}

/// The random values of one transaction.
#[derive(Clone, Copy, Default)]
pub(super) struct Values {
    pub(super) aid: i64,
    pub(super) bid: i64,
    pub(super) tid: i64,
    pub(super) delta: i64,
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
    fn the_simple_protocol_text_is_the_statement_with_its_values() {
        let mut out = String::new();
        substitute(&mut out, SQL[1], &["-7", "42"], false);
        assert_eq!(
            out,
            "UPDATE pgbench_accounts SET abalance = abalance + -7 WHERE aid = 42"
        );
        out.clear();
        substitute(&mut out, SQL[5], &["3", "1", "42", "-7", "ab01"], true);
        assert_eq!(
            out,
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) \
             VALUES (3, 1, 42, -7, CURRENT_TIMESTAMP, 'ab01')"
        );
        out.clear();
        substitute(&mut out, SQL[0], &[], false);
        assert_eq!(out, "BEGIN");
    }

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
