//! Harness for the end-to-end tests: real `plugpull-listener` and `plugpull`
//! processes on real sockets and files.
//!
//! The processes come from the rig the demo uses too ([`plugpull_client::rig`]):
//! [`Listener`], [`Writer`], [`pg::PgCluster`] and [`simfs::SimFs`] are thin
//! wrappers that panic where the rig returns an error, plus what only tests need
//! (skip logging, hand-made wire frames, JSON helpers).
//!
//! The binaries come from the same target directory as the test executable
//! (`target/release` or `target/debug`); build them first with
//! `cargo build --release --workspace` (the README's test command does).

pub mod blockdev;
pub mod browser;
pub mod ledger_file;
pub mod loopfs;
pub mod machine;
pub mod pg;
pub mod proxy;
pub mod simfs;

use plugpull_client::rig;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// A file-run manifest for tests that talk the wire protocol by hand (`RawConn`):
/// host `host`, target `target` of `size` bytes in blocks of `block_size`, one job,
/// `fdatasync`, random pattern, no recorded identity or prior runs.
pub fn raw_manifest(
    host: &str,
    target: &str,
    size: u64,
    block_size: u32,
) -> Box<plugpull::ledger::Manifest> {
    Box::new(plugpull::ledger::Manifest::example_file(
        host, target, size, block_size,
    ))
}

/// The path of a workspace binary built beside this test executable.
///
/// Panics, naming the command to run, when it has not been built.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test binary>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --release --workspace` first",
        p.display()
    );
    p
}

/// A running listener on 127.0.0.1 with its own data directory; killed on drop.
/// The rig's [`rig::listener::Listener`] (its `data_dir` and `log`, `addr()`,
/// `kill()`, `log_text()`, `ledger_path()` are reached through it), panicking where
/// that returns an error.
pub struct Listener(rig::listener::Listener);

impl Listener {
    /// Starts a listener on a free port with a data directory under `dir`.
    pub fn start(dir: &Path) -> Listener {
        Listener::start_with(dir, &[])
    }

    /// Starts a listener with extra arguments.
    pub fn start_with(dir: &Path, extra: &[&str]) -> Listener {
        Listener::start_at(dir, &dir.join("listener-data"), extra)
    }

