//! Faults of a real disk beyond power cuts: unreadable sectors, bits that
//! rot, writes that land in the wrong place. Whatever happens, Engram never
//! panics and never returns content other than what was written: it
//! answers, or it refuses with an error naming the damage.

use std::path::Path;
use std::sync::Arc;

use engram::storage::MemBackend;
use engram::storage::backend::Fault;
use engram::{Engram, NewRecord, Options, Principal, RecordRef};

const DIR: &str = "/store";

fn opts(b: &MemBackend) -> Options {
    Options {
        backend: Arc::new(b.clone()),
        ..Options::default()
    }
}

fn text_of(i: usize) -> String {
    format!("record number {i} with some words to index")
}

fn build(n: usize) -> MemBackend {
    let b = MemBackend::new();
    let db = Engram::open(DIR, opts(&b)).unwrap();
    let s = db.session(Principal::admin("t"));
    for c in 0..n / 10 {
        s.append(
            (c * 10..c * 10 + 10)
                .map(|i| NewRecord::event("note", text_of(i)).with_external_id(format!("r/{i}")))
                .collect(),
        )
        .unwrap();
    }
    db.close().unwrap();
    b
}

/// Every record the store answers for has exactly its written text.
fn check_answers(db: &Engram, n: usize) {
    let s = db.session(Principal::admin("t"));
    for i in 0..n {
        if let Ok(r) = s.get(&RecordRef::External(format!("r/{i}"))) {
            assert_eq!(
                r.text.as_deref(),
                Some(text_of(i).as_str()),
                "r/{i} changed"
            );
        }
    }
}

/// Reads of an open store go through a memory map taken at open; a read
/// that fails while opening (an unreadable sector) is a clear error, and the
/// store opens once the sector reads again.
#[test]
fn an_unreadable_sector_is_an_error_not_a_crash_and_reads_recover() {
    let _serial = crate::cli::serial();
    let b = build(50);
    let mut refused = 0;
    for n in 0..12 {
        b.inject(Fault::FailReadsAfter(n));
        match Engram::open(DIR, opts(&b)) {
            Ok(db) => {
                b.clear_faults();
                check_answers(&db, 50);
                db.close().ok();
            }
            Err(e) => {
                refused += 1;
                assert!(
                    e.to_string().contains("injected read failure"),
                    "read {n}: {e}"
                );
            }
        }
        b.clear_faults();
        let db = Engram::open(DIR, opts(&b)).expect("opens once the sector reads again");
        check_answers(&db, 50);
        db.close().unwrap();
    }
    assert!(refused > 0, "no read failure reached the open");
}

#[test]
fn a_rotted_bit_anywhere_is_refused_or_harmless_never_believed() {
    let _serial = crate::cli::serial();
    let seed = crate::common::seed();
    let mut rng = crate::common::Rng(seed | 1);
    let clean = build(50);
    let seg = Path::new(DIR).join("log/00000000000000000001.seg");
    let len = clean.read_file(&seg).unwrap().len();
    for round in 0..60 {
        let b = clean.crash_image(round); // a copy (everything is durable)
        let at = rng.below(len as u64) as usize;
        b.flip_bit(&seg, at, rng.below(8) as u8);
        match Engram::open(DIR, opts(&b)) {
            Ok(db) => {
                check_answers(&db, 50);
                db.close().ok();
            }
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains("segment") || m.contains("damaged") || m.contains("undecodable"),
                    "seed {seed} round {round}: unclear refusal: {m}"
                );
            }
        }
    }
}

#[test]
fn a_misdirected_write_is_never_read_back_as_good_data() {
    let _serial = crate::cli::serial();
    for k in 0..4 {
        let b = build(20);
        let db = Engram::open(DIR, opts(&b)).unwrap();
        let s = db.session(Principal::admin("t"));
        b.inject(Fault::MisdirectWrite(k));
        let _ = s.append(
            (20..30)
                .map(|i| NewRecord::event("note", text_of(i)).with_external_id(format!("r/{i}")))
                .collect(),
        );
        b.clear_faults();
        let _ = db.close();
        for image in [b.clone(), b.crash_image(k)] {
            match Engram::open(DIR, opts(&image)) {
                Ok(db) => {
                    check_answers(&db, 30);
                    db.close().ok();
                }
                Err(e) => {
                    let m = e.to_string();
                    assert!(m.contains("segment") || m.contains("LSN"), "k {k}: {m}");
                }
            }
        }
    }
}

/// A failed fsync stops the log writer: the store says so where an
/// operator looks (`write_failure`, the gauges behind `/readyz` and
/// `/metrics`, `verify`), reads go on, and a reopen recovers with every
/// acknowledged write.
#[test]
fn a_stopped_log_writer_is_reported_and_a_reopen_recovers() {
    let b = build(20);
    let db = Engram::open(DIR, opts(&b)).unwrap();
    let s = db.session(Principal::admin("t"));
    assert!(db.write_failure().is_none());
    assert!(!db.gauges().writes_failed);
    b.inject(Fault::FailSyncsAfter(0));
    let e = s
        .append(vec![NewRecord::event("note", "lost")])
        .unwrap_err();
    let why = db
        .write_failure()
        .unwrap_or_else(|| panic!("not reported after: {e}"));
    assert!(!why.is_empty());
    assert!(db.gauges().writes_failed);
    // refused from now on, and said by verify
    s.append(vec![NewRecord::event("note", "also refused")])
        .unwrap_err();
    let v = db.verify().unwrap();
    assert!(
        v.problems.iter().any(|p| p.contains("log writer stopped")),
        "{:?}",
        v.problems
    );
    s.get(&RecordRef::External("r/19".into()))
        .expect("reads go on");
    drop(s);
    let _ = db.close();
    b.clear_faults();
    let db = Engram::open(DIR, opts(&b)).unwrap();
    assert!(db.write_failure().is_none());
    let s = db.session(Principal::admin("t"));
    for i in 0..20 {
        s.get(&RecordRef::External(format!("r/{i}")))
            .expect("every acknowledged write");
    }
    s.append(vec![NewRecord::event("note", "after the reopen")])
        .unwrap();
    db.close().unwrap();
}
