//! `plugpull demo --vm`: whole machines instead of simulated disks (docs/vm.md).
//!
//! QEMU guests with Debian's stock kernel (the bundle of
//! [`crate::rig::vm::bundle`]), each running a workload on ext4 on its virtio disk
//! for `--vm-secs` seconds (15 by default) against a listener on the host's
//! loopback, driven through the `qemu://` power driver as a campaign drives one.
//! Three run the file workload:
//!
//! * the **honest machine**: its image a plain file (the host keeps every write
//!   QEMU completed), cut (QEMU killed): PASS;
//! * the **lying machine**: its image on a lying `plugpull-simfs` mount (fsync
//!   returns at once, destage after 1 s), cut (QEMU killed, simfs cut at once): FAIL;
//! * the **lying machine, clean shutdown**: the guest stops the workload, syncs,
//!   unmounts and powers off; its disk is then unmounted cleanly: the volatile canary
//!   survives, so NOT MEASURED.
//!
//! Each image's filesystem is then mounted on the host (loop: ext4 replays its
//! journal, as at the next boot) and verified exactly as `plugpull verify --target`
//! does. One verdict line per machine:
//!
//! ```text
//! honest machine: PASS, 5131 acknowledged writes, 0 lost
//! lying machine: FAIL, 312 acknowledged writes lost
//! lying machine, clean shutdown: NOT MEASURED: the canary survived the cut …
//! ```
//!
//! Two more run pgbench against PostgreSQL in the guest, where PostgreSQL is
//! installed ([`pg`]): an honest and a lying machine, PASS and FAIL with lost
//! commits; without PostgreSQL the demo says so and leaves them out.
//!
//! Where QEMU, busybox, the kernel package, root or FUSE is missing it says what and
//! exits 2 (`scripts/deps` installs them).

mod pg;

use super::start_listener;
use crate::rig::vm::{self, machine, qemu, HostMount};
use crate::rig::{proc, sibling};
use crate::Error;
use plugpull::power::{PowerState, PowerUri};
use plugpull::report::FileReport;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The guest's load: 1024 blocks of 4 KiB on its ext4.
const LOAD: &str = "--size 4MiB --block-size 4KiB";
/// How long a guest may take to boot and start its run (TCG on a loaded host).
const BOOT_LIMIT: Duration = Duration::from_secs(180);
/// The lying disk's destage delay, ms: well under the load's length, so the
/// target's creation is destaged before the cut and only the run's writes are lost.
const DESTAGE_DELAY_MS: &str = "1000";

/// One of the demo's machines.
struct Machine {
    /// The name in its verdict line.
    name: &'static str,
    /// Its directory under the demo's scratch directory.
    slug: &'static str,
    /// The image on a lying simfs mount, else on a plain file.
    lying: bool,
    /// The guest shuts itself down cleanly instead of being cut.
    clean: bool,
}

const MACHINES: [Machine; 3] = [
    Machine {
        name: "honest machine",
        slug: "honest",
        lying: false,
        clean: false,
    },
    Machine {
        name: "lying machine",
        slug: "lying",
        lying: true,
        clean: false,
    },
    Machine {
        name: "lying machine, clean shutdown",
        slug: "clean",
        lying: true,
        clean: true,
    },
];

/// Why the VM demo cannot run here, if it cannot: a guest ([`vm::unavailable`]),
/// or FUSE for the lying disk.
fn unavailable() -> Option<String> {
    vm::unavailable().or_else(super::fuse_unavailable)
}

/// Turns its machine off when dropped (the demo failed or was interrupted): QEMU
/// killed, simfs taken down; nothing is left running or mounted.
struct Powered(Box<dyn crate::power::Driver>);

impl Drop for Powered {
    fn drop(&mut self) {
        let _ = self.0.off();
    }
}

