//! What a target holds before a run: the signatures of filesystems, volumes, RAID
//! members and partition tables on it (util-linux's `wipefs --no-act --json`, which
//! probes with libblkid every place those formats keep a superblock or label: first
//! MiB, 1 KiB, 4 KiB, 64 KiB, end-of-device backups), the sectors that are neither
//! zeros nor plugpull records, and the other runs whose records it holds; and, with
//! `--force`, erasing those signatures.

use super::medium::read_full_at;
use plugpull::record::{decode_sector, Sector, SECTOR};
use plugpull::RunId;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

/// Why the target's contents are not plugpull's, if they are not: the signatures
/// `wipefs` finds (see [`signatures`]), else a sector within the `size` bytes the run
/// would write that is neither zeros nor a plugpull record (read as [`scan_prior`]
/// reads: whole up to 1 GiB, else 1024 samples of 1 MiB). Where `wipefs` cannot run,
/// a block device counts as foreign (its filesystems cannot be ruled out); a file
/// falls back to the scan.
pub fn foreign_data(path: &Path, f: &File, block_device: bool, size: u64) -> Option<String> {
    match signatures(path) {
        Ok(sigs) if !sigs.is_empty() => {
            let list: Vec<String> = sigs
                .iter()
                .map(|s| format!("{} signature at byte {}", s.kind, s.offset))
                .collect();
            return Some(format!("wipefs found: {}", list.join(", ")));
        }
        Ok(_) => {}
        Err(e) if block_device => {
            return Some(format!(
                "{e}: a filesystem, volume or partition table on it cannot be ruled out"
            ))
        }
        Err(e) => eprintln!(
            "warning: {e}; target {} is checked for foreign data by reading it only",
            path.display()
        ),
    }
    match scan(f, run_span(f, block_device, size)).foreign_at {
        Some(Foreign::At(at)) => Some(format!(
            "the sector at byte {at} is neither zeros nor a plugpull record"
        )),
        Some(Foreign::Unreadable(e)) => Some(format!("it cannot be read to rule that out: {e}")),
        None => None,
    }
}

/// The bytes of the target a run of `size` bytes writes that hold anything now: all
/// `size` of a block device, else the part of the file that exists.
pub(super) fn run_span(f: &File, block_device: bool, size: u64) -> u64 {
    if block_device {
        size
    } else {
        f.metadata().map_or(0, |m| m.len()).min(size)
    }
}

/// Erases, with `--force`, the signatures `wipefs` found on the target (as `wipefs
/// --all` would: each magic string zeroed, so libblkid no longer sees the format),
/// through the run's own descriptor `f`, then makes it durable; prints each one.
///
/// Errors: `wipefs` failed, or the write or fsync did.
pub(super) fn erase_signatures(path: &Path, f: &File) -> Result<(), String> {
    let shown = path.display();
    for s in signatures(path)? {
        let at = u64::from_str_radix(s.offset.trim_start_matches("0x"), 16)
            .map_err(|_| format!("wipefs printed an offset that is no number: {}", s.offset))?;
        f.write_all_at(&vec![0u8; s.length as usize], at)
            .map_err(|e| {
                format!(
                    "cannot erase the {} signature at byte {}: {e}",
                    s.kind, s.offset
                )
            })?;
        eprintln!(
            "--force: erased the {} signature at byte {} of target {shown}",
            s.kind, s.offset
        );
    }
    f.sync_all()
        .map_err(|e| format!("fsync of target {shown} after erasing signatures: {e}"))
}

/// One signature `wipefs` found: what and at which byte offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// libblkid's name of the format, e.g. `ext4`, `xfs`, `LVM2_member`, `gpt`.
    pub kind: String,
    /// Where its magic is, as wipefs prints it (e.g. `0x438`).
    pub offset: String,
    /// The magic string's length, bytes.
    pub length: u64,
}

/// The signatures on `path` (a file or block device), per `wipefs --no-act --json`.
///
/// Errors: `wipefs` is missing or failed (its message).
pub fn signatures(path: &Path) -> Result<Vec<Signature>, String> {
    let o = Command::new("wipefs")
        .args(["--no-act", "--json", "--output", "OFFSET,TYPE,LENGTH"])
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run wipefs (util-linux): {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "wipefs --no-act {} failed ({}): {}",
            path.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&o.stdout);
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("wipefs printed no JSON ({e}): {text}"))?;
    Ok(v["signatures"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| Signature {
                    kind: s["type"].as_str().unwrap_or("unknown").to_string(),
                    offset: s["offset"].as_str().unwrap_or("?").to_string(),
                    length: s["length"].as_u64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default())
}

/// What the target held before the run: the other runs whose records are on it (at
/// most 64) and whether it held foreign bytes (neither zeros nor plugpull records),
/// from [`scan`] of its first `size` bytes. Where the scan sampled (a target over
/// 1 GiB) or could not read, foreign bytes are assumed possible.
pub fn scan_prior(f: &File, size: u64) -> (Vec<RunId>, bool) {
    let p = scan(f, size);
    (p.runs, p.sampled || p.foreign_at.is_some())
}

/// Where a scan first met what is not plugpull's.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Foreign {
    /// A sector at this byte offset is neither zeros nor a plugpull record.
    At(u64),
    /// A read failed (its error): nothing can be ruled out.
    Unreadable(String),
}

/// What [`scan`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Scan {
    /// The runs whose records it met, at most 64, in the order met.
    pub(super) runs: Vec<RunId>,
    /// The first foreign sector met, or the read that failed.
    pub(super) foreign_at: Option<Foreign>,
    /// Whether only samples were read (more than 1 GiB).
    pub(super) sampled: bool,
}

/// Reads the first `size` bytes of `f`: whole up to 1 GiB, else 1024 evenly spaced
/// 1 MiB samples; stops at the first failed read.
pub(super) fn scan(f: &File, size: u64) -> Scan {
    const WHOLE: u64 = 1 << 30;
    const CHUNK: u64 = 1 << 20;
    let sampled = size > WHOLE;
    let mut runs = Vec::new();
    let mut foreign_at = None;
    let offsets: Vec<u64> = if !sampled {
        (0..size.div_ceil(CHUNK)).map(|i| i * CHUNK).collect()
    } else {
        let step = (size / 1024) / SECTOR as u64 * SECTOR as u64;
        (0..1024).map(|i| i * step).collect()
    };
    let mut buf = vec![0u8; CHUNK as usize];
    for at in offsets {
        let want = (size - at).min(CHUNK) as usize;
        let got = match read_full_at(f, &mut buf[..want], at) {
            Ok(n) => n,
            Err(e) => {
                foreign_at.get_or_insert(Foreign::Unreadable(format!("read at byte {at}: {e}")));
                return Scan {
                    runs,
                    foreign_at,
                    sampled,
                };
            }
        };
        let tail = got % SECTOR;
        if tail != 0 && buf[got - tail..got].iter().any(|&b| b != 0) {
            foreign_at.get_or_insert(Foreign::At(at + (got - tail) as u64));
        }
        for (i, s) in buf[..got].chunks_exact(SECTOR).enumerate() {
            match decode_sector(s.try_into().unwrap()) {
                Sector::Valid(h) => {
                    if runs.len() < 64 && !runs.contains(&h.run) {
                        runs.push(h.run);
                    }
                }
                Sector::Blank => {}
                Sector::Invalid(_) => {
                    foreign_at.get_or_insert(Foreign::At(at + (i * SECTOR) as u64));
                }
            }
        }
    }
    Scan {
        runs,
        foreign_at,
        sampled,
    }
}
