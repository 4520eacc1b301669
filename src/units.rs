//! Parsing of the sizes and durations users type on the command line.
//!
//! Sizes use the `parse-size` crate (`4096`, `64MiB`, `1GiB`, `10MB`: binary
//! suffixes are powers of 1024, decimal ones powers of 1000); durations use
//! `humantime` (`30s`, `5m`, `1h 30m`).

use std::time::Duration;

/// Parses a size in bytes such as `64MiB` or `4096`.
///
/// Errors: a message naming the text that is not a size.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size::parse_size(s)
        .map_err(|e| format!("{s:?} is not a size ({e}); try 4096, 64MiB or 1GiB"))
}

/// Parses a number of seconds above 0 (`0.5`, `3`, `600`), for timeouts and
/// intervals given as plain seconds.
///
/// Errors: not a finite number above 0, naming the value.
pub fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds above 0")),
    }
}

/// Parses a number of seconds of 0 or more (`0` = at once), for bounds where 0 is a
/// meaningful strictest setting.
///
/// Errors: not a finite number of 0 or more, naming the value.
pub fn non_negative_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds, 0 or more")),
    }
}

/// Formats a byte count the way the command line accepts it (`64 MiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Longest duration [`parse_duration`] accepts: 366 days. Longer is a typo, and
/// "now + duration" would overflow the clock for absurd values.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Parses a duration such as `30s`, `5m` or `1h`; a bare number means seconds.
///
/// Errors: a message naming the text that is not a duration, or one longer than
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim().starts_with('-') {
        return Err(format!(
            "{s:?} is negative: a duration is 0 or more, e.g. 30s or 5m"
        ));
    }
    let d = match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
        }
        _ => humantime::parse_duration(s)
            .map_err(|e| format!("{s:?} is not a duration ({e}); try 30s or 5m"))?,
    };
    if d > MAX_DURATION {
        return Err(format!(
            "{s:?} is longer than {} days, the longest duration accepted",
            MAX_DURATION.as_secs() / 86400
        ));
    }
    Ok(d)
}

/// Checks a `HOST:PORT` address (a name or IPv4 address, or `[IPv6]`, then a port).
///
/// Errors: a message naming what is missing.
pub fn parse_host_port(s: &str) -> Result<String, String> {
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "{s:?} has no port: give HOST:PORT, e.g. witness:7458"
        ));
    };
    if host.is_empty() {
        return Err(format!(
            "{s:?} has no host: give HOST:PORT, e.g. witness:7458"
        ));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(format!(
            "{s:?}: write an IPv6 address in brackets, e.g. [::1]:7458"
        ));
    }
    port.parse::<u16>()
        .map_err(|_| format!("{s:?}: port {port:?} is not a number from 0 to 65535"))?;
    Ok(s.to_string())
}

/// A time given in ms since the Unix epoch as RFC 3339 UTC, to the millisecond
/// (`2026-11-30T17:35:28.123Z`); `"unknown"` for 0.
pub fn utc(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "unknown".into();
    }
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(unix_ms))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_must_be_a_finite_number_above_zero() {
        assert_eq!(positive_secs("0.5"), Ok(0.5));
        assert_eq!(positive_secs("600"), Ok(600.0));
        for bad in ["0", "-1", "inf", "NaN", "soon"] {
            assert_eq!(
                positive_secs(bad),
                Err(format!("{bad:?} is not a number of seconds above 0"))
            );
        }
    }

    #[test]
    fn seconds_may_be_zero_where_zero_means_at_once() {
        assert_eq!(non_negative_secs("0"), Ok(0.0));
        assert_eq!(non_negative_secs("2.5"), Ok(2.5));
        for bad in ["-1", "inf", "NaN", "soon"] {
            assert_eq!(
                non_negative_secs(bad),
                Err(format!("{bad:?} is not a number of seconds, 0 or more"))
            );
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").unwrap_err().contains("\"lots\""));
    }

    #[test]
    fn host_ports() {
        assert_eq!(parse_host_port("witness:7458").unwrap(), "witness:7458");
        assert_eq!(parse_host_port("[::1]:7458").unwrap(), "[::1]:7458");
        assert_eq!(
            parse_host_port("127.0.0.1").unwrap_err(),
            "\"127.0.0.1\" has no port: give HOST:PORT, e.g. witness:7458"
        );
        assert!(parse_host_port(":7458")
            .unwrap_err()
            .contains("has no host"));
        assert!(parse_host_port("h:99999")
            .unwrap_err()
            .contains("port \"99999\""));
        assert!(parse_host_port("::1:7458")
            .unwrap_err()
            .contains("brackets"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
        for negative in ["-1s", " -1", "-0.5"] {
            assert_eq!(
                parse_duration(negative).unwrap_err(),
                format!("{negative:?} is negative: a duration is 0 or more, e.g. 30s or 5m")
            );
        }
        assert_eq!(parse_duration("366d").unwrap(), MAX_DURATION);
        for huge in ["367d", "1e300", "1000000000000s"] {
            assert_eq!(
                parse_duration(huge).unwrap_err(),
                format!("{huge:?} is longer than 366 days, the longest duration accepted")
            );
        }
    }
}
