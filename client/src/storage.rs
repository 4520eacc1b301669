//! The storage under a run (`docs/probe.md`, "Every run"): `write` probes its target
//! (or PostgreSQL's data directory) when it starts and records the probe in the
//! run's manifest ([`plugpull::ledger::Storage`]); while it runs, the leaf disks'
//! "flush requests completed" counters are sampled ([`FlushCounters`]) into the ack
//! batches and the `-P` lines; `verify` builds and prints the "stack under test"
//! section from them ([`cut_evidence_now`] for `StorageReport::build`, [`text`]).

use plugpull::ledger::{FlushSample, Storage};
use plugpull::probe::evidence::Snapshot;
use plugpull::probe::Probe;
use plugpull::report::StorageReport;
use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The leaf disks whose flush counters a run samples.
#[derive(Clone, Debug, Default)]
pub struct FlushCounters {
    disks: Vec<String>,
}

impl FlushCounters {
    /// Counters of `disks` (kernel names, e.g. `vda`).
    pub fn new(disks: Vec<String>) -> FlushCounters {
        FlushCounters { disks }
    }

    /// Whether there is no disk to sample.
    pub fn is_empty(&self) -> bool {
        self.disks.is_empty()
    }

    /// Each disk's "flush requests completed" now (`/sys/block/DISK/stat` field 16);
    /// `None` where it cannot be read or the kernel has no such field.
    pub fn sample(&self) -> FlushSample {
        FlushSample {
            counts: self
                .disks
                .iter()
                .map(|d| {
                    crate::probe::flush::read_stat(d)
                        .ok()
                        .and_then(|s| s.flush_ios)
                })
                .collect(),
        }
    }

    /// The fewest flushes any disk completed per operation between `before` and
    /// `after`, over `ops` operations (writes or commits); `None` with no disk, no
    /// operation, or a counter unknown in either sample.
    pub fn fewest_per_op(before: &FlushSample, after: &FlushSample, ops: u64) -> Option<f64> {
        if ops == 0 || before.counts.is_empty() {
            return None;
        }
        let mut fewest: Option<u64> = None;
        for (b, a) in before.counts.iter().zip(&after.counts) {
            let d = a.zip(*b).and_then(|(a, b)| a.checked_sub(b))?;
            fewest = Some(fewest.map_or(d, |f| f.min(d)));
        }
        fewest.map(|f| f as f64 / ops as f64)
    }
}

/// When the reporter attaches a flush sample to a batch: at most once a second, and
/// always when asked to (the run's last batch).
#[derive(Debug)]
pub struct FlushClock {
    counters: FlushCounters,
    last: Option<Instant>,
}

/// How often at most a batch carries a flush sample.
pub const FLUSH_SAMPLE_EVERY: Duration = Duration::from_secs(1);

impl FlushClock {
    /// A clock over `counters`; the first batch sealed gets a sample.
    pub fn new(counters: FlushCounters) -> FlushClock {
        FlushClock {
            counters,
            last: None,
        }
    }

    /// A sample when one is due (`force`, or [`FLUSH_SAMPLE_EVERY`] since the last);
    /// `None` when not due or there is no disk.
    pub fn due(&mut self, force: bool) -> Option<FlushSample> {
        if self.counters.is_empty() {
            return None;
        }
        let now = Instant::now();
        if !force && self.last.is_some_and(|t| now - t < FLUSH_SAMPLE_EVERY) {
            return None;
        }
        self.last = Some(now);
        Some(self.counters.sample())
    }
}

/// Probes `target` for a run (never fatal: what fails is recorded as not probed):
/// the stack, environment and warnings, then [`record`].
pub fn probe_for_run(target: &Path, seconds: Option<f64>) -> (Storage, Option<Probe>) {
    match crate::probe::probe(target) {
        Ok(p) => record(p, Some(target), seconds),
        Err(e) => not_probed(e.to_string()),
    }
}

