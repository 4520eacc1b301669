//! `plugpull demo`: the whole procedure on this machine, without hardware.
//!
//! With FUSE (root, `/dev/fuse`, `fusermount3`) the demo runs the real procedure
//! twice against the power-cut simulator `plugpull-simfs`: once on an **honest**
//! simulated device, once on a **lying** one (fsync returns before the data is
//! durable). On each: a listener on loopback; the file workload and — when
//! PostgreSQL is installed — `plugpull write pgbench` against a throwaway cluster
//! whose data directory lives on the simulated device; a power cut under load;
//! unmount, mount again, PostgreSQL crash recovery; verify. It prints both reports
//! and one verdict line per device:
//!
//! ```text
//! honest device: PASS, 41230 acknowledged (38112 writes, 3118 commits), 0 lost
//! lying device: FAIL, 2875 acknowledged writes lost, 402 commits lost
//! ```
//!
//! Exit status: 0 when the honest device passes and the lying one is caught (the
//! tool works), 1 otherwise, 2 when the demo could not run (or was interrupted).
//!
//! Without FUSE it says so and falls back to the old demo: the writer is SIGKILLed
//! mid-run on the local disk (the page cache survives, so nothing may be lost).
//! Without PostgreSQL it runs the file workload only and says so.
//!
//! It leaves nothing mounted or running behind, also when interrupted with Ctrl-C:
//! every process and the mount live in guards whose `Drop` kills or unmounts them,
//! and the work runs under a `select!` with Ctrl-C that drops it (and so the
//! guards) when the signal comes. Children run in their own process groups, so a
//! Ctrl-C at the terminal reaches only the demo, which then tears down in order:
//! writers, PostgreSQL, the mount, the listener.

use crate::Error;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// Parses a number of seconds above 0.
fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds above 0")),
    }
}

/// Options of `plugpull demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Seconds of load before each cut (more than 0).
    #[arg(long, default_value_t = 3.0, value_parser = positive_secs)]
    pub cut_after: f64,
    /// Keep the scratch directory (listener data, backing directories, logs) for inspection.
    #[arg(long)]
    pub keep: bool,
    /// Run only the file workload, even where PostgreSQL is installed.
    #[arg(long)]
    pub no_pg: bool,
    /// Seed of the simulator's random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// A child process killed (SIGKILL) and reaped on drop.
struct Guard(Option<Child>);

impl Guard {
    /// Kills and reaps the child now.
    fn kill(&mut self) {
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

/// A binary installed beside this one (`plugpull-listener`, `plugpull-simfs`).
pub fn sibling(name: &str) -> Result<PathBuf, Error> {
    let me = std::env::current_exe().map_err(|e| Error(format!("cannot locate plugpull: {e}")))?;
    let p = me.with_file_name(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(Error(format!(
            "{} not found beside {}: build the workspace (cargo build --release --workspace)",
            name,
            me.display()
        )))
    }
}

/// A command whose process gets a process group of its own, so a Ctrl-C at the
/// terminal reaches only the demo, which then stops everything in order.
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    c.process_group(0).stdin(Stdio::null());
    c
}

/// The lines of a child's output, read by a thread until EOF (which also keeps the
/// pipe drained, so the child never blocks on it).
fn lines(r: impl Read + Send + 'static) -> UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                // Nobody listens any more; keep draining.
                continue;
            }
        }
    });
    rx
}

/// Runs a command to completion without blocking the runtime; the child is
/// SIGKILLed if the demo is interrupted meanwhile.
async fn run_to_end(mut cmd: Command, what: &str) -> Result<Output, Error> {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error(format!("cannot run {what}: {e}")))?;
    struct KillOnDrop(Option<u32>);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                // SAFETY: plain kill(2) of our own, not yet reaped child.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        }
    }
    let mut armed = KillOnDrop(Some(child.id()));
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .map_err(|e| Error(format!("{what}: {e}")))?
        .map_err(|e| Error(format!("{what}: {e}")))?;
    armed.0 = None;
    Ok(out)
}

fn start_listener(dir: &Path) -> Result<(Guard, String), Error> {
    let mut child = command(sibling("plugpull-listener")?)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("listener-data"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("listener.log")).map_err(|e| Error(e.to_string()))?)
        .spawn()
        .map_err(|e| Error(format!("cannot start plugpull-listener: {e}")))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| Error(e.to_string()))?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .ok_or_else(|| Error(format!("listener said {line:?}")))?
        .to_string();
    Ok((Guard(Some(child)), addr))
}

