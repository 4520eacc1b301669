//! `plugpull demo --vm`: three virtual machines written for a few seconds each, one
//! verdict line each, in a fixed order with fixed words.

use plugpull_tests::{plugpull, stderr, stdout};
use std::time::Instant;

/// The honest machine passes, the lying one fails, the lying one shut down cleanly
/// is NOT MEASURED by its surviving canary; exit 0 ("the tool works").
#[test]
fn demo_vm_passes_the_honest_fails_the_lying_and_measures_no_clean_shutdown() {
    let test = "vm::demo::demo_vm_passes_the_honest_fails_the_lying_and_measures_no_clean_shutdown";
    let Some(_guests) = super::guest_on_simfs(test) else {
        return;
    };
    let t = Instant::now();
    let o = plugpull(&["demo", "--vm", "--vm-secs", "5"]);
    let out = stdout(&o);
    eprintln!("demo --vm --vm-secs 5: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", stderr(&o));
    let line = |name: &str| -> String {
        let found: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&format!("{name}: ")))
            .collect();
        assert_eq!(found.len(), 1, "{name}:\n{out}");
        found[0].to_string()
    };
    let honest = line("honest machine");
    assert!(
        honest.starts_with("honest machine: PASS, ")
            && honest.ends_with(" acknowledged writes, 0 lost"),
        "{out}"
    );
    let lying = line("lying machine");
    assert!(
        lying.starts_with("lying machine: FAIL, ") && lying.ends_with(" acknowledged writes lost"),
        "{out}"
    );
    let lost: u64 = lying["lying machine: FAIL, ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(lost > 0, "{out}");
    let clean = line("lying machine, clean shutdown");
    assert!(
        clean.starts_with(
            "lying machine, clean shutdown: NOT MEASURED: the canary survived the cut"
        ),
        "{out}"
    );
    assert_eq!(
        out.lines().last(),
        Some("the tool works: the honest machine kept every acknowledged write, the lying one was caught, and its clean shutdown was not taken for a power cut"),
        "{out}"
    );
}
