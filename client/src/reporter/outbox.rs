//! The reporter's outbox: the pure state machine between acks handed over and acks
//! the listener confirmed. No sockets, no tasks, no clock: the reporter task
//! ([`super::task`]) drives it and does the I/O.
//!
//! An ack goes through three places:
//! 1. *gathered*: added to the next batch ([`Outbox::add`]); pgbench commits of one
//!    client with consecutive sequence numbers merge into one range;
//! 2. *pending*: sealed into a numbered batch ([`Outbox::seal`]), numbers 1, 2, 3, …
//!    without gaps; sent at most once per connection ([`Outbox::next_unsent`],
//!    [`Outbox::sent`]);
//! 3. *confirmed*: the listener said batch `b` is durable, which covers every batch
//!    up to `b` ([`Outbox::confirm`]); those batches leave the outbox.
//!
//! After a reconnect the listener says which batch it holds last
//! ([`Outbox::resume`]): the batches up to it are confirmed, and every later one is
//! sent again, in order. Batches are idempotent by number at the listener, so a
//! batch sent twice is stored once.
//!
//! The listener's word is checked: a confirmation below an earlier one (it lost what
//! it had made durable) or above the highest batch sealed is a [`BadConfirm`], which
//! the reporter treats as a witness fault.

use plugpull::ledger::{Ack, AckBatch, Acks, FlushSample, Gather};
use std::collections::VecDeque;

/// Whether `waiting` acks (handed over, not yet confirmed) exceed the
/// `--max-unconfirmed` bound `max`: writers pause while more than `max` wait, and go
/// on again once no more than `max` do.
pub(super) fn over_bound(waiting: u64, max: u64) -> bool {
    waiting > max
}

/// Why a `Confirmed` or `Resumed` from the listener cannot be true.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum BadConfirm {
    /// It named `batch` after it had already confirmed the later batch `told`: it
    /// lost acknowledgements it had made durable.
    Regressed { batch: u64, told: u64 },
    /// It named `batch`, but only batches up to `highest` were sealed (0: none).
    Unsent { batch: u64, highest: u64 },
}

/// Acks on their way from the workload to the ledger (see the module doc).
pub(super) struct Outbox {
    /// Whether the acks are durability promises (stamped on every batch).
    promised: bool,
    gather: Gather,
    /// Sealed batches not yet confirmed, in batch order, numbers contiguous.
    pending: VecDeque<AckBatch>,
    /// Number of the next batch sealed.
    next_batch: u64,
    /// Highest batch sent on the current connection.
    sent_upto: u64,
    /// Highest batch the listener has said is durable.
    told: u64,
}

/// What every batch carries besides its acks (`AckBatch::sealed_ms`, `canary`,
/// `oldest_in_flight_ms`), taken when it is sealed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Stamp {
    /// The run's clock, ms after its start.
    pub(super) ms: u32,
    /// The newest canary record written.
    pub(super) canary: u64,
    /// When the oldest write in flight was issued, ms after the run's start.
    pub(super) oldest_in_flight_ms: Option<u32>,
}

impl Outbox {
    /// An empty outbox; the first batch sealed is number 1.
    pub(super) fn new(promised: bool) -> Outbox {
        Outbox {
            promised,
            gather: Gather::default(),
            pending: VecDeque::new(),
            next_batch: 1,
            sent_upto: 0,
            told: 0,
        }
    }

    /// Adds one ack to the next batch.
    pub(super) fn add(&mut self, m: Ack) {
        self.gather.add(m);
    }

    /// The number the next batch sealed gets.
    pub(super) fn next_batch(&self) -> u64 {
        self.next_batch
    }

    /// Acks added since the last [`Outbox::seal`].
    pub(super) fn gathered(&self) -> usize {
        self.gather.len()
    }

    /// Turns the gathered acks into numbered batches waiting to be sent (one per
    /// workload kind present). True when acks begin to wait now: nothing was pending
    /// and something was gathered (a stall is measured from here).
    ///
    /// `flushes`, the leaf disks' flush counters sampled now (after every gathered
    /// ack was acknowledged), goes with the last batch sealed; with nothing gathered
    /// it is dropped.
    ///
    /// `stamp` is what every batch sealed carries: the run's clock now, the newest
    /// canary record written, the oldest write in flight.
    pub(super) fn seal(&mut self, flushes: Option<FlushSample>, stamp: Stamp) -> bool {
        let began = self.pending.is_empty() && !self.gather.is_empty();
        let first = self.next_batch;
        for acks in self.gather.take() {
            self.pending.push_back(AckBatch {
                batch: self.next_batch,
                promised: self.promised,
                acks,
                flushes: None,
                sealed_ms: stamp.ms,
                canary: stamp.canary,
                oldest_in_flight_ms: stamp.oldest_in_flight_ms,
            });
            self.next_batch += 1;
        }
        if self.next_batch > first {
            if let Some(last) = self.pending.back_mut() {
                last.flushes = flushes;
            }
        }
        began
    }

    /// Seals a batch with no acks (`empty`, the workload's kind) stamped `stamp`:
    /// the heartbeat that tells the listener the agent still runs.
    pub(super) fn heartbeat(&mut self, empty: Acks, stamp: Stamp) {
        self.pending.push_back(AckBatch {
            batch: self.next_batch,
            promised: self.promised,
            acks: empty,
            flushes: None,
            sealed_ms: stamp.ms,
            canary: stamp.canary,
            oldest_in_flight_ms: stamp.oldest_in_flight_ms,
        });
        self.next_batch += 1;
    }

    /// The first pending batch not yet sent on the current connection.
    pub(super) fn next_unsent(&self) -> Option<&AckBatch> {
        let first = self.pending.front()?.batch;
        let i = (self.sent_upto + 1).saturating_sub(first);
        self.pending.get(usize::try_from(i).ok()?)
    }

    /// Notes that `batch` was sent on the current connection.
    pub(super) fn sent(&mut self, batch: u64) {
        self.sent_upto = batch;
    }

    /// The listener confirmed every batch up to `batch`: returns those that leave
    /// the outbox now, in order (none for a repeated confirmation).
    ///
    /// Errors: `batch` is below a batch confirmed before, or above the highest sealed;
    /// the outbox is then unchanged.
    pub(super) fn confirm(&mut self, batch: u64) -> Result<Vec<AckBatch>, BadConfirm> {
        if batch < self.told {
            return Err(BadConfirm::Regressed {
                batch,
                told: self.told,
            });
        }
        if batch >= self.next_batch {
            return Err(BadConfirm::Unsent {
                batch,
                highest: self.next_batch - 1,
            });
        }
        self.told = batch;
        let mut done = Vec::new();
        while self.pending.front().is_some_and(|b| b.batch <= batch) {
            done.extend(self.pending.pop_front());
        }
        Ok(done)
    }

    /// A new connection resumed the run after `batch`, the last the listener holds:
    /// confirms up to it (as [`Outbox::confirm`]) and makes every later pending
    /// batch unsent, so they all go again, in order.
    pub(super) fn resume(&mut self, batch: u64) -> Result<Vec<AckBatch>, BadConfirm> {
        let done = self.confirm(batch)?;
        self.sent_upto = batch;
        Ok(done)
    }

    /// True when no sealed batch waits for confirmation.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Acks in sealed batches not yet confirmed.
    #[cfg(test)]
    pub(super) fn unconfirmed(&self) -> u64 {
        self.pending.iter().map(|b| b.acks.count()).sum()
    }
}

#[cfg(test)]
mod tests;