/// Why FUSE cannot be used here, if it cannot.
fn fuse_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("there is no /dev/fuse".into());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false);
    if !on_path {
        return Some("fusermount3 is not installed (package fuse3)".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the simulator mounts with allow_other, which needs root".into());
    }
    if let Err(e) = sibling("plugpull-simfs") {
        return Some(e.0);
    }
    None
}

/// Runs the demo; `Ok(true)` when every verdict came out as expected.
pub async fn demo(args: &DemoArgs) -> Result<bool, Error> {
    let dir = std::env::temp_dir().join(format!("plugpull-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error(format!("cannot create {}: {e}", dir.display())))?;
    let result = tokio::select! {
        r = run(&dir, args) => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: stopping the writers and PostgreSQL, unmounting the simulator");
            Err(Error("interrupted".into()))
        }
    };
    // Guards inside `run` are dropped by now: nothing is left running or mounted.
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run(dir: &Path, args: &DemoArgs) -> Result<bool, Error> {
    if let Some(why) = fuse_unavailable() {
        println!("== FUSE is not available: {why}.");
        println!("== Without the power-cut simulator the demo can only SIGKILL the writer on the local disk.");
        return sigkill_demo(dir, args).await;
    }
    // PostgreSQL's postmaster outlives pg_ctl, its parent: as a child subreaper the
    // demo inherits it and can reap it after killing it.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let (_listener, addr) = start_listener(dir)?;
    println!(
        "== listener on {addr} (ledger in {})",
        dir.join("listener-data").display()
    );
    let pg = if args.no_pg {
        println!("== PostgreSQL part skipped (--no-pg)");
        None
    } else {
        match pg_setup() {
            Ok(p) => Some(p),
            Err(why) => {
                println!("== PostgreSQL is not available ({why}): running the file workload only");
                None
            }
        }
    };
    let ctx = Ctx {
        dir: dir.to_path_buf(),
        addr,
        me: std::env::current_exe().map_err(|e| Error(e.to_string()))?,
        simfs: sibling("plugpull-simfs")?,
        pg,
        args: args.clone(),
    };
    let honest = device(&ctx, "honest").await?;
    let lying = device(&ctx, "lying").await?;
    println!();
    side_by_side(&honest, &lying);
    println!();
    println!("{}", honest.verdict_line());
    println!("{}", lying.verdict_line());
    let works = honest.passed() && !lying.passed();
    println!(
        "{}",
        if works {
            "the tool works: the honest device kept every acknowledged write, the lying one was caught"
        } else if !honest.passed() {
            "UNEXPECTED: the honest device lost acknowledged data"
        } else {
            "UNEXPECTED: the lying device was not caught losing anything"
        }
    );
    Ok(works)
}

/// What every device run needs.
struct Ctx {
    dir: PathBuf,
    addr: String,
    me: PathBuf,
    simfs: PathBuf,
    pg: Option<PgSetup>,
    args: DemoArgs,
}

/// How to run PostgreSQL here.
#[derive(Clone)]
struct PgSetup {
    bin: PathBuf,
    /// `(uid, gid)` of `postgres` when we are root (PostgreSQL refuses to run as root).
    owner: Option<(u32, u32)>,
}

/// Finds PostgreSQL's server binaries and the user to run them as.
fn pg_setup() -> Result<PgSetup, String> {
    let mut candidates = vec![PathBuf::from("/usr/lib/postgresql/15/bin")];
    if let Ok(o) = Command::new("pg_config").arg("--bindir").output() {
        if o.status.success() {
            candidates.push(PathBuf::from(
                String::from_utf8_lossy(&o.stdout).trim().to_string(),
            ));
        }
    }
    let bin = candidates
        .into_iter()
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
        .ok_or("no initdb in /usr/lib/postgresql/15/bin or `pg_config --bindir`")?;
    // SAFETY: geteuid has no preconditions.
    let owner = if unsafe { libc::geteuid() } == 0 {
        let name = std::ffi::CString::new("postgres").unwrap();
        // SAFETY: getpwnam returns null or a pointer to static storage, read at once.
        unsafe {
            let pw = libc::getpwnam(name.as_ptr());
            if pw.is_null() {
                return Err("running as root and there is no `postgres` user to run it as".into());
            }
            Some(((*pw).pw_uid, (*pw).pw_gid))
        }
    } else {
        None
    };
    if pg_verify_args("host=/tmp", Path::new("/tmp/x.log"), "1s").is_err() {
        return Err("this build of plugpull has no pgbench workload".into());
    }
    Ok(PgSetup { bin, owner })
}

/// `plugpull verify` options for a pgbench run, parsed as the command line would be.
fn pg_verify_args(
    dsn: &str,
    log: &Path,
    wait: &str,
) -> Result<crate::pgbench::PgVerifyArgs, String> {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        pg: crate::pgbench::PgVerifyArgs,
    }
    let log = log.display().to_string();
    Cli::try_parse_from([
        "plugpull",
        "--dsn",
        dsn,
        "--pg-wait",
        wait,
        "--pg-log",
        &log,
    ])
    .map(|c| c.pg)
    .map_err(|e| e.to_string())
}

/// A `plugpull-simfs` mount; unmounted (lazily if busy) and its process ended on drop.
struct Mount {
    simfs: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
    log: PathBuf,
    seed: u64,
    child: Option<Child>,
    stdout: Option<UnboundedReceiver<String>>,
}

impl Mount {
    /// Mounts `dir/mnt` over `dir/backing` in `mode`.
    async fn start(simfs: &Path, dir: &Path, mode: &str, seed: u64) -> Result<Mount, Error> {
        let backing = dir.join("backing");
        let mnt = dir.join("mnt");
        for d in [&backing, &mnt] {
            std::fs::create_dir_all(d)
                .map_err(|e| Error(format!("cannot create {}: {e}", d.display())))?;
        }
        let mut m = Mount {
            simfs: simfs.to_path_buf(),
            backing,
            mnt,
            log: dir.join("simfs.log"),
            seed,
            child: None,
            stdout: None,
        };
        m.mount(mode).await?;
        Ok(m)
    }

    async fn mount(&mut self, mode: &str) -> Result<(), Error> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| Error(e.to_string()))?;
        let mut child = command(&self.simfs)
            .arg("mount")
            .arg("--backing")
            .arg(&self.backing)
            .arg("--mountpoint")
            .arg(&self.mnt)
            .args(["--mode", mode, "--seed", &self.seed.to_string()])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| Error(format!("cannot start plugpull-simfs: {e}")))?;
        let mut out = lines(child.stdout.take().unwrap());
        self.child = Some(child);
        let first = tokio::time::timeout(Duration::from_secs(30), out.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        self.stdout = Some(out);
        if first != format!("mounted {}", self.mnt.display()) {
            return Err(Error(format!(
                "plugpull-simfs did not mount {} (it said {first:?}); log: {}",
                self.mnt.display(),
                self.log.display()
            )));
        }
        Ok(())
    }

    /// Pulls the plug; returns the summary line.
    async fn cut(&self) -> Result<String, Error> {
        let mut c = command(&self.simfs);
        c.arg("cut").arg("--mountpoint").arg(&self.mnt);
        let o = run_to_end(c, "plugpull-simfs cut").await?;
        if !o.status.success() {
            return Err(Error(format!(
                "plugpull-simfs cut failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// Unmounts (lazily if busy) and waits for the mount process.
    async fn umount(&mut self) -> Result<(), Error> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let mut c = command(&self.simfs);
        c.arg("umount").arg("--mountpoint").arg(&self.mnt);
        let o = run_to_end(c, "plugpull-simfs umount").await;
        let ok = matches!(&o, Ok(o) if o.status.success());
        if !ok {
            self.child = Some(child);
            self.force_down();
            return Err(Error(format!(
                "plugpull-simfs umount failed: {}",
                match o {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.0,
                }
            )));
        }
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        self.stdout = None;
        Ok(())
    }

    /// Unmounts and mounts the same backing directory again in `mode`.
    async fn remount(&mut self, mode: &str) -> Result<(), Error> {
        self.umount().await?;
        self.mount(mode).await
    }

    /// Best effort, never blocks for long: lazy unmount, then the mount process is
    /// killed (which aborts the FUSE connection) and reaped.
    fn force_down(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new(&self.simfs)
            .args(["umount", "--timeout-secs", "10", "--mountpoint"])
            .arg(&self.mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mnt)
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.force_down();
    }
}

/// A throwaway PostgreSQL cluster with its data directory on the simulated device;
/// on drop every one of its processes is SIGKILLed (as by a power cut).
struct Pg {
    setup: PgSetup,
    /// The data directory (inside the mount).
    data: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    port: u16,
    /// The postmaster, once started.
    pid: Option<u32>,
}

impl Pg {
    /// `initdb` in `<mount>/pg/data` (with its fsyncs: what it wrote must survive a
    /// cut on an honest device); socket and log under `dir`.
    async fn init(setup: &PgSetup, mnt: &Path, dir: &Path) -> Result<Pg, Error> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| Error(format!("no free port: {e}")))?;
        let pgdir = mnt.join("pg");
        // Socket and log outside the mount, in a directory the server's user owns.
        let own = dir.join("pg");
        let sock = own.join("sock");
        for d in [&pgdir, &own, &sock] {
            std::fs::create_dir_all(d)
                .map_err(|e| Error(format!("cannot create {}: {e}", d.display())))?;
            if let Some((uid, gid)) = setup.owner {
                std::os::unix::fs::chown(d, Some(uid), Some(gid))
                    .map_err(|e| Error(format!("cannot chown {}: {e}", d.display())))?;
            }
        }
        let pg = Pg {
            setup: setup.clone(),
            data: pgdir.join("data"),
            log: own.join("postgres.log"),
            sock,
            port,
            pid: None,
        };
        let mut c = pg.server_cmd("initdb");
        c.arg("-D").arg(&pg.data).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        let o = run_to_end(c, "initdb").await?;
        if !o.status.success() {
            return Err(Error(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        let conf = format!(
            "\n# plugpull demo\nport = {port}\nlisten_addresses = ''\nunix_socket_directories = '{}'\n",
            pg.sock.display()
        );
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(pg.data.join("postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()).and_then(|_| f.sync_all()))
            .map_err(|e| Error(format!("cannot write postgresql.conf: {e}")))?;
        Ok(pg)
    }

    fn server_cmd(&self, prog: &str) -> Command {
        let mut c = command(self.setup.bin.join(prog));
        c.current_dir(self.sock.parent().unwrap_or(Path::new("/")))
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST");
        if let Some((uid, gid)) = self.setup.owner {
            use std::os::unix::process::CommandExt;
            c.uid(uid).gid(gid);
        }
        c
    }

    /// `pg_ctl start -w` (crash recovery included); `Err` carries the log's tail.
    async fn start(&mut self) -> Result<(), String> {
        let mut c = self.server_cmd("pg_ctl");
        c.arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(&self.log)
            .args(["-w", "-t", "60", "start"]);
        let o = run_to_end(c, "pg_ctl start").await.map_err(|e| e.0)?;
        // The pid file exists once the postmaster runs, even when start failed later.
        self.pid = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok());
        if o.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr),
                self.log_tail(8)
            ))
        }
    }

    /// `pg_ctl stop -m fast`, falling back to killing every process.
    async fn stop(&mut self) {
        let mut c = self.server_cmd("pg_ctl");
        c.arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "-t", "30", "stop"]);
        let _ = run_to_end(c, "pg_ctl stop").await;
        self.kill_all();
    }

    /// SIGKILLs the postmaster and all its children at once, as a power cut does:
    /// the postmaster is stopped first so it cannot fork meanwhile.
    fn kill_all(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        let is_postgres = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() == "postgres");
        if !is_postgres {
            return;
        }
        // SAFETY: plain kill(2) calls on process ids we just checked.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        let mut victims = children_of(pid);
        victims.push(pid);
        for &v in &victims {
            // SAFETY: as above.
            unsafe { libc::kill(v as libc::pid_t, libc::SIGKILL) };
        }
        // The demo is a child subreaper (see `run`), so the postmaster, orphaned when
        // pg_ctl exited, is our child: reap it, or PostgreSQL's next start would see
        // its zombie and refuse ("lock file postmaster.pid already exists"). Wait
        // until every victim is gone.
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            for &v in &victims {
                // SAFETY: waitpid on a specific pid; ECHILD when it is not ours.
                unsafe { libc::waitpid(v as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
            }
            if Instant::now() >= end || victims.iter().all(|&v| stat_of(v).is_none()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn conninfo(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.sock.display(),
            self.port
        )
    }

    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Process ids whose parent is `pid`, from `/proc/*/stat`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| stat_of(p).is_some_and(|(_, ppid)| ppid == pid))
        .collect()
}

