//! Concurrent writers racing on the same records: appends, derived records,
//! corrections, deletions and revocations from several threads at once,
//! with readers recalling meanwhile. Losing a race is a typed error
//! (already superseded, deleted, in flight); nothing panics, no record is
//! lost, the store verifies clean, and rebuilding derived state from the log
//! reproduces it exactly (apply order is the log order, whatever the
//! interleaving).

use std::collections::BTreeSet;
use std::sync::Arc;

use engram::retrieval::RecallRequest;
use engram::{
    AppendResult, AssertionKind, Body, EngineError, Engram, ManualClock, NewRecord, Options,
    Principal, RecordId, RecordRef, Status,
};
use parking_lot::Mutex;

use crate::common::Rng;

/// Errors a writer may get for losing a race with another writer.
fn lost_race(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::AlreadySuperseded { .. }
            | EngineError::InvalidState { .. }
            | EngineError::InvalidInput { .. }
            | EngineError::NotFound { .. }
    )
}

#[test]
fn racing_writers_and_readers_leave_a_store_that_verifies_and_rebuilds_identically() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_770_000_000_000);
    let opts = Options {
        clock: Arc::new(clock.clone()),
        ..Options::default()
    };
    let db = Engram::open(dir.path(), opts.clone()).unwrap();
    let ids: Arc<Mutex<Vec<RecordId>>> = Arc::default();
    let created: Arc<Mutex<BTreeSet<RecordId>>> = Arc::default();
    let deleted: Arc<Mutex<BTreeSet<RecordId>>> = Arc::default();
    // each append's answer (id, LSN, status) and each deletion's (LSN, affected)
    type Answer = (RecordId, u64, Status);
    type Deletion = (u64, Vec<RecordId>);
    let answers: Mutex<Vec<Answer>> = Mutex::default();
    let deletions: Mutex<Vec<Deletion>> = Mutex::default();
    let seed = db
        .session(Principal::admin("t"))
        .append(
            (0..8)
                .map(|i| NewRecord::event("note", format!("seed note {i} about checkout")))
                .collect(),
        )
        .unwrap();
    for r in &seed {
        ids.lock().push(r.id);
        created.lock().insert(r.id);
    }
    std::thread::scope(|sc| {
        for w in 0..6u64 {
            let (db, ids, created, deleted, clock) = (&db, &ids, &created, &deleted, &clock);
            let (answers, deletions) = (&answers, &deletions);
            sc.spawn(move || {
                let s = db.session(Principal::admin("t"));
                let answered = |r: Vec<AppendResult>| -> Vec<RecordId> {
                    answers
                        .lock()
                        .extend(r.iter().map(|x| (x.id, x.lsn, x.status)));
                    r.into_iter().map(|x| x.id).collect()
                };
                let mut rng = Rng(0x9E37_79B9 ^ ((w + 1) * 0x1234_5678_9ABC));
                for n in 0..60 {
                    clock.advance(1);
                    let known = ids.lock().clone();
                    let pick = *rng.pick(&known);
                    let res: Result<Vec<RecordId>, EngineError> = match rng.below(10) {
                        0..=3 => s
                            .append(vec![NewRecord::event(
                                "note",
                                format!("writer {w} note {n} about billing"),
                            )])
                            .map(answered),
                        4 | 5 => s
                            .append(vec![NewRecord {
                                body: Body::Assertion {
                                    kind: AssertionKind::Observation,
                                    subject: None,
                                    predicate: None,
                                    object: None,
                                },
                                kind: "observation".into(),
                                text: Some(format!("writer {w} observation {n}")),
                                sources: vec![RecordRef::Id(pick)],
                                ..NewRecord::default()
                            }])
                            .map(answered),
                        6 | 7 => {
                            // correct whatever `pick` is, as an event; a
                            // non-event target is a typed refusal
                            let mut fix = NewRecord::event("note", format!("correction {w}/{n}"));
                            fix.supersedes = Some(RecordRef::Id(pick));
                            s.append(vec![fix]).map(answered)
                        }
                        8 => s.delete(&RecordRef::Id(pick), Some("race")).map(|r| {
                            deletions.lock().push((r.lsn, r.affected.clone()));
                            deleted.lock().extend(r.affected);
                            Vec::new()
                        }),
                        _ => s
                            .recall(&RecallRequest::text("checkout billing note"))
                            .map(|_| Vec::new()),
                    };
                    match res {
                        Ok(new) => {
                            for id in new {
                                ids.lock().push(id);
                                created.lock().insert(id);
                            }
                        }
                        Err(e) => assert!(lost_race(&e), "writer {w}: unexpected error {e:?}"),
                    }
                }
                // grants and revocations race with everything else too
                s.grant(Some(&format!("p{w}")), Some("hr"), None).unwrap();
                s.revoke(Some(&format!("p{w}")), Some("hr"), None).unwrap();
            });
        }
    });
    // Nothing acknowledged is lost: every record is readable or deleted.
    // Deleted means not readable, for what each deletion reported and for
    // anything derived from or correcting a deleted record, including
    // writes that raced the deletion.
    let s = db.session(Principal::admin("t"));
    let deleted = deleted.lock().clone();
    let mut gone = BTreeSet::new();
    let mut live = Vec::new();
    for id in created.lock().iter() {
        match s.get(&RecordRef::Id(*id)) {
            Ok(r) => {
                assert!(!deleted.contains(id), "deleted {id} readable");
                live.push(r);
            }
            Err(EngineError::NotFound { .. }) => {
                gone.insert(*id);
            }
            Err(e) => panic!("{id}: {e}"),
        }
    }
    // An answer never calls current a record a deletion logged before it
    // had reached (a write that raced the deletion is deleted as it is
    // applied, and its answer says so).
    for &(id, lsn, status) in answers.lock().iter() {
        for (del_lsn, affected) in deletions.lock().iter() {
            assert!(
                status == Status::Deleted || *del_lsn > lsn || !affected.contains(&id),
                "{id} answered {status:?} at LSN {lsn}, deleted at LSN {del_lsn} before it"
            );
        }
    }
    for r in &live {
        for u in r.sources.iter().chain(r.supersedes.as_ref()) {
            assert!(
                !gone.contains(u),
                "{} lives although its input {u} is deleted",
                r.id
            );
        }
    }
    assert!(
        !live.is_empty() && !gone.is_empty(),
        "the race proved nothing"
    );
    let v = db.verify().unwrap();
    assert!(v.ok(), "{:?}", v.problems);
    db.close().unwrap();
    let r = Engram::rebuild(dir.path(), &opts, true).unwrap();
    assert!(r.checked_lines > 0, "{r:?}");
}

