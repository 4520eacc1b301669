//! A campaign's workload line: the arguments of `plugpull write` as one shell-quoted
//! line (`file --target /dev/nvme1n1 --size 8GiB --jobs 8`), parsed by the same
//! argument definitions `plugpull write` uses, and what a campaign allows in it.

use crate::{file, pgbench, Error};
use clap::Parser;

/// A parsed workload line.
#[derive(Parser, Debug, Clone)]
#[command(no_binary_name = true, name = "workload")]
pub enum Workload {
    /// `plugpull write file …`.
    File(file::WriteArgs),
    /// `plugpull write pgbench …`.
    Pgbench(pgbench::WriteArgs),
}

/// The words of a workload line (shell quoting, as `sh` splits it).
///
/// Errors: unbalanced quotes.
pub fn words(line: &str) -> Result<Vec<String>, Error> {
    shlex::split(line).ok_or_else(|| Error::Msg(format!("--workload {line:?}: unbalanced quotes")))
}

/// The options a campaign's `file` workload may give: those that shape the load.
pub const FILE_OPTIONS: &[&str] = &[
    "--target",
    "--size",
    "--block-size",
    "-j",
    "--jobs",
    "--sync",
    "--pattern",
    "-P",
    "--progress",
    "--seed",
    "--probe-seconds",
    "--max-unconfirmed",
    "--max-unconfirmed-secs",
    "--expect-atomic",
    "--atomic",
];

/// The options a campaign's `pgbench` workload may give.
pub const PGBENCH_OPTIONS: &[&str] = &[
    "--dsn",
    "--init",
    "-s",
    "--scale",
    "-c",
    "--clients",
    "-j",
    "--jobs",
    "-M",
    "--protocol",
    "--pipeline",
    "-P",
    "--progress",
    "--allow-unsafe-config",
    "--probe-seconds",
    "--max-unconfirmed",
    "--max-unconfirmed-secs",
    "--random-seed",
];

/// Parses and checks one workload line for a campaign: `file` or `pgbench` with the
/// arguments of `plugpull write`, only the options that shape the load
/// ([`FILE_OPTIONS`], [`PGBENCH_OPTIONS`]: nothing that writes another file, such
/// as `--ack-log`, nothing the campaign decides, such as `--duration`), and no
/// password in a pgbench conninfo (a campaign record holds no secret).
///
/// Errors: a bad line (clap's message), an option not allowed, a password.
pub fn parse(line: &str) -> Result<Workload, Error> {
    let words = words(line)?;
    let allowed: &[&str] = match words.first().map(String::as_str) {
        Some("file") => FILE_OPTIONS,
        Some("pgbench") => PGBENCH_OPTIONS,
        _ => &[],
    };
    for w in words.iter().skip(1).filter(|w| w.starts_with('-')) {
        let flag = match w.split_once('=') {
            Some((f, _)) => f,
            None if !w.starts_with("--") => &w[..w.len().min(2)],
            None => w.as_str(),
        };
        if !allowed.is_empty() && !allowed.contains(&flag) {
            let why = match flag {
                "--listener" | "--secret-file" | "--insecure" => "the agent uses its own",
                "--duration" | "-T" | "--writes" | "--transactions" | "-t" | "--json" => {
                    "every run goes on until its cut"
                }
                "--force" => "a campaign may not overwrite data that is not plugpull's: run `plugpull write file --force` on the machine once by hand if the target needs it",
                _ => "a campaign workload takes only the options that shape the load (docs/campaign.md), nothing that writes elsewhere or ends the run",
            };
            return Err(Error::Msg(format!(
                "--workload {line:?}: {flag} is not accepted: {why}"
            )));
        }
    }
    let w = Workload::try_parse_from(&words).map_err(|e| {
        Error::Msg(format!(
            "--workload {line:?}: {}",
            e.render().to_string().trim()
        ))
    })?;
    if let Workload::File(a) = &w {
        crate::file::check_args(a).map_err(|e| Error::Msg(format!("--workload {line:?}: {e}")))?;
    }
    if let Workload::Pgbench(a) = &w {
        let Some(dsn) = &a.dsn else {
            return Err(Error::Msg(format!(
                "--workload {line:?}: name the database with --dsn (the agent's configuration allows databases by their conninfo)"
            )));
        };
        if has_password(dsn) {
            return Err(Error::Msg(
                "--workload: the --dsn holds a password, and a campaign record holds no secret: put it in the agent's ~/.pgpass or a PGPASSFILE on the machine under test".into(),
            ));
        }
    }
    Ok(w)
}

/// Whether a conninfo string or `postgresql://` URL carries a password.
fn has_password(dsn: &str) -> bool {
    let lower = dsn.to_ascii_lowercase();
    if lower.contains("password") {
        return true;
    }
    // postgresql://user:secret@host/db
    lower
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .is_some_and(|auth| {
            auth.rsplit_once('@')
                .is_some_and(|(ui, _)| ui.contains(':'))
        })
}

impl Workload {
    /// `file` or `pgbench`.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::File(_) => "file",
            Workload::Pgbench(_) => "pgbench",
        }
    }
}
