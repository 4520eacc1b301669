//! End-to-end tests of the PostgreSQL workload: a real PostgreSQL cluster, a real
//! listener, the real `plugpull write pgbench` and `plugpull verify`, and databases
//! doctored by hand so every count is known exactly.
//!
//! Doctored scenarios run on copies of the run's database (`CREATE DATABASE …
//! TEMPLATE bench`), verified with `--dsn` naming the copy, so each one starts
//! from the same verified state and nothing else can fire.

use plugpull_tests::pg::{expected_counts as expect, report_counts as counts, PgCluster};
use plugpull_tests::*;
use serde_json::{json, Value};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod doctored;
mod lags;
mod refusals;

/// The transaction's three ways to the server, as `write pgbench` options: bound
/// prepared statements, the same pipelined (one Sync for BEGIN and the five
/// statements), and simple queries.
const PROTOCOLS: [&[&str]; 3] = [
    &["--protocol", "prepared"],
    &["--protocol", "prepared", "--pipeline"],
    &["--protocol", "simple"],
];

/// `plugpull write pgbench --listener L --dsn DSN EXTRA…`, to completion.
fn write(l: &Listener, dsn: &str, extra: &[&str]) -> Output {
    let mut args = vec!["write", "pgbench", "--listener", l.addr(), "--dsn", dsn];
    args.extend_from_slice(extra);
    plugpull(&args)
}

/// The same, as a child process with stdout piped.
fn spawn_write(l: &Listener, dsn: &str, extra: &[&str]) -> Child {
    Command::new(bin("plugpull"))
        .args(["write", "pgbench", "--listener", l.addr(), "--dsn", dsn])
        .args(extra)
        .env_remove("PLUGPULL_SECRET")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plugpull write pgbench")
}

