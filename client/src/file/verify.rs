//! Verifying a file run: read its target from the medium (or find it gone), check
//! every block against the run's acknowledgements, place the other runs' records found
//! on it as earlier or later than the run, and make its [`FileReport`].
//!
//! The classification of one block is the core's ([`plugpull::verdict::classify_block`]);
//! this module is the I/O around it and the refusals (exit 2) that only the target can
//! tell: wrong target, reused target, nothing of the run on it.

use super::medium::{locate, open_target, Opened};
use super::others::{place_other_runs, OtherRuns};
use super::parallel;
use crate::target_id;
use crate::Error;
use plugpull::ledger::{FileAcks, FileManifest, RunLedger};
use plugpull::report::{FileReport, ReportHead, TargetFinding};
use plugpull::units::human_bytes;
use plugpull::verdict::{classify_block, AckTable, Tally};
use plugpull::RunId;
use std::path::Path;
use std::path::PathBuf;

/// What verifying a file run needs besides its ledger: where to read and whether to
/// draw a progress bar.
#[derive(Debug, Clone, Default)]
pub struct FileVerifyOptions {
    /// Read this path instead of the manifest's target (`--target`: a device renamed
    /// after reboot, or a copy).
    pub target: Option<PathBuf>,
    /// No progress bar on stderr (`--json`); a bar is drawn only on a terminal and
    /// for targets of 256 MiB or more anyway.
    pub quiet: bool,
}

/// Verifies a file run whose ledger passed the device-error rule
/// ([`crate::verify::judge_ledger`] applies it): reads its target and classifies
/// every block.
///
/// Runs whose records are on the target are the target's prior contents when the
/// manifest's `prior_runs` lists them, or when the listener created them before this
/// run on the same target (a sampled start-of-run scan of a large target can miss
/// them; `others` looks their manifests up, [`ListenerRuns`] at the listener). Any other run's record
/// is a later run's: it excuses a lost write from `unserializable`, and a target
/// holding only such records is refused as the wrong one.
///
/// Errors (exit 2): nothing was acknowledged
/// ("not measured"); the target is not the run's (a block device with another
/// identity; only records of runs that were not on it when the run started); its
/// filesystem is not mounted; a writer still holds it; it exists but cannot be read.
/// A file gone from the right filesystem is a finding: every acknowledged block is
/// then missing.
///
pub async fn verify_file_run(
    l: &RunLedger,
    fm: &FileManifest,
    opts: &FileVerifyOptions,
    others: &impl OtherRuns,
) -> Result<FileReport, Error> {
    let read = read_file_target(l, fm, opts)?;
    let (prior, reused_by) = place_other_runs(l, fm, read.tally.other_runs(), others).await;
    judge_file(l, fm, read, &prior, &reused_by)
}

/// What reading a file run's target found, before the other runs' records on it are
/// placed as earlier or later than the run.
struct TargetRead<'l> {
    acks: &'l AckTable,
    tally: Tally,
    target_findings: Vec<TargetFinding>,
    shown_path: PathBuf,
    read_mode: &'static str,
    read_note: String,
    /// A file given with `--target` that is provably not the file the run wrote
    /// (another inode or filesystem): what it is, for the refusal when it holds
    /// nothing of the run.
    other_file: Option<String>,
}

