//! The one place that memory-maps files.
//!
//! Mapping a file is `unsafe` because another writer could change or truncate
//! it underneath the mapping. Engram rules that out by construction:
//! - a data directory is held by one process at a time (an exclusive lock
//!   file, see [`crate::backend::Backend::try_lock`]);
//! - the files that are mapped (log segments, vector files) are append-only
//!   while open: bytes inside a mapping are never rewritten; a file is only
//!   truncated after its mappings are dropped (recovery before mapping,
//!   `VectorFile::truncate` after replacing its mapping);
//! - a segment rewrite writes a *new* file and renames it over the old one;
//!   the old file stays valid for mappings that still refer to it;
//! - a mapping never exposes bytes past the end of its file
//!   ([`crate::backend::Mapping`] tracks the valid length).
//!
//! This module must never hand out a mutable mapping.

use std::fs::File;

/// Maps `len` bytes of `file` read-only. `len` may exceed the file length
/// (address space reserved for growth): the caller ([`crate::backend::Mapping`])
/// only ever exposes bytes that are inside the file, since touching a page
/// past the end of a file raises SIGBUS.
#[allow(unsafe_code)]
pub(crate) fn map_readonly(
    file: &File,
    len: usize,
    populate: bool,
    random: bool,
) -> std::io::Result<memmap2::Mmap> {
    let mut o = memmap2::MmapOptions::new();
    o.len(len);
    if populate {
        o.populate();
    }
    // SAFETY: see the module documentation: the mapped bytes are never
    // modified or truncated while a mapping exists, no other process may
    // open the data directory while we hold its lock, and bytes past the end
    // of the file are never exposed.
    let m = unsafe { o.map(file) }?;
    if random {
        // A hint: a mapping the kernel reads ahead on is still correct.
        let _ = m.advise(memmap2::Advice::Random);
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn mapping_shows_file_bytes_and_survives_later_appends() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello world").unwrap();
        let m = map_readonly(&f, 5, false, false).unwrap();
        f.write_all(b" and more").unwrap();
        assert_eq!(&m[..], b"hello");
        let m2 = map_readonly(&f, 20, true, true).unwrap();
        assert_eq!(&m2[..], b"hello world and more");
    }
}
