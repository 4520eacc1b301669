//! The other runs whose records a file run's target holds: earlier runs on the same
//! target (its prior contents) or later ones (the target was reused). Verify looks
//! their manifests up through [`OtherRuns`]: at the listener ([`ListenerRuns`]), or,
//! in tests, in a table.

use crate::target_id;
use plugpull::auth::Secret;
use plugpull::ledger::{FileManifest, Manifest, RunLedger, Workload};
use plugpull::RunId;
use std::future::Future;

/// Where verify looks up another run's manifest.
pub trait OtherRuns {
    /// The manifest of run `run`, or `None` when it cannot be had (unknown run,
    /// unreachable listener, a ledger that cannot be judged).
    fn manifest(&self, run: RunId) -> impl Future<Output = Option<Manifest>> + Send;
}

/// The listener's record: each run's ledger fetched and checked whole.
pub struct ListenerRuns<'a> {
    /// The listener (`HOST:PORT`).
    pub addr: &'a str,
    /// Its secret.
    pub secret: &'a Secret,
}

impl OtherRuns for ListenerRuns<'_> {
    fn manifest(&self, run: RunId) -> impl Future<Output = Option<Manifest>> + Send {
        let (addr, secret) = (self.addr, self.secret);
        async move {
            crate::ledger::fetch(addr, secret, Some(run), "")
                .await
                .ok()
                .map(|o| o.manifest)
        }
    }
}

/// Places the runs `found` on run `l`'s target (its manifest `fm`): earlier than `l`
/// on the same target (the manifest's `prior_runs`, or created before it by the
/// listener: a sampled start-of-run scan can miss them), or later on the same target
/// (it was reused). A run whose manifest cannot be had, or that was on another target
/// or another workload, is neither. Returns `(prior, reused_by)`.
pub async fn place_other_runs(
    l: &RunLedger,
    fm: &FileManifest,
    found: &[RunId],
    others: &impl OtherRuns,
) -> (Vec<RunId>, Vec<RunId>) {
    let mut prior = fm.prior_runs.clone();
    let mut reused_by = Vec::new();
    for &r in found {
        if prior.contains(&r) {
            continue;
        }
        let Some(o) = others.manifest(r).await else {
            continue;
        };
        let same = match &o.workload {
            Workload::File(ofm) => {
                ofm.target == fm.target || target_id::same_target(&ofm.identity, &fm.identity)
            }
            Workload::Pgbench(_) | Workload::Files(_) => false,
        };
        let order = o.listener_order;
        if same && order > 0 && order < l.manifest.listener_order {
            prior.push(r);
        } else if same && order > l.manifest.listener_order {
            reused_by.push(r);
        }
    }
    (prior, reused_by)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Other runs' manifests in a table.
    struct Table(HashMap<RunId, Manifest>);

    impl OtherRuns for Table {
        fn manifest(&self, run: RunId) -> impl Future<Output = Option<Manifest>> + Send {
            let m = self.0.get(&run).cloned();
            async move { m }
        }
    }

    fn run_on(target: &str, order: u64) -> Manifest {
        Manifest {
            listener_order: order,
            ..Manifest::example_file("sut", target, 1 << 20, 4096)
        }
    }

    #[tokio::test]
    async fn other_runs_are_placed_by_target_and_listener_order() {
        let me = run_on("/mnt/t.dat", 5);
        let l = RunLedger {
            finished: true,
            ..RunLedger::of_batches(RunId(50), me.clone(), Vec::new())
        };
        let Workload::File(mut fm) = me.workload else {
            unreachable!()
        };
        fm.prior_runs = vec![RunId(1)];
        let table = Table(HashMap::from([
            (RunId(2), run_on("/mnt/t.dat", 3)),
            (RunId(3), run_on("/mnt/t.dat", 9)),
            (RunId(4), run_on("/mnt/other.dat", 2)),
            (RunId(5), run_on("/mnt/other.dat", 8)),
            (RunId(6), Manifest::example_pgbench("sut")),
        ]));
        // Run 1 is listed by the manifest; 7 cannot be looked up.
        let found = [1, 2, 3, 4, 5, 6, 7].map(RunId);
        let (prior, reused_by) = place_other_runs(&l, &fm, &found, &table).await;
        assert_eq!(prior, [RunId(1), RunId(2)]);
        assert_eq!(reused_by, [RunId(3)]);
    }
}
