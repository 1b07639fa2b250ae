//! The lexical snapshot file (`derived/lexical.snap`): a checksummed
//! snapshot file of `engram_storage::files` whose body is
//! [`Bm25Index::write_to`]'s encoding and whose `applied_lsn` is the last
//! log frame the index reflects. This is the only code that knows its
//! magic and version (docs/format.md §9.2).

use std::path::Path;

use engram_storage::files::{read_snapshot, read_snapshot_header, write_snapshot};
use engram_storage::{Backend, StorageError};

use super::{Bm25Error, Bm25Index};

/// Magic of the snapshot file.
pub const MAGIC: [u8; 8] = *b"ENGRBM25";
/// Version of the snapshot file (the body has its own, see [`super::bm25`]).
pub const VERSION: u32 = 1;

/// Reads the snapshot at `path`: `None` when it is missing or fails its
/// checks (checksums, magic, version, length), else its LSN and the decoded
/// index (or why the body does not decode).
pub fn read(backend: &dyn Backend, path: &Path) -> Option<(u64, Result<Bm25Index, Bm25Error>)> {
    let s = read_snapshot(backend, path, MAGIC, VERSION)
        .ok()
        .flatten()?;
    Some((s.applied_lsn, Bm25Index::read_from(s.body.as_slice())))
}

/// The LSN the snapshot at `path` covers, from its header alone (0 when it
/// is missing or its header is damaged).
pub fn lsn(backend: &dyn Backend, path: &Path) -> u64 {
    read_snapshot_header(backend, path, MAGIC, VERSION)
        .ok()
        .flatten()
        .map_or(0, |h| h.applied_lsn)
}

/// Writes `encoded` (an index's [`Bm25Index::write_to`] encoding) as the
/// snapshot at `path`, covering the log up to `lsn` (atomic replace).
pub fn write(
    backend: &dyn Backend,
    path: &Path,
    lsn: u64,
    encoded: &[u8],
) -> Result<(), StorageError> {
    write_snapshot(backend, path, MAGIC, VERSION, lsn, encoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexical::Bm25Params;
    use engram_storage::MemBackend;

    #[test]
    fn round_trip_and_damage() {
        let b = MemBackend::new();
        let p = Path::new("/d/lexical.snap");
        b.create_dir_all(Path::new("/d")).unwrap();
        assert!(read(&b, p).is_none());
        assert_eq!(lsn(&b, p), 0);
        let mut ix = Bm25Index::new(Bm25Params::default());
        ix.add(0, "checkout latency").unwrap();
        ix.add(3, "billing latency").unwrap();
        let mut enc = Vec::new();
        ix.write_to(&mut enc);
        write(&b, p, 42, &enc).unwrap();
        assert_eq!(lsn(&b, p), 42);
        let (at, back) = read(&b, p).unwrap();
        assert_eq!(at, 42);
        let mut again = Vec::new();
        back.unwrap().write_to(&mut again);
        assert_eq!(again, enc);
        // a flipped body byte fails the checksum: no snapshot
        let mut bytes = b.read_file(p).expect("written");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        b.write_file(p, &bytes);
        assert!(read(&b, p).is_none());
    }
}
