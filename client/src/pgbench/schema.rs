//! The pgbench tables: creating them as `pgbench -i -s N` does (with server-side
//! generation, like `pgbench -i -I dtGvp` minus the drop), checking them, and
//! reading the balance sums the verifier's invariant starts from.
//!
//! Schema (pgbench 15's `initCreateTables`; `aid` is `bigint` from scale 20000 on):
//!
//! ```text
//! pgbench_branches (bid int not null, bbalance int, filler char(88))  fillfactor 100, pk bid
//! pgbench_tellers  (tid int not null, bid int, tbalance int, filler char(84))  pk tid
//! pgbench_accounts (aid int not null, bid int, abalance int, filler char(84))  pk aid
//! pgbench_history  (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))
//! ```
//!
//! Per unit of scale: 1 branch, 10 tellers, 100,000 accounts, every balance 0.
//! Existing tables are never dropped or truncated: they may hold the tags of runs
//! not yet verified.

use crate::pg::describe;
use tokio_postgres::Client;

/// The four pgbench tables, in the order pgbench creates them.
pub const TABLES: [&str; 4] = [
    "pgbench_history",
    "pgbench_tellers",
    "pgbench_accounts",
    "pgbench_branches",
];

/// Accounts per unit of scale.
pub const NACCOUNTS: i64 = 100_000;
/// Tellers per unit of scale.
pub const NTELLERS: i64 = 10;
/// Branches per unit of scale.
pub const NBRANCHES: i64 = 1;

fn err(what: &str, e: tokio_postgres::Error) -> String {
    format!("{what}: {}", describe(&e))
}

/// Which of [`TABLES`] are missing from the session's search path.
///
/// Errors: the lookup failed (the server's error, for the caller to name).
pub async fn missing_tables(client: &Client) -> Result<Vec<&'static str>, tokio_postgres::Error> {
    let mut missing = Vec::new();
    for t in TABLES {
        let row = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&t])
            .await?;
        if !row.get::<_, bool>(0) {
            missing.push(t);
        }
    }
    Ok(missing)
}

/// Checks that the tables exist and `pgbench_history.filler` is `char(22)`, and
/// returns the scale (the number of branches).
///
/// Errors name the missing table and say to run with `--init`.
pub async fn check(client: &Client) -> Result<u32, String> {
    let missing = missing_tables(client)
        .await
        .map_err(|e| err("cannot look up the pgbench tables", e))?;
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|t| format!("relation \"{t}\" does not exist"))
            .collect();
        return Err(format!("{}: run with --init", list.join(", ")));
    }
    let ty: Option<String> = client
        .query_opt(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
             WHERE attrelid = 'pgbench_history'::regclass AND attname = 'filler' AND NOT attisdropped",
            &[],
        )
        .await
        .map_err(|e| err("cannot read pgbench_history's columns", e))?
        .map(|r| r.get(0));
    if ty.as_deref() != Some("character(22)") {
        return Err(format!(
            "pgbench_history.filler is {}, not character(22) as pgbench -i creates it",
            ty.unwrap_or_else(|| "missing".into())
        ));
    }
    let unlogged: Vec<String> = client
        .query(
            "SELECT c.relname::text FROM pg_class c WHERE c.relpersistence = 'u' AND c.oid IN \
             ('pgbench_accounts'::regclass, 'pgbench_branches'::regclass, \
              'pgbench_tellers'::regclass, 'pgbench_history'::regclass) ORDER BY 1",
            &[],
        )
        .await
        .map_err(|e| err("cannot read the pgbench tables' persistence", e))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !unlogged.is_empty() {
        return Err(format!(
            "{} {} UNLOGGED (pgbench -i --unlogged-tables): crash recovery empties an unlogged \
             table, so no commit to it survives a cut; make {} logged (ALTER TABLE … SET LOGGED) \
             or drop {} and run with --init",
            unlogged.join(", "),
            if unlogged.len() == 1 { "is" } else { "are" },
            if unlogged.len() == 1 { "it" } else { "them" },
            if unlogged.len() == 1 { "it" } else { "them" },
        ));
    }
    let n: i64 = client
        .query_one("SELECT count(*) FROM pgbench_branches", &[])
        .await
        .map_err(|e| err("cannot count pgbench_branches", e))?
        .get(0);
    if n == 0 {
        return Err("pgbench_branches is empty: run with --init on an empty database".into());
    }
    u32::try_from(n).map_err(|_| format!("pgbench_branches has {n} rows: too many"))
}

