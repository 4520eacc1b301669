//! The CRC-32 of a sector without running the CRC over its 456 payload bytes.
//!
//! CRC-32 (IEEE 802.3: reflected, polynomial `0xEDB88320`, initial value and final
//! XOR `0xFFFFFFFF`, as `crc32fast::hash`) is affine over GF(2): for messages `a`,
//! `b`, `c` of one length, `crc(a ⊕ b ⊕ c) = crc(a) ⊕ crc(b) ⊕ crc(c)` (an odd
//! number of terms, so the constant survives once). A sector's CRC covers
//! `header (52 bytes) ‖ payload (456)`, and its payload is a pool segment XOR a
//! repeated 8-byte key (see the parent module), so the 508-byte message is the XOR of
//!
//! * `header ‖ 0⁴⁵⁶`: the CRC of the 52 header bytes, advanced over 456 zero bytes
//!   by a precomputed 32×32 matrix (the zero-extension of zlib's `crc32_combine`,
//!   applied here with four byte tables); the sectors of one block differ only in
//!   the sector index, whose effect is another such matrix, so a block needs the CRC
//!   of one header;
//! * `0⁵² ‖ pool[start..start+57]`: one precomputed CRC per start offset;
//! * `0⁵² ‖ key repeated`: linear in the key's 64 bits, eight byte tables.
//!
//! Ross Williams, "A Painless Guide to CRC Error Detection Algorithms" (1993),
//! sections 9–11, for the reflected table algorithm; the property test below checks
//! every sector against `crc32fast::hash` of its bytes.

use super::{CRC_OFFSET, PAYLOAD_OFFSET, PAYLOAD_WORDS, SECTOR_FIELD};

/// The reflected CRC-32 polynomial (IEEE 802.3).
const POLY: u32 = 0xEDB8_8320;

/// The CRC register after one zero byte (no initial or final XOR).
fn zero_byte(mut r: u32) -> u32 {
    for _ in 0..8 {
        r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
    }
    r
}

/// A GF(2)-linear map on 32 bits as four byte tables: `apply(r)` is the XOR of
/// `t[k][byte k of r]`.
struct Linear([[u32; 256]; 4]);

impl Linear {
    /// The tables of the linear map `f`, from its values on the 32 unit vectors.
    fn of(f: impl Fn(u32) -> u32) -> Linear {
        let unit: Vec<u32> = (0..32).map(|i| f(1 << i)).collect();
        let mut t = [[0u32; 256]; 4];
        for (k, table) in t.iter_mut().enumerate() {
            for (b, v) in table.iter_mut().enumerate() {
                *v = (0..8)
                    .filter(|i| b >> i & 1 != 0)
                    .fold(0, |acc, i| acc ^ unit[8 * k + i]);
            }
        }
        Linear(t)
    }

    fn apply(&self, r: u32) -> u32 {
        let t = &self.0;
        t[0][(r & 0xFF) as usize]
            ^ t[1][(r >> 8 & 0xFF) as usize]
            ^ t[2][(r >> 16 & 0xFF) as usize]
            ^ t[3][(r >> 24) as usize]
    }
}

/// Precomputed parts of the sector CRCs of one run's payload pool (about 48 KiB:
/// 4 bytes per pool start offset, plus 16 byte tables of 1 KiB).
pub(super) struct SectorCrc {
    /// The register advanced over the payload's 456 bytes as zeros.
    zero_ext: Linear,
    /// `crc(d) ⊕ crc(0⁵⁰⁸)` for the 508-byte message `d` that is zero but for the
    /// sector index field (bytes 24..28): what changing a header's sector index by
    /// XOR does to its CRC.
    sector: Linear,
    /// `crc(0⁵² ‖ key repeated) ⊕ crc(0⁵⁰⁸)` for a key with only byte `j` set to `b`:
    /// `key[j][b]`.
    key: [[u32; 256]; 8],
    /// `crc(0⁵² ‖ pool[s..s+57] as little-endian words) ⊕ crc(0⁵⁰⁸)` for start `s`:
    /// the linear part only. The pool and key terms' constants are both
    /// `crc(0⁵⁰⁸)` and cancel; the header term keeps its own.
    pool: Box<[u32]>,
}

