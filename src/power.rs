//! Power-control URIs (`--power URI`) and the answers of the devices behind them:
//! pure parsing, no processes and no sockets (those live in the client's `power`
//! module). The grammar, with every driver's options, is in `docs/power.md`.
//!
//! Grammar, one scheme per driver (`[...]` optional; ports default as shown):
//!
//! * `exec:CMD` — CMD is run with `sh -c`, `{action}` replaced by `off`, `on`, `status`.
//! * `ipmi://USER@BMC[:PORT]?password-file=F[&cipher=N]` — port 623.
//! * `redfish://USER@BMC[:PORT]/redfish/v1/Systems/ID?password-file=F[&insecure]` —
//!   HTTPS (port 443); `redfish+http://` for plain HTTP (port 80).
//! * `apc-snmp://PDU[:PORT]/OUTLET?community-file=F[&on=1&off=2]` — port 161.
//! * `tasmota://HOST[:PORT][/RELAY]` — port 80.
//! * `shelly://HOST[:PORT][/ID]` — port 80, switch 0.
//! * `simfs://MOUNTPOINT` — the simulated machine.
//! * `qemu://DIR[?cut=kill|reset]` — a QEMU virtual machine whose files live in DIR;
//!   `cut=reset` resets it (QMP `system_reset`) instead of killing QEMU.
//!
//! Secrets (passwords, SNMP communities) come only from files: a URI carrying one
//! (`user:password@`, `community@`) is refused before anything else is split (the
//! secret may hold `/`, `?`, `#` or `@`), and the error never repeats it.
//! Query values are taken literally (no percent-decoding).

pub mod answer;
mod grammar;

use grammar::{number, userinfo, Authority, Query};

pub use answer::{ipmi_state, redfish_state, shelly_status, snmp_state, tasmota_state, text_state};

use std::fmt;
use std::path::PathBuf;

/// What a cut removes power from; every driver declares it, and each cut records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutKind {
    /// Mains to the machine (a PDU outlet or a smart plug).
    Ac,
    /// The machine's own power supply, through its BMC (IPMI, Redfish).
    Dc,
    /// The drive only; the host stays up.
    Device,
    /// The simulated machine (simfs).
    Simulated,
    /// A virtual machine (QEMU killed: the guest's memory is lost; its disk image
    /// keeps what the host holds, or what simfs destaged when it sits on simfs).
    Vm,
    /// A reset, not a power cut (`qemu://DIR?cut=reset`: QMP `system_reset`; on
    /// hardware a reset button or a watchdog): the machine's memory is lost, its
    /// disks keep power and with it their volatile write caches.
    Reset,
}

impl fmt::Display for CutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CutKind::Ac => "ac",
            CutKind::Dc => "dc",
            CutKind::Device => "device",
            CutKind::Simulated => "simulated",
            CutKind::Vm => "vm",
            CutKind::Reset => "reset",
        })
    }
}

/// The power state a driver read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerState {
    /// Powered.
    On,
    /// Not powered.
    Off,
    /// The device answered something else (its answer, trimmed).
    Unknown(String),
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerState::On => f.write_str("on"),
            PowerState::Off => f.write_str("off"),
            PowerState::Unknown(s) => write!(f, "unknown ({s})"),
        }
    }
}

