//! `plugpull write file` never destroys a user's data and refuses, before anything is
//! created or registered, targets and arguments it cannot honour (issue 8, items 6,
//! 8, 18, 21): filesystem/volume signatures and mounted devices, `O_DIRECT`
//! alignment, a FUSE filesystem reporting 0 bytes, FIFOs, absurd durations, an
//! unreachable listener or wrong secret; and a filesystem without `fallocate` is
//! filled in large writes (issue 41, item 9). Real loop devices, `mkfs.*`, `pvcreate`,
//! simfs over FUSE; loud skips where they cannot be made.

use plugpull_tests::blockdev::{run, skip_without_loop, Loop, Mount};
use plugpull_tests::simfs::{skip_without_fuse, SimFs};
use plugpull_tests::*;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A cheap fingerprint of a whole file or device.
fn fingerprint(path: &Path) -> (usize, u64) {
    use std::hash::{Hash, Hasher};
    let b = std::fs::read(path).expect("read for fingerprint");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    (b.len(), h.finish())
}

/// `plugpull write file --target DEV --size 4MiB --writes 10 [extra]`.
fn write_to(l: &Listener, dev: &str, extra: &[&str]) -> std::process::Output {
    let mut a = vec![
        "write",
        "file",
        "--listener",
        l.addr(),
        "--target",
        dev,
        "--size",
        "4MiB",
        "--writes",
        "10",
    ];
    a.extend_from_slice(extra);
    plugpull(&a)
}

