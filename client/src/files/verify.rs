//! Verifying a files run: walk its directory with plain reads and judge every name
//! ([`plugpull::verdict::files::judge_folded`], from the acks the ledger folded as it
//! streamed).
//!
//! The files are small (at most 8 KiB) and read with ordinary buffered reads, not
//! `O_DIRECT`: after a real power cut the host rebooted and its page cache is empty;
//! after a cut of the storage alone (simfs, a SAN) the names and sizes come from the
//! filesystem's own view either way. `docs/files.md` says so.

use super::MARKER;
use crate::target_id::{self, OnRunFs};
use crate::Error;
use plugpull::ledger::{FilesManifest, RunLedger};
use plugpull::report::{FilesHead, FilesReport};
use plugpull::verdict::files::schedule::{parse_name, Unsafe};
use plugpull::verdict::files::{judge_folded, FilesRun, Found, Walk, READ_CAP};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Steps per worker the verifier replays after its last confirmed one when the
/// manifest's bound is 0 (unbounded).
pub const UNBOUNDED_WINDOW: u64 = 1_000_000;

/// Reads what the directory holds: the run's names, their `.tmp` files, other entries.
///
/// Errors: the directory or one of the run's files cannot be read.
pub fn walk(dir: &Path, jobs: u32, files: u32) -> Result<Walk, Error> {
    let err = |p: &Path, e: std::io::Error| Error::Msg(format!("cannot read {}: {e}", p.display()));
    let mut w = Walk::default();
    for e in std::fs::read_dir(dir).map_err(|e| err(dir, e))? {
        let e = e.map_err(|e| err(dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let (base, tmp) = match name.strip_suffix(".tmp") {
            Some(b) => (b, true),
            None => (name.as_str(), false),
        };
        let Some(f) = parse_name(base, jobs, files).filter(|_| e.path().is_file()) else {
            if name != MARKER {
                w.foreign.push(name);
            }
            continue;
        };
        let path = e.path();
        let mut file = std::fs::File::open(&path).map_err(|e| err(&path, e))?;
        let size = file.metadata().map_err(|e| err(&path, e))?.len();
        let mut data = Vec::new();
        (&mut file)
            .take(READ_CAP)
            .read_to_end(&mut data)
            .map_err(|e| err(&path, e))?;
        let found = Found { size, data };
        if tmp {
            w.tmps.insert(f, found);
        } else {
            w.names.insert(f, found);
        }
    }
    w.foreign.sort();
    Ok(w)
}

/// Verifies a files run whose ledger passed the device-error rule
/// ([`crate::verify::judge_ledger`] applies it): the walk of its directory (`target`
/// instead of the manifest's when given), every name judged.
///
/// Errors (exit 2): the directory is missing
/// (mount the filesystem first) or unreadable; the acks do not match the schedule.
pub fn verify_files_run(
    l: &RunLedger,
    fm: &FilesManifest,
    target: Option<&PathBuf>,
) -> Result<FilesReport, Error> {
    let dir = target.cloned().unwrap_or_else(|| PathBuf::from(&fm.target));
    // A directory gone from the run's own filesystem is the run's loss: its entry was
    // fsynced in its parent before the first step (`prepare_dir`).
    let on_fs = target_id::on_run_fs(
        &dir,
        "directory",
        &fm.identity,
        target.is_some(),
        &fm.target,
    )
    .map_err(|e| Error::Msg(format!("cannot verify run {}: {e}", l.run)))?;
    let (w, gone) = match on_fs {
        OnRunFs::Present => (walk(&dir, fm.jobs, fm.files)?, None),
        OnRunFs::Gone(fs) => (
            Walk::default(),
            Some(format!(
                "the run's directory is gone: {} does not exist on its filesystem, {} (its entry was fsynced in its parent before the first step); every name is judged absent (if you moved or renamed it, verify its new path with --target)",
                dir.display(),
                fs.describe()
            )),
        ),
    };
    let acks = l.files_acks.as_ref().ok_or_else(|| {
        Error::Msg(format!(
            "run {}: the ledger's first manifest is not a files run's",
            l.run
        ))
    })?;
    let window = if l.finished && l.device_error.is_none() {
        0
    } else if fm.max_unconfirmed == 0 {
        UNBOUNDED_WINDOW
    } else {
        // Up to max + 1 acks waiting when a worker looks, and the step it then takes.
        fm.max_unconfirmed + 2
    };
    let run = FilesRun {
        run: l.run,
        jobs: fm.jobs,
        files: fm.files,
        seed: fm.seed,
        unsafe_steps: Unsafe {
            dirsync: fm.skip_dirsync,
            presync: fm.skip_presync,
        },
        window,
    };
    let outcome =
        judge_folded(&run, acks, &w).map_err(|e| Error::Msg(format!("run {}: {e}", l.run)))?;
    let head = FilesHead {
        run_id: l.run.to_string(),
        host: l.manifest.host.clone(),
        target: dir.display().to_string(),
        jobs: fm.jobs,
        files: fm.files,
        finished: l.finished,
        run_started_unix_ms: l.manifest.started_unix_ms,
        run_chosen: l.chosen.clone(),
    };
    let mut report = FilesReport::new(head, outcome);
    if let Some(g) = gone {
        if !report.ok && !report.not_measured {
            report.summary.push_str("; the directory itself is gone");
        }
        report.directory_gone = Some(g);
    }
    Ok(report)
}
