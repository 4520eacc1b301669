//! The guest bundle: a kernel and an initramfs that boot a QEMU guest straight into
//! `plugpull`. From a distribution's kernel package (`linux-image-*.deb`, unpacked
//! with `dpkg-deb -x`, never installed) it takes the kernel and the modules the guest
//! needs ([`MODULES`] and their dependencies, resolved from the `modules.dep` that
//! `depmod -b` writes for the unpacked tree); it adds busybox (static), a stripped
//! copy of `plugpull` and the shared libraries `ldd` names for it, and the `/init`
//! script (`init.sh`: its settings come from the kernel command line).
//!
//! Bundles are cached by content: `CACHE/bundle-HASH/{vmlinuz,initrd.cpio}`, HASH
//! the SHA-256 of every input (the package, `plugpull`, busybox, the libraries, the
//! init script, the module list), so a rebuilt `plugpull` gets a new bundle and an
//! unchanged one is reused at once.

use super::cpio::Cpio;
use crate::rig::proc;
use crate::Error;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules the guest loads (virtio PCI transport, disk, network; ext4 and the
/// crc32c its checksums need), before their dependencies are added.
pub const MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "virtio_net",
    "crc32c_generic",
    "ext4",
];

/// The guest's `/init`.
const INIT: &str = include_str!("init.sh");

/// Where the bundle's pieces come from.
pub struct Inputs<'a> {
    /// The kernel package (`linux-image-VERSION-amd64_*.deb`).
    pub kernel_deb: &'a Path,
    /// The `plugpull` binary to run in the guest.
    pub plugpull: &'a Path,
    /// A static busybox (Debian's `busybox-static`: `/bin/busybox`).
    pub busybox: &'a Path,
    /// The cache directory (created when missing).
    pub cache: &'a Path,
    /// What a bundle variant adds (PostgreSQL's server: [`super::pg::extra`]).
    pub extra: &'a Extra,
}

/// What a bundle variant adds to the guest, each file at its host path (the guest's
/// `/usr/lib/…` is the host's); part of the bundle's content hash.
#[derive(Clone, Debug, Default)]
pub struct Extra {
    /// Executables, with the shared libraries `ldd` names for each.
    pub programs: Vec<PathBuf>,
    /// Further files; a directory adds every file under it (symbolic links followed).
    pub files: Vec<PathBuf>,
    /// Files made for the guest: (path without the leading `/`, content).
    pub written: Vec<(String, Vec<u8>)>,
}

/// A built bundle.
#[derive(Clone, Debug)]
pub struct Bundle {
    /// The kernel image (QEMU `-kernel`).
    pub kernel: PathBuf,
    /// The initramfs, an uncompressed newc cpio archive (QEMU `-initrd`).
    pub initrd: PathBuf,
    /// The modules loaded at boot, in load order.
    pub modules: Vec<String>,
    /// True when it came from the cache.
    pub cached: bool,
}

/// The newest `linux-image-*.deb` in `dir` (by name), if any.
pub fn find_kernel_deb(dir: &Path) -> Option<PathBuf> {
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("linux-image-") && n.ends_with(".deb"))
        })
        .collect();
    debs.sort();
    debs.pop()
}

/// Builds the bundle for `inp`, or finds it in the cache. Errors name the step and
/// the file: an unreadable input, `dpkg-deb`, `depmod`, `ldd` or `strip` failing, a
/// module missing from the package.
pub fn build(inp: &Inputs) -> Result<Bundle, Error> {
    let mut libs = shared_libs(inp.plugpull)?;
    let mut copied = inp.extra.programs.clone();
    for p in &inp.extra.programs {
        libs.extend(shared_libs(p)?);
    }
    for f in &inp.extra.files {
        copied.extend(files_under(f)?);
    }
    libs.sort();
    libs.dedup();
    copied.extend(libs.iter().cloned());
    copied.sort();
    copied.dedup();
    let mut h = Sha256::new();
    for p in [inp.kernel_deb, inp.plugpull, inp.busybox]
        .into_iter()
        .chain(copied.iter().map(PathBuf::as_path))
    {
        h.update(p.as_os_str().as_encoded_bytes());
        h.update(read(p)?);
    }
    for (name, data) in &inp.extra.written {
        h.update(name.as_bytes());
        h.update(data);
    }
    h.update(INIT);
    h.update(MODULES.join(","));
    let hex: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = inp.cache.join(format!("bundle-{hex}"));
    let (kernel, initrd) = (dir.join("vmlinuz"), dir.join("initrd.cpio"));
    let order = dir.join("modules.order");
    prune(inp.cache, &dir, STALE);
    if let (true, true, Ok(text)) = (kernel.exists(), initrd.exists(), read_text(&order)) {
        let modules = text.lines().map(String::from).collect();
        return Ok(Bundle {
            kernel,
            initrd,
            modules,
            cached: true,
        });
    }
    // Builders running at once (two tests) each use a directory of their own; the
    // first rename wins, and a later one finds the same bundle in place.
    let work = inp
        .cache
        .join(format!(".build-{hex}-{:08x}", rand::random::<u32>()));
    let built = assemble(inp, &copied, &work);
    let result = built.and_then(|modules| match std::fs::rename(work.join("out"), &dir) {
        Ok(()) => Ok(modules),
        Err(_) if initrd.exists() && order.exists() => Ok(modules),
        Err(e) => Err(Error::Msg(format!("cannot create {}: {e}", dir.display()))),
    });
    let _ = std::fs::remove_dir_all(&work);
    Ok(Bundle {
        kernel,
        initrd,
        modules: result?,
        cached: false,
    })
}

