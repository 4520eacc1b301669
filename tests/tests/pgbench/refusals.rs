//! What the pgbench workload refuses or marks unpromised: an unsafe PostgreSQL
//! configuration, and bad input (exit 2, naming the problem).

use super::*;

#[test]
fn unsafe_configuration_is_refused_then_measured_as_unpromised() {
    let Some((dir, mut pg, l)) =
        setup("unsafe_configuration_is_refused_then_measured_as_unpromised")
    else {
        return;
    };
    pg.set("synchronous_commit", "off");
    let dsn = pg.conninfo_db("bench");
    let o = write(&l, &dsn, &["--init", "--transactions", "10"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("synchronous_commit=off"), "{err}");
    assert!(err.contains("--allow-unsafe-config"), "{err}");
    assert!(stdout(&o).is_empty(), "no run may start: {}", stdout(&o));

    let o = write(
        &l,
        &dsn,
        &[
            "--init",
            "--clients",
            "2",
            "--transactions",
            "100",
            "--allow-unsafe-config",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    // One acknowledged (unpromised) commit undone: expected, not a failure.
    let this = format!("h.filler = '{}'", tag(&run, 1, 3));
    pg.psql_in(
        "bench",
        &format!(
            "BEGIN; {} DELETE FROM pgbench_history h WHERE {this}; COMMIT;",
            apply_deltas(&this, -1)
        ),
    );
    // Every acknowledgement was unpromised: NOT MEASURED (exit 2), the report printed
    // all the same, the loss listed as unpromised.
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert_eq!(
        counts(&v),
        expect(&[("unpromised_lost", json!(1)), ("ok", json!(false))]),
        "{v:#}"
    );
    assert_eq!(v["not_measured"], json!(true));
    assert_eq!(
        v["summary"],
        json!("NOT MEASURED: all 200 acknowledged commits were unpromised (the configuration did not \
               promise durability: synchronous_commit=off), so the run measured nothing about the \
               device; 1 of them lost, as that configuration allows")
    );
    assert_eq!(v["promised"], json!(false));
    assert_eq!(v["run_settings"]["synchronous_commit"], json!("off"));
    assert_eq!(v["acknowledged_commits"], json!(200));
    assert_eq!(v["unpromised_acknowledged"], json!(200));
    assert_eq!(v["findings"][0]["kind"], json!("unpromised_lost"));
    assert_eq!(v["findings"][0]["seq"], json!(3));

    // A balance change without its history row: what such a setting permits is
    // listed as unpromised, not a failure (still NOT MEASURED, exit 2).
    pg.psql_in(
        "bench",
        "UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid = 1",
    );
    let (code, v, err) = verify(&l, &run, &dsn, &["--no-amcheck"]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert_eq!(
        counts(&v),
        expect(&[
            ("unpromised_lost", json!(1)),
            ("invariant_holds", json!(false)),
            ("ok", json!(false))
        ]),
        "{v:#}"
    );
    let kinds: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["unpromised_lost", "unpromised_invariant"], "{v:#}");
    // The human report says the same and exits 2 too.
    let judged = [
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--dsn",
        &dsn,
        "--no-amcheck",
    ];
    let o = plugpull(&[&["verify", "--read-back"], &judged[..]].concat());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("NOT MEASURED: all 200"),
        "{}",
        stdout(&o)
    );
    // So does the report page, written all the same.
    not_measured_page(&dir.path().join("not-measured.html"), &judged);
}

/// `plugpull report` of a run that measured nothing, judged with `judged` (verify's
/// arguments): exit 2 after writing the page, which is neither green nor red and has
/// no sentence in green saying that nothing was lost.
fn not_measured_page(html: &std::path::Path, judged: &[&str]) {
    let o = plugpull(&[&["report"], judged, &["--html", html.to_str().unwrap()]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let page = std::fs::read_to_string(html).unwrap();
    assert!(
        page.contains("<p class=\"warn\">NOT MEASURED: all 200 acknowledged commits"),
        "{page}"
    );
    assert!(page.contains(
        "<p>No client lost a promised commit (1 unpromised commit lost, as the configuration \
         allows).</p>"
    ));
    assert!(!page.contains("class=\"pass\""), "{page}");
    assert!(!page.contains("class=\"fail\""), "{page}");
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let Some((_dir, mut pg, l)) = setup("bad_input_exits_2_naming_the_problem") else {
        return;
    };
    // No tables and no --init.
    let o = write(&l, &pg.conninfo_db("bench"), &["--transactions", "5"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("relation \"pgbench_accounts\" does not exist"),
        "{err}"
    );
    assert!(err.contains("run with --init"), "{err}");

    // Nothing listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = write(
        &l,
        &format!("host=127.0.0.1 port={port} user=postgres dbname=bench connect_timeout=5"),
        &["--transactions", "5"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot connect to PostgreSQL at host=127.0.0.1"),
        "{}",
        stderr(&o)
    );

    // A password user over TCP, with the wrong password.
    pg.psql("CREATE ROLE pwuser LOGIN PASSWORD 'right'");
    pg.prepend_hba("host all pwuser 127.0.0.1/32 scram-sha-256");
    let o = write(
        &l,
        &pg.tcp_conninfo("pwuser", "wrong"),
        &["--transactions", "5"],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("password authentication failed for user \"pwuser\""),
        "{err}"
    );
    assert!(
        !err.contains("wrong"),
        "the password must not be echoed: {err}"
    );

    // The right password gets past authentication (to the missing tables).
    let o = write(
        &l,
        &pg.tcp_conninfo("pwuser", "right"),
        &["--transactions", "5"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("run with --init"), "{}", stderr(&o));
}

/// Issue 15: `full_page_writes=off` is refused without `--allow-unsafe-config`; with it
/// the run goes on (its commits still promised) and is labelled, at the write and in
/// verify's report, as a test of the storage's atomic 8 kB page writes.
#[test]
fn full_page_writes_off_is_refused_then_labelled_as_an_atomic_write_test() {
    let Some((_dir, mut pg, l)) =
        setup("full_page_writes_off_is_refused_then_labelled_as_an_atomic_write_test")
    else {
        return;
    };
    pg.set("full_page_writes", "off");
    let dsn = pg.conninfo_db("bench");
    let o = write(&l, &dsn, &["--init", "--transactions", "10"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(
        stderr(&o).trim_end().lines().last(),
        Some(
            "plugpull: refusing to start: the server has full_page_writes=off, so a data page torn by a cut \
             cannot be restored from WAL; set full_page_writes=on, or pass --allow-unsafe-config to test \
             whether this storage writes 8 kB pages atomically (docs/atomic.md)"
        )
    );
    assert!(stdout(&o).is_empty(), "no run may start: {}", stdout(&o));
    let label = plugpull_client::pgbench::FPW_OFF_LABEL;
    let o = write(
        &l,
        &dsn,
        &["--init", "--transactions", "50", "--allow-unsafe-config"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("warning: {label}")),
        "{}",
        stderr(&o)
    );
    let run = run_id(&o);
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(v["promised"], json!(true));
    assert_eq!(v["run_settings"]["full_page_writes"], json!("off"));
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--dsn",
        &dsn,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).lines().any(|x| x == label), "{}", stdout(&o));
}

/// Unlogged pgbench tables (`pgbench -i --unlogged-tables`) are emptied by crash
/// recovery: no commit to them can survive a cut, so the run is refused, naming them.
#[test]
fn unlogged_tables_are_refused_naming_them() {
    let Some((_dir, pg, l)) = setup("unlogged_tables_are_refused_naming_them") else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    init_tables(&l, &dsn, &[]);
    pg.psql_in(
        "bench",
        "ALTER TABLE pgbench_history SET UNLOGGED; ALTER TABLE pgbench_tellers SET UNLOGGED",
    );
    let o = write(&l, &dsn, &["--transactions", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "pgbench_history, pgbench_tellers are UNLOGGED (pgbench -i --unlogged-tables): \
             crash recovery empties an unlogged table"
        ),
        "{err}"
    );
    assert!(stdout(&o).is_empty(), "no run may start: {}", stdout(&o));
}

/// A client that aborts (here: every statement refused in a read-only session) makes
/// the run incomplete: exit 2 after the summary, as pgbench.
#[test]
fn a_run_whose_clients_aborted_exits_2_after_its_summary() {
    let Some((_dir, pg, l)) = setup("a_run_whose_clients_aborted_exits_2_after_its_summary") else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    init_tables(&l, &dsn, &[]);
    let ro = format!("{dsn} options='-c default_transaction_read_only=on'");
    let o = write(&l, &ro, &["--clients", "2", "--transactions", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("clients aborted: 2 of 2"),
        "{}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(err.contains("(SQLSTATE 25006)"), "{err}");
    assert!(
        err.contains(
            "2 of 2 clients aborted (their errors are above): the run is incomplete; no \
             commit was acknowledged, so verify has nothing to check"
        ),
        "{err}"
    );
}

/// A run that started with durability promised, then `fsync=off` set on the server
/// (`ALTER SYSTEM` and a reload, as an operator would mid-run): verify reads the
/// settings again and says so in a note and at the end of the summary, and leaves
/// the verdict alone (when the change came is not known); set back, nothing is said.
#[test]
fn verify_says_when_the_server_no_longer_promises_durability() {
    let test = "verify_says_when_the_server_no_longer_promises_durability";
    let Some((_dir, mut pg, l)) = setup(test) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let o = write(
        &l,
        &dsn,
        &["--init", "--clients", "2", "--transactions", "20"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    pg.set("fsync", "off");
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}");
    let note = "the server now has fsync=off, though the run started with a configuration \
                that promised durability: if it changed during the run, the commits \
                acknowledged after the change were recorded as promised but were not, and a \
                loss among them is the configuration's, not the storage's";
    assert!(
        v["notes"].as_array().unwrap().contains(&json!(note)),
        "{v:#}"
    );
    let pass = "PASS (read-back only, no power cut): 40 acknowledged commits, 40 present (0 beyond the acknowledged: in \
                flight or unconfirmed), none lost; balances consistent";
    assert_eq!(
        v["summary"],
        json!(format!(
            "{pass}; warning: the server no longer promises durability (see the note): \
             losses after a change during the run are the configuration's"
        ))
    );
    pg.set("fsync", "on");
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!v["notes"].to_string().contains("now has"), "{v:#}");
    assert_eq!(v["summary"], json!(pass));
}

/// Tables that are not pgbench's as the transaction expects (no teller rows: the
/// teller UPDATE touches 0 rows) abort every client at its first transaction, named,
/// in each protocol: pipelined, the statement's count is checked at its own command
/// tag though the pipeline has one Sync. Nothing commits (the transaction is rolled
/// back), and the run exits 2.
#[test]
fn a_statement_that_touches_no_row_aborts_the_client_in_every_protocol() {
    let test = "a_statement_that_touches_no_row_aborts_the_client_in_every_protocol";
    let Some((_dir, pg, l)) = setup(test) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    init_tables(&l, &dsn, &["--scale", "1"]);
    pg.psql_in("bench", "DELETE FROM pgbench_tellers");
    for mode in PROTOCOLS {
        let mut args = vec!["--clients", "2", "--jobs", "1", "--transactions", "5"];
        args.extend_from_slice(mode);
        let o = write(&l, &dsn, &args);
        assert_eq!(o.status.code(), Some(2), "{mode:?}: {}", stderr(&o));
        assert!(
            stdout(&o).contains("clients aborted: 2 of 2"),
            "{mode:?}: {}",
            stdout(&o)
        );
        let err = stderr(&o);
        for c in 0..2 {
            let line = err
                .lines()
                .find(|l| l.starts_with(&format!("client {c} aborted in transaction 1: ")))
                .unwrap_or_else(|| panic!("{mode:?}: no abort of client {c}: {err}"));
            assert!(
                line.contains(": UPDATE pgbench_tellers (key ")
                    && line.ends_with(
                        ") touched 0 rows, not 1: the pgbench tables do not hold what the \
                         transaction expects"
                    ),
                "{mode:?}: {line}"
            );
        }
        assert!(
            err.contains("no commit was acknowledged, so verify has nothing to check"),
            "{mode:?}: {err}"
        );
        assert_eq!(tagged_rows(&pg, &run_id(&o)), "0", "{mode:?}");
    }
}

/// With several hosts in the DSN, every client must reach the server the setup
/// checked: here the first server lets the role open 2 connections, so the third
/// client would land on the second server (another cluster); it refuses to, and the
/// run does not start.
#[test]
fn clients_never_land_on_another_server_than_the_one_checked() {
    let test = "clients_never_land_on_another_server_than_the_one_checked";
    let Some((_dir, a, l)) = setup(test) else {
        return;
    };
    let b = PgCluster::start_new();
    b.psql("CREATE DATABASE bench");
    for pg in [&a, &b] {
        init_tables(&l, &pg.conninfo_db("bench"), &[]);
        pg.psql("CREATE ROLE limited LOGIN");
        pg.psql_in(
            "bench",
            "GRANT ALL ON ALL TABLES IN SCHEMA public TO limited",
        );
    }
    a.psql("ALTER ROLE limited CONNECTION LIMIT 2");
    let dsn = format!(
        "host={},{} port={},{} user=limited dbname=bench",
        a.sock.display(),
        b.sock.display(),
        a.port,
        b.port
    );
    let o = write(
        &l,
        &dsn,
        &["--clients", "3", "--jobs", "1", "--transactions", "5"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let err = stderr(&o);
    // The setup's own connection is closed by then: clients 0 and 1 take the two.
    assert!(
        err.contains("client 2: cannot connect to PostgreSQL at"),
        "{err}"
    );
    assert!(
        err.contains("too many connections for role \"limited\" (SQLSTATE 53300)"),
        "{err}"
    );
    assert!(
        err.contains("is not the one the run's setup checked"),
        "{err}"
    );
    assert_eq!(
        b.psql_in("bench", "SELECT count(*) FROM pgbench_history"),
        "1",
        "nothing may be written on the second server"
    );
}

/// Issue 41, item 6: the user ran pgbench (or anything that rewrites the tables)
/// after a run. A `TRUNCATE pgbench_history` gives the table a new file: verify
/// exits 2 naming the table and both files, never a FAIL blaming the storage for
/// commits the user removed. The writer's last line warns of it.
#[test]
fn a_table_truncated_after_the_run_is_could_not_verify_naming_it() {
    let Some((_dir, pg, l)) =
        setup("a_table_truncated_after_the_run_is_could_not_verify_naming_it")
    else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let o = write(&l, &dsn, &["--init", "--transactions", "20"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    assert_eq!(
        stdout(&o).trim_end().lines().last(),
        Some("verify this run before anything else writes to the pgbench tables: a TRUNCATE, pgbench -i or VACUUM FULL makes it unverifiable")
    );
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    let before: String = pg.psql_in(
        "bench",
        "SELECT pg_relation_filenode('pgbench_history')::text",
    );
    pg.psql_in("bench", "TRUNCATE pgbench_history");
    let after: String = pg.psql_in(
        "bench",
        "SELECT pg_relation_filenode('pgbench_history')::text",
    );
    let oid: String = pg.psql_in("bench", "SELECT 'pgbench_history'::regclass::oid::text");
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert_eq!(
        err.trim(),
        format!(
            "plugpull: cannot verify run {run}: its tables were rewritten or emptied since the run (TRUNCATE, pgbench -i, VACUUM FULL, or dropped and created again): pgbench_history (file {after} of OID {oid}; the run's was file {before} of OID {oid}); their rows are no longer the run's — verify a run before anything else writes its tables"
        )
    );
}
