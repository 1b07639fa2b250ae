//! The segment log against a simple model: appends, reads, reopen,
//! segment rolling, concurrency, poisoning, segment rewrite.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use engram_storage::backend::Fault;
use engram_storage::frame::FrameType;
use engram_storage::log::{CommitHook, LogOptions, PendingFrame, Rewrite};
use engram_storage::{Backend, MemBackend, SegmentLog, StorageError};

fn frame(payload: &[u8]) -> PendingFrame {
    PendingFrame {
        frame_type: FrameType(1),
        frame_version: 1,
        payload: payload.to_vec(),
    }
}

fn open(b: &MemBackend, opts: LogOptions) -> SegmentLog {
    open_with(b, opts, Box::new(|_, _| {}))
}

/// [`open`], with `hook` as the commit hook.
fn open_with(b: &MemBackend, opts: LogOptions, hook: CommitHook) -> SegmentLog {
    let backend: Arc<dyn Backend> = Arc::new(b.clone());
    let (log, report) = SegmentLog::open(backend, Path::new("/data/log"), opts).unwrap();
    assert!(report.truncation.is_none(), "{report:?}");
    log.start_writer(hook).unwrap();
    log
}

fn all_payloads(log: &SegmentLog) -> BTreeMap<u64, Vec<u8>> {
    let mut out = BTreeMap::new();
    log.scan(0, |f| {
        out.insert(f.header.lsn, f.payload().to_vec());
        Ok(ControlFlow::Continue(()))
    })
    .unwrap();
    out
}

#[test]
fn append_read_reopen_roll() {
    let b = MemBackend::new();
    let opts = LogOptions {
        segment_bytes_max: 1024,
        ..LogOptions::default()
    };
    let mut model = BTreeMap::new();
    {
        let log = open(&b, opts.clone());
        for i in 0..100u32 {
            let p = format!("record number {i} {}", "x".repeat(i as usize % 50));
            let locs = log.append(vec![frame(p.as_bytes())]).unwrap();
            assert_eq!(locs.len(), 1);
            let fr = log.read(locs[0].segment, locs[0].offset).unwrap();
            assert_eq!(fr.payload(), p.as_bytes());
            assert_eq!(fr.payload().as_ptr() as usize % 16, 0, "payload aligned");
            model.insert(locs[0].lsn, p.into_bytes());
        }
        assert!(log.stats().n_segments > 5, "segments rolled");
        assert_eq!(all_payloads(&log), model);
    }
    let log = open(&b, opts);
    assert_eq!(all_payloads(&log), model);
    assert_eq!(log.last_lsn(), 100);
    let (n, problems) = log.verify().unwrap();
    assert_eq!(n, 100);
    assert!(problems.is_empty(), "{problems:?}");
    let locs = log.append(vec![frame(b"after reopen")]).unwrap();
    assert_eq!(locs[0].lsn, 101);
}

/// A frame reader gives the payloads `read` gives, reading across segments
/// in any order (its kept segment switches back and forth), and refuses a
/// location that is not a frame as `read` does.
#[test]
fn a_frame_reader_reads_what_read_reads_across_segments() {
    let b = MemBackend::new();
    let log = open(
        &b,
        LogOptions {
            segment_bytes_max: 1024,
            ..LogOptions::default()
        },
    );
    let locs: Vec<_> = (0..60u32)
        .map(|i| {
            let p = format!("frame {i} {}", "y".repeat(i as usize % 40));
            log.append(vec![frame(p.as_bytes())]).unwrap()[0]
        })
        .collect();
    assert!(log.stats().n_segments > 3, "segments rolled");
    let mut r = log.reader();
    // oldest, newest, oldest, ... then in order, checked and not
    let order = (0..locs.len() / 2).flat_map(|i| [i, locs.len() - 1 - i]);
    for (n, i) in order.chain(0..locs.len()).enumerate() {
        let l = locs[i];
        let want = log.read(l.segment, l.offset).unwrap().payload().to_vec();
        let got = r.payload(l.segment, l.offset, n % 2 == 0).unwrap();
        assert_eq!(got, &want[..], "frame {i}");
        assert_eq!(got.as_ptr() as usize % 16, 0, "payload aligned");
    }
    for (seg, off) in [(locs[0].segment, locs[0].offset + 8), (999, locs[0].offset)] {
        assert!(matches!(
            r.payload(seg, off, false),
            Err(StorageError::BadLocation { .. })
        ));
        assert!(log.read(seg, off).is_err());
    }
    // a frame appended after the reader kept its segment's mapping
    let late = log.append(vec![frame(b"late")]).unwrap()[0];
    assert_eq!(r.payload(late.segment, late.offset, true).unwrap(), b"late");
    assert_eq!(
        r.payload_part(late.segment, late.offset, 1..3),
        Some(&b"at"[..])
    );
}

