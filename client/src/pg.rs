//! Connecting to PostgreSQL the way libpq users expect, and reading the settings
//! that decide whether a `COMMIT` promises durability.
//!
//! Connection settings: a conninfo string (`host=/run/postgresql dbname=bench`) or a
//! `postgresql://` URL (both parsed by `tokio_postgres::Config`); whatever it leaves
//! out comes from `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE` and `PGPASSWORD`, then
//! from libpq's defaults (socket directory `/var/run/postgresql` or `/tmp`, port 5432,
//! user = the OS user, database = the user). A host starting with `/` is a Unix
//! socket directory. Not supported: `.pgpass`, `PGSERVICE`, TLS (connections are
//! made without TLS; `sslmode=require` fails).

use plugpull::ledger::PgSettings;
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, NoTls};

/// `dsn` as text safe to print: a URL's `user:password@` loses its password (up to
/// the last `@`), and in
/// the key=value form every `password` value (quoted or not) becomes `***`
/// (libpq's syntax, PostgreSQL docs "Connection Strings"). Used where the DSN could
/// not be parsed, so [`redacted`] cannot be.
pub fn redact_dsn(dsn: &str) -> String {
    if let Some(scheme_end) = dsn.find("://") {
        let rest = &dsn[scheme_end + 3..];
        // The last `@`: a password may hold `/`, `?` or `@` in a malformed URL (this
        // may hide more than the password, never less).
        if let Some(at) = rest.rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                return format!(
                    "{}{}:***{}",
                    &dsn[..scheme_end + 3],
                    &rest[..colon],
                    &rest[at..]
                );
            }
        }
        return dsn.to_string();
    }
    let mut out = String::new();
    let mut rest = dsn;
    while let Some(i) = rest.find("password") {
        let (head, tail) = rest.split_at(i + "password".len());
        out.push_str(head);
        let after = tail.trim_start();
        if !after.starts_with('=') {
            rest = tail;
            continue;
        }
        let value = after[1..].trim_start();
        let len = if let Some(q) = value.strip_prefix('\'') {
            let mut end = q.len();
            let mut esc = false;
            for (k, c) in q.char_indices() {
                match c {
                    '\\' if !esc => esc = true,
                    '\'' if !esc => {
                        end = k + 1;
                        break;
                    }
                    _ => esc = false,
                }
            }
            1 + end
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        out.push_str("=***");
        rest = &value[len.min(value.len())..];
    }
    out.push_str(rest);
    out
}

/// Builds the connection configuration from `dsn` (or nothing) plus the environment.
pub fn config(dsn: Option<&str>) -> Result<Config, String> {
    let text = dsn.unwrap_or("").trim();
    let mut cfg: Config = text.parse().map_err(|e| {
        format!(
            "cannot parse connection string {:?}: {}",
            redact_dsn(text),
            describe(&e)
        )
    })?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if cfg.get_hosts().is_empty() && cfg.get_hostaddrs().is_empty() {
        match env("PGHOST") {
            Some(hosts) => {
                for h in hosts.split(',') {
                    cfg.host(h.trim());
                }
            }
            None => {
                let dir = ["/var/run/postgresql", "/tmp"]
                    .into_iter()
                    .find(|d| std::path::Path::new(d).is_dir())
                    .unwrap_or("/tmp");
                cfg.host(dir);
            }
        }
    }
    if cfg.get_ports().is_empty() {
        if let Some(p) = env("PGPORT") {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("PGPORT={p:?} is not a port number"))?;
            cfg.port(port);
        }
    }
    if cfg.get_user().is_none() {
        let user = env("PGUSER")
            .or_else(os_user)
            .ok_or("no user name: set PGUSER or user= in --dsn")?;
        cfg.user(user);
    }
    if cfg.get_dbname().is_none() {
        let db = env("PGDATABASE").unwrap_or_else(|| cfg.get_user().unwrap_or("").to_string());
        cfg.dbname(db);
    }
    if cfg.get_password().is_none() {
        if let Some(pw) = env("PGPASSWORD") {
            cfg.password(pw);
        }
    }
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(Duration::from_secs(10));
    }
    if cfg.get_application_name().is_none() {
        cfg.application_name("plugpull");
    }
    Ok(cfg)
}

/// The name of the effective OS user (libpq's default user name).
fn os_user() -> Option<String> {
    // SAFETY: getpwuid returns a pointer into static storage or null; we copy the
    // name out at once and this process does not call getpw* concurrently here.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        if pw.is_null() || (*pw).pw_name.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr((*pw).pw_name);
        Some(name.to_string_lossy().into_owned())
    }
    .or_else(|| std::env::var("USER").ok())
}

