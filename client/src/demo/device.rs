//! One simulated device end to end: mount `plugpull-simfs` in a mode, put
//! PostgreSQL (when available), the file and the files workloads on it, let them load it, cut
//! the power under load, mount again honestly, let PostgreSQL recover, and verify
//! both runs with the verifier's own functions.
//!
//! Order at the cut, as in the end-to-end tests: the writers die first (a
//! whole-machine cut: they must not see the device error and end their runs by it),
//! then the device loses power, then PostgreSQL dies with it.

use super::compare::DeviceResult;
use super::DemoArgs;
use crate::rig::postgres::{Cluster, Layout};
use crate::rig::simfs::SimMount;
use crate::rig::{postgres, proc, writer::Following};
use crate::Error;
use plugpull::report::Report;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What every device run needs.
pub(super) struct Ctx {
    /// The demo's scratch directory.
    pub dir: PathBuf,
    /// The listener's `IP:PORT`.
    pub addr: String,
    /// This binary (`plugpull`).
    pub me: PathBuf,
    /// The `plugpull-simfs` binary.
    pub simfs: PathBuf,
    /// PostgreSQL's binary directory, when the PostgreSQL part runs.
    pub pg: Option<PathBuf>,
    /// The demo's options.
    pub args: DemoArgs,
}

/// The load `plugpull write pgbench` puts on the device, after its listener and DSN.
const PGBENCH_LOAD: &str = "--init --scale 1 --clients 4 --jobs 2 --duration 10m --progress 1";

/// The load `plugpull write file` puts on the device, after its listener and target.
const FILE_LOAD: &str = "--size 16MiB --jobs 4 --duration 10m --progress 0.5";

/// The load `plugpull write files` puts on the device, after its listener and target.
const FILES_LOAD: &str = "--jobs 2 --files 32 --duration 10m --progress 0.5";

/// PostgreSQL's binary directory, checked to be usable here: server binaries, a user
/// to run them as when we are root, a build of plugpull with the pgbench workload.
pub(super) fn pg_setup() -> Result<PathBuf, String> {
    let bin = postgres::bin_dir().ok_or(
        "no initdb in PLUGPULL_PG_BIN, /usr/lib/postgresql/{17,16,15,14}/bin or `pg_config --bindir`",
    )?;
    postgres::owner()?;
    if pg_verify_args("host=/tmp", Path::new("/tmp/x.log"), "1s").is_err() {
        return Err("this build of plugpull has no pgbench workload".into());
    }
    Ok(bin)
}

