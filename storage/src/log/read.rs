//! The reading side of the log: zero-copy frame reads by location (both
//! checksums, or only the header's for a frame the caller already read
//! whole), ordered scans from an LSN, and a full verification pass.

use super::*;
use crate::Mapping;

impl SegmentLog {
    /// Reads and verifies the frame at a location.
    pub fn read(&self, segment: u64, offset: u64) -> StorageResult<FrameRef> {
        self.read_with(segment, offset, true)
    }

    /// Reads a frame this process has already read with [`SegmentLog::read`]
    /// and found whole: the location, bounds, magic and length are checked
    /// as there, the header and payload checksums are not recomputed (a
    /// length that changed still cannot reach past the durable end; it can
    /// only give wrong bytes, which the caller's archive validation or
    /// decoding rejects like any other damage). Segments are
    /// append-only and a frame's bytes never change while its segment
    /// exists, so a payload that was verified stays verified (like a page
    /// checked once when it enters a buffer pool). Callers keep track of
    /// which frames they verified; anything else goes through `read`.
    pub fn read_verified(&self, segment: u64, offset: u64) -> StorageResult<FrameRef> {
        self.read_with(segment, offset, false)
    }

    /// A reader of frames one after another (see [`FrameReader`]).
    pub fn reader(&self) -> FrameReader<'_> {
        FrameReader {
            log: self,
            cur: None,
        }
    }

    fn read_with(&self, segment: u64, offset: u64, check_payload: bool) -> StorageResult<FrameRef> {
        self.segment_at(segment, offset)?
            .read_frame(offset, check_payload)
    }

    /// The segment a location names (an error naming the location if none).
    fn segment_at(&self, segment: u64, offset: u64) -> StorageResult<Arc<Segment>> {
        self.segment(segment)
            .ok_or_else(|| StorageError::BadLocation {
                segment,
                offset,
                reason: "no such segment".into(),
            })
    }

    pub(super) fn segment(&self, no: u64) -> Option<Arc<Segment>> {
        let segs = self.shared.segments.read();
        segs.binary_search_by_key(&no, |s| s.no)
            .ok()
            .map(|i| segs[i].clone())
    }

    /// Calls `f` on every durable frame with LSN >= `from_lsn`, in LSN order,
    /// until it returns `Break`.
    pub fn scan(
        &self,
        from_lsn: Lsn,
        mut f: impl FnMut(&FrameRef) -> StorageResult<ControlFlow<()>>,
    ) -> StorageResult<()> {
        let segs: Vec<Arc<Segment>> = self.shared.segments.read().clone();
        // Start at the last segment whose first LSN is <= from_lsn.
        let start_idx = segs
            .iter()
            .rposition(|s| s.first_lsn <= from_lsn)
            .unwrap_or(0);
        for seg in &segs[start_idx..] {
            let end = seg.durable_len();
            let map = seg.view(end)?;
            let mut pos = SEGMENT_HEADER_BYTES as u64;
            while pos < end {
                let header = decode_at(&map, seg.no, pos, end)?;
                let fr = FrameRef::new(map.clone(), seg.no, pos, header);
                pos += header.encoded_len() as u64;
                if header.lsn < from_lsn {
                    continue;
                }
                if f(&fr)?.is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Re-reads every segment from the backend and checks every frame
    /// (checksums, LSN order, batch ends). Returns the problems found.
    pub fn verify(&self) -> StorageResult<(u64, Vec<LogProblem>)> {
        let segs: Vec<Arc<Segment>> = self.shared.segments.read().clone();
        let mut problems = Vec::new();
        let mut n_frames = 0;
        for seg in &segs {
            let end = seg.durable_len();
            let mut buf = vec![0u8; crate::cast::usize_from(end)];
            seg.file
                .read_exact_at(&mut buf, 0)
                .map_err(io_err(&seg.path))?;
            if let Err(p) = segment::decode_header(&buf) {
                problems.push(LogProblem {
                    segment: seg.no,
                    offset: 0,
                    detail: format!("segment header: {p:?}"),
                });
                continue;
            }
            let buf = AlignedBuf::copy_from(&buf);
            let s = recovery::scan(
                buf.as_slice(),
                SEGMENT_HEADER_BYTES as u64,
                seg.first_lsn - 1,
                seg.end_lsn.unwrap_or(0),
            );
            n_frames += s.frames;
            if let Some((offset, reason)) = s.stop {
                problems.push(LogProblem {
                    segment: seg.no,
                    offset,
                    detail: reason.to_string(),
                });
            } else if s.batch_end != end {
                problems.push(LogProblem {
                    segment: seg.no,
                    offset: s.batch_end,
                    detail: "segment ends inside a batch".into(),
                });
            }
        }
        Ok((n_frames, problems))
    }
}

/// Decodes and verifies the frame at `pos` of segment `segment`, whose
/// durable bytes end at `end`; damage is a [`StorageError::CorruptLog`]
/// naming the place.
pub(super) fn decode_at(
    map: &[u8],
    segment: u64,
    pos: u64,
    end: u64,
) -> StorageResult<FrameHeader> {
    frame::decode(&map[crate::cast::usize_from(pos)..crate::cast::usize_from(end)])
        .map(|(header, _)| header)
        .map_err(|e| StorageError::CorruptLog {
            segment,
            offset: pos,
            reason: e.to_string(),
        })
}

/// Reads frames one after another, such as a search's hits: the payload is
/// borrowed from the reader, which keeps the last segment read and its
/// mapping. The checks are [`SegmentLog::read`]'s (or, asked for,
/// [`SegmentLog::read_verified`]'s); what it saves is taking the segment
/// list's lock and two reference counts on every read (atomic operations,
/// which a search of ten hits paid eighty times).
pub struct FrameReader<'a> {
    log: &'a SegmentLog,
    cur: Option<(Arc<Segment>, Arc<Mapping>)>,
}

impl FrameReader<'_> {
    /// The payload of the frame at a location, its checksums recomputed if
    /// `check_payload` (as [`SegmentLog::read`]; otherwise as
    /// [`SegmentLog::read_verified`]).
    pub fn payload(
        &mut self,
        segment: u64,
        offset: u64,
        check_payload: bool,
    ) -> StorageResult<&[u8]> {
        self.keep(segment, offset)?;
        let (seg, map) = self.cur.as_mut().expect("kept above");
        let header = seg.locate(map, offset, check_payload)?;
        let start = crate::cast::usize_from(offset) + frame::FRAME_HEADER_BYTES;
        Ok(&map[start..start + header.payload_len as usize])
    }

    /// Bytes `part` of the payload of the frame at a location, read without
    /// decoding its header again: for a caller that read and verified this
    /// frame before and noted where in its payload the bytes lie (a frame's
    /// bytes never change while its segment exists). The location must be
    /// a frame boundary and the bytes must end within the segment's durable
    /// bytes; `None` otherwise (the caller reads the whole frame instead).
    pub fn payload_part(
        &mut self,
        segment: u64,
        offset: u64,
        part: std::ops::Range<usize>,
    ) -> Option<&[u8]> {
        self.keep(segment, offset).ok()?;
        let (seg, map) = self.cur.as_mut().expect("kept above");
        seg.part(map, offset, part)
    }

    /// Keeps segment `segment` and its mapping, if another is kept.
    #[inline(always)]
    fn keep(&mut self, segment: u64, offset: u64) -> StorageResult<()> {
        if self.cur.as_ref().is_some_and(|(s, _)| s.no == segment) {
            return Ok(());
        }
        self.switch(segment, offset)
    }

    /// [`FrameReader::keep`] when another segment (or none) is kept.
    #[cold]
    #[inline(never)]
    fn switch(&mut self, segment: u64, offset: u64) -> StorageResult<()> {
        let seg = self.log.segment_at(segment, offset)?;
        let map = seg.view(0)?;
        self.cur = Some((seg, map));
        Ok(())
    }
}