/// The connection settings as a conninfo string without the password, e.g.
/// `host=/tmp port=5432 user=bench dbname=bench`.
pub fn redacted(cfg: &Config) -> String {
    let mut parts = Vec::new();
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(s) => s.clone(),
            Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    if !hosts.is_empty() {
        parts.push(format!("host={}", quote(&hosts.join(","))));
    }
    let addrs: Vec<String> = cfg.get_hostaddrs().iter().map(|a| a.to_string()).collect();
    if !addrs.is_empty() {
        parts.push(format!("hostaddr={}", addrs.join(",")));
    }
    let ports: Vec<String> = cfg.get_ports().iter().map(|p| p.to_string()).collect();
    parts.push(format!(
        "port={}",
        if ports.is_empty() {
            "5432".to_string()
        } else {
            ports.join(",")
        }
    ));
    if let Some(u) = cfg.get_user() {
        parts.push(format!("user={}", quote(u)));
    }
    if let Some(d) = cfg.get_dbname() {
        parts.push(format!("dbname={}", quote(d)));
    }
    if let Some(o) = cfg.get_options() {
        parts.push(format!("options={}", quote(o)));
    }
    parts.join(" ")
}

/// Quotes a conninfo value when it needs it (empty, spaces, quotes, backslashes).
fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '\'', '\\']) {
        return v.to_string();
    }
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The text that tells one server instance from another: its postmaster's start
/// time (to the microsecond) and port. The run's clients must reach the server the
/// setup checked (its settings, its tables): with several hosts in the DSN, a client
/// could otherwise land on another one (a standby, a server with `fsync=off`).
pub const SERVER_IDENTITY_SQL: &str =
    "SELECT pg_postmaster_start_time()::text || ' port ' || current_setting('port')";

/// Opens one connection; the connection task runs on the current tokio runtime.
pub async fn connect(cfg: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = cfg.connect(NoTls).await?;
    tokio::spawn(async move {
        // The error, if any, reaches the client as a closed connection.
        let _ = connection.await;
    });
    Ok(client)
}

/// A server error as one line: `SEVERITY: message (SQLSTATE code); detail`.
pub fn server_message(severity: &str, message: &str, code: &str, detail: Option<&str>) -> String {
    let mut s = format!("{severity}: {message} (SQLSTATE {code})");
    if let Some(d) = detail {
        s.push_str(&format!("; {d}"));
    }
    s
}

/// Whether a server error ends the session: FATAL or PANIC, or a connection-class
/// SQLSTATE (`08…` connection exception, `57P…` operator intervention).
pub fn ends_session(severity: &str, code: &str) -> bool {
    matches!(severity, "FATAL" | "PANIC") || code.starts_with("08") || code.starts_with("57P")
}

/// A readable one-line description of a PostgreSQL error: the server's message
/// with its SQLSTATE, or the client-side error with its causes.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return server_message(db.severity(), db.message(), db.code().code(), db.detail());
    }
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        s.push_str(&format!(": {cause}"));
        src = cause.source();
    }
    s
}

/// Whether an error means the connection is gone (closed, I/O error, a FATAL or
/// PANIC from the server, or a connection-class SQLSTATE), as opposed to an error in
/// a statement after which the session goes on.
pub fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        Some(db) => ends_session(db.severity(), db.code().code()),
        // I/O, protocol and timeout errors: no server answer we can trust.
        None => e.code().is_none(),
    }
}

/// Whether a connect error is worth retrying while the server comes up: refused or
/// unreachable socket, timeouts, "the database system is starting up", "in recovery
/// mode", "shutting down", or too many connections. Authentication errors and a
/// missing database are not.
pub fn is_transient_connect_error(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(c) => {
            *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::TOO_MANY_CONNECTIONS
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || c.code().starts_with("08")
        }
        // Client-side: transient when the socket failed or timed out; not when
        // the configuration is wrong (e.g. a password is needed but none given).
        None => {
            let mut src = std::error::Error::source(e);
            while let Some(cause) = src {
                if cause.is::<std::io::Error>() {
                    return true;
                }
                src = cause.source();
            }
            e.is_closed() || e.to_string().contains("timeout")
        }
    }
}

