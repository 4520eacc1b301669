//! After a boot: the open runs verified, each file run's target waited for first.

use super::{child, log, Me};
use crate::campaign::workload;
use plugpull::campaign::Outcome;
use plugpull::RunId;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// Verifies each run: `plugpull verify --run R --json`, its exit code and object.
/// A file run's target that does not open (a drive cut alone, not back yet) is
/// waited for, up to `--device-timeout`; one still gone is "could not verify" —
/// unless verify finds the run's own filesystem mounted without the file: then the
/// file is gone (a lost create), which is verify's finding, not a reason to wait.
pub(super) fn verify_all(me: &Me, runs: &[RunId], workloads: &[String]) -> Vec<Outcome> {
    runs.iter()
        .zip(workloads.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(run, line)| {
            let mut judged = None;
            if let Some(target) = line.and_then(|l| file_target(&own(me, l))) {
                match wait_for_target(me, &target, || verify_one(me, run)) {
                    Ok(j) => judged = j,
                    Err(e) => {
                        let json = serde_json::json!({"ok": false, "error": e});
                        log(me, &format!("run {run}: {e}"));
                        return Outcome {
                            run: *run,
                            exit: 2,
                            report_json: json.to_string(),
                        };
                    }
                }
            }
            let (exit, json) = judged.unwrap_or_else(|| verify_one(me, run));
            let summary = serde_json::from_str::<serde_json::Value>(&json)
                .ok()
                .and_then(|v| {
                    v["summary"]
                        .as_str()
                        .or(v["error"].as_str())
                        .map(String::from)
                })
                .unwrap_or_default();
            log(me, &format!("run {run}: exit {exit}: {summary}"));
            Outcome {
                run: *run,
                exit,
                report_json: plugpull::campaign::judge::slim_report(&json),
            }
        })
        .collect()
}

/// A workload line as this agent runs it: every `{host}` replaced by its host name.
pub(super) fn own(me: &Me, line: &str) -> String {
    line.replace("{host}", &me.host)
}

/// The target of a file workload line.
fn file_target(line: &str) -> Option<PathBuf> {
    match workload::parse(line).ok()? {
        workload::Workload::File(a) => Some(a.target),
        workload::Workload::Pgbench(_) => None,
    }
}

/// `plugpull verify --run R --json`: its exit code (0, 1, 2) and its JSON object.
fn verify_one(me: &Me, run: &RunId) -> (u8, String) {
    log(me, &format!("verifying run {run}"));
    let out = child(me)
        .args(["verify", "--listener", &me.args.listener, "--secret-file"])
        .arg(&me.args.secret_file)
        .args(["--run", &run.to_string(), "--json"])
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) => (
            o.status.code().unwrap_or(2).clamp(0, 2) as u8,
            String::from_utf8_lossy(&o.stdout).trim().to_string(),
        ),
        Err(e) => (
            2,
            serde_json::json!({"ok": false, "error": format!("cannot start plugpull verify: {e}")})
                .to_string(),
        ),
    }
}

/// Waits until `target` opens and its first 4 KiB read (every second, up to
/// `--device-timeout`): `Ok(None)`. A file that does not exist in an existing
/// directory is handed to `verify` (the run's verify): unless it says the
/// directory is not on the run's filesystem ("not mounted?"), its verdict stands
/// (`Ok(Some((exit, json)))`: the file is gone). Errors: still not readable then.
fn wait_for_target(
    me: &Me,
    target: &std::path::Path,
    mut verify: impl FnMut() -> (u8, String),
) -> Result<Option<(u8, String)>, String> {
    use std::os::unix::fs::FileExt;
    let readable = || -> std::io::Result<()> {
        let f = std::fs::File::open(target)?;
        let mut buf = [0u8; 4096];
        f.read_at(&mut buf, 0).map(drop)
    };
    let limit = std::time::Instant::now() + Duration::from_secs_f64(me.args.device_timeout);
    let mut said = false;
    loop {
        let r = readable();
        let dir_there = target.parent().is_some_and(|d| d.is_dir());
        if matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::NotFound) && dir_there {
            let (exit, json) = verify();
            if exit != 2 || !json.contains("not mounted?") {
                return Ok(Some((exit, json)));
            }
        }
        match r {
            Ok(()) => return Ok(None),
            Err(e) if std::time::Instant::now() >= limit => {
                return Err(format!(
                    "target {} did not come back within {:.0} s: {e}",
                    target.display(),
                    me.args.device_timeout
                ))
            }
            Err(e) => {
                if !said {
                    log(
                        me,
                        &format!("waiting for target {} to come back: {e}", target.display()),
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}
