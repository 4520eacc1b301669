//! `plugpull campaign`: many power cuts, unattended (`docs/campaign.md`).
//!
//! * `create` records the plan in the listener ([`plugpull::campaign::Definition`]);
//! * `run` is the controller ([`run`]): per host, wait until the agent's runs have
//!   written for a random delay, cut power through the host's driver, check the load
//!   dropped, restore power, wait for the machine to come back and for its agent's
//!   verify reports, judge the cut, record it, go on;
//! * `status` prints the cuts, the roll-up and its confidence bound ([`print`]);
//! * `plan` and `compare` do the statistics of a campaign before and after
//!   ([`compare`], [`plugpull::stats`]).
//!
//! Every fact is an event the listener makes durable before it answers, so a
//! controller killed at any moment resumes where the record says.

pub mod compare;
pub mod power_state;
pub mod print;
pub mod run;
pub mod summary;
pub mod witness;
pub mod workload;

use crate::net::{self, ListenerArgs};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::campaign::{Campaign, Definition, HostPlan};
use plugpull::power::PowerUri;
use plugpull::wire::{CampaignRequest, CampaignResponse, Request, Response};
use std::path::PathBuf;
use std::time::Duration;

/// `plugpull campaign` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum CampaignCmd {
    /// Record a campaign's plan in the listener.
    ///
    /// Exit 0: recorded; 2: refused (a bad workload or power URI, a host already in a
    /// campaign not done, the name taken).
    ///
    /// Examples:
    ///   plugpull campaign create --listener witness:7458 --secret-file /etc/plugpull.secret --name nvme-plp --host dbtest1 --power 'ipmi://admin@bmc1?password-file=/etc/plugpull/bmc.pw' --workload 'file --target /dev/nvme1n1 --size 8GiB --jobs 8' --cuts 60 --cut-after 20s..90s --off 15s
    ///   plugpull campaign create --listener witness:7458 --secret-file /etc/plugpull.secret --name fleet --host db1 --power tasmota://plug1 --host db2 --power tasmota://plug2 --workload 'pgbench --dsn "host=/run/postgresql dbname=bench" --clients 8'
    #[command(verbatim_doc_comment)]
    Create {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: CreateArgs,
    },
    /// Run the campaign: cut, restore, wait for the verify, record; resumes where it stopped.
    ///
    /// Exit 0 when every valid cut passed, 1 when any failed, 2 when it could not run
    /// (a machine did not come back, an agent refused a workload, a driver failed) or
    /// no cut was valid.
    ///
    /// Example: plugpull campaign run --listener witness:7458 --secret-file /etc/plugpull.secret --name nvme-plp
    #[command(verbatim_doc_comment)]
    Run {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: ShowArgs,
    },
    /// Stop a campaign for good: no more cuts; its agents verify what is open, then wait.
    ///
    /// Exit 0: cancelled; 2: no such campaign, or the listener unreachable.
    ///
    /// Example: plugpull campaign cancel --listener witness:7458 --secret-file /etc/plugpull.secret --name nvme-plp --reason 'wrong target'
    #[command(verbatim_doc_comment)]
    Cancel {
        #[command(flatten)]
        listener: ListenerArgs,
        /// The campaign.
        #[arg(long)]
        name: String,
        /// Why (recorded and shown by `status`).
        #[arg(long, default_value = "cancelled by hand")]
        reason: String,
    },
    /// How many cuts a claim needs: the cuts that catch a failure rate, and what clean cuts show.
    ///
    /// Exit 0; 2 on a bad --rate, --cuts or --confidence.
    ///
    /// Examples:
    ///   plugpull campaign plan --rate 0.10
    ///   plugpull campaign plan --rate 1% --confidence 0.99
    ///   plugpull campaign plan --cuts 60 --json
    #[command(verbatim_doc_comment)]
    Plan {
        #[command(flatten)]
        args: compare::PlanArgs,
    },
    /// Compare two campaigns: their failure rates, Fisher's exact test, what differs in their configurations.
    ///
    /// Exit 0 once compared (a difference is no error); 2 when a campaign is missing
    /// or has no valid cut.
    ///
    /// Example: plugpull campaign compare --listener witness:7458 --secret-file /etc/plugpull.secret nvme-nobarrier nvme-barrier
    #[command(verbatim_doc_comment)]
    Compare {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: compare::CompareArgs,
    },
    /// Print each cut, the roll-up and its confidence bound.
    ///
    /// Exit 0: no valid cut failed; 1: one did; 2: a finished campaign with no valid
    /// cut (nothing was measured), or no such campaign.
    ///
    /// Example: plugpull campaign status --listener witness:7458 --secret-file /etc/plugpull.secret --name nvme-plp --json
    #[command(verbatim_doc_comment)]
    Status {
        #[command(flatten)]
        listener: ListenerArgs,
        #[command(flatten)]
        args: ShowArgs,
    },
}

