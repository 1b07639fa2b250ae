//! Damage to the tail of a real segment file on disk: open succeeds, the
//! report names exactly what was cut and why, and every intact frame stays.
//! Damage to durable bytes in the middle is refused, never truncated.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_storage::frame::FrameType;
use engram_storage::log::{LogOptions, PendingFrame, RecoveryReport, TruncationReason};
use engram_storage::{Backend, FrameRef, FsBackend, SegmentLog, StorageError};

/// The segment file, open for reading and writing in place.
fn open_rw(seg: &std::path::Path) -> std::fs::File {
    OpenOptions::new().read(true).write(true).open(seg).unwrap()
}

fn frame(i: u32) -> PendingFrame {
    PendingFrame {
        frame_type: FrameType(1),
        frame_version: 1,
        payload: format!("intact record {i:04} {}", "p".repeat(100)).into_bytes(),
    }
}

/// Writes 10 single-frame batches; returns the segment path and its length
/// after each batch.
fn make_log(dir: &Path) -> (PathBuf, Vec<u64>) {
    let backend: Arc<dyn Backend> = Arc::new(FsBackend);
    let (log, _) = SegmentLog::open(backend, dir, LogOptions::default()).unwrap();
    log.start_writer(Box::new(|_, _| {})).unwrap();
    let mut ends = Vec::new();
    for i in 0..10 {
        let l = log.append(vec![frame(i)]).unwrap();
        let fr = log.read(l[0].segment, l[0].offset).unwrap();
        ends.push(l[0].offset + fr.header.encoded_len() as u64);
    }
    let path = log.segments()[0].1.clone();
    drop(log);
    // A cleanly closed log keeps no preallocated space on disk.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), ends[9]);
    (path, ends)
}

fn reopen(dir: &Path) -> Result<(Vec<Vec<u8>>, RecoveryReport), StorageError> {
    let backend: Arc<dyn Backend> = Arc::new(FsBackend);
    let (log, report) = SegmentLog::open(backend, dir, LogOptions::default())?;
    let mut payloads = Vec::new();
    log.scan(0, |f| {
        payloads.push(f.payload().to_vec());
        Ok(ControlFlow::Continue(()))
    })?;
    assert!(log.verify()?.1.is_empty());
    Ok((payloads, report))
}

fn expect_records(payloads: &[Vec<u8>], n: u32) {
    assert_eq!(payloads.len(), n as usize);
    for (i, p) in payloads.iter().enumerate() {
        assert_eq!(p, &frame(i as u32).payload);
    }
}

#[test]
fn truncated_tail_is_cut_at_the_last_whole_frame() {
    let d = tempfile::tempdir().unwrap();
    let (seg, ends) = make_log(d.path());
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(ends[9] - 50).unwrap();
    let (payloads, report) = reopen(d.path()).unwrap();
    expect_records(&payloads, 9);
    let t = report.truncation.expect("a truncation is reported");
    assert_eq!(t.offset, ends[8]);
    assert_eq!(t.bytes_dropped, ends[9] - 50 - ends[8]);
    assert!(
        matches!(t.reason, TruncationReason::InvalidTail { ref detail } if detail.contains("truncated")),
        "{t:?}"
    );
    // A second open finds a clean log.
    let (payloads, report) = reopen(d.path()).unwrap();
    expect_records(&payloads, 9);
    assert!(report.is_clean());
}

