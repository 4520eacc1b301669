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
    let Some((_dir, mut pg, l)) = setup("a_crash_mid_run_loses_no_acknowledged_commit") else {
        return;
    };
    let dsn = pg.conninfo_db("bench");
    let mut child = spawn_write(
        &l,
        &dsn,
        &[
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
    let (code, v, err) = verify(&l, &run, &dsn, &["--pg-wait", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(v["ok"], json!(false));
    assert!(err.contains("is PostgreSQL running?"), "{err}");

    pg.start(); // crash recovery
    let (code, v, err) = verify(&l, &run, &dsn, &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["run_id"], json!(run));
    assert_eq!(v["workload"], json!("pgbench"));
    assert_eq!(v["finished"], json!(true));
    assert_eq!(v["acknowledged_commits"], json!(acked));
    assert!(v["amcheck"]["ran"].as_bool().unwrap(), "{v:#}");
    let rs = &v["run_settings"];
    assert_eq!(rs["fsync"], json!("on"));
    assert_eq!(rs["synchronous_commit"], json!("on"));
    assert_eq!(rs["data_directory"], json!(pg.data.display().to_string()));
    assert!(!rs["data_mount"].as_str().unwrap().is_empty(), "{rs:#}");
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
fn doctored_databases_give_exact_counts() {
    let Some((_dir, pg, l)) = setup("doctored_databases_give_exact_counts") else {
        return;
    };
    // A finished run: 2 clients × 150 transactions.
    let o = write(
        &l,
        &pg.conninfo_db("bench"),
        &[
            "--init",
            "--clients",
            "2",
            "--jobs",
            "2",
            "--transactions",
            "150",
            "--protocol",
            "prepared",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    let out = stdout(&o);
    assert_eq!(
        figure(&out, "acknowledged by listener: "),
        Some(300),
        "{out}"
    );
    assert!(
        out.contains("number of transactions actually processed: 300/300"),
        "{out}"
    );
    assert!(
        out.contains("transaction type: <builtin: TPC-B (sort of)>"),
        "{out}"
    );
    assert!(out.contains("query mode: prepared"), "{out}");

    let (code, v, err) = verify(&l, &run, &pg.conninfo_db("bench"), &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["acknowledged_commits"], json!(300));
    assert_eq!(v["present_commits"], json!(300));
    assert_eq!(v["unacknowledged_present"], json!(0));
    let sums = &v["invariant"];
    assert_eq!(sums["sum_abalance"], sums["sum_delta"]);
    assert_eq!(sums["sum_tbalance"], sums["sum_delta"]);
    assert_eq!(sums["sum_bbalance"], sums["sum_delta"]);

    let t = tag(&run, 0, 5);
    let this = format!("h.filler = '{t}'");
    let check = |db: &str, doctor: &str, want: &[(&str, Value)]| -> Value {
        copy_db(&pg, db);
        pg.psql_in(db, &format!("BEGIN; {doctor} COMMIT;"));
        let (code, v, err) = verify(&l, &run, &pg.conninfo_db(db), &["--no-amcheck"]);
        let e = expect(want);
        assert_eq!(
            code,
            if e["ok"] == json!(true) { 0 } else { 1 },
            "{db}: {err}\n{v:#}"
        );
        assert_eq!(counts(&v), e, "{db}: {v:#}");
        v
    };

    // One acknowledged transaction undone completely: a lost commit, balances consistent.
    let v = check(
        "lost_whole",
        &format!(
            "{} DELETE FROM pgbench_history h WHERE {this};",
            apply_deltas(&this, -1)
        ),
        &[("lost_commits", json!(1)), ("ok", json!(false))],
    );
    assert_eq!(v["findings"][0]["kind"], json!("lost_commit"));
    assert_eq!(v["findings"][0]["client"], json!(0));
    assert_eq!(v["findings"][0]["seq"], json!(5));
    assert_eq!(v["findings_total"], json!(1));
    // When that commit was acknowledged (not the time of the last range merged into
    // it), and the lag histogram counts it once.
    let detail = v["findings"][0]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("acknowledged commit missing (acknowledged ")
            && detail.contains(" s before the end"),
        "{detail}"
    );
    let lagged: u64 = v["lost_lag_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(lagged, 1, "{v:#}");
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .starts_with("FAIL: 1 lost commits"),
        "{v:#}"
    );

    // Only its history row gone: lost, and the balances no longer add up.
    let v = check(
        "lost_row",
        &format!("DELETE FROM pgbench_history h WHERE {this};"),
        &[
            ("lost_commits", json!(1)),
            ("invariant_holds", json!(false)),
            ("ok", json!(false)),
        ],
    );
    let kinds: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["lost_commit", "invariant"], "{v:#}");

    // A transaction applied twice: one duplicate.
    let v = check(
        "duplicate",
        &format!(
            "{} INSERT INTO pgbench_history SELECT * FROM pgbench_history h WHERE {this};",
            apply_deltas(&this, 1)
        ),
        &[("duplicates", json!(1)), ("ok", json!(false))],
    );
    assert_eq!(v["findings"][0]["kind"], json!("duplicate"));
    assert_eq!(
        (
            v["findings"][0]["client"].clone(),
            v["findings"][0]["seq"].clone()
        ),
        (json!(0), json!(5))
    );

    // A tag far beyond anything issued: one phantom (delta 0 keeps the balances).
    let v = check(
        "phantom",
        &format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}');",
            tag(&run, 1, 1_000_000)
        ),
        &[("phantoms", json!(1)), ("ok", json!(false))],
    );
    assert_eq!(v["findings"][0]["kind"], json!("phantom"));
    assert_eq!(v["findings"][0]["seq"], json!(1_000_000));
    // A client the run never had is a phantom too.
    check(
        "phantom_client",
        &format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}');",
            tag(&run, 7, 1)
        ),
        &[("phantoms", json!(1)), ("ok", json!(false))],
    );

    // A row with the run's prefix that is not a tag.
    let v = check(
        "malformed",
        &format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}x1y');",
            &run[8..]
        ),
        &[("malformed_tags", json!(1)), ("ok", json!(false))],
    );
    assert_eq!(v["findings"][0]["kind"], json!("malformed_tag"));

    // A run cut short (the agent killed): survivors beyond the ledger are fine, but a
    // gap above them with a later survivor is an ordering violation.
    let mut child = spawn_write(
        &l,
        &pg.conninfo_db("bench"),
        &["--clients", "2", "--duration", "60s"],
    );
    let before: u64 = pg
        .psql_in("bench", "SELECT count(*) FROM pgbench_history")
        .parse()
        .unwrap();
    let progressed = wait_for(Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
            || pg
                .psql_in("bench", "SELECT count(*) FROM pgbench_history")
                .parse::<u64>()
                .unwrap()
                >= before + 800
    });
    assert!(
        child.try_wait().unwrap().is_none(),
        "the second writer exited early"
    );
    assert!(progressed, "the second writer made no progress");
    sigkill(&mut child);
    let mut first = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    let run2 = first
        .lines()
        .next()
        .unwrap()
        .strip_prefix("run id: ")
        .unwrap()
        .to_string();
    let (code, v, err) = verify(&l, &run2, &pg.conninfo_db("bench"), &["--no-amcheck"]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["finished"], json!(false));
    let top: u64 = pg
        .psql_in(
            "bench",
            &format!("SELECT max(substr(filler, 13, 10)::bigint) FROM pgbench_history WHERE filler LIKE '{}%'", &tag(&run2, 0, 0)[..12]),
        )
        .parse()
        .unwrap();
    let v = {
        let run = run2.clone();
        copy_db(&pg, "ordering");
        pg.psql_in(
            "ordering",
            &format!(
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}');",
                tag(&run, 0, top + 2)
            ),
        );
        let (code, v, err) = verify(&l, &run, &pg.conninfo_db("ordering"), &["--no-amcheck"]);
        assert_eq!(code, 1, "{err}\n{v:#}");
        assert_eq!(
            counts(&v),
            expect(&[("ordering_violations", json!(1)), ("ok", json!(false))]),
            "{v:#}"
        );
        v
    };
    assert_eq!(v["findings"][0]["kind"], json!("ordering_violation"));
    assert_eq!(v["findings"][0]["client"], json!(0));
    assert_eq!(v["findings"][0]["seq"], json!(top + 1));
}

#[test]
fn unsafe_configuration_is_refused_then_measured_as_unpromised() {
    let Some((_dir, mut pg, l)) =
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
    let o = plugpull(&[
        "verify",
        "--listener",
        l.addr(),
        "--run",
        &run,
        "--dsn",
        &dsn,
        "--no-amcheck",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("NOT MEASURED: all 200"),
        "{}",
        stdout(&o)
    );
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

/// Every commit the listener confirmed, as (client, seq), from a ledger file.
fn ledger_commits(path: &std::path::Path) -> std::collections::BTreeSet<(u32, u64)> {
    use plugpull::ledger::{scan, Acks, Entry};
    let bytes = std::fs::read(path).unwrap();
    let mut set = std::collections::BTreeSet::new();
    scan(&bytes, |_, e| {
        if let Entry::Acks(b) = e {
            if let Acks::Pg(v) = b.acks {
                for r in v {
                    for s in r.first..=r.last {
                        assert!(
                            set.insert((r.client, s)),
                            "client {} seq {s} twice in the ledger",
                            r.client
                        );
                    }
                }
            }
        }
    })
    .unwrap();
    set
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
    let in_ledger = ledger_commits(&l.ledger_path(&run));
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
