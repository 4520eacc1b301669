//! Cut drivers: turn a machine (or an outlet) off and on and read its power state,
//! through the power-control hardware named by a `--power` URI (grammar in
//! [`plugpull::power`], docs in `docs/power.md`).
//!
//! `plugpull power --power URI off|on|status` runs one action, so a user can test
//! the hardware before a campaign; the campaign controller calls [`open`] and the
//! same [`Driver`]s. Secrets (BMC passwords, SNMP communities) are read only from
//! files, are never printed, and never reach a command line (see each driver).

mod exec;
mod http;
mod ipmi;
mod plug;
mod qemu;
mod redfish;
mod sim;
mod snmp;

use crate::Error;
use plugpull::power::{CutKind, PowerState, PowerUri};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How long an `exec:` command may run (a relay script, a fence agent).
pub const EXEC_LIMIT: Duration = Duration::from_secs(60);
/// How long one `ipmitool` run may take.
pub const IPMI_LIMIT: Duration = Duration::from_secs(30);
/// How long one `snmpset`/`snmpget` run may take.
pub const SNMP_LIMIT: Duration = Duration::from_secs(15);
/// How long one HTTP request (Redfish, Tasmota, Shelly) may take, connect included.
pub const HTTP_LIMIT: Duration = Duration::from_secs(10);

/// `default`, or `PLUGPULL_POWER_TIMEOUT` whole seconds (at least 1) when set.
pub fn limit(default: Duration) -> Duration {
    std::env::var("PLUGPULL_POWER_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
        .unwrap_or(default)
}

/// Runs a driver's tool (`sh -c`, ipmitool, snmpset/snmpget) with stdin from
/// `/dev/null`, in a process group of its own, its output captured: after `limit`
/// (or on Ctrl-C) the whole group is SIGKILLed, so neither the tool nor a child it
/// left behind holding its output can hang the caller. `what` names it in errors:
/// `"{what} timed out after N s"`.
pub fn run_tool(mut cmd: Command, what: &str, limit: Duration) -> Result<Output, Error> {
    cmd.stdin(Stdio::null()).process_group(0);
    crate::rig::proc::output_within(cmd, what, limit).map_err(|e| match e {
        Error::TimedOut { .. } => {
            Error::Msg(format!("{what} timed out after {} s", limit.as_secs()))
        }
        e => e,
    })
}

/// True when `tool` is an executable file in a `PATH` directory.
pub fn on_path(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| {
        std::fs::metadata(d.join(tool)).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
    })
}

/// What a driver read back from the device.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The power state.
    pub state: PowerState,
    /// Power drawn by the load in watts, where the device measures it (Shelly `apower`).
    pub load_w: Option<f64>,
}

/// One piece of power-control hardware. Every call blocks until the device answered
/// or its time limit ran out ([`EXEC_LIMIT`], [`IPMI_LIMIT`], [`SNMP_LIMIT`],
/// [`HTTP_LIMIT`]; all replaced by `PLUGPULL_POWER_TIMEOUT` seconds when set);
/// errors name the device and the cause.
pub trait Driver {
    /// Cuts power.
    fn off(&self) -> Result<(), Error>;
    /// Restores power.
    fn on(&self) -> Result<(), Error>;
    /// Reads the power state.
    fn status(&self) -> Result<Status, Error>;
    /// What a cut through this driver removes power from.
    fn kind(&self) -> CutKind;
    /// True when [`Driver::status`] reports the load's power ([`Status::load_w`]),
    /// which confirms after `off` that the load really dropped.
    fn measures_load(&self) -> bool {
        false
    }
}

/// The driver for a parsed URI. Errors: a driver's setup (a secret file, a tool,
/// `simfs://`'s `machine.json`), named.
pub fn open(uri: &PowerUri) -> Result<Box<dyn Driver>, Error> {
    Ok(match uri {
        PowerUri::Exec { command, kind } => Box::new(exec::Exec::new(command, *kind)),
        PowerUri::Ipmi { .. } => Box::new(ipmi::Ipmi::new(uri)?),
        PowerUri::Redfish { .. } => Box::new(redfish::Redfish::new(uri)?),
        PowerUri::ApcSnmp { .. } => Box::new(snmp::ApcSnmp::new(uri)?),
        PowerUri::Tasmota { host, port, relay } => {
            Box::new(plug::Tasmota::new(host, *port, *relay))
        }
        PowerUri::Shelly { host, port, id } => Box::new(plug::Shelly::new(host, *port, *id)),
        PowerUri::Simfs { mountpoint } => Box::new(sim::Sim::new(mountpoint)?),
        PowerUri::Qemu { dir, reset } => Box::new(qemu::Qemu::new(dir, *reset)?),
    })
}

