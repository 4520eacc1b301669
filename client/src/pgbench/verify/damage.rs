//! Damaged pages: where a checksum failure or an unreadable page is, and whether it
//! is damage to the run's data.
//!
//! Evidence, strongest first:
//! * an error with SQLSTATE `XX001` (data corrupted: "invalid page in block N of
//!   relation base/D/F") or `XX002` (index corrupted) from any query verify runs —
//!   the page is unreadable now;
//! * a scan of the pgbench tables' heap pages, one block at a time (a TID range
//!   scan per block, so any role that may read the tables can run it), made when a
//!   query met a damaged page or the database's checksum failure counter rose since
//!   the run started;
//! * lines "invalid page in block N of relation P[; zeroing out page]" in the server
//!   log (`--pg-log`, or `--pgdata`'s `log/`), which name pages PostgreSQL read,
//!   failed and, for free-space-map and visibility-map forks, zeroed and rebuilt.
//!
//! Damage a query meets that stops the checks (a catalog PostgreSQL cannot read, a
//! session refused) is turned into a finding by [`reported`].
//!
//! Main-fork pages of the pgbench tables and their indexes are damage to the run's
//! data; main-fork pages of anything else in the database (a system catalog, another
//! table) are damage outside the run's data, a failure of the stack as well. FSM and
//! VM pages are not fully WAL-logged: PostgreSQL zeroes a damaged one when it reads
//! it and rebuilds it, by design; those are reported as such, never as a failure.
//! Log lines count only when written since the run started and naming a file of the
//! run's database (`base/D/…` with D its OID).

use crate::pg::describe;
pub use plugpull::report::Page;
use plugpull::report::{PgFinding, PgFindingKind, PgReport};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// Whether an error is PostgreSQL saying a page is damaged (`XX001`, `XX002`).
pub fn is_page_error(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::DATA_CORRUPTED) || e.code() == Some(&SqlState::INDEX_CORRUPTED)
}

/// Whether an error is PostgreSQL saying the database is damaged: a damaged page
/// ([`is_page_error`]), or an internal error (`XX000`) that names a catalog
/// ("pg_attribute catalog is missing 6 attribute(s) for relation OID 2619") or a
/// failed catalog cache lookup ("cache lookup failed for relation 16384").
pub fn is_corruption(e: &tokio_postgres::Error) -> bool {
    is_page_error(e)
        || e.code() == Some(&SqlState::INTERNAL_ERROR)
            && e.as_db_error().is_some_and(|d| names_catalog(d.message()))
}

/// Whether an internal error's message names a catalog or a failed catalog lookup.
fn names_catalog(msg: &str) -> bool {
    catalog_named(msg).is_some() || msg.starts_with("cache lookup failed for ")
}

/// The catalog an `XX000` message names: `pg_attribute` of "pg_attribute catalog is
/// missing 6 attribute(s) for relation OID 2619".
pub fn catalog_named(msg: &str) -> Option<&str> {
    let at = msg.find(" catalog")?;
    let name = msg[..at]
        .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()?;
    name.starts_with("pg_").then_some(name)
}

/// `(path, block)` from "could not read block N in file \"PATH\"" (`md.c`'s message
/// for a block that cannot be read, SQLSTATE `XX001`).
pub fn parse_unreadable_block(msg: &str) -> Option<(String, u64)> {
    let rest = &msg[msg.find("could not read block ")? + "could not read block ".len()..];
    let (block, rest) = rest.split_once(" in file ")?;
    let path: String = rest
        .trim_start_matches('"')
        .chars()
        .take_while(|c| *c != '"' && *c != ':' && !c.is_whitespace())
        .collect();
    Some((path, block.trim().parse().ok()?))
}

/// `(path, block, zeroed)` from "invalid page in block N of relation PATH" (and
/// whether it goes on "; zeroing out page").
pub fn parse_invalid_page(msg: &str) -> Option<(String, u64, bool)> {
    let rest = &msg[msg.find("invalid page in block ")? + "invalid page in block ".len()..];
    let (block, rest) = rest.split_once(" of relation ")?;
    let block = block.trim().parse().ok()?;
    let path: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ';' && *c != '"')
        .collect();
    Some((path, block, rest.contains("zeroing out page")))
}

/// `(tablespace oid, filenode, fork)` of a relation file path: `base/D/F[_fork][.seg]`
/// (default tablespace, 0), `global/F…` (1664) or `pg_tblspc/T/…/D/F…` (T).
fn split_path(path: &str) -> Option<(u32, u32, &'static str)> {
    let parts: Vec<&str> = path.split('/').collect();
    let spc = match *parts.first()? {
        "base" => 0,
        "global" => 1664,
        "pg_tblspc" => parts.get(1)?.parse().ok()?,
        _ => return None,
    };
    let file = parts.last()?.split('.').next()?;
    let (node, fork) = match file.split_once('_') {
        Some((n, "fsm")) => (n, "fsm"),
        Some((n, "vm")) => (n, "vm"),
        Some((n, "init")) => (n, "init"),
        Some(_) => return None,
        None => (file, "main"),
    };
    Some((spc, node.parse().ok()?, fork))
}

