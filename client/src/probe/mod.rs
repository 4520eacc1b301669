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

/// The most `--seconds` may ask for: one hour.
pub const MAX_SECONDS: f64 = 3600.0;

/// `plugpull probe`'s arguments: `--target`, `--dsn` or both; with neither, a
/// server named by libpq's environment ([`SERVER_ENV`]) as `--dsn ''` would.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// The file (or block device) whose storage stack to probe; a file need not
    /// exist yet if its directory does. Without it, `--dsn`'s data directory is the
    /// target.
    #[arg(long)]
    pub target: Option<std::path::PathBuf>,
    /// Also probe this PostgreSQL server (conninfo or URL, plus the `PG*`
    /// environment): its durability settings, its data directory's stack, and
    /// libeatmydata in its backend. Without --target and --dsn, PGSERVICE, PGHOST,
    /// PGHOSTADDR, PGPORT or PGDATABASE in the environment name the server.
    #[arg(long)]
    pub dsn: Option<String>,
    /// Also run a timed single-job `pwrite` + `fdatasync` loop on a scratch file
    /// beside the target for this many seconds (above 0, at most 3600), counting
    /// each leaf disk's flushes. Exit 2 when it could not run.
    #[arg(long, value_parser = seconds_arg)]
    pub seconds: Option<f64>,
    /// With --seconds on a block device: run the loop on the device itself, writing
    /// its first 4 KiB (offset 0; what they held is put back after the loop, but not
    /// if the probe is killed during it). The device is opened exclusively, so a
    /// mounted or otherwise held device is refused.
    #[arg(long, requires = "seconds")]
    pub force: bool,
    /// Print one JSON object instead of text (`{"ok":false,"error":…}` when it could
    /// not probe).
    #[arg(long)]
    pub json: bool,
}

/// `--seconds`: a number of seconds above 0 and at most [`MAX_SECONDS`].
pub fn seconds_arg(s: &str) -> Result<f64, String> {
    let v = plugpull::units::positive_secs(s)?;
    if v > MAX_SECONDS {
        return Err(format!(
            "{s:?} is above {MAX_SECONDS} seconds (one hour), the longest a probe runs"
        ));
    }
    Ok(v)
}

/// Runs `plugpull probe`: prints the stack and its warnings. Warnings never fail it.
/// With `--dsn` and no `--target` the server's data directory is the target (also
/// of the flush loop); with both, the data directory's stack goes beside the
/// target's ([`pg::beside`]).
/// Errors (exit 2): the target could not be probed (with `--json`, stdout then holds
/// `{"ok":false,"error":…}`), or `--seconds` could not run (the report is printed,
/// with the cause among its notes, and the cause is the error).
pub async fn command(args: &ProbeArgs) -> Result<bool, Error> {
    let (p, not_measured) = match run(args).await {
        Ok(r) => r,
        Err(e) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "ok": false, "error": e.to_string() })
                );
            }
            return Err(e);
        }
    };
    if args.json {
        let s = serde_json::to_string(&p).map_err(|e| Error::Msg(format!("JSON: {e}")))?;
        println!("{s}");
    } else {
        print!("{}", print::text(&p));
    }
    match not_measured {
        Some(e) => Err(Error::Msg(format!("flush accounting not measured: {e}"))),
        None => Ok(true),
    }
}

/// libpq's environment variables that name a server: with one set, `probe` without
/// `--target` and `--dsn` probes that server (as `psql` would connect to it).
pub const SERVER_ENV: [&str; 5] = ["PGSERVICE", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE"];

/// The error of a probe given nothing to probe.
pub const NOTHING_TO_PROBE: &str = "probe: nothing to probe: give --target FILE, --dsn CONNINFO or both (or set PGSERVICE or PGHOST to probe that PostgreSQL server)";

/// The first of [`SERVER_ENV`] that `var` has a non-empty value for.
pub fn server_env(var: impl Fn(&str) -> Option<String>) -> Option<&'static str> {
    SERVER_ENV
        .into_iter()
        .find(|k| var(k).is_some_and(|v| !v.is_empty()))
}

