//! The rules of a pgbench verdict: what the ledger's acknowledgements require of
//! what survived in PostgreSQL. Pure arithmetic; the client's `pgbench::verify`
//! gathers the inputs with SQL and fills the report.
//!
//! For each client `c`, `A_c` is its highest acknowledged seq in the ledger and `S_c`
//! the set of its acknowledged seqs (normally `1..=A_c`). `P_c` is the set of seqs
//! whose tag survived in `pgbench_history`. A seq can exist only up to the bound
//! `B_c` ([`bounds`]): `A_c + 1` for a finished run (one transaction in flight per
//! client at most), `A_c + max_unconfirmed` for a run cut short (the agent may have
//! committed that many beyond what the listener confirmed). A transaction that failed
//! or rolled back leaves no trace: the client retries it with the same seq.
//!
//! | count | rule |
//! | --- | --- |
//! | lost commits | `s ∈ S_c`, `s ∉ P_c` (promised acks; unpromised ones go to `unpromised_lost`) |
//! | ordering violations | `s ∉ S_c`, `s ∉ P_c`, and some `s' > s` with `s' ∈ P_c`, `s' ≤ B_c` |
//! | duplicates | extra copies of a tag (a tag found `n` times counts `n - 1`) |
//! | phantoms | a tag of this run with `seq < 1`, `seq > B_c`, or a client the run did not have |
//! | malformed tags | a `filler` starting with the run's prefix that is not a valid tag |
//!
//! The ledger's ranges are read in the verdict's order straight from the fold
//! ([`ranges`]). The scan of the tags gives per-client [`Counts`] ([`tags::TagCounter`]); [`tally`] turns them and the
//! merged acknowledgements ([`merge_ranges`]) into the run's counts; [`Failures`] weighs
//! those (and the damage found) into problems, and [`judge`] says pass, fail or not
//! measured.

use std::collections::BTreeMap;

pub mod ranges;
pub mod relations;
pub mod tags;

pub use ranges::{ack_times, client_ranges, end_ms, merge_acks, merge_ranges, LostLags};

/// A range of one client's acknowledged seqs, `first..=last`, all acknowledged in one
/// batch or merged from several with the same promise flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct AckRange {
    /// First seq of the range (from 1).
    pub first: u64,
    /// Last seq of the range (`≥ first`).
    pub last: u64,
    /// Whether the configuration promised durability when these were acknowledged.
    pub promised: bool,
    /// Milliseconds after the run's start when `last`'s `COMMIT` returned.
    pub ms: u32,
}

impl AckRange {
    /// Seqs in the range (at least 1).
    pub fn seqs(&self) -> u64 {
        self.last - self.first + 1
    }
}

/// The ledger's acknowledgements of one client, as merged ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientAcks {
    /// Merged ranges, sorted by `first`, not overlapping.
    pub ranges: Vec<AckRange>,
}

impl ClientAcks {
    /// `A_c`: the highest acknowledged seq (0 when none).
    pub fn top(&self) -> u64 {
        self.ranges.iter().map(|r| r.last).max().unwrap_or(0)
    }

    /// Acknowledged seqs with this promise flag.
    pub fn count(&self, promised: bool) -> u64 {
        self.ranges
            .iter()
            .filter(|r| r.promised == promised)
            .map(AckRange::seqs)
            .sum()
    }

    /// Acknowledged seqs in `1..=m`.
    pub fn count_upto(&self, m: u64) -> u64 {
        self.ranges
            .iter()
            .filter(|r| r.first <= m)
            .map(|r| r.last.min(m) - r.first + 1)
            .sum()
    }

    /// The gaps of the acknowledged set within `1..=m`, as `(first, last)` ranges.
    pub fn gaps_upto(&self, m: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut next = 1;
        for r in &self.ranges {
            if r.first > m {
                break;
            }
            if r.first > next {
                gaps.push((next, r.first - 1));
            }
            next = next.max(r.last + 1);
        }
        if next <= m {
            gaps.push((next, m));
        }
        gaps
    }
}

/// The clients a run is judged over: the recorded count, or more when the ledger
/// acknowledged a higher client number.
pub fn clients(recorded: u32, acks: &BTreeMap<u32, ClientAcks>) -> u32 {
    recorded.max(acks.keys().next_back().map(|c| c + 1).unwrap_or(0))
}

/// `B_c` for clients `0..clients`: the highest seq each could have committed,
/// `A_c + 1` for a finished run, `A_c + max_unconfirmed` for one cut short (0 =
/// unbounded: a quarter of `i64::MAX` is added), at most `max_seq` (the tag's limit).
pub fn bounds(
    acks: &BTreeMap<u32, ClientAcks>,
    clients: u32,
    finished: bool,
    max_unconfirmed: u64,
    max_seq: u64,
) -> Vec<u64> {
    let extra = if finished {
        1
    } else if max_unconfirmed == 0 {
        i64::MAX as u64 / 4
    } else {
        max_unconfirmed
    };
    (0..clients)
        .map(|c| {
            let top = acks.get(&c).map(|a| a.top()).unwrap_or(0);
            top.saturating_add(extra).min(max_seq)
        })
        .collect()
}