/// Item 6: ext4, xfs, swap and an LVM physical volume on loop devices are refused without
/// `--force` (exit 2, the message names what wipefs found, nothing registered) and
/// not one byte changes; a mounted device is refused even with `--force` (O_EXCL).
/// An ext4 image in a regular file is refused the same way.
#[test]
fn filesystems_volumes_and_mounted_devices_are_never_overwritten() {
    let test = "filesystems_volumes_and_mounted_devices_are_never_overwritten";
    if skip_without_loop(
        test,
        &[
            "mkfs.ext4",
            "e2fsck",
            "mkfs.xfs",
            "mkswap",
            "pvcreate",
            "wipefs",
            "mount",
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    for (fs, size, mkfs, args, sig) in [
        (
            "ext4",
            "64M",
            "mkfs.ext4",
            vec!["-q", "-F"],
            "ext4 signature at byte 0x438",
        ),
        (
            "xfs",
            "320M",
            "mkfs.xfs",
            vec!["-q", "-f"],
            "xfs signature at byte 0x0",
        ),
        (
            "swap",
            "64M",
            "mkswap",
            vec![],
            "swap signature at byte 0xff6",
        ),
        (
            "lvm",
            "64M",
            "pvcreate",
            vec!["-q", "-y", "-ff"],
            "LVM2_member signature at byte 0x218",
        ),
    ] {
        let img = dir.path().join(format!("{fs}.img"));
        run("truncate", &["-s", size, img.to_str().unwrap()]);
        let lo = Loop::attach(&img, &[]);
        let mut a = args.clone();
        a.push(&lo.dev);
        run(mkfs, &a);
        let before = fingerprint(&img);
        let o = write_to(&l, &lo.dev, &[]);
        assert_eq!(o.status.code(), Some(2), "{fs}: {}", stderr(&o));
        assert_eq!(
            stderr(&o).trim(),
            format!(
                "plugpull: target {} holds data that is not plugpull's (wipefs found: {sig}); \
                 a run overwrites its first 4 MiB; --force zeroes them and erases the signatures wipefs finds on it: \
                 give --force to use it anyway",
                lo.dev
            ),
            "{fs}"
        );
        assert_eq!(stdout(&o), "", "{fs}: no run registered");
        assert_eq!(fingerprint(&img), before, "{fs}: bytes changed");
        if fs == "lvm" {
            let _ = Command::new("pvremove")
                .args(["-q", "-ff", "-y", &lo.dev])
                .output();
        }
        if fs == "ext4" {
            let m = Mount::new(&[&lo.dev], &dir.path().join("m"));
            let o = write_to(&l, &lo.dev, &["--force"]);
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            assert!(
                stderr(&o).starts_with(&format!(
                    "plugpull: target {} is in use: it is mounted, or held by LVM, MD RAID, device-mapper or another program",
                    lo.dev
                )),
                "{}",
                stderr(&o)
            );
            drop(m);
            run("e2fsck", &["-n", "-f", &lo.dev]);
            // A regular file holding the same filesystem image is refused too.
            drop(lo);
            let before = fingerprint(&img);
            let o = write_to(&l, img.to_str().unwrap(), &[]);
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            assert!(
                stderr(&o).contains("(wipefs found: ext4 signature at byte 0x438)"),
                "{}",
                stderr(&o)
            );
            assert_eq!(fingerprint(&img), before, "ext4 image file: bytes changed");
        }
    }
    assert_eq!(
        std::fs::read_dir(l.data_dir.join("runs")).map_or(0, |d| d.count()),
        0,
        "no run was registered"
    );
}

/// A partition table whose backup header lies beyond `--size` (GPT at the end of the
/// device) is refused; `--force` writes and erases every signature wipefs found (the
/// PMBR and both GPT headers), saying so; then the device is plugpull's and a run
/// without `--force` is accepted.
#[test]
fn force_erases_the_signatures_it_overrides_so_the_next_run_needs_no_force() {
    let test = "force_erases_the_signatures_it_overrides_so_the_next_run_needs_no_force";
    if skip_without_loop(test, &["sfdisk", "wipefs"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = dir.path().join("gpt.img");
    run("truncate", &["-s", "16M", img.to_str().unwrap()]);
    let lo = Loop::attach(&img, &[]);
    let mut sfdisk = Command::new("sfdisk")
        .args(["-q", &lo.dev])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    sfdisk
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: gpt\n")
        .unwrap();
    assert!(sfdisk.wait().unwrap().success());
    let o = write_to(&l, &lo.dev, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "(wipefs found: gpt signature at byte 0x200, gpt signature at byte 0xfffe00, \
             PMBR signature at byte 0x1fe)"
        ),
        "{}",
        stderr(&o)
    );
    let o = write_to(&l, &lo.dev, &["--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let erased: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("--force: erased"))
        .collect();
    assert_eq!(
        erased,
        [
            format!(
                "--force: erased the gpt signature at byte 0x200 of target {}",
                lo.dev
            ),
            format!(
                "--force: erased the gpt signature at byte 0xfffe00 of target {}",
                lo.dev
            ),
            format!(
                "--force: erased the PMBR signature at byte 0x1fe of target {}",
                lo.dev
            ),
        ]
    );
    let zeroed: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("--force: zeroed"))
        .collect();
    assert_eq!(
        zeroed,
        [format!(
            "--force: zeroed the first 4 MiB of target {}, which held data that is not plugpull's \
             (wipefs found: gpt signature at byte 0x200, gpt signature at byte 0xfffe00, \
             PMBR signature at byte 0x1fe)",
            lo.dev
        )]
    );
    let left = Command::new("wipefs")
        .args(["--no-act", &lo.dev])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&left.stdout),
        "",
        "no signature is left"
    );
    let o = write_to(&l, &lo.dev, &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "plugpull's own device: {}",
        stderr(&o)
    );
}

/// Item 8: `--sync direct-dsync` with `--block-size 512` on a device whose logical
/// block size is 4096 is refused before anything is registered, naming both sizes.
#[test]
fn direct_dsync_refuses_a_block_size_below_the_devices_logical_block_size() {
    let test = "direct_dsync_refuses_a_block_size_below_the_devices_logical_block_size";
    if skip_without_loop(test, &["mkfs.ext4", "wipefs", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let img = dir.path().join("4k.img");
    run("truncate", &["-s", "16M", img.to_str().unwrap()]);
    let lo = Loop::attach(&img, &["--sector-size", "4096"]);
    let o = write_to(
        &l,
        &lo.dev,
        &["--sync", "direct-dsync", "--block-size", "512"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "plugpull: --sync direct-dsync: --block-size 512 is not a multiple of 4096 bytes, \
             the device's logical block size (BLKSSZGET) of target {}, so O_DIRECT writes would fail; \
             give --block-size 4096 (or a multiple of it), or --sync dsync",
            lo.dev
        )
    );
    assert_eq!(stdout(&o), "");
    let o = write_to(
        &l,
        &lo.dev,
        &["--sync", "direct-dsync", "--block-size", "8192"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A file on ext4 over that device: statx's dio_offset_align says 4096. The refused
    // run leaves no target file behind.
    run("wipefs", &["-a", "-q", &lo.dev]);
    run("mkfs.ext4", &["-q", "-F", &lo.dev]);
    let m = Mount::new(&[&lo.dev], &dir.path().join("m"));
    let file = m.at.join("t.dat");
    let f = file.to_str().unwrap();
    let o = write_to(&l, f, &["--sync", "direct-dsync", "--block-size", "512"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "plugpull: --sync direct-dsync: --block-size 512 is not a multiple of 4096 bytes, \
             statx dio_offset_align of the file of target {f}, so O_DIRECT writes would fail; \
             give --block-size 4096 (or a multiple of it), or --sync dsync"
        )
    );
    assert!(!file.exists(), "the refused run left its target behind");
    let o = write_to(&l, f, &["--sync", "direct-dsync"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    drop(m);
}

/// Item 18: a FUSE filesystem whose statfs reports 0 bytes in all (simfs
/// `--statfs-zero`) has an unknown size: a warning, and the run goes on and verifies.
#[test]
fn a_filesystem_reporting_zero_size_is_unknown_not_full() {
    if skip_without_fuse("a_filesystem_reporting_zero_size_is_unknown_not_full") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount_with(dir.path(), "honest", 5, &["--statfs-zero"]);
    let target = sim.mnt().join("t.dat");
    let t = target.to_str().unwrap();
    let o = write_to(&l, t, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!(
            "warning: the filesystem of target {t} reports a size of 0 bytes (statfs): its size is unknown, \
             so free space is not checked before preallocating 4 MiB"
        )
    );
    let (code, v, err) = verify_json(&l, &["--target", t]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["acknowledged"], json!(10));
    sim.umount();
}

/// The (offset, length) of every write to `file` in the ground truth, in order.
fn writes_to(truth: &plugpull_tests::simfs::Truth, file: &str) -> Vec<(u64, u64)> {
    truth
        .writes
        .iter()
        .filter(|w| w.file == file)
        .map(|w| (w.offset, w.len))
        .collect()
}

/// Issue 41, item 9: on a filesystem without `fallocate` (simfs `--no-fallocate`
/// refuses it with EOPNOTSUPP, as LazyFS does), `write file` fills a target with
/// zeros in 1 MiB writes — not glibc's `posix_fallocate` emulation, one 1-byte write
/// per 512 bytes — and says so: a fresh one from 0, a shorter one from its end; a
/// second run on the full-size file writes no zeros. Each run verifies (a read-back
/// check: no power was cut). simfs `lying` with a destage delay longer than the test
/// keeps every write in its cache, so the cut's ground truth lists every write the
/// mount was sent (file, offset, length): the fill is counted exactly.
#[test]
fn a_filesystem_without_fallocate_is_filled_in_large_writes() {
    if skip_without_fuse("a_filesystem_without_fallocate_is_filled_in_large_writes") {
        return;
    }
    const SIZE: u64 = 4 << 20;
    const BLOCKS: u64 = SIZE / 4096;
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let extra = ["--no-fallocate", "--destage-delay-ms", "3600000"];
    let mut sim = SimFs::mount_with(dir.path(), "lying", 9, &extra);
    // Each run writes every block once, in order, and is verified before the next
    // one overwrites it.
    let n = BLOCKS.to_string();
    let args = ["--writes", n.as_str(), "--pattern", "sequential"];
    let run = |target: &Path, said: &str| {
        let o = write_file(&l, target, "4MiB", &args);
        assert_eq!(stderr(&o).trim(), said);
        assert_eq!(std::fs::metadata(target).unwrap().len(), SIZE);
        let (code, v, err) = verify_json(&l, &["--run", &run_id(&o)]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            (&v["ok"], &v["cut"]["read_back"], &v["acknowledged"]),
            (&json!(true), &json!(true), &json!(BLOCKS)),
            "{v}"
        );
        assert_eq!(v["verdicts"], verdicts(&[("intact", BLOCKS)]));
    };
    let said = |t: &Path, how_much: &str| {
        format!(
            "target {}: its filesystem cannot preallocate (no fallocate): writing {how_much} of zeros",
            t.display()
        )
    };
    let fresh = sim.mnt().join("t.dat");
    run(&fresh, &said(&fresh, "4 MiB"));
    // The file already has its size: nothing to fill, nothing said.
    run(&fresh, "");
    // A file of 5000 bytes (zeros) is filled from its end.
    let short = sim.mnt().join("short.dat");
    std::fs::write(&short, vec![0u8; 5000]).unwrap();
    run(&short, &said(&short, "4.0 MiB"));
    let truth = sim.cut();
    sim.umount();
    assert_eq!(
        truth.summary.cached_at_cut, truth.summary.writes_total,
        "a write left the cache: the ground truth does not list them all"
    );
    let blocks: Vec<(u64, u64)> = (0..BLOCKS).map(|b| (b * 4096, 4096)).collect();
    let fill: Vec<(u64, u64)> = (0..4).map(|i| (i * MIB, MIB)).collect();
    let runs = [blocks.clone(), blocks.clone()].concat();
    assert_eq!(writes_to(&truth, "t.dat"), [fill.clone(), runs].concat());
    eprintln!(
        "fill of {SIZE} bytes: {} writes (glibc's emulation: {})",
        fill.len(),
        SIZE / 512
    );
    // From 5000, the first write ends on a page boundary (4096 × 257).
    let from_end = [
        (5000, 257 * 4096 - 5000),
        (257 * 4096, MIB),
        (257 * 4096 + MIB, MIB),
        (257 * 4096 + 2 * MIB, SIZE - 257 * 4096 - 2 * MIB),
    ];
    assert_eq!(
        writes_to(&truth, "short.dat"),
        [&[(0, 5000)], &from_end[..], &blocks].concat()
    );
    // simfs refused the fallocate: the size grew by those writes alone.
    let sizes: Vec<(&str, Option<u64>)> = truth
        .meta
        .iter()
        .filter(|m| m.path == "t.dat")
        .map(|m| (m.op.as_str(), m.size))
        .collect();
    let grown = fill.iter().map(|&(at, len)| ("extend", Some(at + len)));
    assert_eq!(
        sizes,
        std::iter::once(("create", None))
            .chain(grown)
            .collect::<Vec<_>>()
    );
}

/// Item 21: a FIFO target is refused at once by write and by verify; absurd `-T`/`-P`
/// are refused before a run is registered; an unreachable listener and a wrong
/// secret are found before the target is created.
#[test]
fn bad_targets_and_arguments_are_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let f = fifo.to_str().unwrap();
    let t0 = Instant::now();
    let o = write_to(&l, f, &[]);
    assert_eq!(o.status.code(), Some(2));
    let refusal = format!(
        "plugpull: target {f} is a FIFO (named pipe): give a regular file or a block device"
    );
    assert_eq!(stderr(&o).trim(), refusal);
    // A real run, then verify pointed at the FIFO.
    let good = dir.path().join("t.dat");
    let o = write_to(&l, good.to_str().unwrap(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (code, _, err) = verify_json(&l, &["--target", f]);
    assert_eq!(code, 2);
    // First the run verify chose (no --run given), then the refusal.
    let lines: Vec<&str> = err.trim().lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].starts_with("verifying run "), "{err}");
    assert_eq!(lines[1], refusal);
    assert!(t0.elapsed() < Duration::from_secs(20), "the FIFO blocked");
    let runs = || std::fs::read_dir(l.data_dir.join("runs")).unwrap().count();
    assert_eq!(runs(), 1);

    let fresh = dir.path().join("fresh.dat");
    let fr = fresh.to_str().unwrap();
    for (flag, value) in [("-T", "1e300"), ("-T", "400d"), ("-P", "1e19")] {
        let o = plugpull(&[
            "write",
            "file",
            "--listener",
            l.addr(),
            "--target",
            fr,
            "--size",
            "1MiB",
            flag,
            value,
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        assert!(
            stderr(&o).contains(&format!(
                "{value:?} is longer than 366 days, the longest duration accepted"
            )),
            "{}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "");
    }
    assert_eq!(runs(), 1, "no run registered by the refused arguments");
    assert!(!fresh.exists());

    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        &free,
        "--target",
        fr,
        "--size",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("cannot reach listener at {free}")),
        "{}",
        stderr(&o)
    );
    assert!(
        !fresh.exists(),
        "target created for an unreachable listener"
    );
    let secret = dir.path().join("wrong.secret");
    std::fs::write(&secret, "not the listener's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let o = plugpull(&[
        "write",
        "file",
        "--listener",
        l.addr(),
        "--secret-file",
        secret.to_str().unwrap(),
        "--target",
        fr,
        "--size",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("could not prove it holds our secret"),
        "{}",
        stderr(&o)
    );
    assert!(!fresh.exists(), "target created with a wrong secret");
    assert_eq!(runs(), 1);
}
