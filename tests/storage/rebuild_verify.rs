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
    // deleting all derived state by hand and reopening rebuilds it too
    std::fs::remove_dir_all(dir.path().join("derived")).unwrap();
    let db = open(dir.path(), &clock);
    assert!(db.verify().unwrap().ok());
    let s = db.session(Principal::admin("t"));
    assert_eq!(s.history(&ext("e1")).unwrap().len(), 2);
    db.close().unwrap();
}
