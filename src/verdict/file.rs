//! The rules of the file workload: what survived, block by block.
//!
//! Taxonomy after Zheng et al., "Understanding the Robustness of SSDs under Power
//! Fault" (FAST 2013), as tabled in the README ("Verdicts (file workload)"). For
//! block `b`, `A` is the highest acknowledged sequence number the ledger holds for it
//! (0 = never acknowledged).
//! Each sector is read as one [`Content`]: a valid record of this run (in place, or a
//! *stray* written for another place), *zeros*, *another run's* valid record,
//! *our record with a bad CRC* (magic and run id are ours), or *foreign bytes*.
//! Zeros, other runs' records and — on a block holding nothing of this run, of a
//! target that may have held foreign data — foreign bytes are *prior contents*.
//! Then, first rule that applies:
//!
//! 1. the block lies (partly) beyond the end of the target and `A > 0` → **missing**
//!    (its whole sectors before the end are read and named, the rest are
//!    [`Content::BeyondEnd`]);
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
//! checked. Blocks with `A = 0` cannot fail except by rule 2 — or, when the run
//! expects atomic writes (`--expect-atomic`, [`Tally::expecting_atomic`]), by a
//! **torn in flight** verdict, which is then a failure: the device tore a write it
//! claimed to write atomically.
//!
//! Every finding carries its evidence: the sector ranges and what each holds, the
//! flipped-bit count of a damaged record, where a misdirected write went, and the
//! surviving write that proves an unserializable one.

use super::{Classification, Content, Finding, LaterWrite, SectorSpan, Verdict, VerdictCounts};
use crate::record::{decode_sector, Encoder, InvalidReason, Sector, SectorHeader, SECTOR};
use crate::RunId;

pub use crate::ledger::AckTable;

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
    /// The highest seq among the block's valid, correctly placed sectors of the run
    /// (0 = none).
    pub newest_seq: u64,
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
        // Rule 1.
        return (acked > 0).then(|| cut_short(run, block, spb, data));
    }
    let scan = SectorScan::read(run, block, spb, &data[..block_size]);
    if acked == 0 && !scan.ours {
        return None;
    }
    let (min, max) = scan.seq_range();
    let (verdict, found_seq) = scan.verdict(acked, prior_foreign, min, max);
    let spans = merge_spans(&scan.contents);
    Some(BlockCheck {
        verdict,
        found_seq,
        found_block: scan.strays.first().map(|&(b, _)| b),
        watermark: scan.watermark,
        watermark_seq: scan.watermark_seq,
        newer_than_acked: scan.strays.is_empty() && max > acked && max != u64::MAX,
        newest_seq: if max == u64::MAX { 0 } else { max },
        has_run_data: scan.ours,
        has_other_run: !scan.other_runs.is_empty(),
        other_runs: scan.other_runs,
        spans,
        strays: scan.strays,
    })
}

/// The check of a block that lies (partly) beyond the end of the target: missing,
/// with what its whole sectors still before the end hold (`data`, shorter than the
/// block) and the rest [`Content::BeyondEnd`]. A block wholly beyond the end has no
/// spans. Its records of the run count as the run's data, so a target cut short
/// inside its last block is never said to hold nothing of the run.
fn cut_short(run: RunId, block: u64, spb: u32, data: &[u8]) -> BlockCheck {
    let whole = data.len() / SECTOR * SECTOR;
    let scan = SectorScan::read(run, block, spb, &data[..whole]);
    let mut contents = scan.contents;
    let spans = if contents.is_empty() {
        Vec::new()
    } else {
        contents.resize(spb as usize, Content::BeyondEnd);
        merge_spans(&contents)
    };
    BlockCheck {
        verdict: Verdict::Missing,
        found_seq: None,
        found_block: scan.strays.first().map(|&(b, _)| b),
        // A block cut short takes no part in the unserializable pass.
        watermark: 0,
        watermark_seq: 0,
        newer_than_acked: false,
        newest_seq: 0,
        has_run_data: scan.ours,
        has_other_run: !scan.other_runs.is_empty(),
        other_runs: scan.other_runs,
        spans,
        strays: scan.strays,
    }
}

