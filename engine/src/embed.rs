//! Embedders: turning text into vectors inside the engine.
//!
//! Engram does not need a model: clients may send vectors with a model id.
//! When an [`Embedder`] is configured, the engine also computes vectors for
//! records that have text and no vector of that model, and for query texts.
//! Such vectors are *derived state*: they are not written to the log and are
//! recomputed on rebuild, so an embedder must be deterministic.
//!
//! [`HashEmbedder`] is the built-in one. **It is lexical, not semantic**: it
//! hashes words, word pairs and character trigrams of the tokenizer's output
//! into a fixed number of signed buckets (feature hashing) and L2-normalises
//! the result. Texts that share words and word fragments get similar
//! vectors; synonyms and paraphrases do not. It exists so the demo and the
//! tests run offline with no model download; use a real embedding model for
//! semantic recall.
//!
//! This module must never call the network.

use crate::lexical::tokenize;

/// Computes vectors from text.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Model id: the vector space the vectors belong to.
    fn model_id(&self) -> &str;
    /// Dimensions of every vector.
    fn dim(&self) -> usize;
    /// The vector for `text` (deterministic).
    fn embed(&self, text: &str) -> Vec<f32>;
}

/// Default dimension of [`HashEmbedder`].
pub const HASH_EMBEDDER_DIM: usize = 256;

/// The built-in lexical hashing embedder (see the module doc).
#[derive(Clone, Debug)]
pub struct HashEmbedder {
    dim: usize,
    model_id: String,
}

impl HashEmbedder {
    /// A hashing embedder of `dim` dimensions.
    pub fn new(dim: usize) -> Self {
        HashEmbedder {
            dim: dim.max(8),
            model_id: format!("engram-lexical-hash-{}@1", dim.max(8)),
        }
    }
}

impl Default for HashEmbedder {
    fn default() -> Self {
        Self::new(HASH_EMBEDDER_DIM)
    }
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // final avalanche so low bits are well mixed
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        let mut add = |h: u64, w: f32| {
            let bucket = engram_storage::cast::usize_from(h % self.dim as u64);
            let sign = if h >> 63 == 0 { 1.0 } else { -1.0 };
            v[bucket] += sign * w;
        };
        let toks = tokenize::tokens(text);
        let mut chars: Vec<char> = Vec::with_capacity(66);
        let mut buf = [0u8; 12];
        for (i, t) in toks.iter().enumerate() {
            add(fnv1a(&[b"w", t.as_bytes()]), 1.0);
            if let Some(next) = toks.get(i + 1) {
                add(fnv1a(&[b"b", t.as_bytes(), next.as_bytes()]), 0.5);
            }
            chars.clear();
            chars.push('^');
            chars.extend(t.chars());
            chars.push('$');
            if chars.len() > 4 {
                for w in chars.windows(3) {
                    let mut n = 0;
                    for c in w {
                        n += c.encode_utf8(&mut buf[n..]).len();
                    }
                    add(fnv1a(&[b"c", &buf[..n]]), 0.25);
                }
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            for x in &mut v {
                *x /= norm;
            }
        } else {
            // Empty text: a fixed unit vector, so the vector is valid.
            v[0] = 1.0;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cos(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn deterministic_unit_vectors_that_reflect_shared_words() {
        let e = HashEmbedder::default();
        let a = e.embed("checkout service waits on catalog_api");
        assert_eq!(a, e.embed("checkout service waits on catalog_api"));
        assert_eq!(a.len(), HASH_EMBEDDER_DIM);
        assert!((cos(&a, &a) - 1.0).abs() < 1e-5);
        let near = e.embed("the catalog_api health check failed for checkout");
        let far = e.embed("user prefers concise answers in Italian");
        assert!(cos(&a, &near) > cos(&a, &far) + 0.1);
        assert!((cos(&e.embed(""), &e.embed("")) - 1.0).abs() < 1e-5);
    }
}
