//! Processes the rig starts: how they are spawned, waited for, killed and reaped.
//!
//! Everything here is synchronous (`std::process`), so the end-to-end tests call it
//! directly and the demo calls it from its sequential flow. Two process-wide
//! switches serve the demo:
//!
//! * [`detach_children`]: every child made by [`command`] afterwards gets a process
//!   group of its own, so a Ctrl-C at the terminal reaches only the demo, which then
//!   stops everything in order.
//! * [`cancel`]: every wait in the rig ([`sleep`], [`output`], [`recv_line`]) returns
//!   an "interrupted" [`Error`] within ~20 ms, killing the child it waited for; the
//!   caller's guards then tear the rest down as they are dropped.
//!
//! PostgreSQL's postmaster outlives `pg_ctl`, its parent, so it is not the child of
//! whoever started it: [`set_subreaper`] makes this process inherit such orphans, and
//! [`kill_tree`] SIGKILLs a process with its children and reaps what it can.

use crate::Error;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

static DETACH: AtomicBool = AtomicBool::new(false);
static CANCEL: AtomicBool = AtomicBool::new(false);

/// How often the waits here look at the cancel switch.
const POLL: Duration = Duration::from_millis(20);

/// From now on, children made by [`command`] get a process group of their own.
pub fn detach_children() {
    DETACH.store(true, Ordering::SeqCst);
}

/// Makes every wait in the rig return "interrupted" (set from a Ctrl-C handler).
pub fn cancel() {
    CANCEL.store(true, Ordering::SeqCst);
}

/// Whether [`cancel`] was called.
pub fn cancelled() -> bool {
    CANCEL.load(Ordering::SeqCst)
}

