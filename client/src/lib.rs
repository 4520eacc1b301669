//! The library behind the `plugpull` command: the agent's workloads and reporter,
//! the verifier, the demo. The binary (`main.rs`) only parses the command line.
//! Exit codes everywhere: 0 = nothing acknowledged was lost or damaged (or the job
//! succeeded), 1 = findings, 2 = could not do the job (a [`Error`]).

pub mod agent;
pub mod blockdev;
pub mod campaign;
pub mod demo;
pub mod file;
pub mod files;
pub mod history;
pub mod interrupt;
pub mod latency;
pub mod ledger;
pub mod manifest;
pub mod net;
pub mod pg;
pub mod pgbench;
pub mod power;
pub mod probe;
pub mod progress;
pub mod report;
pub mod reporter;
pub mod rig;
pub mod run;
pub mod storage;
pub mod target_id;
pub mod verify;

/// "Could not do the job": bad arguments, unreachable listener, damaged ledger,
/// unreadable target. Exit code 2. Findings are never an `Error`; "failure" means acknowledged data lost.
#[derive(Debug)]
pub struct Error(pub String);

impl From<String> for Error {
    fn from(s: String) -> Self {
        Error(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Self {
        Error(s.to_string())
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
