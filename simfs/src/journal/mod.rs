//! The metadata journal: namespace and size changes held as volatile as file data.
//!
//! Every create, mkdir, mknod, symlink, link, unlink, rmdir, rename, truncate,
//! `fallocate` and size extension by a write is applied to the backing directory at
//! once (so lookups and reads stay a plain passthrough), and recorded here as an
//! operation with the *durable* value it replaced. At the cut, [`restore`] puts every
//! name and size back to its durable value; a clean unmount keeps everything.
//!
//! What is durable, per name and per file, follows [`Metadata`]:
//!
//! * a name `N` in directory `D` is durable up to operation `upto` — the value it had
//!   after the last operation on `(D, N)` that was made durable (`Pending::durable`);
//!   a name with no pending record is durable as it is now;
//! * a file's size likewise (`SizePending`), with the bytes a shrinking truncate cut
//!   off the durable size kept aside to be written back.
//!
//! Rules (`posix`, the default; `simfs/README.md` states them for users): `fsync` or
//! `fdatasync` of a file makes its size durable (data: as the data mode says);
//! `fsync` of a directory makes every entry of that directory durable; nothing else
//! does — a new file's name is not durable until its directory is fsynced, and a
//! directory's own entry is not durable until *its* parent is. `journal` (ext4
//! `data=ordered`, XFS: one ordered log for all metadata): any successful fsync,
//! fdatasync or directory fsync destages every cached write and makes every metadata
//! operation so far durable. Data modes that do not honour fsync (`lying`,
//! `reorder`) commit nothing on fsync; instead each operation becomes durable
//! `--destage-delay-ms` after it was made (FIFO in `lying`; a delay drawn uniformly
//! from `0..=2×delay` per operation in `reorder`, so a later operation may be durable
//! while an earlier one is not). Honest data modes never commit metadata in the
//! background: only the rules above make it durable.
//!
//! Identity: inodes are keyed by their backing `(st_dev, st_ino)`. A file or symlink
//! whose name is removed (unlink, rename away, rename over) gets a hard link in the
//! journal's attic first, so its inode can be linked back at the cut; a directory
//! that is removed or renamed keeps an `O_PATH` descriptor. Both are released once no
//! durable value and no uncommitted operation refers to them. The attic lives in
//! [`JOURNAL_DIR`] under the backing root, hidden from the mount.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

mod restore;
mod sync;

/// The directory under the backing root that holds the attic and, during the cut,
/// the trash. Hidden from the mount: the root's listing skips it and its name cannot
/// be looked up, created or renamed over.
pub const JOURNAL_DIR: &str = ".plugpull-simfs-journal";

/// Backing identity of an inode: `(st_dev, st_ino)`.
pub type Key = (u64, u64);

/// Which metadata rules the simulated filesystem follows (`--metadata`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Metadata {
    /// POSIX minimum: a file's fsync makes its size durable, a directory's fsync its
    /// entries; nothing else does.
    Posix,
    /// One ordered log (ext4 `data=ordered`, XFS): any durability call destages all
    /// data and makes every metadata operation so far durable.
    Journal,
    /// Metadata goes straight to the backing directory and always survives.
    Passthrough,
}

impl Metadata {
    /// The name as written on the command line and in the ground truth.
    pub fn name(self) -> &'static str {
        match self {
            Metadata::Posix => "posix",
            Metadata::Journal => "journal",
            Metadata::Passthrough => "passthrough",
        }
    }
}

/// What a name points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Backing `(st_dev, st_ino)`.
    pub key: Key,
    /// Whether it is a directory.
    pub dir: bool,
}

/// The kind of a metadata operation, as the ground truth names it (`op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// A new file (`create`, `open(O_CREAT)`).
    Create,
    /// A new directory.
    Mkdir,
    /// A new device node or FIFO.
    Mknod,
    /// A new symbolic link.
    Symlink,
    /// A new hard link.
    Link,
    /// A name removed.
    Unlink,
    /// A directory removed.
    Rmdir,
    /// A name moved (over an existing one, if any).
    Rename,
    /// Two names swapped (`RENAME_EXCHANGE`).
    Exchange,
    /// A size set by `truncate`/`ftruncate`.
    Truncate,
    /// A size grown by a write past the end.
    Extend,
    /// A size grown by `fallocate`.
    Fallocate,
}

/// One name change an operation makes: `(dir, name)` now points at `after`.
#[derive(Clone, Debug)]
pub struct Change {
    /// The directory.
    pub dir: Key,
    /// The name in it.
    pub name: OsString,
    /// What the name pointed at before the operation.
    pub before: Option<Target>,
    /// What it points at after.
    pub after: Option<Target>,
}

/// One recorded metadata operation.
#[derive(Debug)]
struct Op {
    id: u64,
    kind: OpKind,
    path: String,
    to: Option<String>,
    changes: Vec<Change>,
    /// Size change: the file and its new size in bytes.
    resize: Option<(Key, u64)>,
    /// `synced[i]` for change `i`, and the last for the resize: a durability call
    /// that covers it under the metadata rules had returned.
    synced: Vec<bool>,
    /// Background commit time (ms since mount), for data modes that lie about fsync.
    due_ms: Option<u64>,
}

