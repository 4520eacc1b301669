//! The verifier of a pgbench run: what survived in PostgreSQL against what the
//! ledger says was acknowledged. The rules (which commits must exist, the bound on
//! the seqs, what is lost, reordered, duplicated or invented, and what an unpromising
//! configuration permits) are pure and live in [`plugpull::verdict::pgbench`]; this
//! module gathers their inputs from PostgreSQL and fills the [`PgReport`].
//!
//! The flow of [`verify`]:
//! 1. connect, waiting for crash recovery ([`ready`]); a server that stopped is a
//!    finding, and the report ends there;
//! 2. count the run's tags, streamed out of `pgbench_history` by one `COPY` ([`sql`]),
//!    and read the balance sums on a second connection at the same time; a damaged
//!    page met on the way is named, and the commits are counted again without it;
//! 3. judge the counts and list the first findings of each kind ([`sql`]);
//! 4. amcheck ([`amcheck`]), the checksum failure counter and the damaged pages
//!    ([`pages`], [`damage`]);
//! 5. weigh everything into the verdict and the summary line.

pub mod amcheck;
pub mod damage;
pub mod pages;
pub mod ready;
pub mod settings;
pub mod sql;

use crate::pg::{self, describe};
use crate::pgbench::{print, schema, tag};
use crate::Error;
use pages::Damage;
use plugpull::ledger::{Manifest, PgManifest, PgRanges};
use plugpull::report::{
    Invariant, LagBucket, Page, PgFinding, PgFindingKind, PgReport, RunSettings,
};
use plugpull::verdict::pgbench::relations::relation_changes;
use plugpull::verdict::pgbench::{self as rules, ClientAcks, Counts};
use plugpull::RunId;
use sql::{q, Findings, Scan, ToList};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// The amcheck note of a verify run with `--no-amcheck`.
pub const AMCHECK_SKIPPED: &str = "skipped (--no-amcheck)";

/// How many findings a report lists at most.
pub use plugpull::report::MAX_FINDINGS;

/// Options of `plugpull verify` for a pgbench run.
#[derive(clap::Args, Debug, Clone)]
pub struct PgVerifyArgs {
    /// PostgreSQL connection to check, overriding the one the run recorded (a
    /// conninfo string or `postgresql://` URL; PG* environment variables fill in
    /// what it leaves out, and the password always comes from them or from here).
    #[arg(long, value_name = "CONNINFO")]
    pub dsn: Option<String>,

    /// How long to keep retrying while nothing accepts connections or PostgreSQL is
    /// still in crash recovery, e.g. `10m`; after that verify exits 2 ("is PostgreSQL
    /// running?" or "still starting up"). A server that stopped is a finding at once
    /// when --pgdata shows it (see docs/pgbench.md, "readiness").
    #[arg(long, value_name = "DURATION", default_value = "5m",
          value_parser = plugpull::units::parse_duration)]
    pub pg_wait: Duration,

    /// Do not run amcheck (`verify_heapam`, `bt_index_check` with `heapallindexed`).
    #[arg(long)]
    pub no_amcheck: bool,

    /// PostgreSQL's server log: its last lines go into the report when the server
    /// does not accept connections, and its "invalid page" lines name the pages
    /// behind checksum failures.
    #[arg(long, value_name = "PATH")]
    pub pg_log: Option<PathBuf>,

    /// The data directory, when verify runs on the database host: its cluster state
    /// (`pg_controldata`), postmaster and log (`PGDATA/log`, unless --pg-log) tell
    /// "not started yet" from "stopped", and go into the report.
    #[arg(long, value_name = "PGDATA")]
    pub pgdata: Option<PathBuf>,
}

impl Default for PgVerifyArgs {
    fn default() -> Self {
        PgVerifyArgs {
            dsn: None,
            pg_wait: Duration::from_secs(300),
            no_amcheck: false,
            pg_log: None,
            pgdata: None,
        }
    }
}

