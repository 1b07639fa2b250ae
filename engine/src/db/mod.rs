//! The store: opening (recovery, replay, catch-up of derived state), the
//! write path, sessions, point reads, checkpoints and shutdown, one job
//! per file:
//!
//! - `mod.rs` (this file): the handle ([`Engram`]), its options and shared
//!   state, sessions, the store's file layout;
//! - `open.rs`: open and recovery (log, checkpoint or replay, vector
//!   spaces, an interrupted restore's log swap);
//! - `write.rs`: the write path (`Session::append_run`), with
//!   `resolve.rs` for its resolution stage;
//! - `access.rs`: resolving references inside the session's tenant, and
//!   what the session may read and do;
//! - `read.rs`: point reads and record views;
//! - `workers.rs`: the background indexer and checkpointer, checkpoints
//!   and close.
//!
//! Write path, for one atomic batch:
//! 1. validate every record (no lock held);
//! 2. under the write lock: resolve references (sources, supersedes,
//!    subjects) inside the session's tenant, enforce external-id rules,
//!    decide admission status, mint ids and the transaction time, encode
//!    frames and queue them on the log;
//! 3. the log's writer thread makes the group durable, then the commit hook
//!    applies the frames to the in-memory state in LSN order; only then is
//!    the batch acknowledged.
//!
//! A batch is all or nothing: any invalid record rejects the whole batch
//! with its position and field, before anything is queued.
//!
//! This module must never apply anything that is not in the log, and never
//! acknowledge before the commit hook has run.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engram_storage::backend::LockGuard;
use engram_storage::log::{
    CommittedFrame, LogOptions, PendingFrame, RecoveryOptions, RecoveryReport,
};
use engram_storage::{Backend, FrameLoc, FsBackend, SegmentLog, StorageError};
use parking_lot::{Mutex, RwLock};

use crate::canonical;
use crate::codec::{self, StoredDerivation, StoredRecord, StoredVector};
use crate::embed::Embedder;
use crate::error::{EngineError, Result};
use crate::id::{IdGenerator, RecordId};
pub(crate) use crate::layout;
use crate::lexical::{Bm25Index, Bm25Params};
use crate::model::{
    AssertionKind, Body, DEFAULT_RETENTION_CLASS, EmbeddingInfo, NewRecord, Record, RecordRef,
    RecordType, SCHEMA_VERSION, Scope, Status, Writer, WriterKind, limits,
};
use crate::principal::Principal;
use crate::state::{Idx, State};
use crate::time::{Clock, SystemClock, format_rfc3339};
use crate::vector::distance::Metric;
use crate::vector::hnsw::HnswParams;
use crate::vector::precision::GraphPrecision;
use crate::vector::space::VectorSpaces;

mod access;
mod admit;
mod open;
mod read;
mod resolve;
#[cfg(test)]
mod tests;
mod workers;
mod write;

pub(crate) use crate::state::{apply_frame, apply_frame_prepared, prepare_frame};
pub(crate) use admit::decision_refusal;
pub(crate) use open::{Unfinished, durable_evidence, lost_log_ops};
pub use read::{HISTORY_BYTES_MAX, ListFilter};
pub(crate) use write::reference_phrase;