/// Reads a secret (password, community) from `path`: its first line, without the
/// line end. Warns on stderr when the file is readable by group or others.
/// Errors: unreadable or empty file (the error names the file, never the content).
pub fn read_secret(path: &Path, what: &str) -> Result<String, Error> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::Msg(format!(
            "cannot read the {what} file {}: {e}",
            path.display()
        ))
    })?;
    warn_if_shared(path, meta.mode(), what);
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Msg(format!(
            "cannot read the {what} file {}: {e}",
            path.display()
        ))
    })?;
    let line = text.lines().next().unwrap_or("").to_string();
    if line.is_empty() {
        return Err(Error::Msg(format!(
            "the {what} file {} is empty",
            path.display()
        )));
    }
    Ok(line)
}

fn warn_if_shared(path: &Path, mode: u32, what: &str) {
    if mode & 0o077 != 0 {
        eprintln!(
            "plugpull: warning: the {what} file {} is readable by others (mode {:04o}): chmod 600 it",
            path.display(),
            mode & 0o7777
        );
    }
}

/// `plugpull power` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct PowerArgs {
    /// The power-control URI (docs/power.md): exec:CMD, ipmi://, redfish://,
    /// redfish+http://, apc-snmp://, tasmota://, shelly://, simfs://, qemu://.
    #[arg(long, value_name = "URI")]
    pub power: String,
    /// What to do.
    #[arg(value_enum)]
    pub action: Action,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A `plugpull power` action.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Cut power.
    Off,
    /// Restore power.
    On,
    /// Read the power state.
    Status,
}

/// `plugpull power`: runs the action and prints what happened. Exit 0 when the
/// device did it (or answered, for `status`, whatever the state), 2 otherwise; with
/// `--json`, a failure prints `{"ok":false,"error":…}` on stdout too.
pub fn command(args: &PowerArgs) -> Result<bool, Error> {
    match act(args) {
        Ok(done) => {
            done.print(args.json);
            Ok(true)
        }
        Err(e) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({ "ok": false, "error": e.to_string() })
                );
            }
            Err(e)
        }
    }
}

/// What `plugpull power` did.
struct Done {
    uri: PowerUri,
    kind: CutKind,
    action: Action,
    /// `status`: what the device reported; `off`/`on` on a driver that measures the
    /// load: the read-back that confirmed it.
    status: Option<Status>,
}

/// Runs the action. Where the device measures the load (Shelly), `off`/`on` read the
/// switch back: it must report the new state (after `off`, ~0 W confirms the load
/// dropped); a read-back that fails leaves the action sent but not confirmed.
fn act(args: &PowerArgs) -> Result<Done, Error> {
    let uri = PowerUri::parse(&args.power).map_err(Error::Msg)?;
    let driver = open(&uri)?;
    let (name, want) = match args.action {
        Action::Status => {
            return Ok(Done {
                status: Some(driver.status()?),
                kind: driver.kind(),
                uri,
                action: args.action,
            })
        }
        Action::Off => ("off", PowerState::Off),
        Action::On => ("on", PowerState::On),
    };
    match args.action {
        Action::Off => driver.off()?,
        _ => driver.on()?,
    }
    let mut status = None;
    if driver.measures_load() {
        let scheme = uri.scheme();
        let s = driver
            .status()
            .map_err(|e| Error::Msg(format!("{scheme}: {name} sent, not confirmed: {}", e)))?;
        if s.state != want {
            let load = match (args.action, s.load_w) {
                (Action::Off, Some(w)) => format!(" (load {w} W)"),
                _ => String::new(),
            };
            return Err(Error::Msg(format!(
                "{scheme}: {name} sent, but the switch still reports {}{load}",
                s.state
            )));
        }
        status = Some(s);
    }
    Ok(Done {
        kind: driver.kind(),
        uri,
        action: args.action,
        status,
    })
}

impl Done {
    fn print(&self, json: bool) {
        let action = format!("{:?}", self.action).to_lowercase();
        let (uri, kind) = (&self.uri, self.kind);
        if json {
            let mut v = serde_json::json!({
                "uri": uri.to_string(),
                "kind": kind.to_string(),
                "action": action,
                "ok": true,
            });
            if let Some(s) = &self.status {
                v["state"] = match &s.state {
                    PowerState::On => "on".into(),
                    PowerState::Off => "off".into(),
                    PowerState::Unknown(_) => "unknown".into(),
                };
                if let PowerState::Unknown(a) = &s.state {
                    v["answer"] = a.as_str().into();
                }
                v["load_w"] = s.load_w.into();
            }
            println!("{v}");
            return;
        }
        match (self.action, &self.status) {
            (Action::Status, Some(s)) => match s.load_w {
                Some(w) => println!("{} (load {w} W)", s.state),
                None => println!("{}", s.state),
            },
            (
                _,
                Some(Status {
                    load_w: Some(w), ..
                }),
            ) => println!("{action}: done ({uri}, {kind}); load now {w} W"),
            _ => println!("{action}: done ({uri}, {kind})"),
        }
    }
}
