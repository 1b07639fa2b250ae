//! Scanning a segment's bytes on open: find the valid prefix, and decide
//! whether what follows it is a torn tail (safe to drop: it was never
//! acknowledged) or damage to durable data (never dropped silently).
//!
//! The decision rests on two facts the writer guarantees:
//! - an append is acknowledged only after an fsync that covers all its
//!   frames, and every frame records in `durable_before` how much of its
//!   segment was already durable when it was written;
//! - an atomic batch ends with a frame flagged `BATCH_END` and never spans
//!   two segments.
//!
//! So if the first bad frame is at offset X and no valid frame after X
//! claims `durable_before > X`, nothing from X on was ever acknowledged;
//! and complete frames after the last `BATCH_END` belong to a batch whose
//! fsync never finished.

use crate::frame::{self, FrameError, Lsn};

/// Why the scan stopped before the end of the bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    Frame(FrameError),
    LsnNotIncreasing {
        previous: Lsn,
        found: Lsn,
    },
    /// An intact frame whose LSN skips some: frames are missing before it.
    /// A torn write cannot produce this (frames are written at positions
    /// that follow each other), so it is never treated as a torn tail.
    LsnGap {
        previous: Lsn,
        found: Lsn,
    },
}

impl StopReason {
    /// Whether the stop could be the end of an interrupted write. An intact
    /// frame in the wrong place cannot.
    pub(crate) fn may_be_torn(&self) -> bool {
        matches!(self, StopReason::Frame(_))
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Frame(e) => e.fmt(f),
            StopReason::LsnNotIncreasing { previous, found } => {
                write!(f, "LSN {found} does not follow {previous}")
            }
            StopReason::LsnGap { previous, found } => write!(
                f,
                "LSN {found} follows {previous}: LSNs {}..={} are missing",
                previous + 1,
                found - 1
            ),
        }
    }
}

/// Outcome of scanning one segment.
#[derive(Clone, Debug, Default)]
pub(crate) struct SegmentScan {
    /// End of the last frame that ends a batch (the keepable prefix).
    pub batch_end: u64,
    /// Frames in the keepable prefix.
    pub frames: u64,
    /// LSN of the last frame in the keepable prefix.
    pub last_lsn: Option<Lsn>,
    /// LSNs of complete frames after `batch_end` (an unfinished batch).
    pub unfinished_batch_lsns: Vec<Lsn>,
    /// End of the last valid frame (>= batch_end).
    pub valid_end: u64,
    /// Where and why scanning stopped, if before the end of the bytes.
    pub stop: Option<(u64, StopReason)>,
    /// A valid frame after the stop point that proves the damaged bytes had
    /// been durable: (its offset, its durable_before).
    pub durable_after_damage: Option<(u64, u32)>,
}

/// Scans `bytes` (a whole segment file) from `start`. `prev_lsn` is the
/// LSN just before the segment's first (0 before the log's first frame).
/// LSNs must follow each other without gaps, except that LSNs up to
/// `gaps_through` may be missing (a compaction rewrite dropped them; 0 for
/// segments written only by appends).
pub(crate) fn scan(bytes: &[u8], start: u64, prev_lsn: Lsn, gaps_through: Lsn) -> SegmentScan {
    let mut s = SegmentScan {
        batch_end: start,
        valid_end: start,
        ..SegmentScan::default()
    };
    let mut pos = crate::cast::usize_from(start);
    let mut last = prev_lsn;
    let mut pending: Vec<Lsn> = Vec::new();
    let mut pending_frames = 0u64;
    while pos < bytes.len() {
        let header = match frame::decode(&bytes[pos..]) {
            Ok((h, _)) if pos + h.encoded_len() > bytes.len() => {
                // Header and payload intact but the padding is cut off: the
                // write was torn inside the frame's last 15 bytes.
                let e = FrameError::Truncated {
                    available: bytes.len() - pos,
                    needed: h.encoded_len(),
                };
                s.stop = Some((pos as u64, StopReason::Frame(e)));
                break;
            }
            Ok((h, _)) => h,
            Err(e) => {
                s.stop = Some((pos as u64, StopReason::Frame(e)));
                break;
            }
        };
        if header.lsn <= last {
            s.stop = Some((
                pos as u64,
                StopReason::LsnNotIncreasing {
                    previous: last,
                    found: header.lsn,
                },
            ));
            break;
        }
        if header.lsn != last + 1 && header.lsn - 1 > gaps_through {
            s.stop = Some((
                pos as u64,
                StopReason::LsnGap {
                    previous: last,
                    found: header.lsn,
                },
            ));
            break;
        }
        last = header.lsn;
        pos += header.encoded_len();
        s.valid_end = pos as u64;
        pending.push(header.lsn);
        pending_frames += 1;
        if header.is_batch_end() {
            s.batch_end = pos as u64;
            s.frames += pending_frames;
            s.last_lsn = Some(header.lsn);
            pending.clear();
            pending_frames = 0;
        }
    }
    s.unfinished_batch_lsns = pending;
    if let Some((stop_at, _)) = &s.stop {
        s.durable_after_damage = find_durable_frame_after(bytes, *stop_at);
    }
    s
}

