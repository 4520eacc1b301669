//! The demo without FUSE: the writer is SIGKILLed mid-run on the local disk, which
//! stands in for pulling the plug. The page cache survives a process kill, so
//! nothing acknowledged may be lost — and the run's canary survives too, so verify
//! says so: a read-back that measured no power loss is NOT MEASURED, never a PASS.

use super::DemoArgs;
use crate::Error;
use std::path::Path;
use std::time::Duration;

/// The load of the writer, after its listener and target.
const LOAD: &str = "--size 64MiB --jobs 4 --duration 10m -P 1";

/// Runs the fallback demo in `dir`; `Ok(true)` when nothing acknowledged was lost
/// (the verdict is then NOT MEASURED: a process kill is no power cut).
pub(super) async fn sigkill_demo(dir: &Path, args: &DemoArgs) -> Result<bool, Error> {
    let listener = super::start_listener(dir)?;
    let addr = listener.addr().to_string();
    let target = dir.join("target.dat");
    let me = std::env::current_exe().map_err(|e| Error::Msg(e.to_string()))?;
    println!(
        "== writing checksummed blocks to {} with 4 jobs; the cut comes after {} s",
        target.display(),
        args.cut_after
    );
    let t = target.display().to_string();
    let wargs = ["write", "file", "--listener", &addr, "--target", &t];
    let (mut w, run) = super::start_writer(&me, &wargs, LOAD, "writer")?;
    w.wait_acks("writer")?;
    crate::rig::proc::sleep(Duration::from_secs_f64(args.cut_after))?;
    println!("   {}", w.progress());
    println!("== cut: SIGKILL of the writer mid-run (stands in for pulling the plug)");
    w.guard.kill();
    println!("== verify");
    let (l, report) = super::verify_file(&addr, run, 10).await?;
    let html = crate::report::page::render(&l, &plugpull::report::Report::File(report.clone()))?;
    println!();
    let word = match (report.ok, report.not_measured) {
        (true, _) => "PASS",
        (false, true) => "NOT MEASURED (a process kill is no power cut)",
        (false, false) => "FAIL",
    };
    println!(
        "local device after a writer crash: {word}, {} acknowledged, {} lost",
        report.acknowledged,
        report.failures()
    );
    super::write_report(&super::report_path(args)?, &html)?;
    Ok(report.ok || report.not_measured)
}