#[test]
fn a_part_of_a_payload_reads_as_the_same_bytes_of_the_whole() {
    let b = MemBackend::new();
    let opts = LogOptions {
        segment_bytes_max: 1024,
        ..LogOptions::default()
    };
    let log = open(&b, opts);
    let locs: Vec<_> = (0..40u32)
        .map(|i| {
            log.append(vec![frame(format!("payload number {i}").as_bytes())])
                .unwrap()[0]
        })
        .collect();
    assert!(log.stats().n_segments > 1, "segments rolled");
    let mut r = log.reader();
    for (i, l) in locs.iter().enumerate().rev() {
        let whole = log.read(l.segment, l.offset).unwrap().payload().to_vec();
        for part in [0..whole.len(), 8..15, 3..3] {
            assert_eq!(
                r.payload_part(l.segment, l.offset, part.clone()),
                Some(&whole[part.clone()]),
                "frame {i}, bytes {part:?}"
            );
        }
    }
    let l = locs[0];
    // not a frame boundary, no such segment, past the durable end, reversed
    let end = log.stats().bytes;
    assert_eq!(r.payload_part(l.segment, l.offset + 8, 0..4), None);
    assert_eq!(r.payload_part(999, l.offset, 0..4), None);
    assert_eq!(r.payload_part(l.segment, l.offset, 0..end as usize), None);
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = 5..2;
    assert_eq!(r.payload_part(l.segment, l.offset, reversed), None);
    assert_eq!(
        r.payload_part(l.segment, 0, 0..1),
        None,
        "the segment header"
    );
}

#[test]
fn oversized_batches_and_frames_are_rejected_whole() {
    let b = MemBackend::new();
    let opts = LogOptions {
        frame_payload_bytes_max: 100,
        batch_bytes_max: 300,
        ..LogOptions::default()
    };
    let log = open(&b, opts);
    assert!(matches!(
        log.append(vec![frame(&[0; 101])]),
        Err(StorageError::FrameTooLarge { .. })
    ));
    assert!(matches!(
        log.append(vec![frame(&[0; 90]); 4]),
        Err(StorageError::BatchTooLarge { .. })
    ));
    assert!(matches!(log.append(vec![]), Err(StorageError::EmptyBatch)));
    assert_eq!(log.last_lsn(), 0);
}

#[test]
fn concurrent_writers_get_unique_increasing_lsns_and_group_commit() {
    let b = MemBackend::new();
    let log = Arc::new(open(&b, LogOptions::default()));
    let mut handles = Vec::new();
    for t in 0..8u8 {
        let log = log.clone();
        handles.push(std::thread::spawn(move || {
            let mut got = Vec::new();
            for i in 0..200u32 {
                let batch = vec![frame(&[t; 10]), frame(&i.to_le_bytes())];
                let locs = log.append(batch).unwrap();
                assert_eq!(locs[1].lsn, locs[0].lsn + 1, "a batch is contiguous");
                got.push(locs[0].lsn);
            }
            assert!(
                got.windows(2).all(|w| w[0] < w[1]),
                "one thread's batches keep order"
            );
            got
        }));
    }
    let mut all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 1600);
    let stats = log.stats();
    assert_eq!(stats.last_lsn, 3200);
    assert!(stats.n_groups <= 1600, "{stats:?}");
}

