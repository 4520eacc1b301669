//! # The PostgreSQL workload: pgbench TPC-B, tagged
//!
//! `plugpull write pgbench` runs pgbench's built-in "TPC-B (sort of)" script against
//! pgbench's own tables and reports every successful `COMMIT` to the listener;
//! `plugpull verify` (for a pgbench run) then checks, after the cut and the reboot,
//! that every acknowledged commit survived. See `docs/pgbench.md` for the user's
//! guide and the verifier's rules.
//!
//! * the connection itself is [`crate::pg`]: libpq-style settings, error classification, server settings.
//! * [`schema`] — `pgbench -i` compatible tables and the balance sums.
//! * [`tag`] — the 22-character tag in `pgbench_history.filler`: run, client, seq.
//! * [`run`] — the clients and their transaction; `summary` — what `write` prints after.
//! * [`verify`](mod@verify) — the verifier: one scan of the tags, SQL for the findings, the
//!   balance invariant, amcheck, damaged pages and checksum failures, gathered for
//!   the rules of `plugpull::verdict::pgbench` into a `PgReport`
//!   (`plugpull::report::pgbench`); with [`ready`] (waiting for PostgreSQL after the
//!   cut: "not up yet" vs "stopped") and [`damage`] (where each damaged page is, and
//!   whether it is the run's data or a page PostgreSQL rebuilds by design).
//! * [`print`](mod@print) — the human report and its summary line.
//!
//! The only difference from pgbench's transaction is the `filler` value of the
//! history row, which names the transaction, so the verifier can tell which
//! acknowledged commits are missing, one by one.

pub mod print;
pub mod run;
pub mod schema;
mod summary;
pub mod tag;
pub mod verify;

pub use plugpull::report::pgbench::PgReport;
pub use verify::{verify, PgVerifyArgs};

use verify::damage;

use crate::manifest::make_manifest;
use crate::pg;
use crate::reporter::{Reporter, ReporterOptions, PG_MAX_UNCONFIRMED};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{PgManifest, PgSettings, RunSummary, Workload};
use std::time::Duration;

pub use plugpull::modes::Protocol;

/// Options of `plugpull write pgbench` (the listener options come from the common
/// listener arguments).
#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {
    /// PostgreSQL connection: a conninfo string (`host=/run/postgresql dbname=bench`)
    /// or a `postgresql://` URL. Fields it leaves out come from PGHOST, PGPORT,
    /// PGUSER, PGDATABASE and PGPASSWORD, then libpq's defaults.
    #[arg(long, value_name = "CONNINFO")]
    pub dsn: Option<String>,

    /// Create the pgbench tables first, as `pgbench -i -s SCALE` does. Existing
    /// tables are reused (never dropped), with the scale they have.
    #[arg(long)]
    pub init: bool,

    /// Scale factor for --init: 100,000 accounts, 10 tellers and 1 branch per unit.
    /// Without --init the scale is read from the tables.
    #[arg(long, short = 's', default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub scale: u32,

    /// Number of clients (database connections), 1 to 10000 (pgbench -c).
    #[arg(long, short = 'c', default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=tag::MAX_CLIENT as i64 + 1))]
    pub clients: u32,

    /// Number of OS threads the clients are spread over, at most --clients (pgbench -j).
    #[arg(long, short = 'j', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,

    /// How long to run, e.g. `60s` or `10m` (pgbench -T). The default when neither
    /// this nor --transactions is given: 30 s, as for every workload.
    #[arg(long, short = 'T', value_parser = plugpull::units::parse_duration,
          conflicts_with = "transactions", allow_hyphen_values = true)]
    pub duration: Option<Duration>,

    /// Transactions per client, failed ones included (pgbench -t).
    #[arg(long, short = 't', value_parser = clap::value_parser!(u64).range(1..))]
    pub transactions: Option<u64>,

    /// Query protocol (pgbench -M).
    #[arg(long, short = 'M', value_enum, default_value_t = Protocol::Simple)]
    pub protocol: Protocol,

    /// Print the summary as one JSON object instead of pgbench's lines (and no
    /// `run id:` line first; the object has `run_id`).
    #[arg(long)]
    pub json: bool,

    /// Pipeline each transaction: send BEGIN and its five statements without waiting
    /// for each answer, then COMMIT (needs --protocol prepared). The server does the
    /// same work; tps then compares with pgbench running the same script between
    /// \startpipeline and \endpipeline, not with its built-in one.
    #[arg(long)]
    pub pipeline: bool,

    /// Print a progress line on stderr every SECONDS seconds (pgbench -P).
    #[arg(long = "progress", short = 'P', value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub progress: Option<u64>,

    /// Run even though the server does not promise durability (fsync=off, or
    /// synchronous_commit=off): acknowledgements are then recorded as not promised,
    /// and their losses are reported as expected, not as failures. Also runs with
    /// full_page_writes=off, to test whether the storage writes 8 kB pages atomically
    /// (docs/atomic.md: amcheck and checksums after the cut are the evidence).
    #[arg(long)]
    pub allow_unsafe_config: bool,

    /// Before the run, also time a `pwrite` + `fdatasync` loop in the data directory
    /// for this many seconds, counting each leaf disk's flushes (as `plugpull probe
    /// --seconds`); its stack itself is always probed when it is on this host.
    #[arg(long, value_parser = crate::probe::seconds_arg)]
    pub probe_seconds: Option<f64>,

    /// Ack log and the bound on unconfirmed acknowledgements. Clients wait while
    /// `--max-unconfirmed` commits (all clients) await the listener's confirmation;
    /// this bounds which sequence numbers can exist after a cut, so the verifier can
    /// call anything beyond a phantom.
    #[command(flatten)]
    pub reporter: ReporterOptions,

    /// Seed of the random account, teller, branch and delta choices (default: random).
    #[arg(long, value_name = "SEED")]
    pub random_seed: Option<u64>,
}

