//! `plugpull write files`: a namespace workload. Workers create, append to, replace
//! (write `NAME.tmp`, fsync, rename over `NAME`, fsync the directory), truncate and
//! unlink small files of checksummed records in one directory, each step acknowledged
//! to the listener once its last durability call returned, with the state it promises
//! for its name (exists, size, content seq); and the verification of such a run.
//!
//! * [`write`] (here): arguments, the directory before the first step, the manifest,
//!   the workers (the progress line and the end of the run are the file workload's).
//! * `worker`: the step threads.
//! * [`verify`]: walking the directory and judging every name.
//! * [`print`]: the write summary and the human verify report.
//!
//! Which step a worker takes next is a deterministic schedule
//! ([`plugpull::verdict::files::schedule`]) the verifier replays; `docs/files.md`
//! describes the workload and its verdicts.

pub mod print;
pub mod verify;
mod worker;

use crate::manifest::make_manifest;
use crate::reporter::{Reporter, FILES_MAX_UNCONFIRMED};
use crate::run::Shared;
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{FilesManifest, Workload};
use plugpull::verdict::files::schedule::{split_name, Unsafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The file that marks a directory as a files run's: written and synced before the
/// first step; a directory holding other entries without it is refused without `--force`.
pub const MARKER: &str = ".plugpull-files";

/// Options of `plugpull write files`.
#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {
    /// Directory to work in (created when missing).
    #[arg(long)]
    pub target: PathBuf,
    /// Concurrent workers (worker j owns the files w{j}-*).
    #[arg(long, short = 'j', default_value_t = 1)]
    pub jobs: u32,
    /// File names in all, shared out among the workers.
    #[arg(long, default_value_t = 64)]
    pub files: u32,
    /// Stop after this many steps (all workers together) instead of after a duration.
    #[arg(long, conflicts_with = "duration")]
    pub steps: Option<u64>,
    /// Durability calls to skip, comma-separated: `dirsync` (the directory fsync after
    /// create, replace and unlink), `presync` (the fsync of NAME.tmp before the rename).
    /// Those steps are acknowledged as not promised; their losses are expected.
    #[arg(long, value_delimiter = ',')]
    pub unsafe_steps: Vec<String>,
    #[command(flatten)]
    pub run: crate::run::RunArgs,
}

/// Most workers `--jobs` accepts, and most file names `--files` accepts.
pub use plugpull::verdict::files::schedule::{MAX_FILES, MAX_JOBS};

/// Validates the arguments and returns the durability calls to skip.
pub fn check_args(a: &WriteArgs) -> Result<Unsafe, Error> {
    if a.jobs == 0 || a.jobs > MAX_JOBS {
        return Err(format!("--jobs {} is not between 1 and {MAX_JOBS}", a.jobs).into());
    }
    if a.files < a.jobs || a.files > MAX_FILES {
        return Err(format!(
            "--files {} is not between --jobs ({}) and {MAX_FILES}: every worker needs a file",
            a.files, a.jobs
        )
        .into());
    }
    if a.steps == Some(0) {
        return Err("--steps must be at least 1".into());
    }
    crate::run::check_times(a.run.duration, a.run.progress)?;
    let mut u = Unsafe::default();
    for s in &a.unsafe_steps {
        match s.as_str() {
            "dirsync" => u.dirsync = true,
            "presync" => u.presync = true,
            other => {
                return Err(
                    format!("--unsafe-steps {other:?} is not one of dirsync, presync").into(),
                )
            }
        }
    }
    Ok(u)
}

/// Runs `plugpull write files`. Returns `Ok(true)` when the run ended as planned,
/// `Ok(false)` (exit 1) when a device error ended it (as `write file`).
///
/// Errors (exit 2): bad arguments, a directory that is not one or not ours (without
/// `--force`), an unreachable listener or a wrong secret (found before the directory
/// is touched), a step that failed with an error that is not a device's.
pub async fn write(args: &WriteArgs, listener: &str, secret: &Secret) -> Result<bool, Error> {
    let unsafe_steps = check_args(args)?;
    drop(crate::net::connect(listener, secret).await?);
    let dir = std::path::absolute(&args.target).unwrap_or_else(|_| args.target.clone());
    let lock = prepare_dir(&dir, args.run.force)?;
    let seed = args.run.seed.unwrap_or_else(rand::random);
    let max_unconfirmed = args.run.reporter.max_unconfirmed_or(FILES_MAX_UNCONFIRMED);
    let step = crate::slow::Slow::start("probing the stack under test");
    let (storage, probe) =
        tokio::task::block_in_place(|| crate::storage::probe_for_run(&dir, None));
    drop(step);
    let workload = Workload::Files(FilesManifest {
        target: dir.display().to_string(),
        jobs: args.jobs,
        files: args.files,
        seed,
        skip_dirsync: unsafe_steps.dirsync,
        skip_presync: unsafe_steps.presync,
        max_unconfirmed,
        identity: crate::target_id::identify(&dir).unwrap_or_default(),
    });
    let manifest = make_manifest(workload, storage);
    let head = crate::storage::write_head(&manifest.storage, probe.as_ref());
    let (reporter, run) =
        Reporter::start_with(listener, secret, manifest, &args.run.reporter).await?;
    if !args.run.json {
        println!("run id: {run}");
        println!(
            "target directory: {}; jobs: {}; files: {}; unsafe steps: {}",
            dir.display(),
            args.jobs,
            args.files,
            print::unsafe_name(unsafe_steps)
        );
        println!("{head}");
    }
    let duration = match (args.steps, args.run.duration) {
        (Some(_), _) => None,
        (None, d) => Some(d.unwrap_or(crate::run::DEFAULT_DURATION)),
    };
    let start = Instant::now();
    let sh = Arc::new(Shared::new(
        args.steps,
        duration.and_then(|d| start.checked_add(d)),
        args.jobs as usize,
    ));
    let plan = worker::Plan {
        dir: dir.clone(),
        jobs: args.jobs,
        files: args.files,
        seed,
        unsafe_steps,
        run,
    };
    let handles = worker::spawn(&plan, &sh, || reporter.sink())?;
    let outs =
        crate::run::wait_for_workers(handles, &sh, reporter.sink(), args.run.progress, start).await;
    let elapsed = start.elapsed();
    let end = crate::run::end_run(reporter, &sh, &outs, elapsed).await?;
    drop(lock);
    let head = crate::run::SummaryHead::new(
        run,
        &dir,
        args.jobs,
        elapsed,
        &end,
        probe.map(|p| p.warnings).unwrap_or_default(),
    );
    print::print_write_summary(
        &print::WriteSummary {
            steps_per_sec: head.per_sec(&end),
            head,
            files: args.files,
            unsafe_steps: print::unsafe_name(unsafe_steps),
            steps_issued: end.issued,
            steps_acknowledged: end.confirmed,
            names_touched: end.covered,
        },
        args.run.json,
    );
    match &end.device_error {
        None => Ok(true),
        Some(e) => crate::run::device_error_end(run, e, end.confirmed, listener),
    }
}

