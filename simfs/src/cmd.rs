//! The three subcommands — `mount`, `cut`, `umount` — as plain functions, so the
//! binary stays a thin argument parser.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fuser::{MountOption, SessionACL};

use crate::control::{self, Waiter};
use crate::fs::{Options, Shared, SimFs};
use crate::sim::SimConfig;

/// Everything `mount` needs.
#[derive(Clone, Debug)]
pub struct MountArgs {
    /// Backing directory.
    pub backing: PathBuf,
    /// Where to mount (an existing directory).
    pub mountpoint: PathBuf,
    /// Cache configuration (mode, seed, sizes).
    pub sim: SimConfig,
    /// Ground-truth path; `None` for [`control::default_truth`].
    pub truth: Option<PathBuf>,
    /// Control socket path; `None` for [`control::default_socket`].
    pub control: Option<PathBuf>,
    /// FUSE worker threads (at least 1).
    pub threads: usize,
}

fn absolute(p: &Path) -> io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

/// The control socket for `mountpoint`: `control` if given, else the default.
///
/// # Errors
/// See [`control::default_socket`].
pub fn socket_for(mountpoint: &Path, control: Option<&Path>) -> io::Result<PathBuf> {
    match control {
        Some(p) => absolute(p),
        None => control::default_socket(mountpoint),
    }
}

/// Mounts simfs and serves it in the foreground until it is unmounted (or the
/// process gets SIGINT/SIGTERM/SIGHUP: clean shutdown, lazy unmount, exit 0).
/// Prints `mounted <MNT>` on stdout once the mount is live.
///
/// # Errors
/// Bad paths, the control socket is taken, or the FUSE mount failed.
pub fn mount(args: MountArgs) -> io::Result<()> {
    // Modes come from the requests, not from our umask.
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0) };
    raise_nofile_limit();
    let mountpoint = absolute(&args.mountpoint)?;
    if !std::fs::metadata(&mountpoint)?.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mountpoint {} is not a directory", mountpoint.display()),
        ));
    }
    let truth = match &args.truth {
        Some(p) => absolute(p)?,
        None => control::default_truth(&mountpoint)?,
    };
    let socket = socket_for(&mountpoint, args.control.as_deref())?;
    let signals = block_signals();

    let (fs, shared) = SimFs::new(Options {
        backing: args.backing.clone(),
        truth: truth.clone(),
        sim: args.sim.clone(),
    })?;
    let listener = control::bind(&socket)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        // The source names the fault model, so a probe of the mount tells an honest
        // simulated disk from a lying one (`plugpull::probe::simfs_mode`).
        MountOption::FSName(format!("plugpull-simfs:{}", args.sim.mode.name())),
        MountOption::Subtype("plugpull-simfs".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(args.threads.max(1));
    config.clone_fd = args.threads > 1;
    let session = match fuser::Session::new(fs, &mountpoint, &config) {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&socket);
            return Err(e);
        }
    };

    {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("destager".into())
            .spawn(move || shared.run_destager())?;
    }
    {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || control::serve(listener, shared))?;
    }
    {
        let (shared, mnt, sock) = (shared.clone(), mountpoint.clone(), socket.clone());
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || on_signal(signals, &shared, &mnt, &sock))?;
    }

    tracing::info!(
        "mode {} seed {} backing {} truth {} control {}",
        args.sim.mode.name(),
        args.sim.seed,
        args.backing.display(),
        truth.display(),
        socket.display()
    );
    let mut out = io::stdout().lock();
    writeln!(out, "mounted {}", mountpoint.display())?;
    out.flush()?;
    drop(out);

    let ran = session.run();
    let shut = shared.shutdown();
    let _ = std::fs::remove_file(&socket);
    ran?;
    shut
}

/// Pulls the plug of the mount at `mountpoint` and returns the cut's summary line
/// once the ground truth is written and fsynced. With `when_tearable`, the cut waits
/// up to that long for the cache to hold a write it could tear (`torn` mode: longer
/// than the atomic unit) and happens at that moment.
///
/// # Errors
/// No mount answers on the control socket, or the cut failed; with `when_tearable`,
/// the mount is not in `torn` mode or no write that could tear came in time (then
/// nothing is cut).
pub fn cut(
    mountpoint: &Path,
    control: Option<&Path>,
    when_tearable: Option<Duration>,
) -> io::Result<String> {
    let socket = socket_for(mountpoint, control)?;
    match when_tearable {
        None => control::request(&socket, "cut", Duration::from_secs(60)),
        Some(w) => control::request(
            &socket,
            &format!("cut-tearable {}", w.as_millis()),
            w.saturating_add(Duration::from_secs(60)),
        ),
    }
}

/// Counters of the running mount, as JSON.
///
/// # Errors
/// No mount answers on the control socket.
pub fn stats(mountpoint: &Path, control: Option<&Path>) -> io::Result<String> {
    let socket = socket_for(mountpoint, control)?;
    control::request(&socket, "stats", Duration::from_secs(10))
}

/// Unmounts `mountpoint` (`fusermount3 -u`, or `-u -z` if busy — then the mount
/// process is told to exit, which aborts the FUSE connection for whoever still
/// holds files) and waits up to `timeout` for the mount process to exit.
///
/// # Errors
/// Neither unmount worked, or the mount process did not exit in time.
pub fn umount(mountpoint: &Path, control: Option<&Path>, timeout: Duration) -> io::Result<()> {
    let socket = socket_for(mountpoint, control)?;
    let waiter = Waiter::connect(&socket).ok();
    let mnt = absolute(mountpoint)?;
    let lazy = if fusermount(&["-u"], &mnt)? {
        false
    } else if fusermount(&["-u", "-z"], &mnt)? {
        true
    } else if waiter.is_none() {
        return Err(io::Error::other(format!(
            "{} is not mounted and no simfs serves {}",
            mnt.display(),
            socket.display()
        )));
    } else {
        // Mounted by us but unmount failed: ask the process to go anyway.
        true
    };
    let Some(waiter) = waiter else {
        return Ok(());
    };
    if lazy {
        // Still busy: the kernel keeps the connection until the last file closes.
        // Ask the mount process to exit, which aborts the connection.
        if let Err(e) = control::request(&socket, "exit", Duration::from_secs(30)) {
            tracing::debug!("exit request: {e}");
        }
    }
    waiter.wait(timeout)
}

fn fusermount(flags: &[&str], mnt: &Path) -> io::Result<bool> {
    let out = Command::new("fusermount3")
        .args(flags)
        .arg(mnt)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run fusermount3: {e}")))?;
    if !out.status.success() {
        tracing::debug!(
            "fusermount3 {flags:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.status.success())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it spawns
/// later, so one thread can take them with `sigwait`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain signal-set manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn on_signal(set: libc::sigset_t, shared: &Arc<Shared>, mnt: &Path, socket: &Path) {
    let mut sig = 0;
    // SAFETY: `set` is an initialized signal set, `sig` is writable.
    unsafe { libc::sigwait(&set, &mut sig) };
    tracing::info!("signal {sig}: clean shutdown and lazy unmount");
    if let Err(e) = shared.shutdown() {
        tracing::error!("clean shutdown failed: {e}");
    }
    let _ = fusermount(&["-u", "-z"], mnt);
    let _ = std::fs::remove_file(socket);
    std::process::exit(0);
}

/// One descriptor per inode the kernel knows: raise the soft limit to the hard one.
fn raise_nofile_limit() {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
