//! The agent's local configuration (`/etc/plugpull/agent.toml`, `docs/campaign.md`):
//! the only targets and databases a campaign may make this machine write. A campaign
//! comes from the network; this file does not.
//!
//! ```toml
//! # Files and block devices, by the path the campaign names.
//! targets = ["/dev/disk/by-id/nvme-Samsung_SSD_990_PRO_S7…", "/mnt/test/pp.dat"]
//! # PostgreSQL databases, by the conninfo the campaign names (exactly).
//! databases = ["host=/run/postgresql dbname=bench"]
//! # Where every run writes its volatile canary (a persistent local filesystem of
//! # this machine, e.g. the database's); without it, beside a file target.
//! canary_dir = "/var/lib/postgresql"
//! ```

use crate::campaign::workload::Workload;
use crate::Error;
use serde::Deserialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The default path.
pub const DEFAULT_PATH: &str = "/etc/plugpull/agent.toml";

/// What the configuration allows.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Files and block devices a file workload may write, by path.
    #[serde(default)]
    pub targets: Vec<PathBuf>,
    /// Conninfo strings a pgbench workload may use.
    #[serde(default)]
    pub databases: Vec<String>,
    /// The directory every run's volatile canary goes to (`write --canary-dir`): a
    /// campaign may not name one, as it may not name what the agent writes.
    #[serde(default)]
    pub canary_dir: Option<PathBuf>,
}

