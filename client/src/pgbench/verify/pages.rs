//! The damage phase of the pgbench verifier: which pages are damaged, and whether
//! every checksum failure since the run started is explained by one (see
//! [`damage`] for the evidence and what counts as the run's data).

use super::damage::{self, Page};
use super::ready::{self, ServerFiles};
use super::sql::{q, Findings};
use crate::pg::describe;
use crate::pgbench::schema;
use crate::Error;
use plugpull::report::{PgFinding, PgFindingKind, PgReport};
use tokio_postgres::Client;

/// How many lines of the server log verify reads for "invalid page" lines.
const LOG_LINES: usize = 100_000;

/// What the damage phase starts from.
pub struct Damage<'a> {
    /// Pages already found damaged (by the count, by amcheck).
    pub pages: Vec<Page>,
    /// Whether the heaps of the tables were scanned already.
    pub scanned: bool,
    /// Whether a pgbench table is missing (then the heaps are not scanned).
    pub tables_missing: bool,
    /// The checksum failure counter and its epoch when the run started.
    pub counter_start: (i64, &'a str),
    /// When the run started, Unix ms (only log lines since then count).
    pub since_ms: u64,
    /// Where the server log is.
    pub files: ServerFiles<'a>,
}

/// Reads the checksum failure counter, names every damaged page (now unreadable, or
/// named by the server log since the run started) as a finding, and fails the run
/// when checksum failures stay unexplained while not every page could be checked.
pub async fn check(
    client: &Client,
    d: Damage<'_>,
    rep: &mut PgReport,
    out: &mut Findings,
) -> Result<(), Error> {
    let Damage {
        mut pages,
        mut scanned,
        ..
    } = d;
    let now = damage::counter(client)
        .await
        .map_err(q("cannot read pg_stat_database"))?;
    let (rise, epoch_note) = damage::rise(d.counter_start, (now.0, &now.1));
    rep.checksum_failures = rise;
    rep.notes.extend(epoch_note);
    if (rise > 0 || !pages.is_empty()) && !d.tables_missing && !scanned {
        scan_tables(client, &mut pages, &mut rep.notes).await;
        scanned = true;
    }
    pages.sort();
    pages.dedup();
    let mut repaired = unreadable_now(&pages, rep, out);
    let (logged, clean_again) = from_log(client, d.files, d.since_ms, &mut pages, rep, out).await;
    repaired += logged;
    // Every failure the counter shows must be explained by a page: an FSM/VM page
    // does not excuse the others.
    let attributed = repaired + rep.damaged_pages + clean_again;
    let unattributed = rise.saturating_sub(attributed);
    if rise > 0 {
        let clean = scanned && rep.amcheck.ran && rep.amcheck.note.is_none();
        if unattributed > 0 && !clean {
            rep.unattributed_checksum_failures = unattributed;
            out.failures.push(PgFinding {
                kind: PgFindingKind::ChecksumFailures,
                client: None,
                seq: None,
                detail: format!(
                    "{unattributed} of the {rise} checksum failures in this database since the run started \
                     are attributed to no page ({attributed} pages named), and not every page of the run's \
                     data could be checked (amcheck did not check every index); give --pg-log or --pgdata, \
                     and let amcheck run"
                ),
                page: None,
            });
        } else if rep.damaged_pages == 0 {
            rep.notes.push(format!(
                "{rise} checksum failures since the run started{}; {}",
                if repaired > 0 {
                    format!(", {repaired} of them pages PostgreSQL zeroes and rebuilds by design")
                } else {
                    String::new()
                },
                if clean {
                    "every heap page of the pgbench tables reads clean and amcheck checked every index: \
                     no page of the run's data is damaged"
                } else {
                    "each of them is attributed to a page named above"
                }
            ));
        }
    }
    Ok(())
}

/// Pages unreadable now: the run's data is damage; FSM/VM pages PostgreSQL
/// rebuilds by design; any other main-fork page (a system catalog, another table
/// of this database) is damage outside the run's data, a failure of the stack too.
/// Returns the pages rebuilt by design.
fn unreadable_now(pages: &[Page], rep: &mut PgReport, out: &mut Findings) -> u64 {
    let mut repaired = 0u64;
    for p in pages {
        if p.is_data() {
            rep.damaged_pages += 1;
            out.failures.push(PgFinding {
                kind: PgFindingKind::DamagedPage,
                client: None,
                seq: None,
                detail: format!(
                    "{} ({} fork) block {} cannot be read: PostgreSQL rejects the page (checksum or header){}",
                    p.relation,
                    p.fork,
                    p.block,
                    if p.relation == "pgbench_history" && rep.skipped_history_blocks.contains(&p.block) {
                        "; the commits were counted without it: tags on it count as lost"
                    } else {
                        ""
                    }
                ),
                page: Some(p.clone()),
            });
        } else if p.is_rebuilt_by_design() {
            repaired += 1;
            out.expected.push(by_design(p));
        } else {
            rep.damaged_pages += 1;
            out.failures.push(outside(
                p,
                "cannot be read now: PostgreSQL rejects the page (checksum or header)",
            ));
        }
    }
    repaired
}