/// Runs the VM demo in `dir`; `Ok(true)` when every verdict came out as expected.
///
/// Errors (exit 2): a guest cannot run here (what is missing, named), or a step
/// failed (the bundle, QEMU, the mount, verify).
pub(super) async fn run(dir: &Path, args: &super::DemoArgs) -> Result<bool, Error> {
    if let Some(why) = unavailable() {
        return Err(Error::Msg(format!(
            "demo --vm skipped: a virtual machine cannot run here: {why}"
        )));
    }
    let me = std::env::current_exe().map_err(|e| Error::Msg(e.to_string()))?;
    let t = Instant::now();
    let bundle = vm::default_bundle(&me)?;
    println!(
        "== guest bundle {} ({}, {:.1} s; acceleration {})",
        bundle.initrd.parent().unwrap_or(Path::new("")).display(),
        if bundle.cached { "cached" } else { "built" },
        t.elapsed().as_secs_f64(),
        qemu::accel()
    );
    let listener = start_listener(dir)?;
    let addr = listener.addr();
    let port: u16 = addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(|| Error::Msg(format!("listener address {addr}")))?;
    let simfs = sibling("plugpull-simfs")?;
    let mut reports = Vec::new();
    for m in &MACHINES {
        let t = Instant::now();
        let r = machine_run(dir, m, &bundle, (addr, port), &simfs, args).await?;
        println!("== {}: {:.1} s", m.name, t.elapsed().as_secs_f64());
        reports.push(r);
    }
    let mut lines: Vec<String> = MACHINES
        .iter()
        .zip(&reports)
        .map(|(m, r)| verdict_line(m.name, r))
        .collect();
    let [honest, lying, clean] = [&reports[0], &reports[1], &reports[2]];
    let mut works = honest.ok && !lying.ok && !lying.not_measured && clean.not_measured;
    let with_pg = match pg::setup(&me) {
        Ok(setup) => {
            let (pg_lines, pg_works) =
                pg::machines(dir, &setup, (addr, port), &simfs, args).await?;
            lines.extend(pg_lines);
            works &= pg_works;
            true
        }
        Err(why) => {
            println!("\n== the pgbench machines are left out: {why}");
            false
        }
    };
    println!();
    for l in &lines {
        println!("{l}");
    }
    println!(
        "{}",
        match (works, with_pg) {
            (true, true) => "the tool works: the honest machines kept every acknowledged write and commit, the lying ones were caught, and the clean shutdown was not taken for a power cut",
            (true, false) => "the tool works: the honest machine kept every acknowledged write, the lying one was caught, and its clean shutdown was not taken for a power cut",
            (false, _) => "UNEXPECTED: see the verdicts above",
        }
    );
    Ok(works)
}

/// `honest machine: PASS, N acknowledged writes, 0 lost`, `lying machine: FAIL, N
/// acknowledged writes lost`, or `NAME: NOT MEASURED: …` (the report's summary).
fn verdict_line(name: &str, r: &FileReport) -> String {
    if r.not_measured {
        format!("{name}: {}", r.summary)
    } else if r.ok {
        format!(
            "{name}: PASS, {} acknowledged writes, 0 lost",
            r.acknowledged
        )
    } else {
        format!("{name}: FAIL, {} acknowledged writes lost", r.failures())
    }
}