/// `ledger.jsonl` under concurrent deletions and revocations: every
/// operation gets exactly one whole line.
#[test]
fn concurrent_lifecycle_operations_each_get_one_whole_ledger_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let notes = db
        .session(Principal::admin("t"))
        .append(
            (0..64)
                .map(|i| NewRecord::event("note", format!("note {i}")))
                .collect(),
        )
        .unwrap();
    let notes: Vec<RecordId> = notes.into_iter().map(|r| r.id).collect();
    std::thread::scope(|sc| {
        for w in 0..8usize {
            let (db, notes) = (&db, &notes);
            sc.spawn(move || {
                let s = db.session(Principal::admin("t"));
                for i in 0..24usize {
                    // (a revoke needs a grant to withdraw)
                    let p = format!("p{w}-{i}");
                    s.grant(Some(&p), Some("hr"), None).unwrap();
                    s.revoke(Some(&p), Some("hr"), None).unwrap();
                    if i < 8 {
                        s.delete(&RecordRef::Id(notes[w * 8 + i]), None).unwrap();
                    }
                }
            });
        }
    });
    db.close().unwrap();
    let text = std::fs::read_to_string(dir.path().join("ledger.jsonl")).unwrap();
    let mut ids = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("ledger line {}: {e}: {line}", n + 1));
        assert!(
            ids.insert(v["op_id"].as_str().unwrap().to_string()),
            "duplicate line {line}"
        );
    }
    assert_eq!(ids.len(), 8 * 24 * 2 + 64, "one line per operation");
}

/// Two corrections of one record racing: the loser gets a conflict
/// (`AlreadySuperseded`, or `InvalidState` while the winner is in
/// flight: 409 over HTTP), never an `InvalidInput` about its own request.
#[test]
fn racing_corrections_of_one_record_conflict_rather_than_fail_as_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let admin = db.session(Principal::admin("t"));
    for round in 0..60 {
        let id = admin
            .append(vec![NewRecord::event("note", format!("round {round}"))])
            .unwrap()[0]
            .id;
        let outcomes: Vec<Result<(), EngineError>> = together(2, |w| {
            let mut fix = NewRecord::event("note", format!("round {round} fix {w}"));
            fix.supersedes = Some(RecordRef::Id(id));
            db.session(Principal::admin("t"))
                .append(vec![fix])
                .map(|_| ())
        });
        assert!(
            outcomes.iter().any(Result::is_ok),
            "round {round}: {outcomes:?}"
        );
        for o in outcomes {
            if let Err(e) = o {
                assert!(
                    matches!(
                        e,
                        EngineError::AlreadySuperseded { .. } | EngineError::InvalidState { .. }
                    ),
                    "round {round}: {e:?}"
                );
            }
        }
    }
    drop(admin);
    db.close().unwrap();
}

