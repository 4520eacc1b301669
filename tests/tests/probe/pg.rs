//! `plugpull probe --dsn`: real PostgreSQL clusters (the tests' [`PgCluster`]): one
//! with default settings (no `pg-*` warning; its data directory probed as the target,
//! or beside another target; a role that may not see the data directory), one started
//! with unsafe settings under `LD_PRELOAD=libeatmydata` (every `pg-*` warning in order,
//! then `eatmydata` naming the backend). Expected stacks come from `probe --target
//! DATADIR` and `findmnt`; expected settings from what the test wrote and `SHOW`.

use super::*;
use plugpull_tests::pg::PgCluster;

/// `plugpull probe ARGS --json`: asserts exit 0 and returns the JSON object.
fn probe_args_json(args: &[&str]) -> Value {
    let mut argv = vec!["probe", "--json"];
    argv.extend_from_slice(args);
    let o = plugpull_tests::plugpull(&argv);
    assert!(
        o.status.success(),
        "probe {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The warning ids in the order the probe gave them.
fn ordered_ids(v: &Value) -> Vec<String> {
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_string())
        .collect()
}

/// The probe's notes, in order.
fn notes(v: &Value) -> Vec<&str> {
    v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// The path of `libeatmydata.so` from the `libeatmydata1` package, if installed.
fn libeatmydata() -> Option<String> {
    let o = Command::new("dpkg")
        .args(["-L", "libeatmydata1"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.ends_with("/libeatmydata.so") || l.ends_with("/libeatmydata.so.1"))
        .map(String::from)
}

#[test]
fn a_default_cluster_has_no_pg_warning_and_its_data_directory_is_the_target() {
    let test = "a_default_cluster_has_no_pg_warning_and_its_data_directory_is_the_target";
    if PgCluster::skip(test) {
        return;
    }
    let c = PgCluster::start_new();
    let dsn = c.conninfo();
    let v = probe_args_json(&["--dsn", &dsn]);
    let data = c.data.to_str().unwrap();
    let pg = &v["postgres"];
    assert_eq!(
        pg["conninfo"],
        format!(
            "host={} port={} user=postgres dbname=postgres",
            c.sock.display(),
            c.port
        )
    );
    let show = |name: &str| c.psql(&format!("SHOW {name}"));
    let want = json!({
        "server_version": show("server_version"), "fsync": "on",
        "synchronous_commit": "on", "full_page_writes": "on",
        "wal_sync_method": show("wal_sync_method"), "data_checksums": "off",
        "data_directory": data, "wal_log_hints": "off", "data_sync_retry": "off",
        "commit_delay": "0", "synchronous_standby_names": "",
    });
    assert_eq!(pg["settings"], want);
    assert_eq!(pg["data_directory_stack"], Value::Null);
    assert!(pg["backend_pid"].as_i64().unwrap() > 0, "{pg}");
    assert_eq!(pg["backend_eatmydata"], false, "{:#}", v["notes"]);

    // The data directory is the target: its stack is what `probe --target` finds,
    // and its mount is the one findmnt names for it.
    assert_eq!(v["target"], data);
    let own = probe_json(&c.data);
    assert_eq!(v["layers"], own["layers"]);
    assert_eq!(v["leaves"], own["leaves"]);
    let mp = run("findmnt", &["-n", "-o", "TARGET", "--target", data]);
    assert_eq!(v["layers"][0]["kind"], "mount");
    assert_eq!(v["layers"][0]["mountpoint"], mp.trim());
    assert_eq!(ordered_ids(&v), ordered_ids(&own));
    assert!(!ordered_ids(&v).iter().any(|id| id.starts_with("pg-")));

    // With another target too, the data directory's stack goes beside it.
    let other = tempfile::tempdir().unwrap();
    let target = other.path().join("x.dat");
    let both = probe_args_json(&["--dsn", &dsn, "--target", target.to_str().unwrap()]);
    assert_eq!(both["target"], target.to_str().unwrap());
    let stack = &both["postgres"]["data_directory_stack"];
    assert_eq!(stack["target"], data);
    assert_eq!(stack["layers"], own["layers"]);
    assert_eq!(both["postgres"]["settings"], want);

    // The text names the server, its settings, its data directory and its backend.
    let o = plugpull_tests::plugpull(&["probe", "--dsn", &dsn]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("PostgreSQL "))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        lines[at],
        format!(
            "PostgreSQL {}: {}",
            show("server_version"),
            pg["conninfo"].as_str().unwrap()
        )
    );
    assert_eq!(
        lines[at + 1],
        format!(
            "  fsync=on synchronous_commit=on full_page_writes=on wal_sync_method={} data_checksums=off",
            show("wal_sync_method")
        )
    );
    assert_eq!(
        lines[at + 2],
        "  wal_log_hints=off data_sync_retry=off commit_delay=0 synchronous_standby_names=''"
    );
    assert_eq!(
        lines[at + 3],
        format!("  data directory {data}: the stack above")
    );
    assert!(lines[at + 4].starts_with("  backend PID "), "{text}");
    assert!(lines[at + 4].ends_with(": no libeatmydata"), "{text}");

    // --seconds without --target times the loop in the data directory.
    let timed = probe_args_json(&["--dsn", &dsn, "--seconds", "1"]);
    assert!(
        timed["flush"]["fdatasyncs"].as_u64().unwrap() >= 1,
        "{timed:#}"
    );

    // A role without pg_read_all_settings does not see the data directory.
    c.psql("CREATE ROLE plain LOGIN");
    let hidden = probe_args_json(&[
        "--dsn",
        &c.conninfo().replace("user=postgres", "user=plain"),
    ]);
    assert_eq!(hidden["postgres"]["settings"]["data_directory"], "(hidden)");
    assert_eq!(hidden["layers"], json!([]));
    assert_eq!(hidden["postgres"]["backend_eatmydata"], Value::Null);
    let pid = hidden["postgres"]["backend_pid"].as_i64().unwrap();
    let notes = notes(&hidden);
    assert_eq!(notes[0], "the server's data directory (hidden) is hidden from this role (reading it needs pg_read_all_settings): its stack was not probed");
    assert_eq!(
        notes.last().unwrap().to_string(),
        format!("the data directory is hidden: whether PID {pid} here is the server's backend is unknown, libeatmydata in the server not checked")
    );
}

#[test]
fn unsafe_settings_and_eatmydata_in_the_server_warn_in_order() {
    let test = "unsafe_settings_and_eatmydata_in_the_server_warn_in_order";
    if PgCluster::skip(test) {
        return;
    }
    let Some(so) = libeatmydata() else {
        skipped(
            test,
            "libeatmydata1 is not installed (scripts/deps installs eatmydata)",
        );
        return;
    };
    let mut c = PgCluster::create(None);
    c.append_conf(&[
        "fsync = off",
        "synchronous_commit = off",
        "full_page_writes = off",
        "data_sync_retry = on",
    ]);
    c.start_env(&[("LD_PRELOAD", &so)]);
    let v = probe_args_json(&["--dsn", &c.conninfo()]);
    let s = &v["postgres"]["settings"];
    assert_eq!(
        [
            &s["fsync"],
            &s["synchronous_commit"],
            &s["full_page_writes"],
            &s["data_sync_retry"]
        ],
        ["off", "off", "off", "on"]
    );
    assert_eq!(v["postgres"]["backend_eatmydata"], true, "{:#}", v["notes"]);
    let pid = v["postgres"]["backend_pid"].as_i64().unwrap();
    let own = probe_json(&c.data);
    let mut want = ordered_ids(&own);
    want.extend(
        [
            "pg-fsync-off",
            "pg-synchronous-commit-off",
            "pg-full-page-writes-off",
            "pg-data-sync-retry-on",
            "eatmydata",
        ]
        .map(String::from),
    );
    assert_eq!(ordered_ids(&v), want);
    let last = v["warnings"].as_array().unwrap().last().unwrap();
    assert_eq!(
        last["message"],
        format!("libeatmydata is mapped in the postgres backend PID {pid} (/proc/{pid}/maps): the server's fsync and fdatasync return at once without writing anything")
    );
    // This process itself has nothing preloaded: the warning is the server's alone.
    assert_eq!(v["environment"]["eatmydata_in"], json!([]));
}

#[test]
fn probe_without_target_or_dsn_exits_2_naming_both() {
    let mut cmd = Command::new(plugpull_tests::bin("plugpull"));
    cmd.args(["probe", "--json"]);
    for k in ["PGSERVICE", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE"] {
        cmd.env_remove(k);
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let why = "probe: nothing to probe: give --target FILE, --dsn CONNINFO or both (or set PGSERVICE or PGHOST to probe that PostgreSQL server)";
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("plugpull: {why}\n")
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&o.stdout).unwrap(),
        serde_json::json!({"ok": false, "error": why})
    );
}

/// libpq's rule, as `write pgbench` follows it: `PGSERVICE` alone names the server,
/// without `--dsn`.
#[test]
fn pgservice_alone_names_the_server_to_probe() {
    let test = "pgservice_alone_names_the_server_to_probe";
    if PgCluster::skip(test) {
        return;
    }
    let c = PgCluster::start_new();
    let dir = tempfile::tempdir().unwrap();
    let services = dir.path().join("pg_service.conf");
    std::fs::write(
        &services,
        format!(
            "[benchsvc]\nhost={}\nport={}\nuser=postgres\ndbname=postgres\n",
            c.sock.display(),
            c.port
        ),
    )
    .unwrap();
    let o = Command::new(plugpull_tests::bin("plugpull"))
        .args(["probe", "--json"])
        .env("PGSERVICE", "benchsvc")
        .env("PGSERVICEFILE", &services)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["postgres"]["conninfo"],
        format!(
            "host={} port={} user=postgres dbname=postgres",
            c.sock.display(),
            c.port
        ),
        "{v:#}"
    );
    assert_eq!(
        v["postgres"]["settings"]["data_directory"],
        c.data.to_str().unwrap(),
        "{v:#}"
    );
}

