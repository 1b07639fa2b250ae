//! Deleted means gone: after a delete, the record and everything derived
//! from it are ineligible at once; after `compact`, the content's bytes
//! exist in no file under the data directory (log, state checkpoint,
//! lexical index, vectors), while a tombstone keeps the deletion visible to trace. A legal
//! hold suspends purging; retention expiry purges like a deletion.

use crate::common::*;
use engram::retrieval::RecallRequest;
use engram::{
    AssertionKind, Body, EngineError, Engram, ManualClock, NewRecord, Principal, RecordRef, Scope,
};

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
    // deleted is final: the purged record's external id (only its hash is
    // left) is not given out again, also after a checkpoint and a reopen
    let resend = || {
        NewRecord::event("note", format!("the secret word is {CANARY}"))
            .with_external_id(format!("ext-{CANARY}"))
    };
    let e = s.append(vec![resend()]).unwrap_err();
    assert!(e.to_string().contains("was deleted"), "{e}");
    db.checkpoint().unwrap();
    db.close().unwrap();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let e = s.append(vec![resend()]).unwrap_err();
    assert!(e.to_string().contains("was deleted"), "{e}");
    assert!(grep(dir.path(), CANARY).is_empty());
    // the deletion of the original stays recorded in the ledger
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
    // a summary of the tool result carries its content (standard class)
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some("summary-canary-3 of the tool output".into()),
        sources: vec![ext("e")],
        external_id: Some("e-sum".into()),
        ..NewRecord::default()
    }])
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
    let has_summary = |s: &engram::Session| {
        s.recall(&RecallRequest::text("summary-canary-3"))
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("e-sum"))
    };
    assert!(has_e(&s) && has_summary(&s));
    clock.advance(7 * 60 * MINUTE);
    assert!(!has_e(&s), "past retention: ineligible at once");
    assert!(!has_summary(&s), "and so is what was built on it");
    db.close().unwrap();
    let r = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    // purged: the tool result and, with it, its summary
    assert_eq!((r.purged, r.retention_deleted, r.held), (2, 1, 1), "{r:?}");
    assert!(grep(dir.path(), "ephemeral-canary-2").is_empty());
    assert!(grep(dir.path(), "summary-canary-3").is_empty());
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

