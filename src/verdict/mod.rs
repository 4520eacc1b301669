//! The verdict engine of the file workload: what survived, block by block.
//!
//! Taxonomy after Zheng et al., "Understanding the Robustness of SSDs under Power
//! Fault" (FAST 2013), as tabled in DESIGN.md. For block `b`, `A` is the highest
//! acknowledged sequence number the ledger holds for it (0 = never acknowledged).
//! Each sector is read as one [`Content`]: a valid record of this run (in place, or a
//! *stray* written for another place), *zeros*, *another run's* valid record,
//! *our record with a bad CRC* (magic and run id are ours), or *foreign bytes*.
//! Zeros, other runs' records and — on a block holding nothing of this run, of a
//! target that may have held foreign data — foreign bytes are *prior contents*.
//! Then, first rule that applies:
//!
//! 1. the block lies (partly) beyond the end of the target and `A > 0` → **missing**;
//! 2. a valid sector of this run names another block, sector index or block size → **misdirected**;
//! 3. `A > 0` and a sector is our record with a bad CRC, or foreign bytes that are not
//!    prior contents → **corrupt**;
//! 4. every sector carries one seq `s` (prior contents count as seq 0): `s ≥ A` → **intact**
//!    (`s > A`: a write in flight at the cut survived), `s < A` → **lost write**;
//! 5. sectors carry different seqs: the oldest `< A` → **torn acknowledged** (shorn),
//!    else → **torn in flight** (a mix of `A` and a newer, unacknowledged write).
//!
//! Afterwards ([`Tally::finish`]): a lost write whose acknowledged version was found
//! as a stray at block `Q` stays **lost write** naming `Q` (one misdirection is one
//! fault, never also a reordering). Otherwise a lost write with `A ≤ W` is re-labelled
//! **unserializable**, where `W` is the highest acknowledged watermark carried by any
//! surviving sector of this run — a write issued after `A` had been acknowledged
//! survived while `A` did not, so the device reordered across a flush — unless the
//! block holds the record of a run that was not on the target before this one (it was
//! overwritten by that later run, and named as such). A record of a run that was there
//! before (the previous cut's run, when the target is reused) is the older version the
//! device kept: it does not excuse the reordering.
//! A block with `A = 0` and no sector of this run was never written and is not
//! checked. Blocks with `A = 0` cannot fail except by rule 2.
//!
//! Every finding carries its evidence: the sector ranges and what each holds, the
//! flipped-bit count of a damaged record, where a misdirected write went, and the
//! surviving write that proves an unserializable one.

pub mod pgbench;

use crate::record::{decode_sector, Encoder, InvalidReason, Sector, SectorHeader, SECTOR};
use crate::RunId;
use serde::{Deserialize, Serialize};

/// The classification of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every sector valid with one seq `≥ A`.
    Intact,
    /// An older version (or nothing) where the acknowledged one should be.
    LostWrite,
    /// A mix of `A` and a newer unacknowledged write: not a failure.
    TornInFlight,
    /// A mix of seqs, some older than `A` (a shorn write).
    TornAcknowledged,
    /// A sector's CRC or header is invalid.
    Corrupt,
    /// A valid sector that names another block or sector.
    Misdirected,
    /// A lost write although a write issued after it was acknowledged survived.
    Unserializable,
    /// The block is beyond the end of the target.
    Missing,
}

impl Verdict {
    /// All verdicts, in report order.
    pub const ALL: [Verdict; 8] = [
        Verdict::Intact,
        Verdict::LostWrite,
        Verdict::TornInFlight,
        Verdict::TornAcknowledged,
        Verdict::Corrupt,
        Verdict::Misdirected,
        Verdict::Unserializable,
        Verdict::Missing,
    ];

    /// Whether the verdict means something acknowledged was lost or damaged.
    pub fn is_failure(self) -> bool {
        !matches!(self, Verdict::Intact | Verdict::TornInFlight)
    }

    /// The snake_case name used in JSON and reports.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Intact => "intact",
            Verdict::LostWrite => "lost_write",
            Verdict::TornInFlight => "torn_in_flight",
            Verdict::TornAcknowledged => "torn_acknowledged",
            Verdict::Corrupt => "corrupt",
            Verdict::Misdirected => "misdirected",
            Verdict::Unserializable => "unserializable",
            Verdict::Missing => "missing",
        }
    }
}

