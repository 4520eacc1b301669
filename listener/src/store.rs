//! The listener's store of run ledgers: one file per run under `<data-dir>/runs/`.
//!
//! On start every ledger is scanned: a torn tail (see `plugpull::ledger`) is cut off
//! and kept beside the ledger as `<run>.ledger.torn-<offset>` for inspection, with a
//! log line giving the byte count; a ledger damaged in the middle is kept as it is
//! and every request for it is refused, naming the offset.
//!
//! Appends go through exactly one writer task per active run ([`RunHandle`]): it takes
//! every request queued at that moment (a group), writes their entries with one
//! `write`, calls `fdatasync`, and only then answers them. Batches are idempotent: a
//! batch whose number is not above the highest already in the ledger is answered at
//! once after the group's sync, without being written again. The writer owns the
//! run's highest batch and durable length; it stays registered (so a reconnecting
//! agent gets the same writer, queued behind what its old connection sent) until it
//! has been idle for [`WRITER_IDLE`] with no connection holding it.
//!
//! A failed append (ENOSPC, EIO) is final for the run: the file is cut back to its
//! durable length, every queued and later request for the run is answered with the
//! error, and `ResumeRun` is refused with it.
//!
//! Each run has a token (`RunStarted`, checked by `ResumeRun`): HKDF-SHA256 of the run
//! id under a random key kept in `<data-dir>/token-key`, so it survives restarts.

use plugpull::ledger::{self, AckBatch, Entry, Manifest, RunSummary, Tail, TornTail};
use plugpull::wire::ErrorKind;
use plugpull::RunId;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long a run's writer stays registered with no connection and nothing queued.
pub const WRITER_IDLE: Duration = Duration::from_secs(2);

/// A run whose agent is connected and appended less than this long ago is still being
/// written: the listener does not serve its ledger to a verifier.
pub const LIVE_APPEND: Duration = Duration::from_secs(2);

/// What the store knows of a run without reading its ledger.
#[derive(Clone, Debug)]
pub struct RunMeta {
    /// Host of the agent.
    pub host: String,
    /// Start time, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Why the ledger cannot be served, if it is damaged.
    pub damaged: Option<String>,
    /// Highest batch number in the ledger.
    pub highest_batch: u64,
    /// Durable length of the ledger file, bytes.
    pub len: u64,
    /// Creation order in this data directory (the manifest's `listener_order`).
    pub order: u64,
    /// The listener's clock when it created the run, ms since the epoch.
    pub created_unix_ms: u64,
    /// The listener's clock at the run's last append (the ledger file's mtime after a
    /// restart), ms since the epoch.
    pub last_append_unix_ms: u64,
    /// True once the run has a `Finished` or `Invalid` entry.
    pub ended: bool,
    /// The append error that ended the run's ledger, if one did.
    pub failed: Option<String>,
}

/// An append request to a run's writer.
pub enum Append {
    /// A batch of acks.
    Batch(AckBatch),
    /// The end of the run.
    Finished(RunSummary),
    /// The run ended by a device error.
    DeviceError(plugpull::ledger::DeviceError),
    /// The run cannot be judged: a witness fault the agent saw.
    Invalid(String),
    /// No entry; answers with the highest durable batch (used by `ResumeRun`).
    Barrier,
}

/// Answer to an [`Append`]: the highest durable batch, or an I/O error message.
pub type AppendResult = Result<u64, String>;

/// The live writer of one run; dropped (and the file closed) when no connection holds it.
pub struct RunHandle {
    /// The run.
    pub run: RunId,
    tx: mpsc::UnboundedSender<(Append, oneshot::Sender<AppendResult>)>,
}

impl RunHandle {
    /// Queues `req`; the returned receiver answers after the group's `fdatasync`.
    pub fn append(&self, req: Append) -> oneshot::Receiver<AppendResult> {
        let (tx, rx) = oneshot::channel();
        // If the writer died (I/O error), the dropped sender answers the caller with an error.
        let _ = self.tx.send((req, tx));
        rx
    }
}

