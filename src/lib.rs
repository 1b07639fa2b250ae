//! # Engram
//!
//! A durable memory store for AI agents: an append-only event log as the
//! system of record, semantic records (entities, relations, assertions,
//! summaries) with provenance back to the events they came from, and
//! retrieval that applies tenant, access, scope, deletion, retention and time
//! filters *before* any ranking.
//!
//! This crate is the embedded API; it re-exports [`engram_engine`].
//!
//! ```no_run
//! use engram::{Engram, NewRecord, Options, Principal, RecordRef, Scope};
//!
//! let db = Engram::open("./engram-data", Options::default())?;
//! let me = db.session(Principal::user("tenant_42", "user_18"));
//! let ids = me.append(vec![
//!     NewRecord::event("user_message", "Use the revised retention policy.")
//!         .with_external_id("conv_993/17")
//!         .with_scope(Scope { user: Some("user_18".into()), conversation: Some("conv_993".into()), ..Scope::default() }),
//! ])?;
//! let rec = me.get(&RecordRef::Id(ids[0].id))?;
//! assert_eq!(rec.text.as_deref(), Some("Use the revised retention policy."));
//! db.close()?;
//! # Ok::<(), engram::EngineError>(())
//! ```
//!
//! Layers (dependencies point one way): `engram-server` (CLI, later the HTTP
//! server) -> `engram-query` (text forms of requests) -> `engram-engine`
//! (model, indexes, lifecycle) -> `engram-storage` (segment log, catalog,
//! files). See `docs/architecture.md`.

pub use engram_engine::*;

/// Text forms of requests (JSONL ingest lines, recall requests, eval cases).
pub use engram_query as query;
/// The storage layer (segment log, catalog, backends), for tools and tests.
pub use engram_storage as storage;
