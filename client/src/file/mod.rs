//! `plugpull write file`: checksummed blocks written to a file or block device, each
//! acknowledged once its durability call returned; and the verification of such a run.
//!
//! * [`write`] (here): arguments, the run's manifest, the writers, the progress line,
//!   the end of the run.
//! * [`target`]: the target before the first write (kind, foreign data, locking,
//!   preallocation, what it held before).
//! * [`atomic`]: `--expect-atomic` and `--atomic rwf|none` (the claims, the refusal,
//!   `RWF_ATOMIC` writes).
//! * `worker`: the writer threads (`pwrite` + durability call, the watermark).
//! * [`medium`]: finding the target after the cut and reading it from the medium.
//! * [`verify`]: reading a run's target and judging every block.
//! * [`others`]: placing the other runs whose records the target holds.
//! * [`print`]: the write summary and the human verify report.
//!
//! Worker `j` of `N` owns the blocks `b ≡ j (mod N)`, so each block is written by one
//! worker at a time. Sequence numbers are assigned at issue from one run-wide
//! counter; each write carries the acknowledged watermark (every seq at or below it
//! has been acknowledged) at its issue, which lets the verifier prove reordering
//! across a flush. See `plugpull::record` for the sector format.

pub mod atomic;
pub mod contents;
pub mod medium;
pub mod others;
pub mod parallel;
pub mod print;
pub mod target;
pub mod verify;
pub(crate) mod worker;

use crate::manifest::make_manifest;
use crate::reporter::Reporter;
use crate::run::SummaryHead;
use crate::run::{check_times, device_error_end, end_run, wait_for_workers, Shared};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{FileManifest, Manifest, Workload};
use plugpull::record::{Encoder, SECTOR};
use plugpull::units::parse_size;
use print::{print_write_head, print_write_summary, WriteSummary};
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use target::{check_direct_alignment, prepare_target, target_kind, LockedTarget};
use worker::{open_for_writes, Plan};

pub use plugpull::modes::{Pattern, SyncMode};

/// Options of `plugpull write file`.
#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {
    /// File or block device to write (a file is created and preallocated).
    #[arg(long)]
    pub target: PathBuf,
    /// Bytes of the target to use, e.g. 64MiB or 1GiB.
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// Bytes per block: a multiple of 512.
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    pub block_size: u64,
    /// Concurrent writers (each owns every N-th block).
    #[arg(long, short = 'j', default_value_t = 1)]
    pub jobs: u32,
    /// Durability call after each write.
    #[arg(long, value_enum, default_value = "fdatasync")]
    pub sync: SyncMode,
    /// Stop after this many writes instead of after a duration.
    #[arg(long, conflicts_with = "duration")]
    pub writes: Option<u64>,
    /// Order of blocks.
    #[arg(long, value_enum, default_value = "random")]
    pub pattern: Pattern,
    /// Before the first write, also time a `pwrite` + `fdatasync` loop beside the
    /// target for this many seconds, counting each leaf disk's flushes (as `plugpull
    /// probe --seconds`); the stack itself is always probed.
    #[arg(long, value_parser = crate::probe::seconds_arg)]
    pub probe_seconds: Option<f64>,
    #[command(flatten)]
    pub atomic: atomic::AtomicArgs,
    #[command(flatten)]
    pub run: crate::run::RunArgs,
}

/// Most concurrent writers `--jobs` accepts (one thread and descriptor each).
pub const MAX_JOBS: u32 = 1024;

/// Validates the arguments and returns the number of blocks (durations are bounded
/// by the parser, `plugpull::units::MAX_DURATION`).
pub fn check_args(a: &WriteArgs) -> Result<u64, Error> {
    if a.block_size < SECTOR as u64 || a.block_size > (64 << 20) {
        return Err(format!(
            "--block-size {} is out of range: it must be between 512 bytes and 64 MiB",
            plugpull::units::human_bytes(a.block_size)
        )
        .into());
    }
    if !a.block_size.is_multiple_of(SECTOR as u64) {
        return Err(format!(
            "--block-size {} is not a multiple of 512 bytes (a sector)",
            a.block_size
        )
        .into());
    }
    if a.size < a.block_size {
        return Err(format!(
            "--size {} is smaller than one block ({} bytes)",
            a.size, a.block_size
        )
        .into());
    }
    if a.jobs == 0 || a.jobs > MAX_JOBS {
        return Err(format!("--jobs {} is not between 1 and {MAX_JOBS}", a.jobs).into());
    }
    if a.writes == Some(0) {
        return Err("--writes must be at least 1".into());
    }
    check_times(a.run.duration, a.run.progress)?;
    atomic::check_atomic_args(&a.atomic, a.sync)?;
    Ok(a.size / a.block_size)
}