/// Looks for any valid frame after `damaged_at` whose `durable_before`
/// says the damaged offset had already been made durable.
fn find_durable_frame_after(bytes: &[u8], damaged_at: u64) -> Option<(u64, u32)> {
    let mut pos = crate::cast::usize_from(damaged_at) + frame::FRAME_ALIGN;
    while pos + frame::FRAME_HEADER_BYTES <= bytes.len() {
        if bytes[pos..pos + 4] == frame::FRAME_MAGIC.to_le_bytes()
            && let Ok((h, _)) = frame::decode(&bytes[pos..])
            && u64::from(h.durable_before) > damaged_at
        {
            return Some((pos as u64, h.durable_before));
        }
        pos += frame::FRAME_ALIGN;
    }
    None
}

/// Why recovery cut the tail of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TruncationReason {
    /// Bytes after the last good frame did not form a valid frame
    /// (torn write, flipped bits, garbage or zero fill: `detail` says which).
    InvalidTail {
        /// The first problem found.
        detail: String,
    },
    /// Complete frames of a batch whose final frame never made it.
    UnfinishedBatch,
}

impl std::fmt::Display for TruncationReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TruncationReason::InvalidTail { detail } => write!(f, "a torn tail: {detail}"),
            TruncationReason::UnfinishedBatch => f.write_str("a batch left unfinished"),
        }
    }
}

/// What recovery removed from the end of the log. Nothing in the log
/// proves any of it acknowledged (the ledger may prove an operation in it
/// so, which the engine then applies again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Segment that was cut.
    pub segment: u64,
    /// New length of the segment file.
    pub offset: u64,
    /// Bytes removed.
    pub bytes_dropped: u64,
    /// LSNs of complete frames removed (members of an unfinished batch).
    pub dropped_lsns: Vec<Lsn>,
    /// The last LSN kept: everything cut came after it.
    pub after_lsn: Lsn,
    /// Why.
    pub reason: TruncationReason,
}

impl Truncation {
    /// Where the cut begins: after the LSN it keeps, or at the log's start.
    pub fn after(&self) -> String {
        match self.after_lsn {
            0 => "at the log's start".to_string(),
            l => format!("after LSN {l}"),
        }
    }

    /// The complete frames the cut takes with it, of a batch left
    /// unfinished (`None` when there are none).
    pub fn unfinished_batch(&self) -> Option<String> {
        match self.dropped_lsns.as_slice() {
            [] => None,
            [one] => Some(format!(
                "LSN {one}, complete but of a batch left unfinished"
            )),
            [first, .., last] => Some(format!(
                "LSNs {first} to {last}, complete but of a batch left unfinished"
            )),
        }
    }
}

