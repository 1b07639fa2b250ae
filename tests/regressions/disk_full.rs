//! A full disk: preallocation gives way instead of failing small writes, a
//! write that does not fit fails with a typed error and stores nothing,
//! reads keep working, writes resume once space is freed, and nothing
//! acknowledged is lost or duplicated (also when derived state cannot be
//! written at close).

use std::path::Path;
use std::sync::Arc;

use engram::storage::StorageError;
use engram::storage::{Backend, MemBackend};
use engram::{EngineError, Engram, NewRecord, Options, Principal, RecordRef};

fn opts(b: &MemBackend) -> Options {
    Options {
        backend: Arc::new(b.clone()),
        ..Options::default()
    }
}

fn batch(n0: usize, n: usize) -> Vec<NewRecord> {
    (n0..n0 + n)
        .map(|i| {
            NewRecord::event("note", format!("record {i} {}", "x".repeat(900)))
                .with_external_id(format!("r/{i}"))
        })
        .collect()
}

/// A store of 200 records on `b`, written without preallocation (so the
/// disk's use is what was written): its options and the open handle.
fn store_of_200(b: &MemBackend) -> (Options, Engram) {
    let mut o = opts(b);
    o.log.preallocate_bytes = 0;
    let db = Engram::open(Path::new("/store"), o.clone()).unwrap();
    db.session(Principal::admin("t"))
        .append(batch(0, 200))
        .unwrap();
    (o, db)
}

#[test]
fn a_full_disk_fails_writes_cleanly_and_they_resume_once_space_is_freed() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let dir = Path::new("/store");
    // Smaller than one preallocation step (4 MiB): small writes still work.
    b.set_capacity(Some(3 << 20));
    let db = Engram::open(dir, opts(&b)).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(batch(0, 6))
        .expect("a small write fits without preallocation");
    let mut acked = 6;
    let err = loop {
        match s.append(batch(acked, 50)) {
            Ok(_) => acked += 50,
            Err(e) => break e,
        }
        assert!(acked < 10_000, "the disk never filled");
    };
    assert!(
        matches!(err, EngineError::Storage(StorageError::DiskFull { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains("nothing of this write was stored"),
        "{err}"
    );
    // the store says so until a write succeeds (the server's /readyz)
    let (ago, why) = db.disk_full().expect("the full disk is reported");
    assert!(ago < std::time::Duration::from_secs(60), "{ago:?}");
    assert!(why.contains("no space left"), "{why}");
    assert!(db.write_failure().is_none(), "the writer goes on");
    // reads keep working
    s.get(&RecordRef::External("r/0".into()))
        .expect("reads keep working");
    assert!(
        s.get(&RecordRef::External(format!("r/{}", acked - 1)))
            .is_ok()
    );
    assert!(s.get(&RecordRef::External(format!("r/{acked}"))).is_err());
    // the same batch again once there is room: stored once
    b.set_capacity(None);
    s.append(batch(acked, 50))
        .expect("writes resume once space is freed");
    assert!(db.disk_full().is_none(), "a write succeeded since");
    acked += 50;
    // With room again, close writes its checkpoint.
    db.close().expect("close succeeds once there is room");

    for image in [b.clone(), b.crash_image(7)] {
        let db = Engram::open(dir, opts(&image)).unwrap();
        let s = db.session(Principal::admin("t"));
        for i in 0..acked {
            s.get(&RecordRef::External(format!("r/{i}")))
                .unwrap_or_else(|e| panic!("acknowledged r/{i} lost: {e}"));
        }
        assert_eq!(
            db.stats().unwrap().records as usize,
            acked,
            "duplicates or losses"
        );
        assert!(db.verify().unwrap().ok());
        db.close().unwrap();
    }
}

#[test]
fn derived_state_that_cannot_be_written_at_close_loses_nothing() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let dir = Path::new("/store");
    let (_, db) = store_of_200(&b);
    b.set_capacity(Some(b.used_bytes()));
    let closed = db.close();
    assert!(
        closed.is_err(),
        "the lexical snapshot could not have been written"
    );
    // no half-written temporary file holds on to space
    b.set_capacity(None);
    let db = Engram::open(dir, opts(&b)).unwrap();
    assert_eq!(db.stats().unwrap().records, 200);
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
}

/// A deletion stored in the log is answered as done when the ledger file
/// (a side record the log rebuilds) cannot grow on a full disk: an error
/// would tell the caller it did not happen. `verify` names the lagging
/// ledger until a later operation or open writes it from the log.
#[test]
fn a_deletion_is_done_when_only_the_ledger_cannot_grow() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let dir = Path::new("/store");
    let db = Engram::open(dir, opts(&b)).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(batch(0, 3)).unwrap();
    // the log's segment is preallocated: its next frame fits; the ledger
    // file has to grow
    b.set_capacity(Some(b.used_bytes()));
    let ledger = dir.join("ledger.jsonl");
    let before = b.read_file(&ledger).unwrap_or_default();
    s.delete(&RecordRef::External("r/0".into()), Some("user request"))
        .expect("the deletion is stored in the log: done");
    assert_eq!(
        b.read_file(&ledger).unwrap_or_default(),
        before,
        "the ledger grew"
    );
    assert!(s.get(&RecordRef::External("r/0".into())).is_err());
    let v = db.verify().unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("ledger.jsonl lags the log")),
        "{:?}",
        v.problems
    );
    // room again: the next operation writes the ledger from the log
    b.set_capacity(None);
    s.delete(&RecordRef::External("r/1".into()), None).unwrap();
    let v = db.verify().unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    let lines = String::from_utf8(b.read_file(&ledger).unwrap()).unwrap();
    assert_eq!(
        lines.lines().filter(|l| l.contains("\"delete\"")).count(),
        2,
        "{lines}"
    );
    db.close().unwrap();
    let db = Engram::open(dir, opts(&b)).unwrap();
    let s = db.session(Principal::admin("t"));
    assert!(s.get(&RecordRef::External("r/0".into())).is_err());
    assert!(s.get(&RecordRef::External("r/2".into())).is_ok());
    db.close().unwrap();
}

