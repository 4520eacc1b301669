//! Issue 9: the witness ends runs cleanly at its limits and cannot be locked out:
//! a full ledger disk (a small loop-mounted ext4), SIGINT with a stalled witness, a
//! stalled witness announced and paused for, a flood of unauthenticated connections,
//! a reporter dropped without an end.
//! Real listener and agent processes on loopback.

use plugpull::auth::Secret;
use plugpull::wire::{ErrorKind, Request, Response};
use plugpull_tests::ledger_file::*;
use plugpull_tests::loopfs::LoopFs;
use plugpull_tests::*;
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn a_full_witness_disk_ends_the_run_with_a_named_error() {
    const T: &str = "a_full_witness_disk_ends_the_run_with_a_named_error";
    let dir = tempfile::tempdir().unwrap();
    let fs = match LoopFs::mount(dir.path(), 4096) {
        Ok(fs) => fs,
        Err(why) => {
            skipped(T, &why);
            return;
        }
    };
    let data = fs.mnt().join("data");
    let l = Listener::start_at(dir.path(), &data, &[]);
    // Leave about 64 KiB: a few thousand acks' worth of ledger.
    let free = fs.free_bytes();
    let mut filler = std::fs::File::create(fs.mnt().join("filler")).unwrap();
    filler
        .write_all(&vec![0xa5u8; (free - (64 << 10)) as usize])
        .unwrap();
    filler.sync_all().unwrap();
    let target = dir.path().join("t.dat");
    let ack_log = dir.path().join("acks.log");
    let t0 = Instant::now();
    let o = plugpull(&write_args(
        l.addr(),
        &target,
        &["-T", "60s", "--ack-log", ack_log.to_str().unwrap()],
    ));
    let took = t0.elapsed();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let run = run_id(&o);
    let path = l.ledger_path(&run);
    assert_eq!(
        last_line(&err),
        format!(
            "plugpull: the witness could not record acknowledgements: listener {} refused: cannot append to ledger {}: No space left on device (os error 28)",
            l.addr(),
            path.display()
        ),
        "{err}"
    );
    assert!(!err.contains("reconnect"), "{err}");
    assert!(l.log_text().contains("ledger append failed"));
    // The ledger holds exactly what was confirmed, and no torn entry.
    let b = batches(&path);
    assert!(b.values().all(|&(times, _)| times == 1));
    assert_eq!(b.values().map(|&(_, a)| a).sum::<u64>(), lines(&ack_log));
    assert!(lines(&ack_log) > 0);
    // Its verify says the witness stopped it: no cut, NOT MEASURED, with the error.
    let v = plugpull(&["verify", "--listener", l.addr(), "--run", &run]);
    let out = stdout(&v);
    assert_eq!(v.status.code(), Some(2), "{out}{}", stderr(&v));
    let full = format!(
        "cannot append to ledger {}: No space left on device (os error 28)",
        path.display()
    );
    assert!(
        out.contains(&format!(
            "acknowledged writes in ledger: {} (no end recorded: the witness stopped recording the run, and the writer stopped with it)\n",
            lines(&ack_log)
        )),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l
            .starts_with("cut: none while the run wrote: the witness stopped recording it at ")
            && l.ends_with(" s into the run, and the writer stopped with it")),
        "{out}"
    );
    assert!(
        out.contains(&format!("the witness could not record the run's acknowledgements ({full}), so the writer stopped the run and no power was cut while it wrote: free space on the witness's ledger disk and run again")),
        "{out}"
    );
    // A resume of the run (with its token, derived as the listener does from the key
    // in its data directory) is refused with the same error.
    let key = std::fs::read(data.join("token-key")).unwrap();
    let run_id: plugpull::RunId = run.parse().unwrap();
    let token = plugpull::auth::hkdf_sha256(&key, &run_id.0.to_le_bytes(), b"plugpull run token");
    let mut c = RawConn::connect(l.addr());
    assert_eq!(c.handshake(&Secret::default()), Some(Response::Welcome));
    c.send(&Request::ResumeRun { run: run_id, token });
    assert_eq!(
        c.recv(),
        Some(Response::Error {
            kind: ErrorKind::Io,
            message: format!(
                "cannot append to ledger {}: No space left on device (os error 28)",
                path.display()
            )
        })
    );
}