/// `(state, ppid)` of a process, from `/proc/PID/stat` (after the comm's last `)`).
fn stat_of(pid: u32) -> Option<(char, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// A `plugpull write …` child: its run id, and its output lines.
struct WriterChild {
    guard: Guard,
    run: plugpull::RunId,
    stderr: UnboundedReceiver<String>,
    _stdout: UnboundedReceiver<String>,
    /// The last progress line.
    last: String,
}

impl WriterChild {
    /// Starts `plugpull ARGS` and waits for its `run id:` line.
    async fn start(me: &Path, args: &[&str], what: &str) -> Result<WriterChild, Error> {
        let mut child = command(me)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error(format!("cannot start the {what}: {e}")))?;
        let mut stdout = lines(child.stdout.take().unwrap());
        let mut stderr = lines(child.stderr.take().unwrap());
        let guard = Guard(Some(child));
        let run = loop {
            match stdout.recv().await {
                Some(l) => {
                    if let Some(r) = l.strip_prefix("run id: ") {
                        break r.parse().map_err(Error)?;
                    }
                }
                None => {
                    let mut err = String::new();
                    while let Ok(l) = stderr.try_recv() {
                        err.push_str(&l);
                        err.push('\n');
                    }
                    return Err(Error(format!("the {what} ended early: {err}")));
                }
            }
        };
        Ok(WriterChild {
            guard,
            run,
            stderr,
            _stdout: stdout,
            last: String::new(),
        })
    }

    /// Waits for a progress line whose last number (`acknowledged N` / `N confirmed`)
    /// is positive: acknowledgements are flowing to the listener.
    async fn wait_acks(&mut self, what: &str) -> Result<(), Error> {
        while let Some(l) = self.stderr.recv().await {
            let Some(n) = crate::progress::acknowledged(&l) else {
                continue;
            };
            self.last = l;
            if n > 0 {
                return Ok(());
            }
        }
        Err(Error(format!(
            "the {what} ended before acknowledging anything"
        )))
    }

    /// The latest progress line seen so far.
    fn progress(&mut self) -> &str {
        while let Ok(l) = self.stderr.try_recv() {
            if l.starts_with(crate::progress::PREFIX) {
                self.last = l;
            }
        }
        &self.last
    }
}

