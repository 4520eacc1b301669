//! A throwaway PostgreSQL cluster for tests: the rig's cluster
//! ([`plugpull_client::rig::postgres`]: `initdb`, `pg_ctl`, as `postgres` when root)
//! with a data directory in a temporary directory (or at a given path, e.g. a simfs
//! mount), a free TCP port on 127.0.0.1 and a Unix socket directory of its own, so
//! tests never touch a system cluster; plus what only tests do: `psql` (run as the
//! caller, connecting as the `postgres` role over the socket with trust
//! authentication), settings, `pg_hba.conf` lines, flipped bytes, report counts.
//!
//! The binary directory is the rig's [`bin_dir`]. When there is none,
//! [`PgCluster::available`] is false and tests print a SKIP line and return.

use plugpull_client::rig::postgres::{Cluster, Layout};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding `initdb`, `pg_ctl`, `postgres`, `psql`, `pgbench`, if any.
pub use plugpull_client::rig::postgres::bin_dir;

/// The `postgresql.conf` lines of a test cluster, after the port and socket lines.
const CONF: &str = "max_connections = 60\nshared_buffers = 64MB\nlog_min_messages = warning\n";

/// A PostgreSQL cluster of its own; stopped (immediate mode) and removed on drop.
/// The rig's [`Cluster`] (its `data`, `sock`, `log`, `port`, `conninfo_db()`,
/// `log_tail()` are reached through it), panicking where that returns an error.
pub struct PgCluster {
    // Field order is drop order: the server stops before its directory goes.
    inner: Cluster,
    _tmp: tempfile::TempDir,
}

impl std::ops::Deref for PgCluster {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.inner
    }
}

impl std::ops::DerefMut for PgCluster {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.inner
    }
}

impl PgCluster {
    /// Whether PostgreSQL's server binaries are installed.
    pub fn available() -> bool {
        bin_dir().is_some()
    }

    /// Prints a loud SKIP line for `test` and returns true when PostgreSQL is not
    /// installed; tests return at once then.
    pub fn skip(test: &str) -> bool {
        if Self::available() {
            return false;
        }
        crate::skipped(
            test,
            "no PostgreSQL server binaries (set PLUGPULL_PG_BIN or install postgresql)",
        );
        true
    }

    /// Creates (`initdb`) and starts a cluster in a new temporary directory.
    pub fn start_new() -> PgCluster {
        let mut c = PgCluster::create(None);
        c.start();
        c
    }

    /// Creates (`initdb`) a cluster whose data directory is `data` (created if
    /// missing; it must be empty), without starting it. Socket and log live in a
    /// temporary directory. Use this for a data directory on a simfs mount.
    pub fn init_at(data: &Path) -> PgCluster {
        PgCluster::create(Some(data))
    }

    /// Creates (`initdb --data-checksums`) and starts a cluster with data page
    /// checksums on, in a new temporary directory.
    pub fn start_new_with_checksums() -> PgCluster {
        let mut c = PgCluster::create_with(None, &["--data-checksums"]);
        c.start();
        c
    }

    /// Creates a cluster, not started.
    pub fn create(data: Option<&Path>) -> PgCluster {
        PgCluster::create_with(data, &[])
    }

