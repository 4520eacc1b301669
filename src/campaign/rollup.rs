//! A campaign's cuts counted by validity and outcome ([`RollUp`]), and the sentences
//! the reports print of them: the confidence bound on the loss rate per cut
//! ([`crate::stats`]) and the atomic-write line.

use super::{CutRecord, Validity};
use serde::Serialize;

/// For `skip_serializing_if`: a count of 0.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Cuts counted by validity and outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RollUp {
    /// Cuts judged.
    pub cuts: u32,
    /// Valid cuts.
    pub valid: u32,
    /// Not measured.
    pub not_measured: u32,
    /// Invalid.
    pub invalid: u32,
    /// Valid cuts whose verdict failed.
    pub failed: u32,
    /// Valid cuts that passed.
    pub passed: u32,
    /// Valid cuts whose runs expected atomic writes (`--expect-atomic`); left out of
    /// the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub atomic_cuts: u32,
    /// Of those, cuts that tore a write in flight; left out of the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub torn_cuts: u32,
}

impl RollUp {
    /// Counts `cuts`.
    pub fn of(cuts: &[CutRecord]) -> RollUp {
        let mut r = RollUp::default();
        for c in cuts {
            r.cuts += 1;
            match c.validity {
                Validity::Valid => {
                    r.valid += 1;
                    if c.verdict.as_ref().is_some_and(|v| v.failed) {
                        r.failed += 1;
                    } else {
                        r.passed += 1;
                    }
                    if let Some(torn) = c.verdict.as_ref().and_then(|v| v.torn) {
                        r.atomic_cuts += 1;
                        r.torn_cuts += u32::from(torn > 0);
                    }
                }
                Validity::NotMeasured(_) => r.not_measured += 1,
                Validity::Invalid(_) => r.invalid += 1,
            }
        }
        r
    }

    /// The confidence bound on the per-cut failure rate from the valid cuts
    /// ([`crate::stats::failure_rate`]); `None` when no cut was valid.
    pub fn bound(&self, confidence: f64) -> Option<crate::stats::RateBound> {
        crate::stats::failure_rate(self.failed, self.valid, confidence)
            .ok()
            .flatten()
    }

    /// The bound as a sentence ([`crate::stats::RateBound::sentence`]), or why there
    /// is none: `no valid cut: the loss rate per cut was not measured`.
    pub fn bound_line(&self, confidence: f64) -> String {
        match self.bound(confidence) {
            Some(b) => b.sentence(),
            None => "no valid cut: the loss rate per cut was not measured".into(),
        }
    }

    /// For a campaign whose runs expected atomic writes: `atomic writes
    /// (--expect-atomic): 0 torn in 40 valid cuts`, or `3 of 40 valid cuts tore a write
    /// in flight`; `None` when no valid cut expected them.
    pub fn atomic_line(&self) -> Option<String> {
        (self.atomic_cuts > 0).then(|| {
            if self.torn_cuts == 0 {
                format!(
                    "atomic writes (--expect-atomic): 0 torn in {} valid cuts",
                    self.atomic_cuts
                )
            } else {
                format!(
                    "atomic writes (--expect-atomic): {} of {} valid cuts tore a write in flight: not atomic",
                    self.torn_cuts, self.atomic_cuts
                )
            }
        })
    }

    /// `10 cuts: 9 valid (2 failed, 7 passed), 1 not measured, 0 invalid`.
    pub fn line(&self) -> String {
        format!(
            "{} cuts: {} valid ({} failed, {} passed), {} not measured, {} invalid",
            self.cuts, self.valid, self.failed, self.passed, self.not_measured, self.invalid
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roll_up_gives_the_bound_of_its_valid_cuts_only() {
        let r = RollUp {
            cuts: 33,
            valid: 30,
            not_measured: 2,
            invalid: 1,
            failed: 0,
            passed: 30,
            ..RollUp::default()
        };
        assert_eq!(r.atomic_line(), None);
        let atomic = RollUp {
            atomic_cuts: 30,
            ..r.clone()
        };
        assert_eq!(
            atomic.atomic_line().unwrap(),
            "atomic writes (--expect-atomic): 0 torn in 30 valid cuts"
        );
        let torn = RollUp {
            torn_cuts: 2,
            ..atomic
        };
        assert_eq!(
            torn.atomic_line().unwrap(),
            "atomic writes (--expect-atomic): 2 of 30 valid cuts tore a write in flight: not atomic"
        );
        assert_eq!(
            r.bound_line(0.95),
            "0 of 30 valid cuts failed: the loss rate per cut is below 9.51 % with 95 % confidence"
        );
        let nothing = RollUp {
            cuts: 3,
            not_measured: 3,
            ..RollUp::default()
        };
        assert_eq!(nothing.bound(0.95), None);
        assert_eq!(
            nothing.bound_line(0.95),
            "no valid cut: the loss rate per cut was not measured"
        );
    }
}