/// Runs `plugpull write file`. Returns `Ok(true)` when the run ended as planned,
/// `Ok(false)` (exit 1) when it ended by a device error: a `pwrite` or durability call
/// failed (EIO, ENODEV, ENXIO, ENOSPC, …). The run is then the cut: every worker stops,
/// no ack is handed over after the error, the ledger records the error
/// ([`plugpull::ledger::DeviceError`]) and `verify` judges the acks confirmed before it.
///
/// Errors (exit 2): bad arguments, a target of the wrong kind, too small or that
/// cannot be opened, an unreachable listener or a wrong secret (all found before the
/// target is created), a listener that cannot be reached at the end.
pub async fn write(args: &WriteArgs, listener: &str, secret: &Secret) -> Result<bool, Error> {
    let blocks = check_args(args)?;
    let existed = target_kind(&args.target)?.is_some();
    // An unreachable listener or a wrong secret is found before the target is created.
    drop(crate::net::connect(listener, secret).await?);
    let size = blocks * args.block_size;
    let step = crate::slow::Slow::start(format!(
        "preparing target {} ({}: allocating it and making it durable)",
        args.target.display(),
        plugpull::units::human_bytes(size)
    ));
    let (_locked, files) = open_run_target(args, size, existed)?;
    drop(step);
    // The probe blocks (sysfs, tools up to 5 s each, --probe-seconds).
    let step = crate::slow::Slow::start("probing the stack under test");
    let (manifest, target, probe) = tokio::task::block_in_place(|| run_manifest(args, size))?;
    drop(step);
    let head = crate::storage::write_head(&manifest.storage, probe.as_ref());
    let atomic_line = atomic::head_line(&manifest);
    let (reporter, run) =
        Reporter::start_with(listener, secret, manifest, &args.run.reporter).await?;
    if !args.run.json {
        print_write_head(run, &target, size, args);
        println!("{head}");
        atomic_line.iter().for_each(|l| println!("{l}"));
    }
    let duration = match (args.writes, args.run.duration) {
        (Some(_), _) => None,
        (None, d) => Some(d.unwrap_or(crate::run::DEFAULT_DURATION)),
    };
    let start = Instant::now();
    // check_args bounds the duration, so this cannot overflow.
    let sh = Arc::new(Shared::new(
        args.writes,
        duration.and_then(|d| start.checked_add(d)),
        args.jobs as usize,
    ));
    let plan = Plan {
        jobs: args.jobs as u64,
        blocks,
        bs: args.block_size as usize,
        sync: args.sync,
        pattern: args.pattern,
        seed: args.run.seed.unwrap_or_else(rand::random),
        rwf_atomic: args.atomic.atomic == plugpull::modes::AtomicMode::Rwf,
    };
    let enc = Arc::new(Encoder::new(run));
    let handles = worker::spawn(files, plan, &enc, &sh, || reporter.sink());
    let outs = wait_for_workers(handles, &sh, reporter.sink(), args.run.progress, start).await;
    let elapsed = start.elapsed();
    let end = end_run(reporter, &sh, &outs, elapsed).await?;
    let head = SummaryHead::new(
        run,
        &target,
        args.jobs,
        elapsed,
        &end,
        probe.map(|p| p.warnings).unwrap_or_default(),
    );
    let s = WriteSummary {
        writes_per_sec: head.per_sec(&end),
        head,
        size,
        block_size: args.block_size,
        blocks,
        sync: args.sync.name(),
        pattern: args.pattern.name(),
        writes_issued: end.issued,
        writes_acknowledged: end.confirmed,
        coverage_percent: plugpull::report::percent_floor(end.covered, blocks),
        blocks_written: end.covered,
    };
    print_write_summary(&s, args.run.json);
    match &end.device_error {
        None => Ok(true),
        Some(e) => device_error_end(run, e, end.confirmed, listener),
    }
}