impl AgentConfig {
    /// Reads `path`. It must belong to root or to this user and be writable by no
    /// one else: whoever can write it decides what the agent overwrites.
    ///
    /// Errors: unreadable, writable by others, or not valid TOML of this shape.
    pub fn read(path: &Path) -> Result<AgentConfig, Error> {
        let meta = std::fs::metadata(path).map_err(|e| {
            Error::Msg(format!(
                "cannot read the agent configuration {}: {e} (docs/campaign.md shows one)",
                path.display()
            ))
        })?;
        let me = rustix::process::geteuid().as_raw();
        if meta.mode() & 0o022 != 0 || (meta.uid() != 0 && meta.uid() != me) {
            return Err(Error::Msg(format!(
                "the agent configuration {} must belong to root (or this user) and be writable by no one else (mode {:04o}, owner uid {}): chown root: and chmod 644 it",
                path.display(),
                meta.mode() & 0o7777,
                meta.uid()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Msg(format!("cannot read {}: {e}", path.display())))?;
        toml::from_str(&text)
            .map_err(|e| Error::Msg(format!("{}: {}", path.display(), e.message())))
    }

    /// Whether `w` writes only what this configuration lists; `Err` names what it
    /// does not.
    pub fn allows(&self, w: &Workload, path: &Path) -> Result<(), String> {
        match w {
            Workload::File(a) => {
                if self.targets.iter().any(|t| same_path(t, &a.target)) {
                    return strict(&a.target).map_err(|why| {
                        format!(
                            "target {} is refused: {why}: anyone who can write there can make the agent (root) write elsewhere with a symlink (sshd's StrictModes rule); keep the target under directories only root can write",
                            a.target.display()
                        )
                    });
                }
                Err(format!(
                    "target {} is not in {}'s `targets`: this agent writes only the targets listed there",
                    a.target.display(),
                    path.display()
                ))
            }
            Workload::Pgbench(a) => {
                let dsn = a.dsn.as_deref().unwrap_or_default();
                if self.databases.iter().any(|d| d == dsn) {
                    return Ok(());
                }
                Err(format!(
                    "database {dsn:?} is not in {}'s `databases`: this agent runs pgbench only against the databases listed there",
                    path.display()
                ))
            }
        }
    }
}

/// Why a user other than root (or this agent's user) could redirect a write to
/// `path`, if one could: a component whose directory such a user can write without
/// the sticky bit (they can replace any entry), an entry in a sticky
/// world-writable directory owned by such a user, a symlink owned by one, or a
/// name that does not exist yet in a directory such a user can write (they can
/// plant a symlink there before the run creates it). Checked on the path as given
/// and, once resolved, on where its symlinks lead (a `/dev/disk/by-id` link, owned
/// by root in a root-only directory, passes).
pub fn strict(path: &Path) -> Result<(), String> {
    strict_depth(path, 0)
}

/// [`strict`], following at most 40 symlinks (as the kernel's `ELOOP` limit).
fn strict_depth(path: &Path, depth: u32) -> Result<(), String> {
    if depth > 40 {
        return Err(format!("{}: too many levels of symlinks", path.display()));
    }
    strict_walk(path)?;
    // Where it leads: its directory resolved, then its last component if a symlink
    // (whose target need not exist yet).
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let Ok(dir) = std::fs::canonicalize(parent) else {
        return Ok(());
    };
    let real = dir.join(name);
    if real != path {
        strict_walk(&real)?;
    }
    match std::fs::read_link(&real) {
        Ok(to) => strict_depth(&dir.join(to), depth + 1),
        Err(_) => Ok(()),
    }
}

/// [`strict`] on the components of `path` as written (not resolving symlinks).
fn strict_walk(path: &Path) -> Result<(), String> {
    let me = rustix::process::geteuid().as_raw();
    let trusted = |uid: u32| uid == 0 || uid == me;
    let abs = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut at = PathBuf::from("/");
    for c in abs.components().skip(1) {
        let dir = std::fs::symlink_metadata(&at)
            .map_err(|e| format!("cannot inspect {}: {e}", at.display()))?;
        let mode = dir.mode() & 0o7777;
        // Others can add or replace entries: not its trusted owner, or writable by
        // all, or by a group other than root's.
        let others = if !trusted(dir.uid()) {
            Some(format!("belongs to uid {}", dir.uid()))
        } else if mode & 0o002 != 0 || (mode & 0o020 != 0 && dir.gid() != 0) {
            Some(format!("is writable by others (mode {mode:04o})"))
        } else {
            None
        };
        // The sticky bit keeps others from replacing what they do not own.
        let sticky = mode & 0o1000 != 0 && trusted(dir.uid());
        let dir_name = at.display().to_string();
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) => {
                if let (Some(why), false) = (&others, sticky) {
                    return Err(format!("directory {dir_name} {why}"));
                }
                if (others.is_some() || m.file_type().is_symlink()) && !trusted(m.uid()) {
                    return Err(format!(
                        "{} belongs to uid {}{}",
                        at.display(),
                        m.uid(),
                        if m.file_type().is_symlink() {
                            " (a symlink)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(why) = others {
                    return Err(format!(
                        "{} does not exist yet and directory {dir_name} {why}: a symlink could be planted there",
                        at.display()
                    ));
                }
                // Nothing below a missing name exists: its directory is trusted.
                return Ok(());
            }
            Err(e) => return Err(format!("cannot inspect {}: {e}", at.display())),
        }
    }
    Ok(())
}

/// The same path as given, or the same file once both are resolved (a symlink under
/// /dev/disk/by-id and the device node it names).
fn same_path(listed: &Path, asked: &Path) -> bool {
    if listed == asked {
        return true;
    }
    match (std::fs::canonicalize(listed), std::fs::canonicalize(asked)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::workload::parse;

    #[test]
    fn a_path_others_can_redirect_is_named() {
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("SKIPPED a_path_others_can_redirect_is_named: needs root (lchown)");
            return;
        }
        use std::os::unix::fs::{lchown, symlink, PermissionsExt};
        let d = std::env::temp_dir().join(format!("pp-strict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let root = d.canonicalize().unwrap();
        let safe = root.join("safe");
        std::fs::create_dir(&safe).unwrap();
        std::fs::set_permissions(&safe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(strict(&safe.join("t.dat")), Ok(()));
        let open = root.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            strict(&open.join("t.dat")),
            Err(format!(
                "{}/t.dat does not exist yet and directory {} is writable by others (mode 0777): a symlink could be planted there",
                open.display(),
                open.display()
            ))
        );
        // A sticky world-writable directory: root's own file passes, another user's
        // symlink does not.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::write(open.join("mine.dat"), b"").unwrap();
        assert_eq!(strict(&open.join("mine.dat")), Ok(()));
        let secret = root.join("secret");
        std::fs::create_dir(&secret).unwrap();
        symlink(secret.join("f"), open.join("t.dat")).unwrap();
        lchown(open.join("t.dat"), Some(65534), Some(65534)).unwrap();
        assert_eq!(
            strict(&open.join("t.dat")),
            Err(format!(
                "{}/t.dat belongs to uid 65534 (a symlink)",
                open.display()
            ))
        );
        // A root-owned symlink (as /dev/disk/by-id's) into the open directory: the
        // resolved path is checked too.
        symlink(open.join("x.dat"), safe.join("link")).unwrap();
        assert_eq!(
            strict(&safe.join("link")),
            Err(format!(
                "{}/x.dat does not exist yet and directory {} is writable by others (mode 1777): a symlink could be planted there",
                open.display(),
                open.display()
            ))
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn lists_decide() {
        let c: AgentConfig =
            toml::from_str("targets = [\"/mnt/t/pp.dat\"]\ndatabases = [\"dbname=bench\"]\n")
                .unwrap();
        let p = Path::new("/etc/plugpull/agent.toml");
        let ok = parse("file --target /mnt/t/pp.dat --size 1MiB").unwrap();
        assert_eq!(c.allows(&ok, p), Ok(()));
        let other = parse("file --target /dev/sda --size 1MiB").unwrap();
        assert_eq!(c.allows(&other, p), Err("target /dev/sda is not in /etc/plugpull/agent.toml's `targets`: this agent writes only the targets listed there".into()));
        let db = parse("pgbench --dsn 'dbname=bench' -c 2").unwrap();
        assert_eq!(c.allows(&db, p), Ok(()));
        let db2 = parse("pgbench --dsn 'dbname=prod' -c 2").unwrap();
        assert_eq!(c.allows(&db2, p), Err("database \"dbname=prod\" is not in /etc/plugpull/agent.toml's `databases`: this agent runs pgbench only against the databases listed there".into()));
        let e = toml::from_str::<AgentConfig>("target = []").unwrap_err();
        assert!(
            e.message().starts_with("unknown field `target`"),
            "{}",
            e.message()
        );
    }

    /// The shipped example parses and lists exactly its one uncommented target and its
    /// canary directory.
    #[test]
    fn the_contrib_example_parses() {
        let c: AgentConfig = toml::from_str(include_str!("../../../contrib/agent.toml")).unwrap();
        assert_eq!(
            c,
            AgentConfig {
                targets: vec![PathBuf::from("/mnt/test/plugpull.dat")],
                databases: vec![],
                canary_dir: Some(PathBuf::from("/var/tmp")),
            }
        );
    }

    #[test]
    fn campaign_workloads_refuse_what_the_campaign_decides() {
        let msg = |l: &str| parse(l).unwrap_err().to_string();
        assert_eq!(
            msg("file --target /t --size 1MiB -T 30s"),
            "--workload \"file --target /t --size 1MiB -T 30s\": -T is not accepted: every run goes on until its cut"
        );
        assert!(msg("file --target /t --force --size 1MiB")
            .contains("--force is not accepted: a campaign may not overwrite"));
        assert_eq!(
            msg("file --listener x:1 --target /t"),
            "--workload \"file --listener x:1 --target /t\": --listener is not accepted: the agent uses its own"
        );
        // Review finding: --ack-log writes a file of its own, anywhere.
        for l in [
            "file --target /t --ack-log /etc/shadow",
            "file --target /t --ack-log=/dev/sda",
            "pgbench --dsn x --ack-log /x",
        ] {
            assert!(msg(l).ends_with("is not accepted: a campaign workload takes only the options that shape the load (docs/campaign.md), nothing that writes elsewhere or ends the run"), "{l}");
        }
        assert_eq!(
            msg("file --target /t -j4 --writes=9"),
            "--workload \"file --target /t -j4 --writes=9\": --writes is not accepted: every run goes on until its cut"
        );
        for dsn in [
            "host=/tmp password=s3cret",
            "postgresql://u:s3cret@db/bench",
        ] {
            let m = msg(&format!("pgbench --dsn '{dsn}'"));
            assert!(
                m.contains("holds a password") && !m.contains("s3cret"),
                "{m}"
            );
        }
        assert!(parse("pgbench --dsn 'postgresql://u@db/bench' -c 2").is_ok());
        assert_eq!(
            msg("file --target '/t"),
            "--workload \"file --target '/t\": unbalanced quotes"
        );
        assert!(msg("fio --target /t").contains("unrecognized subcommand 'fio'"));
    }
}
