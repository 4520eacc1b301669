//! The human output of a pgbench run's report ([`PgReport`]): the one-line summary
//! and the report `plugpull verify` prints without `--json`.

use crate::pg;
use plugpull::ledger::PgSettings;
use plugpull::report::PgReport;

/// The settings that made the acknowledgements unpromised, e.g. `fsync=off`.
fn unpromised_why(s: &PgSettings) -> String {
    let v = pg::unsafe_settings(s);
    if v.is_empty() {
        "as recorded".into()
    } else {
        v.join(", ")
    }
}

/// The one-line verdict (`PASS: …`, `FAIL: …` or `NOT MEASURED: …`); `missing` are
/// the pgbench tables that do not exist.
pub fn summary(r: &PgReport, missing: &[&str]) -> String {
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
        if let Some(gap) = amcheck_gap(&r.amcheck) {
            s.push_str(&format!("; not measured: {gap}"));
        }
        return s;
    }
    let mut parts = Vec::new();
    for t in missing {
        parts.push(format!("{t} missing"));
    }
    // (count, what in the singular and the plural, whether a configuration that
    // promised nothing permits it: see `plugpull::verdict::pgbench::Failures`).
    let named = [
        (r.lost_commits, "lost commit", "lost commits", true),
        (
            r.ordering_violations,
            "ordering violation",
            "ordering violations",
            true,
        ),
        (r.duplicates, "duplicate", "duplicates", false),
        (r.phantoms, "phantom", "phantoms", false),
        (r.malformed_tags, "malformed tag", "malformed tags", false),
        (
            r.amcheck.corruptions,
            "amcheck corruption",
            "amcheck corruptions",
            true,
        ),
        (r.damaged_pages, "damaged page", "damaged pages", true),
        (
            r.unattributed_checksum_failures,
            "unattributed checksum failure",
            "unattributed checksum failures",
            true,
        ),
    ];
    for (n, one, many, permitted) in named {
        // In an unpromised run only what no setting permits fails.
        if n > 0 && (r.promised || !permitted) {
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
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

/// What a PASS could not say because amcheck did not check everything: `None`
/// when it checked every table and index.
fn amcheck_gap(a: &plugpull::report::Amcheck) -> Option<String> {
    match (&a.note, a.ran) {
        (None, true) => None,
        (Some(n), false) if n == super::verify::AMCHECK_SKIPPED => {
            Some("corruption in the tables and indexes (amcheck skipped by --no-amcheck)".into())
        }
        (_, false) => Some(
            "corruption in the tables and indexes (amcheck could not run: see the note)".into(),
        ),
        (_, true) => Some("corruption where amcheck could not run (see the note)".into()),
    }
}

/// Prints the report for people (stdout): the run, the counts, the checks, at most
/// `show` findings, then the summary line.
pub fn print_human(r: &PgReport, show: usize) {
    print_run(r);
    if !r.server_reachable {
        for f in &r.findings {
            println!("{}", f.detail);
        }
        println!("{}", r.summary);
        return;
    }
    print_counts(r);
    print_checks(r);
    print_findings(r, show);
    print!(
        "{}",
        crate::storage::text(&r.storage, "acknowledged commits")
    );
    print!("{}", crate::storage::cut_text(&r.cut));
    println!("{}", r.summary);
}

/// The run: id, host, what was checked, how it ran and where its data lives.
fn print_run(r: &PgReport) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!("run {} (pgbench) from host {}", r.run_id, r.host);
    println!("checked: {}", r.conninfo);
    println!(
        "ended: {}   durability promised: {}   clients: {}",
        r.cut.ended(),
        yes(r.promised),
        r.clients
    );
    let rs = &r.run_settings.settings;
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
    if rs.full_page_writes == "off" {
        println!("{}", super::FPW_OFF_LABEL);
    }
    println!(
        "data directory: {}{}",
        rs.data_directory,
        if r.run_settings.data_mount.is_empty() {
            String::new()
        } else {
            format!(" on {}", r.run_settings.data_mount)
        }
    );
}

/// The commit counts.
fn print_counts(r: &PgReport) {
    println!("acknowledged commits:   {}", r.acknowledged_commits);
    if r.unpromised_acknowledged > 0 {
        println!("  of which unpromised:  {}", r.unpromised_acknowledged);
    }
    println!(
        "present commits:        {} ({} beyond the acknowledged: in flight or unconfirmed)",
        r.present_commits, r.unacknowledged_present
    );
    println!("lost commits:           {}", r.lost_commits);
    println!("unpromised lost:        {}", r.unpromised_lost);
    println!("ordering violations:    {}", r.ordering_violations);
    println!("duplicates:             {}", r.duplicates);
    println!("phantoms:               {}", r.phantoms);
    if r.malformed_tags > 0 {
        println!("malformed tags:         {}", r.malformed_tags);
    }
}

/// The balance invariant, amcheck, checksum failures, damaged pages, the notes and
/// the time taken.
fn print_checks(r: &PgReport) {
    let i = &r.invariant;
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
    if r.amcheck.ran {
        println!(
            "amcheck:                {} corruptions in {} relations",
            r.amcheck.corruptions, r.amcheck.relations_checked
        );
    } else {
        println!("amcheck:                did not run");
    }
    if let Some(n) = &r.amcheck.note {
        println!("  note: {n}");
    }
    println!(
        "checksum failures:      {} (this database, since the run started)",
        r.checksum_failures
    );
    println!("damaged pages:          {}", r.damaged_pages);
    if !r.commits_checked {
        println!("commits:                NOT COUNTED (see the notes)");
    } else if !r.skipped_history_blocks.is_empty() {
        println!(
            "commits counted:        without the damaged pgbench_history blocks {:?} (their tags count as lost)",
            r.skipped_history_blocks
        );
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    println!(
        "time:                   {} ms (commits and sums {} ms, findings {} ms, amcheck {} ms)",
        r.timings.total_ms, r.timings.commits_ms, r.timings.findings_ms, r.timings.amcheck_ms
    );
}

/// The first `show` findings and the lag histogram of the lost commits.
fn print_findings(r: &PgReport, show: usize) {
    if !r.findings.is_empty() {
        let listed = r.findings.len().min(show);
        println!(
            "findings ({} in all, first {listed} listed; --show N for more, --json for up to {}):",
            r.findings_total,
            r.findings.len()
        );
        for f in r.findings.iter().take(show) {
            match (f.client, f.seq) {
                (Some(c), Some(s)) => {
                    println!("  {:<20} client {c} seq {s}: {}", f.kind, f.detail)
                }
                _ => println!("  {:<20} {}", f.kind, f.detail),
            }
        }
    }
    if r.lost_lag_histogram.iter().any(|b| b.count > 0) {
        println!("lost commits by how long before the end they were acknowledged:");
        print!(
            "{}",
            plugpull::report::lag_histogram_text(&r.lost_lag_histogram)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> PgReport {
        let mut r = PgReport {
            promised: true,
            acknowledged_commits: 10,
            present_commits: 11,
            unacknowledged_present: 1,
            ..Default::default()
        };
        r.amcheck.ran = true;
        r
    }

    #[test]
    fn a_pass_says_what_amcheck_did_not_check() {
        let pass = "PASS: 10 acknowledged commits, 11 present (1 beyond the acknowledged: in \
                    flight or unconfirmed), none lost; balances consistent";
        let mut r = PgReport {
            ok: true,
            ..report()
        };
        assert_eq!(summary(&r, &[]), pass);
        r.amcheck.ran = false;
        r.amcheck.note = Some(crate::pgbench::verify::AMCHECK_SKIPPED.into());
        assert_eq!(
            summary(&r, &[]),
            format!(
                "{pass}; not measured: corruption in the tables and indexes (amcheck skipped \
                 by --no-amcheck)"
            )
        );
        r.amcheck.note = Some("amcheck could not run: permission denied".into());
        assert_eq!(
            summary(&r, &[]),
            format!(
                "{pass}; not measured: corruption in the tables and indexes (amcheck could not \
                 run: see the note)"
            )
        );
        r.amcheck.ran = true;
        assert_eq!(
            summary(&r, &[]),
            format!("{pass}; not measured: corruption where amcheck could not run (see the note)")
        );
    }

    #[test]
    fn the_summary_says_pass_with_what_survived() {
        let r = PgReport {
            ok: true,
            unpromised_lost: 2,
            ..report()
        };
        assert_eq!(
            summary(&r, &[]),
            "PASS: 10 acknowledged commits, 11 present (1 beyond the acknowledged: in flight or \
             unconfirmed), none lost; balances consistent; 2 unpromised commits lost, as the \
             configuration allowed"
        );
    }

    #[test]
    fn the_summary_names_each_failure_and_only_what_the_configuration_forbids() {
        let mut r = PgReport {
            lost_commits: 2,
            duplicates: 1,
            ..report()
        };
        r.invariant.checked = true;
        assert_eq!(
            summary(&r, &["pgbench_history"]),
            "FAIL: pgbench_history missing, 2 lost commits, 1 duplicate, balance invariant broken \
             out of 10 acknowledged commits"
        );
        r.promised = false;
        assert_eq!(
            summary(&r, &[]),
            "FAIL: 1 duplicate out of 10 acknowledged commits"
        );
    }

    #[test]
    fn the_summary_of_an_all_unpromised_run_is_not_measured() {
        let mut r = PgReport {
            promised: false,
            not_measured: true,
            unpromised_acknowledged: 10,
            unpromised_lost: 3,
            ..report()
        };
        r.run_settings.settings.fsync = "off".into();
        r.run_settings.settings.synchronous_commit = "on".into();
        assert_eq!(
            summary(&r, &[]),
            "NOT MEASURED: all 10 acknowledged commits were unpromised (the configuration did not \
             promise durability: fsync=off), so the run measured nothing about the device; 3 of \
             them lost, as that configuration allows"
        );
    }
}