/// Prepares and locks the target (see [`prepare_target`]) and opens one descriptor per
/// worker; with `--sync direct-dsync` checks the `O_DIRECT` alignment, removing a file
/// this run created when it does not fit.
fn open_run_target(
    args: &WriteArgs,
    size: u64,
    existed: bool,
) -> Result<(LockedTarget, Vec<File>), Error> {
    let locked = prepare_target(&args.target, size, args.run.force)?;
    let files: Vec<File> = (0..args.jobs)
        .map(|_| open_for_writes(&args.target, args.sync))
        .collect::<Result<_, _>>()?;
    if args.sync == SyncMode::DirectDsync {
        let checked = check_direct_alignment(&files[0], &args.target, args.block_size)
            .and_then(|()| atomic::check_rwf(&args.atomic, &args.target, args.block_size));
        if let Err(e) = checked {
            if !existed {
                let _ = std::fs::remove_file(&args.target);
            }
            return Err(e);
        }
    }
    Ok((locked, files))
}

/// The run's manifest, the target's path as recorded and the probe of its storage:
/// the path as given (absolute, symlinks such as /dev/disk/by-id/… kept), its
/// identity, what it held before the first write, and the stack under it
/// ([`crate::storage::probe_for_run`], `--probe-seconds`).
///
/// Errors: the target's identity cannot be read.
fn run_manifest(
    args: &WriteArgs,
    size: u64,
) -> Result<(Manifest, PathBuf, Option<plugpull::probe::Probe>), Error> {
    let target = std::path::absolute(&args.target).unwrap_or_else(|_| args.target.clone());
    let identity = crate::target_id::identify(&target)
        .map_err(|e| Error::Msg(format!("cannot identify target {}: {e}", target.display())))?;
    let (prior_runs, prior_foreign) = File::open(&target)
        .map(|f| contents::scan_prior(&f, size))
        .unwrap_or((Vec::new(), true));
    let (storage, probe) = crate::storage::probe_for_run(&target, args.probe_seconds);
    let workload = Workload::File(FileManifest {
        target: target.display().to_string(),
        size,
        block_size: args.block_size as u32,
        jobs: args.jobs,
        sync: args.sync,
        pattern: args.pattern,
        identity,
        prior_runs,
        prior_foreign,
        atomic: (args.atomic.expect_atomic)
            .then(|| atomic::claim(&args.atomic, args.block_size, &target, probe.as_ref())),
    });
    Ok((make_manifest(workload, storage), target, probe))
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

    fn args(extra: &[&str]) -> WriteArgs {
        let mut argv = vec!["write", "--target", "/tmp/x", "--size", "1MiB"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).unwrap().args
    }

    fn refusal(extra: &[&str]) -> String {
        check_args(&args(extra)).unwrap_err().to_string()
    }

    #[test]
    fn a_negative_duration_is_named_as_such() {
        let e = Cli::try_parse_from(["write", "--target", "/tmp/x", "-T", "-1s"])
            .err()
            .unwrap();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert_eq!(
            e.to_string().lines().next().unwrap(),
            "error: invalid value '-1s' for '--duration <DURATION>': \"-1s\" is negative: a duration is 0 or more, e.g. 30s or 5m"
        );
    }

    #[test]
    fn check_args_counts_whole_blocks_and_refuses_each_bad_argument_by_name() {
        assert_eq!(check_args(&args(&[])).unwrap(), 256);
        assert_eq!(check_args(&args(&["--block-size", "3072"])).unwrap(), 341);
        assert_eq!(
            refusal(&["--block-size", "1000"]),
            "--block-size 1000 is not a multiple of 512 bytes (a sector)"
        );
        assert_eq!(
            refusal(&["--block-size", "128MiB"]),
            "--block-size 128 MiB is out of range: it must be between 512 bytes and 64 MiB"
        );
        assert_eq!(
            refusal(&["--block-size", "256"]),
            "--block-size 256 bytes is out of range: it must be between 512 bytes and 64 MiB"
        );
        assert_eq!(check_args(&args(&["--block-size", "512"])).unwrap(), 2048);
        assert_eq!(
            refusal(&["--block-size", "2MiB"]),
            "--size 1048576 is smaller than one block (2097152 bytes)"
        );
        assert_eq!(refusal(&["-j", "0"]), "--jobs 0 is not between 1 and 1024");
        assert_eq!(
            refusal(&["-j", "1025"]),
            "--jobs 1025 is not between 1 and 1024"
        );
        assert_eq!(refusal(&["--writes", "0"]), "--writes must be at least 1");
    }
}
