//! Graph walks over int8 codes keep every boundary a full-precision walk
//! keeps: a space large enough for the planner to walk its graph, walked
//! over codes (re-ranked in full precision), never returns a deleted
//! record, a record with a label the principal does not hold, or another
//! tenant's record; and its hits come in exact-distance order.

use std::collections::HashSet;
use std::sync::Arc;

use engram::retrieval::{Mode, RecallRequest};
use engram::storage::MemBackend;
use engram::{
    Engram, GraphPrecision, ManualClock, NewRecord, Options, Principal, RecordId, RecordRef,
};

use crate::common::{Rng, append_labelled};

const DIM: usize = 96;
/// Enough vectors that walking the graph costs less than scanning them.
const VECTORS: usize = 12_000;

fn vector(rng: &mut Rng) -> Vec<f32> {
    // Clustered, so that neighbours are close and codes must route well.
    let centre = rng.below(8) as f32;
    (0..DIM)
        .map(|j| {
            let c = if (j as u64 + centre as u64).is_multiple_of(8) {
                1.0
            } else {
                0.0
            };
            c + rng.below(1000) as f32 / 4000.0
        })
        .collect()
}

#[test]
fn int8_walks_never_cross_a_boundary_and_rank_by_exact_distance() {
    let mut rng = Rng(0x1A78_0001);
    let db = Engram::open(
        "/int8",
        Options {
            backend: Arc::new(MemBackend::new()),
            clock: Arc::new(ManualClock::new(1_700_000_000_000)),
            graph_precision: GraphPrecision::Int8,
            background_indexing: false,
            ..Options::default()
        },
    )
    .unwrap();
    let (a, b) = (
        db.session(Principal::admin("a")),
        db.session(Principal::admin("b")),
    );
    a.grant(Some("reader"), Some("open"), None).unwrap();
    let (ids, restricted) = append_labelled(&a, VECTORS / 500, || vector(&mut rng));
    let tenant_a: HashSet<RecordId> = ids.iter().copied().collect();
    let mut deleted: HashSet<RecordId> = HashSet::new();
    // Another tenant's vectors, close to tenant a's.
    let recs: Vec<NewRecord> = (0..1000)
        .map(|i| NewRecord::event("note", format!("b {i}")).with_embedding("m", vector(&mut rng)))
        .collect();
    b.append(recs).unwrap();
    for _ in 0..200 {
        let id = ids[rng.below(ids.len() as u64) as usize];
        if deleted.insert(id) {
            a.delete(&RecordRef::Id(id), Some("test")).unwrap();
        }
    }
    db.wait_indexed().unwrap();

    let reader = db.session(Principal::user("a", "reader"));
    let (mut walks, mut reader_walks) = (0, 0);
    for q in 0..60 {
        let (session, admin) = if q % 2 == 0 {
            (&a, true)
        } else {
            (&reader, false)
        };
        let query = vector(&mut rng);
        let req = RecallRequest {
            vector: Some(query.into()),
            model: Some("m".into()),
            mode: Mode::Vector,
            k: 10,
            ef: Some(16),
            ..RecallRequest::default()
        };
        let r = session.recall(&req).unwrap();
        let plan = r.manifest.vector_plan.as_ref().expect("a vector plan");
        if plan.strategy == "hnsw" {
            walks += 1;
            reader_walks += usize::from(!admin);
        }
        assert_eq!(r.hits.len(), 10, "query {q}");
        for h in &r.hits {
            assert!(
                tenant_a.contains(&h.id),
                "query {q}: another tenant's record"
            );
            assert!(!deleted.contains(&h.id), "query {q}: a deleted record");
            if !admin {
                assert!(!restricted.contains(&h.id), "query {q}: a label not held");
            }
        }
        let scores: Vec<f64> = r.hits.iter().map(|h| h.score).collect();
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]),
            "query {q}: hits in exact-distance order: {scores:?}"
        );
    }
    assert!(
        walks > 0 && reader_walks > 0,
        "the planner walked the graph {walks} times ({reader_walks} for the reader): \
         the test must cover int8 walks with and without a label filter"
    );
}