/// The figures of a file report the verdict line needs.
struct FileOutcome {
    ok: bool,
    acknowledged: u64,
    /// Blocks that lost or damaged acknowledged data.
    lost: u64,
}

/// What one simulated device produced.
struct DeviceResult {
    mode: &'static str,
    file: FileOutcome,
    /// The pgbench report as JSON, when the PostgreSQL part ran.
    pg: Option<serde_json::Value>,
}

impl DeviceResult {
    fn pg_ok(&self) -> bool {
        self.pg.as_ref().is_none_or(|v| v["ok"] == true)
    }

    fn passed(&self) -> bool {
        self.file.ok && self.pg_ok()
    }

    fn verdict_line(&self) -> String {
        let commits = self
            .pg
            .as_ref()
            .map(|v| v["acknowledged_commits"].as_u64().unwrap_or(0));
        if self.passed() {
            let total = self.file.acknowledged + commits.unwrap_or(0);
            let parts = match commits {
                Some(c) => format!(" ({} writes, {c} commits)", self.file.acknowledged),
                None => String::new(),
            };
            return format!(
                "{} device: PASS, {total} acknowledged{parts}, 0 lost",
                self.mode
            );
        }
        let mut s = format!(
            "{} device: FAIL, {} acknowledged writes lost",
            self.mode, self.file.lost
        );
        if let Some(v) = &self.pg {
            if v["server_reachable"] == false {
                s.push_str(", PostgreSQL did not recover");
            } else {
                s.push_str(&format!(
                    ", {} commits lost",
                    v["lost_commits"].as_u64().unwrap_or(0)
                ));
                if v["invariant"]["holds"] == false {
                    s.push_str(", balance invariant broken");
                }
            }
        }
        s
    }
}

