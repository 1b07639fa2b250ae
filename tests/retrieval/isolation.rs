//! Forbidden-hit rate is 0: thousands of random queries by random
//! principals, with random filters, after random deletions, revocations and
//! corrections, never return a record from another tenant, with a label the
//! principal does not hold, deleted, superseded, or outside the filters.
//! Also through summaries: a summary of a restricted record is restricted.
//! Seeded; the seed is printed on failure (ENGRAM_TEST_SEED replays it).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use engram::retrieval::{Filters, Mode, RecallRequest};
use engram::storage::MemBackend;
use engram::{
    AssertionKind, Body, EngineError, Engram, HashEmbedder, ManualClock, NewRecord, Options,
    Principal, RecordId, RecordRef, Scope,
};

use crate::common::Rng;

#[derive(Clone, Debug)]
struct Model {
    tenant: String,
    labels: BTreeSet<String>,
    user: String,
    kind: String,
    gone: bool, // deleted or superseded
}

const TENANTS: [&str; 3] = ["t0", "t1", "t2"];
const LABELS: [&str; 3] = ["red", "green", "blue"];
const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];
const KINDS: [&str; 3] = ["note", "message", "tool_result"];
const WORDS: [&str; 12] = [
    "checkout",
    "catalog",
    "billing",
    "email",
    "latency",
    "policy",
    "retention",
    "invoice",
    "deploy",
    "rollback",
    "customer",
    "incident",
];

