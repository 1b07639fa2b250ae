//! One segment file: its header, its name, and read access to its frames.
//!
//! ```text
//! segment header (64 bytes, little-endian)
//! offset size field
//!  0     8    magic           "ENGRAMLG"
//!  8     2    format_version  u16 (this build writes and reads 1)
//! 10     2    header_bytes    u16 = 64
//! 12     4    reserved        zero
//! 16     8    segment_no      u64, also in the file name
//! 24     8    first_lsn       u64, LSN the first frame was given (or would be)
//! 32     8    end_lsn         u64, last LSN the segment covers, written by a
//!                             rewrite (compaction) that may have dropped
//!                             frames; 0 for segments written by appends,
//!                             whose LSNs run without gaps
//! 40     8    whole_len       u64, the segment's length in bytes as a
//!                             rewrite wrote it whole and synced (its frames
//!                             end there at a batch end); 0 for segments
//!                             written by appends and by earlier builds
//! 48    12    reserved        zero
//! 60     4    header_crc      CRC32C of bytes 0..60
//! 64     ..   frames (see crate::frame), each at a 16-byte aligned offset
//! ```
//! File name: `{segment_no:020}.seg` inside the log directory.
//!
//! A segment is append-only while it is the active one and immutable once
//! sealed; readers see only bytes the writer has made durable.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use crate::backend::{BackendFile, MapOptions, Mapping};
use crate::error::{StorageError, StorageResult};
use crate::frame::{self, FrameHeader, Lsn};

/// Segment magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"ENGRAMLG";
/// Log format version written by this build.
pub const LOG_FORMAT_VERSION: u16 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_BYTES: usize = 64;
/// [`SEGMENT_HEADER_BYTES`] as the header stores it.
const HEADER_BYTES_U16: u16 = 64;
const _: () = assert!(HEADER_BYTES_U16 as usize == SEGMENT_HEADER_BYTES);
/// File-name suffix of segments.
pub const SEGMENT_SUFFIX: &str = ".seg";

mod offsets {
    pub const MAGIC: usize = 0;
    pub const FORMAT_VERSION: usize = 8;
    pub const HEADER_BYTES: usize = 10;
    pub const SEGMENT_NO: usize = 16;
    pub const FIRST_LSN: usize = 24;
    pub const END_LSN: usize = 32;
    pub const WHOLE_LEN: usize = 40;
    pub const HEADER_CRC: usize = 60;
}
const _: () = assert!(offsets::HEADER_CRC + 4 == SEGMENT_HEADER_BYTES);
const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(frame::FRAME_ALIGN));
const _: () = assert!(offsets::MAGIC + 8 <= offsets::FORMAT_VERSION);
const _: () = assert!(offsets::HEADER_BYTES + 2 <= offsets::SEGMENT_NO);
const _: () = assert!(offsets::FIRST_LSN + 8 <= offsets::END_LSN);
const _: () = assert!(offsets::END_LSN + 8 <= offsets::WHOLE_LEN);
const _: () = assert!(offsets::WHOLE_LEN + 8 <= offsets::HEADER_CRC);

/// The file name of segment `no`.
pub fn segment_file_name(no: u64) -> String {
    format!("{no:020}{SEGMENT_SUFFIX}")
}

