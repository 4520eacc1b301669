//! The independent model of the verdict rules (what the verifier must say about
//! each block, from the backing file and the ledger), and [`Checked`]: one cut's report,
//! model, disk, ledger and ground truth, with the cross-checks against the truth.

use super::*;

/// What the verifier must say, per the rules (independent model of `src/verdict/file.rs`).
#[derive(Debug, Default)]
pub(crate) struct Model {
    /// Blocks per verdict (every verdict present, as in the report).
    pub(crate) verdicts: BTreeMap<&'static str, u64>,
    /// Failed blocks: block → (verdict, expected seq, found seq).
    pub(crate) findings: BTreeMap<u64, (&'static str, u64, Option<u64>)>,
    /// Blocks classified.
    pub(crate) checked: u64,
    /// Blocks holding a seq above their acknowledged one.
    pub(crate) in_flight_survived: u64,
}

impl Model {
    pub(crate) fn new(disk: &[Vec<Sec>], acked: &[u64]) -> Model {
        let mut m = Model::default();
        for v in [
            "intact",
            "lost_write",
            "torn_in_flight",
            "torn_acknowledged",
            "corrupt",
            "misdirected",
            "unserializable",
            "missing",
        ] {
            m.verdicts.insert(v, 0);
        }
        let mut max_wm = 0;
        let mut lost = Vec::new();
        // The newest seq of each block holding a write newer than its acknowledged one.
        let mut newer = Vec::new();
        // Records of the run written for another block: (block written for, seq).
        let strays: Vec<(u64, u64)> = disk
            .iter()
            .enumerate()
            .flat_map(|(b, secs)| {
                secs.iter().enumerate().filter_map(move |(i, s)| match *s {
                    Sec::Ours {
                        block,
                        sector,
                        spb,
                        seq,
                        ..
                    } if block != b as u64 || sector != i as u32 || spb != SPB as u32 => {
                        Some((block, seq))
                    }
                    _ => None,
                })
            })
            .collect();
        // A block whose acknowledged write was found elsewhere is a lost write, never
        // unserializable: one misdirection is one fault.
        let found_elsewhere = |b: u64, a: u64| strays.iter().any(|&(sb, sq)| sb == b && sq >= a);
        for (b, secs) in disk.iter().enumerate() {
            let (b, a) = (b as u64, acked[b]);
            let ours = secs.iter().any(|s| matches!(s, Sec::Ours { .. }));
            if secs.len() < SPB {
                if a > 0 {
                    m.checked += 1;
                    m.fail(b, "missing", a, None);
                }
                continue;
            }
            if a == 0 && !ours {
                continue;
            }
            m.checked += 1;
            // The watermark of every correctly placed sector of the run counts.
            for (i, s) in secs.iter().enumerate() {
                if let Sec::Ours {
                    block,
                    sector,
                    spb,
                    wm,
                    ..
                } = *s
                {
                    if block == b && sector == i as u32 && spb == SPB as u32 {
                        max_wm = max_wm.max(wm);
                    }
                }
            }
            if let Some(stray) = misplaced(b, secs) {
                m.fail(b, "misdirected", a, Some(stray));
                continue;
            }
            let s = seqs(secs);
            let (min, max) = (*s.iter().min().unwrap(), *s.iter().max().unwrap());
            if max > a {
                newer.push(max);
            }
            if a > 0 && secs.contains(&Sec::Invalid) {
                m.fail(b, "corrupt", a, None);
            } else if min == max && min >= a {
                *m.verdicts.get_mut("intact").unwrap() += 1;
            } else if min == max {
                lost.push((b, a, min));
            } else if min < a && found_elsewhere(b, a) {
                m.fail(b, "lost_write", a, Some(min));
            } else if min < a {
                m.fail(b, "torn_acknowledged", a, Some(min));
            } else {
                *m.verdicts.get_mut("torn_in_flight").unwrap() += 1;
            }
        }
        // In flight at the cut: newer writes no surviving watermark covers (a covered
        // one's fdatasync had returned before a surviving write was issued).
        m.in_flight_survived = newer.iter().filter(|&&s| s > max_wm).count() as u64;
        for (b, a, found) in lost {
            m.fail(
                b,
                if a <= max_wm && !found_elsewhere(b, a) {
                    "unserializable"
                } else {
                    "lost_write"
                },
                a,
                Some(found),
            );
        }
        m
    }

    pub(crate) fn fail(&mut self, b: u64, v: &'static str, a: u64, found: Option<u64>) {
        *self.verdicts.get_mut(v).unwrap() += 1;
        self.findings.insert(b, (v, a, found));
    }