fn text(rng: &mut Rng) -> String {
    (0..6)
        .map(|_| *rng.pick(&WORDS))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn no_query_ever_returns_a_forbidden_record() {
    let seed: u64 = std::env::var("ENGRAM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xDEC0_DE00_1234);
    let queries: usize = std::env::var("ENGRAM_ISOLATION_QUERIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let mut rng = Rng(seed | 1);
    let clock = ManualClock::new(1_700_000_000_000);
    let db = Engram::open(
        "/iso",
        Options {
            backend: Arc::new(MemBackend::new()),
            clock: Arc::new(clock.clone()),
            embedder: Some(Arc::new(HashEmbedder::default())),
            ..Options::default()
        },
    )
    .unwrap();
    let mut model: HashMap<RecordId, Model> = HashMap::new();
    // principals per tenant with random grants
    let mut grants: HashMap<(String, String), BTreeSet<String>> = HashMap::new();
    for t in TENANTS {
        let admin = db.session(Principal::admin(t));
        for p in ["alice", "bob", "carol"] {
            let mut g = BTreeSet::new();
            for l in LABELS {
                if rng.below(2) == 0 {
                    admin.grant(Some(p), Some(l), None).unwrap();
                    g.insert(l.to_string());
                }
            }
            grants.insert((t.to_string(), p.to_string()), g);
        }
    }
    // a small entity graph per tenant, same names everywhere, some edges restricted
    for t in TENANTS {
        let s = db.session(Principal::admin(t));
        for name in ["checkout", "catalog", "billing"] {
            let r = NewRecord {
                body: Body::Entity {
                    entity_type: "service".into(),
                    name: name.into(),
                    aliases: vec![],
                },
                kind: "entity".into(),
                external_id: Some(format!("svc/{name}")),
                ..NewRecord::default()
            };
            let id = s.append(vec![r]).unwrap()[0].id;
            model.insert(
                id,
                Model {
                    tenant: t.into(),
                    labels: BTreeSet::new(),
                    user: String::new(),
                    kind: "entity".into(),
                    gone: false,
                },
            );
        }
        for (a, b) in [("checkout", "catalog"), ("catalog", "billing")] {
            let labels: BTreeSet<String> = LABELS
                .iter()
                .filter(|_| rng.below(2) == 0)
                .map(|s| s.to_string())
                .collect();
            let mut r = NewRecord {
                body: Body::Relation {
                    subject: RecordRef::External(format!("svc/{a}")),
                    predicate: "depends_on".into(),
                    object: RecordRef::External(format!("svc/{b}")),
                },
                kind: "relation".into(),
                ..NewRecord::default()
            };
            r.access = labels.iter().cloned().collect();
            let id = s.append(vec![r]).unwrap()[0].id;
            model.insert(
                id,
                Model {
                    tenant: t.into(),
                    labels,
                    user: String::new(),
                    kind: "relation".into(),
                    gone: false,
                },
            );
        }
    }
    // records: events with random labels, some with vectors of one model
    for round in 0..6 {
        for t in TENANTS {
            let s = db.session(Principal::admin(t));
            let mut batch = Vec::new();
            let mut metas = Vec::new();
            for _ in 0..40 {
                let labels: BTreeSet<String> = LABELS
                    .iter()
                    .filter(|_| rng.below(4) == 0)
                    .map(|s| s.to_string())
                    .collect();
                let user = rng.pick(&USERS).to_string();
                let kind = rng.pick(&KINDS).to_string();
                let v: Vec<f32> = (0..8)
                    .map(|_| rng.below(1000) as f32 / 500.0 - 1.0)
                    .collect();
                let mut r = NewRecord::event(kind.clone(), text(&mut rng))
                    .with_scope(Scope {
                        user: Some(user.clone()),
                        ..Scope::default()
                    })
                    .with_embedding("m8", v);
                r.access = labels.iter().cloned().collect();
                batch.push(r);
                metas.push(Model {
                    tenant: t.into(),
                    labels,
                    user,
                    kind,
                    gone: false,
                });
            }
            let res = s.append(batch).unwrap();
            for (r, m) in res.iter().zip(metas) {
                model.insert(r.id, m);
            }
            // summaries over random sources inherit their labels
            let ids: Vec<RecordId> = res.iter().map(|r| r.id).collect();
            let srcs: Vec<RecordId> = (0..3).map(|_| *rng.pick(&ids)).collect();
            let mut labels = BTreeSet::new();
            for id in &srcs {
                labels.extend(model[id].labels.iter().cloned());
            }
            let sum = NewRecord {
                body: Body::Summary {
                    generator: "test@1".into(),
                },
                kind: "summary".into(),
                text: Some(format!("summary {round}: {}", text(&mut rng))),
                sources: srcs.iter().map(|i| RecordRef::Id(*i)).collect(),
                scope: Scope {
                    user: Some("u0".into()),
                    ..Scope::default()
                },
                ..NewRecord::default()
            };
            let r = s.append(vec![sum]).unwrap();
            model.insert(
                r[0].id,
                Model {
                    tenant: t.into(),
                    labels,
                    user: "u0".into(),
                    kind: "summary".into(),
                    gone: false,
                },
            );
            // a fact derived from a random source
            let src = *rng.pick(&ids);
            let fact = NewRecord::assertion(
                AssertionKind::Fact,
                text(&mut rng),
                vec![RecordRef::Id(src)],
            )
            .with_scope(Scope {
                user: Some("u1".into()),
                ..Scope::default()
            });
            let r = s.append(vec![fact]).unwrap();
            model.insert(
                r[0].id,
                Model {
                    tenant: t.into(),
                    labels: model[&src].labels.clone(),
                    user: "u1".into(),
                    kind: "fact".into(),
                    gone: false,
                },
            );
            // lifecycle: delete a record (and its derivatives), correct one
            let victim = *rng.pick(&ids);
            let res = s.delete(&RecordRef::Id(victim), Some("test")).unwrap();
            for id in res.affected {
                if let Some(m) = model.get_mut(&id) {
                    m.gone = true;
                }
            }
            let old = *rng.pick(&ids);
            if !model[&old].gone {
                let m = model[&old].clone();
                let mut c = NewRecord::event(m.kind.clone(), text(&mut rng))
                    .with_scope(Scope {
                        user: Some(m.user.clone()),
                        ..Scope::default()
                    })
                    .superseding(RecordRef::Id(old));
                c.access = m.labels.iter().cloned().collect();
                let r = s.append(vec![c]).unwrap();
                model.get_mut(&old).unwrap().gone = true;
                // derivatives of a superseded record go stale
                let mut newm = m.clone();
                newm.gone = false;
                model.insert(r[0].id, newm);
            }
            // a revocation from one principal
            let p = *rng.pick(&["alice", "bob", "carol"]);
            let l = *rng.pick(&LABELS);
            // (one it does not hold is refused, and changes nothing)
            let done = s.revoke(Some(p), Some(l), None);
            let held = grants
                .get_mut(&(t.to_string(), p.to_string()))
                .unwrap()
                .remove(l);
            if held {
                done.unwrap();
            } else {
                assert!(
                    matches!(done, Err(EngineError::InvalidInput { .. })),
                    "{done:?}"
                );
            }
        }
    }
    // stale derivatives: anything derived from a gone record is gone too (the
    // oracle recomputes it from the store's own view: status is checked below)
    db.wait_indexed().unwrap();
    let mut checked_hits = 0u64;
    let mut graph_hits = 0u64;
    for q in 0..queries {
        let t = rng.pick(&TENANTS).to_string();
        let (session, held): (_, Option<BTreeSet<String>>) = match rng.below(4) {
            0 => (db.session(Principal::admin(t.clone())), None),
            _ => {
                let p = rng.pick(&["alice", "bob", "carol", "mallory"]).to_string();
                let g = grants
                    .get(&(t.clone(), p.clone()))
                    .cloned()
                    .unwrap_or_default();
                (db.session(Principal::user(t.clone(), p)), Some(g))
            }
        };
        let mut filters = Filters::default();
        if rng.below(2) == 0 {
            filters.users = vec![rng.pick(&USERS).to_string()];
        }
        if rng.below(3) == 0 {
            filters.kinds = vec![rng.pick(&KINDS).to_string(), "summary".into()];
        }
        let mode = *rng.pick(&[Mode::Hybrid, Mode::Vector, Mode::Lexical]);
        let mut qtext = text(&mut rng);
        if rng.below(3) == 0 {
            qtext.push_str(" checkout catalog");
        }
        let mut req = RecallRequest {
            mode,
            k: 1 + rng.below(30) as usize,
            filters: filters.clone(),
            ..RecallRequest::text(qtext)
        };
        if rng.below(3) == 0 {
            // let graph expansion win some rankings too
            req.weights.graph = 4.0;
        }
        if mode == Mode::Vector && rng.below(2) == 0 {
            req.vector = Some(
                (0..8)
                    .map(|_| rng.below(1000) as f32 / 500.0 - 1.0)
                    .collect(),
            );
            req.model = Some("m8".into());
        }
        let r = session
            .recall(&req)
            .unwrap_or_else(|e| panic!("seed {seed} query {q}: {e}"));
        for h in &r.hits {
            checked_hits += 1;
            let m = model
                .get(&h.id)
                .unwrap_or_else(|| panic!("seed {seed} query {q}: unknown record {}", h.id));
            let ctx = format!(
                "seed {seed} query {q}: hit {} {m:?} for {} {req:?}",
                h.id, t
            );
            assert_eq!(m.tenant, t, "cross-tenant hit: {ctx}");
            assert!(!m.gone, "deleted or superseded hit: {ctx}");
            if let Some(held) = &held {
                assert!(m.labels.is_subset(held), "label not held: {ctx}");
            }
            if !filters.users.is_empty() {
                assert!(
                    filters.users.contains(&m.user),
                    "user filter violated: {ctx}"
                );
            }
            if h.found_by.iter().any(|(r, _)| *r == "graph") {
                graph_hits += 1;
            }
            if !filters.kinds.is_empty() {
                assert!(
                    filters.kinds.contains(&m.kind),
                    "kind filter violated: {ctx}"
                );
            }
            assert!(
                ["active", "approved"].contains(&h.status),
                "status {}: {ctx}",
                h.status
            );
        }
    }
    assert!(
        checked_hits > (queries as u64),
        "the queries returned too little to prove anything ({checked_hits} hits)"
    );
    assert!(
        graph_hits > 0,
        "graph expansion never contributed: the test would not cover it"
    );
    eprintln!(
        "{queries} queries, {checked_hits} hits checked ({graph_hits} via graph expansion), 0 forbidden"
    );
}
