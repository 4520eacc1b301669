//! The hand-over of acknowledgements from workload threads to the reporter task: one
//! lane per [`super::AckSink`] (a workload thread's own queue), drained whole by the
//! task.
//!
//! A sink pushes each ack onto its own lane the moment it is made: a lock no other
//! thread takes but the task (which takes each lane's queue at once, every
//! [`super::LINGER`] while acks come), and a `Vec` push. Threads never touch each
//! other's lanes, so the hand-over costs no shared-line traffic between writers (a
//! shared channel's tail, semaphore and waker would each be a read-modify-write of a
//! line every writer and the task write), and the task takes a lane's acks at once,
//! not one `try_recv` at a time. `docs/performance.md` ("`write file`") has the
//! measured difference.
//!
//! Waking the task: it waits only when it found every lane empty, and marks each lane
//! it found empty as watched, under that lane's lock ([`Lanes::wait`]), then sleeps on
//! a [`Notify`]; a sink whose push finds its lane watched (under the same lock) clears
//! the mark and notifies. The lock orders the two: either the task saw the ack, or the
//! sink sees the mark. `Notify` keeps one permit when nobody waits yet, so a
//! notification just before the task sleeps is not lost. A spurious wake-up (a mark
//! left from a wait that was cancelled) finds nothing and waits again.
//!
//! Order: a lane keeps its sink's acks in the order they were handed over (a pgbench
//! client's commits, a files worker's steps); acks of different lanes have no order
//! between them, as they had none in a shared queue beyond the moment they arrived.

use plugpull::ledger::Ack;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// One sink's queue, alone on its cache lines.
#[repr(align(128))]
struct Lane {
    queue: Mutex<Queue>,
    /// Since when (ms after the run's start, plus 1) the sink's oldest write or
    /// transaction still in flight was issued; 0 when none is. Only its sink writes
    /// it; the task reads it when it seals a batch.
    busy_since: AtomicU64,
}

/// What a lane's lock guards.
struct Queue {
    acks: Vec<Ack>,
    /// The task found this lane empty and may be asleep: the next push wakes it.
    /// A new lane starts watched: the task may have gone to sleep before it was
    /// opened, and has never looked at it.
    watched: bool,
}

/// Every lane of one reporter, the count of live sinks and the task's wake-up.
#[derive(Default)]
pub(super) struct Lanes {
    /// Every lane made so far that may still hold acks (a dropped sink's lane stays
    /// until the task has taken its queue).
    lanes: Mutex<Vec<Arc<Lane>>>,
    /// Sinks alive: when it falls to 0 and the lanes are empty, no ack can come.
    live: AtomicUsize,
    /// What a push to a watched lane, or the last sink going, wakes the task with.
    wake: Notify,
}

/// A sink's end of its lane. Dropping it counts the sink out (and wakes the task
/// when it was the last one).
pub(super) struct LaneTx {
    /// `None` only while dropping: the lane is let go before the sink is counted
    /// out, so a task woken by the last sink finds the lane free to forget.
    lane: Option<Arc<Lane>>,
    lanes: Arc<Lanes>,
}

impl Lanes {
    /// A new lane for a new sink.
    pub(super) fn open(self: &Arc<Lanes>) -> LaneTx {
        let lane = Arc::new(Lane {
            queue: Mutex::new(Queue {
                acks: Vec::new(),
                watched: true,
            }),
            busy_since: AtomicU64::new(0),
        });
        self.lanes.lock().unwrap().push(lane.clone());
        self.live.fetch_add(1, Ordering::SeqCst);
        LaneTx {
            lane: Some(lane),
            lanes: self.clone(),
        }
    }

    /// Moves every queued ack, lane by lane (each lane's in its order), into `out`;
    /// returns how many. Forgets the lanes of dropped sinks once emptied.
    pub(super) fn take(&self, out: &mut Vec<Ack>) -> usize {
        let before = out.len();
        let mut lanes = self.lanes.lock().unwrap();
        lanes.retain(|lane| {
            let mut q = lane.queue.lock().unwrap();
            out.append(&mut q.acks);
            // Only the registry holds a dropped sink's lane: nothing more can come.
            Arc::strong_count(lane) > 1
        });
        out.len() - before
    }

    /// The issue time (ms after the run's start) of the oldest write or transaction
    /// any sink has in flight now, if one has.
    pub(super) fn oldest_in_flight(&self) -> Option<u64> {
        self.lanes
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.busy_since.load(Ordering::Relaxed))
            .filter(|&v| v > 0)
            .min()
            .map(|v| v - 1)
    }

    /// True once every sink is gone and every lane taken: no ack can come any more.
    pub(super) fn closed(&self) -> bool {
        self.live.load(Ordering::SeqCst) == 0 && self.lanes.lock().unwrap().is_empty()
    }

    /// Marks every empty lane watched; false (marking stops) at the first lane that
    /// holds an ack.
    fn watch_empty(&self) -> bool {
        self.lanes.lock().unwrap().iter().all(|l| {
            let mut q = l.queue.lock().unwrap();
            q.watched = q.acks.is_empty();
            q.watched
        })
    }

    /// Waits until an ack may have been handed over since the lanes were last found
    /// empty, or the last sink went; returns at once when a lane holds one already.
    /// May return with nothing to take (the caller takes and looks again). Cancel-safe:
    /// dropped early, it leaves lanes watched, and their next push only notifies once
    /// more.
    pub(super) async fn wait(&self) {
        if !self.watch_empty() || self.live.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.wake.notified().await;
    }
}

