//! One line of `/proc/self/mountinfo` (see `proc_pid_mountinfo(5)`), parsed, and
//! the mount options turned into the flags the probe's rules read.
//!
//! A line is
//! `ID PARENT MAJ:MIN ROOT MOUNTPOINT MOUNT-OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS`;
//! paths escape space, tab, newline and backslash as three octal digits (`\040`).

use serde::{Deserialize, Serialize};

/// One parsed mountinfo line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountInfo {
    /// Major number of the filesystem's `st_dev`.
    pub major: u32,
    /// Minor number of the filesystem's `st_dev`.
    pub minor: u32,
    /// Where it is mounted (unescaped).
    pub mountpoint: String,
    /// Filesystem type, e.g. `ext4`, `tmpfs`, `fuse.simfs`.
    pub fstype: String,
    /// Mount source (unescaped), e.g. `/dev/loop0`.
    pub source: String,
    /// Per-mount options then the superblock's (each once, in that order), e.g.
    /// `["rw", "relatime", "nobarrier", "data=writeback"]`.
    pub options: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` space, `\011` tab, `\012` newline,
/// `\134` backslash); anything else, an incomplete escape included, is kept as is.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8;
            out.push((v + (b[i + 3] - b'0') as u32) as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses one line; `None` when it is not a well-formed mountinfo line.
pub fn parse_line(line: &str) -> Option<MountInfo> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 2 {
        return None;
    }
    let (maj, min) = l[2].split_once(':')?;
    let mut options: Vec<String> = Vec::new();
    let supers = r.get(2).copied().unwrap_or("");
    for o in l[5].split(',').chain(supers.split(',')) {
        if !o.is_empty() && !options.iter().any(|x| x == o) {
            options.push(o.to_string());
        }
    }
    Some(MountInfo {
        major: maj.parse().ok()?,
        minor: min.parse().ok()?,
        mountpoint: unescape(l[4]),
        fstype: r[0].to_string(),
        source: unescape(r[1]),
        options,
    })
}

/// Every well-formed line of a mountinfo text, in order.
pub fn parse(text: &str) -> Vec<MountInfo> {
    text.lines().filter_map(parse_line).collect()
}

/// The mount holding `path` (absolute, canonical) whose filesystem is `maj:min`: of
/// the entries whose mount point is a prefix of the path, one with that device
/// wins over one without, then the longest mount point, then the later line (a
/// mount stacked over another). `None` when no mount point is a prefix.
pub fn mount_of<'a>(
    entries: &'a [MountInfo],
    path: &std::path::Path,
    major: u32,
    minor: u32,
) -> Option<&'a MountInfo> {
    let mut best: Option<((bool, usize), &MountInfo)> = None;
    for m in entries {
        if !path.starts_with(&m.mountpoint) {
            continue;
        }
        let key = ((m.major, m.minor) == (major, minor), m.mountpoint.len());
        if best.as_ref().is_none_or(|(k, _)| key >= *k) {
            best = Some((key, m));
        }
    }
    best.map(|(_, m)| m)
}

/// What the mount options say about durability.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountFlags {
    /// `Some(false)` for `nobarrier` or `barrier=0` (ext3/4, XFS before 4.19, …): the
    /// filesystem does not send cache flushes; `Some(true)` for `barrier`/`barrier=1`;
    /// `None` when the options do not say (the filesystem's default: barriers on).
    pub barrier: Option<bool>,
    /// ext3/4 `data=` mode: `ordered`, `journal` or `writeback`.
    pub data_mode: Option<String>,
    /// `commit=N`: seconds between journal commits.
    pub commit_secs: Option<u64>,
    /// `sync`: every write is synchronous.
    pub sync: bool,
    /// `ro`.
    pub read_only: bool,
}

/// The flags in a list of mount options (later options win, as at mount time).
pub fn flags(options: &[String]) -> MountFlags {
    let mut f = MountFlags::default();
    for o in options {
        match o.as_str() {
            "nobarrier" | "barrier=0" => f.barrier = Some(false),
            "barrier" | "barrier=1" => f.barrier = Some(true),
            "sync" => f.sync = true,
            "ro" => f.read_only = true,
            _ => {
                if let Some(m) = o.strip_prefix("data=") {
                    f.data_mode = Some(m.to_string());
                } else if let Some(c) = o.strip_prefix("commit=") {
                    f.commit_secs = c.parse().ok();
                }
            }
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines captured from this project's build machine (tests/fixtures/README.md).
    const FIXTURE: &str = include_str!("../../tests/fixtures/probe/mountinfo.txt");

    #[test]
    fn captured_lines_parse_exactly() {
        let all = parse(FIXTURE);
        assert_eq!(all.len(), 4);
        assert_eq!(
            all[1],
            MountInfo {
                major: 7,
                minor: 0,
                mountpoint: "/tmp/cap/m nt".into(),
                fstype: "ext4".into(),
                source: "/dev/loop0".into(),
                options: ["rw", "relatime", "nobarrier", "data=writeback"]
                    .map(String::from)
                    .to_vec(),
            }
        );
        assert_eq!((all[0].major, all[0].minor), (254, 0));
        assert_eq!(all[0].mountpoint, "/");
        assert_eq!(all[2].fstype, "tmpfs");
        assert_eq!(all[2].source, "none");
        assert_eq!(all[3].options[..3], ["ro", "nosuid", "nodev"]);
    }

    #[test]
    fn flags_of_the_captured_barrier_0_mount() {
        let all = parse(FIXTURE);
        let f = flags(&all[1].options);
        assert_eq!(f.barrier, Some(false));
        assert_eq!(f.data_mode.as_deref(), Some("writeback"));
        assert!(!f.sync && !f.read_only);
        assert_eq!(flags(&all[0].options), MountFlags::default());
        assert!(flags(&all[3].options).read_only);
        let o = ["barrier=0", "barrier=1", "commit=30", "sync"].map(String::from);
        let f = flags(&o);
        assert_eq!(
            (f.barrier, f.commit_secs, f.sync),
            (Some(true), Some(30), true)
        );
    }

    #[test]
    fn the_mount_of_a_path_prefers_its_device_then_the_longest_mount_point() {
        let all = parse(FIXTURE);
        let p = std::path::Path::new("/tmp/cap/m nt/x");
        assert_eq!(mount_of(&all, p, 7, 0).unwrap().fstype, "ext4");
        assert_eq!(mount_of(&all, p, 0, 39).unwrap().fstype, "tmpfs");
        let root = mount_of(&all, std::path::Path::new("/etc/x"), 254, 0).unwrap();
        assert_eq!(root.source, "/dev/vda");
        // Not "/tmp/cap/m" for "/tmp/cap/m ntx": whole components only.
        let q = std::path::Path::new("/tmp/cap/m ntx");
        assert_eq!(mount_of(&all, q, 1, 1).unwrap().mountpoint, "/");
    }

    #[test]
    fn escapes_are_undone_also_at_the_very_end() {
        assert_eq!(unescape(r"/tmp/a\040b\011c"), "/tmp/a b\tc");
        assert_eq!(unescape(r"/mnt/a\040"), "/mnt/a ");
        assert_eq!(unescape(r"/mnt/a\134"), "/mnt/a\\");
        assert_eq!(unescape(r"/x\04"), r"/x\04");
        assert_eq!(unescape(r"/x\089"), r"/x\089");
        assert!(parse_line("garbage").is_none());
    }
}
