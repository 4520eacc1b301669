//! `qemu://DIR`: a QEMU virtual machine's power driver (kind `vm`). The machine
//! lives in `DIR` (files in `crate::rig::vm::machine`): `DIR/vm.json` records QEMU's
//! command line and, when the disk image sits on simfs, that mount; `DIR/vm-state.json`
//! says whether it is on, so one process may turn it on and another one off.
//!
//! * `on` (nothing when on): with a simfs disk, boot N = boots + 1 mounts simfs over
//!   `DIR/backing` at `DIR/disk` (seed `seed + N`, ground truth `DIR/truth-N.jsonl`)
//!   and waits for it (30 s); then QEMU starts with the recorded command line, in a
//!   session of its own (it outlives the caller), its output appended to
//!   `DIR/qemu.log`, and `on` returns once QEMU answers on its QMP socket (30 s).
//!   A simfs mount left by a guest that powered itself off is unmounted cleanly
//!   (its cache destaged) before the new mount.
//! * `off` (nothing when off): a power cut. QEMU is SIGKILLed (the guest's memory,
//!   page cache and unwritten journal are gone) and waited for (10 s); then, with a
//!   simfs disk, at once, `plugpull-simfs cut` (what simfs still cached is lost, the
//!   ground truth is written: simfs would go on destaging after the kill) and the
//!   mount is taken down, so the backing image holds exactly what survived. When
//!   QEMU had already exited (the guest powered itself off: a clean shutdown) there
//!   is nothing to cut: the simfs mount is unmounted cleanly (its cache destaged).
//! * `off` with `?cut=reset` (kind `reset`): not a power cut. QMP `system_reset`
//!   (QMP reference, "system_reset": a hard reset of the guest); QEMU runs with
//!   `-no-reboot` (`-action reboot=shutdown`), so the reset is a shutdown (event
//!   `SHUTDOWN`, reason `host-qmp-system-reset`): the guest's memory is gone, and
//!   QEMU flushes the image as it exits (10 s, else SIGKILL and an error). The disk
//!   kept power: a simfs mount is unmounted cleanly (its cache destaged, no ground
//!   truth written). The machine stays held in reset (off) until `on`.
//! * `status`: QMP `query-status` while QEMU runs (`running` is on; any other
//!   run state is reported as the unknown answer); off when QEMU is gone (cut, or
//!   the guest powered itself off).

use super::{Driver, Status};
use crate::rig::machine::{truth_path, Lock};
use crate::rig::proc;
use crate::rig::simfs::{cut_at, force_down, is_mountpoint, tail, unmount_or_force, MountCmd};
use crate::rig::vm::machine::{self, VmSpec, VmState};
use crate::rig::vm::qemu::{qmp, QEMU};
use crate::Error;
use plugpull::power::{CutKind, PowerState};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long QEMU may take to die after SIGKILL.
const KILL_LIMIT: Duration = Duration::from_secs(10);
/// How long a started QEMU may take to answer on its QMP socket.
const QMP_LIMIT: Duration = Duration::from_secs(30);

/// The `qemu://` driver.
pub struct Qemu {
    dir: PathBuf,
    spec: VmSpec,
    /// `?cut=reset`: `off` resets the guest instead of killing QEMU.
    reset: bool,
}

impl Qemu {
    /// The machine in `dir`, cut by a reset when `reset` (`?cut=reset`). Errors: no
    /// `DIR/vm.json`, or a bad one.
    pub fn new(dir: &Path, reset: bool) -> Result<Qemu, Error> {
        let dir = std::path::absolute(dir)
            .map_err(|e| Error::Msg(format!("qemu: {}: {e}", dir.display())))?;
        let spec = machine::spec(&dir).map_err(|e| Error::Msg(format!("qemu: {e}")))?;
        Ok(Qemu { dir, spec, reset })
    }

    fn disk(&self) -> PathBuf {
        self.dir.join("disk")
    }