/// A parsed `--power` URI. Holds no secret: only the paths of the files that do.
/// `Display` prints the canonical URI (ports made explicit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerUri {
    /// `exec:CMD`, or `exec+KIND:CMD` to declare what the command cuts
    /// (`exec+dc:`, `exec+device:`; `exec:` is `ac`).
    Exec {
        /// The shell command, `{action}` not yet replaced.
        command: String,
        /// What it cuts.
        kind: CutKind,
    },
    /// `ipmi://USER@BMC[:PORT]?password-file=F[&cipher=N]`.
    Ipmi {
        /// BMC user name.
        user: String,
        /// BMC host name or address.
        host: String,
        /// UDP port (623 unless given).
        port: u16,
        /// File holding the BMC password.
        password_file: PathBuf,
        /// RMCP+ cipher suite (`&cipher=N`, ipmitool `-C`); none lets ipmitool ask
        /// the BMC, which some BMCs (and ipmi_sim) answer only after a 10 s timeout.
        cipher: Option<u8>,
    },
    /// `redfish[+http]://USER@BMC[:PORT]/redfish/v1/Systems/ID?password-file=F[&insecure]`.
    Redfish {
        /// BMC user name.
        user: String,
        /// BMC host name or address.
        host: String,
        /// TCP port (443 for HTTPS, 80 for HTTP unless given).
        port: u16,
        /// Path of the ComputerSystem resource, e.g. `/redfish/v1/Systems/1`.
        system: String,
        /// File holding the BMC password.
        password_file: PathBuf,
        /// Plain HTTP (`redfish+http://`) instead of HTTPS.
        plain_http: bool,
        /// HTTPS without certificate verification (`&insecure`).
        insecure: bool,
    },
    /// `apc-snmp://PDU[:PORT]/OUTLET?community-file=F[&on=N&off=N]`.
    ApcSnmp {
        /// PDU host name or address.
        host: String,
        /// UDP port (161 unless given).
        port: u16,
        /// Outlet number (1-based, as on the PDU).
        outlet: u32,
        /// File holding the SNMP write community.
        community_file: PathBuf,
        /// Value of the control/state OIDs meaning "on" (APC: 1).
        on_value: i64,
        /// Value of the control/state OIDs meaning "off" (APC: 2).
        off_value: i64,
    },
    /// `tasmota://HOST[:PORT][/RELAY]`.
    Tasmota {
        /// Device host name or address.
        host: String,
        /// TCP port (80 unless given).
        port: u16,
        /// Relay number (`Power<RELAY>`); none for a single-relay device.
        relay: Option<u32>,
    },
    /// `shelly://HOST[:PORT][/ID]` (Gen2+ RPC).
    Shelly {
        /// Device host name or address.
        host: String,
        /// TCP port (80 unless given).
        port: u16,
        /// Switch id (0 unless given).
        id: u32,
    },
    /// `simfs://MOUNTPOINT`.
    Simfs {
        /// Where the simulated machine's simfs is mounted.
        mountpoint: PathBuf,
    },
    /// `qemu://DIR[?cut=kill|reset]`.
    Qemu {
        /// The virtual machine's directory (`vm.json`, its state, QMP socket, logs).
        dir: PathBuf,
        /// `?cut=reset`: `off` resets the guest (QMP `system_reset`) and its disk
        /// keeps power, instead of killing QEMU (`?cut=kill`, the default).
        reset: bool,
    },
}

/// APC PowerNet MIB `rPDUOutletControlOutletCommand` (write 1 immediateOn, 2 immediateOff), indexed by outlet.
pub const APC_OUTLET_CONTROL_OID: &str = "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4";
/// APC PowerNet MIB `rPDUOutletStatusOutletState` (1 on, 2 off), indexed by outlet.
pub const APC_OUTLET_STATE_OID: &str = "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4";

