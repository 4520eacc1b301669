//! Reading the target on every core: a few threads each take the next chunk of the
//! target, read it into their own aligned buffer (`O_DIRECT` where the target allows
//! it), check it where it lies (no copy) and hand the result over; the caller merges
//! the results in the target's order, so what it builds is the same as one pass from
//! the first byte to the last.
//!
//! One thread cannot keep a fast medium busy: checking a chunk (a CRC-32 per sector)
//! costs about as much CPU as reading it, so one reader and one checker run at half
//! the medium's speed at best. Several threads keep several reads in flight (a queue
//! depth for an NVMe drive) and check on every core.
//!
//! Results are merged in order: a thread does not start a chunk more than
//! [`AHEAD`] chunks past the last one merged, so the results waiting to be merged
//! stay few whatever the target's size.

use super::medium::{read_full_at, AlignedBuf, Opened};
use crate::Error;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};

/// How the target ended up being read: `o_direct` or `buffered`, and why (the
/// opening's note, plus the refusal when `O_DIRECT` failed at read time).
pub type ReadMode = (&'static str, String);

/// Most chunks a thread starts past the last chunk merged (per thread).
pub const AHEAD: u64 = 4;

/// Most threads a target is read with: each holds one chunk-sized buffer (4 MiB for
/// verify), so the buffers stay within 32 MiB; 8 threads check several GB/s.
pub const MAX_THREADS: usize = 8;

/// Threads a target is read with here: the cores this process may run on, at least
/// 2 (one reads while another checks) and at most [`MAX_THREADS`].
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, MAX_THREADS)
}

/// One chunk of the target as a thread read it.
pub struct Chunk<'a> {
    /// Offset of the chunk's first byte in the target.
    pub at: u64,
    /// Bytes the chunk covers (`chunk` bytes, fewer for the last).
    pub want: usize,
    /// The bytes read: `want` bytes, fewer only past the end of the target.
    pub bytes: &'a [u8],
}

