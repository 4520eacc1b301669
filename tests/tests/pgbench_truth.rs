//! End-to-end tests of the pgbench verdict rules that keep a verdict true: amcheck
//! that could not run is no corruption, a damaged page is a finding (and an FSM page
//! PostgreSQL rebuilds is not), the checksum failure counter counts this database and
//! this run only, "PostgreSQL not up" is "could not verify", and something that is
//! not PostgreSQL is not a finding. Real clusters, real files flipped on disk.

use plugpull_tests::pg::{
    expected_counts as expect, report_counts as counts, verify_pgbench as verify,
    write_pgbench as write, PgCluster,
};
use plugpull_tests::*;
use serde_json::{json, Value};

fn setup(test: &str, checksums: bool) -> Option<(tempfile::TempDir, PgCluster, Listener)> {
    if PgCluster::skip(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let pg = if checksums {
        PgCluster::start_new_with_checksums()
    } else {
        PgCluster::start_new()
    };
    pg.psql("CREATE DATABASE bench");
    let l = Listener::start(dir.path());
    Some((dir, pg, l))
}

/// A finished run of 2 clients × `n` transactions; its run id.
fn run(l: &Listener, pg: &PgCluster, n: &str) -> String {
    let o = write(
        l,
        &pg.conninfo_db("bench"),
        &["--init", "--clients", "2", "--transactions", n],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    run_id(&o)
}

fn kinds(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn amcheck_a_role_may_not_call_is_a_note_not_corruption() {
    let Some((_dir, pg, l)) = setup(
        "amcheck_a_role_may_not_call_is_a_note_not_corruption",
        false,
    ) else {
        return;
    };
    let run = run(&l, &pg, "50");
    pg.psql_in("bench", "CREATE EXTENSION amcheck");
    pg.psql("CREATE ROLE plain LOGIN");
    pg.psql_in(
        "bench",
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO plain",
    );
    let dsn = format!(
        "host={} port={} user=plain dbname=bench",
        pg.sock.display(),
        pg.port
    );
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(
        v["amcheck"],
        json!({
            "ran": false,
            "corruptions": 0,
            "relations_checked": 0,
            "note": "amcheck could not run: \
                verify_heapam(pgbench_history): ERROR: permission denied for function verify_heapam (SQLSTATE 42501); \
                verify_heapam(pgbench_tellers): ERROR: permission denied for function verify_heapam (SQLSTATE 42501); \
                verify_heapam(pgbench_accounts): ERROR: permission denied for function verify_heapam (SQLSTATE 42501); \
                verify_heapam(pgbench_branches): ERROR: permission denied for function verify_heapam (SQLSTATE 42501); \
                bt_index_check(pgbench_accounts_pkey): ERROR: permission denied for function bt_index_check (SQLSTATE 42501); \
                bt_index_check(pgbench_branches_pkey): ERROR: permission denied for function bt_index_check (SQLSTATE 42501); \
                bt_index_check(pgbench_tellers_pkey): ERROR: permission denied for function bt_index_check (SQLSTATE 42501)"
        }),
        "{v:#}"
    );
    assert_eq!(v["findings"], json!([]), "{v:#}");
    assert_eq!(v["acknowledged_commits"], json!(100));
    assert!(v["summary"].as_str().unwrap().starts_with("PASS"), "{v:#}");

    // A --dsn that reaches something that is not PostgreSQL: exit 2, not a finding.
    let garbage = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = garbage.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in garbage.incoming() {
            let Ok(mut s) = s else { return };
            let _ = std::io::Write::write_all(
                &mut s,
                b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
            );
        }
    });
    let dsn = format!("host=127.0.0.1 port={port} user=postgres dbname=bench");
    let (code, v, err) = verify(&l, &run, &dsn, &["--pg-wait", "5s"]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert_eq!(v["ok"], json!(false));
    assert!(
        err.contains("answered, but not as a PostgreSQL server does"),
        "{err}"
    );
    // write pgbench refuses it too, before any run starts.
    let o = write(&l, &dsn, &["--transactions", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    // The listener's own port: it closes on a PostgreSQL handshake; still exit 2.
    let port = l.addr().rsplit(':').next().unwrap();
    let dsn = format!("host=127.0.0.1 port={port} user=postgres dbname=bench");
    let (code, _v, err) = verify(&l, &run, &dsn, &["--pg-wait", "2s"]);
    assert_eq!(code, 2, "{err}");
}

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

    // The page is a finding (exit 1, not 2); the tags on it are not read past its
    // checksum, so they count as lost commits; the invariant cannot be checked.
    let (code, v, err) = verify(&l, &run1, &dsn, &[]);
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
            "FAIL: {on_page} lost commits, 1 damaged pages out of 600 acknowledged commits"
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

    // Repaired (the byte restored): the same run re-verified passes; the failures the
    // first verify's reads counted read clean now and are said so.
    pg.stop();
    pg.flip_byte(&file, last, at);
    pg.start();
    let (code, v, err) = verify(&l, &run1, &dsn, &[]);
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
    let run2 = run(&l, &pg, "20");
    let (code, v, err) = verify(&l, &run2, &dsn, &[]);
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
        json!("FAIL: 1 damaged pages out of 100 acknowledged commits"),
        "{v:#}"
    );
}

#[test]
fn postgresql_not_running_is_could_not_verify_and_one_that_stopped_is_a_finding() {
    let Some((_dir, mut pg, l)) = setup(
        "postgresql_not_running_is_could_not_verify_and_one_that_stopped_is_a_finding",
        false,
    ) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let run1 = run(&l, &pg, "20");
    let data = pg.data.to_str().unwrap().to_string();
    let log = pg.log.to_str().unwrap().to_string();
    // Right after a cut, before PostgreSQL was started again: no postmaster, the
    // cluster "in production", ordinary FATAL lines in the log's tail. That is not
    // yet started, not stopped: could not verify (exit 2), never a finding.
    let refused = pg.try_psql_in("nope", "SELECT 1").unwrap_err();
    assert!(refused.contains("does not exist"), "{refused}");
    pg.stop_immediate();
    assert!(
        pg.log_tail(40)
            .contains("FATAL:  database \"nope\" does not exist"),
        "{}",
        pg.log_tail(40)
    );
    let (code, v, err) = verify(
        &l,
        &run1,
        &dsn,
        &["--pg-wait", "2s", "--pgdata", &data, "--pg-log", &log],
    );
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert_eq!(v["ok"], json!(false), "{v:#}");
    assert!(err.contains("is PostgreSQL running?"), "{err}");
    assert!(err.contains("cluster state \"in production\""), "{err}");
    pg.start();
    pg.stop();
    // Cleanly stopped and not started: could not verify, exit 2, naming the state.
    let (code, v, err) = verify(&l, &run1, &dsn, &["--pg-wait", "1s", "--pgdata", &data]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert!(err.contains("is PostgreSQL running?"), "{err}");
    assert!(err.contains("cluster state \"shut down\""), "{err}");

    // Crashed, and its WAL gone: the next start PANICs in recovery. That is a finding.
    pg.start();
    pg.stop_immediate();
    for e in std::fs::read_dir(pg.data.join("pg_wal")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::remove_file(p).unwrap();
        }
    }
    // A line that is not UTF-8 (a client's latin-1 application_name, say) must not
    // cost the log its evidence.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&pg.log)
            .unwrap();
        f.write_all(b"2000-01-01 00:00:00.000 UTC [1] LOG:  connection authorized: user=caf\xe9\n")
            .unwrap();
    }
    let started = pg.try_start();
    assert!(started.is_err(), "PostgreSQL started without its WAL");
    let (code, v, err) = verify(
        &l,
        &run1,
        &dsn,
        &["--pg-wait", "5s", "--pgdata", &data, "--pg-log", &log],
    );
    assert_eq!(code, 1, "{err}\n{v:#}");
    assert_eq!(v["server_reachable"], json!(false), "{v:#}");
    assert_eq!(kinds(&v), ["server_unavailable"], "{v:#}");
    let detail = v["findings"][0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("stopped: no postmaster is running"),
        "{detail}"
    );
    assert!(detail.contains("PANIC:"), "{detail}");
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("FAIL: PostgreSQL at "),
        "{v:#}"
    );
}