/// Prints the two devices' key figures in two columns.
fn side_by_side(a: &DeviceResult, b: &DeviceResult) {
    let row = |name: &str, f: &dyn Fn(&DeviceResult) -> String| {
        println!("{name:<26} {:>16} {:>16}", f(a), f(b));
    };
    row("", &|d| format!("{} device", d.mode));
    row("acknowledged writes", &|d| d.file.acknowledged.to_string());
    row("blocks lost or damaged", &|d| d.file.lost.to_string());
    if a.pg.is_some() || b.pg.is_some() {
        let pg = |key: &'static str| {
            move |d: &DeviceResult| match &d.pg {
                Some(v) if v["server_reachable"] == false => "no recovery".to_string(),
                Some(v) => v[key].to_string(),
                None => "-".to_string(),
            }
        };
        row("acknowledged commits", &pg("acknowledged_commits"));
        row("lost commits", &pg("lost_commits"));
        row("balance invariant", &|d| match &d.pg {
            Some(v) if v["invariant"]["holds"] == true => "holds".to_string(),
            Some(_) => "broken".to_string(),
            None => "-".to_string(),
        });
    }
    row("verdict", &|d| {
        if d.passed() { "PASS" } else { "FAIL" }.to_string()
    });
}

/// One simulated device: mount, load, cut, remount, recover, verify.
async fn device(ctx: &Ctx, mode: &'static str) -> Result<DeviceResult, Error> {
    let ddir = ctx.dir.join(mode);
    let seed = ctx.args.seed;
    println!();
    println!("==================== {mode} device ====================");
    let mut mount = Mount::start(&ctx.simfs, &ddir, mode, seed).await?;
    println!(
        "== plugpull-simfs --mode {mode} --seed {seed} mounted at {} (backing {})",
        mount.mnt.display(),
        mount.backing.display()
    );
    let mut pg = None;
    let mut pgw = None;
    if let Some(setup) = &ctx.pg {
        println!(
            "== initdb in {}/pg/data; PostgreSQL on the simulated device",
            mount.mnt.display()
        );
        let mut p = Pg::init(setup, &mount.mnt, &ddir).await?;
        p.start()
            .await
            .map_err(|t| Error(format!("PostgreSQL did not start:\n{t}")))?;
        let dsn = p.conninfo();
        pg = Some(p);
        println!("== plugpull write pgbench --init --scale 1 --clients 4");
        let args = [
            "write",
            "pgbench",
            "--listener",
            &ctx.addr,
            "--dsn",
            &dsn,
            "--init",
            "--scale",
            "1",
            "--clients",
            "4",
            "--jobs",
            "2",
            "--duration",
            "10m",
            "--progress",
            "1",
        ];
        let mut w = WriterChild::start(&ctx.me, &args, "pgbench writer").await?;
        w.wait_acks("pgbench writer").await?;
        pgw = Some(w);
    }
    let target = mount.mnt.join("target.dat");
    println!(
        "== plugpull write file --target {} --size 16MiB --jobs 4",
        target.display()
    );
    let t = target.display().to_string();
    let args = [
        "write",
        "file",
        "--listener",
        &ctx.addr,
        "--target",
        &t,
        "--size",
        "16MiB",
        "--jobs",
        "4",
        "--duration",
        "10m",
        "--progress",
        "0.5",
    ];
    let mut fw = WriterChild::start(&ctx.me, &args, "file writer").await?;
    fw.wait_acks("file writer").await?;
    tokio::time::sleep(Duration::from_secs_f64(ctx.args.cut_after)).await;
    println!("   file writer: {}", fw.progress());
    if let Some(w) = &mut pgw {
        println!("   pgbench:     {}", w.progress());
    }
    // The writers die first (a whole-machine cut: they must not see the device
    // error and end their runs by it), then the device loses power, then
    // PostgreSQL dies with it.
    fw.guard.kill();
    if let Some(w) = &mut pgw {
        w.guard.kill();
    }
    let summary = mount.cut().await?;
    if let Some(p) = &mut pg {
        p.kill_all();
    }
    println!("== power cut: {summary}");
    mount.remount("honest").await?;
    println!("== mounted again (honest)");
    let mut pg_start_err = None;
    if let Some(p) = &mut pg {
        println!("== starting PostgreSQL: crash recovery");
        if let Err(tail) = p.start().await {
            println!("   PostgreSQL did not start; log tail:\n{tail}");
            pg_start_err = Some(tail);
        }
    }
    println!("== verify: file workload (run {})", fw.run);
    let file = verify_file(ctx, fw.run).await?;
    let mut pg_report = None;
    if let (Some(p), Some(w)) = (&mut pg, &pgw) {
        println!();
        println!("== verify: pgbench workload (run {})", w.run);
        // When PostgreSQL did not start, say so at once instead of waiting for it.
        let wait = if pg_start_err.is_some() { "1s" } else { "30s" };
        let opts = pg_verify_args(&p.conninfo(), &p.log, wait).map_err(Error)?;
        pg_report = Some(verify_pg(ctx, w.run, &opts).await?);
        p.stop().await;
    }
    drop(pg);
    mount.umount().await?;
    Ok(DeviceResult {
        mode,
        file,
        pg: pg_report,
    })
}

