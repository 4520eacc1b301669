//! `plugpull verify --history`: every run of a host judged as a cut
//! ([`plugpull::campaign::history`]), one line each, and the roll-up with its
//! confidence bound — the campaign's statistics for runs cut by hand. And the other
//! half: [`record`], with which every `plugpull verify` keeps its outcome at the
//! listener.

use crate::campaign::print::{cut_line, CONFIDENCE, HEADER};
use crate::campaign::{call, json_failure};
use crate::Error;
use plugpull::auth::Secret;
use plugpull::campaign::history::{counting, judge_hand, HandRun, VerifyRecord};
use plugpull::campaign::{CutRecord, RollUp};
use plugpull::ledger::RunLedger;
use plugpull::report::Report;
use plugpull::wire::{CampaignRequest, CampaignResponse};

/// Keeps this verify's outcome of `l`'s run at the listener, for `verify --history`.
/// A failure is a warning on stderr: the verdict printed stands.
pub async fn record(listener: &str, secret: &Secret, l: &RunLedger, report: &Report) {
    let exit = if report.not_measured() {
        2
    } else if report.ok() {
        0
    } else {
        1
    };
    let json = serde_json::to_string(report).expect("report serializes");
    let r = VerifyRecord {
        run: l.run,
        exit,
        run_boot_id: l.manifest.boot_id.clone(),
        verify_boot_id: crate::target_id::boot_id(),
        at_unix_ms: crate::manifest::now_unix_ms(),
        report_json: plugpull::campaign::judge::slim_report(&json),
    };
    if let Err(e) = call(listener, secret, CampaignRequest::RecordVerify(Box::new(r))).await {
        eprintln!(
            "warning: the listener did not keep this verify for `verify --history`: {}",
            e
        );
    }
}

/// The runs of `host` with their verifies, oldest first.
///
/// Errors: the listener is unreachable or refused.
pub async fn fetch(listener: &str, secret: &Secret, host: &str) -> Result<Vec<HandRun>, Error> {
    match call(
        listener,
        secret,
        CampaignRequest::History { host: host.into() },
    )
    .await?
    {
        CampaignResponse::History(runs) => Ok(runs),
        other => Err(Error::Msg(format!(
            "listener {listener} answered History with {other:?}"
        ))),
    }
}

/// `verify --history`: prints every run of `host` and the roll-up (one JSON object with
/// `json`). `Ok(true)` (exit 0) when no valid run failed, `Ok(false)` (exit 1) when one
/// did.
///
/// Errors (exit 2): the listener, or no run of `host` was verified after a power loss
/// (nothing measured).
pub async fn command(
    listener: &str,
    secret: Result<Secret, Error>,
    host: &str,
    json: bool,
) -> Result<bool, Error> {
    let runs = async { fetch(listener, &secret?, host).await };
    match runs.await {
        Ok(runs) => show(host, &runs, json),
        Err(e) => json_failure(json, Err(e)),
    }
}

/// Prints the history of `runs` of `host` as [`command`] does.
///
/// Errors: no valid run.
pub fn show(host: &str, runs: &[HandRun], json: bool) -> Result<bool, Error> {
    if runs.is_empty() {
        let why = format!(
            "no run of host {host} is recorded at this listener (a run's host is the `host` of \
             `plugpull verify --run ID --json`)"
        );
        if json {
            println!("{}", serde_json::json!({"ok": false, "error": why}));
        }
        return Err(Error::Msg(why));
    }
    let cuts: Vec<CutRecord> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| judge_hand(host, i as u32 + 1, r))
        .collect();
    let roll = RollUp::of(&cuts);
    let nothing = (roll.valid == 0).then(|| {
        format!(
            "no run of host {host} was verified after a power loss: nothing measured ({})",
            roll.line()
        )
    });
    if json {
        let list: Vec<serde_json::Value> = runs
            .iter()
            .zip(&cuts)
            .map(|(r, k)| {
                serde_json::json!({
                    "run": r.run.to_string(), "created_unix_ms": r.created_unix_ms,
                    "verifies": r.verifies.len(),
                    "counted_verify_unix_ms": counting(r).map(|v| v.at_unix_ms),
                    "acknowledged": k.acknowledged, "validity": k.validity.name(),
                    "reason": k.validity.reason(), "verdict": k.verdict,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"ok": nothing.is_none(), "error": nothing, "host": host,
                "runs": list, "roll_up": roll, "bound": roll.bound(CONFIDENCE)})
        );
    } else {
        println!(
            "history of host {host}: {} run(s), each judged as a cut by hand\n{HEADER}",
            runs.len()
        );
        for (r, k) in runs.iter().zip(&cuts) {
            println!("{}  run {}", cut_line(k), r.run);
        }
        println!("{}", roll.line());
        println!("{}", roll.bound_line(CONFIDENCE));
    }
    match nothing {
        Some(why) => Err(Error::Msg(why)),
        None => Ok(roll.failed == 0),
    }
}
