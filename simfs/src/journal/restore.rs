//! The cut, for metadata: every journaled name and size goes back to its durable
//! value in the backing directory.
//!
//! Sizes first: each file whose size changed since it was durable is truncated or
//! extended to its durable size, and bytes a truncate cut off are written back.
//! Then names, directory by directory, each found by its descriptor (so a directory
//! moved meanwhile is still found): a name whose live inode is not its durable one
//! is moved to the trash, and the durable inode is put back — a file from the
//! attic, a directory by renaming it back from wherever it is now, or, if it was
//! removed, by making it again with its old mode and owner. A directory whose own
//! place is not known yet (removed, its parent not restored yet) waits for a later
//! pass; one never restored is not reachable, and neither are its entries. Last,
//! the backing filesystem is synced and the journal directory removed.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{attic_name, Journal, Key, Target, JOURNAL_DIR};
use crate::truth::TruthMeta;

fn proc_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, writable struct.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The current path of the directory behind `fd`, or `None` if it was removed.
fn path_of(fd: RawFd) -> Option<PathBuf> {
    if fstat(fd).ok()?.st_nlink == 0 {
        return None;
    }
    std::fs::read_link(proc_path(fd)).ok()
}

fn cstr(p: &Path) -> io::Result<CString> {
    Ok(CString::new(p.as_os_str().as_bytes())?)
}

impl Journal {
    /// Puts every journaled name and size back to its durable value (see the module
    /// documentation), syncs the backing filesystem, removes the journal directory,
    /// and returns one ground-truth line per operation since mount.
    ///
    /// # Errors
    /// A backing operation failed; the restore stops there (the ground truth is not
    /// written, so the run cannot be mistaken for a faithful one).
    pub fn cut(&mut self) -> io::Result<Vec<TruthMeta>> {
        if !self.active() {
            return Ok(Vec::new());
        }
        self.restore_sizes()?;
        let jdir = self.root.join(JOURNAL_DIR);
        let trash = jdir.join("trash");
        std::fs::create_dir_all(&trash)?;
        let mut recreated: HashMap<Key, OwnedFd> = HashMap::new();
        let mut trashed = 0u64;
        self.detach_misplaced_dirs(&trash, &mut trashed)?;
        let mut todo: Vec<Key> = self
            .dirs
            .iter()
            .filter(|(_, d)| !d.names.is_empty())
            .map(|(k, _)| *k)
            .collect();
        todo.sort_unstable();
        loop {
            let before = todo.len();
            let mut waiting = Vec::new();
            for key in todo {
                let Some(dpath) = self.dir_path(key, &recreated) else {
                    waiting.push(key);
                    continue;
                };
                let names: Vec<(std::ffi::OsString, Option<Target>)> = self.dirs[&key]
                    .names
                    .iter()
                    .map(|(n, p)| (n.clone(), p.durable))
                    .collect();
                for (name, durable) in names {
                    self.put_back(&dpath, &name, durable, &trash, &mut trashed, &mut recreated)?;
                }
            }
            todo = waiting;
            if todo.is_empty() || todo.len() == before {
                break;
            }
        }
        let reachable = self
            .dirs
            .keys()
            .map(|&k| {
                let ok = self
                    .dir_path(k, &recreated)
                    .is_some_and(|p| p.starts_with(&self.root) && !p.starts_with(&jdir));
                (k, ok)
            })
            .collect();
        let lines = self.fates(&reachable);
        let root = std::fs::File::open(&self.root)?;
        // SAFETY: valid descriptor.
        unsafe { libc::syncfs(root.as_raw_fd()) };
        self.held.clear();
        self.attic = None;
        std::fs::remove_dir_all(&jdir)?;
        Ok(lines)
    }

