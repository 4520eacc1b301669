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
    /// Of the atomic cuts, those with writes in flight at the cut: only they could
    /// tear one. Left out of the JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub exposed_cuts: u32,
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
                        let in_flight = c.verdict.as_ref().and_then(|v| v.in_flight);
                        r.exposed_cuts += u32::from(torn > 0 || in_flight.unwrap_or(0) > 0);
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

    /// For a campaign whose runs expected atomic writes, the claim its cuts support,
    /// with its confidence bound over the cuts that had writes in flight (only they
    /// could tear one; Clopper–Pearson, [`crate::stats::failure_rate`]): `atomic
    /// writes (--expect-atomic): 0 torn in 40 valid cuts, 31 with writes in flight:
    /// the tear rate per cut with writes in flight is below 9.21 % with 95 %
    /// confidence`; `None` when no valid cut expected them.
    pub fn atomic_line(&self, confidence: f64) -> Option<String> {
        use crate::stats::{percent, percent_down, percent_up};
        if self.atomic_cuts == 0 {
            return None;
        }
        let head = format!(
            "atomic writes (--expect-atomic): {} torn in {} valid cuts, {} with writes in flight",
            self.torn_cuts, self.atomic_cuts, self.exposed_cuts
        );
        let bound = crate::stats::failure_rate(self.torn_cuts, self.exposed_cuts, confidence)
            .ok()
            .flatten();
        Some(match bound {
            None => format!("{head}: no cut had a write in flight, so atomicity was not measured"),
            Some(b) if b.failed == 0 => format!(
                "{head}: the tear rate per cut with writes in flight is below {} with {} confidence",
                percent_up(b.upper_one_sided),
                percent(confidence)
            ),
            Some(b) => format!(
                "{head}: not atomic; the tear rate per cut with writes in flight is at least {} with {} confidence",
                percent_down(b.lower_one_sided),
                percent(confidence)
            ),
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
        assert_eq!(r.atomic_line(0.95), None);
        let atomic = RollUp {
            atomic_cuts: 30,
            ..r.clone()
        };
        assert_eq!(
            atomic.atomic_line(0.95).unwrap(),
            "atomic writes (--expect-atomic): 0 torn in 30 valid cuts, 0 with writes in flight: no cut had a write in flight, so atomicity was not measured"
        );
        let exposed = RollUp {
            exposed_cuts: 29,
            ..atomic.clone()
        };
        // 1 - 0.05^(1/29) = 9.82 %.
        assert_eq!(
            exposed.atomic_line(0.95).unwrap(),
            "atomic writes (--expect-atomic): 0 torn in 30 valid cuts, 29 with writes in flight: the tear rate per cut with writes in flight is below 9.82 % with 95 % confidence"
        );
        let torn = RollUp {
            torn_cuts: 2,
            ..exposed
        };
        assert_eq!(
            torn.atomic_line(0.95).unwrap(),
            // P(X ≥ 2 | n = 29, p) = 5 % at p = 1.2394 %.
            "atomic writes (--expect-atomic): 2 torn in 30 valid cuts, 29 with writes in flight: not atomic; the tear rate per cut with writes in flight is at least 1.23 % with 95 % confidence"
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