/// SIGINT ends a run early, the summary saying so; with a stalled witness the writer
/// still stops within a second and says why.
#[test]
fn sigint_stops_a_writer_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    // A healthy witness: the run finishes properly.
    let w = Writer::spawn(&write_args(l.addr(), &target, &["-T", "60s"]));
    std::thread::sleep(Duration::from_millis(700));
    let t0 = Instant::now();
    unsafe { libc::kill(w.child.id() as i32, libc::SIGINT) };
    let run = w.run.clone();
    let (status, out, err) = w.finish();
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(
        out.lines().find(|l| l.starts_with("interrupted")),
        Some("interrupted: the run ended early (SIGINT)"),
        "the summary says the run was interrupted: {out}"
    );
    let acked: u64 = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("writes acknowledged: ")?
                .strip_suffix(" (confirmed by the listener)")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{out}"));
    let (code, v, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{verr}");
    assert_eq!(v["acknowledged"], serde_json::json!(acked));

    // A stalled witness: the writer still stops within a second, saying why.
    let target2 = dir.path().join("t2.dat");
    let w = Writer::spawn(&write_args(l.addr(), &target2, &["-T", "60s"]));
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(l.pid() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    unsafe { libc::kill(w.child.id() as i32, libc::SIGINT) };
    let (status, _, err) = w.finish();
    let took = t0.elapsed();
    unsafe { libc::kill(l.pid() as i32, libc::SIGCONT) };
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    let last = last_line(&err);
    assert!(
        last.starts_with(
            "plugpull: interrupted: the listener did not confirm the end of the run within 1 s; "
        ) && last.ends_with(" acknowledgements were never confirmed"),
        "{err}"
    );
}

/// The number after `prefix` up to the next space, e.g. the `2.0` of `for 2.0 s`.
fn number_after(line: &str, prefix: &str) -> f64 {
    line.split(prefix)
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_stalled_witness_is_announced_and_pauses_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let ack_log = dir.path().join("acks.log");
    // The default --max-unconfirmed (1,000,000 for files) is far away: time decides.
    let mut w = Writer::spawn(&write_args(
        l.addr(),
        &target,
        &["-T", "9s", "--ack-log", ack_log.to_str().unwrap()],
    ));
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(l.pid() as i32, libc::SIGSTOP) };
    let warn = w.wait_stderr(|_| true);
    assert!(warn.starts_with("witness has not confirmed for "), "{warn}");
    assert!(
        warn.trim_end().ends_with(" acknowledgements waiting"),
        "{warn}"
    );
    let s = number_after(&warn, "for ");
    assert!((2.0..3.0).contains(&s), "{warn}");
    let pause = w.wait_stderr(|_| true);
    assert!(
        pause.starts_with("paused: the witness has not confirmed for ")
            && pause
                .trim_end()
                .ends_with(" acknowledgements waiting; waiting for it"),
        "{pause}"
    );
    let s = number_after(&pause, "for ");
    assert!((5.0..6.0).contains(&s), "{pause}");
    let waiting_at_pause = number_after(&pause, "s, ") as u64;
    // Paused: no more writes are handed over while the witness is silent.
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(l.pid() as i32, libc::SIGCONT) };
    let resumed = w.wait_stderr(|_| true);
    assert_eq!(resumed.trim(), "resumed: the listener caught up");
    let run = w.run.clone();
    let (status, out, err) = w.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(waiting_at_pause > 0);
    let acked = lines(&ack_log);
    assert!(
        out.contains(&format!(
            "writes acknowledged: {acked} (confirmed by the listener)"
        )),
        "{out}"
    );
    let (code, v, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{verr}");
    assert_eq!(v["acknowledged"], serde_json::json!(acked));
}

