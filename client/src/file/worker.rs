//! The writer threads of `plugpull write file`: each `pwrite`s checksummed blocks and
//! makes its durability call, and hands over an acknowledgement the moment that call
//! returned.
//!
//! Worker `j` of `N` owns the blocks `b ≡ j (mod N)`, so each block is written by one
//! worker at a time. Sequence numbers are assigned at issue from one run-wide counter
//! ([`Watermark::issue`]); each write carries the acknowledged [`Watermark`] at its
//! issue. After the first failed write or durability call no worker hands over an
//! acknowledgement (fsyncgate: a later success cannot be trusted).

use super::medium::AlignedBuf;
use super::{Pattern, SyncMode};
use crate::latency::LatencyStats;
use crate::reporter::AckSink;
use crate::run::{Shared, WorkerOut};
use crate::Error;
use plugpull::ledger::{Ack, FileAck};
use plugpull::record::Encoder;
use rand::{Rng, SeedableRng};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What every worker of a run is told: the layout of the target, the durability call
/// and the order of blocks.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Workers (`--jobs`).
    pub jobs: u64,
    /// Blocks on the target.
    pub blocks: u64,
    /// Bytes per block.
    pub bs: usize,
    /// Durability call after each write.
    pub sync: SyncMode,
    /// Order of blocks.
    pub pattern: Pattern,
    /// Seed of the random block choice; worker `j` mixes in its id.
    pub seed: u64,
    /// Issue every write as `pwritev2(…, RWF_ATOMIC)` (`--atomic rwf`).
    pub rwf_atomic: bool,
}

/// Opens one descriptor of the target per worker with the flags `sync` needs
/// (`O_DSYNC`, `O_DSYNC | O_DIRECT`).
///
/// Errors: the target cannot be opened for writing.
pub fn open_for_writes(path: &Path, sync: SyncMode) -> Result<File, Error> {
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
        Error::Msg(format!(
            "cannot open target {} for writing ({}): {e}",
            path.display(),
            sync.name()
        ))
    })
}

/// Starts one writer thread per descriptor in `files` (thread `writer-j` is worker `j`);
/// `sink` gives each its own acknowledgement sink.
pub fn spawn(
    files: Vec<File>,
    plan: Plan,
    enc: &Arc<Encoder>,
    sh: &Arc<Shared>,
    sink: impl Fn() -> AckSink,
) -> Vec<JoinHandle<WorkerOut>> {
    files
        .into_iter()
        .enumerate()
        .map(|(j, f)| {
            let (enc, sh, sink) = (enc.clone(), sh.clone(), sink());
            std::thread::Builder::new()
                .name(format!("writer-{j}"))
                .spawn(move || worker(j as u64, plan, f, &enc, &sh, &sink))
                .expect("spawn writer thread")
        })
        .collect()
}

/// How many of `blocks` worker `id` of `jobs` owns (the blocks `b ≡ id (mod jobs)`).
fn owned_blocks(id: u64, jobs: u64, blocks: u64) -> u64 {
    if id < blocks {
        (blocks - id).div_ceil(jobs)
    } else {
        0
    }
}

/// Writes `buf` as `block` (with `RWF_ATOMIC` when `rwf_atomic`) and makes the
/// durability call of `sync`. Errors: the failed call in words, and whether its errno
/// is a device error.
fn durable_write(
    file: &File,
    buf: &[u8],
    block: u64,
    sync: SyncMode,
    rwf_atomic: bool,
) -> Result<(), (String, bool)> {
    let failed = |what: String, e: std::io::Error| {
        let device = e
            .raw_os_error()
            .is_some_and(plugpull::ledger::is_device_errno);
        (format!("{what}: {e}"), device)
    };
    let at = block * buf.len() as u64;
    if rwf_atomic {
        super::atomic::pwrite_atomic(file, buf, at).map_err(|e| {
            failed(
                format!("pwritev2 (RWF_ATOMIC) of block {block} at byte {at}"),
                e,
            )
        })?;
    } else {
        file.write_all_at(buf, at)
            .map_err(|e| failed(format!("pwrite of block {block} at byte {at}"), e))?;
    }
    match sync {
        SyncMode::Fdatasync => file
            .sync_data()
            .map_err(|e| failed(format!("fdatasync after block {block}"), e)),
        SyncMode::Fsync => file
            .sync_all()
            .map_err(|e| failed(format!("fsync after block {block}"), e)),
        SyncMode::Dsync | SyncMode::DirectDsync => Ok(()),
    }
}

