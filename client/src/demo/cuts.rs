//! `plugpull demo --cuts N`: a whole campaign on this machine. Two simulated machines
//! (`simfs://`, docs/power.md), one whose disk is **honest** and one whose disk
//! **lies** (fsync returns before the data is durable), each booting `plugpull
//! agent`; one campaign of N cuts of each, driven by the campaign controller itself
//! (`crate::campaign::run`), both machines cut concurrently. It prints every cut's
//! line and both roll-ups; the tool behaved when the honest machine's valid cuts all
//! passed and the lying machine's cuts found losses.

use super::sibling;
use crate::campaign::{self, run::run as run_campaign, CreateArgs, ShowArgs};
use crate::rig::{self, machine};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::campaign::RollUp;
use plugpull::power::PowerUri;
use plugpull::wire::CampaignRequest;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The two machines' host names.
const HOSTS: [(&str, &str); 2] = [("sim-honest", "honest"), ("sim-lying", "lying")];

/// Turns the machines off (a power cut) when dropped: nothing stays mounted or
/// running, also on an error or Ctrl-C.
struct Machines(Vec<PathBuf>);

impl Drop for Machines {
    fn drop(&mut self) {
        for mnt in &self.0 {
            let uri = PowerUri::Simfs {
                mountpoint: mnt.clone(),
            };
            if let Err(e) = crate::power::open(&uri).and_then(|d| d.off()) {
                eprintln!("simulated machine {}: off: {e}", mnt.display());
            }
        }
    }
}

/// Runs the N-cut campaign demo in `dir`; `Ok(true)` when the tool behaved.
pub async fn run(
    dir: &Path,
    cuts: u32,
    cut_after: f64,
    seed: u64,
    report: &Path,
) -> Result<bool, Error> {
    let secret_path = dir.join("secret");
    let text: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    write_private(&secret_path, &format!("{text}\n"))?;
    let secret = Secret::load(Some(&secret_path)).map_err(Error::Msg)?;
    let l = rig::listener::Listener::start(
        &sibling("plugpull-listener")?,
        &dir.join("listener-data"),
        &dir.join("listener.log"),
        &["--secret-file", secret_path.to_str().unwrap_or_default()],
    )?;
    println!(
        "== listener on {} (campaign and ledgers in {})",
        l.addr(),
        l.data_dir.display()
    );
    let target = dir.join("{host}").join("mnt").join("t.dat");
    let config = dir.join("agent.toml");
    let listed: Vec<String> = HOSTS
        .iter()
        .map(|(h, _)| {
            format!(
                "{:?}",
                dir.join(h).join("mnt").join("t.dat").display().to_string()
            )
        })
        .collect();
    write_private(&config, &format!("targets = [{}]\n", listed.join(", ")))?;
    let me =
        std::env::current_exe().map_err(|e| Error::Msg(format!("cannot locate plugpull: {e}")))?;
    let mut machines = Machines(Vec::new());
    let mut powers = Vec::new();
    for (i, (host, mode)) in HOSTS.iter().enumerate() {
        let boot: Vec<String> = [
            me.to_str().unwrap_or_default(),
            "agent",
            "--listener",
            l.addr(),
            "--secret-file",
            secret_path.to_str().unwrap_or_default(),
            "--config",
            config.to_str().unwrap_or_default(),
            "--host",
            host,
            "--poll",
            "0.2",
        ]
        .map(String::from)
        .to_vec();
        let spec = machine::MachineSpec {
            simfs: sibling("plugpull-simfs")?,
            mode: mode.to_string(),
            seed: seed + i as u64 * 1000,
            simfs_args: vec!["--destage-delay-ms".into(), "2000".into()],
            boot,
        };
        let mnt = machine::create(&dir.join(host), &spec)?;
        let uri = PowerUri::Simfs {
            mountpoint: mnt.clone(),
        };
        crate::power::open(&uri)?.on()?;
        machines.0.push(mnt.clone());
        powers.push(format!("simfs://{}", mnt.display()));
        println!(
            "== simulated machine {host}: {mode} disk at {}, booted `plugpull agent`",
            mnt.display()
        );
    }
    let ms = (cut_after * 1000.0) as u64;
    let create = CreateArgs {
        name: "demo".into(),
        hosts: HOSTS.iter().map(|(h, _)| h.to_string()).collect(),
        powers,
        workloads: vec![format!(
            "file --target {} --size 4MiB --jobs 2",
            target.display()
        )],
        cuts,
        cut_after: (ms, ms + ms / 2),
        off: Duration::from_millis(500),
        boot_timeout: Duration::from_secs(60),
    };
    let def = campaign::definition(&create)?;
    campaign::call(l.addr(), &secret, CampaignRequest::Create(def)).await?;
    println!(
        "== campaign of {cuts} cuts of each machine, cut {:.1}..{:.1} s into each run",
        cut_after,
        cut_after * 1.5
    );
    let show = ShowArgs {
        name: "demo".into(),
        json: false,
        junit: None,
    };
    let ran = run_campaign(l.addr(), &secret, &show).await;
    drop(machines);
    let c = campaign::load(l.addr(), &secret, "demo").await?;
    let works = conclude(&c, ran);
    let html = crate::report::campaign::render(&c)?;
    super::write_report(report, &html)?;
    works
}

/// Prints both machines' roll-ups and bounds and whether the tool works: `Ok(true)`
/// when every valid cut of the honest machine passed and the lying machine failed.
fn conclude(c: &plugpull::campaign::Campaign, ran: Result<bool, Error>) -> Result<bool, Error> {
    let roll = |h: &str| RollUp::of(&c.host(h).cuts);
    let (honest, lying) = (roll(HOSTS[0].0), roll(HOSTS[1].0));
    println!();
    for (name, r) in [("honest", &honest), ("lying", &lying)] {
        let bound = r.bound_line(plugpull::stats::DEFAULT_CONFIDENCE);
        println!("{name} machine: {}\n  {bound}", r.line());
    }
    if let Err(e) = ran {
        println!("the campaign could not finish: {e}");
        return Err(e);
    }
    let works = honest.valid > 0 && honest.failed == 0 && lying.failed > 0;
    println!(
        "{}",
        if works {
            "the tool works: every valid cut of the honest machine passed, the lying machine was caught losing acknowledged writes"
        } else if honest.valid == 0 || honest.failed > 0 {
            "UNEXPECTED: the honest machine had no valid cut, or lost acknowledged data"
        } else {
            "UNEXPECTED: the lying machine was not caught losing anything"
        }
    );
    Ok(works)
}

/// Writes `text` to `path`, mode 600.
fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| Error::Msg(format!("cannot write {}: {e}", path.display())))
}
