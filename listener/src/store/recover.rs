//! Recovery: what the store makes of the ledgers it finds when the listener starts.
//!
//! Every `<run>.ledger` in the runs directory is scanned (see `plugpull::ledger::scan`):
//! * a clean ledger gives its run's entry: durable length = file length, highest batch,
//!   ended or not, last append = the file's mtime;
//! * a torn tail (a last commit cut short) is cut off: its bytes are kept beside the
//!   ledger as `<run>.ledger.torn-<offset>` (`offset` = the valid length, where the
//!   tail began), the ledger is truncated there and synced, and a warning is logged;
//! * a ledger damaged in the middle, or whose header names another run, is kept as it
//!   is: its run is marked damaged and every request for it is refused.
//!
//! Files whose names are not `<run id>.ledger` are left alone.

use super::run::Run;
use super::{io_err, StoreError};
use plugpull::ledger::{self, Entry, Tail};
use plugpull::RunId;
use std::collections::HashMap;
use std::fs::OpenOptions;
use std::path::Path;

/// Recovers every ledger in `runs_dir`. Errors ([`StoreError::Io`]): the directory or
/// a ledger cannot be read, or a torn tail cannot be saved or cut off.
pub(super) fn recover_all(runs_dir: &Path) -> Result<HashMap<RunId, Run>, StoreError> {
    let mut runs = HashMap::new();
    let entries = std::fs::read_dir(runs_dir).map_err(|e| io_err("cannot read", runs_dir, e))?;
    for ent in entries {
        let ent = ent.map_err(|e| io_err("cannot read", runs_dir, e))?;
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
        runs.insert(run, recover(&path, run)?);
    }
    Ok(runs)
}

/// Scans the ledger of `run` at `path`, cutting off a torn tail, and returns its entry.
fn recover(path: &Path, run: RunId) -> Result<Run, StoreError> {
    let bytes = std::fs::read(path).map_err(|e| io_err("cannot read ledger", path, e))?;
    let mut manifest = None;
    let mut highest = 0;
    let mut ended = false;
    let scanned = ledger::scan(&bytes, |_, e| match e {
        Entry::Manifest(m) => manifest = Some(*m),
        Entry::Acks(b) => highest = highest.max(b.batch),
        Entry::Finished(_) | Entry::DeviceError(_) | Entry::Invalid { .. } => ended = true,
    });
    // The last append's time, read before a torn tail is cut (which touches the file).
    let mtime_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let (id, tail) = match scanned {
        Ok(scanned) => scanned,
        Err(e) => return Ok(damaged(run, path, e.to_string(), manifest.as_ref())),
    };
    if id != run {
        let why = format!("file is named for run {run} but its header says {id}");
        return Ok(damaged(run, path, why, None));
    }
    let mut len = bytes.len() as u64;
    if let Tail::Torn {
        valid_len,
        torn_bytes,
    } = tail
    {
        cut_torn_tail(path, run, &bytes, valid_len, torn_bytes)?;
        len = valid_len;
    }
    let m = manifest.expect("scan guarantees a manifest");
    let mut entry = Run::new(&m, len, mtime_ms);
    entry.highest_batch = highest;
    entry.ended = ended;
    Ok(entry)
}

/// Keeps `bytes[valid_len..]` as `<run>.ledger.torn-<valid_len>` and truncates the
/// ledger at `path` to `valid_len` (synced).
fn cut_torn_tail(
    path: &Path,
    run: RunId,
    bytes: &[u8],
    valid_len: u64,
    torn_bytes: u64,
) -> Result<(), StoreError> {
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
    Ok(())
}

/// The entry of a damaged ledger, logged as an error.
fn damaged(
    run: RunId,
    path: &Path,
    why: String,
    manifest: Option<&plugpull::ledger::Manifest>,
) -> Run {
    tracing::error!(%run, path = %path.display(), error = %why, "ledger damaged; its run cannot be verified");
    Run::damaged(why, manifest)
}
