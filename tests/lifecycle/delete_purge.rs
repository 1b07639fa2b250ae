//! Deleted means gone: after a delete, the record and everything derived
//! from it are ineligible at once; after `compact`, the content's bytes
//! exist in no file under the data directory (log, state checkpoint,
//! lexical index, vectors), while a tombstone keeps the deletion visible to trace. A legal
//! hold suspends purging; retention expiry purges like a deletion.

use crate::common::*;
use engram::retrieval::RecallRequest;
use engram::{Body, EngineError, Engram, ManualClock, NewRecord, Principal, RecordRef, Scope};

const CANARY: &str = "zebra-canary-7f3a91";

#[test]
fn compaction_purges_every_byte_of_deleted_content() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", format!("the secret word is {CANARY}"))
            .with_external_id(format!("ext-{CANARY}"))
            .with_embedding("client-model", vec![0.1, 0.9, 0.3]),
        NewRecord::event("note", "an unrelated note that stays").with_external_id("keep"),
    ])
    .unwrap();
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some(format!("summary mentioning {CANARY}")),
        sources: vec![ext(&format!("ext-{CANARY}"))],
        external_id: Some("sum".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    db.wait_indexed().unwrap();
    db.checkpoint().unwrap();
    assert!(
        !grep(dir.path(), CANARY).is_empty(),
        "the canary is on disk before deletion"
    );
    let target = s.resolve(&ext(&format!("ext-{CANARY}"))).unwrap();
    let res = s
        .delete(&RecordRef::Id(target), Some("user request"))
        .unwrap();
    assert_eq!(res.affected.len(), 2, "the summary goes with its source");
    // ineligible at once
    let found = s.recall(&RecallRequest::text(CANARY)).unwrap();
    assert!(
        found
            .hits
            .iter()
            .all(|h| !h.text.as_deref().unwrap_or("").contains(CANARY)),
        "{:?}",
        found.hits
    );
    assert!(matches!(
        s.get(&ext("sum")),
        Err(EngineError::NotFound { .. })
    ));
    db.close().unwrap();

    let report = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!(report.purged, 2);
    let left = grep(dir.path(), CANARY);
    assert!(left.is_empty(), "deleted bytes still on disk in {left:?}");
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    assert_eq!(
        s.get(&ext("keep")).unwrap().text.as_deref(),
        Some("an unrelated note that stays")
    );
    let t = s.trace(&RecordRef::Id(target)).unwrap();
    assert!(t.nodes[0].tombstone && t.nodes[0].status == "deleted");
    assert!(db.verify().unwrap().ok());
    // a deleted external id is not resurrected by re-ingesting it... it is a new record now,
    // but the deletion of the original stays recorded in the ledger
    assert!(
        engram::maintenance::read_ledger(&engram::storage::FsBackend, dir.path())
            .unwrap()
            .iter()
            .any(|l| l.target.as_deref() == Some(&target.to_string()))
    );
    db.close().unwrap();
}

#[test]
fn holds_suspend_purging_and_retention_expires_like_a_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let held = Scope {
        user: Some("litigant".into()),
        ..Scope::default()
    };
    s.append(vec![
        NewRecord::event("note", "held-canary-1 under legal hold")
            .with_external_id("h")
            .with_scope(held),
        NewRecord {
            retention_class: Some("ephemeral".into()),
            ..NewRecord::event("tool_result", "ephemeral-canary-2 raw tool output")
                .with_external_id("e")
        },
        NewRecord::event("note", "standard record").with_external_id("std"),
    ])
    .unwrap();
    s.hold("user:litigant", true).unwrap();
    s.set_retention("ephemeral", Some(6 * 60 * MINUTE)).unwrap();
    s.delete(&ext("h"), Some("request")).unwrap();
    // within the retention period the tool result is eligible
    let has_e = |s: &engram::Session| {
        s.recall(&RecallRequest::text("ephemeral-canary-2"))
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("e"))
    };
    assert!(has_e(&s));
    clock.advance(7 * 60 * MINUTE);
    assert!(!has_e(&s), "past retention: ineligible at once");
    db.close().unwrap();
    let r = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!((r.purged, r.retention_deleted, r.held), (1, 1, 1), "{r:?}");
    assert!(grep(dir.path(), "ephemeral-canary-2").is_empty());
    assert!(
        !grep(dir.path(), "held-canary-1").is_empty(),
        "a hold keeps the bytes"
    );
    let ledger = engram::maintenance::read_ledger(&engram::storage::FsBackend, dir.path()).unwrap();
    assert!(
        ledger
            .iter()
            .any(|l| l.reason.as_deref() == Some("retention:ephemeral")),
        "policy expiry is recorded"
    );
    // lifting the hold lets the next compaction purge
    let db = open(dir.path(), &clock);
    db.session(Principal::admin("t"))
        .hold("user:litigant", false)
        .unwrap();
    db.close().unwrap();
    assert_eq!(
        Engram::compact(dir.path(), &opts(&clock)).unwrap().purged,
        1
    );
    assert!(grep(dir.path(), "held-canary-1").is_empty());
}
