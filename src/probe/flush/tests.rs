//! The stat parser on stat lines captured from this project's build machine
//! (`tests/fixtures/README.md`), and one test per flush rule.

use super::*;

const VDA_STAT: &str = include_str!("../../../tests/fixtures/sys-block-vda-stat");
const LOOP0_STAT: &str = include_str!("../../../tests/fixtures/sys-block-loop0-stat");

#[test]
fn parses_a_captured_17_field_line() {
    let s = DiskStat::parse(VDA_STAT).unwrap();
    assert_eq!(s.fields, 17);
    assert_eq!(s.write_ios, 15298208);
    assert_eq!(s.flush_ios, Some(5111428));
    assert_eq!(s.flush_ticks_ms, Some(681259));
    let l = DiskStat::parse(LOOP0_STAT).unwrap();
    assert_eq!(
        (l.write_ios, l.flush_ios, l.flush_ticks_ms),
        (358068, Some(173080), Some(153827))
    );
}

#[test]
fn older_kernels_leave_flushes_unknown() {
    // The captured line cut to the 15 and 11 fields of Linux 4.18–5.4 and before 4.18.
    let fields: Vec<&str> = VDA_STAT.split_whitespace().collect();
    for n in [15, 11] {
        let s = DiskStat::parse(&fields[..n].join(" ")).unwrap();
        assert_eq!((s.fields, s.flush_ios, s.flush_ticks_ms), (n, None, None));
        let d = DiskFlushes::between("vda", &s, &s, 10);
        assert_eq!((d.flushes_delta, d.per_fdatasync), (None, None));
    }
    assert_eq!(
        DiskStat::parse(&fields[..10].join(" ")).unwrap_err(),
        "stat line has 10 fields, expected at least 11"
    );
    assert_eq!(
        DiskStat::parse("1 2 x").unwrap_err(),
        "stat field \"x\" is not a counter"
    );
}

#[test]
fn delta_and_per_fdatasync() {
    let before = DiskStat::parse(LOOP0_STAT).unwrap();
    let after = DiskStat {
        flush_ios: before.flush_ios.map(|f| f + 250),
        ..before
    };
    let d = DiskFlushes::between("loop0", &before, &after, 125);
    assert_eq!((d.flushes_delta, d.per_fdatasync), (Some(250), Some(2.0)));
    // A counter that went down (disk re-attached) is unknown, never negative.
    let d = DiskFlushes::between("loop0", &after, &before, 125);
    assert_eq!(d.flushes_delta, None);
    assert_eq!(
        DiskFlushes::between("loop0", &before, &after, 0).per_fdatasync,
        None
    );
}

fn measurement(rate: f64, p50_us: u64, disk: DiskFlushes) -> FlushMeasurement {
    FlushMeasurement {
        seconds: 1.0,
        fdatasyncs: rate as u64,
        rate_per_s: rate,
        p50_us,
        p99_us: p50_us * 2,
        per_disk: vec![disk],
        notes: vec![],
    }
}

fn disk(delta: Option<u64>, rotational: bool, cache: WriteCache, rpm: Option<u32>) -> DiskFlushes {
    DiskFlushes {
        disk: "sdz".into(),
        flushes_delta: delta,
        per_fdatasync: None,
        writes_delta: Some(50),
        rotational: Some(rotational),
        write_cache: Some(cache),
        rpm,
    }
}

fn ids(m: &FlushMeasurement) -> Vec<String> {
    warnings(m).into_iter().map(|w| w.id).collect()
}

#[test]
fn flushes_not_reaching_device() {
    let m = measurement(
        50.0,
        5000,
        disk(Some(0), false, WriteCache::WriteBack, None),
    );
    let w = warnings(&m);
    assert_eq!(ids(&m), [FLUSHES_NOT_REACHING_DEVICE]);
    assert_eq!(w[0].disk, "sdz");
    assert_eq!(
        w[0].text,
        "sdz: write cache \"write back\" but 0 flushes counted over 50 fdatasyncs"
    );
    // Write-through: the kernel drops flushes by design; unknown counter: no claim.
    let m = measurement(
        50.0,
        5000,
        disk(Some(0), false, WriteCache::WriteThrough, None),
    );
    assert!(ids(&m).is_empty());
    let m = measurement(50.0, 5000, disk(None, false, WriteCache::WriteBack, None));
    assert!(ids(&m).is_empty());
    let m = measurement(
        50.0,
        5000,
        disk(Some(50), false, WriteCache::WriteBack, None),
    );
    assert!(ids(&m).is_empty());
    // Its counters saw none of the loop's writes either: zero flushes prove nothing
    // about flushes, but writes that reached no disk are flagged as such.
    let blind = DiskFlushes {
        writes_delta: Some(0),
        ..disk(Some(0), false, WriteCache::WriteBack, None)
    };
    assert_eq!(
        ids(&measurement(50.0, 5000, blind)),
        [WRITES_NOT_REACHING_DEVICE]
    );
    // A few flushes from the rest of the machine do not hide it (eatmydata on a
    // disk others use): under half a flush per fdatasync warns.
    let mut few = disk(Some(145), false, WriteCache::WriteBack, None);
    few.per_fdatasync = Some(145.0 / 100_000.0);
    let m = FlushMeasurement {
        fdatasyncs: 100_000,
        ..measurement(50.0, 5000, few)
    };
    assert_eq!(
        warnings(&m)[0].text,
        "sdz: write cache \"write back\" but only 145 flushes counted over 100000 fdatasyncs (0.00 per fdatasync)"
    );
    let mut half = disk(Some(50), false, WriteCache::WriteBack, None);
    half.per_fdatasync = Some(0.5);
    assert!(ids(&measurement(100.0, 5000, half)).is_empty());
}