/// Online compaction purges while the store serves: readers never see an
/// error (they pass a gate the swap takes), writes wait and then go to the
/// new handle, the old handle is closed, and the canary is in no file.
#[test]
fn online_compaction_purges_while_reads_go_on() {
    use parking_lot::RwLock;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    for i in 0..50 {
        s.append(vec![
            NewRecord::event("note", format!("kept note {i} about the garden"))
                .with_external_id(format!("n{i}"))
                .with_embedding("client-model", vec![0.1, 0.5, i as f32 / 50.0]),
        ])
        .unwrap();
    }
    s.append(vec![
        NewRecord::event("note", format!("the secret word is {CANARY}"))
            .with_external_id("canary")
            .with_embedding("client-model", vec![0.9, 0.1, 0.3]),
    ])
    .unwrap();
    db.wait_indexed().unwrap();
    db.checkpoint().unwrap();
    s.delete(&ext("canary"), Some("user request")).unwrap();
    assert!(!grep(dir.path(), CANARY).is_empty());

    let gate = Arc::new(RwLock::new(db.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (gate, stop, reads) = (gate.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                let mut i = 0usize;
                while !stop.load(Ordering::Acquire) {
                    let g = gate.read();
                    let s = g.session(Principal::admin("t"));
                    let n = (i + r) % 50;
                    let got = s
                        .get(&ext(&format!("n{n}")))
                        .unwrap_or_else(|e| panic!("read of n{n} failed: {e}"));
                    assert!(got.text.unwrap().contains(&format!("note {n} ")));
                    let hits = s.recall(&RecallRequest::text("garden")).unwrap().hits;
                    assert!(!hits.is_empty());
                    reads.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    let out = db.compact_online(|| gate.write()).unwrap();
    let reads_before_swap = reads.load(Ordering::Relaxed);
    let mut g = out.reads_paused.expect("a purge swaps the store's files");
    *g = out.db.clone();
    drop(g);
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(out.report.purged, 1, "{:?}", out.report);
    assert!(
        reads_before_swap > 0,
        "no read ran while the copy was built"
    );
    assert!(
        matches!(s.get(&ext("n1")), Err(EngineError::Closed)),
        "the old handle is closed"
    );
    let new = out.db;
    let s = new.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "written after the swap").with_external_id("after"),
    ])
    .unwrap();
    assert!(matches!(
        s.get(&ext("canary")),
        Err(EngineError::NotFound { .. })
    ));
    let v = new.verify().unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    new.close().unwrap();
    assert!(
        grep(dir.path(), CANARY).is_empty(),
        "canary left in {:?}",
        grep(dir.path(), CANARY)
    );
    assert!(!dir.path().join("compact.staging").exists());
    // reopens from the swapped-in checkpoint, everything there
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    for i in 0..50 {
        s.get(&ext(&format!("n{i}"))).unwrap();
    }
    s.get(&ext("after")).unwrap();
    let e = s
        .append(vec![
            NewRecord::event("note", "again").with_external_id("canary"),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("was deleted"), "{e}");
    // nothing to purge: no swap, the same handle
    let again = db.compact_online(|| ()).unwrap();
    assert!(again.reads_paused.is_none());
    assert_eq!(again.report.purged, 0);
    s.get(&ext("after")).unwrap();
    db.close().unwrap();
}

/// A deletion reaches the corrections of what it deletes, also when a
/// correction cites other sources: the state right after the deletion is the
/// state after `compact` (which applies a correction after its deleted
/// predecessor's tombstone), and one `compact` purges every version.
#[test]
fn deleting_a_source_deletes_every_version_of_what_derives_from_it_before_and_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let fact = |text: &str, source: &str| {
        NewRecord::assertion(AssertionKind::Fact, text, vec![ext(source)])
    };
    s.append(vec![
        NewRecord::event("note", format!("probe log with {CANARY}")).with_external_id("e1"),
        NewRecord::event("note", "a later, clean probe").with_external_id("e2"),
    ])
    .unwrap();
    s.append(vec![
        fact("the api was unhealthy", "e1").with_external_id("a1"),
    ])
    .unwrap();
    // the correction cites only the clean event
    let mut correction = fact(&format!("corrected, still {CANARY}-ish"), "e2");
    correction.external_id = Some("a1".into());
    correction.supersedes = Some(ext("a1"));
    s.append(vec![correction]).unwrap();
    // an earlier version of a fact whose later version cites e1
    s.append(vec![fact("b first said this", "e2").with_external_id("b1")])
        .unwrap();
    let mut later = fact("b now cites the probe", "e1");
    later.external_id = Some("b1".into());
    later.supersedes = Some(ext("b1"));
    s.append(vec![later]).unwrap();

    let a1_first = s.history(&ext("a1")).unwrap()[0].id;
    let res = s.delete(&ext("e1"), None).unwrap();
    // e1, both versions of a1, both versions of b1
    assert_eq!(res.affected.len(), 5, "{:?}", res.affected);
    // a trace of the first version shows its correction, before and after
    // compaction (a tombstone keeps the link to the version it corrected)
    let corrected_by = |db: &Engram| {
        let t = db
            .session(Principal::admin("t"))
            .trace(&engram::RecordRef::Id(a1_first))
            .unwrap();
        t.edges
            .iter()
            .filter(|e| e.relation == "corrected_by" && e.from == a1_first)
            .count()
    };
    assert_eq!(corrected_by(&db), 1);
    let live = |db: &Engram| {
        let s = db.session(Principal::admin("t"));
        ["e1", "a1", "b1", "e2"].map(|e| s.get(&ext(e)).is_ok())
    };
    assert_eq!(live(&db), [false, false, false, true]);
    db.close().unwrap();
    let report = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!(report.purged, 5);
    assert!(
        grep(dir.path(), CANARY).is_empty(),
        "one compaction purges it all"
    );
    let db = open(dir.path(), &clock);
    assert_eq!(live(&db), [false, false, false, true]);
    assert_eq!(corrected_by(&db), 1);
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
    let again = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!(again.purged, 0, "nothing left for a second compaction");
}

/// An operation on a deleted record says it is deleted, before anything its
/// type would say.
#[test]
fn retracting_a_deleted_event_says_it_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let id = s
        .append(vec![NewRecord::event("note", "gone soon")])
        .unwrap()[0]
        .id;
    s.delete(&RecordRef::Id(id), None).unwrap();
    match s.retract(&RecordRef::Id(id), None) {
        Err(EngineError::InvalidState { reason, .. }) => assert_eq!(reason, "it is deleted"),
        other => panic!("{other:?}"),
    }
    // a correction too (the server's 409 `invalid_state`)
    let correction = NewRecord {
        supersedes: Some(RecordRef::Id(id)),
        ..NewRecord::event("note", "back again")
    };
    match s.append(vec![correction]) {
        Err(EngineError::InvalidState { reason, target, .. }) => {
            assert_eq!((reason.as_str(), target), ("it is deleted", id));
        }
        other => panic!("{other:?}"),
    }
}

