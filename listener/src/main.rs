//! `plugpull-listener`: the witness. It receives acknowledgements from agents, makes
//! them durable in per-run ledgers (group commit + `fdatasync`) *before* confirming
//! them, and serves ledgers to `plugpull verify`.
//!
//! Each connection is one task: a handshake under a short timeout (version check,
//! mutual HMAC proof), then requests, every one sealed with the session's MAC (see
//! `plugpull::auth`). Acks are pipelined: the reading half hands each batch to the
//! run's writer and queues the answer; the writing half sends answers in order as the
//! writer confirms them.
//!
//! Unauthenticated connections cost little and cannot lock agents out: frames before
//! the handshake is done are capped at `wire::HANDSHAKE_MAX_FRAME` bytes and read
//! without a read buffer; they have their own budget (`--max-handshakes`), and when
//! it is full the oldest one is dropped for the newcomer. Only an authenticated
//! connection takes one of the `--max-connections` slots.
//!
//! Where things are: this file parses the command line and starts the runtime;
//! [`accept`] binds and admits connections; [`session`] serves one connection
//! (handshake, requests, answers in order); [`store`] keeps the ledgers.

mod accept;
mod campaigns;
mod limits;
mod session;
mod store;
mod verified;

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The static musl builds of `scripts/release` allocate with mimalloc: musl's own
/// allocator takes one lock for every allocation, which threads contend on
/// (docs/performance.md, "Release binaries"). Other builds keep the C library's.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The plugpull witness: keeps a durable ledger of every acknowledged write.
///
/// Run it on a host that does not lose power with the machine under test. The first
/// line on stdout is `listening on IP:PORT`; logs go to stderr.
///
/// Examples:
///   plugpull-listener --listen 0.0.0.0:7458 --data-dir /var/lib/plugpull-listener --secret-file /etc/plugpull.secret
///   plugpull-listener --listen 127.0.0.1:0 --data-dir /tmp/pp
#[derive(Parser, Debug)]
#[command(name = "plugpull-listener", version, verbatim_doc_comment)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:7458")]
    listen: SocketAddr,
    /// Directory for ledgers (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// File holding the shared secret (else the PLUGPULL_SECRET variable).
    #[arg(long)]
    secret_file: Option<PathBuf>,
    /// Allow listening on a non-loopback address without a secret.
    #[arg(long)]
    insecure: bool,
    /// Most authenticated connections served at once; more are refused with a message.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Most connections in their handshake at once; when full, the oldest is dropped
    /// for a new one (so idle unauthenticated connections never lock agents out).
    #[arg(long, default_value_t = 512)]
    max_handshakes: usize,
    /// Seconds a new connection has to complete its handshake.
    #[arg(long, value_parser = plugpull::units::positive_secs, default_value_t = 3.0)]
    handshake_timeout: f64,
    /// Seconds an authenticated connection may stay silent before it is dropped.
    #[arg(long, value_parser = plugpull::units::positive_secs, default_value_t = 600.0)]
    idle_timeout: f64,
    /// FOR TESTS ONLY: sleep this many milliseconds before every ledger fdatasync,
    /// to stand in for a slow witness disk. Never use it for a real run.
    #[arg(long, default_value_t = 0, hide = true)]
    test_sync_delay_ms: u64,
}

fn main() {
    plugpull_docgen::from_env(<Args as clap::CommandFactory>::command);
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(accept::serve(args.config())) {
        eprintln!("plugpull-listener: {e}");
        std::process::exit(2);
    }
}

impl Args {
    /// What the listener needs, from the command line.
    fn config(self) -> accept::Config {
        accept::Config {
            listen: self.listen,
            data_dir: self.data_dir,
            secret_file: self.secret_file,
            insecure: self.insecure,
            max_connections: self.max_connections,
            max_handshakes: self.max_handshakes,
            handshake_timeout: Duration::from_secs_f64(self.handshake_timeout),
            idle_timeout: Duration::from_secs_f64(self.idle_timeout),
            sync_delay: Duration::from_millis(self.test_sync_delay_ms),
        }
    }
}
