//! Damaged pages on disk: a flipped byte in a history page (a finding, then a
//! repaired database that passes), an FSM page PostgreSQL rebuilds by design, and
//! checksum failures that must each be traced to a page of this run to count.

use super::*;

#[test]
fn a_flipped_byte_in_a_history_page_is_a_damaged_page_then_a_repaired_database_passes() {
    let Some((_dir, mut pg, l)) = setup(
        "a_flipped_byte_in_a_history_page_is_a_damaged_page_then_a_repaired_database_passes",
        true,
    ) else {
        return;
    };
    // No autovacuum: only verify's own reads meet the damaged page, so the failure
    // counter is exact.
    pg.set("autovacuum", "off");
    let dsn = pg.conninfo_db("bench");
    let run1 = run(&l, &pg, "300");
    let p = flip_a_free_space_byte_of_the_last_history_page(&mut pg);
    the_damaged_page_is_a_finding(&l, &run1, &dsn, &p);
    the_repaired_database_passes(&mut pg, &l, &run1, &dsn, &p);
    failures_before_a_run_or_in_another_database_are_not_its_own(&mut pg, &l, &dsn);
}

/// Where [`flip_a_free_space_byte_of_the_last_history_page`] flipped its byte.
struct FlippedPage {
    /// The history table's file, relative to the data directory.
    file: String,
    /// Its last block, the damaged one.
    last: u64,
    /// Byte offset of the flipped byte within the block.
    at: usize,
    /// Rows (tagged commits) on that block.
    on_page: u64,
}

/// Stops PostgreSQL, flips a byte in the free space of the history table's last
/// page (no row changes, only the checksum fails) and starts it again.
fn flip_a_free_space_byte_of_the_last_history_page(pg: &mut PgCluster) -> FlippedPage {
    let file = pg.psql_in("bench", "SELECT pg_relation_filepath('pgbench_history')");
    let blocks: u64 = pg
        .psql_in(
            "bench",
            "SELECT pg_relation_size('pgbench_history') / current_setting('block_size')::int",
        )
        .parse()
        .unwrap();
    assert!(blocks >= 2, "{blocks}");
    let last = blocks - 1;
    let on_page: u64 = pg
        .psql_in(
            "bench",
            &format!(
                "SELECT count(*) FROM pgbench_history WHERE ctid >= '({last},0)' AND ctid < '({},0)'",
                last + 1
            ),
        )
        .parse()
        .unwrap();
    assert!(on_page > 0);
    pg.stop();
    // A byte in the last page's free space: no row changes, only the checksum fails.
    let (lower, upper) = pg.flip_byte(&file, last, 0);
    pg.flip_byte(&file, last, 0); // undo: now aim between pd_lower and pd_upper
    assert!(
        upper > lower + 2,
        "no free space in block {last}: {lower}..{upper}"
    );
    let at = ((lower + upper) / 2) as usize;
    pg.flip_byte(&file, last, at);
    pg.start();
    FlippedPage {
        file,
        last,
        at,
        on_page,
    }
}