/// A purged record stays as hidden as it was: its tombstone keeps its
/// effective labels, so claims about a deleted restricted entity keep
/// inheriting them, and a principal without them sees neither the
/// tombstone in a trace nor a different answer when reusing its external
/// id. The same before `compact`, after it, and after backup and restore.
#[test]
fn a_purged_restricted_record_stays_hidden_and_keeps_restricting_what_is_about_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = dir.path().join("store");
    let db = open(&store, &clock);
    let admin = db.session(Principal::admin("t"));
    let entity = |name: &str| NewRecord {
        body: Body::Entity {
            entity_type: "person".into(),
            name: name.into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some(format!("ent/{name}")),
        ..NewRecord::default()
    };
    admin
        .append(vec![
            entity("informant").with_access(&["hr"]),
            entity("org"),
            NewRecord::event("note", "a public note").with_external_id("pub"),
            NewRecord::event("note", "a hidden note")
                .with_external_id("hid")
                .with_access(&["secret"]),
        ])
        .unwrap();
    admin
        .append(vec![
            NewRecord {
                body: Body::Relation {
                    subject: ext("ent/informant"),
                    predicate: "informs_on".into(),
                    object: ext("ent/org"),
                },
                kind: "relation".into(),
                external_id: Some("rel".into()),
                ..NewRecord::default()
            },
            NewRecord {
                body: Body::Assertion {
                    kind: AssertionKind::Fact,
                    subject: Some(ext("ent/informant")),
                    predicate: Some("lives_in".into()),
                    object: Some("paris".into()),
                },
                kind: "fact".into(),
                text: Some("the informant lives in paris".into()),
                sources: vec![ext("ent/org")],
                external_id: Some("claim".into()),
                ..NewRecord::default()
            },
            NewRecord {
                body: Body::Summary {
                    generator: "g".into(),
                },
                kind: "summary".into(),
                text: Some("a hidden summary".into()),
                sources: vec![ext("pub")],
                external_id: Some("hsum".into()),
                ..NewRecord::default()
            }
            .with_access(&["secret"]),
        ])
        .unwrap();
    let hid = admin.resolve(&ext("hid")).unwrap();
    admin.delete(&ext("ent/informant"), None).unwrap();
    admin.delete(&ext("hid"), None).unwrap();
    admin.delete(&ext("hsum"), None).unwrap();

    let check = |db: &Engram, when: &str| {
        let bob = db.session(Principal::user("t", "bob"));
        for e in ["claim", "rel"] {
            assert!(bob.get(&ext(e)).is_err(), "{when}: bob reads {e}");
        }
        let admin = db.session(Principal::admin("t"));
        let claim = admin.get(&ext("claim")).unwrap();
        assert_eq!(claim.effective_access, vec!["hr"], "{when}");
        assert!(
            matches!(
                bob.trace(&RecordRef::Id(hid)),
                Err(EngineError::NotFound { .. })
            ),
            "{when}: bob traces the hidden tombstone"
        );
        let t = bob.trace(&ext("pub")).unwrap();
        assert_eq!(t.nodes.len(), 1, "{when}: {:?}", t.nodes);
        let reuse = bob
            .append(vec![
                NewRecord::event("note", "probe").with_external_id("hid"),
            ])
            .unwrap_err();
        assert!(
            matches!(
                reuse,
                EngineError::ExternalIdConflict { existing: None, .. }
            ),
            "{when}: {reuse}"
        );
    };
    check(&db, "before compact");
    let backup = dir.path().join("backup");
    db.backup(&backup).unwrap();
    db.close().unwrap();
    Engram::compact(&store, &opts(&clock)).unwrap();
    let db = open(&store, &clock);
    check(&db, "after compact");
    db.close().unwrap();
    let copy = dir.path().join("copy");
    Engram::restore(&copy, &backup, &opts(&clock), None).unwrap();
    let db = open(&copy, &clock);
    check(&db, "after restore");
    db.close().unwrap();
}

/// A deleted record is named by its external id as by its id, before and
/// after `compact` purges it (only the id's hash is then left): a trace
/// shows its tombstone either way, and a second delete says it is deleted.
#[test]
fn a_purged_record_is_named_by_its_external_id_as_by_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let id = s
        .append(vec![
            NewRecord::event("note", "gone soon").with_external_id("evt_9f2"),
        ])
        .unwrap()[0]
        .id;
    s.delete(&RecordRef::External("evt_9f2".into()), None)
        .unwrap();
    db.close().unwrap();
    Engram::compact(dir.path(), &opts(&clock)).unwrap();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    for r in [RecordRef::Id(id), RecordRef::External("evt_9f2".into())] {
        let t = s.trace(&r).unwrap();
        assert_eq!(t.target, id, "{r:?}");
        let node = t.nodes.iter().find(|n| n.id == id).unwrap();
        assert!(node.tombstone, "{r:?}");
        assert!(
            matches!(s.delete(&r, None), Err(EngineError::InvalidState { .. })),
            "{r:?}"
        );
    }
    // another tenant: nothing, by either name
    let other = db.session(Principal::admin("u"));
    assert!(other.trace(&RecordRef::External("evt_9f2".into())).is_err());
    db.close().unwrap();
}

