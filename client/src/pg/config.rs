//! Connection settings resolved as libpq resolves them (PostgreSQL docs,
//! "Parameter Key Words", "Environment Variables"): the connection string's keys
//! first, then the service's (`service=` or `PGSERVICE`, [`super::service`]), then
//! the `PG*` environment variables, then the defaults (the socket directory, port
//! 5432, user = the OS user, database = the user). Then, per host, a password from
//! the password file when none was given ([`super::pgpass`]) and the TLS settings
//! ([`super::tls`]). One [`Target`] per host, so each gets its own password line and
//! a Unix socket never tries TLS.

use super::conninfo::{self, Keywords};
use super::pgpass;
use super::service;
use super::tls::{Attempt, Files, SslMode, Tls};
use std::path::{Path, PathBuf};
use tokio_postgres::config::SslMode as TpSslMode;
use tokio_postgres::Config;

/// The environment variables libpq reads, and their keywords.
const ENV: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGPASSFILE", "passfile"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLNEGOTIATION", "sslnegotiation"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGCHANNELBINDING", "channel_binding"),
    ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
];

/// The keys plugpull handles itself; the rest go to tokio-postgres.
const OURS: &[&str] = &[
    "service",
    "passfile",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
];

/// What resolving reads from the process: its environment and identity.
pub struct Env<'a> {
    /// An environment variable (empty counts as unset).
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// The home directory (`~`).
    pub home: Option<PathBuf>,
    /// The OS user's name (the default user).
    pub os_user: Option<String>,
    /// The default Unix socket directory.
    pub socket_dir: &'a str,
}

/// The settings of one connection: every host, each a [`Target`].
#[derive(Clone)]
pub struct ConnConfig {
    /// The resolved keys, without a password from a password file.
    keys: Keywords,
    /// All hosts in one tokio-postgres configuration (for the getters and
    /// [`super::redacted`]), without a password from a password file.
    all: Config,
    /// One per host, in order.
    targets: Vec<Target>,
}

/// One host of a [`ConnConfig`].
#[derive(Clone)]
pub struct Target {
    /// Its tokio-postgres configuration (one host), with its password.
    cfg: Config,
    /// The TLS setting.
    tls: Tls,
    /// Whether the host is a Unix socket directory (no TLS there).
    unix: bool,
    /// Where a password was looked for in vain, in words, when none was found
    /// (`None`: it has one): what a "password missing" error adds
    /// ([`ConnConfig::password_hint`]).
    no_password: Option<String>,
}

impl Target {
    /// The attempts to make: plain only on a Unix socket, else as the sslmode says.
    pub fn attempts(&self) -> &'static [Attempt] {
        if self.unix {
            &[Attempt::Plain]
        } else {
            self.tls.mode.attempts()
        }
    }

    /// The tokio-postgres configuration for `attempt` (TLS required or off).
    pub fn config(&self, attempt: Attempt) -> Config {
        let mut c = self.cfg.clone();
        c.ssl_mode(match attempt {
            Attempt::Plain => TpSslMode::Disable,
            Attempt::Tls => TpSslMode::Require,
        });
        c
    }

    /// The rustls configuration of a TLS attempt (`None` with `sslmode=disable`).
    pub fn tls(&self) -> Option<&std::sync::Arc<rustls::ClientConfig>> {
        self.tls.config.as_ref()
    }
}

impl ConnConfig {
    /// All hosts' settings (no password from a password file).
    pub fn pg(&self) -> &Config {
        &self.all
    }

    /// The hosts to try, in order.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Where the password was looked for in vain, for each host that has none (the
    /// same words once): what to add to a "password missing" error
    /// ([`super::describe_connect`]). `None`: every host has a password.
    pub fn password_hint(&self) -> Option<String> {
        let mut notes: Vec<&str> = Vec::new();
        for t in &self.targets {
            if let Some(n) = t.no_password.as_deref() {
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
        }
        (!notes.is_empty()).then(|| notes.join("; "))
    }

    /// The TLS keys given (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`), to show.
    pub fn tls_keys(&self) -> impl Iterator<Item = (&String, &String)> {
        self.keys
            .iter()
            .filter(|(k, _)| k.starts_with("ssl") && k.as_str() != "sslnegotiation")
    }

    /// The same settings for database `db` (its password looked up again).
    pub fn with_dbname(&self, db: &str) -> Result<ConnConfig, String> {
        let mut keys = self.keys.clone();
        keys.insert("dbname".into(), db.into());
        let (c, warnings) = build(keys, &process_env())?;
        print_warnings(&warnings);
        Ok(c)
    }
}

impl std::fmt::Debug for ConnConfig {
    /// The settings without their password ([`super::redacted`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnConfig({})", super::redacted(self))
    }
}