/// Reads `len` bytes of the opened target in chunks of `chunk` bytes (a multiple of
/// 4096) on `threads` threads; `check` turns each chunk into a result on the thread
/// that read it, and `merge` receives the results on the calling thread in the
/// target's order, with the chunk's offset and size. Falls back to buffered reads
/// when `O_DIRECT` is refused at read time (EINVAL: alignment, some FUSE
/// filesystems). Returns how the target was read.
///
/// Errors: the first chunk, in the target's order, that could not be read (naming
/// the path and byte offset); the chunks before it were all merged.
pub fn read_checked<T, C, M>(
    o: Opened,
    len: u64,
    chunk: usize,
    threads: usize,
    check: C,
    mut merge: M,
) -> Result<ReadMode, Error>
where
    T: Send,
    C: Fn(&Chunk) -> T + Sync,
    M: FnMut(u64, usize, T),
{
    let count = len.div_ceil(chunk as u64);
    let src = Source::new(o);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let merged = (Mutex::new(0u64), Condvar::new());
    let window = AHEAD * threads as u64;
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(u64, Result<T, Error>)>();
        for _ in 0..threads.max(1) {
            let (tx, src, next, stop, merged, check) =
                (tx.clone(), &src, &next, &stop, &merged, &check);
            s.spawn(move || {
                let mut buf = AlignedBuf::new(chunk);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count || !wait_for_window(merged, stop, i, window) {
                        break;
                    }
                    let at = i * chunk as u64;
                    let want = (len - at).min(chunk as u64) as usize;
                    let r = src.read(&mut buf.bytes_mut()[..want], at).map(|got| {
                        check(&Chunk {
                            at,
                            want,
                            bytes: &buf.bytes()[..got],
                        })
                    });
                    let failed = r.is_err();
                    if tx.send((i, r)).is_err() || failed {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let result = merge_in_order(rx, count, chunk, len, &merged, &mut merge);
        // Under the lock, so a thread about to wait for the window sees it.
        let held = merged.0.lock().unwrap();
        stop.store(true, Ordering::Relaxed);
        drop(held);
        merged.1.notify_all();
        result
    })?;
    Ok(src.mode())
}

/// Waits until chunk `i` is within `window` chunks of the last one merged; false
/// when the reading stopped meanwhile.
fn wait_for_window(merged: &(Mutex<u64>, Condvar), stop: &AtomicBool, i: u64, window: u64) -> bool {
    let (lock, cv) = merged;
    let mut done = lock.lock().unwrap();
    while i >= *done + window && !stop.load(Ordering::Relaxed) {
        done = cv.wait(done).unwrap();
    }
    !stop.load(Ordering::Relaxed)
}

/// Receives the threads' results and hands them to `merge` in the target's order.
fn merge_in_order<T>(
    rx: mpsc::Receiver<(u64, Result<T, Error>)>,
    count: u64,
    chunk: usize,
    len: u64,
    merged: &(Mutex<u64>, Condvar),
    merge: &mut impl FnMut(u64, usize, T),
) -> Result<(), Error> {
    let mut waiting = BTreeMap::new();
    let mut want = 0u64;
    for (i, r) in rx {
        waiting.insert(i, r);
        while let Some(r) = waiting.remove(&want) {
            let at = want * chunk as u64;
            merge(at, (len - at).min(chunk as u64) as usize, r?);
            want += 1;
            *merged.0.lock().unwrap() = want;
            merged.1.notify_all();
        }
    }
    if want < count {
        return Err(Error::Msg(format!(
            "reading the target stopped at chunk {want} of {count}"
        )));
    }
    Ok(())
}

/// The target as the threads read it: `O_DIRECT` until a read is refused, buffered
/// from then on.
struct Source {
    path: PathBuf,
    direct: File,
    state: Mutex<Mode>,
}

/// How the target is read now.
struct Mode {
    mode: &'static str,
    note: String,
    /// The buffered file, once an `O_DIRECT` read was refused.
    plain: Option<Arc<File>>,
}

impl Source {
    fn new(o: Opened) -> Source {
        Source {
            path: o.path,
            direct: o.file,
            state: Mutex::new(Mode {
                mode: o.read_mode,
                note: o.read_note,
                plain: None,
            }),
        }
    }

    /// Reads `buf.len()` bytes at `at` (fewer only past the end of the target).
    fn read(&self, buf: &mut [u8], at: u64) -> Result<usize, Error> {
        let failed = |e: std::io::Error| {
            Error::Msg(format!(
                "reading target {} at byte {at}: {e}",
                self.path.display()
            ))
        };
        let (mode, plain) = {
            let s = self.state.lock().unwrap();
            (s.mode, s.plain.clone())
        };
        if let Some(plain) = plain {
            return read_full_at(&plain, buf, at).map_err(failed);
        }
        match read_full_at(&self.direct, buf, at) {
            Err(e) if mode == "o_direct" && e.raw_os_error() == Some(libc::EINVAL) => {
                let plain = self.fall_back(&e)?;
                read_full_at(&plain, buf, at).map_err(failed)
            }
            r => r.map_err(failed),
        }
    }

    /// Opens the target for buffered reads after `O_DIRECT` was refused (`e`), once,
    /// and says so in the read note.
    fn fall_back(&self, e: &std::io::Error) -> Result<Arc<File>, Error> {
        let mut s = self.state.lock().unwrap();
        if let Some(plain) = &s.plain {
            return Ok(plain.clone());
        }
        let plain = File::open(&self.path)
            .map_err(|e| Error::Msg(format!("cannot read target {}: {e}", self.path.display())))?;
        let n = if s.note.is_empty() { "" } else { "; " };
        s.note = format!("O_DIRECT read refused ({e}){n}{}", s.note);
        s.mode = "buffered";
        let plain = Arc::new(plain);
        s.plain = Some(plain.clone());
        Ok(plain)
    }

    /// How the target was read.
    fn mode(self) -> ReadMode {
        let s = self.state.into_inner().unwrap();
        (s.mode, s.note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(path: &std::path::Path, len: u64) -> Opened {
        Opened {
            path: path.to_path_buf(),
            file: File::open(path).unwrap(),
            len,
            is_block: false,
            read_mode: "buffered",
            read_note: "test".into(),
        }
    }

    #[test]
    fn chunks_merge_in_order_and_past_the_end_of_a_short_file_read_nothing() {
        let dir = std::env::temp_dir().join(format!("plugpull-parallel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.dat");
        // 10000 bytes, each its offset mod 251; asked for 5 chunks of 4096.
        let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        for threads in [1, 2, 3, 8] {
            let mut seen = Vec::new();
            let mut back = Vec::new();
            let mode = read_checked(
                opened(&path, 10000),
                5 * 4096,
                4096,
                threads,
                |c| (c.at, c.want, c.bytes.to_vec()),
                |at, want, (a, w, bytes): (u64, usize, Vec<u8>)| {
                    assert_eq!((at, want), (a, w));
                    seen.push((a, w, bytes.len()));
                    back.extend_from_slice(&bytes);
                },
            )
            .unwrap();
            assert_eq!(
                seen,
                vec![
                    (0, 4096, 4096),
                    (4096, 4096, 4096),
                    (8192, 4096, 1808),
                    (12288, 4096, 0),
                    (16384, 4096, 0)
                ],
                "{threads} threads"
            );
            assert_eq!(back, data);
            assert_eq!(mode, ("buffered", "test".to_string()));
        }
        // The last chunk shorter than the others.
        let mut sizes = Vec::new();
        read_checked(
            opened(&path, 10000),
            10000,
            4096,
            2,
            |c| c.bytes.len(),
            |at, want, got| sizes.push((at, want, got)),
        )
        .unwrap();
        assert_eq!(
            sizes,
            vec![(0, 4096, 4096), (4096, 4096, 4096), (8192, 1808, 1808)]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_read_error_stops_the_reading_after_the_chunks_before_it() {
        // A directory cannot be read: the first chunk fails, nothing is merged.
        let dir = std::env::temp_dir().join(format!("plugpull-parallel-e-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut merged = 0;
        let e = read_checked(
            opened(&dir, 8192),
            8192,
            4096,
            2,
            |_| (),
            |_, _, ()| merged += 1,
        )
        .unwrap_err();
        assert_eq!(merged, 0);
        assert_eq!(
            e.to_string(),
            format!(
                "reading target {} at byte 0: Is a directory (os error 21)",
                dir.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
