//! The simulated machine for tests: the rig's [`machine`] files set up with this
//! build's `plugpull-simfs`, driven through `simfs://` (`plugpull power` or the
//! library's driver), and turned off on drop (a power cut: nothing stays mounted or
//! running, also when the test panics).

use crate::bin;
use crate::simfs::Truth;
use plugpull_client::rig::machine::{self, MachineSpec, State};
use std::path::{Path, PathBuf};

/// A simulated machine in a directory; powered off on drop.
pub struct Machine {
    /// Its directory (`machine.json`, `backing/`, `mnt/`, logs, ground truths).
    pub dir: PathBuf,
    /// Its mountpoint `dir/mnt` (absolute, canonical).
    pub mnt: PathBuf,
    /// `simfs://` followed by [`Machine::mnt`].
    pub uri: String,
}

impl Machine {
    /// Sets up a machine in `dir` (created if missing): simfs in `mode` with `seed`
    /// and the extra mount options `simfs_args`, running `boot` at each boot. Off.
    pub fn create(
        dir: &Path,
        mode: &str,
        seed: u64,
        simfs_args: &[&str],
        boot: &[&str],
    ) -> Machine {
        let spec = MachineSpec {
            simfs: bin("plugpull-simfs"),
            mode: mode.into(),
            seed,
            simfs_args: simfs_args.iter().map(|s| s.to_string()).collect(),
            boot: boot.iter().map(|s| s.to_string()).collect(),
        };
        let mnt = machine::create(dir, &spec).unwrap_or_else(|e| panic!("{e}"));
        Machine {
            dir: mnt.parent().expect("mnt has a parent").to_path_buf(),
            uri: format!("simfs://{}", mnt.display()),
            mnt,
        }
    }

    /// The boot id of the current (or last) boot.
    pub fn boot_id(&self) -> Option<String> {
        machine::boot_id(&self.dir)
    }

    /// Boots so far.
    pub fn boots(&self) -> u32 {
        machine::boots(&self.dir)
    }

    /// The machine's recorded state; panics when it cannot be read.
    pub fn state(&self) -> State {
        machine::state(&self.dir).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The ground truth of boot `boot`, parsed; panics when missing or malformed.
    pub fn truth(&self, boot: u32) -> Truth {
        let p = machine::truth_path(&self.dir, boot);
        let text = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("ground truth {}: {e}", p.display()));
        Truth::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// The boot command's output during boot `boot`.
    pub fn boot_log(&self, boot: u32) -> String {
        std::fs::read_to_string(machine::boot_log(&self.dir, boot)).unwrap_or_default()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let uri = plugpull::power::PowerUri::Simfs {
            mountpoint: self.mnt.clone(),
        };
        if let Err(e) = plugpull_client::power::open(&uri).and_then(|d| d.off()) {
            eprintln!("machine {}: off on drop: {e}", self.dir.display());
        }
    }
}