#[test]
fn fsync_too_fast_for_rotational() {
    // 7200 rpm assumed = 120 revolutions/s.
    let m = measurement(
        121.0,
        5000,
        disk(Some(121), true, WriteCache::WriteThrough, None),
    );
    assert_eq!(ids(&m), [FSYNC_TOO_FAST_FOR_ROTATIONAL]);
    assert_eq!(
        warnings(&m)[0].text,
        "sdz: rotational disk completed 121 fdatasyncs/s, above its 120 revolutions/s (7200 rpm assumed)"
    );
    let m = measurement(
        120.0,
        5000,
        disk(Some(120), true, WriteCache::WriteThrough, None),
    );
    assert!(ids(&m).is_empty());
    // A known 5400 rpm disk: 90/s is its limit.
    let m = measurement(
        100.0,
        5000,
        disk(Some(100), true, WriteCache::WriteThrough, Some(5400)),
    );
    assert_eq!(ids(&m), [FSYNC_TOO_FAST_FOR_ROTATIONAL]);
    let m = measurement(
        1000.0,
        5000,
        disk(Some(1000), false, WriteCache::WriteThrough, None),
    );
    assert!(ids(&m).is_empty());
}

#[test]
fn write_back_cache_fast_flush() {
    let m = measurement(50.0, 99, disk(Some(50), false, WriteCache::WriteBack, None));
    assert_eq!(ids(&m), [WRITE_BACK_CACHE_FAST_FLUSH]);
    let m = measurement(
        50.0,
        100,
        disk(Some(50), false, WriteCache::WriteBack, None),
    );
    assert!(ids(&m).is_empty());
    let m = measurement(
        50.0,
        10,
        disk(Some(50), false, WriteCache::WriteThrough, None),
    );
    assert!(ids(&m).is_empty());
}

#[test]
fn write_cache_text_and_json() {
    assert_eq!(
        WriteCache::parse("write back\n"),
        Some(WriteCache::WriteBack)
    );
    assert_eq!(
        WriteCache::parse("write through\n"),
        Some(WriteCache::WriteThrough)
    );
    assert_eq!(WriteCache::parse("unknown"), None);
    let m = measurement(50.0, 99, disk(Some(50), true, WriteCache::WriteBack, None));
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["per_disk"][0]["write_cache"], "write back");
    assert_eq!(WriteCache::WriteThrough.to_string(), "write through");
    assert_eq!(
        serde_json::to_value(WriteCache::WriteThrough).unwrap(),
        "write through"
    );
    assert_eq!(serde_json::from_value::<FlushMeasurement>(json).unwrap(), m);
    let old: WriteCache = serde_json::from_str("\"write-through\"").unwrap();
    assert_eq!(old, WriteCache::WriteThrough);
}

#[test]
fn writes_that_reach_no_disk_are_flagged_whatever_the_cache() {
    // eatmydata on an idle disk: 1 µs fdatasyncs, no write and no flush counted; the
    // write-through cache keeps flushes-not-reaching-device quiet.
    let mut idle = disk(Some(0), false, WriteCache::WriteThrough, None);
    idle.writes_delta = Some(0);
    let m = measurement(518_000.0, 1, idle.clone());
    assert_eq!(
        warnings(&m),
        [FlushWarning {
            id: WRITES_NOT_REACHING_DEVICE.into(),
            disk: "sdz".into(),
            text:
                "over 518000 fdatasyncs no write request was counted on sdz, and the median \
                   fdatasync took 1 µs (under 5 µs, faster than any device completes a write): the \
                   loop's writes did not reach the disk (eatmydata, or a layer that swallows fsync)"
                    .into(),
        }]
    );
    // No write counted at a plausible speed (an NVMe multipath head): flagged too.
    let slow = measurement(50.0, 900, idle.clone());
    assert_eq!(ids(&slow), [WRITES_NOT_REACHING_DEVICE]);
    // Writes counted on one member of two: they reached a disk.
    let mut two = measurement(50.0, 900, idle.clone());
    two.per_disk
        .push(disk(Some(50), false, WriteCache::WriteThrough, None));
    assert_eq!(ids(&two), Vec::<String>::new());
    // Writes counted, but a median under 5 µs: no device is that fast.
    let fast = measurement(
        50.0,
        4,
        disk(Some(50), false, WriteCache::WriteThrough, None),
    );
    assert_eq!(ids(&fast), [WRITES_NOT_REACHING_DEVICE]);
    let plausible = measurement(
        50.0,
        5,
        disk(Some(50), false, WriteCache::WriteThrough, None),
    );
    assert_eq!(ids(&plausible), Vec::<String>::new());
    // No leaf disk (tmpfs): nothing to say here; the probe notes it.
    let mut none = measurement(50.0, 1, idle);
    none.per_disk.clear();
    assert_eq!(ids(&none), Vec::<String>::new());
    // No fdatasync ran: nothing measured.
    let mut zero = measurement(0.0, 1, disk(Some(0), false, WriteCache::WriteThrough, None));
    zero.per_disk[0].writes_delta = Some(0);
    assert_eq!(ids(&zero), Vec::<String>::new());
}