/// How a store is opened.
#[derive(Clone)]
pub struct Options {
    /// The file system (default: the real one).
    pub backend: Arc<dyn Backend>,
    /// The transaction-time clock.
    pub clock: Arc<dyn Clock>,
    /// Segment log tunables.
    pub log: LogOptions,
    /// Embedder for derived vectors and query texts (None: clients send vectors).
    pub embedder: Option<Arc<dyn Embedder>>,
    /// Graph parameters of new vector spaces.
    pub hnsw: HnswParams,
    /// Metric of every vector space.
    pub metric: Metric,
    /// What graph walks read: full-precision vectors or int8 codes
    /// re-ranked in full precision (default: chosen per space, see
    /// [`GraphPrecision`]).
    pub graph_precision: GraphPrecision,
    /// Which plan vector retrievals use (default: the planner's choice by
    /// estimated cost). Forcing one is for benchmarks that measure the
    /// plans against each other (`engram bench ann --plan`): results stay
    /// correct and eligible either way, only their cost and (for the walk
    /// and the prefilter) their recall change.
    pub vector_plan: crate::retrieval::plan::PlanChoice,
    /// Index vectors on a background thread (off the write path). When false,
    /// pending vectors are only indexed by [`Engram::wait_indexed`].
    pub background_indexing: bool,
    /// Seed for deterministic ids (tests); None mixes in process randomness.
    pub id_seed: Option<u64>,
    /// Create the store when the directory is missing or empty (default
    /// true, as for an embedded database; the CLI creates stores only in
    /// `init`, `ingest` and `demo`). A directory holding other files is
    /// never used.
    pub create_if_missing: bool,
    /// Open without changing a byte on disk: the log is not recovered in
    /// place (a torn tail is reported, not cut), derived state is rebuilt
    /// in memory if needed, and every write fails with `ReadOnly`. Takes a
    /// shared lock, so it excludes a writer but not other readers.
    pub read_only: bool,
    /// Write a state checkpoint in the background once this many frames
    /// were applied since the last one (and at least
    /// `checkpoint_min_interval` has passed). 0: only at `close` and on
    /// [`Engram::checkpoint`].
    pub checkpoint_after_frames: u64,
    /// The least time between two background checkpoints (each rewrites
    /// the whole state, so a busy store must not write them back to back).
    pub checkpoint_min_interval: Duration,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("log", &self.log)
            .field(
                "embedder",
                &self.embedder.as_ref().map(|e| e.model_id().to_string()),
            )
            .field("hnsw", &self.hnsw)
            .field("metric", &self.metric)
            .field("graph_precision", &self.graph_precision)
            .field("vector_plan", &self.vector_plan)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: Arc::new(FsBackend),
            clock: Arc::new(SystemClock),
            log: LogOptions::default(),
            embedder: None,
            hnsw: HnswParams::default(),
            metric: Metric::Cosine,
            graph_precision: GraphPrecision::Auto,
            vector_plan: crate::retrieval::plan::PlanChoice::Auto,
            background_indexing: true,
            id_seed: None,
            create_if_missing: true,
            read_only: false,
            checkpoint_after_frames: 100_000,
            checkpoint_min_interval: Duration::from_secs(30),
        }
    }
}

/// Outcome of one record of an append.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AppendResult {
    /// The record's id.
    pub id: RecordId,
    /// Its external id.
    pub external_id: Option<String>,
    /// Whether it was stored now or already existed with the same content.
    pub outcome: AppendOutcome,
    /// Admission status.
    pub status: Status,
    /// LSN of its frame (of the existing record for duplicates).
    pub lsn: u64,
    /// What the engine decided beyond what the record said: labels a
    /// correction inherited, or access an admin lowered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Whether an append stored something.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AppendOutcome {
    /// Stored.
    Created,
    /// Same external id and same content already stored: nothing written.
    Duplicate,
}

/// State of the write path shared by concurrent appenders.
pub(crate) struct WriterState {
    pub(crate) ids: IdGenerator,
    last_ingested_at: i64,
    /// (tenant, external id) -> (id, content hash) of batches in flight.
    /// (tenant, external id) -> (id, content hash, writer principal) of a
    /// queued record not yet applied.
    pending_ext: HashMap<(String, String), (RecordId, [u8; 32], String)>,
    /// Records being superseded by batches in flight.
    pending_superseded: HashSet<RecordId>,
    /// Records being retracted by operations in flight: a correction of
    /// one, applied after the retraction, would make its withdrawn text a
    /// superseded version any reader may select.
    pending_retracted: HashSet<RecordId>,
    /// Records a review decision in flight approves or rejects.
    pending_reviewed: HashSet<RecordId>,
    /// Records expiries in flight end (how many of them): a correction of
    /// one, resolved before the expiry applies, would not inherit its end.
    pending_expired: HashMap<RecordId, usize>,
    /// Records deletions in flight delete (how many of them), each
    /// deletion's whole set: a decision, retraction or expiry of one,
    /// queued after the deletion, would be answered as taken on a record
    /// deleted when it applies.
    pending_deleted: HashMap<RecordId, usize>,
    /// Review rules in flight, by tenant: (assertion kind, writer kind) ->
    /// (the latest queued value, how many are queued). A write admitted
    /// after a rule is queued follows it, as it follows the log's order.
    pending_rules: HashMap<String, admit::RulesInFlight>,
    /// Vector spaces being created by batches in flight.
    pending_dims: HashMap<(String, String), usize>,
}

