//! The append-only segment log, Engram's system of record.
//!
//! - **Writes**: callers hand atomic batches of frames to one writer thread
//!   over a channel. The writer drains whatever is queued (a *group*), lays
//!   the frames out back to back, writes them with one positional write and
//!   one `fdatasync` per segment touched, runs the commit hook (the
//!   engine applies the frames to its in-memory state), and only then
//!   acknowledges every batch in the group. LSNs are assigned by the writer,
//!   so LSN order is the order of durability and of application.
//! - **Segments** are bounded (`segment_bytes_max`); a batch never spans two
//!   segments. A new segment is created, its header synced and the directory
//!   synced before any frame goes into it.
//! - **Failure**: if a write or fsync fails, the writer stops ("poisoned"):
//!   the batches of that group are answered with an error (their fate is
//!   unknown, as after any failed fsync), and every later append fails until
//!   the store is reopened, which runs recovery.
//! - **Recovery** (on open): every segment is scanned; see `log::recovery` for
//!   how a torn tail is told apart from damage. The torn tail of the last
//!   segment is truncated and reported in a [`RecoveryReport`].
//! - **Reads** are zero-copy: a [`FrameRef`] borrows the payload from a
//!   memory map after checking both CRCs.
//!
//! This module must never acknowledge a batch before its fsync returned,
//! never let a batch span segments, and never truncate a sealed segment.

mod read;
pub(crate) mod recovery;
pub mod repair;
mod rewrite;
pub mod segment;
mod writer;

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};

use crate::aligned::AlignedBuf;
use crate::backend::{Backend, MapOptions, OpenMode};
use crate::error::{StorageError, StorageResult};
use crate::frame::{self, FLAG_BATCH_END, FrameHeader, FrameType, Lsn};
use crate::oneshot;
pub use read::FrameReader;
pub use recovery::{Truncation, TruncationReason};
pub use rewrite::Rewrite;
pub use segment::{FrameLoc, FrameRef};
use segment::{SEGMENT_HEADER_BYTES, Segment};
pub use writer::Acknowledgements;
use writer::{APPLY_QUEUE_GROUPS, ApplyMsg, applier_loop, create_segment, writer_loop};

/// Default bound on a segment file's size.
pub const SEGMENT_BYTES_MAX_DEFAULT: u64 = 64 << 20;
/// Default bound on one frame's payload.
pub const FRAME_PAYLOAD_BYTES_MAX_DEFAULT: usize = 16 << 20;
/// Default bound on one atomic batch (all its frames, encoded).
pub const BATCH_BYTES_MAX_DEFAULT: usize = 48 << 20;
/// Default bound on the bytes one group commit gathers before writing.
pub const GROUP_BYTES_MAX_DEFAULT: usize = 8 << 20;
/// Default preallocation step of the active segment.
pub const PREALLOCATE_BYTES_DEFAULT: u64 = 4 << 20;

/// Tunables of the log.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// A segment is sealed once it would grow past this (a single batch
    /// larger than this still goes whole into a fresh segment).
    pub segment_bytes_max: u64,
    /// Largest accepted frame payload.
    pub frame_payload_bytes_max: usize,
    /// Largest accepted atomic batch (encoded bytes).
    pub batch_bytes_max: usize,
    /// A group commit stops gathering queued batches past this many bytes.
    pub group_bytes_max: usize,
    /// The active segment is extended with zeros (and synced) this many
    /// bytes at a time ahead of the writes, so that each commit's
    /// `fdatasync` flushes data only, not a new file size. 0 disables.
    pub preallocate_bytes: u64,
}

impl LogOptions {
    /// Checks the options against the format's hard limits.
    pub fn validate(&self) -> StorageResult<()> {
        let bad = |reason: String| Err(StorageError::InvalidOptions { reason });
        if self.frame_payload_bytes_max == 0
            || self.frame_payload_bytes_max > frame::FRAME_PAYLOAD_BYTES_CEILING
        {
            return bad(format!(
                "frame_payload_bytes_max must be within 1..={}",
                frame::FRAME_PAYLOAD_BYTES_CEILING
            ));
        }
        if self.segment_bytes_max < (SEGMENT_HEADER_BYTES as u64) * 2
            || self.segment_bytes_max > u64::from(u32::MAX)
        {
            return bad("segment_bytes_max must be within 128 bytes..=4 GiB (offsets are 32-bit in frame headers)".into());
        }
        if self.batch_bytes_max < frame::encoded_len(self.frame_payload_bytes_max.min(1 << 20)) {
            return bad("batch_bytes_max must hold at least one frame".into());
        }
        if self.group_bytes_max == 0 {
            return bad("group_bytes_max must be positive".into());
        }
        Ok(())
    }
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes_max: SEGMENT_BYTES_MAX_DEFAULT,
            frame_payload_bytes_max: FRAME_PAYLOAD_BYTES_MAX_DEFAULT,
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
            group_bytes_max: GROUP_BYTES_MAX_DEFAULT,
            preallocate_bytes: PREALLOCATE_BYTES_DEFAULT,
        }
    }
}

