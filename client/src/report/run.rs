//! The data `plugpull report` draws, gathered from the run's ledger and the report
//! `verify` made of it: acknowledgement times binned into rates, the target's blocks
//! binned into a map coloured by verdict class, lost commits per client. Nothing here
//! judges a block or a commit again: the verdicts are the report's.

use plugpull::ledger::RunLedger;
use plugpull::report::{FileReport, PgReport};
use plugpull::verdict::Verdict;

/// At most this many bars in a rate timeline (a long run gets wider bins).
pub const MAX_RATE_BINS: usize = 120;
/// The bin widths a timeline may use, ms: the narrowest giving at most
/// [`MAX_RATE_BINS`] bins is taken.
const BIN_WIDTHS_MS: [u64; 15] = [
    10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000, 300_000, 600_000,
    3_600_000,
];
/// At most this many cells in the target map (a large target gets more blocks per cell).
pub const MAX_MAP_CELLS: usize = 1024;

/// Acknowledgements of a run over time.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Width of one bin, seconds (10 ms to an hour).
    pub bin_secs: f64,
    /// Acknowledgements per second in each bin (count in the bin / `bin_secs`), from
    /// the run's start.
    pub rates: Vec<f64>,
    /// The run's end, seconds after its start: the device error that ended it, else
    /// its last acknowledgement (a cut comes right after it).
    pub end_secs: f64,
    /// What `end_secs` is, in words (`last acknowledgement` or `device error`).
    pub end_label: String,
}

/// Bins `acks` ((ms after the run's start, acknowledgements at that time)) into at
/// most [`MAX_RATE_BINS`] bins of the narrowest width of 10 ms, 20 ms, 50 ms, … 1 s,
/// 2 s, … that fits; `end_ms` (ms after the start) is the run's end, `end_label`
/// what it is.
pub fn timeline(acks: &[(u32, u64)], end_ms: u32, end_label: &str) -> Timeline {
    let span = acks.iter().map(|a| a.0).max().unwrap_or(0).max(end_ms) as u64 + 1;
    let width = BIN_WIDTHS_MS
        .iter()
        .copied()
        .find(|w| span.div_ceil(*w) <= MAX_RATE_BINS as u64)
        .unwrap_or_else(|| span.div_ceil(MAX_RATE_BINS as u64));
    let bins = span.div_ceil(width) as usize;
    let mut counts = vec![0u64; bins];
    for &(ms, n) in acks {
        counts[(ms as u64 / width) as usize] += n;
    }
    let bin_secs = width as f64 / 1000.0;
    Timeline {
        bin_secs,
        rates: counts.iter().map(|&c| c as f64 / bin_secs).collect(),
        end_secs: end_ms as f64 / 1000.0,
        end_label: end_label.into(),
    }
}

/// A verdict class of the target map, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Acknowledged data gone: lost, unserializable (lost across a flush) or missing.
    Lost,
    /// A sector's CRC or header invalid.
    Corrupt,
    /// A sector belonging to another block.
    Misdirected,
    /// Sectors mixing seqs, some older than the acknowledged one.
    Torn,
    /// Acknowledged and found whole (a torn in-flight write counts here: no failure).
    Intact,
    /// Nothing acknowledged for these blocks.
    NotWritten,
}

impl Class {
    /// Every class, worst first (the legend's order).
    pub const ALL: [Class; 6] = [
        Class::Lost,
        Class::Corrupt,
        Class::Misdirected,
        Class::Torn,
        Class::Intact,
        Class::NotWritten,
    ];

    /// The class's name in the legend.
    pub fn name(self) -> &'static str {
        match self {
            Class::Lost => "lost",
            Class::Corrupt => "corrupt",
            Class::Misdirected => "misdirected",
            Class::Torn => "torn",
            Class::Intact => "intact",
            Class::NotWritten => "not written",
        }
    }

    /// The class of a failed block's verdict.
    pub fn of(v: Verdict) -> Class {
        match v {
            Verdict::Corrupt => Class::Corrupt,
            Verdict::Misdirected => Class::Misdirected,
            Verdict::TornAcknowledged => Class::Torn,
            Verdict::Intact | Verdict::TornInFlight => Class::Intact,
            Verdict::LostWrite | Verdict::Unserializable | Verdict::Missing => Class::Lost,
        }
    }
}

