//! The password file, by libpq's rules (PostgreSQL docs, "The Password File"):
//! `passfile=` or `PGPASSFILE`, else `~/.pgpass`; one entry a line,
//! `hostname:port:database:username:password`; `*` matches anything in the first
//! four fields; `\:` and `\\` stand for `:` and `\`; lines starting with `#` and
//! blank lines are skipped; the first matching line wins. A file readable or
//! writable by group or others (mode not 0600 or stricter), or not a plain file, is
//! ignored with a warning. It is read only when no password was given (`password=`
//! or `PGPASSWORD` win).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// What one connection attempt is matched on.
#[derive(Clone, Copy, Debug)]
pub struct Want<'a> {
    /// `host` (a Unix socket directory as its path), else `hostaddr`; `localhost`
    /// when neither was given or the host is the default socket directory.
    pub host: &'a str,
    /// The port, `5432` when not given.
    pub port: &'a str,
    /// The database name.
    pub database: &'a str,
    /// The user name.
    pub user: &'a str,
}

/// The password of the first line of `text` that matches `want`.
pub fn find(text: &str, want: Want) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.trim_end_matches('\r');
        if line.starts_with('#') || line.trim().is_empty() {
            return None;
        }
        let fields = split(line)?;
        let matches = |field: &Field, value: &str| field.any || field.text == value;
        (matches(&fields[0], want.host)
            && matches(&fields[1], want.port)
            && matches(&fields[2], want.database)
            && matches(&fields[3], want.user))
        .then(|| fields[4].text.clone())
    })
}

/// One field of a line, unescaped; `any` when it is a bare `*`.
struct Field {
    text: String,
    any: bool,
}

/// The five fields of a line (the password is the rest of the line, `:` included);
/// `None` when it has fewer than five.
fn split(line: &str) -> Option<[Field; 5]> {
    let mut fields = Vec::with_capacity(5);
    let mut cur = String::new();
    let mut escaped_star = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let next = chars.next()?;
                escaped_star |= next == '*' && cur.is_empty();
                cur.push(next);
            }
            ':' if fields.len() < 4 => {
                fields.push(Field {
                    any: cur == "*" && !escaped_star,
                    text: std::mem::take(&mut cur),
                });
                escaped_star = false;
            }
            c => cur.push(c),
        }
    }
    if fields.len() < 4 {
        return None;
    }
    fields.push(Field {
        text: cur,
        any: false,
    });
    fields.try_into().ok()
}

/// Reads the password file at `path` for `want`. `Ok(None)`: no file or no
/// matching line. `Err`: the warning to print, the file being ignored (its mode
/// lets group or others in, it is not a plain file, or it cannot be read); `shown`
/// is the path as the warning names it (e.g. `~/.pgpass`).
pub fn lookup(path: &Path, shown: &str, want: Want) -> Result<Option<String>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("password file {shown} ignored: {e}")),
    };
    if !meta.is_file() {
        return Err(format!(
            "password file {shown} ignored: not a plain file (libpq's rule)"
        ));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "password file {shown} ignored: mode {mode:04o}, must be 0600 or stricter (libpq's rule)"
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("password file {shown} ignored: {e}"))?;
    Ok(find(&text, want))
}

#[cfg(test)]
mod tests {
    use super::*;

    const WANT: Want = Want {
        host: "db1",
        port: "5432",
        database: "bench",
        user: "alice",
    };

    #[test]
    fn the_first_matching_line_wins_with_wildcards() {
        let text = "# comment\n\
                    \n\
                    db2:*:*:alice:wrong-host\n\
                    db1:5433:*:alice:wrong-port\n\
                    db1:5432:bench:bob:wrong-user\n\
                    *:5432:*:alice:first\n\
                    db1:5432:bench:alice:second\n";
        assert_eq!(find(text, WANT).as_deref(), Some("first"));
        assert_eq!(
            find(
                text,
                Want {
                    user: "carol",
                    ..WANT
                }
            )
            .as_deref(),
            None
        );
    }

    #[test]
    fn escapes_and_colons_in_the_password() {
        let text = "db\\:1:5432:b\\\\x:alice:pa:ss\\\\w\\:d\r\n";
        let want = Want {
            host: "db:1",
            database: "b\\x",
            ..WANT
        };
        assert_eq!(find(text, want).as_deref(), Some("pa:ss\\w:d"));
        // An escaped `*` is a literal star, not a wildcard.
        let text = "\\*:*:*:*:literal\n*:*:*:*:any\n";
        assert_eq!(find(text, WANT).as_deref(), Some("any"));
        assert_eq!(
            find(text, Want { host: "*", ..WANT }).as_deref(),
            Some("literal")
        );
        // Fewer than five fields: skipped.
        assert_eq!(find("db1:5432:bench:alice\n", WANT), None);
        // An empty password field is a password of "".
        assert_eq!(find("*:*:*:*:\n", WANT).as_deref(), Some(""));
    }

    #[test]
    fn a_file_open_to_group_or_others_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:secret\n").unwrap();
        let set = |m| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
        set(0o600);
        assert_eq!(lookup(&path, "~/.pgpass", WANT), Ok(Some("secret".into())));
        set(0o400);
        assert_eq!(lookup(&path, "~/.pgpass", WANT), Ok(Some("secret".into())));
        set(0o644);
        assert_eq!(
            lookup(&path, "~/.pgpass", WANT),
            Err("password file ~/.pgpass ignored: mode 0644, must be 0600 or stricter (libpq's rule)".into())
        );
        set(0o610);
        assert!(lookup(&path, "x", WANT).is_err());
        assert_eq!(lookup(&dir.path().join("none"), "x", WANT), Ok(None));
        assert_eq!(
            lookup(dir.path(), "d", WANT),
            Err("password file d ignored: not a plain file (libpq's rule)".into())
        );
    }
}