/// All runs of one data directory.
pub struct Store {
    /// Held (flock) while the listener runs.
    _lock: File,
    dir: PathBuf,
    token_key: [u8; 32],
    runs: Mutex<HashMap<RunId, RunMeta>>,
    /// The highest creation order given so far (recovered ledgers included): each new
    /// run takes the next one atomically, so concurrent creations never share one.
    last_order: AtomicU64,
    live: Mutex<HashMap<RunId, Arc<RunHandle>>>,
    /// Extra sleep before each `fdatasync` (tests only: a slow ledger disk).
    sync_delay: Duration,
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

impl Store {
    /// Opens (creating if needed) `dir` and recovers every ledger in it.
    ///
    /// Errors: the directory cannot be created or read.
    pub fn open(dir: &Path, sync_delay: Duration) -> Result<Store, String> {
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
            return Err(format!(
                "data directory {} is in use by another plugpull-listener",
                dir.display()
            ));
        }
        let mut runs = HashMap::new();
        let entries =
            std::fs::read_dir(&runs_dir).map_err(|e| io_err("cannot read", &runs_dir, e))?;
        for ent in entries {
            let ent = ent.map_err(|e| io_err("cannot read", &runs_dir, e))?;
            let path = ent.path();
            if path.extension().and_then(|e| e.to_str()) != Some("ledger") {
                continue;
            }
            let Some(run) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.parse::<RunId>().ok())
            else {
                continue;
            };
            let meta = recover(&path, run)?;
            runs.insert(run, meta);
        }
        let token_key = token_key(dir)?;
        tracing::info!(runs = runs.len(), dir = %dir.display(), "data directory opened");
        let last_order = runs.values().map(|m: &RunMeta| m.order).max().unwrap_or(0);
        Ok(Store {
            _lock: lock,
            dir: runs_dir,
            token_key,
            runs: Mutex::new(runs),
            last_order: AtomicU64::new(last_order),
            live: Mutex::new(HashMap::new()),
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

    /// Creates a new run with `manifest` (its ledger durable, directory entry included).
    ///
    /// Errors: the ledger cannot be created or synced.
    pub fn create(self: &Arc<Self>, mut manifest: Manifest) -> Result<Arc<RunHandle>, String> {
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
            let meta = RunMeta {
                host: manifest.host.clone(),
                started_unix_ms: manifest.started_unix_ms,
                damaged: None,
                highest_batch: 0,
                len: buf.len() as u64,
                order: manifest.listener_order,
                created_unix_ms: manifest.listener_created_unix_ms,
                last_append_unix_ms: manifest.listener_created_unix_ms,
                ended: false,
                failed: None,
            };
            self.runs.lock().unwrap().insert(run, meta);
            tracing::info!(%run, host = %manifest.host, workload = manifest.workload.name(), "run started");
            return self.handle(run).map_err(|(_, e)| e);
        }
    }

    /// The one live writer of an existing run, started if needed.
    ///
    /// Errors, with the kind to answer: unknown run, damaged ledger, a ledger whose
    /// earlier append failed, or a file that cannot be opened.
    pub fn handle(self: &Arc<Self>, run: RunId) -> Result<Arc<RunHandle>, (ErrorKind, String)> {
        let mut live = self.live.lock().unwrap();
        if let Some(h) = live.get(&run) {
            return Ok(h.clone());
        }
        let meta = self.meta(run).map_err(|e| {
            let kind = if e.starts_with("unknown run") {
                ErrorKind::UnknownRun
            } else {
                ErrorKind::LedgerDamaged
            };
            (kind, e)
        })?;
        if let Some(e) = meta.failed {
            return Err((ErrorKind::Io, e));
        }
        let path = self.path(run);
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| (ErrorKind::Io, io_err("cannot open ledger", &path, e)))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = Arc::new(RunHandle { run, tx });
        live.insert(run, handle.clone());
        tokio::spawn(writer(
            self.clone(),
            run,
            file,
            path,
            meta.highest_batch,
            meta.len,
            rx,
        ));
        Ok(handle)
    }