impl std::fmt::Display for Truncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cut {} bytes at segment {} offset {}, {} ({}); ",
            self.bytes_dropped,
            self.segment,
            self.offset,
            self.after(),
            self.reason,
        )?;
        if let Some(b) = self.unfinished_batch() {
            write!(f, "{b}, went too; ")?;
        }
        // (the ledger may prove an operation in it acknowledged: it is
        // applied again then, and said so)
        f.write_str("the log holds no proof that any of it was acknowledged")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FLAG_BATCH_END, FrameType, encode};

    fn log_bytes(batches: &[&[u32]], durable: &[u32]) -> Vec<u8> {
        // batches of payload sizes; durable_before per batch
        let mut v = vec![0u8; 64];
        let mut lsn = 1;
        for (bi, b) in batches.iter().enumerate() {
            for (i, &n) in b.iter().enumerate() {
                let flags = if i + 1 == b.len() { FLAG_BATCH_END } else { 0 };
                encode(
                    &mut v,
                    lsn,
                    FrameType(1),
                    1,
                    flags,
                    durable[bi],
                    &vec![lsn as u8; n as usize],
                );
                lsn += 1;
            }
        }
        v
    }

    #[test]
    fn a_frame_missing_its_padding_is_torn() {
        let v = log_bytes(&[&[10], &[3]], &[64, 64]);
        let cut = v.len() - 5; // inside the last frame's padding
        let s = scan(&v[..cut], 64, 0, 0);
        assert_eq!(s.batch_end, (64 + frame::encoded_len(10)) as u64);
        assert!(matches!(
            s.stop,
            Some((_, StopReason::Frame(FrameError::Truncated { .. })))
        ));
    }

    #[test]
    fn a_skipped_lsn_is_a_gap_unless_rewritten() {
        let mut v = log_bytes(&[&[10]], &[64]);
        let keep = v.len();
        encode(
            &mut v,
            3,
            FrameType(1),
            1,
            FLAG_BATCH_END,
            keep as u32,
            b"x",
        );
        let s = scan(&v, 64, 0, 0);
        assert_eq!(s.batch_end, keep as u64);
        assert_eq!(
            s.stop,
            Some((
                keep as u64,
                StopReason::LsnGap {
                    previous: 1,
                    found: 3
                }
            ))
        );
        assert!(!s.stop.as_ref().unwrap().1.may_be_torn());
        let s = scan(&v, 64, 0, 2);
        assert_eq!(s.stop, None);
        assert_eq!(s.last_lsn, Some(3));
    }

    #[test]
    fn clean_log_scans_fully() {
        let v = log_bytes(&[&[10, 20], &[5]], &[64, 64]);
        let s = scan(&v, 64, 0, 0);
        assert_eq!(s.batch_end, v.len() as u64);
        assert_eq!(s.frames, 3);
        assert_eq!(s.last_lsn, Some(3));
        assert!(s.stop.is_none());
    }

    #[test]
    fn unfinished_batch_is_reported_not_kept() {
        let mut v = log_bytes(&[&[10]], &[64]);
        let keep = v.len();
        encode(&mut v, 2, FrameType(1), 1, 0, keep as u32, b"partial");
        let s = scan(&v, 64, 0, 0);
        assert_eq!(s.batch_end, keep as u64);
        assert_eq!(s.unfinished_batch_lsns, vec![2]);
        assert_eq!(s.valid_end, v.len() as u64);
    }

    #[test]
    fn damage_followed_by_durable_frame_is_detected() {
        let v1 = log_bytes(&[&[10], &[10]], &[64, 64]);
        let second_start = 64 + frame::encoded_len(10);
        let mut v = v1.clone();
        // a later group, written after the first two were durable
        encode(
            &mut v,
            3,
            FrameType(1),
            1,
            FLAG_BATCH_END,
            v1.len() as u32,
            b"x",
        );
        v[second_start + 40] ^= 0xFF; // damage the second frame's payload
        let s = scan(&v, 64, 0, 0);
        assert_eq!(s.stop.as_ref().unwrap().0, second_start as u64);
        assert!(s.durable_after_damage.is_some());
    }

    #[test]
    fn torn_tail_has_no_durable_successor() {
        let v1 = log_bytes(&[&[10]], &[64]);
        let mut v = v1.clone();
        encode(
            &mut v,
            2,
            FrameType(1),
            1,
            FLAG_BATCH_END,
            v1.len() as u32,
            &[1; 700],
        );
        encode(
            &mut v,
            3,
            FrameType(1),
            1,
            FLAG_BATCH_END,
            v1.len() as u32,
            &[2; 10],
        );
        let torn = v1.len() + 100;
        v[torn] ^= 0xFF;
        let s = scan(&v, 64, 0, 0);
        assert_eq!(s.batch_end, v1.len() as u64);
        assert!(s.durable_after_damage.is_none());
    }
}