impl PowerUri {
    /// Parses a `--power` URI. Errors name the scheme and what is wrong, never a secret.
    pub fn parse(uri: &str) -> Result<PowerUri, String> {
        if let Some((head, cmd)) = uri.split_once(':').filter(|(h, _)| h.starts_with("exec")) {
            let kind = match head {
                "exec" | "exec+ac" => CutKind::Ac,
                "exec+dc" => CutKind::Dc,
                "exec+device" => CutKind::Device,
                other => {
                    return Err(format!(
                        "`{other}:`: expected exec:, exec+ac:, exec+dc: or exec+device:"
                    ))
                }
            };
            if cmd.trim().is_empty() {
                return Err("exec: needs a command: exec:CMD".into());
            }
            return Ok(PowerUri::Exec {
                command: cmd.to_string(),
                kind,
            });
        }
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
            "not a power URI: expected exec:CMD or SCHEME://... with SCHEME one of ipmi, \
             redfish, redfish+http, apc-snmp, tasmota, shelly, simfs, qemu"
                .to_string()
        })?;
        // The user (and any secret wrongly put there) first: it may hold `/?#@`.
        let (user, rest) = userinfo(scheme, rest)?;
        let (rest, mut query) = match rest.split_once('?') {
            Some((r, q)) => (r, Query::parse(scheme, q)?),
            None => (rest, Query::default()),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let auth = Authority::parse(scheme, user, authority)?;
        let uri = match scheme {
            "ipmi" => parse_ipmi(auth, path, &mut query)?,
            "redfish" | "redfish+http" => parse_redfish(scheme, auth, path, &mut query)?,
            "apc-snmp" => parse_snmp(auth, path, &mut query)?,
            "tasmota" => PowerUri::Tasmota {
                port: auth.port.unwrap_or(80),
                host: auth.no_user(scheme)?,
                relay: match number(scheme, "relay", path, true)? {
                    Some(0) => return Err("tasmota: relay 0 would switch every relay (Power0): give one relay from 1, or none for a single-relay plug".into()),
                    r => r,
                },
            },
            "shelly" => PowerUri::Shelly {
                port: auth.port.unwrap_or(80),
                host: auth.no_user(scheme)?,
                id: number(scheme, "switch id", path, true)?.unwrap_or(0),
            },
            "simfs" => {
                let mp = format!("{authority}{path}");
                if mp.is_empty() {
                    return Err("simfs: needs a mount point: simfs:///mnt/sim".into());
                }
                PowerUri::Simfs {
                    mountpoint: mp.into(),
                }
            }
            "qemu" => {
                let dir = format!("{authority}{path}");
                if dir.is_empty() {
                    return Err("qemu: needs the machine's directory: qemu:///var/lib/vm1".into());
                }
                let reset = match query.text("cut").as_deref() {
                    None | Some("kill") => false,
                    Some("reset") => true,
                    Some(other) => {
                        return Err(format!(
                            "qemu: `cut` must be kill (QEMU killed: a power cut) or reset (QMP system_reset: the disk keeps power), not `{other}`"
                        ))
                    }
                };
                PowerUri::Qemu {
                    dir: dir.into(),
                    reset,
                }
            }
            other => return Err(format!("unknown power scheme `{other}`: expected exec, ipmi, redfish, redfish+http, apc-snmp, tasmota, shelly, simfs or qemu")),
        };
        query.finish(scheme)?;
        Ok(uri)
    }

    /// What a cut through this driver removes power from (`exec:` counts as `ac`
    /// unless declared `exec+dc:` or `exec+device:`).
    pub fn kind(&self) -> CutKind {
        match self {
            PowerUri::Exec { kind, .. } => *kind,
            PowerUri::ApcSnmp { .. } => CutKind::Ac,
            PowerUri::Tasmota { .. } | PowerUri::Shelly { .. } => CutKind::Ac,
            PowerUri::Ipmi { .. } | PowerUri::Redfish { .. } => CutKind::Dc,
            PowerUri::Simfs { .. } => CutKind::Simulated,
            PowerUri::Qemu { reset: false, .. } => CutKind::Vm,
            PowerUri::Qemu { reset: true, .. } => CutKind::Reset,
        }
    }

    /// The URI's scheme (`exec` for `exec:`).
    pub fn scheme(&self) -> &'static str {
        match self {
            PowerUri::Exec { .. } => "exec",
            PowerUri::Ipmi { .. } => "ipmi",
            PowerUri::Redfish {
                plain_http: true, ..
            } => "redfish+http",
            PowerUri::Redfish { .. } => "redfish",
            PowerUri::ApcSnmp { .. } => "apc-snmp",
            PowerUri::Tasmota { .. } => "tasmota",
            PowerUri::Shelly { .. } => "shelly",
            PowerUri::Simfs { .. } => "simfs",
            PowerUri::Qemu { .. } => "qemu",
        }
    }
}