/// Blocks per verdict; each checked block is counted once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictCounts {
    /// Blocks intact.
    pub intact: u64,
    /// Blocks with a lost write.
    pub lost_write: u64,
    /// Blocks torn by a write in flight.
    pub torn_in_flight: u64,
    /// Blocks torn below their acknowledged write.
    pub torn_acknowledged: u64,
    /// Blocks with an invalid sector.
    pub corrupt: u64,
    /// Blocks holding another block's sector.
    pub misdirected: u64,
    /// Blocks lost across a flush.
    pub unserializable: u64,
    /// Blocks beyond the end of the target.
    pub missing: u64,
}

impl VerdictCounts {
    /// The counter of `v`.
    pub fn get_mut(&mut self, v: Verdict) -> &mut u64 {
        match v {
            Verdict::Intact => &mut self.intact,
            Verdict::LostWrite => &mut self.lost_write,
            Verdict::TornInFlight => &mut self.torn_in_flight,
            Verdict::TornAcknowledged => &mut self.torn_acknowledged,
            Verdict::Corrupt => &mut self.corrupt,
            Verdict::Misdirected => &mut self.misdirected,
            Verdict::Unserializable => &mut self.unserializable,
            Verdict::Missing => &mut self.missing,
        }
    }

    /// The count of `v`.
    pub fn get(&self, v: Verdict) -> u64 {
        let mut c = self.clone();
        *c.get_mut(v)
    }

    /// Blocks with a failure verdict.
    pub fn failures(&self) -> u64 {
        Verdict::ALL
            .iter()
            .filter(|v| v.is_failure())
            .map(|&v| self.get(v))
            .sum()
    }

