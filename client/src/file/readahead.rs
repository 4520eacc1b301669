//! Reading the target from its first byte to its end with the next read in flight
//! while the verifier decodes the previous one: a reader thread fills a few aligned
//! buffers (`O_DIRECT` where the target allows it) and hands them over in order, and
//! the verifier hands each back when it is done with it.
//!
//! With one thread doing both, the device idles while a chunk is decoded and the CPU
//! idles while the next is read; overlapped, verify reads at the speed of
//! `dd iflag=direct` (`bench/verify.sh` measures the two side by side).

use super::medium::{read_full_at, AlignedBuf, Opened};
use crate::Error;
use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// One read of the target: `want` bytes asked for at byte `at`, `got` of them read
/// (fewer only past the end of the target: from then on every chunk has `got == 0`).
pub struct Chunk {
    /// Offset of the chunk's first byte in the target.
    pub at: u64,
    /// Bytes the chunk covers.
    pub want: usize,
    /// Bytes read (`≤ want`).
    pub got: usize,
    buf: AlignedBuf,
}

impl Chunk {
    /// The bytes read: `got` bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf.bytes()[..self.got]
    }
}

/// How the target ended up being read: `o_direct` or `buffered`, and why (the
/// opening's note, plus the refusal when `O_DIRECT` failed at read time).
pub type ReadMode = (&'static str, String);

/// The reader thread and the two channels between it and the verifier.
pub struct ReadAhead {
    chunks: mpsc::Receiver<Result<Chunk, Error>>,
    free: mpsc::Sender<AlignedBuf>,
    reader: Option<JoinHandle<ReadMode>>,
}

impl ReadAhead {
    /// Starts reading `len` bytes of the opened target in chunks of `chunk` bytes (a
    /// multiple of 4096), `depth` buffers (≥ 2) in all: up to `depth - 1` reads ahead
    /// of the chunk being decoded.
    pub fn start(o: Opened, len: u64, chunk: usize, depth: usize) -> ReadAhead {
        let (chunk_tx, chunks) = mpsc::channel();
        let (free, free_rx) = mpsc::channel();
        for _ in 0..depth.max(2) {
            free.send(AlignedBuf::new(chunk)).expect("receiver alive");
        }
        let reader = std::thread::Builder::new()
            .name("verify-reader".into())
            .spawn(move || read_all(o, len, chunk, free_rx, chunk_tx))
            .expect("spawn the verify reader thread");
        ReadAhead {
            chunks,
            free,
            reader: Some(reader),
        }
    }

    /// The next chunk in order, or the read error that ended the reading (naming the
    /// path and byte offset); `None` after the last chunk.
    pub fn next_chunk(&mut self) -> Option<Result<Chunk, Error>> {
        self.chunks.recv().ok()
    }

    /// Gives a decoded chunk's buffer back for a later read.
    pub fn recycle(&self, c: Chunk) {
        // The reader may have finished; its buffers are then simply dropped.
        let _ = self.free.send(c.buf);
    }

    /// Waits for the reader thread and says how the target was read.
    pub fn finish(mut self) -> ReadMode {
        self.reader
            .take()
            .expect("finished once")
            .join()
            .expect("the verify reader thread panicked")
    }
}

/// The reader thread: reads every chunk of `len` bytes into a free buffer and sends
/// it; falls back to a buffered read when `O_DIRECT` is refused at read time (EINVAL:
/// alignment, some FUSE filesystems). Stops after a read error, or when the verifier
/// is gone.
fn read_all(
    o: Opened,
    len: u64,
    chunk: usize,
    free: mpsc::Receiver<AlignedBuf>,
    out: mpsc::Sender<Result<Chunk, Error>>,
) -> ReadMode {
    let (mut mode, mut note) = (o.read_mode, o.read_note);
    let (path, mut f): (PathBuf, File) = (o.path, o.file);
    let mut at = 0u64;
    let mut eof = false;
    while at < len {
        let Ok(mut buf) = free.recv() else { break };
        let want = (len - at).min(chunk as u64) as usize;
        let got = if eof {
            Ok(0)
        } else {
            match read_full_at(&f, &mut buf.bytes_mut()[..want], at) {
                Err(e) if mode == "o_direct" && e.raw_os_error() == Some(libc::EINVAL) => {
                    match File::open(&path) {
                        Ok(plain) => {
                            let n = if note.is_empty() { "" } else { "; " };
                            note = format!("O_DIRECT read refused ({e}){n}{note}");
                            mode = "buffered";
                            f = plain;
                            read_full_at(&f, &mut buf.bytes_mut()[..want], at)
                        }
                        Err(e) => {
                            let _ = out.send(Err(Error::Msg(format!(
                                "cannot read target {}: {e}",
                                path.display()
                            ))));
                            break;
                        }
                    }
                }
                r => r,
            }
        };
        let got = match got {
            Ok(n) => n,
            Err(e) => {
                let _ = out.send(Err(Error::Msg(format!(
                    "reading target {} at byte {at}: {e}",
                    path.display()
                ))));
                break;
            }
        };
        eof |= got < want;
        if out.send(Ok(Chunk { at, want, got, buf })).is_err() {
            break;
        }
        at += want as u64;
    }
    (mode, note)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_come_in_order_and_past_the_end_of_a_short_file_read_nothing() {
        let dir = std::env::temp_dir().join(format!("plugpull-readahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.dat");
        // 10000 bytes, each its offset mod 251; asked for 5 chunks of 4096.
        let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let o = Opened {
            path: path.clone(),
            file: File::open(&path).unwrap(),
            len: 10000,
            is_block: false,
            read_mode: "buffered",
            read_note: "test".into(),
        };
        let mut ra = ReadAhead::start(o, 5 * 4096, 4096, 2);
        let mut seen = Vec::new();
        let mut back = Vec::new();
        while let Some(c) = ra.next_chunk() {
            let c = c.unwrap();
            seen.push((c.at, c.want, c.got));
            back.extend_from_slice(c.bytes());
            ra.recycle(c);
        }
        assert_eq!(
            seen,
            vec![
                (0, 4096, 4096),
                (4096, 4096, 4096),
                (8192, 4096, 1808),
                (12288, 4096, 0),
                (16384, 4096, 0)
            ]
        );
        assert_eq!(back, data);
        assert_eq!(ra.finish(), ("buffered", "test".to_string()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
