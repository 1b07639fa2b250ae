//! A forced vector plan (`Options::vector_plan`, `engram bench ann
//! --plan`) changes cost and recall only: whichever plan runs, no hit is
//! another tenant's, deleted, or behind a label the reader does not hold,
//! and the manifest says which plan ran and that it was forced.

use std::collections::HashSet;
use std::sync::Arc;

use engram::retrieval::{Mode, RecallRequest};
use engram::storage::MemBackend;
use engram::{Engram, ManualClock, NewRecord, Options, PlanChoice, Principal, RecordId, RecordRef};

use crate::common::Rng;

const DIM: usize = 128;

fn vector(rng: &mut Rng) -> Vec<f32> {
    (0..DIM)
        .map(|_| rng.below(2000) as f32 / 1000.0 - 1.0)
        .collect()
}

#[test]
fn every_forced_plan_keeps_every_boundary_and_says_it_was_forced() {
    for (choice, strategy) in [
        (PlanChoice::Exact, "exact"),
        // 5,000 eligible of 6,000: eight times what ef 16 keeps
        (PlanChoice::Prefiltered, "prefiltered"),
        (PlanChoice::Walk, "hnsw"),
    ] {
        let mut rng = Rng(0xF0_4CED);
        let db = Engram::open(
            "/forced",
            Options {
                backend: Arc::new(MemBackend::new()),
                clock: Arc::new(ManualClock::new(1_700_000_000_000)),
                background_indexing: false,
                vector_plan: choice,
                ..Options::default()
            },
        )
        .unwrap();
        let (a, b) = (
            db.session(Principal::admin("a")),
            db.session(Principal::admin("b")),
        );
        a.grant(Some("reader"), Some("open"), None).unwrap();
        let (mut mine, mut restricted, mut deleted) =
            (HashSet::<RecordId>::new(), HashSet::new(), HashSet::new());
        for chunk in 0..10 {
            let recs: Vec<NewRecord> = (0..500)
                .map(|i| {
                    let mut r = NewRecord::event("note", format!("a {chunk} {i}"))
                        .with_embedding("m", vector(&mut rng));
                    r.access = vec![if i % 5 == 0 { "secret" } else { "open" }.into()];
                    r
                })
                .collect();
            for (i, got) in a.append(recs).unwrap().iter().enumerate() {
                mine.insert(got.id);
                if i % 5 == 0 {
                    restricted.insert(got.id);
                }
                if i % 50 == 1 {
                    deleted.insert(got.id);
                }
            }
        }
        for id in &deleted {
            a.delete(&RecordRef::Id(*id), Some("test")).unwrap();
        }
        let recs: Vec<NewRecord> = (0..1000)
            .map(|i| {
                NewRecord::event("note", format!("b {i}")).with_embedding("m", vector(&mut rng))
            })
            .collect();
        b.append(recs).unwrap();
        db.wait_indexed().unwrap();

        let reader = db.session(Principal::user("a", "reader"));
        for q in 0..10 {
            let (session, admin) = if q % 2 == 0 {
                (&a, true)
            } else {
                (&reader, false)
            };
            let r = session
                .recall(&RecallRequest {
                    vector: Some(vector(&mut rng).into()),
                    model: Some("m".into()),
                    mode: Mode::Vector,
                    k: 10,
                    ef: Some(16),
                    ..RecallRequest::default()
                })
                .unwrap();
            let plan = r.manifest.vector_plan.as_ref().expect("a vector plan");
            if admin || choice != PlanChoice::Prefiltered {
                // (the reader's 3,920 eligible are too few to prefilter)
                assert_eq!(plan.strategy, strategy, "{choice:?}, query {q}");
            }
            assert!(
                serde_json::to_string(&plan.reason)
                    .unwrap()
                    .contains("forced by the store's vector_plan option"),
                "{choice:?}: {}",
                plan.reason
            );
            assert!(!r.hits.is_empty(), "{choice:?}, query {q}");
            for h in &r.hits {
                assert!(mine.contains(&h.id), "{choice:?}: another tenant's record");
                assert!(!deleted.contains(&h.id), "{choice:?}: a deleted record");
                if !admin {
                    assert!(!restricted.contains(&h.id), "{choice:?}: a label not held");
                }
            }
        }
    }
}