#[test]
fn flipped_bits_in_the_last_frame_drop_only_that_frame() {
    let d = tempfile::tempdir().unwrap();
    let (seg, ends) = make_log(d.path());
    let mut f = open_rw(&seg);
    f.seek(SeekFrom::Start(ends[8] + 40)).unwrap();
    f.write_all(&[0xFF, 0x00, 0xAA]).unwrap();
    drop(f);
    let (payloads, report) = reopen(d.path()).unwrap();
    expect_records(&payloads, 9);
    let t = report.truncation.unwrap();
    assert_eq!((t.offset, t.bytes_dropped), (ends[8], ends[9] - ends[8]));
    assert!(
        matches!(t.reason, TruncationReason::InvalidTail { ref detail } if detail.contains("payload checksum")),
        "{t:?}"
    );
    // the report names where the cut begins (it said "0 frame(s) nothing
    // proved acknowledged dropped", as if nothing went)
    let said = t.to_string();
    assert!(
        said.contains("after LSN 9 (a torn tail: payload checksum")
            && said.ends_with("the log holds no proof that any of it was acknowledged"),
        "{said}"
    );
    let batch = engram_storage::log::Truncation {
        dropped_lsns: vec![10, 11, 12],
        ..t
    };
    assert!(
        batch
            .to_string()
            .contains("LSNs 10 to 12, complete but of a batch left unfinished, went too"),
        "{batch}"
    );
}

#[test]
fn garbage_appended_is_cut_and_named() {
    let d = tempfile::tempdir().unwrap();
    let (seg, ends) = make_log(d.path());
    let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
    f.write_all(b"this is not a frame at all, just some garbage bytes")
        .unwrap();
    drop(f);
    let (payloads, report) = reopen(d.path()).unwrap();
    expect_records(&payloads, 10);
    let t = report.truncation.unwrap();
    assert_eq!((t.offset, t.bytes_dropped), (ends[9], 51));
    assert!(
        matches!(t.reason, TruncationReason::InvalidTail { ref detail } if detail.contains("magic")),
        "{t:?}"
    );
}

#[test]
fn zero_filled_tail_is_reported_as_preallocated_space_and_kept() {
    let d = tempfile::tempdir().unwrap();
    let (seg, ends) = make_log(d.path());
    let f = OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(ends[9] + 4096).unwrap();
    let (payloads, report) = reopen(d.path()).unwrap();
    expect_records(&payloads, 10);
    assert!(report.truncation.is_none(), "{report:?}");
    let (_, at, bytes) = report.preallocated_tail.expect("the zero tail is reported");
    assert_eq!(at, ends[9]);
    assert!(bytes >= 4096, "{bytes}");
}

#[test]
fn a_torn_frame_inside_preallocated_zeros_is_cut() {
    let d = tempfile::tempdir().unwrap();
    let (seg, ends) = make_log(d.path());
    let mut f = open_rw(&seg);
    f.set_len(ends[9] + 4096).unwrap();
    f.seek(SeekFrom::Start(ends[9])).unwrap();
    f.write_all(b"EGRM\x20\x00\x00\x00half a header").unwrap();
    drop(f);
    let (payloads, report) = reopen(d.path()).unwrap();
    expect_records(&payloads, 10);
    let t = report.truncation.unwrap();
    assert_eq!(t.offset, ends[9]);
}

#[test]
fn damage_inside_durable_data_is_refused_not_truncated() {
    let d = tempfile::tempdir().unwrap();
    let (seg, ends) = make_log(d.path());
    let len_before = std::fs::metadata(&seg).unwrap().len();
    let mut f = open_rw(&seg);
    f.seek(SeekFrom::Start(ends[3] + 45)).unwrap();
    f.write_all(b"XX").unwrap();
    drop(f);
    match reopen(d.path()) {
        Err(StorageError::CorruptLog { offset, .. }) => assert_eq!(offset, ends[3]),
        other => panic!("expected CorruptLog, got {other:?}"),
    }
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        len_before,
        "nothing was cut"
    );
}

