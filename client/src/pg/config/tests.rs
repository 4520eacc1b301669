use super::*;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;

/// A test environment: variables from `var`, home `home`, OS user `os`, socket
/// directory `/sock`.
fn env_with<'a>(var: &'a dyn Fn(&str) -> Option<String>, home: &Path) -> Env<'a> {
    Env {
        var,
        home: Some(home.to_path_buf()),
        os_user: Some("os".into()),
        socket_dir: "/sock",
    }
}

/// Resolves and builds `dsn` under `vars` with home `home`.
fn conn(
    dsn: &str,
    vars: &[(&'static str, String)],
    home: &Path,
) -> Result<(ConnConfig, Vec<String>), String> {
    let vars: HashMap<&'static str, String> = vars.iter().cloned().collect();
    let var = |k: &str| vars.get(k).cloned();
    let env = env_with(&var, home);
    build(resolve(dsn, &env)?, &env)
}

fn passwords(c: &ConnConfig) -> Vec<Option<String>> {
    c.targets
        .iter()
        .map(|t| {
            t.cfg
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        })
        .collect()
}

#[test]
fn conninfo_and_url_are_parsed_and_redacted() {
    let home = tempfile::tempdir().unwrap();
    let (c, _) = conn(
        "host=/tmp/x port=5433 user=u dbname=d password=secret",
        &[],
        home.path(),
    )
    .unwrap();
    assert_eq!(
        crate::pg::redacted(&c),
        "host=/tmp/x port=5433 user=u dbname=d"
    );
    let (c, _) = conn(
        "postgresql://u:pw@127.0.0.1:5444/db?sslmode=require&sslrootcert=/nonexistent/ca.crt",
        &[],
        home.path(),
    )
    .unwrap();
    assert_eq!(
        crate::pg::redacted(&c),
        "host=127.0.0.1 port=5444 user=u dbname=db sslmode=require sslrootcert=/nonexistent/ca.crt"
    );
    assert_eq!(passwords(&c), vec![Some("pw".to_string())]);
    // The defaults: the socket directory, the OS user and its database.
    let (c, _) = conn("", &[], home.path()).unwrap();
    assert_eq!(
        crate::pg::redacted(&c),
        "host=/sock port=5432 user=os dbname=os"
    );
    assert_eq!(c.targets()[0].attempts(), &[Attempt::Plain]);
}

#[test]
fn a_dsn_that_cannot_be_parsed_is_named_without_its_password() {
    let home = tempfile::tempdir().unwrap();
    let e = conn("host=/tmp password=hunter2 dbname='bench", &[], home.path())
        .err()
        .unwrap();
    assert_eq!(
        e,
        "cannot parse connection string \"host=/tmp password=*** dbname='bench\": \
         unterminated quoted value of \"dbname\""
    );
    let e = conn("postgresql://u:hunter2@h:99999/db", &[], home.path())
        .err()
        .unwrap();
    assert_eq!(e, "port \"99999\" is not a port number");
    let e = conn("", &[("PGPORT", "x".into())], home.path())
        .err()
        .unwrap();
    assert_eq!(e, "port \"x\" is not a port number");
}

#[test]
fn the_dsn_wins_over_the_service_which_wins_over_the_environment() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(".pg_service.conf"),
        "[bench]\nhost=svc-host\nport=6000\ndbname=svc-db\n",
    )
    .unwrap();
    let vars = [
        ("PGHOST", "env-host".to_string()),
        ("PGUSER", "env-user".to_string()),
        ("PGSYSCONFDIR", "/nonexistent".to_string()),
    ];
    let (c, _) = conn("service=bench port=7000", &vars, home.path()).unwrap();
    assert_eq!(
        crate::pg::redacted(&c),
        "host=svc-host port=7000 user=env-user dbname=svc-db"
    );
    let mut with_env = vars.to_vec();
    with_env.push(("PGSERVICE", "bench".into()));
    let (c, _) = conn("", &with_env, home.path()).unwrap();
    assert_eq!(
        crate::pg::redacted(&c),
        "host=svc-host port=6000 user=env-user dbname=svc-db"
    );
    let e = conn("service=nope", &vars, home.path()).err().unwrap();
    assert_eq!(
        e,
        format!(
            "service \"nope\" not found in {} or /nonexistent/pg_service.conf",
            home.path().join(".pg_service.conf").display()
        )
    );
}

