//! The verdict engine: what survived a power cut, and the evidence.
//!
//! This file holds the types every workload's verdict shares: the per-block
//! [`Verdict`] and its [`VerdictCounts`] (a [`Counts`] of a [`VerdictKind`], the
//! vocabulary every unit-by-unit workload shares), the [`Finding`] that names a failed block's
//! evidence ([`SectorSpan`]s of [`Content`], the [`LaterWrite`] that proves a
//! reordering) and the [`Classification`] of a whole run. The rules live beside it:
//!
//! * [`cut`] — whether the cut could have failed: its moment, the acknowledgements
//!   exposed at it, the volatile canary; a PASS without that evidence is NOT MEASURED.
//! * [`device_error`] — the device-error rule every workload applies first: a run a
//!   device error ended is judged on what was confirmed before it, or refused.
//! * [`file`](mod@file) — the file workload's rules, block by block:
//!   [`classify_block`], then [`Tally`] over every block with its [`AckTable`]
//!   (re-exported here).
//! * [`files`](mod@files) — the files (namespace) workload's rules, name by name:
//!   the replayed step schedule, what an in-flight step may leave, what fails.
//! * [`pgbench`](mod@pgbench) — the pgbench workload's rules, client by client: which
//!   acknowledged commits must exist, the sequence bound after a cut, and what fails.
//!
//! The verdicts are tabled, with what each means on disk, in the README's
//! "Verdicts (file workload)" section.

pub mod cut;
pub mod device_error;
pub mod file;
pub mod files;
mod kind;
pub mod pgbench;

pub use device_error::{device_error_rule, DeviceErrorRefusal};
pub use file::{classify_block, AckTable, BlockCheck, Tally};
pub use kind::{Counts, VerdictKind, MAX_CLASSES};

use crate::RunId;
use serde::{Deserialize, Serialize};

crate::verdict_kind! {
    /// The classification of one block.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
    #[serde(rename_all = "snake_case")]
    pub enum Verdict {
        /// Every sector valid with one seq `≥ A`.
        Intact = "intact",
        /// An older version (or nothing) where the acknowledged one should be.
        LostWrite = "lost_write" fails,
        /// A mix of `A` and a newer unacknowledged write: not a failure.
        TornInFlight = "torn_in_flight",
        /// A mix of seqs, some older than `A` (a shorn write).
        TornAcknowledged = "torn_acknowledged" fails,
        /// A sector's CRC or header is invalid.
        Corrupt = "corrupt" fails,
        /// A valid sector that names another block or sector.
        Misdirected = "misdirected" fails,
        /// A lost write although a write issued after it was acknowledged survived.
        Unserializable = "unserializable" fails,
        /// The block is beyond the end of the target.
        Missing = "missing" fails,
    }
}

impl Verdict {
    /// Whether the verdict fails a run that expects atomic writes (`expect_atomic`)
    /// or one that does not: [`VerdictKind::is_failure`], and then `torn_in_flight` too.
    pub fn fails(self, expect_atomic: bool) -> bool {
        self.is_failure() || expect_atomic && self == Verdict::TornInFlight
    }
}

/// Blocks per verdict; each checked block is counted once.
pub type VerdictCounts = Counts<Verdict>;

impl Counts<Verdict> {
    /// Blocks with a failure verdict when atomic writes are expected (`expect_atomic`:
    /// `torn_in_flight` fails too) or not ([`Counts::failures`]).
    pub fn failures_expecting(&self, expect_atomic: bool) -> u64 {
        self.failures()
            + if expect_atomic {
                self.get(Verdict::TornInFlight)
            } else {
                0
            }
    }
}

/// What one sector (or a run of equal sectors) of a block holds: the evidence a
/// finding names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Content {
    /// A valid record of this run, written for this block and sector.
    Seq {
        /// Its write sequence number.
        seq: u64,
    },
    /// 512 zero bytes.
    Zeros,
    /// A valid record of another run (16 hex digits).
    OtherRun {
        /// That run.
        run: String,
        /// Its seq.
        seq: u64,
    },
    /// Bytes that are no plugpull record: contents from before the run, or garbage.
    Foreign,
    /// A record of this run whose CRC does not match: damaged bytes. `flipped_bits`
    /// counts the bits that differ from the record regenerated from the run, seq,
    /// block and sector its header names (the payload is reproducible).
    BadCrc {
        /// The seq its header names.
        seq: u64,
        /// Bits that differ from the regenerated record.
        flipped_bits: u32,
    },
    /// A valid record of this run written for another place (a misdirected write).
    Stray {
        /// The block it was written for.
        block: u64,
        /// The sector index it was written for.
        sector: u32,
        /// Its seq.
        seq: u64,
    },
    /// Nothing: the sector lies beyond the end of a target cut short inside this
    /// block.
    BeyondEnd,
}