/// The database OID in a relation file path: `D` of `base/D/…` or
/// `pg_tblspc/T/VERSION/D/…`; `None` for `global/…` (shared catalogs, read by the
/// sessions of every database) and anything else.
pub fn database_of(path: &str) -> Option<u32> {
    let parts: Vec<&str> = path.split('/').collect();
    match *parts.first()? {
        "base" => parts.get(1)?.parse().ok(),
        "pg_tblspc" => parts.get(3)?.parse().ok(),
        _ => None,
    }
}

/// The page a path and block name, the relation named by its file (`base/D/F`) and
/// fork: for when no session can look the name up.
pub fn unresolved(path: &str, block: u64) -> Page {
    let (relation, fork) = match split_path(path) {
        Some((_, _, fork)) => (path.split('_').next().unwrap_or(path), fork),
        None => (path, "main"),
    };
    Page {
        relation: relation.split('.').next().unwrap_or(relation).to_string(),
        fork: fork.into(),
        block,
    }
}

/// The page a path and block name, with the relation's name looked up.
pub async fn resolve(client: &Client, path: &str, block: u64) -> Page {
    let Some((spc, node, fork)) = split_path(path) else {
        return unresolved(path, block);
    };
    let name: Option<String> = client
        .query_one(
            "SELECT pg_filenode_relation($1::oid, $2::oid)::regclass::text",
            &[&spc, &node],
        )
        .await
        .ok()
        .and_then(|r| r.get(0));
    let relation = name.unwrap_or_else(|| path.split('_').next().unwrap_or(path).to_string());
    Page {
        relation,
        fork: fork.into(),
        block,
    }
}

/// The page an `XX001`/`XX002` error names, when its message names one.
pub async fn page_of_error(client: &Client, e: &tokio_postgres::Error) -> Option<Page> {
    let db = e.as_db_error()?;
    let (path, block, _) = parse_invalid_page(db.message())?;
    Some(resolve(client, &path, block).await)
}

/// The database's checksum failure counter and its epoch (`stats_reset` as text,
/// empty when NULL) from `pg_stat_database` for `current_database()`; the counter is
/// 0 when checksums are off.
pub async fn counter(client: &Client) -> Result<(i64, String), tokio_postgres::Error> {
    let r = client
        .query_one(
            "SELECT coalesce(checksum_failures, 0)::bigint, coalesce(stats_reset::text, '') \
             FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await?;
    Ok((r.get(0), r.get(1)))
}

/// The failures counted for the run: the rise since the run started when the epoch
/// (`stats_reset`) is the same and the counter did not go back; otherwise the
/// counter was reset or discarded (crash recovery) after the run started, and all it
/// counts now came after that. The text says which.
pub fn rise(start: (i64, &str), now: (i64, &str)) -> (u64, Option<String>) {
    if start.1 == now.1 && now.0 >= start.0 {
        return ((now.0 - start.0) as u64, None);
    }
    (
        now.0.max(0) as u64,
        Some(format!(
            "the checksum failure counter was reset since the run started (stats_reset {:?} → {:?}, \
             counter {} → {}): counting from the reset",
            start.1, now.1, start.0, now.0
        )),
    )
}

/// Blocks of `table`'s heap that cannot be read, each with PostgreSQL's message:
/// one TID range scan per block in a temporary function, catching `XX001`/`XX002`.
pub async fn scan_heap(client: &Client, table: &str) -> Result<Vec<(u64, String)>, String> {
    client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION pg_temp.plugpull_bad_blocks(rel regclass)
             RETURNS TABLE (blk bigint, msg text) LANGUAGE plpgsql AS $f$
             DECLARE n bigint := pg_relation_size(rel) / current_setting('block_size')::bigint;
             BEGIN
               FOR b IN 0 .. n - 1 LOOP
                 BEGIN
                   EXECUTE format('SELECT count(*) FROM %s WHERE ctid >= ''(%s,0)''::tid AND ctid < ''(%s,0)''::tid',
                                  rel, b, b + 1);
                 EXCEPTION WHEN data_corrupted OR index_corrupted THEN
                   blk := b; msg := SQLERRM; RETURN NEXT;
                 END;
               END LOOP;
             END $f$",
        )
        .await
        .map_err(|e| format!("cannot create the page scan function: {}", describe(&e)))?;
    let rows = client
        .query(
            "SELECT blk, msg FROM pg_temp.plugpull_bad_blocks($1::text::regclass)",
            &[&table],
        )
        .await
        .map_err(|e| format!("cannot scan {table}: {}", describe(&e)))?;
    Ok(rows
        .iter()
        .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
        .collect())
}