#[test]
fn a_server_in_another_pid_namespace_is_not_taken_for_this_hosts() {
    let test = "a_server_in_another_pid_namespace_is_not_taken_for_this_hosts";
    if PgCluster::skip(test) {
        return;
    }
    let in_ns = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "true"])
        .status();
    if !is_root() || !in_ns.is_ok_and(|s| s.success()) {
        skipped(
            test,
            "cannot run a process in a new PID namespace (needs root and unshare)",
        );
        return;
    }
    // Initialised by the rig, started by hand as PID 2 or 3 of a namespace of its own:
    // the backend's pg_backend_pid() means nothing in this host's /proc.
    let c = PgCluster::create(None);
    let mut server = plugpull_client::rig::proc::Guard(Some(
        Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--kill-child",
                "runuser",
                "-u",
                "postgres",
                "--",
            ])
            .arg(c.program("postgres"))
            .arg("-D")
            .arg(&c.data)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let t = Instant::now();
    while c.try_psql("SELECT 1").is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let v = probe_args_json(&["--dsn", &c.conninfo()]);
    server.kill();
    let data = c.data.to_str().unwrap();
    assert_eq!(v["target"], data);
    assert_eq!(v["postgres"]["backend_eatmydata"], Value::Null);
    assert_eq!(v["postgres"]["server_on_this_host"], false);
    let pid = v["postgres"]["backend_pid"].as_i64().unwrap();
    let why = if Path::new(&format!("/proc/{pid}")).exists() {
        format!("PID {pid} is not a postgres process here")
    } else {
        format!("PID {pid} does not exist here")
    };
    let notes = notes(&v);
    let here = format!("the data directory {data} exists on this host, but the server's backend {why}: the server may run elsewhere, and the stack above may not be its");
    let unchecked = format!("the postgres backend {why}: libeatmydata in the server not checked");
    assert_eq!(
        notes[notes.len() - 2..],
        [here.as_str(), unchecked.as_str()]
    );
}