/// Creates the pgbench tables with one committed transaction (`--init
/// --transactions 1 EXTRA…`), asserting it exits 0.
fn init_tables(l: &Listener, dsn: &str, extra: &[&str]) {
    let mut args = vec!["--init", "--transactions", "1"];
    args.extend_from_slice(extra);
    let o = write(l, dsn, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The number after `prefix` on a line of `out`.
fn figure(out: &str, prefix: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().split([' ', '/']).next()?.parse().ok())
}

/// `plugpull verify --json --run RUN --dsn DSN`.
fn verify(l: &Listener, run: &str, dsn: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["--run", run, "--dsn", dsn];
    args.extend_from_slice(extra);
    verify_json(l, &args)
}

/// The tag of `client`'s transaction `seq` in `run` (see client/src/pgbench/tag.rs).
fn tag(run: &str, client: u32, seq: u64) -> String {
    format!("{}{client:04}{seq:010}", &run[8..])
}

/// How many `pgbench_history` rows of database `bench` carry `run`'s tag prefix.
fn tagged_rows(pg: &PgCluster, run: &str) -> String {
    let sql = format!(
        "SELECT count(*) FROM pgbench_history WHERE filler LIKE '{}%'",
        &run[8..]
    );
    pg.psql_in("bench", &sql)
}

/// Copies database `bench` to `name`, retrying while a closing session still uses it.
fn copy_db(pg: &PgCluster, name: &str) {
    let sql = format!("CREATE DATABASE {name} TEMPLATE bench");
    let ok = wait_for(Duration::from_secs(20), || pg.try_psql(&sql).is_ok());
    assert!(ok, "cannot copy database bench: {:?}", pg.try_psql(&sql));
}

/// Undoes (sign -1) or redoes (sign 1) the balance changes of the history rows
/// selected by `filter`.
fn apply_deltas(filter: &str, sign: i32) -> String {
    format!(
        "UPDATE pgbench_accounts a SET abalance = abalance + {sign} * h.delta FROM pgbench_history h WHERE h.aid = a.aid AND {filter};
         UPDATE pgbench_tellers t SET tbalance = tbalance + {sign} * h.delta FROM pgbench_history h WHERE h.tid = t.tid AND {filter};
         UPDATE pgbench_branches b SET bbalance = bbalance + {sign} * h.delta FROM pgbench_history h WHERE h.bid = b.bid AND {filter};"
    )
}

fn setup(test: &str) -> Option<(tempfile::TempDir, PgCluster, Listener)> {
    if PgCluster::skip(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let pg = PgCluster::start_new();
    pg.psql("CREATE DATABASE bench");
    let l = Listener::start(dir.path());
    Some((dir, pg, l))
}

#[test]
fn a_crash_mid_run_loses_no_acknowledged_commit() {
    let Some((dir, mut pg, l)) = setup("a_crash_mid_run_loses_no_acknowledged_commit") else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let canary = dir.path().to_str().unwrap();
    let mut child = spawn_write(
        &l,
        &dsn,
        &[
            "--canary-dir",
            canary,
            "--init",
            "--clients",
            "4",
            "--jobs",
            "2",
            "--duration",
            "60s",
            "-P",
            "1",
        ],
    );
    // Crash only after 1500 commits and once the first 1-second progress line is surely out (--init included).
    let spawned = std::time::Instant::now();
    let started = wait_for(Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
            || (spawned.elapsed() >= Duration::from_secs(3)
                && pg
                    .try_psql_in("bench", "SELECT count(*) >= 1500 FROM pgbench_history")
                    .is_ok_and(|s| s == "t"))
    });
    assert!(
        started && child.try_wait().unwrap().is_none(),
        "the writer made no progress or exited; log: {}",
        pg.log_tail(20)
    );
    pg.stop_immediate();
    let o = wait_output(child, Duration::from_secs(30));
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {out}\nstderr: {}",
        stderr(&o)
    );
    let run = run_id(&o);
    assert!(out.contains("clients lost: 4 of 4"), "{out}");
    let progress = stderr(&o);
    let line = progress
        .lines()
        .find(|l| l.starts_with("progress: 1.0 s, "))
        .unwrap_or_else(|| panic!("no progress line: {progress}"));
    assert!(
        line.contains(" tps, lat ") && line.contains(" ms stddev ") && line.contains(" failed"),
        "{line}"
    );
    assert!(out.contains("the server closed every connection"), "{out}");
    let acked = figure(&out, "acknowledged by listener: ").expect("acknowledged line");
    let processed = figure(&out, "number of transactions actually processed: ").unwrap();
    assert_eq!(acked, processed, "{out}");
    let in_flight: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("clients lost: 4 of 4 ("))
        .and_then(|r| r.split(' ').next()?.parse().ok())
        .expect("in-flight count");

    // With the server not started again, verify could not verify (exit 2): PostgreSQL
    // not up yet is no finding.
    // A wait over a second says what it waits for: with --pgdata, that no server
    // runs there.
    let data = pg.data.to_str().unwrap();
    let (code, v, err) = verify(&l, &run, &dsn, &["--pg-wait", "2s", "--pgdata", data]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(v["ok"], json!(false));
    assert!(err.contains("is PostgreSQL running?"), "{err}");
    let waiting: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("waiting for PostgreSQL at "))
        .collect();
    assert_eq!(waiting.len(), 1, "{err}");
    assert!(
        waiting[0].ends_with(&format!(
            " (up to 2 s): no server is running in --pgdata {data}; start it"
        )),
        "{err}"
    );

    pg.start(); // crash recovery

    // A crash of PostgreSQL alone cut no power: the canary is whole, the cut (the
    // server's loss) not measured.
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 2, "{err}\n{v:#}");
    assert_eq!(v["cut"]["cut"], json!("server_lost"));
    assert_eq!(v["cut"]["canary"]["state"], json!("survived"));
    // The host's memory lost by hand, as a power cut would: the cut is measured.
    assert_eq!(plugpull_tests::lose_canary(dir.path()), 3);
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["run_id"], json!(run));
    assert_eq!(v["workload"], json!("pgbench"));
    assert_eq!(v["finished"], json!(true));
    assert_eq!(v["acknowledged_commits"], json!(acked));
    assert!(v["amcheck"]["ran"].as_bool().unwrap(), "{v:#}");
    run_recorded_its_settings_and_stack(&v, &pg);
    let present = v["present_commits"].as_u64().unwrap();
    let rows: u64 = pg
        .psql_in("bench", "SELECT count(*) FROM pgbench_history")
        .parse()
        .unwrap();
    assert_eq!(present, rows, "every history row is a tag of this run");
    assert!(
        present >= acked && present - acked <= in_flight,
        "present {present}, acknowledged {acked}, in flight {in_flight}"
    );
    assert_eq!(v["unacknowledged_present"], json!(present - acked));
    assert!(v["summary"].as_str().unwrap().starts_with("PASS"), "{v:#}");
}

