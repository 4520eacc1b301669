//! `apc-snmp://PDU[:PORT]/OUTLET?community-file=F[&on=1&off=2]` (APC PowerNet MIB):
//! `snmpset` (net-snmp) writes `on`/`off` to `rPDUOutletControlOutletCommand.OUTLET`
//! (`1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.OUTLET`); `snmpget` reads
//! `rPDUOutletStatusOutletState.OUTLET` (`...12.3.5.1.1.4.OUTLET`). APC: 1 on, 2 off;
//! Tripp Lite and others reverse them (`&on=2&off=1`). SNMP v2c.
//!
//! The community stays off the command line: it is written as `defCommunity` to a
//! `snmp.conf` in a private (0700) temporary directory named by `SNMPCONFPATH` for
//! the one command, and removed after it. Each run is killed after
//! [`SNMP_LIMIT`](super::SNMP_LIMIT) (15 s).

use super::{limit, on_path, read_secret, run_tool, Driver, Status, SNMP_LIMIT};
use crate::Error;
use plugpull::power::{
    snmp_state, CutKind, PowerUri, APC_OUTLET_CONTROL_OID, APC_OUTLET_STATE_OID,
};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::Command;

/// The APC (or compatible) PDU outlet driver (AC).
pub struct ApcSnmp {
    /// net-snmp agent address: `udp:HOST:PORT` or `udp6:[HOST]:PORT`.
    peer: String,
    outlet: u32,
    community: String,
    on_value: i64,
    off_value: i64,
}

/// A private directory holding `snmp.conf`; removed on drop.
struct ConfDir(PathBuf);

impl Drop for ConfDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl ApcSnmp {
    /// Reads the community file (warns when shared).
    pub fn new(uri: &PowerUri) -> Result<ApcSnmp, Error> {
        let PowerUri::ApcSnmp {
            host,
            port,
            outlet,
            community_file,
            on_value,
            off_value,
        } = uri
        else {
            unreachable!("ApcSnmp::new takes an apc-snmp URI")
        };
        let peer = if host.contains(':') {
            format!("udp6:[{host}]:{port}")
        } else {
            format!("udp:{host}:{port}")
        };
        Ok(ApcSnmp {
            peer,
            outlet: *outlet,
            community: read_secret(community_file, "SNMP community")?,
            on_value: *on_value,
            off_value: *off_value,
        })
    }

    fn conf_dir(&self) -> Result<ConfDir, Error> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("plugpull-snmp-{}-{nanos}", std::process::id()));
        let io = |e: std::io::Error| {
            Error::Msg(format!("apc-snmp: cannot write a private snmp.conf: {e}"))
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io)?;
        let dir = ConfDir(dir);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.0.join("snmp.conf"))
            .map_err(io)?;
        let conf = format!("defVersion 2c\ndefCommunity {}\n", self.community);
        std::io::Write::write_all(&mut f, conf.as_bytes()).map_err(io)?;
        Ok(dir)
    }

    /// Runs `tool ARGS` with the private config; its stdout.
    fn run(&self, tool: &str, args: &[String]) -> Result<String, Error> {
        if !on_path(tool) {
            return Err(Error::Msg(format!(
                "apc-snmp: {tool} not found: install net-snmp's tools (Debian: apt-get install snmp)"
            )));
        }
        let dir = self.conf_dir()?;
        let mut cmd = Command::new(tool);
        cmd.env("SNMPCONFPATH", &dir.0)
            .env("MIBS", "")
            .args(["-On", "-Oqv", "-t", "3", "-r", "1", &self.peer])
            .args(args);
        let what = format!("apc-snmp: {tool} {} on {}", args.join(" "), self.peer);
        let out = run_tool(cmd, &what, limit(SNMP_LIMIT))?;
        if !out.status.success() {
            return Err(Error::Msg(format!(
                "apc-snmp: {tool} {} on {} failed: {}",
                args.join(" "),
                self.peer,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn set(&self, value: i64) -> Result<(), Error> {
        let oid = format!("{APC_OUTLET_CONTROL_OID}.{}", self.outlet);
        self.run("snmpset", &[oid, "i".into(), value.to_string()])
            .map(drop)
    }
}

impl Driver for ApcSnmp {
    fn off(&self) -> Result<(), Error> {
        self.set(self.off_value)
    }

    fn on(&self) -> Result<(), Error> {
        self.set(self.on_value)
    }

    fn status(&self) -> Result<Status, Error> {
        let oid = format!("{APC_OUTLET_STATE_OID}.{}", self.outlet);
        let out = self.run("snmpget", &[oid])?;
        Ok(Status {
            state: snmp_state(&out, self.on_value, self.off_value),
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        CutKind::Ac
    }
}
