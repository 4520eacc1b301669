//! Whole-machine rehearsal on a QEMU guest with Debian's stock kernel (docs/vm.md):
//! the guest bundle boots and runs `plugpull` (`boot.rs`); the `qemu://` power
//! driver turns a guest on, reads and cuts it (`power.rs`); the file workload in a
//! guest, cut, verified on the host: an honest and a lying disk, and a clean
//! shutdown (`files.rs`); the pgbench workload in a guest with PostgreSQL, cut and
//! recovered on the host: an honest and a lying disk (`pgbench.rs`); the lying
//! machine reset instead of cut (`reset.rs`);
//! `plugpull demo --vm` (`demo.rs`). Each test skips loudly where QEMU, busybox or the kernel
//! package is missing (`scripts/deps` installs them), and fails instead when
//! `PLUGPULL_REQUIRE_VM` is set (CI).

use plugpull_client::rig::vm;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod boot;
mod campaign;
mod demo;
mod files;
mod pgbench;
mod power;
mod reset;

/// Guests at once. TCG on two cores slows every guest as more run: each test holds
/// [`light`] (they run together, one guest at a time each) except the campaign's,
/// which holds [`heavy`] (two guests for about 70 s, alone), so that every guest
/// stays fast enough for its test's time limits.
static GUESTS: RwLock<()> = RwLock::new(());

/// The share of [`GUESTS`] of a test running one guest at a time.
pub fn light() -> RwLockReadGuard<'static, ()> {
    GUESTS.read().unwrap_or_else(PoisonError::into_inner)
}

/// [`GUESTS`] alone, for a test running several guests at once.
pub fn heavy() -> RwLockWriteGuard<'static, ()> {
    GUESTS.write().unwrap_or_else(PoisonError::into_inner)
}

/// The [`light`] share a test running one guest whose disk may sit on simfs holds,
/// or `None` (after a loud SKIPPED line) when a guest or FUSE is missing here.
pub fn guest_on_simfs(test: &str) -> Option<RwLockReadGuard<'static, ()>> {
    if skip_without_vm(test) || plugpull_tests::simfs::skip_without_fuse(test) {
        return None;
    }
    Some(light())
}

/// Returns true (after a loud SKIPPED line) when a guest cannot run here; panics
/// instead when `PLUGPULL_REQUIRE_VM` is set to a non-empty value other than `0`.
pub fn skip_without_vm(test: &str) -> bool {
    let Some(why) = vm::unavailable() else {
        return false;
    };
    let required = std::env::var("PLUGPULL_REQUIRE_VM").is_ok_and(|v| !v.is_empty() && v != "0");
    assert!(
        !required,
        "{test}: PLUGPULL_REQUIRE_VM is set but a guest cannot run here: {why}"
    );
    plugpull_tests::skipped(test, &format!("no QEMU guest: {why}"));
    true
}

/// The guest bundle running the `plugpull` built beside the tests.
pub fn bundle() -> vm::bundle::Bundle {
    vm::default_bundle(&plugpull_tests::bin("plugpull")).expect("guest bundle")
}
