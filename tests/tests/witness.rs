//! The witness must be trustworthy: authentication, listener crashes, hostile input,
//! many agents. Real listener processes on real sockets.

use plugpull::auth::Secret;
use plugpull::ledger::{self, Acks, Entry};
use plugpull::wire::{ErrorKind, Request, Response, PROTOCOL_VERSION};
use plugpull::RunId;
use plugpull_tests::*;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Every file ack in a ledger file, as (seq, block); panics on duplicates.
fn ledger_acks(path: &std::path::Path) -> BTreeSet<(u64, u64)> {
    let bytes = std::fs::read(path).unwrap();
    let mut set = BTreeSet::new();
    ledger::scan(&bytes, |_, e| {
        if let Entry::Acks(b) = e {
            if let Acks::File(v) = b.acks {
                for a in v {
                    assert!(
                        set.insert((a.seq, a.block)),
                        "ack {} twice in the ledger",
                        a.seq
                    );
                }
            }
        }
    })
    .unwrap();
    set
}

fn secret_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn every_confirmed_ack_survives_20_listener_kills() {
    let dir = tempfile::tempdir().unwrap();
    let mut l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let ack_log = dir.path().join("acks.log");
    let w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--size",
        "2MiB",
        "-j",
        "2",
        "-T",
        "8s",
        "--target",
        target.to_str().unwrap(),
        "--ack-log",
        ack_log.to_str().unwrap(),
    ]);
    let run = w.run.clone();
    for i in 0..20 {
        std::thread::sleep(Duration::from_millis(100 + 17 * i));
        l.restart(); // SIGKILL, then a new listener on the same port and data directory
    }
    let (status, rest, err) = w.finish();
    assert!(status.success(), "writer failed: {err}");
    assert!(err.contains("reconnected to listener"), "{err}");
    let confirmed: BTreeSet<(u64, u64)> = std::fs::read_to_string(&ack_log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut it = l.split(' ').map(|x| x.parse::<u64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect();
    let in_ledger = ledger_acks(&l.ledger_path(&run));
    assert_eq!(confirmed, in_ledger);
    let acked_line = rest
        .lines()
        .find(|l| l.starts_with("writes acknowledged: "))
        .unwrap();
    assert_eq!(
        acked_line,
        format!(
            "writes acknowledged: {} (confirmed by the listener)",
            in_ledger.len()
        )
    );
    let issued_line = rest
        .lines()
        .find(|l| l.starts_with("writes issued: "))
        .unwrap();
    assert_eq!(issued_line, format!("writes issued: {}", in_ledger.len()));
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["acknowledged"].as_u64().unwrap(), in_ledger.len() as u64);
}

#[test]
fn the_writer_pauses_while_too_many_acks_are_unconfirmed() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let target = dir.path().join("t.dat");
    let mut w = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--size",
        "1MiB",
        "--writes",
        "20000",
        "--max-unconfirmed",
        "500",
        "--target",
        target.to_str().unwrap(),
    ]);
    // Freeze the listener: nothing more gets confirmed.
    unsafe { libc::kill(l.pid() as i32, libc::SIGSTOP) };
    let line = w.wait_stderr(|_| true);
    assert_eq!(line.trim(), "paused: more than 500 acknowledgements are not yet confirmed by the listener; waiting for it");
    unsafe { libc::kill(l.pid() as i32, libc::SIGCONT) };
    let line = w.wait_stderr(|_| true);
    assert_eq!(line.trim(), "resumed: the listener caught up");
    let (status, rest, _) = w.finish();
    assert!(status.success());
    assert!(
        rest.contains("writes acknowledged: 20000 (confirmed by the listener)"),
        "{rest}"
    );
    let (code, v, e) = verify_json(&l, &[]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(v["acknowledged"], serde_json::json!(20000));
}