/// Two identical operations sent together (a deletion of one record, or
/// of two versions of its chain; a revocation; a tenant-wide revocation
/// and grant; a hold lifted): exactly one is taken, one ledger line, and
/// the other is refused as it is one after the other. Both were answered
/// as taken, with two ledger lines.
/// `f(w)` on `n` threads released together; their results in order.
fn together<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|w| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    f(w)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn twin_operations_sent_together_are_taken_once() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Engram::open(dir.path(), Options::default()).unwrap();
    let db = &owner;
    let admin = db.session(Principal::admin("t"));
    let race =
        |a: &(dyn Fn() -> Result<engram::lifecycle::OpResult, EngineError> + Sync),
         b: &(dyn Fn() -> Result<engram::lifecycle::OpResult, EngineError> + Sync)| {
            let [x, y]: [_; 2] = together(2, |w| if w == 0 { a() } else { b() })
                .try_into()
                .unwrap();
            (x.is_ok() as usize + y.is_ok() as usize, [x, y])
        };
    let lines = || {
        std::fs::read_to_string(dir.path().join("ledger.jsonl"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    for round in 0..15 {
        // a record, and its chain's two versions
        let first = admin
            .append(vec![
                NewRecord::event("note", format!("round {round}"))
                    .with_external_id(format!("n{round}")),
            ])
            .unwrap()[0]
            .id;
        let mut fix = NewRecord::event("note", format!("round {round} fixed"));
        fix.supersedes = Some(RecordRef::Id(first));
        let second = admin.append(vec![fix]).unwrap()[0].id;
        let before = lines();
        let del = |id: RecordId| {
            move || {
                db.session(Principal::admin("t"))
                    .delete(&RecordRef::Id(id), None)
            }
        };
        let (taken, outcomes) = race(&del(second), &del(second));
        assert_eq!(taken, 1, "round {round}: {outcomes:?}");
        for o in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert!(matches!(o, EngineError::InvalidState { .. }), "{o:?}");
        }
        assert_eq!(lines(), before + 1, "round {round}: one ledger line");
        // two versions of one chain (each deletion deletes the whole chain)
        let third = admin
            .append(vec![NewRecord::event("note", format!("other {round}"))])
            .unwrap()[0]
            .id;
        let mut fix = NewRecord::event("note", format!("other {round} fixed"));
        fix.supersedes = Some(RecordRef::Id(third));
        let fourth = admin.append(vec![fix]).unwrap()[0].id;
        let (taken, outcomes) = race(&del(third), &del(fourth));
        assert_eq!(taken, 1, "round {round}: {outcomes:?}");
        // a principal's label revoked twice
        let p = format!("p{round}");
        admin.grant(Some(&p), Some("hr"), None).unwrap();
        let revoke = || {
            db.session(Principal::admin("t"))
                .revoke(Some(&p), Some("hr"), None)
        };
        let (taken, outcomes) = race(&revoke, &revoke);
        assert_eq!(taken, 1, "round {round}: {outcomes:?}");
        // a label revoked tenant-wide twice, then granted back twice
        let label = format!("l{round}");
        let wide = |grant: bool| {
            let label = label.clone();
            move || {
                let s = db.session(Principal::admin("t"));
                if grant {
                    s.grant(None, Some(&label), None)
                } else {
                    s.revoke(None, Some(&label), None)
                }
            }
        };
        let (taken, outcomes) = race(&wide(false), &wide(false));
        assert_eq!(taken, 1, "round {round}: {outcomes:?}");
        let (taken, outcomes) = race(&wide(true), &wide(true));
        assert_eq!(taken, 1, "round {round}: {outcomes:?}");
        // a hold lifted twice
        let scope = format!("user:u{round}");
        admin.hold(&scope, true).unwrap();
        let lift = || db.session(Principal::admin("t")).hold(&scope, false);
        let (taken, outcomes) = race(&lift, &lift);
        assert_eq!(taken, 1, "round {round}: {outcomes:?}");
    }
    drop(admin);
    owner.close().unwrap();
}

/// Many deletions of one record at once: exactly one is taken, whether the
/// others meet it in flight or applied (a deletion that checked the record
/// before the first applied, and queued after its registration in flight
/// ended, was taken too).
#[test]
fn many_deletions_of_one_record_are_taken_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let admin = db.session(Principal::admin("t"));
    for round in 0..60 {
        let id = admin
            .append(vec![NewRecord::event("note", format!("round {round}"))])
            .unwrap()[0]
            .id;
        let taken: usize = together(6, |_| {
            match db
                .session(Principal::admin("t"))
                .delete(&RecordRef::Id(id), None)
            {
                Ok(_) => 1,
                Err(EngineError::InvalidState { .. }) => 0,
                Err(e) => panic!("round {round}: {e:?}"),
            }
        })
        .into_iter()
        .sum();
        assert_eq!(taken, 1, "round {round}");
    }
    drop(admin);
    db.close().unwrap();
}

