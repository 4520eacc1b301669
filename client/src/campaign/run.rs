//! `plugpull campaign run`: the controller. One task per host; each loops over its
//! cuts with the steps of `docs/campaign.md`, recording every fact before acting on
//! it, so a controller killed at any step resumes at the same cut:
//!
//! 1. wait for the agent's open run set to be written to (acknowledgements arriving);
//! 2. wait until it has run for the cut's delay, drawn from `--cut-after`;
//! 3. record `Pulling`, call the driver's "off" (again, when resuming after a
//!    `Pulling`: the machine is off already or the silence check tells);
//! 4. after [`SILENCE_GRACE_MS`] + 1 s, ask the listener when the runs last
//!    acknowledged, read the driver's status until it says off (at most 20 s), record
//!    `Pulled`; a machine that kept talking is judged at once (not measured), power
//!    restored and read back;
//! 5. keep power off until `--off` has passed since "off" returned (the listener's
//!    clock, so a rerun resuming the cut waits only for the rest), record
//!    `Restored`, call "on", read the status until it says on: a machine the driver
//!    still says is off is named and the host paused;
//! 6. wait for a new boot id (`--boot-timeout`), then for the verify reports;
//! 7. judge ([`plugpull::campaign::judge`]) and record the `Cut`.

use super::power_state::{drive, settle, still_off, SETTLE};
use super::witness::Witness;
use super::{load, print, ShowArgs};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::campaign::judge::SILENCE_GRACE_MS;
use plugpull::campaign::{judge, CutFacts, Event, Pulling, RunState, Validity};
use plugpull::power::PowerUri;
use plugpull::wire::{CampaignRequest, CampaignResponse};
use plugpull::RunId;
use std::time::{Duration, Instant};

/// How often the controller polls the listener while it waits.
const POLL: Duration = Duration::from_millis(250);
/// How long after the machine came back the controller waits for its verify reports.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long a refusal that stood before the controller started is given to go away
/// (the agent retries it after six polls, 30 s by default).
const REFUSAL_GRACE: Duration = Duration::from_secs(40);
/// A run set counts as being written when its last acknowledgement is this recent.
const LIVE_MS: u64 = 1500;

/// Runs the campaign to its end: `Ok(true)` when every valid cut passed.
///
/// Errors: the campaign cannot be read, or a host paused (the reason; the rest of
/// the hosts finish their cuts first).
pub async fn run(listener: &str, secret: &Secret, args: &ShowArgs) -> Result<bool, Error> {
    let c = load(listener, secret, &args.name).await?;
    let w = Witness {
        addr: listener.to_string(),
        secret: secret.clone(),
        name: args.name.clone(),
        id: rand::random(),
        json: args.json,
    };
    let done = c.cuts();
    w.say(&print::run_heading(
        &c.definition.name,
        c.definition.hosts.len(),
        c.definition.cuts,
        done.len(),
        c.done(),
    ));
    w.say(print::HEADER);
    for cut in &done {
        w.say(&print::cut_line(cut));
        w.say(&print::evidence_line(cut));
    }
    if !c.done() {
        let me = Event::Controller {
            id: w.id,
            at_ms: crate::manifest::now_unix_ms(),
        };
        w.append(me).await?;
    }
    let mut tasks = tokio::task::JoinSet::new();
    let hosts = if c.done() {
        Vec::new()
    } else {
        c.definition.hosts.clone()
    };
    for h in hosts {
        let w = w.clone();
        tasks.spawn(async move {
            let r = host_loop(&w, &h.host, &h.power).await;
            (h.host, r)
        });
    }
    let mut stopped = Vec::new();
    while let Some(j) = tasks.join_next().await {
        let (host, r) = j.map_err(|e| Error::Msg(format!("controller task: {e}")))?;
        if let Err(e) = r {
            eprintln!("plugpull: {host}: {e}");
            stopped.push(format!("{host}: {e}"));
        }
    }
    let c = w.load_any().await?;
    let roll = c.roll_up();
    let result = if stopped.is_empty() {
        outcome(&roll)
    } else {
        let why = format!(
            "campaign {} stopped: {}; rerun `plugpull campaign run --name {}` to resume",
            args.name,
            stopped.join("; "),
            args.name
        );
        // A failed cut outranks a stop: exit 1, with the stop said.
        if roll.failed > 0 {
            eprintln!("plugpull: {why}");
            Ok(false)
        } else {
            Err(Error::Msg(why))
        }
    };
    // Under --json one object only: the campaign, or on exit 2 the failure object
    // the caller prints.
    match (args.json, &result) {
        (true, Ok(_)) => println!("{}", print::json(&c)),
        (true, Err(_)) => {}
        (false, _) => {
            // The same headline lines `campaign status` ends with.
            print!("{}", super::summary::text(&c));
        }
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, print::junit(&c)?)
            .map_err(|e| Error::Msg(format!("cannot write {}: {e}", path.display())))?;
    }
    result
}

