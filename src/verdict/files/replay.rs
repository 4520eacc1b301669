//! The second replay of every worker's schedule: over its acknowledged steps (up to
//! its `K`) and the `window` after them, each step folded into its name ([`Name`])
//! against what the walk found of that name, so nothing is kept per step.
//!
//! A name belongs to one worker, whose steps come in order: all of the name's
//! acknowledged steps come before any of its later ones, so the promised state `S₀`
//! is known when the first later step comes.

use super::blocks::{fits, is_state, Block};
use super::promise::Unsynced;
use super::schedule::{Op, Schedule, Step, Unsafe};
use super::FilesRun;
use crate::ledger::{Expect, FilesAcks};

/// A name as the walk found it: its size and blocks (`None`: no name).
pub(super) type View<'a> = Option<(u64, &'a [Block])>;

/// One name's steps, folded.
#[derive(Debug, Default)]
pub(super) struct Name {
    /// Whether any step of the name was replayed (acknowledged or later).
    pub(super) stepped: bool,
    /// Its last acknowledged step.
    pub(super) last: Option<Step>,
    /// The state after it (`S₀`; `None`: no name).
    pub(super) s0: Option<Vec<u64>>,
    /// The index and time (ms) of its highest acknowledged step whose ack the ledger
    /// holds.
    pub(super) ms: Option<(u64, u32)>,
    /// Whether the state after an acknowledged step is the one found.
    earlier: bool,
    /// Whether an acknowledged replace came after such a step (rule 5).
    pub(super) superseded: bool,
    /// What its acknowledged steps' skipped calls leave possible.
    pub(super) unsynced: Unsynced,
    /// Its later steps (in flight at the cut, perhaps), once one came.
    pub(super) later: Option<Later>,
}

/// A name's steps after its worker's last acknowledged one.
#[derive(Debug)]
pub(super) struct Later {
    /// The state after the last of them (`None`: no name).
    prev: Option<Vec<u64>>,
    /// Whether one of them, in flight from the state before it, may leave what was found.
    pub(super) fits: bool,
    /// Whether one of them is a replace.
    pub(super) replace: bool,
}

impl Name {
    /// Folds acknowledged step `st`, which left the name as `state`.
    fn acked(&mut self, u: Unsafe, st: &Step, state: Option<&[u64]>, view: View) {
        self.stepped = true;
        // A replace after a state equal to the one found, before that state is marked:
        // the replace must come after it.
        self.superseded |= self.earlier && st.op == Op::Replace;
        if let Some((size, b)) = view {
            self.earlier |= is_state(size, b, state);
        }
        self.unsynced.step(u, st, state, view);
        self.s0 = state.map(<[u64]>::to_vec);
        self.last = Some(*st);
    }

    /// Folds later step `st`, which leaves the name as `state`.
    fn later(&mut self, u: Unsafe, st: &Step, state: Option<&[u64]>, view: View) {
        self.stepped = true;
        let l = self.later.get_or_insert_with(|| Later {
            prev: self.s0.clone(),
            fits: false,
            replace: false,
        });
        l.fits |= fits(l.prev.as_deref(), st, u, view);
        l.replace |= st.op == Op::Replace;
        l.prev = state.map(<[u64]>::to_vec);
    }
}

/// Replays every worker's schedule over its acknowledged steps and the `r.window`
/// after them, folding each into its name (`views`: each name as found, by file
/// number), and checks the acks `fold` kept to check against their step.
///
/// Returns the names and the lowest seq of an ack kept to check that no acknowledged
/// step reached (`None`: every one was reached).
///
/// Errors: such an ack names a file or state its step does not (the first by worker,
/// then step).
pub(super) fn replay(
    r: &FilesRun,
    fold: &FilesAcks,
    views: &[View],
) -> Result<(Vec<Name>, Option<u64>), String> {
    let mut reached = std::collections::BTreeSet::new();
    let mut names: Vec<Name> = (0..r.files as usize)
        .map(|f| Name {
            ms: fold.names.get(f).copied().flatten(),
            ..Name::default()
        })
        .collect();
    for j in 0..r.jobs {
        let last = fold.replay_last(j);
        let mut s = Schedule::new(r.seed, r.jobs, j, r.files, r.unsafe_steps);
        let end = last
            .map_or(0, |k| k.saturating_add(1))
            .saturating_add(r.window);
        for k in 0..end {
            let Some(st) = s.next_step() else { break };
            let state = s.state(st.file);
            let (n, view) = (&mut names[st.file as usize], views[st.file as usize]);
            if last.is_some_and(|l| k <= l) {
                if let Some(a) = fold.recheck.get(&st.seq) {
                    Expect::of(&st, state).check(a)?;
                    reached.insert(st.seq);
                    if n.ms.is_none_or(|(nk, _)| nk <= k) {
                        n.ms = Some((k, a.ms));
                    }
                }
                n.acked(r.unsafe_steps, &st, state, view);
            } else {
                n.later(r.unsafe_steps, &st, state, view);
            }
        }
    }
    let unreached = fold.recheck.keys().find(|q| !reached.contains(q)).copied();
    Ok((names, unreached))
}