/// Whether a connect error means the peer answered, but not in PostgreSQL's
/// protocol (bytes that do not parse as its messages, a message out of place, or a
/// partial message before the peer closed): the address is not a PostgreSQL server.
pub fn is_not_postgres(e: &tokio_postgres::Error) -> bool {
    let s = describe(e);
    e.code().is_none()
        && (s.starts_with("unexpected message from server")
            || s.starts_with("error parsing response from server")
            || s.contains("bytes remaining on stream"))
}

/// Reads the settings a run records through `client`.
pub async fn read_settings(client: &Client) -> Result<PgSettings, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT name, setting FROM pg_settings WHERE name = ANY($1)",
            &[&vec![
                "server_version",
                "fsync",
                "synchronous_commit",
                "full_page_writes",
                "wal_sync_method",
                "data_checksums",
                "data_directory",
                "wal_log_hints",
                "data_sync_retry",
                "commit_delay",
                "synchronous_standby_names",
            ]],
        )
        .await?;
    let mut s = PgSettings::default();
    for r in rows {
        let name: String = r.get(0);
        let value: String = r.get(1);
        match name.as_str() {
            "server_version" => s.server_version = value,
            "fsync" => s.fsync = value,
            "synchronous_commit" => s.synchronous_commit = value,
            "full_page_writes" => s.full_page_writes = value,
            "wal_sync_method" => s.wal_sync_method = value,
            "data_checksums" => s.data_checksums = value,
            "data_directory" => s.data_directory = value,
            "wal_log_hints" => s.wal_log_hints = value,
            "data_sync_retry" => s.data_sync_retry = value,
            "commit_delay" => s.commit_delay = value,
            "synchronous_standby_names" => s.synchronous_standby_names = value,
            _ => {}
        }
    }
    if s.data_directory.is_empty() {
        s.data_directory = "(hidden)".into();
    }
    Ok(s)
}

/// The settings under which a successful `COMMIT` is *not* promised durable,
/// as `name=value` texts; empty when it is promised (`fsync=on` and
/// `synchronous_commit` one of `on`, `local`, `remote_write`, `remote_apply`,
/// each of which waits for the local WAL flush).
pub fn unsafe_settings(s: &PgSettings) -> Vec<String> {
    let mut v = Vec::new();
    if s.fsync != "on" {
        v.push(format!("fsync={}", s.fsync));
    }
    if !matches!(
        s.synchronous_commit.as_str(),
        "on" | "local" | "remote_write" | "remote_apply"
    ) {
        v.push(format!("synchronous_commit={}", s.synchronous_commit));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_and_url_are_parsed_and_redacted() {
        let c = config(Some(
            "host=/tmp/x port=5433 user=u dbname=d password=secret",
        ))
        .unwrap();
        let r = redacted(&c);
        assert_eq!(r, "host=/tmp/x port=5433 user=u dbname=d");
        let c = config(Some("postgresql://u:pw@127.0.0.1:5444/db")).unwrap();
        assert_eq!(redacted(&c), "host=127.0.0.1 port=5444 user=u dbname=db");
        assert_eq!(c.get_password(), Some(&b"pw"[..]));
    }

    #[test]
    fn a_dsn_that_cannot_be_parsed_is_printed_without_its_password() {
        assert_eq!(
            redact_dsn("host=/tmp password=hunter2 dbname='bench"),
            "host=/tmp password=*** dbname='bench"
        );
        assert_eq!(
            redact_dsn("password = 'a b\\' c' port=x"),
            "password=*** port=x"
        );
        assert_eq!(
            redact_dsn("postgresql://u:hun/ter@h:99999/db"),
            "postgresql://u:***@h:99999/db"
        );
        assert_eq!(redact_dsn("postgresql://u@h/db"), "postgresql://u@h/db");
        let e = config(Some("host=/tmp password=hunter2 dbname='bench")).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(
            e.starts_with(
                "cannot parse connection string \"host=/tmp password=*** dbname='bench\": "
            ),
            "{e}"
        );
        let e = config(Some("postgresql://u:hunter2@h:99999/db")).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it\\'s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("plain"), "plain");
    }

    #[test]
    fn unsafe_settings_are_named() {
        let mut s = PgSettings {
            fsync: "on".into(),
            synchronous_commit: "on".into(),
            ..Default::default()
        };
        assert!(unsafe_settings(&s).is_empty());
        s.synchronous_commit = "remote_apply".into();
        assert!(unsafe_settings(&s).is_empty());
        s.synchronous_commit = "off".into();
        s.fsync = "off".into();
        assert_eq!(
            unsafe_settings(&s),
            vec![
                "fsync=off".to_string(),
                "synchronous_commit=off".to_string()
            ]
        );
    }
}