/// The numbers of the segment files of log directory `dir`, in order
/// (none when it does not exist). A directory named like a segment is
/// refused by name: the segment it stands for is missing, which recovery
/// would read as a gap or an empty log. With `remove_tmp`, leftovers of
/// an interrupted segment rewrite (a segment's name and `.tmp`: the
/// original segment is still in place) are removed; any other file is not
/// the log's, and stays.
pub fn segment_numbers(
    backend: &dyn crate::backend::Backend,
    dir: &Path,
    remove_tmp: bool,
) -> StorageResult<Vec<u64>> {
    let mut numbers = Vec::new();
    if !backend.exists(dir) {
        return Ok(numbers);
    }
    let entries = backend
        .list_dir(dir)
        .map_err(|e| StorageError::io(dir, e))?;
    for entry in entries {
        let no = parse_segment_file_name(&entry.name);
        if entry.is_dir {
            if no.is_some() {
                return Err(StorageError::io(
                    dir.join(&entry.name),
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "a directory is where this segment file belongs (move it away)",
                    ),
                ));
            }
        } else if let Some(no) = no {
            numbers.push(no);
        } else if remove_tmp && is_rewrite_leftover(&entry.name) {
            let p = dir.join(&entry.name);
            backend
                .remove_file(&p)
                .map_err(|e| StorageError::io(&p, e))?;
            backend
                .sync_dir(dir)
                .map_err(|e| StorageError::io(dir, e))?;
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// Whether `name` is what an interrupted segment rewrite leaves: a
/// segment's name and `.tmp`.
pub fn is_rewrite_leftover(name: &str) -> bool {
    name.strip_suffix(".tmp")
        .is_some_and(|n| parse_segment_file_name(n).is_some())
}

/// Parses a segment file name back into its number.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEGMENT_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Encodes the header of a segment written by appends.
pub fn encode_header(segment_no: u64, first_lsn: Lsn) -> [u8; SEGMENT_HEADER_BYTES] {
    encode_header_with_end(segment_no, first_lsn, None, None)
}

/// Encodes a segment header. Rewrites set `end_lsn` (they may drop frames,
/// so the log's continuity is checked against it) and `whole_len` (the
/// length they wrote and synced before the segment's first use: the
/// frames before it are no torn write, whatever happens to them).
pub fn encode_header_with_end(
    segment_no: u64,
    first_lsn: Lsn,
    end_lsn: Option<Lsn>,
    whole_len: Option<u64>,
) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    h[offsets::MAGIC..offsets::MAGIC + 8].copy_from_slice(&SEGMENT_MAGIC);
    h[offsets::FORMAT_VERSION..offsets::FORMAT_VERSION + 2]
        .copy_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    h[offsets::HEADER_BYTES..offsets::HEADER_BYTES + 2]
        .copy_from_slice(&HEADER_BYTES_U16.to_le_bytes());
    h[offsets::SEGMENT_NO..offsets::SEGMENT_NO + 8].copy_from_slice(&segment_no.to_le_bytes());
    h[offsets::FIRST_LSN..offsets::FIRST_LSN + 8].copy_from_slice(&first_lsn.to_le_bytes());
    h[offsets::END_LSN..offsets::END_LSN + 8].copy_from_slice(&end_lsn.unwrap_or(0).to_le_bytes());
    h[offsets::WHOLE_LEN..offsets::WHOLE_LEN + 8]
        .copy_from_slice(&whole_len.unwrap_or(0).to_le_bytes());
    let crc = crc32c::crc32c(&h[..offsets::HEADER_CRC]);
    h[offsets::HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Segment number.
    pub segment_no: u64,
    /// LSN of the first frame.
    pub first_lsn: Lsn,
    /// Format version.
    pub format_version: u16,
    /// Last LSN the segment covers, when a rewrite set it (frames may then
    /// be missing inside `first_lsn..=end_lsn`: compaction dropped them).
    pub end_lsn: Option<Lsn>,
    /// The length a rewrite wrote whole and synced before the segment's
    /// first use (`None`: written by appends, or by an earlier build).
    pub whole_len: Option<u64>,
}

impl SegmentHeader {
    /// The length this segment was written whole through, when its
    /// batches end before it (`batch_end`): whatever ends them there (a
    /// cut, zeros, a damaged frame, an unfinished batch) is damage, never
    /// a torn write. The one test recovery and repair share.
    pub fn whole_past(&self, batch_end: u64) -> Option<u64> {
        self.whole_len.filter(|&w| batch_end < w)
    }
}

/// Why a segment header is unusable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Shorter than a header, or all zero: the segment was being created
    /// when the process stopped.
    Incomplete,
    /// Anything else.
    Damaged(String),
    /// A newer format.
    Unsupported(u16),
}

impl std::fmt::Display for HeaderProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderProblem::Incomplete => {
                f.write_str("incomplete (shorter than a header, or zeros)")
            }
            HeaderProblem::Damaged(why) => f.write_str(why),
            HeaderProblem::Unsupported(v) => {
                write!(f, "log format version {v}, newer than this build")
            }
        }
    }
}