/// Verifies a file run with the verifier's own function (device-error rule included)
/// and prints its report.
async fn verify_file(ctx: &Ctx, run: plugpull::RunId) -> Result<FileOutcome, Error> {
    let secret = plugpull::auth::Secret::default();
    let l = crate::verify::fetch(&ctx.addr, &secret, Some(run), "").await?;
    let plugpull::ledger::Workload::File(fm) = &l.manifest.workload else {
        return Err(Error(format!("run {run} is not a file run")));
    };
    let vargs = crate::verify::VerifyArgs {
        run: Some(run),
        host: None,
        target: None,
        json: false,
        show: 5,
    };
    let report = crate::verify::verify_file_run(&l, fm, &vargs, &ctx.addr, &secret).await?;
    crate::verify::print_file_report(&report, 5);
    Ok(FileOutcome {
        ok: report.ok,
        acknowledged: report.acknowledged,
        lost: report.verdicts.failures(),
    })
}

/// Verifies a pgbench run with the verifier's own function, prints its report and
/// returns it as JSON.
async fn verify_pg(
    ctx: &Ctx,
    run: plugpull::RunId,
    opts: &crate::pgbench::PgVerifyArgs,
) -> Result<serde_json::Value, Error> {
    let secret = plugpull::auth::Secret::default();
    let l = crate::verify::fetch(&ctx.addr, &secret, Some(run), "").await?;
    let plugpull::ledger::Workload::Pgbench(pm) = &l.manifest.workload else {
        return Err(Error(format!("run {run} is not a pgbench run")));
    };
    let report =
        crate::pgbench::verify(l.run, &l.manifest, pm, &l.batches, l.finished, opts).await?;
    crate::pgbench::print::print_human(&report, 10);
    serde_json::to_value(&report).map_err(|e| Error(e.to_string()))
}

