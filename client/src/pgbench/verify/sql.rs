//! The SQL of the pgbench verifier: the set-based queries over the run's tags in
//! `pgbench_history`, and the listing of the first findings.
//!
//! The counts come from one scan of `pgbench_history` that streams the run's tags out
//! with `COPY` ([`copy_sql`]); [`plugpull::verdict::pgbench::tags::TagCounter`]
//! turns them into the [`Counts`] the rules need. PostgreSQL only scans and filters:
//! grouping a million distinct tags in SQL took it 1.6–4.2 s. Listing the first
//! findings, when there are any, is SQL over the tag CTE ([`tags_cte`]), with
//! `generate_series` for the missing seqs; every such query takes the run's tag
//! prefix (`filler LIKE $1`) as its first parameter.

use crate::pg::describe;
use crate::Error;
use futures_util::StreamExt;
use plugpull::ledger::PgRanges;
use plugpull::report::{add_lags, lag_histogram, LagBucket};
use plugpull::report::{PgFinding, PgFindingKind, MAX_FINDINGS};
use plugpull::verdict::pgbench::tags::TagCounter;
use plugpull::verdict::pgbench::{ack_times, client_ranges, ClientAcks, Counts, LostLags};
use std::collections::BTreeMap;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

/// Maps a query error to the verifier's error: `what` failed, with the server's
/// message (exit 2); or, when PostgreSQL reports damage
/// ([`super::damage::is_corruption`]), [`Error::DatabaseDamaged`], which [`super::verify`]
/// turns into a finding.
pub fn q(what: &'static str) -> impl Fn(tokio_postgres::Error) -> Error {
    move |e: tokio_postgres::Error| {
        if super::damage::is_corruption(&e) {
            Error::DatabaseDamaged {
                what: what.into(),
                message: describe(&e),
            }
        } else {
            Error::Msg(format!("{what}: {}", describe(&e)))
        }
    }
}

/// `pgbench_history`, or, with damaged blocks to skip, the union of TID range scans
/// over the blocks between them (run with `enable_seqscan = off`, so no plan reads a
/// skipped block).
pub fn history_source(skip: &[u64]) -> String {
    if skip.is_empty() {
        return "pgbench_history".into();
    }
    let mut parts = Vec::new();
    let mut from = 0u64;
    for &b in skip {
        if b > from {
            parts.push(format!(
                "SELECT filler FROM pgbench_history WHERE ctid >= '({from},0)'::tid AND ctid < '({b},0)'::tid"
            ));
        }
        from = b + 1;
    }
    parts.push(format!(
        "SELECT filler FROM pgbench_history WHERE ctid >= '({from},0)'::tid"
    ));
    format!("({}) AS h", parts.join(" UNION ALL "))
}

/// The tag CTE shared by the queries: `t` groups the run's rows (`filler LIKE
/// prefix%`) by (client, seq) with their count `n`; rows that are not valid tags
/// form the group (NULL, NULL). Validity is checked with `translate` rather than a
/// regular expression, and computed once per row (the `OFFSET 0` fences keep the
/// planner from inlining it twice), both to keep the scan of a large history cheap
/// (`docs/performance.md` has the measured gain).
pub fn tags_cte(skip: &[u64]) -> String {
    let src = history_source(skip);
    format!(
        "t AS (
        SELECT client, seq, count(*) AS n FROM (
            SELECT CASE WHEN ok THEN substr(f, 9, 4)::int END AS client,
                   CASE WHEN ok THEN substr(f, 13, 10)::bigint END AS seq
            FROM (SELECT f, length(f) = 22
                            AND translate(substr(f, 9, 14), '0123456789', '') = '' AS ok
                  FROM (SELECT filler::text AS f FROM {src}
                        WHERE filler LIKE $1 OFFSET 0) AS x0
                  OFFSET 0) AS x) AS y
        GROUP BY client, seq)"
    )
}

