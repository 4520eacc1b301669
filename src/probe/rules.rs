//! The warnings a probe's facts raise: pure rules over [`Probe`]'s layers, leaves
//! and environment, each with a stable id ([`WarningId`]) and one line of text.
//! Warnings never fail a run; `docs/probe.md` says what to do about each.

use super::flush::WriteCache;
use super::{mountinfo, sysfs, Layer, Probe, Warning, WarningId};

/// Every warning `p` raises, in the order of the rules below, each (id, subject) once.
pub fn warnings(p: &Probe) -> Vec<Warning> {
    let mut w = Vec::new();
    let mut add = |id: WarningId, message: String| {
        let x = Warning { id, message };
        if !w.contains(&x) {
            w.push(x);
        }
    };
    for l in &p.layers {
        super::volatile::warnings(l, &mut add);
        layer_warnings(l, &mut add);
    }
    for d in &p.leaves {
        if let (Some(ct), Some(wc)) = (&d.cache_type, &d.write_cache) {
            let kernel_wb = *wc == WriteCache::WriteBack;
            if sysfs::cache_type_is_write_back(ct) != kernel_wb {
                add(
                    WarningId::KernelCacheViewOverridden,
                    format!(
                        "{}: the device reports cache type \"{ct}\" but the kernel treats its cache as \"{wc}\" (queue/write_cache was overridden)",
                        d.name
                    ),
                );
            }
        }
    }
    let env = &p.environment;
    if !env.eatmydata_in.is_empty() {
        add(
            WarningId::Eatmydata,
            format!(
                "libeatmydata is preloaded ({}): fsync and fdatasync return at once without writing anything",
                env.eatmydata_in.join(", ")
            ),
        );
    }
    if let Some(v) = env.virtualization.as_deref().filter(|v| *v != "none") {
        let inside = container(p)
            .map(|c| format!(" (inside a {c} container)"))
            .unwrap_or_default();
        add(
            WarningId::Virtualized,
            format!(
                "running under {v}{inside}: the host's cache mode decides whether a flush reaches a disk"
            ),
        );
    }
    w
}

/// The container the probe runs in, if any (`Environment::container` other than
/// `none`).
fn container(p: &Probe) -> Option<&str> {
    p.environment.container.as_deref().filter(|c| *c != "none")
}

/// The note for a container on bare metal (no VM under it): it raises no warning,
/// since a container has no cache mode of its own. `None` otherwise (no container,
/// or a VM under it: then the `virtualized` warning speaks of the VM).
///
/// ```
/// use plugpull::probe::{rules::container_note, Environment, Probe};
/// let mut p = Probe::default();
/// p.environment = Environment { virtualization: Some("none".into()), container: Some("docker".into()), ..Environment::default() };
/// assert_eq!(container_note(&p).unwrap(), "running in a docker container on bare metal: a container has no cache mode of its own, flushes go to this machine's disks");
/// ```
pub fn container_note(p: &Probe) -> Option<String> {
    let c = container(p)?;
    (p.environment.virtualization.as_deref() == Some("none")).then(|| {
        format!("running in a {c} container on bare metal: a container has no cache mode of its own, flushes go to this machine's disks")
    })
}