pub(crate) struct Inner {
    dir: PathBuf,
    backend: Arc<dyn Backend>,
    lock: Mutex<Option<LockGuard>>,
    log: SegmentLog,
    state: Arc<RwLock<State>>,
    writer: Mutex<WriterState>,
    clock: Arc<dyn Clock>,
    opts: Options,
    recovery: RecoveryReport,
    /// A durable frame that could not be applied to memory: the state no
    /// longer follows the log, so every later call fails until reopen.
    apply_error: Arc<Mutex<Option<String>>>,
    /// The last background checkpoint's failure (cleared by the next
    /// success; the log stays the record, so nothing is lost, but the next
    /// open replays more).
    checkpoint_error: Mutex<Option<String>>,
    /// LSN of the last state checkpoint written or loaded.
    checkpoint_lsn: AtomicU64,
    /// One checkpoint at a time.
    checkpointing: Mutex<()>,
    /// The indexer thread's failure (unindexed vectors are still searched
    /// exactly, so results stay complete).
    indexer_error: Arc<Mutex<Option<String>>>,
    indexer: Mutex<Option<JoinHandle<()>>>,
    indexer_tx: Mutex<Option<crossbeam_channel::Sender<()>>>,
    /// Callers of `wait_indexed` at work: the indexer thread steps aside
    /// for them (they plan on every core; it would take the batch from
    /// them a node at a time).
    bulk_indexing: Arc<std::sync::atomic::AtomicUsize>,
    checkpointer_tx: Mutex<Option<crossbeam_channel::Sender<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    /// Held shared by appends, exclusively by maintenance (compaction, restore).
    maintenance: RwLock<()>,
    /// Held by a grant, a revocation or a legal hold from the check that
    /// refuses one changing nothing until it is applied: two sent together
    /// were both taken (two ledger lines) where one after the other the
    /// second is refused. Such operations are rare. Held across their
    /// write (the writer lock, `maintenance`, the wait until applied) and
    /// the ledger's update; nothing takes it while holding any of those.
    access_ops: Mutex<()>,
    /// Serialises reconciling `ledger.jsonl` with the log: two deletions
    /// reconciling at once would interleave their appends. Holds what
    /// reconciling found damaged in the file since open (reported by
    /// `verify`).
    ledger_sync: Mutex<Vec<String>>,
}

/// An open store. Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct Engram {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engram")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

/// What opening the store found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// What log recovery did.
    pub log: RecoveryReport,
    /// Frames replayed into memory.
    pub frames_replayed: u64,
    /// LSN of the state checkpoint the open started from (0: none, the
    /// whole log was replayed).
    pub checkpoint_lsn: u64,
    /// Why a state checkpoint found on disk was not used (the whole log was
    /// replayed instead).
    pub checkpoint_discarded: Option<String>,
    /// Whether the lexical index was rebuilt (snapshot missing or stale).
    pub lexical_rebuilt: bool,
    /// Vector spaces rebuilt from the log.
    pub vectors_rebuilt: Vec<String>,
    /// A restore's last step, found pending and finished by this open.
    pub restore_resumed: Option<crate::maintenance::RestoreReport>,
    /// A read-only open found a restore's last step pending (the next
    /// writable open finishes it).
    pub restore_pending: bool,
    /// Operations that recovery cut from the log's tail although the
    /// ledger file proves them acknowledged (each line is written only
    /// after its operation is durable): applied again by this open, so a
    /// damaged last frame never undoes a deletion or revocation.
    pub ledger_reapplied: Option<crate::maintenance::RestoreReport>,
    /// A read-only open found `ledger.jsonl` lacking this many operations
    /// of the log (written in memory only; the next writable open writes
    /// them to the file).
    pub ledger_lines_missing: usize,
}

/// The LSN the lexical snapshot of the store in `dir` covers (0 when it is
/// missing or unreadable).
pub(crate) fn lexical_snapshot_lsn(backend: &dyn Backend, dir: &Path) -> u64 {
    crate::lexical::snapshot::lsn(backend, &layout::lexical(dir))
}

fn backend_has_restore_pending(db: &Engram) -> bool {
    db.inner
        .backend
        .exists(&layout::restore_pending(&db.inner.dir))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::Storage(StorageError::io(path, e))
}

impl Engram {
    /// A session acting as `principal`.
    pub fn session(&self, principal: Principal) -> Session {
        Session {
            db: self.clone(),
            principal,
        }
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What log recovery did when this store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// The last LSN applied to the in-memory state.
    pub fn applied_lsn(&self) -> u64 {
        self.inner.state.read().applied_lsn
    }

    /// The in-memory state, for reading: with [`Engram::log`] and the
    /// accessors below, the one way the modules above `db` (retrieval,
    /// lifecycle, trace, context, admin, maintenance) reach the store;
    /// `Inner` stays private to `db`.
    pub(crate) fn state(&self) -> parking_lot::RwLockReadGuard<'_, State> {
        self.inner.state.read()
    }