/// What the scan of the tags found for one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Distinct seqs present within `1..=B_c`.
    pub inbound: u64,
    /// The highest seq present within `1..=B_c` (0 when none).
    pub top: u64,
    /// Extra copies of tags (a tag found `n` times counts `n - 1`).
    pub dups: u64,
    /// Distinct seqs present outside `1..=B_c` (every one, for a client with no bound).
    pub phantoms: u64,
    /// Distinct acknowledged seqs present: `[unpromised, promised]`.
    pub acked_present: [u64; 2],
}

/// The run's counts, from the acknowledgements and the scan (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Distinct tags present within the bounds.
    pub present: u64,
    /// Of those, not acknowledged (in flight, or unconfirmed): no failure.
    pub unacknowledged_present: u64,
    /// Promised acknowledged commits missing.
    pub lost: u64,
    /// `lost` by client: `(client, lost commits)` for each client that lost any, by
    /// client number.
    pub lost_by_client: Vec<(u32, u64)>,
    /// Unpromised acknowledged commits missing.
    pub unpromised_lost: u64,
    /// Missing unacknowledged seqs below a surviving seq of the same client.
    pub ordering_violations: u64,
    /// Extra copies of tags.
    pub duplicates: u64,
    /// Tags beyond the bounds or of clients the run did not have.
    pub phantoms: u64,
    /// `(client, first, last)`: the unacknowledged ranges of the clients with
    /// ordering violations, up to their highest surviving seq (where to list them).
    pub ordering_gaps: Vec<(u32, u64, u64)>,
}

/// Tallies the run: `counts` per client from the scan (none when the tables are
/// missing: then every acknowledged commit is lost), over clients `0..clients` and
/// any client the scan found. With `counted` false (the commits could not be
/// counted) nothing is tallied.
pub fn tally(
    acks: &BTreeMap<u32, ClientAcks>,
    counts: &BTreeMap<u32, Counts>,
    clients: u32,
    counted: bool,
) -> Tally {
    let mut t = Tally::default();
    let empty = ClientAcks::default();
    let counted_clients = if counted { clients } else { 0 };
    for c in 0..counted_clients.max(counts.keys().next_back().map(|c| c + 1).unwrap_or(0)) {
        let a = acks.get(&c).unwrap_or(&empty);
        let k = counts.get(&c).copied().unwrap_or_default();
        t.present += k.inbound;
        t.duplicates += k.dups;
        t.phantoms += k.phantoms;
        let present_acked = k.acked_present[0] + k.acked_present[1];
        t.unacknowledged_present += k.inbound.saturating_sub(present_acked);
        let lost = a.count(true).saturating_sub(k.acked_present[1]);
        t.lost += lost;
        if lost > 0 {
            t.lost_by_client.push((c, lost));
        }
        t.unpromised_lost += a.count(false).saturating_sub(k.acked_present[0]);
        // Missing in 1..=top, minus the acknowledged ones among them.
        let missing_upto_top = k.top.saturating_sub(k.inbound);
        let lost_upto_top = a.count_upto(k.top).saturating_sub(present_acked);
        let ordering = missing_upto_top.saturating_sub(lost_upto_top);
        if ordering > 0 {
            for g in a.gaps_upto(k.top) {
                t.ordering_gaps.push((c, g.0, g.1));
            }
        }
        t.ordering_violations += ordering;
    }
    t
}

/// Everything a pgbench verdict weighs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Failures {
    /// Promised acknowledged commits missing.
    pub lost_commits: u64,
    /// See [`Tally::ordering_violations`].
    pub ordering_violations: u64,
    /// amcheck's corruptions.
    pub amcheck_corruptions: u64,
    /// Damaged main-fork pages (of the run's data or outside it).
    pub damaged_pages: u64,
    /// Checksum failures no page explains (counted only when not every page could be checked).
    pub unattributed_checksum_failures: u64,
    /// pgbench tables that do not exist.
    pub missing_tables: u64,
    /// Whether the balance sums were read and moved apart.
    pub invariant_broken: bool,
    /// See [`Tally::duplicates`].
    pub duplicates: u64,
    /// See [`Tally::phantoms`].
    pub phantoms: u64,
    /// Rows with the run's prefix that are not tags.
    pub malformed_tags: u64,
}

impl Failures {
    /// What a configuration that promised no durability permits: losses, reordering
    /// and damage.
    pub fn permitted(&self) -> u64 {
        self.lost_commits
            + self.ordering_violations
            + self.amcheck_corruptions
            + self.damaged_pages
            + self.unattributed_checksum_failures
            + self.missing_tables
            + u64::from(self.invariant_broken)
    }

    /// What no configuration permits: duplicates, phantoms, malformed tags.
    pub fn always(&self) -> u64 {
        self.duplicates + self.phantoms + self.malformed_tags
    }

    /// The problems of a run: everything when durability was promised, else only
    /// what no configuration permits.
    pub fn problems(&self, promised: bool) -> u64 {
        if promised {
            self.permitted() + self.always()
        } else {
            self.always()
        }
    }
}

/// The verdict from the problems: `(ok, not_measured)`. A run without problems whose
/// every acknowledgement was unpromised measured nothing about the device: not
/// measured, and not ok either (exit 2).
pub fn judge(problems: u64, acknowledged: u64, unpromised_acknowledged: u64) -> (bool, bool) {
    let ok = problems == 0;
    let not_measured = ok && acknowledged > 0 && unpromised_acknowledged == acknowledged;
    (ok && !not_measured, not_measured)
}

#[cfg(test)]
mod tests;
