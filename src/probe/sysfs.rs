//! Pure parsers for what the collector reads: sysfs attribute files
//! (Documentation/ABI/stable/sysfs-block, Documentation/admin-guide/bcache.rst) and
//! `dmsetup table` lines (Documentation/admin-guide/device-mapper/).

/// A sysfs `0`/`1` flag (`queue/rotational`, `queue/fua`, `loop/dio`).
pub fn flag(s: &str) -> Option<bool> {
    match s.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

/// The selected entry of a sysfs choice list, e.g. `writeback` in
/// `writethrough [writeback] writearound none` (bcache `cache_mode`); a file with
/// no brackets is one value and is returned trimmed.
pub fn selected(s: &str) -> String {
    let s = s.trim();
    match (s.find('['), s.find(']')) {
        (Some(a), Some(b)) if a < b => s[a + 1..b].to_string(),
        _ => s.to_string(),
    }
}

/// Whether a `cache_type` (SCSI `sd`: `write through`, `none`, `write back`,
/// `write back, no read (daxon)`; virtio: `write back`, `write through`) says the
/// cache is volatile.
pub fn cache_type_is_write_back(s: &str) -> bool {
    s.trim().starts_with("write back")
}

/// The target types of a `dmsetup table` output (one `START LENGTH TYPE ARGS…`
/// line per segment), in order, each once; and for a `cache` target its mode
/// (`writeback` unless a feature argument says `writethrough` or `passthrough`),
/// for a `writecache` target `writeback`.
pub fn dm_table(text: &str) -> (Vec<String>, Option<String>) {
    let mut types: Vec<String> = Vec::new();
    let mut mode = None;
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let Some(t) = w.get(2) else { continue };
        if !types.iter().any(|x| x == t) {
            types.push(t.to_string());
        }
        match *t {
            "cache" => {
                let m = ["writethrough", "passthrough"]
                    .into_iter()
                    .find(|m| w[3..].contains(m))
                    .unwrap_or("writeback");
                mode = Some(m.to_string());
            }
            "writecache" => mode = Some("writeback".to_string()),
            _ => {}
        }
    }
    (types, mode)
}

/// The transport of a disk from its canonical sysfs path
/// (`readlink -f /sys/class/block/NAME`): `nvme`, `virtio`, `usb`, `ata`, `mmc`,
/// `scsi`, or `virtual` under `/sys/devices/virtual/` — except an NVMe native
/// multipath head (`/sys/devices/virtual/nvme-subsystem/nvme-subsysN/nvmeNnM`),
/// which is `nvme`; `""` when unknown.
pub fn transport(devpath: &str) -> String {
    let has = |s: &str| devpath.split('/').any(|c| c.starts_with(s));
    let t = if has("nvme-subsys") {
        // NVMe native multipath: the disk is the subsystem's head, a class device
        // under /sys/devices/virtual/nvme-subsystem/ whose paths are the hidden
        // nvmeXcYnZ disks of each controller: NVMe, not a virtual device.
        "nvme"
    } else if devpath.starts_with("/sys/devices/virtual/") {
        "virtual"
    } else if has("nvme") {
        "nvme"
    } else if has("usb") {
        "usb"
    } else if has("virtio") {
        "virtio"
    } else if has("ata") {
        "ata"
    } else if has("mmc") {
        "mmc"
    } else if has("host") || has("target") {
        "scsi"
    } else {
        ""
    };
    t.to_string()
}

/// Whether an MD array member takes part in the array's writes and flushes, from
/// its `/sys/block/mdX/md/dev-NAME/state` (a comma-separated list, kernel
/// `Documentation/admin-guide/md.rst`): not when it is a `spare` or `faulty`. An
/// unreadable state (`None`) counts as active.
///
/// ```
/// use plugpull::probe::sysfs::md_member_active;
/// assert!(md_member_active(Some("in_sync")));
/// assert!(!md_member_active(Some("spare")));
/// assert!(!md_member_active(Some("faulty,write_mostly")));
/// ```
pub fn md_member_active(state: Option<&str>) -> bool {
    state.is_none_or(|s| {
        !s.trim()
            .split(',')
            .any(|w| matches!(w.trim(), "spare" | "faulty"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on this project's build machine (tests/fixtures/README.md).
    const VDA: &str = include_str!("../../tests/fixtures/probe/devpath-vda.txt");
    const LOOP0: &str = include_str!("../../tests/fixtures/probe/devpath-loop0.txt");

    #[test]
    fn transports_of_captured_device_paths() {
        assert_eq!(transport(VDA.trim()), "virtio");
        assert_eq!(transport(LOOP0.trim()), "virtual");
        assert_eq!(transport("/sys/devices/platform/x"), "");
        // Where the kernel puts a native-multipath head disk: drivers/nvme/host/
        // multipath.c adds it with the subsystem (class "nvme-subsystem", device
        // "nvme-subsys%d", a virtual device: core.c) as its parent. No NVMe here to
        // capture from.
        assert_eq!(
            transport("/sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1"),
            "nvme"
        );
    }

    #[test]
    fn flags_and_choice_lists() {
        assert_eq!(flag("1\n"), Some(true));
        assert_eq!(flag("0"), Some(false));
        assert_eq!(flag("x"), None);
        assert_eq!(
            selected("writethrough [writeback] writearound none\n"),
            "writeback"
        );
        assert_eq!(selected("write back\n"), "write back");
        assert!(cache_type_is_write_back("write back, no read (daxon)"));
        assert!(!cache_type_is_write_back("write through"));
        assert!(!cache_type_is_write_back("none"));
    }

    #[test]
    fn dm_tables_give_target_types_and_cache_mode() {
        // No device-mapper in this project's build kernel to capture from: these lines
        // follow the table format of the kernel's Documentation/admin-guide/
        // device-mapper/cache.rst and writecache.rst (`START LEN TYPE ARGS…`).
        let wt = "0 41943040 cache /dev/mapper/metadata /dev/mapper/ssd /dev/mapper/origin 512 1 writethrough default 0";
        assert_eq!(
            dm_table(wt),
            (vec!["cache".to_string()], Some("writethrough".to_string()))
        );
        let wb = "0 41943040 cache /dev/mapper/metadata /dev/mapper/ssd /dev/mapper/origin 512 0 default 0";
        assert_eq!(dm_table(wb).1.as_deref(), Some("writeback"));
        let two = "0 100 linear /dev/sda 0\n100 100 linear /dev/sdb 0\n200 8 writecache s /dev/sdc /dev/sdd 4096 0";
        let (t, m) = dm_table(two);
        assert_eq!(t, ["linear", "writecache"]);
        assert_eq!(m.as_deref(), Some("writeback"));
        assert_eq!(dm_table(""), (vec![], None));
    }
}
