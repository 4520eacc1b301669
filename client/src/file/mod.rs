//! `plugpull write file`: checksummed blocks written to a file or block device, each
//! acknowledged once its durability call returned.
//!
//! Worker `j` of `N` owns the blocks `b ≡ j (mod N)`, so each block is written by one
//! worker at a time. Sequence numbers are assigned at issue from one run-wide
//! counter; each write carries the acknowledged watermark (every seq at or below it
//! has been acknowledged) at its issue, which lets the verifier prove reordering
//! across a flush. See `plugpull::record` for the sector format.

use crate::guard::{self, target_kind};
use crate::latency::{LatencyStats, LatencySummary};
use crate::manifest::make_manifest;
use crate::reporter::{AckSink, Reporter};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::ledger::{DeviceError, FileAck, FileManifest, RunSummary, Workload};
use plugpull::record::{Encoder, SECTOR};
use plugpull::units::human_bytes;
use plugpull::units::{parse_duration, parse_size};
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// How long to write, e.g. 30s or 5m (default 30s).
    #[arg(long, short = 'T', value_parser = parse_duration, conflicts_with = "writes")]
    pub duration: Option<Duration>,
    /// Stop after this many writes instead of after a duration.
    #[arg(long)]
    pub writes: Option<u64>,
    /// Order of blocks.
    #[arg(long, value_enum, default_value = "random")]
    pub pattern: Pattern,
    /// Print a progress line every SECONDS.
    #[arg(short = 'P', long = "progress", value_parser = parse_duration)]
    pub progress: Option<Duration>,
    /// Seed of the random block choice (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the summary as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Use a target that holds data other than zeros or plugpull records (it is overwritten).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub reporter: crate::reporter::ReporterOptions,
}

/// Most concurrent writers `--jobs` accepts (one thread and descriptor each).
pub const MAX_JOBS: u32 = 1024;