/// Retention removes an expired version and what was built on it, never
/// the newer versions of its chain: a correction with its own (standard)
/// class stays eligible before and after `compact`, and after the reopens
/// that replay the compacted log (where the purged version's tombstone
/// comes before the correction, and the deletion after it).
#[test]
fn retention_purges_an_expired_version_but_not_its_correction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    let old = s
        .append(vec![NewRecord {
            retention_class: Some("ephemeral".into()),
            ..NewRecord::event("note", "expired-canary-4 first version").with_external_id("r")
        }])
        .unwrap()[0]
        .id;
    // built on the old version: carries its content
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some("old-summary-canary-5".into()),
        sources: vec![RecordRef::Id(old)],
        external_id: Some("old-sum".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    clock.advance(30 * MINUTE);
    s.append(vec![NewRecord {
        retention_class: Some("standard".into()),
        supersedes: Some(ext("r")),
        ..NewRecord::event("note", "fresh correction kept-canary-6").with_external_id("r")
    }])
    .unwrap();
    // built on the correction
    s.append(vec![NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some("new-summary-kept-canary-7".into()),
        sources: vec![ext("r")],
        external_id: Some("new-sum".into()),
        ..NewRecord::default()
    }])
    .unwrap();
    clock.advance(45 * MINUTE);
    let found = |s: &engram::Session, text: &str, ext_id: &str| {
        s.recall(&RecallRequest::text(text))
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some(ext_id))
    };
    let kept = |s: &engram::Session| {
        found(s, "kept-canary-6", "r") && found(s, "new-summary-kept-canary-7", "new-sum")
    };
    assert!(kept(&s), "the correction and its summary are eligible");
    assert!(!found(&s, "old-summary-canary-5", "old-sum"));
    // a client cannot pass a deletion off as a retention expiry
    let e = s
        .delete(&ext("new-sum"), Some("retention:standard"))
        .unwrap_err();
    assert!(matches!(e, EngineError::InvalidInput { .. }), "{e}");
    db.close().unwrap();
    let r = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!((r.retention_deleted, r.purged), (1, 2), "{r:?}");
    for gone in ["expired-canary-4", "old-summary-canary-5"] {
        assert!(grep(dir.path(), gone).is_empty(), "{gone} purged");
    }
    for kept_text in ["kept-canary-6", "new-summary-kept-canary-7"] {
        assert!(!grep(dir.path(), kept_text).is_empty(), "{kept_text} kept");
    }
    // the first open replays the compacted log; the second its checkpoint
    for round in 0..2 {
        let db = open(dir.path(), &clock);
        let s = db.session(Principal::admin("t"));
        assert!(
            kept(&s),
            "round {round}: the correction and its summary live"
        );
        let got = s.get(&ext("r")).unwrap();
        assert!(got.text.as_deref().unwrap_or("").contains("kept-canary-6"));
        let t = s.trace(&RecordRef::Id(old)).unwrap();
        let node = t.nodes.iter().find(|n| n.id == old).unwrap();
        assert!(
            node.tombstone,
            "round {round}: the expired version is purged"
        );
        db.close().unwrap();
    }
}

/// A correction that also cites the expired version among its sources was
/// built on it: retention reaches it as any record built on the expired
/// version (docs/lifecycle.md, "Retention and legal holds"), while a
/// correction that cites only other sources stays.
#[test]
fn retention_reaches_a_correction_that_cites_the_expired_version() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    s.append(vec![
        NewRecord::event("note", "source event").with_external_id("ev"),
    ])
    .unwrap();
    for x in ["a", "b"] {
        s.append(vec![NewRecord {
            retention_class: Some("ephemeral".into()),
            ..NewRecord::assertion(
                engram::AssertionKind::Fact,
                format!("first {x}canary"),
                vec![ext("ev")],
            )
            .with_external_id(x)
        }])
        .unwrap();
    }
    clock.advance(30 * MINUTE);
    // `a` corrected from the event only; `b` citing the version it replaces
    for (x, sources) in [("a", vec![ext("ev")]), ("b", vec![ext("ev"), ext("b")])] {
        s.append(vec![NewRecord {
            supersedes: Some(ext(x)),
            ..NewRecord::assertion(
                engram::AssertionKind::Fact,
                format!("fixed {x}kept"),
                sources,
            )
            .with_external_id(x)
        }])
        .unwrap();
    }
    clock.advance(45 * MINUTE);
    let found = |s: &engram::Session, text: &str, x: &str| {
        s.recall(&RecallRequest::text(text))
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some(x))
    };
    assert!(found(&s, "akept", "a"));
    assert!(!found(&s, "bkept", "b"), "built on the expired version");
    db.close().unwrap();
    Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert!(!grep(dir.path(), "akept").is_empty());
    assert!(grep(dir.path(), "bkept").is_empty());
    assert!(grep(dir.path(), "bcanary").is_empty());
}

