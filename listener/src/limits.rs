//! What a connection may cost before and after it authenticates; two budgets keep
//! unauthenticated peers from locking agents out:
//! * [`HandshakeBudget`]: at most `max_handshakes` connections in their handshake at
//!   once; when it is full, the oldest handshake is dropped for the newcomer.
//! * [`ConnectionCap`]: at most `max_connections` authenticated connections; one more
//!   is refused with `Busy` at the end of its handshake.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

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
    use std::time::Duration;

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