impl SectorCrc {
    /// The parts for `pool` (its words as the parent module lays them in the
    /// payload), for every start offset `0 .. pool.len() - 57`: one CRC-32
    /// of 508 bytes per offset, computed once per run.
    pub(super) fn new(pool: &[u64]) -> SectorCrc {
        let mut msg = [0u8; CRC_OFFSET];
        let c0 = crc32fast::hash(&msg);
        let fill = |msg: &mut [u8; CRC_OFFSET], words: &mut dyn Iterator<Item = u64>| {
            for (dst, w) in msg[PAYLOAD_OFFSET..].chunks_exact_mut(8).zip(words) {
                dst.copy_from_slice(&w.to_le_bytes());
            }
        };
        let mut key = [[0u32; 256]; 8];
        for (j, table) in key.iter_mut().enumerate() {
            let bit: Vec<u32> = (0..8)
                .map(|i| {
                    let k = 1u64 << (8 * j + i);
                    fill(&mut msg, &mut std::iter::repeat_n(k, PAYLOAD_WORDS));
                    crc32fast::hash(&msg) ^ c0
                })
                .collect();
            for (b, v) in table.iter_mut().enumerate() {
                *v = (0..8)
                    .filter(|i| b >> i & 1 != 0)
                    .fold(0, |acc, i| acc ^ bit[i]);
            }
        }
        let pool = (0..pool.len() - PAYLOAD_WORDS)
            .map(|s| {
                fill(&mut msg, &mut pool[s..s + PAYLOAD_WORDS].iter().copied());
                crc32fast::hash(&msg) ^ c0
            })
            .collect();
        let zero_ext =
            Linear::of(|r| (0..CRC_OFFSET - PAYLOAD_OFFSET).fold(r, |r, _| zero_byte(r)));
        let sector = Linear::of(|i| {
            let mut d = [0u8; CRC_OFFSET];
            d[SECTOR_FIELD..SECTOR_FIELD + 4].copy_from_slice(&i.to_le_bytes());
            crc32fast::hash(&d) ^ c0
        });
        SectorCrc {
            zero_ext,
            sector,
            key,
            pool,
        }
    }

    /// `crc(header ‖ 0⁴⁵⁶)`, the header's part of a sector's CRC.
    pub(super) fn head(&self, header: &[u8; PAYLOAD_OFFSET]) -> u32 {
        // crc(H ‖ 0⁴⁵⁶) = A⁴⁵⁶(crc(H) ⊕ !0) ⊕ !0, A the zero-byte step.
        self.zero_ext.apply(crc32fast::hash(header) ^ !0) ^ !0
    }

    /// The [`SectorCrc::head`] of a header whose sector index is `b`, from `head`,
    /// the head of the same header with sector index `a` (XOR turns `a` into `b`):
    /// the other sectors of a block need no CRC of their headers.
    pub(super) fn head_for_sector(&self, head: u32, a: u32, b: u32) -> u32 {
        head ^ self.sector.apply(a ^ b)
    }

    /// `crc32fast::hash(header ‖ payload)`, from `head` = [`SectorCrc::head`] of the
    /// header, where the payload's 57 words are `pool[start + i] ^ key`,
    /// little-endian.
    ///
    /// Panics if `start` is not below `pool.len() - 57`.
    pub(super) fn crc(&self, head: u32, start: usize, key: u64) -> u32 {
        let k = key.to_le_bytes();
        let mut x = head ^ self.pool[start];
        for (j, b) in k.iter().enumerate() {
            x ^= self.key[j][*b as usize];
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_start_offset_and_key_byte_gives_the_crc_of_the_bytes() {
        let mut state = 7u64;
        let pool: Vec<u64> = (0..super::super::POOL_WORDS)
            .map(|_| super::super::splitmix64(&mut state))
            .collect();
        let crc = SectorCrc::new(&pool);
        let mut msg = [0u8; CRC_OFFSET];
        for start in 0..pool.len() - PAYLOAD_WORDS {
            // Keys with one byte set, then dense ones: every table entry is used.
            let key = if start < 8 * 256 {
                ((start % 256) as u64) << (8 * (start / 256))
            } else {
                super::super::splitmix64(&mut state)
            };
            for (i, b) in msg[..PAYLOAD_OFFSET].iter_mut().enumerate() {
                *b = (start as u8).wrapping_mul(31).wrapping_add(i as u8);
            }
            for (dst, w) in msg[PAYLOAD_OFFSET..]
                .chunks_exact_mut(8)
                .zip(&pool[start..start + PAYLOAD_WORDS])
            {
                dst.copy_from_slice(&(w ^ key).to_le_bytes());
            }
            let header: &[u8; PAYLOAD_OFFSET] = msg[..PAYLOAD_OFFSET].try_into().unwrap();
            let head = crc.head(header);
            assert_eq!(
                crc.crc(head, start, key),
                crc32fast::hash(&msg),
                "start {start}, key {key:#x}"
            );
            // Another sector index, from the head of this one.
            let was = u32::from_le_bytes(msg[SECTOR_FIELD..SECTOR_FIELD + 4].try_into().unwrap());
            let other = (start as u32).wrapping_mul(0x9E37_79B9);
            msg[SECTOR_FIELD..SECTOR_FIELD + 4].copy_from_slice(&other.to_le_bytes());
            assert_eq!(
                crc.crc(crc.head_for_sector(head, was, other), start, key),
                crc32fast::hash(&msg),
                "start {start}, sector {other}"
            );
        }
    }
}
