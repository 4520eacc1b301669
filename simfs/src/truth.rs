//! The ground-truth log: what the simulator did to every write it still held at the
//! cut (or misdirected at any time), as the filesystem writes it and the tests read it.
//!
//! One type per kind of line, each `Serialize + Deserialize`, so the writer and every
//! reader share one definition of the format:
//!
//! * [`TruthWrite`] — one line per write, ordered by `write_id`:
//!   `{"write_id":17,"file":"pg/data/pg_wal/000000010000000000000001","offset":81920,"len":8192,"fsynced":true,"fate":"dropped","kept_sectors":null,"landed_at":null}`
//! * [`TruthMeta`] — one line per metadata operation since mount (unless
//!   `--metadata passthrough`), ordered by `meta_id`, after the write lines:
//!   `{"meta_id":3,"op":"rename","path":"d/a.tmp","to":"d/a","size":null,"synced":false,"fate":"lost"}`
//! * [`TruthSummary`] — the last line, also what `plugpull-simfs cut` prints:
//!   `{"cut":true,"mode":"lying","seed":42,"writes_total":N,"cached_at_cut":C,"fsynced_at_cut":F,"misdirected":M,"metadata":"posix","meta_ops":O,"meta_lost":L,"truth":"…"}`
//!
//! [`Truth`] is a whole log: [`Truth::new`] builds one from the lines (counting the
//! summary's numbers from them), [`Truth::write_durably`] writes it the way the cut
//! does, and [`Truth::parse`] reads it back and checks the summary against the lines.
//! Field order is the wire order: changing it changes the bytes of the log, which the
//! crate documentation and `simfs/README.md` pin.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What became of a write, as recorded in the ground truth (`fate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fate {
    /// Cached at the cut; none of its bytes reached the backing store.
    Dropped,
    /// Cached at the cut, but all of it reached the backing store (a `torn` cut that
    /// kept every sector).
    Destaged,
    /// Cached at the cut; only its first `kept_sectors` sectors reached the store.
    Torn,
    /// Destaged before the cut, but to `landed_at` instead of its own offset, which
    /// kept its old contents.
    Misdirected,
}

/// What became of a metadata operation at the cut (`fate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetaFate {
    /// Durable: the backing directory shows its effect (or a later operation's on
    /// the same name or size).
    Kept,
    /// Rolled back: the names and size it changed are back to what they were before.
    Lost,
    /// A rename (or exchange) of which one name is durable and the other is not: both
    /// names, or neither, hold the inode after the cut.
    Half,
    /// Durable in its directory, but that directory itself is not reachable from the
    /// root after the cut (its own entry was lost): gone with it.
    Orphaned,
}

/// One metadata line of the ground truth.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthMeta {
    /// Order of the operation since mount, from 1.
    pub meta_id: u64,
    /// `create`, `mkdir`, `mknod`, `symlink`, `link`, `unlink`, `rmdir`, `rename`,
    /// `exchange`, `truncate`, `extend` or `fallocate`.
    pub op: String,
    /// Path relative to the mount root when the operation was made (the source of a
    /// rename, the existing file of a link).
    pub path: String,
    /// Rename and exchange: the other path; link: the new name; else null.
    pub to: Option<String>,
    /// Size changes: the new size in bytes; else null.
    pub size: Option<u64>,
    /// A durability call that makes it durable under the `--metadata` rules had
    /// returned success before the cut (the directory's fsync for a name, the file's
    /// fsync or fdatasync for a size; any of them under `journal`).
    pub synced: bool,
    /// What became of it.
    pub fate: MetaFate,
}

/// One write line of the ground truth.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthWrite {
    /// Order of arrival since mount, from 1.
    pub write_id: u64,
    /// Order of arrival among the writes to this file since mount, from 1: with one
    /// writer that makes nothing but the run's writes to it, the run's seq.
    #[serde(default)]
    pub file_write_id: u64,
    /// Path relative to the mount root at the cut (` (deleted)` appended if the file
    /// had been unlinked; `<inode N>` if it could not be named).
    pub file: String,
    /// Byte offset the application wrote at.
    pub offset: u64,
    /// Length in bytes (a truncate may have shortened the cached write).
    pub len: u64,
    /// An fsync/fdatasync of the file that started after this write had returned
    /// success.
    pub fsynced: bool,
    /// What became of it.
    pub fate: Fate,
    /// Torn mode only: how many leading sector pieces reached the backing file.
    pub kept_sectors: Option<u64>,
    /// Misdirected writes only: the byte offset it was written to instead.
    pub landed_at: Option<u64>,
}