    /// The segment log (reads, scans, stats, verification, backup copies).
    pub(crate) fn log(&self) -> &SegmentLog {
        &self.inner.log
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Whether this handle was closed (by [`Engram::close`], or by online
    /// compaction's swap, which hands out a new one).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The backend every byte goes through.
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Held shared while writing (appends, operations, a backup's copy),
    /// exclusively by maintenance.
    pub(crate) fn writes_pause(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.inner.maintenance.read()
    }

    /// Held while maintenance replaces the store's files under an open
    /// handle (online compaction): appends wait until it is dropped.
    pub(crate) fn writes_exclusive(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.inner.maintenance.write()
    }

    /// Serialises reconciling `ledger.jsonl` with the log; holds the
    /// damage found in it since open.
    pub(crate) fn ledger_sync(&self) -> parking_lot::MutexGuard<'_, Vec<String>> {
        self.inner.ledger_sync.lock()
    }

    /// LSN of the last state checkpoint written or loaded.
    pub(crate) fn checkpoint_lsn(&self) -> u64 {
        self.inner.checkpoint_lsn.load(Ordering::Acquire)
    }

    /// The last background checkpoint's failure, if any.
    pub(crate) fn checkpoint_problem(&self) -> Option<String> {
        self.inner.checkpoint_error.lock().clone()
    }

    /// Why the background indexer stopped, if it did.
    pub(crate) fn indexer_problem(&self) -> Option<String> {
        self.inner.indexer_error.lock().clone()
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if let Some(e) = self.inner.apply_error.lock().clone() {
            return Err(EngineError::Background {
                worker: "apply (a durable log frame could not be applied to memory)".into(),
                detail: e,
            });
        }
        Ok(())
    }

    /// The engine clock's reading: the present of reads (the default
    /// `valid_at`, retention). Transaction time is this made
    /// non-decreasing ([`Engram::mint_locked`]); reads do not take that
    /// floor, so a clock once ahead (a write stamped then) does not move
    /// the present, and with it retention, ahead for good.
    pub(crate) fn now(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The failure that stopped applying the log, if any.
    pub(crate) fn apply_error(&self) -> Option<String> {
        self.inner.apply_error.lock().clone()
    }

    /// Serialises access and hold operations from their check to their
    /// application (see `Inner::access_ops`).
    pub(crate) fn serial_access_op(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.inner.access_ops.lock()
    }

    /// A fresh id to label one ingest run (pass it to [`Session::append_run`]).
    pub fn new_run_id(&self) -> RecordId {
        self.mint().0
    }

    /// Counters of the segment log.
    pub fn log_stats(&self) -> engram_storage::LogStats {
        self.inner.log.stats()
    }

    /// The engine clock's reading (ms since the epoch): what `now` means in
    /// requests.
    pub fn now_ms(&self) -> i64 {
        self.now()
    }

    /// Whether tenant `name` has anything in this store (a record, a
    /// grant, a setting): a tool reading as an operator can say that a
    /// tenant it was given holds nothing, a likely typo. Never asked on a
    /// tenant's behalf: a server's tenant comes from its key.
    pub fn has_tenant(&self, name: &str) -> bool {
        self.state().tenant(name).is_some()
    }

    /// Model id of the built-in embedder this store was opened with.
    pub fn embedder_model(&self) -> Option<String> {
        self.inner
            .opts
            .embedder
            .as_ref()
            .map(|e| e.model_id().to_string())
    }

    /// Vectors waiting for the background indexer (not counting those of
    /// graph batches not yet complete, which wait for their batch; see
    /// [`crate::admin::StoreGauges::unbatched_vectors`]).
    pub fn pending_vectors(&self) -> usize {
        self.inner.state.read().vectors.indexable()
    }

    /// Mints an id and a transaction time (monotonic).
    pub(crate) fn mint(&self) -> (RecordId, i64) {
        self.mint_locked(&mut self.inner.writer.lock())
    }

    /// [`Engram::mint`], under the writer lock the caller holds.
    pub(crate) fn mint_locked(&self, w: &mut WriterState) -> (RecordId, i64) {
        let now = self
            .now()
            .max(w.last_ingested_at)
            .max(self.inner.state.read().last_ingested_at);
        w.last_ingested_at = now;
        (w.ids.mint(now), now)
    }
}

/// A handle bound to one principal. Every read and write goes through one,
/// and it can only ever see its principal's tenant.
#[derive(Clone, Debug)]
pub struct Session {
    pub(crate) db: Engram,
    pub(crate) principal: Principal,
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
