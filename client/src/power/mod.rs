//! Cut drivers: turn a machine (or an outlet) off and on and read its power state,
//! through the power-control hardware named by a `--power` URI (grammar in
//! [`plugpull::power`], docs in `docs/power.md`; source: issue 12, "Cut drivers").
//!
//! `plugpull power --power URI off|on|status` runs one action, so a user can test
//! the hardware before a campaign; the campaign controller calls [`open`] and the
//! same [`Driver`]s. Secrets (BMC passwords, SNMP communities) are read only from
//! files, are never printed, and never reach a command line (see each driver).

mod exec;
mod http;
mod ipmi;
mod plug;
mod redfish;
mod snmp;

use crate::Error;
use plugpull::power::{CutKind, PowerState, PowerUri};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What a driver read back from the device.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The power state.
    pub state: PowerState,
    /// Power drawn by the load in watts, where the device measures it (Shelly `apower`).
    pub load_w: Option<f64>,
}

/// One piece of power-control hardware. Every call blocks until the device answered
/// (HTTP and SNMP time out after 10 s); errors name the device and the cause.
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

/// The driver for a parsed URI. Errors for `simfs://` (not in this version).
pub fn open(uri: &PowerUri) -> Result<Box<dyn Driver>, Error> {
    Ok(match uri {
        PowerUri::Exec { command } => Box::new(exec::Exec::new(command)),
        PowerUri::Ipmi { .. } => Box::new(ipmi::Ipmi::new(uri)?),
        PowerUri::Redfish { .. } => Box::new(redfish::Redfish::new(uri)?),
        PowerUri::ApcSnmp { .. } => Box::new(snmp::ApcSnmp::new(uri)?),
        PowerUri::Tasmota { host, port, relay } => {
            Box::new(plug::Tasmota::new(host, *port, *relay))
        }
        PowerUri::Shelly { host, port, id } => Box::new(plug::Shelly::new(host, *port, *id)),
        PowerUri::Simfs { .. } => {
            return Err(Error(
                "simfs: the simulated machine's power driver is not in this version".into(),
            ))
        }
    })
}

/// Reads a secret (password, community) from `path`: its first line, without the
/// line end. Warns on stderr when the file is readable by group or others.
/// Errors: unreadable or empty file (the error names the file, never the content).
pub fn read_secret(path: &Path, what: &str) -> Result<String, Error> {
    let meta = std::fs::metadata(path).map_err(|e| {
        Error(format!(
            "cannot read the {what} file {}: {e}",
            path.display()
        ))
    })?;
    warn_if_shared(path, meta.mode(), what);
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error(format!(
            "cannot read the {what} file {}: {e}",
            path.display()
        ))
    })?;
    let line = text.lines().next().unwrap_or("").to_string();
    if line.is_empty() {
        return Err(Error(format!(
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
    /// redfish+http://, apc-snmp://, tasmota://, shelly://.
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
/// device did it (or answered, for `status`, whatever the state), 2 otherwise.
pub fn command(args: &PowerArgs) -> Result<bool, Error> {
    let uri = PowerUri::parse(&args.power).map_err(Error)?;
    let driver = open(&uri)?;
    let kind = driver.kind();
    let status = match args.action {
        Action::Off => driver.off().map(|_| None)?,
        Action::On => driver.on().map(|_| None)?,
        Action::Status => Some(driver.status()?),
    };
    // Where the device measures the load, read it back after off/on: ~0 W after
    // `off` confirms the load dropped.
    let after = match args.action {
        Action::Off | Action::On if driver.measures_load() => driver.status()?.load_w,
        _ => None,
    };
    let action = format!("{:?}", args.action).to_lowercase();
    if args.json {
        let mut v = serde_json::json!({
            "uri": uri.to_string(),
            "kind": kind.to_string(),
            "action": action,
            "ok": true,
        });
        if let Some(s) = &status {
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
        if let Some(w) = after {
            v["load_w"] = w.into();
        }
        println!("{v}");
    } else {
        match (&status, after) {
            (Some(s), _) => match s.load_w {
                Some(w) => println!("{} (load {w} W)", s.state),
                None => println!("{}", s.state),
            },
            (None, Some(w)) => println!("{action}: done ({uri}, {kind}); load now {w} W"),
            (None, None) => println!("{action}: done ({uri}, {kind})"),
        }
    }
    Ok(true)
}
