//! The end of a write run: the workers' results merged, the listener told how the
//! run ended ([`end_run`]), and the exit a failed call gives ([`device_error_end`]).

use super::shared::{Shared, WorkerOut};
use crate::latency::LatencyStats;
use crate::reporter::Reporter;
use crate::Error;
use plugpull::ledger::{DeviceError, RunSummary};
use plugpull::RunId;
use std::time::Duration;

/// How a write run ended, once the listener has its end.
pub struct RunEnd {
    /// Writes issued.
    pub issued: u64,
    /// Acknowledgements the listener confirmed.
    pub confirmed: u64,
    /// Every worker's latencies merged (its count is the local acknowledgements).
    pub hist: LatencyStats,
    /// Blocks written at least once.
    pub covered: u64,
    /// The failed call that ended the run, as the ledger records it.
    pub device_error: Option<DeviceError>,
    /// Whether an interrupt (Ctrl-C, SIGINT) ended the run early.
    pub interrupted: bool,
}

/// Merges the workers' results and tells the listener how the run ended: its device
/// error, or its summary.
///
/// Errors: the listener could not be reached to confirm the end.
pub async fn end_run(
    reporter: Reporter,
    sh: &Shared,
    outs: &[WorkerOut],
    elapsed: Duration,
) -> Result<RunEnd, Error> {
    let issued = sh.issued();
    let mut hist = LatencyStats::new();
    let mut covered = 0;
    for o in outs {
        hist.merge(&o.hist);
        covered += o.covered;
    }
    let local_acks = hist.count();
    let device_error = sh.first_error().map(|(error, at, device)| DeviceError {
        error,
        ms: reporter.sink().ms_at(at) as u64,
        issued,
        acknowledged: local_acks,
        last_seq: sh.last_seq(),
        device,
        flushes: None,
    });
    let confirmed = match &device_error {
        Some(end) => reporter.device_error(end.clone()).await?,
        None => {
            reporter
                .finish(RunSummary {
                    issued,
                    acknowledged: local_acks,
                    duration_ms: elapsed.as_millis() as u64,
                    flushes: None,
                    lost_ms: None,
                })
                .await?
        }
    };
    Ok(RunEnd {
        issued,
        confirmed,
        hist,
        covered,
        device_error,
        interrupted: sh.interrupted.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// The end of a run a failed call stopped: exit 1 with the cut explained when it was a
/// device error; an error (exit 2) when it was not, since the run itself went wrong.
pub fn device_error_end(
    run: RunId,
    end: &DeviceError,
    confirmed: u64,
    listener: &str,
) -> Result<bool, Error> {
    let at = end.ms as f64 / 1000.0;
    if !end.device {
        return Err(Error::Msg(format!(
            "run {run} stopped at {at:.3} s into the run on an error that is not a device failure: {}; \
             the run itself went wrong (not the device), so `verify` will refuse it",
            end.error
        )));
    }
    eprintln!(
        "plugpull: run {run} ended by a device error {at:.3} s into the run: {}; no acknowledgement was made after it; \
         {confirmed} acknowledgements were confirmed by the listener before it. The device lost power, went away or \
         filled up: this is the cut. Verify the run with `plugpull verify --listener {listener} --run {run}` (and the same secret) once the \
         device is back (if it came back under a new name, give --target)",
        end.error
    );
    Ok(false)
}
