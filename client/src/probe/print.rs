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
            ..
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

/// The timed loop's figures, then one line per leaf disk.
fn flush_lines(s: &mut String, m: &plugpull::probe::flush::FlushMeasurement) {
    let _ = writeln!(
        s,
        "flush accounting: {} fdatasyncs in {:.1} s ({:.1}/s), p50 {:.3} ms, p99 {:.3} ms",
        m.fdatasyncs,
        m.seconds,
        m.rate_per_s,
        m.p50_us as f64 / 1000.0,
        m.p99_us as f64 / 1000.0
    );
    for d in &m.per_disk {
        let flushes = match (d.flushes_delta, d.per_fdatasync) {
            (Some(n), Some(r)) => format!("{n} flushes, {r:.2} per fdatasync"),
            (Some(n), None) => format!("{n} flushes"),
            _ => "flushes not counted".to_string(),
        };
        let _ = writeln!(s, "  {}: {flushes}", d.disk);
    }
    for n in &m.notes {
        let _ = writeln!(s, "  {n}");
    }
}

/// The cut-evidence counters per leaf disk (what a power loss moves), and an NVMe
/// drive's OCP extended SMART counters when it has them.
fn evidence_lines(s: &mut String, e: &plugpull::probe::evidence::Snapshot) {
    let _ = writeln!(
        s,
        "cut evidence: boot {}, up {:.0} s",
        e.boot_id, e.uptime_s
    );
    for d in &e.disks {
        let _ = writeln!(
            s,
            "  {}: unsafe shutdowns {}, power cycles {}, power-off retracts {}",
            d.disk,
            opt(&d.unsafe_shutdowns),
            opt(&d.power_cycles),
            opt(&d.power_off_retracts)
        );
        if let Some(o) = &d.ocp {
            let cap = o.capacitor_health.map_or("?".into(), |h| format!("{h} %"));
            let _ = writeln!(
                s,
                "  {}: OCP log: PLP start count {}, capacitor health {cap}, incomplete shutdowns {}",
                d.disk,
                opt(&o.plp_start_count),
                opt(&o.incomplete_shutdowns)
            );
        }
    }
    for n in &e.notes {
        let _ = writeln!(s, "  {n}");
    }
}

/// `, container: docker` when the probe runs in a container, else nothing.
fn container_suffix(env: &plugpull::probe::Environment) -> String {
    match env.container.as_deref() {
        Some(c) if c != "none" => format!(", container: {c}"),
        _ => String::new(),
    }
}

/// The "PostgreSQL" section: the connection, the settings on two lines, the data
/// directory (the target above, its own stack, or not probed) and the backend.
fn postgres_lines(s: &mut String, p: &Probe, pg: &plugpull::probe::pg::PgProbe) {
    let t = &pg.settings;
    let _ = writeln!(s, "PostgreSQL {}: {}", t.server_version, pg.conninfo);
    let _ = writeln!(
        s,
        "  fsync={} synchronous_commit={} full_page_writes={} wal_sync_method={} data_checksums={}",
        t.fsync, t.synchronous_commit, t.full_page_writes, t.wal_sync_method, t.data_checksums
    );
    let _ = writeln!(
        s,
        "  wal_log_hints={} data_sync_retry={} commit_delay={} synchronous_standby_names='{}'",
        t.wal_log_hints, t.data_sync_retry, t.commit_delay, t.synchronous_standby_names
    );
    match &pg.data_directory_stack {
        Some(d) => {
            let _ = writeln!(s, "  data directory {}:", t.data_directory);
            for l in &d.layers {
                let _ = writeln!(s, "    {}", layer_line(d, l));
            }
        }
        None if p.target == t.data_directory && !p.layers.is_empty() => {
            let _ = writeln!(s, "  data directory {}: the stack above", t.data_directory);
        }
        None => {
            let _ = writeln!(s, "  data directory {}: not probed", t.data_directory);
        }
    }
    if let Some(w) = &pg.wal_stack {
        let _ = writeln!(s, "  WAL directory {} (on its own filesystem):", w.target);
        for l in &w.layers {
            let _ = writeln!(s, "    {}", layer_line(w, l));
        }
    }
    let pid = opt(&pg.backend_pid);
    let maps = match pg.backend_eatmydata {
        Some(true) => "libeatmydata mapped",
        Some(false) => "no libeatmydata",
        None => "not checked",
    };
    let _ = writeln!(s, "  backend PID {pid}: {maps}");
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
        "virtualization: {}{}",
        env.virtualization.as_deref().unwrap_or("unknown"),
        container_suffix(env)
    );
    if let Some(pg) = &p.postgres {
        postgres_lines(&mut s, p, pg);
    }
    if let Some(m) = &p.flush {
        flush_lines(&mut s, m);
    }
    if let Some(e) = &p.evidence {
        evidence_lines(&mut s, e);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use plugpull::probe::{Warning, WarningId};

    #[test]
    fn one_line_per_layer_then_environment_notes_and_warnings() {
        let p = Probe {
            target: "/mnt/x/pp.dat".into(),
            layers: vec![
                Layer::Mount {
                    source: "/dev/loop3".into(),
                    fstype: "ext4".into(),
                    mountpoint: "/mnt/x".into(),
                    options: vec!["rw".into(), "nobarrier".into()],
                },
                Layer::Loop {
                    name: "loop3".into(),
                    backing_file: "/srv/d.img".into(),
                    direct_io: Some(false),
                    backing_fs: Some("ext4".into()),
                },
                Layer::Disk { name: "vda".into() },
            ],
            leaves: vec![Leaf {
                name: "vda".into(),
                transport: "virtio".into(),
                write_cache: Some(plugpull::probe::flush::WriteCache::WriteBack),
                fua: Some(false),
                rotational: Some(true),
                logical_block_size: Some(512),
                physical_block_size: Some(4096),
                ..Leaf::default()
            }],
            notes: vec!["a note".into()],
            warnings: vec![Warning {
                id: WarningId::Nobarrier,
                message: "m".into(),
            }],
            ..Probe::default()
        };
        let want = "stack under test: /mnt/x/pp.dat
  mount   /dev/loop3 on /mnt/x type ext4 (rw,nobarrier)
  loop    loop3 backing /srv/d.img (direct_io 0)
  disk    vda virtio  write cache: write back, fua: 0, rotational: 1, blocks 512/4096
virtualization: unknown
notes:
  a note
warnings:
  nobarrier: m
";
        assert_eq!(text(&p), want);
    }
}

