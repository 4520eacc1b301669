//! The FUSE filesystem: a passthrough over a backing directory whose file writes go
//! through the volatile cache of [`crate::sim`].
//!
//! Inodes: every inode the kernel has looked up holds an `O_PATH` descriptor of its
//! backing file, and is keyed by the backing `(st_dev, st_ino)`; metadata operations
//! use the `*at` system calls relative to those descriptors, so renames and unlinks
//! never leave a stale path behind. The FUSE inode number is allocated by us (root is
//! 1). File data is read and written through one shared read-write descriptor per
//! inode, kept open while the inode has open handles or cached writes — so a file
//! that is unlinked or renamed while it has cached writes still destages to the right
//! backing inode, and the ground truth names it by its current path (or its last path
//! followed by ` (deleted)`).
//!
//! Only file *data* is cached. Every other operation (create, mkdir, unlink, rename,
//! link, symlink, chmod, chown, utimens, truncate, fallocate) goes to the backing
//! directory at once; those that change a name or a size are recorded in the
//! [`crate::journal`] first, which undoes the ones not durable at the cut. Truncate first applies to the cache
//! (writes past the new size are discarded, straddling ones shortened) and then to
//! the backing file, so the two always agree.
//!
//! Concurrency: one mutex guards the cache and the inode and handle tables; backing
//! reads and writes happen under it (they hit the host page cache), only the backing
//! `fsync` of an honest fsync runs outside it. The fsync reply is sent while the lock
//! is held, right after the writes are marked fsynced, so a write is recorded as
//! fsynced exactly when its fsync's success reached the kernel before the cut.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use serde::Serialize;

use crate::journal::{target_at, Change, Journal, OpKind, Target, JOURNAL_DIR};
use crate::sim::{Mode, Sim, SimConfig, Store, TruthEntry};
use crate::truth::{Fate, Truth};

/// How long the kernel may cache attributes and directory entries.
const TTL: Duration = Duration::from_secs(1);

/// At most this many writes are destaged per hold of the lock by the background
/// destager, so foreground requests are not starved.
const DESTAGE_BATCH: usize = 256;

/// What the mount was started with.
#[derive(Clone, Debug)]
pub struct Options {
    /// The backing directory; what it holds after unmount is what survived.
    pub backing: PathBuf,
    /// Where the ground-truth log (JSON lines) is written at the cut.
    pub truth: PathBuf,
    /// The cache's fault model and tunables.
    pub sim: SimConfig,
}

/// Whether the simulated device still has power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Power {
    /// Normal operation.
    On,
    /// The plug was pulled: every operation fails with EIO until unmount.
    Cut,
    /// Clean shutdown done (cache flushed); every operation fails with EIO.
    Stopped,
}

/// One inode the kernel knows about.
#[derive(Debug)]
struct Node {
    /// `O_PATH` descriptor of the backing file.
    path_fd: OwnedFd,
    /// Backing `(st_dev, st_ino)`.
    key: (u64, u64),
    /// Kernel lookup count.
    nlookup: u64,
    /// Open file handles.
    opens: u32,
    /// Read-write (or read-only) descriptor for data, while needed.
    data: Option<Arc<File>>,
}

/// An open file or directory handle.
#[derive(Debug)]
enum Handle {
    File { ino: u64, sync: bool },
    Dir { entries: Vec<DirEnt> },
}

/// One directory entry, snapshotted at opendir.
#[derive(Debug)]
struct DirEnt {
    ino: u64,
    kind: FileType,
    name: OsString,
}

#[derive(Debug)]
struct State {
    sim: Sim,
    power: Power,
    nodes: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    next_ino: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    /// The summary line written at the cut, returned to later `cut` requests.
    cut_summary: Option<String>,
    /// fsync/fdatasync requests (including O_SYNC/O_DSYNC writes) answered.
    fsyncs: u64,
    /// Metadata held as volatile as data (see [`crate::journal`]).
    journal: Journal,
}

/// Counters for the `stats` control command.
#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// Mode name.
    pub mode: &'static str,
    /// The seed of the run.
    pub seed: u64,
    /// "on", "cut" or "stopped".
    pub power: &'static str,
    /// Writes accepted since mount.
    pub writes_total: u64,
    /// Writes cached now.
    pub cached_writes: usize,
    /// Bytes cached now.
    pub cached_bytes: u64,
    /// Writes misdirected since mount.
    pub misdirected: usize,
    /// fsync/fdatasync requests answered with success (O_SYNC/O_DSYNC writes count).
    pub fsyncs: u64,
}

/// State shared by the FUSE threads, the destager and the control socket.
#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    start: Instant,
    backing: PathBuf,
    truth: PathBuf,
    mode: Mode,
    seed: u64,
    flush_delay: Duration,
    /// How long a flush waits before its work ([`SimConfig::flush_latency_ms`]).
    flush_latency: Duration,
    statfs_zero: bool,
    /// Every `fallocate` fails with `EOPNOTSUPP` ([`SimConfig::no_fallocate`]).
    no_fallocate: bool,
}

