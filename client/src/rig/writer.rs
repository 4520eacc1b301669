//! A `plugpull write …` child: started, its run id read from its first line
//! (`run id: ID`), then its stderr read for the progress line's acknowledged count
//! (parsed by [`crate::progress::acknowledged`]).
//!
//! Two ways to read it: [`spawn`] hands over its stdout and stderr as readers,
//! read only when asked with [`wait_stderr`], [`wait_acknowledged`], [`finish`]
//! (the tests: each wait is a blocking read); a [`Following`] writer has both drained by threads, so it can be left running while
//! its latest progress line stays at hand and every wait can be cancelled (the demo).

use super::proc;
use crate::progress;
use crate::Error;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// A `plugpull write …` that printed its run id: the process, its run id (16 hex
/// digits), the rest of its stdout, its stderr (progress lines, messages).
pub type Spawned = (
    Child,
    String,
    BufReader<ChildStdout>,
    BufReader<ChildStderr>,
);

/// Spawns `cmd` (a `plugpull write …` command) with its stdout and stderr piped and
/// returns once it printed `run id: …`. `Err`, naming it `what` and carrying its
/// stderr, when its first line is something else; it is killed then.
pub fn spawn(cmd: Command, what: &str) -> Result<Spawned, Error> {
    let mut child = proc::spawn_piped(cmd, what)?;
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    let Some(run) = line.trim().strip_prefix("run id: ").map(str::to_string) else {
        proc::Guard(Some(child)).kill();
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        return Err(Error::Msg(format!("{what} said {line:?}; stderr: {rest}")));
    };
    Ok((child, run, stdout, stderr))
}

/// Reads the writer's `stderr` up to the first line for which `f` is true and
/// returns that line; `Err`, with what it read, when stderr ends first (the writer
/// `child` is waited for then, and its status named).
pub fn wait_stderr(
    child: &mut Child,
    stderr: &mut BufReader<ChildStderr>,
    mut f: impl FnMut(&str) -> bool,
) -> Result<String, Error> {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stderr
            .read_line(&mut line)
            .map_err(|e| Error::Msg(format!("writer stderr: {e}")))?;
        if n == 0 {
            let st = child.wait().map_err(|e| Error::Msg(e.to_string()))?;
            return Err(Error::Msg(format!(
                "the writer ended ({st}); stderr:\n{seen}"
            )));
        }
        if f(line.trim_end()) {
            return Ok(line);
        }
        seen.push_str(&line);
    }
}

/// Waits for a progress line on the writer's `stderr` reporting at least `n`
/// acknowledgements confirmed by the listener; returns that count.
pub fn wait_acknowledged(
    child: &mut Child,
    stderr: &mut BufReader<ChildStderr>,
    n: u64,
) -> Result<u64, Error> {
    let line = wait_stderr(child, stderr, |l| {
        progress::acknowledged(l).is_some_and(|a| a >= n)
    })?;
    Ok(progress::acknowledged(line.trim_end()).unwrap_or(n))
}

/// Waits for the writer `child` to exit; returns its status and the rest of its
/// stdout and stderr (both read at once: a writer blocked on a full stderr never
/// closes stdout).
pub fn finish(
    mut child: Child,
    mut stdout: BufReader<ChildStdout>,
    mut stderr: BufReader<ChildStderr>,
) -> Result<(ExitStatus, String, String), Error> {
    let err = std::thread::spawn(move || {
        let mut err = String::new();
        stderr.read_to_string(&mut err).map(|_| err)
    });
    let mut out = String::new();
    stdout
        .read_to_string(&mut out)
        .map_err(|e| Error::Msg(format!("writer stdout: {e}")))?;
    let err = err
        .join()
        .map_err(|_| Error::Msg("stderr reader panicked".into()))?
        .map_err(|e| Error::Msg(format!("writer stderr: {e}")))?;
    let st = child.wait().map_err(|e| Error::Msg(e.to_string()))?;
    Ok((st, out, err))
}

/// A writer whose output threads drain; SIGKILLed and reaped on drop.
pub struct Following {
    /// The process.
    pub guard: proc::Guard,
    /// Its run id (16 hex digits).
    pub run: String,
    stderr: Receiver<String>,
    _stdout: Receiver<String>,
    last: String,
}

impl Following {
    /// Hands a [`spawn`]ed writer's output to threads that drain it.
    pub fn new((child, run, stdout, stderr): Spawned) -> Following {
        Following {
            guard: proc::Guard(Some(child)),
            run,
            stderr: proc::lines(stderr),
            _stdout: proc::lines(stdout),
            last: String::new(),
        }
    }

    /// Waits (cancellably) for a progress line whose acknowledged count is positive:
    /// acknowledgements are flowing to the listener. `what` names it in the error when
    /// it ends first.
    pub fn wait_acks(&mut self, what: &str) -> Result<(), Error> {
        while let Some(l) = proc::recv_line(&self.stderr, Duration::MAX)? {
            let Some(n) = progress::acknowledged(&l) else {
                continue;
            };
            self.last = l;
            if n > 0 {
                return Ok(());
            }
        }
        Err(Error::Msg(format!(
            "the {what} ended before acknowledging anything"
        )))
    }

    /// The latest progress line seen so far.
    pub fn progress(&mut self) -> &str {
        while let Ok(l) = self.stderr.try_recv() {
            if l.starts_with(progress::PREFIX) {
                self.last = l;
            }
        }
        &self.last
    }
}
