//! The PostgreSQL part of a probe (`plugpull probe --dsn`): the server's settings
//! that decide whether a `COMMIT` is durable, the data directory's own stack, and
//! whether the backend serving the probe's session has `libeatmydata` mapped. Pure
//! data and rules; the collector (connect, `pg_settings`, `/proc/PID/…`) is
//! `plugpull_client::probe::pg`.
//!
//! Where the data directory's stack goes: when the probe has no `--target`, the data
//! directory *is* the probed target ([`Probe::target`], its layers and leaves) and
//! [`PgProbe::data_directory_stack`] is `None`; with `--target` as well, the data
//! directory's stack is a whole nested [`Probe`] in `data_directory_stack`.

use super::{Probe, Warning, WarningId};
use serde::{Deserialize, Serialize};

/// The PostgreSQL settings a pgbench run records, as `pg_settings` shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct PgSettings {
    /// `server_version`.
    pub server_version: String,
    /// `fsync`.
    pub fsync: String,
    /// `synchronous_commit` as the agent's session sees it (role and database settings apply).
    pub synchronous_commit: String,
    /// `full_page_writes`.
    pub full_page_writes: String,
    /// `wal_sync_method`.
    pub wal_sync_method: String,
    /// `data_checksums`.
    pub data_checksums: String,
    /// `data_directory` (`(hidden)` without `pg_read_all_settings`).
    pub data_directory: String,
    /// `wal_log_hints` (hint-bit changes WAL-logged: torn pages are repaired by
    /// full-page images also when checksums are off).
    pub wal_log_hints: String,
    /// `data_sync_retry` (`on`: a failed fsync is retried instead of a PANIC, which
    /// can lose data the kernel dropped; PostgreSQL 12+, 11.2+).
    pub data_sync_retry: String,
    /// `commit_delay`, µs.
    pub commit_delay: String,
    /// `synchronous_standby_names` (empty: no synchronous standby).
    pub synchronous_standby_names: String,
}

/// What `probe --dsn` found about the server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PgProbe {
    /// The connection settings without the password, e.g.
    /// `host=/tmp port=5432 user=bench dbname=bench`.
    pub conninfo: String,
    /// The settings from `pg_settings` as the probe's session sees them.
    pub settings: PgSettings,
    /// The data directory's stack when the probe's target is something else
    /// (`--target` and `--dsn` both given); `None` when the data directory is the
    /// probe's own target, or when it could not be probed from this host (a note
    /// says why).
    #[serde(default)]
    pub data_directory_stack: Option<Box<Probe>>,
    /// `pg_backend_pid()`: the server process serving the probe's session, as the
    /// server's PID namespace numbers it.
    pub backend_pid: Option<i32>,
    /// Whether `libeatmydata` is mapped in that backend (`/proc/PID/maps`); `None`
    /// when not checked: the server is not on this host, or its maps are not
    /// readable (a note says why).
    pub backend_eatmydata: Option<bool>,
    /// Whether the server runs on this host: `Some(true)` its backend is a postgres
    /// process here working in the data directory, `Some(false)` it is not (the
    /// data directory's path here may be another server's, or nobody's), `None`
    /// unknown. A run's flush accounting and cut evidence use the data directory's
    /// disks only when this is not `Some(false)`.
    #[serde(default)]
    pub server_on_this_host: Option<bool>,
    /// The stack of the WAL directory (`pg_wal`) when it is on another filesystem
    /// than the data directory (a symbolic link to another device): commits flush
    /// there. Its leaves are also among the probe's leaves.
    #[serde(default)]
    pub wal_stack: Option<Box<super::Probe>>,
}

/// Whether the text of a `/proc/PID/maps` file maps `libeatmydata` (a line whose
/// path's file name starts with `libeatmydata`).
pub fn maps_have_eatmydata(maps: &str) -> bool {
    maps.lines().any(|l| {
        l.split_whitespace()
            .nth(5)
            .and_then(|path| path.rsplit('/').next())
            .is_some_and(|name| name.starts_with("libeatmydata"))
    })
}

/// Whether a process is a PostgreSQL server process, from the file name of its
/// `/proc/PID/exe` (when readable) or else the first word of its `/proc/PID/cmdline`
/// (NUL-separated; a backend retitles itself `postgres: user db …`).
pub fn is_postgres_process(exe: Option<&str>, cmdline: &[u8]) -> bool {
    if let Some(exe) = exe {
        let name = exe.trim_end_matches(" (deleted)");
        return name.rsplit('/').next() == Some("postgres");
    }
    let first = cmdline
        .split(|&b| b == 0 || b == b' ')
        .next()
        .unwrap_or_default();
    let first = String::from_utf8_lossy(first);
    let name = first.trim_end_matches(':');
    name.rsplit('/').next() == Some("postgres")
}