/// A frame waiting to be appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingFrame {
    /// Type tag.
    pub frame_type: FrameType,
    /// Payload encoding version.
    pub frame_version: u8,
    /// The bytes.
    pub payload: Vec<u8>,
}

/// A frame just made durable, as shown to the commit hook. The payload is
/// 16-byte aligned.
#[derive(Debug)]
pub struct CommittedFrame<'a> {
    /// Where it now lives.
    pub loc: FrameLoc,
    /// Its header.
    pub header: FrameHeader,
    /// Its payload.
    pub payload: &'a [u8],
}

/// Called on the log's applier thread after each group's fsync, with the
/// group's frames in LSN order (one call per segment the group touched,
/// the last one with the group's [`Acknowledgements`]). The group is
/// acknowledged when the last call sends them, or once it returns.
pub type CommitHook = Box<dyn FnMut(&[CommittedFrame<'_>], &mut Acknowledgements<'_>) + Send>;

/// Called on the same thread as the [`CommitHook`], with a large group's
/// frames once they are written and while their fsync runs, always before
/// the commit hook sees the same frames. The frames are not durable yet:
/// the hook may only prepare work for the commit hook (nothing it does may
/// become visible), and a group whose fsync fails is prepared but never
/// committed. Groups of fewer than [`PREPARE_MIN_FRAMES`] frames are not
/// prepared.
pub type PrepareHook = Box<dyn FnMut(&[CommittedFrame<'_>]) + Send>;

/// The smallest group handed to a [`PrepareHook`]: below it, waking the
/// applier for the preparation costs about what it would save.
pub const PREPARE_MIN_FRAMES: usize = 32;

/// Result of an append: where each frame went.
pub type AppendOutcome = Vec<FrameLoc>;

/// What opening the log found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments scanned.
    pub n_segments: usize,
    /// Valid frames kept.
    pub n_frames: u64,
    /// Last LSN kept.
    pub last_lsn: Option<Lsn>,
    /// The cut made at the tail, if any.
    pub truncation: Option<Truncation>,
    /// A last segment that was being created when the process stopped and
    /// held no frames; it was removed.
    pub removed_incomplete_segment: Option<PathBuf>,
    /// Zero bytes after the last frame of the last segment: preallocated
    /// space, kept for the next writes (segment, offset, bytes). Not damage.
    pub preallocated_tail: Option<(u64, u64, u64)>,
    /// Read-only opens change nothing: the unacknowledged tail a writable
    /// open would cut (readers do not see it).
    pub torn_tail_pending: Option<Truncation>,
}

/// What is known about the log from outside it, and how it may be changed.
#[derive(Clone, Debug, Default)]
pub struct RecoveryOptions {
    /// Open for reading only: no file is created, cut or removed, and no
    /// writer can start. What a writable open would cut is reported in
    /// [`RecoveryReport::torn_tail_pending`].
    pub read_only: bool,
    /// The highest LSN that state derived from the log (index
    /// snapshots, checkpoints) proves was durable, and therefore may have
    /// been acknowledged. Recovery never cuts at or below it.
    pub durable_lsn: Lsn,
    /// What proves `durable_lsn`, for messages ("the lexical index snapshot", ...).
    pub durable_evidence: String,
}

/// A cut of the last segment decided by recovery, made only once every
/// check has passed.
struct PendingCut {
    /// The damage as a refusal to cut names it.
    refusal: String,
    file: Arc<dyn crate::backend::BackendFile>,
    path: PathBuf,
    truncation: Truncation,
}

impl RecoveryReport {
    /// Whether the log was found exactly as it was last left (preallocated
    /// space counts as clean).
    pub fn is_clean(&self) -> bool {
        self.truncation.is_none() && self.removed_incomplete_segment.is_none()
    }
}

/// Counters about the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Number of segment files.
    pub n_segments: usize,
    /// Bytes in all segment files.
    pub bytes: u64,
    /// Last durable LSN (0 if the log is empty).
    pub last_lsn: Lsn,
    /// Group commits (= fsyncs of frames) since open.
    pub n_groups: u64,
    /// Frames appended since open.
    pub n_frames_appended: u64,
    /// Time spent in the `fdatasync` of appended frames since open, in
    /// microseconds (one or more per group commit).
    pub fsync_us_total: u64,
    /// `fdatasync` calls of appended frames since open.
    pub n_fsyncs: u64,
    /// Time from the start of writing a group to its frames being durable,
    /// summed over the group commits since open, in microseconds.
    pub group_commit_us_total: u64,
    /// Group commits the commit hook acknowledged before it returned (sent
    /// their [`Acknowledgements`], to apply them after), since open.
    pub n_groups_acknowledged_early: u64,
}

impl LogStats {
    /// Adds `other`'s counters (groups, frames, fsyncs and their times,
    /// all "since open") to these; sizes and LSNs are left as they are.
    pub fn add_counters(&mut self, other: &LogStats) {
        self.n_groups += other.n_groups;
        self.n_frames_appended += other.n_frames_appended;
        self.fsync_us_total += other.fsync_us_total;
        self.n_fsyncs += other.n_fsyncs;
        self.group_commit_us_total += other.group_commit_us_total;
        self.n_groups_acknowledged_early += other.n_groups_acknowledged_early;
    }
}

/// One problem found by [`SegmentLog::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogProblem {
    /// Segment number.
    pub segment: u64,
    /// Offset of the problem.
    pub offset: u64,
    /// Description.
    pub detail: String,
}