/// How long a bundle nobody used stays in the cache: 14 days.
const STALE: std::time::Duration = std::time::Duration::from_secs(14 * 86_400);

/// Marks `keep` (a bundle about to be used) as used now (its directory's mtime) and
/// removes every other bundle in `cache` unused for longer than `stale`: each new
/// `plugpull` binary makes a new bundle (20–90 MB), and nothing else would ever delete
/// the old ones. Only directories named `bundle-` + 16 hex digits holding an
/// `initrd.cpio` are touched, so a cache directory shared with other files loses
/// nothing else. Errors are ignored: pruning is housekeeping, never a reason to fail.
pub fn prune(cache: &Path, keep: &Path, stale: std::time::Duration) {
    if let Ok(d) = std::fs::File::open(keep) {
        let _ = d.set_modified(std::time::SystemTime::now());
    }
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let ours = e.file_name().to_str().is_some_and(|n| {
            n.strip_prefix("bundle-")
                .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        }) && path.join("initrd.cpio").is_file();
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > stale);
        if ours && old && path != keep {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Unpacks the package into `work/deb`, writes `work/out/{vmlinuz,initrd.cpio,
/// modules.order}` with `copied` (libraries and the variant's files) at their host
/// paths; the modules in load order.
fn assemble(inp: &Inputs, copied: &[PathBuf], work: &Path) -> Result<Vec<String>, Error> {
    let (deb, out) = (work.join("deb"), work.join("out"));
    mkdir(&out)?;
    mkdir(&deb)?;
    let mut c = Command::new("dpkg-deb");
    c.arg("-x").arg(inp.kernel_deb).arg(&deb);
    proc::output_ok(c, "dpkg-deb -x")?;
    let release = only_entry(&deb.join("lib/modules"))?;
    let vmlinuz = deb.join(format!("boot/vmlinuz-{release}"));
    std::fs::copy(&vmlinuz, out.join("vmlinuz"))
        .map_err(|e| Error::Msg(format!("cannot copy {}: {e}", vmlinuz.display())))?;
    let mut c = Command::new("depmod");
    c.arg("-b").arg(&deb).arg(&release);
    proc::output_ok(c, "depmod -b")?;
    let mods = deb.join("lib/modules").join(&release);
    let order = load_order(&read_text(&mods.join("modules.dep"))?, MODULES)?;
    let mut a = Cpio::default();
    let top = ["bin", "dev", "modules", "etc"];
    for d in top {
        a.dir(d);
    }
    a.char_dev("dev/console", 5, 1);
    a.file("init", 0o755, INIT.as_bytes());
    a.file("bin/busybox", 0o755, &read(inp.busybox)?);
    a.symlink("bin/sh", "busybox");
    a.file("etc/hostname", 0o644, b"plugpull-vm\n");
    let stripped = work.join("plugpull");
    let mut c = Command::new("strip");
    c.arg("-o").arg(&stripped).arg(inp.plugpull);
    proc::output_ok(c, "strip")?;
    a.file("bin/plugpull", 0o755, &read(&stripped)?);
    let mut dirs: std::collections::BTreeSet<String> = top.map(String::from).into();
    for f in copied {
        let name = f.to_string_lossy().trim_start_matches('/').to_string();
        add_parents(&mut a, &mut dirs, &name);
        a.file(&name, 0o755, &read(f)?);
    }
    for (name, data) in &inp.extra.written {
        add_parents(&mut a, &mut dirs, name);
        a.file(name, 0o644, data);
    }
    let mut names = Vec::new();
    for rel in &order {
        let name = module_name(rel);
        a.file(
            &format!("modules/{name}.ko"),
            0o644,
            &read(&mods.join(rel))?,
        );
        names.push(name);
    }
    let list = names.join("\n") + "\n";
    a.file("modules/order", 0o644, list.as_bytes());
    write(&out.join("initrd.cpio"), &a.finish())?;
    write(&out.join("modules.order"), list.as_bytes())?;
    Ok(names)
}

/// Adds to `a` the directories on the way to `name` that `dirs` (those added so
/// far) does not hold yet, outermost first.
fn add_parents(a: &mut Cpio, dirs: &mut std::collections::BTreeSet<String>, name: &str) {
    let mut parent = Path::new(name).parent();
    let mut chain = Vec::new();
    while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
        chain.push(p.to_string_lossy().to_string());
        parent = p.parent();
    }
    for d in chain.into_iter().rev() {
        if dirs.insert(d.clone()) {
            a.dir(&d);
        }
    }
}

/// `path` when it is a file, else every file under the directory `path`, sorted
/// (symbolic links followed). Errors: `path` cannot be read, named.
fn files_under(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::Msg(format!("cannot read {}: {e}", path.display())))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let entries = std::fs::read_dir(path)
        .map_err(|e| Error::Msg(format!("cannot read {}: {e}", path.display())))?;
    for e in entries {
        let e = e.map_err(|e| Error::Msg(format!("cannot read {}: {e}", path.display())))?;
        out.extend(files_under(&e.path())?);
    }
    out.sort();
    Ok(out)
}

