//! The writer side of the log: group commit. One writer thread drains the
//! queued batches into a group, lays their frames out back to back, writes
//! them with one positional write and one `fdatasync` per segment touched
//! (rotating, sealing and preallocating segments as it goes, and
//! preallocating ahead between groups), then hands the group to the
//! applier thread, which runs the commit hook and acknowledges every
//! batch when the hook sends the group's
//! [`Acknowledgements`] or once it returns. A run of at least
//! [`PREPARE_MIN_FRAMES`] frames is also handed over once written, before
//! its fsync, for the prepare hook. A failed write or sync poisons the log.
//! Both threads poll their queues briefly before they park, where their
//! recent waits were short (`crate::spin`).
//!
//! This module must never acknowledge a batch before its fsync returned,
//! and never let a batch span segments.

use super::*;

pub(super) fn create_segment(
    shared: &Shared,
    no: u64,
    first_lsn: Lsn,
) -> StorageResult<Arc<Segment>> {
    let path = segment::segment_path(&shared.dir, no);
    let file = shared
        .backend
        .open(&path, OpenMode::CreateNew)
        .map_err(io_err(&path))?;
    file.write_all_at(&segment::encode_header(no, first_lsn), 0)
        .map_err(io_err(&path))?;
    file.sync_data().map_err(io_err(&path))?;
    shared
        .backend
        .sync_dir(&shared.dir)
        .map_err(io_err(&shared.dir))?;
    Ok(Arc::new(Segment::new(
        no,
        path,
        first_lsn,
        None,
        file,
        SEGMENT_HEADER_BYTES as u64,
        shared.opts.segment_bytes_max,
    )?))
}

struct Group {
    frames: Vec<PendingFrame>,
    encoded_bytes: usize,
    reply: oneshot::Sender<StorageResult<AppendOutcome>>,
}

/// Groups a writer may hand to the applier before it waits.
pub(super) const APPLY_QUEUE_GROUPS: usize = 4;

/// What the writer hands the applier, in LSN order.
pub(super) enum ApplyMsg {
    /// A run just written, whose fsync is running (for the prepare hook).
    Prepare(Arc<Run>),
    /// A durable group.
    Apply(ApplyJob),
}

/// A durable group on its way to the commit hook and the acknowledgements.
pub(super) struct ApplyJob {
    runs: Vec<Arc<Run>>,
    replies: Vec<Reply>,
}

/// A batch's acknowledgement, and what it says.
type Reply = (
    oneshot::Sender<StorageResult<AppendOutcome>>,
    StorageResult<AppendOutcome>,
);

/// The acknowledgements of a durable group, handed to the last
/// [`CommitHook`](super::CommitHook) call of the group (earlier calls get
/// none to send). A hook that makes the group visible under a lock its
/// readers take can acknowledge it once it holds that lock, before it
/// applies the group: any read that starts after an acknowledgement then
/// waits for the lock, and finds the group applied. What the hook does
/// after sending is off the acknowledgement's path; the log never sends
/// before the group's fsync returned. Unsent, they go once the hook returns.
pub struct Acknowledgements<'a> {
    replies: Option<&'a mut Vec<Reply>>,
}

impl Acknowledgements<'_> {
    /// Acknowledges the group's batches now (the first call; later calls,
    /// and calls made before the group's last segment, do nothing).
    pub fn send(&mut self) {
        if let Some(replies) = self.replies.take() {
            for (reply, result) in replies.drain(..) {
                reply.send(result);
            }
        }
    }
}

/// Frames written to one segment by one group: the bytes as written, and
/// each frame's location, header and payload offset in `buf`.
pub(super) struct Run {
    buf: AlignedBuf,
    metas: Vec<(FrameLoc, FrameHeader, usize)>,
}

impl Run {
    /// The run's frames as the hooks see them.
    fn frames(&self) -> Vec<CommittedFrame<'_>> {
        self.metas
            .iter()
            .map(|(loc, header, at)| CommittedFrame {
                loc: *loc,
                header: *header,
                payload: &self.buf.as_slice()[*at..*at + header.payload_len as usize],
            })
            .collect()
    }
}