/// One square of the map: the worst class of its blocks, and how many of its
/// acknowledged blocks failed (the share its colour shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The worst class among its blocks.
    pub class: Class,
    /// Its failed blocks.
    pub failed: u32,
    /// Its acknowledged blocks (distinct), failed or not.
    pub acked: u32,
}

impl Cell {
    /// The share of its acknowledged blocks that failed, 0.0–1.0.
    pub fn share(&self) -> f64 {
        f64::from(self.failed) / f64::from(self.acked.max(self.failed).max(1))
    }
}

/// The target as cells of consecutive blocks, each of the worst class of its blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockMap {
    /// Blocks per cell (the last cell may hold fewer).
    pub blocks_per_cell: u64,
    /// One cell per run of blocks, from block 0.
    pub cells: Vec<Cell>,
    /// Failed blocks the report lists but did not place (its list is capped); 0 when
    /// every failed block is on the map.
    pub unplaced_failures: u64,
}

/// The map of a target of `blocks` blocks: `acked` are the acknowledged blocks,
/// `failed` the report's failed blocks with their verdicts, `failures_total` how many
/// failed in all (the report's list may be shorter).
pub fn block_map(
    blocks: u64,
    acked: impl IntoIterator<Item = u64>,
    failed: &[(u64, Verdict)],
    failures_total: u64,
) -> BlockMap {
    let per = blocks.div_ceil(MAX_MAP_CELLS as u64).max(1);
    let n = blocks.div_ceil(per) as usize;
    let empty = Cell {
        class: Class::NotWritten,
        failed: 0,
        acked: 0,
    };
    let mut cells = vec![empty; n];
    // A block is acknowledged many times; each counts once. Sorted and deduplicated
    // from the run's acknowledgements, so the memory is the run's, not the target's
    // (a bitmap of a multi-terabyte device would be gigabytes).
    let mut acked: Vec<u64> = acked.into_iter().filter(|&b| b < blocks).collect();
    acked.sort_unstable();
    acked.dedup();
    for b in acked {
        if let Some(cell) = cells.get_mut((b / per) as usize) {
            cell.class = cell.class.min(Class::Intact);
            cell.acked += 1;
        }
    }
    for &(b, v) in failed {
        if let Some(cell) = cells.get_mut((b / per) as usize) {
            cell.class = cell.class.min(Class::of(v));
            cell.failed += u32::from(Class::of(v) != Class::Intact);
        }
    }
    BlockMap {
        blocks_per_cell: per,
        cells,
        unplaced_failures: failures_total.saturating_sub(failed.len() as u64),
    }
}

/// Acknowledgements of a ledger: (ms after the run's start, count), one pair per
/// millisecond and kind that holds any (per second, at its last such millisecond,
/// for the seconds the ledger's clock keeps per second: [`plugpull::ledger::AckClock`];
/// the timeline's bins are then whole seconds). A pgbench range counts all its
/// commits at the time of its last.
pub fn ack_times(l: &RunLedger) -> Vec<(u32, u64)> {
    l.clock.iter().chain(l.pg_clock.iter()).collect()
}

/// The run's end in ms after its start, and what it is: the device error that ended
/// it, else its last acknowledgement.
pub fn run_end(l: &RunLedger, acks: &[(u32, u64)]) -> (u32, &'static str) {
    match &l.device_error {
        Some(d) => (d.ms.min(u32::MAX as u64) as u32, "device error"),
        None => (
            acks.iter().map(|a| a.0).max().unwrap_or(0),
            "last acknowledgement",
        ),
    }
}

/// The map of a file run's target from its ledger and report (every failed block
/// the verdict engine found, not only the report's capped list of findings).
pub fn file_map(l: &RunLedger, r: &FileReport) -> BlockMap {
    let acked = l.file_acks.iter().flat_map(|f| f.table.acked_blocks());
    let total = r.failures();
    if r.failed_blocks.len() as u64 == total {
        return block_map(r.blocks, acked, &r.failed_blocks, total);
    }
    // A report without the whole list (read back from JSON): its capped findings.
    let failed: Vec<(u64, Verdict)> = r.findings.iter().map(|f| (f.block, f.verdict)).collect();
    block_map(r.blocks, acked, &failed, total)
}

