//! One test per simulator mode: the verifier's report on a cut under load equals the
//! model and what the ground truth says happened (honest, lying, reorder, torn,
//! misdirect).

use super::*;

/// Honest mode: fsync destages, so nothing fsynced is cached at the cut and
/// nothing acknowledged is lost: exit 0, `ok`, not one failure verdict.
#[test]
fn honest_device_loses_nothing_acknowledged() {
    if skip_without_fuse("honest_device_loses_nothing_acknowledged") {
        return;
    }
    for (seed, jobs) in [(1, 3), (2, 1), (3, 4), (4, 2)] {
        let c = one_cut("honest", seed, &[], 512, jobs, 300 * seed);
        assert_eq!(
            c.truth.summary.fsynced_at_cut, 0,
            "honest: nothing fsynced may be cached at the cut"
        );
        assert_eq!(c.code, 0);
        assert_eq!(c.report["ok"], json!(true));
        assert_eq!(c.model.findings.len(), 0);
        assert_eq!(c.report["findings"], json!([]));
        assert!(c.count("intact") > 0);
    }
}

/// Lying mode: fsync returns at once, the cut drops every cached write. The blocks
/// the verifier calls lost are exactly those whose acknowledged write the truth
/// dropped (module doc); FIFO destage never reorders across a flush, so none is
/// unserializable.
#[test]
fn lying_device_lost_blocks_match_the_ground_truth() {
    if skip_without_fuse("lying_device_lost_blocks_match_the_ground_truth") {
        return;
    }
    let mut total_lost = 0;
    for (seed, jobs) in [(11, 1), (12, 3), (13, 3), (14, 1), (15, 4), (16, 2)] {
        let c = one_cut(
            "lying",
            seed,
            &["--destage-delay-ms", "40"],
            512,
            jobs,
            1500 + 500 * (seed % 3),
        );
        let lost = c.found(&["lost_write", "unserializable"]);
        c.check_lost_against_truth(&lost);
        assert_eq!(
            c.count("unserializable"),
            0,
            "FIFO destage cannot reorder across a flush"
        );
        assert_eq!(c.count("lost_write"), lost.len() as u64);
        for v in [
            "torn_in_flight",
            "torn_acknowledged",
            "corrupt",
            "misdirected",
            "missing",
        ] {
            assert_eq!(c.count(v), 0, "{v}");
        }
        assert!(
            c.truth.summary.fsynced_at_cut > 0,
            "lying: fsynced writes were cached at the cut"
        );
        total_lost += lost.len();
    }
    assert!(
        total_lost > 0,
        "a lying device lost acknowledged writes in none of the cuts"
    );
}

/// Reorder mode: random destage order. Lost blocks as in lying mode; a lost write
/// `X` is unserializable when a surviving sector's watermark is `≥ X`'s seq — computed
/// here from the backing file (watermarks) and the ledger, and seen at least once.
#[test]
fn reordering_device_is_caught_unserializable() {
    if skip_without_fuse("reordering_device_is_caught_unserializable") {
        return;
    }
    let mut unserializable = 0;
    for (seed, jobs) in [(21, 3), (22, 1), (23, 3), (24, 4), (25, 1)] {
        let c = one_cut(
            "reorder",
            seed,
            &["--destage-delay-ms", "40"],
            512,
            jobs,
            1500 + 400 * (seed % 3),
        );
        let lost = c.found(&["lost_write", "unserializable"]);
        c.check_lost_against_truth(&lost);
        // Surviving watermark: the highest carried by a correctly placed sector of the run.
        let w = c
            .disk
            .iter()
            .enumerate()
            .filter(|(b, secs)| misplaced(*b as u64, secs).is_none())
            .flat_map(|(_, secs)| secs.iter())
            .filter_map(|s| {
                if let Sec::Ours { wm, .. } = s {
                    Some(*wm)
                } else {
                    None
                }
            })
            .max()
            .unwrap_or(0);
        let expect: BTreeSet<u64> = lost
            .iter()
            .copied()
            .filter(|&b| c.acked[b as usize] <= w)
            .collect();
        assert_eq!(
            c.found(&["unserializable"]),
            expect,
            "unserializable blocks (surviving watermark {w})"
        );
        assert_eq!(c.count("unserializable"), expect.len() as u64);
        assert_eq!(c.count("lost_write"), (lost.len() - expect.len()) as u64);
        for v in [
            "torn_in_flight",
            "torn_acknowledged",
            "corrupt",
            "misdirected",
            "missing",
        ] {
            assert_eq!(c.count(v), 0, "{v}");
        }
        unserializable += expect.len();
    }
    assert!(
        unserializable > 0,
        "no cut caught the device reordering across a flush"
    );
}

