//! Issue 9: the witness proves its own record. Each case runs real processes on
//! loopback: a proxy that forges confirmations or drops connections, a slow ledger
//! disk, run tokens, a ledger that lost entries, a listener that forgot what it
//! confirmed, a witness disk that loses synced writes (simfs). The witness's limits
//! (full disk, SIGINT, stall, connection flood) are in `witness_limits.rs`.

use plugpull::auth::Secret;
use plugpull::ledger::Entry;
use plugpull::wire::{ErrorKind, Request, Response};
use plugpull_tests::ledger_file::*;
use plugpull_tests::proxy::{Mode, Proxy};
use plugpull_tests::*;
use std::path::Path;
use std::time::Duration;

#[test]
fn a_proxy_without_the_secret_cannot_forge_confirmations() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let p = Proxy::start(l.addr(), Mode::ForgeConfirmed, 1);
    let target = dir.path().join("t.dat");
    let o = plugpull(&write_args(p.addr(), &target, &["--writes", "2000"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let run = run_id(&o);
    let fault = format!(
        "witness fault: message 1 after the handshake failed authentication (forged, altered, replayed, reordered, or one before it was dropped); something between this agent and listener {} forged or altered it, so nothing it said can be trusted",
        p.addr()
    );
    assert_eq!(last_line(&err), format!("plugpull: {fault}"), "{err}");
    assert!(
        err.contains(&format!("run {run} is marked invalid in the ledger")),
        "{err}"
    );
    assert!(p.forged.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    // Nothing the proxy swallowed is in the ledger, and the fault is.
    let path = l.ledger_path(&run);
    assert_eq!(batches(&path).len(), 0);
    let invalid: Vec<String> = entries(&path)
        .into_iter()
        .filter_map(|(_, _, e)| match e {
            Entry::Invalid { error } => Some(error),
            _ => None,
        })
        .collect();
    assert_eq!(invalid, vec![fault.clone()]);
    // verify never passes the run.
    let (code, v, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2);
    let why = format!("run {run} cannot be judged: {fault}");
    assert_eq!(v, serde_json::json!({"error": why, "ok": false}));
    assert_eq!(verr.trim(), format!("plugpull: {why}"));
}

#[test]
fn connections_dropped_every_30_to_120_ms_on_a_slow_ledger_record_each_batch_once() {
    const WRITES: u64 = 6000;
    let dir = tempfile::tempdir().unwrap();
    let mut l = Listener::start_with(dir.path(), &["--test-sync-delay-ms", "80"]);
    let p = Proxy::start(
        l.addr(),
        Mode::Drop {
            min_ms: 30,
            max_ms: 120,
        },
        7,
    );
    let target = dir.path().join("t.dat");
    let ack_log = dir.path().join("acks.log");
    let o = plugpull(&write_args(
        p.addr(),
        &target,
        &[
            "--writes",
            &WRITES.to_string(),
            "-j",
            "2",
            "--ack-log",
            ack_log.to_str().unwrap(),
        ],
    ));
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.contains(&format!(
            "writes acknowledged: {WRITES} (confirmed by the listener)"
        )),
        "{out}"
    );
    let drops = p.drops.load(std::sync::atomic::Ordering::Relaxed);
    // The run must have met the proxy's drops several times (their number depends on
    // how fast this machine writes: 3000 writes once saw only 3).
    assert!(drops >= 3, "only {drops} connections dropped");
    let run = run_id(&o);
    // Every batch exactly once, numbered 1..=n, holding every write once.
    let b = batches(&l.ledger_path(&run));
    let n = b.len() as u64;
    assert_eq!(
        b.keys().copied().collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>()
    );
    assert!(b.values().all(|&(times, _)| times == 1), "{b:?}");
    assert_eq!(b.values().map(|&(_, acks)| acks).sum::<u64>(), WRITES);
    assert_eq!(lines(&ack_log), WRITES);
    let (code, v, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{verr}");
    assert_eq!(v["acknowledged"], serde_json::json!(WRITES));
    // After a restart the listener counts the same.
    l.restart();
    let (code, v, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{verr}");
    assert_eq!(v["acknowledged"], serde_json::json!(WRITES));
}

#[test]
fn only_the_agent_that_started_a_run_can_resume_it() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut c = RawConn::connect(l.addr());
    assert_eq!(c.handshake(&Secret::default()), Some(Response::Welcome));
    c.send(&Request::StartRun {
        manifest: plugpull_tests::raw_manifest("token-test", "/nonexistent", 4096, 4096),
    });
    let Some(Response::RunStarted { run, token }) = c.recv() else {
        panic!()
    };
    let mut other = RawConn::connect(l.addr());
    other.handshake(&Secret::default());
    other.send(&Request::ResumeRun {
        run,
        token: [0; 32],
    });
    assert_eq!(
        other.recv(),
        Some(Response::Error {
            kind: ErrorKind::Auth,
            message: format!("ResumeRun for run {run} without its token: only the agent that started a run may resume it")
        })
    );
    let mut owner = RawConn::connect(l.addr());
    owner.handshake(&Secret::default());
    owner.send(&Request::ResumeRun { run, token });
    assert_eq!(
        owner.recv(),
        Some(Response::Resumed {
            run,
            confirmed_batch: 0
        })
    );
}

#[test]
fn a_request_that_fails_its_tag_is_refused_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut c = RawConn::connect(l.addr());
    assert_eq!(c.handshake(&Secret::default()), Some(Response::Welcome));
    // Sealed under another session's key, as a peer without this session's would.
    let mut wrong = Secret::new(b"x").agent_session(&[0; 32], &[0; 32]);
    let frame = plugpull::wire::encode_sealed(
        &Request::ResumeRun {
            run: plugpull::RunId(1),
            token: [0; 32],
        },
        &mut wrong.send,
    );
    std::io::Write::write_all(&mut c.sock, &frame).unwrap();
    assert_eq!(
        c.recv(),
        Some(Response::Error {
            kind: ErrorKind::Mac,
            message: "message 0 after the handshake failed authentication (forged, altered, replayed, reordered, or one before it was dropped)".into()
        })
    );
    assert_eq!(c.recv(), None);
}

/// A finished run of `writes` writes on `l`; returns its id.
fn finished_run(l: &Listener, dir: &Path, name: &str, writes: &str) -> String {
    let target = dir.join(name);
    let o = plugpull(&write_args(
        l.addr(),
        &target,
        &["--writes", writes, "-j", "1"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    run_id(&o)
}

/// The `Acks` entries of a ledger: (offset, length, batch, acks).
fn ack_entries(path: &Path) -> Vec<(u64, u64, u64, u64)> {
    entries(path)
        .into_iter()
        .filter_map(|(at, len, e)| match e {
            Entry::Acks(b) => Some((at, len, b.batch, b.acks.count())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_ledger_that_lost_acknowledged_entries_cannot_be_judged() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Listener::start(dir.path());
    let gap = finished_run(&l, dir.path(), "a.dat", "3000");
    let torn = finished_run(&l, dir.path(), "b.dat", "3000");
    let short = finished_run(&l, dir.path(), "c.dat", "3000");
    l.kill();

    // The witness's storage lost a synced entry in the middle: the batch numbers jump.
    let p = l.ledger_path(&gap);
    let a = ack_entries(&p);
    assert!(a.len() >= 3, "only {} batches", a.len());
    let (at, len, batch, lost_gap) = a[1];
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.drain(at as usize..(at + len) as usize);
    std::fs::write(&p, &bytes).unwrap();

    // Its last entries were damaged (zeroed) and are cut off as a torn tail on restart.
    let p = l.ledger_path(&torn);
    let a = ack_entries(&p);
    let (cut, ..) = a[a.len() - 1];
    let mut bytes = std::fs::read(&p).unwrap();
    let torn_bytes = bytes.len() as u64 - cut;
    bytes[cut as usize..].fill(0);
    std::fs::write(&p, &bytes).unwrap();

    // It lost its last batch cleanly, before the Finished entry: the agent's count says so.
    let p = l.ledger_path(&short);
    let a = ack_entries(&p);
    let (at, len, _, lost_short) = a[a.len() - 1];
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.drain(at as usize..(at + len) as usize);
    std::fs::write(&p, &bytes).unwrap();

    l.restart();
    let (code, _, err) = verify_json(&l, &["--run", &gap]);
    assert_eq!(code, 2);
    assert_eq!(err.trim(), format!(
        "plugpull: run {gap}: the witness lost {lost_gap} acknowledged writes: this run cannot be judged (batch {batch} is missing: batch numbers jump from {} to {})",
        batch - 1,
        batch + 1
    ));
    let (code, _, err) = verify_json(&l, &["--run", &torn]);
    assert_eq!(code, 2);
    assert_eq!(err.trim(), format!(
        "plugpull: run {torn}: the witness lost acknowledged writes (how many is unknown): this run cannot be judged (the listener cut a torn tail of {torn_bytes} bytes off the ledger at byte {cut} on a restart, and no Finished entry gives the agent's count to show nothing confirmed was in it)"
    ));
    let (code, _, err) = verify_json(&l, &["--run", &short]);
    assert_eq!(code, 2);
    assert_eq!(err.trim(), format!(
        "plugpull: run {short}: the witness lost {lost_short} acknowledged writes: this run cannot be judged (the agent finished with 3000 acknowledged, the ledger holds {})",
        3000 - lost_short
    ));
}

#[test]
fn a_listener_that_forgot_confirmed_batches_is_a_witness_fault() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let w = Writer::spawn(&write_args(l.addr(), &target, &["-T", "20s", "-j", "1"]));
    let run = w.run.clone();
    std::thread::sleep(Duration::from_millis(1500));
    l.kill();
    // The listener's storage loses its last five synced batches (cleanly).
    let p = l.ledger_path(&run);
    let a = ack_entries(&p);
    assert!(a.len() >= 10, "only {} batches", a.len());
    let (cut, ..) = a[a.len() - 5];
    let kept = a[a.len() - 6].2;
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(cut).unwrap();
    drop(f);
    l.restart();
    let (status, _, err) = w.finish();
    assert_eq!(status.code(), Some(2), "{err}");
    let last = last_line(&err);
    let prefix = format!(
        "plugpull: witness fault: listener {} answered Resumed for batch {kept} of run {run}, after it had confirmed batch ",
        l.addr()
    );
    assert!(last.starts_with(&prefix), "{err}");
    let told: u64 = last[prefix.len()..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(told > kept, "{last}");
    assert!(
        last.ends_with(": it lost acknowledgements it had made durable"),
        "{last}"
    );
    assert!(
        err.contains(&format!("run {run} is marked invalid in the ledger")),
        "{err}"
    );
    let (code, _, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2);
    assert_eq!(
        verr.trim(),
        format!(
            "plugpull: run {run} cannot be judged: {}",
            &last["plugpull: ".len()..]
        )
    );
}

#[test]
fn a_witness_disk_that_loses_synced_writes_is_caught_by_the_agent() {
    use plugpull_tests::simfs::{skip_without_fuse, SimFs};
    const T: &str = "a_witness_disk_that_loses_synced_writes_is_caught_by_the_agent";
    if skip_without_fuse(T) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    std::fs::create_dir_all(&sim).unwrap();
    // The witness's own disk lies: fdatasync returns at once, data reaches the
    // backing store only 500 ms later.
    let mut fs = SimFs::mount_with(&sim, "lying", 11, &["--destage-delay-ms", "500"]);
    let data = fs.mnt().join("data");
    let mut l = Listener::start_at(dir.path(), &data, &[]);
    let target = dir.path().join("t.dat");
    let ack_log = dir.path().join("acks.log");
    let w = Writer::spawn(&write_args(
        l.addr(),
        &target,
        &[
            "-T",
            "30s",
            "-j",
            "1",
            "--ack-log",
            ack_log.to_str().unwrap(),
        ],
    ));
    let run = w.run.clone();
    std::thread::sleep(Duration::from_millis(2500));
    // The witness host loses power: the listener dies, its disk's cache is gone.
    l.kill();
    fs.cut();
    fs.remount("honest");
    l.restart();
    let (status, _, err) = w.finish();
    assert_eq!(status.code(), Some(2), "{err}");
    let b = batches(&l.ledger_path(&run));
    let kept = *b.keys().last().unwrap();
    let in_ledger: u64 = b.values().map(|&(_, a)| a).sum();
    let confirmed = lines(&ack_log);
    // The agent had been told more than the ledger kept: that is the fault it names.
    assert!(
        confirmed > in_ledger,
        "{confirmed} confirmed, {in_ledger} kept"
    );
    let last = last_line(&err);
    let prefix = format!(
        "plugpull: witness fault: listener {} answered Resumed for batch {kept} of run {run}, after it had confirmed batch ",
        l.addr()
    );
    assert!(last.starts_with(&prefix), "{err}");
    assert!(
        last.ends_with(": it lost acknowledgements it had made durable"),
        "{last}"
    );
    let (code, _, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 2);
    assert_eq!(
        verr.trim(),
        format!(
            "plugpull: run {run} cannot be judged: {}",
            &last["plugpull: ".len()..]
        )
    );
    eprintln!(
        "witness disk lost {} of {confirmed} confirmed acknowledgements; the agent caught it",
        confirmed - in_ledger
    );
}