/// The exit of a campaign that ran to its end: 0 when every valid cut passed, 1 when
/// any failed, 2 when no cut was valid (nothing was measured: never a pass).
pub fn outcome(r: &plugpull::campaign::RollUp) -> Result<bool, Error> {
    if r.valid == 0 {
        return Err(Error::NotMeasured(nothing_measured(r)));
    }
    Ok(r.failed == 0)
}

/// Why a campaign with no valid cut measured nothing: `no valid cut (2 cuts: 0 valid
/// (0 failed, 0 passed), 2 not measured, 0 invalid): nothing was measured`.
pub fn nothing_measured(r: &plugpull::campaign::RollUp) -> String {
    format!("no valid cut ({}): nothing was measured", r.line())
}

/// Records a pause for `host` and gives its reason back as the error.
async fn pause(w: &Witness, host: &str, reason: String) -> Error {
    let ev = Event::Paused {
        host: host.into(),
        reason: reason.clone(),
        at_ms: crate::manifest::now_unix_ms(),
    };
    if let Err(e) = w.append(ev).await {
        return Error::Msg(format!(
            "{reason} (and the pause could not be recorded: {e})"
        ));
    }
    Error::Msg(reason)
}

async fn runs_state(w: &Witness, runs: &[RunId]) -> Result<Vec<RunState>, Error> {
    match w
        .call(CampaignRequest::Runs {
            runs: runs.to_vec(),
        })
        .await?
    {
        CampaignResponse::Runs(s) => Ok(s),
        other => Err(Error::Msg(format!("listener answered Runs with {other:?}"))),
    }
}

async fn host_loop(w: &Witness, host: &str, power: &str) -> Result<(), Error> {
    let scheme = PowerUri::parse(power).map_err(Error::Msg)?;
    loop {
        let c = w.load().await?;
        let v = c.host(host);
        if v.cuts.len() as u32 >= c.definition.cuts || c.cancelled().is_some() {
            return Ok(());
        }
        let pulling = match v.pulling.clone() {
            Some(p) => p,
            None => {
                let Some(p) = wait_and_pick(w, host, power, &scheme).await? else {
                    continue;
                };
                // The last word before a cut: no newer controller took over, and
                // the campaign was not cancelled meanwhile.
                if w.load().await?.cancelled().is_some() {
                    return Ok(());
                }
                w.append(Event::Pulling(p.clone())).await?;
                p
            }
        };
        cut(w, host, power, &pulling).await?;
    }
}

