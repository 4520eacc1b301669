//! Atomic-write qualification (`write file --expect-atomic`, `docs/atomic.md`): what
//! the stack claims about atomic writes, as a file run's manifest records it, and how
//! a verify reads the cut against that claim.
//!
//! The claims and where each comes from:
//! * the block layer's limits, `/sys/block/DISK/queue/atomic_write_unit_{min,max}_bytes`
//!   (Linux 6.11+, `Documentation/ABI/stable/sysfs-block`): bytes, 0 = the device
//!   offers no atomic writes;
//! * `statx(2)` with `STATX_WRITE_ATOMIC` on the target (Linux 6.11+,
//!   `include/uapi/linux/stat.h`, `man 2 statx`): `stx_atomic_write_unit_min`/`_max`
//!   (bytes) and `stx_atomic_write_segments_max`, the sizes a
//!   `pwritev2(…, RWF_ATOMIC)` (`include/uapi/linux/fs.h`, `man 2 pwritev2`, kernel
//!   `Documentation/filesystems/ext4/atomic_writes.rst`) is accepted with on that
//!   file, opened `O_DIRECT`;
//! * NVMe Identify Controller AWUN / AWUPF (NVMe Base Specification 2.0, §5.17.2.1,
//!   Identify Controller data structure, bytes 527:526 and 529:528: the atomic write
//!   unit in normal operation / across a power failure, in logical blocks, 0's
//!   based), as `nvme id-ctrl` reports them where nvme-cli is installed.
//!
//! A claim is only a claim: the run tests one write size (its block size), and after a
//! cut a block holding parts of two versions — a write torn in flight — disproves
//! atomicity at that size. Writes found whole, or lost whole, do not contradict it;
//! one cut never claims it: the campaign's bound over cuts with writes in flight does.

use crate::modes::AtomicMode;
use serde::{Deserialize, Serialize};

/// What the stack under a file run claims about atomic writes, next to the unit the
/// run tests (recorded in [`crate::ledger::FileManifest::atomic`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtomicClaim {
    /// Bytes per write under test: the run's block size (8192 for PostgreSQL pages,
    /// 16384 for InnoDB's).
    pub unit: u32,
    /// How the writes were issued: plain `pwrite`s or `pwritev2(…, RWF_ATOMIC)`.
    pub mode: AtomicMode,
    /// `statx(STATX_WRITE_ATOMIC)` of the target, when the kernel answered it.
    pub statx: Option<StatxAtomic>,
    /// Each leaf disk under the target, with its sysfs limits and NVMe units.
    pub disks: Vec<DiskAtomic>,
}

/// The atomic-write limits `statx(2)` reports for a file (`STATX_WRITE_ATOMIC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatxAtomic {
    /// `stx_atomic_write_unit_min`, bytes (0: no atomic writes on this file).
    pub unit_min: u32,
    /// `stx_atomic_write_unit_max`, bytes.
    pub unit_max: u32,
    /// `stx_atomic_write_segments_max`: iovecs one atomic write may have.
    pub segments_max: u32,
}

impl StatxAtomic {
    /// Whether an `RWF_ATOMIC` write of `len` bytes is offered: `len` is a power of
    /// two within `unit_min ..= unit_max` (the rule of `man 2 pwritev2`, RWF_ATOMIC).
    pub fn offers(&self, len: u64) -> bool {
        self.unit_min > 0
            && len.is_power_of_two()
            && (self.unit_min as u64..=self.unit_max as u64).contains(&len)
    }
}

/// One leaf disk's atomic-write claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskAtomic {
    /// Kernel name, e.g. `nvme0n1`.
    pub name: String,
    /// `queue/atomic_write_unit_min_bytes`, bytes; `None` where the kernel has no such file.
    pub unit_min: Option<u64>,
    /// `queue/atomic_write_unit_max_bytes`, bytes; `None` likewise.
    pub unit_max: Option<u64>,
    /// For an NVMe disk, what `nvme id-ctrl` says of AWUN/AWUPF, or `not available`
    /// (nvme-cli missing or silent); empty for other disks.
    pub nvme: String,
}