#[test]
fn failed_fsync_poisons_the_writer_and_reopen_recovers() {
    let b = MemBackend::new();
    let log = open(&b, LogOptions::default());
    let ok = log.append(vec![frame(b"durable")]).unwrap();
    b.inject(Fault::FailSyncsAfter(0));
    let err = log.append(vec![frame(b"doomed")]).unwrap_err();
    assert!(matches!(err, StorageError::Poisoned { .. }), "{err}");
    b.clear_faults();
    let err = log.append(vec![frame(b"after")]).unwrap_err();
    assert!(matches!(err, StorageError::Poisoned { .. }), "{err}");
    drop(log);
    let backend: Arc<dyn Backend> = Arc::new(b.crash_image(1));
    let (log, _report) =
        SegmentLog::open(backend, Path::new("/data/log"), LogOptions::default()).unwrap();
    let fr = log.read(ok[0].segment, ok[0].offset).unwrap();
    assert_eq!(fr.payload(), b"durable");
}

#[test]
fn a_large_group_is_prepared_before_it_is_committed_and_a_failed_one_never_committed() {
    use engram_storage::log::PREPARE_MIN_FRAMES;
    let b = MemBackend::new();
    let backend: Arc<dyn Backend> = Arc::new(b.clone());
    let (log, _) =
        SegmentLog::open(backend, Path::new("/data/log"), LogOptions::default()).unwrap();
    // (hook, first LSN, frames) in the order the hooks ran
    let seen = Arc::new(parking_lot::Mutex::new(Vec::<(&str, u64, usize)>::new()));
    let (p, c) = (seen.clone(), seen.clone());
    log.start_writer_prepared(
        Some(Box::new(move |frames| {
            p.lock().push(("prepare", frames[0].loc.lsn, frames.len()));
        })),
        Box::new(move |frames, _| {
            c.lock().push(("commit", frames[0].loc.lsn, frames.len()));
        }),
    )
    .unwrap();
    let big: Vec<PendingFrame> = (0..PREPARE_MIN_FRAMES).map(|_| frame(b"large")).collect();
    log.append(big.clone()).unwrap();
    log.append(vec![frame(b"small")]).unwrap();
    let n = PREPARE_MIN_FRAMES;
    assert_eq!(
        *seen.lock(),
        [
            ("prepare", 1, n),
            ("commit", 1, n),
            ("commit", n as u64 + 1, 1)
        ]
    );
    // a group whose fsync fails was prepared, and is never committed
    b.inject(Fault::FailSyncsAfter(0));
    let err = log.append(big).unwrap_err();
    assert!(matches!(err, StorageError::Poisoned { .. }), "{err}");
    assert_eq!(seen.lock().len(), 4);
    assert_eq!(seen.lock()[3], ("prepare", n as u64 + 2, n));
}