/// Steps 1–2: waits for the open run set to be written to and to reach the drawn
/// delay; the `Pulling` record for it. `None` when the run set ended before.
async fn wait_and_pick(
    w: &Witness,
    host: &str,
    power: &str,
    uri: &PowerUri,
) -> Result<Option<Pulling>, Error> {
    let c = w.load().await?;
    let d = &c.definition;
    let kind = crate::power::open(uri)
        .map(|d| d.kind().to_string())
        .unwrap_or_default();
    // Power is read, not assumed: a machine the driver says is off runs nothing.
    if let Some(why) = super::power_state::off_now(power, host, &kind).await {
        return Err(pause(w, host, why).await);
    }
    let index = c.host(host).cuts.len() as u32 + 1;
    let since = Instant::now();
    let limit = Duration::from_millis(d.boot_timeout_ms);
    // The listener's clock when this wait began: a run already going when the
    // controller starts is cut a full delay later, not at once.
    let mut began = 0;
    let set = loop {
        let c = w.load().await?;
        let v = c.host(host);
        if let Some(why) = c.news_since(w.id, host) {
            return Err(pause(w, host, why).await);
        }
        if let Some(s) = v.open_run_set() {
            let st = runs_state(w, &s.runs).await?;
            if began == 0 {
                began = st.iter().map(|r| r.now_ms).max().unwrap_or(0);
            }
            if st.iter().all(|r| {
                r.known
                    && !r.ended
                    && r.now_ms.saturating_sub(r.last_ack_ms) < LIVE_MS
                    && r.last_ack_ms > r.created_ms
            }) {
                break (s.clone(), st);
            }
        }
        // A refusal from before this controller started, still standing: the agent
        // retries every few polls and re-reads its configuration; give it that long.
        if v.refused.is_some() && since.elapsed() > REFUSAL_GRACE.min(limit) {
            let why = format!(
                "the agent refused: {}",
                v.refused.clone().unwrap_or_default()
            );
            return Err(pause(w, host, why).await);
        }
        if since.elapsed() > limit {
            // A refusal from before this controller started, still standing; else a
            // machine that went off meanwhile; else the agent is not there.
            let off = super::power_state::off_now(power, host, &kind).await;
            let why = match (&v.refused, off) {
                (Some(r), _) => format!("the agent refused: {r}"),
                (None, Some(off)) => off,
                (None, None) => format!("no run of {host} was being written within {:.0} s: is `plugpull agent` running there (systemctl status plugpull-agent)?", limit.as_secs_f64()),
            };
            return Err(pause(w, host, why).await);
        }
        tokio::time::sleep(POLL).await;
    };
    let (s, st) = set;
    let delay = rand::random_range(d.cut_after_ms.0..=d.cut_after_ms.1);
    let started = st
        .iter()
        .map(|r| r.created_ms)
        .max()
        .unwrap_or(0)
        .max(began);
    let mut st = st;
    loop {
        let now = st.iter().map(|r| r.now_ms).max().unwrap_or(0);
        if now >= started + delay {
            break;
        }
        tokio::time::sleep(POLL.min(Duration::from_millis(started + delay - now))).await;
        st = runs_state(w, &s.runs).await?;
        if st
            .iter()
            .any(|r| r.ended || r.now_ms.saturating_sub(r.last_ack_ms) >= LIVE_MS)
        {
            // Ended before its cut: the agent says how (an `Ended` record) when it
            // ran on; wait a moment for it.
            tokio::time::sleep(Duration::from_secs(3)).await;
            if let Some(why) = w.load().await?.news_since(w.id, host) {
                return Err(pause(w, host, why).await);
            }
            return Ok(None);
        }
    }
    let now = st.iter().map(|r| r.now_ms).max().unwrap_or(0);
    Ok(Some(Pulling {
        host: host.into(),
        index,
        number: s.number,
        runs: s.runs.clone(),
        boot_id: s.boot_id.clone(),
        delay_ms: now.saturating_sub(started),
        driver: uri.scheme().into(),
        kind,
        at_ms: crate::manifest::now_unix_ms(),
    }))
}

/// What step 4 recorded (`Event::Pulled`).
struct Pulled {
    off_at: u64,
    last_ack: u64,
    off_error: Option<String>,
    status_after: Option<String>,
}

