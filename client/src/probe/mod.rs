//! `plugpull probe`: from a path (a file or a block device) down to every whole
//! disk under it. The mount comes from `/proc/self/mountinfo` by the path's
//! `st_dev`; below it the walk follows sysfs (`/sys/class/block/NAME`): a
//! `partition` file leads to its disk, `dm/`, `md/`, `bcache/` to their `slaves/`,
//! `loop/backing_file` to the filesystem holding that file and on to its disk.
//! The pure model and rules are the core's [`plugpull::probe`]; this module only
//! reads files and runs tools ([`tools`]), and [`print`] renders the result. The
//! timed flush loop is [`flush`], the cut-evidence snapshot [`evidence`], the
//! PostgreSQL part (`--dsn`) [`pg`].

pub mod env;
pub mod evidence;
pub mod flush;
pub mod pg;
pub mod print;
pub mod stack;
pub mod tools;

use crate::Error;
use plugpull::probe::{mountinfo, rules, Layer, Probe};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// `plugpull probe`'s arguments: at least one of `--target` and `--dsn`.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["target", "dsn"])))]
pub struct ProbeArgs {
    /// The file (or block device) whose storage stack to probe; a file need not
    /// exist yet if its directory does. Without it, `--dsn`'s data directory is the
    /// target.
    #[arg(long)]
    pub target: Option<std::path::PathBuf>,
    /// Also probe this PostgreSQL server (conninfo or URL, plus the `PG*`
    /// environment): its durability settings, its data directory's stack, and
    /// libeatmydata in its backend.
    #[arg(long)]
    pub dsn: Option<String>,
    /// Also run a timed single-job `pwrite` + `fdatasync` loop on a scratch file
    /// beside the target for this many seconds, counting each leaf disk's flushes.
    #[arg(long, value_parser = plugpull::units::positive_secs)]
    pub seconds: Option<f64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `plugpull probe`: prints the stack and its warnings. Warnings never fail it.
/// With `--dsn` and no `--target` the server's data directory is the target (also
/// of the flush loop); with both, the data directory's stack goes beside the
/// target's ([`pg::beside`]).
pub async fn command(args: &ProbeArgs) -> Result<bool, Error> {
    let mut p = match (&args.target, &args.dsn) {
        (Some(t), None) => probe(t)?,
        (Some(t), Some(dsn)) => {
            let own = probe(t)?;
            pg::beside(own, pg::probe_dsn(dsn).await?)
        }
        (None, Some(dsn)) => pg::probe_dsn(dsn).await?,
        (None, None) => return Err(Error("probe: give --target, --dsn or both".into())),
    };
    let loop_at = match &args.target {
        Some(t) => Some(t.clone()),
        None => data_directory_of(&p),
    };
    complete(&mut p, loop_at.as_deref(), args.seconds);
    if args.json {
        let s = serde_json::to_string(&p).map_err(|e| Error(format!("JSON: {e}")))?;
        println!("{s}");
    } else {
        print!("{}", print::text(&p));
    }
    Ok(true)
}

/// Completes a probe the walk produced: with `seconds`, the timed flush loop at
/// `loop_at` (the target, or the data directory; `None`: nothing to time there, a
/// note says so), then the cut-evidence snapshot of its leaf disks.
pub fn complete(p: &mut Probe, loop_at: Option<&Path>, seconds: Option<f64>) {
    let disks: Vec<String> = p.leaves.iter().map(|l| l.name.clone()).collect();
    if let Some(seconds) = seconds {
        match loop_at {
            Some(at) => measure_flushes(p, at, seconds, &disks),
            None => p
                .notes
                .push("flush accounting not measured: the data directory was not probed".into()),
        }
    }
    p.evidence = Some(evidence::snapshot(&disks));
}

/// Where the timed loop of a server's probe runs: its data directory, when the walk
/// found it on this host.
pub fn data_directory_of(p: &Probe) -> Option<std::path::PathBuf> {
    (!p.layers.is_empty()).then(|| std::path::PathBuf::from(&p.target))
}

/// Runs the timed flush loop beside the target (a raw device is refused) and adds its result and its
/// warnings to `p`; what could not be measured becomes a note, never an error.
pub fn measure_flushes(p: &mut Probe, target: &Path, seconds: f64, disks: &[String]) {
    let m = flush::measure(target, seconds, disks);
    match m {
        Ok(m) => {
            for w in plugpull::probe::flush::warnings(&m) {
                if w.id == plugpull::probe::flush::FSYNC_TOO_FAST_FOR_ROTATIONAL
                    && is_virtual_disk(p, &w.disk)
                {
                    p.notes.push(format!(
                        "{}: the kernel calls it rotational, but it is a virtual disk: the revolutions rule does not apply",
                        w.disk
                    ));
                    continue;
                }
                p.warnings.push((&w).into());
            }
            p.flush = Some(m);
        }
        Err(e) => p.notes.push(format!("flush accounting not measured: {e}")),
    }
}

/// `path` with every symbolic link in its last component followed, also a link to a
/// file that does not exist yet (which `write` would create where the link points),
/// so the probe describes the filesystem the run will use. At most 40 links.
pub fn follow_links(path: &Path) -> std::path::PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {}
            _ => break,
        }
        let Ok(to) = std::fs::read_link(&p) else {
            break;
        };
        p = match p.parent() {
            Some(dir) if to.is_relative() => dir.join(to),
            _ => to,
        };
    }
    p
}

