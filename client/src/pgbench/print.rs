//! The report of verifying a pgbench run: one model for the human report and
//! `--json` (field names are a stable interface for scripts), and its renderers:
//! the one-line summary and the human report.

use super::{conn, damage};
use serde::Serialize;

/// How many findings a report lists at most.
pub use super::check::MAX_FINDINGS;

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
    pub settings: plugpull::ledger::PgSettings,
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
    /// `lost_commit`, `unpromised_lost`, `ordering_violation`, `duplicate`,
    /// `phantom`, `malformed_tag`, `invariant`, `amcheck`, `damaged_page`,
    /// `repaired_by_design` (an FSM/VM page PostgreSQL zeroes and rebuilds: no
    /// failure), `missing_table` or `server_unavailable`; in a run whose
    /// configuration promised no durability, findings that setting permits get
    /// `unpromised_` before their kind and are no failure.
    pub kind: String,
    /// The client, where the finding names a commit.
    pub client: Option<u32>,
    /// The per-client sequence number, where the finding names a commit.
    pub seq: Option<u64>,
    /// Human-readable detail.
    pub detail: String,
    /// The page a finding is about: for `damaged_page`, `repaired_by_design`, and
    /// `amcheck` rows of `verify_heapam`.
    pub page: Option<damage::Page>,
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
    pub lost_lag_histogram: Vec<plugpull::report::LagBucket>,
    /// Checksum failures of this run that no page explains while not every page of
    /// the run's data could be checked (a failure then).
    pub unattributed_checksum_failures: u64,
}

/// The settings that made the acknowledgements unpromised, e.g. `fsync=off`.
fn unpromised_why(s: &plugpull::ledger::PgSettings) -> String {
    let v = conn::unsafe_settings(s);
    if v.is_empty() {
        "as recorded".into()
    } else {
        v.join(", ")
    }
}

/// The one-line verdict.
pub(super) fn summary(r: &PgReport, missing: &[&str]) -> String {
    if r.not_measured {
        return format!(
            "NOT MEASURED: all {} acknowledged commits were unpromised (the configuration did not \
             promise durability: {}), so the run measured nothing about the device; {} of them lost, \
             as that configuration allows",
            r.acknowledged_commits,
            unpromised_why(&r.run_settings.settings),
            r.unpromised_lost
        );
    }
    if r.ok {
        let mut s = format!(
            "PASS: {} acknowledged commits, {} present ({} beyond the acknowledged: in flight or unconfirmed), none lost; balances consistent",
            r.acknowledged_commits, r.present_commits, r.unacknowledged_present
        );
        if r.unpromised_lost > 0 {
            s.push_str(&format!(
                "; {} unpromised commits lost, as the configuration allowed",
                r.unpromised_lost
            ));
        }
        return s;
    }
    let mut parts = Vec::new();
    for t in missing {
        parts.push(format!("{t} missing"));
    }
    let named = [
        (r.lost_commits, "lost commits"),
        (r.ordering_violations, "ordering violations"),
        (r.duplicates, "duplicates"),
        (r.phantoms, "phantoms"),
        (r.malformed_tags, "malformed tags"),
        (r.amcheck.corruptions, "amcheck corruptions"),
        (r.damaged_pages, "damaged pages"),
        (
            r.unattributed_checksum_failures,
            "unattributed checksum failures",
        ),
    ];
    for (n, what) in named {
        // In an unpromised run only what no setting permits fails.
        let permitted = !matches!(what, "duplicates" | "phantoms" | "malformed tags");
        if n > 0 && (r.promised || !permitted) {
            parts.push(format!("{n} {what}"));
        }
    }
    if r.promised && r.invariant.checked && !r.invariant.holds {
        parts.push("balance invariant broken".into());
    }
    format!(
        "FAIL: {} out of {} acknowledged commits",
        parts.join(", "),
        r.acknowledged_commits
    )
}

