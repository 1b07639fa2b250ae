//! Lexical index: a Unicode-aware tokenizer ([`tokenize()`]) and a BM25
//! inverted index over dense `u32` document ids ([`bm25`]) whose scoring is
//! restricted to an eligibility bitmap.
//!
//! This module owns term extraction, postings, BM25 scoring and the index's
//! binary encoding. It must never score or return a document outside the
//! caller's eligibility bitmap, never let ineligible documents influence
//! scores, and never panic on stored bytes.

pub mod bm25;
pub mod snapshot;
pub mod terms;
pub mod tokenize;

pub use bm25::{
    Bm25Error, Bm25Index, Bm25Params, CorpusStats, LexicalStats, PreparedText, ScoredDoc,
};
pub use tokenize::{MAX_TOKEN_CHARS, TOKENIZER_VERSION, name_key, tokenize, tokens};