/// The [`Filesystem`] handed to fuser; a thin handle on [`Shared`].
#[derive(Debug)]
pub struct SimFs {
    shared: Arc<Shared>,
}

/// The backing store as seen by the cache: each inode's data descriptor.
struct NodeStore<'a> {
    nodes: &'a mut HashMap<u64, Node>,
}

impl Store for NodeStore<'_> {
    fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        data_file(self.nodes, ino)?.write_all_at(data, offset)
    }

    fn len(&mut self, ino: u64) -> io::Result<u64> {
        Ok(data_file(self.nodes, ino)?.metadata()?.len())
    }
}

/// The data descriptor of `ino`, opened (read-write, else read-only) if needed.
fn data_file(nodes: &mut HashMap<u64, Node>, ino: u64) -> io::Result<Arc<File>> {
    let node = nodes
        .get_mut(&ino)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESTALE))?;
    if let Some(f) = &node.data {
        return Ok(f.clone());
    }
    let path = proc_path(node.path_fd.as_raw_fd());
    let file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EROFS | libc::ETXTBSY | libc::EISDIR)
            ) =>
        {
            File::open(&path)?
        }
        Err(e) => return Err(e),
    };
    let file = Arc::new(file);
    node.data = Some(file.clone());
    Ok(file)
}

fn proc_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

fn cpath(p: &Path) -> io::Result<CString> {
    cname(p.as_os_str())
}

