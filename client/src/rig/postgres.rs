//! A throwaway PostgreSQL cluster: `initdb` (the one copy of its arguments), `pg_ctl`
//! start and stop, and a SIGKILL of every server process as a power cut does.
//!
//! The data directory may live anywhere (a temporary directory, a simfs mount); the
//! Unix socket directory and the server log are the caller's choice too, and a free
//! TCP port is picked. PostgreSQL refuses to run as root: when we are root, every
//! server program runs as the `postgres` user (`Command::uid`/`gid`, which also drops
//! the supplementary groups) and the directories it needs are chowned to it.
//!
//! The binary directory ([`bin_dir`]): `PLUGPULL_PG_BIN` if set, else the newest of
//! `/usr/lib/postgresql/{17,16,15,14}/bin` that has `initdb`, else `pg_config --bindir`.

use super::proc;
use crate::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding `initdb`, `pg_ctl`, `postgres`, `psql`, `pgbench`, if any.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("PLUGPULL_PG_BIN") {
        let d = PathBuf::from(d);
        return d.join("initdb").exists().then_some(d);
    }
    let mut candidates: Vec<PathBuf> = ["17", "16", "15", "14"]
        .iter()
        .map(|v| PathBuf::from(format!("/usr/lib/postgresql/{v}/bin")))
        .collect();
    if let Ok(o) = Command::new("pg_config").arg("--bindir").output() {
        if o.status.success() {
            candidates.push(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
        }
    }
    candidates
        .into_iter()
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
}

/// `(uid, gid)` of the `postgres` user when we run as root and must switch to it;
/// `None` when we are not root; `Err` when we are root and there is no such user.
pub fn owner() -> Result<Option<(u32, u32)>, String> {
    if !proc::is_root() {
        return Ok(None);
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam returns null or a pointer to static storage, read at once.
    unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        if pw.is_null() {
            return Err(
                "running as root, but there is no `postgres` user to run PostgreSQL as".into(),
            );
        }
        Ok(Some(((*pw).pw_uid, (*pw).pw_gid)))
    }
}

/// Where a cluster lives.
#[derive(Clone, Debug)]
pub struct Layout {
    /// The data directory (created if missing; it must be empty).
    pub data: PathBuf,
    /// The Unix socket directory (created if missing).
    pub sock: PathBuf,
    /// The server log (`pg_ctl -l`); its directory is created if missing and is the
    /// server programs' working directory.
    pub log: PathBuf,
}

/// A cluster made by [`Cluster::init`]. Dropping it stops a running server
/// (`-m immediate`) and SIGKILLs whatever of it is left.
pub struct Cluster {
    /// The data directory.
    pub data: PathBuf,
    /// The Unix socket directory.
    pub sock: PathBuf,
    /// The server log (`pg_ctl -l`).
    pub log: PathBuf,
    /// The TCP port (and the socket's port number).
    pub port: u16,
    /// The binary directory.
    pub bin: PathBuf,
    /// The user server programs run as, when we are root.
    pub owner: Option<(u32, u32)>,
    /// Whether the server was started and not stopped through this handle.
    pub running: bool,
    /// The postmaster's pid, read from `postmaster.pid` after the last start.
    pub postmaster: Option<u32>,
    /// Server options `pg_ctl start` passes on (`-o`), over `postgresql.conf`; empty
    /// for a cluster made here, which has its port and socket in its configuration.
    pub options: String,
}

