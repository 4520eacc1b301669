//! `redfish://USER@BMC[:PORT]/redfish/v1/Systems/ID?password-file=F[&insecure]`
//! (DMTF Redfish, ComputerSystem): `POST {system}/Actions/ComputerSystem.Reset`
//! with `{"ResetType":"ForceOff"}` or `{"ResetType":"On"}`; status from `GET
//! {system}` → `PowerState`. HTTP basic auth with the password from its file.

use super::http::{agent, call, expect_ok};
use super::{read_secret, Driver, Status};
use crate::Error;
use base64::Engine;
use plugpull::power::{bracket, redfish_state, CutKind, PowerUri};

/// The Redfish driver (DC).
pub struct Redfish {
    agent: ureq::Agent,
    /// `https://host:port/redfish/v1/Systems/ID`.
    system_url: String,
    /// `Basic ...`: never printed.
    auth: String,
}

impl Redfish {
    /// Reads the password file (warns when shared).
    pub fn new(uri: &PowerUri) -> Result<Redfish, Error> {
        let PowerUri::Redfish {
            user,
            host,
            port,
            system,
            password_file,
            plain_http,
            insecure,
        } = uri
        else {
            unreachable!("Redfish::new takes a redfish URI")
        };
        let password = read_secret(password_file, "Redfish password")?;
        let scheme = if *plain_http { "http" } else { "https" };
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Ok(Redfish {
            agent: agent(*insecure),
            system_url: format!("{scheme}://{}:{port}{system}", bracket(host)),
            auth: format!("Basic {token}"),
        })
    }

    fn reset(&self, reset_type: &str) -> Result<(), Error> {
        let url = format!("{}/Actions/ComputerSystem.Reset", self.system_url);
        let body = format!(r#"{{"ResetType":"{reset_type}"}}"#);
        let a = call(&self.agent, "redfish", &url, Some(&self.auth), Some(&body))?;
        let a = expect_ok("redfish", "POST", &url, a)?;
        // Redfish answers a Reset 200, 202 (a task) or 204; anything else did not reset.
        if ![200, 202, 204].contains(&a.status) {
            return Err(Error::Msg(format!(
                "redfish: POST {url} answered HTTP {}, not 200, 202 or 204: no reset",
                a.status
            )));
        }
        Ok(())
    }
}

impl Driver for Redfish {
    fn off(&self) -> Result<(), Error> {
        self.reset("ForceOff")
    }

    fn on(&self) -> Result<(), Error> {
        self.reset("On")
    }

    fn status(&self) -> Result<Status, Error> {
        let url = &self.system_url;
        let a = call(&self.agent, "redfish", url, Some(&self.auth), None)?;
        let a = expect_ok("redfish", "GET", url, a)?;
        let state =
            redfish_state(&a.body).map_err(|e| Error::Msg(format!("redfish: GET {url}: {e}")))?;
        Ok(Status {
            state,
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        CutKind::Dc
    }
}