/// A store whose last deletion's ledger line could not be written opens
/// again while the disk is still full (an open writes the lagging ledger
/// from the log, and failed there: the store, and a server on it, could
/// not start until space was freed); reads are served, `verify` names the
/// lag, and the open after space is freed writes it.
#[test]
fn a_store_opens_on_a_full_disk_with_its_ledger_lagging() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let dir = Path::new("/store");
    let db = Engram::open(dir, opts(&b)).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(batch(0, 3)).unwrap();
    b.set_capacity(Some(b.used_bytes()));
    s.delete(&RecordRef::External("r/0".into()), None).unwrap();
    // (derived state may not fit either: the log holds everything)
    let _ = db.close();
    // still full (what the close could not write left no space behind)
    b.set_capacity(Some(b.used_bytes()));
    let ledger = dir.join("ledger.jsonl");
    let before = b.read_file(&ledger).unwrap_or_default();
    let db = Engram::open(dir, opts(&b)).expect("opens on a full disk");
    let s = db.session(Principal::admin("t"));
    assert!(s.get(&RecordRef::External("r/0".into())).is_err());
    assert!(s.get(&RecordRef::External("r/1".into())).is_ok());
    let v = db.verify().unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.contains("ledger.jsonl lags the log") && p.contains("at open")),
        "{:?}",
        v.problems
    );
    assert_eq!(b.read_file(&ledger).unwrap_or_default(), before);
    let _ = db.close();
    b.set_capacity(None);
    let db = Engram::open(dir, opts(&b)).unwrap();
    assert!(db.verify().unwrap().ok());
    let lines = String::from_utf8(b.read_file(&ledger).unwrap()).unwrap();
    assert!(lines.contains("\"delete\""), "{lines}");
    db.close().unwrap();
}

/// A backup that runs out of space removes what it wrote: the space is
/// free again, and the retry its error asks for finds an empty
/// destination (it found the partial copy and refused it as not empty).
#[test]
fn a_backup_cut_short_by_a_full_disk_leaves_nothing_and_can_be_retried() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let (_, db) = store_of_200(&b);
    let used = b.used_bytes();
    // room for part of the copy only
    b.set_capacity(Some(used + 64 * 1024));
    for dest in ["/bk", "/empty"] {
        let dest = Path::new(dest);
        if dest == Path::new("/empty") {
            // (a lock file alone is an empty destination: kept)
            b.create_dir_all(dest).unwrap();
            b.write_file(&dest.join("LOCK"), b"");
        }
        let e = db.backup(dest).unwrap_err();
        assert!(
            matches!(e, EngineError::Storage(StorageError::DiskFull { .. })),
            "{e}"
        );
        assert_eq!(b.used_bytes(), used, "the partial copy holds space");
        if dest == Path::new("/bk") {
            assert!(!b.exists(dest), "the directory it created is left");
        } else {
            let left: Vec<String> = b
                .list_dir(dest)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            assert_eq!(left, ["LOCK"]);
        }
    }
    b.set_capacity(None);
    let r = db.backup(Path::new("/bk")).expect("the retry");
    assert_eq!(r.records, 200);
    db.close().unwrap();
}

