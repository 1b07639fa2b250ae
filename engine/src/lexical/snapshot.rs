//! The lexical snapshot file (`derived/lexical.snap`): a checksummed
//! snapshot file of `engram_storage::files` whose `applied_lsn` is the last
//! log frame the index reflects, and whose body is that frame's [`Anchor`]
//! (24 bytes) then [`Bm25Index::write_to`]'s encoding. The anchor ties the
//! snapshot to its log: a snapshot copied from another store, or left from
//! an earlier log, does not name the frame this log holds at its LSN, and
//! is not used (the index is rebuilt from the log). This is the only code
//! that knows its magic and version (docs/format.md §9.2).

use std::path::Path;

use engram_storage::files::{read_snapshot, read_snapshot_header, write_snapshot};
use engram_storage::{Backend, StorageError};

use super::{Bm25Error, Bm25Index};

/// Magic of the snapshot file.
pub const MAGIC: [u8; 8] = *b"ENGRBM25";
/// Version of the snapshot file (the body has its own, see [`super::bm25`]).
/// 2: the body begins with the [`Anchor`]; 3: its checksum covers the
/// segments before the anchor's ([`crate::checkpoint::anchor_crc`]). A file
/// of an earlier version is not used.
pub const VERSION: u32 = 3;

/// The log frame a snapshot was taken at: where it lies and its anchor
/// checksum ([`crate::checkpoint::anchor_crc`]; all zero for an empty log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anchor {
    /// Segment of the frame.
    pub segment: u64,
    /// Its offset in the segment.
    pub offset: u64,
    /// Its anchor checksum: its payload's CRC32C combined with the sealed
    /// segments before it ([`crate::checkpoint::anchor_crc`]).
    pub payload_crc: u32,
}

const ANCHOR_BYTES: usize = 24;

impl Anchor {
    fn encode(&self) -> [u8; ANCHOR_BYTES] {
        let mut b = [0u8; ANCHOR_BYTES];
        b[0..8].copy_from_slice(&self.segment.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload_crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Anchor> {
        let b = b.get(..ANCHOR_BYTES)?;
        Some(Anchor {
            segment: u64::from_le_bytes(b[0..8].try_into().ok()?),
            offset: u64::from_le_bytes(b[8..16].try_into().ok()?),
            payload_crc: u32::from_le_bytes(b[16..20].try_into().ok()?),
        })
    }
}

/// A snapshot as read: its LSN, its anchor, and the decoded index (or why
/// the body does not decode).
pub type Read = (u64, Anchor, Result<Bm25Index, Bm25Error>);

/// Reads the snapshot at `path`: `None` when it is missing or fails its
/// checks (checksums, magic, version, length).
pub fn read(backend: &dyn Backend, path: &Path) -> Option<Read> {
    let s = read_snapshot(backend, path, MAGIC, VERSION)
        .ok()
        .flatten()?;
    let body = s.body.as_slice();
    let anchor = Anchor::decode(body)?;
    Some((
        s.applied_lsn,
        anchor,
        Bm25Index::read_from(&body[ANCHOR_BYTES..]),
    ))
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
/// snapshot at `path`, covering the log up to `lsn`, whose frame is
/// `anchor` (atomic replace).
pub fn write(
    backend: &dyn Backend,
    path: &Path,
    lsn: u64,
    anchor: Anchor,
    encoded: &[u8],
) -> Result<(), StorageError> {
    let mut body = Vec::with_capacity(ANCHOR_BYTES + encoded.len());
    body.extend_from_slice(&anchor.encode());
    body.extend_from_slice(encoded);
    write_snapshot(backend, path, MAGIC, VERSION, lsn, &body)
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
        let anchor = Anchor {
            segment: 3,
            offset: 4096,
            payload_crc: 0xdead_beef,
        };
        write(&b, p, 42, anchor, &enc).unwrap();
        assert_eq!(lsn(&b, p), 42);
        let (at, got, back) = read(&b, p).unwrap();
        assert_eq!((at, got), (42, anchor));
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
