//! What the agent refuses before it writes a byte: bad input, a target that is too
//! small, in use or holding other data, and a target of another run.

use super::*;

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());

    // Garbage bytes, then an oversized length prefix: each connection dropped with a reason logged.
    let mut s = std::net::TcpStream::connect(l.addr()).unwrap();
    s.write_all(&[3, 0, 0, 0, 0xff, 0xfe, 0xfd]).unwrap();
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink);
    let mut s = std::net::TcpStream::connect(l.addr()).unwrap();
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let _ = s.read_to_end(&mut sink);
    assert!(
        wait_for(Duration::from_secs(5), || l
            .log_text()
            .contains("malformed frame")),
        "{}",
        l.log_text()
    );
    assert!(
        wait_for(Duration::from_secs(5), || l
            .log_text()
            .contains("frame of 4294967295 bytes exceeds")),
        "{}",
        l.log_text()
    );

    // The listener still serves others.
    let target = dir.path().join("t.dat");
    write_run(&l, &target, "1MiB", &["--writes", "10"]);

    // Unknown run id.
    let (code, _, err) = verify_json(&l, &["--run", "123456789abcdef"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown run 0123456789abcdef"), "{err}");

    // Unreachable listener.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let o = plugpull(&["verify", "--read-back", "--listener", &free]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("cannot reach listener at {free}")),
        "{}",
        stderr(&o)
    );
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        &free,
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot reach listener"),
        "{}",
        stderr(&o)
    );

    // Bad sizes.
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
        "--block-size",
        "1000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--block-size 1000 is not a multiple of 512"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_target_smaller_than_size_is_refused() {
    if !is_root() {
        skipped(
            "a_target_smaller_than_size_is_refused",
            "mounting a 1 MiB tmpfs needs root",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mnt = dir.path().join("tiny");
    std::fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(ok.success(), "mount tmpfs");
    let target = mnt.join("t.dat");
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "64MiB",
    ]);
    let left_behind = target.exists();
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        !left_behind,
        "the refused target was left on the full filesystem"
    );
    assert!(
        stderr(&o).contains(&format!(
            "not enough free space for target {}: its filesystem has 1 MiB free, --size 64 MiB needs 64 MiB more",
            target.display()
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_target_in_use_or_holding_other_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());

    // A file that is not plugpull's is not overwritten without --force.
    let precious = dir.path().join("precious.txt");
    std::fs::write(&precious, "the only copy of something\n").unwrap();
    let p = precious.to_str().unwrap();
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        p,
        "--size",
        "64KiB",
        "--writes",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("target {p} holds data that is not plugpull's")),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "the only copy of something\n"
    );
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        p,
        "--size",
        "64KiB",
        "--writes",
        "5",
        "--force",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A second writer on a target in use is refused; the first goes on and verifies.
    let target = dir.path().join("t.dat");
    let t = target.to_str().unwrap();
    let mut first = Writer::spawn(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        t,
        "--size",
        "1MiB",
        "-T",
        "30s",
        "-P",
        "0.1",
    ]);
    first.wait_acknowledged(1);
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        t,
        "--size",
        "1MiB",
        "--writes",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).trim(), format!("plugpull: target {t} is in use by another plugpull writer (it holds the target's lock)"));
    unsafe { libc::kill(first.child.id() as i32, libc::SIGINT) };
    let (status, _, err) = first.finish();
    assert!(status.success(), "{err}");
    let (code, v, err) = verify_json(&l, &["--target", t]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["ok"], json!(true));
}

#[test]
fn a_target_of_another_run_is_refused_not_judged() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let (a, b) = (dir.path().join("a.dat"), dir.path().join("b.dat"));
    let run_a = write_run(&l, &a, "256KiB", &["--writes", "200"]);
    write_run(&l, &b, "256KiB", &["--writes", "200"]);
    let (code, v, err) = verify_json(&l, &["--run", &run_a, "--target", b.to_str().unwrap()]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["ok"], json!(false));
    assert!(
        err.contains(&format!(
            "target {} holds no record of run {run_a} but records of other plugpull runs",
            b.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("wrong --target, or a later run reused this target"),
        "{err}"
    );
}
