//! What a found file holds, block by block, and whether that is a state the schedule
//! allows: exactly a promised state ([`is_state`]), or what a step in flight may
//! leave ([`fits`]).

use super::schedule::{record_block, Op, Step, Unsafe, BLOCK};
use super::Found;
use crate::record::{decode_sector, Sector, SECTOR};
use crate::verdict::Content;
use crate::RunId;

/// What one block of a found file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Block {
    Seq(u64),
    Zeros,
    Damaged(Content),
}

/// Reads the whole blocks of `fd` (and a partial last one) as file `f` of `run`.
pub(super) fn decode(run: RunId, f: u32, fd: &Found) -> Vec<Block> {
    let n = fd.size.min(fd.data.len() as u64).div_ceil(BLOCK) as usize;
    (0..n)
        .map(|i| {
            let chunk = &fd.data[i * SECTOR..fd.data.len().min((i + 1) * SECTOR)];
            let Ok(s) = <&[u8; SECTOR]>::try_from(chunk) else {
                return if chunk.iter().all(|&b| b == 0) {
                    Block::Zeros
                } else {
                    Block::Damaged(Content::Foreign)
                };
            };
            match decode_sector(s) {
                Sector::Valid(h)
                    if h.run == run && h.block == record_block(f, i as u64) && h.sector == 0 =>
                {
                    Block::Seq(h.seq)
                }
                Sector::Valid(h) if h.run == run => Block::Damaged(Content::Stray {
                    block: h.block,
                    sector: h.sector,
                    seq: h.seq,
                }),
                Sector::Valid(h) => Block::Damaged(Content::OtherRun {
                    run: h.run.to_string(),
                    seq: h.seq,
                }),
                Sector::Blank => Block::Zeros,
                Sector::Invalid(_) => Block::Damaged(Content::Foreign),
            }
        })
        .collect()
}

/// The newest seq among `blocks`' valid records (0: none).
pub(super) fn newest(blocks: &[Block]) -> u64 {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::Seq(s) => Some(*s),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// Whether the found `blocks` (size `size`) are exactly `state`.
pub(super) fn is_state(size: u64, blocks: &[Block], state: Option<&[u64]>) -> bool {
    match state {
        None => false,
        Some(s) => {
            size == s.len() as u64 * BLOCK
                && blocks.len() == s.len()
                && blocks.iter().zip(s).all(|(b, &e)| *b == Block::Seq(e))
        }
    }
}

/// Whether `found` is a state step `st` may leave when it began from `prev` and was
/// in flight at the cut (done, not done, or partly done; `u` says which calls the run
/// skips).
///
/// A create or append may be partly done: the size between the old and the new, the
/// new blocks holding the step's records or zeros. A truncate is applied in one step
/// (ext4, XFS and simfs set the size at once): the old state, or the target size with
/// the blocks below it as they were. A replace leaves the old state or the new one; when
/// it skips the fsync of `NAME.tmp` (`presync`), the new content may be partly written as
/// a create's. An unlink leaves the old state or no name.
pub(super) fn fits(
    prev: Option<&[u64]>,
    st: &Step,
    u: Unsafe,
    found: Option<(u64, &[Block])>,
) -> bool {
    let Some((size, blocks)) = found else {
        return prev.is_none() || st.op == Op::Unlink;
    };
    let old = prev.unwrap_or(&[]);
    let bounds =
        |lo: u64, hi: u64| size.is_multiple_of(BLOCK) && (lo..=hi).contains(&(size / BLOCK));
    let keeps_old = |n: usize| {
        blocks
            .iter()
            .zip(old)
            .take(n)
            .all(|(b, &e)| *b == Block::Seq(e))
    };
    let new_or_zero = |from: usize| {
        blocks[from.min(blocks.len())..]
            .iter()
            .all(|b| matches!(b, Block::Zeros) || *b == Block::Seq(st.seq))
    };
    match st.op {
        Op::Create => bounds(0, st.to) && new_or_zero(0),
        Op::Append => bounds(st.from, st.to) && keeps_old(old.len()) && new_or_zero(old.len()),
        Op::Truncate => {
            is_state(size, blocks, prev) || is_state(size, blocks, old.get(..st.to as usize))
        }
        Op::Replace => {
            is_state(size, blocks, prev)
                || is_state(size, blocks, Some(&vec![st.seq; st.to as usize]))
                || u.presync && bounds(0, st.to) && new_or_zero(0)
        }
        Op::Unlink => is_state(size, blocks, prev),
    }
}

/// What the blocks hold in words: `blocks 0–3: seq 7; 4: zeros`.
pub(super) fn describe(blocks: &[Block]) -> String {
    if blocks.is_empty() {
        return "empty".into();
    }
    let contents: Vec<Content> = blocks
        .iter()
        .map(|b| match b {
            Block::Seq(seq) => Content::Seq { seq: *seq },
            Block::Zeros => Content::Zeros,
            Block::Damaged(c) => c.clone(),
        })
        .collect();
    let spans = crate::verdict::file::merge_spans(&contents);
    let text = crate::verdict::describe_spans(&spans);
    if spans.len() == 1 {
        format!("every block {text}")
    } else {
        text.replacen("sectors", "blocks", 1)
    }
}