/// Validates the arguments and returns the number of blocks (durations are bounded
/// by the parser, `plugpull::units::MAX_DURATION`).
fn check_args(a: &WriteArgs) -> Result<u64, Error> {
    if a.block_size == 0 || !a.block_size.is_multiple_of(SECTOR as u64) || a.block_size > (64 << 20)
    {
        return Err(format!(
            "--block-size {} is not a multiple of 512 bytes between 512 and 64 MiB",
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
    if a.duration.is_some_and(|d| d.is_zero()) {
        return Err("--duration must be more than 0 s".into());
    }
    if a.progress.is_some_and(|d| d.is_zero()) {
        return Err("-P/--progress must be more than 0 s".into());
    }
    Ok(a.size / a.block_size)
}

/// The target of a run, locked (`flock`, exclusive; block devices also opened
/// `O_EXCL`) against a second writer and against mounting until dropped.
pub struct LockedTarget {
    _lock: File,
}

/// Creates or checks the target so it holds `size` bytes, durably (file and directory
/// entry), and locks it for this run.
///
/// Errors: not a regular file or block device; a block device that is mounted or held
/// (`O_EXCL` refused); another plugpull writer holds the target; the target holds a
/// filesystem, volume, RAID or partition-table signature (`wipefs`), or a first sector
/// that is neither zeros nor a plugpull record, and `force` is off; a block device
/// smaller than `size`; a filesystem without `size` bytes free (checked before
/// allocating; a file this call created is removed again). A filesystem whose
/// `statfs` reports 0 bytes in all has an unknown size: a warning, not an error.
pub fn prepare_target(path: &Path, size: u64, force: bool) -> Result<LockedTarget, Error> {
    let shown = path.display();
    let meta = target_kind(path)?;
    let block_device = meta
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    let created = meta.is_none();
    let f = if block_device {
        guard::open_block_exclusive(path)?
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(created)
            .truncate(false)
            .open(path)
            .map_err(|e| Error(format!("cannot open target {shown}: {e}")))?
    };
    let fail = |msg: String| {
        if created {
            let _ = std::fs::remove_file(path);
        }
        Err(Error(msg))
    };
    // An exclusive flock(2), held until the run ends.
    if f.try_lock().is_err() {
        return fail(format!(
            "target {shown} is in use by another plugpull writer (it holds the target's lock)"
        ));
    }
    if !force && !created {
        if let Some(why) = guard::foreign_data(path, &f, block_device) {
            return fail(format!(
                "target {shown} holds data that is not plugpull's ({why}); \
                 everything on it would be overwritten: give --force to use it anyway"
            ));
        }
    }
    if block_device {
        let have =
            device_size(&f).map_err(|e| Error(format!("cannot size target {shown}: {e}")))?;
        if have < size {
            return Err(Error(format!(
                "target {shown} is too small: it holds {} ({have} bytes), --size asks for {} ({size} bytes)",
                human_bytes(have),
                human_bytes(size)
            )));
        }
        return Ok(LockedTarget { _lock: f });
    }
    let allocated = f
        .metadata()
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .unwrap_or(0);
    let needed = size.saturating_sub(allocated);
    match guard::fs_space(&f) {
        Ok((0, _)) => eprintln!(
            "warning: the filesystem of target {shown} reports a size of 0 bytes (statfs): its size is unknown, \
             so free space is not checked before preallocating {}",
            human_bytes(size)
        ),
        Ok((_, free)) if free < needed => {
            return fail(format!(
                "not enough free space for target {shown}: its filesystem has {} free, --size {} needs {} more",
                human_bytes(free),
                human_bytes(size),
                human_bytes(needed)
            ));
        }
        _ => {}
    }
    if let Err(e) = preallocate(&f, size) {
        return fail(format!(
            "cannot preallocate {} ({size} bytes) for target {shown}: {e}",
            human_bytes(size)
        ));
    }
    f.sync_all()
        .map_err(|e| Error(format!("fsync of target {shown}: {e}")))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error(format!("fsync of directory {}: {e}", dir.display())))?;
    Ok(LockedTarget { _lock: f })
}

/// Refuses `--sync direct-dsync` when `--block-size` is not a multiple of the target's
/// `O_DIRECT` alignment ([`guard::direct_alignment`]); where the kernel does not say,
/// probes with one `O_DIRECT` read of a block at offset 0.
fn check_direct_alignment(f: &File, path: &Path, bs: u64) -> Result<(), Error> {
    let shown = path.display();
    let block_device = f.metadata().is_ok_and(|m| m.file_type().is_block_device());
    if let Some((align, source)) = guard::direct_alignment(f, block_device) {
        if !bs.is_multiple_of(align) {
            return Err(Error(format!(
                "--sync direct-dsync: --block-size {bs} is not a multiple of {align} bytes, {source} of target {shown}, \
                 so O_DIRECT writes would fail; give --block-size {} (or a multiple of it), or --sync dsync",
                align.max(4096)
            )));
        }
        return Ok(());
    }
    let probe = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            Error(format!(
                "--sync direct-dsync: cannot open target {shown} with O_DIRECT: {e}"
            ))
        })?;
    let mut buf = AlignedBuf::new(bs as usize);
    match probe.read_at(buf.as_mut(), 0) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(Error(format!(
            "--sync direct-dsync: target {shown} refused an O_DIRECT read of one --block-size {bs} block ({e}): \
             its alignment is larger than {bs} bytes; give a larger --block-size, or --sync dsync"
        ))),
        _ => Ok(()),
    }
}

fn device_size(f: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::End(0))
}