impl LaneTx {
    /// Queues `m` on this sink's lane and wakes the task if it watches the lane.
    pub(super) fn push(&self, m: Ack) {
        let lane = self.lane.as_ref().expect("a live sink has its lane");
        let watched = {
            let mut q = lane.queue.lock().unwrap();
            q.acks.push(m);
            std::mem::take(&mut q.watched)
        };
        if watched {
            self.lanes.wake.notify_one();
        }
    }

    /// Says this sink's oldest write in flight was issued at `ms` after the run's
    /// start (`None`: nothing in flight).
    pub(super) fn set_in_flight(&self, ms: Option<u64>) {
        let lane = self.lane.as_ref().expect("a live sink has its lane");
        lane.busy_since
            .store(ms.map_or(0, |m| m + 1), Ordering::Relaxed);
    }

    /// Another sink's end: a lane of its own.
    pub(super) fn open_another(&self) -> LaneTx {
        self.lanes.open()
    }
}

impl Drop for LaneTx {
    fn drop(&mut self) {
        // Let go of the lane first: the task woken below must find that only the
        // registry holds it (else it keeps the lane and looks again at once).
        drop(self.lane.take());
        if self.lanes.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The last sink: the task must learn that no more acks can come.
            self.lanes.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plugpull::ledger::FileAck;
    use std::time::Duration;

    fn ack(seq: u64) -> Ack {
        Ack::File(FileAck {
            seq,
            block: seq,
            ms: 0,
        })
    }

    fn seqs(v: &[Ack]) -> Vec<u64> {
        v.iter()
            .map(|m| match m {
                Ack::File(a) => a.seq,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn each_lane_keeps_its_order_and_a_dropped_sinks_lane_goes_once_taken() {
        let lanes = Arc::new(Lanes::default());
        let (a, b) = (lanes.open(), lanes.open());
        a.push(ack(1));
        b.push(ack(10));
        a.push(ack(2));
        b.push(ack(11));
        let mut out = Vec::new();
        assert_eq!(lanes.take(&mut out), 4);
        assert_eq!(seqs(&out), vec![1, 2, 10, 11]);
        a.push(ack(3));
        drop(a);
        assert!(!lanes.closed());
        out.clear();
        assert_eq!(lanes.take(&mut out), 1);
        assert_eq!(seqs(&out), vec![3]);
        assert_eq!(lanes.lanes.lock().unwrap().len(), 1);
        drop(b);
        assert!(!lanes.closed(), "b's lane is still registered");
        assert_eq!(lanes.take(&mut out), 0);
        assert!(lanes.closed());
    }

    #[test]
    fn a_lane_opened_while_the_task_sleeps_wakes_it_on_its_first_push() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let lanes = Arc::new(Lanes::default());
        let first = lanes.open();
        rt.block_on(async {
            let waiting = {
                let lanes = lanes.clone();
                tokio::spawn(async move { lanes.wait().await })
            };
            // The task is asleep on the lanes it knew of.
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished());
            let late = lanes.open();
            late.push(ack(1));
            tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("a push on a lane opened after the task slept did not wake it")
                .unwrap();
            drop(late);
        });
        let mut out = Vec::new();
        assert_eq!(lanes.take(&mut out), 1);
        drop(first);
    }

    #[test]
    fn a_push_after_the_task_found_every_lane_empty_wakes_it_and_none_is_lost() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        const N: u64 = 20_000;
        let lanes = Arc::new(Lanes::default());
        let txs: Vec<LaneTx> = (0..4).map(|_| lanes.open()).collect();
        // The writers keep their sinks until the task has every ack: only pushes can
        // wake it meanwhile (the last sink going would wake it too, and hide a lost
        // wake-up).
        let all_taken = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let got = rt.block_on(async {
            let task = {
                let (lanes, all_taken) = (lanes.clone(), all_taken.clone());
                tokio::spawn(async move {
                    let (mut out, mut waits) = (Vec::new(), 0);
                    while (out.len() as u64) < 4 * N {
                        if lanes.take(&mut out) == 0 {
                            // A lost wake-up hangs here: the timeout says so.
                            tokio::time::timeout(Duration::from_secs(10), lanes.wait())
                                .await
                                .expect("a push did not wake the waiting task");
                            waits += 1;
                        }
                    }
                    all_taken.store(true, Ordering::SeqCst);
                    (out, waits)
                })
            };
            let writers: Vec<_> = txs
                .into_iter()
                .enumerate()
                .map(|(w, tx)| {
                    let all_taken = all_taken.clone();
                    std::thread::spawn(move || {
                        for i in 0..N {
                            tx.push(ack(w as u64 * N + i));
                            if i % 1000 == 0 {
                                // Pauses, so the task goes to sleep now and then.
                                std::thread::sleep(Duration::from_millis(1));
                            }
                        }
                        while !all_taken.load(Ordering::SeqCst) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    })
                })
                .collect();
            let got = task.await.unwrap();
            for w in writers {
                w.join().unwrap();
            }
            got
        });
        // Every sink gone, every lane taken: closed.
        assert_eq!(lanes.take(&mut Vec::new()), 0);
        assert!(lanes.closed());
        let (got, waits) = got;
        // The writers' pauses let the task find the lanes empty and sleep.
        assert!(waits > 0);
        let mut all = seqs(&got);
        // Each writer's acks arrived in its order.
        for w in 0..4 {
            let mine: Vec<u64> = all.iter().copied().filter(|s| s / N == w).collect();
            assert_eq!(mine, (w * N..(w + 1) * N).collect::<Vec<_>>());
        }
        all.sort_unstable();
        assert_eq!(all, (0..4 * N).collect::<Vec<_>>());
    }
}
