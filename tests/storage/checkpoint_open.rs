//! Open from a state checkpoint: the store opens from `derived/state.snap`
//! and replays only the log after it, and what it then holds is exactly
//! what a replay of the whole log gives. A checkpoint that is damaged,
//! stale or from another log is never trusted: the store replays the whole
//! log instead and says why.

use crate::common::*;

use std::path::Path;

use engram::retrieval::RecallRequest;
use engram::{Body, Engram, ManualClock, NewRecord, OpenReport, Principal};

/// Events (some with access labels), an entity, a relation, a correction,
/// a deletion, a grant and a revocation: every kind of frame.
fn write_part(db: &Engram, part: &str, clock: &ManualClock) {
    let s = db.session(Principal::admin("t"));
    let e = |n: usize| format!("{part}-e{n}");
    s.append(vec![
        NewRecord::event(
            "note",
            format!("{part}: checkout latency rose after the deploy"),
        )
        .with_external_id(e(1)),
        NewRecord::event("note", format!("{part}: billing retries the invoice job"))
            .with_external_id(e(2))
            .with_access(&["hr"]),
        NewRecord::event("note", format!("{part}: to be deleted")).with_external_id(e(3)),
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: format!("{part}-service"),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some(e(4)),
            ..NewRecord::default()
        },
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: format!("{part}-billing"),
                aliases: vec![format!("{part}-bill")],
            },
            kind: "entity".into(),
            external_id: Some(e(7)),
            ..NewRecord::default()
        },
    ])
    .unwrap();
    s.append(vec![NewRecord {
        body: Body::Relation {
            subject: ext(&e(4)),
            predicate: "depends_on".into(),
            object: ext(&e(7)),
        },
        kind: "relation".into(),
        external_id: Some(e(5)),
        sources: vec![ext(&e(1))],
        ..NewRecord::default()
    }])
    .unwrap();
    clock.advance(MINUTE);
    s.append(vec![
        NewRecord::event(
            "note",
            format!("{part}: checkout latency rose after the rollout"),
        )
        .with_external_id(e(1))
        .superseding(ext(&e(1))),
    ])
    .unwrap();
    s.expire(&ext(&e(2)), T0 + 30 * MINUTE).unwrap();
    s.delete(&ext(&e(3)), Some("erasure")).unwrap();
    s.grant(Some("pat"), Some("hr"), None).unwrap();
    s.revoke(Some("pat"), Some("hr"), None).unwrap();
    // a second tenant, so the checkpoint holds more than one
    db.session(Principal::admin("u"))
        .append(vec![
            NewRecord::event("note", format!("{part}: tenant u's own note")).with_external_id(e(6)),
        ])
        .unwrap();
}

fn open_report(dir: &Path, clock: &ManualClock) -> (Engram, OpenReport) {
    Engram::open_with_report(dir, opts(clock)).unwrap()
}

/// What a reader sees: the derived manifest and a recall per tenant.
fn observe(db: &Engram) -> (Vec<String>, Vec<Vec<String>>) {
    // the vector graphs are built in the background: compare them complete
    db.wait_indexed().unwrap();
    let manifest = db.derived_manifest().unwrap();
    let mut recalls = Vec::new();
    for t in ["t", "u"] {
        let hits = db
            .session(Principal::admin(t))
            .recall(&RecallRequest::text("checkout latency billing note"))
            .unwrap()
            .hits;
        recalls.push(hits.iter().map(|h| h.id.to_string()).collect());
    }
    (manifest, recalls)
}