/// `campaign create` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct CreateArgs {
    /// The campaign's name: letters, digits, `.`, `_`, `-`.
    #[arg(long)]
    pub name: String,
    /// A machine under test, by the host name its agent announces (repeat for a fleet).
    #[arg(long = "host", required = true)]
    pub hosts: Vec<String>,
    /// Its power-control URI (docs/power.md): one per --host, in the same order.
    #[arg(long = "power", required = true)]
    pub powers: Vec<String>,
    /// A workload, as the arguments of `plugpull write` (repeat to run several at once).
    #[arg(long = "workload", required = true)]
    pub workloads: Vec<String>,
    /// Cuts per host.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub cuts: u32,
    /// The delay from a run's start to its cut: drawn uniformly from A..B, or always A.
    #[arg(long, default_value = "20s..90s", value_parser = plugpull::campaign::parse_range)]
    pub cut_after: (u64, u64),
    /// How long power stays off.
    #[arg(long, default_value = "15s", value_parser = plugpull::units::parse_duration)]
    pub off: Duration,
    /// How long a machine has to come back after power is restored.
    #[arg(long, default_value = "10m", value_parser = plugpull::units::parse_duration)]
    pub boot_timeout: Duration,
}

/// `campaign run` and `campaign status` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct ShowArgs {
    /// The campaign.
    #[arg(long)]
    pub name: String,
    /// Print the whole campaign as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Write a JUnit XML file: one test case per cut (failure = a failed verdict,
    /// skipped = not measured, error = invalid).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// Runs a `plugpull campaign` subcommand: `Ok(true)` exit 0, `Ok(false)` exit 1.
pub async fn command(cmd: &CampaignCmd) -> Result<bool, Error> {
    match cmd {
        CampaignCmd::Create { listener, args } => {
            create(&listener.listener, &listener.secret()?, args).await
        }
        CampaignCmd::Run { listener, args } => {
            let r = match listener.secret() {
                Ok(secret) => run::run(&listener.listener, &secret, args).await,
                Err(e) => Err(e),
            };
            json_failure(args.json, r)
        }
        CampaignCmd::Cancel {
            listener,
            name,
            reason,
        } => {
            let secret = listener.secret()?;
            let ev = plugpull::campaign::Event::Cancelled {
                reason: reason.clone(),
                at_ms: crate::manifest::now_unix_ms(),
            };
            append(&listener.listener, &secret, name, ev).await?;
            println!("campaign {name} cancelled: {reason}");
            Ok(true)
        }
        CampaignCmd::Plan { args } => json_failure(args.json, compare::plan(args)),
        CampaignCmd::Compare { listener, args } => {
            let r = async {
                let secret = listener.secret()?;
                let a = load(&listener.listener, &secret, &args.a).await?;
                let b = load(&listener.listener, &secret, &args.b).await?;
                compare::compare(&a, &b, args)
            };
            json_failure(args.json, r.await)
        }
        CampaignCmd::Status { listener, args } => {
            let status = async {
                let c = load(&listener.listener, &listener.secret()?, &args.name).await?;
                print::show(&c, args)?;
                Ok(c)
            };
            match status.await {
                Err(e) => json_failure(args.json, Err(e)),
                // The status is printed (one JSON object with --json). A finished
                // campaign with no valid cut measured nothing: exit 2, as `campaign
                // run` ends.
                Ok(c) if c.done() => run::outcome(&c.roll_up()),
                // A campaign in progress is no error: 1 only once a valid cut failed.
                Ok(c) => Ok(c.roll_up().failed == 0),
            }
        }
    }
}