/// `plugpull verify` options for a pgbench run, parsed as the command line would be.
pub(super) fn pg_verify_args(
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

/// PostgreSQL on the device with its writer, while it runs.
struct PgPart {
    cluster: Cluster,
    writer: Following,
    run: plugpull::RunId,
}

/// `initdb` in `<mount>/pg/data` (with its fsyncs: what it wrote must survive a
/// cut on an honest device; socket and log under `ddir`), start, and a pgbench
/// writer acknowledging.
fn start_pg(ctx: &Ctx, bin: &Path, mnt: &Path, ddir: &Path) -> Result<PgPart, Error> {
    println!(
        "== initdb in {}/pg/data; PostgreSQL on the simulated device",
        mnt.display()
    );
    let layout = Layout {
        data: mnt.join("pg").join("data"),
        sock: ddir.join("pg").join("sock"),
        log: ddir.join("pg").join("postgres.log"),
    };
    let mut cluster = Cluster::init(bin, layout, &[], "plugpull demo", "", "")?;
    if let Err(out) = cluster.start(60)? {
        let tail = cluster.log_tail(8);
        return Err(Error::Msg(format!(
            "PostgreSQL did not start:\n{out}{tail}"
        )));
    }
    let dsn = cluster.conninfo_db("postgres");
    println!("== plugpull write pgbench --init --scale 1 --clients 4");
    // Its canary on the simulated device too: the cut takes the host's memory with it.
    let canary = mnt.display().to_string();
    let args = [
        "write",
        "pgbench",
        "--listener",
        &ctx.addr,
        "--dsn",
        &dsn,
        "--canary-dir",
        &canary,
    ];
    let (mut writer, run) = super::start_writer(&ctx.me, &args, PGBENCH_LOAD, "pgbench writer")?;
    writer.wait_acks("pgbench writer")?;
    Ok(PgPart {
        cluster,
        writer,
        run,
    })
}

/// One simulated device: mount, load, cut, remount, recover, verify.
pub(super) async fn device(ctx: &Ctx, mode: &'static str) -> Result<DeviceResult, Error> {
    let ddir = ctx.dir.join(mode);
    let seed = ctx.args.seed;
    println!();
    println!("==================== {mode} device ====================");
    let mut mount = SimMount::mount(&ctx.simfs, &ddir, mode, seed, &[], false)?;
    println!(
        "== plugpull-simfs --mode {mode} --seed {seed} mounted at {} (backing {})",
        mount.mnt.display(),
        mount.backing.display()
    );
    let mut pg = match &ctx.pg {
        Some(bin) => Some(start_pg(ctx, bin, &mount.mnt, &ddir)?),
        None => None,
    };
    let target = mount.mnt.join("target.dat");
    println!(
        "== plugpull write file --target {} --size 16MiB --jobs 4",
        target.display()
    );
    let t = target.display().to_string();
    let args = ["write", "file", "--listener", &ctx.addr, "--target", &t];
    let (mut fw, file_run) = super::start_writer(&ctx.me, &args, FILE_LOAD, "file writer")?;
    fw.wait_acks("file writer")?;
    let dir = mount.mnt.join("files").display().to_string();
    println!("== plugpull write files --target {dir} --jobs 2 --files 32");
    let args = ["write", "files", "--listener", &ctx.addr, "--target", &dir];
    let (mut nw, files_run) = super::start_writer(&ctx.me, &args, FILES_LOAD, "files writer")?;
    nw.wait_acks("files writer")?;
    proc::sleep(Duration::from_secs_f64(ctx.args.cut_after))?;
    println!("   file writer: {}", fw.progress());
    println!("   files writer: {}", nw.progress());
    if let Some(p) = &mut pg {
        println!("   pgbench:     {}", p.writer.progress());
    }
    cut(&mut mount, [&mut fw, &mut nw], pg.as_mut())?;
    let pg_started = match &mut pg {
        Some(p) => Some(restart_pg(&mut p.cluster)?),
        None => None,
    };
    println!("== verify: file workload (run {file_run})");
    let (file_ledger, file) = super::verify_file(&ctx.addr, file_run, 5).await?;
    let mut runs = vec![(file_ledger, Report::File(file.clone()))];
    println!();
    println!("== verify: files workload (run {files_run})");
    let pg_none = crate::pgbench::PgVerifyArgs::default();
    let opts = crate::verify::VerifyOptions::plain(&pg_none);
    let (files_ledger, report) = super::verify_run(&ctx.addr, files_run, 5, &opts).await?;
    let Report::Files(files) = report.clone() else {
        return Err(Error::Msg(format!("run {files_run} is not a files run")));
    };
    runs.push((files_ledger, report));
    let mut pg_report = None;
    if let Some(p) = &mut pg {
        println!();
        println!("== verify: pgbench workload (run {})", p.run);
        // When PostgreSQL did not start, say so at once instead of waiting for it.
        let wait = if pg_started == Some(false) {
            "1s"
        } else {
            "30s"
        };
        let dsn = p.cluster.conninfo_db("postgres");
        let pg_args = pg_verify_args(&dsn, &p.cluster.log, wait).map_err(Error::Msg)?;
        let opts = crate::verify::VerifyOptions::plain(&pg_args);
        let (pg_ledger, report) = super::verify_run(&ctx.addr, p.run, 10, &opts).await?;
        let Report::Pgbench(r) = report.clone() else {
            return Err(Error::Msg(format!("run {} is not a pgbench run", p.run)));
        };
        runs.push((pg_ledger, report));
        pg_report = Some(r);
        let _ = p.cluster.stop("fast", 30)?;
        let _ = p.cluster.kill_all();
    }
    drop(pg);
    mount.umount()?;
    Ok(DeviceResult {
        mode,
        file,
        files,
        pg: pg_report,
        runs,
    })
}

/// The power cut: the writers SIGKILLed, the device's power pulled, PostgreSQL
/// SIGKILLed with it; then the device mounted again to read what survived.
fn cut<const N: usize>(
    mount: &mut SimMount,
    writers: [&mut Following; N],
    pg: Option<&mut PgPart>,
) -> Result<(), Error> {
    for w in writers {
        w.guard.kill();
    }
    let pg = pg.map(|p| {
        p.writer.guard.kill();
        &mut p.cluster
    });
    let summary = mount.cut()?;
    if let Some(c) = pg {
        let _ = c.kill_all();
    }
    println!("== power cut: {summary}");
    // Mounted again to read what the cut left on the medium (in honest mode: no
    // further faults while verify reads it).
    mount.remount("honest")?;
    println!("== mounted again: the medium as the cut left it");
    Ok(())
}

/// Starts PostgreSQL after the cut (crash recovery); whether it started (when not,
/// its log's tail is printed).
fn restart_pg(c: &mut Cluster) -> Result<bool, Error> {
    println!("== starting PostgreSQL: crash recovery");
    match c.start(60)? {
        Ok(()) => Ok(true),
        Err(out) => {
            println!(
                "   PostgreSQL did not start; log tail:\n{out}{}",
                c.log_tail(8)
            );
            Ok(false)
        }
    }
}
