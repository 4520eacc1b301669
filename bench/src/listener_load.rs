//! Listener load: `--agents` connections over loopback, each starting a run and
//! sending file-ack batches as fast as the listener confirms them (a window of
//! `--window` batches in flight per agent, `--batch` acks each), against a listener
//! whose ledger is durable (group commit + fdatasync). Prints acks/s confirmed and
//! ledger bytes per ack. Used by bench/listener.sh, and by bench/ledger_memory.sh to
//! make a big ledger (`--acks`), and by bench/fold_memory.sh to make the ledger of
//! a run of a given length without writing for that long (`--span-secs`). With
//! `--workload pgbench` the run is a pgbench run of `--clients` clients instead, each
//! batch one range of `--batch` commits per client (the ledger verify of a pgbench
//! run folds: bench/pg_verify_memory.sh).

use clap::Parser;
use plugpull::auth::Secret;
use plugpull::ledger::{
    AckBatch, Acks, FileAck, FileManifest, Manifest, PgAckRange, PgManifest, Workload,
};
use plugpull::wire::{Request, Response};
use plugpull_client::net;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// Listener address.
    #[arg(long)]
    listener: String,
    /// Concurrent agents.
    #[arg(long, default_value_t = 16)]
    agents: usize,
    /// Acks per batch (with `--workload pgbench`: commits per client per batch).
    #[arg(long, default_value_t = 8192)]
    batch: usize,
    /// Batches in flight per agent.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Stop each agent after this many acks (rounded up to whole batches), before
    /// `--seconds` if it comes first: a ledger of a given size for
    /// bench/ledger_memory.sh.
    #[arg(long, default_value_t = u64::MAX)]
    acks: u64,
    /// Stamp the acknowledgements as if the run lasted this many seconds (0: stamp
    /// them by seq, the old way): batch n is sealed at n × 1000 / `--batches-per-sec`
    /// ms, all its acks 1 ms before (so every other ms holds a batch's acks), with
    /// the oldest write in flight 1 ms before its sealing, a flush sample once a
    /// second and a growing canary record; each agent stops at the span's end.
    #[arg(long, default_value_t = 0.0)]
    span_secs: f64,
    /// Batches sealed per second of the simulated span (500: the reporter's 2 ms
    /// linger, the most it seals while acks keep coming).
    #[arg(long, default_value_t = 500)]
    batches_per_sec: u64,
    /// The runs' workload: `file` (file acks) or `pgbench` (pgbench ranges).
    #[arg(long, default_value = "file", value_parser = ["file", "pgbench"])]
    workload: String,
    /// pgbench clients (with `--workload pgbench`).
    #[arg(long, default_value_t = 8)]
    clients: u32,
}

/// How one agent stamps its batches, and what they carry.
#[derive(Clone, Copy)]
struct Stamping {
    /// The simulated span, ms (0: stamp by seq).
    span_ms: u64,
    /// Batches per second of it.
    per_sec: u64,
    /// pgbench clients, for a pgbench run (none: a file run).
    pg_clients: Option<u32>,
}

impl Stamping {
    /// When batch `n` (from 1) is sealed, ms; `None` when it falls past the span.
    fn sealed_ms(self, n: u64) -> Option<u32> {
        let ms = n * 1000 / self.per_sec.max(1);
        (self.span_ms == 0 || ms <= self.span_ms).then_some(ms as u32)
    }
}