/// Steps 3–4: "off", the silence check, the `Pulled` record; or, when resuming a cut
/// already pulled, what was recorded (power is never cut twice for one cut).
async fn pull(w: &Witness, host: &str, power: &str, p: &Pulling) -> Result<Pulled, Error> {
    if let Some(Event::Pulled {
        off_at_ms,
        last_append_ms,
        off_error,
        status_after,
        ..
    }) = w.load().await?.host(host).pulled
    {
        return Ok(Pulled {
            off_at: off_at_ms,
            last_ack: last_append_ms,
            off_error,
            status_after,
        });
    }
    let settle_for = settle_for(w).await?;
    let off_error = drive(power, "off").await.err().map(|e| e.to_string());
    let off_at = listener_now(w, &p.runs).await?;
    tokio::time::sleep(Duration::from_millis(SILENCE_GRACE_MS + 1000)).await;
    let last_ack = last_ack(w, &p.runs).await?;
    // Read until the status shows the off (a BMC may apply it seconds late).
    let status_after = match off_error {
        None => settle(power, "off", settle_for).await,
        Some(_) => None,
    };
    let pulled = Event::Pulled {
        host: host.into(),
        index: p.index,
        off_at_ms: off_at,
        last_append_ms: last_ack,
        off_error: off_error.clone(),
        status_after: status_after.clone(),
    };
    w.append(pulled).await?;
    Ok(Pulled {
        off_at,
        last_ack,
        off_error,
        status_after,
    })
}

/// Step 5: keeps power off until `off_ms` after "off" returned at `off_at` (listener
/// clock: a controller resuming the cut waits only for the rest), records
/// `Restored`, calls "on". Returns when "on" was called (listener clock) and the
/// driver's answer. A cut already restored keeps its recorded time and calls "on"
/// again (every driver does it idempotently).
async fn restore(
    w: &Witness,
    host: &str,
    power: &str,
    p: &Pulling,
    off_at: u64,
    off_ms: u64,
) -> Result<(u64, Result<(), Error>), Error> {
    let on_at = match w.load().await?.host(host).restored {
        Some(at) => at,
        None => {
            let until = off_at + off_ms;
            let mut now = listener_now(w, &p.runs).await?;
            while now < until {
                tokio::time::sleep(Duration::from_millis(until - now)).await;
                now = listener_now(w, &p.runs).await?;
            }
            let restored = Event::Restored {
                host: host.into(),
                index: p.index,
                on_at_ms: now,
            };
            w.append(restored).await?;
            now
        }
    };
    let on = drive(power, "on").await.map(|_| ());
    Ok((on_at, on))
}

/// How long to read the driver's status for a new state: [`SETTLE`], at most the
/// campaign's boot timeout.
async fn settle_for(w: &Witness) -> Result<Duration, Error> {
    let boot = Duration::from_millis(w.load().await?.definition.boot_timeout_ms);
    Ok(SETTLE.min(boot))
}

/// The newest acknowledgement batch of `runs` the listener made durable (its clock).
async fn last_ack(w: &Witness, runs: &[RunId]) -> Result<u64, Error> {
    Ok(runs_state(w, runs)
        .await?
        .iter()
        .map(|r| r.last_ack_ms)
        .max()
        .unwrap_or(0))
}

