//! `plugpull probe`'s text output: one line per layer, the leaves' facts on their
//! `disk` line, then the environment, notes and warnings (one line each, by id).

use plugpull::probe::{Layer, Leaf, Probe};
use std::fmt::Write;

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("?".to_string(), |x| x.to_string())
}

fn flag(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "1",
        Some(false) => "0",
        None => "?",
    }
}

/// The `disk` line's facts, e.g. `virtio  write cache: write back, fua: 0, rotational: 1`.
fn leaf_facts(l: &Leaf) -> String {
    let mut s = String::new();
    for (k, v) in [
        ("", &l.transport),
        ("model ", &l.model),
        ("fw ", &l.firmware),
        ("serial ", &l.serial),
        ("wwn ", &l.wwn),
    ] {
        if !v.is_empty() {
            let _ = write!(s, " {k}{v}");
        }
    }
    let _ = write!(
        s,
        "  write cache: {}, fua: {}, rotational: {}, blocks {}/{}",
        opt(&l.write_cache),
        flag(l.fua),
        flag(l.rotational),
        opt(&l.logical_block_size),
        opt(&l.physical_block_size)
    );
    if let Some(c) = &l.cache_type {
        let _ = write!(s, ", cache_type: {c}");
    }
    if let (Some(a), Some(b)) = (l.atomic_write_unit_min, l.atomic_write_unit_max) {
        let _ = write!(s, ", atomic write unit {a}..{b}");
    }
    if let Some(d) = &l.drive_write_cache {
        let _ = write!(s, ", {d}");
    }
    s
}

fn layer_line(p: &Probe, l: &Layer) -> String {
    match l {
        Layer::Mount {
            source,
            fstype,
            mountpoint,
            options,
        } => {
            format!(
                "mount   {source} on {mountpoint} type {fstype} ({})",
                options.join(",")
            )
        }
        Layer::Partition { name, number } => format!("part    {name} (partition {number})"),
        Layer::Dm {
            name,
            dm_name,
            targets,
            cache_mode,
        } => {
            let mode = cache_mode
                .as_ref()
                .map(|m| format!(", cache mode {m}"))
                .unwrap_or_default();
            format!("dm      {name} ({dm_name}) {}{mode}", targets.join(","))
        }
        Layer::Md { name, level } => format!("md      {name} {level}"),
        Layer::Loop {
            name,
            backing_file,
            direct_io,
        } => {
            format!(
                "loop    {name} backing {backing_file} (direct_io {})",
                flag(*direct_io)
            )
        }
        Layer::Bcache { name, cache_mode } => format!("bcache  {name} cache mode {cache_mode}"),
        Layer::Zfs {
            dataset,
            sync,
            logbias,
        } => {
            format!(
                "zfs     {dataset} sync={} logbias={}",
                opt(sync),
                opt(logbias)
            )
        }
        Layer::Disk { name } => {
            let facts = p
                .leaves
                .iter()
                .find(|x| &x.name == name)
                .map(leaf_facts)
                .unwrap_or_default();
            format!("disk    {name}{facts}")
        }
    }
}

/// The whole text report.
pub fn text(p: &Probe) -> String {
    let mut s = format!("stack under test: {}\n", p.target);
    for l in &p.layers {
        let _ = writeln!(s, "  {}", layer_line(p, l));
    }
    let env = &p.environment;
    let _ = writeln!(
        s,
        "virtualization: {}",
        env.virtualization.as_deref().unwrap_or("unknown")
    );
    if !p.notes.is_empty() {
        s.push_str("notes:\n");
        for n in &p.notes {
            let _ = writeln!(s, "  {n}");
        }
    }
    if p.warnings.is_empty() {
        s.push_str("warnings: none\n");
    } else {
        s.push_str("warnings:\n");
        for w in &p.warnings {
            let _ = writeln!(s, "  {}: {}", w.id.as_str(), w.message);
        }
    }
    s
}