/// What the sectors of one whole block hold, read one by one: the facts rules 2–5
/// decide on.
struct SectorScan {
    /// What each sector holds, in order.
    contents: Vec<Content>,
    /// Valid records of the run written for another place: (block written for, seq).
    strays: Vec<(u64, u64)>,
    /// Some sector is a valid record of this run (in place or stray).
    ours: bool,
    /// Some sector is this run's record with a bad CRC.
    bad_crc_ours: bool,
    /// Some sector holds foreign bytes.
    foreign: bool,
    /// Other runs whose valid records the block holds, in the order first seen.
    other_runs: Vec<RunId>,
    /// Highest watermark among the run's correctly placed records (0 = none).
    watermark: u64,
    /// The seq of the (last) record carrying it.
    watermark_seq: u64,
}

impl SectorScan {
    /// Reads `sectors` (exactly one block) as block `block` of `run`.
    /// Reads the whole sectors `sectors` of block `block` (a block of `spb`
    /// sectors; `sectors` may hold fewer when the target ends inside the block).
    fn read(run: RunId, block: u64, spb: u32, sectors: &[u8]) -> Self {
        let mut scan = SectorScan {
            contents: Vec::with_capacity(spb as usize),
            strays: Vec::new(),
            ours: false,
            bad_crc_ours: false,
            foreign: false,
            other_runs: Vec::new(),
            watermark: 0,
            watermark_seq: 0,
        };
        for (i, s) in sectors.chunks_exact(SECTOR).enumerate() {
            let s: &[u8; SECTOR] = s.try_into().unwrap();
            let c = match decode_sector(s) {
                Sector::Valid(h) if h.run == run => {
                    scan.ours = true;
                    if h.block != block || h.sector != i as u32 || h.sectors_per_block != spb {
                        scan.strays.push((h.block, h.seq));
                        Content::Stray {
                            block: h.block,
                            sector: h.sector,
                            seq: h.seq,
                        }
                    } else {
                        if h.watermark >= scan.watermark {
                            scan.watermark = h.watermark;
                            scan.watermark_seq = h.seq;
                        }
                        Content::Seq { seq: h.seq }
                    }
                }
                Sector::Valid(h) => {
                    if !scan.other_runs.contains(&h.run) {
                        scan.other_runs.push(h.run);
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
                    scan.bad_crc_ours = true;
                    Content::BadCrc {
                        seq: raw_header(s).4,
                        flipped_bits: flipped_bits(run, s),
                    }
                }
                Sector::Invalid(_) => {
                    scan.foreign = true;
                    Content::Foreign
                }
            };
            scan.contents.push(c);
        }
        scan
    }

    /// The lowest and highest seq among the sectors that carry one: prior contents
    /// (zeros, other runs, foreign bytes taken as prior) count as seq 0; damaged and
    /// stray records carry none. `(u64::MAX, 0)` when no sector does.
    fn seq_range(&self) -> (u64, u64) {
        let seqs = self.contents.iter().filter_map(|c| match c {
            Content::Seq { seq } => Some(*seq),
            Content::Zeros | Content::OtherRun { .. } | Content::Foreign => Some(0),
            Content::BadCrc { .. } | Content::Stray { .. } | Content::BeyondEnd => None,
        });
        seqs.fold((u64::MAX, 0u64), |(lo, hi), s| (lo.min(s), hi.max(s)))
    }

    /// Rules 2–5 of the module doc on a block inside the target whose acknowledged
    /// seq is `acked`, given its [`SectorScan::seq_range`] `min ..= max`: the verdict
    /// and the seq found (see [`BlockCheck::found_seq`]).
    fn verdict(
        &self,
        acked: u64,
        prior_foreign: bool,
        min: u64,
        max: u64,
    ) -> (Verdict, Option<u64>) {
        // Foreign bytes are prior contents only on a block holding nothing of this
        // run, of a target that may have held foreign data.
        let foreign_is_damage = self.foreign && (self.ours || self.bad_crc_ours || !prior_foreign);
        if let Some(&(_, seq)) = self.strays.first() {
            (Verdict::Misdirected, Some(seq))
        } else if acked > 0 && (self.bad_crc_ours || foreign_is_damage) {
            (Verdict::Corrupt, None)
        } else if min == max {
            let verdict = if min >= acked {
                Verdict::Intact
            } else {
                Verdict::LostWrite
            };
            (verdict, Some(min))
        } else if min < acked {
            (Verdict::TornAcknowledged, Some(min))
        } else {
            (Verdict::TornInFlight, Some(min))
        }
    }
}

/// What each sector holds, consecutive equal sectors merged into one span.
pub(crate) fn merge_spans(contents: &[Content]) -> Vec<SectorSpan> {
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
    spans
}

/// Accumulates block checks into counts and findings (the unserializable pass runs
/// in [`Tally::finish`]).
#[derive(Debug, Default)]
pub struct Tally {
    counts: VerdictCounts,
    checked: u64,
    /// The newest seq of each block holding a write newer than its acknowledged one.
    in_flight_seqs: Vec<u64>,
    max_watermark: u64,
    witness: Option<LaterWrite>,
    run_data_blocks: u64,
    other_run_blocks: u64,
    other_runs: Vec<RunId>,
    /// Stray records of the run: (block written for, seq, block found at).
    strays: Vec<(u64, u64, u64)>,
    findings: Vec<Finding>,
    /// Whether a block torn in flight is a failure (`--expect-atomic`).
    expect_atomic: bool,
}

impl Tally {
    /// An empty tally; with `expect_atomic`, a block torn by a write in flight is a
    /// failure (a finding) instead of a harmless verdict.
    pub fn expecting_atomic(expect_atomic: bool) -> Self {
        Tally {
            expect_atomic,
            ..Tally::default()
        }
    }

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
            self.witness = Some(LaterWrite {
                block,
                seq: check.watermark_seq,
                watermark: check.watermark,
                acked_secs_before_end: (acks.seq(block) == check.watermark_seq)
                    .then(|| acks.secs_before_end(block))
                    .flatten(),
            });
        }
        if check.newer_than_acked {
            self.in_flight_seqs.push(check.newest_seq);
        }
        if check.verdict.fails(self.expect_atomic) {
            self.findings.push(Finding {
                block,
                verdict: check.verdict,
                expected_seq: acks.seq(block),
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

    /// Adds `later`, the tally of blocks that all come after this tally's blocks (the
    /// next range of the target, checked apart, on another thread): the result is the
    /// tally of every block of both added in block order, so ranges checked apart and
    /// merged in order finish exactly as one pass over the target. The proof of an
    /// unserializable write stays the first block carrying the highest watermark.
    pub fn merge(&mut self, later: Tally) {
        for (v, n) in later.counts.iter() {
            *self.counts.get_mut(v) += n;
        }
        self.checked += later.checked;
        self.in_flight_seqs.extend(later.in_flight_seqs);
        if later.max_watermark > self.max_watermark {
            self.max_watermark = later.max_watermark;
            self.witness = later.witness;
        }
        self.run_data_blocks += later.run_data_blocks;
        self.other_run_blocks += later.other_run_blocks;
        for r in later.other_runs {
            if !self.other_runs.contains(&r) {
                self.other_runs.push(r);
            }
        }
        self.strays.extend(later.strays);
        self.findings.extend(later.findings);
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
            expect_atomic: self.expect_atomic,
            counts: self.counts,
            checked: self.checked,
            // A write whose seq a surviving sector's watermark covers had its
            // durability call return before that sector's write was issued.
            in_flight_survived: self
                .in_flight_seqs
                .iter()
                .filter(|&&s| s > self.max_watermark)
                .count() as u64,
            max_watermark: self.max_watermark,
            run_data_blocks: self.run_data_blocks,
            other_run_blocks: self.other_run_blocks,
            other_runs: self.other_runs,
            findings: self.findings,
        }
    }
}

#[cfg(test)]
mod tests;
