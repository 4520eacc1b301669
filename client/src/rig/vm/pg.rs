//! PostgreSQL inside the guest: the bundle variant that carries its server
//! ([`extra`]), the image holding a cluster made on the host ([`make_pg_image`]:
//! `initdb` and `pgbench -i` through a loop mount, faster than in a guest under TCG),
//! the guest's `plugpull write pgbench` settings ([`pgbench_settings`]) and, after the
//! cut, the cluster started on the host from the image ([`Recovered`]: ext4 replays
//! its journal at the loop mount, PostgreSQL its WAL at the start, as at the guest's
//! next boot).
//!
//! The guest runs the host's own server binaries at their host paths, with the
//! libraries `ldd` names, the share directory, `plpgsql.so` and the UTC zone file,
//! as user `postgres` with the host's uid and gid (the image's files are owned so), C
//! locale, a tmpfs `/dev/shm`, its socket in `/tmp` and no TCP (`init.sh`,
//! `plugpull.pgdata=`).

use super::bundle::Extra;
use super::HostMount;
use crate::rig::postgres::{self, Cluster, Layout};
use crate::rig::proc;
use crate::Error;
use std::path::{Path, PathBuf};

/// The cluster's data directory in the image (the guest's `/mnt/pgdata`).
pub const PGDATA: &str = "pgdata";

/// The volatile canary's directory in the image (the guest's `/mnt/canary`).
pub const CANARY: &str = "canary";

/// The guest cluster's `postgresql.conf` lines: small enough for a 512 MiB guest,
/// zones the bundle carries.
const CONF: &str = "shared_buffers = 32MB\nmax_connections = 20\n\
    timezone = 'UTC'\nlog_timezone = 'UTC'\n";

/// The pgbench scale the image's tables are made with (100,000 accounts).
pub const SCALE: u32 = 1;

/// What the PostgreSQL bundle variant adds for the server binaries in `bin`:
/// `postgres` and its libraries, the share directory, `plpgsql.so`, the UTC zone,
/// `/etc/passwd` and `/etc/group` naming `postgres` with the host's uid and gid, and
/// `/etc/plugpull-pgbin` (the binary directory, for `init.sh`).
///
/// Errors: not root (the guest's user takes the host's `postgres` uid), no such user,
/// or `pg_config` cannot say where the share and library directories are.
pub fn extra(bin: &Path) -> Result<Extra, Error> {
    let Some((uid, gid)) = postgres::owner().map_err(Error::Msg)? else {
        return Err(Error::Msg(
            "PostgreSQL in a guest needs root (its postgres user takes the host's uid)".into(),
        ));
    };
    let share = pg_config(bin, "--sharedir")?;
    let lib = pg_config(bin, "--pkglibdir")?;
    let passwd =
        format!("root:x:0:0:root:/:/bin/sh\npostgres:x:{uid}:{gid}:PostgreSQL:/tmp:/bin/sh\n");
    let group = format!("root:x:0:\npostgres:x:{gid}:\n");
    Ok(Extra {
        programs: vec![bin.join("postgres")],
        files: vec![
            share,
            lib.join("plpgsql.so"),
            PathBuf::from("/usr/share/zoneinfo/UTC"),
        ],
        written: vec![
            ("etc/passwd".into(), passwd.into_bytes()),
            ("etc/group".into(), group.into_bytes()),
            (
                "etc/plugpull-pgbin".into(),
                bin.display().to_string().into_bytes(),
            ),
        ],
    })
}