/// The modules to load for `wanted` (names as `modinfo` spells them, `_` or `-`),
/// dependencies first, each once: paths relative to the modules directory, from
/// `modules.dep` text (`kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko …`, each line's
/// dependencies listed so that the last is loaded first).
pub fn load_order(modules_dep: &str, wanted: &[&str]) -> Result<Vec<String>, Error> {
    let deps: BTreeMap<String, (String, Vec<String>)> = modules_dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| {
            let list = d.split_whitespace().map(String::from).collect();
            (module_name(m), (m.to_string(), list))
        })
        .collect();
    let mut order: Vec<String> = Vec::new();
    for w in wanted {
        let name = w.replace('-', "_");
        let Some((path, list)) = deps.get(&name) else {
            return Err(Error::Msg(format!(
                "the kernel package has no module {w} (not in its modules.dep)"
            )));
        };
        for p in list.iter().rev().chain(std::iter::once(path)) {
            if !order.contains(p) {
                order.push(p.clone());
            }
        }
    }
    Ok(order)
}

/// `kernel/fs/ext4/ext4.ko` → `ext4`; `crc32c-intel.ko` → `crc32c_intel`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// The shared libraries (and the dynamic loader) `ldd` lists for `bin`.
fn shared_libs(bin: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut c = Command::new("ldd");
    c.arg(bin);
    let o = proc::output(c, "ldd")?;
    let text = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() {
        // A static binary: "not a dynamic executable".
        return Ok(Vec::new());
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, r)) => r.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// The one entry of directory `dir` (the kernel release under `lib/modules`).
fn only_entry(dir: &Path) -> Result<String, Error> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::Msg(format!("{}: {e} (not a kernel package?)", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(Error::Msg(format!(
            "{} holds {} kernel releases, expected one: {names:?}",
            dir.display(),
            names.len()
        ))),
    }
}

fn read(p: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(p).map_err(|e| Error::Msg(format!("cannot read {}: {e}", p.display())))
}

fn read_text(p: &Path) -> Result<String, Error> {
    std::fs::read_to_string(p).map_err(|e| Error::Msg(format!("cannot read {}: {e}", p.display())))
}

fn write(p: &Path, data: &[u8]) -> Result<(), Error> {
    std::fs::write(p, data).map_err(|e| Error::Msg(format!("cannot write {}: {e}", p.display())))
}

fn mkdir(p: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(p)
        .map_err(|e| Error::Msg(format!("cannot create {}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_unused_for_long_are_pruned_and_nothing_else() {
        let cache = std::env::temp_dir().join(format!("pp-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let day = std::time::Duration::from_secs(86_400);
        let long_ago = std::time::SystemTime::now() - 20 * day;
        let names = [
            "bundle-00112233445566aa",
            "bundle-00112233445566bb",
            "bundle-00112233445566cc",
            "bundle-not-hex-digits!!",
            "bundle-00112233445566dd",
        ];
        for (i, n) in names.iter().enumerate() {
            let d = cache.join(n);
            std::fs::create_dir_all(&d).unwrap();
            if i != 4 {
                std::fs::write(d.join("initrd.cpio"), b"x").unwrap();
            }
            if i != 1 {
                let f = std::fs::File::open(&d).unwrap();
                f.set_modified(long_ago).unwrap();
            }
        }
        std::fs::write(cache.join("linux-image-x.deb"), b"deb").unwrap();
        prune(&cache, &cache.join(names[2]), 14 * day);
        let mut left: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "bundle-00112233445566bb",
                "bundle-00112233445566cc",
                "bundle-00112233445566dd",
                "bundle-not-hex-digits!!",
                "linux-image-x.deb"
            ]
        );
        let kept = std::fs::metadata(cache.join(names[2]))
            .unwrap()
            .modified()
            .unwrap();
        assert!(kept.elapsed().unwrap() < day);
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn dependencies_load_first_and_once() {
        let dep = "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n\
                   kernel/lib/crc16.ko:\nkernel/fs/mbcache.ko:\nkernel/fs/jbd2/jbd2.ko:\n\
                   kernel/crypto/crc32c_generic.ko:\n";
        let o = load_order(dep, &["crc32c-generic", "ext4", "ext4"]).unwrap();
        assert_eq!(
            o,
            [
                "kernel/crypto/crc32c_generic.ko",
                "kernel/fs/jbd2/jbd2.ko",
                "kernel/fs/mbcache.ko",
                "kernel/lib/crc16.ko",
                "kernel/fs/ext4/ext4.ko"
            ]
        );
        let e = load_order(dep, &["xfs"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "the kernel package has no module xfs (not in its modules.dep)"
        );
    }
}
