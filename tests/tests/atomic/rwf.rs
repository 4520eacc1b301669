//! `--atomic rwf`: every write a `pwritev2(…, RWF_ATOMIC)`, on ext4 on a loop device
//! with 4 KiB blocks (single-block atomic writes where the device offers them).
//! Where statx offers 4096-byte atomic writes on the file, a run passes; where it
//! does not (a loop device's `atomic_write_unit_max_bytes` is 0 on most kernels),
//! that success path is a loud skip naming what is missing, and the refusal is
//! checked word for word.

use super::*;
use plugpull_client::file::atomic::{statx_atomic, sysfs_atomic};
use plugpull_tests::blockdev::{run, skip_without_loop, Loop, Mount};

/// `write file --expect-atomic --atomic rwf --sync direct-dsync` on `target`.
fn rwf_run(l: &Listener, target: &std::path::Path, block_size: &str) -> std::process::Output {
    plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        target.to_str().unwrap(),
        "--size",
        "1MiB",
        "--block-size",
        block_size,
        "--sync",
        "direct-dsync",
        "--writes",
        "300",
        "--expect-atomic",
        "--atomic",
        "rwf",
    ])
}

#[test]
fn rwf_atomic_writes_pass_where_offered_and_are_refused_by_name_where_not() {
    let test = "rwf_atomic_writes_pass_where_offered_and_are_refused_by_name_where_not";
    if skip_without_loop(test, &["mkfs.ext4", "mkfs.xfs", "mount"]) {
        return;
    }
    // ext4 on a loop device offers no atomic writes (the device offers none); XFS
    // with reflink (mkfs.xfs's default) offers them from Linux 6.16 by falling back
    // to copy-on-write in software, so the success path runs there.
    let mut passed = Vec::new();
    let mut refused = Vec::new();
    for fs in ["ext4", "xfs"] {
        match rwf_on(fs) {
            Ok(()) => passed.push(fs),
            Err(why) => refused.push(why),
        }
    }
    if passed.is_empty() {
        skipped(
            test,
            &format!("no RWF_ATOMIC success path here: {}", refused.join("; ")),
        );
    }
}

/// One filesystem on a loop device: the refusals, then the success path where statx
/// offers 4096-byte atomic writes (`Ok`), or its refusal asserted and why (`Err`).
fn rwf_on(fs: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = dir.path().join("fs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(512 << 20)
        .unwrap();
    match fs {
        "ext4" => run(
            "mkfs.ext4",
            &["-q", "-F", "-b", "4096", img.to_str().unwrap()],
        ),
        _ => run("mkfs.xfs", &["-q", "-f", img.to_str().unwrap()]),
    };
    let lo = Loop::attach(&img, &[]);
    let mnt = dir.path().join("mnt");
    let _m = Mount::new(&[lo.dev.as_str()], &mnt);
    let probe = mnt.join("probe");
    std::fs::write(&probe, b"").unwrap();
    let statx = statx_atomic(&probe).expect("statx");
    let disk = sysfs_atomic(&probe).expect("the loop device in sysfs");
    std::fs::remove_file(&probe).unwrap();
    let target = mnt.join("t.dat");
    // A size statx never offers (not a power of two) is refused on any stack.
    let o = rwf_run(&l, &target, "12KiB");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!target.exists(), "a refused run leaves no target behind");
    let sysfs = format!(
        "; sysfs: {} atomic_write_unit_max_bytes {}",
        disk.name,
        disk.unit_max
            .map_or("not present (kernel before 6.11)".to_string(), |m| m
                .to_string())
    );
    let t = target.display();
    let why = |bs: u64| {
        match statx {
        None => format!(
            "the kernel reports no atomic-write limits for {t} (statx STATX_WRITE_ATOMIC, Linux 6.11+; \
             the filesystem may not support atomic writes)"
        ),
        Some(s) if s.unit_min == 0 => {
            format!("{t} offers no atomic writes (statx: atomic write unit 0 bytes)")
        }
        Some(s) => format!(
            "{t} does not offer atomic writes of {bs} bytes (statx: powers of two from {} to {} bytes)",
            s.unit_min, s.unit_max
        ),
    }
    };
    let refusal = |bs: u64| {
        format!(
            "plugpull: --atomic rwf refused: {}{sysfs}. RWF_ATOMIC writes of --block-size {bs} are not offered by \
             the kernel, the filesystem or the device here; choose a --block-size they offer, or --atomic none to \
             test the device's natural behaviour",
            why(bs)
        )
    };
    assert_eq!(
        stderr(&o).trim_end().lines().last(),
        Some(refusal(12288).as_str())
    );
    if !statx.is_some_and(|s| s.offers(4096)) {
        let o = rwf_run(&l, &target, "4096");
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert_eq!(
            stderr(&o).trim_end().lines().last(),
            Some(refusal(4096).as_str())
        );
        return Err(format!(
            "{fs} on {}: statx {statx:?}, sysfs atomic_write_unit_max_bytes {:?}",
            lo.dev, disk.unit_max
        ));
    }
    let o = rwf_run(&l, &target, "4096");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id(&o);
    let (code, v, err) = verify_json(&l, &["--run", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["atomic"]["mode"], json!("rwf"));
    assert_eq!(v["atomic"]["unit"], json!(4096));
    assert_eq!(v["acknowledged"], json!(300));
    Ok(())
}
