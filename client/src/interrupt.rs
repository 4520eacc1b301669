//! The writer's stop signal: SIGINT and SIGTERM alike.

/// Completes at the next SIGINT (Ctrl-C) or SIGTERM (`kill`, `systemctl stop`): a
/// writer treats both alike, stopping its workers and finishing the run properly.
///
/// Errors: the signal handlers cannot be installed.
pub async fn interrupted() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
