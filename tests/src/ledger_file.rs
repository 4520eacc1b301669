//! Reading what the witness tests look at: a ledger file's entries and batches, an
//! agent's ack log and last stderr line, and the `plugpull write file` command line.

use plugpull::ledger::{self, Entry};
use std::collections::BTreeMap;
use std::path::Path;

/// Every valid entry of a ledger file with its byte offset and length.
pub fn entries(path: &Path) -> Vec<(u64, u64, Entry)> {
    let bytes = std::fs::read(path).unwrap();
    let mut v: Vec<(u64, u64, Entry)> = Vec::new();
    let (_, tail) = ledger::scan(&bytes, |at, e| v.push((at, 0, e))).unwrap();
    let end = match tail {
        ledger::Tail::Clean => bytes.len() as u64,
        ledger::Tail::Torn { valid_len, .. } => valid_len,
    };
    for i in 0..v.len() {
        v[i].1 = v.get(i + 1).map_or(end, |n| n.0) - v[i].0;
    }
    v
}

/// Batch number → (times recorded, acks in it) over a ledger file's `Acks` entries.
pub fn batches(path: &Path) -> BTreeMap<u64, (u64, u64)> {
    let mut m = BTreeMap::new();
    for (_, _, e) in entries(path) {
        if let Entry::Acks(b) = e {
            let x = m.entry(b.batch).or_insert((0, 0));
            x.0 += 1;
            x.1 = b.acks.count();
        }
    }
    m
}

/// Every commit the listener confirmed, as (client, seq), from a pgbench run's
/// ledger file; panics when one is there twice.
pub fn pg_commits(path: &Path) -> std::collections::BTreeSet<(u32, u64)> {
    use plugpull::ledger::Acks;
    let mut set = std::collections::BTreeSet::new();
    for (_, _, e) in entries(path) {
        if let Entry::Acks(b) = e {
            if let Acks::Pg(v) = b.acks {
                for r in v {
                    for s in r.first..=r.last {
                        assert!(
                            set.insert((r.client, s)),
                            "client {} seq {s} twice in the ledger",
                            r.client
                        );
                    }
                }
            }
        }
    }
    set
}

/// Lines in a file (an `--ack-log`: one confirmed ack each).
pub fn lines(path: &Path) -> u64 {
    std::fs::read_to_string(path).unwrap().lines().count() as u64
}

/// The last line of a command's output.
pub fn last_line(s: &str) -> &str {
    s.trim_end().lines().last().unwrap_or_default()
}

/// `plugpull write file` arguments for a 1 MiB `target`, reporting to `listener`, then `extra`.
pub fn write_args<'a>(listener: &'a str, target: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "write",
        "file",
        "--listener",
        listener,
        "--size",
        "1MiB",
        "--target",
        target.to_str().unwrap(),
    ];
    v.extend_from_slice(extra);
    v
}