/// A deleted record's trace node carries no content before compaction
/// either: its kind (free text) reads `deleted`, as its tombstone's will.
#[test]
fn a_deleted_record_shows_no_kind_in_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let id = s
        .append(vec![
            NewRecord::event("diagnosis-canary-8", "private").with_external_id("k1"),
        ])
        .unwrap()[0]
        .id;
    s.delete(&ext("k1"), None).unwrap();
    let t = s.trace(&RecordRef::Id(id)).unwrap();
    let node = t.nodes.iter().find(|n| n.id == id).unwrap();
    assert_eq!(node.kind, "deleted");
    assert!(node.text.is_none() && node.external_id.is_none());
    let shown = serde_json::to_string(&t).unwrap();
    assert!(!shown.contains("diagnosis-canary-8"), "{shown}");
    db.close().unwrap();
}

/// When the newer version of a chain is the one that expires, the version
/// it corrected stays superseded: nothing of the chain is eligible before
/// `compact`, and nothing after it, at every later open (the purged
/// version's tombstone still supersedes it).
#[test]
fn an_expired_correction_does_not_bring_back_the_version_it_corrected() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    let old = s
        .append(vec![
            NewRecord::event("note", "charlie-canary-11 first, standard").with_external_id("c"),
        ])
        .unwrap()[0]
        .id;
    s.append(vec![NewRecord {
        retention_class: Some("ephemeral".into()),
        supersedes: Some(ext("c")),
        ..NewRecord::event("note", "charlie-canary-12 correction, ephemeral").with_external_id("c")
    }])
    .unwrap();
    clock.advance(2 * 60 * MINUTE);
    let hits = |s: &engram::Session| {
        s.recall(&RecallRequest::text("charlie-canary-11 charlie-canary-12"))
            .unwrap()
            .hits
            .len()
    };
    assert_eq!(
        hits(&s),
        0,
        "the current version expired; the old one is superseded"
    );
    db.close().unwrap();
    let r = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!((r.retention_deleted, r.purged), (1, 1), "{r:?}");
    assert!(grep(dir.path(), "charlie-canary-12").is_empty());
    for round in 0..2 {
        let db = open(dir.path(), &clock);
        let s = db.session(Principal::admin("t"));
        assert_eq!(
            hits(&s),
            0,
            "round {round}: compaction brought a version back"
        );
        let got = s.get(&RecordRef::Id(old)).unwrap();
        assert_eq!(got.status, engram::Status::Superseded, "round {round}");
        db.close().unwrap();
    }
}

/// Under a legal hold, compaction still records a retention expiry as a
/// deletion (the hold keeps the bytes, not the eligibility): relaxing the
/// retention period afterwards does not bring the held content back.
#[test]
fn a_hold_keeps_expired_bytes_but_not_their_eligibility() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let held = Scope {
        user: Some("u1".into()),
        ..Scope::default()
    };
    s.append(vec![NewRecord {
        retention_class: Some("ephemeral".into()),
        ..NewRecord::event("note", "held-expired-canary-13")
            .with_external_id("he")
            .with_scope(held)
    }])
    .unwrap();
    s.set_retention("ephemeral", Some(MINUTE)).unwrap();
    s.hold("user:u1", true).unwrap();
    clock.advance(2 * MINUTE);
    db.close().unwrap();
    let r = Engram::compact(dir.path(), &opts(&clock)).unwrap();
    assert_eq!((r.retention_deleted, r.purged, r.held), (1, 0, 1), "{r:?}");
    assert!(
        !grep(dir.path(), "held-expired-canary-13").is_empty(),
        "the hold keeps the bytes"
    );
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", None).unwrap();
    let hits = s
        .recall(&RecallRequest::text("held-expired-canary-13"))
        .unwrap()
        .hits;
    assert!(hits.is_empty(), "held, expired content came back: {hits:?}");
    db.close().unwrap();
}

