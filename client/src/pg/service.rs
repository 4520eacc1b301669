//! The connection service file, by libpq's rules (PostgreSQL docs, "The Connection
//! Service File"): a service named by `service=` or `PGSERVICE` is looked up in
//! `PGSERVICEFILE` (else `~/.pg_service.conf`), then in `PGSYSCONFDIR/pg_service.conf`
//! (else Debian's libpq's `/etc/postgresql-common/pg_service.conf`); the first file
//! with a `[name]` section gives its `key=value` lines. `#` starts a comment line.
//! Its keys fill only what the connection string left out.

use super::conninfo::{is_known, Keywords};
use std::path::{Path, PathBuf};

/// The system-wide service file when `PGSYSCONFDIR` is not set: the sysconfdir
/// Debian builds libpq with.
pub const DEFAULT_SYSCONFDIR: &str = "/etc/postgresql-common";

/// The keys of section `[name]` of `text` (a service file at `shown`); `Ok(None)`
/// when there is no such section. `Err`: a line that is not `key=value`, an
/// unknown key, or a nested `service=` (the line is named).
pub fn section(text: &str, name: &str, shown: &str) -> Result<Option<Keywords>, String> {
    let mut found: Option<Keywords> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            if found.is_some() {
                break;
            }
            if header.strip_suffix(']').map(str::trim) == Some(name) {
                found = Some(Keywords::new());
            }
            continue;
        }
        let Some(keys) = found.as_mut() else {
            continue;
        };
        let bad = |why: &str| format!("service file {shown}, line {}: {why}", i + 1);
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| bad("syntax error (not key=value)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k == "service" {
            return Err(bad("nested service specifications are not supported"));
        }
        if !is_known(k) {
            return Err(bad(&format!("invalid connection option {k:?}")));
        }
        keys.entry(k.to_string()).or_insert_with(|| v.to_string());
    }
    Ok(found)
}

/// The service files to search, in order: the user's, then the system's.
/// `var` reads the environment; `home` is the home directory.
pub fn files(var: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Vec<PathBuf> {
    let user = var("PGSERVICEFILE")
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".pg_service.conf")));
    let sys = PathBuf::from(var("PGSYSCONFDIR").unwrap_or_else(|| DEFAULT_SYSCONFDIR.into()))
        .join("pg_service.conf");
    user.into_iter().chain([sys]).collect()
}

/// Looks service `name` up in `files` (see [`files`]). `Err`: not found in any of
/// them (the error names the service and the files), or a file's syntax.
pub fn lookup(name: &str, files: &[PathBuf]) -> Result<Keywords, String> {
    for path in files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read service file {}: {e}", path.display())),
        };
        if let Some(keys) = section(&text, name, &path.display().to_string())? {
            return Ok(keys);
        }
    }
    let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "service {name:?} not found in {}",
        list.join(" or ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# services\n\
                        [other]\n\
                        host=elsewhere\n\
                        \n\
                        [bench]\n\
                        host = db1\n\
                        port=5433\n\
                        # a comment\n\
                        sslmode=verify-full\n\
                        [later]\n\
                        garbage\n";

    #[test]
    fn a_section_gives_its_keys() {
        let keys = section(FILE, "bench", "f").unwrap().unwrap();
        let want: Keywords = [
            ("host", "db1"),
            ("port", "5433"),
            ("sslmode", "verify-full"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(keys, want);
        assert_eq!(section(FILE, "none", "f").unwrap(), None);
        assert_eq!(
            section(FILE, "later", "f").unwrap_err(),
            "service file f, line 11: syntax error (not key=value)"
        );
        assert_eq!(
            section("[s]\nservice=t\n", "s", "f").unwrap_err(),
            "service file f, line 2: nested service specifications are not supported"
        );
        assert_eq!(
            section("[s]\nhots=t\n", "s", "f").unwrap_err(),
            "service file f, line 2: invalid connection option \"hots\""
        );
    }

    #[test]
    fn files_are_searched_in_order_and_a_missing_service_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.conf");
        let sys = dir.path().join("sys");
        std::fs::create_dir(&sys).unwrap();
        std::fs::write(&user, "[a]\nport=1\n").unwrap();
        std::fs::write(sys.join("pg_service.conf"), "[a]\nport=2\n[b]\nport=3\n").unwrap();
        let env = |k: &str| match k {
            "PGSERVICEFILE" => Some(user.display().to_string()),
            "PGSYSCONFDIR" => Some(sys.display().to_string()),
            _ => None,
        };
        let list = files(&env, Some(Path::new("/home/x")));
        assert_eq!(list, vec![user.clone(), sys.join("pg_service.conf")]);
        assert_eq!(lookup("a", &list).unwrap()["port"], "1");
        assert_eq!(lookup("b", &list).unwrap()["port"], "3");
        assert_eq!(
            lookup("c", &list).unwrap_err(),
            format!(
                "service \"c\" not found in {} or {}",
                user.display(),
                sys.join("pg_service.conf").display()
            )
        );
        let none = |_: &str| None;
        assert_eq!(
            files(&none, Some(Path::new("/home/x"))),
            vec![
                PathBuf::from("/home/x/.pg_service.conf"),
                PathBuf::from("/etc/postgresql-common/pg_service.conf")
            ]
        );
    }
}
