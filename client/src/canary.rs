//! The volatile canary (`docs/formats.md`, "Canary"): while a run writes, a thread
//! writes stamped 512-byte records with no durability call to small files on a
//! persistent local filesystem of the host under test, and the reporter tells the
//! listener the newest one in every batch (`AckBatch::canary`). After a power cut
//! the newest records are gone from the medium (the host's memory lost power);
//! after a clean shutdown or a `sync` they are all there, and a PASS is NOT
//! MEASURED (`plugpull::verdict::cut`).
//!
//! Layout, chosen so the kernel does not write the newest records back early: three
//! files of [`SLOTS`] records, filled with zeros and made durable before the run (so
//! a record never allocates a block, which ext4's ordered mode would flush at its
//! next journal commit), written in turns of `turn_ms` (a third of
//! `vm.dirty_expire_centisecs`, 0.5 to 10 s), file `t mod 3` in turn `t`. At each
//! turn the file written next (left two turns ago) is fsynced, never the one just
//! left: the newest records (this turn's, and the last turn's right after a switch)
//! are never made durable by the canary itself, and no file stays dirty for two
//! turns, so none ages into writeback. Only writeback for memory pressure (dirty
//! pages above `vm.dirty_background_ratio`) can write the newest records early; the
//! cut is then NOT MEASURED, never a false PASS.

use crate::Error;
use plugpull::ledger::{CanaryManifest, Workload};
use plugpull::verdict::cut::CanaryRead;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes per record.
pub const RECORD: usize = 512;
/// Records per canary file (64 KiB files).
pub const SLOTS: u32 = 128;
/// How often the thread writes a record.
pub const EVERY: Duration = Duration::from_millis(20);
/// A canary record's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"PLGCANRY";
/// Canary files per run: the one written, the one just left (still dirty), and the
/// one fsynced to be written next.
const FILES: usize = 3;

/// A run's canary: its files and, once started, the thread that writes them.
pub struct Canary {
    manifest: CanaryManifest,
    files: Vec<Arc<File>>,
    issued: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The record `seq` (from 1) of the canary with `nonce`, written `ms` after the run's
/// start: magic, nonce, seq, ms (8 bytes each, little-endian), zeros, and at 508 the
/// CRC-32 (IEEE) of bytes 0..508.
pub fn record(nonce: u64, seq: u64, ms: u64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..8].copy_from_slice(MAGIC);
    r[8..16].copy_from_slice(&nonce.to_le_bytes());
    r[16..24].copy_from_slice(&seq.to_le_bytes());
    r[24..32].copy_from_slice(&ms.to_le_bytes());
    let crc = crc32fast::hash(&r[..508]);
    r[508..].copy_from_slice(&crc.to_le_bytes());
    r
}

/// The seq of a valid record of the canary `nonce` in `r` (512 bytes), else `None`.
pub fn parse(r: &[u8], nonce: u64) -> Option<u64> {
    let u = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(r[508..512].try_into().expect("4 bytes"));
    (r.len() == RECORD && &r[..8] == MAGIC && crc32fast::hash(&r[..508]) == crc && u(8) == nonce)
        .then(|| u(16))
}

/// The directory a run's canary goes to without `--canary-dir`: a file target's
/// directory, a files run's directory's parent on the same filesystem (else the
/// directory); a block device or a PostgreSQL server has none (`Err`: why, naming
/// `--canary-dir`).
pub fn default_dir(workload: &Workload) -> Result<PathBuf, String> {
    match workload {
        Workload::File(f) if f.identity.kind == "block" => Err(
            "the target is a block device, which holds no filesystem for it: give --canary-dir DIR on a persistent local filesystem of the host".into(),
        ),
        Workload::File(f) => Path::new(&f.target)
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| format!("the target {} has no directory", f.target)),
        Workload::Files(f) => Ok(beside_dir(Path::new(&f.target))),
        Workload::Pgbench(_) => Err(
            "a pgbench run has no directory of its own on the database host: give --canary-dir DIR on a persistent local filesystem of the database host".into(),
        ),
    }
}

/// Where a files run's canary goes: the directory's parent when it is on the same
/// filesystem (the run's own namespace stays the workload's alone), else the
/// directory itself (it is a mount point).
fn beside_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    match (parent, std::fs::metadata(dir)) {
        (Some(p), Ok(m)) if std::fs::metadata(p).is_ok_and(|pm| pm.dev() == m.dev()) => {
            p.to_path_buf()
        }
        _ => dir.to_path_buf(),
    }
}

