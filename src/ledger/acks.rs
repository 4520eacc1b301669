//! The acknowledged state of a file run's blocks, built from its ledger: for each block
//! the highest acknowledged seq (`A`) and when it was acknowledged.

use std::collections::HashMap;

/// Bytes a block takes in the map of blocks written (its key, seq and time, with the
/// map's spare room and control byte), and in the table over every block.
const MAP_BYTES: u64 = 28;
const TABLE_BYTES: u64 = 12;

/// Acknowledged state of the blocks of a file run's target, built from its ledger: a
/// map of the blocks written while it is smaller than a table over every block of the
/// target (12 bytes per block), that table once it would not be; so its memory is
/// bounded by the blocks written and by the target's blocks, whichever is fewer (a
/// 16 GiB target of 4 KiB blocks needs no 50 MB table for a short run).
#[derive(Clone, Debug)]
pub struct AckTable {
    blocks: u64,
    table: Table,
    /// Acknowledgements seen (each confirmed ack once).
    pub acknowledged: u64,
    /// Latest acknowledgement time, ms after the run's start.
    pub end_ms: u32,
}

#[derive(Clone, Debug)]
enum Table {
    /// Block → (highest acknowledged seq, ms of its acknowledgement).
    Map(HashMap<u64, (u64, u32)>),
    /// Highest acknowledged seq (0 = none) and its ms, per block of the target.
    Every { seq: Vec<u64>, ms: Vec<u32> },
}

impl AckTable {
    /// An empty table for `blocks` blocks.
    pub fn new(blocks: u64) -> Self {
        AckTable {
            blocks,
            table: Table::Map(HashMap::default()),
            acknowledged: 0,
            end_ms: 0,
        }
    }

    /// Records an ack. Returns false (and ignores it) when `block` is out of range.
    pub fn add(&mut self, seq: u64, block: u64, ms: u32) -> bool {
        if block >= self.blocks {
            return false;
        }
        self.acknowledged += 1;
        self.end_ms = self.end_ms.max(ms);
        match &mut self.table {
            Table::Map(m) => {
                let e = m.entry(block).or_insert((0, 0));
                if seq > e.0 {
                    *e = (seq, ms);
                }
                if m.len() as u64 * MAP_BYTES > self.blocks * TABLE_BYTES {
                    self.cover_every_block();
                }
            }
            Table::Every { seq: s, ms: t } => {
                let i = block as usize;
                if seq > s[i] {
                    s[i] = seq;
                    t[i] = ms;
                }
            }
        }
        true
    }

    /// The map of blocks written turned into the table over every block.
    fn cover_every_block(&mut self) {
        let n = self.blocks as usize;
        let (mut seq, mut ms) = (vec![0; n], vec![0; n]);
        if let Table::Map(m) = &self.table {
            for (&b, &(s, t)) in m {
                seq[b as usize] = s;
                ms[b as usize] = t;
            }
        }
        self.table = Table::Every { seq, ms };
    }

    /// The highest acknowledged seq of `block` (`A`; 0 = none, or no such block).
    pub fn seq(&self, block: u64) -> u64 {
        self.entry(block).0
    }

    /// When `block`'s highest acknowledged seq was acknowledged, ms after the run's
    /// start; `None` when the block has no acknowledged write.
    pub fn acked_ms(&self, block: u64) -> Option<u32> {
        let (seq, ms) = self.entry(block);
        (seq > 0).then_some(ms)
    }

    /// Every block with an acknowledged write (a seq above 0), in no order.
    pub fn acked_blocks(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match &self.table {
            Table::Map(m) => Box::new(m.iter().filter(|(_, e)| e.0 > 0).map(|(&b, _)| b)),
            Table::Every { seq, .. } => Box::new(
                seq.iter()
                    .enumerate()
                    .filter(|(_, &s)| s > 0)
                    .map(|(b, _)| b as u64),
            ),
        }
    }

    fn entry(&self, block: u64) -> (u64, u32) {
        match &self.table {
            Table::Map(m) => m.get(&block).copied().unwrap_or((0, 0)),
            Table::Every { seq, ms } => {
                let i = block as usize;
                seq.get(i).map_or((0, 0), |&s| (s, ms[i]))
            }
        }
    }

    /// How long before the run's last acknowledgement (`end_ms`) `block`'s highest
    /// acknowledged seq was acknowledged, seconds; `None` when the block has none.
    pub fn secs_before_end(&self, block: u64) -> Option<f64> {
        self.acked_ms(block)
            .map(|ms| (self.end_ms - ms) as f64 / 1000.0)
    }
}

#[cfg(test)]
impl AckTable {
    /// Whether the table covers every block of the target (else it maps the written
    /// ones).
    pub(crate) fn covers_every_block(&self) -> bool {
        matches!(self.table, Table::Every { .. })
    }
}