enum Request {
    Append {
        frames: Vec<PendingFrame>,
        encoded_bytes: usize,
        reply: oneshot::Sender<StorageResult<AppendOutcome>>,
    },
    Rotate {
        reply: oneshot::Sender<StorageResult<()>>,
    },
}

struct Shared {
    backend: Arc<dyn Backend>,
    dir: PathBuf,
    opts: LogOptions,
    read_only: bool,
    segments: RwLock<Vec<Arc<Segment>>>,
    poisoned: Mutex<Option<String>>,
    /// When a group last failed for a full disk, and why; cleared by the
    /// next group written (the writer goes on after a full disk).
    disk_full: Mutex<Option<(std::time::Instant, String)>>,
    /// The last preallocation found no room (its zeros were cut): the
    /// writer does not preallocate ahead between groups until one succeeds,
    /// so on a full disk a group's own attempt stays the only one.
    preallocation_gave_way: std::sync::atomic::AtomicBool,
    last_lsn: AtomicU64,
    n_groups: AtomicU64,
    n_groups_acknowledged_early: AtomicU64,
    n_frames: AtomicU64,
    fsync_us_total: AtomicU64,
    n_fsyncs: AtomicU64,
    group_commit_us_total: AtomicU64,
    /// Where this log's appenders wait for their acknowledgements.
    replies: Arc<crate::spin::Site>,
}

/// The segment log. See the module documentation.
pub struct SegmentLog {
    shared: Arc<Shared>,
    tx: Mutex<Option<Sender<Request>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    applier: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for SegmentLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentLog")
            .field("dir", &self.shared.dir)
            .finish()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StorageError + '_ {
    move |e| StorageError::io(path, e)
}

impl SegmentLog {
    /// Opens (creating if needed) the log in `dir`, running recovery. The
    /// log is readable at once; appends need [`SegmentLog::start_writer`].
    pub fn open(
        backend: Arc<dyn Backend>,
        dir: &Path,
        opts: LogOptions,
    ) -> StorageResult<(SegmentLog, RecoveryReport)> {
        Self::open_with(backend, dir, opts, &RecoveryOptions::default())
    }