/// The report of a pgbench run says which server settings it ran under and what
/// stack its data directory was on (probed at the run's start, through its session).
fn run_recorded_its_settings_and_stack(v: &Value, pg: &PgCluster) {
    let rs = &v["run_settings"];
    assert_eq!(rs["fsync"], json!("on"));
    assert_eq!(rs["synchronous_commit"], json!("on"));
    assert_eq!(rs["data_directory"], json!(pg.data.display().to_string()));
    assert!(!rs["data_mount"].as_str().unwrap().is_empty(), "{rs:#}");
    // The run probed the data directory's stack when it started.
    let st = &v["storage"];
    assert_eq!(st["not_probed"], json!(""), "{st:#}");
    assert_eq!(st["probe"]["target"], json!(pg.data.display().to_string()));
    let probe = plugpull(&["probe", "--target", pg.data.to_str().unwrap(), "--json"]);
    let want: Value = serde_json::from_slice(&probe.stdout).unwrap();
    assert_eq!(st["probe"]["layers"], want["layers"]);
    assert_eq!(st["probe"]["leaves"], want["leaves"]);
    // Through the run's own session: the server's settings and its backend.
    let server = &st["probe"]["postgres"];
    for k in [
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "data_directory",
    ] {
        assert_eq!(server["settings"][k], rs[k], "{k}: {server:#}");
    }
    assert_eq!(server["backend_eatmydata"], json!(false), "{server:#}");
}

/// Waits for a child to exit (SIGKILL after `limit`) and collects its output; a
/// reader thread drains the pipes meanwhile.
fn wait_output(child: Child, limit: Duration) -> Output {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(limit) {
        Ok(o) => o.expect("wait for the writer"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid; it is not reaped until the thread's wait.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let o = rx.recv().unwrap().expect("wait for the writer");
            panic!("the writer did not exit within {limit:?}: {}", stdout(&o));
        }
    }
}

#[test]
fn every_confirmed_commit_survives_listener_kills() {
    let Some((dir, _pg, mut l)) = setup("every_confirmed_commit_survives_listener_kills") else {
        return;
    };
    let dsn = _pg.conninfo_db("bench");
    let ack_log = dir.path().join("acks.log");
    let child = spawn_write(
        &l,
        &dsn,
        &[
            "--init",
            "--clients",
            "4",
            "--duration",
            "6s",
            // The pipelined transaction, so its commits are checked exactly too.
            "--protocol",
            "prepared",
            "--pipeline",
            "--ack-log",
            ack_log.to_str().unwrap(),
        ],
    );
    // The writer needs a moment for --init; then the listener dies ten times under load.
    assert!(wait_for(Duration::from_secs(60), || std::fs::metadata(
        &ack_log
    )
    .is_ok_and(|m| m.len() > 0)));
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(150 + 23 * i));
        l.restart(); // SIGKILL, then a new listener on the same port and data directory
    }
    let o = wait_output(child, Duration::from_secs(60));
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {out}\nstderr: {}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("reconnected to listener"),
        "{}",
        stderr(&o)
    );
    let run = run_id(&o);
    let confirmed: std::collections::BTreeSet<(u32, u64)> = std::fs::read_to_string(&ack_log)
        .unwrap()
        .lines()
        .flat_map(|line| {
            let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
            (v[1]..=v[2]).map(move |s| (v[0] as u32, s))
        })
        .collect();
    let in_ledger = ledger_file::pg_commits(&l.ledger_path(&run));
    assert_eq!(confirmed, in_ledger);
    let acked = figure(&out, "acknowledged by listener: ").expect("acknowledged line");
    assert_eq!(acked, in_ledger.len() as u64);
    let processed = figure(&out, "number of transactions actually processed: ").unwrap();
    assert_eq!(processed, acked, "{out}");
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["acknowledged_commits"], json!(acked));
    assert_eq!(counts(&v), expect(&[]));
}

