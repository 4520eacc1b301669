//! Waiting for PostgreSQL after the cut: the readiness rule of `plugpull verify`.
//!
//! After a power cut PostgreSQL may not be up yet, or may still be replaying WAL. That
//! is "could not verify" (exit 2), never a finding; only a server that *stopped* is
//! one. Connection attempts repeat every 250 ms until `--pg-wait` (default 5 min):
//!
//! | what the attempt saw | what verify does |
//! | --- | --- |
//! | a session | goes on to the checks |
//! | SQLSTATE 57P03 (starting up, in crash recovery, not yet consistent) | keeps waiting; at the deadline exit 2 "still starting up … give a longer --pg-wait" |
//! | nothing listening (refused, no socket, timeout), 57P01/57P02, 53300 | keeps waiting; at the deadline exit 2 "is PostgreSQL running?" |
//! | the server was seen starting (57P03) and then nothing listens | a finding: PostgreSQL stopped during startup (exit 1) |
//! | with `--pgdata`: no live postmaster, the cluster not shut down cleanly, and the log's tail has PANIC or FATAL | a finding at once: PostgreSQL stopped (exit 1), with the log's tail |
//! | with only `--pg-log`: nothing listens, and the log's last startup event is a PANIC or "aborting startup" (no "ready to accept connections" after it) | the same finding |
//! | an answer that is not PostgreSQL's protocol | exit 2 "not a PostgreSQL server" |
//! | authentication failed, database missing, bad settings | exit 2 with the server's message |
//!
//! With `--pgdata`, every message also carries the cluster state from
//! `pg_controldata` and the last lines of the server log (`--pg-log`, else the newest
//! file in `PGDATA/log`).

use super::check::VerifyArgs;
use super::conn::{self, describe};
use crate::Failure;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config};

/// The outcome of waiting.
pub enum Ready {
    /// A session.
    Up(Client),
    /// The server stopped (the finding's detail, with the evidence).
    Stopped(String),
}