/// The `COPY` that streams the run's tags: one text line per row of `src` (see
/// [`history_source`]) whose `filler` starts with the run's 8-hex-digit `prefix`
/// (`COPY` takes no parameters, so the prefix is written into the statement; it is
/// checked to be hex digits first).
pub fn copy_sql(prefix: &str, skip: &[u64]) -> String {
    assert!(
        prefix.len() == 8 && prefix.bytes().all(|b| b.is_ascii_hexdigit()),
        "a tag prefix is 8 hex digits, not {prefix:?}"
    );
    format!(
        "COPY (SELECT filler::text FROM {} WHERE filler LIKE '{prefix}%') TO STDOUT",
        history_source(skip)
    )
}

/// The parameters of the queries: the run's tag prefix, the bounds and the merged
/// acknowledged ranges as arrays, and the damaged blocks of `pgbench_history` the
/// scans skip (with the tag CTE that skips them).
pub struct Scan {
    /// The run's tag prefix (8 hex digits).
    pub prefix: String,
    /// `filler LIKE` pattern: the prefix and `%`.
    pub like: String,
    /// Clients `0..clients`.
    pub b_clients: Vec<i32>,
    /// `B_c` of each.
    pub b_bounds: Vec<i64>,
    r_client: Vec<i32>,
    r_first: Vec<i64>,
    r_last: Vec<i64>,
    r_prom: Vec<bool>,
    /// Blocks of `pgbench_history` not to read (sorted).
    skip: Vec<u64>,
    /// The tag CTE ([`tags_cte`]) over the blocks not skipped.
    pub tags: String,
}

impl Scan {
    /// The parameters for a run whose tags start with `prefix` (8 hex digits).
    pub fn new(prefix: &str, bounds: &[u64], acks: &BTreeMap<u32, ClientAcks>) -> Scan {
        let (mut r_client, mut r_first, mut r_last, mut r_prom) = (vec![], vec![], vec![], vec![]);
        for (c, a) in acks {
            for r in &a.ranges {
                r_client.push(*c as i32);
                r_first.push(r.first as i64);
                r_last.push(r.last as i64);
                r_prom.push(r.promised);
            }
        }
        Scan {
            prefix: prefix.to_string(),
            like: format!("{prefix}%"),
            b_clients: (0..bounds.len() as i32).collect(),
            b_bounds: bounds.iter().map(|&b| b as i64).collect(),
            r_client,
            r_first,
            r_last,
            r_prom,
            skip: Vec::new(),
            tags: tags_cte(&[]),
        }
    }

    /// From now on, read none of these blocks of `pgbench_history` (sorted, distinct).
    pub fn skip(&mut self, blocks: Vec<u64>) {
        self.tags = tags_cte(&blocks);
        self.skip = blocks;
    }

    /// Streams the run's tags out ([`copy_sql`]) and counts them: the counts of every
    /// client that has tags, and the malformed rows. `bounds` and `acks` as for
    /// [`TagCounter::counts`].
    ///
    /// Errors: the `COPY` failed (a damaged page among them: XX001/XX002).
    pub async fn count(
        &self,
        client: &Client,
        bounds: &[u64],
        acks: &BTreeMap<u32, ClientAcks>,
    ) -> Result<(BTreeMap<u32, Counts>, u64), tokio_postgres::Error> {
        let sql = copy_sql(&self.prefix, &self.skip);
        let stream = client.copy_out(sql.as_str()).await?;
        futures_util::pin_mut!(stream);
        let mut tags = TagCounter::new();
        while let Some(chunk) = stream.next().await {
            tags.feed(&chunk?);
        }
        Ok(tags.counts(bounds, acks))
    }
}