/// The server log's lines since `since_ms` (and how many "invalid page" lines carry
/// no timestamp verify can read).
fn log_since(files: ServerFiles<'_>, since_ms: u64) -> (String, u64) {
    let log_text = files.log_tail(LOG_LINES);
    let (mut since_run, mut undated) = (String::new(), 0u64);
    for line in log_text.lines() {
        match ready::line_time_ms(line) {
            Some(t) if t >= since_ms => {
                since_run.push_str(line);
                since_run.push('\n');
            }
            Some(_) => {}
            None => undated += u64::from(damage::parse_invalid_page(line).is_some()),
        }
    }
    (since_run, undated)
}

/// Pages the server log names, in lines written since the run started, in this
/// database: FSM/VM pages PostgreSQL zeroed and rebuilt, pages of the run's data
/// that read clean again, or damage outside the run's data. Returns the pages
/// rebuilt by design and those that read clean again.
async fn from_log(
    client: &Client,
    files: ServerFiles<'_>,
    since_ms: u64,
    pages: &mut Vec<Page>,
    rep: &mut PgReport,
    out: &mut Findings,
) -> (u64, u64) {
    let (since_run, undated) = log_since(files, since_ms);
    if undated > 0 {
        rep.notes.push(format!(
            "{undated} \"invalid page\" lines of the server log carry no timestamp verify can read \
             (log_line_prefix with %m or %t, log_timezone UTC or a numeric offset): not attributed"
        ));
    }
    let db_oid: Option<u32> = client
        .query_one(
            "SELECT oid FROM pg_database WHERE datname = current_database()",
            &[],
        )
        .await
        .ok()
        .map(|r| r.get(0));
    let (mut repaired, mut clean_again) = (0u64, 0u64);
    for (path, block, _) in damage::log_pages(&since_run) {
        // Another database's files have the same filenodes when it was copied from
        // this one (CREATE DATABASE … TEMPLATE): only this database's paths count.
        if db_oid.is_none() || damage::database_of(&path) != db_oid {
            continue;
        }
        let p = damage::resolve(client, &path, block).await;
        if pages.contains(&p) {
            continue;
        }
        if p.is_rebuilt_by_design() {
            repaired += 1;
            out.expected.push(by_design(&p));
        } else if p.is_data() {
            clean_again += 1;
            rep.notes.push(format!(
                "the server log names {} ({} fork) block {} as damaged since the run started; it reads clean now",
                p.relation, p.fork, p.block
            ));
        } else {
            rep.damaged_pages += 1;
            out.failures.push(outside(
                &p,
                "failed verification since the run started (the server log names it)",
            ));
        }
        pages.push(p);
    }
    (repaired, clean_again)
}

/// The failure for a main-fork page outside the run's data (a system catalog,
/// another table of this database): not the run's commits, but damage the stack did.
fn outside(p: &Page, what: &str) -> PgFinding {
    PgFinding {
        kind: PgFindingKind::DamagedPageOutsideRun,
        client: None,
        seq: None,
        detail: format!(
            "{} ({} fork) block {} {what}: damage outside the run's data (not a page PostgreSQL \
             rebuilds by design)",
            p.relation, p.fork, p.block
        ),
        page: Some(p.clone()),
    }
}

/// The finding for an FSM or VM page that failed.
fn by_design(p: &Page) -> PgFinding {
    PgFinding {
        kind: PgFindingKind::RepairedByDesign,
        client: None,
        seq: None,
        detail: format!(
            "{} ({} fork) block {} failed verification: repaired by PostgreSQL by design \
             (free-space-map and visibility-map pages are not fully WAL-logged; PostgreSQL zeroes \
             and rebuilds them), no data of the run",
            p.relation, p.fork, p.block
        ),
        page: Some(p.clone()),
    }
}

/// Scans the heap of every pgbench table for pages that cannot be read (see
/// [`damage::scan_heap`]) and adds them to `pages`.
pub async fn scan_tables(client: &Client, pages: &mut Vec<Page>, notes: &mut Vec<String>) {
    for t in schema::TABLES {
        match damage::scan_heap(client, t).await {
            Ok(bad) => {
                for (blk, msg) in bad {
                    let p = match damage::parse_invalid_page(&msg) {
                        Some((path, b, _)) => damage::resolve(client, &path, b).await,
                        None => Page {
                            relation: t.to_string(),
                            fork: "main".into(),
                            block: blk,
                        },
                    };
                    if !pages.contains(&p) {
                        pages.push(p);
                    }
                }
            }
            Err(e) => notes.push(format!("page scan: {e}")),
        }
    }
}

/// Records the page an XX001/XX002 error names (or the error, when it names none).
pub async fn note_page_error(
    client: &Client,
    e: &tokio_postgres::Error,
    pages: &mut Vec<Page>,
    notes: &mut Vec<String>,
) {
    match damage::page_of_error(client, e).await {
        Some(p) if pages.contains(&p) => {}
        Some(p) => pages.push(p),
        None => notes.push(format!(
            "PostgreSQL reports damage it does not place: {}",
            describe(e)
        )),
    }
}
