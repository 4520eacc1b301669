//! `exec:CMD` (or `exec+dc:`, `exec+device:` declaring what it cuts): any command (USB relays, fence agents, in-house rigs). CMD runs with
//! `sh -c`, every `{action}` replaced by `off`, `on` or `status`; a non-zero exit is
//! an error naming the command; `status` reads `on` or `off` (or a fence agent's
//! `Status: ON`) from its stdout. The command runs in a process group of its own,
//! killed whole after [`EXEC_LIMIT`](super::EXEC_LIMIT) (60 s).

use super::{limit, run_tool, Driver, Status, EXEC_LIMIT};
use crate::Error;
use plugpull::power::{text_state, CutKind};
use std::process::Command;

/// The `exec:` driver.
pub struct Exec {
    command: String,
    kind: CutKind,
}

impl Exec {
    /// A driver running `command` (with `{action}` still in it) that cuts `kind`.
    pub fn new(command: &str, kind: CutKind) -> Exec {
        Exec {
            command: command.to_string(),
            kind,
        }
    }

    /// Runs the command for `action`; its stdout on success.
    fn run(&self, action: &str) -> Result<String, Error> {
        let cmd = self.command.replace("{action}", action);
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(&cmd);
        let out = run_tool(sh, &format!("exec: `{cmd}`"), limit(EXEC_LIMIT))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let code = match out.status.code() {
                Some(c) => format!("exit status {c}"),
                None => "a signal".to_string(),
            };
            return Err(Error::Msg(format!(
                "exec: `{cmd}` failed with {code}{}{}",
                if err.trim().is_empty() { "" } else { ": " },
                err.trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Driver for Exec {
    fn off(&self) -> Result<(), Error> {
        self.run("off").map(drop)
    }

    fn on(&self) -> Result<(), Error> {
        self.run("on").map(drop)
    }

    fn status(&self) -> Result<Status, Error> {
        Ok(Status {
            state: text_state(&self.run("status")?),
            load_w: None,
        })
    }

    fn kind(&self) -> CutKind {
        self.kind
    }
}