async fn agent(
    addr: String,
    id: usize,
    batch: usize,
    window: usize,
    end: Instant,
    most: u64,
    stamping: Stamping,
) -> (u64, String) {
    let (mut r, mut w) = net::connect(&addr, &Secret::default())
        .await
        .expect("connect");
    let manifest = Manifest {
        host: format!("load-{id}"),
        started_unix_ms: 0,
        tool_version: "bench".into(),
        workload: match stamping.pg_clients {
            Some(clients) => Workload::Pgbench(PgManifest {
                conninfo: "host=/nonexistent dbname=bench".into(),
                clients,
                promised: true,
                ..Default::default()
            }),
            None => file_workload(),
        },
        boot_id: String::new(),
        listener_order: 0,
        listener_created_unix_ms: 0,
        storage: Default::default(),
        canary: Default::default(),
    };
    w.send(&Request::StartRun {
        manifest: Box::new(manifest),
    })
    .await
    .unwrap();
    w.flush().await.unwrap();
    let Response::RunStarted { run, .. } = r.recv().await.unwrap() else {
        panic!("no run")
    };
    let (mut sent, mut confirmed, mut seq) = (0u64, 0u64, 0u64);
    loop {
        while sent < confirmed + window as u64
            && Instant::now() < end
            && sent.saturating_mul(batch as u64) < most
            && stamping.sealed_ms(sent + 1).is_some()
        {
            sent += 1;
            let span = stamping.span_ms > 0;
            let sealed = if span {
                stamping.sealed_ms(sent).unwrap_or(0)
            } else {
                0
            };
            let ms = |seq: u64| {
                if span {
                    sealed.saturating_sub(1)
                } else {
                    (seq / 1000) as u32
                }
            };
            let acks = match stamping.pg_clients {
                Some(clients) => pg_acks(clients, sent, batch as u64, ms(sent * batch as u64)),
                None => file_acks(&mut seq, batch, ms),
            };
            let second = span && sent % stamping.per_sec.max(1) == 0;
            w.send(&Request::Acks {
                run,
                batch: AckBatch {
                    batch: sent,
                    promised: true,
                    acks,
                    flushes: second.then(|| plugpull::ledger::FlushSample {
                        counts: vec![Some(sent)],
                    }),
                    canary: if span { sent / 10 } else { 0 },
                    sealed_ms: sealed,
                    oldest_in_flight_ms: span.then(|| sealed.saturating_sub(1)),
                },
            })
            .await
            .unwrap();
        }
        w.flush().await.unwrap();
        if confirmed == sent {
            break;
        }
        match r.recv().await.unwrap() {
            Response::Confirmed { batch, .. } => confirmed = batch,
            other => panic!("{other:?}"),
        }
    }
    let per_batch = batch as u64 * u64::from(stamping.pg_clients.unwrap_or(1));
    (confirmed * per_batch, run.to_string())
}

/// The file workload of the runs: a 1 GiB target of 4 KiB blocks.
fn file_workload() -> Workload {
    Workload::File(FileManifest {
        target: "/dev/null".into(),
        size: 1 << 30,
        block_size: 4096,
        jobs: 1,
        sync: plugpull::modes::SyncMode::Fdatasync,
        pattern: plugpull::modes::Pattern::Random,
        identity: Default::default(),
        prior_runs: Vec::new(),
        prior_foreign: false,
        atomic: None,
    })
}

/// File acks of one batch: `batch` writes from seq `*seq + 1`, at `ms(seq)`.
fn file_acks(seq: &mut u64, batch: usize, ms: impl Fn(u64) -> u32) -> Acks {
    let blocks = (1u64 << 30) / 4096;
    let acks = (0..batch)
        .map(|i| {
            *seq += 1;
            FileAck {
                seq: *seq,
                block: (seq.wrapping_mul(0x9E37_79B9) + i as u64) % blocks,
                ms: ms(*seq),
            }
        })
        .collect();
    Acks::File(acks)
}

/// pgbench ranges of batch `n` (from 1): each client's commits `(n - 1) × per + 1`
/// to `n × per`, at `ms`.
fn pg_acks(clients: u32, n: u64, per: u64, ms: u32) -> Acks {
    let per = per.max(1);
    let ranges = (0..clients)
        .map(|client| PgAckRange {
            client,
            first: (n - 1) * per + 1,
            last: n * per,
            ms,
        })
        .collect();
    Acks::Pg(ranges)
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.seconds);
    let stamping = Stamping {
        span_ms: (a.span_secs * 1000.0) as u64,
        per_sec: a.batches_per_sec,
        pg_clients: (a.workload == "pgbench").then_some(a.clients),
    };
    let tasks: Vec<_> = (0..a.agents)
        .map(|i| {
            let l = a.listener.clone();
            tokio::spawn(agent(l, i, a.batch, a.window, end, a.acks, stamping))
        })
        .collect();
    let mut total = 0;
    let mut runs = Vec::new();
    for t in tasks {
        let (n, run) = t.await.unwrap();
        total += n;
        runs.push(run);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "agents = {}, acks confirmed = {total}, seconds = {secs:.2}",
        a.agents
    );
    println!("acks/s = {:.0}", total as f64 / secs);
    println!("runs = {}", runs.join(","));
}
