//! The lost commits' times and lags against a real PostgreSQL, straight through the
//! verifier's SQL (`sql::list_findings`, `sql::lost_lags`): a `pgbench_history` of
//! known tags, and a ledger whose ranges are out of order, repeated and overlapping
//! across promise flags for one client, and one per seq (as an agent sends them) for
//! another, read from the fold in the verdict's order while PostgreSQL streams the
//! missing seqs.

use plugpull::ledger::{AckBatch, Acks, PgAckRange, PgRanges};
use plugpull::verdict::pgbench as rules;
use plugpull::RunId;
use plugpull_client::pgbench::tag;
use plugpull_client::pgbench::verify::sql::{self, Findings, Scan, ToList};
use plugpull_tests::pg::PgCluster;

fn batch(promised: bool, ranges: &[(u32, u64, u64, u32)]) -> AckBatch {
    AckBatch {
        batch: 1,
        promised,
        acks: Acks::Pg(
            ranges
                .iter()
                .map(|&(client, first, last, ms)| PgAckRange {
                    client,
                    first,
                    last,
                    ms,
                })
                .collect(),
        ),
        flushes: None,
        canary: 0,
        sealed_ms: 0,
        oldest_in_flight_ms: None,
    }
}

/// Client 0: (1–4 unpromised at 5 ms, a repeat at 10 ms), 3–6 at 25 ms, 5–9 at 20
/// ms (a repeat at 30 ms); client 1: 1–3 at 7 ms, 4–8 at 15 ms; client 2: seq `s` of
/// 1..=5000 alone at `s` ms. All promised but client 0's 1–4.
fn ledger() -> PgRanges {
    let mut b = vec![
        batch(true, &[(0, 5, 9, 20), (1, 1, 3, 7)]),
        batch(false, &[(0, 1, 4, 10)]),
        batch(true, &[(0, 5, 9, 30), (1, 4, 8, 15)]),
        batch(true, &[(0, 3, 6, 25)]),
        batch(false, &[(0, 1, 4, 5)]),
    ];
    b.extend((1..=5000u64).map(|s| batch(true, &[(2, s, s, s as u32)])));
    PgRanges::of(&b)
}

fn commit(kind: &str, c: u32, s: u64, when: &str) -> (String, u32, u64, String) {
    let detail = format!("acknowledged commit missing ({when})");
    (kind.to_string(), c, s, detail)
}

#[test]
fn lost_commits_get_their_ranges_times_and_lags_from_the_fold() {
    if PgCluster::skip("lost_commits_get_their_ranges_times_and_lags_from_the_fold") {
        return;
    }
    let pg = PgCluster::start_new();
    pg.psql("CREATE DATABASE bench");
    let run = RunId(0x5eed_0000_1234_abcd);
    let lost = [(0, 2), (0, 5), (0, 6), (0, 9), (1, 4)];
    let mut present: Vec<String> = Vec::new();
    for (c, top) in [(0u32, 9u64), (1, 8)] {
        for s in (1..=top).filter(|&s| !lost.contains(&(c, s))) {
            present.push(format!("('{}')", tag::encode(run, c, s)));
        }
    }
    // Client 2's every seq but each hundredth.
    pg.psql_in(
        "bench",
        &format!(
            "CREATE TABLE pgbench_history (filler char(22)); \
             INSERT INTO pgbench_history VALUES {}; \
             INSERT INTO pgbench_history SELECT '{}0002' || lpad(s::text, 10, '0') \
             FROM generate_series(1, 5000) AS s WHERE s % 100 <> 0",
            present.join(","),
            tag::prefix(run)
        ),
    );
    let p = ledger();
    let acks = rules::merge_ranges(&p);
    let end_ms = rules::end_ms(&p);
    assert_eq!(end_ms, 5000);
    let bounds = rules::bounds(&acks, 3, true, 0, tag::MAX_SEQ);
    let scan = Scan::new(&tag::prefix(run), &bounds, &acks);
    let cfg = plugpull_client::pg::config(Some(&pg.conninfo_db("bench"))).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (lags, out) = rt.block_on(async {
        let client = plugpull_client::pg::connect(&cfg).await.unwrap();
        let what = ToList {
            lost: 55,
            promised_lost: true,
            ordering: (0, &[]),
            duplicates: 0,
            phantoms: 0,
            malformed: 0,
        };
        let mut out = Findings::default();
        let lags = sql::list_findings(&client, &scan, what, &p, end_ms, &mut out)
            .await
            .unwrap();
        let alone = sql::lost_lags(&client, &scan, &p, end_ms).await.unwrap();
        assert_eq!(Some(alone), lags);
        (lags.unwrap(), out)
    });
    // Client 0's 5 and 6 lie in two promised ranges (4.975 and 4.98 s), its 9 in
    // one, client 1's 4 at 4.985 s; client 2's seq s at (5000 - s) ms: 5000 at 0 s,
    // 4600–4900 at 0.1–0.4 s, 4100–4500 at 0.5–0.9 s, 100–4000 at 1–4.9 s.
    let counts: Vec<u64> = lags.iter().map(|b| b.count).collect();
    assert_eq!(counts, [1, 0, 4, 5, 46, 0, 0, 0]);
    the_lost_are_listed_with_their_times(&out);
}

/// Promised first, by client and seq, then the unpromised one; each with the time
/// of the first range in the verdict's order holding it.
fn the_lost_are_listed_with_their_times(out: &Findings) {
    let listed: Vec<(String, u32, u64, String)> = out
        .failures
        .iter()
        .chain(&out.expected)
        .map(|f| {
            let kind = format!("{:?}", f.kind);
            (kind, f.client.unwrap(), f.seq.unwrap(), f.detail.clone())
        })
        .collect();
    assert_eq!(listed.len(), 55);
    let l = "LostCommit";
    assert_eq!(
        listed[..5],
        [
            commit(
                l,
                0,
                5,
                "acknowledged between 4.995 and 4.975 s before the end (0.005–0.025 s into \
                 the run; its range, seqs 3 to 6, was acknowledged by 0.025 s)"
            ),
            commit(
                l,
                0,
                6,
                "acknowledged 4.975 s before the end, 0.025 s into the run"
            ),
            commit(
                l,
                0,
                9,
                "acknowledged 4.980 s before the end, 0.020 s into the run"
            ),
            commit(
                l,
                1,
                4,
                "acknowledged between 4.993 and 4.985 s before the end (0.007–0.015 s into \
                 the run; its range, seqs 4 to 8, was acknowledged by 0.015 s)"
            ),
            commit(
                l,
                2,
                100,
                "acknowledged 4.900 s before the end, 0.100 s into the run"
            ),
        ]
    );
    assert_eq!(
        listed[53],
        commit(
            l,
            2,
            5000,
            "acknowledged 0.000 s before the end, 5.000 s into the run"
        )
    );
    let mut unpromised = commit(
        "UnpromisedLost",
        0,
        2,
        "acknowledged between 5.000 and 4.995 s before the end (0.000–0.005 s into the run; \
         its range, seqs 1 to 4, was acknowledged by 0.005 s)",
    );
    unpromised
        .3
        .push_str("; the configuration did not promise durability");
    assert_eq!(listed[54], unpromised);
}