/// The demo without FUSE: SIGKILL of the writer mid-run on the local disk (the page
/// cache survives, so nothing acknowledged may be lost), then verify.
async fn sigkill_demo(dir: &Path, args: &DemoArgs) -> Result<bool, Error> {
    let (_listener, addr) = start_listener(dir)?;
    println!(
        "== listener on {addr} (ledger in {})",
        dir.join("listener-data").display()
    );
    let target = dir.join("target.dat");
    let me = std::env::current_exe().map_err(|e| Error(e.to_string()))?;
    println!(
        "== writing checksummed blocks to {} with 4 jobs; the cut comes after {} s",
        target.display(),
        args.cut_after
    );
    let t = target.display().to_string();
    let wargs = [
        "write",
        "file",
        "--listener",
        &addr,
        "--size",
        "64MiB",
        "--jobs",
        "4",
        "--duration",
        "10m",
        "-P",
        "1",
        "--target",
        &t,
    ];
    let mut w = WriterChild::start(&me, &wargs, "writer").await?;
    w.wait_acks("writer").await?;
    tokio::time::sleep(Duration::from_secs_f64(args.cut_after)).await;
    println!("   {}", w.progress());
    println!("== cut: SIGKILL of the writer mid-run (stands in for pulling the plug)");
    w.guard.kill();
    println!("== verify");
    let ctx_addr = addr.clone();
    let secret = plugpull::auth::Secret::default();
    let l = crate::verify::fetch(&ctx_addr, &secret, Some(w.run), "").await?;
    let plugpull::ledger::Workload::File(fm) = &l.manifest.workload else {
        return Err(Error(
            "the listener returned a run of another workload".into(),
        ));
    };
    let vargs = crate::verify::VerifyArgs {
        run: Some(w.run),
        host: None,
        target: None,
        json: false,
        show: 10,
    };
    let report = crate::verify::verify_file_run(&l, fm, &vargs, &ctx_addr, &secret).await?;
    crate::verify::print_file_report(&report, 10);
    println!();
    println!(
        "local device after a writer crash: {}, {} acknowledged, {} lost",
        if report.ok { "PASS" } else { "FAIL" },
        report.acknowledged,
        report.verdicts.failures()
    );
    Ok(report.ok)
}
