//! The accept loop: where connections come in and what they may cost.
//!
//! [`serve`] loads the secret, applies the loopback-without-secret rule (a listener
//! reachable from other hosts needs a secret unless `--insecure`), opens the store,
//! binds, prints `listening on IP:PORT` as the first line on stdout, and then hands
//! every accepted connection to its own task ([`crate::session`]).
//!
//! Two budgets keep unauthenticated peers from locking agents out:
//! * [`HandshakeBudget`]: at most `max_handshakes` connections in their handshake at
//!   once; when it is full, the oldest handshake is dropped for the newcomer.
//! * [`ConnectionCap`]: at most `max_connections` authenticated connections; one more
//!   is refused with `Busy` at the end of its handshake.

use crate::session::{self, Dropped};
use crate::store::Store;
use plugpull::auth::Secret;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

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

/// The connections in their handshake, oldest first, at most `max`.
pub struct HandshakeBudget {
    max: usize,
    /// The last id given, and the open handshakes by id: dropping a sender evicts one.
    open: Mutex<(u64, BTreeMap<u64, oneshot::Sender<()>>)>,
}

impl HandshakeBudget {
    /// A budget of `max` handshakes (at least 1).
    pub fn new(max: usize) -> HandshakeBudget {
        HandshakeBudget {
            max: max.max(1),
            open: Mutex::new((0, BTreeMap::new())),
        }
    }

    /// Registers a new handshake, first dropping the oldest one if the budget is full.
    pub fn enter(self: &Arc<Self>) -> Handshake {
        let (kill_tx, kill_rx) = oneshot::channel();
        let mut open = self.open.lock().unwrap();
        if open.1.len() >= self.max {
            // Dropping its sender ends the oldest handshake.
            open.1.pop_first();
        }
        open.0 += 1;
        let id = open.0;
        open.1.insert(id, kill_tx);
        Handshake {
            id,
            budget: self.clone(),
            kill: kill_rx,
        }
    }
}

/// One connection's place in the [`HandshakeBudget`]; given up by [`Handshake::leave`]
/// or when dropped.
pub struct Handshake {
    id: u64,
    budget: Arc<HandshakeBudget>,
    kill: oneshot::Receiver<()>,
}

impl Handshake {
    /// Resolves when the budget drops this handshake for a newer one.
    pub async fn evicted(&mut self) {
        let _ = (&mut self.kill).await;
    }

    /// Gives up the place (the handshake is over); it can no longer be evicted.
    pub fn leave(&self) {
        self.budget.open.lock().unwrap().1.remove(&self.id);
    }
}

impl Drop for Handshake {
    fn drop(&mut self) {
        self.leave();
    }
}

/// The cap on authenticated connections.
pub struct ConnectionCap {
    max: usize,
    slots: Arc<Semaphore>,
}

impl ConnectionCap {
    /// A cap of `max` connections.
    pub fn new(max: usize) -> ConnectionCap {
        ConnectionCap {
            max,
            slots: Arc::new(Semaphore::new(max)),
        }
    }

    /// A slot, held by the connection until it ends; or, when all are taken, the
    /// message to refuse it with (`Busy`).
    pub fn try_admit(&self) -> Result<OwnedSemaphorePermit, String> {
        self.slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| format!("listener busy: {} connections already", self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_handshake_budget_evicts_its_oldest_handshake() {
        let budget = Arc::new(HandshakeBudget::new(2));
        let mut first = budget.enter();
        let mut second = budget.enter();
        let third = budget.enter();
        let soon = Duration::from_millis(50);
        assert!(tokio::time::timeout(soon, first.evicted()).await.is_ok());
        assert!(tokio::time::timeout(soon, second.evicted()).await.is_err());
        let open =
            |b: &HandshakeBudget| b.open.lock().unwrap().1.keys().copied().collect::<Vec<_>>();
        assert_eq!(open(&budget), [2, 3]);
        second.leave();
        assert_eq!(open(&budget), [3]);
        drop(third);
        assert_eq!(open(&budget), Vec::<u64>::new());
    }

    #[test]
    fn the_connection_cap_refuses_one_more_until_a_slot_is_freed() {
        let cap = ConnectionCap::new(1);
        let slot = cap.try_admit().unwrap();
        assert_eq!(
            cap.try_admit().unwrap_err(),
            "listener busy: 1 connections already"
        );
        drop(slot);
        assert!(cap.try_admit().is_ok());
    }
}