#[test]
fn a_dsn_nobody_answers_is_exit_2_naming_the_server() {
    let port = plugpull_client::rig::proc::free_port().unwrap();
    let dsn = format!("host=127.0.0.1 port={port} user=x dbname=y connect_timeout=5");
    let o = plugpull_tests::plugpull(&["probe", "--dsn", &dsn]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(o.stdout, b"");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("plugpull: cannot connect to host=127.0.0.1 port={port} user=x dbname=y: error connecting to server: Connection refused (os error 111)\n")
    );
}

#[test]
fn a_data_directory_on_ext4_without_barriers_beside_another_target_adds_its_stack_and_nobarrier() {
    let test = "a_data_directory_on_ext4_without_barriers_beside_another_target_adds_its_stack_and_nobarrier";
    if PgCluster::skip(test) || skip_without_loop(test, &["mkfs.ext4", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mnt, lo) = ext4_on_loop(
        &dir.path().join("pg.img"),
        256 << 20,
        &["-o", "barrier=0"],
        &dir.path().join("mnt"),
    );
    // Dropped first: the server stops before its filesystem goes.
    let mut c = PgCluster::init_at(&mnt.at.join("data"));
    c.start();
    let target = dir.path().join("x.dat");
    let v = probe_args_json(&["--target", target.to_str().unwrap(), "--dsn", &c.conninfo()]);
    let own = probe_json(&target);
    let data = probe_json(&c.data);
    assert_eq!(v["target"], target.to_str().unwrap());
    assert_eq!(v["layers"], own["layers"]);
    let stack = &v["postgres"]["data_directory_stack"];
    assert_eq!(stack["target"], c.data.to_str().unwrap());
    assert_eq!(stack["layers"], data["layers"]);
    assert_eq!(stack["layers"][0]["source"], lo.dev.as_str());
    assert_eq!(stack["layers"][1]["kind"], "loop");
    assert_eq!(v["postgres"]["backend_eatmydata"], false);
    // The target's warnings, then the data directory's that are new (nobarrier).
    let mut want = own["warnings"].as_array().unwrap().clone();
    for w in data["warnings"].as_array().unwrap() {
        if !want.contains(w) {
            want.push(w.clone());
        }
    }
    assert_eq!(v["warnings"], json!(want));
    assert!(
        ordered_ids(&v).contains(&"nobarrier".to_string()),
        "{want:?}"
    );
    assert!(!ordered_ids(&own).contains(&"nobarrier".to_string()));
}

#[test]
fn a_wal_directory_on_tmpfs_is_probed_beside_the_data_directory_and_warns_volatile_memory() {
    let test =
        "a_wal_directory_on_tmpfs_is_probed_beside_the_data_directory_and_warns_volatile_memory";
    if PgCluster::skip(test) || skip_without_loop(test, &["mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = Mount::new(
        &["-t", "tmpfs", "-o", "size=64m,mode=0777", "tmpfs"],
        &dir.path().join("walfs"),
    );
    let wal = mnt.at.join("wal");
    let mut c = PgCluster::create_with(None, &["--waldir", wal.to_str().unwrap()]);
    c.start();
    let v = probe_args_json(&["--dsn", &c.conninfo()]);
    let ws = &v["postgres"]["wal_stack"];
    let real = std::fs::canonicalize(&wal).unwrap();
    assert_eq!(ws["target"], real.to_str().unwrap());
    let mp = std::fs::canonicalize(&mnt.at).unwrap();
    assert_eq!(ws["layers"][0]["kind"], "mount");
    assert_eq!(ws["layers"][0]["fstype"], "tmpfs");
    assert_eq!(ws["layers"][0]["mountpoint"], mp.to_str().unwrap());
    // The data directory stays the target; the WAL's warning joins its warnings.
    assert_eq!(v["target"], c.data.to_str().unwrap());
    let volatile: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["id"] == "volatile-memory")
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert_eq!(volatile.len(), 1, "{v:#}");
    assert!(
        volatile[0].starts_with(&format!("tmpfs at {} is in RAM", mp.display())),
        "{volatile:?}"
    );
    assert_eq!(v["postgres"]["server_on_this_host"], true);
    let text = String::from_utf8_lossy(
        &plugpull_tests::plugpull(&["probe", "--dsn", &c.conninfo()]).stdout,
    )
    .into_owned();
    assert!(
        text.contains(&format!(
            "  WAL directory {} (on its own filesystem):\n    mount   tmpfs on {} type tmpfs",
            real.display(),
            mp.display()
        )),
        "{text}"
    );
    c.stop();
}

#[test]
fn a_password_in_the_dsn_is_never_printed() {
    let test = "a_password_in_the_dsn_is_never_printed";
    if PgCluster::skip(test) {
        return;
    }
    let c = PgCluster::start_new();
    // The test cluster trusts local connections: the password is sent, not needed.
    let dsn = format!("{} password=hunter2-secret", c.conninfo());
    for json in [true, false] {
        let mut args = vec!["probe", "--dsn", &dsn];
        if json {
            args.push("--json");
        }
        let o = plugpull_tests::plugpull(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let all = [o.stdout, o.stderr].concat();
        let text = String::from_utf8_lossy(&all);
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains(&format!("port={}", c.port)), "{text}");
    }
}
