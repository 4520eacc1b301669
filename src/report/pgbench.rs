//! The report of verifying a pgbench run (see the client's `pgbench::verify` for
//! how it is gathered, and [`crate::verdict::pgbench`] for the rules): the counts,
//! the balance invariant, amcheck, damaged pages and the findings, one model for the
//! human report and `--json` (field names are a stable interface for scripts).

use super::LagBucket;
use crate::ledger::PgSettings;
use serde::{Serialize, Serializer};
use std::fmt;

pub use super::MAX_FINDINGS;

/// One page that failed verification.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Page {
    /// The relation (`pgbench_history`, `pgbench_accounts_pkey`, …), or the file
    /// path (`base/D/F`) when it names no relation of this database.
    pub relation: String,
    /// `main`, `fsm`, `vm` or `init`.
    pub fork: String,
    /// Block number within the fork.
    pub block: u64,
}

impl Page {
    /// Whether the page holds the run's data: a main-fork page of a pgbench table
    /// or of one of their indexes.
    pub fn is_data(&self) -> bool {
        self.fork == "main" && self.relation.starts_with("pgbench_")
    }

    /// Whether PostgreSQL zeroes and rebuilds a damaged page of this kind by design:
    /// a free-space-map or visibility-map page (these forks are not fully WAL-logged).
    pub fn is_rebuilt_by_design(&self) -> bool {
        self.fork == "fsm" || self.fork == "vm"
    }
}

/// The kind of a [`PgFinding`], serialized as its [`name`](Self::name).
///
/// In a run whose configuration promised no durability, the findings that setting
/// permits (see [`unpromised`](Self::unpromised)) get `unpromised_` before their
/// name and are no failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PgFindingKind {
    /// `lost_commit`: an acknowledged (promised) commit is missing.
    LostCommit,
    /// `unpromised_lost`: an acknowledged commit the configuration did not promise
    /// is missing (expected).
    UnpromisedLost,
    /// `ordering_violation`: a seq not acknowledged is missing while a later one of
    /// the client survived.
    OrderingViolation,
    /// `duplicate`: a tag found more than once.
    Duplicate,
    /// `phantom`: a tag beyond anything the agent could have issued.
    Phantom,
    /// `malformed_tag`: a `filler` with the run's prefix that is not a tag.
    MalformedTag,
    /// `invariant`: the balance sums moved apart.
    Invariant,
    /// `amcheck`: a corruption amcheck reported.
    Amcheck,
    /// `damaged_page`: a main-fork page of the run's data cannot be read.
    DamagedPage,
    /// `damaged_page_outside_run`: a main-fork page outside the run's data (a system
    /// catalog, another table) is damaged.
    DamagedPageOutsideRun,
    /// `repaired_by_design`: an FSM/VM page PostgreSQL zeroes and rebuilds (no failure).
    RepairedByDesign,
    /// `checksum_failures`: checksum failures no page explains.
    ChecksumFailures,
    /// `missing_table`: a pgbench table does not exist.
    MissingTable,
    /// `server_unavailable`: PostgreSQL stopped (does not accept connections).
    ServerUnavailable,
    /// `unpromised_` + the kind: a finding an unpromising configuration permits.
    Unpromised(Permitted),
}

/// The kinds of finding a configuration that promised no durability permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permitted {
    /// See [`PgFindingKind::OrderingViolation`].
    OrderingViolation,
    /// See [`PgFindingKind::Amcheck`].
    Amcheck,
    /// See [`PgFindingKind::DamagedPage`].
    DamagedPage,
    /// See [`PgFindingKind::DamagedPageOutsideRun`].
    DamagedPageOutsideRun,
    /// See [`PgFindingKind::ChecksumFailures`].
    ChecksumFailures,
    /// See [`PgFindingKind::MissingTable`].
    MissingTable,
    /// See [`PgFindingKind::Invariant`].
    Invariant,
}