/// The probe `args` ask for, and why `--seconds` could not run, if it could not.
///
/// The walk, the tools it runs (up to 5 s each) and the timed loop block: they run
/// in `block_in_place`, off the runtime's async duty.
async fn run(args: &ProbeArgs) -> Result<(Probe, Option<Error>), Error> {
    let walk = |t: &Path| tokio::task::block_in_place(|| probe(t));
    let mut p = match (&args.target, &args.dsn) {
        (Some(t), None) => walk(t)?,
        (Some(t), Some(dsn)) => {
            let own = walk(t)?;
            pg::beside(own, pg::probe_dsn(dsn).await?)
        }
        (None, Some(dsn)) => pg::probe_dsn(dsn).await?,
        (None, None) => match server_env(|k| std::env::var(k).ok()) {
            Some(_) => pg::probe_dsn("").await?,
            None => return Err(Error::Msg(NOTHING_TO_PROBE.into())),
        },
    };
    if let Some(t) = &args.target {
        p.notes.extend(held_note(t));
    }
    let loop_at = match &args.target {
        Some(t) => Some(t.clone()),
        None => data_directory_of(&p),
    };
    let not_measured = tokio::task::block_in_place(|| {
        try_complete(&mut p, loop_at.as_deref(), args.seconds, args.force)
    });
    Ok((p, not_measured))
}

/// Completes a probe as a `write` run does ([`try_complete`] without `force`; what
/// could not be measured is only a note). A raw device is not timed: the run holds
/// it, and its own blocks are the run's; the note says how to time it beforehand.
pub fn complete(p: &mut Probe, loop_at: Option<&Path>, seconds: Option<f64>) {
    let raw =
        loop_at.filter(|at| std::fs::metadata(at).is_ok_and(|m| m.file_type().is_block_device()));
    if let (Some(dev), Some(_)) = (raw, seconds) {
        p.notes.push(format!(
            "flush accounting not measured: a run does not time its own raw device; run `plugpull probe --target {} --seconds N --force` before the run",
            dev.display()
        ));
        let _noted = try_complete(p, None, None, false);
        return;
    }
    let _noted = try_complete(p, loop_at, seconds, false);
}

/// Completes a probe the walk produced: with `seconds`, the timed flush loop at
/// `loop_at` (the target, or the data directory; on a raw device only with `force`;
/// `None`: nothing to time there), then the cut-evidence snapshot of its leaf
/// disks. Returns why the loop could not run, if it could not (a note says so too).
pub fn try_complete(
    p: &mut Probe,
    loop_at: Option<&Path>,
    seconds: Option<f64>,
    force: bool,
) -> Option<Error> {
    let disks: Vec<String> = p.leaves.iter().map(|l| l.name.clone()).collect();
    let mut not_measured = None;
    if let Some(seconds) = seconds {
        not_measured = match loop_at {
            Some(at) => measure_flushes(p, at, seconds, force, &disks).err(),
            None => {
                let e = Error::Msg("the data directory was not probed".into());
                p.notes.push(format!("flush accounting not measured: {e}"));
                Some(e)
            }
        };
    }
    p.evidence = Some(evidence::snapshot(&disks));
    not_measured
}

/// Where the timed loop of a server's probe runs: its data directory, when the walk
/// found it on this host.
pub fn data_directory_of(p: &Probe) -> Option<std::path::PathBuf> {
    p.storage_is_here()
        .then(|| std::path::PathBuf::from(&p.target))
}