pub(super) fn applier_loop(
    shared: &Shared,
    rx: Receiver<ApplyMsg>,
    mut prepare: Option<PrepareHook>,
    mut hook: CommitHook,
) {
    let site = crate::spin::Site::new();
    while let Ok(msg) = recv_polling(&site, &rx) {
        match msg {
            ApplyMsg::Prepare(run) => {
                if let Some(p) = prepare.as_mut() {
                    p(&run.frames());
                }
            }
            ApplyMsg::Apply(mut job) => {
                let last = job.runs.len().saturating_sub(1);
                let unsent = !job.replies.is_empty();
                for (i, run) in job.runs.iter().enumerate() {
                    let mut acks = Acknowledgements {
                        replies: (i == last).then_some(&mut job.replies),
                    };
                    hook(&run.frames(), &mut acks);
                }
                if unsent && job.replies.is_empty() {
                    shared
                        .n_groups_acknowledged_early
                        .fetch_add(1, Ordering::Relaxed);
                }
                Acknowledgements {
                    replies: Some(&mut job.replies),
                }
                .send();
            }
        }
    }
}

/// The next message, polled for [`HANDOFF_POLL`](crate::spin::HANDOFF_POLL)
/// before blocking where that pays off (see `crate::spin`).
fn recv_polling<T>(
    site: &crate::spin::Site,
    rx: &Receiver<T>,
) -> Result<T, crossbeam_channel::RecvError> {
    use crossbeam_channel::TryRecvError;
    site.wait(
        crate::spin::HANDOFF_POLL,
        || match rx.try_recv() {
            Ok(v) => Some(Ok(v)),
            Err(TryRecvError::Disconnected) => Some(Err(crossbeam_channel::RecvError)),
            Err(TryRecvError::Empty) => None,
        },
        || rx.recv(),
    )
}

pub(super) fn writer_loop(
    shared: Arc<Shared>,
    rx: Receiver<Request>,
    apply: Sender<ApplyMsg>,
    prepares: bool,
) {
    let out = Applier {
        tx: apply,
        prepares,
    };
    let mut next_lsn = shared.last_lsn.load(Ordering::Acquire) + 1;
    let site = crate::spin::Site::new();
    while let Ok(first) = recv_polling(&site, &rx) {
        let mut batches: Vec<Group> = Vec::new();
        let mut bytes = 0usize;
        let mut pending = Some(first);
        loop {
            match pending.take() {
                Some(Request::Append {
                    frames,
                    encoded_bytes,
                    reply,
                }) => {
                    bytes += encoded_bytes;
                    batches.push(Group {
                        frames,
                        encoded_bytes,
                        reply,
                    });
                }
                Some(Request::Rotate { reply }) => {
                    // Finish what was gathered first, then rotate.
                    commit_group(&shared, &mut next_lsn, std::mem::take(&mut batches), &out);
                    let r = rotate_now(&shared, next_lsn);
                    if let Err(e) = &r {
                        poison(&shared, e.to_string());
                    }
                    reply.send(r);
                    bytes = 0;
                }
                None => {}
            }
            if bytes >= shared.opts.group_bytes_max {
                break;
            }
            match rx.try_recv() {
                Ok(r) => pending = Some(r),
                Err(_) => break,
            }
        }
        commit_group(&shared, &mut next_lsn, batches, &out);
        preallocate_ahead(&shared);
    }
    // Closed cleanly: leave the active segment holding exactly its frames, so
    // that a stopped store has no preallocated space on disk.
    if shared.poisoned.lock().is_none() {
        let cur = shared.segments.read().last().cloned();
        if let Some(cur) = cur {
            if let Err(e) = seal(&cur) {
                poison(&shared, e.to_string());
            }
        }
    }
}

fn rotate_now(shared: &Shared, next_lsn: Lsn) -> StorageResult<()> {
    if let Some(reason) = shared.poisoned.lock().clone() {
        return Err(StorageError::Poisoned { reason });
    }
    let (no, empty) = {
        let segs = shared.segments.read();
        let cur = segs.last().expect("at least one segment");
        (cur.no, cur.durable_len() == SEGMENT_HEADER_BYTES as u64)
    };
    if empty {
        return Ok(());
    }
    let cur = shared
        .segments
        .read()
        .last()
        .cloned()
        .expect("at least one segment");
    seal(&cur)?;
    let seg = create_segment(shared, no + 1, next_lsn)?;
    shared.segments.write().push(seg);
    Ok(())
}