/// Decodes and verifies a segment header.
pub fn decode_header(bytes: &[u8]) -> Result<SegmentHeader, HeaderProblem> {
    if bytes.len() < SEGMENT_HEADER_BYTES {
        return Err(HeaderProblem::Incomplete);
    }
    let h = &bytes[..SEGMENT_HEADER_BYTES];
    if h.iter().all(|&b| b == 0) {
        return Err(HeaderProblem::Incomplete);
    }
    if h[..8] != SEGMENT_MAGIC {
        return Err(HeaderProblem::Damaged("bad magic".into()));
    }
    let stored = u32::from_le_bytes(h[offsets::HEADER_CRC..].try_into().expect("4 bytes"));
    let got = crc32c::crc32c(&h[..offsets::HEADER_CRC]);
    if stored != got {
        return Err(HeaderProblem::Damaged(format!(
            "header checksum mismatch (stored {stored:#010x}, computed {got:#010x})"
        )));
    }
    let version = u16::from_le_bytes(
        h[offsets::FORMAT_VERSION..offsets::FORMAT_VERSION + 2]
            .try_into()
            .expect("2 bytes"),
    );
    if version > LOG_FORMAT_VERSION || version == 0 {
        return Err(HeaderProblem::Unsupported(version));
    }
    let header_bytes = u16::from_le_bytes(
        h[offsets::HEADER_BYTES..offsets::HEADER_BYTES + 2]
            .try_into()
            .expect("2 bytes"),
    );
    if header_bytes as usize != SEGMENT_HEADER_BYTES {
        return Err(HeaderProblem::Damaged(format!(
            "header size {header_bytes}, expected {SEGMENT_HEADER_BYTES}"
        )));
    }
    let header = SegmentHeader {
        segment_no: u64::from_le_bytes(
            h[offsets::SEGMENT_NO..offsets::SEGMENT_NO + 8]
                .try_into()
                .expect("8 bytes"),
        ),
        first_lsn: u64::from_le_bytes(
            h[offsets::FIRST_LSN..offsets::FIRST_LSN + 8]
                .try_into()
                .expect("8 bytes"),
        ),
        format_version: version,
        end_lsn: match u64::from_le_bytes(
            h[offsets::END_LSN..offsets::END_LSN + 8]
                .try_into()
                .expect("8 bytes"),
        ) {
            0 => None,
            l => Some(l),
        },
        whole_len: match u64::from_le_bytes(
            h[offsets::WHOLE_LEN..offsets::WHOLE_LEN + 8]
                .try_into()
                .expect("8 bytes"),
        ) {
            0 => None,
            l => Some(l),
        },
    };
    // LSNs count frames: no log reaches 2^62 of them. A header past that
    // (intact by its checksum, so written on purpose) is damage: the
    // arithmetic on the next LSN must never wrap.
    if header.first_lsn > LSN_MAX || header.end_lsn.is_some_and(|l| l > LSN_MAX) {
        return Err(HeaderProblem::Damaged(format!(
            "LSN past {LSN_MAX} (first {}, end {})",
            header.first_lsn,
            header.end_lsn.unwrap_or(0)
        )));
    }
    Ok(header)
}

/// The largest LSN a segment's header may name (2^62): far past any log,
/// and far enough from `u64::MAX` that the next LSN never wraps.
pub const LSN_MAX: Lsn = 1 << 62;

/// An open segment.
#[derive(Debug)]
pub(crate) struct Segment {
    pub no: u64,
    pub path: PathBuf,
    pub first_lsn: Lsn,
    /// From the header: LSNs up to here may be missing (a rewrite dropped them).
    pub end_lsn: Option<Lsn>,
    pub file: Arc<dyn BackendFile>,
    /// Bytes readers may see: everything up to here is durable.
    pub durable_len: AtomicU64,
    /// Length of the file, zero-filled past `durable_len` and synced, so
    /// that writes into it do not change the file's size (an `fdatasync`
    /// then has no metadata to flush).
    pub zeroed_len: AtomicU64,
    /// The most recent mapping; remapped on demand when it is too short.
    map: RwLock<Arc<Mapping>>,
}

impl Segment {
    /// `reserve`: address space to map up front (the active segment maps
    /// its maximum size once and grows the view instead of remapping).
    pub fn new(
        no: u64,
        path: PathBuf,
        first_lsn: Lsn,
        end_lsn: Option<Lsn>,
        file: Arc<dyn BackendFile>,
        durable_len: u64,
        reserve: u64,
    ) -> StorageResult<Segment> {
        let map = file
            .map(
                durable_len,
                MapOptions {
                    reserve,
                    ..MapOptions::default()
                },
            )
            .map_err(|e| StorageError::io(&path, e))?;
        let zeroed = file.len().map_err(|e| StorageError::io(&path, e))?;
        Ok(Segment {
            no,
            path,
            first_lsn,
            end_lsn,
            file,
            durable_len: AtomicU64::new(durable_len),
            zeroed_len: AtomicU64::new(zeroed.max(durable_len)),
            map: RwLock::new(Arc::new(map)),
        })
    }

    pub fn durable_len(&self) -> u64 {
        self.durable_len.load(Ordering::Acquire)
    }