/// Worker `id`: writes its blocks until told to stop, the deadline or the write limit,
/// a failed call, or a failed reporter.
fn worker(
    id: u64,
    plan: Plan,
    file: File,
    enc: &Encoder,
    sh: &Shared,
    sink: &AckSink,
) -> WorkerOut {
    let own = owned_blocks(id, plan.jobs, plan.blocks);
    let mut hist = LatencyStats::new();
    let mut written = vec![false; own as usize];
    let mut rng =
        rand::rngs::StdRng::seed_from_u64(plan.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut buf = AlignedBuf::new(plan.bs);
    let mut next = 0u64;
    // The end of the last durability call: the deadline is checked against it (one
    // clock read fewer per write).
    let mut now = Instant::now();
    while own > 0 && !sh.stop.load(Ordering::Relaxed) && !sink.failed() {
        if sh.pause_then_over(sink, now) {
            break;
        }
        let seq = sh.watermark.issue(id as usize);
        if sh.limit.is_some_and(|l| seq > l) {
            break;
        }
        let idx = match plan.pattern {
            Pattern::Random => rng.random_range(0..own),
            Pattern::Sequential => {
                let i = next;
                next = (next + 1) % own;
                i
            }
        };
        let block = idx * plan.jobs + id;
        enc.encode_block(buf.bytes_mut(), block, seq, sh.watermark.get());
        sh.count_issue(id as usize);
        let t0 = Instant::now();
        // In flight from here: a hang or a failure leaves it marked (the cut's moment).
        sink.in_flight_since(Some(t0));
        if let Err((e, device)) =
            durable_write(&file, buf.bytes_mut(), block, plan.sync, plan.rwf_atomic)
        {
            sh.fail(e, device);
            break;
        }
        let t1 = Instant::now();
        sink.in_flight_since(None);
        now = t1;
        // After another worker's failed call, this success is not trusted: no ack.
        if sh.has_failed() {
            break;
        }
        let lat = t1 - t0;
        sh.watermark.complete(id as usize);
        // Handed over the moment the durability call returned: batching is the reporter's job.
        sink.ack(Ack::File(FileAck {
            seq,
            block,
            ms: sink.ms_at(t1),
        }));
        sh.count_ack(id as usize, seq, lat);
        hist.record(lat);
        written[idx as usize] = true;
    }
    WorkerOut {
        hist,
        covered: written.iter().filter(|&&w| w).count() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_owns_every_jobs_th_block_and_a_worker_beyond_the_blocks_none() {
        // 10 blocks, 4 workers: 0,4,8 / 1,5,9 / 2,6 / 3,7.
        assert_eq!(
            (0..4).map(|j| owned_blocks(j, 4, 10)).collect::<Vec<_>>(),
            vec![3, 3, 2, 2]
        );
        assert_eq!(owned_blocks(3, 4, 3), 0);
        assert_eq!(owned_blocks(0, 1, 16384), 16384);
    }

    #[test]
    fn a_durable_write_puts_the_block_at_its_offset_and_names_a_failed_call() {
        let dir = std::env::temp_dir().join(format!("plugpull-worker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.dat");
        std::fs::write(&path, vec![0u8; 3 * 512]).unwrap();
        let f = open_for_writes(&path, SyncMode::Fdatasync).unwrap();
        durable_write(&f, &[7u8; 512], 2, SyncMode::Fdatasync, false).unwrap();
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), 1536);
        assert!(back[..1024].iter().all(|&b| b == 0));
        assert!(back[1024..].iter().all(|&b| b == 7));
        // A descriptor opened read-only refuses the pwrite (EBADF: not a device error).
        let ro = File::open(&path).unwrap();
        let (msg, device) = durable_write(&ro, &[7u8; 512], 1, SyncMode::Fsync, false).unwrap_err();
        assert_eq!(
            msg,
            "pwrite of block 1 at byte 512: Bad file descriptor (os error 9)"
        );
        assert!(!device);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
