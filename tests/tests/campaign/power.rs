//! Power is read, not assumed: campaigns whose script machine's driver answers
//! `status`, and whose machine the driver says is still off after "on" or before a
//! cut. (`redfish.rs` has a BMC that applies its resets late.)

use super::exec::{machine_with, power_on, Off};
use super::*;

/// [`machine`] whose driver answers `status`: `off` once an `off` was called (even
/// one that cut nothing: a driver that says off and kept the machine up) and until
/// an `on` that starts it, else `on`.
fn machine_with_status(w: &Witness, host: &str, cuts_nothing: bool, stays_off: bool) -> String {
    machine_with(w, host, cuts_nothing, stays_off, true)
}

/// Campaign `name` of `cuts` cuts (1 s into each run, off 0 s, boot timeout 3 s) of
/// a [`machine_with_status`] that stays off once cut, powered on; its URI and guard.
fn stays_off_campaign(w: &Witness, name: &str, cuts_nothing: bool, cuts: &str) -> (String, Off) {
    let uri = machine_with_status(w, "h1", cuts_nothing, true);
    let off = Off(w.path("h1"));
    let wl = format!("file --target {} --size 1MiB", w.path("t.dat").display());
    let plan = [
        "--cuts",
        cuts,
        "--cut-after",
        "1s",
        "--off",
        "0s",
        "--boot-timeout",
        "3s",
    ];
    w.create(name, "h1", &uri, &wl, &plan);
    power_on(&uri);
    (uri, off)
}

/// A machine whose driver still says off after its "on" is named as off at once
/// (read for at most the boot timeout), not waited for as if booting and never
/// blamed on its agent; a rerun reads the status first and stops at once, saying
/// so.
#[test]
fn a_machine_the_driver_says_is_still_off_is_named() {
    let w = Witness::start(&["t.dat"]);
    let (_uri, _off) = stays_off_campaign(&w, "s", false, "3");
    let o = w.campaign("run", &["--name", "s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let why = "cut 1: machine h1 is still off after the driver's on (driver says off)";
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        format!("plugpull: campaign s stopped: h1: {why}; rerun `plugpull campaign run --name s` to resume")
    );
    let v = w.status("s");
    assert_eq!(
        cuts(&v),
        vec![(
            1,
            "invalid".into(),
            "machine h1 is still off after the driver's on (driver says off)".into()
        )]
    );
    assert_eq!(v["cuts"][0]["evidence"]["driver_status"], json!("off"));
    assert_eq!(v["hosts"][0]["paused"], json!(why));
    // The rerun: the driver says off, so nothing can run there; said at once.
    let o = w.campaign("run", &["--name", "s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        "plugpull: campaign s stopped: h1: machine h1 is off (driver says off): nothing runs \
         there to be cut; power it on (`plugpull power --power URI on`); rerun `plugpull \
         campaign run --name s` to resume"
    );
    assert!(!stderr(&o).contains("systemctl"), "{}", stderr(&o));
    assert_eq!(w.status("s")["hosts"][0]["cuts_judged"], json!(1));
}

/// A driver that says off but cut nothing (the agent kept acknowledging) and whose
/// "on" leaves it saying off: the cut is not measured, and the host pauses naming
/// the machine as off rather than going on to a next cut it cannot make.
#[test]
fn a_not_measured_cut_reads_the_power_back() {
    let w = Witness::start(&["t.dat"]);
    let (_uri, _off) = stays_off_campaign(&w, "n", true, "2");
    let o = w.campaign("run", &["--name", "n"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        "plugpull: campaign n stopped: h1: cut 1: machine h1 is still off after the driver's \
         on (driver says off); rerun `plugpull campaign run --name n` to resume"
    );
    let v = w.status("n");
    let c = cuts(&v);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!((c[0].0, c[0].1.as_str()), (1, "not measured"));
    assert!(
        c[0].2.starts_with("the agent kept acknowledging writes "),
        "{}",
        c[0].2
    );
    assert_eq!(v["cuts"][0]["evidence"]["driver_status"], json!("off"));
}