fn cname(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn errno(e: io::Error) -> Errno {
    match e.raw_os_error() {
        Some(n) if n > 0 => Errno::from_i32(n),
        _ => Errno::EIO,
    }
}

/// Whether `name` in `parent` is the journal's directory, which the mount hides.
fn hidden(parent: u64, name: &OsStr) -> bool {
    parent == 1 && name == JOURNAL_DIR
}

fn stat_fd(fd: RawFd) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, NUL-terminated empty path, `st` is writable.
    cvt(unsafe {
        libc::fstatat(
            fd,
            c"".as_ptr(),
            &mut st,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

fn open_path_at(dirfd: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    let c = cname(name)?;
    // SAFETY: valid descriptor and NUL-terminated name.
    let fd = cvt(unsafe {
        libc::openat(
            dirfd,
            c.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    })?;
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

/// Attributes of `ino` from its backing stat, with the size raised to cover cached
/// writes that extend the file.
fn attr_of(ino: u64, st: &libc::stat, cached_end: Option<u64>) -> FileAttr {
    let size = (st.st_size as u64).max(cached_end.unwrap_or(0));
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: (st.st_blocks as u64).max(size.div_ceil(512)),
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: kind_of(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as _,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    }
}

impl State {
    fn node(&self, ino: u64) -> Result<&Node, Errno> {
        self.nodes.get(&ino).ok_or(Errno::from_i32(libc::ESTALE))
    }

    fn fd(&self, ino: u64) -> Result<RawFd, Errno> {
        Ok(self.node(ino)?.path_fd.as_raw_fd())
    }

    fn live(&self) -> Result<(), Errno> {
        if self.power == Power::On {
            Ok(())
        } else {
            Err(Errno::EIO)
        }
    }

    fn split(&mut self) -> (&mut Sim, NodeStore<'_>) {
        (
            &mut self.sim,
            NodeStore {
                nodes: &mut self.nodes,
            },
        )
    }

    /// Looks `name` up in `parent`, adding one kernel reference to its inode.
    fn lookup(&mut self, parent: u64, name: &OsStr) -> io::Result<FileAttr> {
        let pfd = self
            .fd(parent)
            .map_err(|_| io::Error::from_raw_os_error(libc::ESTALE))?;
        let fd = open_path_at(pfd, name)?;
        let st = stat_fd(fd.as_raw_fd())?;
        let key = (st.st_dev, st.st_ino);
        let ino = match self.by_key.get(&key) {
            Some(&ino) => {
                self.nodes.get_mut(&ino).expect("indexed node").nlookup += 1;
                ino
            }
            None => {
                let ino = self.next_ino;
                self.next_ino += 1;
                self.by_key.insert(key, ino);
                self.nodes.insert(
                    ino,
                    Node {
                        path_fd: fd,
                        key,
                        nlookup: 1,
                        opens: 0,
                        data: None,
                    },
                );
                ino
            }
        };
        Ok(attr_of(ino, &st, self.sim.cached_end(ino)))
    }

    fn getattr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let st = stat_fd(self.fd(ino)?).map_err(errno)?;
        Ok(attr_of(ino, &st, self.sim.cached_end(ino)))
    }

    /// Forgets an inode nobody references any more.
    fn maybe_drop(&mut self, ino: u64) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        if node.opens == 0 && !self.sim.has_cached(ino) {
            node.data = None;
            if node.nlookup == 0 && ino != 1 {
                let key = node.key;
                self.nodes.remove(&ino);
                self.by_key.remove(&key);
            }
        }
    }

    /// The owner a new entry in `parent` gets: the caller, except that a setgid
    /// parent directory's group is kept (the backing filesystem already applied it).
    fn new_owner(&self, req: &Request, parent: u64) -> io::Result<(u32, u32)> {
        let st = stat_fd(
            self.fd(parent)
                .map_err(|_| io::Error::from_raw_os_error(libc::ESTALE))?,
        )?;
        let gid = if st.st_mode & libc::S_ISGID != 0 {
            u32::MAX
        } else {
            req.gid()
        };
        Ok((req.uid(), gid))
    }

    /// Backing `(st_dev, st_ino)` of a known inode.
    fn key(&self, ino: u64) -> Result<(u64, u64), Errno> {
        Ok(self.node(ino)?.key)
    }

    /// The path of `name` in `parent` relative to the backing root.
    fn rel_name(&self, parent: u64, name: &OsStr, backing: &Path) -> String {
        let dir = self.rel_path(parent, backing);
        let name = name.to_string_lossy();
        if dir.is_empty() {
            name.into_owned()
        } else {
            format!("{dir}/{name}")
        }
    }

    /// The size of `ino` now, in bytes: the journal's, else the backing file's
    /// length or the end of its cached writes, whichever is larger.
    fn size_now(&self, ino: u64) -> Result<u64, Errno> {
        let node = self.node(ino)?;
        if let Some(size) = self.journal.live_size(node.key) {
            return Ok(size);
        }
        let st = stat_fd(node.path_fd.as_raw_fd()).map_err(errno)?;
        Ok((st.st_size as u64).max(self.sim.cached_end(ino).unwrap_or(0)))
    }

    /// Records a size change of `ino` from `old` to `new` bytes in the journal,
    /// before the backing file changes.
    fn resize(
        &mut self,
        kind: OpKind,
        ino: u64,
        old: u64,
        new: u64,
        shared: &Shared,
    ) -> Result<(), Errno> {
        if !self.journal.active() || old == new {
            return Ok(());
        }
        let path = self.rel_path(ino, &shared.backing);
        let node = self.node(ino)?;
        let (key, fd) = (node.key, node.path_fd.as_raw_fd());
        let file = if new < old {
            Some(data_file(&mut self.nodes, ino).map_err(errno)?)
        } else {
            None
        };
        let now = shared.now_ms();
        self.journal
            .resize(kind, path, key, fd, file.as_deref(), old, new, now)
            .map_err(|e| {
                tracing::warn!("metadata journal: {e}");
                Errno::EIO
            })
    }

    /// Records namespace `changes` (each with its directory's inode) in the journal.
    fn record(
        &mut self,
        kind: OpKind,
        path: String,
        to: Option<String>,
        changes: Vec<(Change, u64)>,
        shared: &Shared,
    ) -> Result<(), Errno> {
        if !self.journal.active() {
            return Ok(());
        }
        let mut with_fds = Vec::with_capacity(changes.len());
        for (c, dir_ino) in changes {
            with_fds.push((c, self.fd(dir_ino)?));
        }
        let now = shared.now_ms();
        self.journal
            .record(kind, path, to, with_fds, now)
            .map_err(|e| {
                tracing::warn!("metadata journal: {e}");
                Errno::EIO
            })
    }

    /// A new name `name` in `parent` now pointing at what it names: records `kind`.
    fn record_new(
        &mut self,
        kind: OpKind,
        parent: u64,
        name: &OsStr,
        shared: &Shared,
    ) -> Result<(), Errno> {
        if !self.journal.active() {
            return Ok(());
        }
        let pfd = self.fd(parent)?;
        let after = target_at(pfd, name).map_err(errno)?;
        let change = Change {
            dir: self.key(parent)?,
            name: name.to_os_string(),
            before: None,
            after,
        };
        let path = self.rel_name(parent, name, &shared.backing);
        self.record(kind, path, None, vec![(change, parent)], shared)
    }

    /// What `name` in `parent` names now, kept restorable before the name goes.
    fn hold(&mut self, parent: u64, name: &OsStr) -> Result<Option<Target>, Errno> {
        if !self.journal.active() {
            return Ok(None);
        }
        let pfd = self.fd(parent)?;
        let t = target_at(pfd, name).map_err(errno)?;
        if let Some(t) = t {
            self.journal.hold(pfd, name, t).map_err(|e| {
                tracing::warn!("metadata journal: {e}");
                Errno::EIO
            })?;
        }
        Ok(t)
    }

    /// The path of `ino` relative to the backing root, for the ground truth.
    fn rel_path(&self, ino: u64, backing: &Path) -> String {
        let Some(node) = self.nodes.get(&ino) else {
            return format!("<inode {ino}>");
        };
        match std::fs::read_link(proc_path(node.path_fd.as_raw_fd())) {
            Ok(p) => match p.strip_prefix(backing) {
                Ok(rel) => rel.to_string_lossy().into_owned(),
                Err(_) => p.to_string_lossy().into_owned(),
            },
            Err(_) => format!("<inode {ino}>"),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Pulls the plug. Drops (or, in `torn` mode, partly keeps) every cached write
    /// as [`Sim::cut`] describes, makes every further operation on the mount fail
    /// with EIO, and writes and fsyncs the ground-truth log before returning. A
    /// second cut changes nothing and returns the first one's summary.
    ///
    /// # Errors
    /// The mount was already shut down cleanly, or the ground truth could not be
    /// written (the cut itself has happened regardless).
    pub fn cut(&self) -> io::Result<String> {
        self.cut_locked(self.lock())
    }

    /// Cuts at the first moment the cache holds a write the cut could tear
    /// ([`Sim::can_tear`]), looking every millisecond for at most `wait`; the look and
    /// the cut hold the state's lock together, so that write is in the cut. Then as
    /// [`Shared::cut`].
    ///
    /// # Errors
    /// The mount is not in `torn` mode, no such write was cached within `wait`
    /// (nothing is cut then), or as
    /// [`Shared::cut`].
    pub fn cut_when_tearable(&self, wait: Duration) -> io::Result<String> {
        if self.mode != Mode::Torn {
            return Err(io::Error::other(format!(
                "waiting for a write that can tear needs --mode torn (this mount is {})",
                self.mode.name()
            )));
        }
        let deadline = Instant::now() + wait;
        loop {
            let st = self.lock();
            if st.power != Power::On || st.sim.can_tear() {
                return self.cut_locked(st);
            }
            drop(st);
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "no cached write could tear within {} s (torn mode, a write longer than the atomic unit): not cut",
                    wait.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn cut_locked(&self, mut st: MutexGuard<'_, State>) -> io::Result<String> {
        match st.power {
            Power::Cut => return Ok(st.cut_summary.clone().unwrap_or_default()),
            Power::Stopped => return Err(io::Error::other("already unmounted cleanly")),
            Power::On => {}
        }
        st.power = Power::Cut;
        self.wake.notify_all();
        let (sim, mut store) = st.split();
        let outcomes = sim.cut(&mut store);
        // Torn prefixes reached the backing files: make them durable on the host too.
        for o in &outcomes {
            if matches!(o.fate, Fate::Torn | Fate::Destaged) {
                if let Some(Some(f)) = st.nodes.get(&o.ino).map(|n| n.data.as_ref()) {
                    let _ = f.sync_data();
                }
            }
        }
        let truth = self.truth(&st, &outcomes, true);
        let meta = st.journal.cut().inspect_err(|e| {
            tracing::error!("metadata restore at the cut failed: {e}");
        })?;
        let truth = truth.with_meta(st.journal.metadata().name(), meta);
        let summary = truth.summary_line()?;
        st.cut_summary = Some(summary.clone());
        truth.write_durably(&self.truth)?;
        tracing::info!("power cut: {summary}");
        Ok(summary)
    }

    /// Clean shutdown (unmount without a cut): destages everything still cached,
    /// fsyncs the backing files, and — if any write was misdirected — writes the
    /// ground truth with a final line whose `cut` is false. Afterwards every
    /// operation fails with EIO. Does nothing after a cut or a previous shutdown.
    ///
    /// # Errors
    /// A backing write or the ground truth failed.
    pub fn shutdown(&self) -> io::Result<()> {
        let mut st = self.lock();
        if st.power != Power::On {
            return Ok(());
        }
        st.power = Power::Stopped;
        self.wake.notify_all();
        let (sim, mut store) = st.split();
        let flushed = sim.flush_all(&mut store);
        for node in st.nodes.values() {
            if let Some(f) = &node.data {
                let _ = f.sync_all();
            }
        }
        st.journal.discard();
        if !st.sim.misdirected().is_empty() {
            let truth = self.truth(&st, st.sim.misdirected(), false);
            truth.write_durably(&self.truth)?;
        }
        tracing::info!("clean shutdown, {} writes", st.sim.writes_total());
        flushed
    }

    /// The ground truth of `entries` (ordered by write_id), each named by its file's
    /// current path; `cut` is false for a clean shutdown.
    fn truth(&self, st: &State, entries: &[TruthEntry], cut: bool) -> Truth {
        let writes = entries
            .iter()
            .map(|e| e.named(st.rel_path(e.ino, &self.backing)))
            .collect();
        Truth::new(
            writes,
            cut,
            self.mode.name(),
            self.seed,
            st.sim.writes_total(),
            self.truth.clone(),
        )
    }

    /// Counters for the `stats` control command.
    pub fn stats(&self) -> Stats {
        let st = self.lock();
        Stats {
            mode: self.mode.name(),
            seed: self.seed,
            power: match st.power {
                Power::On => "on",
                Power::Cut => "cut",
                Power::Stopped => "stopped",
            },
            writes_total: st.sim.writes_total(),
            cached_writes: st.sim.cached_writes(),
            cached_bytes: st.sim.cached_bytes(),
            misdirected: st.sim.misdirected().len(),
            fsyncs: st.fsyncs,
        }
    }

    /// The background destager: writes out cached writes whose delay has passed,
    /// until the cut or shutdown. Run it on its own thread.
    pub fn run_destager(&self) {
        let mut st = self.lock();
        loop {
            if st.power != Power::On {
                return;
            }
            let now = self.now_ms();
            let (sim, mut store) = st.split();
            let n = match sim.destage_due(now, DESTAGE_BATCH, &mut store) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("background destage failed: {e}");
                    0
                }
            };
            st.journal.commit_due(now);
            let wait = if n == DESTAGE_BATCH {
                Duration::from_millis(0)
            } else {
                let next = [st.sim.next_due_ms(), st.journal.next_due_ms()]
                    .into_iter()
                    .flatten()
                    .min()
                    .map_or(50, |d| d.saturating_sub(now));
                Duration::from_millis(next.clamp(1, 50))
            };
            st = if wait.is_zero() {
                drop(st);
                std::thread::yield_now();
                self.lock()
            } else {
                self.wake
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            };
        }
    }

    /// fsync/fdatasync of `ino`. Honest modes destage the inode's cached writes and
    /// fsync the backing file; `lying`/`reorder` do neither. On success the inode's
    /// writes made before the call are marked fsynced and the lock is returned still
    /// held, so the caller replies before a cut can intervene.
    fn sync_ino(&self, ino: u64, datasync: bool) -> Result<MutexGuard<'_, State>, Errno> {
        if !self.flush_latency.is_zero() {
            // A flush that takes time: what it covers is still only cached meanwhile.
            std::thread::sleep(self.flush_latency);
        }
        let mut st = self.lock();
        st.live()?;
        let upto = st.sim.next_write_id();
        let key = st.key(ino)?;
        if st.journal.sync_destages_all() {
            // One ordered log: the commit writes out every file's cached data first.
            let (sim, mut store) = st.split();
            sim.flush_all(&mut store).map_err(|e| {
                tracing::warn!("destage of every cached write failed: {e}");
                Errno::EIO
            })?;
        }
        if self.mode.fsync_destages() {
            let (sim, mut store) = st.split();
            sim.destage_ino(ino, &mut store).map_err(|e| {
                tracing::warn!("destage of inode {ino} failed: {e}");
                Errno::EIO
            })?;
            let file = data_file(&mut st.nodes, ino).map_err(errno)?;
            drop(st);
            let synced = if datasync {
                file.sync_data()
            } else {
                file.sync_all()
            };
            synced.map_err(|e| {
                tracing::warn!("backing fsync of inode {ino} failed: {e}");
                Errno::EIO
            })?;
            st = self.lock();
            st.live()?;
        }
        if !self.flush_delay.is_zero() {
            // A slow flush: the call returns late; a cut meanwhile makes it fail.
            drop(st);
            std::thread::sleep(self.flush_delay);
            st = self.lock();
            st.live()?;
        }
        st.sim.mark_fsynced(ino, upto);
        st.journal.file_synced(key);
        st.fsyncs += 1;
        Ok(st)
    }
}

impl SimFs {
    /// A filesystem over `options.backing`, and the state the destager and the
    /// control socket need.
    ///
    /// # Errors
    /// The backing directory cannot be opened.
    pub fn new(options: Options) -> io::Result<(SimFs, Arc<Shared>)> {
        let backing = options.backing.canonicalize()?;
        let root = open_path_at(libc::AT_FDCWD, backing.as_os_str())?;
        let st = stat_fd(root.as_raw_fd())?;
        if kind_of(st.st_mode) != FileType::Directory {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let key = (st.st_dev, st.st_ino);
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                path_fd: root,
                key,
                nlookup: 1,
                opens: 0,
                data: None,
            },
        );
        let sim = &options.sim;
        let background = match sim.mode {
            Mode::Reorder => Some((sim.destage_delay_ms, true)),
            _ => Some((sim.destage_delay_ms, false)),
        };
        let journal = Journal::new(
            &backing,
            sim.metadata,
            sim.mode.fsync_destages(),
            background,
            sim.seed,
        )?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                journal,
                sim: Sim::new(options.sim.clone()),
                power: Power::On,
                nodes,
                by_key: HashMap::from([(key, 1)]),
                next_ino: 2,
                handles: HashMap::new(),
                next_fh: 1,
                cut_summary: None,
                fsyncs: 0,
            }),
            wake: Condvar::new(),
            start: Instant::now(),
            backing,
            truth: options.truth,
            mode: options.sim.mode,
            seed: options.sim.seed,
            flush_delay: Duration::from_millis(options.sim.flush_delay_ms),
            flush_latency: Duration::from_millis(options.sim.flush_latency_ms),
            statfs_zero: options.sim.statfs_zero,
            no_fallocate: options.sim.no_fallocate,
        });
        Ok((
            SimFs {
                shared: shared.clone(),
            },
            shared,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Creates an entry with `make` (given the parent's descriptor), hands it to the
    /// caller's uid/gid, and looks it up.
    fn make_entry(
        &self,
        req: &Request,
        (parent, name, kind): (INodeNo, &OsStr, OpKind),
        make: impl FnOnce(RawFd, &CString) -> io::Result<()>,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            if hidden(parent.0, name) {
                return Err(Errno::EACCES);
            }
            let pfd = st.fd(parent.0)?;
            let c = cname(name).map_err(errno)?;
            let (uid, gid) = st.new_owner(req, parent.0).map_err(errno)?;
            make(pfd, &c).map_err(errno)?;
            // SAFETY: valid descriptor and NUL-terminated name.
            cvt(unsafe { libc::fchownat(pfd, c.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
                .map_err(errno)?;
            st.record_new(kind, parent.0, name, &self.shared)?;
            st.lookup(parent.0, name).map_err(errno)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn new_handle(st: &mut State, handle: Handle) -> u64 {
        let fh = st.next_fh;
        st.next_fh += 1;
        st.handles.insert(fh, handle);
        fh
    }
}

impl Filesystem for SimFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> io::Result<()> {
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.shared.shutdown() {
            tracing::error!("clean shutdown failed: {e}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.lock();
        if let Err(e) = st.live() {
            return reply.error(e);
        }
        if hidden(parent.0, name) {
            return reply.error(Errno::ENOENT);
        }
        match st.lookup(parent.0, name) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut st = self.lock();
        if let Some(node) = st.nodes.get_mut(&ino.0) {
            node.nlookup = node.nlookup.saturating_sub(nlookup);
        }
        st.maybe_drop(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.lock();
        match st.live().and_then(|()| st.getattr(ino.0)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            let fd = st.fd(ino.0)?;
            let is_link = kind_of(stat_fd(fd).map_err(errno)?.st_mode) == FileType::Symlink;
            let path = cpath(&proc_path(fd)).map_err(errno)?;
            if let Some(mode) = mode {
                if !is_link {
                    // SAFETY: NUL-terminated path.
                    cvt(unsafe { libc::chmod(path.as_ptr(), mode & 0o7777) }).map_err(errno)?;
                }
            }
            if uid.is_some() || gid.is_some() {
                // SAFETY: valid descriptor, empty NUL-terminated path.
                cvt(unsafe {
                    libc::fchownat(
                        fd,
                        c"".as_ptr(),
                        uid.unwrap_or(u32::MAX),
                        gid.unwrap_or(u32::MAX),
                        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                    )
                })
                .map_err(errno)?;
            }
            if let Some(size) = size {
                let old = st.size_now(ino.0)?;
                st.resize(OpKind::Truncate, ino.0, old, size, &self.shared)?;
                st.sim.truncate(ino.0, size);
                let file = data_file(&mut st.nodes, ino.0).map_err(errno)?;
                file.set_len(size).map_err(errno)?;
                st.maybe_drop(ino.0);
            }
            if (atime.is_some() || mtime.is_some()) && !is_link {
                let times = [timespec(atime), timespec(mtime)];
                // SAFETY: NUL-terminated path, two timespecs.
                cvt(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })
                    .map_err(errno)?;
            }
            st.getattr(ino.0)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let st = self.lock();
        let result = (|| {
            st.live()?;
            let fd = st.fd(ino.0)?;
            let mut buf = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: valid descriptor, empty path, buffer of the given length.
            let n =
                unsafe { libc::readlinkat(fd, c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            buf.truncate(n as usize);
            Ok(buf)
        })();
        match result {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.make_entry(
            req,
            (parent, name, OpKind::Mknod),
            |pfd, c| {
                // SAFETY: valid descriptor and NUL-terminated name.
                cvt(unsafe { libc::mknodat(pfd, c.as_ptr(), mode, libc::dev_t::from(rdev)) })
                    .map(drop)
            },
            reply,
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.make_entry(
            req,
            (parent, name, OpKind::Mkdir),
            |pfd, c| {
                // SAFETY: valid descriptor and NUL-terminated name.
                cvt(unsafe { libc::mkdirat(pfd, c.as_ptr(), mode & 0o7777) }).map(drop)
            },
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, 0, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, libc::AT_REMOVEDIR, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = match cpath(target) {
            Ok(t) => t,
            Err(e) => return reply.error(errno(e)),
        };
        self.make_entry(
            req,
            (parent, link_name, OpKind::Symlink),
            |pfd, c| {
                // SAFETY: NUL-terminated strings, valid descriptor.
                cvt(unsafe { libc::symlinkat(target.as_ptr(), pfd, c.as_ptr()) }).map(drop)
            },
            reply,
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            if hidden(parent.0, name) || hidden(newparent.0, newname) {
                return Err(Errno::EACCES);
            }
            let from = st.fd(parent.0)?;
            let to = st.fd(newparent.0)?;
            let a = cname(name).map_err(errno)?;
            let b = cname(newname).map_err(errno)?;
            let same = parent == newparent && name == newname;
            let (src, dst) = if same {
                (None, None)
            } else {
                (st.hold(parent.0, name)?, st.hold(newparent.0, newname)?)
            };
            // renameat2 by its system call: musl's C library has no wrapper for it.
            // SAFETY: valid descriptors and NUL-terminated names.
            let renamed = cvt(unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    from,
                    a.as_ptr(),
                    to,
                    b.as_ptr(),
                    flags.bits(),
                )
            } as libc::c_int);
            if let Err(e) = renamed {
                let keys: Vec<_> = [src, dst].into_iter().flatten().map(|t| t.key).collect();
                st.journal.release_unreferenced(Some(&keys));
                return Err(errno(e));
            }
            if same || src.is_none() {
                return Ok(());
            }
            let exchange = flags.bits() & libc::RENAME_EXCHANGE != 0;
            let change = |dir: u64, n: &OsStr, before, after| -> Result<(Change, u64), Errno> {
                Ok((
                    Change {
                        dir: st.key(dir)?,
                        name: n.to_os_string(),
                        before,
                        after,
                    },
                    dir,
                ))
            };
            let changes = vec![
                change(parent.0, name, src, if exchange { dst } else { None })?,
                change(newparent.0, newname, dst, src)?,
            ];
            let path = st.rel_name(parent.0, name, &self.shared.backing);
            let to_path = st.rel_name(newparent.0, newname, &self.shared.backing);
            let kind = if exchange {
                OpKind::Exchange
            } else {
                OpKind::Rename
            };
            st.record(kind, path, Some(to_path), changes, &self.shared)
        })();
        match result {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            let fd = st.fd(ino.0)?;
            let to = st.fd(newparent.0)?;
            let c = cname(newname).map_err(errno)?;
            if hidden(newparent.0, newname) {
                return Err(Errno::EACCES);
            }
            // SAFETY: valid descriptors, NUL-terminated names; we run as root, which
            // AT_EMPTY_PATH requires.
            cvt(unsafe { libc::linkat(fd, c"".as_ptr(), to, c.as_ptr(), libc::AT_EMPTY_PATH) })
                .map_err(errno)?;
            if st.journal.active() {
                let path = st.rel_path(ino.0, &self.shared.backing);
                let after = target_at(to, newname).map_err(errno)?;
                let change = Change {
                    dir: st.key(newparent.0)?,
                    name: newname.to_os_string(),
                    before: None,
                    after,
                };
                let to_path = st.rel_name(newparent.0, newname, &self.shared.backing);
                st.record(
                    OpKind::Link,
                    path,
                    Some(to_path),
                    vec![(change, newparent.0)],
                    &self.shared,
                )?;
            }
            st.lookup(newparent.0, newname).map_err(errno)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            data_file(&mut st.nodes, ino.0).map_err(errno)?;
            st.nodes.get_mut(&ino.0).expect("opened above").opens += 1;
            let sync = flags.0 & libc::O_DSYNC != 0;
            Ok(Self::new_handle(&mut st, Handle::File { ino: ino.0, sync }))
        })();
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            let file = data_file(&mut st.nodes, ino.0).map_err(errno)?;
            let mut buf = vec![0u8; size as usize];
            let mut got = 0;
            while got < buf.len() {
                match file.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            let end = (offset + got as u64).max(st.sim.cached_end(ino.0).unwrap_or(0));
            let len = end.saturating_sub(offset).min(u64::from(size)) as usize;
            buf.truncate(len);
            st.sim.overlay(ino.0, offset, &mut buf);
            Ok(buf)
        })();
        match result {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            st.node(ino.0)?;
            if st.journal.active() {
                let (old, end) = (st.size_now(ino.0)?, offset + data.len() as u64);
                if end > old {
                    st.resize(OpKind::Extend, ino.0, old, end, &self.shared)?;
                }
            }
            let now = self.shared.now_ms();
            st.sim.write(ino.0, offset, data, now);
            let (sim, mut store) = st.split();
            sim.make_room(&mut store).map_err(|e| {
                tracing::warn!("destage under cache pressure failed: {e}");
                Errno::EIO
            })?;
            let handle_sync =
                matches!(st.handles.get(&fh.0), Some(Handle::File { sync: true, .. }));
            Ok(handle_sync || flags.0 & libc::O_DSYNC != 0)
        })();
        drop(st);
        match result {
            // An O_SYNC/O_DSYNC write is a write followed by fdatasync.
            Ok(true) => match self.shared.sync_ino(ino.0, true) {
                Ok(_held) => reply.written(data.len() as u32),
                Err(e) => reply.error(e),
            },
            Ok(false) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        match self.lock().live() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        if let Some(Handle::File { ino, .. }) = st.handles.remove(&fh.0) {
            if let Some(node) = st.nodes.get_mut(&ino) {
                node.opens = node.opens.saturating_sub(1);
            }
            st.maybe_drop(ino);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.shared.sync_ino(ino.0, datasync) {
            Ok(_held) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            let fd = st.fd(ino.0)?;
            let mut entries = vec![
                DirEnt {
                    ino: ino.0,
                    kind: FileType::Directory,
                    name: ".".into(),
                },
                DirEnt {
                    ino: ino.0,
                    kind: FileType::Directory,
                    name: "..".into(),
                },
            ];
            for e in std::fs::read_dir(proc_path(fd)).map_err(errno)? {
                let e = e.map_err(errno)?;
                if hidden(ino.0, &e.file_name()) {
                    continue;
                }
                let kind = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                entries.push(DirEnt {
                    ino: e.ino(),
                    kind,
                    name: e.file_name(),
                });
            }
            Ok(Self::new_handle(&mut st, Handle::Dir { entries }))
        })();
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let st = self.lock();
        if let Err(e) = st.live() {
            return reply.error(e);
        }
        let Some(Handle::Dir { entries }) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            let fd = st.fd(ino.0)?;
            let key = st.key(ino.0)?;
            if st.journal.sync_destages_all() {
                let (sim, mut store) = st.split();
                sim.flush_all(&mut store).map_err(errno)?;
            }
            File::open(proc_path(fd))
                .and_then(|d| d.sync_all())
                .map_err(errno)?;
            st.journal.dir_synced(key);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let st = self.lock();
        let result = (|| {
            st.live()?;
            let path = cpath(&proc_path(st.fd(1)?)).map_err(errno)?;
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            // SAFETY: NUL-terminated path, writable struct.
            cvt(unsafe { libc::statvfs(path.as_ptr(), &mut s) }).map_err(errno)?;
            Ok(s)
        })();
        match result {
            Ok(_) if self.shared.statfs_zero => reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096),
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With `default_permissions` the kernel checks permissions itself; this is
        // only reached for F_OK-style probes.
        let st = self.lock();
        match st.live().and_then(|()| st.fd(ino.0)) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            if hidden(parent.0, name) {
                return Err(Errno::EACCES);
            }
            let pfd = st.fd(parent.0)?;
            let c = cname(name).map_err(errno)?;
            let (uid, gid) = st.new_owner(req, parent.0).map_err(errno)?;
            let base = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            // SAFETY: valid descriptor and NUL-terminated name.
            let created = cvt(unsafe {
                libc::openat(
                    pfd,
                    c.as_ptr(),
                    base | libc::O_CREAT | libc::O_EXCL,
                    mode & 0o7777,
                )
            });
            let (fd, fresh) = match created {
                Ok(fd) => (fd, true),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && flags & libc::O_EXCL == 0 => {
                    // SAFETY: as above.
                    (
                        cvt(unsafe { libc::openat(pfd, c.as_ptr(), base) }).map_err(errno)?,
                        false,
                    )
                }
                Err(e) => return Err(errno(e)),
            };
            // SAFETY: `fd` was just returned by openat and is owned by nobody else.
            let file = unsafe { File::from_raw_fd(fd) };
            if fresh {
                // SAFETY: valid descriptor.
                cvt(unsafe { libc::fchown(fd, uid, gid) }).map_err(errno)?;
                st.record_new(OpKind::Create, parent.0, name, &self.shared)?;
            }
            let attr = st.lookup(parent.0, name).map_err(errno)?;
            let ino = attr.ino.0;
            let node = st.nodes.get_mut(&ino).expect("looked up");
            if node.data.is_none() {
                node.data = Some(Arc::new(file));
            }
            node.opens += 1;
            let sync = flags & libc::O_DSYNC != 0;
            let fh = Self::new_handle(&mut st, Handle::File { ino, sync });
            Ok((attr, fh))
        })();
        match result {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            if self.shared.no_fallocate {
                return Err(Errno::from_i32(libc::EOPNOTSUPP));
            }
            // Only allocation, which leaves contents alone; punching or zeroing
            // ranges would have to reconcile with the cache.
            if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
                return Err(Errno::from_i32(libc::EOPNOTSUPP));
            }
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                let old = st.size_now(ino.0)?;
                let new = old.max(offset + length);
                st.resize(OpKind::Fallocate, ino.0, old, new, &self.shared)?;
            }
            let file = data_file(&mut st.nodes, ino.0).map_err(errno)?;
            // SAFETY: valid descriptor.
            cvt(unsafe {
                libc::fallocate(
                    file.as_raw_fd(),
                    mode,
                    offset as libc::off_t,
                    length as libc::off_t,
                )
            })
            .map_err(errno)
        })();
        match result {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl SimFs {
    fn remove(&self, parent: INodeNo, name: &OsStr, flags: libc::c_int, reply: ReplyEmpty) {
        let mut st = self.lock();
        let result = (|| {
            st.live()?;
            if hidden(parent.0, name) {
                return Err(Errno::ENOENT);
            }
            let pfd = st.fd(parent.0)?;
            let c = cname(name).map_err(errno)?;
            let before = st.hold(parent.0, name)?;
            // SAFETY: valid descriptor and NUL-terminated name.
            if let Err(e) = cvt(unsafe { libc::unlinkat(pfd, c.as_ptr(), flags) }) {
                let keys: Vec<_> = before.iter().map(|t| t.key).collect();
                st.journal.release_unreferenced(Some(&keys));
                return Err(errno(e));
            }
            if before.is_none() {
                return Ok(());
            }
            let change = Change {
                dir: st.key(parent.0)?,
                name: name.to_os_string(),
                before,
                after: None,
            };
            let path = st.rel_name(parent.0, name, &self.shared.backing);
            let kind = if flags & libc::AT_REMOVEDIR != 0 {
                OpKind::Rmdir
            } else {
                OpKind::Unlink
            };
            st.record(kind, path, None, vec![(change, parent.0)], &self.shared)
        })();
        match result {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
