//! Connections as libpq makes them, against a real cluster started with `ssl=on`, a
//! self-signed CA and a server certificate for `localhost`/`127.0.0.1` (made with
//! `openssl`), `password_encryption = scram-sha-256` and these `pg_hba.conf` lines:
//!
//! * `pwuser` (password `pw-secret`): over TLS only, SCRAM (plain is rejected), so a
//!   session of it proves TLS;
//! * `plainuser` (password `pw-plain`): without TLS only, SCRAM;
//! * `certuser`: over TLS with a client certificate signed by the CA (`cert`).
//!
//! `plugpull probe --dsn` is the cheapest command that connects; `write pgbench` and
//! `verify` run a workload through the pgbench clients' own TLS. Every outcome is
//! compared with `psql`'s under the same settings (libpq decides independently).
//! Each run gets an empty `HOME` and no `PG*` variables but those given.

use plugpull_tests::pg::PgCluster;
use plugpull_tests::{bin, Listener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cluster, its certificates and a home directory for the runs.
struct Rig {
    pg: PgCluster,
    /// The CA, the wrong CA, the client certificate and its key.
    ca: PathBuf,
    wrong_ca: PathBuf,
    client_crt: PathBuf,
    client_key: PathBuf,
    home: tempfile::TempDir,
}

/// Runs `openssl ARGS` in `dir`, panicking with its stderr on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA (`NAME.crt`, `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    let (crt, key) = (format!("{name}.crt"), format!("{name}.key"));
    let subj = format!("/CN=plugpull test {name}");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            &key,
            "-out",
            &crt,
            "-subj",
            &subj,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// A certificate `NAME.crt`/`NAME.key` for `cn`, signed by `ca`, with `ext` lines.
fn make_cert(dir: &Path, name: &str, cn: &str, ca: &str, ext: &str) {
    let (crt, key, csr) = (
        format!("{name}.crt"),
        format!("{name}.key"),
        format!("{name}.csr"),
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &crt,
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
    std::fs::set_permissions(dir.join(&key), std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Starts the cluster described in the module comment; `None` (after a SKIP line)
/// without PostgreSQL or `openssl`.
fn rig(test: &str) -> Option<Rig> {
    if PgCluster::skip(test) {
        return None;
    }
    if Command::new("openssl").arg("version").output().is_err() {
        plugpull_tests::skipped(test, "no openssl command to make the certificates");
        return None;
    }
    let home = tempfile::tempdir().unwrap();
    let certs = home.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    make_ca(&certs, "ca");
    make_ca(&certs, "wrong-ca");
    make_cert(
        &certs,
        "server",
        "localhost",
        "ca",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    make_cert(
        &certs,
        "client",
        "certuser",
        "ca",
        "extendedKeyUsage=clientAuth\n",
    );
    let mut pg = PgCluster::create(None);
    let owner = plugpull_client::rig::postgres::owner().unwrap();
    for f in ["server.crt", "server.key", "ca.crt"] {
        let to = pg.data.join(f);
        std::fs::copy(certs.join(f), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&to, Some(uid), Some(gid)).unwrap();
        }
    }
    pg.append_conf(&[
        "ssl = on",
        "ssl_cert_file = 'server.crt'",
        "ssl_key_file = 'server.key'",
        "ssl_ca_file = 'ca.crt'",
        "password_encryption = 'scram-sha-256'",
    ]);
    pg.start();
    pg.psql("CREATE ROLE pwuser LOGIN SUPERUSER PASSWORD 'pw-secret'");
    pg.psql("CREATE ROLE plainuser LOGIN SUPERUSER PASSWORD 'pw-plain'");
    pg.psql("CREATE ROLE certuser LOGIN SUPERUSER");
    pg.psql("CREATE DATABASE bench");
    for line in [
        "hostssl all certuser 127.0.0.1/32 cert",
        "hostnossl all plainuser 127.0.0.1/32 scram-sha-256",
        "hostssl all plainuser 127.0.0.1/32 reject",
        "hostssl all pwuser 127.0.0.1/32 scram-sha-256",
        "hostnossl all pwuser 127.0.0.1/32 reject",
    ] {
        pg.prepend_hba(line);
    }
    Some(Rig {
        pg,
        ca: certs.join("ca.crt"),
        wrong_ca: certs.join("wrong-ca.crt"),
        client_crt: certs.join("client.crt"),
        client_key: certs.join("client.key"),
        home,
    })
}

/// The `PG*` variables a run must not inherit.
const PG_VARS: &[&str] = &[
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGDATABASE",
    "PGUSER",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSYSCONFDIR",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGOPTIONS",
    "PGAPPNAME",
];

impl Rig {
    /// `host=127.0.0.1 port=P dbname=bench user=USER` and `extra`.
    fn dsn(&self, user: &str, extra: &str) -> String {
        format!(
            "host=127.0.0.1 port={} dbname=bench user={user} {extra}",
            self.pg.port
        )
    }

    /// A password file holding `lines`, with `mode`.
    fn passfile(&self, lines: &str, mode: u32) -> PathBuf {
        let p = self.home.path().join("pgpass");
        std::fs::write(&p, lines).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// `cmd` with the rig's home and `env` only.
    fn env(&self, cmd: &mut Command, env: &[(&str, &str)]) {
        for v in PG_VARS {
            cmd.env_remove(v);
        }
        cmd.env("HOME", self.home.path())
            .env_remove("PLUGPULL_SECRET");
        cmd.envs(env.iter().copied());
    }

    /// `plugpull ARGS` under `env`.
    fn plugpull(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(bin("plugpull"));
        cmd.args(args);
        self.env(&mut cmd, env);
        cmd.output().expect("run plugpull")
    }

    /// `plugpull probe --dsn DSN` under `env`: `Ok(stdout)` on exit 0, else
    /// `Err(stderr)` (exit 2 asserted).
    fn probe(&self, dsn: &str, env: &[(&str, &str)]) -> Result<String, String> {
        let o = self.plugpull(&["probe", "--dsn", dsn], env);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        match o.status.code() {
            Some(0) => Ok(out),
            Some(2) => Err(err),
            c => panic!("probe --dsn {dsn:?} exited {c:?}: {err}"),
        }
    }

    /// `psql DSN -c 'SELECT ssl FROM pg_stat_ssl …'` under `env`: `Ok` with whether
    /// the session is over TLS, or `Err(stderr)`.
    fn psql(&self, dsn: &str, env: &[(&str, &str)]) -> Result<bool, String> {
        let Some(dir) = plugpull_tests::pg::bin_dir() else {
            return Err("no psql".into());
        };
        let mut cmd = Command::new(dir.join("psql"));
        cmd.args(["-X", "-A", "-t", "-w", "-d", dsn, "-c"])
            .arg("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()");
        self.env(&mut cmd, env);
        let o = cmd.output().expect("run psql");
        match o.status.success() {
            true => Ok(text(&o.stdout).trim() == "t"),
            false => Err(text(&o.stderr)),
        }
    }

    /// Asserts that plugpull and psql both connect (`Ok`, psql over TLS when
    /// `tls`) or both are refused with stderr containing `why` (plugpull's) and
    /// `psql_why` (psql's).
    fn both(&self, dsn: &str, env: &[(&str, &str)], want: Result<bool, (&str, &str)>) {
        let ours = self.probe(dsn, env);
        let theirs = self.psql(dsn, env);
        match want {
            Ok(tls) => {
                assert!(
                    ours.is_ok(),
                    "plugpull refused {dsn:?}: {}",
                    ours.unwrap_err()
                );
                assert_eq!(theirs, Ok(tls), "psql on {dsn:?}");
            }
            Err((why, psql_why)) => {
                let e = ours.expect_err(&format!("plugpull connected with {dsn:?}"));
                assert!(e.contains(why), "plugpull on {dsn:?}: {e}");
                let e = theirs.expect_err(&format!("psql connected with {dsn:?}"));
                assert!(e.contains(psql_why), "psql on {dsn:?}: {e}");
            }
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A `.pgpass` (PGPASSFILE, 0600) gives the password to probe, `write pgbench` (its
/// setup and its clients' own TLS sessions) and `verify` (`channel_binding=require`
/// is refused by the clients, which do not bind); the same file with mode
/// 0644 is ignored with the warning, and the connection fails for want of a password.
#[test]
fn a_pgpass_file_is_used_and_refused_when_others_may_read_it() {
    let Some(r) = rig("a_pgpass_file_is_used_and_refused_when_others_may_read_it") else {
        return;
    };
    let pass = r.passfile("# test\n127.0.0.1:*:bench:pwuser:pw-secret\n", 0o600);
    let pass_s = pass.to_str().unwrap();
    let env = [("PGPASSFILE", pass_s)];
    let dsn = r.dsn("pwuser", "sslmode=require");
    r.both(&dsn, &env, Ok(true));

    let l = Listener::start(r.home.path());
    let write = |dsn: &str, extra: &[&str]| {
        let mut args = vec!["write", "pgbench", "--listener", l.addr(), "--dsn", dsn];
        args.extend_from_slice(extra);
        r.plugpull(&args, &env)
    };
    let o = write(
        &dsn,
        &["--init", "--clients", "2", "--transactions", "5", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(v["acknowledged"], serde_json::json!(10));
    let run = v["run_id"].as_str().unwrap();
    let o = r.plugpull(
        &[
            "verify",
            "--read-back",
            "--listener",
            l.addr(),
            "--json",
            "--run",
            run,
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lost_commits"], serde_json::json!(0));
    // The setup binds SCRAM to the TLS channel (tokio-postgres); the clients cannot
    // and say so rather than connect unbound.
    let bound = format!("{dsn} channel_binding=require");
    let o = write(&bound, &["--transactions", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("channel_binding=require: the pgbench clients do not bind"),
        "{}",
        text(&o.stderr)
    );

    std::fs::set_permissions(&pass, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = r.probe(&dsn, &env).unwrap_err();
    assert!(
        e.contains(&format!(
            "warning: password file {pass_s} ignored: mode 0644, must be 0600 or stricter (libpq's rule)"
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "password missing (looked for a password in the connection string, in PGPASSWORD and in the password file: {pass_s} was ignored (the warning says why))"
        )),
        "{e}"
    );
    let e = r.psql(&dsn, &env).unwrap_err();
    assert!(e.contains("has group or world access"), "{e}");
}

/// PGSERVICE (and `service=`) with a service file connects; an unknown service is
/// an error naming it and the files searched.
#[test]
fn a_service_file_gives_the_settings() {
    let Some(r) = rig("a_service_file_gives_the_settings") else {
        return;
    };
    let pass = r.passfile("*:*:*:pwuser:pw-secret\n", 0o600);
    let file = r.home.path().join("services.conf");
    std::fs::write(
        &file,
        format!(
            "# test services\n[bench]\nhost=127.0.0.1\nport={}\nuser=pwuser\ndbname=bench\nsslmode=verify-full\nsslrootcert={}\n",
            r.pg.port,
            r.ca.display()
        ),
    )
    .unwrap();
    let (pass_s, file_s) = (pass.to_str().unwrap(), file.to_str().unwrap());
    let env = [
        ("PGPASSFILE", pass_s),
        ("PGSERVICEFILE", file_s),
        ("PGSYSCONFDIR", "/nonexistent"),
    ];
    r.both("service=bench", &env, Ok(true));
    let with_var = [env[0], env[1], env[2], ("PGSERVICE", "bench")];
    let out = r.probe("", &with_var).unwrap();
    assert!(
        out.contains(&format!(
            "host=127.0.0.1 port={} user=pwuser dbname=bench sslmode=verify-full sslrootcert={}",
            r.pg.port,
            r.ca.display()
        )),
        "{out}"
    );
    r.both(
        "service=nope",
        &env,
        Err((
            &format!("service \"nope\" not found in {file_s} or /nonexistent/pg_service.conf"),
            "definition of service \"nope\" not found",
        )),
    );
}

/// Each sslmode connects or is refused as libpq's table says: `pwuser` may only
/// come over TLS, `plainuser` only without.
#[test]
fn each_sslmode_connects_or_is_refused_as_libpq_says() {
    let Some(r) = rig("each_sslmode_connects_or_is_refused_as_libpq_says") else {
        return;
    };
    let pass = r.passfile("*:*:*:pwuser:pw-secret\n*:*:*:plainuser:pw-plain\n", 0o600);
    let env = [("PGPASSFILE", pass.to_str().unwrap())];
    let hba = "pg_hba.conf rejects connection";
    let (ca, wrong) = (r.ca.display(), r.wrong_ca.display());
    // pwuser: hostssl only.
    r.both(&r.dsn("pwuser", "sslmode=disable"), &env, Err((hba, hba)));
    for mode in ["allow", "prefer", "require"] {
        r.both(&r.dsn("pwuser", &format!("sslmode={mode}")), &env, Ok(true));
    }
    r.both(&r.dsn("pwuser", ""), &env, Ok(true));
    for mode in ["verify-ca", "verify-full"] {
        let right = format!("sslmode={mode} sslrootcert={ca}");
        r.both(&r.dsn("pwuser", &right), &env, Ok(true));
        let other = format!("sslmode={mode} sslrootcert={wrong}");
        r.both(
            &r.dsn("pwuser", &other),
            &env,
            Err((
                "invalid peer certificate: UnknownIssuer",
                "certificate verify failed",
            )),
        );
    }
    // A name the certificate does not carry: verify-ca does not look, verify-full does.
    let named = |mode: &str| {
        format!(
            "host=wronghost hostaddr=127.0.0.1 port={} dbname=bench user=pwuser sslmode={mode} sslrootcert={ca}",
            r.pg.port
        )
    };
    r.both(&named("verify-ca"), &env, Ok(true));
    r.both(
        &named("verify-full"),
        &env,
        Err((
            "certificate not valid for name \"wronghost\"",
            "does not match host name \"wronghost\"",
        )),
    );
    let localhost = format!("host=localhost sslmode=verify-full sslrootcert={ca}");
    r.both(&r.dsn("pwuser", &localhost), &env, Ok(true));
    // require with the root file present checks the chain, as verify-ca.
    r.both(
        &r.dsn("pwuser", &format!("sslmode=require sslrootcert={wrong}")),
        &env,
        Err((
            "invalid peer certificate: UnknownIssuer",
            "certificate verify failed",
        )),
    );
    // plainuser: hostnossl only; prefer falls back to plain, require does not.
    r.both(&r.dsn("plainuser", "sslmode=disable"), &env, Ok(false));
    r.both(&r.dsn("plainuser", "sslmode=allow"), &env, Ok(false));
    r.both(&r.dsn("plainuser", "sslmode=prefer"), &env, Ok(false));
    r.both(
        &r.dsn("plainuser", "sslmode=require"),
        &env,
        Err((hba, hba)),
    );
}

/// A client certificate (`cert` authentication) with sslcert/sslkey connects;
/// without it the server refuses; a key others may read is refused before
/// connecting, as libpq refuses it.
#[test]
fn a_client_certificate_authenticates() {
    let Some(r) = rig("a_client_certificate_authenticates") else {
        return;
    };
    let (crt, key, ca) = (
        r.client_crt.display(),
        r.client_key.display(),
        r.ca.display(),
    );
    let with = format!("sslmode=verify-full sslrootcert={ca} sslcert={crt} sslkey={key}");
    r.both(&r.dsn("certuser", &with), &[], Ok(true));
    r.both(
        &r.dsn("certuser", &format!("sslmode=verify-full sslrootcert={ca}")),
        &[],
        Err((
            "connection requires a valid client certificate",
            "connection requires a valid client certificate",
        )),
    );
    std::fs::set_permissions(&r.client_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    r.both(
        &r.dsn("certuser", &with),
        &[],
        Err((
            &format!("private key file {key} has mode 0644"),
            "has group or world access",
        )),
    );
}