    /// Creates a cluster with extra `initdb` arguments, not started.
    pub fn create_with(data: Option<&Path>, initdb_args: &[&str]) -> PgCluster {
        let bin = bin_dir().expect("PostgreSQL server binaries (see PgCluster::available)");
        let tmp = tempfile::Builder::new()
            .prefix("pp-pg")
            .tempdir()
            .expect("temp dir");
        let layout = Layout {
            data: data
                .map(Path::to_path_buf)
                .unwrap_or_else(|| tmp.path().join("data")),
            sock: tmp.path().join("sock"),
            log: tmp.path().join("postgres.log"),
        };
        let inner = Cluster::init(
            &bin,
            layout,
            initdb_args,
            "plugpull test cluster",
            "127.0.0.1",
            CONF,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        PgCluster { inner, _tmp: tmp }
    }

    /// Runs a server program from the binary directory as the server's user.
    fn server_cmd(&self, prog: &str, f: impl FnOnce(&mut Command)) -> Output {
        let mut cmd = self.inner.server_cmd(prog);
        f(&mut cmd);
        cmd.output()
            .unwrap_or_else(|e| panic!("cannot run {prog}: {e}"))
    }

    /// Starts the server and waits until it accepts connections (crash recovery
    /// included). Panics with the log's tail when it does not start.
    pub fn start(&mut self) {
        if let Err(e) = self.try_start() {
            panic!("{e}");
        }
    }

    /// Starts the server; `Err` carries pg_ctl's output and the log's tail.
    pub fn try_start(&mut self) -> Result<(), String> {
        self.try_start_env(&[])
    }

    /// Starts the server with `env` in its environment (e.g. `LD_PRELOAD`) and waits
    /// until it accepts connections; panics with the log's tail when it does not.
    pub fn start_env(&mut self, env: &[(&str, &str)]) {
        if let Err(e) = self.try_start_env(env) {
            panic!("{e}");
        }
    }

    fn try_start_env(&mut self, env: &[(&str, &str)]) -> Result<(), String> {
        match self
            .inner
            .start_env(120, env)
            .unwrap_or_else(|e| panic!("{e}"))
        {
            Ok(()) => Ok(()),
            Err(out) => Err(format!(
                "pg_ctl start failed: {out}\nlog tail:\n{}",
                self.log_tail(30)
            )),
        }
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once without a
    /// checkpoint, as in a crash; the next start runs crash recovery. (The OS page
    /// cache survives: this is a database crash, not a power cut.)
    pub fn stop_immediate(&mut self) {
        self.stop_mode("immediate");
    }

    /// `pg_ctl stop -m fast`: a clean shutdown.
    pub fn stop(&mut self) {
        self.stop_mode("fast");
    }

    fn stop_mode(&mut self, mode: &str) {
        let r = self.inner.stop(mode, 60).unwrap_or_else(|e| panic!("{e}"));
        if let Err(out) = r {
            panic!("pg_ctl stop -m {mode} failed: {out}");
        }
    }

    /// `pg_ctl promote -w`: ends recovery of a standby (or a server in recovery).
    pub fn promote(&mut self) {
        let o = self.server_cmd("pg_ctl", |cmd| {
            cmd.arg("-D")
                .arg(&self.data)
                .args(["-w", "-t", "60", "promote"]);
        });
        assert!(
            o.status.success(),
            "pg_ctl promote failed: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Whether the server was started and not stopped through this handle.
    pub fn is_running(&self) -> bool {
        self.inner.running
    }

    /// Stops cleanly and starts again.
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }

    /// Conninfo for the `postgres` superuser over the Unix socket.
    pub fn conninfo(&self) -> String {
        self.conninfo_db("postgres")
    }

    /// Conninfo for `user` with `password` over TCP on 127.0.0.1.
    pub fn tcp_conninfo(&self, user: &str, password: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} password={password} dbname=postgres",
            self.port
        )
    }

    /// Runs `sql` with psql as the superuser; returns its unaligned, tuples-only
    /// output, trimmed. Panics with psql's stderr on error.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql)
            .unwrap_or_else(|e| panic!("psql failed on {sql:?}: {e}"))
    }