    /// All blocks counted.
    pub fn total(&self) -> u64 {
        Verdict::ALL.iter().map(|&v| self.get(v)).sum()
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

/// The classification of one block before the unserializable pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockCheck {
    /// The verdict.
    pub verdict: Verdict,
    /// The seq found: the single seq for intact/lost (0 = prior contents), the oldest
    /// for torn, the stray sector's for misdirected; `None` for corrupt and missing.
    pub found_seq: Option<u64>,
    /// For misdirected: the block the first stray sector was written for.
    pub found_block: Option<u64>,
    /// Highest watermark among this block's valid, correctly placed sectors of the run.
    pub watermark: u64,
    /// The seq of the sector carrying [`BlockCheck::watermark`] (0 = none).
    pub watermark_seq: u64,
    /// True when the block holds a seq above `A` (a write in flight survived).
    pub newer_than_acked: bool,
    /// True when some sector is a valid record of this run (wherever it belongs).
    pub has_run_data: bool,
    /// True when some sector is a valid record of another run.
    pub has_other_run: bool,
    /// Other runs whose valid records the block holds.
    pub other_runs: Vec<RunId>,
    /// What each sector holds, consecutive equal sectors merged (empty for missing).
    pub spans: Vec<SectorSpan>,
    /// Stray records of this run found here: (block written for, seq).
    pub strays: Vec<(u64, u64)>,
}

/// Reads the header fields of a sector with the magic but a bad CRC:
/// (run, block, sector, sectors per block, seq, watermark).
fn raw_header(s: &[u8; SECTOR]) -> (u64, u64, u32, u32, u64, u64) {
    let u64_at = |o: usize| u64::from_le_bytes(s[o..o + 8].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(s[o..o + 4].try_into().unwrap());
    (
        u64_at(8),
        u64_at(16),
        u32_at(24),
        u32_at(28),
        u64_at(32),
        u64_at(40),
    )
}

/// Bits by which a bad-CRC sector differs from the record of `run` its header names.
fn flipped_bits(run: RunId, s: &[u8; SECTOR]) -> u32 {
    let (_, block, sector, spb, seq, watermark) = raw_header(s);
    let mut want = [0u8; SECTOR];
    Encoder::new(run).encode_sector(
        &mut want,
        &SectorHeader {
            run,
            block,
            sector,
            sectors_per_block: spb,
            seq,
            watermark,
        },
    );
    want.iter()
        .zip(s.iter())
        .map(|(a, b)| (a ^ b).count_ones())
        .sum()
}

/// Classifies one block by rules 1–5 of the module doc. `data` holds what could be
/// read of the block (shorter than `block_size` when the target ends inside it);
/// `acked` is `A`. `prior_foreign` says whether the target may have held foreign
/// bytes (neither zeros nor plugpull records) when the run started: then foreign
/// bytes on a block holding nothing of this run are its prior contents; otherwise
/// they are damage. Returns `None` for a block never written by the run.
pub fn classify_block(
    run: RunId,
    block: u64,
    block_size: usize,
    acked: u64,
    data: &[u8],
    prior_foreign: bool,
) -> Option<BlockCheck> {
    let spb = (block_size / SECTOR) as u32;
    if data.len() < block_size {
        return (acked > 0).then_some(BlockCheck {
            verdict: Verdict::Missing,
            found_seq: None,
            found_block: None,
            watermark: 0,
            watermark_seq: 0,
            newer_than_acked: false,
            has_run_data: false,
            has_other_run: false,
            other_runs: Vec::new(),
            spans: Vec::new(),
            strays: Vec::new(),
        });
    }
    let mut strays: Vec<(u64, u64)> = Vec::new();
    let mut ours = false;
    let mut bad_crc_ours = false;
    let mut foreign = false;
    let mut other_runs: Vec<RunId> = Vec::new();
    let mut watermark = 0u64;
    let mut watermark_seq = 0u64;
    let mut contents: Vec<Content> = Vec::with_capacity(spb as usize);
    for (i, s) in data[..block_size].chunks_exact(SECTOR).enumerate() {
        let s: &[u8; SECTOR] = s.try_into().unwrap();
        let c = match decode_sector(s) {
            Sector::Valid(h) if h.run == run => {
                ours = true;
                if h.block != block || h.sector != i as u32 || h.sectors_per_block != spb {
                    strays.push((h.block, h.seq));
                    Content::Stray {
                        block: h.block,
                        sector: h.sector,
                        seq: h.seq,
                    }
                } else {
                    if h.watermark >= watermark {
                        watermark = h.watermark;
                        watermark_seq = h.seq;
                    }
                    Content::Seq { seq: h.seq }
                }
            }
            Sector::Valid(h) => {
                if !other_runs.contains(&h.run) {
                    other_runs.push(h.run);
                }
                Content::OtherRun {
                    run: h.run.to_string(),
                    seq: h.seq,
                }
            }
            Sector::Blank => Content::Zeros,
            Sector::Invalid(InvalidReason::BadCrc)
                // Our run id, or one a few flipped bits away from it.
                if (raw_header(s).0 ^ run.0).count_ones() <= 4 =>
            {
                bad_crc_ours = true;
                Content::BadCrc {
                    seq: raw_header(s).4,
                    flipped_bits: flipped_bits(run, s),
                }
            }
            Sector::Invalid(_) => {
                foreign = true;
                Content::Foreign
            }
        };
        contents.push(c);
    }
    if acked == 0 && !ours {
        return None;
    }
    let mut spans: Vec<SectorSpan> = Vec::new();
    for (i, c) in contents.iter().enumerate() {
        match spans.last_mut() {
            Some(s) if s.content == *c && s.last + 1 == i as u32 => s.last = i as u32,
            _ => spans.push(SectorSpan {
                first: i as u32,
                last: i as u32,
                content: c.clone(),
            }),
        }
    }
    // Seq per sector: prior contents (zeros, other runs, foreign bytes taken as prior) are 0.
    let seqs = contents.iter().filter_map(|c| match c {
        Content::Seq { seq } => Some(*seq),
        Content::Zeros | Content::OtherRun { .. } | Content::Foreign => Some(0),
        Content::BadCrc { .. } | Content::Stray { .. } => None,
    });
    let (min, max) = seqs.fold((u64::MAX, 0u64), |(lo, hi), s| (lo.min(s), hi.max(s)));
    let foreign_is_damage = foreign && (ours || bad_crc_ours || !prior_foreign);
    let (verdict, found_seq) = if !strays.is_empty() {
        (Verdict::Misdirected, strays.first().map(|&(_, seq)| seq))
    } else if acked > 0 && (bad_crc_ours || foreign_is_damage) {
        (Verdict::Corrupt, None)
    } else if min == max {
        (
            if min >= acked {
                Verdict::Intact
            } else {
                Verdict::LostWrite
            },
            Some(min),
        )
    } else if min < acked {
        (Verdict::TornAcknowledged, Some(min))
    } else {
        (Verdict::TornInFlight, Some(min))
    };
    Some(BlockCheck {
        verdict,
        found_seq,
        found_block: strays.first().map(|&(b, _)| b),
        watermark,
        watermark_seq,
        newer_than_acked: strays.is_empty() && max > acked && max != u64::MAX,
        has_run_data: ours,
        has_other_run: !other_runs.is_empty(),
        other_runs,
        spans,
        strays,
    })
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
    /// What the block holds, sector range by sector range (empty for missing).
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

/// Acknowledged state of every block, built from a ledger: `O(blocks)` memory
/// (12 bytes per block).
#[derive(Clone, Debug)]
pub struct AckTable {
    /// Highest acknowledged seq per block (0 = none).
    pub seq: Vec<u64>,
    /// Milliseconds after the run's start when that seq was acknowledged.
    pub ms: Vec<u32>,
    /// Acknowledgements seen (each confirmed ack once).
    pub acknowledged: u64,
    /// Latest acknowledgement time, ms after the run's start.
    pub end_ms: u32,
}

impl AckTable {
    /// An empty table for `blocks` blocks.
    pub fn new(blocks: u64) -> Self {
        AckTable {
            seq: vec![0; blocks as usize],
            ms: vec![0; blocks as usize],
            acknowledged: 0,
            end_ms: 0,
        }
    }

    /// Records an ack. Returns false (and ignores it) when `block` is out of range.
    pub fn add(&mut self, seq: u64, block: u64, ms: u32) -> bool {
        let Some(slot) = self.seq.get_mut(block as usize) else {
            return false;
        };
        self.acknowledged += 1;
        self.end_ms = self.end_ms.max(ms);
        if seq > *slot {
            *slot = seq;
            self.ms[block as usize] = ms;
        }
        true
    }

    fn secs_before_end(&self, block: u64) -> Option<f64> {
        let i = block as usize;
        (self.seq[i] > 0).then(|| (self.end_ms - self.ms[i]) as f64 / 1000.0)
    }
}

/// Accumulates block checks into counts and findings (the unserializable pass runs
/// in [`Tally::finish`]).
#[derive(Debug, Default)]
pub struct Tally {
    counts: VerdictCounts,
    checked: u64,
    in_flight_survived: u64,
    max_watermark: u64,
    witness: Option<LaterWrite>,
    run_data_blocks: u64,
    other_run_blocks: u64,
    other_runs: Vec<RunId>,
    /// Stray records of the run: (block written for, seq, block found at).
    strays: Vec<(u64, u64, u64)>,
    findings: Vec<Finding>,
}

/// The result of checking every block.
#[derive(Clone, Debug, PartialEq)]
pub struct Classification {
    /// Blocks per verdict.
    pub counts: VerdictCounts,
    /// Blocks classified.
    pub checked: u64,
    /// Blocks holding a write newer than their acknowledged one (in flight at the cut).
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

impl Tally {
    /// Adds the check of `block`; `acks` supplies `A` and its time.
    pub fn add(&mut self, block: u64, check: BlockCheck, acks: &AckTable) {
        self.checked += 1;
        self.run_data_blocks += check.has_run_data as u64;
        self.other_run_blocks += check.has_other_run as u64;
        for r in &check.other_runs {
            if !self.other_runs.contains(r) {
                self.other_runs.push(*r);
            }
        }
        for &(b, seq) in &check.strays {
            self.strays.push((b, seq, block));
        }
        if check.watermark > self.max_watermark || self.witness.is_none() && check.watermark > 0 {
            self.max_watermark = check.watermark;
            let i = block as usize;
            self.witness = Some(LaterWrite {
                block,
                seq: check.watermark_seq,
                watermark: check.watermark,
                acked_secs_before_end: (acks.seq.get(i) == Some(&check.watermark_seq))
                    .then(|| acks.secs_before_end(block))
                    .flatten(),
            });
        }
        if check.newer_than_acked {
            self.in_flight_survived += 1;
        }
        if check.verdict.is_failure() {
            let i = block as usize;
            self.findings.push(Finding {
                block,
                verdict: check.verdict,
                expected_seq: acks.seq[i],
                found_seq: check.found_seq,
                found_block: check.found_block,
                acked_secs_before_end: acks.secs_before_end(block),
                sectors: check.spans,
                found_at_block: None,
                proof: None,
            });
        } else {
            *self.counts.get_mut(check.verdict) += 1;
        }
    }

    /// The other runs whose records were found so far, in the order first seen.
    pub fn other_runs(&self) -> &[RunId] {
        &self.other_runs
    }

    /// Runs the misdirection and unserializable passes and returns the outcome.
    ///
    /// A lost write whose acknowledged version (or a newer one) was found at another
    /// block stays `lost_write` and names that block. Otherwise a lost write with
    /// `A ≤ W` becomes `unserializable` (naming the surviving write that proves it),
    /// except where the block holds the record of a run not in `prior` (the runs whose
    /// records were on the target before this run started): it was overwritten by a
    /// later run, which proves nothing about this device's ordering. A `prior` run's
    /// record there is the block's old contents, and the reordering stands.
    pub fn finish(mut self, prior: &[RunId]) -> Classification {
        for f in &mut self.findings {
            if matches!(f.verdict, Verdict::LostWrite | Verdict::TornAcknowledged) {
                if let Some(&(_, _, at)) = self
                    .strays
                    .iter()
                    .find(|&&(b, seq, _)| b == f.block && seq >= f.expected_seq)
                {
                    f.verdict = Verdict::LostWrite;
                    f.found_at_block = Some(at);
                    *self.counts.get_mut(f.verdict) += 1;
                    continue;
                }
            }
            if f.verdict == Verdict::LostWrite && f.expected_seq <= self.max_watermark {
                let overwritten = f.sectors.iter().any(|s| match &s.content {
                    Content::OtherRun { run, .. } => !prior.iter().any(|p| p.to_string() == *run),
                    _ => false,
                });
                if !overwritten {
                    f.verdict = Verdict::Unserializable;
                    f.proof = self.witness.clone();
                }
            }
            *self.counts.get_mut(f.verdict) += 1;
        }
        Classification {
            counts: self.counts,
            checked: self.checked,
            in_flight_survived: self.in_flight_survived,
            max_watermark: self.max_watermark,
            run_data_blocks: self.run_data_blocks,
            other_run_blocks: self.other_run_blocks,
            other_runs: self.other_runs,
            findings: self.findings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Encoder;

    const B: usize = 4096;
    const RUN: RunId = RunId(77);

    fn block(enc: &Encoder, b: u64, seq: u64, wm: u64) -> Vec<u8> {
        let mut v = vec![0u8; B];
        enc.encode_block(&mut v, b, seq, wm);
        v
    }

    fn verdict(b: u64, acked: u64, data: &[u8]) -> Option<(Verdict, Option<u64>)> {
        classify_block(RUN, b, B, acked, data, true).map(|c| (c.verdict, c.found_seq))
    }

    #[test]
    fn each_rule() {
        let enc = Encoder::new(RUN);
        let v5 = block(&enc, 3, 5, 4);
        let v9 = block(&enc, 3, 9, 8);
        assert_eq!(verdict(3, 5, &v5), Some((Verdict::Intact, Some(5))));
        assert_eq!(verdict(3, 5, &v9), Some((Verdict::Intact, Some(9))));
        assert_eq!(verdict(3, 9, &v5), Some((Verdict::LostWrite, Some(5))));
        assert_eq!(verdict(3, 9, &[0; B]), Some((Verdict::LostWrite, Some(0))));
        assert_eq!(verdict(3, 0, &[0; B]), None);
        assert_eq!(verdict(3, 0, &[0xAB; B]), None);
        let mut torn = v9.clone();
        torn[..B / 2].copy_from_slice(&v5[..B / 2]);
        assert_eq!(
            verdict(3, 9, &torn),
            Some((Verdict::TornAcknowledged, Some(5)))
        );
        assert_eq!(verdict(3, 5, &torn), Some((Verdict::TornInFlight, Some(5))));
        let mut half_new = vec![0u8; B];
        half_new[..B / 2].copy_from_slice(&v9[..B / 2]);
        assert_eq!(
            verdict(3, 0, &half_new),
            Some((Verdict::TornInFlight, Some(0)))
        );
        let mut bad = v9.clone();
        bad[100] ^= 1;
        assert_eq!(verdict(3, 9, &bad), Some((Verdict::Corrupt, None)));
        let other = block(&enc, 4, 9, 8);
        assert_eq!(verdict(3, 9, &other), Some((Verdict::Misdirected, Some(9))));
        assert_eq!(verdict(3, 0, &other), Some((Verdict::Misdirected, Some(9))));
        assert_eq!(
            classify_block(RUN, 3, B, 9, &other, true)
                .unwrap()
                .found_block,
            Some(4)
        );
        assert_eq!(verdict(3, 9, &v9[..B - 1]), Some((Verdict::Missing, None)));
        assert_eq!(verdict(3, 0, &v9[..0]), None);
        // Another run's valid sectors are prior contents, not damage.
        let foreign = block(&Encoder::new(RunId(1)), 3, 99, 0);
        assert_eq!(verdict(3, 9, &foreign), Some((Verdict::LostWrite, Some(0))));
        let c = classify_block(RUN, 3, B, 9, &foreign, true).unwrap();
        assert_eq!((c.has_run_data, c.has_other_run), (false, true));
        let c = classify_block(RUN, 3, B, 9, &torn, true).unwrap();
        assert_eq!((c.has_run_data, c.has_other_run), (true, false));
    }

    #[test]
    fn a_lost_write_below_a_surviving_watermark_is_unserializable() {
        let enc = Encoder::new(RUN);
        let mut acks = AckTable::new(3);
        acks.add(10, 0, 1000);
        acks.add(11, 1, 2000);
        acks.add(12, 2, 3000);
        let mut t = Tally::default();
        // Block 0 lost its seq 10; block 1 holds seq 11, issued when 9 was the watermark.
        t.add(
            0,
            classify_block(RUN, 0, B, 10, &[0; B], true).unwrap(),
            &acks,
        );
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 9), true).unwrap(),
            &acks,
        );
        // Block 2 lost seq 12: nothing issued after it was acknowledged survived.
        t.add(
            2,
            classify_block(RUN, 2, B, 12, &block(&enc, 2, 2, 1), true).unwrap(),
            &acks,
        );
        let o = t.finish(&[]);
        assert_eq!(
            o.counts,
            VerdictCounts {
                intact: 1,
                lost_write: 2,
                ..Default::default()
            }
        );
        let mut t = Tally::default();
        t.add(
            0,
            classify_block(RUN, 0, B, 10, &[0; B], true).unwrap(),
            &acks,
        );
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10), true).unwrap(),
            &acks,
        );
        let o = t.finish(&[]);
        assert_eq!(
            o.counts,
            VerdictCounts {
                intact: 1,
                unserializable: 1,
                ..Default::default()
            }
        );
        assert_eq!(o.findings[0].acked_secs_before_end, Some(2.0));
    }