/// A purged record keeps its writer: its writer gets the state's answer
/// (already deleted), another principal of the tenant "forbidden", and a
/// principal that may not read it finds nothing, before `compact` and
/// after it alike.
#[test]
fn the_writer_of_a_purged_record_is_answered_as_before_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = dir.path().join("store");
    let db = open(&store, &clock);
    let carol = db.session(Principal::user("t", "carol"));
    let id = carol
        .append(vec![
            NewRecord::event("note", "carol's note").with_external_id("cdel1"),
        ])
        .unwrap()[0]
        .id;
    carol.delete(&RecordRef::Id(id), None).unwrap();
    let answers = |db: &Engram| {
        let carol = db.session(Principal::user("t", "carol"));
        let other = db.session(Principal::user("u", "carol"));
        let correction = NewRecord {
            supersedes: Some(RecordRef::Id(id)),
            ..NewRecord::event("note", "carol's fix")
        };
        for e in [
            carol.delete(&RecordRef::Id(id), None).unwrap_err(),
            carol.expire(&RecordRef::Id(id), T0 + 1000).unwrap_err(),
            carol.append(vec![correction]).unwrap_err(),
        ] {
            assert!(matches!(e, EngineError::InvalidState { .. }), "{e:?}");
        }
        let e = other.delete(&RecordRef::Id(id), None).unwrap_err();
        assert!(matches!(e, EngineError::NotFound { .. }), "{e:?}");
        let dave = db.session(Principal::user("t", "dave"));
        let correction = NewRecord {
            supersedes: Some(RecordRef::Id(id)),
            ..NewRecord::event("note", "dave's fix")
        };
        for e in [
            dave.delete(&RecordRef::Id(id), None).unwrap_err(),
            dave.expire(&RecordRef::Id(id), T0 + 1000).unwrap_err(),
            dave.append(vec![correction]).unwrap_err(),
        ] {
            assert!(matches!(e, EngineError::Forbidden { .. }), "{e:?}");
        }
    };
    answers(&db);
    db.close().unwrap();
    let report = Engram::compact(&store, &opts(&clock)).unwrap();
    assert_eq!(report.purged, 1);
    let db = open(&store, &clock);
    answers(&db);
    db.close().unwrap();
}

/// A summary `sum` of the records `e` and `k`.
fn summary_of_e_and_k(text: &str) -> NewRecord {
    NewRecord {
        body: Body::Summary {
            generator: "g@1".into(),
        },
        kind: "summary".into(),
        text: Some(text.into()),
        sources: vec![ext("e"), ext("k")],
        external_id: Some("sum".into()),
        ..NewRecord::default()
    }
}

/// A record past its retention period, and what was built on it, are not
/// read by id, listed, or shown in a trace before `compact` deletes them,
/// as retrieval leaves them out: their content was readable by id and in
/// listings until then.
#[test]
fn a_record_past_retention_is_not_read_by_id_or_listed_before_compact() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    s.append(vec![
        NewRecord {
            retention_class: Some("ephemeral".into()),
            ..NewRecord::event("note", "card number past-canary-8").with_external_id("e")
        },
        NewRecord::event("note", "a note kept").with_external_id("k"),
    ])
    .unwrap();
    s.append(vec![summary_of_e_and_k("summary of past-canary-8")])
        .unwrap();
    let listed = |s: &engram::Session| {
        s.list(&engram::ListFilter::default())
            .unwrap()
            .into_iter()
            .filter_map(|r| r.external_id)
            .collect::<Vec<_>>()
    };
    assert!(s.get(&ext("e")).is_ok() && s.get(&ext("sum")).is_ok());
    assert_eq!(listed(&s), ["e", "k", "sum"]);
    clock.advance(61 * MINUTE);
    for gone in ["e", "sum"] {
        assert!(
            matches!(s.get(&ext(gone)), Err(EngineError::NotFound { .. })),
            "{gone} read by id past retention"
        );
        assert!(s.history(&ext(gone)).is_err(), "{gone} in history");
    }
    assert_eq!(listed(&s), ["k"]);
    // nothing new is built on it (it was taken as a source, the new
    // record then reading as not found to its own writer)
    let later = NewRecord {
        external_id: Some("sum2".into()),
        sources: vec![ext("e")],
        ..summary_of_e_and_k("built on it later")
    };
    let e = s.append(vec![later]).unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { field, reason, .. }
            if field == "sources" && reason.contains("past its retention period")),
        "{e}"
    );
    let t = s.trace(&ext("k")).unwrap();
    for n in &t.nodes {
        assert!(
            !n.text.as_deref().unwrap_or("").contains("past-canary-8"),
            "{t:?}"
        );
    }
    // retrieval leaves out what was built on an expired record also when
    // a filter asks for summaries only (the expired note is not asked for)
    let mut q = RecallRequest::text("summary past-canary-8");
    q.filters.kinds = vec!["summary".into()];
    let hits = s.recall(&q).unwrap().hits;
    assert!(
        hits.iter().all(|h| h.external_id.as_deref() != Some("sum")),
        "{hits:?}"
    );
    // a user principal of the tenant: the same
    let u = db.session(Principal::user("t", "u"));
    assert!(matches!(
        u.get(&ext("e")),
        Err(EngineError::NotFound { .. })
    ));
    // an expired version corrected by a version kept: its id reads as not
    // found in history too (it answered with the chain's live versions,
    // saying the id existed and which chain it was in)
    let old = s
        .append(vec![NewRecord {
            retention_class: Some("ephemeral".into()),
            ..NewRecord::event("note", "first version").with_external_id("c")
        }])
        .unwrap()[0]
        .id;
    s.append(vec![NewRecord {
        retention_class: Some("standard".into()),
        supersedes: Some(ext("c")),
        ..NewRecord::event("note", "second version").with_external_id("c")
    }])
    .unwrap();
    assert_eq!(s.history(&RecordRef::Id(old)).unwrap().len(), 2);
    clock.advance(61 * MINUTE);
    assert!(matches!(
        s.history(&RecordRef::Id(old)),
        Err(EngineError::NotFound { .. })
    ));
    assert_eq!(s.history(&ext("c")).unwrap().len(), 1, "the kept version");
    // the newest version past retention: the external id names it, and
    // reads as not found; the older version still reads by its id
    let first = s
        .append(vec![
            NewRecord::event("note", "kept first").with_external_id("d"),
        ])
        .unwrap()[0]
        .id;
    s.append(vec![NewRecord {
        retention_class: Some("ephemeral".into()),
        supersedes: Some(ext("d")),
        ..NewRecord::event("note", "short-lived second").with_external_id("d")
    }])
    .unwrap();
    clock.advance(61 * MINUTE);
    assert!(s.get(&ext("d")).is_err() && s.history(&ext("d")).is_err());
    assert_eq!(s.history(&RecordRef::Id(first)).unwrap().len(), 1);
    s.get(&RecordRef::Id(first)).unwrap();
    db.close().unwrap();
}