/// Runs `plugpull write pgbench`: connects, reads and checks the server settings,
/// creates or checks the tables, starts the run at the listener, prints
/// `run id: ID` as the first line on stdout, runs the clients, and prints a
/// pgbench-style summary.
///
/// Errors (exit 2): bad options, the server unreachable or refusing us, missing
/// tables without `--init`, an unsafe configuration without `--allow-unsafe-config`,
/// the listener unreachable, a client aborted (after the summary, as pgbench). A
/// server crash during the run is not an error: the run ends, the acknowledgements
/// made stay valid, and the summary says how many clients were lost.
pub async fn write(args: &WriteArgs, listener: &str, secret: &Secret) -> Result<(), Error> {
    check_args(args)?;
    let server = setup(args).await?;
    let params = params(args, &server);
    let prepared = run::prepare(&params).await.map_err(Error::Msg)?;
    let settings = server.manifest.settings.clone();
    let head = crate::storage::write_head(&server.storage, server.probe.as_ref());
    let (reporter, run_id) = Reporter::start_with(
        listener,
        secret,
        make_manifest(Workload::Pgbench(server.manifest), server.storage),
        &args.reporter,
    )
    .await?;
    if !args.json {
        println!("run id: {run_id}");
        println!("{head}");
    }
    let out = prepared.go(run_id, reporter.sink()).await;
    // The server's loss is the moment of the cut (verify's exposure counts from it).
    let lost_ms = out.server_lost.map(|t| u64::from(reporter.sink().ms_at(t)));
    let confirmed = reporter
        .finish(RunSummary {
            issued: out.attempts,
            acknowledged: out.committed,
            duration_ms: out.elapsed.as_millis() as u64,
            flushes: None,
            lost_ms,
        })
        .await?;
    let warnings = server.probe.map(|p| p.warnings).unwrap_or_default();
    summary::print(
        args.json, run_id, &params, &settings, &out, confirmed, &warnings,
    );
    if out.aborted_clients > 0 {
        // As pgbench: a run with an aborted client is incomplete (exit 2). Its
        // acknowledgements stay valid: verify checks them.
        let kept = match out.committed {
            0 => "no commit was acknowledged, so verify has nothing to check".to_string(),
            1 => "its 1 acknowledged commit stays valid for verify".to_string(),
            n => format!("its {n} acknowledged commits stay valid for verify"),
        };
        return Err(Error::Msg(format!(
            "{} of {} clients aborted (their errors are above): the run is incomplete; {kept}",
            out.aborted_clients, params.clients
        )));
    }
    Ok(())
}

