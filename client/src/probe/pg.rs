//! `plugpull probe --dsn`: the server's settings (`pg_settings`, through
//! [`crate::pg`]), its data directory probed like a target, and its
//! backend's `/proc/PID/maps` checked for `libeatmydata`. The pure model and the
//! `pg-*` rules are the core's [`plugpull::probe::pg`].
//!
//! Two entry points: [`probe_dsn`] (connect, probe, disconnect) for `plugpull
//! probe`, and [`probe_postgres`] for a caller that already holds a session (`write
//! pgbench` at its start).

use super::{finish, probe};
use crate::pg as conn;
use crate::Error;
use plugpull::probe::pg::{self, PgProbe};
use plugpull::probe::Probe;
use std::path::Path;
use tokio_postgres::Client;

/// Connects with `dsn` (plus the `PG*` environment, as `write pgbench` does), runs
/// [`probe_postgres`] and disconnects. `Err`: no connection, or the settings could
/// not be read.
pub async fn probe_dsn(dsn: &str) -> Result<Probe, Error> {
    let cfg = conn::config(Some(dsn)).map_err(Error::Msg)?;
    let conninfo = conn::redacted(&cfg);
    let client = conn::connect(&cfg).await.map_err(|e| {
        Error::Msg(format!(
            "cannot connect to {conninfo}: {}",
            conn::describe_connect(&cfg, &e)
        ))
    })?;
    let settings = conn::read_settings(&client).await.map_err(|e| {
        Error::Msg(format!(
            "cannot read the server's settings: {}",
            conn::describe(&e)
        ))
    })?;
    probe_postgres(&client, &conninfo, settings).await
}

/// Probes the server `client` is connected to (`conninfo`: the redacted connection
/// settings, [`conn::redacted`]) and returns the whole probe with the server's data
/// directory as its target: the directory's stack in `layers`/`leaves` (when it is
/// visible from this host; else a note says why), `postgres` filled in, and the
/// warnings of the stack followed by those of the server ([`pg::warnings`]). The
/// backend is `client`'s own session, so the session must stay open meanwhile.
/// `settings` are the server's as [`conn::read_settings`] read them on `client`.
/// When `pg_wal` is on another filesystem, its stack goes in `postgres.wal_stack`
/// and its leaves join the probe's. Without the timed flush loop and the
/// cut-evidence snapshot (the caller adds them).
/// `Err` only when the walk's thread panicked.
pub async fn probe_postgres(
    client: &Client,
    conninfo: &str,
    settings: plugpull::ledger::PgSettings,
) -> Result<Probe, Error> {
    let pid: Option<i32> = match client.query_one("SELECT pg_backend_pid()", &[]).await {
        Ok(r) => r.get(0),
        Err(_) => None,
    };
    let dir = settings.data_directory.clone();
    // The walk reads sysfs and runs tools (each up to 5 s): off the async workers.
    // The session stays open meanwhile, so its backend is there to look at.
    let (mut p, wal, backend) = tokio::task::spawn_blocking(move || {
        let mut p = data_directory(&dir);
        let wal = wal_elsewhere(&dir, &mut p);
        (p, wal, backend(pid, &dir))
    })
    .await
    .map_err(|e| Error::Msg(format!("the data directory's probe failed: {e}")))?;
    let dir = &settings.data_directory;
    if let (Backend::NotHere(why), false) = (&backend, p.layers.is_empty()) {
        p.notes.push(format!(
            "the data directory {dir} exists on this host, but the server's backend {why}: the server may run elsewhere, and the stack above may not be its"
        ));
    }
    let server_on_this_host = match backend {
        Backend::Maps(_) => Some(true),
        Backend::NotHere(_) => Some(false),
        Backend::Unknown(_) => None,
    };
    let backend_eatmydata = match backend {
        Backend::Maps(m) => Some(m),
        Backend::NotHere(why) => {
            p.notes.push(format!(
                "the postgres backend {why}: libeatmydata in the server not checked"
            ));
            None
        }
        Backend::Unknown(why) => {
            p.notes.push(why);
            None
        }
    };
    let pg = PgProbe {
        conninfo: conninfo.to_string(),
        settings,
        data_directory_stack: None,
        backend_pid: pid,
        backend_eatmydata,
        server_on_this_host,
        wal_stack: wal.map(Box::new),
    };
    p.warnings.extend(pg::warnings(&pg));
    p.postgres = Some(pg);
    Ok(p)
}

/// `target`'s probe with the server's probe `server` (from [`probe_postgres`])
/// beside it: the data directory's stack goes into
/// `postgres.data_directory_stack`, its notes and warnings (each once) follow
/// `target`'s own.
pub fn beside(mut target: Probe, mut server: Probe) -> Probe {
    let mut pg = server.postgres.take();
    for n in std::mem::take(&mut server.notes) {
        if !target.notes.contains(&n) {
            target.notes.push(n);
        }
    }
    for w in &server.warnings {
        if !target.warnings.contains(w) {
            target.warnings.push(w.clone());
        }
    }
    if let Some(pg) = pg.as_mut() {
        if !server.layers.is_empty() {
            pg.data_directory_stack = Some(Box::new(server));
        }
    }
    target.postgres = pg;
    target
}

