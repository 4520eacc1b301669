//! `ipmi://USER@BMC[:PORT]?password-file=F[&cipher=N]`: `ipmitool [-C N] -I lanplus
//! -H BMC -p PORT -U USER -f F chassis power off|on|status` (ipmitool(1)). The password stays in
//! its file: ipmitool reads it with `-f`, so it is on no command line. Each run is
//! killed after [`IPMI_LIMIT`](super::IPMI_LIMIT) (30 s).

use super::{limit, on_path, read_secret, run_tool, Driver, Status, IPMI_LIMIT};
use crate::Error;
use plugpull::power::{ipmi_state, CutKind, PowerUri};
use std::path::PathBuf;
use std::process::Command;

/// The IPMI driver (DC: the BMC switches the machine's own supply).
pub struct Ipmi {
    user: String,
    host: String,
    port: u16,
    password_file: PathBuf,
    cipher: Option<u8>,
}

impl Ipmi {
    /// Checks the password file (readable, not empty; warns when shared).
    pub fn new(uri: &PowerUri) -> Result<Ipmi, Error> {
        let PowerUri::Ipmi {
            user,
            host,
            port,
            password_file,
            cipher,
        } = uri
        else {
            unreachable!("Ipmi::new takes an ipmi URI")
        };
        read_secret(password_file, "IPMI password")?;
        Ok(Ipmi {
            user: user.clone(),
            host: host.clone(),
            port: *port,
            password_file: password_file.clone(),
            cipher: *cipher,
        })
    }

    fn chassis_power(&self, action: &str) -> Result<String, Error> {
        if !on_path("ipmitool") {
            return Err(Error::Msg(
                "ipmi: ipmitool not found: install the ipmitool package (Debian: apt-get install ipmitool)"
                    .into(),
            ));
        }
        let mut cmd = Command::new("ipmitool");
        if let Some(c) = self.cipher {
            cmd.args(["-C", &c.to_string()]);
        }
        cmd.args([
            "-I",
            "lanplus",
            "-H",
            &self.host,
            "-p",
            &self.port.to_string(),
        ])
        .args(["-U", &self.user, "-f"])
        .arg(&self.password_file)
        .args(["chassis", "power", action]);
        let what = format!(
            "ipmi: `ipmitool ... chassis power {action}` on {}:{}",
            self.host, self.port
        );
        let out = run_tool(cmd, &what, limit(IPMI_LIMIT))?;
        if !out.status.success() {
            return Err(Error::Msg(format!(
                "ipmi: `ipmitool ... chassis power {action}` on {}:{} failed: {}",
                self.host,
                self.port,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Driver for Ipmi {
    fn off(&self) -> Result<(), Error> {
        self.chassis_power("off").map(drop)
    }

    fn on(&self) -> Result<(), Error> {
        self.chassis_power("on").map(drop)
    }

    fn status(&self) -> Result<Status, Error> {
        Ok(Status {
            state: ipmi_state(&self.chassis_power("status")?),
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        CutKind::Dc
    }
}
