//! A forced vector plan (`Options::vector_plan`, `engram bench ann
//! --plan`) changes cost and recall only: whichever plan runs, no hit is
//! another tenant's, deleted, or behind a label the reader does not hold,
//! and the manifest says which plan ran and that it was forced, or that
//! the forced plan did not apply and the exact scan ran instead.

use std::collections::HashSet;
use std::sync::Arc;

use engram::retrieval::{Mode, RecallRequest};
use engram::storage::MemBackend;
use engram::{
    Engram, ManualClock, NewRecord, Options, PlanChoice, Principal, RecallResponse, RecordId,
    RecordRef, Session,
};

use crate::common::{Rng, append_labelled};

/// The prefilter needs 128 dimensions or more.
const DIM: usize = 128;

fn vector(rng: &mut Rng) -> Vec<f32> {
    (0..DIM)
        .map(|_| rng.below(2000) as f32 / 1000.0 - 1.0)
        .collect()
}

fn recall(s: &Session, query: &[f32], ef: usize) -> RecallResponse {
    s.recall(&RecallRequest {
        vector: Some(query.to_vec().into()),
        model: Some("m".into()),
        mode: Mode::Vector,
        k: 10,
        ef: Some(ef),
        ..RecallRequest::default()
    })
    .unwrap()
}

#[test]
fn every_forced_plan_keeps_every_boundary_and_says_it_was_forced() {
    for (choice, strategy) in [
        (PlanChoice::Exact, "exact"),
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
        // Tenant a's space: 5,000 vectors, 1,000 labelled secret, 101 of
        // the open ones deleted. Eligible: 4,899 for the admin, 3,899 for
        // the reader; at ef 10 the prefilter keeps 320, and eight times
        // that is fewer than either, so it applies to both.
        let mut kept = Vec::new();
        let (ids, secret) = append_labelled(&a, 10, || {
            let v = vector(&mut rng);
            kept.push(v.clone());
            v
        });
        let mine: HashSet<RecordId> = ids.iter().copied().collect();
        // (and 4,993: past 1,024 the graph takes batches of 64, so slots
        // 4,992 to 4,999 wait outside it and are scanned exactly)
        let deleted: Vec<usize> = (0..ids.len())
            .filter(|i| i % 50 == 1 || *i == 4_993)
            .collect();
        for &i in &deleted {
            a.delete(&RecordRef::Id(ids[i]), Some("test")).unwrap();
        }
        let gone: HashSet<RecordId> = deleted.iter().map(|&i| ids[i]).collect();
        let theirs: Vec<Vec<f32>> = (0..1000).map(|_| vector(&mut rng)).collect();
        b.append(
            theirs
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    NewRecord::event("note", format!("b {i}")).with_embedding("m", v.clone())
                })
                .collect(),
        )
        .unwrap();
        db.wait_indexed().unwrap();

        // Each principal is asked with the very vectors of what it must
        // not see (a deleted record's, a secret one's, another tenant's),
        // so a leak would rank first, and with fresh ones.
        let reader = db.session(Principal::user("a", "reader"));
        let secret_at: Vec<usize> = (0..ids.len()).filter(|i| i % 5 == 0).collect();
        for q in 0..12 {
            let query = match q % 4 {
                0 => kept[deleted[q * 7]].clone(),
                1 => kept[secret_at[q * 31]].clone(),
                2 => theirs[q * 13].clone(),
                _ => vector(&mut rng),
            };
            for (session, admin) in [(&a, true), (&reader, false)] {
                let r = recall(session, &query, 10);
                let plan = r.manifest.vector_plan.as_ref().expect("a vector plan");
                assert_eq!(
                    plan.strategy, strategy,
                    "{choice:?}, query {q}, admin {admin}"
                );
                assert!(
                    serde_json::to_string(&plan.reason)
                        .unwrap()
                        .ends_with("forced by the store's vector_plan option\""),
                    "{choice:?}: {}",
                    plan.reason
                );
                assert_eq!(r.hits.len(), 10, "{choice:?}, query {q}, admin {admin}");
                for h in &r.hits {
                    assert!(mine.contains(&h.id), "{choice:?}: another tenant's record");
                    assert!(!gone.contains(&h.id), "{choice:?}: a deleted record");
                    if !admin {
                        assert!(!secret.contains(&h.id), "{choice:?}: a label not held");
                    }
                }
            }
        }

        // The vectors outside the graph are searched too, and keep their
        // boundaries: a secret one (4,995) is the admin's first hit and
        // not the reader's; a deleted one (4,993) is nobody's.
        for (session, admin) in [(&a, true), (&reader, false)] {
            let r = recall(session, &kept[4_995], 10);
            if choice == PlanChoice::Walk {
                // 4,992 to 4,999 less the deleted 4,993, less for the
                // reader the secret 4,995
                let plan = r.manifest.vector_plan.as_ref().expect("a vector plan");
                assert_eq!(plan.unindexed_scanned, 7 - u64::from(!admin));
            }
            assert_eq!(
                r.hits[0].id == ids[4_995],
                admin,
                "{choice:?}, admin {admin}"
            );
            assert_eq!(
                r.hits.iter().any(|h| h.id == ids[4_995]),
                admin,
                "{choice:?}, admin {admin}"
            );
            let r = recall(session, &kept[4_993], 10);
            assert!(r.hits.iter().all(|h| h.id != ids[4_993]), "{choice:?}");
        }

        // At ef 200 the prefilter would keep 6,400, more than is eligible:
        // a forced prefilter runs as the exact scan and says so.
        let r = recall(&reader, &kept[1], 200);
        let plan = r.manifest.vector_plan.as_ref().expect("a vector plan");
        if choice == PlanChoice::Prefiltered {
            assert_eq!(plan.strategy, "exact");
            assert!(
                plan.reason.to_string().ends_with(
                    "; the store's vector_plan option asks for prefiltered, which does not apply here"
                ),
                "{}",
                plan.reason
            );
        } else {
            assert_eq!(plan.strategy, strategy);
        }
        assert!(
            r.hits
                .iter()
                .all(|h| mine.contains(&h.id) && !gone.contains(&h.id) && !secret.contains(&h.id))
        );
    }
}
