//! The summary `plugpull write pgbench` prints after the run: pgbench's own lines
//! (so numbers compare with a pgbench run at a glance), then plugpull's
//! (acknowledged by the listener, clients lost or aborted), or, with `--json`, one
//! JSON object with the same figures.

use super::run;

/// Prints the summary of run `run_id` on stdout: one JSON object when `json`, else
/// pgbench's lines then plugpull's. `confirmed` is the count the listener confirmed.
pub(super) fn print(
    json: bool,
    run_id: plugpull::RunId,
    p: &run::Params,
    s: &plugpull::ledger::PgSettings,
    o: &run::RunStats,
    confirmed: u64,
    warnings: &[plugpull::probe::Warning],
) {
    if json {
        let mut v = summary_json(run_id, p, o, confirmed);
        v["storage_warnings"] = serde_json::json!(warnings);
        println!("{v}");
    } else {
        print_text(p, s, o, confirmed);
    }
}

/// The summary as one JSON object (`--json`): the figures of the text summary, with
/// latencies in ms.
fn summary_json(
    run: plugpull::RunId,
    p: &run::Params,
    o: &run::RunStats,
    confirmed: u64,
) -> serde_json::Value {
    serde_json::json!({
        "run_id": run.to_string(),
        "scaling_factor": p.scale,
        "query_mode": p.protocol.name(),
        "pipelined": p.pipeline,
        "clients": p.clients,
        "threads": p.jobs,
        "duration_secs": o.elapsed.as_secs_f64(),
        "transactions": o.committed,
        "failed": o.failed,
        "tps": o.committed as f64 / o.elapsed.as_secs_f64().max(1e-9),
        "latency_ms": crate::latency::LatencySummary::of(&o.stats),
        "acknowledged": confirmed,
        "clients_lost": o.lost_clients,
        "in_flight_at_commit": o.in_flight,
        "clients_aborted": o.aborted_clients,
        "interrupted": o.interrupted,
    })
}

/// Prints the summary in pgbench's words (stdout), then plugpull's own lines.
fn print_text(
    p: &run::Params,
    s: &plugpull::ledger::PgSettings,
    o: &run::RunStats,
    confirmed: u64,
) {
    println!(
        "pgbench-compatible run against PostgreSQL {}",
        s.server_version
    );
    println!("transaction type: <builtin: TPC-B (sort of)>");
    println!("scaling factor: {}", p.scale);
    println!(
        "query mode: {}{}",
        p.protocol.name(),
        if p.pipeline { " (pipelined)" } else { "" }
    );
    println!("number of clients: {}", p.clients);
    println!("number of threads: {}", p.jobs);
    println!("maximum number of tries: 1");
    match p.limit {
        run::Limit::Duration(d) => println!("duration: {} s", d.as_secs()),
        run::Limit::Transactions(n) => println!("number of transactions per client: {n}"),
    }
    match p.limit {
        run::Limit::Transactions(n) => println!(
            "number of transactions actually processed: {}/{}",
            o.committed,
            n * p.clients as u64
        ),
        run::Limit::Duration(_) => {
            println!("number of transactions actually processed: {}", o.committed)
        }
    }
    let pct = if o.attempts > 0 {
        100.0 * o.failed as f64 / o.attempts as f64
    } else {
        0.0
    };
    println!("number of failed transactions: {} ({pct:.3}%)", o.failed);
    println!("latency average = {:.3} ms", o.stats.mean_ms());
    println!("latency stddev = {:.3} ms", o.stats.stddev_ms());
    println!(
        "initial connection time = {:.3} ms",
        o.conn_time.as_secs_f64() * 1000.0
    );
    let secs = o.elapsed.as_secs_f64().max(1e-9);
    println!(
        "tps = {:.6} (without initial connection time)",
        o.committed as f64 / secs
    );
    println!("latency p99 = {:.3} ms", o.stats.percentile_ms(99.0));
    println!("acknowledged by listener: {confirmed}");
    if confirmed < o.committed {
        println!(
            "warning: {} acknowledgements were not confirmed by the listener",
            o.committed - confirmed
        );
    }
    if o.lost_clients > 0 {
        println!(
            "clients lost: {} of {} ({} with a transaction in flight at COMMIT)",
            o.lost_clients, p.clients, o.in_flight
        );
        if o.lost_clients == p.clients {
            println!(
                "the server closed every connection (crash or shutdown?): the run ended early; \
                 the {confirmed} acknowledgements made stay valid"
            );
        }
    }
    if o.aborted_clients > 0 {
        println!("clients aborted: {} of {}", o.aborted_clients, p.clients);
    }
    if o.interrupted {
        println!("interrupted: the run ended early");
    }
    println!(
        "verify this run before anything else writes to the pgbench tables: a TRUNCATE, pgbench -i or VACUUM FULL makes it unverifiable"
    );
}
