//! The accept loop: where connections come in and what they may cost.
//!
//! [`serve`] loads the secret, applies the loopback-without-secret rule (a listener
//! reachable from other hosts needs a secret unless `--insecure`), opens the store,
//! binds, prints `listening on IP:PORT` as the first line on stdout, and then hands
//! every accepted connection to its own task ([`crate::session`]).
//!
//! Two budgets keep unauthenticated peers from locking agents out
//! ([`crate::limits`]): the handshakes open at once, and the authenticated
//! connections.

use crate::limits::{ConnectionCap, HandshakeBudget};
use crate::session::{self, Dropped};
use crate::store::Store;
use plugpull::auth::Secret;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// What the listener needs to run (the command line, parsed).
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Directory for ledgers (created if missing).
    pub data_dir: PathBuf,
    /// File holding the shared secret (else the `PLUGPULL_SECRET` variable).
    pub secret_file: Option<PathBuf>,
    /// Allow a non-loopback `listen` address without a secret.
    pub insecure: bool,
    /// Most authenticated connections served at once.
    pub max_connections: usize,
    /// Most connections in their handshake at once (at least 1 is used).
    pub max_handshakes: usize,
    /// Time a new connection has to complete its handshake.
    pub handshake_timeout: Duration,
    /// Time an authenticated connection may stay silent before it is dropped.
    pub idle_timeout: Duration,
    /// Sleep before every ledger `fdatasync` (tests only: a slow witness disk).
    pub sync_delay: Duration,
}

/// Runs the listener until the process ends.
///
/// Errors (the message the binary prints before exiting 2): the secret cannot be
/// loaded, no secret on a non-loopback address without `insecure`, the data directory
/// cannot be opened ([`crate::store::StoreError`]), or the address cannot be bound.
pub async fn serve(config: Config) -> Result<(), String> {
    let secret = Secret::load(config.secret_file.as_deref())?;
    if secret.is_none() {
        if !config.listen.ip().is_loopback() && !config.insecure {
            return Err(format!(
                "refusing to listen on {} without a secret: give --secret-file or PLUGPULL_SECRET, or --insecure",
                config.listen
            ));
        }
        tracing::warn!("no secret: any peer that can connect can add acks and read ledgers");
    }
    if !config.sync_delay.is_zero() {
        tracing::warn!(
            ms = config.sync_delay.as_millis() as u64,
            "--test-sync-delay-ms is for tests only: every ledger sync is slowed down"
        );
    }
    let store = Store::open(&config.data_dir, config.sync_delay).map_err(|e| e.to_string())?;
    let listener = bind(config.listen).await?;
    let ctx = Arc::new(session::Context {
        store: Arc::new(store),
        campaigns: Arc::new(crate::campaigns::Campaigns::open(&config.data_dir)?),
        verified: Arc::new(crate::verified::Verified::open(&config.data_dir)?),
        secret,
        handshake_timeout: config.handshake_timeout,
        idle_timeout: config.idle_timeout,
        cap: ConnectionCap::new(config.max_connections),
    });
    let budget = Arc::new(HandshakeBudget::new(config.max_handshakes));
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let ticket = budget.enter();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            match session::connection(sock, &ctx, ticket).await {
                Err(why @ Dropped::Evicted) => tracing::debug!(%peer, "dropped connection: {why}"),
                Err(why) => tracing::warn!(%peer, "dropped connection: {why}"),
                Ok(()) => {}
            }
        });
    }
}

/// Binds `addr` and prints `listening on IP:PORT` (the bound address) on stdout.
async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    Ok(listener)
}