/// Verifies a pgbench run: see the module doc for the flow, and
/// [`plugpull::verdict::pgbench`] for the rules.
///
/// Errors (exit 2): the connection settings are invalid, authentication fails, the
/// database does not exist, or a query fails. A server that does not accept
/// connections within `--pg-wait` is a finding, not an error.
pub async fn verify(
    run: RunId,
    manifest: &Manifest,
    pg: &PgManifest,
    ranges: &PgRanges,
    finished: bool,
    opts: &PgVerifyArgs,
) -> Result<PgReport, Error> {
    let t_all = Instant::now();
    let dsn = opts.dsn.as_deref().unwrap_or(&pg.conninfo);
    let cfg = pg::config(Some(dsn)).map_err(Error::Msg)?;
    let conninfo = pg::redacted(&cfg);
    let acks = rules::merge_ranges(ranges);
    let end_ms = rules::end_ms(ranges);
    let clients = rules::clients(pg.clients, &acks);
    let mut rep = head(run, manifest, pg, finished, &acks);
    rep.conninfo = conninfo.clone();
    rep.clients = clients;

    // Connect, waiting for crash recovery (see ready.rs for the rule).
    let files = ready::ServerFiles {
        pgdata: opts.pgdata.as_deref(),
        pg_log: opts.pg_log.as_deref(),
    };
    let since = manifest.started_unix_ms;
    let client = match ready::wait(&cfg, &conninfo, opts.pg_wait, files, since).await? {
        ready::Ready::Up(c) => c,
        ready::Ready::Stopped(detail) => {
            unreachable(&mut rep, detail);
            rep.timings.total_ms = t_all.elapsed().as_millis() as u64;
            return Ok(rep);
        }
        ready::Ready::Damaged(message) => {
            rep.server_reachable = true;
            let mut st = Checked::default();
            // The damage refused a session in the run's database: the relation's
            // name is looked up in database `postgres`, whose catalogs map the same
            // files unless one was rewritten since (the detail says where it came from).
            let named = if cfg.pg().get_dbname() == Some("postgres") {
                None
            } else {
                match cfg.with_dbname("postgres") {
                    Ok(other) => pg::connect(&other).await.ok(),
                    Err(_) => None,
                }
            };
            let what = "cannot connect to PostgreSQL";
            let by = named.as_ref().map(|c| (c, "postgres"));
            damage::reported(by, &mut rep, &mut st.out.failures, what, &message).await;
            finish(&mut rep, st.out, &[], None);
            unchecked(&mut rep);
            rep.timings.total_ms = t_all.elapsed().as_millis() as u64;
            return Ok(rep);
        }
    };
    rep.server_reachable = true;
    rep.commits_checked = true;
    rep.timings.connect_ms = t_all.elapsed().as_millis() as u64;
    let c = Connected {
        client: &client,
        cfg: &cfg,
        conninfo: &conninfo,
        run,
        manifest,
        pg,
        opts,
        files,
        acks: &acks,
        ranges,
        end_ms,
        clients,
    };
    let mut st = Checked::default();
    match c.check(&mut rep, &mut st).await {
        Ok(()) => {}
        Err(Error::DatabaseDamaged { what, message }) => {
            if !st.counted {
                rep.commits_checked = false;
            }
            let failures = &mut st.out.failures;
            damage::reported(Some((&client, "")), &mut rep, failures, &what, &message).await;
            st.damaged = true;
        }
        Err(e) => return Err(e),
    }
    let (missing, damaged) = (st.missing.clone(), st.damaged);
    finish(&mut rep, st.out, &missing, st.lags);
    if damaged {
        unchecked(&mut rep);
    }
    if st.unsafe_now {
        rep.summary.push_str(settings::WARNING);
    }
    if rep.ok && rep.acknowledged_commits == 0 {
        return Err(Error::Msg(format!(
            "not measured: run {run} has no acknowledged commits in the ledger (and PostgreSQL shows no damage)"
        )));
    }
    rep.timings.total_ms = t_all.elapsed().as_millis() as u64;
    Ok(rep)
}

/// What a verify connected to the run's server works with.
struct Connected<'a> {
    client: &'a Client,
    cfg: &'a pg::ConnConfig,
    conninfo: &'a str,
    run: RunId,
    manifest: &'a Manifest,
    pg: &'a PgManifest,
    opts: &'a PgVerifyArgs,
    files: ready::ServerFiles<'a>,
    acks: &'a BTreeMap<u32, ClientAcks>,
    /// The ledger's ranges, read in the verdict's order where a listing needs them.
    ranges: &'a PgRanges,
    end_ms: u32,
    clients: u32,
}

/// What the checks found so far: kept when PostgreSQL reports damage part way.
#[derive(Default)]
struct Checked {
    out: Findings,
    missing: Vec<&'static str>,
    /// The lost commits' lag histogram, when a promised commit was lost.
    lags: Option<Vec<LagBucket>>,
    unsafe_now: bool,
    pages: Vec<Page>,
    /// The commits were counted (or the count was skipped for missing tables).
    counted: bool,
    /// PostgreSQL reported damage and the checks stopped there.
    damaged: bool,
}

