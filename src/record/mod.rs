//! The self-describing sector format of the file workload.
//!
//! The target is split into blocks of `B` bytes (a multiple of 512). Every 512-byte
//! sector of every written block is self-describing, so the verifier needs nothing
//! but the ledger and the bytes on disk. Layout of one sector (all integers
//! little-endian; offsets in bytes):
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 8 | magic `PLGPULL1` (format version 1) |
//! | 8 | 8 | run id |
//! | 16 | 8 | block index (block `i` starts at byte `i * B` of the target) |
//! | 24 | 4 | sector index within the block (`0 .. B/512`) |
//! | 28 | 4 | sectors per block (`B / 512`) |
//! | 32 | 8 | write sequence number (run-wide, from 1, assigned at issue) |
//! | 40 | 8 | acknowledged watermark at issue: every seq `<= w` had its durability call return before this write was issued |
//! | 48 | 4 | reserved, zero |
//! | 52 | 456 | payload: incompressible pseudo-random bytes derived from (run, seq, sector) |
//! | 508 | 4 | CRC-32 (IEEE, as `crc32fast`) of bytes 0..508 |
//!
//! The payload is drawn from a 64 KiB pool generated from the run id with
//! SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
//! OOPSLA 2014), at an offset and XOR key derived from (seq, sector), so it is cheap
//! to produce and never compressible (SandForce-style controllers must not see
//! zeros or repeats).

use crate::RunId;
use std::sync::OnceLock;

mod crc;

/// Bytes in one sector: the unit of the header, the CRC and of tearing.
pub const SECTOR: usize = 512;
/// Magic at byte 0 of every sector: `PLGPULL1`.
pub const MAGIC: [u8; 8] = *b"PLGPULL1";
/// Offset of the sector index in the header, in bytes.
const SECTOR_FIELD: usize = 24;
/// Offset of the payload within a sector, in bytes.
pub const PAYLOAD_OFFSET: usize = 52;
/// Payload length per sector, in bytes.
pub const PAYLOAD_LEN: usize = 456;
/// Offset of the CRC within a sector, in bytes.
pub const CRC_OFFSET: usize = 508;

pub(crate) const POOL_WORDS: usize = 8192; // 64 KiB
pub(crate) const PAYLOAD_WORDS: usize = PAYLOAD_LEN / 8;

/// The header of a valid sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectorHeader {
    /// Run that wrote the sector.
    pub run: RunId,
    /// Block index the writer meant this sector for.
    pub block: u64,
    /// Sector index within that block.
    pub sector: u32,
    /// Sectors per block of the run (block size / 512).
    pub sectors_per_block: u32,
    /// Write sequence number.
    pub seq: u64,
    /// The agent's acknowledged watermark when this write was issued.
    pub watermark: u64,
}

/// What one 512-byte sector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sector {
    /// Magic and CRC are valid: a sector some run of plugpull wrote.
    Valid(SectorHeader),
    /// All 512 bytes are zero (never written, or preallocated).
    Blank,
    /// Anything else: a bad CRC under a valid magic, or bytes that are not ours.
    Invalid(InvalidReason),
}

/// Why a sector is not valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidReason {
    /// The magic is present but the CRC does not match: damaged bytes.
    BadCrc,
    /// Non-zero bytes without the magic: damaged, or contents from before the run.
    NoMagic,
}

/// SplitMix64 step: returns the next output and advances `state`.
#[inline]
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Builds the sectors of the file workload for one run.
pub struct Encoder {
    run: RunId,
    pool: Box<[u64]>,
    /// The pool's precomputed CRC parts, made by the first [`Encoder::encode_block`]
    /// (the verifier, which encodes single sectors, never needs them).
    crc: OnceLock<crc::SectorCrc>,
}

impl Encoder {
    /// Makes the payload pool of `run` (64 KiB). The first [`Encoder::encode_block`]
    /// adds the pool's precomputed CRC parts (about 48 KiB; one CRC-32 of 508 bytes per
    /// pool offset), so a caller that never encodes a whole block never pays for them.
    pub fn new(run: RunId) -> Self {
        let mut state = run.0 ^ 0x504C_5547_5055_4C4C;
        let pool: Box<[u64]> = (0..POOL_WORDS).map(|_| splitmix64(&mut state)).collect();
        Encoder {
            run,
            pool,
            crc: OnceLock::new(),
        }
    }