impl PgFindingKind {
    /// The name in the report (`lost_commit`, `unpromised_amcheck`, …).
    pub fn name(self) -> &'static str {
        use PgFindingKind as K;
        match self {
            K::LostCommit => "lost_commit",
            K::UnpromisedLost => "unpromised_lost",
            K::OrderingViolation => "ordering_violation",
            K::Duplicate => "duplicate",
            K::Phantom => "phantom",
            K::MalformedTag => "malformed_tag",
            K::Invariant => "invariant",
            K::Amcheck => "amcheck",
            K::DamagedPage => "damaged_page",
            K::DamagedPageOutsideRun => "damaged_page_outside_run",
            K::RepairedByDesign => "repaired_by_design",
            K::ChecksumFailures => "checksum_failures",
            K::MissingTable => "missing_table",
            K::ServerUnavailable => "server_unavailable",
            K::Unpromised(p) => match p {
                Permitted::OrderingViolation => "unpromised_ordering_violation",
                Permitted::Amcheck => "unpromised_amcheck",
                Permitted::DamagedPage => "unpromised_damaged_page",
                Permitted::DamagedPageOutsideRun => "unpromised_damaged_page_outside_run",
                Permitted::ChecksumFailures => "unpromised_checksum_failures",
                Permitted::MissingTable => "unpromised_missing_table",
                Permitted::Invariant => "unpromised_invariant",
            },
        }
    }

    /// The kind this finding has in a run whose configuration promised no
    /// durability, when that configuration permits it; `None` for findings no
    /// setting permits (duplicates, phantoms, malformed tags) and for those that are
    /// no failure anyway.
    pub fn unpromised(self) -> Option<Self> {
        use PgFindingKind as K;
        let p = match self {
            K::OrderingViolation => Permitted::OrderingViolation,
            K::Amcheck => Permitted::Amcheck,
            K::DamagedPage => Permitted::DamagedPage,
            K::DamagedPageOutsideRun => Permitted::DamagedPageOutsideRun,
            K::ChecksumFailures => Permitted::ChecksumFailures,
            K::MissingTable => Permitted::MissingTable,
            K::Invariant => Permitted::Invariant,
            _ => return None,
        };
        Some(K::Unpromised(p))
    }
}

impl fmt::Display for PgFindingKind {
    /// The name, honouring width and alignment (`{:<20}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

impl Serialize for PgFindingKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The balance invariant: the four sums move together.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Invariant {
    /// `sum(pgbench_accounts.abalance)` now.
    pub sum_abalance: i64,
    /// `sum(pgbench_tellers.tbalance)` now.
    pub sum_tbalance: i64,
    /// `sum(pgbench_branches.bbalance)` now.
    pub sum_bbalance: i64,
    /// `sum(pgbench_history.delta)` now.
    pub sum_delta: i64,
    /// The same four sums when the run started (all 0 on fresh tables).
    pub start_sums: [i64; 4],
    /// Whether the four sums changed by the same amount since the start (so they are
    /// equal on fresh tables).
    pub holds: bool,
    /// Whether the sums could be read.
    pub checked: bool,
}

/// The server configuration a run recorded (see `PgManifest`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunSettings {
    /// The recorded settings (their fields appear in this object).
    #[serde(flatten)]
    pub settings: PgSettings,
    /// The mount beneath the data directory (`device mountpoint fstype options`).
    pub data_mount: String,
}

/// What amcheck found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Amcheck {
    /// Whether amcheck ran (the extension could be created and its functions called).
    pub ran: bool,
    /// Corruptions: rows from `verify_heapam` plus indexes `bt_index_check` rejected.
    pub corruptions: u64,
    /// Tables and indexes checked.
    pub relations_checked: u32,
    /// Why it did not run, or which parts could not run.
    pub note: Option<String>,
}

/// One finding: a commit lost, reordered, duplicated or invented, or damage.
#[derive(Clone, Debug, Serialize)]
pub struct PgFinding {
    /// What kind of finding (serialized as its name, e.g. `lost_commit`).
    pub kind: PgFindingKind,
    /// The client, where the finding names a commit.
    pub client: Option<u32>,
    /// The per-client sequence number, where the finding names a commit.
    pub seq: Option<u64>,
    /// Human-readable detail.
    pub detail: String,
    /// The page a finding is about: for `damaged_page`, `repaired_by_design`, and
    /// `amcheck` rows of `verify_heapam`.
    pub page: Option<Page>,
}

/// Wall-clock time of the verifier's phases, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    /// Connecting (including waiting for the server).
    pub connect_ms: u64,
    /// Counting the commits (the tag scan) and the balance sums, concurrently.
    pub commits_ms: u64,
    /// Listing the first findings.
    pub findings_ms: u64,
    /// amcheck and the checksum failure counter.
    pub amcheck_ms: u64,
    /// Everything.
    pub total_ms: u64,
}