/// The probe of the data directory `dir` when it is visible from this host; else
/// a probe of nothing but the environment, with a note saying why.
fn data_directory(dir: &str) -> Probe {
    let why = if dir == "(hidden)" {
        "is hidden from this role (reading it needs pg_read_all_settings)".to_string()
    } else if !Path::new(dir).exists() {
        "does not exist on this host (the server runs elsewhere?)".to_string()
    } else {
        match probe(Path::new(dir)) {
            Ok(p) => return p,
            Err(e) => format!("could not be probed ({e})"),
        }
    };
    let mut p = Probe {
        target: dir.to_string(),
        notes: vec![format!(
            "the server's data directory {dir} {why}: its stack was not probed"
        )],
        ..Probe::default()
    };
    finish(&mut p);
    p
}

/// The probe of `dir/pg_wal` when it resolves to another filesystem than `dir` (a
/// WAL directory on its own device), its leaves, notes and warnings added to `p`'s
/// (each once); `None` when it is on the same filesystem or cannot be read.
fn wal_elsewhere(dir: &str, p: &mut Probe) -> Option<Probe> {
    use std::os::unix::fs::MetadataExt;
    if p.layers.is_empty() {
        return None;
    }
    let wal = Path::new(dir).join("pg_wal");
    let (d, w) = (std::fs::metadata(dir).ok()?, std::fs::metadata(&wal).ok()?);
    if d.dev() == w.dev() {
        return None;
    }
    let real = std::fs::canonicalize(&wal).unwrap_or(wal);
    let w = match probe(&real) {
        Ok(w) => w,
        Err(e) => {
            p.notes.push(format!(
                "the WAL directory {} could not be probed: {e}",
                real.display()
            ));
            return None;
        }
    };
    for l in &w.leaves {
        if !p.leaves.iter().any(|x| x.name == l.name) {
            p.leaves.push(l.clone());
        }
    }
    for n in &w.notes {
        if !p.notes.contains(n) {
            p.notes.push(n.clone());
        }
    }
    for x in &w.warnings {
        if !p.warnings.contains(x) {
            p.warnings.push(x.clone());
        }
    }
    Some(w)
}

/// What `/proc` says of the backend serving the probe's session.
enum Backend {
    /// It is a postgres process of the data directory on this host: whether its
    /// maps hold libeatmydata.
    Maps(bool),
    /// It is not on this host, or not this server's ("PID 12 does not exist here").
    NotHere(String),
    /// It may be, but `/proc` would not tell (the note to add).
    Unknown(String),
}

/// Checks backend `pid` (`pg_backend_pid()`) in this host's `/proc`: a postgres
/// process (`exe` or `cmdline`) working in the data directory `dir` (its `cwd`: a
/// postgres process changes into its data directory), then its `maps`.
fn backend(pid: Option<i32>, dir: &str) -> Backend {
    let Some(pid) = pid else {
        return Backend::Unknown(
            "pg_backend_pid() failed: libeatmydata in the server not checked".into(),
        );
    };
    let proc = format!("/proc/{pid}");
    if !Path::new(&proc).exists() {
        return Backend::NotHere(format!("PID {pid} does not exist here"));
    }
    let exe = std::fs::read_link(format!("{proc}/exe")).ok();
    let cmdline = std::fs::read(format!("{proc}/cmdline")).unwrap_or_default();
    let exe = exe.as_ref().map(|e| e.to_string_lossy());
    if !pg::is_postgres_process(exe.as_deref(), &cmdline) {
        return Backend::NotHere(format!("PID {pid} is not a postgres process here"));
    }
    if dir == "(hidden)" {
        return Backend::Unknown(format!(
            "the data directory is hidden: whether PID {pid} here is the server's backend is unknown, libeatmydata in the server not checked"
        ));
    }
    let cwd = match std::fs::read_link(format!("{proc}/cwd")) {
        Ok(c) => c,
        Err(e) => {
            return Backend::Unknown(format!(
                "cannot read {proc}/cwd ({e}): libeatmydata in the server's backend not checked"
            ))
        }
    };
    let data = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into());
    if cwd != data && cwd != Path::new(dir) {
        return Backend::NotHere(format!(
            "PID {pid} here works in {}, not in {dir}",
            cwd.display()
        ));
    }
    match std::fs::read_to_string(format!("{proc}/maps")) {
        Ok(m) => Backend::Maps(pg::maps_have_eatmydata(&m)),
        Err(e) => Backend::Unknown(format!(
            "cannot read {proc}/maps ({e}): libeatmydata in the server's backend not checked"
        )),
    }
}