    /// Fills `buf` (one block: a non-zero multiple of 512 bytes) with the sectors of
    /// write `seq` to `block`, carrying acknowledged watermark `watermark`.
    ///
    /// Panics if `buf.len()` is not a non-zero multiple of [`SECTOR`].
    pub fn encode_block(&self, buf: &mut [u8], block: u64, seq: u64, watermark: u64) {
        assert!(
            !buf.is_empty() && buf.len().is_multiple_of(SECTOR),
            "block must be a multiple of 512 bytes"
        );
        let spb = (buf.len() / SECTOR) as u32;
        let crc = self.crc.get_or_init(|| crc::SectorCrc::new(&self.pool));
        let mut head0 = None;
        for (i, sector) in buf.chunks_exact_mut(SECTOR).enumerate() {
            let h = SectorHeader {
                run: self.run,
                block,
                sector: i as u32,
                sectors_per_block: spb,
                seq,
                watermark,
            };
            let s: &mut [u8; SECTOR] = sector.try_into().unwrap();
            self.write_header(s, &h);
            // Sector 0's header CRC serves every sector of the block: they differ
            // only in the sector index.
            let head = match head0 {
                None => *head0.insert(crc.head(s[..PAYLOAD_OFFSET].try_into().unwrap())),
                Some(head) => crc.head_for_sector(head, 0, i as u32),
            };
            self.fill(s, &h, Some((crc, head)));
        }
    }

    /// Writes one sector with header `h` (its `run` must be this encoder's run),
    /// its CRC computed over its bytes (the verifier regenerates single sectors).
    pub fn encode_sector(&self, s: &mut [u8; SECTOR], h: &SectorHeader) {
        debug_assert_eq!(h.run, self.run);
        self.write_header(s, h);
        self.fill(s, h, None);
    }

    /// Bytes 0..52 of a sector with header `h`.
    fn write_header(&self, s: &mut [u8; SECTOR], h: &SectorHeader) {
        s[0..8].copy_from_slice(&MAGIC);
        s[8..16].copy_from_slice(&h.run.0.to_le_bytes());
        s[16..24].copy_from_slice(&h.block.to_le_bytes());
        s[SECTOR_FIELD..SECTOR_FIELD + 4].copy_from_slice(&h.sector.to_le_bytes());
        s[28..32].copy_from_slice(&h.sectors_per_block.to_le_bytes());
        s[32..40].copy_from_slice(&h.seq.to_le_bytes());
        s[40..48].copy_from_slice(&h.watermark.to_le_bytes());
        s[48..52].copy_from_slice(&[0; 4]);
    }

    /// The payload and CRC of a sector whose header `h` is written: from the
    /// precomputed parts and the header's part `head` (`crc::SectorCrc::head`) when
    /// given, else over the bytes.
    fn fill(&self, s: &mut [u8; SECTOR], h: &SectorHeader, parts: Option<(&crc::SectorCrc, u32)>) {
        let mut key_state = h.seq.wrapping_mul(0xA24B_AED4_963E_E407)
            ^ (h.sector as u64)
            ^ self.run.0.rotate_left(17);
        let key = splitmix64(&mut key_state);
        let start = (splitmix64(&mut key_state) as usize) % (POOL_WORDS - PAYLOAD_WORDS);
        let src = &self.pool[start..start + PAYLOAD_WORDS];
        for (dst, w) in s[PAYLOAD_OFFSET..CRC_OFFSET].chunks_exact_mut(8).zip(src) {
            dst.copy_from_slice(&(w ^ key).to_le_bytes());
        }
        // From the parts, the same value as `crc32fast::hash(&s[..CRC_OFFSET])`.
        let crc = match parts {
            Some((c, head)) => c.crc(head, start, key),
            None => crc32fast::hash(&s[..CRC_OFFSET]),
        };
        s[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    }
}

fn u64_at(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().unwrap())
}

fn u32_at(s: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(s[at..at + 4].try_into().unwrap())
}

