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
            "amcheck could not run: {} (it needs the extension: have a superuser run CREATE EXTENSION amcheck in this database, or verify as a superuser)",
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
        let role = if notes.iter().any(|n| n.denied) {
            client
                .query_one("SELECT current_user::text", &[])
                .await
                .map(|r| r.get::<_, String>(0))
                .unwrap_or_else(|_| "ROLE".into())
        } else {
            String::new()
        };
        am.note = Some(note(&notes, &role));
    }
    Ok(am)
}

/// One relation amcheck could not check, and why.
struct Skipped {
    /// `verify_heapam` or `bt_index_check`.
    func: &'static str,
    /// The table or index.
    relation: String,
    /// The error, described.
    error: String,
    /// The role may not call `func` (SQLSTATE 42501).
    denied: bool,
}

impl Skipped {
    fn new(func: &'static str, relation: &str, e: &tokio_postgres::Error) -> Skipped {
        Skipped {
            func,
            relation: relation.to_string(),
            error: describe(e),
            denied: e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        }
    }
}

/// The amcheck note: each function and error once, with the relations it hit; when
/// `role` may not call a function, how to let it (amcheck's functions are revoked
/// from PUBLIC).
fn note(skipped: &[Skipped], role: &str) -> String {
    let mut groups: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for s in skipped {
        match groups
            .iter_mut()
            .find(|(f, e, _)| *f == s.func && *e == s.error)
        {
            Some((_, _, rels)) => rels.push(&s.relation),
            None => groups.push((s.func, &s.error, vec![&s.relation])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(f, e, rels)| format!("{f}({}): {e}", rels.join(", ")))
        .collect();
    let mut text = format!("amcheck could not run: {}", parts.join("; "));
    let mut denied: Vec<&str> = Vec::new();
    for s in skipped.iter().filter(|s| s.denied) {
        let sig = match s.func {
            "verify_heapam" => "verify_heapam(regclass, boolean, boolean, text, bigint, bigint)",
            _ => "bt_index_check(regclass, boolean)",
        };
        if !denied.contains(&sig) {
            denied.push(sig);
        }
    }
    if !denied.is_empty() {
        text.push_str(&format!(
            ": verify as a superuser, or have one run GRANT EXECUTE ON FUNCTION {} TO {role}",
            denied.join(", ")
        ));
    }
    text
}

/// `verify_heapam` on each table: its rows are corruptions (naming the page).
async fn heaps(
    client: &Client,
    tables: &[&str],
    am: &mut Amcheck,
    notes: &mut Vec<Skipped>,
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
                notes.push(Skipped::new("verify_heapam", t, &e));
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
    notes: &mut Vec<Skipped>,
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
            Err(e) => notes.push(Skipped::new("bt_index_check", &ix, &e)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn skipped(func: &'static str, relation: &str, error: &str, denied: bool) -> Skipped {
        Skipped {
            func,
            relation: relation.into(),
            error: error.into(),
            denied,
        }
    }

    #[test]
    fn the_note_names_each_error_once_and_how_to_grant_what_was_denied() {
        let heap = "ERROR: permission denied for function verify_heapam (SQLSTATE 42501)";
        let bt = "ERROR: permission denied for function bt_index_check (SQLSTATE 42501)";
        let s = [
            skipped("verify_heapam", "pgbench_history", heap, true),
            skipped("verify_heapam", "pgbench_tellers", heap, true),
            skipped("bt_index_check", "pgbench_accounts_pkey", bt, true),
            skipped("bt_index_check", "pgbench_tellers_pkey", bt, true),
        ];
        assert_eq!(
            note(&s, "plain"),
            "amcheck could not run: \
             verify_heapam(pgbench_history, pgbench_tellers): ERROR: permission denied for function verify_heapam (SQLSTATE 42501); \
             bt_index_check(pgbench_accounts_pkey, pgbench_tellers_pkey): ERROR: permission denied for function bt_index_check (SQLSTATE 42501): \
             verify as a superuser, or have one run GRANT EXECUTE ON FUNCTION \
             verify_heapam(regclass, boolean, boolean, text, bigint, bigint), bt_index_check(regclass, boolean) TO plain"
        );
        let missing = "ERROR: function verify_heapam(regclass) does not exist (SQLSTATE 42883)";
        assert_eq!(
            note(
                &[skipped("verify_heapam", "pgbench_history", missing, false)],
                ""
            ),
            format!("amcheck could not run: verify_heapam(pgbench_history): {missing}")
        );
    }
}