    #[test]
    fn lost_write_over_foreign_bytes_is_lost_not_corrupt() {
        let junk = [0xABu8; B];
        let c = classify_block(RUN, 3, B, 9, &junk, true).unwrap();
        assert_eq!((c.verdict, c.found_seq), (Verdict::LostWrite, Some(0)));
        assert_eq!(
            c.spans,
            vec![SectorSpan {
                first: 0,
                last: 7,
                content: Content::Foreign
            }]
        );
        assert_eq!(
            c.spans[0].content.describe(),
            "foreign bytes (no plugpull record)"
        );
        // A target that held nothing foreign when the run started: the bytes are damage.
        let c = classify_block(RUN, 3, B, 9, &junk, false).unwrap();
        assert_eq!(c.verdict, Verdict::Corrupt);
        // Foreign bytes inside a block holding this run's records are damage either way.
        let enc = Encoder::new(RUN);
        let mut mixed = block(&enc, 3, 9, 8);
        mixed[B - SECTOR..].fill(0xAB);
        let c = classify_block(RUN, 3, B, 9, &mixed, true).unwrap();
        assert_eq!(c.verdict, Verdict::Corrupt);
        assert_eq!(
            describe_spans(&c.spans),
            "sectors 0–6: seq 9; 7: foreign bytes (no plugpull record)"
        );
    }

