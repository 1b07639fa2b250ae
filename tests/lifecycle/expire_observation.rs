//! Governance case 2: expire a failure observation. After its evidence
//! window the failure is not presented as current; asked about the past, or
//! with history, it is found and labelled historical. Expiring into the
//! past of a record's validity is refused.

use crate::common::*;
use engram::context::ContextRequest;
use engram::retrieval::RecallRequest;
use engram::{EngineError, ManualClock, NewRecord, Principal};

#[test]
fn an_expired_observation_is_history_not_current_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + MINUTE);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    let mut obs = NewRecord::event("observation", "The catalog_api health check failed.")
        .with_external_id("hc-1")
        .at(T0);
    obs.valid_until = Some(T0 + 5 * MINUTE); // current_evidence_until
    s.append(vec![
        obs,
        NewRecord::event("observation", "Disk usage on db-1 is 40%.")
            .with_external_id("disk")
            .at(T0),
    ])
    .unwrap();
    db.wait_indexed().unwrap();
    let q = || RecallRequest::text("catalog_api health check");
    let hit = |r: &engram::RecallResponse| {
        r.hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("hc-1"))
    };

    // inside the window: current
    assert!(hit(&s.recall(&q()).unwrap()));
    // after the window: not presented as current
    clock.set(T0 + 10 * MINUTE);
    let now = s.recall(&q()).unwrap();
    assert!(!hit(&now), "expired observation presented as current");
    assert!(
        now.manifest
            .eligibility
            .iter()
            .any(|st| st.step == "validity")
    );
    // valid at a time inside the window: found
    let past = s
        .recall(&RecallRequest {
            valid_at: Some(T0 + 2 * MINUTE),
            ..q()
        })
        .unwrap();
    assert!(hit(&past));
    // with history requested: found and labelled historical
    let h = s
        .recall(&RecallRequest {
            include_historical: true,
            ..q()
        })
        .unwrap();
    let item = h
        .hits
        .iter()
        .find(|h| h.external_id.as_deref() == Some("hc-1"))
        .unwrap();
    assert!(item.historical);
    // context labels it historical and never current
    let c = s
        .context(&ContextRequest::new("is catalog_api failing?"))
        .unwrap();
    let rendered = c.render();
    for sec in &c.sections {
        for it in &sec.items {
            if it.external_id.as_deref() == Some("hc-1") {
                assert!(it.historical, "{rendered}");
            }
        }
    }

    // an explicit expiry op on the other observation
    s.expire(&ext("disk"), T0 + 3 * MINUTE).unwrap();
    assert!(
        !s.recall(&RecallRequest::text("disk usage db-1"))
            .unwrap()
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("disk"))
    );
    // what the store knew before the expiry op was written (as_of): current
    let before_op = s
        .recall(&RecallRequest {
            as_of: Some(T0 + 5 * MINUTE),
            valid_at: Some(T0 + 5 * MINUTE),
            ..RecallRequest::text("disk usage db-1")
        })
        .unwrap();
    assert!(
        before_op
            .hits
            .iter()
            .any(|h| h.external_id.as_deref() == Some("disk"))
    );

    // expiring into the past of valid_from is refused, nothing written
    let lsn = db.applied_lsn();
    let e = s.expire(&ext("disk"), T0 - MINUTE).unwrap_err();
    assert!(
        matches!(e, EngineError::InvalidInput { ref field, .. } if field == "at"),
        "{e}"
    );
    assert_eq!(db.applied_lsn(), lsn);
    db.close().unwrap();
}

