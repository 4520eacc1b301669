//! The metadata journal (issue 14): names and sizes survive the cut exactly when the
//! `--metadata` rules made them durable, and the ground truth gives every operation
//! its fate. Each test makes real system calls on a real mount, cuts, unmounts and
//! reads the backing directory.

use super::*;
use std::fs::{self, File, OpenOptions};
use std::io::Write;

fn fsync(p: &Path) {
    File::open(p).unwrap().sync_all().unwrap();
}

fn write_new(p: &Path, bytes: &[u8], sync: bool) {
    let mut f = File::create(p).unwrap();
    f.write_all(bytes).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

/// The backing tree: every path (relative, sorted) with its size, `/` for directories.
fn tree(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let md = fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                out.push(format!("{rel}/"));
                walk(root, &p, out);
            } else {
                out.push(format!("{rel} {}", md.len()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Every metadata line as `op path[->to][=size] synced fate`.
fn fates(truth: &Truth) -> Vec<String> {
    truth
        .meta
        .iter()
        .map(|m| {
            let mut s = format!("{} {}", m.op, m.path);
            if let Some(to) = &m.to {
                s += &format!("->{to}");
            }
            if let Some(size) = m.size {
                s += &format!("={size}");
            }
            let fate = serde_json::to_value(m.fate).unwrap();
            format!("{s} {} {}", m.synced, fate.as_str().unwrap())
        })
        .collect()
}

/// The script both the posix and the journal test run: `pre/` holds files from
/// before the mount.
fn script(m: &Path) {
    write_new(&m.join("new2"), &[b'b'; 100], true);
    fsync(m); // new2's name is durable
    write_new(&m.join("new1"), &[b'a'; 100], true); // its directory is never fsynced
    fs::create_dir(m.join("d")).unwrap();
    write_new(&m.join("d/f"), &[b'c'; 10], true);
    fsync(&m.join("d")); // d/f is durable in d, but d is not in the root
    fs::remove_file(m.join("pre/gone")).unwrap();
    fs::rename(m.join("pre/keep"), m.join("pre/moved")).unwrap();
    let mut f = OpenOptions::new()
        .append(true)
        .open(m.join("new2"))
        .unwrap();
    f.write_all(&[b'z'; 50]).unwrap(); // never fsynced: size and data go
    drop(f);
    OpenOptions::new()
        .write(true)
        .open(m.join("pre/moved"))
        .unwrap()
        .set_len(1)
        .unwrap(); // never fsynced: the truncate is undone, the bytes come back
}

/// Mounts honest simfs with `extra` over a backing directory with `pre/`, runs
/// [`script`], cuts and unmounts: the backing tree and the ground truth.
fn scripted_cut(dir: &Path, extra: &[&str]) -> (SimFs, Truth) {
    let mut sim = mount_with_pre(dir, "honest", extra);
    script(sim.mnt());
    let truth = sim.cut();
    sim.umount();
    (sim, truth)
}

fn mount_with_pre(dir: &Path, mode: &str, extra: &[&str]) -> SimFs {
    let b = dir.join("backing/pre");
    fs::create_dir_all(&b).unwrap();
    fs::write(b.join("keep"), "old contents\n").unwrap();
    fs::write(b.join("gone"), "x").unwrap();
    SimFs::mount_with(dir, mode, 7, extra)
}

#[test]
fn posix_rules_keep_exactly_what_fsyncs_made_durable() {
    if skip_without_fuse("posix_rules_keep_exactly_what_fsyncs_made_durable") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sim, truth) = scripted_cut(dir.path(), &[]);
    assert_eq!(
        tree(sim.backing()),
        ["new2 100", "pre/", "pre/gone 1", "pre/keep 13"]
    );
    assert_eq!(
        fs::read_to_string(sim.backing().join("pre/keep")).unwrap(),
        "old contents\n"
    );
    assert_eq!(
        fates(&truth),
        [
            "create new2 true kept",
            "extend new2=100 true kept",
            "create new1 false lost",
            "extend new1=100 true kept",
            "mkdir d false lost",
            "create d/f true orphaned",
            "extend d/f=10 true kept",
            "unlink pre/gone false lost",
            "rename pre/keep->pre/moved false lost",
            "extend new2=150 false lost",
            "truncate pre/moved=1 false lost",
        ]
    );
    assert_eq!(
        (
            truth.summary.metadata.as_str(),
            truth.summary.meta_ops,
            truth.summary.meta_lost
        ),
        ("posix", 11, 7)
    );
}

#[test]
fn journal_rules_make_everything_before_any_fsync_durable() {
    if skip_without_fuse("journal_rules_make_everything_before_any_fsync_durable") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sim, truth) = scripted_cut(dir.path(), &["--metadata", "journal"]);
    // The last fsync was d's: everything before it is durable, nothing after.
    assert_eq!(
        tree(sim.backing()),
        [
            "d/",
            "d/f 10",
            "new1 100",
            "new2 100",
            "pre/",
            "pre/gone 1",
            "pre/keep 13"
        ]
    );
    let lost: Vec<String> = fates(&truth)
        .into_iter()
        .filter(|l| !l.ends_with(" true kept"))
        .collect();
    assert_eq!(
        lost,
        [
            "unlink pre/gone false lost",
            "rename pre/keep->pre/moved false lost",
            "extend new2=150 false lost",
            "truncate pre/moved=1 false lost",
        ]
    );
}

#[test]
fn passthrough_keeps_every_name_and_records_nothing() {
    if skip_without_fuse("passthrough_keeps_every_name_and_records_nothing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sim, truth) = scripted_cut(dir.path(), &["--metadata", "passthrough"]);
    // Names and sizes as the script left them; only new2's unsynced append (data,
    // still cached) is gone.
    assert_eq!(
        tree(sim.backing()),
        [
            "d/",
            "d/f 10",
            "new1 100",
            "new2 100",
            "pre/",
            "pre/moved 1"
        ]
    );
    assert_eq!(truth.meta, vec![]);
    assert_eq!(
        (truth.summary.metadata.as_str(), truth.summary.meta_ops),
        ("passthrough", 0)
    );
}

#[test]
fn an_atomic_replace_without_fsync_before_the_rename_comes_back_empty() {
    if skip_without_fuse("an_atomic_replace_without_fsync_before_the_rename_comes_back_empty") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sim = mount_with_pre(dir.path(), "honest", &[]);
    let m = sim.mnt().join("pre");
    write_new(&m.join("keep.tmp"), b"new contents\n", false);
    fs::rename(m.join("keep.tmp"), m.join("keep")).unwrap();
    fsync(&m);
    let truth = sim.cut();
    sim.umount();
    // The rename is durable, the new file's data and size are not: an empty file
    // under the old name, the old contents gone (ext4 without auto_da_alloc).
    assert_eq!(tree(sim.backing()), ["pre/", "pre/gone 1", "pre/keep 0"]);
    assert_eq!(
        fates(&truth),
        [
            "create pre/keep.tmp true kept",
            "extend pre/keep.tmp=13 false lost",
            "rename pre/keep.tmp->pre/keep true kept",
        ]
    );
}

#[test]
fn lying_metadata_destages_late_and_loses_what_fsync_promised() {
    if skip_without_fuse("lying_metadata_destages_late_and_loses_what_fsync_promised") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sim = SimFs::mount_with(dir.path(), "lying", 3, &["--destage-delay-ms", "300"]);
    let m = sim.mnt().to_path_buf();
    write_new(&m.join("old"), b"1234", true);
    fsync(&m);
    std::thread::sleep(std::time::Duration::from_millis(900));
    write_new(&m.join("young"), b"5678", true);
    fsync(&m);
    let truth = sim.cut();
    sim.umount();
    assert_eq!(tree(sim.backing()), ["old 4"]);
    assert_eq!(
        fates(&truth),
        [
            "create old true kept",
            "extend old=4 true kept",
            "create young true lost",
            "extend young=4 true lost",
        ]
    );
}

#[test]
fn reorder_keeps_later_operations_without_earlier_ones_and_the_truth_says_which() {
    if skip_without_fuse("reorder_keeps_later_operations") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sim = SimFs::mount_with(dir.path(), "reorder", 11, &["--destage-delay-ms", "1000"]);
    let m = sim.mnt().to_path_buf();
    for i in 0..40 {
        File::create(m.join(format!("f{i:02}"))).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let truth = sim.cut();
    sim.umount();
    let present: BTreeSet<String> = tree(sim.backing()).into_iter().collect();
    let mut kept_after_lost = false;
    let mut seen_lost = false;
    for (i, line) in fates(&truth).iter().enumerate() {
        let name = format!("f{i:02}");
        assert!(line.starts_with(&format!("create {name} false ")), "{line}");
        let kept = line.ends_with(" kept");
        assert_eq!(present.contains(&format!("{name} 0")), kept, "{line}");
        kept_after_lost |= kept && seen_lost;
        seen_lost |= !kept;
    }
    assert!(kept_after_lost, "{:?}", fates(&truth));
    assert_eq!(truth.meta.len(), 40);
}

#[test]
fn the_journal_directory_is_hidden_and_removed_at_a_clean_unmount() {
    if skip_without_fuse("the_journal_directory_is_hidden_and_removed_at_a_clean_unmount") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sim = mount_with_pre(dir.path(), "honest", &[]);
    let m = sim.mnt().to_path_buf();
    fs::remove_file(m.join("pre/gone")).unwrap();
    let journal = ".plugpull-simfs-journal";
    assert!(sim.backing().join(journal).join("attic").is_dir());
    let names: Vec<String> = fs::read_dir(&m)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["pre"]);
    assert_eq!(
        fs::metadata(m.join(journal)).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert_eq!(
        fs::create_dir(m.join(journal)).unwrap_err().raw_os_error(),
        Some(libc::EACCES)
    );
    sim.umount();
    assert_eq!(tree(sim.backing()), ["pre/", "pre/keep 13"]);
}

/// Review finding: undoing `mv p/a/b p/b; mv p/a p/b/a` must not move `p/b` into its
/// own subtree — whatever the inode order, the durable `p/a/b` comes back.
#[test]
fn undoing_a_directory_moved_into_its_former_child_restores_the_tree() {
    if skip_without_fuse("undoing_a_directory_moved_into_its_former_child_restores_the_tree") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("backing");
    // `a` made first (the lower inode number), then moved under `p`.
    fs::create_dir_all(b.join("a/b")).unwrap();
    fs::create_dir_all(b.join("p")).unwrap();
    fs::rename(b.join("a"), b.join("p/a")).unwrap();
    fs::write(b.join("p/a/b/f"), "kept").unwrap();
    let mut sim = SimFs::mount(dir.path(), "honest", 9);
    let m = sim.mnt().join("p");
    fs::rename(m.join("a/b"), m.join("b")).unwrap();
    fs::rename(m.join("a"), m.join("b/a")).unwrap();
    let truth = sim.cut();
    sim.umount();
    assert_eq!(tree(sim.backing()), ["p/", "p/a/", "p/a/b/", "p/a/b/f 4"]);
    assert_eq!(
        fates(&truth),
        [
            "rename p/a/b->p/b false lost",
            "rename p/a->p/b/a false lost",
        ]
    );
}

/// Review finding: a file unlinked before any durable name referred to it leaves
/// nothing held in the attic (no directory fsync needed to reclaim it).
#[test]
fn temporary_files_never_durable_are_not_kept_in_the_attic() {
    if skip_without_fuse("temporary_files_never_durable_are_not_kept_in_the_attic") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut sim = SimFs::mount(dir.path(), "honest", 9);
    let m = sim.mnt().to_path_buf();
    fs::create_dir(m.join("x")).unwrap();
    for i in 0..20 {
        let p = m.join(format!("x/t{i}"));
        write_new(&p, &[7u8; 4096], true);
        fs::remove_file(&p).unwrap();
    }
    let attic = sim.backing().join(".plugpull-simfs-journal/attic");
    assert_eq!(fs::read_dir(&attic).unwrap().count(), 0);
    // A failed rename (ENOTEMPTY) holds nothing either.
    fs::create_dir_all(m.join("e1")).unwrap();
    fs::create_dir_all(m.join("e2/z")).unwrap();
    assert_eq!(
        fs::rename(m.join("e1"), m.join("e2"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(fs::read_dir(&attic).unwrap().count(), 0);
    sim.cut();
    sim.umount();
    assert_eq!(tree(sim.backing()), Vec::<String>::new());
}
