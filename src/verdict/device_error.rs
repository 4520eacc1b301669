//! The device-error rule (DESIGN.md, "Device errors are the cut"): a run that a device
//! error ended is judged on the acknowledgements confirmed before the error, unless
//! writes were acknowledged after it; then nothing it measured can be trusted
//! ("fsyncgate": after a failed write or durability call, a later success proves
//! nothing).

use crate::ledger::{DeviceError, RunLedger};
use crate::RunId;

/// Why a run a device error ended cannot be judged (verify exits 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceErrorRefusal {
    /// The writer stopped on an error no failing device gives (EINVAL, EBADF, a short
    /// write, …): the run itself went wrong.
    NotADeviceFailure {
        /// The run.
        run: RunId,
        /// The error, as the agent reported it.
        error: String,
        /// When the failed call returned, in ms after the run's start.
        ms: u64,
    },
    /// Writes were acknowledged after the device error (ledger entries after it, or
    /// acks stamped later than it).
    AcknowledgedAfterError {
        /// The run.
        run: RunId,
        /// The error, as the agent reported it.
        error: String,
        /// When the failed call returned, in ms after the run's start.
        ms: u64,
        /// Acknowledgements after it.
        later: u64,
    },
}

impl std::fmt::Display for DeviceErrorRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceErrorRefusal::NotADeviceFailure { run, error, ms } => write!(
                f,
                "run {run}: the writer stopped at {:.3} s into the run on an error that is not a device failure ({error}): \
                 the run itself went wrong, so nothing it measured counts",
                *ms as f64 / 1000.0
            ),
            DeviceErrorRefusal::AcknowledgedAfterError { run, error, ms, .. } => write!(
                f,
                "run {run}: writes were acknowledged after its device error at {:.3} s into the run ({error}): \
                 a success after a failed write or durability call cannot be trusted, so nothing this run measured counts",
                *ms as f64 / 1000.0
            ),
        }
    }
}

impl std::error::Error for DeviceErrorRefusal {}

/// Applies the rule to run `l`. Returns the line the report shows when a device error
/// ended the run (`None` when none did).
///
/// Errors: [`DeviceErrorRefusal`], the run cannot be judged.
pub fn device_error_rule(l: &RunLedger) -> Result<Option<String>, DeviceErrorRefusal> {
    let Some(end) = &l.device_error else {
        return Ok(None);
    };
    // File and files acknowledgements stamped after the error (a pgbench range's
    // time is its last commit's, which the rule does not judge).
    let later = l.acks_after_error + l.clock.count_after(end.ms);
    let DeviceError {
        error, ms, device, ..
    } = end;
    if !device {
        return Err(DeviceErrorRefusal::NotADeviceFailure {
            run: l.run,
            error: error.clone(),
            ms: *ms,
        });
    }
    if later > 0 {
        return Err(DeviceErrorRefusal::AcknowledgedAfterError {
            run: l.run,
            error: error.clone(),
            ms: *ms,
            later,
        });
    }
    let what = if super::cut::errno_of(error) == Some(super::cut::ENOSPC) {
        "the storage filled up: no power was cut"
    } else {
        "the device lost power or went away; if it came back under a new name, give --target"
    };
    Ok(Some(format!(
        "run ended by a device error at {:.3} s into the run: {error} ({what}); the {} acknowledgements confirmed before it are judged",
        *ms as f64 / 1000.0,
        end.acknowledged
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{AckBatch, Acks, FileAck, Manifest};

    /// A file run's ledger holding acks stamped at `ms`, ended by `end`.
    fn ledger(ms: &[u32], end: Option<DeviceError>) -> RunLedger {
        let acks = ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| FileAck {
                seq: i as u64 + 1,
                block: i as u64,
                ms,
            })
            .collect();
        let manifest = Manifest::example_file("sut", "/mnt/t.dat", 1 << 20, 4096);
        let batch = AckBatch {
            batch: 1,
            promised: true,
            acks: Acks::File(acks),
            flushes: None,
            canary: Default::default(),
            sealed_ms: 0,
            oldest_in_flight_ms: None,
        };
        RunLedger {
            device_error: end,
            ..RunLedger::of_batches(RunId(0x3f9c_0e12_a4b5_d678), manifest, vec![batch])
        }
    }

    fn eio(ms: u64, device: bool) -> DeviceError {
        DeviceError {
            error: "fdatasync after block 7: Input/output error (os error 5)".into(),
            ms,
            issued: 3,
            acknowledged: 2,
            last_seq: 2,
            device,
            flushes: None,
        }
    }

    #[test]
    fn the_device_error_rule_judges_acks_before_the_error_and_refuses_any_after_it() {
        assert_eq!(device_error_rule(&ledger(&[10, 20], None)), Ok(None));
        assert_eq!(
            device_error_rule(&ledger(&[10, 1500], Some(eio(1500, true)))).unwrap(),
            Some(
                "run ended by a device error at 1.500 s into the run: fdatasync after block 7: \
                 Input/output error (os error 5) (the device lost power or went away; if it came \
                 back under a new name, give --target); the 2 acknowledgements confirmed before it \
                 are judged"
                    .to_string()
            )
        );
        let refused = device_error_rule(&ledger(&[10, 1501], Some(eio(1500, true)))).unwrap_err();
        assert_eq!(
            refused,
            DeviceErrorRefusal::AcknowledgedAfterError {
                run: RunId(0x3f9c_0e12_a4b5_d678),
                error: "fdatasync after block 7: Input/output error (os error 5)".into(),
                ms: 1500,
                later: 1,
            }
        );
        assert_eq!(
            refused.to_string(),
            "run 3f9c0e12a4b5d678: writes were acknowledged after its device error at 1.500 s into \
             the run (fdatasync after block 7: Input/output error (os error 5)): a success after a \
             failed write or durability call cannot be trusted, so nothing this run measured counts"
        );
        let mut after = ledger(&[10], Some(eio(1500, true)));
        after.acks_after_error = 1;
        assert!(matches!(
            device_error_rule(&after),
            Err(DeviceErrorRefusal::AcknowledgedAfterError { later: 1, .. })
        ));
        assert_eq!(
            device_error_rule(&ledger(&[10], Some(eio(250, false))))
                .unwrap_err()
                .to_string(),
            "run 3f9c0e12a4b5d678: the writer stopped at 0.250 s into the run on an error that is \
             not a device failure (fdatasync after block 7: Input/output error (os error 5)): the run \
             itself went wrong, so nothing it measured counts"
        );
    }
}