fn layer_warnings(l: &Layer, add: &mut impl FnMut(WarningId, String)) {
    match l {
        Layer::Mount {
            mountpoint,
            fstype,
            options,
            ..
        } => {
            let f = mountinfo::flags(options);
            if f.barrier == Some(false) {
                add(
                    WarningId::Nobarrier,
                    format!("{fstype} at {mountpoint} is mounted without barriers: it sends no cache flushes, so a volatile write cache can lose fsynced data"),
                );
            }
            if f.data_mode.as_deref() == Some("writeback") {
                add(
                    WarningId::DataWriteback,
                    format!("{fstype} at {mountpoint} is mounted data=writeback: after a crash, files may hold stale data in blocks written before the cut"),
                );
            }
        }
        Layer::Dm {
            name,
            dm_name,
            cache_mode: Some(m),
            ..
        } if m == "writeback" => add(
            WarningId::DmWritebackCache,
            format!("{name} ({dm_name}) caches writes in writeback mode: acknowledged data lives on the cache device until destaged"),
        ),
        Layer::Bcache { name, cache_mode } if cache_mode == "writeback" => add(
            WarningId::BcacheWriteback,
            format!("{name} is in writeback mode: acknowledged data lives on the cache device until destaged"),
        ),
        Layer::Zfs {
            dataset,
            sync: Some(s),
            ..
        } if s == "disabled" => add(
            WarningId::ZfsSyncDisabled,
            format!("ZFS dataset {dataset} has sync=disabled: fsync returns without writing to stable storage"),
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{Environment, Leaf};

    fn ids(p: &Probe) -> Vec<WarningId> {
        warnings(p).into_iter().map(|w| w.id).collect()
    }

    fn mount(options: &[&str]) -> Probe {
        Probe {
            layers: vec![Layer::Mount {
                source: "/dev/loop0".into(),
                fstype: "ext4".into(),
                mountpoint: "/mnt/x".into(),
                options: options.iter().map(|s| s.to_string()).collect(),
            }],
            ..Probe::default()
        }
    }

    #[test]
    fn nobarrier() {
        assert_eq!(ids(&mount(&["rw", "nobarrier"])), [WarningId::Nobarrier]);
        assert_eq!(ids(&mount(&["rw", "barrier=0"])), [WarningId::Nobarrier]);
        assert_eq!(ids(&mount(&["rw", "barrier=0", "barrier=1"])), []);
        assert_eq!(ids(&mount(&["rw", "relatime"])), []);
    }

    #[test]
    fn data_writeback() {
        assert_eq!(ids(&mount(&["data=writeback"])), [WarningId::DataWriteback]);
        assert_eq!(ids(&mount(&["data=ordered"])), []);
    }

    #[test]
    fn kernel_cache_view_overridden() {
        let leaf = |ct: &str, wc: &str| Probe {
            leaves: vec![Leaf {
                name: "sda".into(),
                cache_type: Some(ct.into()),
                write_cache: WriteCache::parse(wc),
                ..Leaf::default()
            }],
            ..Probe::default()
        };
        let o = [WarningId::KernelCacheViewOverridden];
        assert_eq!(ids(&leaf("write back", "write through")), o);
        assert_eq!(ids(&leaf("write through", "write back")), o);
        assert_eq!(ids(&leaf("write back, no read (daxon)", "write back")), []);
        assert_eq!(ids(&leaf("none", "write through")), []);
    }

    #[test]
    fn dm_writeback_cache() {
        let dm = |mode: Option<&str>| Probe {
            layers: vec![Layer::Dm {
                name: "dm-0".into(),
                dm_name: "fast".into(),
                targets: vec!["cache".into()],
                cache_mode: mode.map(String::from),
            }],
            ..Probe::default()
        };
        assert_eq!(ids(&dm(Some("writeback"))), [WarningId::DmWritebackCache]);
        assert_eq!(ids(&dm(Some("writethrough"))), []);
        assert_eq!(ids(&dm(None)), []);
    }

    #[test]
    fn bcache_writeback() {
        let b = |m: &str| Probe {
            layers: vec![Layer::Bcache {
                name: "bcache0".into(),
                cache_mode: m.into(),
            }],
            ..Probe::default()
        };
        assert_eq!(ids(&b("writeback")), [WarningId::BcacheWriteback]);
        assert_eq!(ids(&b("writethrough")), []);
    }

    #[test]
    fn zfs_sync_disabled() {
        let z = |s: Option<&str>| Probe {
            layers: vec![Layer::Zfs {
                dataset: "tank/db".into(),
                sync: s.map(String::from),
                logbias: None,
            }],
            ..Probe::default()
        };
        assert_eq!(ids(&z(Some("disabled"))), [WarningId::ZfsSyncDisabled]);
        assert_eq!(ids(&z(Some("standard"))), []);
        assert_eq!(ids(&z(None)), []);
    }

    fn env(v: Option<&str>, c: Option<&str>) -> Probe {
        Probe {
            environment: Environment {
                virtualization: v.map(String::from),
                container: c.map(String::from),
                ..Environment::default()
            },
            ..Probe::default()
        }
    }

    #[test]
    fn a_container_warns_of_the_vm_under_it_and_on_bare_metal_is_a_note() {
        let tail = "the host's cache mode decides whether a flush reaches a disk";
        let w = warnings(&env(Some("kvm"), Some("docker")));
        assert_eq!(
            w,
            [Warning {
                id: WarningId::Virtualized,
                message: format!("running under kvm (inside a docker container): {tail}"),
            }]
        );
        assert_eq!(container_note(&env(Some("kvm"), Some("docker"))), None);
        let w = warnings(&env(Some("kvm"), Some("none")));
        assert_eq!(w[0].message, format!("running under kvm: {tail}"));
        let bare = env(Some("none"), Some("lxc"));
        assert_eq!(ids(&bare), []);
        assert_eq!(
            container_note(&bare).as_deref(),
            Some("running in a lxc container on bare metal: a container has no cache mode of its own, flushes go to this machine's disks")
        );
        assert_eq!(container_note(&env(Some("none"), Some("none"))), None);
        assert_eq!(container_note(&env(None, Some("docker"))), None);
    }

    #[test]
    fn eatmydata_and_virtualized() {
        let e = |pre: &[&str], v: Option<&str>| Probe {
            environment: Environment {
                virtualization: v.map(String::from),
                eatmydata_in: pre.iter().map(|s| s.to_string()).collect(),
                ..Environment::default()
            },
            ..Probe::default()
        };
        assert_eq!(
            ids(&e(&["LD_PRELOAD"], Some("none"))),
            [WarningId::Eatmydata]
        );
        assert_eq!(ids(&e(&[], Some("kvm"))), [WarningId::Virtualized]);
        assert_eq!(ids(&e(&[], None)), []);
        assert_eq!(
            WarningId::KernelCacheViewOverridden.as_str(),
            "kernel-cache-view-overridden"
        );
    }
}