/// Refuses option combinations clap cannot: more threads than clients, a pipeline
/// without prepared statements.
fn check_args(args: &WriteArgs) -> Result<(), Error> {
    if args.jobs > args.clients {
        return Err(Error::Msg(format!(
            "--jobs {} is more than --clients {}: each thread needs a client",
            args.jobs, args.clients
        )));
    }
    if args.pipeline && args.protocol != Protocol::Prepared {
        return Err(Error::Msg("--pipeline needs --protocol prepared".into()));
    }
    Ok(())
}

/// The server side of a run, read before it starts.
struct Server {
    /// Connection settings for the clients.
    cfg: pg::ConnConfig,
    /// The server's [`pg::SERVER_IDENTITY_SQL`]: every client must reach it.
    identity: String,
    /// What the ledger records of the run.
    manifest: PgManifest,
    /// The storage under the data directory.
    storage: plugpull::ledger::Storage,
    /// Its probe, to print; `None` when not probed.
    probe: Option<plugpull::probe::Probe>,
}

/// Connects, reads the server settings (refusing an unsafe configuration unless
/// `--allow-unsafe-config`), creates or checks the tables, and reads the balance
/// sums and the checksum-failure counter the verifier starts from.
async fn setup(args: &WriteArgs) -> Result<Server, Error> {
    let cfg = pg::config(args.dsn.as_deref()).map_err(Error::Msg)?;
    let conninfo = pg::redacted(&cfg);
    let client = pg::connect(&cfg).await.map_err(|e| {
        Error::Msg(format!(
            "cannot connect to PostgreSQL at {conninfo}: {}",
            pg::describe_connect(&cfg, &e)
        ))
    })?;
    let settings = pg::read_settings(&client).await.map_err(|e| {
        Error::Msg(format!(
            "cannot read the server settings: {}",
            pg::describe(&e)
        ))
    })?;
    let promised = check_promised(args, &settings)?;
    let identity: String = client
        .query_one(pg::SERVER_IDENTITY_SQL, &[])
        .await
        .map_err(|e| Error::Msg(format!("cannot identify the server: {}", pg::describe(&e))))?
        .get(0);
    let scale = tables(args, &client).await?;
    let start_sums = schema::sums(&client).await.map_err(|e| {
        Error::Msg(format!(
            "cannot read the balance sums: {}",
            pg::describe(&e)
        ))
    })?;
    let (checksum_failures_start, stats_reset_start) =
        damage::counter(&client).await.map_err(|e| {
            Error::Msg(format!(
                "cannot read pg_stat_database: {}",
                pg::describe(&e)
            ))
        })?;
    let relations = schema::relations(&client).await.map_err(|e| {
        Error::Msg(format!(
            "cannot read the pgbench tables' files: {}",
            pg::describe(&e)
        ))
    })?;
    let (storage, probe) = crate::storage::probe_server_for_run(
        &client,
        &conninfo,
        settings.clone(),
        args.probe_seconds,
    )
    .await;
    drop(client);
    let manifest = PgManifest {
        conninfo,
        scale,
        clients: args.clients,
        jobs: args.jobs,
        protocol: args.protocol,
        data_mount: mount_of(&settings.data_directory),
        settings,
        promised,
        max_unconfirmed: args.reporter.max_unconfirmed_or(PG_MAX_UNCONFIRMED),
        start_sums,
        checksum_failures_start,
        stats_reset_start,
        pipeline: args.pipeline,
        relations,
    };
    Ok(Server {
        cfg,
        identity,
        manifest,
        storage,
        probe,
    })
}