/// The lags of the lost promised commits, as a histogram ([`LostLags`]: each lost seq
/// counts at the time of every promised range of the ledger holding it, a lower
/// bound on its lag before `end_ms`; [`lag_histogram`]'s buckets). PostgreSQL streams
/// every missing acknowledged seq, found over the merged ranges, by client and seq;
/// the ledger's ranges are read from the fold beside them. Verify holds no value per
/// range of the ledger or per lost commit; PostgreSQL sorts the missing seqs (those
/// of unpromised merged ranges too: a promised range of the ledger may lie inside
/// one, so they cannot be left out) for the `ORDER BY`.
pub async fn lost_lags(
    client: &Client,
    scan: &Scan,
    ranges: &PgRanges,
    end_ms: u32,
) -> Result<Vec<LagBucket>, tokio_postgres::Error> {
    let sql = format!(
        "WITH {},
         r AS (SELECT * FROM unnest($2::int[], $3::bigint[], $4::bigint[])
               AS r(client, first, last))
         SELECT r.client, s.seq FROM r
         CROSS JOIN LATERAL generate_series(r.first, r.last) AS s(seq)
         WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.client = r.client AND t.seq = s.seq)
         ORDER BY 1, 2",
        scan.tags
    );
    let params: [&(dyn ToSql + Sync); 4] =
        [&scan.like, &scan.r_client, &scan.r_first, &scan.r_last];
    let rows = client.query_raw(&sql, params).await?;
    futures_util::pin_mut!(rows);
    let mut lags = LostLags::new(ranges, end_ms);
    let mut histogram = lag_histogram(&[]);
    while let Some(row) = rows.next().await {
        let row = row?;
        let (c, s): (i32, i64) = (row.get(0), row.get(1));
        lags.add(c as u32, s as u64, |lag| add_lags(&mut histogram, lag, 1));
    }
    Ok(histogram)
}

/// The first findings, as [`list_findings`] fills them: failures first, then the
/// expected (unpromised) ones.
#[derive(Default)]
pub struct Findings {
    /// Failures (in an unpromised run, the permitted ones move to `expected` at the end).
    pub failures: Vec<PgFinding>,
    /// Findings that are no failure: unpromised losses, pages rebuilt by design.
    pub expected: Vec<PgFinding>,
}

impl Findings {
    /// How many more failures the list has room for.
    fn room(&self) -> i64 {
        MAX_FINDINGS.saturating_sub(self.failures.len()) as i64
    }
}

/// A finding that names a commit.
fn commit(kind: PgFindingKind, c: i32, s: i64, detail: String) -> PgFinding {
    PgFinding {
        kind,
        client: Some(c as u32),
        seq: Some(s as u64),
        detail,
        page: None,
    }
}

/// What the counts say there is to list.
pub struct ToList<'a> {
    /// Lost commits, promised and unpromised.
    pub lost: u64,
    /// Whether any promised commit is lost (then the lags are counted too).
    pub promised_lost: bool,
    /// Ordering violations, and the gaps to look for them in.
    pub ordering: (u64, &'a [(u32, u64, u64)]),
    /// Duplicates.
    pub duplicates: u64,
    /// Phantoms.
    pub phantoms: u64,
    /// Malformed tags.
    pub malformed: u64,
}

