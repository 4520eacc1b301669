//! The library behind the `plugpull` command: the agent's workloads and reporter,
//! the verifier, the demo. The binary (`main.rs`) only parses the command line.
//! Exit codes everywhere: 0 = nothing acknowledged was lost or damaged (or the job
//! succeeded), 1 = findings, 2 = could not do the job (a [`Failure`]).

pub mod common;
pub mod demo;
pub mod file;
pub mod guard;
pub mod medium;
pub mod net;
pub mod pgbench;
pub mod reporter;
pub mod target_id;
pub mod verify;

/// "Could not do the job": bad arguments, unreachable listener, damaged ledger,
/// unreadable target. Exit code 2. Findings are never a `Failure`.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Self {
        Failure(s.to_string())
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