/// The same store opened by a replay of the whole log.
fn full_replay(dir: &Path, clock: &ManualClock) -> (Vec<String>, Vec<Vec<String>>) {
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir, copy.path());
    std::fs::remove_file(copy.path().join("derived/state.snap")).unwrap();
    let (db, r) = open_report(copy.path(), clock);
    assert_eq!(r.checkpoint_lsn, 0, "{r:?}");
    assert_eq!(r.checkpoint_discarded, None, "{r:?}");
    let seen = observe(&db);
    db.close().unwrap();
    seen
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.file_name().unwrap() == "LOCK" {
            continue;
        }
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn a_closed_store_opens_from_its_checkpoint_and_replays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    write_part(&db, "a", &clock);
    let last = db.stats().unwrap().last_lsn;
    db.close().unwrap();

    let (db, r) = open_report(dir.path(), &clock);
    assert_eq!(r.checkpoint_lsn, last, "{r:?}");
    assert_eq!(r.frames_replayed, 0, "{r:?}");
    assert!(!r.lexical_rebuilt && r.vectors_rebuilt.is_empty(), "{r:?}");
    let seen = observe(&db);
    assert!(seen.1.iter().all(|hits| !hits.is_empty()), "{seen:?}");
    db.close().unwrap();
    assert_eq!(seen, full_replay(dir.path(), &clock));
}

/// A close that may not finish the graphs (a server's shutdown after a
/// large ingest) checkpoints them as far as they got; the next open indexes
/// the rest, and the graphs end up byte for byte those of a store whose
/// close finished them.
#[test]
fn a_close_cut_short_leaves_the_rest_of_the_graph_to_the_next_open() {
    let clock = ManualClock::new(T0);
    // (the same ids in both stores: a graph's file names its slots' records)
    let no_indexer = || engram::Options {
        background_indexing: false,
        id_seed: Some(7),
        ..opts(&clock)
    };
    let fill = |dir: &Path| {
        let db = Engram::open(dir, no_indexer()).unwrap();
        let s = db.session(Principal::admin("t"));
        let batch: Vec<NewRecord> = (0..1500)
            .map(|i| NewRecord::event("note", format!("note {i} on topic {}", i % 37)))
            .collect();
        s.append(batch).unwrap();
        db
    };
    let graph = |dir: &Path| {
        let snaps: Vec<_> = files_under(&dir.join("derived"))
            .into_iter()
            .filter(|p| p.ends_with("hnsw.snap"))
            .collect();
        assert_eq!(snaps.len(), 1, "{snaps:?}");
        std::fs::read(&snaps[0]).unwrap()
    };

    // 1,024 vectors, then 7 full batches of 64; the last 28 wait for their
    // batch to fill (searched exactly), through any close
    let indexable = 1024 + 7 * 64;
    let whole = tempfile::tempdir().unwrap();
    let db = fill(whole.path());
    assert_eq!(db.close_within(std::time::Duration::MAX).unwrap(), 0);

    let cut = tempfile::tempdir().unwrap();
    let db = fill(cut.path());
    let left = db.close_within(std::time::Duration::ZERO).unwrap();
    assert_eq!(
        left, indexable,
        "no time to index: every vector left waiting"
    );
    let db = Engram::open(cut.path(), no_indexer()).unwrap();
    let space = &db.stats().unwrap().vector_spaces[0];
    assert_eq!((space.vectors, space.indexed), (1500, 0), "{space:?}");
    // waiting vectors are searched exactly meanwhile
    let hits = db
        .session(Principal::admin("t"))
        .recall(&RecallRequest::text("note 7 on topic 7"))
        .unwrap()
        .hits;
    assert!(!hits.is_empty());
    db.close().unwrap();
    let db = Engram::open(cut.path(), no_indexer()).unwrap();
    let space = &db.stats().unwrap().vector_spaces[0];
    assert_eq!(space.indexed, indexable as usize, "{space:?}");
    db.close().unwrap();
    assert!(
        graph(cut.path()) == graph(whole.path()),
        "the graphs differ"
    );
}

