//! Writes and operations in flight: what a review decision, a
//! retraction, an expiry, a deletion or a review rule queued and not yet
//! applied refuses or changes for the writes queued after it (registered
//! under the writer lock by `admit::hold_op`).

use super::*;
use crate::model::{AssertionKind, WriterKind};

/// A policy built on `source`.
fn policy(text: &str, source: RecordRef) -> NewRecord {
    NewRecord::assertion(AssertionKind::Policy, text, vec![source])
}

/// A retraction queued but not yet applied leaves its record approved in
/// the state: a correction resolved meanwhile would be applied after it and
/// turn the withdrawn text into a superseded version any reader may select.
/// The retraction is registered in flight, and the correction refused, as
/// is a record built on it.
#[test]
fn a_correction_of_a_record_a_retraction_in_flight_withdraws_is_refused() {
    let db = mem_store("/retract");
    let s = db.session(Principal::admin("t"));
    s.append(vec![
        NewRecord::event("note", "source").with_external_id("src"),
    ])
    .unwrap();
    let fact = NewRecord::assertion(
        AssertionKind::Fact,
        "the vault code is 7777",
        vec![RecordRef::External("src".into())],
    )
    .with_external_id("f");
    let id = s.append(vec![fact.clone()]).unwrap()[0].id;
    // as write_op_as leaves it between queueing a retraction and its apply
    db.inner.writer.lock().pending_retracted.insert(id);
    let lsn = db.applied_lsn();
    let e = s
        .append(vec![fact.superseding(RecordRef::Id(id))])
        .unwrap_err();
    assert!(e.to_string().contains("being retracted"), "{e}");
    // nor is anything built on it meanwhile
    let e = s
        .append(vec![NewRecord::assertion(
            AssertionKind::Observation,
            "a summary of the vault code",
            vec![RecordRef::Id(id)],
        )])
        .unwrap_err();
    assert!(e.to_string().contains("being retracted"), "{e}");
    assert_eq!(db.applied_lsn(), lsn, "nothing written");
    // once applied, the retraction says so itself, and clears its mark
    db.inner.writer.lock().pending_retracted.clear();
    s.retract(&RecordRef::Id(id), None).unwrap();
    assert!(db.inner.writer.lock().pending_retracted.is_empty());
    let e = s
        .append(vec![
            NewRecord::assertion(
                AssertionKind::Fact,
                "v2",
                vec![RecordRef::External("src".into())],
            )
            .with_external_id("f")
            .superseding(RecordRef::Id(id)),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("retracted"), "{e}");
}

/// A store with a ticket (an event, external id `t`, tenant `t`) and a
/// model's policy built on it, a review candidate: (store, ticket, policy).
fn ticket_and_candidate(dir: &str) -> (Engram, RecordId, RecordId) {
    let db = mem_store(dir);
    let ticket = db
        .session(Principal::admin("t"))
        .append(vec![NewRecord::event("ticket", "t").with_external_id("t")])
        .unwrap()[0]
        .id;
    let cand = db
        .session(Principal::model("t", "bot"))
        .append(vec![policy("always refund", RecordRef::Id(ticket))])
        .unwrap()[0]
        .id;
    (db, ticket, cand)
}

/// A review decision is checked again under the writer lock, against
/// decisions in flight: an approval and a rejection sent together were both
/// answered as done while only the first took effect.
#[test]
fn a_review_decision_while_another_is_in_flight_is_refused() {
    let (db, _, id) = ticket_and_candidate("/review");
    let admin = db.session(Principal::admin("t"));
    // as hold_op leaves it while the first decision is queued
    db.inner.writer.lock().pending_reviewed.insert(id);
    let lsn = db.applied_lsn();
    for approve in [true, false] {
        let r = if approve {
            admin.approve(&RecordRef::Id(id), None)
        } else {
            admin.reject(&RecordRef::Id(id), None)
        };
        let e = r.unwrap_err();
        assert!(e.to_string().contains("in flight"), "{e}");
    }
    assert_eq!(db.applied_lsn(), lsn, "nothing written");
    db.inner.writer.lock().pending_reviewed.clear();
    admin.reject(&RecordRef::Id(id), None).unwrap();
    assert!(db.inner.writer.lock().pending_reviewed.is_empty());
    let e = admin.approve(&RecordRef::Id(id), None).unwrap_err();
    assert!(e.to_string().contains("not a review candidate"), "{e}");
}

/// An approval whose source another write in flight corrects is refused
/// (it would be applied after the correction and leave the record stale,
/// answered "approved"); once nothing is in flight it is decided as usual.
#[test]
fn an_approval_of_a_record_whose_source_a_write_in_flight_corrects_is_refused() {
    let (db, ticket, id) = ticket_and_candidate("/review-source");
    let admin = db.session(Principal::admin("t"));
    let lsn = db.applied_lsn();
    for pending in [true, false] {
        // as a correction (or a retraction) queued leaves it
        {
            let mut w = db.inner.writer.lock();
            if pending {
                w.pending_superseded.insert(ticket);
            } else {
                w.pending_retracted.insert(ticket);
            }
        }
        let e = admin.approve(&RecordRef::Id(id), None).unwrap_err();
        assert!(e.to_string().contains("its source"), "{e}");
        assert!(db.inner.writer.lock().pending_reviewed.is_empty());
        let mut w = db.inner.writer.lock();
        w.pending_superseded.clear();
        w.pending_retracted.clear();
    }
    assert_eq!(db.applied_lsn(), lsn, "nothing written");
    admin.approve(&RecordRef::Id(id), None).unwrap();
    // and at any depth: a candidate citing a fact drawn from the ticket, while
    // a correction of the ticket is in flight
    let summary = admin
        .append(vec![NewRecord::assertion(
            AssertionKind::Fact,
            "the ticket, summed up",
            vec![RecordRef::Id(ticket)],
        )])
        .unwrap()[0]
        .id;
    let deep = db
        .session(Principal::model("t", "bot"))
        .append(vec![policy("refund within a week", RecordRef::Id(summary))])
        .unwrap()[0]
        .id;
    db.inner.writer.lock().pending_superseded.insert(ticket);
    let e = admin.approve(&RecordRef::Id(deep), None).unwrap_err();
    assert!(
        e.to_string().contains(&format!("its source {summary}"))
            && e.to_string().contains(&format!("built on {ticket}")),
        "{e}"
    );
    db.inner.writer.lock().pending_superseded.clear();
    admin.approve(&RecordRef::Id(deep), None).unwrap();
}

/// An expiry of a version a correction in flight supersedes is refused
/// under the writer lock (it would end a version out of every current
/// read, and the correction would not inherit the end).
#[test]
fn an_expiry_of_a_version_a_correction_in_flight_supersedes_is_refused() {
    let db = mem_store("/expire-race");
    let admin = db.session(Principal::admin("t"));
    let id = admin
        .append(vec![NewRecord::event("fact", "t").with_external_id("f")])
        .unwrap()[0]
        .id;
    db.inner.writer.lock().pending_superseded.insert(id);
    let lsn = db.applied_lsn();
    let e = admin
        .expire(&RecordRef::Id(id), 4_102_444_800_000)
        .unwrap_err();
    assert!(e.to_string().contains("in flight"), "{e}");
    assert_eq!(db.applied_lsn(), lsn, "nothing written");
    db.inner.writer.lock().pending_superseded.clear();
    admin.expire(&RecordRef::Id(id), 4_102_444_800_000).unwrap();
    assert!(
        db.inner.writer.lock().pending_expired.is_empty(),
        "released"
    );
    // the other way round: a correction of a record an expiry in flight
    // ends would not inherit the end
    db.inner.writer.lock().pending_expired.insert(id, 1);
    let e = admin
        .append(vec![
            NewRecord::event("fact", "t, restated").superseding(RecordRef::Id(id)),
        ])
        .unwrap_err();
    assert!(e.to_string().contains("expiry of it is in flight"), "{e}");
    db.inner.writer.lock().pending_expired.clear();
}

/// The review queue of a tenant known only by its review rules (no
/// record, so no bitmap) is empty, whatever other tenants hold: it
/// panicked once another tenant had a candidate, a 500 that told one
/// tenant's admin about another's review queue.
#[test]
fn the_review_queue_of_a_tenant_without_records_is_empty() {
    let db = mem_store("/review-empty");
    let rules_only = db.session(Principal::admin("t5"));
    rules_only
        .set_review_rule(AssertionKind::Fact, WriterKind::User, true)
        .unwrap();
    db.session(Principal::admin("t1"))
        .append(vec![NewRecord::event("ticket", "t").with_external_id("t")])
        .unwrap();
    let c = db
        .session(Principal::model("t1", "bot"))
        .append(vec![policy(
            "always refund",
            RecordRef::External("t".into()),
        )])
        .unwrap();
    assert_eq!(c[0].status, Status::Candidate);
    assert!(rules_only.review_queue().unwrap().is_empty());
}

/// A decision, a retraction or an expiry of a record a deletion in flight
/// deletes (the deletion's whole set: a candidate built on the deleted
/// record too) is refused: applied after the deletion, it was answered
/// 200 for a record that is gone.
#[test]
fn an_operation_on_a_record_a_deletion_in_flight_deletes_is_refused() {
    let (db, ticket, cand) = ticket_and_candidate("/delete-race");
    let admin = db.session(Principal::admin("t"));
    // as hold_op leaves a deletion of the ticket while it is queued
    {
        let st = db.state();
        let ix = st.idx_in(st.tenant_sym("t").unwrap(), ticket).unwrap();
        let set = st.deletion_set_for(ix, None);
        assert_eq!(set.len(), 2, "the ticket and the candidate built on it");
        let mut w = db.inner.writer.lock();
        for i in set {
            w.pending_deleted.insert(st.meta(i).id, 1);
        }
    }
    let lsn = db.applied_lsn();
    let r = RecordRef::Id(cand);
    for e in [
        admin.approve(&r, None).unwrap_err(),
        admin.reject(&r, None).unwrap_err(),
        admin.retract(&r, None).unwrap_err(),
        admin
            .expire(&RecordRef::Id(ticket), 4_102_444_800_000)
            .unwrap_err(),
    ] {
        assert!(e.to_string().contains("deletion of it is in flight"), "{e}");
    }
    assert_eq!(db.applied_lsn(), lsn, "nothing written");
    db.inner.writer.lock().pending_deleted.clear();
    // a deletion registers its set while queued and releases it
    admin.delete(&RecordRef::Id(ticket), None).unwrap();
    assert!(db.inner.writer.lock().pending_deleted.is_empty());
    let e = admin.approve(&r, None).unwrap_err();
    assert!(e.to_string().contains("deleted"), "{e}");
}

/// A retraction of a superseded version is refused (it would change
/// nothing in force), and so is one of a version a correction in flight
/// supersedes (applied after the correction, it left the rule in force).
#[test]
fn a_retraction_of_a_superseded_version_is_refused() {
    let db = mem_store("/retract-superseded");
    let admin = db.session(Principal::admin("t"));
    admin
        .append(vec![NewRecord::event("ticket", "t").with_external_id("t")])
        .unwrap();
    let rule = |text: &str| policy(text, RecordRef::External("t".into()));
    let old = admin.append(vec![rule("refund in 7 days")]).unwrap()[0].id;
    let new = admin
        .append(vec![
            rule("refund in 14 days").superseding(RecordRef::Id(old)),
        ])
        .unwrap()[0]
        .id;
    let e = admin.retract(&RecordRef::Id(old), None).unwrap_err();
    assert!(e.to_string().contains("superseded version"), "{e}");
    db.inner.writer.lock().pending_superseded.insert(new);
    let e = admin.retract(&RecordRef::Id(new), None).unwrap_err();
    assert!(
        e.to_string().contains("correction of it is in flight"),
        "{e}"
    );
    db.inner.writer.lock().pending_superseded.clear();
    admin.retract(&RecordRef::Id(new), None).unwrap();
}

/// A write admitted after a review rule is queued follows that rule (it
/// applies after the rule, in log order): a model's policy written while a
/// rule tightening review is in flight was approved at once.
#[test]
fn a_write_follows_the_review_rules_queued_before_it() {
    let db = mem_store("/rules-in-flight");
    let admin = db.session(Principal::admin("t"));
    admin
        .set_review_rule(AssertionKind::Policy, WriterKind::Model, false)
        .unwrap();
    admin
        .append(vec![NewRecord::event("ticket", "t").with_external_id("t")])
        .unwrap();
    let bot = db.session(Principal::model("t", "bot"));
    let rule = |text: &str| policy(text, RecordRef::External("t".into()));
    assert_eq!(
        bot.append(vec![rule("refund at once")]).unwrap()[0].status,
        Status::Approved
    );
    // as hold_op leaves a rule making models' policies wait, while queued
    db.inner
        .writer
        .lock()
        .pending_rules
        .entry("t".into())
        .or_default()
        .insert(("policy".into(), "model".into()), (true, 1));
    assert_eq!(
        bot.append(vec![rule("refund in a week")]).unwrap()[0].status,
        Status::Candidate
    );
    db.inner.writer.lock().pending_rules.clear();
    // a rule set registers itself while queued and is gone once applied
    admin
        .set_review_rule(AssertionKind::Policy, WriterKind::Model, true)
        .unwrap();
    assert!(db.inner.writer.lock().pending_rules.is_empty());
    assert_eq!(
        bot.append(vec![rule("refund in a month")]).unwrap()[0].status,
        Status::Candidate
    );
}
