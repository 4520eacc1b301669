//! `simfs://MOUNTPOINT`: the simulated machine's power driver (kind `simulated`), so
//! a campaign runs on one host. The machine lives in the mountpoint's parent `DIR`
//! (files in `crate::rig::machine`): `DIR/machine.json` says which simfs, mode, seed
//! and boot command; `DIR/machine-state.json` says whether it is on, so one process
//! may turn it on and another one off.
//!
//! * `on` (nothing when on): boot N = boots + 1 mounts simfs over `DIR/backing` at
//!   the mountpoint with seed `seed + N` and ground truth `DIR/truth-N.jsonl`, waits
//!   for it to be live (30 s), then starts the boot command with
//!   `--simulated-boot-id ID` (and `PLUGPULL_SIMULATED_BOOT_ID=ID`), ID a fresh random
//!   UUID, in `DIR`, output appended to `DIR/boot-N.log`. Both run in sessions of
//!   their own and outlive the caller; the boot process is a child subreaper, so what
//!   it starts stays in its tree even when it leaves its group (`setsid`).
//! * `off` (nothing when off): a power cut, everything at once: the boot tree is
//!   frozen (SIGSTOP), simfs is cut (what it cached is lost; the ground truth is
//!   written), the tree is SIGKILLed and waited for (10 s), simfs is unmounted
//!   (forced down when stuck).
//! * `status`: on when the state says on, simfs is mounted and the boot tree has a
//!   live process; off when the state says off; an error naming what is missing
//!   otherwise ("the simulated machine crashed: …"). It waits for an `on` or `off`
//!   under way (`DIR/machine.lock`).

use super::{Driver, Status};
use crate::rig::machine::{self, Lock, MachineSpec, State};
use crate::rig::proc;
use crate::rig::simfs::{cut_at, force_down, is_mountpoint, tail, unmount_or_force, MountCmd};
use crate::Error;
use plugpull::power::{CutKind, PowerState};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the boot tree may take to die after SIGKILL.
const KILL_LIMIT: Duration = Duration::from_secs(10);

/// The `simfs://` driver.
pub struct Sim {
    dir: PathBuf,
    mnt: PathBuf,
    spec: MachineSpec,
}

