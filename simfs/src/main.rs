//! `plugpull-simfs`: mount a power-cut simulator, pull its plug, unmount it.
//!
//! The fault model of each mode, the ground-truth format and the control socket are
//! documented in the library (`plugpull_simfs`, `src/lib.rs`) and in `README.md`.
//! This file only parses arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use plugpull_simfs::cmd::{self, MountArgs};
use plugpull_simfs::journal::Metadata;
use plugpull_simfs::sim::{Mode, SimConfig};

/// The static musl builds of `scripts/release` allocate with mimalloc: musl's own
/// allocator takes one lock for every allocation, which threads contend on
/// (docs/performance.md, "Release binaries"). Other builds keep the C library's.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A FUSE filesystem with a volatile write cache that can lose power on command.
#[derive(Parser, Debug)]
#[command(name = "plugpull-simfs", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Mount over a backing directory and serve in the foreground until unmounted.
    ///
    /// Prints `mounted MNT` on stdout once the mount is live. Mount options:
    /// allow_other, default_permissions, fsname=plugpull-simfs. The control socket
    /// is `<MNT's parent>/.<MNT's name>.simfs.sock` unless --control is given.
    Mount {
        /// Backing directory: after unmount it holds exactly what survived.
        #[arg(long)]
        backing: PathBuf,
        /// Mountpoint (an existing directory).
        #[arg(long)]
        mountpoint: PathBuf,
        /// Fault model: honest, lying, reorder, torn, misdirect.
        #[arg(long, value_enum)]
        mode: Mode,
        /// Seed of every random choice [default: derived from the clock, logged].
        #[arg(long)]
        seed: Option<u64>,
        /// Ground-truth log (JSON lines), written at the cut
        /// [default: <MNT's parent>/<MNT's name>.simfs-truth.jsonl].
        #[arg(long)]
        ground_truth: Option<PathBuf>,
        /// Milliseconds a write stays cached before background destage
        /// (reorder: uniform in 0..=2x this).
        #[arg(long, default_value_t = 2000)]
        destage_delay_ms: u64,
        /// Bytes of cached writes above which writes destage at once.
        #[arg(long, default_value_t = 64 << 20)]
        cache_bytes: u64,
        /// Bytes per sector, the unit a torn cut keeps or drops.
        #[arg(long, default_value_t = 512)]
        sector: u64,
        /// Torn mode: writes of at most BYTES are atomic (kept or dropped whole at the
        /// cut, never torn); longer ones are torn at sector boundaries (0: none atomic).
        #[arg(long, value_name = "BYTES", default_value_t = 0)]
        atomic_unit: u64,
        /// Bytes per block: only block-aligned writes are misdirected, to another block.
        #[arg(long, default_value_t = 4096)]
        misdirect_block: u64,
        /// Misdirect an eligible destaged write with chance 1 in N (0: never).
        #[arg(long, default_value_t = 50)]
        misdirect_every: u64,
        /// FUSE worker threads.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Milliseconds every fsync/fdatasync (and O_SYNC/O_DSYNC write) sleeps before
        /// returning, after its work: a slow cache flush.
        #[arg(long, default_value_t = 0)]
        flush_delay_ms: u64,
        /// Milliseconds every fsync/fdatasync (and O_SYNC/O_DSYNC write) waits before
        /// its work, the writes it covers still only cached: a cut meanwhile finds them
        /// in the cache (a slow flush of a volatile cache).
        #[arg(long, default_value_t = 0)]
        flush_latency_ms: u64,
        /// Report 0 bytes in all from statfs, as FUSE filesystems without statfs do.
        #[arg(long)]
        statfs_zero: bool,
        /// Refuse every fallocate with EOPNOTSUPP, as filesystems without it do
        /// (LazyFS, some FUSE filesystems): files can only be filled by writing.
        #[arg(long)]
        no_fallocate: bool,
        /// Metadata rules: posix (a name is durable once its directory is fsynced, a
        /// size once its file is), journal (any fsync makes all metadata durable, as
        /// ext4 data=ordered and XFS), passthrough (metadata always survives).
        #[arg(long, value_enum, default_value = "posix")]
        metadata: Metadata,
        /// Control socket path.
        #[arg(long)]
        control: Option<PathBuf>,
    },
    /// Pull the plug: returns once the cache is dropped, the mount fails every
    /// operation with EIO, and the ground truth is written and fsynced. Prints the
    /// summary line (JSON).
    Cut {
        /// Mountpoint of the running simfs.
        #[arg(long)]
        mountpoint: PathBuf,
        /// Control socket path, if the mount was given one.
        #[arg(long)]
        control: Option<PathBuf>,
        /// Torn mode: wait up to SECS for the cache to hold a write the cut could
        /// tear (longer than --atomic-unit) and cut at that moment; if none comes,
        /// cut nothing and exit 1. A rehearsal then never wastes a cut on an idle
        /// moment.
        #[arg(long, value_name = "SECS")]
        when_tearable: Option<f64>,
    },
    /// Unmount (fusermount3 -u, lazily if busy) and wait for the mount process to exit.
    Umount {
        /// Mountpoint of the running simfs.
        #[arg(long)]
        mountpoint: PathBuf,
        /// Control socket path, if the mount was given one.
        #[arg(long)]
        control: Option<PathBuf>,
        /// Seconds to wait for the mount process to exit.
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
    },
    /// Print the running mount's counters (JSON).
    Stats {
        /// Mountpoint of the running simfs.
        #[arg(long)]
        mountpoint: PathBuf,
        /// Control socket path, if the mount was given one.
        #[arg(long)]
        control: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    plugpull_docgen::from_env(<Cli as clap::CommandFactory>::command);
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PLUGPULL_SIMFS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = match Cli::parse().command {
        Command::Mount {
            backing,
            mountpoint,
            mode,
            seed,
            ground_truth,
            destage_delay_ms,
            cache_bytes,
            sector,
            atomic_unit,
            misdirect_block,
            misdirect_every,
            threads,
            control,
            flush_delay_ms,
            flush_latency_ms,
            statfs_zero,
            no_fallocate,
            metadata,
        } => {
            if sector == 0 || misdirect_block == 0 {
                eprintln!("plugpull-simfs: --sector and --misdirect-block must be positive");
                return ExitCode::from(2);
            }
            let seed = seed.unwrap_or_else(clock_seed);
            cmd::mount(MountArgs {
                backing,
                mountpoint,
                sim: SimConfig {
                    mode,
                    seed,
                    destage_delay_ms,
                    cache_bytes,
                    sector,
                    atomic_unit,
                    misdirect_block,
                    misdirect_every,
                    flush_delay_ms,
                    flush_latency_ms,
                    statfs_zero,
                    no_fallocate,
                    metadata,
                },
                truth: ground_truth,
                control,
                threads,
            })
        }
        Command::Cut {
            mountpoint,
            control,
            when_tearable,
        } => {
            let wait = when_tearable
                .map(|s| {
                    Duration::try_from_secs_f64(s)
                        .map_err(|e| std::io::Error::other(format!("--when-tearable {s}: {e}")))
                })
                .transpose();
            wait.and_then(|w| cmd::cut(&mountpoint, control.as_deref(), w))
                .map(|s| println!("{s}"))
        }
        Command::Umount {
            mountpoint,
            control,
            timeout_secs,
        } => cmd::umount(
            &mountpoint,
            control.as_deref(),
            Duration::from_secs(timeout_secs),
        ),
        Command::Stats {
            mountpoint,
            control,
        } => cmd::stats(&mountpoint, control.as_deref()).map(|s| println!("{s}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plugpull-simfs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
