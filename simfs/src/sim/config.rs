//! The fault model's settings: the [`Mode`] (what the device does with writes, fsync
//! and the cut) and the [`SimConfig`] tunables, each with its unit.

use serde::Serialize;

/// How the simulated device treats writes, fsync and the power cut.
///
/// See the crate documentation for the full fault model of each mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// fsync destages the file's writes; background destage is FIFO; the cut drops
    /// only writes never fsynced.
    Honest,
    /// fsync returns at once; writes destage FIFO after a delay or under cache
    /// pressure; the cut drops everything cached, fsynced or not.
    Lying,
    /// Like `lying`, but writes destage in random (seeded) order.
    Reorder,
    /// Honest fsync; at the cut each cached write keeps a random prefix of its sectors.
    Torn,
    /// Honest fsync; now and then a destaged block lands at a wrong block of its file.
    Misdirect,
}

impl Mode {
    /// The mode's name as written on the command line and in the ground truth.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Honest => "honest",
            Mode::Lying => "lying",
            Mode::Reorder => "reorder",
            Mode::Torn => "torn",
            Mode::Misdirect => "misdirect",
        }
    }

    /// Whether fsync/fdatasync destages the file's cached writes before returning.
    pub fn fsync_destages(self) -> bool {
        matches!(self, Mode::Honest | Mode::Torn | Mode::Misdirect)
    }
}

/// Tunables of the simulated device. Every field has a unit; see [`SimConfig::default`].
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The fault model.
    pub mode: Mode,
    /// Seed of the one RNG behind every random choice.
    pub seed: u64,
    /// Milliseconds a write stays cached before the background destager may write it
    /// out. In `reorder` mode each write's delay is drawn uniformly from
    /// `0..=2 * destage_delay_ms`.
    pub destage_delay_ms: u64,
    /// Bytes of cached write data above which writes are destaged at once (oldest
    /// first, or a random victim in `reorder` mode) until the cache fits again.
    pub cache_bytes: u64,
    /// Bytes per sector: the unit a `torn` cut keeps or drops. Sectors are aligned to
    /// absolute file offsets (multiples of `sector`), not to the write's start.
    pub sector: u64,
    /// Bytes: in `torn` mode, a cached write of at most this many bytes is never torn
    /// at the cut — it survives whole or is dropped whole (a device whose atomic write
    /// unit, e.g. NVMe AWUPF, is this size); longer writes are torn at `sector`
    /// boundaries. 0: every write can be torn.
    pub atomic_unit: u64,
    /// Bytes per block for `misdirect`: only writes whose offset and length are
    /// multiples of `misdirect_block` can be misdirected, and they land at another
    /// multiple of it.
    pub misdirect_block: u64,
    /// In `misdirect` mode, an eligible destaged write is misdirected with chance
    /// 1 in `misdirect_every` (0 never misdirects).
    pub misdirect_every: u64,
    /// Milliseconds every fsync/fdatasync (and `O_SYNC`/`O_DSYNC` write) sleeps after
    /// doing its work and before it returns: a slow cache flush (the data is as
    /// durable as the mode makes it before the call returns, which is late). 0: none.
    pub flush_delay_ms: u64,
    /// Milliseconds every fsync/fdatasync (and `O_SYNC`/`O_DSYNC` write) waits before
    /// it does its work: a flush that takes time while the writes it covers are still
    /// only in the volatile cache, so a cut during it finds them there (the
    /// `docs/atomic.md` rehearsal tears writes this way). 0: none.
    pub flush_latency_ms: u64,
    /// Answer `statfs` with 0 blocks in all, free and available, as FUSE filesystems
    /// that implement no `statfs` do.
    pub statfs_zero: bool,
    /// Refuse every `fallocate` with `EOPNOTSUPP`, as filesystems without it do
    /// (LazyFS, some FUSE filesystems): a writer must fill a file with writes.
    pub no_fallocate: bool,
    /// Which rules make metadata (names, sizes) durable; see [`crate::journal`].
    pub metadata: crate::journal::Metadata,
}

impl Default for SimConfig {
    /// `honest`, seed 0, 2000 ms delay, 64 MiB cache, 512-byte sectors, no atomic
    /// unit, 4096-byte blocks, misdirect 1 in 50, no flush delay or latency, a true `statfs`,
    /// `fallocate` supported, `posix` metadata.
    fn default() -> Self {
        SimConfig {
            mode: Mode::Honest,
            seed: 0,
            destage_delay_ms: 2000,
            cache_bytes: 64 << 20,
            sector: 512,
            atomic_unit: 0,
            misdirect_block: 4096,
            misdirect_every: 50,
            flush_delay_ms: 0,
            flush_latency_ms: 0,
            statfs_zero: false,
            no_fallocate: false,
            metadata: crate::journal::Metadata::Posix,
        }
    }
}