/// Allocates `size` bytes with `posix_fallocate`, falling back to writing zeros where
/// the filesystem does not support it.
fn preallocate(f: &File, size: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on a valid descriptor.
    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, size as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    if rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    let have = f.metadata()?.len();
    let zeros = vec![0u8; 1 << 20];
    let mut at = have;
    while at < size {
        let n = (size - at).min(zeros.len() as u64) as usize;
        f.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// A heap buffer aligned for `O_DIRECT`.
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is owned by one worker thread at a time.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("valid layout");
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        AlignedBuf { ptr, layout }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for layout.size() bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// The acknowledged watermark: the highest `w` with every seq `≤ w` acknowledged.
#[derive(Default)]
struct Watermark {
    state: Mutex<(u64, BTreeSet<u64>)>,
    value: AtomicU64,
}

impl Watermark {
    fn complete(&self, seq: u64) {
        let mut g = self.state.lock().unwrap();
        let (wm, done) = &mut *g;
        if seq == *wm + 1 {
            *wm = seq;
            while done.remove(&(*wm + 1)) {
                *wm += 1;
            }
            self.value.store(*wm, Ordering::Release);
        } else {
            done.insert(seq);
        }
    }
    fn get(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }
}

struct Shared {
    next_seq: AtomicU64,
    limit: Option<u64>,
    deadline: Option<Instant>,
    stop: AtomicBool,
    watermark: Watermark,
    /// Set (SeqCst) the moment a write or durability call failed: from then on no
    /// worker hands over an ack (fsyncgate: a later success cannot be trusted).
    failed: AtomicBool,
    /// The first error, when its call returned, and whether it is a device error
    /// ([`plugpull::ledger::is_device_errno`]).
    error: Mutex<Option<(String, Instant, bool)>>,
    /// Highest seq handed over as an ack.
    last_seq: AtomicU64,
    issued: AtomicU64,
    done: AtomicU64,
    lat_us: AtomicU64,
    lat_us2: AtomicU64,
}

impl Shared {
    /// Records a failed call: stops every worker, and no ack is handed over after this.
    fn fail(&self, e: String, device: bool) {
        self.failed.store(true, Ordering::SeqCst);
        let at = Instant::now();
        self.error.lock().unwrap().get_or_insert((e, at, device));
        self.stop.store(true, Ordering::Relaxed);
    }
}

struct WorkerOut {
    hist: LatencyStats,
    covered: u64,
}

#[allow(clippy::too_many_arguments)]
fn worker(
    id: u64,
    jobs: u64,
    blocks: u64,
    bs: usize,
    file: File,
    sync: SyncMode,
    enc: Arc<Encoder>,
    sh: Arc<Shared>,
    sink: AckSink,
    pattern: Pattern,
    seed: u64,
) -> WorkerOut {
    let own = if id < blocks {
        (blocks - id).div_ceil(jobs)
    } else {
        0
    };
    let mut hist = LatencyStats::new();
    let mut written = vec![false; own as usize];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut buf = AlignedBuf::new(bs);
    let mut next = 0u64;
    while own > 0 && !sh.stop.load(Ordering::Relaxed) && !sink.failed() {
        if sh.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if sink.paused() {
            sink.wait_while_paused(&sh.stop);
        }
        let seq = sh.next_seq.fetch_add(1, Ordering::Relaxed) + 1;
        if sh.limit.is_some_and(|l| seq > l) {
            break;
        }
        let idx = match pattern {
            Pattern::Random => rng.random_range(0..own),
            Pattern::Sequential => {
                let i = next;
                next = (next + 1) % own;
                i
            }
        };
        let block = idx * jobs + id;
        enc.encode_block(buf.as_mut(), block, seq, sh.watermark.get());
        sh.issued.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let failed = |what: String, e: std::io::Error| {
            let device = e
                .raw_os_error()
                .is_some_and(plugpull::ledger::is_device_errno);
            (format!("{what}: {e}"), device)
        };
        let res = file
            .write_all_at(buf.as_mut(), block * bs as u64)
            .map_err(|e| {
                failed(
                    format!("pwrite of block {block} at byte {}", block * bs as u64),
                    e,
                )
            })
            .and_then(|_| match sync {
                SyncMode::Fdatasync => file
                    .sync_data()
                    .map_err(|e| failed(format!("fdatasync after block {block}"), e)),
                SyncMode::Fsync => file
                    .sync_all()
                    .map_err(|e| failed(format!("fsync after block {block}"), e)),
                SyncMode::Dsync | SyncMode::DirectDsync => Ok(()),
            });
        if let Err((e, device)) = res {
            sh.fail(e, device);
            break;
        }
        let t1 = Instant::now();
        // After another worker's failed call, this success is not trusted: no ack.
        if sh.failed.load(Ordering::SeqCst) {
            break;
        }
        let lat = t1 - t0;
        sh.watermark.complete(seq);
        // Handed over the moment the durability call returned: batching is the reporter's job.
        sink.file_ack(FileAck {
            seq,
            block,
            ms: sink.ms_at(t1),
        });
        sh.last_seq.fetch_max(seq, Ordering::Relaxed);
        hist.record(lat);
        written[idx as usize] = true;
        let us = lat.as_micros() as u64;
        sh.done.fetch_add(1, Ordering::Relaxed);
        sh.lat_us.fetch_add(us, Ordering::Relaxed);
        sh.lat_us2.fetch_add(us * us, Ordering::Relaxed);
    }
    WorkerOut {
        hist,
        covered: written.iter().filter(|&&w| w).count() as u64,
    }
}

fn open_for_writes(path: &Path, sync: SyncMode) -> Result<File, Error> {
    let mut o = OpenOptions::new();
    o.write(true);
    match sync {
        SyncMode::Dsync => {
            o.custom_flags(libc::O_DSYNC);
        }
        SyncMode::DirectDsync => {
            o.custom_flags(libc::O_DSYNC | libc::O_DIRECT);
        }
        SyncMode::Fdatasync | SyncMode::Fsync => {}
    }
    o.open(path).map_err(|e| {
        Error(format!(
            "cannot open target {} for writing ({}): {e}",
            path.display(),
            sync.name()
        ))
    })
}

/// The summary of a write run, as printed (text or `--json`).
#[derive(serde::Serialize)]
struct Summary {
    run_id: String,
    target: String,
    size: u64,
    block_size: u64,
    blocks: u64,
    jobs: u32,
    sync: &'static str,
    pattern: &'static str,
    duration_secs: f64,
    writes_issued: u64,
    writes_acknowledged: u64,
    writes_per_sec: f64,
    latency_ms: LatencySummary,
    coverage_percent: f64,
    blocks_written: u64,
    /// The failed call that ended the run, when a device error ended it.
    device_error: Option<String>,
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
    let bs = args.block_size as usize;
    let size = blocks * args.block_size;
    let _locked = prepare_target(&args.target, size, args.force)?;
    let files: Vec<File> = (0..args.jobs)
        .map(|_| open_for_writes(&args.target, args.sync))
        .collect::<Result<_, _>>()?;
    if args.sync == SyncMode::DirectDsync {
        if let Err(e) = check_direct_alignment(&files[0], &args.target, args.block_size) {
            if !existed {
                let _ = std::fs::remove_file(&args.target);
            }
            return Err(e);
        }
    }
    // The path as given (absolute, symlinks such as /dev/disk/by-id/… kept), its
    // identity, and what it held before the first write.
    let target = std::path::absolute(&args.target).unwrap_or_else(|_| args.target.clone());
    let identity = crate::target_id::identify(&target)
        .map_err(|e| Error(format!("cannot identify target {}: {e}", target.display())))?;
    let (prior_runs, prior_foreign) = File::open(&target)
        .map(|f| crate::target_id::scan_prior(&f, size))
        .unwrap_or((Vec::new(), true));
    let manifest = make_manifest(Workload::File(FileManifest {
        target: target.display().to_string(),
        size,
        block_size: bs as u32,
        jobs: args.jobs,
        sync: args.sync,
        pattern: args.pattern,
        identity,
        prior_runs,
        prior_foreign,
    }));
    let (reporter, run) = Reporter::start_with(listener, secret, manifest, &args.reporter).await?;
    if !args.json {
        println!("run id: {run}");
        println!(
            "target: {} ({}, {blocks} blocks of {bs} bytes); sync: {}; jobs: {}; pattern: {}",
            target.display(),
            human_bytes(size),
            args.sync.name(),
            args.jobs,
            args.pattern.name()
        );
    }
    let duration = match (args.writes, args.duration) {
        (Some(_), _) => None,
        (None, d) => Some(d.unwrap_or(Duration::from_secs(30))),
    };
    let start = Instant::now();
    let sh = Arc::new(Shared {
        next_seq: AtomicU64::new(0),
        limit: args.writes,
        // check_args bounds the duration, so this cannot overflow.
        deadline: duration.and_then(|d| start.checked_add(d)),
        stop: AtomicBool::new(false),
        watermark: Watermark::default(),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        last_seq: AtomicU64::new(0),
        issued: AtomicU64::new(0),
        done: AtomicU64::new(0),
        lat_us: AtomicU64::new(0),
        lat_us2: AtomicU64::new(0),
    });
    let enc = Arc::new(Encoder::new(run));
    let seed = args.seed.unwrap_or_else(rand::random);
    let handles: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(j, f)| {
            let (enc, sh, sink) = (enc.clone(), sh.clone(), reporter.sink());
            let (jobs, pattern, sync) = (args.jobs as u64, args.pattern, args.sync);
            std::thread::Builder::new()
                .name(format!("writer-{j}"))
                .spawn(move || {
                    worker(
                        j as u64, jobs, blocks, bs, f, sync, enc, sh, sink, pattern, seed,
                    )
                })
                .expect("spawn writer thread")
        })
        .collect();
    let joined = tokio::task::spawn_blocking(move || {
        handles
            .into_iter()
            .map(|h| h.join().expect("writer thread panicked"))
            .collect::<Vec<_>>()
    });
    tokio::pin!(joined);
    let sink = reporter.sink();
    let mut tick = args
        .progress
        .map(|p| tokio::time::interval_at(tokio::time::Instant::now() + p, p));
    let mut last = (Instant::now(), 0u64, 0u64, 0u64);
    let mut interrupted = false;
    let interrupt = crate::interrupt::interrupted();
    tokio::pin!(interrupt);
    let outs = loop {
        tokio::select! {
            r = &mut joined => break r.expect("join writers"),
            _ = async { tick.as_mut().unwrap().tick().await }, if tick.is_some() => {
                let now = Instant::now();
                let (n, s1, s2) = (sh.done.load(Ordering::Relaxed), sh.lat_us.load(Ordering::Relaxed), sh.lat_us2.load(Ordering::Relaxed));
                let dn = (n - last.1) as f64;
                let (mean, sd) = if dn > 0.0 {
                    let m = (s1 - last.2) as f64 / dn;
                    let var = ((s2 - last.3) as f64 / dn - m * m).max(0.0);
                    (m / 1000.0, var.sqrt() / 1000.0)
                } else { (0.0, 0.0) };
                let line = crate::progress::Progress {
                    elapsed_s: start.elapsed().as_secs_f64(),
                    rate: dn / (now - last.0).as_secs_f64(),
                    unit: "writes/s",
                    lat_ms: mean,
                    stddev_ms: sd,
                    failed: None,
                    acknowledged: sink.confirmed(),
                };
                eprintln!("{line}");
                last = (now, n, s1, s2);
            }
            _ = &mut interrupt, if !interrupted => {
                interrupted = true;
                eprintln!("interrupted: finishing the writes in flight");
                sh.stop.store(true, Ordering::Relaxed);
            }
        }
    };
    drop(sink);
    let elapsed = start.elapsed();
    let issued = sh.issued.load(Ordering::Relaxed);
    let mut hist = LatencyStats::new();
    let mut covered = 0;
    for o in &outs {
        hist.merge(&o.hist);
        covered += o.covered;
    }
    let local_acks = hist.count();
    let error = sh.error.lock().unwrap().clone();
    let device_error = match error {
        Some((error, at, device)) => {
            let end = DeviceError {
                error,
                ms: reporter.sink().ms_at(at) as u64,
                issued,
                acknowledged: local_acks,
                last_seq: sh.last_seq.load(Ordering::Relaxed),
                device,
            };
            Some(end)
        }
        None => None,
    };
    let confirmed = match &device_error {
        Some(end) => reporter.device_error(end.clone()).await?,
        None => {
            reporter
                .finish(RunSummary {
                    issued,
                    acknowledged: local_acks,
                    duration_ms: elapsed.as_millis() as u64,
                })
                .await?
        }
    };
    let s = Summary {
        run_id: run.to_string(),
        target: target.display().to_string(),
        size,
        block_size: args.block_size,
        blocks,
        jobs: args.jobs,
        sync: args.sync.name(),
        pattern: args.pattern.name(),
        duration_secs: elapsed.as_secs_f64(),
        writes_issued: issued,
        writes_acknowledged: confirmed,
        writes_per_sec: local_acks as f64 / elapsed.as_secs_f64(),
        latency_ms: LatencySummary::of(&hist),
        coverage_percent: plugpull::report::percent_floor(covered, blocks),
        blocks_written: covered,
        device_error: device_error.as_ref().map(|e| e.error.clone()),
    };
    if args.json {
        println!("{}", serde_json::to_string(&s).expect("summary serializes"));
    } else {
        println!("duration: {:.3} s", s.duration_secs);
        println!("writes issued: {}", s.writes_issued);
        println!(
            "writes acknowledged: {} (confirmed by the listener)",
            s.writes_acknowledged
        );
        println!("writes/s = {:.1}", s.writes_per_sec);
        println!("latency average = {:.3} ms", s.latency_ms.average);
        println!("latency stddev = {:.3} ms", s.latency_ms.stddev);
        println!("latency p50 = {:.3} ms", s.latency_ms.p50);
        println!("latency p99 = {:.3} ms", s.latency_ms.p99);
        println!("latency max = {:.3} ms", s.latency_ms.max);
        println!(
            "coverage: {:.1}% of blocks written at least once ({covered} of {blocks})",
            s.coverage_percent
        );
    }
    if let Some(end) = device_error.as_ref().filter(|e| !e.device) {
        return Err(Error(format!(
            "run {run} stopped at {:.3} s into the run on an error that is not a device failure: {}; \
             the run itself went wrong (not the device), so `verify` will refuse it",
            end.ms as f64 / 1000.0,
            end.error
        )));
    }
    if let Some(end) = &device_error {
        eprintln!(
            "plugpull: run {run} ended by a device error {:.3} s into the run: {}; no acknowledgement was made after it; \
             {confirmed} acknowledgements were confirmed by the listener before it. The device lost power, went away or \
             filled up: this is the cut. Verify the run with `plugpull verify --listener {listener} --run {run}` (and the same secret) once the \
             device is back (if it came back under a new name, give --target)",
            end.ms as f64 / 1000.0,
            end.error
        );
        return Ok(false);
    }
    Ok(true)
}
