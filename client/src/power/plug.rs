//! Smart plugs over plain HTTP (AC):
//!
//! * `tasmota://HOST[:PORT][/RELAY]` — Tasmota "Commands over HTTP":
//!   `GET /cm?cmnd=Power<RELAY>%20Off` (or `On`; no argument reads the state),
//!   answered `{"POWER":"OFF"}` or `{"POWER<RELAY>":"OFF"}`.
//! * `shelly://HOST[:PORT][/ID]` — Shelly Gen2+ RPC: `GET /rpc/Switch.Set?id=ID&on=false`
//!   (or `true`); status `GET /rpc/Switch.GetStatus?id=ID` → `output`, and `apower`
//!   (W): about 0 W after "off" confirms the load dropped.
//!
//! Neither device's optional HTTP password is supported in this version.

use super::http::{agent, call, expect_ok};
use super::{Driver, Status};
use crate::Error;
use plugpull::power::{bracket, shelly_status, tasmota_state, CutKind, PowerState};

/// The Tasmota driver.
pub struct Tasmota {
    agent: ureq::Agent,
    base: String,
    relay: Option<u32>,
}

impl Tasmota {
    /// A driver for relay `relay` (none: the only one) of the device at `host:port`.
    pub fn new(host: &str, port: u16, relay: Option<u32>) -> Tasmota {
        Tasmota {
            agent: agent(false),
            base: format!("http://{}:{port}", bracket(host)),
            relay,
        }
    }

    /// Sends `Power<RELAY>[%20ARG]`; the state the device answered.
    fn power(&self, arg: Option<&str>) -> Result<PowerState, Error> {
        let relay = self.relay.map(|r| r.to_string()).unwrap_or_default();
        let arg = arg.map(|a| format!("%20{a}")).unwrap_or_default();
        let url = format!("{}/cm?cmnd=Power{relay}{arg}", self.base);
        let a = expect_ok(
            "tasmota",
            "GET",
            &url,
            call(&self.agent, "tasmota", &url, None, None)?,
        )?;
        tasmota_state(&a.body, self.relay)
            .map_err(|e| Error::Msg(format!("tasmota: GET {url}: {e}")))
    }

    fn set(&self, arg: &str, want: PowerState) -> Result<(), Error> {
        let got = self.power(Some(arg))?;
        if got != want {
            return Err(Error::Msg(format!(
                "tasmota: asked for {want}, the device answered {got}"
            )));
        }
        Ok(())
    }
}

impl Driver for Tasmota {
    fn off(&self) -> Result<(), Error> {
        self.set("Off", PowerState::Off)
    }

    fn on(&self) -> Result<(), Error> {
        self.set("On", PowerState::On)
    }

    fn status(&self) -> Result<Status, Error> {
        Ok(Status {
            state: self.power(None)?,
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        CutKind::Ac
    }
}

/// The Shelly Gen2+ driver.
pub struct Shelly {
    agent: ureq::Agent,
    base: String,
    id: u32,
}

impl Shelly {
    /// A driver for switch `id` of the device at `host:port`.
    pub fn new(host: &str, port: u16, id: u32) -> Shelly {
        Shelly {
            agent: agent(false),
            base: format!("http://{}:{port}", bracket(host)),
            id,
        }
    }

    fn set(&self, on: bool) -> Result<(), Error> {
        let url = format!("{}/rpc/Switch.Set?id={}&on={on}", self.base, self.id);
        expect_ok(
            "shelly",
            "GET",
            &url,
            call(&self.agent, "shelly", &url, None, None)?,
        )
        .map(drop)
    }
}

impl Driver for Shelly {
    fn off(&self) -> Result<(), Error> {
        self.set(false)
    }

    fn on(&self) -> Result<(), Error> {
        self.set(true)
    }

    fn status(&self) -> Result<Status, Error> {
        let url = format!("{}/rpc/Switch.GetStatus?id={}", self.base, self.id);
        let a = expect_ok(
            "shelly",
            "GET",
            &url,
            call(&self.agent, "shelly", &url, None, None)?,
        )?;
        let (state, load_w) =
            shelly_status(&a.body).map_err(|e| Error::Msg(format!("shelly: GET {url}: {e}")))?;
        Ok(Status { state, load_w })
    }

    fn kind(&self) -> CutKind {
        CutKind::Ac
    }

    fn measures_load(&self) -> bool {
        true
    }
}