/// The warnings the server's settings and its backend raise, in this order:
/// `pg-fsync-off`, `pg-synchronous-commit-off`, `pg-full-page-writes-off`,
/// `pg-data-sync-retry-on`, `eatmydata`.
pub fn warnings(pg: &PgProbe) -> Vec<Warning> {
    let s = &pg.settings;
    let mut w = Vec::new();
    let mut add = |cond: bool, id: WarningId, message: String| {
        if cond {
            w.push(Warning { id, message });
        }
    };
    add(
        s.fsync == "off",
        WarningId::PgFsyncOff,
        "PostgreSQL fsync=off: the server never flushes WAL or data files, so a cut can lose committed transactions and corrupt the cluster".into(),
    );
    // `local`, `remote_write`, `remote_apply` and `on` all wait for the local WAL flush.
    add(
        s.synchronous_commit == "off",
        WarningId::PgSynchronousCommitOff,
        "PostgreSQL synchronous_commit=off: COMMIT returns before its WAL is flushed, so transactions acknowledged just before a cut can be lost (the cluster stays consistent)".into(),
    );
    add(
        s.full_page_writes == "off",
        WarningId::PgFullPageWritesOff,
        "PostgreSQL full_page_writes=off: a page torn by a cut cannot be restored from WAL, so the cluster can be corrupt after a cut unless the storage writes 8 kB pages atomically".into(),
    );
    add(
        s.data_sync_retry == "on",
        WarningId::PgDataSyncRetryOn,
        "PostgreSQL data_sync_retry=on: after a failed fsync the server retries instead of stopping, though the kernel may have dropped the unwritten pages: data can be lost without an error".into(),
    );
    if let (Some(true), Some(pid)) = (pg.backend_eatmydata, pg.backend_pid) {
        add(
            true,
            WarningId::Eatmydata,
            format!("libeatmydata is mapped in the postgres backend PID {pid} (/proc/{pid}/maps): the server's fsync and fdatasync return at once without writing anything"),
        );
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(fsync: &str, sc: &str, fpw: &str, dsr: &str) -> PgProbe {
        PgProbe {
            settings: PgSettings {
                fsync: fsync.into(),
                synchronous_commit: sc.into(),
                full_page_writes: fpw.into(),
                data_sync_retry: dsr.into(),
                ..PgSettings::default()
            },
            ..PgProbe::default()
        }
    }

    fn ids(p: &PgProbe) -> Vec<&'static str> {
        warnings(p).iter().map(|w| w.id.as_str()).collect()
    }

    #[test]
    fn defaults_raise_nothing() {
        assert!(warnings(&settings("on", "on", "on", "off")).is_empty());
        for sc in ["local", "remote_write", "remote_apply"] {
            assert!(
                warnings(&settings("on", sc, "on", "off")).is_empty(),
                "{sc}"
            );
        }
    }

    #[test]
    fn each_setting_in_order_with_its_message() {
        let w = warnings(&settings("off", "off", "off", "on"));
        let got: Vec<(&str, &str)> = w.iter().map(|w| (w.id.as_str(), &*w.message)).collect();
        assert_eq!(
            got,
            [
                ("pg-fsync-off", "PostgreSQL fsync=off: the server never flushes WAL or data files, so a cut can lose committed transactions and corrupt the cluster"),
                ("pg-synchronous-commit-off", "PostgreSQL synchronous_commit=off: COMMIT returns before its WAL is flushed, so transactions acknowledged just before a cut can be lost (the cluster stays consistent)"),
                ("pg-full-page-writes-off", "PostgreSQL full_page_writes=off: a page torn by a cut cannot be restored from WAL, so the cluster can be corrupt after a cut unless the storage writes 8 kB pages atomically"),
                ("pg-data-sync-retry-on", "PostgreSQL data_sync_retry=on: after a failed fsync the server retries instead of stopping, though the kernel may have dropped the unwritten pages: data can be lost without an error"),
            ]
        );
        assert_eq!(ids(&settings("off", "on", "on", "off")), ["pg-fsync-off"]);
        assert_eq!(
            ids(&settings("on", "off", "on", "off")),
            ["pg-synchronous-commit-off"]
        );
        assert_eq!(
            ids(&settings("on", "on", "off", "off")),
            ["pg-full-page-writes-off"]
        );
        assert_eq!(
            ids(&settings("on", "on", "on", "on")),
            ["pg-data-sync-retry-on"]
        );
    }

    #[test]
    fn eatmydata_in_the_backend_names_it() {
        let mut p = settings("on", "on", "on", "off");
        p.backend_pid = Some(4242);
        p.backend_eatmydata = Some(true);
        let w = warnings(&p);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].id, WarningId::Eatmydata);
        assert_eq!(w[0].message, "libeatmydata is mapped in the postgres backend PID 4242 (/proc/4242/maps): the server's fsync and fdatasync return at once without writing anything");
        p.backend_eatmydata = Some(false);
        assert!(warnings(&p).is_empty());
        p.backend_eatmydata = None;
        assert!(warnings(&p).is_empty());
    }

    #[test]
    fn maps_lines() {
        let with = "7f1c2a000000-7f1c2a002000 r-xp 00000000 fe:00 1234 /usr/lib/x86_64-linux-gnu/libeatmydata.so.1.3.0\n";
        let without = "55d0c0000000-55d0c0100000 r-xp 00000000 fe:00 99 /usr/lib/postgresql/15/bin/postgres\n7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]\n";
        assert!(maps_have_eatmydata(with));
        assert!(maps_have_eatmydata(&format!("{without}{with}")));
        assert!(!maps_have_eatmydata(without));
        assert!(!maps_have_eatmydata(""));
    }

    #[test]
    fn postgres_processes() {
        assert!(is_postgres_process(
            Some("/usr/lib/postgresql/15/bin/postgres"),
            b""
        ));
        assert!(!is_postgres_process(Some("/usr/bin/bash"), b"postgres"));
        assert!(is_postgres_process(
            None,
            b"postgres: postgres postgres [local] idle\0"
        ));
        assert!(is_postgres_process(
            None,
            b"/usr/lib/postgresql/15/bin/postgres\0-D\0/data\0"
        ));
        assert!(!is_postgres_process(None, b"sshd: root\0"));
        assert!(!is_postgres_process(None, b""));
    }
}
