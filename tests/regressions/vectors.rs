//! Client vectors and the store's embedder share a namespace of model ids:
//! a tenant sending vectors under the embedder's model id must never make
//! a derived vector fail to apply (which would stop every open of the
//! store, for every tenant).

use std::sync::Arc;

use engram::{EngineError, Engram, HashEmbedder, NewRecord, Options, Principal};

fn with_embedder(embedder: Option<HashEmbedder>) -> Options {
    Options {
        embedder: embedder.map(|e| Arc::new(e) as Arc<dyn engram::embed::Embedder>),
        ..Options::default()
    }
}

#[test]
fn a_client_vector_under_the_embedders_model_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let emb = HashEmbedder::new(64);
    let model = engram::embed::Embedder::model_id(&emb).to_string();
    let db = Engram::open(tmp.path().join("s"), with_embedder(Some(emb))).unwrap();
    let evil = db.session(Principal::admin("evil"));
    let e = evil
        .append(vec![
            NewRecord::event("note", "x").with_embedding(model.clone(), vec![1.0, 0.0, 0.0]),
        ])
        .unwrap_err();
    assert!(matches!(e, EngineError::InvalidInput { .. }), "{e}");
    assert!(e.to_string().contains("embedder"), "{e}");
    // nothing was stored, and the tenant's text still gets derived vectors
    evil.append(vec![NewRecord::event("note", "boom")]).unwrap();
    db.close().unwrap();
    Engram::open(
        tmp.path().join("s"),
        with_embedder(Some(HashEmbedder::new(64))),
    )
    .unwrap()
    .close()
    .unwrap();
}

/// Vectors sent under a model id before an embedder of that id was chosen
/// keep their space; the tenant's later text gets no derived vector there,
/// and the store keeps opening for everyone.
#[test]
fn an_embedder_chosen_after_client_vectors_of_its_model_leaves_them_be() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let model = engram::embed::Embedder::model_id(&HashEmbedder::new(64)).to_string();
    let db = Engram::open(&dir, with_embedder(None)).unwrap();
    db.session(Principal::admin("evil"))
        .append(vec![
            NewRecord::event("note", "x").with_embedding(model.clone(), vec![1.0, 0.0, 0.0]),
        ])
        .unwrap();
    db.close().unwrap();
    let db = Engram::open(&dir, with_embedder(Some(HashEmbedder::new(64)))).unwrap();
    db.session(Principal::admin("evil"))
        .append(vec![NewRecord::event("note", "boom")])
        .unwrap();
    db.session(Principal::admin("good"))
        .append(vec![NewRecord::event("note", "innocent tenant data")])
        .unwrap();
    db.close().unwrap();
    // replayed from the log, not only from the checkpoint
    std::fs::remove_dir_all(dir.join("derived")).unwrap();
    let db = Engram::open(&dir, with_embedder(Some(HashEmbedder::new(64)))).unwrap();
    let hits = db
        .session(Principal::admin("good"))
        .recall(&engram::RecallRequest::text("innocent"))
        .unwrap()
        .hits;
    assert_eq!(hits.len(), 1);
    assert!(db.verify().unwrap().problems.is_empty());
    db.close().unwrap();
}

/// A record sent again with vectors of other dimensions is a duplicate
/// that stores none of them, as with vectors of the same dimensions.
#[test]
fn a_resent_record_with_vectors_of_other_dimensions_is_a_duplicate() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Engram::open(tmp.path().join("s"), with_embedder(None)).unwrap();
    let s = db.session(Principal::admin("t"));
    let line = |v: Vec<f32>| {
        NewRecord::event("note", "three")
            .with_external_id("k3")
            .with_embedding("m", v)
    };
    s.append(vec![line(vec![1.0, 1.0, 0.0])]).unwrap();
    let again = s.append(vec![line(vec![1.0, 0.0])]).unwrap();
    assert_eq!(again[0].outcome, engram::AppendOutcome::Duplicate);
    // a new record with them is still refused
    let e = s
        .append(vec![
            NewRecord::event("note", "four").with_embedding("m", vec![1.0, 0.0]),
        ])
        .unwrap_err();
    assert!(matches!(e, EngineError::DimensionMismatch { .. }), "{e}");
    db.close().unwrap();
}
