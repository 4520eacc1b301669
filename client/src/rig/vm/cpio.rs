//! A writer of `newc` cpio archives (the format the Linux kernel unpacks as an
//! initramfs, `Documentation/driver-api/early-userspace/buffer-format.rst`):
//! directories, regular files, symbolic links and device nodes, uncompressed.

use std::io::Write;

/// An archive being written to memory.
#[derive(Default)]
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    /// Adds the directory `name` (no leading `/`), mode 0755.
    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[], (0, 0));
    }

    /// Adds the regular file `name` with `data` and permission bits `perm` (e.g. 0o755).
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data, (0, 0));
    }

    /// Adds the symbolic link `name` pointing to `target`.
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, target.as_bytes(), (0, 0));
    }

    /// Adds the character device node `name` (`major`, `minor`), mode 0600.
    pub fn char_dev(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020600, &[], (major, minor));
    }

    /// The archive with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.out
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        let _ = write!(self.out, "070701");
        for f in fields {
            let _ = write!(self.out, "{f:08x}");
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_name_and_data_are_4_byte_aligned() {
        let mut c = Cpio::default();
        c.file("init", 0o755, b"abcde");
        let a = c.finish();
        // 110-byte header, "init\0" padded to 116, 5 data bytes padded to 124.
        assert_eq!(&a[..6], b"070701");
        assert_eq!(&a[6..14], b"00000001");
        assert_eq!(&a[14..22], b"000081ed");
        assert_eq!(&a[54..62], b"00000005");
        assert_eq!(&a[110..115], b"init\0");
        assert_eq!(&a[116..121], b"abcde");
        assert_eq!(&a[124..130], b"070701");
        assert_eq!(a.len() % 4, 0);
    }
}
