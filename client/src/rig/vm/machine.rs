//! A virtual machine's files: what the `qemu://DIR` power driver (`crate::power`,
//! `qemu.rs`) starts and cuts, kept in `DIR` so that one process may turn it on and
//! another one off:
//!
//! * `DIR/vm.json` — the [`VmSpec`]: QEMU's recorded arguments and, when the disk
//!   image sits on simfs, the [`SimDisk`]. Written once by [`create`].
//! * `DIR/vm-state.json` — the [`VmState`]: on or off, boots, process ids.
//! * `DIR/qmp.sock`, `DIR/console.log` (the serial console of the current boot),
//!   `DIR/qemu.log` (QEMU's own output, appended).
//! * With a [`SimDisk`]: `DIR/backing/` (what survives every cut), `DIR/disk/` (the
//!   simfs mountpoint holding the image), `DIR/simfs.log`, `DIR/truth-N.jsonl` (the
//!   ground truth of boot N, written by the cut that ended it).
//! * `DIR/machine.lock` — held while `on`, `off` or `status` runs.

use super::qemu::Spec;
use crate::rig::machine::write_atomic;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The simfs mount the machine's disk image sits on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimDisk {
    /// The `plugpull-simfs` binary (absolute path).
    pub bin: PathBuf,
    /// simfs's fault model: `honest`, `lying`, `reorder`, `torn` or `misdirect`.
    pub mode: String,
    /// Boot N mounts simfs with seed `seed + N` (wrapping).
    pub seed: u64,
    /// Further `plugpull-simfs mount` options, e.g. `["--destage-delay-ms", "10000"]`.
    #[serde(default)]
    pub args: Vec<String>,
}

/// What the machine is: `DIR/vm.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    /// QEMU's arguments (the binary is `qemu-system-x86_64`).
    pub qemu: Vec<String>,
    /// The simfs mount under the disk image, if any.
    pub simfs: Option<SimDisk>,
}

/// The machine's power state: `DIR/vm-state.json`. No file: off, never booted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmState {
    /// Powered (QEMU started and not cut).
    pub on: bool,
    /// Boots so far.
    pub boots: u32,
    /// QEMU's process id while on.
    pub qemu_pid: Option<u32>,
    /// The simfs mount's process id while mounted.
    pub simfs_pid: Option<u32>,
}

/// Sets up the machine in `dir` for `spec`'s guest: creates `dir` (and with `simfs`
/// `dir/backing` and `dir/disk`; the image must then be `dir/disk/NAME`, made in
/// `dir/backing/NAME` before the first boot) and writes `dir/vm.json`. Returns the
/// machine's directory, absolute: the machine is then `qemu://` followed by it.
pub fn create(dir: &Path, spec: &Spec, simfs: Option<SimDisk>) -> Result<PathBuf, Error> {
    let mk = |d: &Path| {
        std::fs::create_dir_all(d)
            .map_err(|e| Error::Msg(format!("cannot create {}: {e}", d.display())))
    };
    mk(dir)?;
    let dir = dir
        .canonicalize()
        .map_err(|e| Error::Msg(format!("{}: {e}", dir.display())))?;
    if simfs.is_some() {
        mk(&dir.join("backing"))?;
        mk(&dir.join("disk"))?;
    }
    let vm = VmSpec {
        qemu: spec.args(&dir.join("qmp.sock"), &dir.join("console.log")),
        simfs,
    };
    let text = serde_json::to_string_pretty(&vm).expect("a spec serializes");
    write_atomic(&dir.join("vm.json"), text.as_bytes())?;
    Ok(dir)
}

/// Reads `dir/vm.json`. Errors name the file.
pub fn spec(dir: &Path) -> Result<VmSpec, Error> {
    let path = dir.join("vm.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Msg(format!(
            "cannot read {}: {e} (not a virtual machine's directory?)",
            path.display()
        ))
    })?;
    serde_json::from_str(&text)
        .map_err(|e| Error::Msg(format!("{} is damaged: {e}", path.display())))
}

/// Reads `dir/vm-state.json`; off and never booted when it does not exist.
pub fn state(dir: &Path) -> Result<VmState, Error> {
    let path = dir.join("vm-state.json");
    match std::fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str(&t)
            .map_err(|e| Error::Msg(format!("{} is damaged: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(VmState::default()),
        Err(e) => Err(Error::Msg(format!("cannot read {}: {e}", path.display()))),
    }
}

/// Replaces `dir/vm-state.json` with `st`, durably.
pub fn save_state(dir: &Path, st: &VmState) -> Result<(), Error> {
    let text = serde_json::to_string(st).expect("a state serializes");
    write_atomic(&dir.join("vm-state.json"), text.as_bytes())
}