    /// A mapping covering at least `min_len` bytes (which must be durable).
    pub fn view(&self, min_len: u64) -> StorageResult<Arc<Mapping>> {
        {
            let m = self.map.read();
            if m.len() as u64 >= min_len {
                return Ok(m.clone());
            }
        }
        let durable = self.durable_len();
        if min_len > durable {
            return Err(StorageError::BadLocation {
                segment: self.no,
                offset: min_len,
                reason: format!("past the durable end of the segment ({durable} bytes)"),
            });
        }
        {
            // Durable bytes are in the file: grow the view if the
            // reservation covers them.
            let m = self.map.read();
            if m.extend_valid(crate::cast::usize_from(durable)) {
                return Ok(m.clone());
            }
        }
        let mut m = self.map.write();
        if (m.len() as u64) < min_len {
            *m = Arc::new(
                self.file
                    .map(durable, MapOptions::default())
                    .map_err(|e| StorageError::io(&self.path, e))?,
            );
        }
        Ok(m.clone())
    }

    /// Reads the frame at `offset`: its location, bounds, magic and length
    /// are always checked; its header and payload checksums only if
    /// `check_payload` (a frame read before, see `SegmentLog::read_verified`).
    pub fn read_frame(&self, offset: u64, check_payload: bool) -> StorageResult<FrameRef> {
        let mut map = self.view(offset + frame::FRAME_HEADER_BYTES as u64)?;
        let header = self.locate(&mut map, offset, check_payload)?;
        Ok(FrameRef {
            map,
            segment: self.no,
            offset,
            header,
        })
    }

    /// Bytes `part` of the payload of the frame at `offset`, read through
    /// `map` (replaced by a longer view first if they do not end inside
    /// it), if `offset` is a frame boundary and the bytes end within the
    /// durable bytes (the frame's header is not read).
    #[inline]
    pub(crate) fn part<'m>(
        &self,
        map: &'m mut Arc<Mapping>,
        offset: u64,
        part: std::ops::Range<usize>,
    ) -> Option<&'m [u8]> {
        if !is_frame_boundary(offset) || part.start > part.end {
            return None;
        }
        let start = offset
            .checked_add(frame::FRAME_HEADER_BYTES as u64)?
            .checked_add(part.start as u64)?;
        let end = start.checked_add(part.len() as u64)?;
        if end > self.durable_len() {
            return None;
        }
        self.cover(map, end).ok()?;
        map.get(crate::cast::usize_from(start)..crate::cast::usize_from(end))
    }

    /// Makes `map` reach at least `end` (a longer view of this segment).
    #[inline]
    fn cover(&self, map: &mut Arc<Mapping>, end: u64) -> StorageResult<()> {
        if (map.len() as u64) < end {
            *map = self.view(end)?;
        }
        Ok(())
    }

    /// The checks of [`Segment::read_frame`] on the frame at `offset`, read
    /// through `map` (replaced by a longer view of this segment first if
    /// the frame does not end inside it): its header.
    pub(crate) fn locate(
        &self,
        map: &mut Arc<Mapping>,
        offset: u64,
        check_payload: bool,
    ) -> StorageResult<FrameHeader> {
        let bad = |reason: String| StorageError::BadLocation {
            segment: self.no,
            offset,
            reason,
        };
        if !is_frame_boundary(offset) {
            return Err(bad("not a frame boundary".into()));
        }
        let durable = self.durable_len();
        if offset + frame::FRAME_HEADER_BYTES as u64 > durable {
            return Err(bad(format!("past the durable end ({durable} bytes)")));
        }
        self.cover(map, offset + frame::FRAME_HEADER_BYTES as u64)?;
        let start = crate::cast::usize_from(offset);
        let header = if check_payload {
            frame::decode_header(&map[start..])
        } else {
            frame::decode_verified_header(&map[start..])
        }
        .map_err(|e| bad(e.to_string()))?;
        let end = offset + frame::FRAME_HEADER_BYTES as u64 + header.payload_len as u64;
        if end > durable {
            return Err(bad("frame extends past the durable end".into()));
        }
        self.cover(map, end)?;
        if check_payload {
            let payload = &map[start + frame::FRAME_HEADER_BYTES..crate::cast::usize_from(end)];
            frame::check_payload(&header, payload).map_err(|e| bad(e.to_string()))?;
        }
        Ok(header)
    }
}

/// Whether a frame may start at `offset` of a segment: past the header,
/// on the frame alignment.
fn is_frame_boundary(offset: u64) -> bool {
    offset >= SEGMENT_HEADER_BYTES as u64 && offset.is_multiple_of(frame::FRAME_ALIGN as u64)
}