/// Probes PostgreSQL for a pgbench run through the run's own session `client`
/// ([`crate::probe::pg::probe_postgres`]: settings, the data directory's stack when
/// it is on this host, libeatmydata in the backend), then [`record`] with the timed
/// loop in the data directory.
pub async fn probe_server_for_run(
    client: &tokio_postgres::Client,
    conninfo: &str,
    settings: plugpull::ledger::PgSettings,
    seconds: Option<f64>,
) -> (Storage, Option<Probe>) {
    match crate::probe::pg::probe_postgres(client, conninfo, settings).await {
        Ok(p) => tokio::task::spawn_blocking(move || {
            let dir = crate::probe::data_directory_of(&p);
            record(p, dir.as_deref(), seconds)
        })
        .await
        .unwrap_or_else(|e| not_probed(format!("the probe failed: {e}"))),
        Err(e) => not_probed(e.to_string()),
    }
}

/// A storage record saying why there is no probe.
fn not_probed(why: String) -> (Storage, Option<Probe>) {
    (
        Storage {
            not_probed: why,
            ..Storage::default()
        },
        None,
    )
}

/// The run's storage record of probe `p`, completed ([`crate::probe::complete`]:
/// the timed loop at `loop_at` with `seconds`, the cut-evidence snapshot), with its
/// leaf disks' flush counters sampled last. Returns the record and the probe, to print.
pub fn record(
    mut p: Probe,
    loop_at: Option<&Path>,
    seconds: Option<f64>,
) -> (Storage, Option<Probe>) {
    crate::probe::complete(&mut p, loop_at, seconds);
    // Disks that are not known to hold the storage under test are not counted.
    let disks: Vec<String> = if p.storage_is_here() {
        p.leaves.iter().map(|l| l.name.clone()).collect()
    } else {
        Vec::new()
    };
    let counters = FlushCounters::new(disks.clone());
    let storage = Storage {
        probe_json: serde_json::to_string(&p).expect("a probe serializes"),
        not_probed: String::new(),
        flushes_start: counters.sample(),
        disks,
    };
    (storage, Some(p))
}

/// The stack under a run as `write` prints it before its first write: the probe's
/// layers, environment, notes and warnings (the cut-evidence counters are in the
/// manifest, for `verify`).
pub fn write_head(storage: &Storage, probe: Option<&Probe>) -> String {
    match probe {
        Some(p) => crate::probe::print::text(&Probe {
            evidence: None,
            ..p.clone()
        }),
        None => format!("stack under test: not probed: {}\n", storage.not_probed),
    }
}

/// Why a run's cut evidence and flushes were not taken: its storage was not found.
pub const NOT_HERE: &str = "cut evidence not taken: the run's storage was not found on its host (a data directory hidden from the role, or a server elsewhere: see the notes above)";

/// The cut-evidence snapshot of the run `storage` recorded, taken now on this host
/// (boot id, the drives' power-loss counters: `smartctl` and `nvme` where present,
/// which can take a while), or why none is taken: only when this host is the run's
/// (`run_host`) and the run's storage was found on it (a pgbench server elsewhere was
/// not: its machine's counters are not this one's). `verify` takes it while it reads
/// the medium (`crate::verify::judge`), not after.
pub fn cut_evidence_now(storage: &Storage, run_host: &str) -> Result<Snapshot, String> {
    let here = crate::manifest::hostname();
    match storage.probe() {
        _ if here != run_host => Err(format!(
            "cut evidence not taken: verify runs on host {here}, the run ran on host {run_host}"
        )),
        Ok(None) | Err(_) => Err("cut evidence not taken: the run's storage was not probed".into()),
        Ok(Some(p)) if !p.storage_is_here() => Err(NOT_HERE.into()),
        Ok(Some(_)) => Ok(crate::probe::evidence::snapshot(&storage.disks)),
    }
}

