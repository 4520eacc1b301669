//! libpq's two connection-string forms read into keyword/value pairs (PostgreSQL
//! docs, "Connection Strings"): `host=/tmp dbname='my db'` (values unquoted or in
//! single quotes, `\'` and `\\` escapes) and
//! `postgresql://user:pw@host1:5432,host2/db?sslmode=require` (percent-encoded,
//! several hosts, `[::1]`). Both give the same [`Keywords`]; a later value of a key
//! wins. Also the text forms plugpull prints: [`redact_dsn`] and [`quote`].

use std::collections::BTreeMap;

/// Connection keywords and their values, by libpq's keyword names.
pub type Keywords = BTreeMap<String, String>;

/// The libpq keywords plugpull reads (tokio-postgres's, plus `service`, `passfile`
/// and the certificate files); any other is an error, as in libpq.
const KNOWN: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "service",
    "options",
    "application_name",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "load_balance_hosts",
    "channel_binding",
    "sslmode",
    "sslnegotiation",
    "sslrootcert",
    "sslcert",
    "sslkey",
];

/// Whether `key` is a keyword plugpull reads.
pub fn is_known(key: &str) -> bool {
    KNOWN.contains(&key)
}

/// Parses a conninfo string or a `postgresql://` / `postgres://` URL. `Err` names
/// what is wrong (never with a value, which may be a password).
pub fn parse(dsn: &str) -> Result<Keywords, String> {
    let dsn = dsn.trim();
    let keys = match dsn
        .strip_prefix("postgresql://")
        .or_else(|| dsn.strip_prefix("postgres://"))
    {
        Some(rest) => parse_url(rest)?,
        None => parse_kv(dsn)?,
    };
    if let Some(k) = keys.keys().find(|k| !is_known(k)) {
        return Err(format!("invalid connection option {k:?}"));
    }
    Ok(keys)
}

/// The `key=value …` form.
fn parse_kv(s: &str) -> Result<Keywords, String> {
    let mut keys = Keywords::new();
    let mut it = s.chars().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::Chars>| {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
    };
    loop {
        skip_ws(&mut it);
        if it.peek().is_none() {
            return Ok(keys);
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        skip_ws(&mut it);
        if it.next() != Some('=') {
            return Err(format!("missing \"=\" after {key:?}"));
        }
        skip_ws(&mut it);
        let mut value = String::new();
        if it.peek() == Some(&'\'') {
            it.next();
            loop {
                match it.next() {
                    None => return Err(format!("unterminated quoted value of {key:?}")),
                    Some('\'') => break,
                    Some('\\') => value.extend(it.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                it.next();
                if c == '\\' {
                    value.extend(it.next());
                } else {
                    value.push(c);
                }
            }
        }
        keys.insert(key, value);
    }
}

/// The URL form after its scheme: `[user[:password]@][host[:port][,…]][/dbname][?k=v&…]`.
fn parse_url(rest: &str) -> Result<Keywords, String> {
    let mut keys = Keywords::new();
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (before_query, None),
    };
    let hostspec = match authority.split_once('@') {
        Some((userinfo, hosts)) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                keys.insert("user".into(), decode(user)?);
            }
            if let Some(p) = password {
                keys.insert("password".into(), decode(p)?);
            }
            hosts
        }
        None => authority,
    };
    let (mut hosts, mut ports) = (Vec::new(), Vec::new());
    for spec in hostspec.split(',') {
        let (host, port) = if let Some(v6) = spec.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or("unterminated IPv6 address in the URL")?;
            (h, after.strip_prefix(':').unwrap_or(""))
        } else {
            spec.split_once(':').unwrap_or((spec, ""))
        };
        hosts.push(decode(host)?);
        ports.push(decode(port)?);
    }
    if hosts.iter().any(|h| !h.is_empty()) {
        keys.insert("host".into(), hosts.join(","));
    }
    if ports.iter().any(|p| !p.is_empty()) {
        keys.insert("port".into(), ports.join(","));
    }
    if let Some(db) = path.filter(|p| !p.is_empty()) {
        keys.insert("dbname".into(), decode(db)?);
    }
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("missing \"=\" in URL parameter {pair:?}"))?;
        let (k, v) = (decode(k)?, decode(v)?);
        // libpq's alias: `ssl=true` is `sslmode=require`.
        if k == "ssl" && v == "true" {
            keys.insert("sslmode".into(), "require".into());
        } else {
            keys.insert(k, v);
        }
    }
    Ok(keys)
}

/// Percent-decoding (`%2F` → `/`); `+` stays `+`, as in libpq.
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("invalid percent-encoded token in the URL")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URL decodes to invalid UTF-8".to_string())
}