/// Runs the timed flush loop (beside the target; on a raw device only with `force`)
/// and adds its result and its warnings to `p`; when it could not run, a note says
/// why and the cause is returned.
fn measure_flushes(
    p: &mut Probe,
    target: &Path,
    seconds: f64,
    force: bool,
    disks: &[String],
) -> Result<(), Error> {
    let m = match flush::measure(target, seconds, disks, force) {
        Ok(m) => m,
        Err(e) => {
            p.notes.push(format!("flush accounting not measured: {e}"));
            return Err(e);
        }
    };
    for w in plugpull::probe::flush::warnings(&m) {
        if w.id == plugpull::probe::flush::FSYNC_TOO_FAST_FOR_ROTATIONAL
            && is_virtual_disk(p, &w.disk)
        {
            p.notes.push(format!(
                "{}: the kernel calls it rotational, but it is a virtual disk: a flush faster than a disk can spin is no sign of a lie here",
                w.disk
            ));
            continue;
        }
        p.warnings.push((&w).into());
    }
    p.flush = Some(m);
    Ok(())
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
            Error::Msg(format!("cannot probe {}: {e}", target.display()))
        } else {
            Error::Msg(format!(
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
    let t = meta.file_type();
    if !(t.is_file() || t.is_dir() || t.is_block_device()) {
        return Err(Error::Msg(format!(
            "cannot probe {}: not a regular file, directory or block device",
            target.display()
        )));
    }
    let mut walk = stack::Walk::default();
    if t.is_block_device() {
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

/// Fills in `p`'s environment, the note for a container on bare metal
/// ([`rules::container_note`]) and its warnings ([`rules::warnings`]) once its
/// layers and leaves are known.
pub fn finish(p: &mut Probe) {
    p.environment = env::environment(&mut p.notes);
    p.notes.extend(rules::container_note(p));
    p.warnings = rules::warnings(p);
}

/// For `plugpull probe` only (never for a `write` run, which holds its device
/// open exclusively by then): the note for a block device `write file` would refuse.
/// `write` opens a device exclusively
/// ([`crate::blockdev::open_block_exclusive`]; asked here read-only,
/// [`crate::blockdev::block_in_use`], and closed at once), and the kernel
/// refuses that while the device is mounted or held, before `--force` is looked at. The note quotes `write`'s own refusal,
/// after where the device is mounted (from `/proc/self/mountinfo`). `None` for a
/// target that is not a block device.
fn held_note(target: &Path) -> Option<String> {
    let (_, dev) = existing_of(target);
    let meta = std::fs::metadata(&dev).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    let refused = crate::blockdev::block_in_use(&dev)?;
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut at: Vec<String> = mountinfo::parse(&text)
        .into_iter()
        .filter(|m| (m.major, m.minor) == (libc::major(rdev), libc::minor(rdev)))
        .map(|m| m.mountpoint)
        .collect();
    at.dedup();
    let mounted = if at.is_empty() {
        ":".to_string()
    } else {
        format!(" is mounted at {}:", at.join(", "))
    };
    Some(format!(
        "{}{mounted} `write file` refuses it, also with --force ({refused})",
        dev.display()
    ))
}

/// The mountinfo entry of the filesystem holding `path` (whose `st_dev` is `dev`).
pub fn mount_of(path: &Path, dev: u64) -> Result<mountinfo::MountInfo, Error> {
    let canon = std::fs::canonicalize(path)
        .map_err(|e| Error::Msg(format!("cannot resolve {}: {e}", path.display())))?;
    let text = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::Msg(format!("cannot read /proc/self/mountinfo: {e}")))?;
    let all = mountinfo::parse(&text);
    mountinfo::mount_of(&all, &canon, libc::major(dev), libc::minor(dev))
        .cloned()
        .ok_or_else(|| Error::Msg(format!("no mount holds {}", canon.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_named_by_the_first_set_libpq_variable() {
        let env = |set: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                set.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(server_env(env(&[])), None);
        assert_eq!(server_env(env(&[("PGUSER", "x"), ("PGHOST", "")])), None);
        assert_eq!(
            server_env(env(&[("PGPORT", "5433"), ("PGSERVICE", "bench")])),
            Some("PGSERVICE")
        );
    }
}