/// After damage stopped the checks: the summary says the commits went unchecked,
/// when they did.
fn unchecked(rep: &mut PgReport) {
    if !rep.commits_checked {
        rep.summary.push_str(&format!(
            "; the {} acknowledged commits could not be checked",
            rep.acknowledged_commits
        ));
    }
}

impl Connected<'_> {
    /// Steps 2–4 of the module doc, filling `rep` and `st`.
    ///
    /// Errors: a query failed ([`q`]; [`Error::DatabaseDamaged`] when PostgreSQL
    /// reported damage).
    async fn check(&self, rep: &mut PgReport, st: &mut Checked) -> Result<(), Error> {
        let (client, acks) = (self.client, self.acks);
        st.unsafe_now = settings::check(client, rep).await;
        st.missing = schema::missing_tables(client)
            .await
            .map_err(q("cannot look up the pgbench tables"))?;
        st.out
            .failures
            .extend(st.missing.iter().map(|t| missing_table(t)));
        let now = schema::relations(client)
            .await
            .map_err(q("cannot read the pgbench tables' files"))?;
        let changes = relation_changes(&self.pg.relations, &now);
        if !changes.rewritten.is_empty() {
            return Err(Error::Msg(format!(
                "cannot verify run {}: its tables were rewritten or emptied since the run (TRUNCATE, pgbench -i, VACUUM FULL, or dropped and created again): {}; their rows are no longer the run's — verify a run before anything else writes its tables",
                self.run,
                changes.rewritten.join(", ")
            )));
        }
        st.out
            .failures
            .extend(changes.older.iter().map(|t| older_table(t)));

        // Commits and the invariant, concurrently on two connections.
        let t_commits = Instant::now();
        let bounds = rules::bounds(
            acks,
            self.clients,
            rep.finished,
            self.pg.max_unconfirmed,
            tag::MAX_SEQ,
        );
        let mut scan = Scan::new(&tag::prefix(self.run), &bounds, acks);
        let mut scanned = false;
        let mut counts = BTreeMap::new();
        if st.missing.is_empty() {
            let c = Counting {
                client,
                cfg: self.cfg,
                conninfo: self.conninfo,
                start_sums: self.pg.start_sums,
                bounds: &bounds,
                acks,
            };
            (counts, scanned) = c.count(&mut scan, rep, &mut st.pages).await?;
        }
        rep.timings.commits_ms = t_commits.elapsed().as_millis() as u64;
        st.counted = true;

        // The counts, then the first findings, one query per kind that has any.
        let tally = rules::tally(acks, &counts, self.clients, rep.commits_checked);
        counted(rep, &tally);
        let t_find = Instant::now();
        if st.missing.is_empty() && rep.commits_checked {
            let what = ToList {
                lost: rep.lost_commits + rep.unpromised_lost,
                promised_lost: rep.lost_commits > 0,
                ordering: (rep.ordering_violations, &tally.ordering_gaps),
                duplicates: rep.duplicates,
                phantoms: rep.phantoms,
                malformed: rep.malformed_tags,
            };
            st.lags =
                sql::list_findings(client, &scan, what, self.ranges, self.end_ms, &mut st.out)
                    .await?;
            if rep.invariant.checked && !rep.invariant.holds {
                st.out.failures.push(invariant_finding(&rep.invariant));
            }
        }
        rep.timings.findings_ms = t_find.elapsed().as_millis() as u64;

        // amcheck, the checksum failure counter, and the damaged pages.
        let t_am = Instant::now();
        if !self.opts.no_amcheck {
            rep.amcheck =
                amcheck::amcheck(client, &st.missing, &mut st.out.failures, &mut st.pages).await?;
        } else {
            rep.amcheck.note = Some(AMCHECK_SKIPPED.into());
        }
        let damage = Damage {
            pages: std::mem::take(&mut st.pages),
            scanned,
            tables_missing: !st.missing.is_empty(),
            counter_start: (self.pg.checksum_failures_start, &self.pg.stats_reset_start),
            since_ms: self.manifest.started_unix_ms,
            files: self.files,
        };
        pages::check(client, damage, rep, &mut st.out).await?;
        rep.timings.amcheck_ms = t_am.elapsed().as_millis() as u64;
        Ok(())
    }
}