/// A compaction whose rewrite of a segment runs out of space removes the
/// partial rewrite (`.seg.tmp`), which held the space a retry needs, and
/// changes nothing; with room again it runs.
#[test]
fn a_compaction_cut_short_by_a_full_disk_leaves_no_partial_segment() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let dir = Path::new("/store");
    let (o, db) = store_of_200(&b);
    let s = db.session(Principal::admin("t"));
    s.delete(&RecordRef::External("r/0".into()), None).unwrap();
    db.close().unwrap();
    let used = b.used_bytes();
    // room for less and less: some attempt fails while the segment is
    // rewritten (others before it, writing derived state)
    let mut in_rewrite = 0;
    for room_kib in (8..400).step_by(8) {
        b.set_capacity(Some(used + room_kib * 1024));
        let Err(e) = Engram::compact(dir, &o) else {
            break;
        };
        assert!(e.to_string().contains("space"), "{e}");
        in_rewrite += usize::from(e.to_string().contains(".seg"));
        let tmp: Vec<String> = b
            .list_dir(&dir.join("log"))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(tmp.is_empty(), "{room_kib} KiB: {tmp:?}");
    }
    assert!(in_rewrite > 0, "no attempt failed in the rewrite");
    b.set_capacity(None);
    let _ = Engram::compact(dir, &o).unwrap();
    let db = Engram::open(dir, o).unwrap();
    assert!(db.verify().unwrap().ok());
    assert_eq!(db.stats().unwrap().records, 200);
    db.close().unwrap();
}

/// A derived file (the vectors) that cannot grow on a full disk, while the
/// log still has preallocated room: the frame is durable but cannot be
/// applied, so the store stops applying and says why (a server's
/// `/readyz` is then 503, and its answers 503, not 500), and a reopen
/// with room again has every record, the one whose apply failed too.
#[test]
fn a_derived_file_that_cannot_grow_stops_the_store_and_a_reopen_recovers() {
    let _serial = crate::cli::serial();
    let b = MemBackend::new();
    let dir = Path::new("/store");
    let o = Options {
        embedder: Some(Arc::new(engram::HashEmbedder::default())),
        ..opts(&b)
    };
    let db = Engram::open(dir, o.clone()).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(batch(0, 5)).unwrap();
    assert!(db.apply_failure().is_none());
    // the log keeps its preallocated room; nothing else may grow
    b.set_capacity(Some(b.used_bytes()));
    let mut written = 5;
    let failed = loop {
        match s.append(batch(written, 20)) {
            Ok(_) => written += 20,
            Err(e) => break e,
        }
        assert!(written < 2_000, "the vectors never outgrew the disk");
    };
    let why = db.apply_failure().expect("the store says it stopped");
    assert!(why.contains("vectors"), "{why}");
    assert!(matches!(failed, EngineError::Background { .. }), "{failed}");
    // every later call is refused the same way, as unavailable
    let later = s.get(&RecordRef::External("r/0".into())).unwrap_err();
    assert!(matches!(later, EngineError::Background { .. }), "{later}");
    // and verify does not call the open store sound
    let v = db.verify().unwrap();
    assert!(!v.ok(), "{:?}", v.problems);
    assert!(
        v.problems.iter().any(|p| p.contains("applying the log")),
        "{:?}",
        v.problems
    );
    drop(s);
    let _ = db.close();
    b.set_capacity(None);
    let db = Engram::open(dir, o).unwrap();
    let s = db.session(Principal::admin("t"));
    for i in 0..written + 20 {
        s.get(&RecordRef::External(format!("r/{i}")))
            .unwrap_or_else(|e| panic!("r/{i}: {e}"));
    }
    assert!(db.apply_failure().is_none());
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
}
