//! The ledger's bytes: the 16-byte header, entries framed by length and CRC-32, and
//! [`scan`], which replays a file and tells a torn tail (a crash inside the last group
//! commit) from damage in the middle. The format and the torn-tail rule are laid out
//! in the [module doc](super).

use super::Entry;
use crate::RunId;

/// Magic at byte 0 of every ledger file.
pub const MAGIC: [u8; 8] = *b"PPLEDGR6";
/// Bytes before the first entry.
pub const HEADER_LEN: usize = 16;
/// Bytes of an entry's length + CRC prefix.
pub const ENTRY_HEADER_LEN: usize = 8;
/// Largest entry payload, in bytes (8 MiB).
pub const MAX_ENTRY: u32 = 8 << 20;
/// Largest group commit, in bytes: a torn tail can only lie within this many bytes of the end.
pub const MAX_COMMIT: u64 = 32 << 20;

/// Why a ledger cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerError {
    /// The 16-byte header is missing or has the wrong magic.
    BadHeader,
    /// An entry in the middle fails its length or CRC check, or does not decode.
    Damaged {
        /// Byte offset of the entry.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The first entry is not a manifest.
    NoManifest,
    /// The header is a plugpull ledger of another format version (magic `PPLEDGR`
    /// followed by another digit): written by an older or newer plugpull.
    OtherVersion {
        /// The version digit found (e.g. `'1'`).
        found: char,
    },
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::BadHeader => {
                f.write_str("ledger header is missing or has the wrong magic")
            }
            LedgerError::Damaged { offset, reason } => {
                write!(f, "ledger damaged at byte {offset}: {reason}")
            }
            LedgerError::NoManifest => f.write_str("ledger does not start with a manifest"),
            LedgerError::OtherVersion { found } => write!(
                f,
                "ledger format {found} was written by another plugpull version (this one reads format {}): \
                 verify it with the plugpull that wrote it",
                MAGIC[7] as char
            ),
        }
    }
}

impl std::error::Error for LedgerError {}

/// The 16-byte header of a new ledger for `run`.
pub fn header(run: RunId) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..].copy_from_slice(&run.0.to_le_bytes());
    h
}