/// Reads the target of a file run (or finds it gone) and adds every block's check.
fn read_file_target<'l>(
    l: &'l RunLedger,
    fm: &FileManifest,
    opts: &FileVerifyOptions,
) -> Result<TargetRead<'l>, Error> {
    let blocks = fm.blocks();
    let bs = fm.block_size as usize;
    let no_acks = || {
        Error::Msg(format!(
            "not measured: run {} has no acknowledged writes in the ledger",
            l.run
        ))
    };
    // The ledger's reader folded the file acks per block as they arrived.
    let Some(FileAcks {
        table: acks,
        beyond,
    }) = &l.file_acks
    else {
        return Err(no_acks());
    };
    if let Some(block) = beyond {
        return Err(Error::Msg(format!(
            "ledger of run {} acknowledges block {block} beyond the target's {blocks} blocks",
            l.run
        )));
    }
    if acks.acknowledged == 0 {
        return Err(no_acks());
    }
    let mut tally = Tally::expecting_atomic(fm.atomic.is_some());
    let mut target_findings = Vec::new();
    let mut shown_path = opts
        .target
        .clone()
        .unwrap_or_else(|| PathBuf::from(&fm.target));
    let (mut read_mode, mut read_note) = ("none", String::new());
    let mut other_file = None;
    match locate(fm, opts.target.as_deref())? {
        None => {
            target_findings.push(TargetFinding {
                kind: "file_gone".into(),
                detail: format!(
                    "the file is gone: {} does not exist on its filesystem (if you moved or renamed it, verify its new path with --target)",
                    shown_path.display()
                ),
            });
            for b in 0..blocks {
                if let Some(c) = classify_block(l.run, b, bs, acks.seq(b), &[], fm.prior_foreign) {
                    tally.add(b, c, acks);
                }
            }
        }
        Some(path) => {
            let o = open_target(&path)?;
            shown_path = o.path.clone();
            if opts.target.is_some() && fm.identity.kind == "file" && !simfs_backing(fm, &path) {
                if let Ok(have) = target_id::identify(&path) {
                    if !target_id::same_target(&have, &fm.identity) {
                        other_file = Some(format!(
                            "inode {} on device {}, where the run wrote {} (inode {} on device {})",
                            have.inode, have.dev, fm.target, fm.identity.inode, fm.identity.dev
                        ));
                    }
                }
            }
            if o.is_block && fm.identity.size > 0 && o.len != fm.identity.size {
                target_findings.push(TargetFinding {
                    kind: "capacity_changed".into(),
                    detail: format!(
                        "device capacity changed {} → {}",
                        human_bytes(fm.identity.size),
                        human_bytes(o.len)
                    ),
                });
            } else if o.len < fm.size {
                target_findings.push(TargetFinding {
                    kind: "target_shorter".into(),
                    detail: format!(
                        "target is shorter than the run's: {} ({} bytes) where the run used {} ({} bytes)",
                        human_bytes(o.len),
                        o.len,
                        human_bytes(fm.size),
                        fm.size
                    ),
                });
            }
            let (mode, note) = read_blocks(l, fm, acks, opts.quiet, o, &mut tally)?;
            (read_mode, read_note) = (mode, note);
        }
    }
    Ok(TargetRead {
        acks,
        tally,
        target_findings,
        shown_path,
        read_mode,
        read_note,
        other_file,
    })
}

/// Classifies what [`read_file_target`] found, `prior` being the runs whose records
/// were on the target before this run, and makes the report.
///
/// Errors (exit 2): the target holds no record of the run but records of runs not in
/// `prior`.
fn judge_file(
    l: &RunLedger,
    fm: &FileManifest,
    read: TargetRead,
    prior: &[RunId],
    reused_by: &[RunId],
) -> Result<FileReport, Error> {
    let TargetRead {
        acks,
        tally,
        mut target_findings,
        shown_path,
        read_mode,
        read_note,
        other_file,
    } = read;
    let blocks = fm.blocks();
    let outcome = tally.finish(prior);
    // Records of a run the listener created later on this same target mean the target
    // was reused before this run was verified: the blocks it overwrote cannot be
    // judged. (A later run's record from another target is evidence of a misdirected
    // write and stays a finding.)
    let later: Vec<String> = outcome
        .other_runs
        .iter()
        .filter(|r| reused_by.contains(r))
        .map(|r| r.to_string())
        .collect();
    if !later.is_empty() && outcome.run_data_blocks > 0 {
        return Err(Error::Msg(format!(
            "target {} holds records of run {} but also of later runs on the same target ({}): \
             the target was reused before run {} was verified, and the blocks they overwrote cannot be judged",
            shown_path.display(),
            l.run,
            later.join(", "),
            l.run
        )));
    }
    if read_mode != "none" && outcome.run_data_blocks == 0 {
        let unknown: Vec<String> = outcome
            .other_runs
            .iter()
            .filter(|r| !prior.contains(r))
            .map(|r| r.to_string())
            .collect();
        if !unknown.is_empty() {
            return Err(Error::Msg(format!(
                "target {} holds no record of run {} but records of other plugpull runs in {} blocks \
                 (runs {}, which were not on the target when run {} started): \
                 wrong --target, or a later run reused this target",
                shown_path.display(),
                l.run,
                outcome.other_run_blocks,
                unknown.join(", "),
                l.run
            )));
        }
        if let (Some(what), 0) = (&other_file, outcome.run_data_blocks) {
            return Err(Error::Msg(format!(
                        "target {} holds no record of run {} and is not the file the run wrote ({what}): wrong --target?",
                        shown_path.display(),
                        l.run
                )));
        }
        let earlier = if outcome.other_runs.is_empty() {
            String::new()
        } else {
            let r: Vec<String> = outcome.other_runs.iter().map(|r| r.to_string()).collect();
            format!(
                " (only records of runs {}, which were on it before this run started)",
                r.join(", ")
            )
        };
        target_findings.push(TargetFinding {
            kind: "no_record_of_run".into(),
            detail: format!(
                "no record of run {} survived anywhere on the target{earlier}",
                l.run
            ),
        });
    }
    let boot = boot_relation(&l.manifest.boot_id, &target_id::boot_id());
    let head = ReportHead {
        run_id: l.run.to_string(),
        host: l.manifest.host.clone(),
        target: shown_path.display().to_string(),
        block_size: fm.block_size,
        blocks,
        finished: l.finished,
        acknowledged: acks.acknowledged,
        target_findings,
        read_mode: read_mode.into(),
        read_note,
        boot: boot.into(),
        run_started_unix_ms: l.manifest.started_unix_ms,
        run_chosen: l.chosen.clone(),
        atomic: fm.atomic.clone(),
    };
    Ok(FileReport::new(head, outcome))
}