    /// Blocks with a lost acknowledged write (lost_write or unserializable).
    pub(crate) fn lost(&self) -> BTreeSet<u64> {
        self.findings
            .iter()
            .filter(|(_, f)| f.0 == "lost_write" || f.0 == "unserializable")
            .map(|(b, _)| *b)
            .collect()
    }
}

/// Everything one cut produced, checked against the model.
pub(crate) struct Checked {
    pub(crate) report: Value,
    pub(crate) code: i32,
    pub(crate) model: Model,
    pub(crate) disk: Vec<Vec<Sec>>,
    pub(crate) acks: Vec<FileAck>,
    pub(crate) acked: Vec<u64>,
    pub(crate) truth: Truth,
    pub(crate) jobs: u32,
}

impl Checked {
    /// Block indices of the report's findings with one of `verdicts`.
    pub(crate) fn found(&self, verdicts: &[&str]) -> BTreeSet<u64> {
        let f = self.report["findings"].as_array().expect("findings");
        assert_eq!(
            f.len() as u64,
            self.report["findings_total"].as_u64().unwrap(),
            "findings list truncated"
        );
        f.iter()
            .filter(|x| verdicts.contains(&x["verdict"].as_str().unwrap()))
            .map(|x| x["block"].as_u64().unwrap())
            .collect()
    }

    /// The verdict count `v` of the report.
    pub(crate) fn count(&self, v: &str) -> u64 {
        self.report["verdicts"][v].as_u64().unwrap()
    }

    /// The truth lines of the target.
    pub(crate) fn truth_writes(&self) -> impl Iterator<Item = &plugpull_tests::simfs::TruthWrite> {
        self.truth.of_file(FILE)
    }

    /// Checks a lost set against the ground truth (see the module doc): for each
    /// block, the writes the cut dropped, by write_id, start with at least `a_b`
    /// fsynced ones, where `a_b` counts the ledger's acks of the block above the seq
    /// on disk; the blocks with `a_b > 0` are exactly `lost`.
    pub(crate) fn check_lost_against_truth(&self, lost: &BTreeSet<u64>) {
        let mut dropped: BTreeMap<u64, Vec<bool>> = BTreeMap::new();
        for w in self.truth_writes().filter(|w| w.fate == Fate::Dropped) {
            assert_eq!(
                (w.offset % BS, w.len),
                (0, BS),
                "a dropped write that is not one block: {w:?}"
            );
            dropped.entry(w.block(BS)).or_default().push(w.fsynced);
        }
        let mut expect = BTreeSet::new();
        for (b, secs) in self.disk.iter().enumerate() {
            let Some(on_disk) = whole_seq(secs) else {
                continue;
            };
            let a_b = self
                .acks
                .iter()
                .filter(|a| a.block == b as u64 && a.seq > on_disk)
                .count();
            if a_b == 0 {
                continue;
            }
            expect.insert(b as u64);
            let d = dropped.get(&(b as u64)).map(Vec::as_slice).unwrap_or(&[]);
            assert!(d.len() >= a_b, "block {b}: {a_b} acknowledged writes above seq {on_disk} on disk, but the truth dropped only {} writes of it", d.len());
            assert!(d[..a_b].iter().all(|&f| f), "block {b}: one of the first {a_b} dropped writes was not fsynced per the truth: {d:?}");
        }
        assert_eq!(
            &expect, lost,
            "lost blocks per ledger+disk+truth vs the verifier"
        );
        if self.jobs == 1 {
            // file_write_id == seq: check it on every truth line the ledger covers, then
            // predict the lost set from the truth and the ledger alone.
            let by_seq: BTreeMap<u64, u64> = self.acks.iter().map(|a| (a.seq, a.block)).collect();
            let top = by_seq.keys().next_back().copied().unwrap_or(0);
            assert_eq!(
                by_seq.len() as u64,
                top,
                "one job: the ledger holds seqs 1..={top} without a gap"
            );
            for w in self.truth_writes() {
                if w.file_write_id <= top {
                    assert_eq!(
                        by_seq[&w.file_write_id],
                        w.block(BS),
                        "file_write_id {} is seq {} but went to another block: {w:?}",
                        w.file_write_id,
                        w.file_write_id
                    );
                }
            }
            let from_truth: BTreeSet<u64> = self
                .truth_writes()
                .filter(|w| {
                    w.fate == Fate::Dropped && w.file_write_id <= self.acked[w.block(BS) as usize]
                })
                .map(|w| w.block(BS))
                .collect();
            assert_eq!(
                &from_truth, lost,
                "one job: lost blocks from the truth and the ledger alone"
            );
        }
    }
}
