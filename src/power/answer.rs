//! The devices' answers, parsed: ipmitool's text, snmpget's value, the JSON of
//! Redfish, Tasmota and Shelly. Sources: ipmitool(1) `chassis power status`;
//! DMTF Redfish `ComputerSystem.PowerState`; Tasmota "Commands over HTTP";
//! Shelly Gen2 `Switch.GetStatus`; APC PowerNet MIB (docs/power.md).

use super::PowerState;
use serde_json::Value;

/// `exec:` status: the command's stdout, `on` or `off` (any case, surrounding blanks
/// ignored), optionally after `Status:` (fence agents print `Status: ON`); anything
/// else is [`PowerState::Unknown`].
pub fn text_state(stdout: &str) -> PowerState {
    let t = stdout.trim();
    let lower = t.to_ascii_lowercase();
    let word = lower.strip_prefix("status:").unwrap_or(&lower).trim();
    match word {
        "on" => PowerState::On,
        "off" => PowerState::Off,
        _ => PowerState::Unknown(t.to_string()),
    }
}

/// `ipmitool chassis power status`: `Chassis Power is on` / `Chassis Power is off`.
pub fn ipmi_state(stdout: &str) -> PowerState {
    for line in stdout.lines() {
        if let Some(s) = line.trim().strip_prefix("Chassis Power is ") {
            return text_state(s);
        }
    }
    PowerState::Unknown(stdout.trim().to_string())
}

/// `snmpget -Oqv` of the outlet state OID: an integer, `on_value` or `off_value`.
pub fn snmp_state(stdout: &str, on_value: i64, off_value: i64) -> PowerState {
    let t = stdout.trim();
    // Without -Oqv, or with a MIB loaded, net-snmp may print `INTEGER: 1` or `outletOn(1)`.
    let digits = t
        .rsplit(|c: char| !(c.is_ascii_digit() || c == '-'))
        .find(|s| !s.is_empty())
        .unwrap_or("");
    match digits.parse::<i64>() {
        Ok(v) if v == on_value => PowerState::On,
        Ok(v) if v == off_value => PowerState::Off,
        _ => PowerState::Unknown(t.to_string()),
    }
}

/// Redfish `ComputerSystem` resource: its `PowerState` (`On`, `Off`; `PoweringOn`,
/// `PoweringOff`, `Paused` are [`PowerState::Unknown`]). Errors when the body is
/// not JSON or has no `PowerState`.
pub fn redfish_state(body: &str) -> Result<PowerState, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let s = v
        .get("PowerState")
        .and_then(Value::as_str)
        .ok_or("no PowerState in the system resource")?;
    Ok(match s {
        "On" => PowerState::On,
        "Off" => PowerState::Off,
        other => PowerState::Unknown(other.to_string()),
    })
}

/// Tasmota `cm?cmnd=Power<RELAY>` answer: `{"POWER":"ON"}` or `{"POWER1":"OFF"}`.
/// Relay `None` (or 1) accepts `POWER` and `POWER1`. Errors when the body is not
/// JSON or has no such key (e.g. `{"Command":"Unknown"}`).
pub fn tasmota_state(body: &str, relay: Option<u32>) -> Result<PowerState, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let keys: Vec<String> = match relay {
        None | Some(1) => vec!["POWER".into(), "POWER1".into()],
        Some(r) => vec![format!("POWER{r}")],
    };
    let s = keys
        .iter()
        .find_map(|k| v.get(k).and_then(Value::as_str))
        .ok_or_else(|| format!("no {} in the answer: {}", keys.join(" or "), body.trim()))?;
    Ok(match s {
        "ON" => PowerState::On,
        "OFF" => PowerState::Off,
        other => PowerState::Unknown(other.to_string()),
    })
}

/// Shelly Gen2 `Switch.GetStatus`: (`output` as a state, `apower` in watts if
/// reported). Errors when the body is not JSON or has no boolean `output`.
pub fn shelly_status(body: &str) -> Result<(PowerState, Option<f64>), String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let on = v
        .get("output")
        .and_then(Value::as_bool)
        .ok_or_else(|| format!("no boolean `output` in the answer: {}", body.trim()))?;
    let state = if on { PowerState::On } else { PowerState::Off };
    Ok((state, v.get("apower").and_then(Value::as_f64)))
}