/// The durable value of one name that has changed since it was last durable.
#[derive(Debug)]
struct Pending {
    durable: Option<Target>,
    /// Operations on this name up to this id are durable.
    upto: u64,
    /// The last operation on this name.
    last: u64,
}

/// A directory some operation changed: a descriptor to find it at the cut, and its
/// names whose durable value differs from the live one.
#[derive(Debug)]
struct DirJournal {
    fd: OwnedFd,
    names: BTreeMap<OsString, Pending>,
}

/// A file whose size changed since it was last durable.
#[derive(Debug)]
struct SizePending {
    durable: u64,
    upto: u64,
    last: u64,
    /// The size now, in bytes.
    live: u64,
    /// Bytes of the durable contents that a truncate cut off: written back at the cut
    /// at this offset (clipped to the durable size).
    tail: Option<(u64, Vec<u8>)>,
    fd: OwnedFd,
}

/// The journal. All methods run under the filesystem's lock.
#[derive(Debug)]
pub struct Journal {
    metadata: Metadata,
    /// Whether fsync is honoured (the data mode's `fsync_destages`).
    honours_fsync: bool,
    /// Background commit: `None` for honest data modes; `Some((delay, random))`.
    background: Option<(u64, bool)>,
    rng: StdRng,
    ops: Vec<Op>,
    dirs: HashMap<Key, DirJournal>,
    sizes: HashMap<Key, SizePending>,
    /// Inodes whose name was removed: attic links (files) or descriptors (dirs).
    held: HashMap<Key, Option<OwnedFd>>,
    /// Indices of ops not yet committed in the background.
    uncommitted: Vec<usize>,
    /// Indices of ops with an unsynced change in a directory / resize of a file.
    unsynced_dir: HashMap<Key, Vec<usize>>,
    unsynced_file: HashMap<Key, Vec<usize>>,
    /// `JOURNAL_DIR/attic` under the backing root.
    attic: Option<OwnedFd>,
    root: PathBuf,
}

