//! # plugpull core
//!
//! The pure parts of plugpull, with no sockets and no process control, so every
//! rule that decides a verdict can be unit-tested:
//!
//! * [`atomic`] — atomic-write qualification: the claims a run records, the answer
//!   a cut gives.
//! * [`record`] — the self-describing 512-byte sector format the file workload writes.
//! * [`wire`] — length-prefixed, postcard-encoded frames between agent/verifier and
//!   listener, with a hard size cap, plus small async helpers to read and write them.
//! * [`auth`] — the HMAC-SHA256 challenge-response both sides run before any message.
//! * [`schedule`] — the files workload's deterministic step schedule, which its
//!   writer follows, the ledger's fold checks its acks against and its verdict replays.
//! * [`ledger`] — the listener's append-only, CRC-checked record of acknowledgements.
//! * [`verdict`] — the per-block classification of what survived (the README's
//!   "Verdicts" table).
//! * [`report`] — the verification report model shared by the human and JSON output.
//! * [`probe`] — the storage stack under a target and the warnings it raises, flush
//!   accounting and cut-evidence parsers.
//! * [`campaign`] — campaigns of many cuts: the definition, the durable events, the
//!   state they imply and how each cut is judged.
//! * [`power`] — `--power` URIs (cut drivers) and the power devices' answers.
//! * [`units`] — parsing of sizes (`64MiB`) and durations (`30s`).
#![deny(missing_docs)]

pub mod atomic;
pub mod auth;
pub mod campaign;
pub mod ledger;
pub mod modes;
pub mod power;
pub mod probe;
pub mod record;
pub mod report;
pub mod schedule;
pub mod stats;
pub mod units;
pub mod verdict;
pub mod wire;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Identifier of one run: 64 random bits chosen by the listener, shown as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct RunId(pub u64);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({self})")
    }
}

impl std::str::FromStr for RunId {
    type Err = String;
    /// Parses 1 to 16 hex digits.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() || s.len() > 16 {
            return Err(format!("run id {s:?} is not 1 to 16 hex digits"));
        }
        u64::from_str_radix(s, 16)
            .map(RunId)
            .map_err(|_| format!("run id {s:?} is not hexadecimal"))
    }
}