/// Lost commits per client (index = client number, over the run's clients) from a
/// pgbench report's per-client counts.
pub fn lost_per_client(r: &PgReport) -> Vec<u64> {
    let mut per = vec![0u64; r.clients as usize];
    for &(c, n) in &r.lost_commits_by_client {
        if per.len() <= c as usize {
            per.resize(c as usize + 1, 0);
        }
        per[c as usize] = n;
    }
    per
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_binned_per_second_and_long_runs_get_wider_bins() {
        let t = timeline(&[(0, 1), (999, 1), (1000, 3), (2500, 2)], 2600, "cut");
        assert_eq!(t.bin_secs, 0.05);
        assert_eq!(t.rates.len(), 53);
        assert_eq!(
            (t.rates[0], t.rates[19], t.rates[20], t.rates[50]),
            (20.0, 20.0, 60.0, 40.0)
        );
        assert_eq!(t.end_secs, 2.6);
        let long = timeline(&[(0, 10), (599_999, 5)], 599_999, "cut");
        assert_eq!(long.bin_secs, 5.0);
        assert_eq!(long.rates.len(), 120);
        assert_eq!((long.rates[0], long.rates[119]), (2.0, 1.0));
    }

    #[test]
    fn lost_commits_are_spread_over_every_client_of_the_run() {
        let r = PgReport {
            clients: 4,
            lost_commits: 7,
            lost_commits_by_client: vec![(1, 3), (3, 4)],
            ..Default::default()
        };
        assert_eq!(lost_per_client(&r), vec![0, 3, 0, 4]);
    }

    #[test]
    fn a_cell_takes_the_worst_class_of_its_blocks() {
        let m = block_map(
            4096,
            [0, 5, 9, 4095],
            &[(5, Verdict::TornAcknowledged), (9, Verdict::Unserializable)],
            3,
        );
        assert_eq!(m.blocks_per_cell, 4);
        assert_eq!(m.cells.len(), 1024);
        let cell = |class, failed, acked| Cell {
            class,
            failed,
            acked,
        };
        assert_eq!(m.cells[0], cell(Class::Intact, 0, 1));
        assert_eq!(m.cells[1], cell(Class::Torn, 1, 1));
        assert_eq!(m.cells[2], cell(Class::Lost, 1, 1));
        assert_eq!(m.cells[3], cell(Class::NotWritten, 0, 0));
        assert_eq!(m.cells[1023], cell(Class::Intact, 0, 1));
        assert_eq!(m.unplaced_failures, 1);
        assert_eq!(block_map(10, [], &[], 0).cells.len(), 10);
    }

    /// A square's share counts each acknowledged block once, however often it was
    /// written: 1 of 4 lost is a quarter, not 1 of 9 acknowledgements.
    #[test]
    fn a_cell_counts_the_share_of_its_blocks_that_failed() {
        let m = block_map(
            4096,
            [0, 0, 0, 1, 1, 2, 3, 3, 3, 4, 5, 6, 7],
            &[
                (2, Verdict::LostWrite),
                (4, Verdict::LostWrite),
                (5, Verdict::LostWrite),
                (6, Verdict::LostWrite),
                (7, Verdict::Missing),
            ],
            5,
        );
        assert_eq!((m.cells[0].failed, m.cells[0].acked), (1, 4));
        assert_eq!(m.cells[0].share(), 0.25);
        assert_eq!((m.cells[1].failed, m.cells[1].acked), (4, 4));
        assert_eq!(m.cells[1].share(), 1.0);
        assert_eq!(m.cells[2].share(), 0.0);
        // A torn write still in flight is intact, not a failure.
        let t = block_map(8, [0, 1], &[(0, Verdict::TornInFlight)], 0);
        assert_eq!((t.cells[0].class, t.cells[0].failed), (Class::Intact, 0));
    }
}
