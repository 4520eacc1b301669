//! Copies of a finished run's database doctored by hand (a commit undone, a row
//! deleted, a transaction applied twice, phantom and malformed tags, a gap above the
//! survivors of a run cut short): every finding kind, with exact counts.

use super::*;

/// The finished run's database and the tag of client 0's transaction 5, the one
/// the scenarios doctor.
struct Doctor<'a> {
    pg: &'a PgCluster,
    l: &'a Listener,
    run: String,
    /// `h.filler = '<tag of client 0, seq 5>'`.
    this: String,
}

impl Doctor<'_> {
    /// Copies `bench` to `db`, applies `doctor` (SQL) in one transaction, verifies the
    /// copy without amcheck and asserts its counts are `want` (exit 0 if `ok`, else 1).
    fn check(&self, db: &str, doctor: &str, want: &[(&str, Value)]) -> Value {
        copy_db(self.pg, db);
        self.pg.psql_in(db, &format!("BEGIN; {doctor} COMMIT;"));
        let (code, v, err) = verify(
            self.l,
            &self.run,
            &self.pg.conninfo_db(db),
            &["--no-amcheck"],
        );
        let e = expect(want);
        assert_eq!(
            code,
            if e["ok"] == json!(true) { 0 } else { 1 },
            "{db}: {err}\n{v:#}"
        );
        assert_eq!(counts(&v), e, "{db}: {v:#}");
        v
    }
}

/// A finished run, then its database doctored scenario by scenario (one helper per
/// kind of finding, in this order), then a run cut short.
#[test]
fn doctored_databases_give_exact_counts() {
    let Some((dir, pg, l)) = setup("doctored_databases_give_exact_counts") else {
        return;
    };
    let run = a_finished_run_verifies_clean(&pg, &l);
    let t = tag(&run, 0, 5);
    let d = Doctor {
        pg: &pg,
        l: &l,
        this: format!("h.filler = '{t}'"),
        run,
    };
    an_undone_commit_is_lost(&d);
    a_deleted_history_row_is_lost_and_breaks_the_invariant(&d);
    duplicates_phantoms_and_malformed_tags_are_named(&d);
    a_gap_above_a_cut_runs_survivors_is_an_ordering_violation(&pg, &l, dir.path());
}

/// Writes 2 clients × 150 transactions to `bench`, checks the writer's pgbench-style
/// output and a clean verdict, and returns the run id.
fn a_finished_run_verifies_clean(pg: &PgCluster, l: &Listener) -> String {
    // A finished run: 2 clients × 150 transactions.
    let o = write(
        l,
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

    let (code, v, err) = verify(l, &run, &pg.conninfo_db("bench"), &[]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["acknowledged_commits"], json!(300));
    assert_eq!(v["present_commits"], json!(300));
    assert_eq!(v["unacknowledged_present"], json!(0));
    let sums = &v["invariant"];
    assert_eq!(sums["sum_abalance"], sums["sum_delta"]);
    assert_eq!(sums["sum_tbalance"], sums["sum_delta"]);
    assert_eq!(sums["sum_bbalance"], sums["sum_delta"]);
    run
}

fn an_undone_commit_is_lost(d: &Doctor) {
    let this = &d.this;
    // One acknowledged transaction undone completely: a lost commit, balances consistent.
    let v = d.check(
        "lost_whole",
        &format!(
            "{} DELETE FROM pgbench_history h WHERE {this};",
            apply_deltas(this, -1)
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
            .starts_with("FAIL: 1 lost commit out of "),
        "{v:#}"
    );
}

fn a_deleted_history_row_is_lost_and_breaks_the_invariant(d: &Doctor) {
    let this = &d.this;
    // Only its history row gone: lost, and the balances no longer add up.
    let v = d.check(
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
}

fn duplicates_phantoms_and_malformed_tags_are_named(d: &Doctor) {
    let (this, run) = (&d.this, &d.run);
    // A transaction applied twice: one duplicate.
    let v = d.check(
        "duplicate",
        &format!(
            "{} INSERT INTO pgbench_history SELECT * FROM pgbench_history h WHERE {this};",
            apply_deltas(this, 1)
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
    let v = d.check(
        "phantom",
        &format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}');",
            tag(run, 1, 1_000_000)
        ),
        &[("phantoms", json!(1)), ("ok", json!(false))],
    );
    assert_eq!(v["findings"][0]["kind"], json!("phantom"));
    assert_eq!(v["findings"][0]["seq"], json!(1_000_000));
    // A client the run never had is a phantom too.
    d.check(
        "phantom_client",
        &format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}');",
            tag(run, 7, 1)
        ),
        &[("phantoms", json!(1)), ("ok", json!(false))],
    );

    // A row with the run's prefix that is not a tag.
    let v = d.check(
        "malformed",
        &format!(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}x1y');",
            &run[8..]
        ),
        &[("malformed_tags", json!(1)), ("ok", json!(false))],
    );
    assert_eq!(v["findings"][0]["kind"], json!("malformed_tag"));
}

fn a_gap_above_a_cut_runs_survivors_is_an_ordering_violation(
    pg: &PgCluster,
    l: &Listener,
    canary: &std::path::Path,
) {
    // A run cut short (the agent killed): survivors beyond the ledger are fine, but a
    // gap above them with a later survivor is an ordering violation.
    let mut child = spawn_write(
        l,
        &pg.conninfo_db("bench"),
        &[
            "--clients",
            "2",
            "--duration",
            "60s",
            "--canary-dir",
            canary.to_str().unwrap(),
        ],
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
    // The agent was killed, no power cut: the host's memory lost by hand.
    assert_eq!(plugpull_tests::lose_canary(canary), 3);
    let (code, v, err) = verify(l, &run2, &pg.conninfo_db("bench"), &["--no-amcheck"]);
    assert_eq!(code, 0, "{err}\n{v:#}");
    assert_eq!(counts(&v), expect(&[]), "{v:#}");
    assert_eq!(v["finished"], json!(false));
    // What amcheck would have checked is not measured, and the PASS says so.
    let summary = v["summary"].as_str().unwrap();
    assert!(summary.starts_with("PASS: "), "{summary}");
    assert!(
        summary.ends_with(
            "none lost; balances consistent; not measured: corruption in the tables and \
             indexes (amcheck skipped by --no-amcheck)"
        ),
        "{summary}"
    );
    let top: u64 = pg
        .psql_in(
            "bench",
            &format!("SELECT max(substr(filler, 13, 10)::bigint) FROM pgbench_history WHERE filler LIKE '{}%'", &tag(&run2, 0, 0)[..12]),
        )
        .parse()
        .unwrap();
    let v = {
        let run = run2.clone();
        copy_db(pg, "ordering");
        pg.psql_in(
            "ordering",
            &format!(
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime, filler) VALUES (1, 1, 1, 0, now(), '{}');",
                tag(&run, 0, top + 2)
            ),
        );
        let (code, v, err) = verify(l, &run, &pg.conninfo_db("ordering"), &["--no-amcheck"]);
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
