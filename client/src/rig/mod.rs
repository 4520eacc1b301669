//! The process machinery the demo and the end-to-end tests share, so both start,
//! cut and tear down the same way: [`proc`] (spawning, waiting, process groups,
//! killing and reaping), [`listener`] (a `plugpull-listener` on a free port),
//! [`simfs`] (a `plugpull-simfs` mount: cut, umount, remount), [`machine`] (the
//! simulated machine's files, which the `simfs://` power driver boots and cuts), [`postgres`] (a
//! throwaway cluster: initdb, start, stop, kill), [`vm`] (a QEMU guest with a real
//! kernel, its bundle and image) and [`writer`] (a `plugpull write`
//! child: run id, acknowledged count).
//!
//! All of it is synchronous and returns [`crate::Error`]; the tests wrap it in
//! panicking helpers (`plugpull-tests`), the demo calls it from its sequential flow.
//! Binaries are passed in by path: the tests find them beside the test executable,
//! the demo beside itself ([`sibling`]).

pub mod listener;
pub mod machine;
pub mod postgres;
pub mod proc;
pub mod simfs;
pub mod tree;
pub mod vm;
pub mod writer;

use crate::Error;
use std::path::PathBuf;

/// A binary installed beside the running one (`plugpull-listener`, `plugpull-simfs`);
/// `Err` names the build command when it is missing.
pub fn sibling(name: &str) -> Result<PathBuf, Error> {
    let me =
        std::env::current_exe().map_err(|e| Error::Msg(format!("cannot locate plugpull: {e}")))?;
    let p = me.with_file_name(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(Error::Msg(format!(
            "{} not found beside {}: build the workspace (cargo build --release --workspace)",
            name,
            me.display()
        )))
    }
}