/// The report of verifying a pgbench run; one model for the human report and
/// `--json` (field names are a stable interface for scripts).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PgReport {
    /// Run id, 16 hex digits.
    pub run_id: String,
    /// Always `"pgbench"`.
    pub workload: String,
    /// Host that ran the agent.
    pub host: String,
    /// The connection checked (no password).
    pub conninfo: String,
    /// Whether the agent finished the run (`false`: it was cut short).
    pub finished: bool,
    /// Whether the run's configuration promised durability.
    pub promised: bool,
    /// Clients of the run.
    pub clients: u32,
    /// The server configuration the run recorded when it started.
    pub run_settings: RunSettings,
    /// Whether PostgreSQL accepted a connection.
    pub server_reachable: bool,
    /// Commits acknowledged in the ledger (promised and unpromised).
    pub acknowledged_commits: u64,
    /// Of those, acknowledged while the configuration did not promise durability.
    pub unpromised_acknowledged: u64,
    /// Distinct tags of the run found, within the bounds (not phantoms).
    pub present_commits: u64,
    /// Of those, not acknowledged in the ledger: in flight at the cut, or committed
    /// but not yet confirmed by the listener. Survivors like these are no failure.
    pub unacknowledged_present: u64,
    /// Acknowledged (promised) commits that are missing.
    pub lost_commits: u64,
    /// Missing seqs not acknowledged while a later seq of the client survived.
    pub ordering_violations: u64,
    /// Extra copies of tags.
    pub duplicates: u64,
    /// Tags of this run beyond anything the agent could have issued.
    pub phantoms: u64,
    /// Rows with the run's prefix that are not valid tags.
    pub malformed_tags: u64,
    /// Acknowledged commits lost that the configuration did not promise (expected).
    pub unpromised_lost: u64,
    /// The balance invariant.
    pub invariant: Invariant,
    /// amcheck results.
    pub amcheck: Amcheck,
    /// Checksum failures of the run's database since the run started
    /// (`pg_stat_database.checksum_failures` for `current_database()`, the rise within
    /// the counter's epoch; 0 when checksums are off). Attributed to pages in
    /// `findings`; not itself a failure.
    pub checksum_failures: u64,
    /// Findings in all (the list holds the first [`MAX_FINDINGS`]).
    pub findings_total: u64,
    /// The first findings: failures first, then expected losses.
    pub findings: Vec<PgFinding>,
    /// Time taken, per phase.
    pub timings: Timings,
    /// True when nothing acknowledged (and promised) was lost or damaged.
    pub ok: bool,
    /// One line: `PASS: …`, `FAIL: …` or `NOT MEASURED: …`.
    pub summary: String,
    /// Main-fork pages of the pgbench tables and indexes that cannot be read (each is
    /// a `damaged_page` finding naming relation, fork and block).
    pub damaged_pages: u64,
    /// Whether the commits could be counted (false when a damaged page stopped the
    /// count and this role may not set `ignore_checksum_failure`).
    pub commits_checked: bool,
    /// Damaged blocks of `pgbench_history` the commit count did not read (their
    /// tags count as lost commits). Damaged pages are never read past their checksum:
    /// that would set hint bits and write the page back with a fresh checksum.
    pub skipped_history_blocks: Vec<u64>,
    /// What the report wants said beside the counts: amcheck could not run, FSM/VM
    /// pages PostgreSQL repaired, the counter's epoch, unattributed failures.
    pub notes: Vec<String>,
    /// True when every acknowledgement was unpromised: the run measured nothing
    /// about the device (exit 2, summary `NOT MEASURED`).
    pub not_measured: bool,
    /// Lost commits by how long before the run's last acknowledgement they were
    /// acknowledged (the file report's buckets; each commit at its ledger range's
    /// time, so the lag is a lower bound).
    pub lost_lag_histogram: Vec<LagBucket>,
    /// Lost (promised) commits by client: `[client, lost commits]` for each client that
    /// lost any, by client number; they add up to `lost_commits`.
    #[serde(default)]
    pub lost_commits_by_client: Vec<(u32, u64)>,
    /// Checksum failures of this run that no page explains while not every page of
    /// the run's data could be checked (a failure then).
    pub unattributed_checksum_failures: u64,
    /// The storage under test: the probe of the data directory at the run's start,
    /// flushes per acknowledged commit, warnings, cut evidence.
    #[serde(default)]
    pub storage: super::StorageReport,
    /// Whether the cut could have failed (`verdict::cut`): its moment, the
    /// acknowledgements exposed at it, the canary; a PASS without it is NOT MEASURED.
    #[serde(default)]
    pub cut: crate::verdict::cut::CutReport,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_kinds_keep_their_names() {
        use PgFindingKind as K;
        assert_eq!(K::LostCommit.name(), "lost_commit");
        assert_eq!(K::DamagedPageOutsideRun.name(), "damaged_page_outside_run");
        assert_eq!(
            K::DamagedPageOutsideRun.unpromised().map(K::name),
            Some("unpromised_damaged_page_outside_run")
        );
        assert_eq!(
            K::Invariant.unpromised().map(K::name),
            Some("unpromised_invariant")
        );
        assert_eq!(K::Duplicate.unpromised(), None);
        assert_eq!(K::LostCommit.unpromised(), None);
        assert_eq!(format!("[{:<20}]", K::Phantom), "[phantom             ]");
    }

    #[test]
    fn pages_of_the_run_and_pages_rebuilt_by_design() {
        let page = |relation: &str, fork: &str| Page {
            relation: relation.into(),
            fork: fork.into(),
            block: 3,
        };
        assert!(page("pgbench_history", "main").is_data());
        assert!(page("pgbench_accounts_pkey", "main").is_data());
        assert!(!page("pg_class", "main").is_data());
        assert!(!page("pgbench_history", "fsm").is_data());
        assert!(page("pgbench_history", "vm").is_rebuilt_by_design());
        assert!(!page("pgbench_history", "main").is_rebuilt_by_design());
    }
}
