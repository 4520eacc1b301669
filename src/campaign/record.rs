//! The campaign file the listener keeps (`<data-dir>/campaigns/<name>.campaign`):
//! JSON lines a person can read, each prefixed by the CRC-32 (IEEE, as `crc32fast`
//! computes it) of its JSON text as 8 hex digits and a space. The first line is the
//! [`Definition`], every later line one [`Event`]. The listener appends one line and
//! `fdatasync`s it before it answers, so a crash can only leave a torn last line,
//! which [`scan`] reports and the listener cuts off; a bad line before the last is
//! damage and the campaign is refused.

use super::{Definition, Event};
use serde::Serialize;

/// One line: `crc32 json\n`.
pub fn line<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).expect("campaign records serialize");
    format!("{:08x} {json}\n", crc32fast::hash(json.as_bytes()))
}

/// What [`scan`] read.
#[derive(Clone, Debug, PartialEq)]
pub struct Scanned {
    /// The first line.
    pub definition: Definition,
    /// The later lines.
    pub events: Vec<Event>,
    /// Bytes of whole, sound lines; the file is cut here when `torn` is set.
    pub valid_len: usize,
    /// What is wrong with the last line, when it is torn.
    pub torn: Option<String>,
}

/// Reads a campaign file.
///
/// Errors: the first line is not a sound definition, or a line before the last is
/// torn, fails its CRC or does not decode (the text names the line).
pub fn scan(bytes: &[u8]) -> Result<Scanned, String> {
    let mut definition = None;
    let mut events = Vec::new();
    let mut at = 0;
    let mut n = 0;
    while at < bytes.len() {
        n += 1;
        let rest = &bytes[at..];
        let end = rest.iter().position(|&b| b == b'\n');
        let parsed = match end {
            Some(e) => parse(&rest[..e], definition.is_none()),
            None => Err("no line end".to_string()),
        };
        match parsed {
            Ok(Parsed::Definition(d)) => definition = Some(*d),
            Ok(Parsed::Event(e)) => events.push(*e),
            Err(why) => {
                let last = end.is_none_or(|e| at + e + 1 == bytes.len());
                if !last || definition.is_none() {
                    return Err(format!("campaign file damaged at line {n}: {why}"));
                }
                return Ok(Scanned {
                    definition: definition.expect("checked"),
                    events,
                    valid_len: at,
                    torn: Some(format!("line {n}: {why}")),
                });
            }
        }
        at += end.expect("parsed lines end") + 1;
    }
    Ok(Scanned {
        definition: definition.ok_or("campaign file is empty")?,
        events,
        valid_len: at,
        torn: None,
    })
}

enum Parsed {
    Definition(Box<Definition>),
    Event(Box<Event>),
}

fn parse(line: &[u8], first: bool) -> Result<Parsed, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not UTF-8".to_string())?;
    let (crc, json) = text.split_once(' ').ok_or("no CRC")?;
    let want = u32::from_str_radix(crc, 16).map_err(|_| format!("bad CRC field {crc:?}"))?;
    if crc.len() != 8 || crc32fast::hash(json.as_bytes()) != want {
        return Err("CRC mismatch".into());
    }
    let e = |e: serde_json::Error| e.to_string();
    Ok(if first {
        Parsed::Definition(Box::new(serde_json::from_str(json).map_err(e)?))
    } else {
        Parsed::Event(Box::new(serde_json::from_str(json).map_err(e)?))
    })
}
