//! The step threads of `plugpull write files`: each follows its schedule
//! ([`Schedule`]), makes each step's durability calls (fewer with `--unsafe-steps`),
//! and hands over the step's acknowledgement the moment the last one returned.
//!
//! After the first failed call no worker hands over an acknowledgement (fsyncgate), as
//! in the file workload ([`Shared`]).

use crate::latency::LatencyStats;
use crate::reporter::AckSink;
use crate::run::{Shared, WorkerOut};
use crate::Error;
use plugpull::ledger::{Ack, FilesAck};
use plugpull::record::{Encoder, SECTOR};
use plugpull::verdict::files::schedule::{file_name, record_block, Op, Schedule, Step, Unsafe};
use plugpull::RunId;
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What every worker of a run is told.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The directory, absolute.
    pub dir: PathBuf,
    /// Workers.
    pub jobs: u32,
    /// File names.
    pub files: u32,
    /// The schedule's seed.
    pub seed: u64,
    /// Durability calls skipped.
    pub unsafe_steps: Unsafe,
    /// The run (its records carry it).
    pub run: RunId,
}

/// Starts one thread per worker (`files-j`), each with its own directory descriptor
/// (for the directory fsync) and acknowledgement sink.
///
/// Errors: the directory cannot be opened.
pub fn spawn(
    plan: &Plan,
    sh: &Arc<Shared>,
    sink: impl Fn() -> AckSink,
) -> Result<Vec<JoinHandle<WorkerOut>>, Error> {
    let enc = Arc::new(Encoder::new(plan.run));
    (0..plan.jobs)
        .map(|j| {
            let dirfd = File::open(&plan.dir)
                .map_err(|e| Error::Msg(format!("cannot open {}: {e}", plan.dir.display())))?;
            let (plan, enc, sh, sink) = (plan.clone(), enc.clone(), sh.clone(), sink());
            Ok(std::thread::Builder::new()
                .name(format!("files-{j}"))
                .spawn(move || worker(j, &plan, &dirfd, &enc, &sh, &sink))
                .expect("spawn files thread"))
        })
        .collect()
}

/// A failed call in words, and whether its errno is a device error.
type Failed = (String, bool);

fn failed(what: String, e: std::io::Error) -> Failed {
    let device = e
        .raw_os_error()
        .is_some_and(plugpull::ledger::is_device_errno);
    (format!("{what}: {e}"), device)
}

/// Makes the calls of step `st`; the file's blocks from `st.from` (append) or 0 to
/// `st.to` hold the step's records.
fn do_step(plan: &Plan, dirfd: &File, enc: &Encoder, st: &Step) -> Result<(), Failed> {
    let name = file_name(st.file, plan.jobs);
    let path = plan.dir.join(&name);
    let open = |p: &PathBuf, create: bool| {
        OpenOptions::new()
            .write(true)
            .create(create)
            .truncate(create)
            .open(p)
            .map_err(|e| failed(format!("open of {}", p.display()), e))
    };
    let write_blocks = |f: &File, from: u64| -> Result<(), Failed> {
        let mut buf = vec![0u8; ((st.to - from) as usize) * SECTOR];
        for (i, b) in buf.chunks_exact_mut(SECTOR).enumerate() {
            let idx = from + i as u64;
            enc.encode_block(b, record_block(st.file, idx), st.seq, 0);
        }
        f.write_all_at(&buf, from * SECTOR as u64)
            .map_err(|e| failed(format!("write of {name} (step {})", st.seq), e))
    };
    let fsync = |f: &File, what: &str| {
        f.sync_all()
            .map_err(|e| failed(format!("fsync of {what} (step {})", st.seq), e))
    };
    let dirsync = || {
        if plan.unsafe_steps.dirsync {
            return Ok(());
        }
        fsync(dirfd, "the directory")
    };
    match st.op {
        Op::Create => {
            let f = open(&path, true)?;
            write_blocks(&f, 0)?;
            fsync(&f, &name)?;
            dirsync()
        }
        Op::Append => {
            let f = open(&path, false)?;
            write_blocks(&f, st.from)?;
            fsync(&f, &name)
        }
        Op::Replace => {
            let tmp = plan.dir.join(format!("{name}.tmp"));
            let f = open(&tmp, true)?;
            write_blocks(&f, 0)?;
            if !plan.unsafe_steps.presync {
                fsync(&f, &format!("{name}.tmp"))?;
            }
            std::fs::rename(&tmp, &path)
                .map_err(|e| failed(format!("rename of {name}.tmp over {name}"), e))?;
            dirsync()
        }
        Op::Truncate => {
            let f = open(&path, false)?;
            f.set_len(st.to * SECTOR as u64)
                .map_err(|e| failed(format!("truncate of {name}"), e))?;
            fsync(&f, &name)
        }
        Op::Unlink => {
            std::fs::remove_file(&path).map_err(|e| failed(format!("unlink of {name}"), e))?;
            dirsync()
        }
    }
}

/// Worker `j`: takes its scheduled steps until told to stop, the deadline, the step
/// limit (no seq above `--steps`), a failed call, or a failed reporter.
fn worker(
    j: u32,
    plan: &Plan,
    dirfd: &File,
    enc: &Encoder,
    sh: &Shared,
    sink: &AckSink,
) -> WorkerOut {
    let mut sched = Schedule::new(plan.seed, plan.jobs, j, plan.files, plan.unsafe_steps);
    let mut hist = LatencyStats::new();
    let mut touched = BTreeSet::new();
    while !sh.stop.load(Ordering::Relaxed) && !sink.failed() {
        if sh.pause_then_over(sink, Instant::now()) {
            break;
        }
        let Some(st) = sched.next_step() else { break };
        if sh.limit.is_some_and(|l| st.seq > l) {
            break;
        }
        sh.count_issue(j as usize);
        let t0 = Instant::now();
        // In flight from here: a hang or a failure leaves it marked (the cut's moment).
        sink.in_flight_since(Some(t0));
        if let Err((e, device)) = do_step(plan, dirfd, enc, &st) {
            sh.fail(e, device);
            break;
        }
        let t1 = Instant::now();
        sink.in_flight_since(None);
        if sh.has_failed() {
            break;
        }
        let state = sched.state(st.file);
        sink.ack(Ack::Files(FilesAck {
            seq: st.seq,
            file: st.file,
            exists: state.is_some(),
            size: state.map_or(0, |b| b.len() as u64 * SECTOR as u64),
            content_seq: state.and_then(|b| b.iter().max().copied()).unwrap_or(0),
            promised: st.promised,
            ms: sink.ms_at(t1),
        }));
        let lat = t1 - t0;
        sh.count_ack(j as usize, st.seq, lat);
        hist.record(lat);
        touched.insert(st.file);
    }
    WorkerOut {
        hist,
        covered: touched.len() as u64,
    }
}