/// Where a frame lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameLoc {
    /// Segment number.
    pub segment: u64,
    /// Byte offset of the frame header in the segment file.
    pub offset: u64,
    /// The frame's LSN.
    pub lsn: Lsn,
}

/// A verified frame, borrowed zero-copy from a segment mapping. The payload
/// is 16-byte aligned.
#[derive(Clone)]
pub struct FrameRef {
    map: Arc<Mapping>,
    /// Segment number.
    pub segment: u64,
    /// Offset of the header.
    pub offset: u64,
    /// The verified header.
    pub header: FrameHeader,
}

impl FrameRef {
    pub(crate) fn new(map: Arc<Mapping>, segment: u64, offset: u64, header: FrameHeader) -> Self {
        FrameRef {
            map,
            segment,
            offset,
            header,
        }
    }

    /// The payload bytes (checksum already verified).
    pub fn payload(&self) -> &[u8] {
        let start = crate::cast::usize_from(self.offset) + frame::FRAME_HEADER_BYTES;
        &self.map[start..start + self.header.payload_len as usize]
    }

    /// The frame's location.
    pub fn loc(&self) -> FrameLoc {
        FrameLoc {
            segment: self.segment,
            offset: self.offset,
            lsn: self.header.lsn,
        }
    }
}

impl std::fmt::Debug for FrameRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameRef")
            .field("segment", &self.segment)
            .field("offset", &self.offset)
            .field("header", &self.header)
            .finish()
    }
}

/// Path of segment `no` in `dir`.
pub fn segment_path(dir: &Path, no: u64) -> PathBuf {
    dir.join(segment_file_name(no))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_damage() {
        let h = encode_header(42, 1000);
        let d = decode_header(&h).unwrap();
        assert_eq!((d.segment_no, d.first_lsn, d.format_version), (42, 1000, 1));
        assert_eq!(d.end_lsn, None);
        let r = decode_header(&encode_header_with_end(42, 1000, Some(1500), Some(4096))).unwrap();
        assert_eq!(r.end_lsn, Some(1500));
        assert_eq!(r.whole_len, Some(4096));
        // batches ending before the length written whole are damage; at it
        // (or in a segment of appends, which records none) they are not
        assert_eq!(r.whole_past(4000), Some(4096));
        assert_eq!(r.whole_past(4096), None);
        assert_eq!(d.whole_past(0), None);
        let mut bad = h;
        bad[20] ^= 1;
        assert!(matches!(
            decode_header(&bad),
            Err(HeaderProblem::Damaged(_))
        ));
        assert_eq!(
            decode_header(&[0u8; 64]).unwrap_err(),
            HeaderProblem::Incomplete
        );
        assert_eq!(
            decode_header(&h[..10]).unwrap_err(),
            HeaderProblem::Incomplete
        );
        // an intact header naming an LSN no log reaches is damage (the
        // next LSN after it would wrap)
        for h in [
            encode_header_with_end(1, 1, Some(u64::MAX), None),
            encode_header_with_end(1, LSN_MAX + 1, None, None),
        ] {
            assert!(
                matches!(decode_header(&h), Err(HeaderProblem::Damaged(ref m)) if m.contains("LSN past")),
                "{:?}",
                decode_header(&h)
            );
        }
        assert!(decode_header(&encode_header_with_end(1, 1, Some(LSN_MAX), None)).is_ok());
    }

    #[test]
    fn only_a_rewrite_s_leftover_is_removed_from_the_log_directory() {
        use crate::backend::{Backend, MemBackend, OpenMode};
        let b = MemBackend::new();
        let dir = Path::new("/s/log");
        b.create_dir_all(dir).unwrap();
        for name in [
            "00000000000000000001.seg",
            "00000000000000000001.seg.tmp",
            "notes.tmp",
            "app.log",
        ] {
            b.open(&dir.join(name), OpenMode::Create).unwrap();
        }
        assert_eq!(segment_numbers(&b, dir, true).unwrap(), vec![1]);
        assert!(!b.exists(&dir.join("00000000000000000001.seg.tmp")));
        // a file of someone else's, named .tmp or not, stays
        assert!(b.exists(&dir.join("notes.tmp")));
        assert!(b.exists(&dir.join("app.log")));
    }

    #[test]
    fn names_roundtrip() {
        assert_eq!(segment_file_name(7), "00000000000000000007.seg");
        assert_eq!(parse_segment_file_name("00000000000000000007.seg"), Some(7));
        assert_eq!(parse_segment_file_name("7.seg"), None);
        assert_eq!(
            parse_segment_file_name("00000000000000000007.seg.tmp"),
            None
        );
    }
}
