//! A `write file` run on a raw device: the probe it records (no "`write file`
//! refuses it" note: the run holds its device by then) and what `--probe-seconds`
//! says when the run cannot time its own device.

use super::targets::notes;
use super::*;

/// `write` probes its raw device while it holds it open exclusively: the run's
/// record must not say that `write` refuses the device (that note is `plugpull
/// probe`'s, for a device held by someone else).
#[test]
fn a_write_run_on_a_raw_device_does_not_record_that_write_refuses_it() {
    let test = "a_write_run_on_a_raw_device_does_not_record_that_write_refuses_it";
    if skip_without_loop(test, &[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::write(&img, vec![0; 4 << 20]).unwrap();
    let lo = Loop::attach(&img, &[]);
    let l = plugpull_tests::Listener::start(dir.path());
    plugpull_tests::write_run(
        &l,
        Path::new(&lo.dev),
        "1MiB",
        &["--writes", "50", "--probe-seconds", "1"],
    );
    let (code, v, err) = plugpull_tests::verify_json(&l, &[]);
    assert_eq!(code, 0, "{err}");
    let p = &v["storage"]["probe"];
    assert_eq!(p["target"], lo.dev.as_str());
    let held: Vec<String> = notes(p)
        .into_iter()
        .filter(|n| n.contains("`write file` refuses it"))
        .collect();
    assert_eq!(held, Vec::<String>::new());
    // The run holds its device: --probe-seconds says how to time it beforehand.
    let timed: Vec<String> = notes(p)
        .into_iter()
        .filter(|n| n.starts_with("flush accounting"))
        .collect();
    assert_eq!(
        timed,
        [format!(
            "flush accounting not measured: a run does not time its own raw device; run `plugpull probe --target {} --seconds N --force` before the run",
            lo.dev
        )]
    );
    assert_eq!(p["flush"], Value::Null);
}
