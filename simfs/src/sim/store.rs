//! The seam between the cache and the files: [`Store`] is everything the cache needs
//! of the backing store. The filesystem implements it over the backing files; the
//! unit tests over byte vectors in memory.

use std::io;

/// The backing store the cache destages into, addressed by inode number.
pub trait Store {
    /// Writes all of `data` at byte `offset` of inode `ino`'s backing file.
    ///
    /// # Errors
    /// Any I/O error of the backing file.
    fn write_at(&mut self, ino: u64, offset: u64, data: &[u8]) -> io::Result<()>;

    /// The current length in bytes of inode `ino`'s backing file.
    ///
    /// # Errors
    /// Any I/O error of the backing file.
    fn len(&mut self, ino: u64) -> io::Result<u64>;
}
