//! The simulated machine's files: what the `simfs://MOUNTPOINT` power driver
//! (`crate::power`, `sim.rs`) boots and cuts, kept in one directory `DIR` (the
//! mountpoint's parent) so that any process can turn the machine on and another one
//! off (a campaign controller is killed and restarted mid-campaign):
//!
//! * `DIR/machine.json` — the [`MachineSpec`], written once by [`create`].
//! * `DIR/machine-state.json` — the [`State`]: on or off, boots so far, the boot id,
//!   the process ids. Replaced atomically (written, fsynced, renamed) at each change.
//! * `DIR/backing/` (what survives every cut), `DIR/mnt/` (the mountpoint).
//! * `DIR/simfs.log` — the mount process's stderr, appended over boots.
//! * `DIR/truth-N.jsonl` — the ground truth of boot N, written by the cut that ended
//!   it ([`truth_path`]).
//! * `DIR/boot-N.log` — the boot command's stdout and stderr during boot N.
//! * `DIR/machine.lock` — held (`flock`) while `on`, `off` or `status` runs.

use crate::Error;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What the simulated machine is: `DIR/machine.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    /// The `plugpull-simfs` binary (absolute path).
    pub simfs: PathBuf,
    /// simfs's fault model: `honest`, `lying`, `reorder`, `torn` or `misdirect`.
    pub mode: String,
    /// Boot N mounts simfs with seed `seed + N` (wrapping).
    pub seed: u64,
    /// Further `plugpull-simfs mount` options, e.g. `["--destage-delay-ms", "2000"]`.
    #[serde(default)]
    pub simfs_args: Vec<String>,
    /// What the machine runs at boot: program (absolute path) and arguments; the
    /// driver appends `--simulated-boot-id ID`. Not empty.
    pub boot: Vec<String>,
}

/// The machine's power state: `DIR/machine-state.json`. No file: off, never booted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Powered (simfs mounted, boot command started).
    pub on: bool,
    /// Boots so far (the current or last one is boot `boots`).
    pub boots: u32,
    /// The boot id of the current (or last) boot: a random UUID, text form.
    pub boot_id: Option<String>,
    /// Process group (and session) of the boot command while on.
    pub boot_pgid: Option<u32>,
    /// Process id of the simfs mount while on.
    pub simfs_pid: Option<u32>,
}

/// Sets up a simulated machine in `dir`: creates `dir`, `dir/backing` and `dir/mnt`
/// and writes `dir/machine.json` from `spec` (replacing one already there; a
/// `machine-state.json` already there is kept, so boots go on counting). Returns
/// the mountpoint `dir/mnt` (absolute, canonical): the machine is then
/// `simfs://` followed by it. Errors: a directory or file that cannot be made, an
/// empty `spec.boot`.
pub fn create(dir: &Path, spec: &MachineSpec) -> Result<PathBuf, Error> {
    if spec.boot.is_empty() {
        return Err(Error::Msg(
            "a simulated machine needs a boot command".into(),
        ));
    }
    for d in [dir.to_path_buf(), dir.join("backing"), dir.join("mnt")] {
        std::fs::create_dir_all(&d)
            .map_err(|e| Error::Msg(format!("cannot create {}: {e}", d.display())))?;
    }
    let text = serde_json::to_string_pretty(spec).expect("a spec serializes");
    write_atomic(&dir.join("machine.json"), text.as_bytes())?;
    dir.join("mnt")
        .canonicalize()
        .map_err(|e| Error::Msg(format!("{}: {e}", dir.join("mnt").display())))
}

/// Reads `dir/machine.json`. Errors name the file: not found (and who makes it),
/// unreadable, not a valid spec, or an empty boot command.
pub fn spec(dir: &Path) -> Result<MachineSpec, Error> {
    let path = dir.join("machine.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Msg(format!(
                "{} not found: the simulated machine is set up by `plugpull demo --cuts` \
                 or the tests (see docs/power.md)",
                path.display()
            )))
        }
        Err(e) => return Err(Error::Msg(format!("cannot read {}: {e}", path.display()))),
    };
    let spec: MachineSpec = serde_json::from_str(&text).map_err(|e| {
        Error::Msg(format!(
            "{} is not a machine description: {e}",
            path.display()
        ))
    })?;
    if spec.boot.is_empty() {
        return Err(Error::Msg(format!("{}: `boot` is empty", path.display())));
    }
    Ok(spec)
}