/// `read` recomputes both checksums on every call; `read_verified` (for
/// frames the caller already read whole) checks the location, the magic and
/// that the length stays inside the durable end. A payload or header byte
/// damaged under an open log is caught by the one and not by the other; a
/// length pushed past the durable end, or a damaged magic, by both.
#[test]
fn read_checks_both_checksums_and_read_verified_the_bounds() {
    type ReadFn = fn(&SegmentLog, u64, u64) -> Result<FrameRef, StorageError>;
    let d = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(FsBackend);
    let (log, _) = SegmentLog::open(backend, d.path(), LogOptions::default()).unwrap();
    log.start_writer(Box::new(|_, _| {})).unwrap();
    let locs: Vec<_> = (0..5)
        .map(|i| log.append(vec![frame(i)]).unwrap()[0])
        .collect();
    for l in &locs {
        let a = log.read(l.segment, l.offset).unwrap();
        let b = log.read_verified(l.segment, l.offset).unwrap();
        assert_eq!(a.payload(), b.payload());
        assert_eq!(a.header, b.header);
    }
    let seg = log.segments()[0].1.clone();
    let mut f = open_rw(&seg);
    // frame 1: a payload byte; frame 2: a header byte (its LSN); frame 3:
    // its length, pushed past the end of the segment; frame 4: its magic.
    f.seek(SeekFrom::Start(locs[1].offset + 45)).unwrap();
    f.write_all(b"X").unwrap();
    f.seek(SeekFrom::Start(locs[2].offset + 8)).unwrap();
    f.write_all(&[0xEE]).unwrap();
    f.seek(SeekFrom::Start(locs[3].offset + 4)).unwrap();
    f.write_all(&(1u32 << 20).to_le_bytes()).unwrap();
    f.seek(SeekFrom::Start(locs[4].offset)).unwrap();
    f.write_all(&[0xEE]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    for (l, what) in [(locs[1], "payload"), (locs[2], "header")] {
        match log.read(l.segment, l.offset) {
            Err(StorageError::BadLocation { reason, .. }) => {
                assert!(reason.contains("checksum"), "{what}: {reason}")
            }
            other => panic!("expected a {what} checksum error, got {other:?}"),
        }
    }
    // a frame reader makes the same checks as the read it is asked for
    let mut r = log.reader();
    for (l, what) in [(locs[1], "payload"), (locs[2], "header")] {
        match r.payload(l.segment, l.offset, true) {
            Err(StorageError::BadLocation { reason, .. }) => {
                assert!(reason.contains("checksum"), "{what}: {reason}")
            }
            other => panic!("expected a {what} checksum error, got {other:?}"),
        }
    }
    assert!(
        r.payload(locs[1].segment, locs[1].offset, false)
            .unwrap()
            .contains(&b'X')
    );
    for (l, expected) in [(locs[3], "past the durable end"), (locs[4], "magic")] {
        match r.payload(l.segment, l.offset, false) {
            Err(StorageError::BadLocation { reason, .. }) => {
                assert!(reason.contains(expected), "{reason}")
            }
            other => panic!("expected {expected:?}, got {other:?}"),
        }
    }
    let unchecked = log.read_verified(locs[1].segment, locs[1].offset).unwrap();
    assert!(unchecked.payload().contains(&b'X'));
    let unchecked = log.read_verified(locs[2].segment, locs[2].offset).unwrap();
    assert_ne!(unchecked.header.lsn, locs[2].lsn);
    // `read` stops at the header checksum, `read_verified` at the bound.
    for (read, expected) in [
        (SegmentLog::read as ReadFn, "header checksum"),
        (SegmentLog::read_verified, "past the durable end"),
    ] {
        match read(&log, locs[3].segment, locs[3].offset) {
            Err(StorageError::BadLocation { reason, .. }) => {
                assert!(reason.contains(expected), "{reason}")
            }
            other => panic!("expected {expected:?}, got {other:?}"),
        }
    }
    for read in [SegmentLog::read as ReadFn, SegmentLog::read_verified] {
        match read(&log, locs[4].segment, locs[4].offset) {
            Err(StorageError::BadLocation { reason, .. }) => {
                assert!(reason.contains("magic"), "{reason}")
            }
            other => panic!("expected a magic error, got {other:?}"),
        }
    }
    assert_eq!(
        log.read(locs[0].segment, locs[0].offset).unwrap().payload(),
        frame(0).payload
    );
}