/// Past its retention period, before `compact`, a record shows in a trace
/// as a deleted one does (kind and status `deleted`, no content), and an
/// append reusing its external id is answered as it will be once deleted,
/// whatever its content: a principal that did not write it learned the
/// record's id and live status, and whether a guess of its content was
/// right (a duplicate or "different content").
#[test]
fn a_record_past_retention_is_shown_and_answered_as_deleted_before_compact() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    let secret = || NewRecord {
        retention_class: Some("ephemeral".into()),
        ..NewRecord::event("note", "door code 4471").with_external_id("e")
    };
    let writer = db.session(Principal::user("t", "w"));
    writer.append(vec![secret()]).unwrap();
    s.append(vec![
        NewRecord::event("note", "a note kept").with_external_id("k"),
    ])
    .unwrap();
    s.append(vec![summary_of_e_and_k("summary of the door code")])
        .unwrap();
    let (e, sum) = (
        s.resolve(&ext("e")).unwrap(),
        s.resolve(&ext("sum")).unwrap(),
    );
    clock.advance(61 * MINUTE);
    let t = s.trace(&ext("k")).unwrap();
    let node = t
        .nodes
        .iter()
        .find(|n| n.id == sum)
        .expect("the summary's node");
    assert_eq!(
        (node.kind.as_str(), node.status),
        ("deleted", "deleted"),
        "{node:?}"
    );
    assert!(
        node.text.is_none() && node.external_id.is_none(),
        "{node:?}"
    );
    // the writer, another user, the admin: any content, one answer
    let other = db.session(Principal::user("t", "u"));
    for session in [&writer, &other, &s] {
        let same = session.append(vec![secret()]).unwrap_err().to_string();
        let guess = session
            .append(vec![NewRecord {
                retention_class: Some("ephemeral".into()),
                ..NewRecord::event("note", "door code 1234").with_external_id("e")
            }])
            .unwrap_err()
            .to_string();
        assert_eq!(same, guess, "the answer told whether the guess was right");
        assert!(same.contains("past its retention period"), "{same}");
        assert!(!same.contains("4471"), "{same}");
    }
    // a correction of it is still taken until compact (lifecycle.md), and
    // one repeating its content is a new version, not a duplicate that
    // would confirm a guess of it
    let same = s
        .append(vec![NewRecord {
            supersedes: Some(RecordRef::Id(e)),
            ..secret()
        }])
        .unwrap();
    assert_eq!(same[0].outcome, engram::AppendOutcome::Created, "{same:?}");
    assert_ne!(same[0].id, e);
    db.close().unwrap();
}

