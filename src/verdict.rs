//! The verdict engine of the file workload: what survived, block by block.
//!
//! Taxonomy after Zheng et al., "Understanding the Robustness of SSDs under Power
//! Fault" (FAST 2013), as tabled in DESIGN.md. For block `b`, `A` is the highest
//! acknowledged sequence number the ledger holds for it (0 = never acknowledged).
//! Each sector is read as *valid for this run* (magic, CRC, run id match), *prior*
//! (zeros, or a valid sector of another run: contents from before the run) or
//! *invalid*. Then, first rule that applies:
//!
//! 1. the block lies (partly) beyond the end of the target and `A > 0` → **missing**;
//! 2. a valid sector of this run names another block, sector index or block size → **misdirected**;
//! 3. `A > 0` and a sector is invalid → **corrupt**;
//! 4. every sector carries one seq `s` (prior contents count as seq 0): `s ≥ A` → **intact**
//!    (`s > A`: a write in flight at the cut survived), `s < A` → **lost write**;
//! 5. sectors carry different seqs: the oldest `< A` → **torn acknowledged** (shorn),
//!    else → **torn in flight** (a mix of `A` and a newer, unacknowledged write).
//!
//! Afterwards a lost write with `A ≤ W` is re-labelled **unserializable**, where `W` is
//! the highest acknowledged watermark carried by any surviving sector of this run:
//! a write issued after `A` had been acknowledged survived while `A` did not, so the
//! device reordered across a flush. A block with `A = 0` and no sector of this run
//! was never written and is not checked. Blocks with `A = 0` cannot fail except by
//! rule 2: their invalid sectors are taken as prior contents.

use crate::record::{decode_sector, Sector, SECTOR};
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

/// The classification of one block before the unserializable pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// True when the block holds a seq above `A` (a write in flight survived).
    pub newer_than_acked: bool,
    /// True when some sector is a valid record of this run (wherever it belongs).
    pub has_run_data: bool,
    /// True when some sector is a valid record of another run.
    pub has_other_run: bool,
}

/// Classifies one block by rules 1–5 of the module doc. `data` holds what could be
/// read of the block (shorter than `block_size` when the target ends inside it);
/// `acked` is `A`. Returns `None` for a block never written by the run.
pub fn classify_block(
    run: RunId,
    block: u64,
    block_size: usize,
    acked: u64,
    data: &[u8],
) -> Option<BlockCheck> {
    let spb = (block_size / SECTOR) as u32;
    if data.len() < block_size {
        return (acked > 0).then_some(BlockCheck {
            verdict: Verdict::Missing,
            found_seq: None,
            found_block: None,
            watermark: 0,
            newer_than_acked: false,
            has_run_data: false,
            has_other_run: false,
        });
    }
    let mut misplaced = false;
    let mut stray: Option<(u64, u64)> = None;
    let mut invalid = false;
    let mut ours = false;
    let mut other = false;
    let mut min = u64::MAX;
    let mut max = 0u64;
    let mut watermark = 0u64;
    for (i, s) in data[..block_size].chunks_exact(SECTOR).enumerate() {
        let seq = match decode_sector(s.try_into().unwrap()) {
            Sector::Valid(h) if h.run == run => {
                ours = true;
                if h.block != block || h.sector != i as u32 || h.sectors_per_block != spb {
                    misplaced = true;
                    stray.get_or_insert((h.block, h.seq));
                    continue;
                }
                watermark = watermark.max(h.watermark);
                h.seq
            }
            Sector::Valid(_) => {
                other = true;
                0
            }
            Sector::Blank => 0,
            Sector::Invalid(_) => {
                invalid = true;
                0
            }
        };
        min = min.min(seq);
        max = max.max(seq);
    }
    if acked == 0 && !ours {
        return None;
    }
    let (verdict, found_seq) = if misplaced {
        (Verdict::Misdirected, stray.map(|(_, seq)| seq))
    } else if acked > 0 && invalid {
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
        found_block: stray.map(|(b, _)| b),
        watermark,
        newer_than_acked: !misplaced && max > acked,
        has_run_data: ours,
        has_other_run: other,
    })
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
}

/// Accumulates block checks into counts and findings (the unserializable pass runs
/// in [`Tally::finish`]).
#[derive(Debug, Default)]
pub struct Tally {
    counts: VerdictCounts,
    checked: u64,
    in_flight_survived: u64,
    max_watermark: u64,
    run_data_blocks: u64,
    other_run_blocks: u64,
    findings: Vec<Finding>,
}

/// The result of checking every block.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
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
    /// Every failed block, by block index.
    pub findings: Vec<Finding>,
}

impl Tally {
    /// Adds the check of `block`; `acks` supplies `A` and its time.
    pub fn add(&mut self, block: u64, check: BlockCheck, acks: &AckTable) {
        self.checked += 1;
        self.run_data_blocks += check.has_run_data as u64;
        self.other_run_blocks += check.has_other_run as u64;
        self.max_watermark = self.max_watermark.max(check.watermark);
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
                acked_secs_before_end: (acks.seq[i] > 0)
                    .then(|| (acks.end_ms - acks.ms[i]) as f64 / 1000.0),
            });
        } else {
            *self.counts.get_mut(check.verdict) += 1;
        }
    }

    /// Runs the unserializable pass and returns the outcome.
    pub fn finish(mut self) -> Outcome {
        for f in &mut self.findings {
            if f.verdict == Verdict::LostWrite && f.expected_seq <= self.max_watermark {
                f.verdict = Verdict::Unserializable;
            }
            *self.counts.get_mut(f.verdict) += 1;
        }
        Outcome {
            counts: self.counts,
            checked: self.checked,
            in_flight_survived: self.in_flight_survived,
            max_watermark: self.max_watermark,
            run_data_blocks: self.run_data_blocks,
            other_run_blocks: self.other_run_blocks,
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
        classify_block(RUN, b, B, acked, data).map(|c| (c.verdict, c.found_seq))
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
            classify_block(RUN, 3, B, 9, &other).unwrap().found_block,
            Some(4)
        );
        assert_eq!(verdict(3, 9, &v9[..B - 1]), Some((Verdict::Missing, None)));
        assert_eq!(verdict(3, 0, &v9[..0]), None);
        // Another run's valid sectors are prior contents, not damage.
        let foreign = block(&Encoder::new(RunId(1)), 3, 99, 0);
        assert_eq!(verdict(3, 9, &foreign), Some((Verdict::LostWrite, Some(0))));
        let c = classify_block(RUN, 3, B, 9, &foreign).unwrap();
        assert_eq!((c.has_run_data, c.has_other_run), (false, true));
        let c = classify_block(RUN, 3, B, 9, &torn).unwrap();
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
        t.add(0, classify_block(RUN, 0, B, 10, &[0; B]).unwrap(), &acks);
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 9)).unwrap(),
            &acks,
        );
        // Block 2 lost seq 12: nothing issued after it was acknowledged survived.
        t.add(
            2,
            classify_block(RUN, 2, B, 12, &block(&enc, 2, 2, 1)).unwrap(),
            &acks,
        );
        let o = t.finish();
        assert_eq!(
            o.counts,
            VerdictCounts {
                intact: 1,
                lost_write: 2,
                ..Default::default()
            }
        );
        let mut t = Tally::default();
        t.add(0, classify_block(RUN, 0, B, 10, &[0; B]).unwrap(), &acks);
        t.add(
            1,
            classify_block(RUN, 1, B, 11, &block(&enc, 1, 11, 10)).unwrap(),
            &acks,
        );
        let o = t.finish();
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
}