/// With `--json`, a failure still prints one object on stdout: `{"ok":false,"error":…}`.
pub fn json_failure(json: bool, r: Result<bool, Error>) -> Result<bool, Error> {
    if let (true, Err(e)) = (json, &r) {
        println!(
            "{}",
            serde_json::json!({"ok": false, "error": e.to_string()})
        );
    }
    r
}

/// The plan from the arguments. Errors: a bad name, range, power URI or workload,
/// or --host and --power counts that differ.
pub fn definition(a: &CreateArgs) -> Result<Definition, Error> {
    plugpull::campaign::check_name(&a.name)?;
    if a.hosts.len() != a.powers.len() {
        return Err(Error::Msg(format!(
            "{} --host but {} --power: give one --power per --host, in the same order",
            a.hosts.len(),
            a.powers.len()
        )));
    }
    let mut hosts = Vec::new();
    if a.boot_timeout.is_zero() {
        return Err(Error::Msg("--boot-timeout must be more than 0 s".into()));
    }
    for (host, power) in a.hosts.iter().zip(&a.powers) {
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::Msg(format!(
                "--host {host:?}: a host name is the name its agent announces, without spaces"
            )));
        }
        PowerUri::parse(power).map_err(|e| Error::Msg(format!("--power for {host}: {e}")))?;
        if hosts.iter().any(|h: &HostPlan| &h.host == host) {
            return Err(Error::Msg(format!("--host {host} is given twice")));
        }
        hosts.push(HostPlan {
            host: host.clone(),
            power: power.clone(),
        });
    }
    for w in &a.workloads {
        workload::parse(w)?;
    }
    Ok(Definition {
        name: a.name.clone(),
        hosts,
        workloads: a.workloads.clone(),
        cuts: a.cuts,
        cut_after_ms: a.cut_after,
        off_ms: a.off.as_millis() as u64,
        boot_timeout_ms: a.boot_timeout.as_millis() as u64,
        created_unix_ms: crate::manifest::now_unix_ms(),
    })
}

async fn create(listener: &str, secret: &Secret, a: &CreateArgs) -> Result<bool, Error> {
    let d = definition(a)?;
    call(listener, secret, CampaignRequest::Create(d.clone())).await?;
    println!(
        "campaign {} created: {} host(s), {} cuts each, cut after {:.0}..{:.0} s, power off {:.0} s",
        d.name,
        d.hosts.len(),
        d.cuts,
        d.cut_after_ms.0 as f64 / 1000.0,
        d.cut_after_ms.1 as f64 / 1000.0,
        d.off_ms as f64 / 1000.0
    );
    println!(
        "next: start `plugpull agent` on each host, then `plugpull campaign run --name {}`",
        d.name
    );
    Ok(true)
}

/// One campaign request on a fresh connection.
///
/// Errors: the listener is unreachable or refused (its message).
pub async fn call(
    listener: &str,
    secret: &Secret,
    req: CampaignRequest,
) -> Result<CampaignResponse, Error> {
    let (mut r, mut w) = net::connect(listener, secret).await?;
    w.send(&Request::Campaign(Box::new(req))).await?;
    w.flush().await?;
    match r.recv().await? {
        Response::Campaign(a) => Ok(*a),
        other => Err(Error::Msg(format!(
            "listener {listener} answered a campaign request with {other:?}"
        ))),
    }
}

/// Reads campaign `name`. Errors: no such campaign, or the listener failed.
pub async fn load(listener: &str, secret: &Secret, name: &str) -> Result<Campaign, Error> {
    match call(
        listener,
        secret,
        CampaignRequest::Load { name: name.into() },
    )
    .await?
    {
        CampaignResponse::State { definition, events } => Ok(Campaign { definition, events }),
        other => Err(Error::Msg(format!(
            "listener {listener} answered Load with {other:?}"
        ))),
    }
}

/// Appends `event` to campaign `name` (durable when this returns).
pub async fn append(
    listener: &str,
    secret: &Secret,
    name: &str,
    event: plugpull::campaign::Event,
) -> Result<(), Error> {
    let req = CampaignRequest::Append {
        name: name.into(),
        event,
    };
    match call(listener, secret, req).await? {
        CampaignResponse::Appended { .. } => Ok(()),
        other => Err(Error::Msg(format!(
            "listener {listener} answered Append with {other:?}"
        ))),
    }
}