/// Lists the first findings of the commits, one query per kind that has any, and
/// returns the lost commits' lag histogram (none unless a promised commit was lost).
/// `ranges` are the run's ([`PgRanges`]), `end_ms` its last acknowledgement.
pub async fn list_findings(
    client: &Client,
    scan: &Scan,
    what: ToList<'_>,
    ranges: &PgRanges,
    end_ms: u32,
    out: &mut Findings,
) -> Result<Option<Vec<LagBucket>>, Error> {
    let mut lags = None;
    if what.lost > 0 {
        list_lost(client, scan, ranges, end_ms, out).await?;
    }
    if what.promised_lost {
        let h = lost_lags(client, scan, ranges, end_ms)
            .await
            .map_err(q("cannot count the lost commits per acknowledgement"))?;
        lags = Some(h);
    }
    if what.ordering.0 > 0 && !what.ordering.1.is_empty() {
        list_ordering(client, scan, what.ordering.1, out).await?;
    }
    if what.duplicates > 0 {
        let sql = format!(
            "WITH {} SELECT client, seq, n FROM t
             WHERE n > 1 AND client IS NOT NULL ORDER BY 1, 2 LIMIT $2",
            scan.tags
        );
        let rows = client
            .query(&sql, &[&scan.like, &out.room()])
            .await
            .map_err(q("cannot list the duplicates"))?;
        for row in rows {
            let (c, s, n): (i32, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let detail = format!("tag found {n} times");
            out.failures
                .push(commit(PgFindingKind::Duplicate, c, s, detail));
        }
    }
    if what.phantoms > 0 {
        list_phantoms(client, scan, out).await?;
    }
    if what.malformed > 0 {
        let rows = client
            .query(
                "SELECT filler::text FROM pgbench_history WHERE filler LIKE $1 \
                 AND NOT (length(filler) = 22 \
                          AND translate(substr(filler, 9, 14), '0123456789', '') = '') \
                 LIMIT $2",
                &[&scan.like, &out.room()],
            )
            .await
            .map_err(q("cannot list the malformed tags"))?;
        for row in rows {
            let f: String = row.get(0);
            out.failures.push(PgFinding {
                kind: PgFindingKind::MalformedTag,
                client: None,
                seq: None,
                detail: format!("filler {f:?} starts with the run's prefix but is not a tag"),
                page: None,
            });
        }
    }
    Ok(lags)
}

/// Lists the first lost commits, promised first, each with when it was acknowledged
/// ([`ack_times`]: one pass over the ranges of each client listed).
async fn list_lost(
    client: &Client,
    scan: &Scan,
    ranges: &PgRanges,
    end_ms: u32,
    out: &mut Findings,
) -> Result<(), Error> {
    let sql = format!(
        "WITH {},
         r AS (SELECT * FROM unnest($2::int[], $3::bigint[], $4::bigint[], $5::bool[])
               AS r(client, first, last, promised))
         SELECT r.client, s.seq, r.promised FROM r
         CROSS JOIN LATERAL generate_series(r.first, r.last) AS s(seq)
         WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.client = r.client AND t.seq = s.seq)
         ORDER BY r.promised DESC, r.client, s.seq LIMIT $6",
        scan.tags
    );
    let limit = out.room().max(1) + MAX_FINDINGS as i64;
    let params: [&(dyn ToSql + Sync); 6] = [
        &scan.like,
        &scan.r_client,
        &scan.r_first,
        &scan.r_last,
        &scan.r_prom,
        &limit,
    ];
    let rows = client
        .query(&sql, &params)
        .await
        .map_err(q("cannot list the lost commits"))?;
    let lost: Vec<(i32, i64, bool)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let mut per_client: BTreeMap<u32, (Vec<usize>, Vec<u64>)> = BTreeMap::new();
    for (i, &(c, s, _)) in lost.iter().enumerate() {
        let (at, seqs) = per_client.entry(c as u32).or_default();
        at.push(i);
        seqs.push(s as u64);
    }
    let mut times = vec![String::new(); lost.len()];
    for (c, (at, seqs)) in per_client {
        let found = ack_times(client_ranges(ranges, c), &seqs, end_ms);
        for (i, when) in at.into_iter().zip(found) {
            times[i] = when;
        }
    }
    for ((c, s, promised), when) in lost.into_iter().zip(times) {
        if promised {
            let detail = format!("acknowledged commit missing ({when})");
            out.failures
                .push(commit(PgFindingKind::LostCommit, c, s, detail));
        } else {
            let detail = format!(
                "acknowledged commit missing ({when}); the configuration did not promise durability"
            );
            out.expected
                .push(commit(PgFindingKind::UnpromisedLost, c, s, detail));
        }
    }
    Ok(())
}