/// The process's [`Env`].
fn process_env() -> Env<'static> {
    let dir = ["/var/run/postgresql", "/tmp"]
        .into_iter()
        .find(|d| Path::new(d).is_dir())
        .unwrap_or("/tmp");
    Env {
        var: &|k| std::env::var(k).ok().filter(|v| !v.is_empty()),
        home: home(),
        os_user: super::os_user(),
        socket_dir: dir,
    }
}

/// `$HOME`, else the user's home directory from the password database.
fn home() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(h));
    }
    // SAFETY: getpwuid returns null or a pointer to static storage, copied at once.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        if pw.is_null() || (*pw).pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr((*pw).pw_dir);
        Some(PathBuf::from(dir.to_string_lossy().into_owned()))
    }
}

fn print_warnings(warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {w}");
    }
}

/// Builds the connection settings from `dsn` (or nothing) plus the environment,
/// printing the warnings (a password file ignored) on stderr.
pub fn config(dsn: Option<&str>) -> Result<ConnConfig, String> {
    let env = process_env();
    let keys = resolve(dsn.unwrap_or(""), &env)?;
    let (c, warnings) = build(keys, &env)?;
    print_warnings(&warnings);
    Ok(c)
}

/// The keys of `dsn`, then its service's, then the environment's, then the defaults.
pub fn resolve(dsn: &str, env: &Env) -> Result<Keywords, String> {
    let mut keys = conninfo::parse(dsn).map_err(|e| {
        format!(
            "cannot parse connection string {:?}: {e}",
            conninfo::redact_dsn(dsn.trim())
        )
    })?;
    let var = |k: &str| (env.var)(k).filter(|v| !v.is_empty());
    if let Some(name) = keys.get("service").cloned().or_else(|| var("PGSERVICE")) {
        let files = service::files(env.var, env.home.as_deref());
        for (k, v) in service::lookup(&name, &files)? {
            keys.entry(k).or_insert(v);
        }
    }
    for (name, key) in ENV {
        if !keys.contains_key(*key) {
            if let Some(v) = var(name) {
                keys.insert(key.to_string(), v);
            }
        }
    }
    if !keys.contains_key("host") && !keys.contains_key("hostaddr") {
        keys.insert("host".into(), env.socket_dir.into());
    }
    if !keys.contains_key("user") {
        let user = env
            .os_user
            .clone()
            .ok_or("no user name: set PGUSER or user= in --dsn")?;
        keys.insert("user".into(), user);
    }
    if !keys.contains_key("dbname") {
        keys.insert("dbname".into(), keys["user"].clone());
    }
    keys.entry("connect_timeout".into())
        .or_insert_with(|| "10".into());
    keys.entry("application_name".into())
        .or_insert_with(|| "plugpull".into());
    if keys.get("password").is_some_and(|p| p.is_empty()) {
        keys.remove("password");
    }
    Ok(keys)
}