    /// What is known of `run`. Errors: unknown run or damaged ledger.
    pub fn meta(&self, run: RunId) -> Result<RunMeta, String> {
        let runs = self.runs.lock().unwrap();
        let meta = runs.get(&run).ok_or_else(|| format!("unknown run {run}"))?;
        if let Some(d) = &meta.damaged {
            return Err(format!("ledger of run {run} is damaged: {d}"));
        }
        Ok(meta.clone())
    }

    /// How long ago (ms) `run` last appended, if it is still being written: not
    /// ended, an agent connection holds its writer, and its last append was less than
    /// [`LIVE_APPEND`] ago. `None` otherwise: a SIGKILLed agent's connection closes at
    /// once, and a cut machine's dead connection may stay open for minutes but
    /// appends nothing.
    pub fn still_written(&self, run: RunId) -> Option<u64> {
        let live = self.live.lock().unwrap();
        let held = live.get(&run).is_some_and(|h| Arc::strong_count(h) > 1);
        drop(live);
        let runs = self.runs.lock().unwrap();
        let m = runs.get(&run)?;
        let ago = now_ms().saturating_sub(m.last_append_unix_ms);
        (held && !m.ended && ago < LIVE_APPEND.as_millis() as u64).then_some(ago)
    }

    /// The newest run of `host` by the listener's own record (creation order), if any.
    ///
    /// Errors: several unfinished runs of `host` were being written at the same time
    /// as the newest one (each appended to after it was created): which one was cut
    /// cannot be told, so they are listed and `--run` is asked for.
    pub fn latest_of(&self, host: &str) -> Result<Option<RunId>, String> {
        let runs = self.runs.lock().unwrap();
        let Some((&newest, n)) = runs
            .iter()
            .filter(|(_, m)| m.host == host)
            .max_by_key(|(r, m)| (m.order, m.created_unix_ms, **r))
        else {
            return Ok(None);
        };
        let mut open: Vec<(&RunId, &RunMeta)> = runs
            .iter()
            .filter(|(_, m)| {
                m.host == host && !m.ended && m.last_append_unix_ms >= n.created_unix_ms
            })
            .collect();
        if open.len() < 2 {
            return Ok(Some(newest));
        }
        open.sort_by_key(|(r, m)| (m.order, **r));
        let list: Vec<String> = open
            .iter()
            .map(|(r, m)| {
                format!(
                    "{r} (created {}, last appended {})",
                    plugpull::units::utc(m.created_unix_ms),
                    plugpull::units::utc(m.last_append_unix_ms)
                )
            })
            .collect();
        Err(format!(
            "{} unfinished runs of host {host:?} were being written at the same time, so which one was cut cannot be told: {}; give --run",
            open.len(),
            list.join(", ")
        ))
    }

