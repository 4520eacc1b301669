//! Connecting to PostgreSQL as libpq does, and reading the settings that decide
//! whether a `COMMIT` promises durability. Every command that connects (`write
//! pgbench` and its clients, `verify`, `probe --dsn`, the agent's runs) builds its
//! settings with [`config`] and connects with [`connect`] (the pgbench clients'
//! own sockets read the same [`ConnConfig`]).
//!
//! What is supported, each by libpq's documented rules:
//! * a conninfo string (`host=/run/postgresql dbname=bench`) or a `postgresql://`
//!   URL ([`conninfo`]);
//! * a service from `service=` or `PGSERVICE` in `PGSERVICEFILE` or
//!   `~/.pg_service.conf`, then `PGSYSCONFDIR/pg_service.conf` (default
//!   `/etc/postgresql-common`) ([`service`]);
//! * the `PG*` environment variables, then libpq's defaults (socket directory
//!   `/var/run/postgresql` or `/tmp`, port 5432, user = the OS user, database = the
//!   user) ([`config`](mod@config));
//! * the password file `passfile=`/`PGPASSFILE`/`~/.pgpass` when no password is
//!   given, ignored with a warning when group- or world-accessible ([`pgpass`]);
//! * `sslmode` disable … verify-full, `sslrootcert`, `sslcert`, `sslkey` on rustls
//!   ([`tls`]).
//!
//! Not supported: `sslnegotiation=direct`, `sslrootcert=system`, `sslcrl`,
//! `sslpassword` (encrypted client keys), GSSAPI; a server certificate must name
//! its host in a subjectAltName (rustls does not read the CN).

pub mod config;
pub mod conninfo;
pub mod pgpass;
pub mod service;
pub mod tls;

pub use config::{config, ConnConfig};
pub use conninfo::redact_dsn;

use conninfo::quote;
use plugpull::ledger::PgSettings;
use tls::Attempt;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The name of the effective OS user (libpq's default user name).
pub(crate) fn os_user() -> Option<String> {
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
/// `host=/tmp port=5432 user=bench dbname=bench`; the TLS keys given follow
/// (`sslmode=verify-full sslrootcert=/etc/ca.crt`), so a later reconnection with
/// this text (`verify`) makes the same kind of connection.
pub fn redacted(conn: &ConnConfig) -> String {
    let cfg = conn.pg();
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
    for (k, v) in conn.tls_keys() {
        parts.push(format!("{k}={}", quote(v)));
    }
    parts.join(" ")
}

/// The text that tells one server instance from another: its postmaster's start
/// time (to the microsecond) and port. The run's clients must reach the server the
/// setup checked (its settings, its tables): with several hosts in the DSN, a client
/// could otherwise land on another one (a standby, a server with `fsync=off`).
pub const SERVER_IDENTITY_SQL: &str =
    "SELECT pg_postmaster_start_time()::text || ' port ' || current_setting('port')";

/// Opens one connection: the hosts in order (shuffled with
/// `load_balance_hosts=random`), on each the attempts its sslmode makes
/// ([`tls::SslMode::attempts`]: the next only when the one before was refused), the
/// first session that opens. The connection task runs on the current tokio runtime.
/// `Err`: the last attempt's error.
pub async fn connect(conn: &ConnConfig) -> Result<Client, tokio_postgres::Error> {
    let mut targets: Vec<&config::Target> = conn.targets().iter().collect();
    if conn.pg().get_load_balance_hosts() == tokio_postgres::config::LoadBalanceHosts::Random {
        use rand::seq::SliceRandom;
        targets.shuffle(&mut rand::rng());
    }
    let mut last = None;
    for t in targets {
        for &attempt in t.attempts() {
            let cfg = t.config(attempt);
            let r = match (attempt, t.tls()) {
                (Attempt::Tls, Some(tls)) => {
                    spawned(cfg.connect(MakeRustlsConnect::new((**tls).clone())).await)
                }
                _ => spawned(cfg.connect(NoTls).await),
            };
            match r {
                Ok(client) => return Ok(client),
                Err(e) => {
                    let refused = tls::refused(&e);
                    last = Some(e);
                    if !refused {
                        break;
                    }
                }
            }
        }
    }
    Err(last.expect("a ConnConfig has at least one host"))
}

/// The client of a connection just made, its connection task spawned.
fn spawned<S, T>(
    r: Result<(Client, tokio_postgres::Connection<S, T>), tokio_postgres::Error>,
) -> Result<Client, tokio_postgres::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (client, connection) = r?;
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

/// [`describe`] for an error of [`connect`] with `conn`: a "password missing" error
/// also says where the password was looked for ([`ConnConfig::password_hint`]).
pub fn describe_connect(conn: &ConnConfig, e: &tokio_postgres::Error) -> String {
    let d = describe(e);
    match conn.password_hint() {
        Some(hint) if d.contains("password missing") => format!("{d} ({hint})"),
        _ => d,
    }
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
        // the configuration is wrong (e.g. a password is needed but none given)
        // or TLS failed (a certificate not trusted stays so).
        None if tls::is_tls_error(e) => false,
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
