//! The tag a transaction writes into `pgbench_history.filler` (`char(22)`).
//!
//! ```text
//!   0        8    12         22
//!   RRRRRRRR CCCC SSSSSSSSSS
//!   run      client seq
//! ```
//!
//! * `RRRRRRRR` — the low 32 bits of the run id, 8 lowercase hex digits;
//! * `CCCC` — the client number, 4 decimal digits (clients 0..=9999);
//! * `SSSSSSSSSS` — the client's sequence number, 10 decimal digits (1..=9,999,999,999).
//!
//! Exactly 22 characters, so `char(22)` adds no padding, and the verifier selects
//! a run's rows with `filler LIKE 'RRRRRRRR%'` and reads the fields with `substr`.
//! Example: run `5f3c9e20a1b2c3d4`, client 7, seq 42 →
//! `a1b2c3d400070000000042`. Two runs whose ids share their low 32 bits
//! (chance 2⁻³² per pair) would be mixed up; a new run id is drawn for every run.

use plugpull::RunId;

/// Largest client number a tag can carry.
pub const MAX_CLIENT: u32 = 9_999;
/// Largest per-client sequence number a tag can carry.
pub const MAX_SEQ: u64 = 9_999_999_999;

/// The 8-character prefix shared by every tag of `run`.
pub fn prefix(run: RunId) -> String {
    format!("{:08x}", run.0 as u32)
}

/// The tag of `client`'s transaction number `seq` in `run`.
pub fn encode(run: RunId, client: u32, seq: u64) -> String {
    debug_assert!(client <= MAX_CLIENT && seq <= MAX_SEQ);
    format!("{:08x}{client:04}{seq:010}", run.0 as u32)
}

/// Parses a tag back into (client, seq) when it belongs to `run` (the reference
/// decoder; the verifier does the same in SQL).
#[cfg_attr(not(test), allow(dead_code))]
pub fn decode(run: RunId, tag: &str) -> Option<(u32, u64)> {
    let tag = tag.trim_end();
    if tag.len() != 22 || !tag.starts_with(&prefix(run)) {
        return None;
    }
    let rest = &tag[8..];
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((rest[..4].parse().ok()?, rest[4..].parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_width() {
        let run = RunId(0x5f3c_9e20_a1b2_c3d4);
        let t = encode(run, 7, 42);
        assert_eq!(t, "a1b2c3d400070000000042");
        assert_eq!(t.len(), 22);
        assert_eq!(decode(run, &t), Some((7, 42)));
        let t = encode(run, MAX_CLIENT, MAX_SEQ);
        assert_eq!(t.len(), 22);
        assert_eq!(decode(run, &t), Some((MAX_CLIENT, MAX_SEQ)));
        assert_eq!(decode(RunId(1), &t), None);
        assert_eq!(decode(run, "a1b2c3d4000x0000000042"), None);
    }
}