/// Whether `path`, given with `--target`, is the run's file read through the backing
/// directory of the `plugpull-simfs` mount it was written on (a rehearsal's
/// procedure, `docs/procedure.md`): simfs keeps each file at the same name in its
/// backing directory under other inode numbers, so identity cannot match; the name
/// must.
fn simfs_backing(fm: &FileManifest, path: &Path) -> bool {
    let simfs = plugpull::probe::simfs_mode(&fm.identity.fs_source).is_some()
        || fm.identity.fs_type.ends_with("plugpull-simfs");
    simfs && path.file_name().is_some() && path.file_name() == Path::new(&fm.target).file_name()
}

/// Whether this host rebooted since the run: `same_boot`, `rebooted`, or `unknown` when
/// either boot id (the run's, this host's) is unknown (`""`).
fn boot_relation(run: &str, here: &str) -> &'static str {
    match target_id::same_boot(run, here) {
        None => "unknown",
        Some(true) => "same_boot",
        Some(false) => "rebooted",
    }
}

/// Reads every block of an opened target and adds its check to `tally`: 4 MiB reads
/// (whole blocks) on [`parallel::threads`] threads, each chunk's blocks checked into
/// a tally of their own on the thread that read them, the tallies merged in block
/// order ([`Tally::merge`]: the same outcome as one pass). Returns the read mode and
/// note (a refused `O_DIRECT` read falls back to buffered reads).
fn read_blocks(
    l: &RunLedger,
    fm: &FileManifest,
    acks: &AckTable,
    quiet: bool,
    o: Opened,
    tally: &mut Tally,
) -> Result<(&'static str, String), Error> {
    let blocks = fm.blocks();
    let bs = fm.block_size as usize;
    let bar = progress_bar(blocks * bs as u64, bs as u64, quiet);
    let per_read = ((4 << 20) / bs).max(1) * bs;
    let atomic = fm.atomic.is_some();
    let check = |c: &parallel::Chunk| {
        let mut t = Tally::expecting_atomic(atomic);
        let first = c.at / bs as u64;
        for i in 0..c.want / bs {
            let b = first + i as u64;
            let data = &c.bytes[(i * bs).min(c.bytes.len())..((i + 1) * bs).min(c.bytes.len())];
            if let Some(c) = classify_block(l.run, b, bs, acks.seq(b), data, fm.prior_foreign) {
                t.add(b, c, acks);
            }
        }
        t
    };
    let merge = |at: u64, want: usize, t: Tally| {
        tally.merge(t);
        if let Some(bar) = &bar {
            bar.set_position(at + want as u64);
        }
    };
    let mode = parallel::read_checked(
        o,
        blocks * bs as u64,
        per_read,
        parallel::threads(),
        check,
        merge,
    )?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(mode)
}

/// The read's progress bar on stderr (bytes read of `total`, bytes and blocks of
/// `block_size` bytes per second, time left), only on a terminal, not `quiet`
/// (`--json`), and for targets of 256 MiB or more.
fn progress_bar(total: u64, block_size: u64, quiet: bool) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() || total < (256 << 20) {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    let bs = block_size.max(1) as f64;
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "reading target {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {blocks_per_sec}, {eta} left)",
        )
        .expect("valid template")
        .with_key(
            "blocks_per_sec",
            move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0} blocks/s", s.per_sec() / bs);
            },
        ),
    );
    Some(bar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_relation_needs_both_boot_ids() {
        let (a, b) = (
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        );
        assert_eq!(boot_relation(a, a), "same_boot");
        assert_eq!(boot_relation(a, b), "rebooted");
        assert_eq!(boot_relation("", b), "unknown");
        assert_eq!(boot_relation(a, ""), "unknown");
    }
}