/// `-T` ends a run whose writers are paused for a silent witness: the pause does not
/// stretch the run; its end then waits for the witness, and once it answers every
/// acknowledgement is confirmed and the run exits 0.
#[test]
fn the_run_time_ends_a_run_paused_for_a_silent_witness() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let ack_log = dir.path().join("acks.log");
    let mut w = Writer::spawn(&write_args(
        l.addr(),
        &target,
        &[
            "-T",
            "3s",
            "--max-unconfirmed-secs",
            "1",
            "--ack-log",
            ack_log.to_str().unwrap(),
        ],
    ));
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(l.pid() as i32, libc::SIGSTOP) };
    let pause = w.wait_stderr(|l| l.starts_with("paused: "));
    assert!(
        pause.starts_with("paused: the witness has not confirmed for "),
        "{pause}"
    );
    let end = w.wait_stderr(|l| l.starts_with("-T reached") || l.starts_with("resumed"));
    assert!(
        end.starts_with("-T reached while paused: the run ends; ")
            && end
                .trim_end()
                .ends_with(" acknowledgements still wait for the witness's confirmation"),
        "{end}"
    );
    assert!(number_after(&end, "ends; ") > 0.0, "{end}");
    unsafe { libc::kill(l.pid() as i32, libc::SIGCONT) };
    let (status, out, err) = w.finish();
    assert_eq!(status.code(), Some(0), "{err}");
    let acked = lines(&ack_log);
    assert!(
        out.contains(&format!(
            "writes acknowledged: {acked} (confirmed by the listener)"
        )),
        "{out}"
    );
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_connection_flood_neither_locks_agents_out_nor_grows_the_listener() {
    const IDLE: usize = 1500;
    const BIG: usize = 500;
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let t0 = Instant::now();
    let mut flood = Vec::with_capacity(IDLE + BIG);
    for i in 0..IDLE + BIG {
        let mut s = std::net::TcpStream::connect(l.addr()).unwrap();
        if i % 4 == 3 {
            // A bare length prefix claiming a 4 MiB frame.
            s.write_all(&(4u32 << 20).to_le_bytes()).unwrap();
        }
        flood.push(s);
    }
    let flood_took = t0.elapsed();
    assert!(flood_took < Duration::from_secs(20), "{flood_took:?}");
    // While all of them are open, a real agent gets in and finishes its run.
    let target = dir.path().join("t.dat");
    let t1 = Instant::now();
    let o = plugpull(&write_args(l.addr(), &target, &["--writes", "200"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(t1.elapsed() < Duration::from_secs(10), "{:?}", t1.elapsed());
    assert!(
        stdout(&o).contains("writes acknowledged: 200 (confirmed by the listener)"),
        "{}",
        stdout(&o)
    );
    // An oversized frame before authentication is refused by name, unread.
    let mut c = RawConn::connect(l.addr());
    c.sock.write_all(&(4u32 << 20).to_le_bytes()).unwrap();
    assert_eq!(
        c.recv(),
        Some(Response::Error {
            kind: ErrorKind::Protocol,
            message:
                "frame of 4194304 bytes exceeds the 128-byte limit before the handshake is done"
                    .into()
        })
    );
    let hwm = vm_hwm_kib(l.pid());
    eprintln!(
        "listener peak RSS under a flood of {} connections: {hwm} KiB",
        IDLE + BIG
    );
    assert!(hwm < 64 * 1024, "listener peak RSS {hwm} KiB");
    drop(flood);
    let run = run_id(&o);
    let (code, v, verr) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{verr}");
    assert_eq!(v["acknowledged"], serde_json::json!(200));
}

/// CPU time the calling thread has used so far.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) },
        0
    );
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[test]
fn a_reporter_dropped_without_an_end_confirms_what_it_was_handed_then_stops() {
    use plugpull::ledger::FileAck;
    use plugpull_client::reporter::{Reporter, ReporterOptions};
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let log = dir.path().join("acks.log");
    // One thread runs every task of the reporter, so its CPU time is this thread's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let spent = rt.block_on(async {
        let opts = ReporterOptions {
            ack_log: Some(log.clone()),
            max_unconfirmed: None,
            max_unconfirmed_secs: 5.0,
            canary_dir: Default::default(),
        };
        let manifest = *raw_manifest("h", "/nonexistent/target", 1 << 20, 4096);
        let (reporter, _run) = Reporter::start_with(l.addr(), &Secret::new(b""), manifest, &opts)
            .await
            .unwrap();
        let sink = reporter.sink();
        for seq in 1..=1000 {
            sink.ack(plugpull::ledger::Ack::File(FileAck {
                seq,
                block: seq % 256,
                ms: 0,
            }));
        }
        // An error path of a workload: the reporter goes without finish().
        drop(sink);
        drop(reporter);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::read_to_string(&log).unwrap().lines().count() < 1000 {
            assert!(
                Instant::now() < deadline,
                "the dropped reporter's acks were not all confirmed within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = thread_cpu();
        tokio::time::sleep(Duration::from_millis(500)).await;
        thread_cpu() - before
    });
    let want: String = (1..=1000u64)
        .map(|s| format!("{s} {}\n", s % 256))
        .collect();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), want);
    // A task polling a closed channel would use the whole 500 ms.
    assert!(
        spent < Duration::from_millis(100),
        "the reporter task kept running after it was dropped: {spent:?} CPU in 500 ms"
    );
}
