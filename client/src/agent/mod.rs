//! `plugpull agent`: the service on a machine under test (`docs/campaign.md`). It
//! connects to the listener, announces its host name and boot id, and does what the
//! campaign says next: verify the run set a cut interrupted (one `plugpull verify
//! --json` per run; uploads the reports) or start the next run set (one `plugpull
//! write` per workload, each until the cut). It writes only what its local
//! configuration ([`config`]) lists, and never without the shared secret.

pub mod config;
mod verify;
use verify::{own, verify_all};

use crate::campaign::{append, call, workload};
use crate::manifest::HOST_ENV;
use crate::target_id::SIMULATED_BOOT_ID_ENV;
use crate::Error;
use config::AgentConfig;
use plugpull::auth::Secret;
use plugpull::campaign::{Event, Instruction};
use plugpull::wire::{CampaignRequest, CampaignResponse};
use plugpull::RunId;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a `plugpull write` may take to print its run id (its probe included).
const START_LIMIT: Duration = Duration::from_secs(180);
/// The duration given to every run: it goes on until its cut.
const UNTIL_CUT: &str = "8760h";

/// `plugpull agent` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Listener address, HOST:PORT.
    #[arg(long, env = "PLUGPULL_LISTENER", value_parser = plugpull::units::parse_host_port)]
    pub listener: String,
    /// File holding the shared secret (required: an agent takes instructions only
    /// from a listener that proves it holds it).
    #[arg(long)]
    pub secret_file: PathBuf,
    /// The local list of what campaigns may write (docs/campaign.md).
    #[arg(long, default_value = config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// The host name to announce [default: this machine's].
    #[arg(long)]
    pub host: Option<String>,
    /// Seconds between questions when there is nothing to do.
    #[arg(long, default_value_t = 5.0, value_parser = plugpull::units::positive_secs)]
    pub poll: f64,
    /// Seconds to wait, before verifying, for a file target that does not open (a
    /// drive-only cut: the device comes back on its own after power returns).
    #[arg(long, default_value_t = 300.0, value_parser = plugpull::units::positive_secs)]
    pub device_timeout: f64,
    /// The boot id of a simulated machine's boot: set by the `simfs://` power
    /// driver only (docs/power.md); never on a real machine.
    #[arg(long)]
    pub simulated_boot_id: Option<String>,
}

/// The process ids of the runs going now, so a stopped agent (SIGTERM, Ctrl-C)
/// stops them too instead of leaving them writing.
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Stops the agent's runs (SIGTERM: each ends its run cleanly) and exits 143 when
/// the agent gets SIGTERM or SIGINT.
fn stop_runs_on_signals() {
    use tokio::signal::unix::{signal, SignalKind};
    tokio::spawn(async {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let pids = RUNNING.lock().unwrap().clone();
        eprintln!("plugpull agent: stopping; ending its runs {pids:?}");
        for p in pids {
            // Our own child, not reaped yet: its id is still ours.
            crate::rig::proc::signal(p, rustix::process::Signal::TERM, false);
        }
        std::process::exit(143);
    });
}

/// What the agent knows of itself.
struct Me {
    args: AgentArgs,
    secret: Secret,
    host: String,
    boot_id: String,
    /// The last refusal recorded, so a repeated one is not recorded again.
    last_refusal: std::sync::Mutex<String>,
}

