//! The one place that memory-maps files.
//!
//! Mapping a file is `unsafe` because another writer could change or truncate
//! it underneath the mapping. Engram rules that out by construction:
//! - a data directory is held by one process at a time (an exclusive lock
//!   file, see [`crate::backend::Backend::lock`]);
//! - the files that are mapped (log segments, vector files) are append-only
//!   while open: bytes inside a mapping are never rewritten, and they are only
//!   truncated during recovery, before any mapping of them exists;
//! - compaction writes *new* files and unlinks old ones; unlinking a mapped
//!   file keeps the mapping valid on every supported platform.
//!
//! This module must never hand out a mutable mapping.

use std::fs::File;

/// Maps `len` bytes of `file` read-only. `len` must not exceed the file
/// length (checked by the caller, [`crate::backend::FsFile::map`]).
#[allow(unsafe_code)]
pub(crate) fn map_readonly(file: &File, len: usize) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: see the module documentation: the mapped range is never
    // modified or truncated while a mapping exists, and no other process may
    // open the data directory while we hold its lock.
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn mapping_shows_file_bytes_and_survives_later_appends() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello world").unwrap();
        let m = map_readonly(&f, 5).unwrap();
        f.write_all(b" and more").unwrap();
        assert_eq!(&m[..], b"hello");
        let m2 = map_readonly(&f, 20).unwrap();
        assert_eq!(&m2[..], b"hello world and more");
    }
}