/// Cuts a segment that is about to stop being the active one to its data
/// (dropping preallocated zeros), durably.
fn seal(seg: &Segment) -> StorageResult<()> {
    let len = seg.durable_len();
    if seg.zeroed_len.load(Ordering::Acquire) > len {
        seg.file.set_len(len).map_err(io_err(&seg.path))?;
        seg.file.sync_data().map_err(io_err(&seg.path))?;
        seg.zeroed_len.store(len, Ordering::Release);
    }
    Ok(())
}

/// Extends the active segment's zero-filled space once less than half a
/// preallocation step is left after its last frame. Run between groups,
/// while the appenders prepare their next batches, so that a group's own
/// write seldom waits for zeros to be written and synced (with batches of
/// 1000 events, one group in six did, for 3-5 ms). A failure here is left
/// to the next group's own preallocation, which meets and reports it; after
/// a preallocation that found no room, nothing is tried here until one
/// succeeds.
fn preallocate_ahead(shared: &Shared) {
    let step = shared.opts.preallocate_bytes;
    if step == 0
        || shared.preallocation_gave_way.load(Ordering::Relaxed)
        || shared.poisoned.lock().is_some()
    {
        return;
    }
    let Some(seg) = shared.segments.read().last().cloned() else {
        return;
    };
    let end = (seg.durable_len() + step / 2).min(shared.opts.segment_bytes_max);
    let _ = preallocate(shared, &seg, end);
}