    #[test]
    fn a_damaged_record_names_its_sector_and_flipped_bits() {
        let enc = Encoder::new(RUN);
        let mut bad = block(&enc, 3, 9, 8);
        bad[2 * SECTOR + 100] ^= 0b101; // two bits in sector 2's payload
        let c = classify_block(RUN, 3, B, 9, &bad, true).unwrap();
        assert_eq!(c.verdict, Verdict::Corrupt);
        assert_eq!(c.spans.len(), 3);
        assert_eq!(c.spans[1].first, 2);
        assert_eq!(
            c.spans[1].content,
            Content::BadCrc {
                seq: 9,
                flipped_bits: 2
            }
        );
        let mut one = block(&enc, 3, 9, 8);
        one[5 * SECTOR + 200] ^= 0x10;
        let c = classify_block(RUN, 3, B, 9, &one, true).unwrap();
        assert_eq!(
            c.spans[1],
            SectorSpan {
                first: 5,
                last: 5,
                content: Content::BadCrc {
                    seq: 9,
                    flipped_bits: 1
                }
            }
        );
        assert_eq!(
            describe_spans(&c.spans),
            "sectors 0–4: seq 9; 5: this run's record of seq 9 with a bad CRC (1 bits differ from the regenerated record); 6–7: seq 9"
        );
    }