#[cfg(test)]
mod pg_tests {
    use super::*;
    use plugpull::ledger::PgSettings;
    use plugpull::probe::pg::PgProbe;

    fn server(stack: Option<Probe>, eatmydata: Option<bool>) -> PgProbe {
        PgProbe {
            conninfo: "host=/tmp port=5432 user=u dbname=d".into(),
            settings: PgSettings {
                server_version: "15.1".into(),
                fsync: "off".into(),
                synchronous_commit: "local".into(),
                full_page_writes: "on".into(),
                wal_sync_method: "fdatasync".into(),
                data_checksums: "on".into(),
                data_directory: "/srv/pg".into(),
                wal_log_hints: "off".into(),
                data_sync_retry: "off".into(),
                commit_delay: "0".into(),
                synchronous_standby_names: "s1".into(),
            },
            data_directory_stack: stack.map(Box::new),
            backend_pid: Some(77),
            backend_eatmydata: eatmydata,
            server_on_this_host: eatmydata.map(|_| true),
            wal_stack: None,
        }
    }

    fn section(p: &Probe) -> String {
        let mut s = String::new();
        postgres_lines(&mut s, p, p.postgres.as_ref().unwrap());
        s
    }

    #[test]
    fn the_postgres_section_names_settings_data_directory_and_backend() {
        let head = "PostgreSQL 15.1: host=/tmp port=5432 user=u dbname=d
  fsync=off synchronous_commit=local full_page_writes=on wal_sync_method=fdatasync data_checksums=on
  wal_log_hints=off data_sync_retry=off commit_delay=0 synchronous_standby_names='s1'
";
        let stack = Probe {
            target: "/srv/pg".into(),
            layers: vec![Layer::Disk { name: "sdb".into() }],
            ..Probe::default()
        };
        let beside = Probe {
            target: "/mnt/x".into(),
            postgres: Some(server(Some(stack), Some(true))),
            ..Probe::default()
        };
        let want = format!(
            "{head}  data directory /srv/pg:\n    disk    sdb\n  backend PID 77: libeatmydata mapped\n"
        );
        assert_eq!(section(&beside), want);
        let own = Probe {
            target: "/srv/pg".into(),
            layers: vec![Layer::Disk { name: "sdb".into() }],
            postgres: Some(server(None, Some(false))),
            ..Probe::default()
        };
        let want = format!(
            "{head}  data directory /srv/pg: the stack above\n  backend PID 77: no libeatmydata\n"
        );
        assert_eq!(section(&own), want);
        let hidden = Probe {
            target: "/srv/pg".into(),
            postgres: Some(server(None, None)),
            ..Probe::default()
        };
        let want =
            format!("{head}  data directory /srv/pg: not probed\n  backend PID 77: not checked\n");
        assert_eq!(section(&hidden), want);
    }
}