impl fmt::Display for PowerUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.scheme();
        match self {
            PowerUri::Exec {
                command,
                kind: CutKind::Ac,
            } => write!(f, "exec:{command}"),
            PowerUri::Exec { command, kind } => write!(f, "exec+{kind}:{command}"),
            PowerUri::Ipmi {
                user,
                host,
                port,
                password_file,
                cipher,
            } => {
                write!(
                    f,
                    "{s}://{user}@{}:{port}?password-file={}",
                    bracket(host),
                    password_file.display()
                )?;
                match cipher {
                    Some(c) => write!(f, "&cipher={c}"),
                    None => Ok(()),
                }
            }
            PowerUri::Redfish {
                user,
                host,
                port,
                system,
                password_file,
                insecure,
                ..
            } => write!(
                f,
                "{s}://{user}@{}:{port}{system}?password-file={}{}",
                bracket(host),
                password_file.display(),
                if *insecure { "&insecure" } else { "" }
            ),
            PowerUri::ApcSnmp {
                host,
                port,
                outlet,
                community_file,
                on_value,
                off_value,
            } => write!(
                f,
                "{s}://{}:{port}/{outlet}?community-file={}&on={on_value}&off={off_value}",
                bracket(host),
                community_file.display()
            ),
            PowerUri::Tasmota { host, port, relay } => {
                write!(f, "{s}://{}:{port}", bracket(host))?;
                match relay {
                    Some(r) => write!(f, "/{r}"),
                    None => Ok(()),
                }
            }
            PowerUri::Shelly { host, port, id } => {
                write!(f, "{s}://{}:{port}/{id}", bracket(host))
            }
            PowerUri::Simfs { mountpoint } => write!(f, "{s}://{}", mountpoint.display()),
            PowerUri::Qemu { dir, reset } => {
                let cut = if *reset { "?cut=reset" } else { "" };
                write!(f, "{s}://{}{cut}", dir.display())
            }
        }
    }
}

/// `[::1]` for an IPv6 address, the host as is otherwise.
pub fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

fn parse_ipmi(auth: Authority, path: &str, q: &mut Query) -> Result<PowerUri, String> {
    if !path.is_empty() && path != "/" {
        return Err("ipmi: takes no path: ipmi://USER@BMC[:PORT]?password-file=F".into());
    }
    Ok(PowerUri::Ipmi {
        user: auth.user_required("ipmi")?,
        port: auth.port.unwrap_or(623),
        host: auth.host,
        password_file: q.file("ipmi", "password-file")?,
        cipher: match q.int("ipmi", "cipher")? {
            None => None,
            Some(c) => Some(
                u8::try_from(c)
                    .ok()
                    .filter(|&c| c <= 17)
                    .ok_or("ipmi: `cipher` must be an RMCP+ cipher suite, 0 to 17")?,
            ),
        },
    })
}

fn parse_redfish(
    scheme: &str,
    auth: Authority,
    path: &str,
    q: &mut Query,
) -> Result<PowerUri, String> {
    let plain_http = scheme == "redfish+http";
    let system = path.trim_end_matches('/');
    if !system.starts_with("/redfish/v1/Systems/") || system.len() <= 20 {
        return Err(format!(
            "{scheme}: needs the system's path: {scheme}://USER@BMC[:PORT]/redfish/v1/Systems/ID?password-file=F"
        ));
    }
    let insecure = q.flag("insecure");
    if insecure && plain_http {
        return Err("redfish+http: `insecure` applies to HTTPS only".into());
    }
    Ok(PowerUri::Redfish {
        user: auth.user_required(scheme)?,
        port: auth.port.unwrap_or(if plain_http { 80 } else { 443 }),
        host: auth.host,
        system: system.to_string(),
        password_file: q.file(scheme, "password-file")?,
        plain_http,
        insecure,
    })
}

fn parse_snmp(auth: Authority, path: &str, q: &mut Query) -> Result<PowerUri, String> {
    if auth.user.is_some() {
        return Err(
            "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F"
                .into(),
        );
    }
    let outlet = number("apc-snmp", "outlet", path, false)?.unwrap_or(0);
    if outlet == 0 {
        return Err(
            "apc-snmp: needs an outlet number from 1: apc-snmp://PDU/OUTLET?community-file=F"
                .into(),
        );
    }
    let on_value = q.int("apc-snmp", "on")?.unwrap_or(1);
    let off_value = q.int("apc-snmp", "off")?.unwrap_or(2);
    if on_value == off_value {
        return Err(format!(
            "apc-snmp: `on` and `off` must differ (both {on_value})"
        ));
    }
    Ok(PowerUri::ApcSnmp {
        port: auth.port.unwrap_or(161),
        host: auth.host,
        outlet,
        community_file: q.file("apc-snmp", "community-file")?,
        on_value,
        off_value,
    })
}

#[cfg(test)]
mod tests;
