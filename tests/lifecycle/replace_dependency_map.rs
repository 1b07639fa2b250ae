//! Governance case 1: replace an outdated dependency map. Current analysis
//! uses the applicable version; the old map appears only when historical
//! context is asked for (as of an earlier time, or its history).

use crate::common::*;
use engram::retrieval::{Filters, RecallRequest};
use engram::{Body, ManualClock, NewRecord, Principal, RecordRef, RecordType, Status};

#[test]
fn the_current_map_answers_and_the_old_one_is_history() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    let v1 = NewRecord::event(
        "dependency_map",
        "checkout_api depends on catalog_api and inventory_api",
    )
    .with_external_id("depmap/checkout");
    s.append(vec![v1]).unwrap();
    // the graph form of v1
    s.append(vec![
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: "checkout_api".into(),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some("svc/checkout".into()),
            ..NewRecord::default()
        },
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: "catalog_api".into(),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some("svc/catalog".into()),
            ..NewRecord::default()
        },
        NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: "pricing_api".into(),
                aliases: vec![],
            },
            kind: "entity".into(),
            external_id: Some("svc/pricing".into()),
            ..NewRecord::default()
        },
        NewRecord {
            body: Body::Relation {
                subject: ext("svc/checkout"),
                predicate: "depends_on".into(),
                object: ext("svc/catalog"),
            },
            kind: "relation".into(),
            external_id: Some("dep/checkout-catalog".into()),
            ..NewRecord::default()
        },
    ])
    .unwrap();
    let t_before_v2 = engram::Clock::now_ms(&clock);
    clock.advance(24 * 60 * MINUTE);
    // v2 replaces v1; the old relation is replaced by a new one
    s.append(vec![
        NewRecord::event("dependency_map", "checkout_api depends on pricing_api and inventory_api; catalog_api was merged into pricing_api")
            .with_external_id("depmap/checkout")
            .superseding(ext("depmap/checkout")),
        NewRecord { body: Body::Relation { subject: ext("svc/checkout"), predicate: "depends_on".into(), object: ext("svc/pricing") }, kind: "relation".into(), external_id: Some("dep/checkout-catalog".into()), supersedes: Some(ext("dep/checkout-catalog")), ..NewRecord::default() },
    ])
    .unwrap();
    db.wait_indexed().unwrap();

    let now = s
        .recall(&RecallRequest::text("what does checkout_api depend on"))
        .unwrap();
    let texts: Vec<String> = now.hits.iter().filter_map(|h| h.text.clone()).collect();
    assert!(texts.iter().any(|t| t.contains("pricing_api")), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.contains("depends on catalog_api")),
        "old map presented as current: {texts:?}"
    );
    // the graph only walks the current relation
    let g = s
        .recall(&RecallRequest {
            filters: Filters {
                record_types: vec![RecordType::Relation],
                ..Filters::default()
            },
            ..RecallRequest::text("checkout_api")
        })
        .unwrap();
    assert_eq!(g.hits.len(), 1, "{:?}", g.hits);
    let rel = s.get(&RecordRef::Id(g.hits[0].id)).unwrap();
    assert_eq!(rel.object, Some(s.resolve(&ext("svc/pricing")).unwrap()));

    // historical context when asked for: as of before v2, v1 is what the store knew
    let then = s
        .recall(&RecallRequest {
            as_of: Some(t_before_v2),
            ..RecallRequest::text("what does checkout_api depend on")
        })
        .unwrap();
    let texts: Vec<String> = then.hits.iter().filter_map(|h| h.text.clone()).collect();
    assert!(
        texts.iter().any(|t| t.contains("depends on catalog_api")),
        "{texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("pricing_api and")),
        "{texts:?}"
    );
    let hist = s.history(&ext("depmap/checkout")).unwrap();
    assert_eq!(hist.len(), 2);
    assert_eq!(hist[0].status, Status::Superseded);
    db.close().unwrap();
}

/// An entity corrected after relations and assertions were written about
/// it stays one node of the graph: the graph walks from its current
/// version through the relations written about the older one, to the
/// current version of the entity at the other end, and still finds what
/// was said about it.
#[test]
fn a_corrected_entity_keeps_its_relations_and_claims() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let s = db.session(Principal::admin("acme-ops"));
    let entity = |ext: &str, name: &str| NewRecord {
        body: Body::Entity {
            entity_type: "service".into(),
            name: name.into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some(ext.into()),
        ..NewRecord::default()
    };
    s.append(vec![
        NewRecord::event("note", "billing_api calls ledger_api for every invoice")
            .with_external_id("ev/1"),
        entity("svc/billing", "billing_api"),
        entity("svc/ledger", "ledger_api"),
        NewRecord {
            body: Body::Relation {
                subject: ext("svc/billing"),
                predicate: "calls".into(),
                object: ext("svc/ledger"),
            },
            kind: "relation".into(),
            external_id: Some("rel/billing-ledger".into()),
            ..NewRecord::default()
        },
        NewRecord {
            body: Body::Assertion {
                kind: engram::AssertionKind::Fact,
                subject: Some(ext("svc/ledger")),
                predicate: Some("owned_by".into()),
                object: Some("payments team".into()),
            },
            kind: "fact".into(),
            text: Some("ledger_api is owned by the payments team".into()),
            sources: vec![ext("ev/1")],
            external_id: Some("fact/ledger-owner".into()),
            ..NewRecord::default()
        },
    ])
    .unwrap();
    clock.advance(MINUTE);
    // both entities corrected (their names fixed)
    s.append(vec![
        entity("svc/billing", "billing_service").superseding(ext("svc/billing")),
        entity("svc/ledger", "ledger_service").superseding(ext("svc/ledger")),
    ])
    .unwrap();
    let billing_now = s.resolve(&ext("svc/billing")).unwrap();
    let ledger_now = s.resolve(&ext("svc/ledger")).unwrap();
    let rel = s.resolve(&ext("rel/billing-ledger")).unwrap();
    let fact = s.resolve(&ext("fact/ledger-owner")).unwrap();
    // the records the graph retriever reached from `text`, as of `as_of`
    let by_graph = |text: &str, as_of: Option<i64>| -> Vec<engram::RecordId> {
        s.recall(&RecallRequest {
            as_of,
            filters: Filters {
                record_types: vec![
                    RecordType::Entity,
                    RecordType::Relation,
                    RecordType::Assertion,
                ],
                ..Filters::default()
            },
            ..RecallRequest::text(text)
        })
        .unwrap()
        .hits
        .iter()
        .filter(|h| h.found_by.iter().any(|(r, _)| *r == "graph"))
        .map(|h| h.id)
        .collect()
    };
    let now = by_graph("billing_service", None);
    for (what, id) in [
        ("the seed", billing_now),
        ("the relation about the older version", rel),
        ("the other end, as it stands now", ledger_now),
        ("what was said about the other end's older version", fact),
    ] {
        assert!(now.contains(&id), "{what} not reached: {now:?}");
    }
    // as of before the corrections, the walk follows the versions current
    // then (the current ones did not exist yet)
    let then = by_graph("billing_api", Some(T0));
    let first = |e: &str| s.history(&ext(e)).unwrap()[0].id;
    for (what, id) in [
        ("the seed", first("svc/billing")),
        ("the relation", rel),
        ("the other end as it stood then", first("svc/ledger")),
        ("what was said about it", fact),
    ] {
        assert!(
            then.contains(&id),
            "as of then, {what} not reached: {then:?}"
        );
    }
    db.close().unwrap();
}