/// A relation's edge names the relation record (a record position, not a
/// string symbol): a store with more records than distinct strings must
/// still open from its checkpoint.
#[test]
fn a_store_with_many_entities_and_a_relation_opens_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let entities: Vec<NewRecord> = (0..12)
        .map(|i| NewRecord {
            body: Body::Entity {
                entity_type: "thing".into(),
                name: format!("N{i}"),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some(format!("e{i}")),
            ..NewRecord::default()
        })
        .collect();
    s.append(entities).unwrap();
    s.append(vec![NewRecord {
        body: Body::Relation {
            subject: ext("e0"),
            predicate: "p".into(),
            object: ext("e11"),
        },
        kind: "relation".into(),
        external_id: Some("r".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    let last = db.stats().unwrap().last_lsn;
    db.close().unwrap();
    let (db, r) = open_report(dir.path(), &clock);
    assert_eq!(r.checkpoint_discarded, None, "{r:?}");
    assert_eq!(r.checkpoint_lsn, last, "{r:?}");
    let seen = observe(&db);
    db.close().unwrap();
    assert_eq!(seen, full_replay(dir.path(), &clock));
}

#[test]
fn after_a_crash_only_the_log_after_the_checkpoint_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    write_part(&db, "a", &clock);
    db.checkpoint().unwrap();
    let at_checkpoint = db.stats().unwrap().last_lsn;
    write_part(&db, "b", &clock);
    let last = db.stats().unwrap().last_lsn;
    // a crash: the handle goes without `close` (no final checkpoint)
    drop(db);

    let (db, r) = open_report(dir.path(), &clock);
    assert_eq!(r.checkpoint_lsn, at_checkpoint, "{r:?}");
    assert_eq!(r.frames_replayed, last - at_checkpoint, "{r:?}");
    assert_eq!(db.stats().unwrap().last_lsn, last);
    let seen = observe(&db);
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
    assert_eq!(seen, full_replay(dir.path(), &clock));
}

/// Every byte of the checkpoint file flipped in turn (a sample across it,
/// and the whole header): the open never trusts it, replays the whole log,
/// and ends with the same state.
#[test]
fn a_damaged_checkpoint_is_discarded_and_the_log_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    write_part(&db, "a", &clock);
    db.close().unwrap();
    let expected = full_replay(dir.path(), &clock);
    let snap = dir.path().join("derived/state.snap");
    let good = std::fs::read(&snap).unwrap();
    let step = (good.len() / 97).max(1);
    let positions: Vec<usize> = (0..64.min(good.len()))
        .chain((64..good.len()).step_by(step))
        .collect();
    for pos in positions {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), copy.path());
        let mut bad = good.clone();
        bad[pos] ^= 0x5A;
        std::fs::write(copy.path().join("derived/state.snap"), &bad).unwrap();
        let (db, r) = open_report(copy.path(), &clock);
        assert_eq!(r.checkpoint_lsn, 0, "byte {pos}: {r:?}");
        assert!(r.checkpoint_discarded.is_some(), "byte {pos}: {r:?}");
        assert_eq!(observe(&db), expected, "byte {pos}");
        db.close().unwrap();
    }
    // cut short
    for len in [0, 10, good.len() / 2, good.len() - 1] {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), copy.path());
        std::fs::write(copy.path().join("derived/state.snap"), &good[..len]).unwrap();
        let (db, r) = open_report(copy.path(), &clock);
        assert_eq!(r.checkpoint_lsn, 0, "length {len}: {r:?}");
        assert_eq!(observe(&db), expected, "length {len}");
        db.close().unwrap();
    }
}

/// A checkpoint taken of another store (same LSNs, other records) is
/// refused: it does not describe this log.
#[test]
fn a_checkpoint_of_another_log_is_not_trusted() {
    let clock = ManualClock::new(T0);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (dir, part) in [(&a, "a"), (&b, "b")] {
        let db = open(dir.path(), &clock);
        write_part(&db, part, &clock);
        db.close().unwrap();
    }
    let expected = full_replay(a.path(), &clock);
    std::fs::copy(
        b.path().join("derived/state.snap"),
        a.path().join("derived/state.snap"),
    )
    .unwrap();
    let (db, r) = open_report(a.path(), &clock);
    assert_eq!(r.checkpoint_lsn, 0, "{r:?}");
    let why = r.checkpoint_discarded.clone().unwrap_or_default();
    assert!(why.contains("another log"), "{r:?}");
    assert_eq!(observe(&db), expected);
    db.close().unwrap();
}