/// The canary of a run whose target the verifier reads at `at` instead of the
/// manifest's `target` (`verify --target`): a canary beside the target (in its
/// directory, or in the files run's directory) is looked for beside `at`; one given
/// elsewhere (`--canary-dir`) stays where it is.
pub fn moved(m: &CanaryManifest, target: &Path, at: &Path) -> CanaryManifest {
    let mut out = m.clone();
    let swap = |from: Option<&Path>, to: Option<&Path>| -> Option<Vec<String>> {
        let (from, to) = (from?, to?);
        m.files
            .iter()
            .map(|f| {
                let f = Path::new(f);
                let name = f.file_name().filter(|_| f.parent() == Some(from))?;
                Some(to.join(name).display().to_string())
            })
            .collect()
    };
    if let Some(files) = swap(target.parent(), at.parent()).or_else(|| swap(Some(target), Some(at)))
    {
        out.files = files;
    }
    out
}

/// The canary of a run whose canary directory the verifier finds at `dir` now
/// (`verify --canary-dir`: the disk mounted elsewhere, e.g. a virtual machine's image
/// on the host): each file by its name in `dir`.
pub fn in_dir(m: &CanaryManifest, dir: &Path) -> CanaryManifest {
    let mut out = m.clone();
    out.files = m
        .files
        .iter()
        .map(|f| match Path::new(f).file_name() {
            Some(name) => dir.join(name).display().to_string(),
            None => f.clone(),
        })
        .collect();
    out
}

/// Whether `dir`'s filesystem keeps data across a power cut: tmpfs and ramfs never
/// do, so their loss would prove nothing.
fn persistent(dir: &Path) -> Result<(), String> {
    let st = rustix::fs::statfs(dir)
        .map_err(|e| format!("{}: {}", dir.display(), std::io::Error::from(e)))?;
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58f6;
    match st.f_type as i64 {
        TMPFS | RAMFS => Err(format!(
            "{} is on tmpfs or ramfs, which loses everything at every cut: give --canary-dir DIR on a persistent local filesystem",
            dir.display()
        )),
        _ => Ok(()),
    }
}

/// The turn length: a third of `vm.dirty_expire_centisecs` (30 s when unreadable or
/// 0), between 0.5 and 10 s, in ms (at least the 16 records verify checks, 320 ms).
fn turn_ms() -> u64 {
    let expire_cs = std::fs::read_to_string("/proc/sys/vm/dirty_expire_centisecs")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&v| v > 0)
        .unwrap_or(3000);
    (expire_cs * 10 / 3).clamp(500, 10_000)
}

