//! The control socket: how `plugpull-simfs cut` and `umount` talk to a running mount.
//!
//! A unix stream socket, by default at `<MNT's parent>/.<MNT's name>.simfs.sock`
//! (next to the mountpoint, never inside it: inside the mount every operation fails
//! after the cut). One request per connection: the client writes one line, the
//! server answers one line, `ok <payload>` or `err <message>`.
//!
//! | request | answer |
//! |---------|--------|
//! | `cut`   | after the cut is complete and the ground truth is written and fsynced: `ok` + the summary JSON (the ground truth's last line) |
//! | `cut-tearable MS` | as `cut`, at the first moment within MS milliseconds that the cache holds a write the cut could tear (`torn` mode); `err` and no cut if none came |
//! | `stats` | `ok` + counters as JSON (`writes_total`, `cached_writes`, `cached_bytes`, …) |
//! | `info`  | `ok {"pid": N}` |
//! | `exit`  | clean shutdown (flush the cache unless cut), `ok`, then the process exits; used after a lazy unmount that left the mount busy |
//! | `wait`  | no answer; the connection closes when the mount process exits |

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::fs::Shared;

/// Longest socket path the kernel accepts (`sun_path` minus the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// The default control socket of a mountpoint: `<parent>/.<name>.simfs.sock`, with
/// the parent canonicalized (the mountpoint itself is never stat'ed, since after the
/// cut it answers EIO).
///
/// # Errors
/// The mountpoint has no name or parent, the parent does not exist, or the path is
/// too long for a unix socket (pass `--control` then).
pub fn default_socket(mountpoint: &Path) -> io::Result<PathBuf> {
    let (parent, name) = split_mountpoint(mountpoint)?;
    let mut file = std::ffi::OsString::from(".");
    file.push(name);
    file.push(".simfs.sock");
    let path = parent.join(file);
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "control socket path {} is longer than {MAX_SOCKET_PATH} bytes; pass --control",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// The default ground-truth log of a mountpoint: `<parent>/<name>.simfs-truth.jsonl`.
///
/// # Errors
/// The mountpoint has no name or parent, or the parent does not exist.
pub fn default_truth(mountpoint: &Path) -> io::Result<PathBuf> {
    let (parent, name) = split_mountpoint(mountpoint)?;
    let mut file = name;
    file.push(".simfs-truth.jsonl");
    Ok(parent.join(file))
}

/// `(canonical parent, file name)` of a mountpoint given on the command line.
fn split_mountpoint(mountpoint: &Path) -> io::Result<(PathBuf, std::ffi::OsString)> {
    let abs = if mountpoint.is_absolute() {
        mountpoint.to_path_buf()
    } else {
        std::env::current_dir()?.join(mountpoint)
    };
    let name = abs
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mountpoint has no name"))?
        .to_os_string();
    let parent = abs
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mountpoint has no parent"))?
        .canonicalize()?;
    Ok((parent, name))
}

/// Binds the control socket, replacing a stale socket file but refusing one that a
/// live mount still answers on.
///
/// # Errors
/// Another mount serves this socket, or binding failed.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is served by a running simfs", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path)
}

/// Serves control requests until the process exits. Each connection gets a thread.
pub fn serve(listener: UnixListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let shared = shared.clone();
        std::thread::spawn(move || {
            if let Err(e) = handle(conn, &shared) {
                tracing::warn!("control connection: {e}");
            }
        });
    }
}

fn handle(conn: UnixStream, shared: &Shared) -> io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut conn = conn;
    let answer = match line.trim() {
        "cut" => match shared.cut() {
            Ok(summary) => format!("ok {summary}"),
            Err(e) => format!("err {e}"),
        },
        req if req.starts_with("cut-tearable ") => {
            match req["cut-tearable ".len()..].trim().parse::<u64>() {
                Ok(ms) => match shared.cut_when_tearable(Duration::from_millis(ms)) {
                    Ok(summary) => format!("ok {summary}"),
                    Err(e) => format!("err {e}"),
                },
                Err(e) => format!("err cut-tearable wants milliseconds: {e}"),
            }
        }
        "stats" => format!(
            "ok {}",
            serde_json::to_string(&shared.stats()).map_err(io::Error::other)?
        ),
        "info" => format!("ok {{\"pid\": {}}}", std::process::id()),
        "exit" => {
            let answer = match shared.shutdown() {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("err {e}"),
            };
            conn.write_all(format!("{answer}\n").as_bytes())?;
            tracing::info!("exit requested over the control socket");
            std::process::exit(0);
        }
        "wait" => {
            // Hold the connection until the client goes away; the process exiting
            // closes it, which is what the client waits for.
            let mut sink = [0u8; 64];
            while reader.read(&mut sink)? > 0 {}
            return Ok(());
        }
        other => format!("err unknown request {other:?}"),
    };
    conn.write_all(format!("{answer}\n").as_bytes())
}

/// Sends one request and returns the payload of an `ok` answer.
///
/// # Errors
/// Cannot connect (no mount serves `socket`), the connection broke, or the mount
/// answered `err` (its message becomes the error).
pub fn request(socket: &Path, req: &str, timeout: Duration) -> io::Result<String> {
    let mut conn = UnixStream::connect(socket).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot reach simfs control socket {}: {e}",
                socket.display()
            ),
        )
    })?;
    conn.set_read_timeout(Some(timeout))?;
    conn.write_all(format!("{req}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line)?;
    let line = line.trim_end();
    if let Some(rest) = line.strip_prefix("ok") {
        Ok(rest.trim_start().to_string())
    } else if let Some(msg) = line.strip_prefix("err ") {
        Err(io::Error::other(msg.to_string()))
    } else {
        Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("no answer to {req:?} (mount process gone?)"),
        ))
    }
}

/// A `wait` connection: [`Waiter::wait`] returns once the mount process has exited.
#[derive(Debug)]
pub struct Waiter(UnixStream);

impl Waiter {
    /// Opens a `wait` connection.
    ///
    /// # Errors
    /// No mount serves `socket`.
    pub fn connect(socket: &Path) -> io::Result<Waiter> {
        let mut conn = UnixStream::connect(socket)?;
        conn.write_all(b"wait\n")?;
        Ok(Waiter(conn))
    }

    /// Blocks until the mount process exits, at most `timeout`.
    ///
    /// # Errors
    /// `TimedOut` if it is still running after `timeout`.
    pub fn wait(mut self, timeout: Duration) -> io::Result<()> {
        self.0.set_read_timeout(Some(timeout))?;
        let mut buf = [0u8; 64];
        loop {
            match self.0.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "mount process still running",
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}
