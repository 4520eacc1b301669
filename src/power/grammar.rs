//! The URI pieces: `[USER@]HOST[:PORT]`, `?k=v&flag` and numeric paths.

use std::path::PathBuf;

/// `/N` → `Some(N)`; empty path → `None` when `optional`.
pub(super) fn number(
    scheme: &str,
    what: &str,
    path: &str,
    optional: bool,
) -> Result<Option<u32>, String> {
    let p = path.trim_start_matches('/').trim_end_matches('/');
    if p.is_empty() {
        return if optional {
            Ok(None)
        } else {
            Err(format!("{scheme}: needs the {what} as the path"))
        };
    }
    p.parse()
        .map(Some)
        .map_err(|_| format!("{scheme}: the {what} must be a number, not `{p}`"))
}

/// The schemes whose URI names a local path (`simfs://MOUNTPOINT`, `qemu://DIR`),
/// not a user, host and port: an `@` or `:` in them is part of the path.
const PATH_SCHEMES: [&str; 2] = ["simfs", "qemu"];

/// Splits `USER@` off the front of what follows `://`, before anything else is
/// split, so a secret holding `/`, `?`, `#` or `@` is never taken for a host, port,
/// path or query. The user part runs to the first `@`, unless that `@` lies in a
/// `?...-file=` value (a file path). A `:` in it means a password: refused, and the
/// error quotes nothing of it; so is anything before an `@` for the schemes that
/// take no user (`apc-snmp`: a community), and a user holding `/`, `?` or `#`.
pub(super) fn userinfo<'a>(
    scheme: &str,
    rest: &'a str,
) -> Result<(Option<String>, &'a str), String> {
    let Some(i) = rest.find('@') else {
        return Ok((None, rest));
    };
    let user = &rest[..i];
    if PATH_SCHEMES.contains(&scheme) || user.contains("-file=") {
        return Ok((None, rest));
    }
    match scheme {
        "apc-snmp" => Err(
            "apc-snmp: the community must come from a file, not the URI: apc-snmp://PDU/OUTLET?community-file=F"
                .into(),
        ),
        "tasmota" | "shelly" => Err(format!("{scheme}: takes no user or password")),
        _ if user.contains(':') => Err(format!(
            "{scheme}: a password in the URI is refused: put it in a file and use ?password-file=F"
        )),
        _ if user.contains(['/', '?', '#']) => Err(format!(
            "{scheme}: the user before `@` holds `/`, `?` or `#`: give USER@HOST, the password in a file"
        )),
        _ => Ok((Some(user.to_string()), &rest[i + 1..])),
    }
}

/// `HOST[:PORT]`, HOST possibly `[v6]` (the user already split off by [`userinfo`]).
pub(super) struct Authority {
    pub(super) user: Option<String>,
    pub(super) host: String,
    pub(super) port: Option<u16>,
}

impl Authority {
    pub(super) fn parse(scheme: &str, user: Option<String>, a: &str) -> Result<Authority, String> {
        if PATH_SCHEMES.contains(&scheme) {
            return Ok(Authority {
                user: None,
                host: String::new(),
                port: None,
            });
        }
        let hostport = a;
        if hostport.contains('@') {
            return Err(format!("{scheme}: more than one `@` before the host"));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, tail) = v6
                .split_once(']')
                .ok_or_else(|| format!("{scheme}: unclosed `[` in the host"))?;
            (h, tail.strip_prefix(':'))
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{scheme}: needs a host"));
        }
        let port = match port {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| format!("{scheme}: bad port `{p}`"))?,
            ),
            None => None,
        };
        Ok(Authority {
            user,
            host: host.to_string(),
            port,
        })
    }

    pub(super) fn user_required(&self, scheme: &str) -> Result<String, String> {
        match &self.user {
            Some(u) if !u.is_empty() => Ok(u.clone()),
            _ => Err(format!("{scheme}: needs a user: {scheme}://USER@HOST...")),
        }
    }

    pub(super) fn no_user(self, scheme: &str) -> Result<String, String> {
        match self.user {
            Some(_) => Err(format!("{scheme}: takes no user")),
            None => Ok(self.host),
        }
    }
}

/// `k=v&flag` pairs; every key must be used by the scheme.
#[derive(Default)]
pub(super) struct Query(Vec<(String, Option<String>)>);

impl Query {
    pub(super) fn parse(scheme: &str, q: &str) -> Result<Query, String> {
        let mut out = Vec::new();
        for part in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = match part.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (part.to_string(), None),
            };
            if out.iter().any(|(o, _)| *o == k) {
                return Err(format!("{scheme}: `{k}` given twice"));
            }
            out.push((k, v));
        }
        Ok(Query(out))
    }

    fn take(&mut self, key: &str) -> Option<Option<String>> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }

    pub(super) fn file(&mut self, scheme: &str, key: &str) -> Result<PathBuf, String> {
        match self.take(key) {
            Some(Some(v)) if !v.is_empty() => Ok(v.into()),
            _ => Err(format!(
                "{scheme}: needs ?{key}=FILE (secrets come only from files)"
            )),
        }
    }

    /// `key`'s value (`Some("")` for `key` alone), `None` when not given.
    pub(super) fn text(&mut self, key: &str) -> Option<String> {
        self.take(key).map(Option::unwrap_or_default)
    }

    pub(super) fn flag(&mut self, key: &str) -> bool {
        self.take(key).is_some()
    }

    pub(super) fn int(&mut self, scheme: &str, key: &str) -> Result<Option<i64>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => v
                .as_deref()
                .and_then(|v| v.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("{scheme}: `{key}` must be an integer")),
        }
    }

    pub(super) fn finish(self, scheme: &str) -> Result<(), String> {
        match self.0.first() {
            Some((k, _)) => Err(format!("{scheme}: unknown parameter `{k}`")),
            None => Ok(()),
        }
    }
}