impl Canary {
    /// A run without a canary, and why.
    pub fn none(why: String) -> Canary {
        Canary {
            manifest: CanaryManifest {
                none_because: why,
                ..CanaryManifest::default()
            },
            files: Vec::new(),
            issued: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }

    /// The canary of a run of `workload`: in `dir` (`--canary-dir`) or else in
    /// [`default_dir`]. Creates `.plugpull-canary-NONCE-{0,1}` (never an existing
    /// file), fills them with zeros and makes them and their names durable.
    ///
    /// Errors: `dir` was given and cannot hold a canary (missing, tmpfs, not
    /// writable). Without `dir` a failure gives a run without a canary, saying why.
    pub fn create(dir: Option<&Path>, workload: &Workload) -> Result<Canary, Error> {
        let (at, given) = match dir {
            Some(d) => (d.to_path_buf(), true),
            None => match default_dir(workload) {
                Ok(d) => (d, false),
                Err(why) => return Ok(Canary::none(why)),
            },
        };
        match Canary::make(&at) {
            Ok(c) => Ok(c),
            Err(why) if given => Err(Error::Msg(format!("--canary-dir: {why}"))),
            Err(why) => Ok(Canary::none(why)),
        }
    }

    fn make(dir: &Path) -> Result<Canary, String> {
        let dir = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        persistent(&dir)?;
        let nonce: u64 = rand::random::<u64>() | 1;
        let mut files = Vec::new();
        let mut names = Vec::new();
        for i in 0..FILES {
            let path = dir.join(format!(".plugpull-canary-{nonce:016x}-{i}"));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| format!("cannot create the canary {}: {e}", path.display()))?;
            f.write_all_at(&vec![0u8; SLOTS as usize * RECORD], 0)
                .and_then(|_| f.sync_all())
                .map_err(|e| format!("cannot fill the canary {}: {e}", path.display()))?;
            files.push(Arc::new(f));
            names.push(path.display().to_string());
        }
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("cannot fsync {}: {e}", dir.display()))?;
        Ok(Canary {
            manifest: CanaryManifest {
                files: names,
                nonce,
                slots: SLOTS,
                turn_ms: turn_ms(),
                none_because: String::new(),
            },
            files,
            issued: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        })
    }

    /// What the manifest records of it.
    pub fn manifest(&self) -> CanaryManifest {
        self.manifest.clone()
    }

    /// The newest record written so far (0: none), for the reporter's batches.
    pub fn issued(&self) -> Arc<AtomicU64> {
        self.issued.clone()
    }

    /// Starts writing a record every [`EVERY`]; `now_ms` is the run's clock (ms
    /// after its start, the acks' clock). A run without a canary starts nothing. A
    /// failed write stops the canary (the newest reported record stays what it was)
    /// with a warning: the run goes on.
    pub fn start(&mut self, now_ms: impl Fn() -> u64 + Send + 'static) {
        if self.files.is_empty() || self.thread.is_some() {
            return;
        }
        let (files, issued, stop) = (self.files.clone(), self.issued.clone(), self.stop.clone());
        let (nonce, turn) = (self.manifest.nonce, self.manifest.turn_ms);
        self.thread = Some(std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut current = 0usize;
            let mut slot = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let ms = now_ms();
                let file = (ms / turn) as usize % files.len();
                if file != current {
                    // The file written next turn was left two turns ago: made durable
                    // now, it is clean when it is dirtied again, and the file just
                    // left keeps the newest records volatile.
                    let _ = files[(file + 1) % files.len()].sync_data();
                    (current, slot) = (file, 0);
                }
                seq += 1;
                let at = u64::from(slot) * RECORD as u64;
                if let Err(e) = files[current].write_all_at(&record(nonce, seq, ms), at) {
                    eprintln!("warning: the canary stopped: {e}");
                    return;
                }
                issued.store(seq, Ordering::Release);
                slot = (slot + 1) % SLOTS;
                std::thread::sleep(EVERY);
            }
        }));
    }

    /// Stops writing (the run ended); the files stay for verify. Waits at most
    /// 100 ms for the thread: a write on a failing filesystem may hang, and the end
    /// of the run must still reach the listener (the thread is then left to end).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let until = std::time::Instant::now() + Duration::from_millis(100);
            while !t.is_finished() && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(2));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads the canary `m` describes from the medium (O_DIRECT where the filesystem
/// takes it, else buffered after dropping the files' cached pages) and returns its
/// newest record there.
pub fn read(m: &CanaryManifest) -> CanaryRead {
    if m.files.is_empty() {
        return CanaryRead::Missing(if m.none_because.is_empty() {
            "the run has no canary".into()
        } else {
            format!("the run has no canary: {}", m.none_because)
        });
    }
    let mut seqs = Vec::new();
    for path in &m.files {
        match read_file(Path::new(path), m) {
            Ok(found) => seqs.extend(found),
            Err(e) => return CanaryRead::Missing(format!("the canary {path} cannot be read: {e}")),
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    CanaryRead::Found { seqs }
}

fn read_file(path: &Path, m: &CanaryManifest) -> std::io::Result<Vec<u64>> {
    use std::os::unix::fs::OpenOptionsExt;
    let len = m.slots as usize * RECORD;
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    let f = match direct {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let f = File::open(path)?;
            // The advice only drops clean cached pages.
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
            f
        }
        Err(e) => return Err(e),
    };
    // O_DIRECT wants an aligned buffer: 4096 covers every logical block size.
    let mut v = vec![0u8; len + 4096];
    let off = v.as_ptr().align_offset(4096);
    let buf = &mut v[off..off + len];
    let mut n = 0;
    while n < len {
        match f.read_at(&mut buf[n..], n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(buf[..n]
        .chunks_exact(RECORD)
        .filter_map(|r| parse(r, m.nonce))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canary_beside_the_target_follows_it_to_another_path() {
        let m = CanaryManifest {
            files: vec!["/mnt/a/.c-0".into(), "/mnt/a/.c-1".into()],
            ..CanaryManifest::default()
        };
        let file = |t: &str, at: &str| moved(&m, Path::new(t), Path::new(at)).files;
        // Beside a file target: beside the path verify reads.
        assert_eq!(file("/mnt/a/t", "/back/t"), ["/back/.c-0", "/back/.c-1"]);
        // In a files run's directory: in the directory verify reads.
        assert_eq!(file("/mnt/a", "/back/a"), ["/back/a/.c-0", "/back/a/.c-1"]);
        // Given elsewhere: where it was.
        assert_eq!(file("/mnt/b/t", "/back/t"), ["/mnt/a/.c-0", "/mnt/a/.c-1"]);
    }

    #[test]
    fn a_canary_directory_mounted_elsewhere_is_read_there_by_name() {
        let m = CanaryManifest {
            files: vec!["/mnt/canary/.c-0".into(), "/mnt/canary/.c-1".into()],
            nonce: 7,
            ..CanaryManifest::default()
        };
        let now = in_dir(&m, Path::new("/tmp/host/canary"));
        assert_eq!(
            now.files,
            ["/tmp/host/canary/.c-0", "/tmp/host/canary/.c-1"]
        );
        assert_eq!(now.nonce, 7);
    }

    #[test]
    fn turns_go_round_three_files_and_the_newest_records_are_all_readable() {
        let dir = std::env::temp_dir().join(format!("pp-canary-turns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = plugpull::ledger::Manifest::example_file("h", "/x", 0, 512).workload;
        let Ok(mut c) = Canary::create(Some(&dir), &w) else {
            return; // tmpfs: the refusal is the other test's
        };
        let m = c.manifest();
        // The run's clock sped up so that a turn takes 500 ms (25 records, more than
        // the 16 verify checks, as every real turn of at least 0.5 s has), and 1.6 s
        // of writing goes round the three files.
        let (t0, turn) = (std::time::Instant::now(), m.turn_ms);
        c.start(move || t0.elapsed().as_millis() as u64 * turn / 500);
        std::thread::sleep(Duration::from_millis(1600));
        c.stop();
        let issued = c.issued().load(Ordering::Acquire);
        let CanaryRead::Found { seqs } = read(&m) else {
            panic!("the canary reads back")
        };
        // Same boot: O_DIRECT reads what the page cache holds (it writes it out
        // first), so every record still in its slot is there, the newest 16 too.
        let first = issued.saturating_sub(15).max(1);
        assert!(
            (first..=issued).all(|s| seqs.binary_search(&s).is_ok()),
            "{issued}: {seqs:?}"
        );
        let per_file: Vec<usize> = m
            .files
            .iter()
            .map(|f| read_file(Path::new(f), &m).unwrap().len())
            .collect();
        assert!(
            per_file.iter().all(|&n| n > 0),
            "turn {turn} ms: {per_file:?}"
        );
        for f in &m.files {
            std::fs::remove_file(f).unwrap();
        }
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn a_record_reads_back_and_a_changed_one_does_not() {
        let r = record(0xfeed, 42, 1234);
        assert_eq!(parse(&r, 0xfeed), Some(42));
        assert_eq!(parse(&r, 0xfeee), None);
        let mut bad = r;
        bad[100] ^= 1;
        assert_eq!(parse(&bad, 0xfeed), None);
        assert_eq!(parse(&[0u8; RECORD], 0), None);
    }

    #[test]
    fn a_canary_written_and_stopped_reads_back_its_newest_record() {
        let dir = std::env::temp_dir().join(format!("pp-canary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = plugpull::ledger::Manifest::example_file("h", "/x", 0, 512).workload;
        let mut c = match Canary::create(Some(&dir), &w) {
            Ok(c) => c,
            Err(e) => {
                // The temp directory is on tmpfs here: the refusal names it.
                assert!(e.to_string().contains("tmpfs"), "{e}");
                return;
            }
        };
        let m = c.manifest();
        assert_eq!((m.files.len(), m.slots), (3, SLOTS));
        assert_eq!(read(&m), CanaryRead::Found { seqs: Vec::new() });
        let t0 = std::time::Instant::now();
        c.start(move || t0.elapsed().as_millis() as u64);
        std::thread::sleep(Duration::from_millis(200));
        c.stop();
        let issued = c.issued().load(Ordering::Acquire);
        assert!(issued >= 2, "{issued}");
        // Same boot: the written records are there (the page cache wrote them or
        // O_DIRECT reads what the cache holds after writeback of a direct read).
        c.files.iter().for_each(|f| f.sync_all().unwrap());
        let all: Vec<u64> = (1..=issued).collect();
        assert_eq!(read(&m), CanaryRead::Found { seqs: all });
        for f in &m.files {
            std::fs::remove_file(f).unwrap();
        }
        let _ = std::fs::remove_dir(&dir);
    }
}
