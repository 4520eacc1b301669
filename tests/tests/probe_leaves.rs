//! The minimal leaf-disk walk (`probe::flush::leaves_of`) and the flush count
//! through layers, on real devices the tests build: ext4 on a partition of a loop
//! device, and ext4 on a device-mapper linear target over that partition. The
//! expected leaf is the loop device the test attached.

use plugpull::probe::flush::WriteCache;
use plugpull_client::probe::flush::{leaves_of, measure};
use plugpull_tests::blockdev::{run, skip_without_loop, Loop, Mount};
use plugpull_tests::skipped;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A device-mapper device; removed on drop (after the mounts dropped before it).
struct Dm(String);

impl Drop for Dm {
    fn drop(&mut self) {
        let _ = Command::new("dmsetup").args(["remove", &self.0]).status();
    }
}

/// A 64 MiB image with one GPT partition, attached with `-P`; waits for `p1`.
fn partitioned_loop(dir: &Path) -> Loop {
    let img = dir.join("disk.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'label: gpt\\nsize=48MiB\\n' | sfdisk -q '{}'",
            img.display()
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lp = Loop::attach(&img, &["-P"]);
    let p1 = format!("{}p1", lp.dev);
    if !Path::new(&p1).exists() {
        run("partx", &["--add", &lp.dev]);
    }
    let start = Instant::now();
    while !Path::new(&p1).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{p1} did not appear"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    lp
}

fn name_of(dev: &str) -> String {
    Path::new(dev)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Measures on `mnt` and checks the leaf's flush count when its cache is write back.
fn flushes_reach(mnt: &Path, leaf: &str) {
    let m = measure(mnt, 0.5, &[leaf.to_string()]).unwrap();
    assert!(m.fdatasyncs > 0);
    let d = &m.per_disk[0];
    assert_eq!(d.disk, leaf);
    let wc = std::fs::read_to_string(format!("/sys/block/{leaf}/queue/write_cache")).unwrap();
    assert_eq!(d.write_cache, WriteCache::parse(&wc));
    if d.write_cache == Some(WriteCache::WriteBack) {
        let delta = d.flushes_delta.expect("flush delta");
        assert!(
            delta >= m.fdatasyncs,
            "{leaf}: {delta} flushes for {} fdatasyncs",
            m.fdatasyncs
        );
    }
}

#[test]
fn a_partition_leads_to_its_whole_disk() {
    let test = "a_partition_leads_to_its_whole_disk";
    if skip_without_loop(test, &["sfdisk", "partx", "mkfs.ext4"]) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lp = partitioned_loop(dir.path());
    let p1 = format!("{}p1", lp.dev);
    run("mkfs.ext4", &["-q", &p1]);
    let mnt = Mount::new(&[&p1], &dir.path().join("mnt"));
    let leaf = name_of(&lp.dev);
    assert_eq!(leaves_of(&mnt.at), std::slice::from_ref(&leaf));
    flushes_reach(&mnt.at, &leaf);
}

#[test]
fn a_dm_linear_target_leads_through_its_slaves() {
    let test = "a_dm_linear_target_leads_through_its_slaves";
    if skip_without_loop(test, &["sfdisk", "partx", "mkfs.ext4", "dmsetup"]) {
        return;
    }
    let dm_ok = Command::new("dmsetup")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !dm_ok {
        return skipped(
            test,
            "no device-mapper in this kernel (`dmsetup version` fails)",
        );
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lp = partitioned_loop(dir.path());
    let p1 = format!("{}p1", lp.dev);
    let sectors = run("blockdev", &["--getsz", &p1]).trim().to_string();
    let name = format!("plugpull-probe-{}", std::process::id());
    run(
        "dmsetup",
        &[
            "create",
            &name,
            "--table",
            &format!("0 {sectors} linear {p1} 0"),
        ],
    );
    let dm = Dm(name);
    let dev = format!("/dev/mapper/{}", dm.0);
    run("mkfs.ext4", &["-q", &dev]);
    let mut mnt = Mount::new(&[&dev], &dir.path().join("mnt"));
    let leaf = name_of(&lp.dev);
    assert_eq!(leaves_of(&mnt.at), std::slice::from_ref(&leaf));
    flushes_reach(&mnt.at, &leaf);
    mnt.umount();
}
