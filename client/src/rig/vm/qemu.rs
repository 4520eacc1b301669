//! One QEMU guest: its command line, the process, its serial console (a file) and
//! its QMP socket.
//!
//! The guest boots the bundle's kernel and initramfs ([`super::bundle`]) with one
//! virtio disk (a raw image) and user-mode networking, in which the host's loopback
//! is 10.0.2.2. Acceleration: KVM only where the host's `kvm_intel` or `kvm_amd`
//! module is loaded (a nested paravirtual `/dev/kvm` hangs a stock kernel in its
//! decompressor), TCG everywhere else.

use crate::rig::proc;
use crate::Error;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The QEMU binary.
pub const QEMU: &str = "qemu-system-x86_64";

/// How long one QMP exchange may take.
const QMP_LIMIT: Duration = Duration::from_secs(10);

/// `kvm` where a hardware KVM module is loaded and `/dev/kvm` exists, else `tcg`.
pub fn accel() -> &'static str {
    let hw = ["/sys/module/kvm_intel", "/sys/module/kvm_amd"]
        .iter()
        .any(|m| Path::new(m).exists());
    if hw && Path::new("/dev/kvm").exists() {
        "kvm"
    } else {
        "tcg"
    }
}

/// What a guest is made of.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The kernel image.
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// The raw disk image (the guest's `/dev/vda`).
    pub image: PathBuf,
    /// QEMU's cache mode for the disk: `writeback`, `none`, `unsafe`, `writethrough`.
    pub cache: String,
    /// The guest's settings on the kernel command line (`plugpull.args=…`, init.sh).
    pub settings: Vec<String>,
    /// Guest memory in MiB.
    pub mem_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
}

impl Spec {
    /// QEMU's arguments (without the binary) for this guest, its QMP socket at `qmp`
    /// and its serial console written to `console`.
    pub fn args(&self, qmp: &Path, console: &Path) -> Vec<String> {
        let append = ["console=ttyS0", "panic=-1", "loglevel=4"]
            .iter()
            .map(|s| s.to_string())
            .chain(self.settings.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        let s = |p: &Path| p.display().to_string();
        [
            "-machine",
            "q35",
            "-accel",
            accel(),
            "-m",
            &self.mem_mib.to_string(),
            "-smp",
            &self.cpus.to_string(),
            "-kernel",
            &s(&self.kernel),
            "-initrd",
            &s(&self.initrd),
            "-append",
            &append,
            "-drive",
            &format!(
                "file={},format=raw,if=virtio,cache={}",
                s(&self.image),
                self.cache
            ),
            "-netdev",
            "user,id=n0",
            "-device",
            "virtio-net-pci,netdev=n0",
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            &format!("file:{}", s(console)),
            "-qmp",
            &format!("unix:{},server=on,wait=off", s(qmp)),
            "-no-reboot",
        ]
        .map(String::from)
        .to_vec()
    }
}

/// A running guest; SIGKILLed (the power cut) and reaped on drop.
pub struct Vm {
    child: Option<Child>,
    /// Its QMP socket.
    pub qmp: PathBuf,
    /// Its serial console, as written so far.
    pub console: PathBuf,
    /// When QEMU was started.
    pub started: Instant,
}

impl Vm {
    /// Starts QEMU for `spec` with its files in `dir` (`qmp.sock`, `console.log`,
    /// `qemu.log`: QEMU's own output). Errors: QEMU cannot be started.
    pub fn start(spec: &Spec, dir: &Path) -> Result<Vm, Error> {
        let (qmp, console) = (dir.join("qmp.sock"), dir.join("console.log"));
        let _ = std::fs::remove_file(&qmp);
        let log = std::fs::File::create(dir.join("qemu.log"))
            .map_err(|e| Error::Msg(format!("cannot create {}: {e}", dir.display())))?;
        let err = log
            .try_clone()
            .map_err(|e| Error::Msg(format!("qemu.log: {e}")))?;
        let mut cmd = proc::command(QEMU);
        cmd.args(spec.args(&qmp, &console))
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        let child = cmd.spawn().map_err(|e| {
            Error::Msg(format!(
                "cannot start {QEMU}: {e} (Debian: apt-get install qemu-system-x86)"
            ))
        })?;
        Ok(Vm {
            child: Some(child),
            qmp,
            console,
            started: Instant::now(),
        })
    }

