//! Unit tests of the store against real files in a temporary directory: typed errors
//! and the kinds they are answered with, idempotent appends, and what a reopened store
//! recovers (durable length, highest batch, a torn tail cut off and kept).

use super::*;
use plugpull::ledger::{AckBatch, Acks, FileAck};

fn manifest() -> Manifest {
    Manifest::example_file("box", "/t", 8192, 4096)
}

fn batch(batch: u64) -> Append {
    Append::Batch(AckBatch {
        batch,
        promised: true,
        acks: Acks::File(vec![FileAck {
            seq: batch,
            block: 1,
            ms: 3,
        }]),
        flushes: None,
        canary: Default::default(),
        sealed_ms: 0,
        oldest_in_flight_ms: None,
    })
}

/// One encoded ledger entry of batch `n` (as [`batch`] makes it).
fn entry_of(n: u64) -> Vec<u8> {
    let Append::Batch(b) = batch(n) else {
        unreachable!()
    };
    let mut out = Vec::new();
    ledger::encode_entry(&Entry::Acks(b), &mut out);
    out
}

/// Runs `f` on a fresh runtime that is dropped afterwards, so every writer task (and
/// with it the store and its lock on the data directory) is gone when it returns.
fn on_runtime<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn open(dir: &Path) -> Arc<Store> {
    Arc::new(Store::open(dir, Duration::ZERO).unwrap())
}

/// Creates a run in `dir` and appends batches 1 and 2; its id and durable bytes.
fn run_with_two_batches(dir: &Path) -> (RunId, Vec<u8>) {
    on_runtime(async {
        let store = open(dir);
        let h = store.create(manifest()).unwrap();
        // Both are queued before the writer first runs (one thread): one group.
        let (one, two) = (h.append(batch(1)), h.append(batch(2)));
        assert_eq!(one.await.unwrap(), Ok(2));
        assert_eq!(two.await.unwrap(), Ok(2));
        let (bytes, torn) = store.read(h.run).unwrap();
        assert!(torn.is_empty());
        (h.run, bytes)
    })
}

#[test]
fn an_unknown_run_is_a_typed_error_answered_as_unknown_run() {
    let dir = tempfile::tempdir().unwrap();
    on_runtime(async {
        let store = open(dir.path());
        let run = RunId(0x2a);
        let e = store.handle(run).unwrap_err();
        assert_eq!(e, StoreError::UnknownRun(run));
        assert_eq!(e.kind(), ErrorKind::UnknownRun);
        assert_eq!(e.to_string(), "unknown run 000000000000002a");
        assert_eq!(store.read(run).unwrap_err(), StoreError::UnknownRun(run));
        assert_eq!(store.still_written(run), None);
        assert_eq!(store.latest_of("box"), Ok(None));
    });
}

#[test]
fn a_repeated_batch_is_confirmed_without_being_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let (run, before) = run_with_two_batches(dir.path());
    on_runtime(async {
        let store = open(dir.path());
        let h = store.handle(run).unwrap();
        assert_eq!(h.append(batch(2)).await.unwrap(), Ok(2));
        assert_eq!(h.append(batch(1)).await.unwrap(), Ok(2));
        assert_eq!(store.read(run).unwrap().0, before);
        assert_eq!(h.append(batch(3)).await.unwrap(), Ok(3));
        let (after, _) = store.read(run).unwrap();
        assert_eq!(after.len(), before.len() + 20);
        assert_eq!(after, [before, entry_of(3)].concat());
    });
}

#[test]
fn a_reopened_store_recovers_the_durable_length_and_highest_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (run, bytes) = run_with_two_batches(dir.path());
    // Header, manifest, then the two batches of one ack each (20 bytes apiece).
    assert_eq!(&bytes[..8], b"PPLEDGR6");
    assert_eq!(&bytes[8..16], run.0.to_le_bytes());
    assert_eq!(
        &bytes[bytes.len() - 40..],
        [entry_of(1), entry_of(2)].concat()
    );
    let path = dir.path().join("runs").join(format!("{run}.ledger"));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    on_runtime(async {
        let store = open(dir.path());
        assert_eq!(store.read(run).unwrap(), (bytes.clone(), Vec::new()));
        assert_eq!(store.latest_of("box"), Ok(Some(run)));
        assert_eq!(store.latest_of("other"), Ok(None));
        // A barrier (what ResumeRun sends) answers with the recovered highest batch.
        let h = store.handle(run).unwrap();
        assert_eq!(h.append(Append::Barrier).await.unwrap(), Ok(2));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    });
}

#[test]
fn a_torn_tail_is_cut_and_kept_beside_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let (run, bytes) = run_with_two_batches(dir.path());
    let path = dir.path().join("runs").join(format!("{run}.ledger"));
    // A commit cut short: the first 10 bytes of batch 3's entry.
    let tail = &entry_of(3)[..10];
    std::fs::write(&path, [&bytes[..], tail].concat()).unwrap();
    on_runtime(async {
        let store = open(dir.path());
        let at = bytes.len() as u64;
        assert_eq!(
            store.read(run).unwrap(),
            (
                bytes.clone(),
                vec![TornTail {
                    offset: at,
                    bytes: 10
                }]
            )
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), at);
        let kept = dir
            .path()
            .join("runs")
            .join(format!("{run}.ledger.torn-{at}"));
        assert_eq!(std::fs::read(kept).unwrap(), tail);
        let h = store.handle(run).unwrap();
        assert_eq!(h.append(Append::Barrier).await.unwrap(), Ok(2));
    });
}

#[test]
fn a_ledger_named_for_another_run_is_damaged_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (run, bytes) = run_with_two_batches(dir.path());
    let other = RunId(0x11);
    let runs = dir.path().join("runs");
    std::fs::write(runs.join(format!("{other}.ledger")), &bytes).unwrap();
    on_runtime(async {
        let store = open(dir.path());
        let why = format!("file is named for run {other} but its header says {run}");
        let e = store.handle(other).unwrap_err();
        assert_eq!(
            e,
            StoreError::Damaged {
                run: other,
                why: why.clone()
            }
        );
        assert_eq!(e.kind(), ErrorKind::LedgerDamaged);
        assert_eq!(
            e.to_string(),
            format!("ledger of run 0000000000000011 is damaged: {why}")
        );
        assert_eq!(store.read(other).unwrap_err(), e);
        // The sound run beside it is served as before.
        assert_eq!(store.read(run).unwrap().0, bytes);
    });
}
