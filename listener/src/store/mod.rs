//! The listener's store of run ledgers: one file per run under `<data-dir>/runs/`.
//!
//! On start every ledger is scanned ([`recover`]): a torn tail (see `plugpull::ledger`)
//! is cut off and kept beside the ledger as `<run>.ledger.torn-<offset>` for
//! inspection, with a log line giving the byte count; a ledger damaged in the middle
//! is kept as it is and every request for it is refused, naming the offset.
//!
//! Every fact about a run lives in its one [`run::Run`] entry (host, order, durable
//! length, highest batch, writer), all entries under one lock.
//!
//! Appends go through exactly one writer task per active run ([`RunHandle`],
//! [`commit`]): it takes every request queued at that moment (a group), writes their
//! entries with one `write`, calls `fdatasync`, and only then answers them. Batches
//! are idempotent: a batch whose number is not above the highest already in the
//! ledger is answered at once after the group's sync, without being written again.
//! Only the writer changes the run's highest batch and durable length; it stays
//! registered (so a reconnecting agent gets the same writer, queued behind what its
//! old connection sent) until it has been idle for [`WRITER_IDLE`] with no connection
//! holding it.
//!
//! A failed append (ENOSPC, EIO) is final for the run: the file is cut back to its
//! durable length, every queued and later request for the run is answered with the
//! error, and `ResumeRun` is refused with it.
//!
//! Each run has a token (`RunStarted`, checked by `ResumeRun`): HKDF-SHA256 of the run
//! id under a random key kept in `<data-dir>/token-key`, so it survives restarts.
//!
//! Errors are [`StoreError`]s; each maps to the [`ErrorKind`] the listener answers with.

mod commit;
mod recover;
mod run;
#[cfg(test)]
mod tests;

pub use run::{Append, AppendResult, RunHandle};

use plugpull::ledger::{self, Entry, Manifest, TornTail};
use plugpull::wire::ErrorKind;
use plugpull::RunId;
use run::Run;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a run's writer stays registered with no connection and nothing queued.
pub const WRITER_IDLE: Duration = Duration::from_secs(2);

/// A run whose agent is connected and appended less than this long ago is still being
/// written: the listener does not serve its ledger to a verifier.
pub const LIVE_APPEND: Duration = Duration::from_secs(2);

/// A run's ledger file opened to be served ([`Store::open_ledger`]): its first `len`
/// bytes are the durable ledger.
#[derive(Debug)]
pub struct LedgerFile {
    /// The open file.
    pub file: File,
    /// The durable length in bytes: what is served, from offset 0.
    pub len: u64,
    /// Where it is (for error messages).
    pub path: PathBuf,
}

/// Why the store cannot do what was asked. `Display` is the message sent to the peer;
/// [`StoreError::kind`] is the kind it is sent with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// No run with this id in the data directory.
    UnknownRun(RunId),
    /// The run's ledger was found damaged on start (not a torn tail): why.
    Damaged {
        /// The run.
        run: RunId,
        /// What the scan found, e.g. the offset of a bad entry.
        why: String,
    },
    /// Several unfinished runs of the host a verifier asked about were being written
    /// at once, so "the latest" cannot be told: the message lists them.
    Ambiguous(String),
    /// The run's ledger could not be read to be served (path and OS error).
    Unreadable(String),
    /// An append to the run failed (now or earlier): the run's ledger takes no more.
    Failed(String),
    /// A file or directory of the data directory could not be created, opened,
    /// written or synced, or is in use (path and OS error).
    Io(String),
}