/// Runs the agent until it is stopped. Errors (exit 2): the secret or the
/// configuration cannot be read.
pub async fn agent(args: &AgentArgs) -> Result<bool, Error> {
    let secret = Secret::load(Some(&args.secret_file)).map_err(Error::Msg)?;
    // Read now to fail at once on a bad file; read again before every run set, so a
    // fixed configuration needs no restart.
    AgentConfig::read(&args.config)?;
    let me = Me {
        host: args.host.clone().unwrap_or_else(crate::manifest::hostname),
        boot_id: args
            .simulated_boot_id
            .clone()
            .unwrap_or_else(crate::target_id::boot_id),
        args: args.clone(),
        secret,
        last_refusal: Default::default(),
    };
    stop_runs_on_signals();
    log(
        &me,
        &format!(
            "agent of {} (boot id {}), listener {}",
            me.host, me.boot_id, args.listener
        ),
    );
    let mut last_wait = String::new();
    loop {
        let poll = Duration::from_secs_f64(args.poll);
        let req = CampaignRequest::Next {
            host: me.host.clone(),
            boot_id: me.boot_id.clone(),
        };
        let next = match call(&args.listener, &me.secret, req).await {
            Ok(CampaignResponse::Next(n)) => n,
            Ok(other) => Err(Error::Msg(format!("listener answered Next with {other:?}")))?,
            Err(e) => {
                log(
                    &me,
                    &format!("{e}; asking again in {:.0} s", poll.as_secs_f64()),
                );
                tokio::time::sleep(poll).await;
                continue;
            }
        };
        match next {
            None | Some(Instruction::Wait { .. }) => {
                let why = match next {
                    Some(Instruction::Wait { reason }) => reason,
                    _ => format!("no campaign names host {}", me.host),
                };
                if why != last_wait {
                    log(&me, &format!("waiting: {why}"));
                    last_wait = why;
                }
                tokio::time::sleep(poll).await;
            }
            Some(Instruction::Verify {
                campaign,
                number,
                runs,
                workloads,
            }) => {
                last_wait.clear();
                let me2 = &me;
                let outcomes = tokio::task::block_in_place(|| verify_all(me2, &runs, &workloads));
                let ev = Event::Verified {
                    host: me.host.clone(),
                    number,
                    outcomes,
                    boot_id: me.boot_id.clone(),
                    at_ms: crate::manifest::now_unix_ms(),
                };
                if let Err(e) = append(&args.listener, &me.secret, &campaign, ev).await {
                    log(
                        &me,
                        &format!("cannot upload the reports of run set {number}: {e}"),
                    );
                    tokio::time::sleep(poll).await;
                }
            }
            Some(Instruction::Run {
                campaign,
                number,
                workloads,
            }) => {
                last_wait.clear();
                run_set(&me, &campaign, number, &workloads).await;
            }
        }
    }
}

fn log(me: &Me, msg: &str) {
    eprintln!("plugpull agent [{}]: {msg}", me.host);
}

/// A `plugpull` child with the agent's host name and boot id.
fn child(me: &Me) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("plugpull"));
    let mut c = Command::new(exe);
    c.stdin(Stdio::null()).env(HOST_ENV, &me.host);
    if let Some(b) = &me.args.simulated_boot_id {
        c.env(SIMULATED_BOOT_ID_ENV, b);
    }
    c
}

/// Starts run set `number` (one `plugpull write` per workload), records it, and
/// waits for the runs to end (the cut ends them, with the agent).
async fn run_set(me: &Me, campaign: &str, number: u32, workloads: &[String]) {
    let started = tokio::task::block_in_place(|| start_all(me, workloads));
    let (children, runs) = match started {
        Ok(x) => x,
        Err(e) => {
            // Recorded (and logged) once per campaign and reason, not at every retry.
            let key = format!("{campaign}\n{}", e);
            let again =
                std::mem::replace(&mut *me.last_refusal.lock().unwrap(), key.clone()) == key;
            if !again {
                log(me, &format!("refused run set {number}: {e}"));
                let ev = Event::Refused {
                    host: me.host.clone(),
                    reason: e.to_string(),
                    at_ms: crate::manifest::now_unix_ms(),
                };
                let _ = append(&me.args.listener, &me.secret, campaign, ev).await;
            }
            tokio::time::sleep(Duration::from_secs_f64(me.args.poll * 6.0)).await;
            return;
        }
    };
    me.last_refusal.lock().unwrap().clear();
    let ev = Event::Started {
        host: me.host.clone(),
        number,
        runs: runs.clone(),
        boot_id: me.boot_id.clone(),
        at_ms: crate::manifest::now_unix_ms(),
    };
    let recorded = append(&me.args.listener, &me.secret, campaign, ev).await;
    let list: Vec<String> = runs.iter().map(|r| r.to_string()).collect();
    log(
        me,
        &format!("run set {number} started: {}", list.join(", ")),
    );
    let how = watch(me, campaign, children, recorded.is_err()).await;
    let Some(how) = how else {
        log(
            me,
            &format!(
                "run set {number} stopped: the campaign wants no more cuts (done or cancelled)"
            ),
        );
        return;
    };
    log(
        me,
        &format!("run set {number} ended while this agent ran on: {how}"),
    );
    let ev = Event::Ended {
        host: me.host.clone(),
        number,
        detail: how,
        at_ms: crate::manifest::now_unix_ms(),
    };
    let _ = append(&me.args.listener, &me.secret, campaign, ev).await;
    // A run set that cannot run is not restarted in a tight loop.
    tokio::time::sleep(Duration::from_secs_f64(me.args.poll * 6.0)).await;
}

/// How often [`watch`] looks at its runs.
const WATCH_TICK: Duration = Duration::from_millis(250);

