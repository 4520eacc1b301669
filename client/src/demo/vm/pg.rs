//! The pgbench machines of `plugpull demo --vm`: PostgreSQL in the guest (the
//! bundle's PostgreSQL variant, [`crate::rig::vm::pg`]), its cluster made on the host
//! in the image, `plugpull write pgbench` in the guest for `--vm-secs` seconds, the
//! machine cut, then the image mounted on the host, PostgreSQL started on it (crash
//! recovery) and the run verified as `plugpull verify` does:
//!
//! * **honest machine, pgbench**: a plain image: PASS;
//! * **lying machine, pgbench**: the image on a lying simfs mount: FAIL, the commits
//!   of the destage delay before the cut lost.

use super::{cut_machine, Machine};
use crate::pgbench::PgReport;
use crate::rig::vm::{self, bundle::Bundle, pg};
use crate::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The guest's load: 2 clients of pgbench's TPC-B until the cut.
const LOAD: &str = "--clients 2 --duration 1h --protocol prepared";

/// The image's size, MiB (the cluster takes about 60).
const IMAGE_MIB: u64 = 256;

const MACHINES: [Machine; 2] = [
    Machine {
        name: "honest machine, pgbench",
        slug: "honest-pg",
        lying: false,
        clean: false,
    },
    Machine {
        name: "lying machine, pgbench",
        slug: "lying-pg",
        lying: true,
        clean: false,
    },
];

/// What the pgbench machines need: PostgreSQL's binary directory and the bundle
/// carrying its server.
pub(super) struct Setup {
    bin: PathBuf,
    bundle: Bundle,
}

/// The binary directory ([`crate::demo::device::pg_setup`]) and the PostgreSQL
/// bundle (built, or found in the cache), or why the machines cannot run here.
pub(super) fn setup(me: &Path) -> Result<Setup, String> {
    let bin = super::super::device::pg_setup()?;
    let t = Instant::now();
    let extra = pg::extra(&bin).map_err(|e| e.to_string())?;
    let bundle = vm::bundle_with(me, &extra).map_err(|e| e.to_string())?;
    println!(
        "\n== guest bundle with PostgreSQL {} ({}, {:.1} s)",
        bundle.initrd.parent().unwrap_or(Path::new("")).display(),
        if bundle.cached { "cached" } else { "built" },
        t.elapsed().as_secs_f64(),
    );
    Ok(Setup { bin, bundle })
}

/// Runs both pgbench machines one after the other (the listener at `addr`, on the
/// host's loopback `port`); their verdict lines, and whether the honest one passed
/// and the lying one failed with lost commits.
///
/// Errors: a step failed (the image, QEMU, the mount, verify).
pub(super) async fn machines(
    dir: &Path,
    s: &Setup,
    (addr, port): (&str, u16),
    simfs: &Path,
    args: &crate::demo::DemoArgs,
) -> Result<(Vec<String>, bool), Error> {
    let mut reports = Vec::new();
    for m in &MACHINES {
        let t = Instant::now();
        let r = machine_run(dir, m, s, (addr, port), simfs, args).await?;
        println!("== {}: {:.1} s", m.name, t.elapsed().as_secs_f64());
        reports.push(r);
    }
    let lines = MACHINES
        .iter()
        .zip(&reports)
        .map(|(m, r)| verdict_line(m.name, r))
        .collect();
    let (honest, lying) = (&reports[0], &reports[1]);
    let works = honest.ok && !lying.not_measured && lying.lost_commits > 0;
    Ok((lines, works))
}

/// Machine `m` in `dir/SLUG` ([`cut_machine`]), its image holding a new cluster;
/// after the cut, the image mounted on the host, PostgreSQL started on it and the
/// run verified (the canary read in the image); prints the report and returns it.
async fn machine_run(
    dir: &Path,
    m: &Machine,
    s: &Setup,
    (addr, port): (&str, u16),
    simfs: &Path,
    args: &crate::demo::DemoArgs,
) -> Result<PgReport, Error> {
    let root = dir.join(m.slug);
    let settings = pg::pgbench_settings(port, LOAD, "hang");
    let make = |image: &Path| pg::make_pg_image(image, IMAGE_MIB, &s.bin, &root.join("make"), "");
    let (run, backing) = cut_machine(dir, m, &s.bundle, settings, simfs, args, make)?;
    let t = Instant::now();
    let rec = pg::Recovered::start(&backing, &root.join("host"), &s.bin, &root.join("pg"))?;
    // When PostgreSQL did not start, verify says so at once instead of waiting for it.
    let wait = if rec.started.is_ok() { "30s" } else { "1s" };
    println!(
        "== {}: image mounted on the host, PostgreSQL {}",
        m.name,
        match &rec.started {
            Ok(()) => format!(
                "started (crash recovery) in {:.1} s",
                t.elapsed().as_secs_f64()
            ),
            Err(_) => "did not start".into(),
        }
    );
    let dsn = rec.cluster.conninfo_db("postgres");
    let pg_args =
        super::super::device::pg_verify_args(&dsn, &rec.cluster.log, wait).map_err(Error::Msg)?;
    let opts = crate::verify::VerifyOptions {
        canary_dir: Some(rec.canary_dir()),
        ..crate::verify::VerifyOptions::plain(&pg_args)
    };
    let report = super::super::verify_run(addr, run, 3, &opts).await;
    rec.finish()?;
    match report? {
        (_, plugpull::report::Report::Pgbench(r)) => Ok(r),
        _ => Err(Error::Msg(format!("run {run} is not a pgbench run"))),
    }
}

/// `NAME: PASS, N acknowledged commits, 0 lost`, `NAME: FAIL, N acknowledged commits
/// lost`, or `NAME: ` and the report's summary (NOT MEASURED, or a FAIL without lost
/// commits: PostgreSQL did not start, damaged pages).
fn verdict_line(name: &str, r: &PgReport) -> String {
    if r.ok {
        format!(
            "{name}: PASS, {} acknowledged commits, 0 lost",
            r.acknowledged_commits
        )
    } else if !r.not_measured && r.lost_commits > 0 {
        format!("{name}: FAIL, {} acknowledged commits lost", r.lost_commits)
    } else {
        format!("{name}: {}", r.summary)
    }
}