#[test]
fn the_json_summary_counts_what_was_acknowledged() {
    let Some((_dir, pg, l)) = setup("the_json_summary_counts_what_was_acknowledged") else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let o = write(
        &l,
        &dsn,
        &["--init", "--clients", "2", "--transactions", "40", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object on stdout");
    assert_eq!(v["transactions"], json!(80));
    assert_eq!(v["acknowledged"], json!(80));
    assert_eq!(v["clients"], json!(2));
    assert_eq!(v["failed"], json!(0));
    assert_eq!(v["clients_lost"], json!(0));
    let run = v["run_id"].as_str().unwrap();
    let (code, r, err) = verify(&l, run, &dsn, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["acknowledged_commits"], json!(80));
    assert_eq!(counts(&r), expect(&[]));
}

/// The clients' own connections (client/src/pgbench/run/wire.rs) authenticate as
/// libpq does: SCRAM-SHA-256, MD5 and a cleartext password over TCP, each with both
/// protocols; every transaction is acknowledged and in the table with its tag.
#[test]
fn the_clients_authenticate_with_scram_md5_and_password() {
    let test = "the_clients_authenticate_with_scram_md5_and_password";
    let Some((_dir, mut pg, l)) = setup(test) else {
        return;
    };
    init_tables(&l, &pg.conninfo_db("bench"), &[]);
    pg.psql("CREATE ROLE scramuser LOGIN SUPERUSER PASSWORD 'pw-scram'");
    pg.psql(
        "SET password_encryption = 'md5'; CREATE ROLE md5user LOGIN SUPERUSER PASSWORD 'pw-md5'",
    );
    pg.psql("CREATE ROLE clearuser LOGIN SUPERUSER PASSWORD 'pw-clear'");
    pg.prepend_hba("host all scramuser 127.0.0.1/32 scram-sha-256");
    pg.prepend_hba("host all md5user 127.0.0.1/32 md5");
    pg.prepend_hba("host all clearuser 127.0.0.1/32 password");
    for (user, pw) in [
        ("scramuser", "pw-scram"),
        ("md5user", "pw-md5"),
        ("clearuser", "pw-clear"),
    ] {
        for protocol in ["simple", "prepared"] {
            let dsn = pg
                .tcp_conninfo(user, pw)
                .replace("dbname=postgres", "dbname=bench");
            let o = write(
                &l,
                &dsn,
                &[
                    "--clients",
                    "2",
                    "--transactions",
                    "5",
                    "--protocol",
                    protocol,
                    "--json",
                ],
            );
            assert_eq!(
                o.status.code(),
                Some(0),
                "{user} {protocol}: {}",
                stderr(&o)
            );
            let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object on stdout");
            assert_eq!(v["acknowledged"], json!(10), "{user} {protocol}");
            let run = v["run_id"].as_str().unwrap();
            let rows = tagged_rows(&pg, run);
            assert_eq!(rows, "10", "{user} {protocol}");
        }
    }
    // A wrong password is refused by the server (the run's first connection says so).
    let dsn = pg
        .tcp_conninfo("md5user", "wrong")
        .replace("dbname=postgres", "dbname=bench");
    let o = write(&l, &dsn, &["--transactions", "5"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("password authentication failed for user \"md5user\""),
        "{}",
        stderr(&o)
    );
}

/// Serialization failures (SQLSTATE 40001) are rolled back, counted as failed and
/// retried with the same seq, as pgbench's `--max-tries` does: at scale 1 every
/// transaction updates the one branch row, so under REPEATABLE READ concurrent
/// clients fail each other. Every attempt is either acknowledged or failed, and
/// verify finds exactly the acknowledged commits.
#[test]
fn serialization_failures_are_rolled_back_counted_and_retried() {
    let test = "serialization_failures_are_rolled_back_counted_and_retried";
    let Some((_dir, pg, l)) = setup(test) else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    init_tables(&l, &dsn, &["--scale", "1"]);
    pg.psql("ALTER DATABASE bench SET default_transaction_isolation = 'repeatable read'");
    for mode in PROTOCOLS {
        let mut args = vec![
            "--clients",
            "4",
            "--jobs",
            "2",
            "--transactions",
            "50",
            "--json",
        ];
        args.extend_from_slice(mode);
        let o = write(&l, &dsn, &args);
        assert_eq!(o.status.code(), Some(0), "{mode:?}: {}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON object on stdout");
        let (committed, failed) = (
            v["transactions"].as_u64().unwrap(),
            v["failed"].as_u64().unwrap(),
        );
        assert_eq!(committed + failed, 200, "{mode:?}: {v}");
        assert!(
            failed > 0,
            "{mode:?}: 4 clients on one branch row never conflicted: {v}"
        );
        assert_eq!(v["acknowledged"], json!(committed), "{mode:?}");
        assert_eq!(v["clients_lost"], json!(0), "{mode:?}");
        let run = v["run_id"].as_str().unwrap();
        assert_eq!(tagged_rows(&pg, run), committed.to_string(), "{mode:?}");
        let (code, r, err) = verify(&l, run, &dsn, &[]);
        assert_eq!(code, 0, "{mode:?}: {err}");
        assert_eq!(r["acknowledged_commits"], json!(committed), "{mode:?}");
        assert_eq!(counts(&r), expect(&[]), "{mode:?}");
    }
}