/// Boots machine `m` in `dir/SLUG`, lets its workload write `--vm-secs` seconds
/// (against the listener at `addr`, on the host's loopback `port`), cuts it (or lets it shut down
/// cleanly), mounts its image on the host and verifies the run there; prints the
/// report and returns it.
async fn machine_run(
    dir: &Path,
    m: &Machine,
    bundle: &vm::bundle::Bundle,
    (addr, port): (&str, u16),
    simfs: &Path,
    args: &super::DemoArgs,
) -> Result<FileReport, Error> {
    let settings = vm::settings(
        &vm::write_settings(port, "target", LOAD),
        "hang",
        m.clean.then_some(args.vm_secs),
    );
    let make = |image: &Path| vm::make_image(image, 64);
    let (run, backing) = cut_machine(dir, m, bundle, settings, simfs, args, make)?;
    let mut mount = HostMount::mount(&backing, &dir.join(m.slug).join("host"))?;
    let target = mount.at.join("target");
    let pg = crate::pgbench::PgVerifyArgs::default();
    let opts = crate::verify::VerifyOptions {
        target: Some(target),
        ..crate::verify::VerifyOptions::plain(&pg)
    };
    let report = super::verify_run(addr, run, 3, &opts).await;
    mount.umount()?;
    match report? {
        (_, plugpull::report::Report::File(r)) => Ok(r),
        _ => Err(Error::Msg(format!("run {run} is not a file run"))),
    }
}

/// Machine `m` in `dir/SLUG`, its guest from `bundle` with `settings`, its image
/// made by `make` (on a lying simfs mount when `m.lying`): turned on through the
/// `qemu://` driver, written `--vm-secs` seconds from the start of its run, then
/// cut (or, `m.clean`, left to shut itself down) and turned off. The run's id and
/// the image's file as the host keeps it.
///
/// Errors: the machine, the image, QEMU, or no run within the boot limit.
fn cut_machine(
    dir: &Path,
    m: &Machine,
    bundle: &vm::bundle::Bundle,
    settings: Vec<String>,
    simfs: &Path,
    args: &super::DemoArgs,
    make: impl FnOnce(&Path) -> Result<(), Error>,
) -> Result<(plugpull::RunId, PathBuf), Error> {
    let secs = args.vm_secs;
    let root = dir.join(m.slug);
    let image = match m.lying {
        true => root.join("disk/disk.img"),
        false => root.join("disk.img"),
    };
    let mut settings = settings;
    settings.push(format!("plugpull.hostname=vm-{}", m.slug));
    let spec = qemu::Spec {
        kernel: bundle.kernel.clone(),
        initrd: bundle.initrd.clone(),
        image,
        cache: "writeback".into(),
        settings,
        mem_mib: 512,
        cpus: 1,
    };
    let sd = m.lying.then(|| machine::SimDisk {
        bin: simfs.to_path_buf(),
        mode: "lying".into(),
        seed: args.seed,
        args: vec!["--destage-delay-ms".into(), DESTAGE_DELAY_MS.into()],
    });
    let mdir = machine::create(&root, &spec, sd)?;
    let backing: PathBuf = match m.lying {
        true => mdir.join("backing/disk.img"),
        false => mdir.join("disk.img"),
    };
    make(&backing)?;
    let uri = PowerUri::Qemu {
        dir: mdir.clone(),
        reset: false,
    };
    println!("\n== {}: {uri}", m.name);
    let driver = Powered(crate::power::open(&uri)?);
    driver.0.on()?;
    let run = vm::guest_run_id(&mdir.join("console.log"), BOOT_LIMIT)?;
    println!("== {}: run {run} writes for {secs} s", m.name);
    if m.clean {
        wait_off(&*driver.0, Duration::from_secs(u64::from(secs) + 120))?;
        println!("== {}: the guest shut down cleanly", m.name);
    } else {
        proc::sleep(Duration::from_secs(u64::from(secs)))?;
    }
    driver.0.off()?;
    println!("== {}: off; verifying its image on the host", m.name);
    Ok((run, backing))
}

/// Waits up to `limit` for the driver to report the machine off (the guest
/// powered itself off).
fn wait_off(d: &dyn crate::power::Driver, limit: Duration) -> Result<(), Error> {
    let end = Instant::now() + limit;
    while d.status()?.state != PowerState::Off {
        if Instant::now() >= end {
            return Err(Error::Msg(format!(
                "the guest did not power off within {} s",
                limit.as_secs()
            )));
        }
        proc::sleep(Duration::from_millis(500))?;
    }
    Ok(())
}