/// Reads one sector: valid (magic and CRC check), blank (all zero) or invalid.
pub fn decode_sector(s: &[u8; SECTOR]) -> Sector {
    if s[0..8] != MAGIC {
        return if s.iter().all(|&b| b == 0) {
            Sector::Blank
        } else {
            Sector::Invalid(InvalidReason::NoMagic)
        };
    }
    if crc32fast::hash(&s[..CRC_OFFSET]) != u32_at(s, CRC_OFFSET) {
        return Sector::Invalid(InvalidReason::BadCrc);
    }
    Sector::Valid(SectorHeader {
        run: RunId(u64_at(s, 8)),
        block: u64_at(s, 16),
        sector: u32_at(s, 24),
        sectors_per_block: u32_at(s, 28),
        seq: u64_at(s, 32),
        watermark: u64_at(s, 40),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_sector() {
        let enc = Encoder::new(RunId(0xfeed));
        let mut block = vec![0u8; 4096];
        enc.encode_block(&mut block, 7, 42, 40);
        for (i, s) in block.chunks_exact(SECTOR).enumerate() {
            let want = SectorHeader {
                run: RunId(0xfeed),
                block: 7,
                sector: i as u32,
                sectors_per_block: 8,
                seq: 42,
                watermark: 40,
            };
            assert_eq!(decode_sector(s.try_into().unwrap()), Sector::Valid(want));
        }
    }

    #[test]
    fn a_flipped_payload_byte_breaks_the_crc() {
        let enc = Encoder::new(RunId(1));
        let mut block = vec![0u8; 512];
        enc.encode_block(&mut block, 0, 1, 0);
        block[300] ^= 1;
        assert_eq!(
            decode_sector(block[..].try_into().unwrap()),
            Sector::Invalid(InvalidReason::BadCrc)
        );
    }

    #[test]
    fn every_sector_of_a_block_carries_the_crc_of_its_bytes() {
        let enc = Encoder::new(RunId(0xabc));
        for bs in [512usize, 4096, 65536] {
            let mut block = vec![0u8; bs];
            enc.encode_block(&mut block, 9, 1234, 1200);
            for s in block.chunks_exact(SECTOR) {
                assert_eq!(u32_at(s, CRC_OFFSET), crc32fast::hash(&s[..CRC_OFFSET]));
            }
        }
    }

    proptest::proptest! {
        /// Every sector of a block made with the precomputed parts (one header CRC
        /// per block) carries the CRC of its bytes and decodes to its header.
        #[test]
        fn every_sector_of_any_block_carries_the_crc_of_its_bytes(
            run: u64, block: u64, seq: u64, watermark: u64, sectors in 1usize..=160,
        ) {
            let enc = Encoder::new(RunId(run));
            let mut buf = vec![0u8; sectors * SECTOR];
            enc.encode_block(&mut buf, block, seq, watermark);
            for (i, s) in buf.chunks_exact(SECTOR).enumerate() {
                let s: &[u8; SECTOR] = s.try_into().unwrap();
                proptest::prop_assert_eq!(u32_at(s, CRC_OFFSET), crc32fast::hash(&s[..CRC_OFFSET]));
                let h = SectorHeader {
                    run: RunId(run), block, sector: i as u32, sectors_per_block: sectors as u32, seq, watermark,
                };
                proptest::prop_assert_eq!(decode_sector(s), Sector::Valid(h));
            }
        }

        /// A sector regenerated alone (as the verifier does, to name a damaged
        /// sector's flipped bits) is byte for byte the one the writer's block holds.
        #[test]
        fn a_sector_encoded_alone_is_the_one_its_block_holds(
            run: u64, block: u64, seq: u64, watermark: u64, spb in 1u32..=64, pick: u32,
        ) {
            let enc = Encoder::new(RunId(run));
            let mut buf = vec![0u8; spb as usize * SECTOR];
            enc.encode_block(&mut buf, block, seq, watermark);
            let sector = pick % spb;
            let h = SectorHeader { run: RunId(run), block, sector, sectors_per_block: spb, seq, watermark };
            let mut s = [0u8; SECTOR];
            enc.encode_sector(&mut s, &h);
            let at = sector as usize * SECTOR;
            proptest::prop_assert_eq!(&s[..], &buf[at..at + SECTOR]);
            proptest::prop_assert_eq!(decode_sector(&s), Sector::Valid(h));
        }
    }

    #[test]
    fn zeros_are_blank_and_garbage_is_invalid() {
        assert_eq!(decode_sector(&[0; SECTOR]), Sector::Blank);
        assert_eq!(
            decode_sector(&[7; SECTOR]),
            Sector::Invalid(InvalidReason::NoMagic)
        );
    }

    #[test]
    fn payload_differs_between_seqs_and_sectors_and_is_not_zero() {
        let enc = Encoder::new(RunId(3));
        let mut a = vec![0u8; 1024];
        let mut b = vec![0u8; 1024];
        enc.encode_block(&mut a, 0, 1, 0);
        enc.encode_block(&mut b, 0, 2, 0);
        assert_ne!(a[PAYLOAD_OFFSET..CRC_OFFSET], b[PAYLOAD_OFFSET..CRC_OFFSET]);
        assert_ne!(
            a[PAYLOAD_OFFSET..CRC_OFFSET],
            a[512 + PAYLOAD_OFFSET..512 + CRC_OFFSET]
        );
        // Incompressible: no 8-byte word repeats within a block's payload.
        let mut words: Vec<&[u8]> = a
            .chunks_exact(SECTOR)
            .flat_map(|s| s[PAYLOAD_OFFSET..CRC_OFFSET].chunks_exact(8))
            .collect();
        let n = words.len();
        words.sort();
        words.dedup();
        assert_eq!(words.len(), n);
    }
}