/// Lists the first ordering violations: missing seqs in the unacknowledged `gaps`
/// `(client, first, last)`.
async fn list_ordering(
    client: &Client,
    scan: &Scan,
    gaps: &[(u32, u64, u64)],
    out: &mut Findings,
) -> Result<(), Error> {
    let sql = format!(
        "WITH {}
         SELECT o.client, s.seq
         FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS o(client, first, last)
         CROSS JOIN LATERAL generate_series(o.first, o.last) AS s(seq)
         WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.client = o.client AND t.seq = s.seq)
         ORDER BY 1, 2 LIMIT $5",
        scan.tags
    );
    let gc: Vec<i32> = gaps.iter().map(|g| g.0 as i32).collect();
    let gf: Vec<i64> = gaps.iter().map(|g| g.1 as i64).collect();
    let gl: Vec<i64> = gaps.iter().map(|g| g.2 as i64).collect();
    let rows = client
        .query(&sql, &[&scan.like, &gc, &gf, &gl, &out.room()])
        .await
        .map_err(q("cannot list the ordering violations"))?;
    for row in rows {
        let (c, s): (i32, i64) = (row.get(0), row.get(1));
        let detail =
            "not acknowledged and missing, while a later commit of the client survived".into();
        out.failures
            .push(commit(PgFindingKind::OrderingViolation, c, s, detail));
    }
    Ok(())
}

/// Lists the first phantoms, each with the bound it passed (or the clients the run had).
async fn list_phantoms(client: &Client, scan: &Scan, out: &mut Findings) -> Result<(), Error> {
    let sql = format!(
        "WITH {},
         b AS (SELECT * FROM unnest($2::int[], $3::bigint[]) AS b(client, bound))
         SELECT t.client, t.seq, b.bound FROM t LEFT JOIN b ON b.client = t.client
         WHERE t.client IS NOT NULL AND (b.bound IS NULL OR t.seq NOT BETWEEN 1 AND b.bound)
         ORDER BY 1, 2 LIMIT $4",
        scan.tags
    );
    let rows = client
        .query(
            &sql,
            &[&scan.like, &scan.b_clients, &scan.b_bounds, &out.room()],
        )
        .await
        .map_err(q("cannot list the phantoms"))?;
    let clients = scan.b_clients.len();
    for row in rows {
        let (c, s, b): (i32, i64, Option<i64>) = (row.get(0), row.get(1), row.get(2));
        let detail = match b {
            Some(b) => format!("beyond anything the client could have issued (seq ≤ {b})"),
            None => format!("the run had no client {c} (clients 0..{clients})"),
        };
        out.failures
            .push(commit(PgFindingKind::Phantom, c, s, detail));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_history_blocks_are_skipped_by_tid_ranges() {
        assert_eq!(history_source(&[]), "pgbench_history");
        assert_eq!(
            history_source(&[0, 3]),
            "(SELECT filler FROM pgbench_history WHERE ctid >= '(1,0)'::tid AND ctid < '(3,0)'::tid \
             UNION ALL SELECT filler FROM pgbench_history WHERE ctid >= '(4,0)'::tid) AS h"
        );
    }

    #[test]
    fn the_copy_of_the_tags_names_the_prefix_and_skips_damaged_blocks() {
        assert_eq!(
            copy_sql("a1b2c3d4", &[]),
            "COPY (SELECT filler::text FROM pgbench_history WHERE filler LIKE 'a1b2c3d4%') TO STDOUT"
        );
        assert_eq!(
            copy_sql("a1b2c3d4", &[2]),
            "COPY (SELECT filler::text FROM (SELECT filler FROM pgbench_history WHERE ctid >= '(0,0)'::tid \
             AND ctid < '(2,0)'::tid UNION ALL SELECT filler FROM pgbench_history WHERE ctid >= '(3,0)'::tid) AS h \
             WHERE filler LIKE 'a1b2c3d4%') TO STDOUT"
        );
    }

    #[test]
    #[should_panic(expected = "a tag prefix is 8 hex digits")]
    fn the_copy_refuses_a_prefix_that_is_not_hex() {
        copy_sql("a1b2'; --", &[]);
    }
}
