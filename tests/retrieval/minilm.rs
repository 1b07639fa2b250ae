//! The MiniLM embedder (feature `minilm`) against the reference vectors
//! shipped with locomo-dev: every turn's text embedded here must have a
//! cosine of at least 0.999 with the vector the reference implementation
//! computed for it. Needs the model directory in `ENGRAM_MINILM_DIR` (see
//! `engine/src/embed_minilm.rs` for where to get it) and
//! `../shared/data/locomo-dev`; skips, saying so, without them.
//!
//! `cargo test --release --features minilm --test retrieval minilm -- --nocapture`
//! also prints the embedding throughput.

use std::path::PathBuf;

use engram::embed::Embedder;
use engram::embed_minilm::{MODEL_ID, MiniLm};

fn inputs() -> Option<(PathBuf, PathBuf)> {
    let model = std::env::var_os("ENGRAM_MINILM_DIR").map(PathBuf::from);
    let events = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/locomo-dev/events.jsonl"
    ));
    match model {
        Some(m) if m.join("model.safetensors").exists() && events.exists() => Some((m, events)),
        _ => {
            eprintln!(
                "SKIPPED: set ENGRAM_MINILM_DIR to a MiniLM model directory and keep \
                 ../shared/data/locomo-dev to check the embedder"
            );
            None
        }
    }
}

#[test]
fn minilm_matches_the_reference_vectors_of_locomo_dev() {
    let Some((model, events)) = inputs() else {
        return;
    };
    let m = MiniLm::load(&model).unwrap();
    assert_eq!((m.model_id(), m.dim()), (MODEL_ID, 384));
    let text = std::fs::read_to_string(events).unwrap();
    let mut pairs = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let t = v["text"].as_str().unwrap().to_string();
        let r: Vec<f32> = v["embedding"]["vector"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        pairs.push((t, r));
    }
    let started = std::time::Instant::now();
    let mut worst = (1.0f32, String::new());
    for (t, r) in &pairs {
        let v = m.embed(t);
        let cos: f32 = v.iter().zip(r).map(|(a, b)| a * b).sum::<f32>()
            / (r.iter().map(|x| x * x).sum::<f32>().sqrt());
        if cos < worst.0 {
            worst = (cos, t.clone());
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "minilm: {} texts in {secs:.2} s ({:.0} texts/s, one thread); worst cosine {:.5}",
        pairs.len(),
        pairs.len() as f64 / secs,
        worst.0
    );
    assert!(worst.0 >= 0.999, "cosine {} for {:?}", worst.0, worst.1);
}

#[test]
fn a_missing_or_broken_model_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let e = MiniLm::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("config.json") && e.contains("minilm:"), "{e}");
    std::fs::write(dir.path().join("config.json"), "{").unwrap();
    let e = MiniLm::load(dir.path()).unwrap_err().to_string();
    assert!(e.contains("config.json"), "{e}");
}