impl Sim {
    /// The machine whose mountpoint is `mountpoint` (relative to the working
    /// directory unless absolute). Errors: no `DIR/machine.json`, or a bad one.
    pub fn new(mountpoint: &Path) -> Result<Sim, Error> {
        let abs = std::path::absolute(mountpoint)
            .map_err(|e| Error::Msg(format!("simfs: {}: {e}", mountpoint.display())))?;
        let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) else {
            return Err(Error::Msg(format!(
                "simfs: {} cannot be a simulated machine's mountpoint",
                abs.display()
            )));
        };
        let dir = parent
            .canonicalize()
            .unwrap_or_else(|_| parent.to_path_buf());
        let spec = machine::spec(&dir).map_err(|e| Error::Msg(format!("simfs: {}", e)))?;
        Ok(Sim {
            mnt: dir.join(name),
            dir,
            spec,
        })
    }

    /// `Ok` when the state's machine runs: simfs mounted and its boot tree alive.
    fn check_on(&self, st: &State) -> Result<(), Error> {
        let state = self.dir.join("machine-state.json");
        let mounted = st.simfs_pid.is_some_and(proc::alive) && is_mountpoint(&self.mnt);
        if !mounted {
            let log = self.dir.join("simfs.log");
            return Err(Error::Msg(format!(
                "simfs: the simulated machine crashed: {} says on (boot {}), but its simfs \
                 mount at {} is gone; {} ends:\n{}",
                state.display(),
                st.boots,
                self.mnt.display(),
                log.display(),
                tail(&log, 10)
            )));
        }
        let Some(group) = st.boot_pgid else {
            return Err(Error::Msg(format!(
                "simfs: the simulated machine crashed: {} says on (boot {}), but its boot \
                 command was never started (an `on` that did not finish)",
                state.display(),
                st.boots
            )));
        };
        if proc::group_tree(group, marker(st).as_deref()).is_empty() {
            let log = machine::boot_log(&self.dir, st.boots);
            return Err(Error::Msg(format!(
                "simfs: the simulated machine crashed: {} says on (boot {}), but no \
                 process of its boot group {group} runs; {} ends:\n{}",
                state.display(),
                st.boots,
                log.display(),
                tail(&log, 10)
            )));
        }
        Ok(())
    }

    /// Starts the boot command of boot `boot` with boot id `id`; its process id
    /// (which is its process group's and session's id).
    /// Finishes an `on` whose caller died after it mounted simfs and recorded the
    /// boot id: adopts the boot command when it did start (a process carrying the
    /// boot id in its environment), starts it when it did not; with the mount gone,
    /// records the machine off and boots it afresh.
    fn finish_on(&self, mut st: State) -> Result<(), Error> {
        let mounted = st.simfs_pid.is_some_and(proc::alive) && is_mountpoint(&self.mnt);
        let Some(id) = st.boot_id.clone().filter(|_| mounted) else {
            force_down(&self.spec.simfs, &self.mnt, None, st.simfs_pid);
            st.on = false;
            st.simfs_pid = None;
            machine::save_state(&self.dir, &st)?;
            return Err(Error::Msg(format!(
                "simfs: an earlier `on` of {} did not finish and its mount is gone: the machine is off now; turn it on again",
                self.mnt.display()
            )));
        };
        let mark = marker(&st).unwrap_or_default();
        let started = proc::all_pids().into_iter().find(|&p| {
            proc::has_env(p, &mark) && proc::stat3(p).is_some_and(|(s, _, g)| g == p && s != 'Z')
        });
        let pid = match started {
            // The boot command is its session's leader: its group is its pid.
            Some(p) => p,
            None => self.spawn_boot(st.boots, &id)?,
        };
        st.boot_pgid = Some(pid);
        machine::save_state(&self.dir, &st)
    }

    fn spawn_boot(&self, boot: u32, id: &str) -> Result<u32, Error> {
        use std::os::unix::process::CommandExt;
        let path = machine::boot_log(&self.dir, boot);
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| Error::Msg(format!("simfs: {}: {e}", path.display())))
        };
        let (out, err) = (open()?, open()?);
        let mut cmd = proc::session_command(&self.spec.boot[0]);
        cmd.args(&self.spec.boot[1..])
            .arg("--simulated-boot-id")
            .arg(id)
            .env("PLUGPULL_SIMULATED_BOOT_ID", id)
            .current_dir(&self.dir)
            .stdout(out)
            .stderr(err);
        // SAFETY: the closure runs between fork and exec; prctl(2) allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
                Ok(())
            })
        };
        let child = cmd.spawn().map_err(|e| {
            Error::Msg(format!(
                "simfs: cannot start the boot command {} (from {}): {e}",
                self.spec.boot[0],
                self.dir.join("machine.json").display()
            ))
        })?;
        Ok(child.id())
    }

    /// Cuts the running simfs (`plugpull-simfs cut`): the ground truth of boot
    /// `st.boots` is written when this returns `Ok`.
    fn cut(&self, st: &State) -> Result<(), Error> {
        let truth = machine::truth_path(&self.dir, st.boots);
        if !st.simfs_pid.is_some_and(proc::alive) {
            return Err(Error::Msg(format!(
                "simfs: off: the simfs mount process is gone, so no cut was made and {} \
                 was not written; the machine is off now",
                truth.display()
            )));
        }
        cut_at(&self.spec.simfs, &self.mnt).map_err(|e| {
            Error::Msg(format!(
                "simfs: off: {e}, so {} may be missing; the machine is off now",
                truth.display()
            ))
        })
    }

    /// Unmounts ([`unmount_or_force`]). `Err` only when the mountpoint stays mounted.
    fn unmount(&self, st: &State) -> Result<(), Error> {
        unmount_or_force("simfs", &self.spec.simfs, &self.mnt, st.simfs_pid)
    }
}