#[test]
fn rewrite_drops_and_replaces_frames_keeping_lsns() {
    let b = MemBackend::new();
    let log = open(&b, LogOptions::default());
    log.append(vec![frame(b"keep-1"), frame(b"secret-2")])
        .unwrap();
    log.append(vec![frame(b"secret-3")]).unwrap();
    log.append(vec![frame(b"replace-4"), frame(b"keep-5")])
        .unwrap();
    log.rotate().unwrap();
    let seg = log.segments()[0].0;
    let locs = log
        .rewrite_segment(seg, |f| match f.payload() {
            p if p.starts_with(b"secret") => Rewrite::Drop,
            p if p.starts_with(b"replace") => Rewrite::Replace {
                frame_type: FrameType(9),
                frame_version: 1,
                payload: b"tombstone-4".to_vec(),
            },
            _ => Rewrite::Keep,
        })
        .unwrap();
    assert_eq!(
        locs.iter().map(|l| l.lsn).collect::<Vec<_>>(),
        vec![1, 4, 5]
    );
    let payloads = all_payloads(&log);
    assert_eq!(
        payloads.into_iter().collect::<Vec<_>>(),
        vec![
            (1, b"keep-1".to_vec()),
            (4, b"tombstone-4".to_vec()),
            (5, b"keep-5".to_vec())
        ]
    );
    let bytes = b
        .read_file(
            &Path::new("/data/log").join(engram_storage::log::segment::segment_file_name(seg)),
        )
        .unwrap();
    assert!(
        !bytes.windows(6).any(|w| w == b"secret"),
        "dropped bytes are gone"
    );
    drop(log);
    // The rewritten log reopens cleanly and continues after the highest LSN.
    let log = open(&b, LogOptions::default());
    assert_eq!(log.append(vec![frame(b"x")]).unwrap()[0].lsn, 6);
    assert!(log.verify().unwrap().1.is_empty());
}

/// Waits up to ten seconds for `flag`.
fn eventually(flag: &std::sync::atomic::AtomicBool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until {
        if flag.load(std::sync::atomic::Ordering::Acquire) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    false
}

/// Queues `frames` (batches queued by one thread are written in queue
/// order); the flag is set once the append is answered.
fn append_aside(
    log: &Arc<SegmentLog>,
    frames: Vec<PendingFrame>,
) -> Arc<std::sync::atomic::AtomicBool> {
    let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reply = log.append_async(frames).unwrap();
    let flag = answered.clone();
    std::thread::spawn(move || {
        reply.recv().unwrap().unwrap();
        flag.store(true, std::sync::atomic::Ordering::Release);
    });
    answered
}

#[test]
fn a_commit_hook_acknowledges_its_group_when_it_sends_and_otherwise_once_it_returns() {
    let b = MemBackend::new();
    let (entered, entered_rx) = std::sync::mpsc::channel::<u64>();
    let (gate, gate_rx) = std::sync::mpsc::channel::<()>();
    let hook: CommitHook = Box::new(move |frames, acks| {
        if frames[0].payload == b"early" {
            acks.send();
        }
        entered.send(frames[0].loc.lsn).unwrap();
        // held here until the test lets the hook return (longer than the
        // test waits for an answer)
        let _ = gate_rx.recv_timeout(std::time::Duration::from_secs(60));
    });
    let log = Arc::new(open_with(&b, LogOptions::default(), hook));
    // sent by the hook: answered while the hook still runs
    let early = append_aside(&log, vec![frame(b"early")]);
    assert_eq!(entered_rx.recv().unwrap(), 1);
    assert!(eventually(&early), "the hook sent, yet the append waits");
    gate.send(()).unwrap();
    // not sent: answered only once the hook returns
    let late = append_aside(&log, vec![frame(b"late")]);
    assert_eq!(entered_rx.recv().unwrap(), 2);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!late.load(std::sync::atomic::Ordering::Acquire));
    gate.send(()).unwrap();
    assert!(eventually(&late));
    // (counted once its hook returned, before the next group's)
    assert_eq!(log.stats().n_groups_acknowledged_early, 1);
}