impl StoreError {
    /// The kind of error the listener answers with.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::UnknownRun(_) | StoreError::Ambiguous(_) => ErrorKind::UnknownRun,
            StoreError::Damaged { .. } | StoreError::Unreadable(_) => ErrorKind::LedgerDamaged,
            StoreError::Failed(_) | StoreError::Io(_) => ErrorKind::Io,
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::UnknownRun(run) => write!(f, "unknown run {run}"),
            StoreError::Damaged { run, why } => write!(f, "ledger of run {run} is damaged: {why}"),
            StoreError::Ambiguous(m)
            | StoreError::Unreadable(m)
            | StoreError::Failed(m)
            | StoreError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StoreError {}

/// `"<what> <path>: <error>"`.
fn io_msg(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// [`io_msg`] as a [`StoreError::Io`].
fn io_err(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(io_msg(what, path, e))
}

/// All runs of one data directory.
pub struct Store {
    /// Held (flock) while the listener runs.
    _lock: File,
    /// `<data-dir>/runs`.
    dir: PathBuf,
    token_key: [u8; 32],
    /// One entry per run; the only place any fact about a run is kept.
    runs: Mutex<HashMap<RunId, Run>>,
    /// The highest creation order given so far (recovered ledgers included): each new
    /// run takes the next one atomically, so concurrent creations never share one.
    last_order: AtomicU64,
    /// Extra sleep before each `fdatasync` (tests only: a slow ledger disk).
    sync_delay: Duration,
}

impl Store {
    /// Opens (creating if needed) `dir` and recovers every ledger in it. `sync_delay`
    /// is slept before every ledger `fdatasync` (tests only; zero for real runs).
    ///
    /// Errors ([`StoreError::Io`]): the directory cannot be created or read, another
    /// listener holds it, a torn tail cannot be cut, or the token key is unusable.
    pub fn open(dir: &Path, sync_delay: Duration) -> Result<Store, StoreError> {
        let runs_dir = dir.join("runs");
        std::fs::create_dir_all(&runs_dir)
            .map_err(|e| io_err("cannot create data directory", &runs_dir, e))?;
        sync_dir(dir)?;
        // One listener per data directory: two would interleave appends to a ledger.
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err("cannot open", &lock_path, e))?;
        // An exclusive flock(2), held while the listener runs.
        if lock.try_lock().is_err() {
            return Err(StoreError::Io(format!(
                "data directory {} is in use by another plugpull-listener",
                dir.display()
            )));
        }
        let runs = recover::recover_all(&runs_dir)?;
        let token_key = token_key(dir)?;
        tracing::info!(runs = runs.len(), dir = %dir.display(), "data directory opened");
        let last_order = runs.values().map(|r| r.order).max().unwrap_or(0);
        Ok(Store {
            _lock: lock,
            dir: runs_dir,
            token_key,
            runs: Mutex::new(runs),
            last_order: AtomicU64::new(last_order),
            sync_delay,
        })
    }

    /// The token that proves ownership of `run` (given in `RunStarted`).
    pub fn token(&self, run: RunId) -> [u8; 32] {
        plugpull::auth::hkdf_sha256(&self.token_key, &run.0.to_le_bytes(), b"plugpull run token")
    }

    /// Whether `token` is `run`'s token (constant time).
    pub fn check_token(&self, run: RunId, token: &[u8; 32]) -> bool {
        self.token(run)
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    fn path(&self, run: RunId) -> PathBuf {
        self.dir.join(format!("{run}.ledger"))
    }

    /// Creates a new run with `manifest` (its ledger durable, directory entry included)
    /// and starts its writer.
    ///
    /// Errors ([`StoreError::Io`]): the ledger cannot be created, written or synced.
    pub fn create(self: &Arc<Self>, mut manifest: Manifest) -> Result<Arc<RunHandle>, StoreError> {
        // The listener's own record of when and in which order runs were created: verify
        // picks "the latest run" by it, never by the agent's clock. Taken before the
        // ledger is written (a creation that then fails leaves a gap, never a repeat).
        manifest.listener_order = self.last_order.fetch_add(1, Ordering::SeqCst) + 1;
        manifest.listener_created_unix_ms = now_ms();
        loop {
            let run = RunId(rand::random::<u64>() | 1);
            let path = self.path(run);
            let mut f = match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err("cannot create ledger", &path, e)),
            };
            let mut buf = ledger::header(run).to_vec();
            ledger::encode_entry(&Entry::Manifest(Box::new(manifest.clone())), &mut buf);
            f.write_all(&buf)
                .and_then(|_| f.sync_all())
                .map_err(|e| io_err("cannot write ledger", &path, e))?;
            sync_dir(&self.dir)?;
            let entry = Run::new(
                &manifest,
                buf.len() as u64,
                manifest.listener_created_unix_ms,
            );
            self.runs.lock().unwrap().insert(run, entry);
            tracing::info!(%run, host = %manifest.host, workload = manifest.workload.name(), "run started");
            return self.handle(run);
        }
    }

