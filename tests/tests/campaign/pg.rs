//! A pgbench campaign on the simulated machine: the machine's boot starts
//! PostgreSQL (its data directory on the simfs mount, so every cut runs crash
//! recovery at the next boot) and then `plugpull agent`, which verifies each cut's
//! pgbench run once recovery is done and starts the next.

use super::*;
use plugpull_client::rig::postgres::{bin_dir, Cluster, Layout};
use plugpull_tests::machine::Machine;
use plugpull_tests::pg::PgCluster;
use plugpull_tests::simfs::skip_without_fuse;

/// Three cuts of an honest machine under pgbench: three valid cuts, every commit
/// kept, PostgreSQL recovering at each boot.
#[test]
fn three_pgbench_cuts_of_an_honest_machine_pass() {
    let name = "three_pgbench_cuts_of_an_honest_machine_pass";
    if skip_without_fuse(name) || PgCluster::skip(name) {
        return;
    }
    let w = Witness::start(&[]);
    // PostgreSQL's user must reach its socket, log and data directory.
    std::fs::set_permissions(w.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir().unwrap();
    let mdir = w.path("pg1");
    let layout = Layout {
        data: mdir.join("backing/pgdata"),
        sock: w.path("pgsock"),
        log: w.path("pgrun/postgres.log"),
    };
    let conf = "max_connections = 20\nshared_buffers = 32MB\n";
    let cluster = Cluster::init(&bin, layout, &[], "campaign test", "127.0.0.1", conf)
        .unwrap_or_else(|e| panic!("{e}"));
    let dsn = format!(
        "host={} port={} dbname=postgres user=postgres",
        cluster.sock.display(),
        cluster.port
    );
    // The canary lives on the machine's disk with the data directory: each cut takes
    // its unsynced records as it takes PostgreSQL's.
    std::fs::write(
        &w.config,
        format!(
            "databases = [{dsn:?}]\ncanary_dir = {:?}\n",
            mdir.join("mnt").display().to_string()
        ),
    )
    .unwrap();
    let runas = if cluster.owner.is_some() {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let boot = script(
        w.dir.path(),
        "boot",
        &format!(
            "{runas}{pg_ctl} -D {mnt}/pgdata -l {log} -w -t 120 start > /dev/null || {{ echo 'PostgreSQL did not start' >&2; exit 1; }}\nexec \"$@\"\n",
            pg_ctl = bin.join("pg_ctl").display(),
            mnt = mdir.join("mnt").display(),
            log = cluster.log.display()
        ),
    );
    let mut argv = vec![boot.to_str().unwrap().to_string()];
    argv.extend(w.agent_argv("pg1"));
    let argv: Vec<&str> = argv.iter().map(|s| s.as_str()).collect();
    let m = Machine::create(&mdir, "honest", 51, &["--destage-delay-ms", "2000"], &argv);
    let wl = format!("pgbench --dsn '{dsn}' --init -c 2");
    let o = w.campaign(
        "create",
        &[
            "--name",
            "pg",
            "--host",
            "pg1",
            "--power",
            &m.uri,
            "--workload",
            &wl,
            "--cuts",
            "3",
            "--cut-after",
            "2s..3s",
            "--off",
            "0s",
            "--boot-timeout",
            "120s",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        plugpull(&["power", "--power", &m.uri, "on"]).status.code(),
        Some(0)
    );
    let o = w.campaign("run", &["--name", "pg"]);
    let logs: String = (1..=m.boots()).map(|b| m.boot_log(b)).collect();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}\n{logs}",
        stdout(&o),
        stderr(&o)
    );
    let v = w.status("pg");
    let want: Vec<(u64, String, String)> = (1..=3)
        .map(|i| (i, "valid".into(), String::new()))
        .collect();
    assert_eq!(cuts(&v), want, "{logs}");
    for c in v["cuts"].as_array().unwrap() {
        assert!(c["acknowledged"].as_u64().unwrap() > 0, "{c}");
        assert!(
            c["verdict"]["summary"]
                .as_str()
                .unwrap()
                .starts_with("PASS: "),
            "{c}"
        );
    }
    assert_eq!(m.boots(), 4);
    drop(m); // power off before the cluster handle goes
    drop(cluster);
}