impl AtomicClaim {
    /// The claims in one line for a report: `statx: atomic writes 4096..65536 bytes;
    /// vda: sysfs atomic write unit 0..0 bytes`.
    pub fn describe(&self) -> String {
        let mut parts = vec![match &self.statx {
            Some(s) if s.unit_min > 0 => format!(
                "statx: atomic writes of {}..{} bytes ({} segment(s))",
                s.unit_min, s.unit_max, s.segments_max
            ),
            Some(_) => "statx: no atomic writes on this file".to_string(),
            None => {
                "statx: not available (the kernel does not report STATX_WRITE_ATOMIC)".to_string()
            }
        }];
        for d in &self.disks {
            let sysfs = match (d.unit_min, d.unit_max) {
                (Some(a), Some(b)) => format!("sysfs atomic write unit {a}..{b} bytes"),
                _ => "sysfs atomic write unit not available".to_string(),
            };
            let nvme = if d.nvme.is_empty() {
                String::new()
            } else {
                format!(", NVMe AWUN/AWUPF: {}", d.nvme)
            };
            parts.push(format!("{}: {sysfs}{nvme}", d.name));
        }
        parts.join("; ")
    }
}

/// `8 KiB` for 8192, `512 B` for 512: a write unit for a sentence.
pub fn unit_words(bytes: u64) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

/// `1,843` for 1843: a count for a sentence.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The answer of one cut to "are `unit`-byte writes atomic?", from the blocks verify
/// found torn by a write in flight (`torn`) among the blocks holding a write in
/// flight at the cut, whole or in part (`in_flight`):
///
/// * `0 torn of 3 writes in flight at the cut: one cut shows little; the claim is the
///   campaign's bound over its cuts with writes in flight` (one cut never says
///   "consistent");
/// * `the device tore 3 of 57 writes in flight at the cut: 8 KiB writes are not atomic on this stack`;
/// * with no write in flight found, the cut shows nothing either way.
pub fn atomic_sentence(unit: u64, torn: u64, in_flight: u64) -> String {
    let u = unit_words(unit);
    if torn > 0 {
        format!(
            "the device tore {} of {} writes in flight at the cut: {u} writes are not atomic on this stack",
            thousands(torn),
            thousands(in_flight.max(torn))
        )
    } else if in_flight == 0 {
        format!(
            "no write in flight at the cut reached the medium: this cut shows nothing about {u} atomic writes (cut again under load)"
        )
    } else {
        format!(
            "0 torn of {} writes in flight at the cut: one cut shows little about {u} atomic writes; \
             the claim is the campaign's bound over its cuts with writes in flight",
            thousands(in_flight)
        )
    }
}

/// What a finding of a torn in-flight write says when atomic writes were expected.
pub fn torn_words(unit: u64) -> String {
    format!("the device tore an {unit}-byte write it was expected to write atomically")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentence_says_whether_the_claim_held() {
        assert_eq!(
            atomic_sentence(8192, 0, 3),
            "0 torn of 3 writes in flight at the cut: one cut shows little about 8 KiB atomic \
             writes; the claim is the campaign's bound over its cuts with writes in flight"
        );
        assert_eq!(
            atomic_sentence(16384, 3, 57),
            "the device tore 3 of 57 writes in flight at the cut: 16 KiB writes are not atomic on this stack"
        );
        assert_eq!(
            atomic_sentence(4096, 0, 0),
            "no write in flight at the cut reached the medium: this cut shows nothing about 4 KiB atomic writes (cut again under load)"
        );
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(unit_words(512), "512 B");
        assert_eq!(
            torn_words(8192),
            "the device tore an 8192-byte write it was expected to write atomically"
        );
    }

    #[test]
    fn statx_offers_only_powers_of_two_within_its_limits() {
        let s = StatxAtomic {
            unit_min: 4096,
            unit_max: 16384,
            segments_max: 1,
        };
        assert!(s.offers(4096) && s.offers(8192) && s.offers(16384));
        assert!(!s.offers(2048) && !s.offers(12288) && !s.offers(32768));
        let none = StatxAtomic {
            unit_min: 0,
            unit_max: 0,
            segments_max: 0,
        };
        assert!(!none.offers(4096));
    }
}