impl TruthWrite {
    /// The block of `block_size` bytes the application wrote to (`offset / block_size`).
    pub fn block(&self, block_size: u64) -> u64 {
        self.offset / block_size
    }
}

/// The last line of the ground truth (also what `plugpull-simfs cut` prints).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthSummary {
    /// True for a power cut, false for the clean unmount of a run that misdirected.
    pub cut: bool,
    /// The mode's name (`honest`, `lying`, …).
    pub mode: String,
    /// The seed of the run.
    pub seed: u64,
    /// Writes accepted since mount.
    pub writes_total: u64,
    /// Write lines that are not misdirected: writes still cached at the cut.
    pub cached_at_cut: u64,
    /// Those of them with `fsynced: true` — lost or damaged if their fate is not
    /// `destaged`.
    pub fsynced_at_cut: u64,
    /// Misdirected write lines: writes misdirected since mount.
    pub misdirected: u64,
    /// The `--metadata` rules (`posix`, `journal`, `passthrough`).
    pub metadata: String,
    /// Metadata lines: operations recorded since mount.
    pub meta_ops: u64,
    /// Those of them whose fate is not `kept`.
    pub meta_lost: u64,
    /// Path of the ground-truth log.
    pub truth: PathBuf,
}

/// A whole ground-truth log: the write lines and the summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truth {
    /// The write lines, ordered by `write_id`.
    pub writes: Vec<TruthWrite>,
    /// The metadata lines, ordered by `meta_id`.
    pub meta: Vec<TruthMeta>,
    /// The summary line.
    pub summary: TruthSummary,
}

/// The summary's three counts as the lines give them: (`cached_at_cut`,
/// `fsynced_at_cut`, `misdirected`).
fn counts(writes: &[TruthWrite]) -> (u64, u64, u64) {
    let cached = writes
        .iter()
        .filter(|w| w.fate != Fate::Misdirected)
        .count() as u64;
    let fsynced = writes
        .iter()
        .filter(|w| w.fate != Fate::Misdirected && w.fsynced)
        .count() as u64;
    (cached, fsynced, writes.len() as u64 - cached)
}

fn meta_lost(meta: &[TruthMeta]) -> u64 {
    meta.iter().filter(|m| m.fate != MetaFate::Kept).count() as u64
}