/// `(path, block, zeroed)` of every "invalid page" line in a server log.
pub fn log_pages(log: &str) -> Vec<(String, u64, bool)> {
    let mut v: Vec<_> = log.lines().filter_map(parse_invalid_page).collect();
    v.sort();
    v.dedup();
    v
}

/// PostgreSQL reported damage while verify was doing `what` (`message`, with its
/// SQLSTATE): a finding naming the relation (and block, when the message names one),
/// `damaged_page` for a pgbench table or index, else `damaged_page_outside_run`.
/// `client` looks the page's relation up, with the database it is in when that is
/// not the run's (the damage refused a session there); without one, a page is named
/// by its file.
/// The checks that did not run are named in the notes; whether the commits were
/// counted before is the caller's to say (`commits_checked`).
pub async fn reported(
    client: Option<(&Client, &str)>,
    rep: &mut PgReport,
    failures: &mut Vec<PgFinding>,
    what: &str,
    message: &str,
) {
    let page = match parse_unreadable_block(message)
        .or_else(|| parse_invalid_page(message).map(|(p, b, _)| (p, b)))
    {
        Some((path, block)) => Some(match client {
            Some((c, _)) => (resolve(c, &path, block).await, path),
            None => (unresolved(&path, block), path),
        }),
        None => None,
    };
    let named_from = match client {
        Some((_, db)) if !db.is_empty() => format!(", named by database {db}'s catalog"),
        _ => String::new(),
    };
    let relation = match (&page, catalog_named(message)) {
        (Some((p, path)), _) if p.relation != *path && !named_from.is_empty() => format!(
            "{} ({} fork) block {} (file {path}{named_from})",
            p.relation, p.fork, p.block
        ),
        (Some((p, _)), _) => format!("{} ({} fork) block {}", p.relation, p.fork, p.block),
        (None, Some(c)) => format!("the {c} catalog"),
        (None, None) => "the database".into(),
    };
    let page = page.map(|(p, _)| p);
    let ours = page.as_ref().is_some_and(|p| p.is_data());
    rep.damaged_pages += 1;
    rep.notes.push(format!(
        "verify stopped where PostgreSQL reported damage ({what}); the checks after it did not run"
    ));
    failures.insert(
        0,
        PgFinding {
            kind: if ours {
                PgFindingKind::DamagedPage
            } else {
                PgFindingKind::DamagedPageOutsideRun
            },
            client: None,
            seq: None,
            detail: format!(
                "PostgreSQL cannot read {relation} ({what}: {message}): damage the stack did, outside the run's commits unless the page is a pgbench table's"
            ),
            page,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalog_and_an_unreadable_block_are_read_out_of_the_servers_messages() {
        assert_eq!(
            catalog_named("pg_attribute catalog is missing 6 attribute(s) for relation OID 2619"),
            Some("pg_attribute")
        );
        assert_eq!(
            catalog_named("relation \"pgbench_history\" does not exist"),
            None
        );
        assert!(names_catalog("cache lookup failed for relation 16384"));
        assert!(!names_catalog("division by zero"));
        assert_eq!(
            parse_unreadable_block(
                "could not read block 3 in file \"base/5/2696\": read only 0 of 8192 bytes"
            ),
            Some(("base/5/2696".to_string(), 3))
        );
        assert_eq!(parse_unreadable_block("invalid page in block 3"), None);
    }

    #[test]
    fn messages_and_paths_are_parsed() {
        assert_eq!(
            parse_invalid_page("invalid page in block 12 of relation base/16384/16397"),
            Some(("base/16384/16397".into(), 12, false))
        );
        assert_eq!(
            parse_invalid_page(
                "2026-01-01 WARNING:  invalid page in block 0 of relation base/5/16400_fsm; zeroing out page"
            ),
            Some(("base/5/16400_fsm".into(), 0, true))
        );
        assert_eq!(split_path("base/5/16400_fsm"), Some((0, 16400, "fsm")));
        assert_eq!(split_path("base/5/16400.1"), Some((0, 16400, "main")));
        assert_eq!(
            split_path("pg_tblspc/9/PG_15_1/5/77_vm"),
            Some((9, 77, "vm"))
        );
        assert_eq!(split_path("global/1262"), Some((1664, 1262, "main")));
        assert_eq!(database_of("base/5/16400_fsm"), Some(5));
        assert_eq!(database_of("pg_tblspc/9/PG_15_1/5/77_vm"), Some(5));
        assert_eq!(database_of("global/1262"), None);
    }

    #[test]
    fn the_counter_rises_only_within_its_epoch() {
        assert_eq!(rise((5, "t1"), (7, "t1")), (2, None));
        assert_eq!(rise((5, "t1"), (5, "t1")), (0, None));
        let (n, note) = rise((5, "t1"), (1, ""));
        assert_eq!(n, 1);
        assert!(note.unwrap().contains("reset"));
    }
}
