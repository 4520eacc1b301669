//! The `volatile-memory` rule: the target, or the image under one of its loop
//! devices, lives in RAM — a tmpfs or ramfs mount, a `brd` RAM disk (`/dev/ramN`),
//! a zram device (`/dev/zramN`), or a loop device whose backing file is on tmpfs or
//! ramfs (`Layer::Loop::backing_fs`). A power cut loses all of it, acknowledged or
//! not, so a run there can only "lose" everything. Part of [`super::rules`].

use super::{Layer, WarningId};

/// What kind of RAM device a whole disk's kernel name is: `ramN` is the `brd` RAM
/// disk driver's, `zramN` zram's (the drivers name their disks so).
fn ram_disk(name: &str) -> Option<&'static str> {
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if numbered("ram") {
        Some("a RAM disk (brd)")
    } else if numbered("zram") {
        Some("a compressed RAM disk (zram)")
    } else {
        None
    }
}

/// Whether a filesystem type keeps its files in RAM only (tmpfs, ramfs, devtmpfs).
fn ram_fs(fstype: &str) -> bool {
    matches!(fstype, "tmpfs" | "ramfs" | "devtmpfs")
}

/// The `volatile-memory` warnings of one layer: the target (or a loop device's
/// image) is in RAM.
pub(super) fn warnings(l: &Layer, add: &mut impl FnMut(WarningId, String)) {
    const LOST: &str = "a power cut loses all of it, acknowledged writes included";
    match l {
        Layer::Mount {
            fstype, mountpoint, ..
        } if ram_fs(fstype) => add(
            WarningId::VolatileMemory,
            format!("{fstype} at {mountpoint} is in RAM: {LOST}"),
        ),
        Layer::Loop {
            name,
            backing_file,
            backing_fs: Some(fs),
            ..
        } if ram_fs(fs) => add(
            WarningId::VolatileMemory,
            format!("{name}'s backing file {backing_file} is on {fs}, in RAM: {LOST}"),
        ),
        Layer::Disk { name } => {
            if let Some(kind) = ram_disk(name) {
                add(
                    WarningId::VolatileMemory,
                    format!("{name} is {kind}, in RAM: {LOST}"),
                );
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use crate::probe::{Layer, Probe, WarningId};

    #[test]
    fn volatile_memory_names_the_layer_in_ram() {
        let lost = "a power cut loses all of it, acknowledged writes included";
        let msgs = |layers: Vec<Layer>| {
            let p = Probe {
                layers,
                ..Probe::default()
            };
            let w = crate::probe::rules::warnings(&p);
            assert!(w.iter().all(|w| w.id == WarningId::VolatileMemory), "{w:?}");
            w.into_iter().map(|w| w.message).collect::<Vec<_>>()
        };
        let m = |fstype: &str| Layer::Mount {
            source: "x".into(),
            fstype: fstype.into(),
            mountpoint: "/mnt/r".into(),
            options: vec![],
        };
        let lo = |fs: Option<&str>| Layer::Loop {
            name: "loop0".into(),
            backing_file: "/dev/shm/x".into(),
            direct_io: Some(false),
            backing_fs: fs.map(String::from),
        };
        let disk = |n: &str| Layer::Disk { name: n.into() };
        assert_eq!(
            msgs(vec![m("tmpfs")]),
            [format!("tmpfs at /mnt/r is in RAM: {lost}")]
        );
        assert_eq!(
            msgs(vec![m("ramfs")]),
            [format!("ramfs at /mnt/r is in RAM: {lost}")]
        );
        assert_eq!(
            msgs(vec![m("ext4"), lo(Some("tmpfs"))]),
            [format!(
                "loop0's backing file /dev/shm/x is on tmpfs, in RAM: {lost}"
            )]
        );
        assert_eq!(
            msgs(vec![m("ext4"), disk("ram0")]),
            [format!("ram0 is a RAM disk (brd), in RAM: {lost}")]
        );
        assert_eq!(
            msgs(vec![m("ext4"), disk("zram12")]),
            [format!(
                "zram12 is a compressed RAM disk (zram), in RAM: {lost}"
            )]
        );
        let none: [String; 0] = [];
        assert_eq!(msgs(vec![m("ext4"), lo(Some("ext4")), disk("vda")]), none);
        assert_eq!(msgs(vec![lo(None), disk("ramdisk"), disk("zram")]), none);
    }
}