    /// QEMU's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The console text so far.
    pub fn console_text(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }

    /// Waits until a console line contains `needle` and returns that line. `Err`
    /// (with the console's tail) when QEMU exits first or `limit` runs out.
    pub fn wait_console(&mut self, needle: &str, limit: Duration) -> Result<String, Error> {
        let end = Instant::now() + limit;
        loop {
            let text = self.console_text();
            if let Some(l) = text.lines().find(|l| l.contains(needle)) {
                return Ok(l.trim_end_matches('\r').to_string());
            }
            let exited = match self.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(st))) => Some(st.to_string()),
                None => Some("not running".into()),
                _ => None,
            };
            if exited.is_some() || Instant::now() >= end {
                let why = exited.map_or_else(
                    || format!("not within {} s", limit.as_secs()),
                    |st| format!("QEMU exited ({st})"),
                );
                return Err(Error::Msg(format!(
                    "the guest did not print {needle:?}: {why}; its console ends:\n{}",
                    tail(&text, 15)
                )));
            }
            proc::sleep(Duration::from_millis(100))?;
        }
    }

    /// The power cut: SIGKILL QEMU and reap it (the guest's memory is gone; what
    /// QEMU had written to the image is in the host's page cache).
    pub fn kill(&mut self) {
        proc::Guard(self.child.take()).kill();
    }

    /// Waits up to `limit` for QEMU to exit by itself (the guest powered off).
    /// Errors: it still runs then (it is left running).
    pub fn wait_exit(&mut self, limit: Duration) -> Result<ExitStatus, Error> {
        let end = Instant::now() + limit;
        loop {
            let Some(c) = self.child.as_mut() else {
                return Err(Error::Msg("QEMU is not running".into()));
            };
            if let Ok(Some(st)) = c.try_wait() {
                self.child = None;
                return Ok(st);
            }
            if Instant::now() >= end {
                return Err(Error::Msg(format!(
                    "the guest did not power off within {} s; its console ends:\n{}",
                    limit.as_secs(),
                    tail(&self.console_text(), 15)
                )));
            }
            proc::sleep(Duration::from_millis(100))?;
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends one QMP command (`{"execute": …}`) to the socket `sock` after the
/// capabilities handshake; its `return` value. Errors: no connection, no answer
/// within 10 s, or QMP's `error`, named.
pub fn qmp(sock: &Path, command: &str) -> Result<serde_json::Value, Error> {
    let err = |e: std::io::Error| Error::Msg(format!("QMP {}: {e}", sock.display()));
    let s = UnixStream::connect(sock).map_err(err)?;
    s.set_read_timeout(Some(QMP_LIMIT)).map_err(err)?;
    let mut w = s.try_clone().map_err(err)?;
    let mut r = BufReader::new(s);
    let mut answer = || -> Result<serde_json::Value, Error> {
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).map_err(err)? == 0 {
                return Err(Error::Msg(format!("QMP {}: closed", sock.display())));
            }
            let v: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| Error::Msg(format!("QMP {}: {e}: {line}", sock.display())))?;
            // Events and the greeting are not answers.
            if v.get("return").is_some() || v.get("error").is_some() {
                return Ok(v);
            }
        }
    };
    let mut ask = |cmd: &str| -> Result<serde_json::Value, Error> {
        writeln!(w, "{{\"execute\":\"{cmd}\"}}").map_err(err)?;
        let v = answer()?;
        match v.get("error") {
            Some(e) => Err(Error::Msg(format!("QMP {cmd}: {e}"))),
            None => Ok(v["return"].clone()),
        }
    };
    ask("qmp_capabilities")?;
    ask(command)
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