/// Creates and fills the tables for `scale` as `pgbench -i -s scale` does, unless all
/// four exist already, in which case they are reused and their scale returned.
///
/// Prints what it does on stderr, like pgbench.
pub async fn init(client: &Client, scale: u32) -> Result<u32, String> {
    let missing = missing_tables(client)
        .await
        .map_err(|e| err("cannot look up the pgbench tables", e))?;
    if missing.is_empty() {
        let found = check(client).await?;
        if found != scale {
            eprintln!("reusing the existing pgbench tables of scale {found} (not {scale})");
        } else {
            eprintln!("reusing the existing pgbench tables of scale {found}");
        }
        return Ok(found);
    }
    if missing.len() != TABLES.len() {
        let present: Vec<&str> = TABLES
            .iter()
            .filter(|t| !missing.contains(t))
            .copied()
            .collect();
        return Err(format!(
            "some pgbench tables exist ({}) and some do not ({}): drop the partial set first",
            present.join(", "),
            missing.join(", ")
        ));
    }
    let big = scale >= 20_000;
    let aid = if big { "bigint" } else { "int" };
    let started = std::time::Instant::now();
    eprintln!("creating tables...");
    let ddl = format!(
        "BEGIN;
         CREATE TABLE pgbench_history(tid int,bid int,aid {aid},delta int,mtime timestamp,filler char(22));
         CREATE TABLE pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) WITH (fillfactor=100);
         CREATE TABLE pgbench_accounts(aid {aid} not null,bid int,abalance int,filler char(84)) WITH (fillfactor=100);
         CREATE TABLE pgbench_branches(bid int not null,bbalance int,filler char(88)) WITH (fillfactor=100);"
    );
    client
        .batch_execute(&ddl)
        .await
        .map_err(|e| err("cannot create the pgbench tables", e))?;
    eprintln!("generating data (server-side)...");
    let scale = scale as i64;
    let fill = format!(
        "INSERT INTO pgbench_branches(bid,bbalance) SELECT bid, 0 FROM generate_series(1, {b}) AS bid;
         INSERT INTO pgbench_tellers(tid,bid,tbalance) SELECT tid, (tid - 1) / {NTELLERS} + 1, 0 FROM generate_series(1, {t}) AS tid;
         INSERT INTO pgbench_accounts(aid,bid,abalance,filler) SELECT aid, (aid - 1) / {NACCOUNTS} + 1, 0, '' FROM generate_series(1, {a}) AS aid;
         COMMIT;",
        b = NBRANCHES * scale,
        t = NTELLERS * scale,
        a = NACCOUNTS * scale,
    );
    if let Err(e) = client.batch_execute(&fill).await {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(err("cannot fill the pgbench tables", e));
    }
    eprintln!("vacuuming...");
    vacuum(client, &TABLES, true).await?;
    eprintln!("creating primary keys...");
    client
        .batch_execute(
            "ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid);
             ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid);
             ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid);",
        )
        .await
        .map_err(|e| err("cannot create the primary keys", e))?;
    eprintln!(
        "done in {:.2} s (scale {scale}).",
        started.elapsed().as_secs_f64()
    );
    Ok(scale as u32)
}

/// `VACUUM` (with `ANALYZE` when `analyze`) each of `tables`, one statement at a
/// time (a multi-statement string would run as one transaction, where VACUUM
/// is not allowed).
pub async fn vacuum(client: &Client, tables: &[&str], analyze: bool) -> Result<(), String> {
    for t in tables {
        let sql = format!("VACUUM {}{t}", if analyze { "ANALYZE " } else { "" });
        client
            .batch_execute(&sql)
            .await
            .map_err(|e| err(&format!("cannot vacuum {t}"), e))?;
    }
    Ok(())
}

/// Each existing pgbench table's OID and file number (`pg_relation_filenode`), by
/// name (a missing table is left out).
pub async fn relations(
    client: &Client,
) -> Result<Vec<plugpull::ledger::PgRelation>, tokio_postgres::Error> {
    let mut out = Vec::new();
    for t in TABLES {
        let row = client
            .query_opt(
                "SELECT c.oid::int8, pg_relation_filenode(c.oid)::int8 FROM pg_class c WHERE c.oid = to_regclass($1)",
                &[&t],
            )
            .await?;
        if let Some(r) = row {
            out.push(plugpull::ledger::PgRelation {
                name: t.to_string(),
                oid: r.get::<_, i64>(0) as u32,
                filenode: r.get::<_, Option<i64>>(1).unwrap_or(0) as u32,
            });
        }
    }
    Ok(out)
}

/// `sum(abalance)`, `sum(tbalance)`, `sum(bbalance)`, `sum(pgbench_history.delta)`
/// (0 for empty tables).
pub async fn sums(client: &Client) -> Result<[i64; 4], tokio_postgres::Error> {
    let r = client
        .query_one(
            "SELECT (SELECT coalesce(sum(abalance), 0)::bigint FROM pgbench_accounts),
                    (SELECT coalesce(sum(tbalance), 0)::bigint FROM pgbench_tellers),
                    (SELECT coalesce(sum(bbalance), 0)::bigint FROM pgbench_branches),
                    (SELECT coalesce(sum(delta), 0)::bigint FROM pgbench_history)",
            &[],
        )
        .await?;
    Ok([r.get(0), r.get(1), r.get(2), r.get(3)])
}
