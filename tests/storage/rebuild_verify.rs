//! Derived state is disposable: deleting all of it and rebuilding from the
//! log gives identical deterministic parts (ids, lineage, chunks,
//! eligibility, index membership, content keys, graph and lexical
//! encodings, record locations) on a store holding every record kind and lifecycle
//! operation.

use crate::common::*;
use engram::{AssertionKind, Body, Engram, ManualClock, NewRecord, Principal, RecordRef};

#[test]
fn rebuild_reproduces_derived_state_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let mut batch = Vec::new();
    for i in 0..200 {
        batch.push(
            NewRecord::event(
                "note",
                format!("event {i} about service {} and customer {}", i % 7, i % 13),
            )
            .with_external_id(format!("e{i}"))
            .with_embedding("client-m", vec![(i % 5) as f32, 1.0, (i % 3) as f32 + 0.5]),
        );
    }
    s.append(batch).unwrap();
    s.append(vec![
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: "checkout".into(),
                aliases: vec!["co".into()],
            },
            kind: "entity".into(),
            external_id: Some("svc".into()),
            ..NewRecord::default()
        },
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: "catalog".into(),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some("svc2".into()),
            ..NewRecord::default()
        },
    ])
    .unwrap();
    s.append(vec![NewRecord {
        body: Body::Relation {
            subject: ext("svc"),
            predicate: "depends_on".into(),
            object: ext("svc2"),
        },
        kind: "relation".into(),
        ..NewRecord::default()
    }])
    .unwrap();
    s.append(vec![
        NewRecord::assertion(
            AssertionKind::Hypothesis,
            "service 3 is flaky",
            vec![ext("e3"), ext("e10")],
        )
        .with_external_id("h"),
    ])
    .unwrap();
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g".into(),
        },
        kind: "summary".into(),
        text: Some("summary of e1 e2".into()),
        sources: vec![ext("e1"), ext("e2")],
        external_id: Some("s".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    db.session(Principal::model("t", "m"))
        .append(vec![
            NewRecord::assertion(
                AssertionKind::Instruction,
                "always page the on-call",
                vec![ext("e4")],
            )
            .with_external_id("cand"),
        ])
        .unwrap();
    s.append(vec![
        NewRecord::event("note", "event 1 corrected")
            .with_external_id("e1")
            .superseding(ext("e1")),
    ])
    .unwrap();
    s.delete(&ext("e5"), None).unwrap();
    s.expire(&ext("e6"), T0 + MINUTE).unwrap();
    s.retract(&ext("h"), Some("wrong")).unwrap();
    s.approve(&ext("cand"), None).unwrap();
    s.grant(Some("u"), Some("l"), None).unwrap();
    s.revoke(Some("u"), Some("l"), None).unwrap();
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    s.hold("tenant", true).unwrap();
    let summary = s.get(&ext("s")).unwrap();
    assert_eq!(summary.status, engram::Status::Stale);
    let _ = s.trace(&RecordRef::External("e2".into())).unwrap();
    db.close().unwrap();

    let r = Engram::rebuild(dir.path(), &opts(&clock), true).unwrap();
    assert!(r.checked_lines > 200);
    assert!(
        r.differences.is_empty(),
        "derived state differs after rebuild:\n{}",
        r.differences.join("\n")
    );
    // a vector row damaged in place (length, header and magic intact) is
    // found by the comparison, and the rebuild writes it right again
    let file = vectors_file(&dir.path().join("derived"), "client_m");
    let mut bytes = std::fs::read(&file).unwrap();
    let row = 64 + 12 * 7; // slot 7 of a 3-dimensional space
    bytes[row..row + 4].copy_from_slice(&0.5f32.to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    // plain `verify` finds it too: the row differs from its log frame
    let db = open(dir.path(), &clock);
    let v = db.verify().unwrap();
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    assert!(
        v.problems[0].contains("vector row in space 'client-m'"),
        "{:?}",
        v.problems
    );
    db.close().unwrap();
    let r = Engram::rebuild(dir.path(), &opts(&clock), true).unwrap();
    assert_eq!(r.differences.len(), 2, "{:?}", r.differences);
    assert!(
        r.differences.iter().all(|d| d.contains("client-m:7:")),
        "{:?}",
        r.differences
    );
    let r = Engram::rebuild(dir.path(), &opts(&clock), true).unwrap();
    assert!(r.differences.is_empty(), "{:?}", r.differences);
    // deleting all derived state by hand and reopening rebuilds it too
    std::fs::remove_dir_all(dir.path().join("derived")).unwrap();
    let db = open(dir.path(), &clock);
    assert!(db.verify().unwrap().ok());
    let s = db.session(Principal::admin("t"));
    assert_eq!(s.history(&ext("e1")).unwrap().len(), 2);
    db.close().unwrap();
}

/// The one `vectors.f32` under `dir` whose path holds `space`.
fn vectors_file(dir: &std::path::Path, space: &str) -> std::path::PathBuf {
    let found: Vec<_> = files_under(dir)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "vectors.f32"))
        .filter(|p| p.to_string_lossy().contains(space))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// Options that make vector recalls walk the graph.