impl Content {
    /// Human text: "seq 5", "zeros", "run R's record seq s", "foreign bytes", …
    pub fn describe(&self) -> String {
        match self {
            Content::Seq { seq } => format!("seq {seq}"),
            Content::Zeros => "zeros".into(),
            Content::OtherRun { run, seq } => format!("run {run}'s record seq {seq}"),
            Content::Foreign => "foreign bytes (no plugpull record)".into(),
            Content::BadCrc { seq, flipped_bits } => format!(
                "this run's record of seq {seq} with a bad CRC ({flipped_bits} bits differ from the regenerated record)"
            ),
            Content::Stray { block, sector, seq } => {
                format!("seq {seq} written for block {block} sector {sector}")
            }
            Content::BeyondEnd => "nothing (beyond the end of the target)".into(),
        }
    }
}

/// Sectors `first ..= last` of a block (indices within the block) that hold `content`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectorSpan {
    /// First sector index.
    pub first: u32,
    /// Last sector index (inclusive).
    pub last: u32,
    /// What they hold.
    pub content: Content,
}

/// Human text of a block's sector spans: `sectors 0–3: seq 7; 4–7: zeros`, or just
/// `zeros` when one span covers the block.
pub fn describe_spans(spans: &[SectorSpan]) -> String {
    if let [only] = spans {
        return only.content.describe();
    }
    let parts: Vec<String> = spans
        .iter()
        .map(|s| {
            if s.first == s.last {
                format!("{}: {}", s.first, s.content.describe())
            } else {
                format!("{}–{}: {}", s.first, s.last, s.content.describe())
            }
        })
        .collect();
    format!("sectors {}", parts.join("; "))
}

/// The surviving write that proves an `unserializable` finding: it was issued after
/// the lost write had been acknowledged (its watermark is at or above the lost seq).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaterWrite {
    /// Block it was written to.
    pub block: u64,
    /// Its seq.
    pub seq: u64,
    /// The acknowledged watermark it carries (every seq up to it was acknowledged
    /// when it was issued).
    pub watermark: u64,
    /// Seconds between its acknowledgement and the last of the run, when it is its
    /// block's acknowledged write (`None`: it was in flight at the cut, or superseded).
    pub acked_secs_before_end: Option<f64>,
}

/// One failed block, as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Block index.
    pub block: u64,
    /// The verdict.
    pub verdict: Verdict,
    /// `A`, the highest acknowledged seq of the block (0 = none).
    pub expected_seq: u64,
    /// The seq found on disk, see [`BlockCheck::found_seq`].
    pub found_seq: Option<u64>,
    /// For misdirected: the block the stray sector was written for.
    pub found_block: Option<u64>,
    /// Seconds between `A`'s acknowledgement and the last acknowledgement of the run.
    pub acked_secs_before_end: Option<f64>,
    /// What the block holds, sector range by sector range (for missing: empty when
    /// the block lies wholly beyond the end of the target).
    pub sectors: Vec<SectorSpan>,
    /// For a lost write: the block where its acknowledged version was found (a
    /// misdirected write, reported there as `misdirected`).
    pub found_at_block: Option<u64>,
    /// For unserializable: the surviving later write that proves the reordering.
    pub proof: Option<LaterWrite>,
}

impl Finding {
    /// The evidence in words: what the block holds, where its write went, what
    /// proves reordering.
    pub fn evidence(&self) -> String {
        let mut out = if self.sectors.is_empty() {
            "nothing (beyond the end of the target)".to_string()
        } else {
            describe_spans(&self.sectors)
        };
        if self.verdict == Verdict::TornAcknowledged {
            if let Some(s) = self.found_seq {
                out.push_str(&format!(
                    " (shorn: seq {s} < acknowledged seq {})",
                    self.expected_seq
                ));
            }
        }
        if let Some(q) = self.found_at_block {
            out.push_str(&format!("; its acknowledged write was found at block {q}"));
        }
        if let Some(p) = &self.proof {
            out.push_str(&format!(
                "; block {} holds seq {}, issued after seq {} was acknowledged (watermark {}){}",
                p.block,
                p.seq,
                self.expected_seq,
                p.watermark,
                p.acked_secs_before_end
                    .map(|s| format!(", acknowledged {s:.3} s before the end"))
                    .unwrap_or_default()
            ));
        }
        out
    }
}

/// The result of checking every block.
#[derive(Clone, Debug, PartialEq)]
pub struct Classification {
    /// Whether atomic writes were expected: `torn_in_flight` blocks are findings.
    pub expect_atomic: bool,
    /// Blocks per verdict.
    pub counts: VerdictCounts,
    /// Blocks classified.
    pub checked: u64,
    /// Blocks holding a write newer than their acknowledged one whose durability
    /// call had not returned at the cut: its seq is above every surviving sector's
    /// watermark. (A write the ledger does not hold as acknowledged, but whose seq a
    /// surviving write's watermark covers, had its call return before that write was
    /// issued: it was no longer in flight, only not yet confirmed by the listener.)
    pub in_flight_survived: u64,
    /// Highest acknowledged watermark carried by any surviving sector.
    pub max_watermark: u64,
    /// Checked blocks holding at least one valid record of this run.
    pub run_data_blocks: u64,
    /// Checked blocks holding a valid record of another run (a hint at a wrong target).
    pub other_run_blocks: u64,
    /// The other runs whose records were found, in the order first seen.
    pub other_runs: Vec<RunId>,
    /// Every failed block, by block index.
    pub findings: Vec<Finding>,
}