    /// Starts a listener with its data directory at `data_dir` (e.g. on a small
    /// filesystem) and its log at `dir/listener.log`.
    pub fn start_at(dir: &Path, data_dir: &Path, extra: &[&str]) -> Listener {
        let log = dir.join("listener.log");
        rig::listener::Listener::start(&bin("plugpull-listener"), data_dir, &log, extra)
            .map(Listener)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts it again on the same data directory and port.
    pub fn restart(&mut self) {
        self.0.restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Process id of the running listener.
    pub fn pid(&self) -> u32 {
        self.0.pid().expect("listener running")
    }
}

impl std::ops::Deref for Listener {
    type Target = rig::listener::Listener;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Listener {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Runs `plugpull ARGS` to completion.
pub fn plugpull(args: &[&str]) -> Output {
    Command::new(bin("plugpull"))
        .args(args)
        .env_remove("PLUGPULL_SECRET")
        .output()
        .expect("run plugpull")
}

/// Stdout of a finished command as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr of a finished command as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run id from the first line of `plugpull write` output (`run id: ID`).
pub fn run_id(o: &Output) -> String {
    let out = stdout(o);
    let first = out.lines().next().unwrap_or_default();
    first
        .strip_prefix("run id: ")
        .unwrap_or_else(|| panic!("first line {first:?}; stderr: {}", stderr(o)))
        .to_string()
}

/// Runs `plugpull verify --read-back --json` with `extra` arguments; returns exit code
/// and the JSON object (`Null` when stdout is not JSON, e.g. on exit 2). `--read-back`
/// judges a run that finished on this boot as a read-back check (exit 0 when all is
/// there); a cut run is judged the same with or without it.
pub fn verify_json(listener: &Listener, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let mut args = vec![
        "verify",
        "--read-back",
        "--listener",
        listener.addr(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = plugpull(&args);
    let v = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (o.status.code().unwrap_or(-1), v, stderr(&o))
}

/// Waits until `f` is true, polling every 20 ms, for at most `limit`.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Says loudly that `test` could not run here and why: on stderr, and as a line
/// `SKIPPED test: why` appended to `skipped-tests.log` beside the binaries, which
/// `scripts/test` prints and counts after the run (cargo hides the stderr of tests
/// that pass).
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("SKIPPED {test}: {why}");
    eprintln!("\n*** {line} ***\n");
    let exe = std::env::current_exe().expect("current exe");
    if let Some(dir) = exe.parent().and_then(Path::parent) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("skipped-tests.log"))
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// True when running as root (uid 0).
pub fn is_root() -> bool {
    rig::proc::is_root()
}

/// Sends SIGKILL to a child and reaps it.
pub fn sigkill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A blocking protocol client for tests that must speak the wire format by hand
/// (replays, forged frames, version mismatches).
pub struct RawConn {
    /// The socket.
    pub sock: std::net::TcpStream,
    buf: Vec<u8>,
    /// The session once [`RawConn::handshake`] got `Welcome`: frames are then sealed
    /// and checked like a real agent's.
    pub session: Option<plugpull::auth::Session>,
}

impl RawConn {
    /// Connects to `addr`.
    pub fn connect(addr: &str) -> RawConn {
        let sock = std::net::TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        RawConn {
            sock,
            buf: Vec::new(),
            session: None,
        }
    }

    /// Sends one request frame (sealed once the handshake is done).
    pub fn send(&mut self, req: &plugpull::wire::Request) {
        use std::io::Write;
        let frame = match &mut self.session {
            Some(s) => plugpull::wire::encode_sealed(req, &mut s.send),
            None => plugpull::wire::encode(req),
        };
        self.sock.write_all(&frame).expect("send");
    }

    /// Receives one response frame (checking its seal once the handshake is done);
    /// `None` when the listener closed the connection.
    pub fn recv(&mut self) -> Option<plugpull::wire::Response> {
        use std::io::Read;
        loop {
            if let Some(n) = plugpull::wire::check(&self.buf).expect("frame within limits") {
                let body = &self.buf[plugpull::wire::PREFIX_LEN..n];
                let body = match &mut self.session {
                    Some(s) => s.recv.open(body).expect("listener frame authenticates"),
                    None => body,
                };
                let msg = plugpull::wire::decode(body).expect("valid response");
                self.buf.drain(..n);
                return Some(msg);
            }
            let mut chunk = [0u8; 65536];
            match self.sock.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Runs the handshake with `secret`; returns the listener's answer to `Auth`.
    pub fn handshake(
        &mut self,
        secret: &plugpull::auth::Secret,
    ) -> Option<plugpull::wire::Response> {
        use plugpull::wire::{Request, Response, PROTOCOL_VERSION};
        let nonce = [7u8; 32];
        self.send(&Request::Hello {
            version: PROTOCOL_VERSION,
            nonce,
        });
        let Some(Response::Challenge { nonce: theirs, .. }) = self.recv() else {
            panic!("no challenge")
        };
        self.send(&Request::Auth {
            proof: secret.agent_proof(&theirs, &nonce),
        });
        let answer = self.recv();
        if answer == Some(Response::Welcome) {
            self.session = Some(secret.agent_session(&nonce, &theirs));
        }
        answer
    }
}

/// A running `plugpull write …` that printed its run id. Its stdout and stderr stay
/// open (the writer prints until it ends). What [`rig::writer::spawn`] returns, with
/// the rig's reading functions as methods that panic where those return an error.
pub struct Writer {
    /// The process.
    pub child: Child,
    /// Its run id (16 hex digits).
    pub run: String,
    /// The rest of its stdout.
    pub stdout: BufReader<ChildStdout>,
    /// Its stderr (progress lines, messages).
    pub stderr: BufReader<ChildStderr>,
}

impl Writer {
    /// Spawns `plugpull ARGS` and returns once it printed `run id: …`; panics with its
    /// stderr when it does not.
    pub fn spawn(args: &[&str]) -> Writer {
        Writer::spawn_env(args, &[])
    }

    /// [`Writer::spawn`] with environment variables `env` set (e.g. a simulated boot
    /// id, `PLUGPULL_SIMULATED_BOOT_ID`).
    pub fn spawn_env(args: &[&str], env: &[(&str, &str)]) -> Writer {
        let mut cmd = Command::new(bin("plugpull"));
        cmd.args(args).env_remove("PLUGPULL_SECRET");
        cmd.envs(env.iter().copied());
        let (child, run, stdout, stderr) = rig::writer::spawn(cmd, &format!("plugpull {args:?}"))
            .unwrap_or_else(|e| panic!("{e}"));
        Writer {
            child,
            run,
            stdout,
            stderr,
        }
    }

    /// Reads stderr up to the first line for which `f` is true and returns that line;
    /// panics, with what it read, when stderr ends first.
    pub fn wait_stderr(&mut self, f: impl FnMut(&str) -> bool) -> String {
        rig::writer::wait_stderr(&mut self.child, &mut self.stderr, f)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits for a progress line (`progress: …, N acknowledged`, both workloads)
    /// reporting at least `n` acknowledgements confirmed by the listener; returns N.
    pub fn wait_acknowledged(&mut self, n: u64) -> u64 {
        rig::writer::wait_acknowledged(&mut self.child, &mut self.stderr, n)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Waits for the writer to exit; returns its status and the rest of its stdout and stderr.
    pub fn finish(self) -> (ExitStatus, String, String) {
        rig::writer::finish(self.child, self.stdout, self.stderr).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// N from a progress line ending `, N acknowledged`.
pub fn progress_acknowledged(line: &str) -> Option<u64> {
    plugpull_client::progress::acknowledged(line)
}

/// The `verdicts` object of a file report with `counts` set and every other verdict 0.
pub fn verdicts(counts: &[(&str, u64)]) -> serde_json::Value {
    let mut v = serde_json::json!({"intact": 0, "lost_write": 0, "torn_in_flight": 0,
        "torn_acknowledged": 0, "corrupt": 0, "misdirected": 0, "unserializable": 0, "missing": 0});
    for (k, n) in counts {
        v[*k] = serde_json::json!(n);
    }
    v
}

/// Runs `plugpull write file` against `l` on `target` of `size` (as the command line
/// takes it) with `extra` arguments to the end; panics unless it exits 0. Returns the
/// run id.
pub fn write_run(l: &Listener, target: &Path, size: &str, extra: &[&str]) -> String {
    run_id(&write_file(l, target, size, extra))
}

/// [`write_run`]'s command, its output returned whole (stdout: the run id line, the
/// stack under test, the summary); panics unless it exits 0.
pub fn write_file(l: &Listener, target: &Path, size: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        size,
    ];
    args.extend_from_slice(extra);
    let o = plugpull(&args);
    assert_eq!(o.status.code(), Some(0), "write failed: {}", stderr(&o));
    o
}

/// Builds, in the run's volatile canary files (`.plugpull-canary-*` in `dir`), the
/// state a power cut leaves there: every record zeroed, as if none of the writes the
/// agent made without a durability call had reached the medium. A test that kills
/// a writer without cutting any power calls it to judge the run as a cut by hand;
/// without it, verify rightly says the canary survived (NOT MEASURED). Returns how
/// many canary files it zeroed (3 per run).
pub fn lose_canary(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("read the canary's directory") {
        let e = e.unwrap();
        if e.file_name()
            .to_string_lossy()
            .starts_with(".plugpull-canary-")
        {
            let len = e.metadata().unwrap().len() as usize;
            std::fs::write(e.path(), vec![0u8; len]).unwrap();
            n += 1;
        }
    }
    n
}
