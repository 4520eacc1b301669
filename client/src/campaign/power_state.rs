//! The controller's calls to a host's power driver, and the checks that power is
//! where a cut needs it: read, never assumed. A BMC may apply a reset seconds after it
//! answered (sushy-emulator's fake systems apply one 1–11 s late), so after "off" and
//! after "on" the controller reads the status until it shows the new state
//! ([`settle`]) before it judges the cut or starts the next one; a machine the driver
//! still says is off is named as such, not blamed on its agent.

use crate::Error;
use plugpull::power::PowerUri;
use std::time::{Duration, Instant};

/// How long the controller reads a driver's status for the state its "off" or "on"
/// asked for (at most the campaign's boot timeout).
pub const SETTLE: Duration = Duration::from_secs(20);

/// How often [`settle`] reads the status.
const SETTLE_POLL: Duration = Duration::from_millis(500);

/// Calls the driver in a blocking task: `"off"`, `"on"` or `"status"` (then the
/// state's name: `on`, `off`, `unknown (ANSWER)`).
///
/// Errors: the URI does not parse, or the driver's call failed (its message).
pub async fn drive(uri: &str, action: &'static str) -> Result<String, Error> {
    let uri = uri.to_string();
    tokio::task::spawn_blocking(move || {
        let parsed = PowerUri::parse(&uri).map_err(Error::Msg)?;
        let d = crate::power::open(&parsed)?;
        match action {
            "off" => d.off().map(|_| String::new()),
            "on" => d.on().map(|_| String::new()),
            _ => d.status().map(|s| s.state.to_string()),
        }
    })
    .await
    .map_err(|e| Error::Msg(format!("power driver task: {e}")))?
}

/// Reads the driver's status until it says `want` (`on` or `off`), for at most
/// `limit`, every 0.5 s; returns the last answer. It stops at the first answer that
/// is neither `on` nor `off` (a driver that cannot tell, e.g. an `exec:` command
/// without a status action), and gives `None` when the status cannot be read.
pub async fn settle(power: &str, want: &str, limit: Duration) -> Option<String> {
    let since = Instant::now();
    loop {
        let s = drive(power, "status").await.ok()?;
        if s == want || (s != "on" && s != "off") || since.elapsed() >= limit {
            return Some(s);
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

/// What the driver powers for a cut of `kind`: `machine HOST`, or `the drive of
/// HOST` for a drive-only cut (`device`).
fn what(host: &str, kind: &str) -> String {
    if kind == "device" {
        format!("the drive of {host}")
    } else {
        format!("machine {host}")
    }
}

/// After "on": `Some("machine HOST is still off after the driver's on (driver says
/// off)")` when the status still reads `off` once [`settle`] gave up (`limit`);
/// `None` when it reads on, or cannot tell.
pub async fn still_off(power: &str, host: &str, kind: &str, limit: Duration) -> Option<String> {
    (settle(power, "on", limit).await.as_deref() == Some("off")).then(|| {
        format!(
            "{} is still off after the driver's on (driver says off)",
            what(host, kind)
        )
    })
}

/// Before a host's next cut: `Some("machine HOST is off (driver says off): …")` when
/// the driver says its power is off, so no run can be written; `None` when it is on
/// or the driver cannot tell.
pub async fn off_now(power: &str, host: &str, kind: &str) -> Option<String> {
    (drive(power, "status").await.ok().as_deref() == Some("off")).then(|| {
        format!(
            "{} is off (driver says off): nothing runs there to be cut; power it on \
             (`plugpull power --power URI on`)",
            what(host, kind)
        )
    })
}