/// Whether `name` is an entry a files run makes (`w{j}-{n}`, `w{j}-{n}.tmp`, the marker).
fn is_ours(name: &str) -> bool {
    let base = name.strip_suffix(".tmp").unwrap_or(name);
    name == MARKER || split_name(base).is_some()
}

/// Makes `dir` ready for the first step and locks it (`flock`, so a second writer is
/// refused): creates it when missing; refuses a non-directory, and a non-empty
/// directory without the [`MARKER`] unless `force`; removes every entry an earlier
/// files run left; writes the marker; syncs the marker, the directory and its parents.
///
/// Errors: any of these fails, or another writer holds the directory.
pub fn prepare_dir(dir: &Path, force: bool) -> Result<std::fs::File, Error> {
    let err = |what: &str, e: std::io::Error| Error::Msg(format!("{what} {}: {e}", dir.display()));
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::Msg(format!(
                "target {} is not a directory (write files works in a directory)",
                dir.display()
            )))
        }
        Ok(_) => {}
        Err(_) => std::fs::create_dir_all(dir).map_err(|e| err("cannot create", e))?,
    }
    let lock = std::fs::File::open(dir).map_err(|e| err("cannot open", e))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(Error::Msg(format!(
            "target {} is in use by another writer",
            dir.display()
        )));
    }
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| err("cannot read", e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let marked = names.iter().any(|n| n == MARKER);
    let foreign: Vec<&String> = names.iter().filter(|n| !is_ours(n)).collect();
    if !names.is_empty() && !marked && !force {
        return Err(Error::Msg(format!(
            "target directory {} is not empty and not a files run's (it holds {}{}); give --force to use it anyway (its other entries are left alone)",
            dir.display(),
            names.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            if names.len() > 3 { ", …" } else { "" }
        )));
    }
    if !foreign.is_empty() && marked && !force {
        eprintln!(
            "warning: {} entries in {} are not the run's; they are left alone",
            foreign.len(),
            dir.display()
        );
    }
    for n in names.iter().filter(|n| is_ours(n)) {
        std::fs::remove_file(dir.join(n)).map_err(|e| err(&format!("cannot remove {n} in"), e))?;
    }
    let marker = dir.join(MARKER);
    std::fs::write(&marker, b"plugpull files workload directory\n")
        .and_then(|_| std::fs::File::open(&marker)?.sync_all())
        .and_then(|_| lock.sync_all())
        .map_err(|e| err("cannot write the marker in", e))?;
    // The directory's own entry (and those of any parents create_dir_all made) is
    // durable only once each parent is fsynced: without this a cut loses the whole
    // directory (simfs --metadata posix showed it).
    for (i, parent) in dir.ancestors().skip(1).enumerate() {
        let synced = std::fs::File::open(parent).and_then(|d| d.sync_all());
        if i == 0 {
            if let Err(e) = synced {
                return Err(Error::Msg(format!(
                    "cannot fsync {}: {e}",
                    parent.display()
                )));
            }
        }
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: WriteArgs,
    }

    fn refusal(extra: &[&str]) -> String {
        let mut argv = vec!["files", "--target", "/tmp/x"];
        argv.extend_from_slice(extra);
        check_args(&Cli::try_parse_from(argv).unwrap().args)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn check_args_refuses_each_bad_argument_by_name() {
        assert_eq!(refusal(&["-j", "0"]), "--jobs 0 is not between 1 and 1024");
        assert_eq!(
            refusal(&["-j", "4", "--files", "3"]),
            "--files 3 is not between --jobs (4) and 1048576: every worker needs a file"
        );
        assert_eq!(refusal(&["--steps", "0"]), "--steps must be at least 1");
        assert_eq!(
            refusal(&["--unsafe-steps", "dirsync,nosync"]),
            "--unsafe-steps \"nosync\" is not one of dirsync, presync"
        );
    }

    #[test]
    fn only_the_runs_own_entries_are_ours() {
        assert!(is_ours("w0-12") && is_ours("w3-0.tmp") && is_ours(MARKER));
        assert!(!is_ours("notes.txt") && !is_ours("w0-1.bak") && !is_ours("w-1"));
    }
}