/// `(st_dev, st_ino)` and whether it is a directory, of `name` in `dirfd` (not
/// following a symlink); `None` if there is no such name.
pub fn target_at(dirfd: RawFd, name: &OsStr) -> io::Result<Option<Target>> {
    let c = CString::new(name.as_bytes())?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, NUL-terminated name, writable struct.
    let rc = unsafe { libc::fstatat(dirfd, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(Target {
        key: (st.st_dev, st.st_ino),
        dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
    }))
}

/// A new `O_PATH` descriptor of what `fd` refers to.
fn dup(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a valid descriptor returns a new one we own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just returned by fcntl, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn attic_name(key: Key) -> CString {
    CString::new(format!("{}-{}", key.0, key.1)).expect("no NUL in digits")
}

impl Journal {
    /// A journal for a mount over `root` (the canonical backing directory): removes a
    /// journal directory a previous mount process left behind and makes a new attic.
    ///
    /// # Errors
    /// The journal directory cannot be removed or created.
    pub fn new(
        root: &Path,
        metadata: Metadata,
        honours_fsync: bool,
        background: Option<(u64, bool)>,
        seed: u64,
    ) -> io::Result<Journal> {
        let dir = root.join(JOURNAL_DIR);
        if dir.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&dir)?;
        }
        let attic = if metadata == Metadata::Passthrough {
            None
        } else {
            std::fs::create_dir_all(dir.join("attic"))?;
            Some(File::open(dir.join("attic"))?.into())
        };
        Ok(Journal {
            metadata,
            honours_fsync,
            background: background.filter(|_| !honours_fsync),
            rng: StdRng::seed_from_u64(seed ^ 0x6d65_7461_6461_7461),
            ops: Vec::new(),
            dirs: HashMap::new(),
            sizes: HashMap::new(),
            held: HashMap::new(),
            uncommitted: Vec::new(),
            unsynced_dir: HashMap::new(),
            unsynced_file: HashMap::new(),
            attic,
            root: root.to_path_buf(),
        })
    }

    /// Whether operations are journaled (not `passthrough`).
    pub fn active(&self) -> bool {
        self.metadata != Metadata::Passthrough
    }

    /// The metadata rules in force.
    pub fn metadata(&self) -> Metadata {
        self.metadata
    }

    /// Operations recorded since mount.
    pub fn ops(&self) -> usize {
        self.ops.len()
    }

    /// Keeps the inode at `name` in `dirfd` restorable before its name is removed:
    /// a hard link in the attic for a file or symlink, a descriptor for a directory.
    /// Call it before an unlink, rmdir, rename away or rename over.
    ///
    /// # Errors
    /// The link or the descriptor could not be made.
    pub fn hold(&mut self, dirfd: RawFd, name: &OsStr, target: Target) -> io::Result<()> {
        if !self.active() || self.held.contains_key(&target.key) {
            return Ok(());
        }
        let c = CString::new(name.as_bytes())?;
        if target.dir {
            // SAFETY: valid descriptor and NUL-terminated name.
            let fd = unsafe {
                libc::openat(
                    dirfd,
                    c.as_ptr(),
                    libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_DIRECTORY,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: just returned by openat.
            self.held
                .insert(target.key, Some(unsafe { OwnedFd::from_raw_fd(fd) }));
            return Ok(());
        }
        let attic = self.attic.as_ref().expect("active journal").as_raw_fd();
        let link = attic_name(target.key);
        // SAFETY: valid descriptors and NUL-terminated names.
        let rc = unsafe { libc::linkat(dirfd, c.as_ptr(), attic, link.as_ptr(), 0) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
        }
        self.held.insert(target.key, None);
        Ok(())
    }

    /// Records a namespace operation whose `changes` have just been applied to the
    /// backing directory. `dir_fds` gives, per change, a descriptor of its directory
    /// (duplicated the first time the directory is journaled). `path`/`to` name it for
    /// the ground truth; `now_ms` is milliseconds since mount.
    ///
    /// # Errors
    /// A directory descriptor could not be duplicated.
    pub fn record(
        &mut self,
        kind: OpKind,
        path: String,
        to: Option<String>,
        changes: Vec<(Change, RawFd)>,
        now_ms: u64,
    ) -> io::Result<()> {
        if !self.active() {
            return Ok(());
        }
        let id = self.ops.len() as u64 + 1;
        let idx = self.ops.len();
        let mut kept = Vec::with_capacity(changes.len());
        let before: Vec<Key> = changes
            .iter()
            .filter_map(|(c, _)| c.before.map(|t| t.key))
            .collect();
        for (c, fd) in changes {
            if let std::collections::hash_map::Entry::Vacant(v) = self.dirs.entry(c.dir) {
                v.insert(DirJournal {
                    fd: dup(fd)?,
                    names: BTreeMap::new(),
                });
            }
            let dj = self.dirs.get_mut(&c.dir).expect("inserted above");
            let p = dj.names.entry(c.name.clone()).or_insert(Pending {
                durable: c.before,
                upto: id - 1,
                last: id,
            });
            p.last = id;
            self.unsynced_dir.entry(c.dir).or_default().push(idx);
            kept.push(c);
        }
        let n = kept.len();
        self.push(
            Op {
                id,
                kind,
                path,
                to,
                changes: kept,
                resize: None,
                synced: vec![false; n],
                due_ms: None,
            },
            now_ms,
        );
        self.release_unreferenced(Some(&before));
        Ok(())
    }

    /// Records a size change of the file `key` from `old` to `new` bytes, before it
    /// is applied to the backing file (`file`, whose bytes a shrink below the durable
    /// size saves). `path_fd` is the file's `O_PATH` descriptor.
    ///
    /// # Errors
    /// The descriptor could not be duplicated or the cut-off bytes read.
    #[allow(clippy::too_many_arguments)]
    pub fn resize(
        &mut self,
        kind: OpKind,
        path: String,
        key: Key,
        path_fd: RawFd,
        file: Option<&File>,
        old: u64,
        new: u64,
        now_ms: u64,
    ) -> io::Result<()> {
        if !self.active() || old == new {
            return Ok(());
        }
        let id = self.ops.len() as u64 + 1;
        let idx = self.ops.len();
        if let std::collections::hash_map::Entry::Vacant(v) = self.sizes.entry(key) {
            v.insert(SizePending {
                durable: old,
                upto: id - 1,
                last: id,
                live: old,
                tail: None,
                fd: dup(path_fd)?,
            });
        }
        let sp = self.sizes.get_mut(&key).expect("inserted above");
        sp.last = id;
        sp.live = new;
        if let Some(f) = file.filter(|_| new < sp.durable) {
            // Save the durable bytes in new..min(durable, backing length) not saved yet.
            let end = sp
                .tail
                .as_ref()
                .map_or(sp.durable, |t| t.0)
                .min(f.metadata()?.len());
            if new < end {
                let mut buf = vec![0u8; (end - new) as usize];
                f.read_exact_at(&mut buf, new)?;
                if let Some((_, old_tail)) = sp.tail.take() {
                    buf.extend_from_slice(&old_tail);
                }
                sp.tail = Some((new, buf));
            }
        }
        self.unsynced_file.entry(key).or_default().push(idx);
        self.push(
            Op {
                id,
                kind,
                path,
                to: None,
                changes: Vec::new(),
                resize: Some((key, new)),
                synced: vec![false],
                due_ms: None,
            },
            now_ms,
        );
        Ok(())
    }

    /// The size of `key` as the journal knows it, if it changed since it was durable.
    pub fn live_size(&self, key: Key) -> Option<u64> {
        self.sizes.get(&key).map(|s| s.live)
    }

    fn push(&mut self, mut op: Op, now_ms: u64) {
        if let Some((delay, random)) = self.background {
            let d = if random {
                self.rng.random_range(0..=2 * delay)
            } else {
                delay
            };
            op.due_ms = Some(now_ms + d);
            self.uncommitted.push(self.ops.len());
        }
        self.ops.push(op);
    }
}