/// What the probe (and its flush loop) look at for `target`: `(followed, existing)`,
/// where `followed` is `target` with its links followed ([`follow_links`]) and
/// `existing` is `followed` itself, or its parent directory when it does not exist
/// yet (a file `write` has still to create; `.` for a bare file name). Nothing here
/// checks that `existing` exists.
pub fn existing_of(target: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let real = follow_links(target);
    if real.exists() {
        return (real.clone(), real);
    }
    let dir = match real.parent() {
        Some(d) if d.as_os_str().is_empty() => ".".into(),
        Some(d) => d.to_path_buf(),
        None => real.clone(),
    };
    (real, dir)
}

/// Whether leaf `disk` is a virtual disk (virtio, a loop or other virtual device, an
/// unknown transport, or any disk of a virtualised machine): its `rotational` flag
/// says nothing about a platter.
pub fn is_virtual_disk(p: &Probe, disk: &str) -> bool {
    let virtualized = p
        .environment
        .virtualization
        .as_deref()
        .is_some_and(|v| v != "none");
    let transport = p
        .leaves
        .iter()
        .find(|l| l.name == disk)
        .map(|l| l.transport.as_str());
    virtualized || matches!(transport, None | Some("virtio" | "virtual" | ""))
}

/// Probes the stack under `target`: layers, leaves, environment, notes, warnings.
/// A file that does not exist is probed through its parent directory.
pub fn probe(target: &Path) -> Result<Probe, Error> {
    let (real, existing) = existing_of(target);
    let meta = std::fs::metadata(&existing).map_err(|e| {
        if existing == real {
            Error(format!("cannot probe {}: {e}", target.display()))
        } else {
            Error(format!(
                "cannot probe {}: its directory {} does not exist ({e})",
                target.display(),
                existing.display()
            ))
        }
    })?;
    let mut p = Probe {
        target: target.display().to_string(),
        ..Probe::default()
    };
    let mut walk = stack::Walk::default();
    if meta.file_type().is_block_device() {
        walk.device(&mut p, meta.rdev());
    } else {
        let m = mount_of(&existing, meta.dev())?;
        p.layers.push(Layer::Mount {
            source: m.source.clone(),
            fstype: m.fstype.clone(),
            mountpoint: m.mountpoint.clone(),
            options: m.options.clone(),
        });
        walk.below_mount(&mut p, &m, meta.dev());
    }
    finish(&mut p);
    Ok(p)
}

/// Fills in `p`'s environment and its warnings ([`rules::warnings`]) once its
/// layers and leaves are known.
pub fn finish(p: &mut Probe) {
    p.environment = env::environment(&mut p.notes);
    p.warnings = rules::warnings(p);
}

/// The mountinfo entry of the filesystem holding `path` (whose `st_dev` is `dev`).
pub fn mount_of(path: &Path, dev: u64) -> Result<mountinfo::MountInfo, Error> {
    let canon = std::fs::canonicalize(path)
        .map_err(|e| Error(format!("cannot resolve {}: {e}", path.display())))?;
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error(format!("cannot read /proc/self/mountinfo: {e}")))?;
    let all = mountinfo::parse(&text);
    mountinfo::mount_of(&all, &canon, libc::major(dev), libc::minor(dev))
        .cloned()
        .ok_or_else(|| Error(format!("no mount holds {}", canon.display())))
}
