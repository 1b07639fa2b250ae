//! Store settings that must stay the same across opens: which built-in
//! embedder (if any) derives vectors. Kept in `settings.snap` (a
//! checksummed snapshot whose body is JSON) so every tool opening the store
//! agrees on its derived vector spaces.
//!
//! A missing file means defaults; a damaged one is reported (delete it to
//! fall back to defaults: the derived vectors are then rebuilt for whatever
//! embedder is chosen next). The engine itself never reads this file: the
//! tools that open a store pass the embedder in `Options`.
//!
//! This module must never hold anything that is not reconstructible.

use std::path::Path;

use engram_storage::Backend;
use engram_storage::files::{read_snapshot, write_snapshot};
use serde::{Deserialize, Serialize};

use crate::embed::{Embedder, HashEmbedder};
use crate::error::{EngineError, Result};

const MAGIC: [u8; 8] = *b"ENGRSETT";
const VERSION: u32 = 1;

/// Persisted settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSettings {
    /// Built-in embedder: `hash` or `hash-<dims>`; None for client vectors only.
    pub embedder: Option<String>,
}

fn path(dir: &Path) -> std::path::PathBuf {
    dir.join("settings.snap")
}

/// Reads the settings of the store in `dir` (None if never written).
pub fn load(backend: &dyn Backend, dir: &Path) -> Result<Option<StoreSettings>> {
    match read_snapshot(backend, &path(dir), MAGIC, VERSION)? {
        None => Ok(None),
        Some(s) => serde_json::from_slice(s.body.as_slice())
            .map(Some)
            .map_err(|e| EngineError::Corrupt {
                what: "settings.snap".into(),
                detail: e.to_string(),
            }),
    }
}

/// Writes the settings.
pub fn save(backend: &dyn Backend, dir: &Path, s: &StoreSettings) -> Result<()> {
    backend
        .create_dir_all(dir)
        .map_err(|e| EngineError::Storage(engram_storage::StorageError::io(dir, e)))?;
    let body = serde_json::to_vec_pretty(s).expect("settings serialize");
    Ok(write_snapshot(
        backend,
        &path(dir),
        MAGIC,
        VERSION,
        0,
        &body,
    )?)
}

/// The embedder named by a setting (`hash`, `hash-<dims>`), or an error
/// listing the choices.
pub fn embedder_by_name(name: &str) -> Result<Option<std::sync::Arc<dyn Embedder>>> {
    match name {
        "none" => Ok(None),
        "hash" => Ok(Some(std::sync::Arc::new(HashEmbedder::default()))),
        n if n.starts_with("hash-") => {
            let dims: usize = n[5..].parse().map_err(|_| {
                EngineError::invalid(
                    "embedder",
                    format!("'{n}': expected hash-<dims>, e.g. hash-384"),
                )
            })?;
            if !(8..=crate::model::limits::VECTOR_DIM_MAX).contains(&dims) {
                return Err(EngineError::invalid(
                    "embedder",
                    "dims must be within 8..=4096",
                ));
            }
            Ok(Some(std::sync::Arc::new(HashEmbedder::new(dims))))
        }
        n if n.starts_with("minilm:") => minilm(std::path::Path::new(&n["minilm:".len()..])),
        other => Err(EngineError::invalid(
            "embedder",
            format!("unknown embedder '{other}' (choices: none, hash, hash-<dims>, minilm:DIR)"),
        )),
    }
}

#[cfg(feature = "minilm")]
fn minilm(dir: &std::path::Path) -> Result<Option<std::sync::Arc<dyn Embedder>>> {
    Ok(Some(std::sync::Arc::new(
        crate::embed_minilm::MiniLm::load(dir)?,
    )))
}

#[cfg(not(feature = "minilm"))]
fn minilm(dir: &std::path::Path) -> Result<Option<std::sync::Arc<dyn Embedder>>> {
    Err(EngineError::invalid(
        "embedder",
        format!(
            "minilm:{}: this build has no MiniLM embedder; build with \
             `cargo build --release --features minilm`",
            dir.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedder_names_are_checked_and_errors_say_what_to_do() {
        assert!(embedder_by_name("none").unwrap().is_none());
        assert_eq!(embedder_by_name("hash-64").unwrap().unwrap().dim(), 64);
        let e = embedder_by_name("word2vec").unwrap_err().to_string();
        assert!(e.contains("minilm:DIR"), "{e}");
        let e = embedder_by_name("minilm:/nonexistent/model")
            .unwrap_err()
            .to_string();
        if cfg!(feature = "minilm") {
            assert!(e.contains("config.json"), "{e}");
        } else {
            assert!(e.contains("--features minilm"), "{e}");
        }
    }
}
