//! Tenant isolation through graph expansion, summaries and provenance: the
//! same entity names in two tenants never connect; sources from another
//! tenant are refused at write time; trace never crosses tenants.

use crate::common::*;
use engram::retrieval::{Filters, RecallRequest};
use engram::{Body, EngineError, ManualClock, NewRecord, Principal, RecordRef, RecordType};

fn entity(name: &str, ext: &str) -> NewRecord {
    NewRecord {
        body: Body::Entity {
            entity_type: "service".into(),
            name: name.into(),
            aliases: vec![],
        },
        kind: "entity".into(),
        external_id: Some(ext.into()),
        ..NewRecord::default()
    }
}

fn relation(s: &str, p: &str, o: &str, e: &str) -> NewRecord {
    NewRecord {
        body: Body::Relation {
            subject: ext(s),
            predicate: p.into(),
            object: ext(o),
        },
        kind: "relation".into(),
        external_id: Some(e.into()),
        ..NewRecord::default()
    }
}

#[test]
fn graphs_and_lineage_stay_inside_their_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let db = open(dir.path(), &clock);
    let a = db.session(Principal::admin("tenant-a"));
    let b = db.session(Principal::admin("tenant-b"));
    for (s, secret) in [(&a, "a-secret-dependency"), (&b, "b-secret-dependency")] {
        s.append(vec![
            entity("checkout_api", "svc/checkout"),
            entity(secret, "svc/secret"),
        ])
        .unwrap();
        s.append(vec![relation(
            "svc/checkout",
            "depends_on",
            "svc/secret",
            "rel/1",
        )])
        .unwrap();
    }
    db.wait_indexed().unwrap();
    let r = a
        .recall(&RecallRequest {
            filters: Filters {
                record_types: vec![RecordType::Entity, RecordType::Relation],
                ..Filters::default()
            },
            ..RecallRequest::text("checkout_api dependencies")
        })
        .unwrap();
    let graph = r
        .manifest
        .retrievers
        .iter()
        .find(|x| x.retriever == "graph")
        .expect("graph expansion ran");
    assert!(!graph.candidates.is_empty());
    for c in &graph.candidates {
        let rec = a
            .get(&RecordRef::Id(c.id))
            .expect("graph candidate readable in tenant-a");
        assert_eq!(rec.tenant, "tenant-a");
        assert_ne!(rec.name.as_deref(), Some("b-secret-dependency"));
    }
    // provenance cannot point across tenants
    let b_event = b
        .append(vec![NewRecord::event("note", "tenant b private note")])
        .unwrap()[0]
        .id;
    let lsn = db.applied_lsn();
    let e = a
        .append(vec![NewRecord {
            body: Body::Summary {
                generator: "g".into(),
            },
            kind: "summary".into(),
            text: Some("sum".into()),
            sources: vec![RecordRef::Id(b_event)],
            ..NewRecord::default()
        }])
        .unwrap_err();
    assert!(
        matches!(e, EngineError::InvalidInput { ref field, .. } if field == "sources"),
        "{e}"
    );
    assert_eq!(db.applied_lsn(), lsn);
    assert!(matches!(
        a.trace(&RecordRef::Id(b_event)),
        Err(EngineError::NotFound { .. })
    ));
    db.close().unwrap();
}
