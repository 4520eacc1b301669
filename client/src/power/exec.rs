//! `exec:CMD`: any command (USB relays, fence agents, in-house rigs). CMD runs with
//! `sh -c`, every `{action}` replaced by `off`, `on` or `status`; a non-zero exit is
//! an error naming the command; `status` reads `on` or `off` from its stdout.

use super::{Driver, Status};
use crate::Error;
use plugpull::power::{text_state, CutKind};
use std::process::Command;

/// The `exec:` driver.
pub struct Exec {
    command: String,
}

impl Exec {
    /// A driver running `command` (with `{action}` still in it).
    pub fn new(command: &str) -> Exec {
        Exec {
            command: command.to_string(),
        }
    }

    /// Runs the command for `action`; its stdout on success.
    fn run(&self, action: &str) -> Result<String, Error> {
        let cmd = self.command.replace("{action}", action);
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .map_err(|e| Error(format!("exec: cannot run `{cmd}`: {e}")))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let code = match out.status.code() {
                Some(c) => format!("exit status {c}"),
                None => "a signal".to_string(),
            };
            return Err(Error(format!(
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
        CutKind::Ac
    }
}