/// Context assembly keeps a conversation's ended turns in its recent
/// section, marked historical, unless the request leaves history out; an
/// ended policy is never in the procedural section.
#[test]
fn context_marks_ended_recent_turns_and_never_follows_an_ended_policy() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + MINUTE);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    let scope = engram::Scope {
        user: Some("u2".into()),
        conversation: Some("c2".into()),
        ..Default::default()
    };
    let turn = |ext: &str, text: &str, at: i64| {
        NewRecord::event("user_message", text)
            .with_external_id(ext)
            .with_scope(scope.clone())
            .at(at)
    };
    let mut policy = NewRecord::assertion(
        engram::AssertionKind::Policy,
        "refunds need approval",
        vec![ext("t2")],
    )
    .with_external_id("pol");
    policy.valid_until = Some(T0 + 5 * MINUTE);
    s.append(vec![
        turn("t1", "checkout is slow", T0),
        turn("t2", "billing is slow too", T0 + 1000),
        policy,
    ])
    .unwrap();
    s.expire(&ext("t1"), T0 + 2 * MINUTE).unwrap();
    let ask = |historical: bool| {
        let mut r = ContextRequest::new("checkout billing slow");
        r.user = Some("u2".into());
        r.conversation = Some("c2".into());
        r.include_historical = historical;
        s.context(&r).unwrap()
    };
    let section = |c: &engram::context::Context, name: &str| -> Vec<(String, bool)> {
        c.sections
            .iter()
            .filter(|sec| sec.name == name)
            .flat_map(|sec| &sec.items)
            .map(|it| (it.external_id.clone().unwrap_or_default(), it.historical))
            .collect()
    };
    // while the policy is valid, it is followed
    assert_eq!(
        section(&ask(true), "procedural"),
        vec![("pol".to_string(), false)]
    );
    clock.set(T0 + 10 * MINUTE);
    let with = ask(true);
    assert_eq!(
        section(&with, "recent"),
        vec![("t1".to_string(), true), ("t2".to_string(), false)],
        "{}",
        with.render()
    );
    assert!(with.render().contains("HISTORICAL"));
    assert!(section(&with, "procedural").is_empty(), "{}", with.render());
    let without = ask(false);
    assert_eq!(section(&without, "recent"), vec![("t2".to_string(), false)]);
    // a trace shows the ended policy as retrieval does: historical
    let t = s.trace(&ext("t2")).unwrap();
    let pol = t
        .nodes
        .iter()
        .find(|n| n.external_id.as_deref() == Some("pol"))
        .unwrap();
    assert_eq!(pol.status, "historical");
}

/// A record about an event dated later is valid from when it is written,
/// and a fixed `valid_at` gives the same answer whenever it is asked: the
/// answer used to change once `valid_at` fell into the past.
#[test]
fn a_fixed_valid_at_gives_the_same_answer_at_any_later_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("t"));
    s.append(vec![NewRecord {
        occurred_at: Some(T0 + 24 * 60 * MINUTE),
        ..NewRecord::event("meeting", "planning meeting tomorrow").with_external_id("m")
    }])
    .unwrap();
    let found = |valid_at: i64| {
        s.recall(&RecallRequest {
            valid_at: Some(valid_at),
            ..RecallRequest::text("planning meeting")
        })
        .unwrap()
        .hits
        .iter()
        .any(|h| h.external_id.as_deref() == Some("m"))
    };
    let asked = T0 + MINUTE;
    assert!(found(asked), "valid once written");
    assert!(!found(T0 - MINUTE), "not before it was written");
    for later in [2, 60, 2 * 24 * 60] {
        clock.advance(later * MINUTE);
        assert!(
            found(asked),
            "{later} min later: the same valid_at changed its answer"
        );
        assert!(!found(T0 - MINUTE));
    }
    db.close().unwrap();
}

/// An old version of a correction chain is out of every current read
/// already: expiring it would change nothing, so it is refused, naming
/// the version to expire instead.
#[test]
fn expiring_a_superseded_version_is_refused_naming_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0 + MINUTE);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    let old = s
        .append(vec![
            NewRecord::event("observation", "db-1 disk at 40%").with_external_id("disk"),
        ])
        .unwrap()
        .remove(0)
        .id;
    let mut fix = NewRecord::event("observation", "db-1 disk at 45%");
    fix.supersedes = Some(ext("disk"));
    s.append(vec![fix]).unwrap();
    let mut fix = NewRecord::event("observation", "db-1 disk at 50%");
    fix.supersedes = Some(ext("disk"));
    // the current version is named, not the next one
    let new = s.append(vec![fix]).unwrap().remove(0).id;
    let e = s
        .expire(&engram::RecordRef::Id(old), T0 + 10 * MINUTE)
        .unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidState { reason, .. } if reason.contains(&new.to_string())),
        "{e}"
    );
    s.expire(&ext("disk"), T0 + 10 * MINUTE).unwrap();
    db.close().unwrap();
}
