//! `plugpull demo`: the whole procedure on this machine, without hardware.
//!
//! With FUSE (root, `/dev/fuse`, `fusermount3`) the demo runs the real procedure
//! twice against the power-cut simulator `plugpull-simfs`: once on an **honest**
//! simulated device, once on a **lying** one (fsync returns before the data is
//! durable). On each: a listener on loopback; the file and files workloads and — when
//! PostgreSQL is installed — `plugpull write pgbench` against a throwaway cluster
//! whose data directory lives on the simulated device; a power cut under load;
//! unmount, mount again, PostgreSQL crash recovery; verify. It prints both reports
//! and one verdict line per device:
//!
//! ```text
//! honest device: PASS, 42608 acknowledged (38112 writes, 1378 steps, 3118 commits), 0 lost
//! lying device: FAIL, 2875 acknowledged writes lost, 23 names lost or damaged, 402 commits lost
//! ```
//!
//! Exit status: 0 when the honest device passes and the lying one is caught (the
//! tool works), 1 otherwise, 2 when the demo could not run (or was interrupted).
//!
//! Without FUSE it says so and falls back to a process kill ([`fallback`]): the writer
//! is SIGKILLed mid-run on the local disk (the page cache survives, so nothing may be
//! lost). Without PostgreSQL it runs the file workload only and says so.
//!
//! `--vm` runs virtual machines instead ([`vm`]): with the file workload honest PASS,
//! lying FAIL, clean shutdown NOT MEASURED; with pgbench (where PostgreSQL is
//! installed) honest PASS, lying FAIL.
//!
//! Rooms: this file is the flow; [`device`] runs one simulated device end to end;
//! [`compare`] puts the two devices' reports side by side. The processes come from
//! [`crate::rig`], shared with the end-to-end tests.
//!
//! It leaves nothing mounted or running behind, also when interrupted with Ctrl-C:
//! every process and the mount live in guards whose `Drop` kills or unmounts them.
//! Ctrl-C cancels the rig's waits ([`crate::rig::proc::cancel`]) and drops the work
//! in progress, and so the guards. Children run in their own process groups, so a
//! Ctrl-C at the terminal reaches only the demo, which then tears down in order:
//! writers, PostgreSQL, the mount, the listener.

mod compare;
mod cuts;
mod device;
mod fallback;
mod vm;

