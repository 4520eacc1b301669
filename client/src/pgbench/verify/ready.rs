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
//! | with `--pgdata`: no live postmaster, the cluster not shut down cleanly, and the log shows a startup since the run began that failed (after its "starting PostgreSQL" line a PANIC or "aborting startup", no "ready to accept" after it) | a finding at once: PostgreSQL stopped (exit 1), with the log's tail |
//! | with only `--pg-log`: nothing listens, and the log shows such a failed startup | the same finding |
//!
//! Right after a cut, before PostgreSQL was started again, there is no live
//! postmaster and the cluster is "in production": only a failed startup *since the
//! run began* in the log makes that a finding; ordinary FATAL lines (a refused login)
//! never do. The log is read from its end (at most the last lines the rule needs),
//! bytes that are not UTF-8 decoded lossily.
//! | an answer that is not PostgreSQL's protocol | exit 2 "not a PostgreSQL server" |
//! | authentication failed, database missing, bad settings | exit 2 with the server's message |
//!
//! A wait over a second says so on stderr, and again when what it waits for changes
//! ([`waiting_line`]): with `--pgdata` and no live postmaster there, that no server
//! runs in it.
//!
//! With `--pgdata`, every message also carries the cluster state from
//! `pg_controldata` and the last lines of the server log (`--pg-log`, else the newest
//! file in `PGDATA/log`).

use crate::pg::{self, describe};
use crate::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// The server's files verify may read when it runs on the database host: the data
/// directory (`--pgdata`) and the server log (`--pg-log`, else the newest file in
/// `PGDATA/log`). Both are optional.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerFiles<'a> {
    /// The data directory.
    pub pgdata: Option<&'a Path>,
    /// The server log.
    pub pg_log: Option<&'a Path>,
}

impl ServerFiles<'_> {
    /// The last `n` lines of the server log (see [`log_tail`]); empty when neither
    /// file was given.
    pub fn log_tail(&self, n: usize) -> String {
        if self.pgdata.is_none() && self.pg_log.is_none() {
            return String::new();
        }
        log_tail(self.pgdata.unwrap_or(Path::new("")), self.pg_log, n)
    }
}

/// The outcome of waiting.
pub enum Ready {
    /// A session.
    Up(Client),
    /// The server stopped (the finding's detail, with the evidence).
    Stopped(String),
    /// The server refused the session because a page it reads to start one is
    /// damaged ([`super::damage::is_corruption`]): the server's message.
    Damaged(String),
}

