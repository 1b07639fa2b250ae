//! The embedded API end to end: append, read back, idempotent re-ingest,
//! conflicts, corrections and history, isolation, reopen.

use engram::{
    AppendOutcome, EngineError, Engram, ListFilter, ManualClock, NewRecord, Options, Principal,
    RecordRef, Scope, Status,
};
use std::sync::Arc;

fn opts(clock: &ManualClock) -> Options {
    Options {
        clock: Arc::new(clock.clone()),
        ..Options::default()
    }
}

fn scope(user: &str, conv: &str) -> Scope {
    Scope {
        user: Some(user.into()),
        conversation: Some(conv.into()),
        ..Scope::default()
    }
}

#[test]
fn append_get_history_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_741_428_861_000);
    let db = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = db.session(Principal::user("tenant_42", "user_18"));
    let r = s
        .append(vec![
            NewRecord::event("user_message", "Use the revised retention policy.")
                .with_external_id("conv_993/17")
                .with_scope(scope("user_18", "conv_993"))
                .with_access(&[]),
        ])
        .unwrap();
    assert_eq!(r[0].outcome, AppendOutcome::Created);
    let id = r[0].id;
    let rec = s.get(&RecordRef::Id(id)).unwrap();
    assert_eq!(
        rec.text.as_deref(),
        Some("Use the revised retention policy.")
    );
    assert_eq!(rec.tenant, "tenant_42");
    assert_eq!(rec.status, Status::Active);
    assert_eq!(rec.ingested_at, 1_741_428_861_000);
    assert_eq!(
        rec.occurred_at, 1_741_428_861_000,
        "defaults to the ingest clock"
    );
    assert_eq!(rec.writer.principal, "user_18");
    assert_eq!(rec.content_sha256.len(), 64);
    // by external id
    let by_ext = s.get(&RecordRef::External("conv_993/17".into())).unwrap();
    assert_eq!(by_ext.id, id);

    // idempotent re-ingest: same content -> same id, nothing written
    clock.advance(1000);
    let again = s
        .append(vec![
            NewRecord::event("user_message", "Use the revised retention policy.")
                .with_external_id("conv_993/17")
                .with_scope(scope("user_18", "conv_993")),
        ])
        .unwrap();
    assert_eq!(again[0].outcome, AppendOutcome::Duplicate);
    assert_eq!(again[0].id, id);
    // the same record twice in one batch: the second is a duplicate, as it
    // would be in a later batch (of a record created by the batch, or of
    // one stored before), and only one is stored (in another tenant: the
    // rest of this test counts this one's records)
    let s2 = db.session(Principal::user("tenant_43", "user_18"));
    let twice = |text: &str, ext: &str| {
        vec![
            NewRecord::event("user_message", text).with_external_id(ext),
            NewRecord::event("user_message", "between"),
            NewRecord::event("user_message", text).with_external_id(ext),
        ]
    };
    let n_before = db.stats().unwrap().records;
    let r = s2.append(twice("said twice", "twice/1")).unwrap();
    let outcomes: Vec<_> = r.iter().map(|x| x.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AppendOutcome::Created,
            AppendOutcome::Created,
            AppendOutcome::Duplicate
        ]
    );
    assert_eq!(
        (r[2].id, r[2].lsn, r[2].status),
        (r[0].id, r[0].lsn, r[0].status)
    );
    assert!(r[2].lsn > 0);
    assert_eq!(db.stats().unwrap().records, n_before + 2);
    let r = s2.append(twice("said twice", "twice/1")).unwrap();
    assert!(r[0].outcome == AppendOutcome::Duplicate && r[2].outcome == AppendOutcome::Duplicate);
    assert_eq!((r[2].id, r[2].lsn), (r[0].id, r[0].lsn));
    // the same external id with other content is still refused, naming both
    let mut differ = twice("first words", "twice/2");
    differ[2].text = Some("other words".into());
    let e = s2.append(differ).unwrap_err().to_string();
    assert!(
        e.contains("appears twice in the batch (items 0 and 2)"),
        "{e}"
    );
    let lsn_before = db.applied_lsn();

    // same external id, different content -> error naming the fix
    let err = s
        .append(vec![
            NewRecord::event("user_message", "Something else.").with_external_id("conv_993/17"),
        ])
        .unwrap_err();
    assert!(
        matches!(err, EngineError::ExternalIdConflict { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("supersedes"));
    assert_eq!(db.applied_lsn(), lsn_before, "nothing written");

    // a declared correction is accepted and moves the external id
    let corr = s
        .append(vec![
            NewRecord::event("user_message", "Use the retention policy of March 2025.")
                .with_external_id("conv_993/17")
                .with_scope(scope("user_18", "conv_993"))
                .superseding(RecordRef::External("conv_993/17".into())),
        ])
        .unwrap();
    let new_id = corr[0].id;
    assert!(new_id > id, "ids are time ordered");
    let old = s.get(&RecordRef::Id(id)).unwrap();
    assert_eq!(old.status, Status::Superseded);
    assert_eq!(old.superseded_by, Some(new_id));
    let hist = s.history(&RecordRef::Id(id)).unwrap();
    assert_eq!(
        hist.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![id, new_id]
    );
    assert_eq!(s.current(&RecordRef::Id(id)).unwrap().id, new_id);
    assert_eq!(
        s.get(&RecordRef::External("conv_993/17".into()))
            .unwrap()
            .id,
        new_id
    );
    // correcting an already-corrected version is refused
    let err = s
        .append(vec![
            NewRecord::event("user_message", "x").superseding(RecordRef::Id(id)),
        ])
        .unwrap_err();
    assert!(
        matches!(err, EngineError::AlreadySuperseded { .. }),
        "{err}"
    );

    // another tenant sees nothing, even by id
    let other = db.session(Principal::user("tenant_7", "user_18"));
    assert!(matches!(
        other.get(&RecordRef::Id(id)),
        Err(EngineError::NotFound { .. })
    ));
    assert!(other.list(&ListFilter::default()).unwrap().is_empty());

    db.close().unwrap();
    drop(db);
    let db = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = db.session(Principal::user("tenant_42", "user_18"));
    let hist = s
        .history(&RecordRef::External("conv_993/17".into()))
        .unwrap();
    assert_eq!(hist.len(), 2);
    assert_eq!(
        hist[0].text.as_deref(),
        Some("Use the revised retention policy.")
    );
    assert_eq!(s.list(&ListFilter::default()).unwrap().len(), 2);
    // a range that holds no time is refused, as a recall's is (it
    // answered an empty page)
    let e = s
        .list(&ListFilter {
            since: Some(2_000),
            until: Some(1_000),
            ..ListFilter::default()
        })
        .unwrap_err();
    assert!(
        matches!(e, EngineError::InvalidInput { ref field, .. } if field == "since"),
        "{e}"
    );
}

#[test]
fn a_bad_record_rejects_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let s = db.session(Principal::user("t", "u"));
    let err = s
        .append(vec![
            NewRecord::event("note", "fine"),
            NewRecord::event("note", "also fine").with_embedding("m", vec![1.0, f32::INFINITY]),
        ])
        .unwrap_err();
    assert_eq!(err.item(), Some(1));
    assert!(err.to_string().contains("embedding.vector"), "{err}");
    assert!(s.list(&ListFilter::default()).unwrap().is_empty());
    // wrong dimension against an existing space
    s.append(vec![
        NewRecord::event("note", "v").with_embedding("m", vec![1.0, 0.0, 0.0]),
    ])
    .unwrap();
    let err = s
        .append(vec![
            NewRecord::event("note", "w").with_embedding("m", vec![1.0, 0.0]),
        ])
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::DimensionMismatch {
                expected: 3,
                got: 2,
                ..
            }
        ),
        "{err}"
    );
    // supersedes cycle / dangling reference
    let err = s
        .append(vec![
            NewRecord::event("note", "x").superseding(RecordRef::External("nope".into())),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");
}

#[test]
fn the_store_is_exclusive_to_one_process_handle() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let err = Engram::open(dir.path(), Options::default()).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(db);
    Engram::open(dir.path(), Options::default()).unwrap();
}

