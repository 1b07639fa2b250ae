//! # engram-engine
//!
//! The engine: Engram's data model, the write path (validation, admission,
//! identity), the in-memory derived state (dense record table, eligibility
//! bitmaps, lineage), the vector and lexical indexes, retrieval with
//! manifests, and the lifecycle operations.
//!
//! It owns every rule about what a record *means*; the storage crate below it
//! only moves bytes. It must never do file I/O except through
//! `engram_storage`, and never let a record of one tenant reach a session of
//! another.

// Narrowing `as` casts must be shown lossless (see `engram_storage::cast`).
#![cfg_attr(
    not(test),
    warn(clippy::cast_possible_truncation, clippy::cast_possible_wrap)
)]

pub mod admin;
pub mod authz;
pub mod canonical;
pub mod checkpoint;
pub mod codec;
pub mod context;
pub mod db;
pub mod embed;
#[cfg(feature = "minilm")]
pub mod embed_minilm;
pub mod error;
pub mod id;
pub(crate) mod layout;
pub mod lexical;
pub mod lifecycle;
pub mod maintenance;
pub mod model;
pub mod principal;
pub mod repair;
pub mod retrieval;
pub mod settings;
pub mod split;
pub mod state;
pub mod store_dir;
pub mod time;
pub mod trace;
pub mod vector;

pub use db::{AppendOutcome, AppendResult, Engram, ListFilter, OpenReport, Options, Session};
pub use embed::{Embedder, HashEmbedder};
pub use error::{EngineError, Result};
pub use id::RecordId;
pub use model::{
    AssertionKind, Body, Derivation, Embedding, NewRecord, Record, RecordRef, RecordType, Scope,
    Status, Writer, WriterKind,
};
pub use principal::Principal;
pub use retrieval::plan::PlanChoice;
pub use retrieval::{Filters, Hit, Manifest, Mode, RecallRequest, RecallResponse};
pub use time::{Clock, ManualClock, SystemClock};
pub use vector::precision::GraphPrecision;