/// Waits for PostgreSQL as the module doc says, at most `pg_wait`.
///
/// Errors (exit 2): nothing accepted connections by the deadline, the server was still
/// starting up, the peer is not PostgreSQL, or PostgreSQL refused the session for
/// a reason waiting cannot fix (authentication, a missing database).
///
/// `since_ms` is when the run started (Unix ms): only a startup logged after it can
/// show that the server stopped.
pub async fn wait(
    cfg: &pg::ConnConfig,
    conninfo: &str,
    pg_wait: Duration,
    files: ServerFiles<'_>,
    since_ms: u64,
) -> Result<Ready, Error> {
    let start = Instant::now();
    let deadline = start + pg_wait;
    let mut seen_starting = false;
    // What the wait was last said to be about (stderr), once it lasts over a second.
    let mut said: Option<String> = None;
    loop {
        let e = match pg::connect(cfg).await {
            Ok(c) => return Ok(Ready::Up(c)),
            Err(e) => e,
        };
        if pg::is_not_postgres(&e) {
            return Err(Error::Msg(format!(
                "{conninfo} answered, but not as a PostgreSQL server does ({}): is --dsn right?",
                describe(&e)
            )));
        }
        if super::damage::is_corruption(&e) {
            return Ok(Ready::Damaged(describe(&e)));
        }
        let starting = e.code() == Some(&SqlState::CANNOT_CONNECT_NOW);
        if !starting && !pg::is_transient_connect_error(&e) {
            return Err(Error::Msg(format!(
                "cannot connect to PostgreSQL at {conninfo}: {}",
                pg::describe_connect(cfg, &e)
            )));
        }
        seen_starting |= starting;
        if start.elapsed() >= Duration::from_secs(1) {
            let now = waiting_line(conninfo, pg_wait, starting, files.pgdata);
            if said.as_deref() != Some(now.as_str()) {
                eprintln!("{now}");
                said = Some(now);
            }
        }
        let why = match (files.pgdata, files.pg_log) {
            (Some(d), _) => stopped(d, files.pg_log, since_ms),
            (None, Some(log)) if !starting => stopped_by_log(log, since_ms),
            _ => None,
        };
        if let Some(why) = why {
            return Ok(Ready::Stopped(format!(
                "PostgreSQL at {conninfo} stopped: {why}{}",
                evidence(files)
            )));
        }
        if Instant::now() >= deadline {
            let waited = format!("{:.1} s", start.elapsed().as_secs_f64());
            if starting {
                return Err(Error::Msg(format!(
                    "PostgreSQL at {conninfo} is still starting up after {waited} ({}): crash recovery \
                     can take minutes; run verify again, or give a longer --pg-wait{}",
                    describe(&e),
                    evidence(files)
                )));
            }
            if seen_starting {
                return Ok(Ready::Stopped(format!(
                    "PostgreSQL at {conninfo} was starting up (crash recovery) and then stopped \
                     accepting connections: {}{}",
                    describe(&e),
                    evidence(files)
                )));
            }
            return Err(Error::Msg(format!(
                "nothing accepts connections at {conninfo} (waited {waited}): {}; is PostgreSQL \
                 running?{}",
                describe(&e),
                evidence(files)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Why the cluster in `pgdata` counts as stopped, when it does: no live postmaster,
/// `pg_controldata` says it was not shut down cleanly, and the log says a startup
/// since the run began failed (see [`startup_failed`]). Right after a cut, before
/// PostgreSQL was started again, the first two hold too: the log decides.
fn stopped(pgdata: &Path, log: Option<&Path>, since_ms: u64) -> Option<String> {
    if postmaster_alive(pgdata) {
        return None;
    }
    let state = controldata_state(pgdata)?;
    if state.contains("shut down") {
        return None; // stopped cleanly, or never started since: not a crash
    }
    let why = startup_failed(&log_tail(pgdata, log, STARTUP_LINES), since_ms)?;
    Some(format!(
        "no postmaster is running, the cluster state is \"{state}\", and the log says startup failed: {why}"
    ))
}

/// Why the server whose log is `log` counts as stopped, when nothing listens and no
/// data directory was given: see [`startup_failed`].
fn stopped_by_log(log: &Path, since_ms: u64) -> Option<String> {
    let why = startup_failed(&log_tail(Path::new(""), Some(log), STARTUP_LINES), since_ms)?;
    Some(format!(
        "nothing accepts connections and its log says startup failed: {why}"
    ))
}

/// How many lines of the server log the startup rule reads.
const STARTUP_LINES: usize = 2000;

/// The line that shows the server's latest startup failed, when it did: the log's
/// last "starting PostgreSQL" line dated at or after `since_ms` (the run's start,
/// Unix ms; so a startup after the cut), followed by a PANIC or "aborting startup due
/// to startup process failure", and no "ready to accept" after it. Ordinary FATAL
/// lines (a refused login, a client gone) say nothing about the server; lines of
/// sessions before the cut neither. A log whose lines carry no readable timestamp
/// (see [`line_time_ms`]) never shows a failed startup: waiting then ends in exit 2
/// with the log's tail.
pub fn startup_failed(tail: &str, since_ms: u64) -> Option<String> {
    let lines: Vec<&str> = tail.lines().collect();
    let start = lines.iter().rposition(|l| {
        l.contains("starting PostgreSQL ") && line_time_ms(l).is_some_and(|t| t >= since_ms)
    })?;
    let after = &lines[start..];
    if after.iter().any(|l| l.contains("ready to accept")) {
        return None;
    }
    after
        .iter()
        .rev()
        .find(|l| l.contains("PANIC:"))
        .or_else(|| {
            after
                .iter()
                .rev()
                .find(|l| l.contains("aborting startup due to startup process failure"))
        })
        .map(|l| l.trim().to_string())
}

/// When a server log line was written (Unix ms), from the timestamp it starts with
/// (`%m` or `%t` in `log_line_prefix`, as in the default `'%m [%p] '`):
/// `YYYY-MM-DD HH:MM:SS[.fff] ZONE`, ZONE being `UTC`, `GMT`, `Z` or a numeric
/// offset (`+01`, `-0530`, `+05:30`). `None` for any other line or zone (a named
/// zone such as `CET` cannot be converted without the zone database).
pub fn line_time_ms(line: &str) -> Option<u64> {
    let b = line.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = line.get(from..from + len)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, se) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut i = 19;
    let mut ms = 0;
    if b.get(i) == Some(&b'.') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let frac = &line[i + 1..i + 1 + digits.min(3)];
        ms = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
        i += 1 + digits;
    }
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let zone = line[i + 1..].split_whitespace().next()?;
    let offset_min = match zone {
        "UTC" | "GMT" | "Z" => 0,
        z if z.starts_with('+') || z.starts_with('-') => {
            let digits: String = z[1..].chars().filter(|c| *c != ':').collect();
            if !digits.bytes().all(|c| c.is_ascii_digit()) || !matches!(digits.len(), 2 | 4) {
                return None;
            }
            let hh: i64 = digits[..2].parse().ok()?;
            let mm: i64 = if digits.len() == 4 {
                digits[2..].parse().ok()?
            } else {
                0
            };
            let m = hh * 60 + mm;
            if z.starts_with('-') {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let (yy, mm) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
}

/// The line verify prints when its wait for the server lasts over a second (again
/// only when it changes): `waiting for PostgreSQL at … (up to 300 s): it is starting
/// up (crash recovery)`, or `…: no server is running in --pgdata /srv/pg; start it`
/// (no live postmaster there), or `…: nothing accepts connections yet`.
fn waiting_line(
    conninfo: &str,
    pg_wait: Duration,
    starting: bool,
    pgdata: Option<&Path>,
) -> String {
    let what = match pgdata {
        _ if starting => "it is starting up (crash recovery)".to_string(),
        Some(d) if !postmaster_alive(d) => {
            format!("no server is running in --pgdata {}; start it", d.display())
        }
        _ => "nothing accepts connections yet".to_string(),
    };
    format!(
        "waiting for PostgreSQL at {conninfo} (up to {:.0} s): {what}",
        pg_wait.as_secs_f64()
    )
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
    // Signal 0 only checks that the process exists.
    let pid = rustix::process::Pid::from_raw(pid).filter(|_| pid > 0);
    pid.is_some_and(|p| {
        matches!(
            rustix::process::test_kill_process(p),
            Ok(()) | Err(rustix::io::Errno::PERM)
        )
    })
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
/// `PGDATA/log`; empty when there is none. Read from the file's end, at most
/// `n` × 512 bytes (at least 1 MiB); bytes that are not UTF-8 are decoded lossily
/// (U+FFFD), so a log in another encoding keeps its evidence.
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
    path.and_then(|p| read_tail(&p, n).ok()).unwrap_or_default()
}

/// The last `n` lines of the file at `path`, read backwards in 64 KiB chunks until
/// `n` lines or the byte budget (see [`log_tail`]) are read.
fn read_tail(path: &Path, n: usize) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    const CHUNK: u64 = 64 * 1024;
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let budget = (n as u64).saturating_mul(512).max(1 << 20);
    let mut pos = len;
    let mut buf: Vec<u8> = Vec::new();
    let mut newlines = 0usize;
    while pos > 0 && newlines <= n && len - pos < budget {
        let size = CHUNK.min(pos);
        pos -= size;
        f.seek(SeekFrom::Start(pos))?;
        let mut chunk = vec![0u8; size as usize];
        f.read_exact(&mut chunk)?;
        newlines += chunk.iter().filter(|&&c| c == b'\n').count();
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<&str> = text.lines().collect();
    if pos > 0 && !lines.is_empty() {
        lines.remove(0); // a partial line
    }
    Ok(lines[lines.len().saturating_sub(n)..].join("\n"))
}

/// The cluster state and the log's tail, for a message (empty without either).
pub fn evidence(files: ServerFiles<'_>) -> String {
    let mut s = String::new();
    if let Some(d) = files.pgdata {
        match controldata_state(d) {
            Some(st) => s.push_str(&format!(
                "\npg_controldata {}: cluster state \"{st}\"",
                d.display()
            )),
            None => s.push_str(&format!("\n(cannot run pg_controldata on {})", d.display())),
        }
    }
    let tail = files.log_tail(20);
    if !tail.is_empty() {
        s.push_str(&format!("\nlast lines of the server log:\n{tail}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_timestamps_are_read_in_utc() {
        // date -u -d '2026-11-30 18:40:01.123' +%s%3N
        let t = 1_796_064_001_123;
        assert_eq!(
            line_time_ms("2026-11-30 18:40:01.123 UTC [7] LOG:  x"),
            Some(t)
        );
        assert_eq!(
            line_time_ms("2026-11-30 19:40:01.123 +01 [7] LOG:  x"),
            Some(t)
        );
        assert_eq!(
            line_time_ms("2026-11-30 13:10:01.123 -05:30 [7] x"),
            Some(t)
        );
        assert_eq!(line_time_ms("2026-11-30 18:40:01 GMT x"), Some(t - 123));
        assert_eq!(line_time_ms("2026-11-30 18:40:01.123 CET [7] x"), None);
        assert_eq!(line_time_ms("LOG:  starting PostgreSQL"), None);
    }

    #[test]
    fn only_a_startup_since_the_run_that_failed_is_a_stop() {
        let log = "2026-11-30 18:00:00.000 UTC [1] LOG:  starting PostgreSQL 15.1\n\
                   2026-11-30 18:00:01.000 UTC [1] LOG:  database system is ready to accept connections\n\
                   2026-11-30 18:10:00.000 UTC [9] FATAL:  database \"nope\" does not exist\n";
        let run = line_time_ms("2026-11-30 18:05:00.000 UTC").unwrap();
        assert_eq!(startup_failed(log, run), None);
        let failed = format!(
            "{log}2026-11-30 18:20:00.000 UTC [2] LOG:  starting PostgreSQL 15.1\n\
             2026-11-30 18:20:00.100 UTC [3] PANIC:  could not locate a valid checkpoint record\n\
             2026-11-30 18:20:00.200 UTC [2] LOG:  aborting startup due to startup process failure\n"
        );
        assert_eq!(
            startup_failed(&failed, run).as_deref(),
            Some("2026-11-30 18:20:00.100 UTC [3] PANIC:  could not locate a valid checkpoint record")
        );
        // The same failure before the run began is old news.
        let later = line_time_ms("2026-11-30 18:30:00.000 UTC").unwrap();
        assert_eq!(startup_failed(&failed, later), None);
    }

    #[test]
    fn the_tail_is_read_from_the_end_and_survives_bad_bytes() {
        let p = std::env::temp_dir().join(format!("plugpull-tail-{}", std::process::id()));
        let mut bytes = Vec::new();
        for i in 0..100_000 {
            bytes.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        bytes.extend_from_slice(b"caf\xe9 PANIC:  x\n");
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(
            log_tail(Path::new(""), Some(&p), 3),
            "line 99998\nline 99999\ncaf\u{fffd} PANIC:  x"
        );
        std::fs::remove_file(&p).unwrap();
    }
}