    /// QEMU's process id when `pid` is this machine's QEMU (alive, and its command
    /// line names this machine's QMP socket: a reused pid is never touched).
    fn ours(&self, pid: Option<u32>) -> Option<u32> {
        let sock = self.dir.join("qmp.sock").display().to_string();
        pid.filter(|&p| {
            proc::alive(p)
                && std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&sock))
        })
    }

    /// Whether this machine's QEMU `pid` is gone within 3 s (a guest that powered
    /// itself off leaves a QEMU that is exiting).
    fn exits_soon(&self, pid: Option<u32>) -> bool {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while self.ours(pid).is_some() {
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        true
    }

    /// Resets the guest of the QEMU `pid` (QMP `system_reset`, a shutdown under
    /// `-no-reboot`) and waits up to [`KILL_LIMIT`] for QEMU to exit, flushing the
    /// image. Errors: QEMU still ran then (it is SIGKILLed: a power cut instead).
    fn reset(&self, pid: u32) -> Result<(), Error> {
        // QEMU may close the socket as it exits, before its answer: its exit is the
        // answer that counts.
        let asked = qmp(&self.dir.join("qmp.sock"), "system_reset");
        let end = Instant::now() + KILL_LIMIT;
        while self.ours(Some(pid)).is_some() && Instant::now() < end {
            proc::sleep(Duration::from_millis(50))?;
        }
        proc::reap(pid);
        if self.ours(Some(pid)).is_none() {
            return Ok(());
        }
        let _ = proc::kill_group(None, None, &[pid], KILL_LIMIT);
        proc::reap(pid);
        Err(Error::Msg(format!(
            "qemu: off (reset): QEMU was still running {} s after QMP system_reset ({}): SIGKILLed, so this was a power cut of the guest, not a reset",
            KILL_LIMIT.as_secs(),
            asked.map_or_else(|e| e.to_string(), |_| "answered".into())
        )))
    }

    /// Mounts the simfs disk for boot `boot`; its process id.
    fn mount(&self, boot: u32) -> Result<Option<u32>, Error> {
        let Some(sd) = &self.spec.simfs else {
            return Ok(None);
        };
        let mnt = self.disk();
        if is_mountpoint(&mnt) {
            force_down(&sd.bin, &mnt, None, None);
        }
        let truth = truth_path(&self.dir, boot);
        let (child, _stdout) = MountCmd {
            bin: &sd.bin,
            backing: &self.dir.join("backing"),
            mnt: &mnt,
            mode: &sd.mode,
            seed: sd.seed.wrapping_add(u64::from(boot)),
            truth: Some(&truth),
            extra: &sd.args,
            log: &self.dir.join("simfs.log"),
        }
        .start(proc::session_command(&sd.bin))
        .map_err(|e| Error::Msg(format!("qemu: the disk's simfs: {e}")))?;
        Ok(Some(child.id()))
    }

    fn start_qemu(&self) -> Result<u32, Error> {
        let path = self.dir.join("qemu.log");
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| Error::Msg(format!("qemu: {}: {e}", path.display())))
        };
        let _ = std::fs::remove_file(self.dir.join("qmp.sock"));
        let mut cmd = proc::session_command(QEMU);
        cmd.args(&self.spec.qemu)
            .current_dir(&self.dir)
            .stdout(open()?)
            .stderr(open()?);
        let child = cmd
            .spawn()
            .map_err(|e| Error::Msg(format!("qemu: cannot start {QEMU}: {e}")))?;
        Ok(child.id())
    }

    /// Waits up to [`QMP_LIMIT`] for the QEMU `pid` to answer `query-status` on its
    /// QMP socket. Errors: QEMU exited or stayed silent, with `qemu.log`'s tail.
    fn wait_qmp(&self, pid: u32) -> Result<(), Error> {
        let (sock, log) = (self.dir.join("qmp.sock"), self.dir.join("qemu.log"));
        let end = Instant::now() + QMP_LIMIT;
        loop {
            let why = match qmp(&sock, "query-status") {
                Ok(_) => return Ok(()),
                Err(_) if !proc::alive(pid) => "exited at once".to_string(),
                Err(e) if Instant::now() >= end => format!(
                    "gave no answer on its QMP socket within {} s ({e})",
                    QMP_LIMIT.as_secs()
                ),
                Err(_) => {
                    proc::sleep(Duration::from_millis(50))?;
                    continue;
                }
            };
            return Err(Error::Msg(format!(
                "qemu: on: QEMU {why}; {} ends:\n{}",
                log.display(),
                tail(&log, 10)
            )));
        }
    }
}