    /// Opens the log in `dir` as [`SegmentLog::open`] does, with what is
    /// known from outside the log (see [`RecoveryOptions`]).
    ///
    /// Recovery refuses, changing no byte, when the log is not a gapless
    /// run of LSNs from 1 (a missing or cut segment), when damage is
    /// followed by frames that prove it had been durable, when an intact
    /// frame is out of place, and when cutting a damaged tail would drop an
    /// LSN at or below `durable_lsn`. Only a damaged or unfinished tail of
    /// the last segment that nothing proves acknowledged is cut.
    pub fn open_with(
        backend: Arc<dyn Backend>,
        dir: &Path,
        opts: LogOptions,
        ropts: &RecoveryOptions,
    ) -> StorageResult<(SegmentLog, RecoveryReport)> {
        opts.validate()?;
        let read_only = ropts.read_only;
        if !read_only {
            backend.create_dir_all(dir).map_err(io_err(dir))?;
        }
        let numbers = segment::segment_numbers(&*backend, dir, !read_only)?;
        let mut report = RecoveryReport::default();
        let mut segments: Vec<Arc<Segment>> = Vec::new();
        // The last LSN the segments so far cover: frames must continue from it.
        let mut prev_end: Lsn = 0;
        // The highest LSN of a frame the log holds (a segment's header may
        // record an end past its last frame, for frames a compaction
        // dropped).
        let mut last_frame: Lsn = 0;
        let mut expected_no = 1u64;
        let mut cut: Option<PendingCut> = None;
        let n = numbers.len();
        let file_mode = if read_only {
            OpenMode::Read
        } else {
            OpenMode::Write
        };
        for (i, &no) in numbers.iter().enumerate() {
            let is_last = i + 1 == n;
            let path = segment::segment_path(dir, no);
            let file = backend.open(&path, file_mode).map_err(io_err(&path))?;
            let len = file.len().map_err(io_err(&path))?;
            let map = file
                .map(len, MapOptions::default())
                .map_err(io_err(&path))?;
            let header = match segment::decode_header(&map) {
                Ok(h) => h,
                Err(segment::HeaderProblem::Incomplete | segment::HeaderProblem::Damaged(_))
                    if is_last && len <= SEGMENT_HEADER_BYTES as u64 =>
                {
                    // Created but the header never became whole: no frame
                    // was ever written to it. Removed once nothing refuses
                    // the open (a refusal changes nothing).
                    drop(map);
                    report.removed_incomplete_segment = Some(path);
                    continue;
                }
                Err(segment::HeaderProblem::Unsupported(v)) => {
                    return Err(StorageError::UnsupportedFormat {
                        segment: no,
                        found: v,
                        supported: segment::LOG_FORMAT_VERSION,
                    });
                }
                Err(p) => {
                    return Err(StorageError::BadSegmentHeader {
                        segment: no,
                        path,
                        reason: p.to_string(),
                    });
                }
            };
            if header.segment_no != no {
                return Err(StorageError::BadSegmentHeader {
                    segment: no,
                    path,
                    reason: format!("header says segment {}", header.segment_no),
                });
            }
            // The log is one gapless run of LSNs from 1: segment numbers
            // follow each other, and each segment starts where the one
            // before it ended.
            if no != expected_no {
                let files = if no == expected_no + 1 {
                    format!("segment file {expected_no} is missing")
                } else {
                    format!("segment files {expected_no}..={} are missing", no - 1)
                };
                return Err(StorageError::LogGap {
                    first_lsn: prev_end + 1,
                    last_lsn: header.first_lsn.saturating_sub(1).max(prev_end + 1),
                    detail: format!("{files}; segment {no} starts at LSN {}", header.first_lsn),
                });
            }
            if header.first_lsn > prev_end + 1 {
                return Err(StorageError::LogGap {
                    first_lsn: prev_end + 1,
                    last_lsn: header.first_lsn - 1,
                    detail: if no == 1 {
                        format!("the first segment starts at LSN {}", header.first_lsn)
                    } else {
                        format!(
                            "segment {} ends at LSN {prev_end} but segment {no} starts at LSN {}",
                            no - 1,
                            header.first_lsn
                        )
                    },
                });
            }
            if header.first_lsn <= prev_end {
                return Err(StorageError::CorruptLog {
                    segment: no,
                    offset: 0,
                    reason: format!(
                        "segment starts at LSN {} but earlier segments reach LSN {prev_end}",
                        header.first_lsn
                    ),
                });
            }
            expected_no = no + 1;
            let gaps_through = header.end_lsn.unwrap_or(0);
            let mut scan = recovery::scan(
                &map,
                SEGMENT_HEADER_BYTES as u64,
                header.first_lsn - 1,
                gaps_through,
            );
            // Zeros from the end of the last frame to the end of the file are
            // preallocated space, not damage.
            let mut zero_tail = None;
            if let Some((at, recovery::StopReason::Frame(crate::frame::FrameError::ZeroFilled))) =
                &scan.stop
            {
                if *at == scan.batch_end
                    && map[crate::cast::usize_from(*at)..].iter().all(|&b| b == 0)
                {
                    zero_tail = Some((*at, len - *at));
                    scan.stop = None;
                    scan.durable_after_damage = None;
                }
            }
            let last_kept = scan.last_lsn.unwrap_or(header.first_lsn - 1);
            let damaged = scan.stop.is_some() || scan.valid_end != scan.batch_end;
            // A segment a rewrite wrote whole and synced before its first
            // use: its batches must reach the length its header records.
            // Whatever ends them before it (a cut, zeros, a damaged frame,
            // a batch left unfinished) is no torn write.
            if let Some(w) = header.whole_past(scan.batch_end) {
                let (offset, what) = match &scan.stop {
                    Some((at, r)) => (*at, format!("{r} at offset {at}")),
                    None if scan.valid_end != scan.batch_end => (
                        scan.batch_end,
                        "the segment ends inside a batch".to_string(),
                    ),
                    None => (
                        scan.batch_end,
                        format!("its frames end at offset {}", scan.batch_end),
                    ),
                };
                return Err(StorageError::CorruptLog {
                    segment: no,
                    offset,
                    reason: format!(
                        "{what}, after LSN {last_kept}; not a torn tail: the segment's header \
                         records that a compaction, restore or repair wrote it whole through \
                         byte {w}{} and synced it before its first use",
                        header
                            .end_lsn
                            .map(|e| format!(" (frames through LSN {e})"))
                            .unwrap_or_default()
                    ),
                });
            }
            // A rewritten segment of an earlier build, which recorded no
            // length: the LSNs its header covers are what it was written
            // whole through.
            let legacy_end = header.end_lsn.filter(|_| header.whole_len.is_none());
            if damaged {
                if let Some((offset, reason)) = &scan.stop {
                    let why_not_torn = if !is_last {
                        Some(
                            "a later segment exists, so this one was complete and durable"
                                .to_string(),
                        )
                    } else if let Some(end) = legacy_end.filter(|&e| e > last_kept) {
                        Some(format!(
                            "the segment's header records frames through LSN {end}: it was \
                             written whole (by a compaction, restore or repair) and synced \
                             before its first use"
                        ))
                    } else if let Some((at, before)) = scan.durable_after_damage {
                        Some(format!(
                            "the intact frame at offset {at} was written after bytes up to {before} were durable"
                        ))
                    } else if !reason.may_be_torn() {
                        Some(
                            "an interrupted write cannot leave an intact frame out of place"
                                .to_string(),
                        )
                    } else {
                        None
                    };
                    if let Some(why) = why_not_torn {
                        // Name the last intact frame; if it is inside a
                        // batch, also where the last whole batch ends.
                        let at = match scan.unfinished_batch_lsns.last() {
                            Some(l) => format!(
                                "after LSN {l}, inside a batch that began after LSN {last_kept}"
                            ),
                            None => format!("after LSN {last_kept}"),
                        };
                        return Err(StorageError::CorruptLog {
                            segment: no,
                            offset: *offset,
                            reason: format!("{reason}, {at}; not a torn tail: {why}"),
                        });
                    }
                } else if !is_last {
                    return Err(StorageError::CorruptLog {
                        segment: no,
                        offset: scan.batch_end,
                        reason: format!(
                            "sealed segment ends inside a batch, after LSN {last_kept}"
                        ),
                    });
                } else if let Some(end) = legacy_end.filter(|&e| e > last_kept) {
                    return Err(StorageError::CorruptLog {
                        segment: no,
                        offset: scan.batch_end,
                        reason: format!(
                            "the segment ends inside a batch, after LSN {last_kept}; not a torn \
                             tail: the segment's header records frames through LSN {end}: it \
                             was written whole (by a compaction, restore or repair) and synced \
                             before its first use"
                        ),
                    });
                }
                // (the unfinished batch's complete frames cut with a
                // torn tail are named by the truncation's `dropped_lsns`)
                let reason = match &scan.stop {
                    Some((_, r)) => TruncationReason::InvalidTail {
                        detail: r.to_string(),
                    },
                    None => TruncationReason::UnfinishedBatch,
                };
                // What a refusal to cut says (nothing is dropped then):
                // where the damage is, and the batch it is in.
                let refusal = match &scan.stop {
                    Some((at, r)) => match scan.unfinished_batch_lsns.last() {
                        Some(l) => format!(
                            "{r} at offset {at}, after LSN {l}, inside a batch that began \
                             after LSN {last_kept}"
                        ),
                        None => format!("{r} at offset {at}, after LSN {last_kept}"),
                    },
                    None => "the segment ends inside a batch".to_string(),
                };
                drop(map);
                cut = Some(PendingCut {
                    refusal,
                    file: file.clone(),
                    path: path.clone(),
                    truncation: Truncation {
                        segment: no,
                        offset: scan.batch_end,
                        bytes_dropped: len - scan.batch_end,
                        dropped_lsns: scan.unfinished_batch_lsns.clone(),
                        after_lsn: last_kept,
                        reason,
                    },
                });
            } else {
                drop(map);
                if let Some((at, bytes)) = zero_tail {
                    if is_last {
                        report.preallocated_tail = Some((no, at, bytes));
                    } else if !read_only {
                        // A sealed segment is cut to its data when the next one
                        // starts; a crash in between leaves zeros: cut them now.
                        file.set_len(at).map_err(io_err(&path))?;
                        file.sync_data().map_err(io_err(&path))?;
                    }
                }
            }
            let kept_len = scan.batch_end;
            report.n_frames += scan.frames;
            prev_end = last_kept.max(header.end_lsn.unwrap_or(0));
            if let Some(l) = scan.last_lsn {
                last_frame = last_frame.max(l);
            }
            segments.push(Arc::new(Segment::new(
                no,
                path,
                header.first_lsn,
                header.end_lsn,
                file,
                kept_len,
                if is_last && !read_only {
                    opts.segment_bytes_max
                } else {
                    0
                },
            )?));
        }
        // Something outside the log proves LSNs up to `durable_lsn` were
        // durable: the log must still hold them, up to a frame of that LSN
        // (derived state is taken at a frame it applied, and rebuilt
        // whenever a compaction drops frames; a header's recorded end is
        // no frame, so a compacted segment cut or zeroed at a frame's edge
        // is caught here).
        if ropts.durable_lsn > last_frame {
            let prev_end = last_frame;
            let evidence = if ropts.durable_evidence.is_empty() {
                "derived state".to_string()
            } else {
                ropts.durable_evidence.clone()
            };
            return Err(match cut {
                Some(c) => StorageError::AcknowledgedDataDamaged {
                    segment: c.truncation.segment,
                    offset: c.truncation.offset,
                    first_lsn: prev_end + 1,
                    last_lsn: ropts.durable_lsn,
                    reason: c.refusal,
                    evidence,
                },
                None => StorageError::LogGap {
                    first_lsn: prev_end + 1,
                    last_lsn: ropts.durable_lsn,
                    detail: format!(
                        "the log ends at LSN {prev_end} but {evidence} shows LSN {} was durable \
                         (if that derived file came from another store, remove derived/ and \
                         open again: it is rebuilt from the log)",
                        ropts.durable_lsn
                    ),
                },
            });
        }
        if let Some(c) = cut {
            if read_only {
                report.torn_tail_pending = Some(c.truncation);
            } else {
                c.file
                    .set_len(c.truncation.offset)
                    .map_err(io_err(&c.path))?;
                c.file.sync_data().map_err(io_err(&c.path))?;
                report.truncation = Some(c.truncation);
            }
        }
        if let Some(path) = &report.removed_incomplete_segment
            && !read_only
        {
            backend.remove_file(path).map_err(io_err(path))?;
            backend.sync_dir(dir).map_err(io_err(dir))?;
        }
        report.n_segments = segments.len();
        report.last_lsn = (prev_end > 0).then_some(prev_end);
        let shared = Arc::new(Shared {
            backend,
            dir: dir.to_path_buf(),
            opts,
            read_only,
            segments: RwLock::new(segments),
            poisoned: Mutex::new(None),
            disk_full: Mutex::new(None),
            preallocation_gave_way: std::sync::atomic::AtomicBool::new(false),
            last_lsn: AtomicU64::new(prev_end),
            n_groups: AtomicU64::new(0),
            n_groups_acknowledged_early: AtomicU64::new(0),
            n_frames: AtomicU64::new(0),
            fsync_us_total: AtomicU64::new(0),
            n_fsyncs: AtomicU64::new(0),
            group_commit_us_total: AtomicU64::new(0),
            replies: Arc::new(crate::spin::Site::new()),
        });
        if shared.segments.read().is_empty() && !read_only {
            let seg = create_segment(
                &shared,
                1.max(numbers.last().copied().unwrap_or(0)),
                prev_end + 1,
            )?;
            shared.segments.write().push(seg);
        }
        Ok((
            SegmentLog {
                shared,
                tx: Mutex::new(None),
                writer: Mutex::new(None),
                applier: Mutex::new(None),
            },
            report,
        ))
    }