/// `dsn` as text safe to print: a URL's `user:password@` loses its password (up to
/// the last `@`), and in
/// the key=value form every `password` value (quoted or not) becomes `***`
/// (libpq's syntax, PostgreSQL docs "Connection Strings"). Used where the DSN could
/// not be parsed, so [`super::redacted`] cannot be.
pub fn redact_dsn(dsn: &str) -> String {
    if let Some(scheme_end) = dsn.find("://") {
        let rest = &dsn[scheme_end + 3..];
        // The last `@`: a password may hold `/`, `?` or `@` in a malformed URL (this
        // may hide more than the password, never less).
        if let Some(at) = rest.rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                return format!(
                    "{}{}:***{}",
                    &dsn[..scheme_end + 3],
                    &rest[..colon],
                    &rest[at..]
                );
            }
        }
        // A password in the query (`?password=…`).
        if let Some(q) = dsn.find('?') {
            let (head, query) = dsn.split_at(q + 1);
            let parts: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some(("password", _)) => "password=***".to_string(),
                    _ => p.to_string(),
                })
                .collect();
            return format!("{head}{}", parts.join("&"));
        }
        return dsn.to_string();
    }
    let mut out = String::new();
    let mut rest = dsn;
    while let Some(i) = rest.find("password") {
        let (head, tail) = rest.split_at(i + "password".len());
        out.push_str(head);
        let after = tail.trim_start();
        if !after.starts_with('=') {
            rest = tail;
            continue;
        }
        let value = after[1..].trim_start();
        let len = if let Some(q) = value.strip_prefix('\'') {
            let mut end = q.len();
            let mut esc = false;
            for (k, c) in q.char_indices() {
                match c {
                    '\\' if !esc => esc = true,
                    '\'' if !esc => {
                        end = k + 1;
                        break;
                    }
                    _ => esc = false,
                }
            }
            1 + end
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        out.push_str("=***");
        rest = &value[len.min(value.len())..];
    }
    out.push_str(rest);
    out
}

/// Quotes a conninfo value when it needs it (empty, spaces, quotes, backslashes).
pub fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '\'', '\\']) {
        return v.to_string();
    }
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `keys` as one conninfo string (`key=value …`, values quoted where needed).
pub fn to_conninfo<'a>(keys: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    keys.into_iter()
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(pairs: &[(&str, &str)]) -> Keywords {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_keyword_form_with_quotes_escapes_and_spaces() {
        assert_eq!(
            parse(r"host=/tmp  port = 5433 dbname='my \'db\'' password=a\ b sslmode=verify-full")
                .unwrap(),
            kv(&[
                ("host", "/tmp"),
                ("port", "5433"),
                ("dbname", "my 'db'"),
                ("password", "a b"),
                ("sslmode", "verify-full"),
            ])
        );
        assert_eq!(parse("").unwrap(), Keywords::new());
        assert_eq!(parse("dbname=a dbname=b").unwrap(), kv(&[("dbname", "b")]));
        assert_eq!(parse("host").unwrap_err(), "missing \"=\" after \"host\"");
        assert_eq!(
            parse("password='x").unwrap_err(),
            "unterminated quoted value of \"password\""
        );
        assert_eq!(
            parse("hots=x").unwrap_err(),
            "invalid connection option \"hots\""
        );
    }

    #[test]
    fn the_url_form() {
        assert_eq!(
            parse("postgresql://u%40x:p%3Aw@h1:5433,[::1]:5434,h3/my%20db?sslmode=verify-ca&sslrootcert=%2Fca.crt")
                .unwrap(),
            kv(&[
                ("user", "u@x"),
                ("password", "p:w"),
                ("host", "h1,::1,h3"),
                ("port", "5433,5434,"),
                ("dbname", "my db"),
                ("sslmode", "verify-ca"),
                ("sslrootcert", "/ca.crt"),
            ])
        );
        assert_eq!(
            parse("postgres://%2Fvar%2Frun%2Fpostgresql/db?ssl=true&service=s").unwrap(),
            kv(&[
                ("host", "/var/run/postgresql"),
                ("dbname", "db"),
                ("sslmode", "require"),
                ("service", "s"),
            ])
        );
        assert_eq!(parse("postgresql://").unwrap(), Keywords::new());
        assert_eq!(
            parse("postgresql://h/db?x=1").unwrap_err(),
            "invalid connection option \"x\""
        );
        assert_eq!(
            parse("postgresql://h/d%zz").unwrap_err(),
            "invalid percent-encoded token in the URL"
        );
    }

    #[test]
    fn a_dsn_that_cannot_be_parsed_is_printed_without_its_password() {
        assert_eq!(
            redact_dsn("host=/tmp password=hunter2 dbname='bench"),
            "host=/tmp password=*** dbname='bench"
        );
        assert_eq!(
            redact_dsn("password = 'a b\\' c' port=x"),
            "password=*** port=x"
        );
        assert_eq!(
            redact_dsn("postgresql://u:hun/ter@h:99999/db"),
            "postgresql://u:***@h:99999/db"
        );
        assert_eq!(
            redact_dsn("postgresql://h/db?sslmode=x&password=hunter2"),
            "postgresql://h/db?sslmode=x&password=***"
        );
        assert_eq!(redact_dsn("postgresql://u@h/db"), "postgresql://u@h/db");
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it\\'s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("plain"), "plain");
    }
}
