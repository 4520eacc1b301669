//! Placeholder for the pgbench workload while it is being built.
use crate::Failure;
use plugpull::auth::Secret;
use plugpull::ledger::{AckBatch, Manifest, PgManifest};
use plugpull::RunId;

/// Options of `plugpull write pgbench`.
#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {}

/// Connection options of `plugpull verify` for pgbench runs.
#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {}

/// The pgbench report.
#[derive(serde::Serialize)]
pub struct PgReport {
    /// Nothing lost.
    pub ok: bool,
}

impl PgReport {
    /// Prints the report.
    pub fn print_human(&self) {}
}

/// Runs the workload.
pub async fn write(_: &WriteArgs, _: &str, _: &Secret) -> Result<(), Failure> {
    Err("the pgbench workload is not built yet".into())
}

/// Verifies a run.
pub async fn verify(
    _: RunId,
    _: &Manifest,
    _: &PgManifest,
    _: &[AckBatch],
    _: bool,
    _: &VerifyArgs,
) -> Result<PgReport, Failure> {
    Err("the pgbench workload is not built yet".into())
}