/// The per-host passwords' and TLS files' part: the settings from resolved `keys`,
/// and the warnings to print.
pub fn build(keys: Keywords, env: &Env) -> Result<(ConnConfig, Vec<String>), String> {
    let list = |k: &str| -> Vec<String> {
        keys.get(k)
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default()
    };
    let (hosts, addrs, ports) = (list("host"), list("hostaddr"), list("port"));
    let n = hosts.len().max(addrs.len());
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(format!(
            "could not match {} host names to {} hostaddr values",
            hosts.len(),
            addrs.len()
        ));
    }
    if ports.len() > 1 && ports.len() != n {
        return Err(format!(
            "could not match {} port numbers to {n} hosts",
            ports.len()
        ));
    }
    if let Some(p) = ports
        .iter()
        .find(|p| !p.is_empty() && p.parse::<u16>().is_err())
    {
        return Err(format!("port {p:?} is not a port number"));
    }
    match keys.get("sslnegotiation").map(String::as_str) {
        None | Some("postgres") => {}
        Some(v) => {
            return Err(format!(
                "sslnegotiation={v} is not supported (only postgres)"
            ))
        }
    }
    let mode = SslMode::parse(keys.get("sslmode").map_or("prefer", String::as_str))?;
    let in_home = |f: &str| {
        env.home
            .clone()
            .unwrap_or_default()
            .join(".postgresql")
            .join(f)
    };
    let file = |k: &str, default: &str| keys.get(k).map_or_else(|| in_home(default), PathBuf::from);
    let files = Files {
        root_cert: file("sslrootcert", "root.crt"),
        cert: file("sslcert", "postgresql.crt"),
        key: file("sslkey", "postgresql.key"),
    };
    if files.root_cert.as_os_str() == "system" {
        return Err("sslrootcert=system is not supported: give the CA file's path".into());
    }
    let tls = Tls::new(mode, &files)?;
    let tokio_part = |k: &(&String, &String)| !OURS.contains(&k.0.as_str());
    let parse = |keys: &Keywords| -> Result<Config, String> {
        conninfo::to_conninfo(keys.iter().filter(tokio_part))
            .parse()
            .map_err(|e| format!("invalid connection settings: {e}"))
    };
    let all = parse(&keys)?;
    let (passfile, shown) = match keys.get("passfile") {
        Some(p) => (PathBuf::from(p), p.clone()),
        None => (
            env.home.clone().unwrap_or_default().join(".pgpass"),
            "~/.pgpass".to_string(),
        ),
    };
    let mut warnings = Vec::new();
    let mut targets = Vec::with_capacity(n);
    for i in 0..n {
        let mut one = keys.clone();
        let get = |v: &[String]| v.get(i).cloned().filter(|s| !s.is_empty());
        let (host, addr) = (get(&hosts), get(&addrs));
        let port = match ports.len() {
            1 => ports[0].clone(),
            _ => ports.get(i).cloned().unwrap_or_default(),
        };
        let port = Some(port).filter(|p| !p.is_empty());
        one.remove("hostaddr");
        one.remove("port");
        let host = host.or_else(|| addr.is_none().then(|| env.socket_dir.to_string()));
        match &host {
            Some(h) => one.insert("host".into(), h.clone()),
            None => one.remove("host"),
        };
        if let Some(a) = &addr {
            one.insert("hostaddr".into(), a.clone());
        }
        if let Some(p) = &port {
            one.insert("port".into(), p.clone());
        }
        let mut no_password = None;
        if !one.contains_key("password") {
            let want_host = match (&host, &addr) {
                (Some(h), _) if h != env.socket_dir => h.as_str(),
                (None, Some(a)) => a.as_str(),
                _ => "localhost",
            };
            let want = pgpass::Want {
                host: want_host,
                port: port.as_deref().unwrap_or("5432"),
                database: &keys["dbname"],
                user: &keys["user"],
            };
            match password_from_file(&passfile, &shown, want, &mut warnings) {
                Ok(pw) => {
                    one.insert("password".into(), pw);
                }
                Err(searched) => no_password = Some(searched),
            }
        }
        targets.push(Target {
            cfg: parse(&one)?,
            tls: tls.clone(),
            unix: host.as_deref().is_some_and(|h| h.starts_with('/')),
            no_password,
        });
    }
    Ok((ConnConfig { keys, all, targets }, warnings))
}

/// The password file's password for `want` (`Ok`), or where the search for one went,
/// in words (`Err`): libpq looks in the connection string, `PGPASSWORD`, then the
/// password file at `path` (`shown` as the user gave it), which does not exist, has no
/// line for `want`, or was ignored (its warning, once, in `warnings`).
fn password_from_file(
    path: &Path,
    shown: &str,
    want: pgpass::Want,
    warnings: &mut Vec<String>,
) -> Result<String, String> {
    let file = if shown == path.display().to_string() {
        shown.to_string()
    } else {
        format!("{shown} ({})", path.display())
    };
    let found = match pgpass::lookup(path, shown, want) {
        Ok(Some(pw)) => return Ok(pw),
        Ok(None) if path.exists() => format!(
            "{file} has no line for {}:{}:{}:{}",
            want.host, want.port, want.database, want.user
        ),
        Ok(None) => format!("{file} does not exist"),
        Err(w) => {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
            format!("{file} was ignored (the warning says why)")
        }
    };
    Err(format!(
        "looked for a password in the connection string, in PGPASSWORD and in the password file: {found}"
    ))
}

#[cfg(test)]
mod tests;