#[test]
fn a_group_over_two_segments_is_acknowledged_only_from_its_last_segment_hook() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let b = MemBackend::new();
    // (one segment holds a small frame and one of 2,500 bytes, not two)
    let opts = LogOptions {
        segment_bytes_max: 4096,
        ..LogOptions::default()
    };
    let (entered, entered_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let (gate, gate_rx) = std::sync::mpsc::channel::<()>();
    let hook: CommitHook = Box::new(move |frames, acks| {
        // every call tries to acknowledge at once
        acks.send();
        let last = frames.last().unwrap().payload.to_vec();
        let held = last[0] == b'a';
        entered.send(last).unwrap();
        if held {
            let _ = gate_rx.recv_timeout(std::time::Duration::from_secs(60));
        }
    });
    let log = Arc::new(open_with(&b, opts, hook));
    // The writer is held in its first write while `a` and `b` queue behind
    // it, so that they are written as one group: `a` where the first frame
    // is, `b` in the next segment.
    let (write_gate, write_gate_rx) = std::sync::mpsc::channel::<()>();
    let write_gate_rx = parking_lot::Mutex::new(write_gate_rx);
    let armed = Arc::new(AtomicBool::new(true));
    let arm = armed.clone();
    b.on_write(Arc::new(move |_| {
        if arm.swap(false, Ordering::AcqRel) {
            write_gate_rx.lock().recv().unwrap();
        }
    }));
    let first = append_aside(&log, vec![frame(b"x")]);
    while armed.load(Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // (both queued by this thread while the writer is held: one group, in
    // this order)
    let a = append_aside(&log, vec![frame(&[b'a'; 2500])]);
    let bb = append_aside(&log, vec![frame(&[b'b'; 2500])]);
    write_gate.send(()).unwrap();
    // the hook's call for the segment holding `a` sent, and `a` waits
    loop {
        let last = entered_rx.recv().unwrap();
        if last[0] == b'a' {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !a.load(Ordering::Acquire),
        "acknowledged before its group's last segment was applied"
    );
    assert!(!bb.load(Ordering::Acquire));
    gate.send(()).unwrap();
    assert_eq!(entered_rx.recv().unwrap(), vec![b'b'; 2500]);
    assert!(eventually(&first) && eventually(&a) && eventually(&bb));
    let stats = log.stats();
    assert_eq!((stats.last_lsn, stats.n_segments), (3, 2), "{stats:?}");
}

/// Zeros for the next groups are written between groups: once less than
/// half a preallocation step is left after the last frame, the active
/// segment grows by a step before the next group is written (a group's
/// own write then seldom waits for zeros).
#[test]
fn the_active_segment_is_preallocated_ahead_between_groups() {
    let b = MemBackend::new();
    let step = 64 << 10;
    let log = open(
        &b,
        LogOptions {
            preallocate_bytes: step,
            ..LogOptions::default()
        },
    );
    let len = || {
        let path = log.segments().last().unwrap().1.clone();
        b.open(&path, engram_storage::backend::OpenMode::Read)
            .unwrap()
            .len()
            .unwrap()
    };
    // 40 KiB: the group's own preallocation makes one step, of which less
    // than half is left after it
    log.append(vec![frame(&vec![7u8; 40 << 10])]).unwrap();
    // a later group is written after the writer's work between groups
    let l = log.append(vec![frame(b"next")]).unwrap();
    let end = l[0].offset + engram_storage::frame::encoded_len(4) as u64;
    assert!(
        len() >= end + step / 2,
        "{} bytes zero-filled after the last frame (at {end}), below half a step",
        len() - end
    );
}

/// On a disk without room for a preallocation step, a group's own attempt
/// gives way (its zeros are cut) and the writer does not try again between
/// groups: one attempt per group, as without preallocating ahead.
#[test]
fn after_a_preallocation_finds_no_room_none_is_tried_between_groups() {
    let b = MemBackend::new();
    let log = open(&b, LogOptions::default());
    // room for the frames, not for a step of zeros
    b.set_capacity(Some(b.used_bytes() + (256 << 10)));
    let before = b.writes_attempted();
    // each group: one zero-fill that gives way, and its frame
    log.append(vec![frame(b"first")]).unwrap();
    log.append(vec![frame(b"second")]).unwrap();
    assert_eq!(
        b.writes_attempted() - before,
        4,
        "a preallocation was tried between the groups"
    );
}