impl Driver for Qemu {
    fn on(&self) -> Result<(), Error> {
        let _lock = Lock::take(&self.dir)?;
        let mut st = machine::state(&self.dir)?;
        if st.on && self.ours(st.qemu_pid).is_some() {
            return Ok(());
        }
        // The guest powered itself off (QEMU exited): its disk is unmounted cleanly
        // before the next boot mounts it afresh.
        if let Some(sd) = &self.spec.simfs {
            unmount_or_force("qemu", &sd.bin, &self.disk(), st.simfs_pid)?;
        }
        let boot = st.boots + 1;
        st = VmState {
            on: true,
            boots: boot,
            qemu_pid: None,
            simfs_pid: self.mount(boot)?,
        };
        machine::save_state(&self.dir, &st)?;
        let pid = self.start_qemu()?;
        st.qemu_pid = Some(pid);
        machine::save_state(&self.dir, &st)?;
        self.wait_qmp(pid)
    }

    fn off(&self) -> Result<(), Error> {
        let _lock = Lock::take(&self.dir)?;
        let mut st = machine::state(&self.dir)?;
        if !st.on {
            return Ok(());
        }
        let running = self.ours(st.qemu_pid);
        let killed = match running {
            Some(pid) if self.reset => {
                // The disk keeps power: no simfs cut below, a clean unmount.
                let r = self.reset(pid);
                if let Some(sd) = &self.spec.simfs {
                    let down = unmount_or_force("qemu", &sd.bin, &self.disk(), st.simfs_pid);
                    (st.on, st.qemu_pid, st.simfs_pid) = (false, None, None);
                    machine::save_state(&self.dir, &st)?;
                    return r.and(down);
                }
                (st.on, st.qemu_pid) = (false, None);
                machine::save_state(&self.dir, &st)?;
                return r;
            }
            Some(pid) => {
                let k = proc::kill_group(None, None, &[pid], KILL_LIMIT);
                // A caller that turned the machine on is QEMU's parent.
                proc::reap(pid);
                k
            }
            None => Ok(()),
        };
        let mut cut = Ok(());
        if let Some(sd) = &self.spec.simfs.as_ref().filter(|_| running.is_some()) {
            let truth = truth_path(&self.dir, st.boots);
            cut = cut_at(&sd.bin, &self.disk()).map_err(|e| {
                Error::Msg(format!(
                    "qemu: off: {e}, so {} may be missing; the machine is off now",
                    truth.display()
                ))
            });
        }
        if let Some(sd) = &self.spec.simfs {
            let down = unmount_or_force("qemu", &sd.bin, &self.disk(), st.simfs_pid);
            cut = cut.and(down);
        }
        st.on = false;
        st.qemu_pid = None;
        st.simfs_pid = None;
        machine::save_state(&self.dir, &st)?;
        if let Err(left) = killed {
            return Err(Error::Msg(format!(
                "qemu: off: QEMU {left:?} still runs {} s after SIGKILL",
                KILL_LIMIT.as_secs()
            )));
        }
        cut
    }

    fn status(&self) -> Result<Status, Error> {
        let _lock = Lock::take(&self.dir)?;
        let st = machine::state(&self.dir)?;
        let state = match self.ours(st.qemu_pid).filter(|_| st.on) {
            None => PowerState::Off,
            Some(_) => {
                let sock = self.dir.join("qmp.sock");
                match qmp(&sock, "query-status") {
                    Ok(v) => match v["status"].as_str() {
                        Some("running") => PowerState::On,
                        other => PowerState::Unknown(other.unwrap_or("?").to_string()),
                    },
                    // A guest that powered itself off: QEMU removes its socket, then
                    // exits; give it the moment that takes.
                    Err(_) if self.exits_soon(st.qemu_pid) => PowerState::Off,
                    Err(e) => {
                        return Err(Error::Msg(format!(
                            "qemu: QEMU runs but does not answer on {}: {e}; {} ends:\n{}",
                            sock.display(),
                            self.dir.join("qemu.log").display(),
                            tail(&self.dir.join("qemu.log"), 10)
                        )))
                    }
                }
            }
        };
        Ok(Status {
            state,
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        if self.reset {
            CutKind::Reset
        } else {
            CutKind::Vm
        }
    }
}