/// Waits for PostgreSQL as the module doc says.
///
/// Errors (exit 2): nothing accepted connections by the deadline, the server was still
/// starting up, the peer is not PostgreSQL, or PostgreSQL refused the session for
/// a reason waiting cannot fix (authentication, a missing database).
pub async fn wait(cfg: &Config, conninfo: &str, opts: &VerifyArgs) -> Result<Ready, Failure> {
    let start = Instant::now();
    let deadline = start + opts.pg_wait;
    let mut seen_starting = false;
    loop {
        let e = match conn::connect(cfg).await {
            Ok(c) => return Ok(Ready::Up(c)),
            Err(e) => e,
        };
        if conn::is_not_postgres(&e) {
            return Err(Failure(format!(
                "{conninfo} answered, but not as a PostgreSQL server does ({}): is --dsn right?",
                describe(&e)
            )));
        }
        let starting = e.code() == Some(&SqlState::CANNOT_CONNECT_NOW);
        if !starting && !conn::is_transient_connect_error(&e) {
            return Err(Failure(format!(
                "cannot connect to PostgreSQL at {conninfo}: {}",
                describe(&e)
            )));
        }
        seen_starting |= starting;
        let why = match (&opts.pgdata, &opts.pg_log) {
            (Some(d), _) => stopped(d, opts.pg_log.as_deref()),
            (None, Some(log)) if !starting => stopped_by_log(log),
            _ => None,
        };
        if let Some(why) = why {
            return Ok(Ready::Stopped(format!(
                "PostgreSQL at {conninfo} stopped: {why}{}",
                evidence(opts)
            )));
        }
        if Instant::now() >= deadline {
            let waited = format!("{:.1} s", start.elapsed().as_secs_f64());
            if starting {
                return Err(Failure(format!(
                    "PostgreSQL at {conninfo} is still starting up after {waited} ({}): crash recovery \
                     can take minutes; run verify again, or give a longer --pg-wait{}",
                    describe(&e),
                    evidence(opts)
                )));
            }
            if seen_starting {
                return Ok(Ready::Stopped(format!(
                    "PostgreSQL at {conninfo} was starting up (crash recovery) and then stopped \
                     accepting connections: {}{}",
                    describe(&e),
                    evidence(opts)
                )));
            }
            return Err(Failure(format!(
                "nothing accepts connections at {conninfo} (waited {waited}): {}; is PostgreSQL \
                 running?{}",
                describe(&e),
                evidence(opts)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Why the cluster in `pgdata` counts as stopped, when it does: no live postmaster,
/// `pg_controldata` says it was not shut down cleanly, and the log's tail holds a
/// PANIC or FATAL line.
fn stopped(pgdata: &Path, log: Option<&Path>) -> Option<String> {
    if postmaster_alive(pgdata) {
        return None;
    }
    let state = controldata_state(pgdata)?;
    if state.contains("shut down") {
        return None; // stopped cleanly, or never started since: not a crash
    }
    let tail = log_tail(pgdata, log, 40);
    let last = tail
        .lines()
        .rev()
        .find(|l| l.contains("PANIC:") || l.contains("FATAL:"))?;
    Some(format!(
        "no postmaster is running, the cluster state is \"{state}\", and the log says: {}",
        last.trim()
    ))
}

/// Why the server whose log is `log` counts as stopped, when nothing listens and no
/// data directory was given: the log's last startup event is a failure (a PANIC, or
/// "aborting startup"), with no "ready to accept connections" after it.
fn stopped_by_log(log: &Path) -> Option<String> {
    let tail = log_tail(Path::new(""), Some(log), 200);
    let last = tail.lines().rev().find(|l| {
        l.contains("PANIC:")
            || l.contains("aborting startup due to startup process failure")
            || l.contains("database system is ready to accept connections")
    })?;
    if last.contains("ready to accept connections") {
        return None;
    }
    let panic = tail
        .lines()
        .rev()
        .find(|l| l.contains("PANIC:"))
        .unwrap_or(last);
    Some(format!(
        "nothing accepts connections and its log says startup failed: {}",
        panic.trim()
    ))
}

/// Whether `PGDATA/postmaster.pid` names a live process.
fn postmaster_alive(pgdata: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(pgdata.join("postmaster.pid")) else {
        return false;
    };
    let Some(pid) = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
    else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// `Database cluster state` from `pg_controldata PGDATA`, if it can be run.
pub fn controldata_state(pgdata: &Path) -> Option<String> {
    let prog = pg_program(pgdata, "pg_controldata")?;
    let o = std::process::Command::new(prog)
        .arg(pgdata)
        .env("LC_ALL", "C")
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Database cluster state:"))
        .map(|s| s.trim().to_string())
}

/// A server program of the version the data directory belongs to (`PG_VERSION`):
/// `/usr/lib/postgresql/V/bin/NAME` when it exists, else NAME on the `PATH`.
fn pg_program(pgdata: &Path, name: &str) -> Option<PathBuf> {
    let v = std::fs::read_to_string(pgdata.join("PG_VERSION")).ok()?;
    let p = PathBuf::from(format!("/usr/lib/postgresql/{}/bin/{name}", v.trim()));
    if p.exists() {
        return Some(p);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// The last `n` lines of the server log: `log` when given, else the newest file in
/// `PGDATA/log`; empty when there is none.
pub fn log_tail(pgdata: &Path, log: Option<&Path>, n: usize) -> String {
    let path = match log {
        Some(p) => Some(p.to_path_buf()),
        None => std::fs::read_dir(pgdata.join("log")).ok().and_then(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
                .max()
                .map(|(_, p)| p)
        }),
    };
    let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The cluster state and the log's tail, for a message (empty without either).
pub fn evidence(opts: &VerifyArgs) -> String {
    let mut s = String::new();
    if let Some(d) = &opts.pgdata {
        match controldata_state(d) {
            Some(st) => s.push_str(&format!(
                "\npg_controldata {}: cluster state \"{st}\"",
                d.display()
            )),
            None => s.push_str(&format!("\n(cannot run pg_controldata on {})", d.display())),
        }
    }
    if opts.pgdata.is_some() || opts.pg_log.is_some() {
        let d = opts.pgdata.clone().unwrap_or_default();
        let tail = log_tail(&d, opts.pg_log.as_deref(), 20);
        if !tail.is_empty() {
            s.push_str(&format!("\nlast lines of the server log:\n{tail}"));
        }
    }
    s
}