    /// Starts the writer thread. `hook` runs after each group's fsync and
    /// before its acknowledgement.
    pub fn start_writer(&self, hook: CommitHook) -> StorageResult<()> {
        self.start_writer_prepared(None, hook)
    }

    /// [`start_writer`](Self::start_writer), with a `prepare` hook that
    /// sees each large group while its fsync runs.
    pub fn start_writer_prepared(
        &self,
        prepare: Option<PrepareHook>,
        hook: CommitHook,
    ) -> StorageResult<()> {
        if self.shared.read_only {
            return Err(StorageError::ReadOnly);
        }
        let mut tx_slot = self.tx.lock();
        if tx_slot.is_some() {
            return Ok(());
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        // Groups go from the writer (write + fsync) to the applier (hook +
        // acknowledgements) in LSN order; the bound keeps the pipeline short.
        // Each group is at most two messages (prepare, then apply).
        let (apply_tx, apply_rx) = crossbeam_channel::bounded::<ApplyMsg>(2 * APPLY_QUEUE_GROUPS);
        let shared = self.shared.clone();
        let io = |e| StorageError::io(&self.shared.dir, e);
        let prepares = prepare.is_some();
        let counters = self.shared.clone();
        let applier = std::thread::Builder::new()
            .name("engram-log-apply".into())
            .spawn(move || applier_loop(&counters, apply_rx, prepare, hook))
            .map_err(io)?;
        let handle = std::thread::Builder::new()
            .name("engram-log-writer".into())
            .spawn(move || writer_loop(shared, rx, apply_tx, prepares))
            .map_err(io)?;
        *tx_slot = Some(tx);
        *self.writer.lock() = Some(handle);
        *self.applier.lock() = Some(applier);
        Ok(())
    }

    /// Appends one atomic batch and waits until it is durable. See
    /// [`SegmentLog::append_async`].
    pub fn append(&self, frames: Vec<PendingFrame>) -> StorageResult<AppendOutcome> {
        self.append_async(frames)?
            .recv()
            .map_err(|_| StorageError::Closed)?
    }

    /// Queues one atomic batch; the receiver yields its locations once the
    /// batch is durable and the commit hook acknowledged it (sent its
    /// [`Acknowledgements`], or returned), or an error: then the batch may
    /// or may not survive a restart, exactly like a failed commit anywhere.
    /// Batches queued by one thread are made durable in queue order.
    pub fn append_async(
        &self,
        frames: Vec<PendingFrame>,
    ) -> StorageResult<oneshot::Receiver<StorageResult<AppendOutcome>>> {
        if self.shared.read_only {
            return Err(StorageError::ReadOnly);
        }
        if frames.is_empty() {
            return Err(StorageError::EmptyBatch);
        }
        let mut encoded_bytes = 0usize;
        for f in &frames {
            if f.payload.len() > self.shared.opts.frame_payload_bytes_max {
                return Err(StorageError::FrameTooLarge {
                    len_bytes: f.payload.len(),
                    limit_bytes: self.shared.opts.frame_payload_bytes_max,
                });
            }
            encoded_bytes += frame::encoded_len(f.payload.len());
        }
        if encoded_bytes > self.shared.opts.batch_bytes_max {
            return Err(StorageError::BatchTooLarge {
                n_frames: frames.len(),
                len_bytes: encoded_bytes,
                limit_bytes: self.shared.opts.batch_bytes_max,
            });
        }
        if let Some(reason) = self.shared.poisoned.lock().clone() {
            return Err(StorageError::Poisoned { reason });
        }
        let (reply, rx) = oneshot::channel_polling(self.shared.replies.clone());
        let tx = self.tx.lock();
        let tx = tx.as_ref().ok_or(StorageError::Closed)?;
        tx.send(Request::Append {
            frames,
            encoded_bytes,
            reply,
        })
        .map_err(|_| StorageError::Closed)?;
        Ok(rx)
    }

    /// Seals the active segment and starts a new one (used before rewriting
    /// sealed segments). Waits until done.
    pub fn rotate(&self) -> StorageResult<()> {
        if self.shared.read_only {
            return Err(StorageError::ReadOnly);
        }
        let (reply, rx) = oneshot::channel();
        {
            let tx = self.tx.lock();
            let tx = tx.as_ref().ok_or(StorageError::Closed)?;
            tx.send(Request::Rotate { reply })
                .map_err(|_| StorageError::Closed)?;
        }
        rx.recv().map_err(|_| StorageError::Closed)?
    }

    /// Why the writer stopped, if a write or fsync failed: every append is
    /// refused from then on, until the log is opened again.
    pub fn write_failure(&self) -> Option<String> {
        self.shared.poisoned.lock().clone()
    }

    /// Last durable LSN (0 when empty).
    pub fn last_lsn(&self) -> Lsn {
        self.shared.last_lsn.load(Ordering::Acquire)
    }

    /// Counters.
    pub fn stats(&self) -> LogStats {
        let segs = self.shared.segments.read();
        LogStats {
            n_segments: segs.len(),
            bytes: segs.iter().map(|s| s.durable_len()).sum(),
            last_lsn: self.last_lsn(),
            n_groups: self.shared.n_groups.load(Ordering::Relaxed),
            n_frames_appended: self.shared.n_frames.load(Ordering::Relaxed),
            fsync_us_total: self.shared.fsync_us_total.load(Ordering::Relaxed),
            n_fsyncs: self.shared.n_fsyncs.load(Ordering::Relaxed),
            group_commit_us_total: self.shared.group_commit_us_total.load(Ordering::Relaxed),
            n_groups_acknowledged_early: self
                .shared
                .n_groups_acknowledged_early
                .load(Ordering::Relaxed),
        }
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Numbers and paths of all segments, oldest first.
    pub fn segments(&self) -> Vec<(u64, PathBuf)> {
        self.shared
            .segments
            .read()
            .iter()
            .map(|s| (s.no, s.path.clone()))
            .collect()
    }

    /// A checksum of the segments before segment `before` (sealed: only a
    /// rewrite or a repair cut changes them): each one's number, first LSN,
    /// rewrite end and durable length. A derived snapshot anchored in a
    /// later segment keeps record locations in these; a compaction that
    /// rewrote one of them moved those locations, and changes this value
    /// (the segment's header gains its `end_lsn`, its length shrinks).
    pub fn sealed_fingerprint(&self, before: u64) -> u32 {
        let mut crc = 0u32;
        for s in self.shared.segments.read().iter().filter(|s| s.no < before) {
            let mut b = [0u8; 32];
            b[0..8].copy_from_slice(&s.no.to_le_bytes());
            b[8..16].copy_from_slice(&s.first_lsn.to_le_bytes());
            b[16..24].copy_from_slice(&s.end_lsn.unwrap_or(0).to_le_bytes());
            b[24..32].copy_from_slice(&s.durable_len().to_le_bytes());
            crc = crc32c::crc32c_append(crc, &b);
        }
        crc
    }

    /// Copies every segment, up to its durable end at one instant, into
    /// `dir` (same file names), each synced; returns the last LSN copied.
    /// Appends may go on meanwhile: what they add is not part of the copy.
    pub fn copy_to(&self, backend_dst: &dyn Backend, dir: &Path) -> StorageResult<Lsn> {
        // LSN first: the lengths read after it cover at least that LSN.
        let last = self.last_lsn();
        let segs: Vec<(Arc<Segment>, u64)> = self
            .shared
            .segments
            .read()
            .iter()
            .map(|s| (s.clone(), s.durable_len()))
            .collect();
        backend_dst.create_dir_all(dir).map_err(io_err(dir))?;
        for (seg, len) in segs {
            let mut buf = vec![0u8; crate::cast::usize_from(len)];
            seg.file
                .read_exact_at(&mut buf, 0)
                .map_err(io_err(&seg.path))?;
            let dst = dir.join(segment::segment_file_name(seg.no));
            let f = backend_dst
                .open(&dst, OpenMode::Truncate)
                .map_err(io_err(&dst))?;
            f.write_all_at(&buf, 0).map_err(io_err(&dst))?;
            f.sync_data().map_err(io_err(&dst))?;
        }
        backend_dst.sync_dir(dir).map_err(io_err(dir))?;
        Ok(last)
    }

    /// Stops the writer thread after it has finished every queued batch.
    pub fn close(&self) {
        drop(self.tx.lock().take());
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
        if let Some(h) = self.applier.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for SegmentLog {
    fn drop(&mut self) {
        self.close();
    }
}