    #[test]
    fn a_shorn_block_names_which_sectors_hold_which_seq() {
        let enc = Encoder::new(RUN);
        let mut shorn = block(&enc, 3, 9, 8);
        shorn[B / 2..].copy_from_slice(&block(&enc, 3, 5, 4)[B / 2..]);
        let mut t = Tally::default();
        let mut acks = AckTable::new(4);
        acks.add(5, 3, 100);
        acks.add(9, 3, 200);
        t.add(
            3,
            classify_block(RUN, 3, B, 9, &shorn, true).unwrap(),
            &acks,
        );
        let o = t.finish(&[]);
        assert_eq!(o.counts.torn_acknowledged, 1);
        assert_eq!(
            o.findings[0].evidence(),
            "sectors 0–3: seq 9; 4–7: seq 5 (shorn: seq 5 < acknowledged seq 9)"
        );
    }

    #[test]
    fn a_misdirected_write_is_one_fault_reported_once() {
        let enc = Encoder::new(RUN);
        let mut acks = AckTable::new(3);
        acks.add(10, 0, 1000);
        acks.add(11, 1, 2000);
        acks.add(12, 2, 3000);
        let mut t = Tally::default();
        // Block 0's acknowledged seq 10 landed on block 2 (over its seq 12); block 0
        // holds its older seq 4; block 1 holds seq 11 issued after 10 was acknowledged.
        t.add(
            0,
            classify_block(RUN, 0, B, 10, &block(&enc, 0, 4, 3), true).unwrap(),
            &acks,
        );
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10), true).unwrap(),
            &acks,
        );
        t.add(
            2,
            classify_block(RUN, 2, B, 12, &block(&enc, 0, 10, 9), true).unwrap(),
            &acks,
        );
        let o = t.finish(&[]);
        assert_eq!(
            o.counts,
            VerdictCounts {
                intact: 1,
                lost_write: 1,
                misdirected: 1,
                ..Default::default()
            }
        );
        let lost = &o.findings[0];
        assert_eq!(
            (
                lost.block,
                lost.verdict,
                lost.found_at_block,
                lost.proof.is_some()
            ),
            (0, Verdict::LostWrite, Some(2), false)
        );
        assert_eq!(
            lost.evidence(),
            "seq 4; its acknowledged write was found at block 2"
        );
        assert_eq!(
            (o.findings[1].block, o.findings[1].found_block),
            (2, Some(0))
        );
    }

    #[test]
    fn unserializable_names_the_later_write_and_only_a_later_runs_record_excuses_it() {
        let enc = Encoder::new(RUN);
        let mut acks = AckTable::new(4);
        acks.add(2, 0, 100); // block 0: an earlier acknowledged write, seq 2
        acks.add(10, 0, 1000);
        acks.add(11, 1, 2000);
        acks.add(12, 2, 3000);
        acks.add(13, 3, 3500);
        let mut t = Tally::default();
        // Block 0 holds its older seq 2: the reordering signature.
        t.add(
            0,
            classify_block(RUN, 0, B, 10, &block(&enc, 0, 2, 1), true).unwrap(),
            &acks,
        );
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10), true).unwrap(),
            &acks,
        );
        // Block 2 holds another run's record: overwritten, not reordered.
        let other = block(&Encoder::new(RunId(0x55)), 2, 40, 0);
        t.add(
            2,
            classify_block(RUN, 2, B, 12, &other, true).unwrap(),
            &acks,
        );
        let o = t.finish(&[]);
        assert_eq!(
            o.counts,
            VerdictCounts {
                intact: 1,
                lost_write: 1,
                unserializable: 1,
                ..Default::default()
            }
        );
        let u = &o.findings[0];
        assert_eq!(u.verdict, Verdict::Unserializable);
        assert_eq!(
            u.proof,
            Some(LaterWrite {
                block: 1,
                seq: 11,
                watermark: 10,
                acked_secs_before_end: Some(1.5)
            })
        );
        assert_eq!(
            u.evidence(),
            "seq 2; block 1 holds seq 11, issued after seq 10 was acknowledged (watermark 10), acknowledged 1.500 s before the end"
        );
        assert_eq!(
            (o.findings[1].verdict, o.findings[1].evidence()),
            (
                Verdict::LostWrite,
                "run 0000000000000055's record seq 40".to_string()
            )
        );
        assert_eq!(o.other_runs, vec![RunId(0x55)]);
        // Block 2 is not excused only because A = 12 > W = 10 there. With block 3's
        // seq 13 (watermark 12) surviving, W = 12: run 0x55's record on block 2 is an
        // overwrite by a later run when 0x55 was not on the target before this run
        // (lost write), and block 2's old contents when it was (the previous cut's
        // run on a reused target): then the reordering stands.
        let fill = || {
            let mut t = Tally::default();
            for (b, data) in [
                (0, block(&enc, 0, 2, 1)),
                (1, block(&enc, 1, 11, 10)),
                (2, other.clone()),
                (3, block(&enc, 3, 13, 12)),
            ] {
                t.add(
                    b,
                    classify_block(RUN, b, B, acks.seq[b as usize], &data, true).unwrap(),
                    &acks,
                );
            }
            assert_eq!(t.other_runs(), &[RunId(0x55)]);
            t
        };
        let later = fill().finish(&[]);
        assert_eq!(
            later.counts,
            VerdictCounts {
                intact: 2,
                lost_write: 1,
                unserializable: 1,
                ..Default::default()
            }
        );
        assert_eq!(later.findings[1].verdict, Verdict::LostWrite);
        let prior = fill().finish(&[RunId(0x55)]);
        assert_eq!(
            prior.counts,
            VerdictCounts {
                intact: 2,
                unserializable: 2,
                ..Default::default()
            }
        );
        assert_eq!(
            prior.findings[1].evidence(),
            "run 0000000000000055's record seq 40; block 3 holds seq 13, issued after seq 12 was acknowledged (watermark 12), acknowledged 0.000 s before the end"
        );
        // Zeros there: still unserializable, and the evidence says zeros.
        let mut t = Tally::default();
        t.add(
            0,
            classify_block(RUN, 0, B, 10, &[0; B], true).unwrap(),
            &acks,
        );
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10), true).unwrap(),
            &acks,
        );
        let o = t.finish(&[]);
        assert_eq!((o.counts.lost_write, o.counts.unserializable), (0, 1));
        assert!(o.findings[0]
            .evidence()
            .starts_with("zeros; block 1 holds seq 11"));
    }
}