/// A lifecycle operation is the last frame of the log: it creates no record,
/// yet `verify` in the same process counts it as applied and finds nothing
/// wrong.
#[test]
fn verify_right_after_a_lifecycle_operation_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_741_428_861_000);
    let db = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "to be deleted").with_external_id("x"),
    ])
    .unwrap();
    s.delete(&RecordRef::External("x".into()), None).unwrap();
    let v = db.verify().unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    // operations alone: no record at all
    s.grant(Some("p"), Some("hr"), None).unwrap();
    s.revoke(None, Some("hr"), None).unwrap();
    let v = db.verify().unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    db.close().unwrap();
}

/// A handle kept alive after `close` never touches the store again: the
/// next handle's writes survive the old one being dropped later.
#[test]
fn a_closed_handle_that_lives_on_does_not_write_behind_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_741_428_861_000);
    let old = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = old.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "first").with_external_id("a"),
    ])
    .unwrap();
    old.close().unwrap();
    let new = Engram::open(dir.path(), opts(&clock)).unwrap();
    new.session(Principal::admin("t"))
        .append(vec![
            NewRecord::event("note", "second").with_external_id("b"),
        ])
        .unwrap();
    new.close().unwrap();
    drop(new);
    drop(s);
    drop(old);
    let db = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = db.session(Principal::admin("t"));
    assert!(s.get(&RecordRef::External("a".into())).is_ok());
    assert!(s.get(&RecordRef::External("b".into())).is_ok());
    assert!(db.verify().unwrap().ok());
    db.close().unwrap();
}