/// `Err("interrupted")` once [`cancel`] was called.
pub fn check() -> Result<(), Error> {
    if cancelled() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`).
pub fn set_subreaper() {
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
}

/// Sends `sig` to process `pid` (to its process group when `group`); a process that
/// is gone (or the pid 0) is no error: there is nothing left to signal.
pub fn signal(pid: u32, sig: rustix::process::Signal, group: bool) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = if group {
            rustix::process::kill_process_group(p, sig)
        } else {
            rustix::process::kill_process(p, sig)
        };
    }
}

/// Reaps `pid` if it is our child and has exited (a zombie); never blocks, and a
/// process that is not our child is no error.
pub fn reap_exited(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::NOHANG);
    }
}

/// A command with stdin from `/dev/null`, in a process group of its own after
/// [`detach_children`].
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.stdin(Stdio::null());
    if DETACH.load(Ordering::SeqCst) {
        c.process_group(0);
    }
    c
}

/// A command with stdin from `/dev/null` that starts a new session (`setsid`): its
/// own process group (its pid), no controlling terminal. Nothing sent to the
/// caller's group or terminal (Ctrl-C, hang-up) reaches it, no parent-death signal
/// is set, so it outlives the caller: for the simulated machine's processes.
pub fn session_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.stdin(Stdio::null());
    // SAFETY: the closure runs between fork and exec; setsid(2) is
    // async-signal-safe and allocates nothing.
    unsafe {
        c.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        })
    };
    c
}

/// Sleeps for `d`; `Err` at once when cancelled.
pub fn sleep(d: Duration) -> Result<(), Error> {
    let end = Instant::now() + d;
    loop {
        check()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep(POLL.min(end - now));
    }
}

/// Runs `cmd` to completion with its stdout and stderr captured. `what` names it in
/// errors. When cancelled meanwhile the child is SIGKILLed and reaped.
pub fn output(cmd: Command, what: &str) -> Result<Output, Error> {
    output_limited(cmd, what, None)
}

/// [`output`], and an error unless the command succeeded: `"{what} failed: STDERR"`
/// (stderr trimmed) when it exited non-zero or was killed.
pub fn output_ok(cmd: Command, what: &str) -> Result<Output, Error> {
    let o = output(cmd, what)?;
    if o.status.success() {
        return Ok(o);
    }
    Err(Error::Msg(format!(
        "{what} failed: {}",
        String::from_utf8_lossy(&o.stderr).trim()
    )))
}

/// [`output`], but a child still running after `limit` is SIGKILLed and reaped, and
/// the error says `"{what}: no answer within N s"` (for tools that can hang on a
/// wedged or sleeping device).
pub fn output_within(cmd: Command, what: &str, limit: Duration) -> Result<Output, Error> {
    output_limited(cmd, what, Some(limit))
}

fn output_limited(cmd: Command, what: &str, limit: Option<Duration>) -> Result<Output, Error> {
    let mut child = spawn_piped(cmd, what)?;
    // A child that leads its own process group (`process_group(0)`) is killed with
    // its group, so a grandchild still holding the pipes dies too.
    let pid = rustix::process::Pid::from_child(&child);
    let group = rustix::process::getpgid(Some(pid)).is_ok_and(|g| g == pid);
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    let end = limit.map(|l| Instant::now() + l);
    let mut status = None;
    let status = loop {
        let late = end.is_some_and(|e| Instant::now() >= e);
        if cancelled() || late {
            if group {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(match limit {
                Some(l) if late => Error::TimedOut {
                    what: what.to_string(),
                    seconds: l.as_secs_f64(),
                },
                _ => Error::Interrupted,
            });
        }
        if status.is_none() {
            match child.try_wait() {
                Ok(st) => status = st,
                Err(e) => return Err(Error::Msg(format!("{what}: {e}"))),
            }
        }
        // Done when the child exited and its output ended (a background grandchild
        // may hold the pipes open past the child's exit: the limit applies to it too).
        match status {
            Some(st) if out.is_finished() && err.is_finished() => break st,
            _ => std::thread::sleep(POLL),
        }
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Spawns `cmd` with its stdout and stderr piped; `Err` names it `what`.
pub fn spawn_piped(mut cmd: Command, what: &str) -> Result<Child, Error> {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Msg(format!("cannot run {what}: {e}")))
}

/// Reads `r` to its end on a thread of its own.
fn read_all(r: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut v);
        }
        v
    })
}

/// The lines of a child's output, read by a thread until EOF (which also keeps the
/// pipe drained, so the child never blocks on it).
pub fn lines(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            // When nobody listens any more, keep draining.
            let _ = tx.send(line);
        }
    });
    rx
}

/// The next line from `rx` within `limit` (`Duration::MAX`: no limit): `Ok(None)` when the output ended or the
/// time ran out, `Err` when cancelled.
pub fn recv_line(rx: &Receiver<String>, limit: Duration) -> Result<Option<String>, Error> {
    let end = Instant::now().checked_add(limit);
    loop {
        check()?;
        let step = match end {
            Some(end) => {
                let now = Instant::now();
                if now >= end {
                    return Ok(None);
                }
                POLL.min(end - now)
            }
            None => POLL,
        };
        match rx.recv_timeout(step) {
            Ok(l) => return Ok(Some(l)),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Ok(None),
        }
    }
}

/// A child process SIGKILLed and reaped on drop.
pub struct Guard(pub Option<Child>);

impl Guard {
    /// Kills (SIGKILL) and reaps the child now.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every process id in `/proc`.
pub fn all_pids() -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// Process ids whose parent is `pid`, from `/proc/*/stat`.
pub fn children_of(pid: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&p| stat_of(p).is_some_and(|(_, ppid)| ppid == pid))
        .collect()
}

/// `(state, ppid)` of a process, from `/proc/PID/stat` (after the comm's last `)`);
/// `None` once it is gone (reaped).
pub fn stat_of(pid: u32) -> Option<(char, u32)> {
    stat3(pid).map(|(state, ppid, _)| (state, ppid))
}

/// `(state, ppid, process group)` of a process, from `/proc/PID/stat`.
pub fn stat3(pid: u32) -> Option<(char, u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Whether process `pid` exists and is not a zombie (`Z`) or dead (`X`): a zombie
/// runs nothing and holds no file, it only waits for a parent that may never reap it.
pub fn alive(pid: u32) -> bool {
    stat_of(pid).is_some_and(|(s, _)| s != 'Z' && s != 'X')
}

pub use super::tree::{freeze_group, group_tree, has_env, kill_group, reap};

/// SIGKILLs process `pid` and its children at once, as a power cut does, when its
/// command name (`/proc/PID/comm`) is `comm`; `pid` is stopped (SIGSTOP) first so it
/// cannot fork meanwhile. Then reaps those that are our children (see
/// [`set_subreaper`]) and waits up to 10 s until every one is gone, since a zombie
/// postmaster makes PostgreSQL's next start refuse ("lock file postmaster.pid
/// already exists").
///
/// `Ok(())` when nothing was left to kill or all are gone; `Err` lists the survivors.
pub fn kill_tree(pid: u32, comm: &str) -> Result<(), Vec<u32>> {
    let is = std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm);
    if !is {
        return Ok(());
    }
    signal(pid, rustix::process::Signal::STOP, false);
    let mut victims = children_of(pid);
    victims.push(pid);
    for &v in &victims {
        signal(v, rustix::process::Signal::KILL, false);
    }
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        victims.iter().for_each(|&v| reap_exited(v));
        if victims.iter().all(|&v| stat_of(v).is_none()) {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(victims);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it soon after).
pub fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Msg(format!("no free port: {e}")))
}

/// Whether an executable named `name` is in a directory of `PATH`.
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// Whether we run as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_reads_our_own_parent_and_nothing_for_a_reaped_child() {
        let me = std::process::id();
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
        assert_eq!(stat_of(me).map(|s| s.1), Some(parent));
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        assert_eq!(stat_of(pid), None);
    }

    #[test]
    fn a_child_past_its_limit_is_killed_and_named() {
        let mut c = Command::new("sleep");
        c.arg("30");
        let e = output_within(c, "sleep 30", Duration::from_millis(200)).unwrap_err();
        assert_eq!(e.to_string(), "sleep 30: no answer within 0.2 s");
        assert!(matches!(e, Error::TimedOut { .. }));
        let mut c = Command::new("sh");
        c.args(["-c", "echo done"]);
        let o = output_within(c, "sh", Duration::from_secs(30)).unwrap();
        assert_eq!(o.stdout, b"done\n");
    }

    #[test]
    fn output_captures_both_streams_and_the_status() {
        let mut c = command("sh");
        c.args(["-c", "echo out; echo err >&2; exit 3"]);
        let o = output(c, "sh").unwrap();
        assert_eq!(o.status.code(), Some(3));
        assert_eq!(o.stdout, b"out\n");
        assert_eq!(o.stderr, b"err\n");
    }

    #[test]
    fn recv_line_gives_the_lines_then_none_at_the_end() {
        let mut c = Command::new("printf")
            .arg("a\nb\n")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = lines(c.stdout.take().unwrap());
        let t = Duration::from_secs(10);
        assert_eq!(recv_line(&rx, t).unwrap().as_deref(), Some("a"));
        assert_eq!(recv_line(&rx, t).unwrap().as_deref(), Some("b"));
        assert_eq!(recv_line(&rx, t).unwrap(), None);
        c.wait().unwrap();
    }
}