use crate::rig::sibling;
use crate::rig::{self, proc};
use crate::Error;
use plugpull::report::FileReport;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options of `plugpull demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Seconds of load before each cut (more than 0).
    #[arg(long, default_value_t = 3.0, value_parser = plugpull::units::positive_secs)]
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
    /// Instead: a campaign of N cuts of two simulated machines (an honest disk, a
    /// lying one), each cut --cut-after..1.5x that into a run (docs/campaign.md).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub cuts: Option<u32>,
    /// Where the demo writes its HTML report (docs/report.md); it is kept after the
    /// demo. Default: `plugpull-demo-PID.html` in the temp directory.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Instead: QEMU virtual machines with a real kernel and ext4 (docs/vm.md): the
    /// file workload on an honest disk cut (PASS), a lying one cut (FAIL), the lying
    /// one shut down cleanly (NOT MEASURED); pgbench in the guest (where PostgreSQL
    /// is installed) on an honest disk (PASS) and a lying one (FAIL). Needs root,
    /// QEMU, busybox-static and the kernel package (scripts/deps); exit 2 when they
    /// are missing.
    #[arg(long, conflicts_with_all = ["cuts", "no_pg", "report"])]
    pub vm: bool,
    /// With --vm: seconds each machine's workload writes before its cut (or its
    /// clean shutdown), counted from the start of its run.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(2..=3600))]
    pub vm_secs: u32,
}

/// The demo's page: each device's runs, one part each.
///
/// Errors: a chart could not be drawn.
fn demo_page(devices: &[&compare::DeviceResult]) -> Result<String, Error> {
    let mut p = crate::report::html::Page::default();
    p.para(
        "The same workloads on a simulated disk that keeps what it acknowledges (honest) and on \
         one whose fsync returns before the data is safe (lying), each cut under load once.",
        "",
    );
    let kind = |r: &plugpull::report::Report| match r {
        plugpull::report::Report::File(_) => "file",
        plugpull::report::Report::Pgbench(_) => "pgbench",
        plugpull::report::Report::Files(_) => "files",
    };
    // The summary first: every run's verdict, one line each, device by device.
    for d in devices {
        for (_, r) in &d.runs {
            p.para(
                &format!("{} device, {} workload: {}", d.mode, kind(r), r.summary()),
                crate::report::page::verdict_class(r),
            );
        }
    }
    for d in devices {
        for (l, r) in &d.runs {
            let kind = kind(r);
            p.part(
                &format!("{}-{kind}", d.mode),
                &format!("{} device: {kind} workload (run {})", d.mode, l.run),
            );
            crate::report::page::sections(&mut p, l, r)?;
        }
    }
    Ok(p.finish("plugpull demo: an honest and a lying device, one power cut each"))
}

/// Where the demo writes its report: `--report`, checked writable before the demo
/// runs, or a new `plugpull-demo-PID.html` in the temp directory, created here (never
/// an existing file or link there).
///
/// Errors: the file cannot be created.
pub fn report_path(args: &DemoArgs) -> Result<PathBuf, Error> {
    let (path, new) = match &args.report {
        Some(p) => (p.clone(), false),
        None => (
            std::env::temp_dir().join(format!("plugpull-demo-{}.html", std::process::id())),
            true,
        ),
    };
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .create_new(new)
        .truncate(false)
        .open(&path)
        .map_err(|e| {
            Error::Msg(format!(
                "cannot write the report to {}: {e}",
                path.display()
            ))
        })?;
    Ok(path)
}

/// Writes the demo's HTML report to `path` and prints where.
///
/// Errors: the file cannot be written.
pub fn write_report(path: &Path, html: &str) -> Result<(), Error> {
    std::fs::write(path, html).map_err(|e| {
        Error::Msg(format!(
            "cannot write the report to {}: {e}",
            path.display()
        ))
    })?;
    println!(
        "report: {} ({} bytes; open it in a browser)",
        path.display(),
        html.len()
    );
    Ok(())
}

/// Runs the demo; `Ok(true)` when every verdict came out as expected.
pub async fn demo(args: &DemoArgs) -> Result<bool, Error> {
    let dir = std::env::temp_dir().join(format!("plugpull-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::Msg(format!("cannot create {}: {e}", dir.display())))?;
    proc::detach_children();
    // A task of its own sees Ctrl-C even while the flow waits in the rig.
    let watcher = tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "\ninterrupted: stopping the writers and PostgreSQL, unmounting the simulator"
            );
            proc::cancel();
        }
    });
    let until_cancelled = async {
        while !proc::cancelled() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let result = tokio::select! {
        r = run(&dir, args) => r,
        _ = until_cancelled => Err(Error::Interrupted),
    };
    watcher.abort();
    let result = if proc::cancelled() {
        Err(Error::Interrupted)
    } else {
        result
    };
    // Guards inside `run` are dropped by now: nothing is left running or mounted.
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// Why FUSE cannot be used here, if it cannot.
fn fuse_unavailable() -> Option<String> {
    if let Some(why) = rig::simfs::fuse_unavailable() {
        return Some(why.into());
    }
    if let Err(e) = sibling("plugpull-simfs") {
        return Some(e.to_string());
    }
    None
}

/// Starts the listener with its data directory and log under `dir`; prints where.
fn start_listener(dir: &Path) -> Result<rig::listener::Listener, Error> {
    let l = rig::listener::Listener::start(
        &sibling("plugpull-listener")?,
        &dir.join("listener-data"),
        &dir.join("listener.log"),
        &[],
    )?;
    println!(
        "== listener on {} (ledger in {})",
        l.addr(),
        l.data_dir.display()
    );
    Ok(l)
}

async fn run(dir: &Path, args: &DemoArgs) -> Result<bool, Error> {
    if args.vm {
        return vm::run(dir, args).await;
    }
    if let Some(why) = fuse_unavailable() {
        if args.cuts.is_some() {
            return Err(Error::Msg(format!(
                "demo --cuts needs the power-cut simulator, and FUSE is not available: {why}"
            )));
        }
        println!("== FUSE is not available: {why}.");
        println!("== Without the power-cut simulator the demo can only SIGKILL the writer on the local disk.");
        return fallback::sigkill_demo(dir, args).await;
    }
    // PostgreSQL's postmaster outlives pg_ctl, its parent: as a child subreaper the
    // demo inherits it and can reap it after killing it.
    proc::set_subreaper();
    if let Some(n) = args.cuts {
        let report = report_path(args)?;
        return cuts::run(dir, n, args.cut_after, args.seed, &report).await;
    }
    let listener = start_listener(dir)?;
    let pg = if args.no_pg {
        println!("== PostgreSQL part skipped (--no-pg)");
        None
    } else {
        match device::pg_setup() {
            Ok(p) => Some(p),
            Err(why) => {
                println!("== PostgreSQL is not available ({why}): running the file workload only");
                None
            }
        }
    };
    let ctx = device::Ctx {
        dir: dir.to_path_buf(),
        addr: listener.addr().to_string(),
        me: std::env::current_exe().map_err(|e| Error::Msg(e.to_string()))?,
        simfs: sibling("plugpull-simfs")?,
        pg,
        args: args.clone(),
    };
    let report = report_path(args)?;
    let honest = device::device(&ctx, "honest").await?;
    let lying = device::device(&ctx, "lying").await?;
    println!();
    compare::side_by_side(&honest, &lying);
    println!();
    println!("{}", honest.verdict_line());
    println!("{}", lying.verdict_line());
    write_report(&report, &demo_page(&[&honest, &lying])?)?;
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

/// Starts `plugpull ARGS LOAD` (this binary, `me`; `load` is options separated by
/// spaces) and waits until it printed its run id; `what` names it in errors.
fn start_writer(
    me: &Path,
    args: &[&str],
    load: &str,
    what: &str,
) -> Result<(rig::writer::Following, plugpull::RunId), Error> {
    let mut cmd = proc::command(me);
    cmd.args(args).args(load.split(' '));
    let w = rig::writer::Following::new(rig::writer::spawn(cmd, &format!("the {what}"))?);
    let run = w.run.parse().map_err(Error::Msg)?;
    Ok((w, run))
}

/// Verifies run `run` at the listener `addr` exactly as `plugpull verify` does
/// ([`crate::verify::judge_ledger`]: device-error rule, the workload's verify, the
/// storage section) with `opts`; prints its human report (`show` findings of each
/// kind) and returns the ledger and the report.
async fn verify_run(
    addr: &str,
    run: plugpull::RunId,
    show: usize,
    opts: &crate::verify::VerifyOptions<'_>,
) -> Result<(plugpull::ledger::RunLedger, plugpull::report::Report), Error> {
    let secret = plugpull::auth::Secret::default();
    let l = crate::ledger::fetch(addr, &secret, Some(run), "").await?;
    let report = crate::verify::judge_ledger(&l, opts, addr, &secret).await?;
    crate::verify::print_report(&report, false, show);
    Ok((l, report))
}

/// Verifies file run `run` ([`verify_run`]; a file run needs no server options).
async fn verify_file(
    addr: &str,
    run: plugpull::RunId,
    show: usize,
) -> Result<(plugpull::ledger::RunLedger, FileReport), Error> {
    let pg = crate::pgbench::PgVerifyArgs::default();
    let opts = crate::verify::VerifyOptions::plain(&pg);
    match verify_run(addr, run, show, &opts).await? {
        (l, plugpull::report::Report::File(r)) => Ok((l, r)),
        _ => Err(Error::Msg(format!("run {run} is not a file run"))),
    }
}