/// Reads `dir/machine-state.json`; the default state (off, never booted) when it does
/// not exist. Errors name the file.
pub fn state(dir: &Path) -> Result<State, Error> {
    let path = dir.join("machine-state.json");
    match std::fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str(&t)
            .map_err(|e| Error::Msg(format!("{} is damaged: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
        Err(e) => Err(Error::Msg(format!("cannot read {}: {e}", path.display()))),
    }
}

/// Replaces `dir/machine-state.json` with `st`, durably (written, fsynced, renamed,
/// directory fsynced).
pub fn save_state(dir: &Path, st: &State) -> Result<(), Error> {
    let text = serde_json::to_string(st).expect("a state serializes");
    write_atomic(&dir.join("machine-state.json"), text.as_bytes())
}

/// The boot id of the machine's current boot, or of its last one while it is off;
/// `None` before its first boot (or when the state cannot be read).
pub fn boot_id(dir: &Path) -> Option<String> {
    state(dir).ok()?.boot_id
}

/// How many times the machine in `dir` booted (0 when never, or unreadable state).
pub fn boots(dir: &Path) -> u32 {
    state(dir).map(|s| s.boots).unwrap_or(0)
}

/// `dir/truth-BOOT.jsonl`: simfs's ground truth of boot `boot` (from 1), written by
/// the cut that ended it (`plugpull_simfs::truth` parses it).
pub fn truth_path(dir: &Path, boot: u32) -> PathBuf {
    dir.join(format!("truth-{boot}.jsonl"))
}

/// `dir/boot-BOOT.log`: the boot command's stdout and stderr during boot `boot`.
pub fn boot_log(dir: &Path, boot: u32) -> PathBuf {
    dir.join(format!("boot-{boot}.log"))
}

/// A fresh random boot id: a version-4 UUID in its text form (8-4-4-4-12 lowercase
/// hex digits), as Linux's `/proc/sys/kernel/random/boot_id`.
pub fn new_boot_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    crate::target_id::uuid_text(&b)
}

/// Writes `path` whole through a temporary file beside it: fsynced, renamed over
/// `path`, and the directory fsynced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let err = |e: std::io::Error| Error::Msg(format!("cannot write {}: {e}", path.display()));
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    if let Some(d) = path.parent() {
        std::fs::File::open(d)
            .and_then(|d| d.sync_all())
            .map_err(err)?;
    }
    Ok(())
}

/// An exclusive `flock` on `dir/machine.lock`, released on drop: one `on` or `off`
/// (or `status`) at a time, whichever process runs it.
pub struct Lock(#[allow(dead_code)] std::fs::File);

impl Lock {
    /// Waits for the lock. Errors name the file.
    pub fn take(dir: &Path) -> Result<Lock, Error> {
        let path = dir.join("machine.lock");
        let err = |e: std::io::Error| Error::Msg(format!("cannot lock {}: {e}", path.display()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(err)?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| err(e.into()))?;
        Ok(Lock(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids_are_uuid_text_and_differ() {
        let a = new_boot_id();
        let parts: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12], "{a}");
        assert!(a
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_boot_id());
    }

    #[test]
    fn create_writes_the_spec_and_state_starts_off() {
        let dir = std::env::temp_dir().join(format!("plugpull-machine-{}", std::process::id()));
        let spec = MachineSpec {
            simfs: "/bin/simfs".into(),
            mode: "lying".into(),
            seed: 7,
            simfs_args: vec!["--destage-delay-ms".into(), "50".into()],
            boot: vec!["/bin/sh".into(), "-c".into(), "true".into()],
        };
        let mnt = create(&dir, &spec).unwrap();
        assert_eq!(mnt, dir.canonicalize().unwrap().join("mnt"));
        assert_eq!(super::spec(&dir).unwrap(), spec);
        assert_eq!(state(&dir).unwrap(), State::default());
        assert_eq!((boot_id(&dir), boots(&dir)), (None, 0));
        let st = State {
            on: true,
            boots: 3,
            boot_id: Some(new_boot_id()),
            boot_pgid: Some(10),
            simfs_pid: Some(11),
        };
        save_state(&dir, &st).unwrap();
        assert_eq!(state(&dir).unwrap(), st);
        assert_eq!((boot_id(&dir), boots(&dir)), (st.boot_id.clone(), 3));
        assert_eq!(truth_path(&dir, 3), dir.join("truth-3.jsonl"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
