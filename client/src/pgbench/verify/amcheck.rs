//! amcheck over the pgbench tables and their btree indexes: `verify_heapam` for the
//! heaps, `bt_index_check(…, heapallindexed)` for the indexes.

use super::damage;
use crate::pg::{self, describe};
use crate::pgbench::schema;
use crate::Error;
use plugpull::report::{Amcheck, PgFinding, PgFindingKind};
use tokio_postgres::Client;

/// Runs amcheck on the pgbench tables and their btree indexes.
///
/// What counts: rows `verify_heapam` returns, `bt_index_check` errors with SQLSTATE
/// `XX002` (amcheck's own corruption reports), and pages PostgreSQL cannot read
/// (`XX001`, added to `pages`). Any other error (permission denied, a missing
/// function, a lock timeout, a cancelled statement) means amcheck could not run
/// there: a note, never a corruption.
pub async fn amcheck(
    client: &Client,
    missing: &[&str],
    findings: &mut Vec<PgFinding>,
    pages: &mut Vec<damage::Page>,
) -> Result<Amcheck, Error> {
    let mut am = Amcheck::default();
    if let Err(e) = client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .await
    {
        am.note = Some(format!(
            "amcheck could not run: {} (needs the extension and the right to create it)",
            describe(&e)
        ));
        return Ok(am);
    }
    let tables: Vec<&str> = schema::TABLES
        .iter()
        .filter(|t| !missing.contains(t))
        .copied()
        .collect();
    let mut notes = Vec::new();
    heaps(client, &tables, &mut am, &mut notes, findings, pages).await?;
    indexes(client, &tables, &mut am, &mut notes, findings, pages).await?;
    if !notes.is_empty() {
        am.note = Some(format!("amcheck could not run: {}", notes.join("; ")));
    }
    Ok(am)
}

/// `verify_heapam` on each table: its rows are corruptions (naming the page).
async fn heaps(
    client: &Client,
    tables: &[&str],
    am: &mut Amcheck,
    notes: &mut Vec<String>,
    findings: &mut Vec<PgFinding>,
    pages: &mut Vec<damage::Page>,
) -> Result<(), Error> {
    for t in tables {
        match client
            .query(
                "SELECT blkno, offnum, attnum, msg FROM verify_heapam($1::text::regclass)",
                &[t],
            )
            .await
        {
            Ok(rows) => {
                am.relations_checked += 1;
                am.ran = true;
                for r in rows {
                    am.corruptions += 1;
                    let (blk, off, msg): (i64, Option<i32>, Option<String>) =
                        (r.get(0), r.get(1), r.get(3));
                    findings.push(PgFinding {
                        kind: PgFindingKind::Amcheck,
                        client: None,
                        seq: None,
                        detail: format!(
                            "verify_heapam({t}): block {blk}, offset {}: {}",
                            off.map(|o| o.to_string()).unwrap_or("-".into()),
                            msg.unwrap_or_default()
                        ),
                        page: Some(damage::Page {
                            relation: t.to_string(),
                            fork: "main".into(),
                            block: blk.max(0) as u64,
                        }),
                    });
                }
            }
            Err(e) if damage::is_page_error(&e) => {
                am.relations_checked += 1;
                am.ran = true;
                if damage::page_of_error(client, &e)
                    .await
                    .map(|p| pages.push(p))
                    .is_none()
                {
                    am.corruptions += 1;
                    findings.push(am_finding(format!("verify_heapam({t}): {}", describe(&e))));
                }
            }
            Err(e) if e.code().is_some() && !pg::is_connection_error(&e) => {
                // verify_heapam may be missing (amcheck < 1.3), or not ours to call.
                notes.push(format!("verify_heapam({t}): {}", describe(&e)));
            }
            Err(e) => return Err(Error::Msg(format!("amcheck: {}", describe(&e)))),
        }
    }
    Ok(())
}

/// `bt_index_check(…, heapallindexed)` on each btree index of the tables.
async fn indexes(
    client: &Client,
    tables: &[&str],
    am: &mut Amcheck,
    notes: &mut Vec<String>,
    findings: &mut Vec<PgFinding>,
    pages: &mut Vec<damage::Page>,
) -> Result<(), Error> {
    let idx: Vec<String> = client
        .query(
            "SELECT c.oid::regclass::text FROM pg_index i
             JOIN pg_class c ON c.oid = i.indexrelid
             JOIN pg_am am ON am.oid = c.relam
             WHERE am.amname = 'btree' AND i.indrelid = ANY($1::text[]::regclass[])
             ORDER BY 1",
            &[&tables.to_vec()],
        )
        .await
        .map_err(super::sql::q("cannot list the indexes"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for ix in idx {
        match client
            .execute("SELECT bt_index_check($1::text::regclass, true)", &[&ix])
            .await
        {
            Ok(_) => {
                am.relations_checked += 1;
                am.ran = true;
            }
            Err(e) if pg::is_connection_error(&e) => {
                return Err(Error::Msg(format!("amcheck: {}", describe(&e))))
            }
            Err(e) if damage::is_page_error(&e) => {
                am.relations_checked += 1;
                am.ran = true;
                let page = if e.code() == Some(&tokio_postgres::error::SqlState::DATA_CORRUPTED) {
                    damage::page_of_error(client, &e).await
                } else {
                    None
                };
                match page {
                    Some(p) => pages.push(p),
                    None => {
                        am.corruptions += 1;
                        findings.push(am_finding(format!(
                            "bt_index_check({ix}, heapallindexed): {}",
                            describe(&e)
                        )));
                    }
                }
            }
            Err(e) => notes.push(format!("bt_index_check({ix}): {}", describe(&e))),
        }
    }
    Ok(())
}

/// An amcheck finding that names no page.
fn am_finding(detail: String) -> PgFinding {
    PgFinding {
        kind: PgFindingKind::Amcheck,
        client: None,
        seq: None,
        detail,
        page: None,
    }
}