/// `pg_config OPTION` of the installation in `bin` (its own `pg_config`, else the
/// one on the PATH), as a path. Errors: it cannot run or fails.
fn pg_config(bin: &Path, option: &str) -> Result<PathBuf, Error> {
    let own = bin.join("pg_config");
    let prog = if own.exists() {
        own
    } else {
        PathBuf::from("pg_config")
    };
    let mut c = proc::command(&prog);
    c.arg(option);
    let o = proc::output_ok(c, &format!("{} {option}", prog.display()))?;
    Ok(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

/// Creates the raw image `image` of `mib` MiB ([`super::make_image`]) holding a
/// cluster in [`PGDATA`] (`initdb` by the binaries in `bin`, [`CONF`] then `conf`
/// lines), pgbench's tables at [`SCALE`] (`pgbench -i`), a clean shutdown, and the
/// empty directory [`CANARY`]. `scratch` holds the mount point, socket and log.
///
/// Errors: the image, the mount, `initdb`, the start or `pgbench -i`, named.
pub fn make_pg_image(
    image: &Path,
    mib: u64,
    bin: &Path,
    scratch: &Path,
    conf: &str,
) -> Result<(), Error> {
    super::make_image(image, mib)?;
    let mut m = HostMount::mount(image, &scratch.join("mnt"))?;
    let canary = m.at.join(CANARY);
    std::fs::create_dir(&canary)
        .map_err(|e| Error::Msg(format!("cannot create {}: {e}", canary.display())))?;
    let layout = Layout {
        data: m.at.join(PGDATA),
        sock: scratch.join("sock"),
        log: scratch.join("init.log"),
    };
    let conf = format!("{CONF}{conf}");
    let mut c = Cluster::init(bin, layout, &[], "plugpull guest cluster", "", &conf)?;
    if let Err(out) = c.start(60)? {
        return Err(Error::Msg(format!(
            "PostgreSQL did not start on the new image:\n{out}{}",
            c.log_tail(8)
        )));
    }
    let mut cmd = c.server_cmd("pgbench");
    cmd.arg("-i")
        .args(["-q", "-s", &SCALE.to_string(), "-U", "postgres", "-h"])
        .arg(&c.sock)
        .args(["-p", &c.port.to_string(), "postgres"]);
    proc::output_ok(cmd, "pgbench -i")?;
    if let Err(out) = c.stop("fast", 60)? {
        return Err(Error::Msg(format!("pg_ctl stop failed: {out}")));
    }
    drop(c);
    m.umount()
}

/// The guest's kernel command line for `plugpull write pgbench` against its own
/// server (over the socket in `/tmp`, as `postgres`), reporting to the listener at
/// the host's `port`, its canary in [`CANARY`], then `load` (options separated by
/// spaces), and `end` (init.sh's `plugpull.end`).
pub fn pgbench_settings(port: u16, load: &str, end: &str) -> Vec<String> {
    let args: Vec<String> = ["write", "pgbench", "--listener"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("{}:{port}", super::HOST_FROM_GUEST),
            "--dsn".into(),
            "postgresql://postgres@%2Ftmp:5432/postgres".into(),
            "--canary-dir".into(),
            format!("/mnt/{CANARY}"),
        ])
        .chain(load.split(' ').map(String::from))
        .collect();
    let mut s = super::settings(&args, end, None);
    s.push(format!("plugpull.pgdata=/mnt/{PGDATA}"));
    s
}

/// A guest's cluster started on the host after the cut: its image loop-mounted
/// (ext4 replays its journal), PostgreSQL started on it (crash recovery). Dropping
/// it stops the server and unmounts the image.
pub struct Recovered {
    // Field order is drop order: the server stops before its filesystem goes.
    /// The cluster (its `conninfo_db`, `log`, `data`).
    pub cluster: Cluster,
    /// The image's filesystem on the host.
    pub mount: HostMount,
    /// `Err` with pg_ctl's output and the log's tail when PostgreSQL did not start
    /// (crash recovery failed: that is the finding verify reports).
    pub started: Result<(), String>,
}

impl Recovered {
    /// Mounts `image` at `at` and starts the cluster in its [`PGDATA`] with the
    /// binaries in `bin`, socket and log in `scratch`, waiting up to 120 s.
    ///
    /// Errors: the mount failed (a filesystem its journal cannot repair) or the
    /// server could not be run at all; a server that ran and stopped is `started`.
    pub fn start(image: &Path, at: &Path, bin: &Path, scratch: &Path) -> Result<Recovered, Error> {
        let mount = HostMount::mount(image, at)?;
        let layout = Layout {
            data: mount.at.join(PGDATA),
            sock: scratch.join("sock"),
            log: scratch.join("recovery.log"),
        };
        let mut cluster = Cluster::existing(bin, layout, "")?;
        let started = cluster
            .start(120)?
            .map_err(|out| format!("{out}{}", cluster.log_tail(10)));
        Ok(Recovered {
            cluster,
            mount,
            started,
        })
    }

    /// The canary directory as the host sees it (`verify --canary-dir`).
    pub fn canary_dir(&self) -> PathBuf {
        self.mount.at.join(CANARY)
    }

    /// Stops the server (fast) and unmounts the image. Errors: `umount` failed.
    pub fn finish(mut self) -> Result<(), Error> {
        if self.cluster.running {
            let _ = self.cluster.stop("fast", 60);
        }
        let _ = self.cluster.kill_all();
        self.mount.umount()
    }
}
