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

/// Parses a duration such as `30s`, `5m` or `1h`; a bare number means seconds.
///
/// Errors: a message naming the text that is not a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.trim().parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}); try 30s or 5m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").unwrap_err().contains("\"lots\""));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
    }
}