/// The "stack under test" section as `verify` prints it: the stack at the run's
/// start, flushes per acknowledgement during the run, the cut evidence, warnings.
pub fn text(r: &StorageReport, what: &str) -> String {
    let Some(p) = &r.probe else {
        return format!("stack under test: not probed: {}\n", r.not_probed);
    };
    let stack = crate::probe::print::text(&Probe {
        evidence: None,
        warnings: Vec::new(),
        ..p.clone()
    });
    let mut s = stack
        .strip_suffix("warnings: none\n")
        .unwrap_or(&stack)
        .replacen(
            "stack under test:",
            "stack under test (probed when the run started):",
            1,
        );
    if r.flushes.is_empty() {
        let _ = writeln!(s, "flushes during the run: {}", r.flushes_note);
    }
    for f in &r.flushes {
        let _ = match (f.flushes, f.per_ack) {
            (Some(n), Some(x)) => writeln!(
                s,
                "flushes during the run: {}: {n} over the {} {what} up to the last flush sample ({x:.2} per acknowledgement)",
                f.disk, f.acknowledged
            ),
            _ => writeln!(s, "flushes during the run: {}: not counted", f.disk),
        };
    }
    s.push_str("cut evidence (run start \u{2192} now):\n");
    for l in &r.cut_evidence {
        let _ = writeln!(s, "  {l}");
    }
    if let Some(a) = &r.evidence_after {
        for n in &a.notes {
            let _ = writeln!(s, "  {n}");
        }
    }
    if r.warnings.is_empty() {
        s.push_str("warnings: none\n");
    } else {
        s.push_str("warnings (they never change the verdict):\n");
        for w in &r.warnings {
            let _ = writeln!(s, "  {}: {}", w.id.as_str(), w.message);
        }
    }
    s
}

/// The cut evidence for the human report (`plugpull::verdict::cut`): one line each
/// for the cut, the exposure and the canary, then, when a PASS could not have shown
/// a loss, why — each ends with a line break.
pub fn cut_text(c: &plugpull::verdict::cut::CutReport) -> String {
    let mut s: String = c.lines().into_iter().map(|l| l + "\n").collect();
    if !c.measured {
        s += &format!("not measured: {}\n", c.not_measured);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(v: &[Option<u64>]) -> FlushSample {
        FlushSample { counts: v.to_vec() }
    }

    #[test]
    fn fewest_flushes_per_op_is_the_least_flushed_disk() {
        let before = sample(&[Some(10), Some(100)]);
        let after = sample(&[Some(30), Some(105)]);
        assert_eq!(FlushCounters::fewest_per_op(&before, &after, 10), Some(0.5));
        assert_eq!(FlushCounters::fewest_per_op(&before, &after, 0), None);
        let unknown = sample(&[Some(30), None]);
        assert_eq!(FlushCounters::fewest_per_op(&before, &unknown, 10), None);
        assert_eq!(
            FlushCounters::fewest_per_op(&sample(&[]), &sample(&[]), 10),
            None
        );
    }

    #[test]
    fn cut_evidence_is_taken_only_on_the_runs_host_where_its_storage_was_found() {
        let here = crate::manifest::hostname();
        let facts = plugpull::report::storage::RunFacts {
            batches: &Default::default(),
            end: None,
            device_error: false,
            uses_flush: true,
            serial: true,
            what: "acknowledged writes",
        };
        let probed = Storage {
            probe_json: serde_json::to_string(&Probe::default()).unwrap(),
            ..Storage::default()
        };
        let at = |storage: &Storage, host: &str| {
            StorageReport::build(storage, &facts, cut_evidence_now(storage, host))
        };
        let r = at(&probed, "the-agent-host");
        assert_eq!(
            r.cut_evidence,
            [format!(
                "cut evidence not taken: verify runs on host {here}, the run ran on host the-agent-host"
            )]
        );
        assert_eq!(r.evidence_after, None);
        // A probe with no layers: the server's data directory was not on this host.
        let r = at(&probed, &here);
        assert_eq!(r.cut_evidence, [NOT_HERE]);
        let unprobed = Storage {
            not_probed: "no mount holds /x".into(),
            ..Storage::default()
        };
        assert_eq!(
            cut_evidence_now(&unprobed, &here),
            Err("cut evidence not taken: the run's storage was not probed".into())
        );
        let r = at(&unprobed, &here);
        assert_eq!(
            (r.probe, r.not_probed.as_str()),
            (None, "no mount holds /x")
        );
        assert_eq!(r.cut_evidence, Vec::<String>::new());
    }

    #[test]
    fn a_clock_without_disks_never_samples_and_one_with_disks_samples_once_a_second() {
        assert_eq!(FlushClock::new(FlushCounters::default()).due(true), None);
        let mut c = FlushClock::new(FlushCounters::new(vec!["no-such-disk".into()]));
        assert_eq!(c.due(false), Some(sample(&[None])));
        assert_eq!(c.due(false), None);
        assert_eq!(c.due(true), Some(sample(&[None])));
    }
}