#[test]
fn a_server_still_in_recovery_is_waited_for_then_checked() {
    let Some((_dir, mut pg, l)) = setup(
        "a_server_still_in_recovery_is_waited_for_then_checked",
        false,
    ) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let run1 = run(&l, &pg, "20");
    pg.stop();
    // A real server that stays in recovery and refuses sessions with 57P03: a
    // standby without hot standby.
    std::fs::write(pg.data.join("standby.signal"), "").unwrap();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(pg.data.join("postgresql.conf"))
            .unwrap();
        writeln!(f, "hot_standby = off").unwrap();
    }
    pg.try_start().unwrap(); // pg_ctl -w returns once the standby runs
    let refused = pg.try_psql("SELECT 1").unwrap_err();
    assert!(refused.contains("not accepting connections"), "{refused}");

    // Still starting up at the deadline: could not verify (exit 2), not a finding.
    let (code, v, err) = verify(&l, &run1, &dsn, &["--pg-wait", "2s"]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert!(err.contains("is still starting up after"), "{err}");
    assert!(err.contains("SQLSTATE 57P03"), "{err}");

    // Recovery ends while verify waits: it goes on and checks.
    let child = std::process::Command::new(bin("plugpull"))
        .args(["verify", "--listener", l.addr(), "--json", "--run", &run1])
        .args(["--dsn", &dsn, "--pg-wait", "120s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    pg.promote();
    let o = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(o.status.code(), Some(0), "{}\n{v:#}", stderr(&o));
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["acknowledged_commits"], json!(40));
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
    let (code, v, err) = verify(&l, &run1, &plain, &["--pg-log", &log]);
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

    // x read again, now logged: a main-fork page outside the run's data is damage
    // (not "repaired by design"); the two unlogged failures stay unexplained.
    let e = pg
        .try_psql_in("bench", "SELECT count(*) FROM x")
        .unwrap_err();
    assert!(e.contains("invalid page in block 0"), "{e}");
    let (code, v, err) = verify(&l, &run1, &plain, &["--pg-log", &log]);
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
        json!("FAIL: 1 damaged pages, 2 unattributed checksum failures out of 100 acknowledged commits"),
        "{v:#}"
    );

    // A new run: every line above was written before it started and names nothing
    // of it (x is still damaged, but nothing reads it): PASS, no note.
    let run2 = run(&l, &pg, "20");
    let (code, v, err) = verify(&l, &run2, &dsn, &["--pg-log", &log]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["checksum_failures"], json!(0), "{v:#}");
    assert_eq!(v["findings"], json!([]), "{v:#}");
    assert_eq!(v["notes"], json!([]), "{v:#}");

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
    let (code, v, err) = verify(&l, &run2, &dsn, &["--pg-log", &log]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(v["checksum_failures"], json!(0), "{v:#}");
    assert_eq!(v["findings"], json!([]), "{v:#}");
    assert_eq!(v["notes"], json!([]), "{v:#}");
}
