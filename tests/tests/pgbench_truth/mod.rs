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

mod catalog;
mod damage;

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
                verify_heapam(pgbench_history, pgbench_tellers, pgbench_accounts, pgbench_branches): ERROR: permission denied for function verify_heapam (SQLSTATE 42501); \
                bt_index_check(pgbench_accounts_pkey, pgbench_branches_pkey, pgbench_tellers_pkey): ERROR: permission denied for function bt_index_check (SQLSTATE 42501): \
                verify as a superuser, or have one run GRANT EXECUTE ON FUNCTION \
                verify_heapam(regclass, boolean, boolean, text, bigint, bigint), bt_index_check(regclass, boolean) TO plain"
        }),
        "{v:#}"
    );
    assert_eq!(v["findings"], json!([]), "{v:#}");
    assert_eq!(v["acknowledged_commits"], json!(100));
    assert!(v["summary"].as_str().unwrap().starts_with("PASS"), "{v:#}");
    // The grant the note names is enough: amcheck then checks every relation.
    pg.psql_in(
        "bench",
        "GRANT EXECUTE ON FUNCTION verify_heapam(regclass, boolean, boolean, text, bigint, bigint), bt_index_check(regclass, boolean) TO plain",
    );
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(
        (&v["amcheck"]["ran"], &v["amcheck"]["relations_checked"]),
        (&json!(true), &json!(7)),
        "{v:#}"
    );

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
    pg.append_conf(&["hot_standby = off"]);
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
        .args([
            "verify",
            "--read-back",
            "--listener",
            l.addr(),
            "--json",
            "--run",
            &run1,
        ])
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