fn the_damaged_page_is_a_finding(l: &Listener, run1: &str, dsn: &str, p: &FlippedPage) {
    let (last, on_page) = (p.last, p.on_page);
    // The page is a finding (exit 1, not 2); the tags on it are not read past its
    // checksum, so they count as lost commits; the invariant cannot be checked.
    let (code, v, err) = verify(l, run1, dsn, &[]);
    assert_eq!(code, 1, "{err}\n{v:#}");
    assert_eq!(v["lost_commits"], json!(on_page), "{v:#}");
    assert_eq!(v["invariant"]["checked"], json!(false), "{v:#}");
    assert_eq!(v["damaged_pages"], json!(1), "{v:#}");
    assert_eq!(v["commits_checked"], json!(true), "{v:#}");
    assert_eq!(v["skipped_history_blocks"], json!([last]), "{v:#}");
    assert_eq!(v["present_commits"], json!(600 - on_page), "{v:#}");
    let mut want = vec!["lost_commit".to_string(); on_page as usize];
    want.push("damaged_page".into());
    assert_eq!(kinds(&v), want, "{v:#}");
    let page = &v["findings"][on_page as usize];
    assert_eq!(
        page["page"],
        json!({"relation": "pgbench_history", "fork": "main", "block": last}),
        "{v:#}"
    );
    assert_eq!(v["findings_total"], json!(on_page + 1), "{v:#}");
    assert_eq!(
        v["summary"],
        json!(format!(
            "FAIL: {on_page} lost commit{}, 1 damaged page out of 600 acknowledged commits",
            if on_page == 1 { "" } else { "s" }
        )),
        "{v:#}"
    );
    let lagged: u64 = v["lost_lag_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(lagged, on_page, "{v:#}");
}

fn the_repaired_database_passes(
    pg: &mut PgCluster,
    l: &Listener,
    run1: &str,
    dsn: &str,
    p: &FlippedPage,
) {
    let (file, last, at) = (&p.file, p.last, p.at);
    // Repaired (the byte restored): the same run re-verified passes; the failures the
    // first verify's reads counted read clean now and are said so.
    pg.stop();
    pg.flip_byte(file, last, at);
    pg.start();
    let (code, v, err) = verify(l, run1, dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v)["ok"], json!(true), "{v:#}");
    assert_eq!(v["damaged_pages"], json!(0), "{v:#}");
    assert_eq!(v["findings"], json!([]), "{v:#}");
    // The first verify's own reads of the damaged page, one failure each: the
    // commit count and the balance sums (concurrently), the page scan, verify_heapam.
    assert_eq!(v["checksum_failures"], json!(4), "{v:#}");
    assert_eq!(
        v["notes"],
        json!([
            "4 checksum failures since the run started; every heap page of the pgbench tables \
             reads clean and amcheck checked every index: no page of the run's data is damaged"
        ]),
        "{v:#}"
    );
}

fn failures_before_a_run_or_in_another_database_are_not_its_own(
    pg: &mut PgCluster,
    l: &Listener,
    dsn: &str,
) {
    // A new run on the repaired database: the failures counted before it started, and
    // another database's, are not its own (checksum_failures counts 0, PASS).
    pg.psql("CREATE DATABASE other");
    pg.psql_in(
        "other",
        "CREATE TABLE x WITH (autovacuum_enabled = false) AS SELECT g FROM generate_series(1, 1000) g",
    );
    let xfile = pg.psql_in("other", "SELECT pg_relation_filepath('x')");
    pg.stop();
    pg.flip_byte(&xfile, 0, 5000);
    pg.start();
    assert!(pg.try_psql_in("other", "SELECT count(*) FROM x").is_err());
    let run2 = run(l, pg, "20");
    let (code, v, err) = verify(l, &run2, dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["checksum_failures"], json!(0), "{v:#}");
    assert_eq!(v["notes"], json!([]), "{v:#}");
    let counters = pg.psql(
        "SELECT string_agg(datname || '=' || checksum_failures, ',' ORDER BY datname) \
         FROM pg_stat_database WHERE datname IN ('bench', 'other')",
    );
    assert_eq!(counters, "bench=4,other=1");
}

#[test]
fn a_damaged_fsm_page_is_repaired_by_postgresql_by_design_not_a_failure() {
    let Some((_dir, mut pg, l)) = setup(
        "a_damaged_fsm_page_is_repaired_by_postgresql_by_design_not_a_failure",
        true,
    ) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let run1 = run(&l, &pg, "50");
    pg.psql_in("bench", "VACUUM pgbench_accounts");
    let file = pg.psql_in("bench", "SELECT pg_relation_filepath('pgbench_accounts')");
    pg.stop();
    let fsm = format!("{file}_fsm");
    assert!(pg.data.join(&fsm).exists(), "no free space map: {fsm}");
    pg.flip_byte(&fsm, 0, 100);
    pg.start();
    // PostgreSQL itself reads the page (as autovacuum would), zeroes and rebuilds it.
    pg.psql_in("bench", "VACUUM pgbench_accounts");
    let log = std::fs::read_to_string(&pg.log).unwrap();
    assert!(
        log.contains("_fsm; zeroing out page"),
        "PostgreSQL did not read the damaged page: {log}"
    );
    let (code, v, err) = verify(&l, &run1, &dsn, &["--pg-log", pg.log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v)["ok"], json!(true), "{v:#}");
    assert_eq!(v["checksum_failures"], json!(1), "{v:#}");
    assert_eq!(v["damaged_pages"], json!(0), "{v:#}");
    assert_eq!(kinds(&v), ["repaired_by_design"], "{v:#}");
    assert_eq!(
        v["findings"][0]["page"],
        json!({"relation": "pgbench_accounts", "fork": "fsm", "block": 0}),
        "{v:#}"
    );
    assert!(
        v["findings"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("repaired by PostgreSQL by design"),
        "{v:#}"
    );
    assert!(v["summary"].as_str().unwrap().starts_with("PASS"), "{v:#}");

    // A main-fork index page is the run's data: amcheck meets it, a FAIL naming it.
    let index = pg.psql_in(
        "bench",
        "SELECT pg_relation_filepath('pgbench_accounts_pkey')",
    );
    pg.stop();
    pg.flip_byte(&index, 1, 100);
    pg.start();
    let (code, v, err) = verify(&l, &run1, &dsn, &["--pg-log", pg.log.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}\n{v:#}");
    assert_eq!(v["damaged_pages"], json!(1), "{v:#}");
    assert_eq!(v["lost_commits"], json!(0), "{v:#}");
    assert_eq!(kinds(&v), ["damaged_page", "repaired_by_design"], "{v:#}");
    assert_eq!(
        v["findings"][0]["page"],
        json!({"relation": "pgbench_accounts_pkey", "fork": "main", "block": 1}),
        "{v:#}"
    );
    assert_eq!(
        v["summary"],
        json!("FAIL: 1 damaged page out of 100 acknowledged commits"),
        "{v:#}"
    );
}

#[test]
fn every_checksum_failure_needs_a_page_and_damage_outside_the_run_is_a_failure() {
    let Some((_dir, mut pg, l)) = setup(
        "every_checksum_failure_needs_a_page_and_damage_outside_the_run_is_a_failure",
        true,
    ) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let log = pg.log.to_str().unwrap().to_string();
    let run1 = run(&l, &pg, "50");
    let plain = damage_an_fsm_page_and_a_table_outside_the_run(&mut pg);
    unlogged_failures_are_unattributed(&l, &run1, &plain, &log);
    a_logged_page_outside_the_run_is_damage(&pg, &l, &run1, &plain, &log);
    let run2 = a_new_run_owns_none_of_it(&pg, &l, &dsn, &log);
    another_databases_page_is_not_this_ones(&mut pg, &l, &run2, &dsn, &log);
}

/// Creates a table `x` outside the run and a role `plain` that may not call amcheck,
/// flips a byte of pgbench_accounts' FSM page and of x's page 0, has PostgreSQL
/// rebuild the FSM page (logged) and read x twice unlogged. Returns `plain`'s
/// conninfo.
fn damage_an_fsm_page_and_a_table_outside_the_run(pg: &mut PgCluster) -> String {
    // A table of the same database that is not the run's, which no autovacuum reads.
    pg.psql_in(
        "bench",
        "CREATE TABLE x WITH (autovacuum_enabled = false) AS SELECT g FROM generate_series(1, 1000) g",
    );
    pg.psql_in("bench", "VACUUM pgbench_accounts");
    // amcheck exists, but the role verify uses may not call it: not every page of the
    // run's data can be checked.
    pg.psql_in("bench", "CREATE EXTENSION amcheck");
    pg.psql("CREATE ROLE plain LOGIN");
    pg.psql_in(
        "bench",
        "GRANT SELECT ON pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history TO plain",
    );
    let plain = format!(
        "host={} port={} user=plain dbname=bench",
        pg.sock.display(),
        pg.port
    );
    let accounts = pg.psql_in("bench", "SELECT pg_relation_filepath('pgbench_accounts')");
    let xfile = pg.psql_in("bench", "SELECT pg_relation_filepath('x')");
    pg.stop();
    pg.flip_byte(&format!("{accounts}_fsm"), 0, 100);
    pg.flip_byte(&xfile, 0, 5000);
    pg.start();
    // One FSM page PostgreSQL zeroes and rebuilds (logged), and two failures of x
    // that the log does not show: 3 failures, 1 explained.
    pg.psql_in("bench", "VACUUM pgbench_accounts");
    for _ in 0..2 {
        let e = pg
            .try_psql_in(
                "bench",
                "SET log_min_messages = fatal; SELECT count(*) FROM x",
            )
            .unwrap_err();
        assert!(e.contains("invalid page in block 0"), "{e}");
    }
    let text = std::fs::read_to_string(&pg.log).unwrap();
    assert!(text.contains("_fsm; zeroing out page"), "{text}");
    assert!(!text.contains(&xfile), "{text}");
    plain
}

fn unlogged_failures_are_unattributed(l: &Listener, run1: &str, plain: &str, log: &str) {
    let (code, v, err) = verify(l, run1, plain, &["--pg-log", log]);
    assert_eq!(code, 1, "{err}\n{v:#}");
    assert_eq!(v["checksum_failures"], json!(3), "{v:#}");
    assert_eq!(v["unattributed_checksum_failures"], json!(2), "{v:#}");
    assert_eq!(v["damaged_pages"], json!(0), "{v:#}");
    assert_eq!(v["lost_commits"], json!(0), "{v:#}");
    assert_eq!(
        kinds(&v),
        ["checksum_failures", "repaired_by_design"],
        "{v:#}"
    );
    assert_eq!(
        v["findings"][1]["page"],
        json!({"relation": "pgbench_accounts", "fork": "fsm", "block": 0}),
        "{v:#}"
    );
    assert_eq!(
        v["summary"],
        json!("FAIL: 2 unattributed checksum failures out of 100 acknowledged commits"),
        "{v:#}"
    );
}

fn a_logged_page_outside_the_run_is_damage(
    pg: &PgCluster,
    l: &Listener,
    run1: &str,
    plain: &str,
    log: &str,
) {
    // x read again, now logged: a main-fork page outside the run's data is damage
    // (not "repaired by design"); the two unlogged failures stay unexplained.
    let e = pg
        .try_psql_in("bench", "SELECT count(*) FROM x")
        .unwrap_err();
    assert!(e.contains("invalid page in block 0"), "{e}");
    let (code, v, err) = verify(l, run1, plain, &["--pg-log", log]);
    assert_eq!(code, 1, "{err}\n{v:#}");
    assert_eq!(v["checksum_failures"], json!(4), "{v:#}");
    assert_eq!(v["damaged_pages"], json!(1), "{v:#}");
    assert_eq!(v["unattributed_checksum_failures"], json!(2), "{v:#}");
    assert_eq!(
        kinds(&v),
        [
            "damaged_page_outside_run",
            "checksum_failures",
            "repaired_by_design"
        ],
        "{v:#}"
    );
    assert_eq!(
        v["findings"][0]["page"],
        json!({"relation": "x", "fork": "main", "block": 0}),
        "{v:#}"
    );
    assert_eq!(
        v["summary"],
        json!("FAIL: 1 damaged page, 2 unattributed checksum failures out of 100 acknowledged commits"),
        "{v:#}"
    );
}

/// A new run (returned) on the damaged database passes: nothing logged names it.
fn a_new_run_owns_none_of_it(pg: &PgCluster, l: &Listener, dsn: &str, log: &str) -> String {
    // A new run: every line above was written before it started and names nothing
    // of it (x is still damaged, but nothing reads it): PASS, no note.
    let run2 = run(l, pg, "20");
    let (code, v, err) = verify(l, &run2, dsn, &["--pg-log", log]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["checksum_failures"], json!(0), "{v:#}");
    assert_eq!(v["findings"], json!([]), "{v:#}");
    assert_eq!(v["notes"], json!([]), "{v:#}");
    run2
}

fn another_databases_page_is_not_this_ones(
    pg: &mut PgCluster,
    l: &Listener,
    run2: &str,
    dsn: &str,
    log: &str,
) {
    // Another database copied from this one (file by file: x's damaged page is not
    // read) has the same filenodes: its damaged
    // pgbench_history page, logged as base/OTHER/F, is not this database's.
    let mut created = Err(String::new());
    for _ in 0..30 {
        created = pg.try_psql("CREATE DATABASE other TEMPLATE bench STRATEGY = FILE_COPY");
        if created.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    created.unwrap();
    let h_bench = pg.psql_in("bench", "SELECT pg_relation_filepath('pgbench_history')");
    let h_other = pg.psql_in("other", "SELECT pg_relation_filepath('pgbench_history')");
    assert_ne!(h_bench, h_other);
    assert_eq!(h_bench.rsplit('/').next(), h_other.rsplit('/').next());
    pg.stop();
    pg.flip_byte(&h_other, 0, 5000);
    pg.start();
    let e = pg
        .try_psql_in("other", "SELECT count(*) FROM pgbench_history")
        .unwrap_err();
    assert!(e.contains(&format!("relation {h_other}")), "{e}");
    let (code, v, err) = verify(l, run2, dsn, &["--pg-log", log]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(v["checksum_failures"], json!(0), "{v:#}");
    assert_eq!(v["findings"], json!([]), "{v:#}");
    assert_eq!(v["notes"], json!([]), "{v:#}");
}