/// A lexical snapshot of another log (same length, other texts) is not
/// used: it does not name the frame this log holds at its LSN, so the
/// index is rebuilt from the log and searches find this store's texts.
#[test]
fn a_lexical_snapshot_of_another_log_is_not_used() {
    let clock = ManualClock::new(T0);
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (dir, part) in [(&a, "a"), (&b, "b")] {
        let db = open(dir.path(), &clock);
        write_part(&db, part, &clock);
        db.close().unwrap();
    }
    let expected = full_replay(a.path(), &clock);
    std::fs::copy(
        b.path().join("derived/lexical.snap"),
        a.path().join("derived/lexical.snap"),
    )
    .unwrap();
    let (db, r) = open_report(a.path(), &clock);
    assert!(r.lexical_rebuilt, "{r:?}");
    assert_eq!(observe(&db), expected);
    db.close().unwrap();
}

mod power_cut {
    //! A power cut at any write while appending and checkpointing: the
    //! store opens, verifies clean, holds every acknowledged record, and
    //! its state is exactly what a replay of its whole log gives, whether
    //! the checkpoint it found was the old one, the new one, or none.

    use super::*;
    use engram::storage::{Backend, MemBackend};
    use parking_lot::Mutex;
    use std::sync::Arc;

    const DIR: &str = "/store";

    /// The image a power cut left, and what had been acknowledged by then.
    type Crash = (MemBackend, Vec<String>);

    fn mem_opts(b: &MemBackend, clock: &ManualClock) -> engram::Options {
        engram::Options {
            backend: Arc::new(b.clone()),
            // no background thread: the writes of a run are the same each time
            background_indexing: false,
            checkpoint_after_frames: 0,
            ..opts(clock)
        }
    }

    fn observe_image(b: &MemBackend, clock: &ManualClock, what: &str) -> (Vec<String>, u64) {
        let (db, r) = Engram::open_with_report(DIR, mem_opts(b, clock))
            .unwrap_or_else(|e| panic!("{what}: the store does not open: {e}"));
        let v = db.verify().unwrap();
        assert!(v.ok(), "{what}: verify: {:?}", v.problems);
        let m = db.derived_manifest().unwrap();
        db.close().unwrap();
        (m, r.checkpoint_lsn)
    }

    #[test]
    fn a_power_cut_at_any_write_of_a_checkpoint_leaves_a_sound_store() {
        let clock = ManualClock::new(T0);
        let pristine = MemBackend::new();
        {
            let db = Engram::open(DIR, mem_opts(&pristine, &clock)).unwrap();
            write_part(&db, "a", &clock);
            db.close().unwrap();
        }
        // The operation: append more (each append acknowledged), then
        // checkpoint and close.
        let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
        let op = |b: &MemBackend, acked: &Mutex<Vec<String>>| {
            let db = Engram::open(DIR, mem_opts(b, &clock)).unwrap();
            let s = db.session(Principal::admin("t"));
            for i in 0..6 {
                let ext = format!("late-{i}");
                s.append(vec![
                    NewRecord::event("note", format!("late note {i}")).with_external_id(&ext),
                ])
                .unwrap();
                acked.lock().push(ext);
            }
            db.checkpoint().unwrap();
            s.append(vec![
                NewRecord::event("note", "after the checkpoint").with_external_id("late-last"),
            ])
            .unwrap();
            acked.lock().push("late-last".into());
            db.close().unwrap();
        };
        let counted = pristine.crash_image(0);
        let writes = Arc::new(Mutex::new(0u64));
        {
            let writes = writes.clone();
            counted.on_write(Arc::new(move |n| *writes.lock() = n));
        }
        op(&counted, &Mutex::default());
        counted.clear_faults();
        let total = *writes.lock();
        assert!(total > 10, "the operation wrote {total} times");
        let mut checked = 0;
        let mut used = std::collections::BTreeSet::new();
        for cut in 1..=total {
            for seed in [1u64, 2] {
                let image = pristine.crash_image(0);
                let captured: Arc<Mutex<Option<Crash>>> = Arc::default();
                {
                    let (img, captured, acked) =
                        (image.clone(), captured.clone(), acknowledged.clone());
                    image.on_write(Arc::new(move |w| {
                        if w == cut {
                            let mut c = captured.lock();
                            if c.is_none() {
                                *c = Some((img.crash_image(seed ^ cut), acked.lock().clone()));
                            }
                        }
                    }));
                }
                acknowledged.lock().clear();
                op(&image, &acknowledged);
                let Some((crashed, acked)) = captured.lock().take() else {
                    continue;
                };
                let what = format!("power cut after write {cut} of {total} (seed {seed})");
                // the same image without its checkpoint: a full replay
                let replayed = crashed.crash_image(0);
                let snap = std::path::Path::new(DIR).join("derived/state.snap");
                if replayed.exists(&snap) {
                    replayed.remove_file(&snap).unwrap();
                }
                let (seen, from) = observe_image(&crashed, &clock, &what);
                used.insert(from);
                assert_eq!(
                    seen,
                    observe_image(&replayed, &clock, &what).0,
                    "{what}: the state differs from a full replay"
                );
                let db = Engram::open(DIR, mem_opts(&crashed, &clock)).unwrap();
                let s = db.session(Principal::admin("t"));
                for ext in acked.iter().chain(["a-e2".to_string()].iter()) {
                    s.get(&engram::RecordRef::External(ext.clone()))
                        .unwrap_or_else(|e| panic!("{what}: acknowledged {ext} lost: {e}"));
                }
                db.close().unwrap();
                checked += 1;
            }
        }
        assert!(
            checked as u64 >= total,
            "only {checked} crash images checked"
        );
        // the cuts landed before, between and after the checkpoint writes:
        // opens started from the old checkpoint, the new one and the last
        assert!(used.len() >= 3, "checkpoints used: {used:?}");
    }
}