impl Driver for Sim {
    fn on(&self) -> Result<(), Error> {
        let _lock = Lock::take(&self.dir)?;
        let mut st = machine::state(&self.dir)?;
        if st.on && st.boot_pgid.is_none() {
            // An `on` cut short (its caller was killed) after the mount: finish it.
            return self.finish_on(st);
        }
        if !st.on && is_mountpoint(&self.mnt) && st.simfs_pid.is_none() {
            // An `on` cut short before it recorded its mount: take that mount down.
            force_down(&self.spec.simfs, &self.mnt, None, None);
        }
        if st.on {
            return self.check_on(&st).map_err(|e| {
                Error::Msg(format!(
                    "{}\nturn it off first: plugpull power --power simfs://{} off",
                    e,
                    self.mnt.display()
                ))
            });
        }
        if is_mountpoint(&self.mnt) {
            return Err(Error::Msg(format!(
                "simfs: {} is mounted, but {} says the machine is off: unmount it first \
                 (plugpull-simfs umount --mountpoint {})",
                self.mnt.display(),
                self.dir.join("machine-state.json").display(),
                self.mnt.display()
            )));
        }
        let boot = st.boots + 1;
        let truth = machine::truth_path(&self.dir, boot);
        let (child, _stdout) = MountCmd {
            bin: &self.spec.simfs,
            backing: &self.dir.join("backing"),
            mnt: &self.mnt,
            mode: &self.spec.mode,
            seed: self.spec.seed.wrapping_add(u64::from(boot)),
            truth: Some(&truth),
            extra: &self.spec.simfs_args,
            log: &self.dir.join("simfs.log"),
        }
        .start(proc::session_command(&self.spec.simfs))
        .map_err(|e| Error::Msg(format!("simfs: {}", e)))?;
        let id = machine::new_boot_id();
        st = State {
            on: true,
            boots: boot,
            boot_id: Some(id.clone()),
            boot_pgid: None,
            simfs_pid: Some(child.id()),
        };
        let booted = machine::save_state(&self.dir, &st).and_then(|()| self.spawn_boot(boot, &id));
        match booted {
            Ok(pid) => {
                st.boot_pgid = Some(pid);
                machine::save_state(&self.dir, &st)
            }
            Err(e) => {
                force_down(&self.spec.simfs, &self.mnt, Some(child), None);
                st.on = false;
                st.simfs_pid = None;
                st.boot_id = None;
                machine::save_state(&self.dir, &st)?;
                Err(e)
            }
        }
    }

    fn off(&self) -> Result<(), Error> {
        let _lock = Lock::take(&self.dir)?;
        let mut st = machine::state(&self.dir)?;
        if !st.on {
            return Ok(());
        }
        let mark = marker(&st);
        let frozen = st
            .boot_pgid
            .map(|g| proc::freeze_group(g, mark.as_deref()))
            .unwrap_or_default();
        let cut = self.cut(&st);
        let killed = proc::kill_group(st.boot_pgid, mark.as_deref(), &frozen, KILL_LIMIT);
        let down = self.unmount(&st);
        let group = st.boot_pgid.unwrap_or(0);
        st.on = false;
        st.boot_pgid = None;
        st.simfs_pid = None;
        machine::save_state(&self.dir, &st)?;
        if let Err(left) = killed {
            return Err(Error::Msg(format!(
                "simfs: off: processes {left:?} of boot group {group} still run {} s after \
                 SIGKILL (stuck in the kernel?)",
                KILL_LIMIT.as_secs()
            )));
        }
        cut.and(down)
    }

    fn status(&self) -> Result<Status, Error> {
        // After an `on` or `off` under way, not in its middle.
        let _lock = Lock::take(&self.dir)?;
        let st = machine::state(&self.dir)?;
        if st.on {
            self.check_on(&st)?;
        }
        Ok(Status {
            state: if st.on {
                PowerState::On
            } else {
                PowerState::Off
            },
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        CutKind::Simulated
    }
}

/// What every process of the current boot carries in its environment
/// (`PLUGPULL_SIMULATED_BOOT_ID=ID`): only processes with it (and their children)
/// are the machine's, whatever process ids the system reused since the boot.
/// `None` only for a state without a boot id, whose group is then taken whole.
fn marker(st: &machine::State) -> Option<String> {
    st.boot_id
        .as_ref()
        .map(|id| format!("{}={id}", crate::target_id::SIMULATED_BOOT_ID_ENV))
}