/// Whether a successful COMMIT promises durability with these settings. When it
/// does not: an error, or with `--allow-unsafe-config` a warning on stderr.
fn check_promised(args: &WriteArgs, settings: &PgSettings) -> Result<bool, Error> {
    let unsafe_settings = pg::unsafe_settings(settings);
    let promised = unsafe_settings.is_empty();
    if !promised {
        let list = unsafe_settings.join(", ");
        if !args.allow_unsafe_config {
            return Err(Error::Msg(format!(
                "refusing to start: the server has {list}, so a successful COMMIT does not promise \
                 durability; fix the configuration, or pass --allow-unsafe-config to measure anyway \
                 (losses are then reported as unpromised)"
            )));
        }
        eprintln!(
            "warning: {list}: COMMIT does not promise durability; acknowledgements are recorded as not promised"
        );
    }
    check_full_page_writes(args, settings)?;
    Ok(promised)
}

/// `full_page_writes=off`: a data page torn by a cut cannot be restored from WAL, so
/// it is refused without `--allow-unsafe-config`; with it the run tests whether the
/// storage writes 8 kB pages atomically (`docs/atomic.md`), and says so on stderr.
/// Commits stay promised: WAL is still flushed at each `COMMIT`.
fn check_full_page_writes(args: &WriteArgs, settings: &PgSettings) -> Result<(), Error> {
    if settings.full_page_writes != "off" {
        return Ok(());
    }
    if !args.allow_unsafe_config {
        return Err(Error::Msg(
            "refusing to start: the server has full_page_writes=off, so a data page torn by a cut \
             cannot be restored from WAL; set full_page_writes=on, or pass --allow-unsafe-config to test \
             whether this storage writes 8 kB pages atomically (docs/atomic.md)"
                .into(),
        ));
    }
    eprintln!("warning: {}", FPW_OFF_LABEL);
    Ok(())
}

/// What a run with `full_page_writes=off` is, as the write and verify say it.
pub const FPW_OFF_LABEL: &str = "full_page_writes=off (allowed by --allow-unsafe-config): this run tests whether \
     the storage writes 8 kB pages atomically; after the cut, verify's amcheck and checksum results are the \
     evidence (docs/atomic.md)";

/// Creates (`--init`) or checks the pgbench tables and vacuums the small ones;
/// returns the scale. (Whether `aid` is `bigint` does not matter: the clients send
/// their values as text and the server types them by the column.)
async fn tables(args: &WriteArgs, client: &tokio_postgres::Client) -> Result<u32, Error> {
    let scale = if args.init {
        schema::init(client, args.scale).await
    } else {
        schema::check(client).await
    }
    .map_err(Error::Msg)?;
    // Like pgbench: vacuum the small tables (but never truncate the history, which
    // may hold the tags of runs not yet verified).
    schema::vacuum(client, &["pgbench_branches", "pgbench_tellers"], false)
        .await
        .map_err(Error::Msg)?;
    Ok(scale)
}

/// What the clients need, from the options and the server.
fn params(args: &WriteArgs, server: &Server) -> run::Params {
    let limit = match (args.duration, args.transactions) {
        (_, Some(n)) => run::Limit::Transactions(n),
        (Some(d), None) => run::Limit::Duration(d),
        (None, None) => run::Limit::Duration(crate::run::DEFAULT_DURATION),
    };
    run::Params {
        cfg: server.cfg.clone(),
        server: server.identity.clone(),
        scale: server.manifest.scale,
        clients: args.clients,
        jobs: args.jobs,
        limit,
        protocol: args.protocol,
        pipeline: args.pipeline,
        progress: args.progress.map(Duration::from_secs),
        max_unconfirmed: args.reporter.max_unconfirmed_or(PG_MAX_UNCONFIRMED),
        seed: args.random_seed.unwrap_or_else(rand::random),
    }
}

/// The `/proc/mounts` line (`device mountpoint fstype options`) of the mount
/// holding `path`, when `path` exists on this host; empty otherwise.
fn mount_of(path: &str) -> String {
    let Ok(real) = std::fs::canonicalize(path) else {
        return String::new();
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return String::new();
    };
    let unescape = |s: &str| s.replace("\\040", " ").replace("\\011", "\t");
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() >= 4).then(|| {
                (
                    unescape(f[1]),
                    format!("{} {} {} {}", f[0], f[1], f[2], f[3]),
                )
            })
        })
        .filter(|(mp, _)| real.starts_with(mp))
        .max_by_key(|(mp, _)| mp.len())
        .map(|(_, line)| line)
        .unwrap_or_default()
}