    /// Runs `sql` with psql (stopping at the first error); `Err` carries stderr.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        self.try_psql_in("postgres", sql)
    }

    /// Runs `sql` with psql in database `db`; panics with psql's stderr on error.
    pub fn psql_in(&self, db: &str, sql: &str) -> String {
        self.try_psql_in(db, sql)
            .unwrap_or_else(|e| panic!("psql -d {db} failed on {sql:?}: {e}"))
    }

    /// Runs `sql` with psql in database `db`; `Err` carries stderr.
    pub fn try_psql_in(&self, db: &str, sql: &str) -> Result<String, String> {
        psql(&self.inner, db, sql)
    }

    /// Sets a server parameter with `ALTER SYSTEM` and applies it: a reload, or a
    /// restart for parameters that need one (`postmaster` context).
    pub fn set(&mut self, setting: &str, value: &str) {
        let lit = value.replace('\'', "''");
        self.psql(&format!("ALTER SYSTEM SET {setting} = '{lit}'"));
        let context = self.psql(&format!(
            "SELECT context FROM pg_settings WHERE name = '{}'",
            setting.replace('\'', "''")
        ));
        if context == "postmaster" {
            self.restart();
        } else {
            self.psql("SELECT pg_reload_conf()");
        }
    }

    /// Appends `lines` (each `name = value`) to `postgresql.conf`; they take effect
    /// at the next start (or reload, for parameters that allow it).
    pub fn append_conf(&self, lines: &[&str]) {
        use std::io::Write;
        let path = self.data.join("postgresql.conf");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    /// Puts `line` first in `pg_hba.conf` (so it wins over the trust lines) and
    /// reloads, e.g. `host all pwuser 127.0.0.1/32 scram-sha-256`. The new file is
    /// renamed over the old one: `pg_reload_conf()` only signals, so the server may
    /// read the file while the next call writes it, and a file written in place could
    /// be read half-written, without the trust lines at its end (a CI run failed so:
    /// "no pg_hba.conf entry for host \"[local]\"").
    pub fn prepend_hba(&mut self, line: &str) {
        let path = self.data.join("pg_hba.conf");
        let old = std::fs::read_to_string(&path).expect("read pg_hba.conf");
        let tmp = self.data.join("pg_hba.conf.new");
        std::fs::write(&tmp, format!("{line}\n{old}")).expect("write pg_hba.conf.new");
        let meta = std::fs::metadata(&path).expect("stat pg_hba.conf");
        {
            use std::os::unix::fs::MetadataExt;
            std::os::unix::fs::chown(&tmp, Some(meta.uid()), Some(meta.gid()))
                .expect("chown pg_hba.conf.new as pg_hba.conf");
        }
        std::fs::set_permissions(&tmp, meta.permissions()).expect("chmod pg_hba.conf.new");
        std::fs::rename(&tmp, &path).expect("rename pg_hba.conf.new over pg_hba.conf");
        if self.running {
            self.psql("SELECT pg_reload_conf()");
        }
    }

    /// Path of a server program (`pgbench`, `pg_controldata`, …) of this installation.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

impl PgCluster {
    /// Flips every bit of the byte at `offset` of block `block` of the relation file
    /// `rel_path` (relative to the data directory, as `pg_relation_filepath` gives
    /// it, plus a fork suffix like `_fsm`); the cluster must be stopped. Calling it
    /// twice restores the byte. Returns the page's `(pd_lower, pd_upper)`.
    pub fn flip_byte(&self, rel_path: &str, block: u64, offset: usize) -> (u16, u16) {
        use std::io::{Read, Seek, SeekFrom, Write};
        assert!(!self.running, "stop the cluster before damaging its files");
        let path = self.data.join(rel_path);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        let mut page = vec![0u8; 8192];
        f.seek(SeekFrom::Start(block * 8192)).unwrap();
        f.read_exact(&mut page).unwrap();
        let lower = u16::from_le_bytes([page[12], page[13]]);
        let upper = u16::from_le_bytes([page[14], page[15]]);
        page[offset] ^= 0xff;
        f.seek(SeekFrom::Start(block * 8192)).unwrap();
        f.write_all(&page).unwrap();
        f.sync_all().unwrap();
        (lower, upper)
    }
}

/// Runs `sql` with psql (the cluster's own, as the caller, connecting as the
/// `postgres` role over the cluster's socket) in database `db`, stopping at the first
/// error; its unaligned, tuples-only output, trimmed, or `Err` with stderr.
pub fn psql(c: &Cluster, db: &str, sql: &str) -> Result<String, String> {
    let o = Command::new(c.bin.join("psql"))
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
        .arg(&c.sock)
        .args([
            "-p",
            &c.port.to_string(),
            "-U",
            "postgres",
            "-d",
            db,
            "-c",
            sql,
        ])
        .env_remove("PGPASSWORD")
        .env_remove("PGDATABASE")
        .env_remove("PGUSER")
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// SIGKILLs the postmaster `pid` and all its children at once, as a power cut does
/// (the rig's [`plugpull_client::rig::proc::kill_tree`]), and waits until they are
/// gone; panics when some are still there 10 s later. Nothing happens when `pid` is
/// not a `postgres` process (any more).
pub fn kill_postgres(pid: u32) {
    if let Err(left) = plugpull_client::rig::proc::kill_tree(pid, "postgres") {
        panic!("PostgreSQL processes {left:?} still exist 10 s after SIGKILL (is there an init that reaps orphans?)");
    }
}

/// The counts a pgbench verification report pins down, as one JSON object (from
/// `plugpull verify --json`), to compare whole with [`expected_counts`].
pub fn report_counts(v: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "server_reachable": v["server_reachable"],
        "lost_commits": v["lost_commits"],
        "ordering_violations": v["ordering_violations"],
        "duplicates": v["duplicates"],
        "phantoms": v["phantoms"],
        "malformed_tags": v["malformed_tags"],
        "unpromised_lost": v["unpromised_lost"],
        "invariant_holds": v["invariant"]["holds"],
        "amcheck_corruptions": v["amcheck"]["corruptions"],
        "checksum_failures": v["checksum_failures"],
        "ok": v["ok"],
    })
}

/// The counts of a clean verification (server reachable, every count 0, invariant
/// holding, `ok`), with `changes` applied.
pub fn expected_counts(changes: &[(&str, serde_json::Value)]) -> serde_json::Value {
    let mut v = serde_json::json!({"server_reachable": true, "lost_commits": 0,
        "ordering_violations": 0, "duplicates": 0, "phantoms": 0, "malformed_tags": 0,
        "unpromised_lost": 0, "invariant_holds": true, "amcheck_corruptions": 0,
        "checksum_failures": 0, "ok": true});
    for (k, x) in changes {
        v[*k] = x.clone();
    }
    v
}

/// `plugpull write pgbench --listener L --dsn DSN EXTRA…`, to completion.
pub fn write_pgbench(l: &crate::Listener, dsn: &str, extra: &[&str]) -> Output {
    let mut args = vec!["write", "pgbench", "--listener", l.addr(), "--dsn", dsn];
    args.extend_from_slice(extra);
    crate::plugpull(&args)
}

/// `plugpull verify --json --run RUN --dsn DSN EXTRA…`: exit code, the JSON object
/// (`Null` when stdout is not JSON) and stderr.
pub fn verify_pgbench(
    l: &crate::Listener,
    run: &str,
    dsn: &str,
    extra: &[&str],
) -> (i32, serde_json::Value, String) {
    let mut args = vec!["--run", run, "--dsn", dsn];
    args.extend_from_slice(extra);
    crate::verify_json(l, &args)
}