/// A labelled record past its retention period: a principal without the
/// label is answered "in use", as for a deleted one, whatever the content.
#[test]
fn a_hidden_record_past_retention_is_in_use_to_a_principal_without_its_label() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    let secret = |text: &str| NewRecord {
        retention_class: Some("ephemeral".into()),
        access: vec!["hr".into()],
        ..NewRecord::event("note", text).with_external_id("h")
    };
    s.append(vec![secret("salary 9000")]).unwrap();
    clock.advance(61 * MINUTE);
    let u = db.session(Principal::user("t", "u"));
    let right = u.append(vec![secret("salary 9000")]).unwrap_err();
    let wrong = u.append(vec![secret("salary 1")]).unwrap_err();
    assert!(
        matches!(
            &right,
            EngineError::ExternalIdConflict { existing: None, .. }
        ),
        "{right}"
    );
    assert_eq!(right.to_string(), wrong.to_string());
    db.close().unwrap();
}

/// A chain whose newest version `compact` deleted at the end of its
/// retention period takes no more corrections or expiries, and says why:
/// a correction was told to correct the deleted version, and an expiry
/// that the newest version was one the admin "cannot read".
#[test]
fn a_chain_whose_newest_version_expired_says_why_it_takes_no_correction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.set_retention("ephemeral", Some(60 * MINUTE)).unwrap();
    s.append(vec![
        NewRecord::event("preference", "colour is blue").with_external_id("c"),
    ])
    .unwrap();
    s.append(vec![NewRecord {
        retention_class: Some("ephemeral".into()),
        supersedes: Some(ext("c")),
        ..NewRecord::event("preference", "colour is green").with_external_id("c")
    }])
    .unwrap();
    clock.advance(61 * MINUTE);
    db.close().unwrap();
    Engram::compact(dir.path(), &opts(&clock)).unwrap();
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    let e = s
        .append(vec![NewRecord {
            supersedes: Some(ext("c")),
            ..NewRecord::event("preference", "colour is red")
        }])
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, EngineError::InvalidState { .. }), "{text}");
    assert!(
        text.contains("was deleted") && text.contains("new external id"),
        "{text}"
    );
    let e = s
        .expire(&ext("c"), T0 + 120 * MINUTE)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("was deleted") && !e.contains("cannot read"),
        "{e}"
    );
    // a new line under the chain's external id: the same answer, not
    // "correct the deleted version instead"
    let e = s
        .append(vec![
            NewRecord::event("preference", "colour is red").with_external_id("c"),
        ])
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, EngineError::InvalidState { .. }), "{text}");
    assert!(text.contains("was deleted"), "{text}");
    db.close().unwrap();
}

/// Retention is the tenant's decision, applied by compaction whatever
/// labels are revoked: a record past its period that carries a label
/// revoked tenant-wide (hidden from the admin too) is deleted and purged
/// like any other, and compaction, which purges every tenant, does not
/// stop on it (it did, with "no record", leaving another tenant's deleted
/// text on disk).
#[test]
fn retention_reaches_a_record_whose_label_is_revoked_tenant_wide() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let other = db.session(Principal::admin("other"));
    other
        .append(vec![
            NewRecord::event("note", "other-tenant-erased-canary-8").with_external_id("o1"),
        ])
        .unwrap();
    other.delete(&ext("o1"), None).unwrap();
    let s = db.session(Principal::admin("t"));
    s.set_retention("eph", Some(MINUTE)).unwrap();
    s.append(vec![
        NewRecord {
            retention_class: Some("eph".into()),
            ..NewRecord::event("note", "revoked-expired-canary-9")
                .with_external_id("x")
                .with_access(&["blue"])
        },
        NewRecord {
            retention_class: Some("eph".into()),
            ..NewRecord::event("note", "plain-expired-canary-10").with_external_id("a")
        },
    ])
    .unwrap();
    s.revoke(None, Some("blue"), None).unwrap();
    clock.advance(2 * MINUTE);
    // online, as `engram serve`'s compaction runs, and then offline
    let out = db.compact_online(|| ()).unwrap();
    assert_eq!(out.report.retention_deleted, 2, "{:?}", out.report);
    out.db.close().unwrap();
    Engram::compact(dir.path(), &opts(&clock)).unwrap();
    for gone in [
        "other-tenant-erased-canary-8",
        "revoked-expired-canary-9",
        "plain-expired-canary-10",
    ] {
        assert!(grep(dir.path(), gone).is_empty(), "{gone} purged");
    }
    // lifting the revocation brings nothing back
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.grant(None, Some("blue"), None).unwrap();
    assert!(s.get(&ext("x")).is_err());
    db.close().unwrap();
}