/// Appends one encoded entry (length, CRC, payload) to `out`.
pub fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; ENTRY_HEADER_LEN]);
    let out2 =
        postcard::to_extend(entry, std::mem::take(out)).expect("ledger entries always serialize");
    *out = out2;
    let len = (out.len() - start - ENTRY_HEADER_LEN) as u32;
    let crc = crc32fast::hash(&out[start + ENTRY_HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// What the end of a scanned ledger looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belongs to a valid entry.
    Clean,
    /// A torn last commit: bytes from `valid_len` on are not a valid entry.
    Torn {
        /// Length of the valid prefix, in bytes (truncate the file here).
        valid_len: u64,
        /// Bytes after it.
        torn_bytes: u64,
    },
}

/// Scans a whole ledger, calling `f(offset, entry)` for each valid entry in order
/// ([`Scanner`] over one chunk: the bytes are not copied).
///
/// Returns the run id and how the file ends. Errors: [`LedgerError::BadHeader`], or
/// [`LedgerError::Damaged`] for damage that is not a torn tail (see the module doc),
/// or [`LedgerError::NoManifest`].
pub fn scan(bytes: &[u8], mut f: impl FnMut(u64, Entry)) -> Result<(RunId, Tail), LedgerError> {
    let mut s = Scanner::default();
    let mut g = |at, _: &[u8], e| f(at, e);
    s.push(bytes, &mut g)?;
    s.finish()
}

/// [`scan`] over a ledger that arrives in chunks: the same entries, errors and tail,
/// holding only the bytes of the entry a chunk ends inside (at most [`MAX_ENTRY`] +
/// 8), or, after an entry that fails its check, every byte from it to the end (the
/// torn-tail rule needs them; only a damaged ledger keeps that much).
#[derive(Debug, Default)]
pub struct Scanner {
    /// Bytes not yet scanned: the header, or the entry a chunk ended inside, or
    /// everything from a bad entry on.
    held: Vec<u8>,
    /// Offset in the file of `held[0]`.
    at: u64,
    /// The run id, once the header is read.
    run: Option<RunId>,
    /// Entries delivered so far.
    entries: u64,
    /// An entry failed its check: only [`Scanner::finish`] can say how.
    stuck: bool,
}

impl Scanner {
    /// Scans the next `chunk` of the file, calling `f(offset, payload, entry)` for
    /// each valid entry it completes, in order (`payload`: the entry's bytes after its
    /// length and CRC).
    ///
    /// Errors: those of [`scan`] that need no later byte ([`LedgerError::OtherVersion`],
    /// [`LedgerError::BadHeader`], an entry that passes its CRC but does not decode,
    /// [`LedgerError::NoManifest`]); after one the scanner is done.
    pub fn push(
        &mut self,
        chunk: &[u8],
        f: &mut impl FnMut(u64, &[u8], Entry),
    ) -> Result<(), LedgerError> {
        if self.stuck || (self.run.is_none() && self.held.len() + chunk.len() < HEADER_LEN) {
            self.held.extend_from_slice(chunk);
            return Ok(());
        }
        if self.held.is_empty() {
            let used = self.entries_of(chunk, f)?;
            self.held.extend_from_slice(&chunk[used..]);
            self.at += used as u64;
            return Ok(());
        }
        let mut held = std::mem::take(&mut self.held);
        held.extend_from_slice(chunk);
        let used = self.entries_of(&held, f)?;
        held.drain(..used);
        self.at += used as u64;
        self.held = held;
        Ok(())
    }

    /// Reads the header (when not yet read) and the valid entries at the start of
    /// `bytes`, which begins at file offset `self.at`; returns how many bytes it used.
    fn entries_of(
        &mut self,
        bytes: &[u8],
        f: &mut impl FnMut(u64, &[u8], Entry),
    ) -> Result<usize, LedgerError> {
        let mut used = 0;
        if self.run.is_none() {
            self.run = Some(read_header(bytes)?);
            used = HEADER_LEN;
        }
        while used < bytes.len() {
            let rest = &bytes[used..];
            let at = self.at + used as u64;
            match check_entry(rest) {
                Ok(end) => {
                    let payload = &rest[ENTRY_HEADER_LEN..end];
                    let entry = postcard::from_bytes::<Entry>(payload).map_err(|e| {
                        LedgerError::Damaged {
                            offset: at,
                            reason: format!("entry passes its CRC but does not decode ({e})"),
                        }
                    })?;
                    if self.entries == 0 && !matches!(entry, Entry::Manifest(_)) {
                        return Err(LedgerError::NoManifest);
                    }
                    self.entries += 1;
                    f(at, payload, entry);
                    used += end;
                }
                Err((_, end)) => {
                    self.stuck = end.is_some();
                    break;
                }
            }
        }
        Ok(used)
    }

    /// Ends the scan: the run id and how the file ends, as [`scan`] returns them.
    ///
    /// Errors: as [`scan`].
    pub fn finish(self) -> Result<(RunId, Tail), LedgerError> {
        // Without a run id, fewer bytes than a header arrived.
        let Some(run) = self.run else {
            return Err(LedgerError::BadHeader);
        };
        let rest = &self.held[..];
        if rest.is_empty() {
            return match self.entries {
                0 => Err(LedgerError::NoManifest),
                _ => Ok((run, Tail::Clean)),
            };
        }
        let at = self.at;
        let total = at + rest.len() as u64;
        let (reason, end) = check_entry(rest).expect_err("push scans every valid entry");
        let after_is_zero = end
            .map(|e| rest[e.min(rest.len())..].iter().all(|&b| b == 0))
            .unwrap_or(true);
        let near_end = total - at <= MAX_COMMIT;
        // A valid entry further on means the bad one is not the last write: a
        // damaged length in the middle must never pass for a torn tail.
        if let Some(k) = (1..rest.len()).find(|&k| check_entry(&rest[k..]).is_ok()) {
            return Err(LedgerError::Damaged {
                offset: at,
                reason: format!(
                    "{reason}, yet a valid entry follows at byte {}",
                    at + k as u64
                ),
            });
        }
        if near_end && after_is_zero {
            return Ok((
                run,
                Tail::Torn {
                    valid_len: at,
                    torn_bytes: total - at,
                },
            ));
        }
        Err(LedgerError::Damaged { offset: at, reason })
    }
}

/// The run id of a ledger's header at the start of `bytes`.
///
/// Errors: [`LedgerError::OtherVersion`], [`LedgerError::BadHeader`].
fn read_header(bytes: &[u8]) -> Result<RunId, LedgerError> {
    if bytes.len() >= HEADER_LEN && bytes[..7] == MAGIC[..7] && bytes[7] != MAGIC[7] {
        return Err(LedgerError::OtherVersion {
            found: bytes[7] as char,
        });
    }
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC {
        return Err(LedgerError::BadHeader);
    }
    Ok(RunId(u64::from_le_bytes(bytes[8..16].try_into().unwrap())))
}

/// Checks the entry at the start of `rest`, the one place an entry's length is read.
/// `Ok(end)`: a complete entry with a good CRC, ending at byte `end` of `rest`.
/// Otherwise the reason and, where the entry's extent is known, its end.
fn check_entry(rest: &[u8]) -> Result<usize, (String, Option<usize>)> {
    if rest.len() < ENTRY_HEADER_LEN {
        return Err((
            format!("{} bytes cannot hold an entry header", rest.len()),
            None,
        ));
    }
    let len = u32::from_le_bytes(rest[..4].try_into().unwrap());
    if len == 0 || len > MAX_ENTRY {
        return Err((
            format!("entry length {len} is outside 1..={MAX_ENTRY}"),
            Some(0),
        ));
    }
    let end = ENTRY_HEADER_LEN + len as usize;
    if end > rest.len() {
        return Err((
            format!("entry of {len} bytes runs past the end of the file"),
            None,
        ));
    }
    let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap());
    if crc32fast::hash(&rest[ENTRY_HEADER_LEN..end]) != crc {
        return Err(("entry CRC does not match".to_string(), Some(end)));
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::*;

    fn manifest() -> Entry {
        Entry::Manifest(Box::new(Manifest::example_file("h", "/t", 8192, 4096)))
    }

    fn acks(batch: u64, n: u64) -> Entry {
        Entry::Acks(AckBatch {
            batch,
            promised: true,
            acks: Acks::File(
                (0..n)
                    .map(|i| FileAck {
                        seq: 1000 * batch + i,
                        block: i,
                        ms: 5,
                    })
                    .collect(),
            ),
            flushes: None,
            canary: Default::default(),
            sealed_ms: 0,
            oldest_in_flight_ms: None,
        })
    }

    fn ledger(entries: &[Entry]) -> Vec<u8> {
        let mut out = header(RunId(9)).to_vec();
        for e in entries {
            encode_entry(e, &mut out);
        }
        out
    }

    fn collect(bytes: &[u8]) -> Result<(Vec<Entry>, Tail), LedgerError> {
        let mut v = Vec::new();
        let (run, tail) = scan(bytes, |_, e| v.push(e))?;
        assert_eq!(run, RunId(9));
        Ok((v, tail))
    }

    #[test]
    fn round_trip() {
        let es = vec![
            manifest(),
            acks(1, 3),
            acks(2, 2),
            Entry::Finished(RunSummary::default()),
        ];
        let (got, tail) = collect(&ledger(&es)).unwrap();
        assert_eq!(got, es);
        assert_eq!(tail, Tail::Clean);
    }

    #[test]
    fn a_cut_short_last_entry_is_a_torn_tail() {
        let full = ledger(&[manifest(), acks(1, 3), acks(2, 4)]);
        let good = ledger(&[manifest(), acks(1, 3)]).len();
        for cut in good + 1..full.len() {
            let (got, tail) = collect(&full[..cut]).unwrap();
            assert_eq!(got.len(), 2);
            assert_eq!(
                tail,
                Tail::Torn {
                    valid_len: good as u64,
                    torn_bytes: (cut - good) as u64
                }
            );
        }
        // Zeros after the valid prefix (a file extended but not written) are a torn tail too.
        let mut z = full[..good].to_vec();
        z.extend_from_slice(&[0; 100]);
        assert_eq!(
            collect(&z).unwrap().1,
            Tail::Torn {
                valid_len: good as u64,
                torn_bytes: 100
            }
        );
    }

    #[test]
    fn damage_in_the_middle_is_refused_with_its_offset() {
        let mut b = ledger(&[manifest(), acks(1, 3), acks(2, 4)]);
        let second = ledger(&[manifest()]).len();
        b[second + 10] ^= 0xff;
        assert_eq!(
            collect(&b).unwrap_err(),
            LedgerError::Damaged {
                offset: second as u64,
                reason: format!(
                    "entry CRC does not match, yet a valid entry follows at byte {}",
                    ledger(&[manifest(), acks(1, 3)]).len()
                )
            }
        );
    }

    #[test]
    fn a_damaged_length_in_the_middle_is_not_a_torn_tail() {
        let mut b = ledger(&[manifest(), acks(1, 3), acks(2, 4)]);
        let second = ledger(&[manifest()]).len();
        b[second + 2] = 0x01; // the length (now 64 KiB more) runs past the end of the file
        let err = collect(&b).unwrap_err();
        let third = ledger(&[manifest(), acks(1, 3)]).len();
        assert_eq!(
            err,
            LedgerError::Damaged {
                offset: second as u64,
                reason: format!("entry of {} bytes runs past the end of the file, yet a valid entry follows at byte {third}", u32::from_le_bytes(b[second..second + 4].try_into().unwrap())),
            }
        );
    }

    #[test]
    fn bad_magic_and_missing_manifest_are_refused() {
        assert_eq!(
            collect(b"NOTALEDGER012345").unwrap_err(),
            LedgerError::BadHeader
        );
        assert_eq!(
            collect(&ledger(&[acks(1, 1)])).unwrap_err(),
            LedgerError::NoManifest
        );
        assert_eq!(collect(&ledger(&[])).unwrap_err(), LedgerError::NoManifest);
    }

    #[test]
    fn file_acks_cost_at_most_16_bytes_each() {
        let n = 4096u64;
        let e = Entry::Acks(AckBatch {
            batch: 1,
            promised: true,
            acks: Acks::File(
                (0..n)
                    .map(|i| FileAck {
                        seq: 5_000_000 + i,
                        block: (i * 7919) % 262_144,
                        ms: 100_000,
                    })
                    .collect(),
            ),
            flushes: None,
            canary: Default::default(),
            sealed_ms: 0,
            oldest_in_flight_ms: None,
        });
        let mut out = Vec::new();
        encode_entry(&e, &mut out);
        assert!(
            out.len() as u64 <= 16 * n,
            "{} bytes for {n} acks",
            out.len()
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::ledger::*;
    use proptest::prelude::*;

    #[test]
    fn a_ledger_of_another_format_version_is_named_as_such() {
        let mut old = Vec::from(*b"PPLEDGR1");
        old.extend_from_slice(&7u64.to_le_bytes());
        let e = scan(&old, |_, _| {}).unwrap_err();
        assert_eq!(e, LedgerError::OtherVersion { found: '1' });
        assert_eq!(
            e.to_string(),
            "ledger format 1 was written by another plugpull version (this one reads format 6): \
             verify it with the plugpull that wrote it"
        );
    }

    fn ledger_of(batches: &[Vec<(u64, u64)>]) -> (Vec<u8>, Vec<Entry>) {
        let mut entries = vec![Entry::Manifest(Box::new(Manifest::example_pgbench("p")))];
        for (i, b) in batches.iter().enumerate() {
            entries.push(Entry::Acks(AckBatch {
                batch: i as u64 + 1,
                promised: true,
                acks: Acks::File(
                    b.iter()
                        .map(|&(seq, block)| FileAck { seq, block, ms: 1 })
                        .collect(),
                ),
                flushes: None,
                canary: Default::default(),
                sealed_ms: 0,
                oldest_in_flight_ms: None,
            }));
        }
        let mut out = header(RunId(3)).to_vec();
        for e in &entries {
            encode_entry(e, &mut out);
        }
        (out, entries)
    }

    proptest! {
        /// Arbitrary bytes after a valid header never panic the scanner.
        #[test]
        fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..400)) {
            let mut b = header(RunId(1)).to_vec();
            b.extend_from_slice(&tail);
            let _ = scan(&b, |_, _| {});
        }

        /// A ledger cut anywhere reads back as a prefix of its entries, never as
        /// something else; a cut inside the manifest is refused.
        #[test]
        fn truncation_yields_a_prefix(batches in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u64>()), 1..20), 0..6), cut in any::<prop::sample::Index>()) {
            let (bytes, entries) = ledger_of(&batches);
            let at = cut.index(bytes.len() + 1);
            let mut got = Vec::new();
            match scan(&bytes[..at], |_, e| got.push(e)) {
                Ok((_, tail)) => {
                    prop_assert_eq!(&got[..], &entries[..got.len()]);
                    if at == bytes.len() { prop_assert_eq!(tail, Tail::Clean); prop_assert_eq!(got.len(), entries.len()); }
                }
                Err(e) => prop_assert!(matches!(e, LedgerError::BadHeader | LedgerError::NoManifest | LedgerError::OtherVersion { .. }), "{e}"),
            }
        }

        /// The ledger fed to a [`Scanner`] in chunks of any size, whole, cut short or with
        /// a flipped byte, reads as [`scan`] reads it: the same entries at the same
        /// offsets, the same tail or error.
        #[test]
        fn chunks_scan_as_the_whole(batches in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u64>()), 1..20), 0..6), cut in any::<prop::sample::Index>(), flip in any::<Option<(prop::sample::Index, u8)>>(), chunk in 1usize..70) {
            let (mut bytes, _) = ledger_of(&batches);
            if let Some((pos, bit)) = flip {
                let at = pos.index(bytes.len());
                bytes[at] ^= 1 << (bit % 8);
            }
            let bytes = &bytes[..cut.index(bytes.len() + 1)];
            let mut whole = Vec::new();
            let want = scan(bytes, |at, e| whole.push((at, e)));
            let mut got = Vec::new();
            let mut s = Scanner::default();
            let mut f = |at, payload: &[u8], e| got.push((at, e, payload.len()));
            let mut pushed = Ok(());
            for c in bytes.chunks(chunk) {
                pushed = s.push(c, &mut f);
                if pushed.is_err() { break; }
            }
            let res = pushed.and_then(|()| s.finish());
            prop_assert_eq!(res, want);
            prop_assert_eq!(got.iter().map(|(at, e, _)| (*at, e.clone())).collect::<Vec<_>>(), whole);
            for (at, _, len) in &got {
                let at = *at as usize;
                prop_assert_eq!(*len as u32, u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()));
            }
        }

        /// One flipped byte is never read as a different valid entry.
        #[test]
        fn a_flipped_byte_is_detected(batches in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u64>()), 1..20), 1..6), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let (mut bytes, entries) = ledger_of(&batches);
            let at = HEADER_LEN + pos.index(bytes.len() - HEADER_LEN);
            bytes[at] ^= 1 << bit;
            let mut got = Vec::new();
            if scan(&bytes, |_, e| got.push(e)).is_ok() {
                // Accepted only as a torn tail of the last entry: everything before it is intact.
                prop_assert_eq!(got.len(), entries.len() - 1);
                prop_assert_eq!(&got[..], &entries[..got.len()]);
            }
        }
    }
}