impl Cluster {
    /// Creates the directories of `layout` (owned by the server's user), runs
    /// `initdb` (trust authentication, UTF8, C locale, superuser `postgres`, plus
    /// `initdb_args`) with the binaries in `bin`, and appends to `postgresql.conf`
    /// a comment `# title`, the port, `listen_addresses = 'listen'`, the socket
    /// directory and `conf` (lines), fsynced: a data directory on simfs may be cut.
    pub fn init(
        bin: &Path,
        layout: Layout,
        initdb_args: &[&str],
        title: &str,
        listen: &str,
        conf: &str,
    ) -> Result<Cluster, Error> {
        let owner = owner().map_err(Error::Msg)?;
        let run_dir = layout.log.parent().unwrap_or(Path::new("/")).to_path_buf();
        for d in [&layout.data, &layout.sock, &run_dir] {
            make_owned(d, owner)?;
        }
        let c = Cluster {
            data: layout.data,
            sock: layout.sock,
            log: layout.log,
            port: proc::free_port()?,
            bin: bin.to_path_buf(),
            owner,
            running: false,
            postmaster: None,
            options: String::new(),
        };
        let mut cmd = c.server_cmd("initdb");
        cmd.arg("-D")
            .arg(&c.data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .args(initdb_args);
        let o = proc::output(cmd, "initdb")?;
        if !o.status.success() {
            return Err(Error::Msg(format!("initdb failed: {}", both(&o).trim())));
        }
        // initdb fsyncs everything inside the data directory but not the data
        // directory's own entry in its parent (PostgreSQL 15; simfs `--metadata posix`
        // shows the whole cluster gone after a cut right after initdb): make every
        // directory on the way durable, as an operator's `sync` would.
        for dir in c.data.ancestors() {
            let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
        }
        let text = format!(
            "\n# {title}\nport = {}\nlisten_addresses = '{listen}'\nunix_socket_directories = '{}'\n{conf}",
            c.port,
            c.sock.display()
        );
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(c.data.join("postgresql.conf"))
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|_| f.sync_all()))
            .map_err(|e| Error::Msg(format!("cannot write postgresql.conf: {e}")))?;
        Ok(c)
    }

    /// An existing cluster in `layout.data` (made elsewhere: in a virtual machine's
    /// image mounted on the host), not started; socket and log directories created,
    /// owned by the server's user. A free TCP port is picked; port, socket directory
    /// and `listen_addresses = 'listen'` are passed at start over its configuration.
    /// Errors: the directories cannot be made, or root without a `postgres` user.
    pub fn existing(bin: &Path, layout: Layout, listen: &str) -> Result<Cluster, Error> {
        let owner = owner().map_err(Error::Msg)?;
        let run_dir = layout.log.parent().unwrap_or(Path::new("/")).to_path_buf();
        for d in [&layout.sock, &run_dir] {
            make_owned(d, owner)?;
        }
        let port = proc::free_port()?;
        Ok(Cluster {
            options: format!(
                "-p {port} -k {} -c listen_addresses='{listen}'",
                layout.sock.display()
            ),
            data: layout.data,
            sock: layout.sock,
            log: layout.log,
            port,
            bin: bin.to_path_buf(),
            owner,
            running: false,
            postmaster: None,
        })
    }

    /// A server program of the binary directory, as the server's user, in the log's
    /// directory, with a C locale and no `PGDATA`/`PGPORT`/`PGHOST` from our
    /// environment.
    pub fn server_cmd(&self, prog: &str) -> Command {
        let mut c = proc::command(self.bin.join(prog));
        c.current_dir(self.log.parent().unwrap_or(Path::new("/")))
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST");
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            c.uid(uid).gid(gid);
        }
        c
    }

    /// Runs `pg_ctl -D DATA ARGS` as the server's user.
    pub fn pg_ctl(&self, args: &[&str]) -> Result<Output, Error> {
        self.pg_ctl_env(args, &[])
    }

    /// [`Cluster::pg_ctl`] with `env` added to its environment (which the server
    /// it starts inherits, e.g. `LD_PRELOAD`).
    pub fn pg_ctl_env(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Output, Error> {
        let mut c = self.server_cmd("pg_ctl");
        c.arg("-D")
            .arg(&self.data)
            .args(args)
            .envs(env.iter().copied());
        proc::output(c, "pg_ctl")
    }

    /// `pg_ctl start -w -t TIMEOUT_S` (crash recovery included), then reads the
    /// postmaster's pid (the pid file exists once it runs, even when start failed
    /// later). `Ok(Err(text))`: it did not start; `text` is pg_ctl's stdout and stderr
    /// (the caller adds as much of [`Cluster::log_tail`] as it wants).
    pub fn start(&mut self, timeout_s: u32) -> Result<Result<(), String>, Error> {
        self.start_env(timeout_s, &[])
    }

    /// [`Cluster::start`] with `env` in the server's environment (e.g. `LD_PRELOAD`).
    pub fn start_env(
        &mut self,
        timeout_s: u32,
        env: &[(&str, &str)],
    ) -> Result<Result<(), String>, Error> {
        let log = self.log.display().to_string();
        let t = timeout_s.to_string();
        let mut args = vec!["-l", &log, "-w", "-t", &t, "start"];
        if !self.options.is_empty() {
            args.extend(["-o", &self.options]);
        }
        let o = self.pg_ctl_env(&args, env)?;
        self.postmaster = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok());
        if o.status.success() {
            self.running = true;
            Ok(Ok(()))
        } else {
            Ok(Err(both(&o)))
        }
    }

    /// `pg_ctl stop -m MODE -w -t TIMEOUT_S` (`fast`: a clean shutdown; `immediate`:
    /// every server process quits at once without a checkpoint, as in a crash).
    /// `Ok(Err(text))` with pg_ctl's output when it failed; after a success the
    /// postmaster's pid is forgotten (it may be reused by another process).
    pub fn stop(&mut self, mode: &str, timeout_s: u32) -> Result<Result<(), String>, Error> {
        let o = self.pg_ctl(&["-m", mode, "-w", "-t", &timeout_s.to_string(), "stop"])?;
        self.running = false;
        if o.status.success() {
            self.postmaster = None;
            Ok(Ok(()))
        } else {
            Ok(Err(both(&o)))
        }
    }

    /// SIGKILLs the postmaster of the last start and all its children at once, as a
    /// power cut does ([`proc::kill_tree`]); `Err` lists processes still there 10 s
    /// later. Nothing happens when that pid is no longer this cluster's postmaster (it
    /// ended, and the pid may belong to another process now): a postmaster is ours
    /// when its working directory (it changes into its data directory) or its `-D`
    /// argument is our data directory, or when it is a `postgres` that is exiting or
    /// a zombie (nothing left to compare, and its pid still locks the data directory).
    pub fn kill_all(&mut self) -> Result<(), Vec<u32>> {
        self.running = false;
        let Some(pid) = self.postmaster.take() else {
            return Ok(());
        };
        if !self.is_postmaster(pid) {
            return Ok(());
        }
        proc::kill_tree(pid, "postgres")
    }

    /// Whether process `pid` is this cluster's postmaster (see [`Cluster::kill_all`]).
    fn is_postmaster(&self, pid: u32) -> bool {
        // readlink of /proc/PID/cwd names the directory without touching its
        // filesystem, so it answers also when a cut left the mount dead.
        let data = std::fs::canonicalize(&self.data).unwrap_or_else(|_| self.data.clone());
        if std::fs::read_link(format!("/proc/{pid}/cwd"))
            .is_ok_and(|cwd| cwd == data || cwd == self.data)
        {
            return true;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let data = self.data.as_os_str().as_encoded_bytes();
        if cmdline.split(|&b| b == 0).any(|arg| arg == data) {
            return true;
        }
        // A postmaster that is exiting (a PANIC on the cut's I/O errors) or a zombie
        // has no cmdline and no cwd left, but still holds its pid, which
        // postmaster.pid names: it must be killed and reaped before the next start.
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        cmdline.is_empty() && comm.trim() == "postgres"
    }

    /// Conninfo for the `postgres` superuser over the Unix socket, in database `db`.
    pub fn conninfo_db(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.sock.display(),
            self.port
        )
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running && !proc::cancelled() {
            let _ = self.stop("immediate", 30);
        }
        let _ = self.kill_all();
    }
}

/// Creates directory `d` (with its parents) owned by `owner` when given.
fn make_owned(d: &Path, owner: Option<(u32, u32)>) -> Result<(), Error> {
    std::fs::create_dir_all(d)
        .map_err(|e| Error::Msg(format!("cannot create {}: {e}", d.display())))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(d, Some(uid), Some(gid))
            .map_err(|e| Error::Msg(format!("cannot chown {}: {e}", d.display())))?;
    }
    Ok(())
}

/// A finished command's stdout then stderr, as text.
fn both(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