/// Why a ground-truth log could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number, or 0 for a fault of the whole log.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "ground truth: {}", self.message)
        } else {
            write!(f, "ground truth line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

impl Truth {
    /// A log of `writes` (ordered by `write_id`) with its summary; the summary's
    /// `cached_at_cut`, `fsynced_at_cut` and `misdirected` are counted from `writes`.
    /// It has no metadata lines: add them with [`Truth::with_meta`].
    pub fn new(
        writes: Vec<TruthWrite>,
        cut: bool,
        mode: &str,
        seed: u64,
        writes_total: u64,
        truth: PathBuf,
    ) -> Truth {
        let (cached_at_cut, fsynced_at_cut, misdirected) = counts(&writes);
        let summary = TruthSummary {
            cut,
            mode: mode.to_string(),
            seed,
            writes_total,
            cached_at_cut,
            fsynced_at_cut,
            misdirected,
            metadata: "passthrough".to_string(),
            meta_ops: 0,
            meta_lost: 0,
            truth,
        };
        Truth {
            writes,
            meta: Vec::new(),
            summary,
        }
    }

    /// This log with the metadata lines `meta` (ordered by `meta_id`) made under the
    /// `metadata` rules; the summary's `meta_ops` and `meta_lost` are counted from them.
    pub fn with_meta(mut self, metadata: &str, meta: Vec<TruthMeta>) -> Truth {
        self.summary.metadata = metadata.to_string();
        self.summary.meta_ops = meta.len() as u64;
        self.summary.meta_lost = meta_lost(&meta);
        self.meta = meta;
        self
    }

    /// The metadata lines whose `path` or `to` is `path`.
    pub fn meta_of<'a>(&'a self, path: &'a str) -> impl Iterator<Item = &'a TruthMeta> + 'a {
        self.meta
            .iter()
            .filter(move |m| m.path == path || m.to.as_deref() == Some(path))
    }

    /// The summary line as JSON, without a newline.
    ///
    /// # Errors
    /// The summary's path is not valid UTF-8.
    pub fn summary_line(&self) -> io::Result<String> {
        serde_json::to_string(&self.summary).map_err(io::Error::other)
    }

    /// The whole log: one JSON line per write, then the summary line, each ending in
    /// a newline.
    ///
    /// # Errors
    /// The summary's path is not valid UTF-8.
    pub fn to_jsonl(&self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        for w in &self.writes {
            serde_json::to_writer(&mut out, w).map_err(io::Error::other)?;
            out.push(b'\n');
        }
        for m in &self.meta {
            serde_json::to_writer(&mut out, m).map_err(io::Error::other)?;
            out.push(b'\n');
        }
        out.extend_from_slice(self.summary_line()?.as_bytes());
        out.push(b'\n');
        Ok(out)
    }

    /// Writes the log to `path` durably: to `path` with extension `jsonl.tmp`, fsynced,
    /// renamed over `path`, and `path`'s directory fsynced.
    ///
    /// # Errors
    /// Any I/O error on the file or its directory.
    pub fn write_durably(&self, path: &Path) -> io::Result<()> {
        let out = self.to_jsonl()?;
        let tmp = path.with_extension("jsonl.tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Reads a log's JSON lines: a line with a `write_id` is a [`TruthWrite`], one
    /// with a `meta_id` a [`TruthMeta`], the line with neither is the summary, which
    /// must come last.
    ///
    /// # Errors
    /// A line that is not JSON or lacks a field, a line after the summary, no summary,
    /// writes not ordered by `write_id`, or a summary whose counts disagree with the
    /// write lines.
    pub fn parse(text: &str) -> Result<Truth, ParseError> {
        let mut writes = Vec::new();
        let mut meta: Vec<TruthMeta> = Vec::new();
        let mut summary = None;
        for (i, line) in text.lines().enumerate() {
            let at = |message: String| ParseError {
                line: i + 1,
                message: format!("{message}: {line}"),
            };
            if summary.is_some() {
                return Err(at("a line after the summary".to_string()));
            }
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
            if v.get("write_id").is_some() {
                writes.push(serde_json::from_value(v).map_err(|e| at(e.to_string()))?);
            } else if v.get("meta_id").is_some() {
                meta.push(serde_json::from_value(v).map_err(|e| at(e.to_string()))?);
            } else {
                summary = Some(serde_json::from_value(v).map_err(|e| at(e.to_string()))?);
            }
        }
        let whole = |message: &str| ParseError {
            line: 0,
            message: message.to_string(),
        };
        let summary: TruthSummary = summary.ok_or_else(|| whole("no summary line"))?;
        if !writes
            .windows(2)
            .all(|w: &[TruthWrite]| w[0].write_id < w[1].write_id)
        {
            return Err(whole("not ordered by write_id"));
        }
        let said = (
            summary.cached_at_cut,
            summary.fsynced_at_cut,
            summary.misdirected,
        );
        if counts(&writes) != said
            || (summary.meta_ops, summary.meta_lost) != (meta.len() as u64, meta_lost(&meta))
        {
            return Err(whole("the summary disagrees with its lines"));
        }
        if !meta.windows(2).all(|m| m[0].meta_id < m[1].meta_id) {
            return Err(whole("not ordered by meta_id"));
        }
        Ok(Truth {
            writes,
            meta,
            summary,
        })
    }

    /// The write lines of `file` (relative to the mount root).
    pub fn of_file<'a>(&'a self, file: &'a str) -> impl Iterator<Item = &'a TruthWrite> + 'a {
        self.writes.iter().filter(move |w| w.file == file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(write_id: u64, fsynced: bool, fate: Fate) -> TruthWrite {
        TruthWrite {
            write_id,
            file_write_id: write_id,
            file: "pg/data/base/5/16407".to_string(),
            offset: 507904,
            len: 8192,
            fsynced,
            fate,
            kept_sectors: None,
            landed_at: None,
        }
    }

    #[test]
    fn lines_are_the_documented_bytes() {
        let mut torn = write(2, true, Fate::Torn);
        torn.kept_sectors = Some(3);
        let mut mis = write(1, true, Fate::Misdirected);
        mis.landed_at = Some(4096);
        let truth = Truth::new(
            vec![mis, torn, write(55899, false, Fate::Dropped)],
            true,
            "lying",
            21,
            13527,
            PathBuf::from("/tmp/sf/mnt.simfs-truth.jsonl"),
        )
        .with_meta(
            "posix",
            vec![
                TruthMeta {
                    meta_id: 1,
                    op: "create".to_string(),
                    path: "d/a.tmp".to_string(),
                    to: None,
                    size: None,
                    synced: true,
                    fate: MetaFate::Kept,
                },
                TruthMeta {
                    meta_id: 2,
                    op: "rename".to_string(),
                    path: "d/a.tmp".to_string(),
                    to: Some("d/a".to_string()),
                    size: None,
                    synced: false,
                    fate: MetaFate::Lost,
                },
            ],
        );
        let text = String::from_utf8(truth.to_jsonl().unwrap()).unwrap();
        assert_eq!(
            text,
            "{\"write_id\":1,\"file_write_id\":1,\"file\":\"pg/data/base/5/16407\",\"offset\":507904,\"len\":8192,\"fsynced\":true,\"fate\":\"misdirected\",\"kept_sectors\":null,\"landed_at\":4096}\n\
             {\"write_id\":2,\"file_write_id\":2,\"file\":\"pg/data/base/5/16407\",\"offset\":507904,\"len\":8192,\"fsynced\":true,\"fate\":\"torn\",\"kept_sectors\":3,\"landed_at\":null}\n\
             {\"write_id\":55899,\"file_write_id\":55899,\"file\":\"pg/data/base/5/16407\",\"offset\":507904,\"len\":8192,\"fsynced\":false,\"fate\":\"dropped\",\"kept_sectors\":null,\"landed_at\":null}\n\
             {\"meta_id\":1,\"op\":\"create\",\"path\":\"d/a.tmp\",\"to\":null,\"size\":null,\"synced\":true,\"fate\":\"kept\"}\n\
             {\"meta_id\":2,\"op\":\"rename\",\"path\":\"d/a.tmp\",\"to\":\"d/a\",\"size\":null,\"synced\":false,\"fate\":\"lost\"}\n\
             {\"cut\":true,\"mode\":\"lying\",\"seed\":21,\"writes_total\":13527,\"cached_at_cut\":2,\"fsynced_at_cut\":1,\"misdirected\":1,\"metadata\":\"posix\",\"meta_ops\":2,\"meta_lost\":1,\"truth\":\"/tmp/sf/mnt.simfs-truth.jsonl\"}\n"
        );
        assert_eq!(Truth::parse(&text).unwrap(), truth);
    }

    #[test]
    fn parse_refuses_a_summary_that_disagrees_or_is_missing() {
        let line = "{\"write_id\":7,\"file_write_id\":7,\"file\":\"f\",\"offset\":0,\"len\":512,\"fsynced\":true,\"fate\":\"dropped\",\"kept_sectors\":null,\"landed_at\":null}";
        let summary = "{\"cut\":true,\"mode\":\"honest\",\"seed\":0,\"writes_total\":9,\"cached_at_cut\":1,\"fsynced_at_cut\":0,\"misdirected\":0,\"metadata\":\"passthrough\",\"meta_ops\":0,\"meta_lost\":0,\"truth\":\"t\"}";
        assert_eq!(
            Truth::parse(&format!("{line}\n{summary}\n"))
                .unwrap_err()
                .to_string(),
            "ground truth: the summary disagrees with its lines"
        );
        assert_eq!(
            Truth::parse(&format!("{line}\n")).unwrap_err(),
            ParseError {
                line: 0,
                message: "no summary line".to_string()
            }
        );
        assert_eq!(
            Truth::parse(&format!("{summary}\n{line}\n"))
                .unwrap_err()
                .line,
            2
        );
    }

    #[test]
    fn of_file_and_block_select_by_path_and_offset() {
        let mut other = write(3, false, Fate::Dropped);
        other.file = "other".to_string();
        let truth = Truth::new(
            vec![write(1, false, Fate::Dropped), other],
            false,
            "misdirect",
            5,
            3,
            PathBuf::from("t"),
        );
        let ids: Vec<u64> = truth
            .of_file("pg/data/base/5/16407")
            .map(|w| w.write_id)
            .collect();
        assert_eq!(ids, vec![1]);
        assert_eq!(truth.writes[0].block(8192), 62);
        assert_eq!(truth.writes[0].block(4096), 124);
        assert_eq!(
            (
                truth.summary.cached_at_cut,
                truth.summary.fsynced_at_cut,
                truth.summary.misdirected
            ),
            (2, 0, 0)
        );
    }
}