impl PgReport {
    /// Prints the report for people (stdout): at most `show` findings, then the summary line.
    pub fn print_human(&self, show: usize) {
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!("run {} (pgbench) from host {}", self.run_id, self.host);
        println!("checked: {}", self.conninfo);
        println!(
            "finished: {}   durability promised: {}   clients: {}",
            yes(self.finished),
            yes(self.promised),
            self.clients
        );
        let rs = &self.run_settings.settings;
        println!(
            "run settings: PostgreSQL {}, fsync={}, synchronous_commit={}, full_page_writes={}, \
             wal_sync_method={}, data_checksums={}",
            rs.server_version,
            rs.fsync,
            rs.synchronous_commit,
            rs.full_page_writes,
            rs.wal_sync_method,
            rs.data_checksums
        );
        println!(
            "data directory: {}{}",
            rs.data_directory,
            if self.run_settings.data_mount.is_empty() {
                String::new()
            } else {
                format!(" on {}", self.run_settings.data_mount)
            }
        );
        if !self.server_reachable {
            for f in &self.findings {
                println!("{}", f.detail);
            }
            println!("{}", self.summary);
            return;
        }
        println!("acknowledged commits:   {}", self.acknowledged_commits);
        if self.unpromised_acknowledged > 0 {
            println!("  of which unpromised:  {}", self.unpromised_acknowledged);
        }
        println!(
            "present commits:        {} ({} beyond the acknowledged: in flight or unconfirmed)",
            self.present_commits, self.unacknowledged_present
        );
        println!("lost commits:           {}", self.lost_commits);
        println!("unpromised lost:        {}", self.unpromised_lost);
        println!("ordering violations:    {}", self.ordering_violations);
        println!("duplicates:             {}", self.duplicates);
        println!("phantoms:               {}", self.phantoms);
        if self.malformed_tags > 0 {
            println!("malformed tags:         {}", self.malformed_tags);
        }
        let i = &self.invariant;
        if i.checked {
            println!(
                "balance invariant:      {} (abalance {}, tbalance {}, bbalance {}, history delta {}; at start {:?})",
                if i.holds { "holds" } else { "BROKEN" },
                i.sum_abalance,
                i.sum_tbalance,
                i.sum_bbalance,
                i.sum_delta,
                i.start_sums
            );
        } else {
            println!("balance invariant:      not checked");
        }
        if self.amcheck.ran {
            println!(
                "amcheck:                {} corruptions in {} relations",
                self.amcheck.corruptions, self.amcheck.relations_checked
            );
        } else {
            println!("amcheck:                did not run");
        }
        if let Some(n) = &self.amcheck.note {
            println!("  note: {n}");
        }
        println!(
            "checksum failures:      {} (this database, since the run started)",
            self.checksum_failures
        );
        println!("damaged pages:          {}", self.damaged_pages);
        if !self.commits_checked {
            println!("commits:                NOT COUNTED (see the notes)");
        } else if !self.skipped_history_blocks.is_empty() {
            println!(
                "commits counted:        without the damaged pgbench_history blocks {:?} (their tags count as lost)",
                self.skipped_history_blocks
            );
        }
        for n in &self.notes {
            println!("note: {n}");
        }
        println!(
            "time:                   {} ms (commits and sums {} ms, findings {} ms, amcheck {} ms)",
            self.timings.total_ms,
            self.timings.commits_ms,
            self.timings.findings_ms,
            self.timings.amcheck_ms
        );
        if !self.findings.is_empty() {
            let listed = self.findings.len().min(show);
            println!(
                "findings ({} in all, first {listed} listed; --show N for more, --json for up to {}):",
                self.findings_total,
                self.findings.len()
            );
            for f in self.findings.iter().take(show) {
                match (f.client, f.seq) {
                    (Some(c), Some(s)) => {
                        println!("  {:<20} client {c} seq {s}: {}", f.kind, f.detail)
                    }
                    _ => println!("  {:<20} {}", f.kind, f.detail),
                }
            }
        }
        if self.lost_lag_histogram.iter().any(|b| b.count > 0) {
            println!("lost commits by how long before the end they were acknowledged:");
            print!(
                "{}",
                plugpull::report::lag_histogram_text(&self.lost_lag_histogram)
            );
        }
        println!("{}", self.summary);
    }
}