#[test]
fn the_password_file_gives_each_host_its_line() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("pass");
    std::fs::write(
        &file,
        "h1:5432:db:u:one\n*:5433:*:u:two\nlocalhost:*:*:*:sock\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let vars = [("PGPASSFILE", file.display().to_string())];
    let (c, w) = conn(
        "host=h1,h2,/sock,/other port=5432,5433,5432,5432 user=u dbname=db",
        &vars,
        home.path(),
    )
    .unwrap();
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(
        passwords(&c),
        vec![
            Some("one".into()),
            Some("two".into()),
            Some("sock".into()),
            None
        ]
    );
    // A password given wins: in the DSN, or PGPASSWORD.
    let (c, _) = conn("host=h1 user=u dbname=db password=dsn", &vars, home.path()).unwrap();
    assert_eq!(passwords(&c), vec![Some("dsn".into())]);
    let mut with_pw = vars.to_vec();
    with_pw.push(("PGPASSWORD", "env".into()));
    let (c, _) = conn("host=h1 user=u dbname=db", &with_pw, home.path()).unwrap();
    assert_eq!(passwords(&c), vec![Some("env".into())]);
    // `passfile=` names the file too.
    let (c, _) = conn(
        &format!("host=h1 user=u dbname=db passfile={}", file.display()),
        &[],
        home.path(),
    )
    .unwrap();
    assert_eq!(passwords(&c), vec![Some("one".into())]);
    // Group-readable: ignored, with the warning.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (c, w) = conn("host=h1 user=u dbname=db", &vars, home.path()).unwrap();
    assert_eq!(passwords(&c), vec![None]);
    assert_eq!(
        w,
        vec![format!(
            "password file {} ignored: mode 0644, must be 0600 or stricter (libpq's rule)",
            file.display()
        )]
    );
    // ~/.pgpass by default.
    std::fs::rename(&file, home.path().join(".pgpass")).unwrap();
    let (_, w) = conn("host=h1 user=u dbname=db", &[], home.path()).unwrap();
    assert_eq!(
        w,
        vec![
            "password file ~/.pgpass ignored: mode 0644, must be 0600 or stricter (libpq's rule)"
                .to_string()
        ]
    );
}

#[test]
fn a_missing_password_says_where_it_was_looked_for() {
    let home = tempfile::tempdir().unwrap();
    let searched =
        "looked for a password in the connection string, in PGPASSWORD and in the password file: ";
    let hint = |dsn: &str, vars: &[(&'static str, String)]| {
        conn(dsn, vars, home.path()).unwrap().0.password_hint()
    };
    let pgpass = home.path().join(".pgpass");
    assert_eq!(
        hint("host=h1 user=u dbname=db", &[]),
        Some(format!(
            "{searched}~/.pgpass ({}) does not exist",
            pgpass.display()
        ))
    );
    std::fs::write(&pgpass, "h1:5432:db:u:one\n").unwrap();
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Two hosts without a line say so once each; the one with a line says nothing.
    assert_eq!(
        hint("host=h1,h2,h3 port=5432,5433,5433 user=u dbname=db", &[]),
        Some(format!(
            "{searched}~/.pgpass ({0}) has no line for h2:5433:db:u; {searched}~/.pgpass ({0}) has no line for h3:5433:db:u",
            pgpass.display()
        ))
    );
    assert_eq!(hint("host=h1 user=u dbname=db", &[]), None);
    assert_eq!(hint("host=h2 user=u dbname=db password=x", &[]), None);
    let named = home.path().join("other");
    let vars = [("PGPASSFILE", named.display().to_string())];
    assert_eq!(
        hint("host=h1 user=u dbname=db", &vars),
        Some(format!("{searched}{} does not exist", named.display()))
    );
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(
        hint("host=h1 user=u dbname=db", &[]),
        Some(format!(
            "{searched}~/.pgpass ({}) was ignored (the warning says why)",
            pgpass.display()
        ))
    );
}

#[test]
fn tls_settings_from_the_environment_and_their_checks() {
    let home = tempfile::tempdir().unwrap();
    let (c, _) = conn("host=db", &[("PGSSLMODE", "allow".into())], home.path()).unwrap();
    assert_eq!(c.targets()[0].attempts(), &[Attempt::Plain, Attempt::Tls]);
    assert_eq!(
        crate::pg::redacted(&c),
        "host=db port=5432 user=os dbname=os sslmode=allow"
    );
    let e = conn("host=db sslmode=verify-ca", &[], home.path())
        .err()
        .unwrap();
    assert!(
        e.starts_with(&format!(
            "root certificate file {} does not exist",
            home.path().join(".postgresql/root.crt").display()
        )),
        "{e}"
    );
    let e = conn("host=db sslmode=on", &[], home.path()).err().unwrap();
    assert_eq!(e, "invalid sslmode value: \"on\"");
    let e = conn("host=db sslnegotiation=direct", &[], home.path())
        .err()
        .unwrap();
    assert_eq!(e, "sslnegotiation=direct is not supported (only postgres)");
    let e = conn("host=a,b hostaddr=1.2.3.4", &[], home.path())
        .err()
        .unwrap();
    assert_eq!(e, "could not match 2 host names to 1 hostaddr values");
}
