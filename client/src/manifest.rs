//! The run manifest's common fields: this host and the moment the run started.

use plugpull::ledger::{Manifest, Storage, Workload};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable through which `plugpull agent --host NAME` names the host to the
/// runs it starts (several simulated machines share one real host).
pub const HOST_ENV: &str = "PLUGPULL_HOST";

/// This machine's host name: `PLUGPULL_HOST` when set (by `plugpull agent --host`),
/// else the node name `uname(2)` gives (what `gethostname(2)` returns), or `"unknown"`
/// when it is empty.
pub fn hostname() -> String {
    if let Some(h) = std::env::var(HOST_ENV).ok().filter(|h| !h.is_empty()) {
        return h;
    }
    let name = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    if name.is_empty() {
        "unknown".into()
    } else {
        name
    }
}

/// A manifest for `workload` on `storage` ([`crate::storage::probe_for_run`]) on this
/// host, started now.
pub fn make_manifest(workload: Workload, storage: Storage) -> Manifest {
    Manifest {
        host: hostname(),
        started_unix_ms: now_unix_ms(),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        workload,
        boot_id: crate::target_id::boot_id(),
        listener_order: 0,
        listener_created_unix_ms: 0,
        storage,
        canary: Default::default(),
    }
}

/// Now, ms since the Unix epoch (0 if the clock is before it).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