/// After a correction gives a chain another external id, the old key names
/// a superseded version: a new record under it is told to correct the
/// chain's current version (the advice to correct the old key only met
/// "already superseded").
#[test]
fn an_old_key_of_a_renamed_chain_points_at_its_current_version() {
    let clock = ManualClock::new(1_700_000_000_000);
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "first").with_external_id("cb1"),
    ])
    .unwrap();
    let head = s
        .append(vec![
            NewRecord::event("note", "renamed")
                .with_external_id("cb-new")
                .superseding(RecordRef::External("cb1".into())),
        ])
        .unwrap()[0]
        .id;
    let e = s
        .append(vec![
            NewRecord::event("note", "other").with_external_id("cb1"),
        ])
        .unwrap_err();
    match e {
        EngineError::AlreadySuperseded { by, .. } => assert_eq!(by, Some(head)),
        other => panic!("{other}"),
    }
}

/// A correction of a version corrected twice since is told to correct the
/// chain's newest version, not the next one (which was corrected too: a
/// client walked the chain one refusal at a time).
#[test]
fn a_stale_correction_names_the_newest_version() {
    let clock = ManualClock::new(1_700_000_000_000);
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), opts(&clock)).unwrap();
    let s = db.session(Principal::admin("t"));
    let first = s
        .append(vec![NewRecord::event("note", "v1").with_external_id("k")])
        .unwrap()[0]
        .id;
    let mut newest = first;
    for v in ["v2", "v3"] {
        newest = s
            .append(vec![
                NewRecord::event("note", v).superseding(RecordRef::Id(newest)),
            ])
            .unwrap()[0]
            .id;
    }
    let e = s
        .append(vec![
            NewRecord::event("note", "late").superseding(RecordRef::Id(first)),
        ])
        .unwrap_err();
    match e {
        EngineError::AlreadySuperseded { by, .. } => assert_eq!(by, Some(newest)),
        other => panic!("{other}"),
    }
}
