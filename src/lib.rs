//! # Engram
//!
//! A durable memory store for AI agents, embedded in your process: an
//! append-only event log as the system of record, semantic records
//! (entities, relations, assertions, summaries) with provenance back to the
//! events they came from, and retrieval that applies tenant, access, scope,
//! deletion, retention and time filters *before* any ranking.
//!
//! ```no_run
//! use engram::{Engram, NewRecord, Options, Principal, RecordRef, Scope};
//! use engram::retrieval::RecallRequest;
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
//! let hits = me.recall(&RecallRequest::text("retention policy"))?.hits;
//! assert_eq!(hits[0].id, ids[0].id);
//! db.close()?;
//! # Ok::<(), engram::EngineError>(())
//! ```
//!
//! ## The model
//!
//! - An [`Engram`] is one open store (a directory; one writable handle per
//!   directory, enforced by a lock file). A [`Session`] acts for one
//!   [`Principal`] of one tenant: **tenant and principal come from the
//!   session, never from record content**, and nothing of another tenant is
//!   ever returned, counted or distinguishable from a missing record.
//! - Every write is a [`NewRecord`] appended in an atomic batch
//!   ([`Session::append`]): events (messages, tool results, observations),
//!   and semantic records whose `sources` name the records they were
//!   derived from. Corrections, expiries, deletions and revocations are
//!   records of the log too ([`lifecycle`]).
//! - Reads: point reads ([`Session::get`], history), retrieval
//!   ([`Session::recall`] with a [`RecallRequest`], or the query language
//!   in [`query::lang`]), lineage ([`trace`]), and working-memory assembly
//!   for one model call ([`context`]). Every retrieval can explain itself:
//!   its [`Manifest`] lists the eligibility steps with counts, the
//!   candidates of each retriever, the fusion and the cost.
//!
//! ## Guarantees
//!
//! - **Durable when acknowledged.** `append` returns after the batch is on
//!   disk (`fdatasync`) and applied; a crash at any moment loses no
//!   acknowledged write. Concurrent appenders share one fsync.
//! - **Eligibility before ranking.** No retriever scores a record the
//!   session may not see (tenant, access labels, status, retention,
//!   validity, time, filters).
//! - **Deleted means gone.** A deletion reaches every version and every
//!   derivative at once; [`Engram::compact`] then removes the bytes from
//!   every file.
//! - **Derived state is disposable.** Indexes and the state checkpoint are
//!   rebuilt from the log when missing, stale or damaged.
//!
//! ## Limits
//!
//! Named in [`model::limits`]: text and data 1 MiB per record, 10,000
//! records per batch, 4,096 vector dimensions, `k` ≤ 1,000, about 4 billion
//! records per store. Input beyond a limit is refused with an
//! [`EngineError`] naming the item and field; nothing of the batch is
//! written.
//!
//! ## Non-goals
//!
//! Engram does not call language models: summaries, entities and
//! assertions are written by the application (with their sources), and the
//! built-in [`HashEmbedder`] is lexical feature hashing for offline use,
//! not a semantic model (bring vectors with [`NewRecord::with_embedding`] or
//! your own [`Embedder`]). It is not a distributed database: one process
//! owns a store; other processes reach it through `engram serve`.
//!
//! Layers (dependencies point one way): `engram-server` (CLI, HTTP server)
//! -> `engram-query` (text forms of requests, the query language) ->
//! `engram-engine` (model, indexes, lifecycle) -> `engram-storage` (segment
//! log, snapshot files, backends). See `docs/architecture.md`.

pub use engram_engine::{
    AppendOutcome, AppendResult, AssertionKind, Body, Clock, Derivation, Embedder, Embedding,
    EngineError, Engram, Filters, GraphPrecision, HashEmbedder, Hit, ListFilter, Manifest,
    ManualClock, Mode, NewRecord, OpenReport, Options, PlanChoice, Principal, RecallRequest,
    RecallResponse, Record, RecordId, RecordRef, RecordType, Result, Scope, Session, Status,
    SystemClock, Writer, WriterKind,
};

/// Store statistics and verification reports.
pub use engram_engine::admin;
/// Who may do what: the authorization matrix (docs/security.md).
pub use engram_engine::authz;
/// Working-memory assembly for one model call.
pub use engram_engine::context;
/// Embedders: the [`embed::Embedder`] trait and the built-in lexical
/// hashing embedder.
pub use engram_engine::embed;
/// The all-MiniLM-L6-v2 embedder, computed in process (feature `minilm`).
#[cfg(feature = "minilm")]
pub use engram_engine::embed_minilm;
/// Lifecycle operations: expire, correct, delete, retract, review, grant
/// and revoke, retention, holds.
pub use engram_engine::lifecycle;
/// Backup, restore, compaction, rebuild, the review queue and the ledger.
pub use engram_engine::maintenance;
/// Records as written and read, and the limits they are checked against.
pub use engram_engine::model;
/// Inspecting and cutting a damaged log (`engram repair`).
pub use engram_engine::repair;
/// Retrieval requests, hits and manifests.
pub use engram_engine::retrieval;
/// Clocks and RFC 3339 times.
pub use engram_engine::time;
/// Lineage: from a record up to its events and down to its derivatives.
pub use engram_engine::trace;

/// Text forms of requests (JSONL ingest lines, recall requests, eval
/// cases) and the query language.
pub use engram_query as query;
/// The storage layer (segment log, snapshot files, backends), for tools
/// and tests (e.g. [`storage::MemBackend`] with simulated power cuts).
pub use engram_storage as storage;
