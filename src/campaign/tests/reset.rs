//! A cut of kind `reset`: the disk kept power.

use super::*;

/// A reset (`qemu://DIR?cut=reset`, kind `reset`) kept the disk powered: its pass is
/// not measured, its failure is a valid failed cut.
#[test]
fn a_reset_passes_nothing_about_the_disk_and_fails_as_any_cut() {
    let mut p = pulling(1, 1, "b1");
    p.driver = "qemu".into();
    p.kind = "reset".into();
    let (pass, fail) = ([file_report(0, 40, 0)], [file_report(1, 40, 6)]);
    assert_eq!(
        judge(&facts(&p, Some((&pass, "b2")))).validity,
        Validity::NotMeasured(crate::verdict::cut::RESET_NOT_MEASURED.into())
    );
    let f = judge(&facts(&p, Some((&fail, "b2"))));
    assert_eq!(
        (f.validity, f.verdict.map(|v| v.failed)),
        (Validity::Valid, Some(true))
    );
    p.kind = "vm".into();
    assert_eq!(
        judge(&facts(&p, Some((&pass, "b2")))).validity,
        Validity::Valid
    );
}