    /// The durable bytes of `run`'s ledger (what has been confirmed or recovered), and
    /// the torn tails cut off it on restarts (from the `.torn-<offset>` files).
    ///
    /// Errors: unknown or damaged run, unreadable file.
    pub fn read(&self, run: RunId) -> Result<(Vec<u8>, Vec<TornTail>), String> {
        let len = self.meta(run)?.len;
        let path = self.path(run);
        let mut bytes = std::fs::read(&path).map_err(|e| io_err("cannot read ledger", &path, e))?;
        bytes.truncate(len as usize);
        let prefix = format!("{run}.ledger.torn-");
        let mut torn = Vec::new();
        for ent in std::fs::read_dir(&self.dir).map_err(|e| io_err("cannot read", &self.dir, e))? {
            let ent = ent.map_err(|e| io_err("cannot read", &self.dir, e))?;
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
        Ok((bytes, torn))
    }

    fn set_highest(&self, run: RunId, highest: u64, len: u64, ended: bool) {
        if let Some(m) = self.runs.lock().unwrap().get_mut(&run) {
            m.highest_batch = highest;
            m.len = len;
            m.last_append_unix_ms = now_ms();
            m.ended |= ended;
        }
    }

    fn set_failed(&self, run: RunId, error: &str) {
        if let Some(m) = self.runs.lock().unwrap().get_mut(&run) {
            m.failed = Some(error.to_string());
        }
    }

    /// Unregisters `run`'s writer if no connection holds it and nothing is queued.
    fn retire(
        &self,
        run: RunId,
        rx: &mpsc::UnboundedReceiver<(Append, oneshot::Sender<AppendResult>)>,
    ) -> bool {
        let mut live = self.live.lock().unwrap();
        if live.get(&run).is_some_and(|h| Arc::strong_count(h) == 1) && rx.is_empty() {
            live.remove(&run);
            return true;
        }
        false
    }
}

/// The key run tokens are derived from: `<dir>/token-key`, created (random, synced) on first use.
fn token_key(dir: &Path) -> Result<[u8; 32], String> {
    let path = dir.join("token-key");
    match std::fs::read(&path) {
        Ok(b) if b.len() == 32 => return Ok(b.try_into().unwrap()),
        Ok(b) => {
            return Err(format!(
                "{} holds {} bytes, not 32: remove it to make a new one (open runs then cannot be resumed)",
                path.display(),
                b.len()
            ))
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

/// The group-commit loop of one run: the run's only writer while it is registered.
async fn writer(
    store: Arc<Store>,
    run: RunId,
    file: File,
    path: PathBuf,
    mut highest: u64,
    mut len: u64,
    mut rx: mpsc::UnboundedReceiver<(Append, oneshot::Sender<AppendResult>)>,
) {
    let file = Arc::new(file);
    let delay = store.sync_delay;
    let mut buf = Vec::new();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = tokio::time::sleep(WRITER_IDLE) => {
                if store.retire(run, &rx) {
                    return;
                }
                continue;
            }
        };
        let Some(first) = first else { return };
        let mut group = vec![first];
        while let Ok(next) = rx.try_recv() {
            group.push(next);
            if group.len() >= 4096 {
                break;
            }
        }
        buf.clear();
        let mut new_highest = highest;
        for (req, _) in &group {
            match req {
                Append::Batch(b) if b.batch > new_highest => {
                    new_highest = b.batch;
                    ledger::encode_entry(&Entry::Acks(b.clone()), &mut buf);
                }
                Append::Batch(_) | Append::Barrier => {}
                Append::Finished(s) => ledger::encode_entry(&Entry::Finished(s.clone()), &mut buf),
                Append::DeviceError(e) => {
                    ledger::encode_entry(&Entry::DeviceError(e.clone()), &mut buf)
                }
                Append::Invalid(e) => {
                    ledger::encode_entry(&Entry::Invalid { error: e.clone() }, &mut buf)
                }
            }
        }
        let result = if buf.is_empty() {
            Ok(())
        } else {
            let f = file.clone();
            let data = std::mem::take(&mut buf);
            let at = len;
            let (res, data) = tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::FileExt;
                let r = f.write_all_at(&data, at).and_then(|_| {
                    if !delay.is_zero() {
                        std::thread::sleep(delay);
                    }
                    f.sync_data()
                });
                if r.is_err() {
                    // Whatever part of the group reached the file is not durable: cut it
                    // off, so the ledger never holds an entry that was not confirmed.
                    let _ = f.set_len(at).and_then(|_| f.sync_data());
                }
                (r, data)
            })
            .await
            .expect("ledger write task panicked");
            let n = data.len() as u64;
            buf = data;
            res.map(|_| len += n)
                .map_err(|e| io_err("cannot append to ledger", &path, e))
        };
        match result {
            Ok(()) => {
                highest = new_highest;
                let ended = group.iter().any(|(r, _)| {
                    matches!(
                        r,
                        Append::Finished(_) | Append::DeviceError(_) | Append::Invalid(_)
                    )
                });
                store.set_highest(run, highest, len, ended);
                for (_, reply) in group {
                    let _ = reply.send(Ok(highest));
                }
            }
            Err(e) => {
                tracing::error!(%run, error = %e, "ledger append failed; refusing further appends to this run");
                store.set_failed(run, &e);
                store.live.lock().unwrap().remove(&run);
                for (_, reply) in group {
                    let _ = reply.send(Err(e.clone()));
                }
                // Answer whatever is still queued or arrives from connections that
                // still hold the handle; ends when the last of them lets go.
                while let Some((_, reply)) = rx.recv().await {
                    let _ = reply.send(Err(e.clone()));
                }
                return;
            }
        }
    }
}