/// Steps 3–7 for a recorded `Pulling`.
async fn cut(w: &Witness, host: &str, power: &str, p: &Pulling) -> Result<(), Error> {
    let pulled = pull(w, host, power, p).await?;
    let mut facts = CutFacts {
        pulling: p,
        off_error: pulled.off_error.as_deref(),
        off_at_ms: pulled.off_at,
        last_ack_ms: pulled.last_ack,
        status_after: pulled.status_after.as_deref(),
        on_at_ms: None,
        came_back: Ok(()),
        verified: None,
        verify_boot_at_ms: None,
    };
    let early = judge(&facts);
    if facts.off_error.is_some() || matches!(early.validity, Validity::NotMeasured(_)) {
        // Not a power loss (the driver failed, or the machine kept power): power back
        // at once, whatever "on" answers.
        let (on_at, _) = restore(w, host, power, p, pulled.off_at, 0).await?;
        facts.on_at_ms = Some(on_at);
        let why = match facts.off_error {
            Some(e) => Some(format!("cut {}: the driver's off failed: {e}", p.index)),
            None => still_off(power, host, &p.kind, settle_for(w).await?)
                .await
                .map(|off| format!("cut {}: {off}", p.index)),
        };
        return record(w, judge(&facts), why).await;
    }
    let c = w.load().await?;
    let off_ms = c.definition.off_ms;
    let (on_at, on) = restore(w, host, power, p, pulled.off_at, off_ms).await?;
    facts.on_at_ms = Some(on_at);
    if let Err(e) = on {
        let why = format!("cut {}: the driver's on failed: {e}", p.index);
        return Err(pause(w, host, why).await);
    }
    // Read until the status shows the on: a machine still off is named, not waited
    // for as if it were booting.
    if let Some(off) = still_off(power, host, &p.kind, settle_for(w).await?).await {
        facts.came_back = Err(off.clone());
        return record(w, judge(&facts), Some(format!("cut {}: {off}", p.index))).await;
    }
    let boot_limit = Duration::from_millis(c.definition.boot_timeout_ms);
    let since = Instant::now();
    // A drive-only cut keeps the host up: no new boot id to wait for.
    let mut back = p.kind == "device";
    let verification = loop {
        let c = w.load().await?;
        let v = c.host(host);
        back |= v.came_back(&p.boot_id, pulled.off_at).is_some();
        if let Some(ver) = v.verification(p.number) {
            let at = v
                .boots
                .iter()
                .find(|(b, _)| *b == ver.boot_id)
                .map(|(_, at)| *at);
            break Some((ver.clone(), at));
        }
        // Acknowledgements long after "off": this machine was not cut after all.
        let acked = last_ack(w, &p.runs).await?;
        if acked > pulled.off_at + SILENCE_GRACE_MS {
            facts.last_ack_ms = acked;
            return record(w, judge(&facts), None).await;
        }
        let limit = if back {
            boot_limit + VERIFY_TIMEOUT
        } else {
            boot_limit
        };
        if since.elapsed() > limit {
            break None;
        }
        tokio::time::sleep(POLL).await;
    };
    let Some((ver, boot_at)) = verification else {
        let reason = if back {
            format!(
                "{host} came back but sent no verify report within {} min",
                VERIFY_TIMEOUT.as_secs() / 60
            )
        } else {
            format!(
                "{host} did not come back within {:.0} s after power on",
                boot_limit.as_secs_f64()
            )
        };
        facts.came_back = Err(reason.clone());
        return record(w, judge(&facts), Some(format!("cut {}: {reason}", p.index))).await;
    };
    facts.verified = Some((&ver.outcomes, &ver.boot_id));
    facts.verify_boot_at_ms = boot_at;
    record(w, judge(&facts), None).await
}

/// Records a judged cut and prints its line; with `pause`, then pauses the host.
async fn record(
    w: &Witness,
    cut: plugpull::campaign::CutRecord,
    pause_reason: Option<String>,
) -> Result<(), Error> {
    let host = cut.host.clone();
    w.say(&print::cut_line(&cut));
    w.say(&print::evidence_line(&cut));
    w.append(Event::Cut(cut)).await?;
    match pause_reason {
        Some(r) => Err(pause(w, &host, r).await),
        None => Ok(()),
    }
}

/// The listener's clock now.
async fn listener_now(w: &Witness, runs: &[RunId]) -> Result<u64, Error> {
    Ok(runs_state(w, &runs[..runs.len().min(1)])
        .await?
        .first()
        .map_or_else(crate::manifest::now_unix_ms, |r| r.now_ms))
}