/// Derived state taken before a compaction is not used after it, also when
/// the log has several segments and the compaction rewrote only one before
/// the anchor's (the anchor frame itself did not move, so its place and
/// checksum alone matched): its record locations in the rewritten segment
/// are stale, and its lexical snapshot holds the purged record's terms.
/// The open replays the log and rebuilds the index instead; every record
/// reads, and the purged text is in no file. A store that was not
/// compacted still opens from its checkpoint with several segments.
#[test]
fn derived_state_from_before_a_compaction_is_not_used_with_several_segments() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let small = || engram::Options {
        log: engram::storage::LogOptions {
            segment_bytes_max: 64 * 1024,
            ..engram::storage::LogOptions::default()
        },
        ..opts(&clock)
    };
    let db = Engram::open(dir.path(), small()).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "purged-canary-quetzal in the first segment")
            .with_external_id("gone"),
        NewRecord::event("note", "kept early note").with_external_id("early"),
    ])
    .unwrap();
    for i in 0..40 {
        s.append(vec![NewRecord::event(
            "note",
            format!("filler {i} {}", "x".repeat(4000)),
        )])
        .unwrap();
    }
    s.append(vec![
        NewRecord::event("note", "kept late note").with_external_id("late"),
    ])
    .unwrap();
    db.close().unwrap();
    let segments = std::fs::read_dir(dir.path().join("log")).unwrap().count();
    assert!(segments >= 3, "{segments} segment(s)");
    // reopened as it was: from its checkpoint
    let (db, r) = Engram::open_with_report(dir.path(), small()).unwrap();
    assert!(r.checkpoint_lsn > 0 && r.frames_replayed == 0, "{r:?}");
    db.close().unwrap();
    let old = tempfile::tempdir().unwrap();
    copy_dir(&dir.path().join("derived"), old.path());
    let db = Engram::open(dir.path(), small()).unwrap();
    db.session(Principal::admin("t"))
        .delete(&ext("gone"), None)
        .unwrap();
    db.close().unwrap();
    Engram::compact(dir.path(), &small()).unwrap();
    // the derived files of before the compaction put back
    std::fs::remove_dir_all(dir.path().join("derived")).unwrap();
    copy_dir(old.path(), &dir.path().join("derived"));
    let (db, r) = Engram::open_with_report(dir.path(), small()).unwrap();
    assert_eq!(r.checkpoint_lsn, 0, "{r:?}");
    assert!(r.lexical_rebuilt, "{r:?}");
    let s = db.session(Principal::admin("t"));
    for kept in ["early", "late"] {
        s.get(&ext(kept)).unwrap();
    }
    assert!(s.get(&ext("gone")).is_err());
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
    assert!(
        grep(dir.path(), "purged-canary-quetzal").is_empty(),
        "the purged text is in a file"
    );
}