/// Scans a ledger, truncating a torn tail, and returns what the store keeps of it.
fn recover(path: &Path, run: RunId) -> Result<RunMeta, String> {
    let bytes = std::fs::read(path).map_err(|e| io_err("cannot read ledger", path, e))?;
    let mut manifest = None;
    let mut highest = 0;
    let mut ended = false;
    let scanned = ledger::scan(&bytes, |_, e| match e {
        Entry::Manifest(m) => manifest = Some(*m),
        Entry::Acks(b) => highest = highest.max(b.batch),
        Entry::Finished(_) | Entry::DeviceError(_) | Entry::Invalid { .. } => ended = true,
    });
    let mtime_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    match scanned {
        Ok((id, tail)) => {
            if id != run {
                return Ok(damaged(
                    run,
                    path,
                    format!("file is named for run {run} but its header says {id}"),
                ));
            }
            let mut len = bytes.len() as u64;
            if let Tail::Torn {
                valid_len,
                torn_bytes,
            } = tail
            {
                let keep = path.with_extension(format!("ledger.torn-{valid_len}"));
                std::fs::write(&keep, &bytes[valid_len as usize..])
                    .map_err(|e| io_err("cannot save torn tail to", &keep, e))?;
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| io_err("cannot open ledger", path, e))?;
                f.set_len(valid_len)
                    .and_then(|_| f.sync_all())
                    .map_err(|e| io_err("cannot truncate ledger", path, e))?;
                tracing::warn!(%run, torn_bytes, at = valid_len, saved = %keep.display(), "truncated torn tail of ledger");
                len = valid_len;
            }
            let m = manifest.expect("scan guarantees a manifest");
            Ok(RunMeta {
                host: m.host,
                started_unix_ms: m.started_unix_ms,
                damaged: None,
                highest_batch: highest,
                len,
                order: m.listener_order,
                created_unix_ms: m.listener_created_unix_ms,
                last_append_unix_ms: mtime_ms,
                ended,
                failed: None,
            })
        }
        Err(e) => {
            let mut meta = damaged(run, path, e.to_string());
            if let Some(m) = manifest {
                // Keep the host so "latest run of this host" still finds (and refuses) it.
                meta.host = m.host;
                meta.started_unix_ms = m.started_unix_ms;
                meta.order = m.listener_order;
                meta.created_unix_ms = m.listener_created_unix_ms;
            }
            Ok(meta)
        }
    }
}

fn damaged(run: RunId, path: &Path, why: String) -> RunMeta {
    tracing::error!(%run, path = %path.display(), error = %why, "ledger damaged; its run cannot be verified");
    RunMeta {
        host: String::new(),
        started_unix_ms: 0,
        damaged: Some(why),
        highest_batch: 0,
        len: 0,
        order: 0,
        created_unix_ms: 0,
        last_append_unix_ms: 0,
        ended: true,
        failed: None,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("cannot sync directory", dir, e))
}
