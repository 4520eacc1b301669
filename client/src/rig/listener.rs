//! A `plugpull-listener` on 127.0.0.1: started on a free port with its own data
//! directory, its address read from its first line (`listening on IP:PORT`), its
//! stderr appended to a log file; killed (SIGKILL) on drop.

use super::proc;
use crate::Error;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// A running listener.
pub struct Listener {
    bin: PathBuf,
    child: Option<Child>,
    addr: String,
    /// Its data directory (ledgers under `runs/`).
    pub data_dir: PathBuf,
    /// Where its stderr (the log) goes, appended over restarts.
    pub log: PathBuf,
    extra: Vec<String>,
}

impl Listener {
    /// Starts the listener binary `bin` on a free port of 127.0.0.1 with data
    /// directory `data_dir`, log `log` and `extra` arguments; returns once it listens.
    pub fn start(
        bin: &Path,
        data_dir: &Path,
        log: &Path,
        extra: &[&str],
    ) -> Result<Listener, Error> {
        let mut l = Listener {
            bin: bin.to_path_buf(),
            child: None,
            addr: String::new(),
            data_dir: data_dir.to_path_buf(),
            log: log.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        l.spawn()?;
        Ok(l)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let io = |e: std::io::Error| Error::Msg(format!("{}: {e}", self.log.display()));
        if let Some(d) = self.log.parent() {
            std::fs::create_dir_all(d).map_err(io)?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io)?;
        // A restart keeps the port, so agents can reconnect to the same address.
        let listen = if self.addr.is_empty() {
            "127.0.0.1:0".to_string()
        } else {
            self.addr.clone()
        };
        let mut child = proc::command(&self.bin)
            .args(["--listen", &listen, "--data-dir"])
            .arg(&self.data_dir)
            .args(&self.extra)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| Error::Msg(format!("cannot start plugpull-listener: {e}")))?;
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line);
        let mut guard = proc::Guard(Some(child));
        read.map_err(|e| Error::Msg(format!("plugpull-listener stdout: {e}")))?;
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            return Err(Error::Msg(format!(
                "listener said {line:?}; log: {}",
                self.log_text()
            )));
        };
        self.addr = addr.to_string();
        self.child = guard.0.take();
        Ok(())
    }

    /// `IP:PORT` it listens on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Kills it with SIGKILL and waits for it.
    pub fn kill(&mut self) {
        proc::Guard(self.child.take()).kill();
    }

    /// Starts it again on the same data directory and port.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.spawn()
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Process id of the running listener, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The ledger file of `run` (16 hex digits).
    pub fn ledger_path(&self, run: &str) -> PathBuf {
        self.data_dir.join("runs").join(format!("{run}.ledger"))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.kill();
    }
}