/// Torn mode: at the cut each cached write keeps a random prefix of its sectors.
/// Every write the truth calls torn (0 < kept < 8 sectors of one block) leaves that
/// block as `kept` sectors of the newer write over the older one — torn in flight,
/// never acknowledged (fsync destages in this mode); the counts equal the truth's
/// torn blocks exactly. A write is cached only between its `pwrite` and the next
/// fsync of the file, so with a writer that fsyncs every write few are cached at a
/// cut: this runs short cuts until at least 3 blocks were torn (or 200 cuts or 90 s
/// passed) and requires at least one.
#[test]
fn torn_writes_match_the_ground_truth() {
    if skip_without_fuse("torn_writes_match_the_ground_truth") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = Listener::start(dir.path());
    let mut sim = SimFs::mount_with(dir.path(), "torn", 31, &["--threads", "2"]);
    let (mut torn_total, mut cached_total, mut cuts) = (0, 0, 0);
    let t0 = Instant::now();
    for i in 0..200u64 {
        if torn_total >= 3 || t0.elapsed().as_secs() >= 90 {
            break;
        }
        cuts += 1;
        if i > 0 {
            sim.remount("torn");
        }
        let blocks = 128;
        let name = format!("t{i}.dat");
        let mut w = start_writer(
            &l,
            &sim.mnt().join(&name),
            &(blocks * BS).to_string(),
            12,
            31 + i,
        );
        w.wait_acknowledged(200 + 100 * (i % 4));
        sigkill(&mut w.child);
        let truth = sim.cut();
        sim.umount();
        assert_eq!(
            truth.summary.fsynced_at_cut, 0,
            "torn: nothing fsynced may be cached at the cut"
        );
        let backing = sim.backing().join(&name);
        let (code, report, acks) = verify_stable(&l, &w.run, &backing);
        let mut acked = vec![0u64; blocks as usize];
        for a in &acks {
            acked[a.block as usize] = acked[a.block as usize].max(a.seq);
        }
        let disk = read_disk(&backing, w.run.parse().unwrap(), blocks);
        let model = Model::new(&disk, &acked);
        assert_eq!(report["verdicts"], json!(model.verdicts));
        let mut torn_blocks = BTreeSet::new();
        for t in truth.of_file(&name) {
            assert_eq!((t.offset % BS, t.len), (0, BS), "{t:?}");
            let b = t.block(BS);
            let k = t.kept_sectors.expect("torn mode reports kept_sectors") as usize;
            let s = seqs(&disk[b as usize]);
            match t.fate {
                Fate::Torn => {
                    assert!(0 < k && k < SPB, "{t:?}");
                    // The first k sectors are the newer write, the rest one older version.
                    assert!(
                        s[..k].iter().all(|&x| x == s[0])
                            && s[k..].iter().all(|&x| x == s[k])
                            && s[0] > s[k],
                        "block {b} after a torn write keeping {k}: seqs {s:?}"
                    );
                    assert!(
                        s[k] >= acked[b as usize],
                        "the older half is the acknowledged version"
                    );
                    torn_blocks.insert(b);
                }
                Fate::Destaged => assert!(
                    k == SPB && whole_seq(&disk[b as usize]).is_some_and(|x| x > acked[b as usize]),
                    "block {b}: {s:?}"
                ),
                Fate::Dropped => assert!(
                    k == 0 && whole_seq(&disk[b as usize]).is_some_and(|x| x >= acked[b as usize]),
                    "block {b}: {s:?}"
                ),
                Fate::Misdirected => panic!("torn mode misdirected {t:?}"),
            }
        }
        assert_eq!(
            report["verdicts"]["torn_in_flight"].as_u64().unwrap()
                + report["verdicts"]["torn_acknowledged"].as_u64().unwrap(),
            torn_blocks.len() as u64
        );
        assert_eq!(report["verdicts"]["torn_acknowledged"], json!(0));
        assert_eq!(code, 0, "{report}");
        assert_eq!(report["findings"], json!([]));
        torn_total += torn_blocks.len();
        cached_total += truth.summary.cached_at_cut;
    }
    eprintln!(
        "torn: {cached_total} writes cached at {cuts} cuts, {torn_total} blocks torn, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(torn_total > 0, "no torn block in {cuts} cuts");
}

/// Misdirect mode: now and then a destaged block lands at another block. The
/// verifier's `misdirected` count is exactly the number of distinct destination
/// blocks (per the truth) that still hold data of a write misdirected there, and no
/// other block holds foreign data; the lost and unserializable blocks are exactly
/// the model's, and each is the source of a misdirected, fsynced write.
#[test]
fn misdirected_writes_match_the_ground_truth() {
    if skip_without_fuse("misdirected_writes_match_the_ground_truth") {
        return;
    }
    let mut seen = 0;
    for (seed, jobs) in [(41, 1), (42, 3), (43, 3), (44, 1), (45, 4)] {
        let c = one_cut(
            "misdirect",
            seed,
            &["--misdirect-every", "40"],
            512,
            jobs,
            600 + 300 * (seed % 3),
        );
        assert_eq!(
            c.truth.summary.fsynced_at_cut, 0,
            "misdirect: fsync destages"
        );
        let mis: Vec<_> = c
            .truth_writes()
            .filter(|w| w.fate == Fate::Misdirected)
            .collect();
        assert_eq!(mis.len() as u64, c.truth.summary.misdirected);
        let mut by_dest: BTreeMap<u64, Vec<&plugpull_tests::simfs::TruthWrite>> = BTreeMap::new();
        for w in &mis {
            let at = w.landed_at.expect("landed_at");
            assert_eq!((w.offset % BS, at % BS, w.len), (0, 0, BS), "{w:?}");
            assert_ne!(at, w.offset);
            by_dest.entry(at / BS).or_default().push(w);
        }
        // A destination still holds misdirected data when its sectors name one of
        // the source blocks the truth sent there (with one job, also the very write:
        // seq == file_write_id).
        let mut holding = BTreeSet::new();
        for (&d, ws) in &by_dest {
            let secs = &c.disk[d as usize];
            let named: BTreeSet<(u64, u64)> = secs
                .iter()
                .filter_map(|s| {
                    if let Sec::Ours { block, seq, .. } = *s {
                        (block != d).then_some((block, seq))
                    } else {
                        None
                    }
                })
                .collect();
            if named.is_empty() {
                continue;
            }
            assert_eq!(
                named.len(),
                1,
                "block {d} holds sectors of several foreign writes: {named:?}"
            );
            let (src, seq) = *named.iter().next().unwrap();
            assert!(ws.iter().any(|w| w.block(BS) == src && (c.jobs > 1 || w.file_write_id == seq)), "block {d} holds seq {seq} of block {src}, which the truth never sent there: {ws:?}");
            holding.insert(d);
        }
        let all_foreign: BTreeSet<u64> = (0..c.disk.len() as u64)
            .filter(|&b| misplaced(b, &c.disk[b as usize]).is_some())
            .collect();
        assert_eq!(
            all_foreign, holding,
            "blocks holding foreign data vs the truth's destinations still holding it"
        );
        assert_eq!(c.count("misdirected"), holding.len() as u64);
        assert_eq!(c.found(&["misdirected"]), holding);
        // Lost acknowledged writes: only sources of misdirected, fsynced writes.
        let sources: BTreeSet<u64> = mis
            .iter()
            .filter(|w| w.fsynced)
            .map(|w| w.block(BS))
            .collect();
        let lost = c.found(&["lost_write", "unserializable"]);
        assert_eq!(lost, c.model.lost());
        assert!(
            lost.is_subset(&sources),
            "lost blocks {lost:?} that no fsynced write was misdirected from ({sources:?})"
        );
        for v in ["torn_in_flight", "torn_acknowledged", "corrupt", "missing"] {
            assert_eq!(c.count(v), 0, "{v}");
        }
        seen += holding.len();
    }
    assert!(seen > 0, "no misdirected block survived in any cut");
}

/// `plugpull-simfs cut --when-tearable SECS` cuts only at a moment the cache holds a
/// write the cut could tear: with only a write of the atomic unit cached it waits,
/// cuts nothing and exits 1; with an 8 KiB write arriving 200 ms into the wait it cuts
/// with that write cached; on a mount in another mode it refuses at once.
#[test]
fn cut_when_tearable_waits_for_a_write_that_can_tear() {
    if skip_without_fuse("cut_when_tearable_waits_for_a_write_that_can_tear") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let extra = ["--atomic-unit", "4096", "--destage-delay-ms", "600000"];
    let mut sim = SimFs::mount_with(dir.path(), "torn", 5, &extra);
    std::fs::write(sim.mnt().join("small"), [1u8; 4096]).unwrap();
    let cut = |mnt: &Path, secs: &str| {
        let o = std::process::Command::new(bin("plugpull-simfs"))
            .args(["cut", "--mountpoint", mnt.to_str().unwrap()])
            .args(["--when-tearable", secs])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(
        cut(sim.mnt(), "0.3"),
        (
            Some(1),
            "plugpull-simfs: no cached write could tear within 0.3 s (torn mode, a write longer than the atomic unit): not cut\n".to_string()
        )
    );
    let stats = sim.stats();
    assert_eq!(
        (&stats["power"], &stats["cached_writes"]),
        (&json!("on"), &json!(1)),
        "{stats}"
    );
    let mnt = sim.mnt().to_path_buf();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        std::fs::write(mnt.join("big"), [2u8; 8192])
    });
    let truth = sim.cut_when_tearable(10.0);
    writer.join().unwrap().unwrap();
    let cached: Vec<(&str, u64)> = truth
        .writes
        .iter()
        .map(|w| (w.file.as_str(), w.len))
        .collect();
    assert_eq!(cached, [("small", 4096), ("big", 8192)]);
    sim.umount();

    let dir = tempfile::tempdir().unwrap();
    let mut lying = SimFs::mount(dir.path(), "lying", 5);
    assert_eq!(
        cut(lying.mnt(), "5"),
        (
            Some(1),
            "plugpull-simfs: waiting for a write that can tear needs --mode torn (this mount is lying)\n".to_string()
        )
    );
    assert_eq!(lying.stats()["power"], json!("on"));
    lying.umount();
}