fn walk_options(clock: &ManualClock) -> engram::Options {
    engram::Options {
        vector_plan: engram::PlanChoice::Walk,
        ..opts(clock)
    }
}

/// The nearest vector of model "m" to `v` is the record `external_id`.
fn assert_nearest_is(s: &engram::Session, v: Vec<f32>, external_id: &str) {
    use engram::retrieval::{Mode, RecallRequest};
    let r = s
        .recall(&RecallRequest {
            vector: Some(v.into()),
            model: Some("m".into()),
            mode: Mode::Vector,
            k: 1,
            ..RecallRequest::default()
        })
        .unwrap();
    assert_eq!(r.hits[0].external_id.as_deref(), Some(external_id));
}

/// Waits for the background indexer alone (no `wait_indexed`, which would
/// plan on every core) to have every indexable vector in a graph.
fn background_indexer_caught_up(db: &Engram) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while db.pending_vectors() > 0 {
        assert_eq!(db.stats().unwrap().indexer_problem, None);
        assert!(std::time::Instant::now() < deadline, "the indexer stalled");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A space past the first batch boundary (1,024 vectors, then batches of
/// 64): its graph, built by the background indexer a node per turn while
/// appends go on, is the graph a rebuild makes on every core. The last,
/// incomplete batch waits outside the graph, and a walk still finds it.
#[test]
fn a_graph_built_in_batches_is_rebuilt_exactly() {
    use engram::retrieval::{Mode, RecallRequest};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let options = || walk_options(&clock);
    let db = Engram::open(dir.path(), options()).unwrap();
    let s = db.session(Principal::admin("t"));
    let mut rng = Rng(0x0BA7_C4ED);
    let n = 1024 + 3 * 64 + 10;
    let mut last = Vec::new();
    for start in (0..n).step_by(100) {
        let recs: Vec<NewRecord> = (start..(start + 100).min(n))
            .map(|i| {
                last = (0..16)
                    .map(|_| rng.below(2000) as f32 / 1000.0 - 1.0)
                    .collect();
                NewRecord::event("note", format!("vector {i}"))
                    .with_external_id(format!("v{i}"))
                    .with_embedding("m", last.clone())
            })
            .collect();
        s.append(recs).unwrap();
    }
    // The background indexer alone builds the graphs, a node (or a few
    // lists) per turn: `wait_indexed` would plan on every core.
    background_indexer_caught_up(&db);
    // ten in the model's space, ten in the embedder's: both wait for
    // their batch, not for the indexer
    assert_eq!(db.pending_vectors(), 0);
    assert_eq!(db.gauges().unbatched_vectors, 20);
    let r = s
        .recall(&RecallRequest {
            vector: Some(last.clone().into()),
            model: Some("m".into()),
            mode: Mode::Vector,
            k: 1,
            ..RecallRequest::default()
        })
        .unwrap();
    let plan = r.manifest.vector_plan.as_ref().unwrap();
    assert_eq!((plan.strategy, plan.unindexed_scanned), ("hnsw", 10));
    assert_eq!(
        r.hits[0].external_id.as_deref(),
        Some(&*format!("v{}", n - 1))
    );
    db.close().unwrap();

    let r = Engram::rebuild(dir.path(), &options(), true).unwrap();
    assert!(
        r.differences.is_empty(),
        "derived state differs after rebuild:\n{}",
        r.differences.join("\n")
    );
}

/// The background indexer plans without the state's lock, from a shared
/// view of the vector file: appends go on during its turns, past a remap
/// of the file (every 4,096 rows), while searches run. The graph it builds
/// is still the graph a rebuild makes, and no search misses a vector
/// acknowledged before it.
#[test]
fn a_graph_indexed_while_appends_go_on_is_rebuilt_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    // walked over int8 codes, which the indexer extends as it goes
    let options = || engram::Options {
        graph_precision: engram::GraphPrecision::Int8,
        ..walk_options(&clock)
    };
    let db = std::sync::Arc::new(Engram::open(dir.path(), options()).unwrap());
    let n = 4096 + 300;
    let vector = |i: usize| -> Vec<f32> {
        let mut rng = Rng(0x5EED_0000 + i as u64);
        (0..8)
            .map(|_| rng.below(2000) as f32 / 1000.0 - 1.0)
            .collect()
    };
    // how many appends were acknowledged
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let appender = {
        let (db, acked) = (db.clone(), acked.clone());
        std::thread::spawn(move || {
            let s = db.session(Principal::admin("t"));
            for start in (0..n).step_by(40) {
                let recs: Vec<NewRecord> = (start..(start + 40).min(n))
                    .map(|i| {
                        NewRecord::event("note", format!("vector {i}"))
                            .with_external_id(format!("v{i}"))
                            .with_embedding("m", vector(i))
                    })
                    .collect();
                let k = recs.len();
                s.append(recs).unwrap();
                acked.fetch_add(k, std::sync::atomic::Ordering::Release);
                // quiet gaps: the indexer takes turns between appends
                std::thread::sleep(std::time::Duration::from_millis(8));
            }
        })
    };
    // Meanwhile, searches find what is acknowledged, indexed or not.
    let s = db.session(Principal::admin("t"));
    let mut checked = 0;
    while !appender.is_finished() || checked == 0 {
        let Some(i) = acked
            .load(std::sync::atomic::Ordering::Acquire)
            .checked_sub(1)
        else {
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        };
        assert_nearest_is(&s, vector(i), &format!("v{i}"));
        checked += 1;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    appender.join().unwrap();
    background_indexer_caught_up(&db);
    // Walks over the codes the indexer made find every vector sampled.
    for i in (0..n).step_by(97) {
        assert_nearest_is(&s, vector(i), &format!("v{i}"));
    }
    drop(s);
    db.close().unwrap();
    drop(db);
    let r = Engram::rebuild(dir.path(), &options(), true).unwrap();
    assert!(
        r.differences.is_empty(),
        "derived state differs after rebuild:\n{}",
        r.differences.join("\n")
    );
}

/// A store whose graphs were built one slot at a time (vector snapshot
/// version 2) still opens from its checkpoint: a graph past 1,024 slots is
/// dropped and its vectors kept (searched exactly until the indexer has
/// built the graph again in batches; nothing lost, nothing replayed), and a
/// rebuild then reproduces the new graph exactly.
#[test]
fn a_graph_built_one_slot_at_a_time_is_rebuilt_on_open() {
    use engram::storage::FsBackend;
    use engram::storage::files::{read_snapshot, write_snapshot};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let mut rng = Rng(0x5E41_A1ED);
    let n = 1024 + 64 + 5;
    let vectors: Vec<Vec<f32>> = (0..n)
        .map(|_| {
            (0..8)
                .map(|_| rng.below(2000) as f32 / 1000.0 - 1.0)
                .collect()
        })
        .collect();
    for start in (0..n).step_by(300) {
        s.append(
            (start..(start + 300).min(n))
                .map(|i| {
                    NewRecord::event("note", format!("v {i}"))
                        .with_external_id(format!("v{i}"))
                        .with_embedding("m", vectors[i].clone())
                })
                .collect(),
        )
        .unwrap();
    }
    db.close().unwrap();

    // Every graph snapshot rewritten as version 2, body unchanged.
    let backend = FsBackend;
    let snaps: Vec<_> = files_under(dir.path())
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|f| f == "hnsw.snap"))
        .collect();
    assert_eq!(snaps.len(), 2, "the model's space and the embedder's");
    for p in &snaps {
        let snap = read_snapshot(&backend, p, *b"ENGRHNSW", 3)
            .unwrap()
            .unwrap();
        write_snapshot(
            &backend,
            p,
            *b"ENGRHNSW",
            2,
            snap.applied_lsn,
            snap.body.as_slice(),
        )
        .unwrap();
    }

    // Without the background indexer, to see the graphs as opened.
    let no_indexer = engram::Options {
        background_indexing: false,
        ..opts(&clock)
    };
    let (db, report) = Engram::open_with_report(dir.path(), no_indexer).unwrap();
    assert_eq!(report.checkpoint_discarded, None);
    assert_eq!(report.frames_replayed, 0);
    assert!(report.vectors_rebuilt.is_empty(), "{report:?}");
    let spaces = db.stats().unwrap().vector_spaces;
    assert_eq!(spaces.len(), 2);
    for sp in &spaces {
        assert_eq!((sp.vectors, sp.indexed), (n, 0), "{}", sp.model);
    }
    let s = db.session(Principal::admin("t"));
    let nearest = |i: usize| assert_nearest_is(&s, vectors[i].clone(), &format!("v{i}"));
    // before the graph is built again (exact scans of the waiting vectors),
    // and after `wait_indexed` built it
    for i in [0, n / 2, n - 1] {
        nearest(i);
    }
    db.wait_indexed().unwrap();
    for i in [0, n / 2, n - 1] {
        nearest(i);
    }
    db.close().unwrap();
    let r = Engram::rebuild(dir.path(), &opts(&clock), true).unwrap();
    assert!(
        r.differences.is_empty(),
        "derived state differs after rebuild:\n{}",
        r.differences.join("\n")
    );
}
