//! `plugpull demo --vm`: five virtual machines written for a few seconds each (the
//! file workload on three, pgbench on two), one verdict line each, in a fixed order
//! with fixed words.

use plugpull_tests::{plugpull, stderr, stdout};
use std::time::Instant;

/// The honest machine passes, the lying one fails, the lying one shut down cleanly
/// is NOT MEASURED by its surviving canary; with pgbench, the honest machine passes
/// and the lying one fails with lost commits; exit 0 ("the tool works").
#[test]
fn demo_vm_passes_the_honest_fails_the_lying_and_measures_no_clean_shutdown() {
    let test = "vm::demo::demo_vm_passes_the_honest_fails_the_lying_and_measures_no_clean_shutdown";
    let Some(_guests) = super::guest_on_simfs(test) else {
        return;
    };
    if plugpull_tests::pg::PgCluster::skip(test) {
        return;
    }
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
    let honest_pg = line("honest machine, pgbench");
    assert!(
        honest_pg.starts_with("honest machine, pgbench: PASS, ")
            && honest_pg.ends_with(" acknowledged commits, 0 lost"),
        "{out}"
    );
    let lying_pg = line("lying machine, pgbench");
    let lost: u64 = lying_pg
        .strip_prefix("lying machine, pgbench: FAIL, ")
        .and_then(|r| r.strip_suffix(" acknowledged commits lost"))
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    assert!(lost > 0, "{out}");
    assert_eq!(
        out.lines().last(),
        Some("the tool works: the honest machines kept every acknowledged write and commit, the lying ones were caught, and the clean shutdown was not taken for a power cut"),
        "{out}"
    );
}