    /// The one live writer of an existing run, started if needed.
    ///
    /// Errors: [`StoreError::UnknownRun`], [`StoreError::Damaged`],
    /// [`StoreError::Failed`] (an earlier append failed), or [`StoreError::Io`] (the
    /// ledger cannot be opened).
    pub fn handle(self: &Arc<Self>, run: RunId) -> Result<Arc<RunHandle>, StoreError> {
        let mut runs = self.runs.lock().unwrap();
        let entry = runs.get_mut(&run).ok_or(StoreError::UnknownRun(run))?;
        if let Some(h) = &entry.writer {
            return Ok(h.clone());
        }
        entry.sound(run)?;
        if let Some(e) = &entry.failed {
            return Err(StoreError::Failed(e.clone()));
        }
        let path = self.path(run);
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| io_err("cannot open ledger", &path, e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = Arc::new(RunHandle { run, tx });
        entry.writer = Some(handle.clone());
        tokio::spawn(commit::writer(self.clone(), run, file, path, rx));
        Ok(handle)
    }

    /// How long ago (ms) `run` last appended, if it is still being written: not
    /// ended, an agent connection holds its writer, and its last append was less than
    /// [`LIVE_APPEND`] ago. `None` otherwise: a SIGKILLed agent's connection closes at
    /// once, and a cut machine's dead connection may stay open for minutes but
    /// appends nothing.
    pub fn still_written(&self, run: RunId) -> Option<u64> {
        let runs = self.runs.lock().unwrap();
        let r = runs.get(&run)?;
        let ago = now_ms().saturating_sub(r.last_append_unix_ms);
        (r.held() && !r.ended && ago < LIVE_APPEND.as_millis() as u64).then_some(ago)
    }

    /// What the store knows of `run` without reading its ledger, for a campaign's
    /// controller (times on the listener's clock).
    pub fn run_state(&self, run: RunId) -> plugpull::campaign::RunState {
        let runs = self.runs.lock().unwrap();
        let r = runs.get(&run);
        plugpull::campaign::RunState {
            run,
            known: r.is_some(),
            created_ms: r.map_or(0, |r| r.created_unix_ms),
            last_append_ms: r.map_or(0, |r| r.last_append_unix_ms),
            last_ack_ms: r.map_or(0, |r| r.last_ack_unix_ms),
            now_ms: now_ms(),
            ended: r.is_none_or(|r| r.ended),
            held: r.is_some_and(|r| r.held()),
        }
    }

    /// Every run of `host`, oldest first (creation order): its id, when the listener
    /// created it (ms since the epoch) and whether it has ended.
    pub fn runs_of(&self, host: &str) -> Vec<(RunId, u64, bool)> {
        let runs = self.runs.lock().unwrap();
        let mut of: Vec<(&RunId, &Run)> = runs.iter().filter(|(_, r)| r.host == host).collect();
        of.sort_by_key(|(id, r)| (r.order, r.created_unix_ms, **id));
        of.into_iter()
            .map(|(id, r)| (*id, r.created_unix_ms, r.ended))
            .collect()
    }

    /// The newest run of `host` by the listener's own record (creation order), if any.
    ///
    /// Errors: [`StoreError::Ambiguous`]: several unfinished runs of `host` were being
    /// written at the same time as the newest one (each appended to after it was
    /// created): which one was cut cannot be told, so they are listed and `--run` is
    /// asked for.
    pub fn latest_of(&self, host: &str) -> Result<Option<RunId>, StoreError> {
        let runs = self.runs.lock().unwrap();
        let Some((&newest, n)) = runs
            .iter()
            .filter(|(_, r)| r.host == host)
            .max_by_key(|(id, r)| (r.order, r.created_unix_ms, **id))
        else {
            return Ok(None);
        };
        let mut open: Vec<(&RunId, &Run)> = runs
            .iter()
            .filter(|(_, r)| {
                r.host == host && !r.ended && r.last_append_unix_ms >= n.created_unix_ms
            })
            .collect();
        if open.len() < 2 {
            return Ok(Some(newest));
        }
        open.sort_by_key(|(id, r)| (r.order, **id));
        let list: Vec<String> = open
            .iter()
            .map(|(id, r)| {
                format!(
                    "{id} (created {}, last appended {})",
                    plugpull::units::utc(r.created_unix_ms),
                    plugpull::units::utc(r.last_append_unix_ms)
                )
            })
            .collect();
        Err(StoreError::Ambiguous(format!(
            "{} unfinished runs of host {host:?} were being written at the same time, so which one was cut cannot be told: {}; give --run",
            open.len(),
            list.join(", ")
        )))
    }

    /// The durable bytes of `run`'s ledger (what has been confirmed or recovered), and
    /// the torn tails cut off it on restarts (from the `.torn-<offset>` files), by
    /// offset. Holds the whole ledger in memory; the listener serves a ledger from
    /// [`Store::open_ledger`] instead, a chunk at a time.
    ///
    /// Errors: [`StoreError::UnknownRun`], [`StoreError::Damaged`], or
    /// [`StoreError::Unreadable`].
    #[cfg(test)]
    pub fn read(&self, run: RunId) -> Result<(Vec<u8>, Vec<TornTail>), StoreError> {
        use std::io::Read;
        let (l, torn) = self.open_ledger(run)?;
        let mut bytes = Vec::with_capacity(l.len as usize);
        let path = self.path(run);
        (&l.file)
            .take(l.len)
            .read_to_end(&mut bytes)
            .map_err(|e| StoreError::Unreadable(io_msg("cannot read ledger", &path, e)))?;
        Ok((bytes, torn))
    }

    /// `run`'s ledger opened for reading, with its durable length (what has been
    /// confirmed or recovered: the bytes to serve, read from the file's start), and
    /// the torn tails cut off it on restarts (from the `.torn-<offset>` files), by
    /// offset. Nothing of the ledger is read here: memory does not grow with it.
    ///
    /// Errors: [`StoreError::UnknownRun`], [`StoreError::Damaged`], or
    /// [`StoreError::Unreadable`] (the file cannot be opened, or is shorter than its
    /// durable length).
    pub fn open_ledger(&self, run: RunId) -> Result<(LedgerFile, Vec<TornTail>), StoreError> {
        let len = {
            let runs = self.runs.lock().unwrap();
            let entry = runs.get(&run).ok_or(StoreError::UnknownRun(run))?;
            entry.sound(run)?.len
        };
        let unreadable = |what, path: &Path, e| StoreError::Unreadable(io_msg(what, path, e));
        let path = self.path(run);
        let file = File::open(&path).map_err(|e| unreadable("cannot read ledger", &path, e))?;
        let on_disk = file
            .metadata()
            .map_err(|e| unreadable("cannot read ledger", &path, e))?
            .len();
        if on_disk < len {
            return Err(StoreError::Unreadable(format!(
                "cannot read ledger {}: it holds {on_disk} bytes, {len} are durable",
                path.display()
            )));
        }
        let prefix = format!("{run}.ledger.torn-");
        let mut torn = Vec::new();
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| unreadable("cannot read", &self.dir, e))?;
        for ent in entries {
            let ent = ent.map_err(|e| unreadable("cannot read", &self.dir, e))?;
            let name = ent.file_name();
            let Some(offset) = name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|o| o.parse::<u64>().ok())
            else {
                continue;
            };
            let bytes = ent.metadata().map(|m| m.len()).unwrap_or(0);
            torn.push(TornTail { offset, bytes });
        }
        torn.sort_by_key(|t| t.offset);
        Ok((LedgerFile { file, len, path }, torn))
    }

    /// `run`'s highest durable batch and durable length (its writer reads them before
    /// each group).
    fn durable(&self, run: RunId) -> (u64, u64) {
        let runs = self.runs.lock().unwrap();
        let r = runs.get(&run).expect("a run with a writer has an entry");
        (r.highest_batch, r.len)
    }

    /// Records a durable group of `run` (`done`): its highest batch and length `len`
    /// now, appended now, acknowledged now when it held acks (a heartbeat does not
    /// count: campaigns read the last acknowledgement as the writes' last sign of
    /// life), ended if the group ended it.
    fn committed(&self, run: RunId, done: &commit::Encoded, len: u64) {
        if let Some(r) = self.runs.lock().unwrap().get_mut(&run) {
            let now = now_ms();
            if done.acked {
                r.last_ack_unix_ms = now;
            }
            r.highest_batch = done.highest;
            r.len = len;
            r.last_append_unix_ms = now;
            r.ended |= done.ended;
        }
    }

    /// Why `run`'s ledger takes no more appends (an append failed since this
    /// listener started), if it does not.
    pub fn failure(&self, run: RunId) -> Option<String> {
        let runs = self.runs.lock().unwrap();
        runs.get(&run)?.failed.clone()
    }

    /// Marks `run` failed by `error` and unregisters its writer.
    fn fail(&self, run: RunId, error: &StoreError) {
        if let Some(r) = self.runs.lock().unwrap().get_mut(&run) {
            r.failed = Some(error.to_string());
            r.writer = None;
        }
    }

    /// Unregisters `run`'s writer if no connection holds it and nothing is queued.
    fn retire(&self, run: RunId, rx: &mpsc::UnboundedReceiver<run::Request>) -> bool {
        let mut runs = self.runs.lock().unwrap();
        match runs.get_mut(&run) {
            Some(r) if r.writer.is_some() && !r.held() && rx.is_empty() => {
                r.writer = None;
                true
            }
            _ => false,
        }
    }
}

/// The key run tokens are derived from: `<dir>/token-key`, created (random, synced) on
/// first use. Errors ([`StoreError::Io`]): it cannot be read or made, or is not 32 bytes.
fn token_key(dir: &Path) -> Result<[u8; 32], StoreError> {
    let path = dir.join("token-key");
    match std::fs::read(&path) {
        Ok(b) if b.len() == 32 => return Ok(b.try_into().unwrap()),
        Ok(b) => {
            return Err(StoreError::Io(format!(
                "{} holds {} bytes, not 32: remove it to make a new one (open runs then cannot be resumed)",
                path.display(),
                b.len()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("cannot read", &path, e)),
    }
    let key: [u8; 32] = rand::random();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io_err("cannot create", &path, e))?;
    f.write_all(&key)
        .and_then(|_| f.sync_all())
        .map_err(|e| io_err("cannot write", &path, e))?;
    sync_dir(dir)?;
    Ok(key)
}

/// Milliseconds since the Unix epoch by the listener's clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `fsync`s the directory `dir`, so entries created in it are durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("cannot sync directory", dir, e))
}