/// Waits for a run set's runs to end (a cut ends them with the agent). Every `--poll`
/// seconds it asks whether the campaign still wants cuts of this host — not when it
/// was cancelled, or has its cuts — and stops the runs when it does not (`None`).
/// `stop` stops them at once (their run set could not be recorded). Otherwise how
/// each run ended.
async fn watch(me: &Me, campaign: &str, mut children: Vec<Running>, stop: bool) -> Option<String> {
    let mut stopping = stop;
    let mut asked = tokio::time::Instant::now();
    loop {
        let done: Vec<bool> = children
            .iter_mut()
            .map(|c| c.child.try_wait().ok().flatten().is_some())
            .collect();
        if done.iter().all(|d| *d) {
            break;
        }
        if !stopping && asked.elapsed().as_secs_f64() >= me.args.poll {
            asked = tokio::time::Instant::now();
            stopping = crate::campaign::load(&me.args.listener, &me.secret, campaign)
                .await
                .is_ok_and(|c| {
                    c.cancelled().is_some()
                        || c.host(&me.host).cuts.len() as u32 >= c.definition.cuts
                });
        }
        if stopping {
            for c in &mut children {
                let _ = c.child.kill();
            }
            for c in &mut children {
                let _ = c.child.wait();
            }
            RUNNING.lock().unwrap().clear();
            return None;
        }
        tokio::time::sleep(WATCH_TICK).await;
    }
    RUNNING
        .lock()
        .unwrap()
        .retain(|p| !children.iter().any(|c| c.child.id() == *p));
    let how: Vec<String> = children
        .iter_mut()
        .map(|c| {
            let st = c
                .child
                .wait()
                .map(|s| s.to_string())
                .unwrap_or_else(|e| e.to_string());
            let last = c.last.lock().unwrap().clone();
            let tail = if last.is_empty() {
                String::new()
            } else {
                format!(": {last}")
            };
            format!("`plugpull write {}` {st}{tail}", c.what)
        })
        .collect();
    Some(how.join("; "))
}

/// A started `plugpull write`, with the last line it printed on stderr.
struct Running {
    child: Child,
    what: String,
    last: std::sync::Arc<std::sync::Mutex<String>>,
}

/// Checks every workload against the configuration, then starts one `plugpull
/// write` per workload and reads each one's run id. Errors: a workload not allowed
/// or that did not start (the others are stopped).
fn start_all(me: &Me, workloads: &[String]) -> Result<(Vec<Running>, Vec<RunId>), Error> {
    let lines: Vec<String> = workloads.iter().map(|l| own(me, l)).collect();
    let config = AgentConfig::read(&me.args.config)?;
    for line in &lines {
        let w = workload::parse(line)?;
        config.allows(&w, &me.args.config).map_err(Error::Msg)?;
    }
    let mut children: Vec<Running> = Vec::new();
    let mut runs = Vec::new();
    for line in &lines {
        match start_one(me, line, config.canary_dir.as_deref()) {
            Ok((c, run)) => {
                children.push(c);
                runs.push(run);
            }
            Err(e) => {
                for c in &mut children {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                }
                return Err(e);
            }
        }
    }
    Ok((children, runs))
}

fn start_one(
    me: &Me,
    line: &str,
    canary: Option<&std::path::Path>,
) -> Result<(Running, RunId), Error> {
    let words = workload::words(line)?;
    let mut cmd = child(me);
    cmd.arg("write").args(&words);
    if let Some(dir) = canary {
        cmd.arg("--canary-dir").arg(dir);
    }
    let mut c = cmd
        .args(["--listener", &me.args.listener, "--secret-file"])
        .arg(&me.args.secret_file)
        .args(["--duration", UNTIL_CUT])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Msg(format!("cannot start plugpull write: {e}")))?;
    let prefix = format!("plugpull agent [{}] {}: ", me.host, words[0]);
    let err_lines = crate::rig::proc::lines(c.stderr.take().expect("piped"));
    let out = BufReader::new(c.stdout.take().expect("piped"));
    let (tx, rx) = std::sync::mpsc::channel();
    let p = prefix.clone();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if let Some(id) = l.strip_prefix("run id: ") {
                let _ = tx.send(id.trim().to_string());
            }
            eprintln!("{p}{l}");
        }
    });
    let run = match rx.recv_timeout(START_LIMIT) {
        Ok(id) => id.parse::<RunId>().map_err(Error::Msg)?,
        Err(_) => {
            let _ = c.kill();
            let _ = c.wait();
            let tail: Vec<String> = err_lines.iter().collect();
            return Err(Error::Msg(format!(
                "`plugpull write {line}` did not start: {}",
                tail.join(" / ")
            )));
        }
    };
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let keep = last.clone();
    std::thread::spawn(move || {
        for l in err_lines {
            eprintln!("{prefix}{l}");
            *keep.lock().unwrap() = l;
        }
    });
    let what = words.first().cloned().unwrap_or_default();
    RUNNING.lock().unwrap().push(c.id());
    Ok((
        Running {
            child: c,
            what,
            last,
        },
        run,
    ))
}