    /// First phase of the names: every directory that is a durable value but not at
    /// its durable place now is moved to the top of the trash, so that putting it
    /// back never moves a directory into its own subtree (undoing `mv p/a/b p/b;
    /// mv p/a p/b/a` would otherwise rename `p/b` into `p/b/a/b`).
    fn detach_misplaced_dirs(&self, trash: &Path, trashed: &mut u64) -> io::Result<()> {
        let none = HashMap::new();
        for (&dkey, dj) in &self.dirs {
            for (name, p) in &dj.names {
                let Some(t) = p.durable.filter(|t| t.dir) else {
                    continue;
                };
                let Some(src) = self.dir_path(t.key, &none) else {
                    continue;
                };
                let in_place = self
                    .dir_path(dkey, &none)
                    .is_some_and(|d| d.join(name) == src);
                if !in_place {
                    *trashed += 1;
                    std::fs::rename(&src, trash.join(trashed.to_string()))?;
                }
            }
        }
        Ok(())
    }

    fn restore_sizes(&mut self) -> io::Result<()> {
        for sp in self.sizes.values() {
            let f = match OpenOptions::new()
                .write(true)
                .open(proc_path(sp.fd.as_raw_fd()))
            {
                Ok(f) => f,
                // Not a regular file any more (a name reused): nothing to restore.
                Err(e) if e.raw_os_error() == Some(libc::EISDIR) => continue,
                Err(e) => return Err(e),
            };
            f.set_len(sp.durable)?;
            if let Some((off, bytes)) = &sp.tail {
                if *off < sp.durable {
                    let n = bytes.len().min((sp.durable - off) as usize);
                    f.write_all_at(&bytes[..n], *off)?;
                }
            }
            f.sync_all()?;
        }
        Ok(())
    }

    /// Where the journaled or held directory `key` is now, if it exists.
    fn dir_path(&self, key: Key, recreated: &HashMap<Key, OwnedFd>) -> Option<PathBuf> {
        if let Some(fd) = recreated.get(&key) {
            return path_of(fd.as_raw_fd());
        }
        let fd = match (self.dirs.get(&key), self.held.get(&key)) {
            (Some(d), _) => d.fd.as_raw_fd(),
            (None, Some(Some(fd))) => fd.as_raw_fd(),
            _ => return None,
        };
        path_of(fd)
    }

    /// Makes `dpath/name` point at `durable` again.
    fn put_back(
        &self,
        dpath: &Path,
        name: &OsStr,
        durable: Option<Target>,
        trash: &Path,
        trashed: &mut u64,
        recreated: &mut HashMap<Key, OwnedFd>,
    ) -> io::Result<()> {
        let full = dpath.join(name);
        let dfd = std::fs::File::open(dpath)?;
        let cur = super::target_at(dfd.as_raw_fd(), name)?;
        if cur.map(|t| t.key) == durable.map(|t| t.key) {
            return Ok(());
        }
        if cur.is_some() {
            *trashed += 1;
            std::fs::rename(&full, trash.join(trashed.to_string()))?;
        }
        let Some(t) = durable else {
            return Ok(());
        };
        if !t.dir {
            let attic = self.root.join(JOURNAL_DIR).join("attic");
            let link = attic.join(attic_name(t.key).to_str().expect("ascii"));
            return std::fs::hard_link(&link, &full).map_err(|e| {
                io::Error::other(format!(
                    "cannot restore {}: its inode {:?} is not in the attic: {e}",
                    full.display(),
                    t.key
                ))
            });
        }
        if let Some(src) = self.dir_path(t.key, recreated) {
            return std::fs::rename(src, &full);
        }
        // Removed: make it again with the removed directory's mode and owner.
        let (mode, uid, gid) = match self.held.get(&t.key) {
            Some(Some(fd)) => {
                let st = fstat(fd.as_raw_fd())?;
                (st.st_mode & 0o7777, st.st_uid, st.st_gid)
            }
            _ => (0o755, 0, 0),
        };
        let c = cstr(&full)?;
        // SAFETY: NUL-terminated path.
        if unsafe { libc::mkdir(c.as_ptr(), mode) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: NUL-terminated path.
        unsafe { libc::lchown(c.as_ptr(), uid, gid) };
        // SAFETY: NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just returned by open.
        recreated.insert(t.key, unsafe { OwnedFd::from_raw_fd(fd) });
        Ok(())
    }
}
