//! The library behind the `plugpull` command: the agent's workloads and reporter,
//! the verifier, the demo. The binary (`main.rs`) only parses the command line.
//! Exit codes everywhere: 0 = nothing acknowledged was lost or damaged (or the job
//! succeeded), 1 = findings, 2 = could not do the job (a [`Error`]).

pub mod agent;
pub mod blockdev;
pub mod campaign;
pub mod canary;
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
pub mod slow;
pub mod storage;
pub mod target_id;
pub mod verify;

/// "Could not do the job": bad arguments, unreachable listener, damaged ledger,
/// unreadable target. Exit code 2 (`main.rs` maps every variant to it). Findings are
/// never an `Error`; "failure" means acknowledged data lost. Callers that must tell
/// one cause from another match a variant, never the message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener could not be reached: the connection was refused, failed or timed
    /// out before anything was sent (so a retry never sends a request twice).
    #[error("cannot reach listener at {addr}: {reason}")]
    Unreachable {
        /// The address tried (`HOST:PORT`).
        addr: String,
        /// Why, in words (the OS error, or `timed out after N s`).
        reason: String,
    },
    /// The run was judged and its report printed, but it measured nothing (exit 2
    /// with the report's summary as the cause).
    #[error("{0}")]
    NotMeasured(String),
    /// A ledger the listener sent cannot be judged.
    #[error(transparent)]
    Ledger(#[from] plugpull::ledger::RunLedgerError),
    /// A run a device error ended cannot be judged.
    #[error(transparent)]
    DeviceError(#[from] plugpull::verdict::DeviceErrorRefusal),
    /// A tool or peer gave no answer within its limit.
    #[error("{what}: no answer within {seconds} s")]
    TimedOut {
        /// What was waited for (a command, a device).
        what: String,
        /// The limit, in seconds.
        seconds: f64,
    },
    /// The user interrupted the wait (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// The witness said something that cannot be true (a forged or altered message,
    /// a confirmation of what was never sent or below one already given): nothing it
    /// says can be trusted. The message starts with `witness fault`.
    #[error("{0}")]
    WitnessFault(String),
    /// The witness could not record acknowledgements (its disk failed): the run
    /// stops, and the ledger cannot be asked to record more.
    #[error("the witness could not record acknowledgements: {0}")]
    WitnessUnrecorded(String),
    /// PostgreSQL said a query of verify met damage (SQLSTATE `XX001` data corrupted,
    /// `XX002` index corrupted, or `XX000` naming a catalog): the pgbench verifier
    /// turns it into a finding, never an exit 2.
    #[error("{what}: {message}")]
    DatabaseDamaged {
        /// What verify was doing (`cannot count the run's commits`).
        what: String,
        /// The server's message, with its SQLSTATE.
        message: String,
    },
    /// Any other cause, in words that name it.
    #[error("{0}")]
    Msg(String),
}

impl From<String> for Error {
    fn from(s: String) -> Self {
        Error::Msg(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Self {
        Error::Msg(s.to_string())
    }
}