/// Makes sure the active segment is zero-filled and synced up to `end`,
/// extending it by `preallocate_bytes` (within the segment bound) when not.
fn preallocate(shared: &Shared, seg: &Segment, end: u64) -> StorageResult<()> {
    let step = shared.opts.preallocate_bytes;
    // Never below the durable end: a write without preallocation (a full
    // disk) extends the file past the last preallocated byte.
    let zeroed = seg
        .zeroed_len
        .load(Ordering::Acquire)
        .max(seg.durable_len());
    if step == 0 || zeroed >= end {
        return Ok(());
    }
    let target = end
        .max(zeroed + step)
        .min(shared.opts.segment_bytes_max.max(end));
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; crate::cast::usize_from(CHUNK)];
    let mut at = zeroed;
    let filled = (|| {
        while at < target {
            let n = (target - at).min(CHUNK);
            seg.file
                .write_all_at(&zeros[..n as usize], at)
                .map_err(io_err(&seg.path))?;
            at += n;
        }
        seg.file.sync_data().map_err(io_err(&seg.path))
    })();
    match filled {
        Ok(()) => {
            seg.zeroed_len.store(target, Ordering::Release);
            shared
                .preallocation_gave_way
                .store(false, Ordering::Relaxed);
            Ok(())
        }
        // Preallocation is an optimisation: without room for it, write
        // without it (each commit's fsync then also flushes the file size).
        Err(StorageError::DiskFull { .. }) => {
            shared.preallocation_gave_way.store(true, Ordering::Relaxed);
            seg.file.set_len(zeroed).map_err(io_err(&seg.path))?;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

impl SegmentLog {
    /// How long ago a group of appends last failed for a full disk, and
    /// why, unless a group was written since. The writer goes on after a
    /// full disk (nothing of the failed group reached the log): every
    /// append fails the same way until space is freed.
    pub fn disk_full(&self) -> Option<(std::time::Duration, String)> {
        self.shared
            .disk_full
            .lock()
            .as_ref()
            .map(|(at, why)| (at.elapsed(), why.clone()))
    }
}

/// Microseconds since `t` (saturating).
fn micros_since(t: std::time::Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn poison(shared: &Shared, why: String) -> StorageError {
    let mut p = shared.poisoned.lock();
    if p.is_none() {
        *p = Some(why.clone());
    }
    StorageError::Poisoned { reason: why }
}

/// The writer's way to the applier.
struct Applier {
    tx: Sender<ApplyMsg>,
    /// Whether large runs are sent ahead of their fsync for the prepare hook.
    prepares: bool,
}

fn commit_group(shared: &Shared, next_lsn: &mut Lsn, batches: Vec<Group>, apply: &Applier) {
    if batches.is_empty() {
        return;
    }
    if let Some(reason) = shared.poisoned.lock().clone() {
        for b in batches {
            b.reply.send(Err(StorageError::Poisoned {
                reason: reason.clone(),
            }));
        }
        return;
    }
    let mut runs = Vec::new();
    let mut done: Vec<AppendOutcome> = Vec::with_capacity(batches.len());
    let started = std::time::Instant::now();
    let failure = write_runs(shared, next_lsn, &batches, &mut runs, &mut done, apply).err();
    shared
        .group_commit_us_total
        .fetch_add(micros_since(started), Ordering::Relaxed);
    shared.n_groups.fetch_add(1, Ordering::Relaxed);
    let mut done = done.into_iter();
    // A failure before any fsync of the group (a full disk) leaves the log
    // as it was: those batches fail, later ones may succeed. A failure
    // after bytes may have reached the disk unacknowledged stops the
    // writer until the store is reopened and recovered.
    {
        let mut full = shared.disk_full.lock();
        match &failure {
            Some(WriteFailure::Clean(e @ StorageError::DiskFull { .. })) => {
                *full = Some((std::time::Instant::now(), e.to_string()));
            }
            None if full.is_some() => *full = None,
            _ => {}
        }
    }
    let failed: Option<StorageError> = failure.map(|f| match f {
        WriteFailure::Clean(e) => e,
        WriteFailure::Fatal(e) => {
            let why = e.to_string();
            poison(shared, why.clone());
            StorageError::Poisoned { reason: why }
        }
    });
    let mut replies = Vec::with_capacity(batches.len());
    for b in batches {
        match done.next() {
            Some(l) => {
                shared.n_frames.fetch_add(l.len() as u64, Ordering::Relaxed);
                replies.push((b.reply, Ok(l)));
            }
            None => replies.push((b.reply, Err(clone_failure(failed.as_ref())))),
        }
    }
    if let Err(e) = apply.tx.send(ApplyMsg::Apply(ApplyJob { runs, replies })) {
        // The applier is gone (shutdown): nobody is waiting for these.
        drop(e);
    }
}

/// How writing a group failed.
enum WriteFailure {
    /// Nothing of the failed run can reach the disk as a frame of the log:
    /// the segment was put back as it was (a full disk). The writer goes on.
    Clean(StorageError),
    /// The state of the segment is unknown (a failed fsync, or a failed
    /// repair of a failed write): the writer stops.
    Fatal(StorageError),
}

/// The error each batch of a failed group is answered with.
fn clone_failure(e: Option<&StorageError>) -> StorageError {
    match e {
        Some(StorageError::DiskFull { path }) => StorageError::DiskFull { path: path.clone() },
        Some(StorageError::Poisoned { reason }) => StorageError::Poisoned {
            reason: reason.clone(),
        },
        Some(other) => StorageError::Poisoned {
            reason: other.to_string(),
        },
        None => StorageError::Poisoned {
            reason: String::new(),
        },
    }
}

/// Writes the batches, segment by segment, each run followed by one fsync.
/// Pushes the written runs and the locations of the batches made durable (a
/// prefix of `batches`); stops at the first I/O error.
fn write_runs(
    shared: &Shared,
    next_lsn: &mut Lsn,
    batches: &[Group],
    runs: &mut Vec<Arc<Run>>,
    out: &mut Vec<AppendOutcome>,
    apply: &Applier,
) -> Result<(), WriteFailure> {
    use WriteFailure::{Clean, Fatal};
    let mut i = 0;
    while i < batches.len() {
        let seg = shared
            .segments
            .read()
            .last()
            .cloned()
            .expect("at least one segment");
        let start = seg.durable_len();
        // Which batches fit in this segment? At least one if the segment is
        // empty (an oversized batch gets a segment of its own).
        let mut j = i;
        let mut run_bytes = 0u64;
        while j < batches.len() {
            let b = batches[j].encoded_bytes as u64;
            let seg_empty = start == SEGMENT_HEADER_BYTES as u64 && run_bytes == 0;
            if start + run_bytes + b > shared.opts.segment_bytes_max && !seg_empty {
                break;
            }
            run_bytes += b;
            j += 1;
        }
        if j == i {
            seal(&seg).map_err(Fatal)?;
            let new = match create_segment(shared, seg.no + 1, *next_lsn) {
                Ok(s) => s,
                Err(e) => {
                    // A segment that never became whole is removed; with
                    // none left behind the log is unchanged.
                    let path = segment::segment_path(&shared.dir, seg.no + 1);
                    let gone =
                        !shared.backend.exists(&path) || shared.backend.remove_file(&path).is_ok();
                    return Err(if gone { Clean(e) } else { Fatal(e) });
                }
            };
            shared.segments.write().push(new);
            continue;
        }
        preallocate(shared, &seg, start + run_bytes).map_err(Fatal)?;
        let durable_before = u32::try_from(start).unwrap_or(u32::MAX);
        let first_lsn = *next_lsn;
        let mut metas: Vec<(FrameLoc, FrameHeader, usize)> = Vec::new();
        let mut run_out: Vec<AppendOutcome> = Vec::with_capacity(j - i);
        let buf = AlignedBuf::filled(crate::cast::usize_from(run_bytes), |out| {
            let mut pos = 0usize;
            for b in &batches[i..j] {
                let mut locs = Vec::with_capacity(b.frames.len());
                for (k, f) in b.frames.iter().enumerate() {
                    let flags = if k + 1 == b.frames.len() {
                        FLAG_BATCH_END
                    } else {
                        0
                    };
                    frame::encode(
                        out,
                        *next_lsn,
                        f.frame_type,
                        f.frame_version,
                        flags,
                        durable_before,
                        &f.payload,
                    );
                    let len = frame::encoded_len(f.payload.len());
                    let loc = FrameLoc {
                        segment: seg.no,
                        offset: start + pos as u64,
                        lsn: *next_lsn,
                    };
                    let header = frame::decode_header(&out[out.len() - len..])
                        .expect("a frame just encoded decodes");
                    metas.push((loc, header, pos + frame::FRAME_HEADER_BYTES));
                    locs.push(loc);
                    *next_lsn += 1;
                    pos += len;
                }
                run_out.push(locs);
            }
        });
        if let Err(e) = seg.file.write_all_at(buf.as_slice(), start) {
            // Nothing of this run was fsynced: cut what reached the file
            // and give the LSNs back, so the log continues exactly where
            // it ended.
            let e = StorageError::io(&seg.path, e);
            if seg.file.set_len(start).is_err() {
                return Err(Fatal(e));
            }
            seg.zeroed_len.store(start, Ordering::Release);
            *next_lsn = first_lsn;
            return Err(Clean(e));
        }
        // A large run goes to the prepare hook now, to be prepared while
        // it is synced (the applier sees it again once durable, or never).
        let run = Arc::new(Run { buf, metas });
        if apply.prepares && run.metas.len() >= PREPARE_MIN_FRAMES {
            let _ = apply.tx.send(ApplyMsg::Prepare(run.clone()));
        }
        let synced = std::time::Instant::now();
        seg.file
            .sync_data()
            .map_err(|e| Fatal(StorageError::io(&seg.path, e)))?;
        shared
            .fsync_us_total
            .fetch_add(micros_since(synced), Ordering::Relaxed);
        shared.n_fsyncs.fetch_add(1, Ordering::Relaxed);
        seg.zeroed_len
            .fetch_max(start + run_bytes, Ordering::AcqRel);
        seg.durable_len.store(start + run_bytes, Ordering::Release);
        shared.last_lsn.store(*next_lsn - 1, Ordering::Release);
        debug_assert!(first_lsn < *next_lsn);
        runs.push(run);
        out.extend(run_out);
        i = j;
    }
    Ok(())
}
