//! Rewriting a sealed segment in place (compaction's purges): the kept
//! frames keep their LSNs, the file is replaced by rename, so a crash
//! leaves either the old or the new segment.

use super::*;

impl SegmentLog {
    /// Replaces sealed segment `no` by a rewritten copy holding the frames
    /// `keep` returns (a frame may be kept as is, dropped, or replaced by a
    /// new payload under the same LSN). The new file is written under a
    /// temporary name, synced, and renamed over the old one, so a crash
    /// leaves either the old or the new segment. Returns the new location of
    /// every kept frame, keyed by LSN. The active segment cannot be
    /// rewritten: call [`SegmentLog::rotate`] first. Callers must ensure no
    /// reader relies on old offsets afterwards.
    pub fn rewrite_segment(
        &self,
        no: u64,
        mut keep: impl FnMut(&FrameRef) -> Rewrite,
    ) -> StorageResult<Vec<FrameLoc>> {
        let seg = self.segment(no).ok_or(StorageError::BadLocation {
            segment: no,
            offset: 0,
            reason: "no such segment".into(),
        })?;
        if self.tx.lock().is_some() && self.shared.segments.read().last().map(|s| s.no) == Some(no)
        {
            return Err(StorageError::BadLocation {
                segment: no,
                offset: 0,
                reason: "the active segment cannot be rewritten while appends run; rotate first"
                    .into(),
            });
        }
        let mut out = Vec::with_capacity(crate::cast::usize_from(seg.durable_len()));
        let mut locs = Vec::new();
        let mut frames: Vec<(FrameRef, Rewrite)> = Vec::new();
        let end = seg.durable_len();
        let map = seg.view(end)?;
        let mut pos = SEGMENT_HEADER_BYTES as u64;
        while pos < end {
            let header = read::decode_at(&map, no, pos, end)?;
            let fr = FrameRef::new(map.clone(), no, pos, header);
            pos += header.encoded_len() as u64;
            let decision = keep(&fr);
            frames.push((fr, decision));
        }
        // The rewritten segment still covers every LSN the original did, so
        // the log's continuity stays checkable when frames are dropped.
        let end_lsn = frames
            .last()
            .map_or(seg.first_lsn - 1, |(f, _)| f.header.lsn)
            .max(seg.end_lsn.unwrap_or(0));
        let end_lsn_field = (end_lsn >= seg.first_lsn).then_some(end_lsn);
        // (the header is written again below, with the length once known)
        out.extend_from_slice(&segment::encode_header_with_end(
            no,
            seg.first_lsn,
            end_lsn_field,
            None,
        ));
        // Keep batch boundaries: a kept frame that followed a dropped batch
        // end inherits nothing; flags are recomputed so that every maximal
        // run of kept frames of one original batch still ends with BATCH_END.
        let n = frames.len();
        for i in 0..n {
            let (fr, decision) = &frames[i];
            let payload: &[u8] = match decision {
                Rewrite::Drop => continue,
                Rewrite::Keep => fr.payload(),
                Rewrite::Replace { payload, .. } => payload,
            };
            let (ft, fv) = match decision {
                Rewrite::Replace {
                    frame_type,
                    frame_version,
                    ..
                } => (*frame_type, *frame_version),
                _ => (fr.header.frame_type, fr.header.frame_version),
            };
            // The batch ends here if the original frame ended its batch, or
            // every later frame of the same batch is dropped.
            let mut ends = fr.header.is_batch_end();
            if !ends {
                ends = true;
                for (later, d) in &frames[i + 1..] {
                    if !matches!(d, Rewrite::Drop) {
                        ends = false;
                        break;
                    }
                    if later.header.is_batch_end() {
                        break;
                    }
                }
            }
            let offset = out.len() as u64;
            // A rewrite is never longer than the original segment, whose
            // offsets fit in 32 bits (`segment_bytes_max` <= 4 GiB).
            let durable_before =
                crate::cast::u32_from(out.len()).ok_or_else(|| StorageError::BadLocation {
                    segment: no,
                    offset,
                    reason: "a rewritten segment beyond 4 GiB".into(),
                })?;
            frame::encode(
                &mut out,
                fr.header.lsn,
                ft,
                fv,
                if ends { FLAG_BATCH_END } else { 0 },
                durable_before,
                payload,
            );
            locs.push(FrameLoc {
                segment: no,
                offset,
                lsn: fr.header.lsn,
            });
        }
        drop(frames);
        drop(map);
        // The header records the length written whole: recovery then never
        // takes a cut or damaged frame before it for a torn write.
        let whole_len = out.len() as u64;
        out[..SEGMENT_HEADER_BYTES].copy_from_slice(&segment::encode_header_with_end(
            no,
            seg.first_lsn,
            end_lsn_field,
            Some(whole_len),
        ));
        let tmp = seg.path.with_extension("seg.tmp");
        let backend = &self.shared.backend;
        let f = backend
            .open(&tmp, OpenMode::Truncate)
            .map_err(io_err(&tmp))?;
        let written = f
            .write_all_at(&out, 0)
            .and_then(|()| f.sync_data())
            .map_err(io_err(&tmp));
        if let Err(e) = written {
            // (on a full disk, the partial copy holds the space a retry
            // needs; the next writable open would remove it too)
            drop(f);
            let _ = backend.remove_file(&tmp);
            return Err(e);
        }
        backend.rename(&tmp, &seg.path).map_err(io_err(&seg.path))?;
        backend
            .sync_dir(&self.shared.dir)
            .map_err(io_err(&self.shared.dir))?;
        let new_seg = Arc::new(Segment::new(
            no,
            seg.path.clone(),
            seg.first_lsn,
            Some(end_lsn),
            f,
            out.len() as u64,
            0,
        )?);
        let mut segs = self.shared.segments.write();
        if let Ok(i) = segs.binary_search_by_key(&no, |s| s.no) {
            segs[i] = new_seg;
        }
        Ok(locs)
    }
}

/// What [`SegmentLog::rewrite_segment`] does with one frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rewrite {
    /// Keep the frame unchanged.
    Keep,
    /// Remove the frame.
    Drop,
    /// Keep the LSN, replace type, version and payload.
    Replace {
        /// New type tag.
        frame_type: FrameType,
        /// New payload version.
        frame_version: u8,
        /// New payload.
        payload: Vec<u8>,
    },
}