/// The report before anything is checked: the run as the ledger knows it.
fn head(
    run: RunId,
    manifest: &Manifest,
    pg: &PgManifest,
    finished: bool,
    acks: &BTreeMap<u32, ClientAcks>,
) -> PgReport {
    PgReport {
        run_id: run.to_string(),
        workload: "pgbench".into(),
        host: manifest.host.clone(),
        finished,
        promised: pg.promised,
        run_settings: RunSettings {
            settings: pg.settings.clone(),
            data_mount: pg.data_mount.clone(),
        },
        acknowledged_commits: acks.values().map(|a| a.count(true) + a.count(false)).sum(),
        unpromised_acknowledged: acks.values().map(|a| a.count(false)).sum(),
        invariant: Invariant {
            start_sums: pg.start_sums,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The connections and settings the count needs.
struct Counting<'a> {
    client: &'a Client,
    cfg: &'a pg::ConnConfig,
    conninfo: &'a str,
    start_sums: [i64; 4],
    /// `B_c` of each client.
    bounds: &'a [u64],
    /// The merged acknowledgements.
    acks: &'a BTreeMap<u32, ClientAcks>,
}

impl Counting<'_> {
    /// Counts the run's tags and reads the balance sums, concurrently on two
    /// connections. A damaged page (XX001/XX002) is a finding: name it, find every
    /// damaged heap page of the tables, and count the commits again without reading
    /// those (only reading: a page read past its checksum would get hint bits and be
    /// written back with a fresh checksum, hiding the damage). Tags on a skipped page
    /// count as lost: they are. Returns the per-client counts and whether the heaps
    /// were scanned.
    async fn count(
        &self,
        scan: &mut Scan,
        rep: &mut PgReport,
        pages: &mut Vec<Page>,
    ) -> Result<(BTreeMap<u32, Counts>, bool), Error> {
        let client = self.client;
        client
            .batch_execute("SET work_mem = '256MB'; SET statement_timeout = 0")
            .await
            .map_err(q("cannot set work_mem"))?;
        let client2 = pg::connect(self.cfg).await.map_err(|e| {
            Error::Msg(format!(
                "cannot open a second connection to {}: {}",
                self.conninfo,
                describe(&e)
            ))
        })?;
        let (rows, sums) = tokio::join!(
            scan.count(client, self.bounds, self.acks),
            schema::sums(&client2)
        );
        let page_errors: Vec<&tokio_postgres::Error> = [rows.as_ref().err(), sums.as_ref().err()]
            .into_iter()
            .flatten()
            .filter(|e| damage::is_page_error(e))
            .collect();
        let mut scanned = false;
        let (rows, sums) = if page_errors.is_empty() {
            (
                rows.map_err(q("cannot count the run's commits"))?,
                Some(sums.map_err(q("cannot read the balance sums"))?),
            )
        } else {
            for e in page_errors {
                pages::note_page_error(client, e, pages, &mut rep.notes).await;
            }
            pages::scan_tables(client, pages, &mut rep.notes).await;
            scanned = true;
            (self.recount(scan, rep, pages).await?, None)
        };
        let (counts, malformed) = rows;
        rep.malformed_tags = malformed;
        if let Some(sums) = sums {
            let i = &mut rep.invariant;
            [i.sum_abalance, i.sum_tbalance, i.sum_bbalance, i.sum_delta] = sums;
            let d: Vec<i64> = (0..4).map(|k| sums[k] - self.start_sums[k]).collect();
            i.holds = d.iter().all(|x| *x == d[0]);
            i.checked = true;
        }
        Ok((counts, scanned))
    }

    /// Counts the commits again, skipping the damaged blocks of `pgbench_history`;
    /// a page error during this second count leaves the commits uncounted
    /// (`commits_checked` false).
    async fn recount(
        &self,
        scan: &mut Scan,
        rep: &mut PgReport,
        pages: &mut Vec<Page>,
    ) -> Result<(BTreeMap<u32, Counts>, u64), Error> {
        let client = self.client;
        let skip: Vec<u64> = pages
            .iter()
            .filter(|p| p.relation == "pgbench_history" && p.fork == "main")
            .map(|p| p.block)
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        scan.skip(skip.clone());
        client
            .batch_execute("SET enable_seqscan = off")
            .await
            .map_err(q("cannot set enable_seqscan"))?;
        rep.notes.push(
            "the balance invariant was not checked: a page of the pgbench tables is damaged".into(),
        );
        match scan.count(client, self.bounds, self.acks).await {
            Ok(r) => {
                rep.skipped_history_blocks = skip;
                Ok(r)
            }
            Err(e) if damage::is_page_error(&e) => {
                pages::note_page_error(client, &e, pages, &mut rep.notes).await;
                rep.notes.push(format!(
                    "the commits could not be counted: {}",
                    describe(&e)
                ));
                rep.commits_checked = false;
                Ok((BTreeMap::new(), 0))
            }
            Err(e) => Err(q("cannot count the run's commits")(e)),
        }
    }
}

/// Puts the tally's counts into the report.
fn counted(rep: &mut PgReport, tally: &rules::Tally) {
    rep.present_commits = tally.present;
    rep.unacknowledged_present = tally.unacknowledged_present;
    rep.lost_commits = tally.lost;
    rep.lost_commits_by_client = tally.lost_by_client.clone();
    rep.unpromised_lost = tally.unpromised_lost;
    rep.ordering_violations = tally.ordering_violations;
    rep.duplicates = tally.duplicates;
    rep.phantoms = tally.phantoms;
}

/// The failure of a pgbench table that does not exist.
fn missing_table(t: &str) -> PgFinding {
    PgFinding {
        kind: PgFindingKind::MissingTable,
        client: None,
        seq: None,
        detail: format!("relation \"{t}\" does not exist (lost, or --dsn names another database)"),
        page: None,
    }
}

/// A table older than the run's: the storage lost the table the run wrote.
fn older_table(t: &str) -> PgFinding {
    PgFinding {
        kind: PgFindingKind::MissingTable,
        client: None,
        seq: None,
        detail: format!(
            "relation {t} is older than the run's: the storage lost the table the run wrote"
        ),
        page: None,
    }
}

/// The failure of a balance invariant that does not hold.
fn invariant_finding(i: &Invariant) -> PgFinding {
    PgFinding {
        kind: PgFindingKind::Invariant,
        client: None,
        seq: None,
        detail: format!(
            "balance sums moved apart since the start: abalance {:+}, tbalance {:+}, bbalance {:+}, history delta {:+} (a partially applied transaction)",
            i.sum_abalance - i.start_sums[0],
            i.sum_tbalance - i.start_sums[1],
            i.sum_bbalance - i.start_sums[2],
            i.sum_delta - i.start_sums[3]
        ),
        page: None,
    }
}

/// The verdict: weighs the counts and damage ([`rules::Failures`]); in a run whose
/// configuration promised nothing (fsync=off, synchronous_commit=off), the findings
/// that setting permits become `unpromised_` ones and no failure. Fills `ok`,
/// `not_measured`, the findings (failures first), the lag histogram (`lags`, or
/// every bucket empty) and the summary.
fn finish(rep: &mut PgReport, out: Findings, missing: &[&str], lags: Option<Vec<LagBucket>>) {
    let Findings {
        mut failures,
        mut expected,
    } = out;
    let weighed = rules::Failures {
        lost_commits: rep.lost_commits,
        ordering_violations: rep.ordering_violations,
        amcheck_corruptions: rep.amcheck.corruptions,
        damaged_pages: rep.damaged_pages,
        unattributed_checksum_failures: rep.unattributed_checksum_failures,
        missing_tables: missing.len() as u64,
        invariant_broken: rep.invariant.checked && !rep.invariant.holds,
        duplicates: rep.duplicates,
        phantoms: rep.phantoms,
        malformed_tags: rep.malformed_tags,
    };
    let problems = weighed.problems(rep.promised);
    if !rep.promised {
        let (moved, kept): (Vec<PgFinding>, Vec<PgFinding>) = std::mem::take(&mut failures)
            .into_iter()
            .partition(|f| f.kind.unpromised().is_some());
        failures = kept;
        for mut f in moved {
            f.kind = f.kind.unpromised().unwrap_or(f.kind);
            f.detail
                .push_str("; the configuration did not promise durability");
            expected.push(f);
        }
    }
    (rep.ok, rep.not_measured) = rules::judge(
        problems,
        rep.acknowledged_commits,
        rep.unpromised_acknowledged,
    );
    rep.findings_total = failures.len() as u64 + expected.len() as u64;
    rep.findings_total = rep.findings_total.max(problems + rep.unpromised_lost);
    failures.extend(expected);
    failures.truncate(MAX_FINDINGS);
    rep.findings = failures;
    rep.lost_lag_histogram = lags.unwrap_or_else(|| plugpull::report::lag_histogram(&[]));
    rep.summary = print::summary(rep, missing);
}

/// Fills `rep` for a server that stopped (the finding's detail names the evidence).
fn unreachable(rep: &mut PgReport, detail: String) {
    rep.server_reachable = false;
    rep.ok = false;
    rep.findings_total = 1;
    rep.summary = format!(
        "FAIL: {}; {} acknowledged commits could not be checked",
        detail.lines().next().unwrap_or_default(),
        rep.acknowledged_commits
    );
    rep.findings = vec![PgFinding {
        kind: PgFindingKind::ServerUnavailable,
        client: None,
        seq: None,
        detail,
        page: None,
    }];
}