/// Corrections naming one chain by its external id, racing: one that
/// arrives while another batch's version is applied but not yet released
/// corrects that version (or loses as a conflict of state), never gets
/// "external id in use" for being the correction it is.
#[test]
fn racing_corrections_by_external_id_never_read_as_a_key_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let admin = db.session(Principal::admin("t"));
    for round in 0..20 {
        let key = format!("cc/{round}");
        admin
            .append(vec![
                NewRecord::event("note", format!("round {round}")).with_external_id(&key),
            ])
            .unwrap();
        let barrier = std::sync::Barrier::new(8);
        let outcomes: Vec<Result<(), EngineError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|w| {
                    let (db, barrier, key) = (&db, &barrier, &key);
                    s.spawn(move || {
                        let mut out = Ok(());
                        barrier.wait();
                        for k in 0..4 {
                            let mut fix = NewRecord::event("note", format!("v{}", (w + k) % 3))
                                .with_external_id(key.as_str());
                            fix.supersedes = Some(RecordRef::External(key.clone()));
                            if let Err(e) = db.session(Principal::admin("t")).append(vec![fix]) {
                                out = Err(e);
                            }
                        }
                        out
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for o in outcomes {
            if let Err(e) = o {
                assert!(
                    matches!(
                        e,
                        EngineError::AlreadySuperseded { .. } | EngineError::InvalidState { .. }
                    ),
                    "round {round}: {e:?}"
                );
            }
        }
    }
    drop(admin);
    db.close().unwrap();
}

/// Approvals racing corrections of the entity their claim is about: no
/// claim is approved after its subject's version was superseded (an
/// approval while the correction was in flight was answered "approved",
/// leaving an approved claim about a superseded version, whose
/// correction may have added a label).
#[test]
fn an_approval_never_lands_after_its_subjects_correction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Engram::open(dir.path(), Options::default()).unwrap();
    let admin = db.session(Principal::admin("t"));
    let entity = |name: String| NewRecord {
        body: Body::Entity {
            entity_type: "service".into(),
            name,
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some("svc".into()),
        ..NewRecord::default()
    };
    admin.append(vec![entity("svc 0".into())]).unwrap();
    let src = admin
        .append(vec![NewRecord::event("note", "a ticket")])
        .unwrap()[0]
        .id;
    let approved: Mutex<Vec<(RecordId, u64)>> = Mutex::default();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 1..40 {
                std::thread::sleep(std::time::Duration::from_millis(2));
                let mut c = entity(format!("svc {i}"));
                c.supersedes = Some(RecordRef::External("svc".into()));
                match admin.append(vec![c]) {
                    Ok(_) => {}
                    Err(e) => assert!(lost_race(&e), "{e}"),
                }
            }
        });
        sc.spawn(|| {
            let bot = db.session(Principal::model("t", "bot"));
            for i in 0..120 {
                let policy = NewRecord {
                    body: Body::Assertion {
                        kind: AssertionKind::Policy,
                        subject: Some(RecordRef::External("svc".into())),
                        predicate: Some("deploys".into()),
                        object: Some(format!("window {i}")),
                    },
                    kind: "policy".into(),
                    text: Some(format!("deploy in window {i}")),
                    sources: vec![RecordRef::Id(src)],
                    ..NewRecord::default()
                };
                // (refused while a correction of its subject is in flight:
                // sent again, as a client would, so that some land between
                // corrections however slow the disk is)
                let mut tries = 0;
                let made = loop {
                    match bot.append(vec![policy.clone()]) {
                        Ok(made) => break made,
                        Err(e) => {
                            assert!(lost_race(&e), "{e}");
                            tries += 1;
                            assert!(tries < 2000, "never written: {e}");
                            std::thread::sleep(std::time::Duration::from_micros(200));
                        }
                    }
                };
                match admin.approve(&RecordRef::Id(made[0].id), None) {
                    Ok(op) => approved.lock().push((made[0].id, op.lsn)),
                    Err(e) => assert!(lost_race(&e), "{e}"),
                }
            }
        });
    });
    let approved = approved.into_inner();
    assert!(!approved.is_empty());
    for (claim, lsn) in approved {
        let subject = admin.get(&RecordRef::Id(claim)).unwrap().subject.unwrap();
        let v = admin.get(&RecordRef::Id(subject)).unwrap();
        if let Some(next) = v.superseded_by {
            let next = admin.get(&RecordRef::Id(next)).unwrap();
            assert!(
                next.lsn > lsn,
                "claim {claim} approved at LSN {lsn}, after its subject {subject} was superseded at {}",
                next.lsn
            );
        }
    }
    db.close().unwrap();
}