#[test]
fn secrets_are_checked_both_ways_and_handshakes_cannot_be_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let good = secret_file(dir.path(), "good", "correct horse battery staple\n");
    let bad = secret_file(dir.path(), "bad", "wrong");
    let l = Listener::start_with(dir.path(), &["--secret-file", &good]);
    let target = dir.path().join("t.dat");
    let t = target.to_str().unwrap();

    // The right secret works end to end.
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--secret-file",
        &good,
        "--target",
        t,
        "--size",
        "64KiB",
        "--writes",
        "50",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (code, _, err) = verify_json(&l, &["--secret-file", &good]);
    assert_eq!(code, 0, "{err}");

    // A wrong or missing secret: the agent refuses a listener that cannot prove the secret.
    for extra in [vec!["--secret-file", bad.as_str()], vec![]] {
        let mut args = vec![
            "write",
            "file",
            "--listener",
            l.addr(),
            "--target",
            t,
            "--size",
            "64KiB",
            "--writes",
            "5",
        ];
        args.extend(extra.iter());
        let o = plugpull(&args);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("could not prove it holds our secret"),
            "{}",
            stderr(&o)
        );
        let mut vargs = vec!["verify", "--read-back", "--listener", l.addr()];
        vargs.extend(extra.iter());
        let o = plugpull(&vargs);
        assert_eq!(o.status.code(), Some(2));
    }

    // A peer that ignores the listener's proof and forges one: refused before any other message.
    let mut c = RawConn::connect(l.addr());
    let answer = c.handshake(&Secret::new(b"wrong"));
    assert_eq!(
        answer,
        Some(Response::Error {
            kind: ErrorKind::Auth,
            message: "authentication failed: wrong or missing secret".into()
        })
    );
    assert_eq!(c.recv(), None);

    // Replay: a recorded Hello and Auth of a legitimate client fail on a new connection.
    let secret = Secret::new(b"correct horse battery staple");
    let nonce = [9u8; 32];
    let mut legit = RawConn::connect(l.addr());
    legit.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        nonce,
    });
    let Some(Response::Challenge { nonce: l1, .. }) = legit.recv() else {
        panic!()
    };
    let proof = secret.agent_proof(&l1, &nonce);
    legit.send(&Request::Auth { proof });
    assert_eq!(legit.recv(), Some(Response::Welcome));
    let mut replay = RawConn::connect(l.addr());
    replay.send(&Request::Hello {
        version: PROTOCOL_VERSION,
        nonce,
    });
    let Some(Response::Challenge { nonce: l2, .. }) = replay.recv() else {
        panic!()
    };
    assert_ne!(l1, l2);
    replay.send(&Request::Auth { proof });
    assert!(matches!(
        replay.recv(),
        Some(Response::Error {
            kind: ErrorKind::Auth,
            ..
        })
    ));

    // A listener with no secret, contacted with one: the agent refuses it.
    let open = Listener::start(&dir.path().join("open"));
    let o = plugpull(&[
        "verify",
        "--read-back",
        "--listener",
        open.addr(),
        "--secret-file",
        &good,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("could not prove it holds our secret"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn protocol_violations_are_refused_and_the_listener_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("x")).unwrap();
    let l = Listener::start_with(
        dir.path(),
        &["--handshake-timeout", "0.5", "--max-connections", "3"],
    );

    // Protocol version mismatch.
    let mut c = RawConn::connect(l.addr());
    c.send(&Request::Hello {
        version: 999,
        nonce: [0; 32],
    });
    assert_eq!(
        c.recv(),
        Some(Response::Error {
            kind: ErrorKind::Version,
            message: format!(
                "protocol version mismatch: client speaks 999, listener speaks {PROTOCOL_VERSION}"
            )
        })
    );

    // A frame for another run on a connection bound to one.
    let mut c = RawConn::connect(l.addr());
    assert_eq!(c.handshake(&Secret::default()), Some(Response::Welcome));
    c.send(&Request::StartRun {
        manifest: plugpull_tests::raw_manifest("raw-test", "/nonexistent", 4096, 4096),
    });
    let Some(Response::RunStarted { run, .. }) = c.recv() else {
        panic!()
    };
    let other = RunId(run.0 ^ 2);
    c.send(&Request::Finish {
        run: other,
        summary: Default::default(),
    });
    assert_eq!(
        c.recv(),
        Some(Response::Error {
            kind: ErrorKind::Protocol,
            message: format!("message for run {other} on a connection bound to run {run}")
        })
    );
    assert_eq!(c.recv(), None);

    // Acks before any run.
    let mut c = RawConn::connect(l.addr());
    c.handshake(&Secret::default());
    c.send(&Request::Finish {
        run,
        summary: Default::default(),
    });
    assert_eq!(
        c.recv(),
        Some(Response::Error {
            kind: ErrorKind::Protocol,
            message: format!("message for run {run} before StartRun or ResumeRun")
        })
    );

    // A connection that never speaks is dropped after the handshake timeout.
    let mut silent = RawConn::connect(l.addr());
    let t0 = std::time::Instant::now();
    assert_eq!(
        silent.recv(),
        Some(Response::Error {
            kind: ErrorKind::Protocol,
            message: "silent for 0.5 s".into()
        })
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(
        wait_for(Duration::from_secs(2), || l
            .log_text()
            .contains("dropped connection: silent for 0.5 s")),
        "{}",
        l.log_text()
    );

    // Beyond --max-connections authenticated: a clear refusal at the end of the handshake.
    let _held: Vec<RawConn> = (0..3)
        .map(|_| {
            let mut c = RawConn::connect(l.addr());
            assert_eq!(c.handshake(&Secret::default()), Some(Response::Welcome));
            c
        })
        .collect();
    let mut extra = RawConn::connect(l.addr());
    assert_eq!(
        extra.handshake(&Secret::default()),
        Some(Response::Error {
            kind: ErrorKind::Busy,
            message: "listener busy: 3 connections already".into()
        })
    );
    drop(_held);

    // And it still serves a real run.
    std::thread::sleep(Duration::from_millis(700));
    let target = dir.path().join("t.dat");
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "64KiB",
        "--writes",
        "20",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn without_a_secret_the_listener_stays_on_loopback_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(bin("plugpull-listener"))
        .args(["--listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        "plugpull-listener: refusing to listen on 0.0.0.0:0 without a secret: give --secret-file or PLUGPULL_SECRET, or --insecure"
    );
}

#[test]
fn many_agents_at_once_all_verify_with_bounded_listener_memory() {
    const AGENTS: usize = 256;
    let dir = tempfile::tempdir().unwrap();
    // 256 processes starting at once on a loaded 2-core machine can take longer than
    // the default 3 s to finish a handshake (a CI run saw "silent for 3 s"): this test
    // is about memory and every run verifying, not about the handshake's timeout.
    let l = Listener::start_with(dir.path(), &["--handshake-timeout", "60"]);
    let children: Vec<_> = (0..AGENTS)
        .map(|i| {
            Command::new(bin("plugpull"))
                .args([
                    "write",
                    "file",
                    "--listener",
                    l.addr(),
                    "--size",
                    "64KiB",
                    "--writes",
                    "200",
                    "--target",
                ])
                .arg(dir.path().join(format!("t{i}.dat")))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let runs: Vec<(String, std::path::PathBuf)> = children
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let o = c.wait_with_output().unwrap();
            assert_eq!(o.status.code(), Some(0), "agent {i}: {}", stderr(&o));
            (run_id(&o), dir.path().join(format!("t{i}.dat")))
        })
        .collect();
    let status = std::fs::read_to_string(format!("/proc/{}/status", l.pid())).unwrap();
    let hwm_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    eprintln!("listener peak RSS with {AGENTS} agents: {} KiB", hwm_kib);
    assert!(hwm_kib < 256 * 1024, "listener peak RSS {hwm_kib} KiB");
    for (run, target) in &runs {
        let (code, v, err) = verify_json(&l, &["--run", run, "--target", target.to_str().unwrap()]);
        assert_eq!(code, 0, "{run}: {err}");
        assert_eq!(v["acknowledged"], serde_json::json!(200));
    }
}

#[test]
fn a_peer_that_is_not_a_listener_is_named_as_such() {
    use std::io::Write;
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = http.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut s, _) = http.accept().unwrap();
        s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
    });
    let o = plugpull(&["verify", "--read-back", "--listener", &addr]);
    server.join().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        format!("plugpull: {addr} does not speak plugpull's protocol (is it a plugpull-listener?): frame of 1347703880 bytes exceeds the 128-byte limit before the handshake is done")
    );
    let o = plugpull(&["verify", "--read-back", "--listener", "127.0.0.1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("\"127.0.0.1\" has no port: give HOST:PORT"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn two_listeners_cannot_share_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let o = Command::new(bin("plugpull-listener"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&l.data_dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        format!(
            "plugpull-listener: data directory {} is in use by another plugpull-listener",
            l.data_dir.display()
        )
    );
}
