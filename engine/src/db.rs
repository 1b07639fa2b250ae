//! The store: opening (recovery, replay, catch-up of derived state), the
//! write path, sessions, point reads, checkpoints and shutdown.
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
use engram_storage::files::{read_snapshot, write_snapshot};
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
use crate::vector::space::VectorSpaces;

const LEXICAL_MAGIC: [u8; 8] = *b"ENGRBM25";
const LEXICAL_SNAPSHOT_VERSION: u32 = 1;

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
    pending_ext: HashMap<(String, String), (RecordId, [u8; 32])>,
    /// Records being superseded by batches in flight.
    pending_superseded: HashSet<RecordId>,
    /// Vector spaces being created by batches in flight.
    pending_dims: HashMap<(String, String), usize>,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) backend: Arc<dyn Backend>,
    lock: Mutex<Option<LockGuard>>,
    pub(crate) log: SegmentLog,
    pub(crate) state: Arc<RwLock<State>>,
    pub(crate) writer: Mutex<WriterState>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) opts: Options,
    recovery: RecoveryReport,
    /// A durable frame that could not be applied to memory: the state no
    /// longer follows the log, so every later call fails until reopen.
    apply_error: Arc<Mutex<Option<String>>>,
    /// The last background checkpoint's failure (cleared by the next
    /// success; the log stays the record, so nothing is lost, but the next
    /// open replays more).
    pub(crate) checkpoint_error: Mutex<Option<String>>,
    /// LSN of the last state checkpoint written or loaded.
    pub(crate) checkpoint_lsn: AtomicU64,
    /// One checkpoint at a time.
    checkpointing: Mutex<()>,
    /// The indexer thread's failure (unindexed vectors are still searched
    /// exactly, so results stay complete).
    pub(crate) indexer_error: Arc<Mutex<Option<String>>>,
    indexer: Mutex<Option<JoinHandle<()>>>,
    indexer_tx: Mutex<Option<crossbeam_channel::Sender<()>>>,
    checkpointer_tx: Mutex<Option<crossbeam_channel::Sender<()>>>,
    checkpointer: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    /// Held shared by appends, exclusively by maintenance (compaction, restore).
    pub(crate) maintenance: RwLock<()>,
    /// Serialises reconciling `ledger.jsonl` with the log: two deletions
    /// reconciling at once would interleave their appends.
    pub(crate) ledger_sync: Mutex<()>,
}

/// An open store. Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct Engram {
    pub(crate) inner: Arc<Inner>,
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
}

/// The LSN the lexical snapshot of the store in `dir` covers (0 when it is
/// missing or unreadable).
pub(crate) fn lexical_snapshot_lsn(backend: &dyn Backend, dir: &Path) -> u64 {
    engram_storage::files::read_snapshot_header(
        backend,
        &layout::lexical(dir),
        LEXICAL_MAGIC,
        LEXICAL_SNAPSHOT_VERSION,
    )
    .ok()
    .flatten()
    .map_or(0, |s| s.applied_lsn)
}

fn backend_has_restore_pending(db: &Engram) -> bool {
    db.inner
        .backend
        .exists(&layout::restore_pending(&db.inner.dir))
}

/// Paths inside a data directory.
pub mod layout {
    use std::path::{Path, PathBuf};
    /// The lock file.
    pub fn lock(dir: &Path) -> PathBuf {
        dir.join("LOCK")
    }
    /// Ledger entries an interrupted restore has yet to re-apply.
    pub fn restore_pending(dir: &Path) -> PathBuf {
        dir.join("restore.pending")
    }
    /// The segment log.
    pub fn log(dir: &Path) -> PathBuf {
        dir.join("log")
    }
    /// The catalog of stores written before the state checkpoint replaced
    /// it (removed at the first writable open).
    pub fn legacy_catalog(dir: &Path) -> PathBuf {
        dir.join("catalog.redb")
    }
    /// Derived state root.
    pub fn derived(dir: &Path) -> PathBuf {
        dir.join("derived")
    }
    /// Lexical snapshot.
    pub fn lexical(dir: &Path) -> PathBuf {
        derived(dir).join("lexical.snap")
    }
    /// Vector spaces.
    pub fn vectors(dir: &Path) -> PathBuf {
        derived(dir).join("vectors")
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::Storage(StorageError::io(path, e))
}

impl Engram {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Engram> {
        Self::open_with_report(dir, opts).map(|(e, _)| e)
    }

    /// Opens the store and reports what recovery did.
    pub fn open_with_report(dir: impl AsRef<Path>, opts: Options) -> Result<(Engram, OpenReport)> {
        let dir = dir.as_ref().to_path_buf();
        let real = opts.backend.clone();
        crate::store_dir::prepare(real.as_ref(), &dir, opts.create_if_missing, !opts.read_only)?;
        // A read-only open works through a copy-on-write overlay: it may
        // rebuild derived state in memory, and never changes a byte on disk.
        let backend: Arc<dyn Backend> = if opts.read_only {
            Arc::new(engram_storage::OverlayBackend::new(real.clone()))
        } else {
            real.clone()
        };
        let lock_path = layout::lock(&dir);
        let lock = if opts.read_only {
            real.try_lock_shared(&lock_path)
        } else {
            real.try_lock(&lock_path)
        }
        .map_err(io(&lock_path))?
        .ok_or(EngineError::Storage(StorageError::Locked {
            path: lock_path,
        }))?;
        recover_log_swap(backend.as_ref(), &dir)?;
        let mut report = OpenReport::default();
        // Derived state read (without changing it) before the log: what
        // it has applied was durable in the log, so recovery must not cut
        // below it.
        let (durable_lsn, durable_evidence) = crate::repair::durable_evidence(&backend, &dir);
        // The lexical snapshot is decoded on a second thread while this one
        // recovers the log, opens the vector spaces and decodes the state
        // checkpoint: the two are independent, and each is a large share
        // of an open (docs/benchmarks.md, `engram bench open`).
        let lexical_path = layout::lexical(&dir);
        let (lexical_read, opened) = std::thread::scope(|sc| {
            let lexical = sc.spawn(|| {
                read_snapshot(
                    backend.as_ref(),
                    &lexical_path,
                    LEXICAL_MAGIC,
                    LEXICAL_SNAPSHOT_VERSION,
                )
                .ok()
                .flatten()
                .map(|s| (s.applied_lsn, Bm25Index::read_from(s.body.as_slice())))
            });
            let opened = (|| -> Result<_> {
                let (log, log_report) = SegmentLog::open_with(
                    backend.clone(),
                    &layout::log(&dir),
                    opts.log.clone(),
                    &RecoveryOptions {
                        read_only: opts.read_only,
                        durable_lsn,
                        durable_evidence: durable_evidence.to_string(),
                    },
                )?;
                // Stores written before the state checkpoint kept a redb
                // catalog: derived, and read by nothing now.
                let legacy = layout::legacy_catalog(&dir);
                if !opts.read_only && backend.exists(&legacy) {
                    crate::store_dir::remove_owned(backend.as_ref(), &legacy)?;
                }
                let derived = layout::derived(&dir);
                backend.create_dir_all(&derived).map_err(io(&derived))?;
                let vectors = VectorSpaces::open(
                    backend.clone(),
                    &layout::vectors(&dir),
                    opts.hnsw,
                    opts.metric,
                )?;
                let checkpoint =
                    crate::checkpoint::load(backend.as_ref(), &dir, &log).and_then(|d| match d {
                        Some(mut d) => d
                            .parts
                            .validate()
                            .map(|()| Some(d))
                            .map_err(|e| e.to_string()),
                        None => Ok(None),
                    });
                Ok((log, log_report, vectors, checkpoint))
            })();
            (lexical.join(), opened)
        });
        let lexical_read = lexical_read.unwrap_or_else(|p| std::panic::resume_unwind(p));
        let (log, log_report, mut vectors, checkpoint) = opened?;
        report.log = log_report.clone();
        let last_lsn = log.last_lsn();
        let (lexical, lexical_lsn) = match lexical_read {
            Some((lsn, Ok(ix))) if lsn <= last_lsn => (ix, lsn),
            _ => (Bm25Index::new(Bm25Params::default()), 0),
        };
        report.lexical_rebuilt = lexical_lsn == 0 && last_lsn > 0;
        // The state checkpoint, when it sits at the lexical snapshot's LSN
        // and the vector spaces were persisted with it: only the log after
        // it is replayed.
        let from_checkpoint = match checkpoint {
            Ok(None) => None,
            Ok(Some(d)) if d.parts.applied_lsn != lexical_lsn => {
                report.checkpoint_discarded = Some(format!(
                    "it is at LSN {}, the lexical snapshot at {lexical_lsn}",
                    d.parts.applied_lsn
                ));
                None
            }
            Ok(Some(d)) => {
                let parts = d.parts;
                match vectors.adopt(d.spaces, &|i| parts.id_of(i)) {
                    Ok(()) => Some(parts),
                    Err(why) => {
                        // `adopt` changed nothing: a full replay follows.
                        report.checkpoint_discarded = Some(why);
                        None
                    }
                }
            }
            Err(why) => {
                report.checkpoint_discarded = Some(why);
                None
            }
        };
        let (mut state, replay_from) = match from_checkpoint {
            Some(parts) => {
                let lsn = parts.applied_lsn;
                report.checkpoint_lsn = lsn;
                (
                    parts.into_state(lexical, vectors, opts.embedder.clone())?,
                    lsn + 1,
                )
            }
            None => (
                State::new(lexical, lexical_lsn, vectors, opts.embedder.clone()),
                0,
            ),
        };
        let mut replayed = 0u64;
        log.scan(replay_from, |f| {
            apply_frame(
                &mut state,
                f.header.frame_type,
                f.header.frame_version,
                f.payload(),
                f.loc(),
            )?;
            replayed += 1;
            Ok(ControlFlow::Continue(()))
        })?;
        report.frames_replayed = replayed;
        // Vector spaces whose persisted files disagree with the log are rebuilt.
        let ids: Vec<RecordId> = state.metas.iter().map(|m| m.id).collect();
        let stale = state.vectors.finish_replay(&|i| ids[i as usize])?;
        if !stale.is_empty() {
            for m in &stale {
                state.vectors.reset(m)?;
            }
            rebuild_spaces(&mut state, &log, &stale)?;
            report.vectors_rebuilt = stale
                .into_iter()
                .map(|(t, m)| format!("{m} (tenant {t})"))
                .collect();
        }
        let mut ids = match opts.id_seed {
            Some(s) => IdGenerator::deterministic(s),
            None => IdGenerator::new(last_lsn),
        };
        if let Some(m) = state.metas.iter().map(|m| m.id).max() {
            ids.observe(m);
        }
        // Operation ids too: a restore re-applies operations under their
        // original ids, which may be newer than any record.
        if let Some(m) = state.ledger.iter().map(|e| e.op_id).max() {
            ids.observe(m);
        }
        let last_ingested_at = state.last_ingested_at;
        let inner = Arc::new(Inner {
            dir,
            backend,
            lock: Mutex::new(Some(lock)),
            log,
            state: Arc::new(RwLock::new(state)),
            writer: Mutex::new(WriterState {
                ids,
                last_ingested_at,
                pending_ext: HashMap::new(),
                pending_superseded: HashSet::new(),
                pending_dims: HashMap::new(),
            }),
            clock: opts.clock.clone(),
            opts,
            recovery: log_report,
            apply_error: Arc::new(Mutex::new(None)),
            checkpoint_error: Mutex::new(None),
            checkpoint_lsn: AtomicU64::new(report.checkpoint_lsn),
            checkpointing: Mutex::new(()),
            indexer_error: Arc::new(Mutex::new(None)),
            indexer: Mutex::new(None),
            indexer_tx: Mutex::new(None),
            checkpointer_tx: Mutex::new(None),
            checkpointer: Mutex::new(None),
            closed: AtomicBool::new(false),
            maintenance: RwLock::new(()),
            ledger_sync: Mutex::new(()),
        });
        Self::start_threads(&inner)?;
        let db = Engram { inner };
        // The ledger file must hold every deletion and revocation of the log.
        db.sync_ledger()?;
        if db.inner.opts.read_only {
            report.restore_pending = backend_has_restore_pending(&db);
        } else {
            report.restore_resumed = crate::maintenance::resume_restore(&db)?;
        }
        Ok((db, report))
    }

    fn start_threads(inner: &Arc<Inner>) -> Result<()> {
        let (tx, rx) = crossbeam_channel::unbounded::<()>();
        let hook_state = inner.state.clone();
        let hook_err = inner.apply_error.clone();
        let hook_tx = tx.clone();
        if !inner.opts.read_only {
            inner
                .log
                .start_writer(Box::new(move |frames: &[CommittedFrame<'_>]| {
                    let vectors_pending;
                    {
                        let mut st = hook_state.write();
                        for f in frames {
                            if let Err(e) = apply_frame(
                                &mut st,
                                f.header.frame_type,
                                f.header.frame_version,
                                f.payload,
                                f.loc,
                            ) {
                                hook_err.lock().get_or_insert(e.to_string());
                            }
                        }
                        vectors_pending = st.vectors.pending() > 0;
                    }
                    // Wake the indexer only when there is something to index.
                    if vectors_pending {
                        let _ = hook_tx.send(());
                    }
                }))?;
        }
        let spawn_err = |e| EngineError::Storage(StorageError::io("background thread", e));
        if !inner.opts.read_only && inner.opts.checkpoint_after_frames > 0 {
            let (ck_tx, ck_rx) = crossbeam_channel::bounded::<()>(0);
            let weak = Arc::downgrade(inner);
            let handle = std::thread::Builder::new()
                .name("engram-checkpoint".into())
                .spawn(move || checkpoint_loop(weak, ck_rx))
                .map_err(spawn_err)?;
            *inner.checkpointer.lock() = Some(handle);
            *inner.checkpointer_tx.lock() = Some(ck_tx);
        }
        if inner.opts.background_indexing {
            let st = inner.state.clone();
            let ix_err = inner.indexer_error.clone();
            let handle = std::thread::Builder::new()
                .name("engram-indexer".into())
                .spawn(move || indexer_loop(st, rx, ix_err))
                .map_err(spawn_err)?;
            *inner.indexer.lock() = Some(handle);
        }
        *inner.indexer_tx.lock() = Some(tx);
        Ok(())
    }

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

    /// Blocks until every vector is in its graph.
    pub fn wait_indexed(&self) -> Result<()> {
        if let Some(e) = self.inner.indexer_error.lock().clone() {
            return Err(EngineError::Background {
                worker: "indexer".into(),
                detail: format!(
                    "{e}; vectors not in the graph are still searched exactly; reopen the store to index them"
                ),
            });
        }
        loop {
            let st = self.inner.state.read();
            let done = st.vectors.index_pending(256)?;
            if done == 0 && st.vectors.pending() == 0 {
                drop(st);
                return self.inner.state.write().vectors.remap_all();
            }
        }
    }

    /// Makes derived state durable: vector files and graphs, the lexical
    /// snapshot, and the state checkpoint, all at the LSN applied now, so
    /// the next open replays only the log after it. (The log is always
    /// durable; this only shortens the next open.)
    pub fn checkpoint(&self) -> Result<()> {
        self.check_open()?;
        if self.inner.opts.read_only {
            return Ok(());
        }
        let _one = self.inner.checkpointing.lock();
        let mut st = self.inner.state.write();
        let ids: Vec<RecordId> = st.metas.iter().map(|m| m.id).collect();
        st.vectors.checkpoint(&|i| ids[i as usize])?;
        drop(ids);
        // Encoded under a read lock (readers go on; the commit hook waits),
        // written without one. The vector files were persisted at this
        // same point under the write lock just released by the downgrade.
        let st = parking_lot::RwLockWriteGuard::downgrade(st);
        let lsn = st.applied_lsn;
        let mut lexical = Vec::new();
        st.lexical.write_to(&mut lexical);
        let anchor = crate::checkpoint::anchor_crc(&self.inner.log, &st)?;
        let body = crate::checkpoint::encode(&st, &st.vectors.slots(), anchor);
        drop(st);
        // The lexical snapshot first: a checkpoint is used only when the
        // lexical snapshot sits at its LSN, so a crash between the two
        // writes costs a full replay, never a mismatched state.
        write_snapshot(
            self.inner.backend.as_ref(),
            &layout::lexical(&self.inner.dir),
            LEXICAL_MAGIC,
            LEXICAL_SNAPSHOT_VERSION,
            lsn,
            &lexical,
        )?;
        crate::checkpoint::write(self.inner.backend.as_ref(), &self.inner.dir, lsn, &body)?;
        self.inner.checkpoint_lsn.store(lsn, Ordering::Release);
        Ok(())
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

    /// Finishes queued work, writes a checkpoint and closes the store.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.log.close();
        drop(self.inner.indexer_tx.lock().take());
        if let Some(h) = self.inner.indexer.lock().take() {
            let _ = h.join();
        }
        drop(self.inner.checkpointer_tx.lock().take());
        if let Some(h) = self.inner.checkpointer.lock().take() {
            let _ = h.join();
        }
        self.inner.closed.store(false, Ordering::Release);
        let r = self.wait_indexed().and_then(|_| self.checkpoint());
        self.inner.closed.store(true, Ordering::Release);
        // Release the directory: sessions that outlive the store now fail
        // with `Closed`, and another handle may open it.
        drop(self.inner.lock.lock().take());
        r
    }

    pub(crate) fn now(&self) -> i64 {
        self.inner.clock.now_ms()
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

    /// Model id of the built-in embedder this store was opened with.
    pub fn embedder_model(&self) -> Option<String> {
        self.inner
            .opts
            .embedder
            .as_ref()
            .map(|e| e.model_id().to_string())
    }

    /// Vectors waiting for the background indexer.
    pub fn pending_vectors(&self) -> usize {
        self.inner.state.read().vectors.pending()
    }

    /// Mints an id and a transaction time (monotonic).
    pub(crate) fn mint(&self) -> (RecordId, i64) {
        let mut w = self.inner.writer.lock();
        let now = self
            .now()
            .max(w.last_ingested_at)
            .max(self.inner.state.read().last_ingested_at);
        w.last_ingested_at = now;
        (w.ids.mint(now), now)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Best effort: stop threads. `Engram::close` writes the checkpoint.
        self.log.close();
        drop(self.indexer_tx.lock().take());
        if let Some(h) = self.indexer.lock().take() {
            let _ = h.join();
        }
        drop(self.checkpointer_tx.lock().take());
        if let Some(h) = self.checkpointer.lock().take() {
            // The checkpointer holds only a weak handle; it may be the one
            // dropping the last strong one, and must not join itself.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// Writes a state checkpoint in the background once enough frames were
/// applied since the last one. Holds only a weak handle, so a store dropped
/// without `close` still goes away; stops when the channel closes.
fn checkpoint_loop(inner: std::sync::Weak<Inner>, rx: crossbeam_channel::Receiver<()>) {
    let mut last_attempt = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let due = {
            let applied = inner.state.read().applied_lsn;
            let done = inner.checkpoint_lsn.load(Ordering::Acquire);
            applied.saturating_sub(done) >= inner.opts.checkpoint_after_frames
                && last_attempt.elapsed() >= inner.opts.checkpoint_min_interval
        };
        if due {
            last_attempt = Instant::now();
            let db = Engram {
                inner: inner.clone(),
            };
            match db.checkpoint() {
                Ok(()) => *inner.checkpoint_error.lock() = None,
                Err(EngineError::Closed) => return,
                Err(e) => *inner.checkpoint_error.lock() = Some(e.to_string()),
            }
        }
    }
}

fn indexer_loop(
    state: Arc<RwLock<State>>,
    rx: crossbeam_channel::Receiver<()>,
    err: Arc<Mutex<Option<String>>>,
) {
    let mut remapped = true;
    loop {
        // One insertion per read lock: the commit hook needs the write lock
        // to apply (and so acknowledge) the next group, and waits for at
        // most one insertion. Holding it for 32 cut the rate of appends
        // carrying vectors 2.8x under load (docs/benchmarks.md).
        let st = state.read();
        if st.vectors.pending() == 0 {
            drop(st);
            if !remapped {
                // Caught up: fold appended rows into the memory map.
                let _ = state.write().vectors.remap_all();
                remapped = true;
            }
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(()) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
        }
        remapped = false;
        let done = st.vectors.index_pending(1);
        drop(st);
        if let Err(e) = done {
            err.lock().get_or_insert(e.to_string());
            return;
        }
    }
}

/// Finishes or rolls back a restore's swap of log directories interrupted
/// by a crash: `log.restore` is the incoming copy, `log.old` the outgoing.
fn recover_log_swap(backend: &dyn Backend, dir: &Path) -> Result<()> {
    let log = layout::log(dir);
    let old = dir.join("log.old");
    let incoming = dir.join("log.restore");
    // The incoming copy is renamed to `log/` in one step: while it exists,
    // the swap has not happened and the store keeps its own log.
    let swapped = !backend.exists(&incoming);
    if !backend.exists(&log) && backend.exists(&old) {
        // crashed between the two renames: put the old log back
        backend.rename(&old, &log).map_err(io(&old))?;
    }
    // an incoming copy that never became the log is abandoned (rerun the restore)
    crate::store_dir::remove_owned(backend, &incoming)?;
    crate::store_dir::remove_owned(backend, &old)?;
    // The entries a restore was to re-apply belong to the restored log only:
    // with the swap undone they must not touch the store's own log.
    let marker = layout::restore_pending(dir);
    if !swapped && backend.exists(&marker) {
        backend.remove_file(&marker).map_err(io(&marker))?;
    }
    backend.sync_dir(dir).map_err(io(dir))?;
    Ok(())
}

/// Applies one frame to the state.
pub(crate) fn apply_frame(
    st: &mut State,
    ft: engram_storage::frame::FrameType,
    version: u8,
    payload: &[u8],
    loc: FrameLoc,
) -> std::result::Result<(), StorageError> {
    // Frames are applied once each, in LSN order: the state is a function
    // of the log prefix it has seen.
    assert!(
        loc.lsn > st.applied_lsn,
        "invariant violated: frame LSN {} applied after LSN {}",
        loc.lsn,
        st.applied_lsn
    );
    if version != codec::PAYLOAD_VERSION {
        return Err(StorageError::CorruptLog {
            segment: loc.segment,
            offset: loc.offset,
            reason: format!(
                "payload version {version} of frame type {} is not readable by this build (reads {})",
                ft.0,
                codec::PAYLOAD_VERSION
            ),
        });
    }
    let r = if ft == codec::FRAME_RECORD {
        codec::view_record(payload).and_then(|a| st.apply_record(a, loc))
    } else if ft == codec::FRAME_OP {
        codec::view_op(payload).and_then(|a| st.apply_op(a, loc.lsn))
    } else if ft == codec::FRAME_TOMBSTONE {
        codec::view_tombstone(payload).and_then(|a| st.apply_tombstone(a, loc))
    } else if ft == codec::FRAME_VECTOR {
        codec::view_vector(payload).and_then(|a| st.apply_vector(a, loc.lsn))
    } else {
        Err(EngineError::Corrupt {
            what: "frame".into(),
            detail: format!("unknown frame type {}", ft.0),
        })
    };
    r.map_err(|e| StorageError::CorruptLog {
        segment: loc.segment,
        offset: loc.offset,
        reason: e.to_string(),
    })?;
    st.applied_loc = Some(loc);
    Ok(())
}

fn rebuild_spaces(
    st: &mut State,
    log: &SegmentLog,
    keys: &[crate::vector::space::SpaceKey],
) -> Result<()> {
    let wanted = |tenant: &str, model: &str| keys.iter().any(|(t, m)| t == tenant && m == model);
    let embedder = st.embedder.clone();
    let mut by_id: HashMap<RecordId, Idx> = HashMap::new();
    log.scan(0, |f| {
        let r: Result<()> = (|| {
            if f.header.frame_type == codec::FRAME_RECORD {
                let a = codec::view_record(f.payload())?;
                let id = RecordId::from_bytes(a.id);
                let Some(idx) = st.idx(id) else { return Ok(()) };
                by_id.insert(id, idx);
                let m = st.meta(idx).clone();
                let tenant = st.strings.name(m.tenant).to_string();
                if let (Some(emb), Some(t)) = (&embedder, a.text.as_ref()) {
                    if wanted(&tenant, emb.model_id())
                        && crate::state::embeds(m.rtype, m.akind)
                        && !a.vector_models.iter().any(|v| v.as_str() == emb.model_id())
                    {
                        let v = emb.embed(t.as_str());
                        st.vectors.push(&tenant, emb.model_id(), true, idx, &v)?;
                    }
                }
            } else if f.header.frame_type == codec::FRAME_VECTOR {
                let a = codec::view_vector(f.payload())?;
                if let Some(&idx) = by_id.get(&RecordId::from_bytes(a.record)) {
                    let tenant = st.strings.name(st.meta(idx).tenant).to_string();
                    if wanted(&tenant, a.model.as_str()) {
                        let v: Vec<f32> = a.vector.iter().map(|x| x.to_native()).collect();
                        st.vectors.push(&tenant, a.model.as_str(), false, idx, &v)?;
                    }
                }
            }
            Ok(())
        })();
        r.map_err(|e| StorageError::CorruptLog {
            segment: f.segment,
            offset: f.offset,
            reason: e.to_string(),
        })?;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(())
}

/// A handle bound to one principal. Every read and write goes through one,
/// and it can only ever see its principal's tenant.
#[derive(Clone, Debug)]
pub struct Session {
    pub(crate) db: Engram,
    pub(crate) principal: Principal,
}

/// A record as the write path prepared it.
struct Prepared {
    stored: StoredRecord,
    outcome: AppendOutcome,
    status: Status,
    lsn: u64,
    /// What the engine decided for the record beyond what it said
    /// (inherited labels, lowered access).
    notes: Vec<String>,
    /// Position of its record frame in the batch (created records only).
    frame: usize,
}

/// SHA-256 of the record's canonical content (docs/format.md §6.1): the
/// canonical JSON of an object holding what the record says, with references
/// resolved to ids. Written straight from the record's parts; `data` is given
/// already in canonical form.
fn content_hash(
    r: &NewRecord,
    resolved: &Resolved,
    retention: &str,
    access: &[String],
    data_canonical: Option<&str>,
) -> [u8; 32] {
    use canonical::{Member, ObjectWriter};
    use std::borrow::Cow;
    let mut o = ObjectWriter::new();
    o.member("record", Member::Str(r.body.record_type().name()));
    o.member("kind", Member::Str(&r.kind));
    let mut scope = ObjectWriter::new();
    if let Some(u) = &r.scope.user {
        scope.member("user", Member::Str(u));
    }
    if let Some(c) = &r.scope.conversation {
        scope.member("conversation", Member::Str(c));
    }
    if let Some(a) = &r.scope.agent {
        scope.member("agent", Member::Str(a));
    }
    let labels;
    if !r.scope.labels.is_empty() {
        let mut l = r.scope.labels.clone();
        l.sort();
        l.dedup();
        labels = l;
        scope.member("labels", Member::Strs(&labels));
    }
    if !scope.is_empty() {
        o.member("scope", Member::Canonical(Cow::Owned(scope.finish())));
    }
    for (k, v) in [
        ("occurred_at", r.occurred_at),
        ("valid_from", r.valid_from),
        ("valid_until", r.valid_until),
        ("last_verified_at", r.last_verified_at),
    ] {
        if let Some(t) = v {
            o.member(k, Member::String(format_rfc3339(t)));
        }
    }
    if let Some(t) = &r.text {
        o.member("text", Member::Str(t));
    }
    if let Some(d) = data_canonical {
        o.member("data", Member::Canonical(Cow::Borrowed(d)));
    }
    o.member("retention_class", Member::Str(retention));
    if !access.is_empty() {
        o.member("access", Member::Strs(access));
    }
    if let Some(s) = resolved.supersedes {
        o.member("supersedes", Member::String(s.to_string()));
    }
    let sources: Vec<String>;
    if !resolved.sources.is_empty() {
        sources = resolved.sources.iter().map(|i| i.to_string()).collect();
        o.member("sources", Member::Strs(&sources));
    }
    match &r.body {
        Body::Event => {}
        Body::Entity {
            entity_type,
            name,
            aliases,
        } => {
            o.member("entity_type", Member::Str(entity_type));
            o.member("name", Member::Str(name));
            if !aliases.is_empty() {
                o.member("aliases", Member::Strs(aliases));
            }
        }
        Body::Relation { predicate, .. } => {
            o.member("predicate", Member::Str(predicate));
        }
        Body::Assertion {
            predicate, object, ..
        } => {
            if let Some(p) = predicate {
                o.member("predicate", Member::Str(p));
            }
            if let Some(v) = object {
                o.member("object", Member::Str(v));
            }
        }
        Body::Summary { generator } => {
            o.member("generator", Member::Str(generator));
        }
    }
    if let Some(s) = resolved.subject {
        o.member("subject", Member::String(s.to_string()));
    }
    if let Some(s) = resolved.object {
        o.member("object_entity", Member::String(s.to_string()));
    }
    if let Some(d) = &r.derivation {
        let mut dm = ObjectWriter::new();
        dm.member("extractor", Member::Str(&d.extractor));
        if let Some(m) = &d.model_config {
            dm.member("model_config", Member::Str(m));
        }
        dm.member(
            "generated",
            Member::Canonical(Cow::Borrowed(if d.generated { "true" } else { "false" })),
        );
        o.member("derivation", Member::Canonical(Cow::Owned(dm.finish())));
    }
    if let Some(c) = r.confidence {
        let n = canonical::number_f64(f64::from(c)).unwrap_or_else(|| "null".to_string());
        o.member("confidence", Member::Canonical(Cow::Owned(n)));
    }
    let mut out = String::with_capacity(256 + r.text.as_ref().map_or(0, |t| t.len() * 2));
    o.write(&mut out);
    canonical::sha256(out.as_bytes())
}

/// Whether the record names other records (its content hash then depends on
/// resolving them against the store).
fn has_references(r: &NewRecord) -> bool {
    r.supersedes.is_some()
        || !r.sources.is_empty()
        || matches!(
            r.body,
            Body::Relation { .. }
                | Body::Assertion {
                    subject: Some(_),
                    ..
                }
        )
}

/// How messages name a reference: `<id>` or `with external id '<e>'`.
pub(crate) fn reference_phrase(r: &RecordRef) -> String {
    match r {
        RecordRef::Id(id) => id.to_string(),
        RecordRef::External(e) => format!("with external id '{e}'"),
        RecordRef::IdOrExternal(s) => s.clone(),
    }
}

/// The record a reference names, from its two readings (internal id,
/// external id), counting only records `visible` says exist for the
/// caller. `None`: names nothing; `Some(Err)`: names two different records.
fn one_of(
    by_id: Option<Idx>,
    by_ext: Option<Idx>,
    r: &RecordRef,
    tenant: &str,
    visible: impl Fn(Idx) -> bool,
) -> Option<Result<Idx>> {
    let by_id = by_id.filter(|&i| visible(i));
    let by_ext = by_ext.filter(|&i| visible(i));
    match (by_id, by_ext) {
        (Some(a), Some(b)) if a != b => Some(Err(EngineError::AmbiguousReference {
            tenant: tenant.to_string(),
            reference: r.to_string(),
        })),
        (Some(a), _) | (None, Some(a)) => Some(Ok(a)),
        (None, None) => None,
    }
}

#[derive(Default, Clone)]
struct Resolved {
    supersedes: Option<RecordId>,
    sources: Vec<RecordId>,
    subject: Option<RecordId>,
    object: Option<RecordId>,
}

impl Session {
    /// The principal.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The store.
    pub fn engram(&self) -> &Engram {
        &self.db
    }

    /// Appends an atomic batch. Every record is validated first; any error
    /// rejects the whole batch and stores nothing. Re-sending a record with
    /// the same external id and content is a no-op reported as
    /// [`AppendOutcome::Duplicate`].
    pub fn append(&self, records: Vec<NewRecord>) -> Result<Vec<AppendResult>> {
        self.append_run(records, None)
    }

    /// Like [`Session::append`], recording `run_id` as the ingest run.
    pub fn append_run(
        &self,
        records: Vec<NewRecord>,
        run_id: Option<RecordId>,
    ) -> Result<Vec<AppendResult>> {
        let db = &self.db;
        db.check_open()?;
        if records.is_empty() {
            return Err(EngineError::invalid("batch", "no records"));
        }
        if records.len() > limits::BATCH_RECORDS_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "records in one batch".into(),
                limit: limits::BATCH_RECORDS_MAX as u64,
                got: records.len() as u64,
            });
        }
        crate::model::check_tenant(self.principal.tenant())?;
        let n_records = db.inner.state.read().len();
        if n_records + records.len() > limits::RECORDS_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "records in the store".into(),
                limit: limits::RECORDS_MAX as u64,
                got: (n_records + records.len()) as u64,
            });
        }
        for (i, r) in records.iter().enumerate() {
            r.validate().map_err(|e| e.at_item(i))?;
        }
        let data_json: Vec<Option<String>> = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                r.data
                    .as_ref()
                    .map(|d| {
                        let s = canonical::to_canonical_string(d)
                            .map_err(|e| EngineError::invalid("data", e.to_string()).at_item(i))?;
                        if s.len() > limits::DATA_BYTES_MAX {
                            return Err(EngineError::LimitExceeded {
                                item: Some(i),
                                what: "data length in bytes (canonical JSON)".into(),
                                limit: limits::DATA_BYTES_MAX as u64,
                                got: s.len() as u64,
                            });
                        }
                        Ok(s)
                    })
                    .transpose()
            })
            .collect::<Result<_>>()?;
        // Normalized access and retention, and the content hash of every
        // record that names no other record: computed before the writer lock.
        let mut normalized: Vec<(Vec<String>, String, Option<[u8; 32]>)> = records
            .iter()
            .zip(&data_json)
            .map(|(r, d)| {
                let mut access = r.access.clone();
                access.sort();
                access.dedup();
                let retention = r
                    .retention_class
                    .clone()
                    .unwrap_or_else(|| DEFAULT_RETENTION_CLASS.to_string());
                let hash = (!has_references(r)).then(|| {
                    content_hash(r, &Resolved::default(), &retention, &access, d.as_deref())
                });
                (access, retention, hash)
            })
            .collect();
        let _maintenance = db.inner.maintenance.read();
        let tenant = self.principal.tenant().to_string();
        let rx;
        let mut prepared: Vec<Prepared>;
        let mut pending_keys: Vec<(String, String)> = Vec::new();
        let mut pending_sup: Vec<RecordId> = Vec::new();
        let mut pending_models: Vec<(String, String)> = Vec::new();
        {
            let mut w = db.inner.writer.lock();
            let st = db.inner.state.read();
            let tsym = st.tenant_sym(&tenant);
            let tstate = st.tenant(&tenant);
            let now = db.now().max(w.last_ingested_at).max(st.last_ingested_at);
            let run = run_id.unwrap_or_else(|| w.ids.mint(now));
            prepared = Vec::with_capacity(records.len());
            // ids minted for this batch, by external id and position
            // external id -> positions in the batch; an external id may appear
            // again only on a record that corrects the earlier one.
            let mut batch_ext: HashMap<String, Vec<usize>> = HashMap::new();
            let mut batch_ids: Vec<RecordId> = Vec::with_capacity(records.len());
            let mut superseded_here: HashMap<RecordId, usize> = HashMap::new();
            let mut new_dims: HashMap<String, usize> = HashMap::new();
            // A stored record the principal cannot read does not exist for
            // it: naming it as a source, a correction target or an endpoint
            // is answered exactly like naming nothing.
            let held = if records.iter().any(has_references) {
                self.held_labels(&st)
            } else {
                BTreeSet::new()
            };
            let visible = |ix: Idx| self.target(&st, ix, &held).readable;
            let actor = self.actor(&st);
            for (i, r) in records.iter().enumerate() {
                let id = w.ids.mint(now);
                batch_ids.push(id);
                if let Some(e) = &r.external_id {
                    let pos = batch_ext.entry(e.clone()).or_default();
                    if let Some(&j) = pos.last() {
                        let corrects_it = r.supersedes.as_ref()
                            == Some(&RecordRef::External(e.clone()))
                            || r.supersedes.as_ref() == Some(&RecordRef::Id(batch_ids[j]));
                        if !corrects_it {
                            return Err(EngineError::invalid(
                                "external_id",
                                format!("'{e}' appears twice in the batch (items {j} and {i}) and item {i} does not supersede it"),
                            )
                            .at_item(i));
                        }
                    }
                    pos.push(i);
                }
            }
            // resolve a reference to (id, record type, effective state)
            let resolve = |batch_ids: &[RecordId],
                           rf: &RecordRef,
                           field: &str,
                           i: usize|
             -> Result<(RecordId, Option<Idx>)> {
                // An earlier item of the batch, by the id minted for it.
                if let Some(id) = rf.as_id() {
                    if let Some(j) = batch_ids.iter().position(|b| *b == id) {
                        if j >= i {
                            return Err(EngineError::invalid(
                                field,
                                format!("{id} refers to a record later in the batch"),
                            )
                            .at_item(i));
                        }
                        return Ok((id, None));
                    }
                }
                // The latest earlier item with that external id; an item
                // naming its own external id refers to the version it
                // corrects (earlier in the batch or stored).
                if let Some(e) = rf.as_external() {
                    if let Some(pos) = batch_ext.get(e) {
                        if let Some(&j) = pos.iter().rev().find(|&&j| j < i) {
                            return Ok((batch_ids[j], None));
                        }
                        if let Some(&j) = pos.iter().find(|&&j| j > i) {
                            if !pos.contains(&i) {
                                return Err(EngineError::invalid(
                                    field,
                                    format!(
                                        "external id '{e}' is defined later in the batch (item {j})"
                                    ),
                                )
                                .at_item(i));
                            }
                        }
                    }
                }
                let by_id = rf
                    .as_id()
                    .and_then(|id| tsym.and_then(|t| st.idx_in(t, id)));
                let by_ext = rf
                    .as_external()
                    .and_then(|e| tstate.and_then(|t| t.external_ids.get(e).copied()));
                match one_of(by_id, by_ext, rf, &tenant, visible) {
                    Some(Ok(ix)) => Ok((st.meta(ix).id, Some(ix))),
                    Some(Err(e)) => Err(e),
                    None => Err(EngineError::invalid(
                        field,
                        format!("no record {} in tenant '{tenant}'", reference_phrase(rf)),
                    )
                    .at_item(i)),
                }
            };
            for (i, r) in records.iter().enumerate() {
                let mut res = Resolved::default();
                let rtype = r.body.record_type();
                let mut notes: Vec<String> = Vec::new();
                // A correction of a stored record inherits what it leaves out.
                let inherited: NewRecord;
                let mut r = r;
                if let Some(s) = &r.supersedes {
                    let (sid, six) = resolve(&batch_ids, s, "supersedes", i)?;
                    if sid == batch_ids[i] {
                        return Err(EngineError::SupersedesCycle {
                            item: i,
                            chain: format!("{s} supersedes itself"),
                        });
                    }
                    if let Some(ix) = six {
                        let m = st.meta(ix);
                        if m.rtype != rtype {
                            return Err(EngineError::invalid(
                                "supersedes",
                                format!("a {} cannot supersede a {}", rtype.name(), m.rtype.name()),
                            )
                            .at_item(i));
                        }
                        if let Some(by) = m.superseded_by {
                            return Err(EngineError::AlreadySuperseded {
                                item: Some(i),
                                target: sid,
                                by: st.meta(by).id,
                            });
                        }
                        if m.status == Status::Deleted {
                            return Err(EngineError::invalid(
                                "supersedes",
                                format!("{sid} is deleted"),
                            )
                            .at_item(i));
                        }
                        let target = self.target(&st, ix, &held);
                        if let crate::authz::Decision::Forbidden(reason) = crate::authz::decide(
                            actor,
                            crate::authz::Operation::Correct,
                            Some(target),
                        ) {
                            return Err(EngineError::Forbidden {
                                principal: self.principal.to_string(),
                                action: format!("correct {sid} (item {i})"),
                                reason: reason.to_string(),
                            });
                        }
                        let (given, _, _) = &mut normalized[i];
                        let old: Vec<String> = st.access_names(ix);
                        let dropped: Vec<String> =
                            old.iter().filter(|l| !given.contains(l)).cloned().collect();
                        if !dropped.is_empty() {
                            if r.replace_access {
                                if let crate::authz::Decision::Forbidden(reason) =
                                    crate::authz::decide(
                                        actor,
                                        crate::authz::Operation::LowerAccess,
                                        Some(target),
                                    )
                                {
                                    return Err(EngineError::Forbidden {
                                        principal: self.principal.to_string(),
                                        action: format!(
                                            "drop access label(s) {} of {sid} (item {i})",
                                            dropped.join(", ")
                                        ),
                                        reason: reason.to_string(),
                                    });
                                }
                                notes.push(format!(
                                    "access lowered by the tenant admin: label(s) {} of the corrected record dropped",
                                    dropped.join(", ")
                                ));
                            } else {
                                given.extend(dropped.iter().cloned());
                                given.sort();
                                given.dedup();
                                notes.push(format!(
                                    "inherited access label(s) {} from the corrected record",
                                    dropped.join(", ")
                                ));
                            }
                        }
                        let scope_empty = r.scope == Scope::default();
                        let ext_missing = r.external_id.is_none() && m.external_id.is_some();
                        if scope_empty || ext_missing {
                            let mut c = r.clone();
                            if scope_empty {
                                let name =
                                    |x: Option<u32>| x.map(|x| st.strings.name(x).to_string());
                                c.scope = Scope {
                                    user: name(m.user),
                                    conversation: name(m.conversation),
                                    agent: name(m.agent),
                                    labels: m
                                        .scope_labels
                                        .iter()
                                        .map(|&l| st.strings.name(l).to_string())
                                        .collect(),
                                };
                            }
                            if ext_missing {
                                c.external_id = m.external_id.as_deref().map(str::to_string);
                            }
                            inherited = c;
                            r = &inherited;
                        }
                    }
                    if w.pending_superseded.contains(&sid) {
                        return Err(EngineError::invalid(
                            "supersedes",
                            format!("{sid} is being corrected by another batch in flight; retry"),
                        )
                        .at_item(i));
                    }
                    if let Some(j) = superseded_here.insert(sid, i) {
                        return Err(EngineError::invalid(
                            "supersedes",
                            format!("{sid} is corrected twice in the batch (items {j} and {i})"),
                        )
                        .at_item(i));
                    }
                    res.supersedes = Some(sid);
                }
                for s in &r.sources {
                    let (sid, six) = resolve(&batch_ids, s, "sources", i)?;
                    if let Some(ix) = six {
                        let m = st.meta(ix);
                        if m.status == Status::Deleted {
                            return Err(EngineError::invalid(
                                "sources",
                                format!("source {sid} is deleted"),
                            )
                            .at_item(i));
                        }
                    }
                    if !res.sources.contains(&sid) {
                        res.sources.push(sid);
                    }
                }
                match &r.body {
                    Body::Relation {
                        subject, object, ..
                    } => {
                        let (s, six) = resolve(&batch_ids, subject, "subject", i)?;
                        let (o, oix) = resolve(&batch_ids, object, "object", i)?;
                        for (ix, f) in [(six, "subject"), (oix, "object")] {
                            if let Some(ix) = ix {
                                if st.meta(ix).rtype != RecordType::Entity {
                                    return Err(EngineError::invalid(
                                        f,
                                        "a relation connects entities",
                                    )
                                    .at_item(i));
                                }
                            }
                        }
                        res.subject = Some(s);
                        res.object = Some(o);
                    }
                    Body::Assertion {
                        subject: Some(subject),
                        ..
                    } => {
                        res.subject = Some(resolve(&batch_ids, subject, "subject", i)?.0);
                    }
                    _ => {}
                }
                // dims
                for e in &r.embeddings {
                    let known = st
                        .vectors
                        .dim_of(&tenant, &e.model)
                        .or_else(|| {
                            w.pending_dims
                                .get(&(tenant.clone(), e.model.clone()))
                                .copied()
                        })
                        .or_else(|| new_dims.get(&e.model).copied());
                    match known {
                        Some(d) if d != e.vector.len() => {
                            return Err(EngineError::DimensionMismatch {
                                item: Some(i),
                                field: "embedding.vector".into(),
                                model: e.model.clone(),
                                expected: d,
                                got: e.vector.len(),
                            });
                        }
                        Some(_) => {}
                        None => {
                            new_dims.insert(e.model.clone(), e.vector.len());
                        }
                    }
                    if db.inner.opts.metric == Metric::Cosine && e.vector.iter().all(|x| *x == 0.0)
                    {
                        return Err(EngineError::invalid(
                            "embedding.vector",
                            "all components are zero (no direction for cosine similarity)",
                        )
                        .at_item(i));
                    }
                }
                // access and retention
                let (access, retention, pre_hash) = std::mem::take(&mut normalized[i]);
                let hash = match pre_hash {
                    Some(h) => h,
                    None => content_hash(r, &res, &retention, &access, data_json[i].as_deref()),
                };
                // external id rules
                let mut outcome = AppendOutcome::Created;
                let mut existing: Option<(RecordId, u64, Status)> = None;
                if let Some(e) = &r.external_id {
                    let key = (tenant.clone(), e.clone());
                    if let Some((pid, phash)) = w.pending_ext.get(&key) {
                        if *phash == hash {
                            outcome = AppendOutcome::Duplicate;
                            existing = Some((*pid, 0, Status::Active));
                        } else {
                            return Err(EngineError::ExternalIdConflict {
                                item: Some(i),
                                external_id: e.clone(),
                                existing: *pid,
                            });
                        }
                    } else if let Some(&ix) = tstate.and_then(|t| t.external_ids.get(e.as_str())) {
                        let m = st.meta(ix);
                        if m.status == Status::Deleted {
                            return Err(EngineError::invalid(
                                "external_id",
                                format!("'{e}' named record {} which was deleted; deleted content is not re-ingested", m.id),
                            )
                            .at_item(i));
                        }
                        // Re-sending any version of the chain is a no-op (a
                        // file holding a record and its correction re-ingests
                        // cleanly).
                        let mut same = None;
                        for v in st.chain(ix) {
                            let vm = st.meta(v);
                            if !vm.tombstone && stored_hash(db, vm.loc)? == hash {
                                same = Some(vm);
                                break;
                            }
                        }
                        if let Some(vm) = same {
                            outcome = AppendOutcome::Duplicate;
                            existing = Some((vm.id, vm.loc.lsn, vm.status));
                        } else if res.supersedes != Some(m.id) {
                            return Err(EngineError::ExternalIdConflict {
                                item: Some(i),
                                external_id: e.clone(),
                                existing: m.id,
                            });
                        }
                    }
                }
                if let Some((eid, lsn, status)) = existing {
                    // Later items of the batch that name this one must
                    // point at the stored record.
                    batch_ids[i] = eid;
                    prepared.push(Prepared {
                        stored: empty_stored(eid),
                        outcome,
                        status,
                        lsn,
                        notes: Vec::new(),
                        frame: 0,
                    });
                    continue;
                }
                // writer and admission
                let writer = match (&r.writer, self.principal.may_attribute()) {
                    (Some(w), true) => w.clone(),
                    _ => Writer {
                        principal: self.principal.id().to_string(),
                        kind: self.principal.kind(),
                    },
                };
                let status = admission(rtype, &r.body, writer.kind, tstate);
                let (entity_type, name, aliases) = match &r.body {
                    Body::Entity {
                        entity_type,
                        name,
                        aliases,
                    } => (
                        Some(entity_type.clone()),
                        Some(name.clone()),
                        aliases.clone(),
                    ),
                    _ => (None, None, Vec::new()),
                };
                let (predicate, object_value, generator) = match &r.body {
                    Body::Relation { predicate, .. } => (Some(predicate.clone()), None, None),
                    Body::Assertion {
                        predicate, object, ..
                    } => (predicate.clone(), object.clone(), None),
                    Body::Summary { generator } => (None, None, Some(generator.clone())),
                    _ => (None, None, None),
                };
                let occurred_at = r.occurred_at.unwrap_or(now);
                let mut scope_labels = r.scope.labels.clone();
                scope_labels.sort();
                scope_labels.dedup();
                let stored = StoredRecord {
                    id: batch_ids[i].to_bytes(),
                    record_type: rtype.code(),
                    tenant: tenant.clone(),
                    scope_user: r.scope.user.clone(),
                    scope_conversation: r.scope.conversation.clone(),
                    scope_agent: r.scope.agent.clone(),
                    scope_labels,
                    kind: r.kind.clone(),
                    occurred_at_ms: occurred_at,
                    ingested_at_ms: now,
                    valid_from_ms: r.valid_from,
                    valid_until_ms: r.valid_until,
                    last_verified_at_ms: r.last_verified_at,
                    text: r.text.clone(),
                    data_json: data_json[i].clone(),
                    content_sha256: hash,
                    schema_version: SCHEMA_VERSION,
                    ingest_run_id: run.to_bytes(),
                    external_id: r.external_id.clone(),
                    supersedes: res.supersedes.map(|x| x.to_bytes()),
                    retention_class: retention,
                    access,
                    writer_principal: writer.principal,
                    writer_kind: writer.kind.code(),
                    vector_models: r.embeddings.iter().map(|e| e.model.clone()).collect(),
                    status: status as u8,
                    entity_type,
                    name,
                    aliases,
                    subject: res.subject.map(|x| x.to_bytes()),
                    predicate,
                    object: res.object.map(|x| x.to_bytes()),
                    object_value,
                    sources: res.sources.iter().map(|x| x.to_bytes()).collect(),
                    derivation: r.derivation.as_ref().map(|d| StoredDerivation {
                        extractor: d.extractor.clone(),
                        model_config: d.model_config.clone(),
                        generated: d.generated,
                    }),
                    confidence: r.confidence,
                    generator,
                };
                prepared.push(Prepared {
                    stored,
                    outcome,
                    status,
                    lsn: 0,
                    notes,
                    frame: 0,
                });
            }
            // Each created record's frame, followed by one frame per client
            // vector; `frame_of[i]` is the position of item i's record frame.
            let mut frames: Vec<PendingFrame> = Vec::with_capacity(prepared.len());
            for (p, r) in prepared.iter_mut().zip(&records) {
                if p.outcome != AppendOutcome::Created {
                    continue;
                }
                p.frame = frames.len();
                frames.push(PendingFrame {
                    frame_type: codec::FRAME_RECORD,
                    frame_version: codec::PAYLOAD_VERSION,
                    payload: codec::encode_record(&p.stored),
                });
                for e in &r.embeddings {
                    frames.push(PendingFrame {
                        frame_type: codec::FRAME_VECTOR,
                        frame_version: codec::PAYLOAD_VERSION,
                        payload: codec::encode_vector(&StoredVector {
                            record: p.stored.id,
                            model: e.model.clone(),
                            vector: e.vector.clone(),
                        }),
                    });
                }
            }
            if frames.is_empty() {
                return Ok(results(&prepared, &records, &[]));
            }
            // register in-flight state, then queue
            for (p, r) in prepared.iter().zip(&records) {
                if p.outcome != AppendOutcome::Created {
                    continue;
                }
                if let Some(e) = &r.external_id {
                    let key = (tenant.clone(), e.clone());
                    w.pending_ext.insert(
                        key.clone(),
                        (RecordId::from_bytes(p.stored.id), p.stored.content_sha256),
                    );
                    pending_keys.push(key);
                }
                if let Some(s) = p.stored.supersedes {
                    let s = RecordId::from_bytes(s);
                    w.pending_superseded.insert(s);
                    pending_sup.push(s);
                }
            }
            for (m, d) in new_dims {
                let key = (tenant.clone(), m);
                w.pending_dims.insert(key.clone(), d);
                pending_models.push(key);
            }
            w.last_ingested_at = now;
            drop(st);
            rx = db.inner.log.append_async(frames);
        }
        let reply = match rx {
            Ok(rx) => rx
                .recv()
                .map_err(|_| EngineError::Closed)
                .and_then(|r| r.map_err(EngineError::from)),
            Err(e) => Err(EngineError::from(e)),
        };
        if !(pending_keys.is_empty() && pending_sup.is_empty() && pending_models.is_empty()) {
            let mut w = db.inner.writer.lock();
            for k in &pending_keys {
                w.pending_ext.remove(k);
            }
            for s in &pending_sup {
                w.pending_superseded.remove(s);
            }
            for m in &pending_models {
                w.pending_dims.remove(m);
            }
        }
        let locs = reply?;
        db.check_open()?;
        Ok(results(&prepared, &records, &locs))
    }

    /// Resolves a reference within the session's tenant.
    pub fn resolve(&self, r: &RecordRef) -> Result<RecordId> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        self.resolve_in(&st, r).map(|ix| st.meta(ix).id)
    }

    pub(crate) fn resolve_in(&self, st: &State, r: &RecordRef) -> Result<Idx> {
        self.resolve_filtered(st, r, true)
    }

    /// Resolves `r` in the session's tenant whatever labels the session
    /// holds: only for re-applying operations the tenant already decided
    /// (a restore's deletions), never for a request.
    pub(crate) fn resolve_unfiltered(&self, st: &State, r: &RecordRef) -> Result<Idx> {
        self.resolve_filtered(st, r, false)
    }

    fn resolve_filtered(&self, st: &State, r: &RecordRef, filter: bool) -> Result<Idx> {
        let tenant = self.principal.tenant();
        let not_found = || self.not_found(r);
        let t = st.tenant_sym(tenant).ok_or_else(not_found)?;
        let by_id = r.as_id().and_then(|id| st.idx_in(t, id));
        let by_ext = r.as_external().and_then(|e| {
            st.tenants
                .get(&t)
                .and_then(|ts| ts.external_ids.get(e).copied())
        });
        let held = if filter {
            self.held_labels(st)
        } else {
            BTreeSet::new()
        };
        one_of(by_id, by_ext, r, tenant, |ix| {
            !filter || self.target(st, ix, &held).readable
        })
        .ok_or_else(not_found)?
    }

    /// Whether the session may read record `idx` (tenant, labels; deleted
    /// records are never readable).
    pub(crate) fn can_read(&self, st: &State, idx: Idx) -> bool {
        let m = st.meta(idx);
        if st.strings.name(m.tenant) != self.principal.tenant() {
            return false;
        }
        if m.status == Status::Deleted || m.tombstone {
            return false;
        }
        let held = self.held_labels(st);
        m.access.iter().all(|l| held.contains(st.strings.name(*l)))
    }

    /// Labels the principal holds now (admins: every label not revoked).
    pub(crate) fn held_labels(&self, st: &State) -> BTreeSet<String> {
        let Some(t) = st.tenant(self.principal.tenant()) else {
            return BTreeSet::new();
        };
        let mut held: BTreeSet<String> = if self.principal.is_admin() {
            t.labels
                .iter()
                .map(|&s| st.strings.name(s).to_string())
                .collect()
        } else {
            t.grants
                .get(self.principal.id())
                .map(|g| g.labels.clone())
                .unwrap_or_default()
        };
        held.extend(self.principal.credential_labels().iter().cloned());
        for r in &t.revoked_labels {
            held.remove(r);
        }
        held
    }

    /// Roles the principal holds now.
    pub fn roles(&self) -> BTreeSet<String> {
        let st = self.db.inner.state.read();
        self.roles_in(&st)
    }

    /// [`Session::roles`] under a held state lock.
    pub(crate) fn roles_in(&self, st: &State) -> BTreeSet<String> {
        if self.principal.is_admin() {
            return [
                crate::principal::ROLE_ADMIN,
                crate::principal::ROLE_REVIEWER,
            ]
            .into_iter()
            .map(String::from)
            .collect();
        }
        let mut roles: BTreeSet<String> = st
            .tenant(self.principal.tenant())
            .and_then(|t| t.grants.get(self.principal.id()))
            .map(|g| g.roles.clone())
            .unwrap_or_default();
        roles.extend(self.principal.credential_roles().iter().cloned());
        roles
    }

    /// The session tenant's vector spaces: model id -> dimensions (what a
    /// query may name in `MODEL`).
    pub fn vector_models(&self) -> std::collections::BTreeMap<String, usize> {
        let st = self.db.inner.state.read();
        st.vectors
            .of_tenant(self.principal.tenant())
            .map(|s| (s.model.clone(), s.dim))
            .collect()
    }

    /// The session as the authorization matrix sees it.
    pub(crate) fn actor<'a>(&'a self, st: &State) -> crate::authz::Actor<'a> {
        let roles = self.roles_in(st);
        crate::authz::Actor::Principal {
            id: self.principal.id(),
            kind: self.principal.kind(),
            admin: self.principal.is_admin() || roles.contains(crate::principal::ROLE_ADMIN),
            reviewer: roles.contains(crate::principal::ROLE_REVIEWER),
        }
    }

    /// Record `idx` as the matrix sees it: readable when it is in the
    /// session's tenant and the principal holds all its effective labels
    /// (deleted records and tombstones count as readable here: operations
    /// refuse them with their own error, reads never show their content,
    /// and a trace shows a tombstone as removed).
    pub(crate) fn target(
        &self,
        st: &State,
        idx: Idx,
        held: &BTreeSet<String>,
    ) -> crate::authz::Target {
        let m = st.meta(idx);
        crate::authz::Target {
            readable: st.strings.name(m.tenant) == self.principal.tenant()
                && m.access.iter().all(|l| held.contains(st.strings.name(*l))),
            own: st.strings.name(m.writer) == self.principal.id(),
        }
    }

    /// Asks the matrix about `op` on `target` (a resolved record, with the
    /// reference as the caller gave it). A hidden target is reported as
    /// missing, exactly like a reference to nothing.
    pub(crate) fn authorize(
        &self,
        st: &State,
        op: crate::authz::Operation,
        target: Option<(Idx, &RecordRef)>,
    ) -> Result<()> {
        let t = target.map(|(idx, _)| self.target(st, idx, &self.held_labels(st)));
        match crate::authz::decide(self.actor(st), op, t) {
            crate::authz::Decision::Allow => Ok(()),
            crate::authz::Decision::Hidden => {
                Err(self.not_found(target.map(|(_, r)| r).expect("only targets are hidden")))
            }
            crate::authz::Decision::Forbidden(reason) => Err(EngineError::Forbidden {
                principal: self.principal.to_string(),
                action: op.name().to_string(),
                reason: reason.to_string(),
            }),
        }
    }

    /// The one "not found" of the session: the same for a missing record, a
    /// record of another tenant and one the principal may not read.
    pub(crate) fn not_found(&self, r: &RecordRef) -> EngineError {
        EngineError::NotFound {
            tenant: self.principal.tenant().to_string(),
            reference: reference_phrase(r),
        }
    }

    /// Reads a record by id or external id. Records of other tenants, records
    /// the principal may not read, and deleted records are all "not found".
    pub fn get(&self, r: &RecordRef) -> Result<Record> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        let idx = self.resolve_in(&st, r)?;
        if !self.can_read(&st, idx) {
            return Err(self.not_found(r));
        }
        self.db.record_view(&st, idx)
    }

    /// Every version of a record's correction chain, oldest first, that the
    /// principal may read.
    pub fn history(&self, r: &RecordRef) -> Result<Vec<Record>> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        let idx = self.resolve_in(&st, r)?;
        let chain = st.chain(idx);
        let mut out = Vec::new();
        for i in chain {
            if self.can_read(&st, i) {
                out.push(self.db.record_view(&st, i)?);
            }
        }
        if out.is_empty() {
            return Err(self.not_found(r));
        }
        Ok(out)
    }

    /// The newest version of a record's correction chain.
    pub fn current(&self, r: &RecordRef) -> Result<Record> {
        let mut h = self.history(r)?;
        Ok(h.pop().expect("history is never empty"))
    }

    /// Lists readable records of the tenant in log order.
    pub fn list(&self, filter: &ListFilter) -> Result<Vec<Record>> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        let Some(t) = st.tenant_sym(self.principal.tenant()) else {
            return Ok(Vec::new());
        };
        let Some(bm) = st.bm_tenant.get(&t) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for idx in bm.iter() {
            let m = st.meta(idx);
            if filter.since.is_some_and(|s| m.occurred_at < s)
                || filter.until.is_some_and(|u| m.occurred_at > u)
                || filter
                    .kind
                    .as_ref()
                    .is_some_and(|k| st.strings.name(m.kind) != k)
                || filter.record.is_some_and(|r| m.rtype != r)
                || (!filter.include_superseded && m.status == Status::Superseded)
            {
                continue;
            }
            if !self.can_read(&st, idx) {
                continue;
            }
            out.push(self.db.record_view(&st, idx)?);
            if out.len() >= filter.limit {
                break;
            }
        }
        Ok(out)
    }
}

/// Filter for [`Session::list`].
#[derive(Clone, Debug)]
pub struct ListFilter {
    /// occurred_at >= since.
    pub since: Option<i64>,
    /// occurred_at <= until.
    pub until: Option<i64>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this record type.
    pub record: Option<RecordType>,
    /// Include superseded versions.
    pub include_superseded: bool,
    /// At most this many.
    pub limit: usize,
}

impl Default for ListFilter {
    fn default() -> Self {
        ListFilter {
            since: None,
            until: None,
            kind: None,
            record: None,
            include_superseded: true,
            limit: usize::MAX,
        }
    }
}

fn empty_stored(id: RecordId) -> StoredRecord {
    StoredRecord {
        id: id.to_bytes(),
        record_type: 0,
        tenant: String::new(),
        scope_user: None,
        scope_conversation: None,
        scope_agent: None,
        scope_labels: Vec::new(),
        kind: String::new(),
        occurred_at_ms: 0,
        ingested_at_ms: 0,
        valid_from_ms: None,
        valid_until_ms: None,
        last_verified_at_ms: None,
        text: None,
        data_json: None,
        content_sha256: [0; 32],
        schema_version: SCHEMA_VERSION,
        ingest_run_id: [0; 16],
        external_id: None,
        supersedes: None,
        retention_class: String::new(),
        access: Vec::new(),
        writer_principal: String::new(),
        writer_kind: 0,
        vector_models: Vec::new(),
        status: 0,
        entity_type: None,
        name: None,
        aliases: Vec::new(),
        subject: None,
        predicate: None,
        object: None,
        object_value: None,
        sources: Vec::new(),
        derivation: None,
        confidence: None,
        generator: None,
    }
}

fn results(prepared: &[Prepared], records: &[NewRecord], locs: &[FrameLoc]) -> Vec<AppendResult> {
    prepared
        .iter()
        .zip(records)
        .map(|(p, r)| {
            let lsn = match p.outcome {
                AppendOutcome::Created => locs.get(p.frame).map(|l| l.lsn).unwrap_or(0),
                AppendOutcome::Duplicate => p.lsn,
            };
            AppendResult {
                id: RecordId::from_bytes(p.stored.id),
                external_id: p
                    .stored
                    .external_id
                    .clone()
                    .or_else(|| r.external_id.clone()),
                outcome: p.outcome,
                status: p.status,
                lsn,
                notes: p.notes.clone(),
            }
        })
        .collect()
}

fn stored_hash(db: &Engram, loc: FrameLoc) -> Result<[u8; 32]> {
    let f = db.inner.log.read(loc.segment, loc.offset)?;
    let a = codec::view_record(f.payload())?;
    Ok(a.content_sha256)
}

/// Admission: the initial status of a new record.
fn admission(
    rtype: RecordType,
    body: &Body,
    writer: WriterKind,
    tenant: Option<&crate::state::TenantState>,
) -> Status {
    match (rtype, body) {
        (RecordType::Event, _) => Status::Active,
        (RecordType::Assertion, Body::Assertion { kind, .. }) => {
            let rule = tenant.and_then(|t| {
                t.review_rules
                    .get(&(kind.name().to_string(), writer.name().to_string()))
                    .copied()
            });
            let review = rule.unwrap_or(kind.is_procedural() && writer == WriterKind::Model);
            if review {
                Status::Candidate
            } else {
                Status::Approved
            }
        }
        _ => Status::Approved,
    }
}

impl Engram {
    /// External id and text of record `idx`, read in place from the log.
    pub(crate) fn hit_content(
        &self,
        st: &State,
        idx: Idx,
    ) -> Result<(Option<String>, Option<String>)> {
        let m = st.meta(idx);
        let f = self.inner.log.read(m.loc.segment, m.loc.offset)?;
        let a = codec::view_record(f.payload())?;
        Ok((
            a.external_id.as_ref().map(|s| s.as_str().to_string()),
            a.text.as_ref().map(|s| s.as_str().to_string()),
        ))
    }

    /// Builds the public view of record `idx` (content read from the log).
    pub(crate) fn record_view(&self, st: &State, idx: Idx) -> Result<Record> {
        let m = st.meta(idx);
        let f = self.inner.log.read(m.loc.segment, m.loc.offset)?;
        let superseded_by = m.superseded_by.map(|i| st.meta(i).id);
        if m.tombstone {
            return Err(EngineError::NotFound {
                tenant: st.strings.name(m.tenant).to_string(),
                reference: m.id.to_string(),
            });
        }
        let a = codec::view_record(f.payload())?;
        let r = codec::record_to_owned(a);
        let data = match &r.data_json {
            Some(s) => Some(serde_json::from_str(s).map_err(|e| EngineError::Corrupt {
                what: "record data".into(),
                detail: e.to_string(),
            })?),
            None => None,
        };
        Ok(Record {
            id: m.id,
            external_id: r.external_id,
            record: m.rtype,
            tenant: r.tenant,
            scope: Scope {
                user: r.scope_user,
                conversation: r.scope_conversation,
                agent: r.scope_agent,
                labels: r.scope_labels,
            },
            kind: r.kind,
            status: m.status,
            occurred_at: r.occurred_at_ms,
            ingested_at: r.ingested_at_ms,
            valid_from: r.valid_from_ms,
            valid_until: m.valid_until,
            last_verified_at: r.last_verified_at_ms,
            text: r.text,
            data,
            content_sha256: hex(&r.content_sha256),
            schema_version: r.schema_version,
            ingest_run_id: RecordId::from_bytes(r.ingest_run_id),
            supersedes: r.supersedes.map(RecordId::from_bytes),
            superseded_by,
            retention_class: r.retention_class,
            access: r.access,
            effective_access: st.access_names(idx),
            writer: Writer {
                principal: r.writer_principal,
                kind: WriterKind::from_code(r.writer_kind).unwrap_or_default(),
            },
            embeddings: st
                .vectors
                .all()
                .iter()
                .filter(|s| s.slot_of(idx).is_some())
                .map(|s| EmbeddingInfo {
                    model: s.model.clone(),
                    dim: s.dim,
                })
                .collect(),
            entity_type: r.entity_type,
            name: r.name,
            aliases: r.aliases,
            subject: r.subject.map(RecordId::from_bytes),
            predicate: r.predicate,
            object: r.object.map(RecordId::from_bytes),
            object_value: r.object_value,
            sources: r.sources.into_iter().map(RecordId::from_bytes).collect(),
            derivation: r.derivation.map(|d| crate::model::Derivation {
                extractor: d.extractor,
                model_config: d.model_config,
                generated: d.generated,
            }),
            confidence: r.confidence,
            generator: r.generator,
            lsn: m.loc.lsn,
        })
    }

    /// Kind of an assertion record, if it is one.
    pub fn assertion_kind(&self, id: RecordId) -> Option<AssertionKind> {
        let st = self.inner.state.read();
        st.idx(id).and_then(|i| st.meta(i).akind)
    }
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The content hash as first specified: the canonical form of a
    /// `serde_json` object. The direct writer must give identical bytes.
    #[allow(clippy::cast_lossless)]
    fn content_hash_reference(
        r: &NewRecord,
        resolved: &Resolved,
        retention: &str,
        access: &[String],
    ) -> Result<[u8; 32]> {
        use serde_json::{Map, Value, json};
        let mut o = Map::new();
        o.insert("record".into(), json!(r.body.record_type().name()));
        o.insert("kind".into(), json!(r.kind));
        let mut scope = Map::new();
        if let Some(u) = &r.scope.user {
            scope.insert("user".into(), json!(u));
        }
        if let Some(c) = &r.scope.conversation {
            scope.insert("conversation".into(), json!(c));
        }
        if let Some(a) = &r.scope.agent {
            scope.insert("agent".into(), json!(a));
        }
        if !r.scope.labels.is_empty() {
            let mut l = r.scope.labels.clone();
            l.sort();
            l.dedup();
            scope.insert("labels".into(), json!(l));
        }
        if !scope.is_empty() {
            o.insert("scope".into(), Value::Object(scope));
        }
        for (k, v) in [
            ("occurred_at", r.occurred_at),
            ("valid_from", r.valid_from),
            ("valid_until", r.valid_until),
            ("last_verified_at", r.last_verified_at),
        ] {
            if let Some(t) = v {
                o.insert(k.into(), json!(format_rfc3339(t)));
            }
        }
        if let Some(t) = &r.text {
            o.insert("text".into(), json!(t));
        }
        if let Some(d) = &r.data {
            o.insert("data".into(), d.clone());
        }
        o.insert("retention_class".into(), json!(retention));
        if !access.is_empty() {
            o.insert("access".into(), json!(access));
        }
        if let Some(s) = resolved.supersedes {
            o.insert("supersedes".into(), json!(s.to_string()));
        }
        if !resolved.sources.is_empty() {
            let s: Vec<String> = resolved.sources.iter().map(|i| i.to_string()).collect();
            o.insert("sources".into(), json!(s));
        }
        match &r.body {
            Body::Event => {}
            Body::Entity {
                entity_type,
                name,
                aliases,
            } => {
                o.insert("entity_type".into(), json!(entity_type));
                o.insert("name".into(), json!(name));
                if !aliases.is_empty() {
                    o.insert("aliases".into(), json!(aliases));
                }
            }
            Body::Relation { predicate, .. } => {
                o.insert("predicate".into(), json!(predicate));
            }
            Body::Assertion {
                predicate, object, ..
            } => {
                if let Some(p) = predicate {
                    o.insert("predicate".into(), json!(p));
                }
                if let Some(v) = object {
                    o.insert("object".into(), json!(v));
                }
            }
            Body::Summary { generator } => {
                o.insert("generator".into(), json!(generator));
            }
        }
        if let Some(s) = resolved.subject {
            o.insert("subject".into(), json!(s.to_string()));
        }
        if let Some(s) = resolved.object {
            o.insert("object_entity".into(), json!(s.to_string()));
        }
        if let Some(d) = &r.derivation {
            let mut dm = Map::new();
            dm.insert("extractor".into(), json!(d.extractor));
            if let Some(m) = &d.model_config {
                dm.insert("model_config".into(), json!(m));
            }
            dm.insert("generated".into(), json!(d.generated));
            o.insert("derivation".into(), Value::Object(dm));
        }
        if let Some(c) = r.confidence {
            o.insert("confidence".into(), json!(c as f64));
        }
        canonical::content_sha256(&Value::Object(o))
            .map_err(|e| EngineError::invalid("data", e.to_string()))
    }

    fn sample_records() -> Vec<(NewRecord, Resolved)> {
        let id = |n: u64| {
            RecordId::from_bytes({
                let mut b = [0u8; 16];
                b[8..].copy_from_slice(&n.to_be_bytes());
                b
            })
        };
        let mut out = Vec::new();
        let mut e = NewRecord::event(
            "user_message",
            "Quote \" and \\ and \n, caf\u{e9} \u{1F600} \u{1}",
        );
        e.scope.user = Some("u1".into());
        e.scope.labels = vec!["b".into(), "a".into(), "b".into()];
        e.occurred_at = Some(1_700_000_000_123);
        e.data = Some(
            serde_json::json!({"z": [1, 2.5, null], "a": {"\u{10000}": true, "\u{e000}": false}}),
        );
        out.push((e, Resolved::default()));
        let mut a = NewRecord::assertion(
            crate::model::AssertionKind::Fact,
            "Checkout depends on payments",
            vec![],
        );
        if let Body::Assertion {
            predicate, object, ..
        } = &mut a.body
        {
            *predicate = Some("depends_on".into());
            *object = Some("payments".into());
        }
        a.valid_from = Some(5);
        a.valid_until = Some(6);
        a.last_verified_at = Some(7);
        a.confidence = Some(0.1);
        a.derivation = Some(crate::model::Derivation {
            extractor: "x/v1".into(),
            model_config: Some("m".into()),
            generated: true,
        });
        out.push((
            a,
            Resolved {
                supersedes: Some(id(1)),
                sources: vec![id(2), id(3)],
                subject: Some(id(4)),
                object: None,
            },
        ));
        let en = NewRecord {
            body: Body::Entity {
                entity_type: "service".into(),
                name: "payments-api".into(),
                aliases: vec!["payments".into()],
            },
            kind: "entity".into(),
            ..NewRecord::default()
        };
        out.push((en, Resolved::default()));
        let r = NewRecord {
            body: Body::Summary {
                generator: "sum/v2".into(),
            },
            kind: "summary".into(),
            text: Some(String::new()),
            ..NewRecord::default()
        };
        out.push((
            r,
            Resolved {
                object: Some(id(9)),
                ..Resolved::default()
            },
        ));
        out
    }

    #[test]
    fn direct_content_hash_matches_the_value_based_definition() {
        for (r, res) in sample_records() {
            for access in [vec![], vec!["ops".to_string(), "sec".to_string()]] {
                let data = r
                    .data
                    .as_ref()
                    .map(|d| canonical::to_canonical_string(d).unwrap());
                assert_eq!(
                    content_hash(&r, &res, "standard", &access, data.as_deref()),
                    content_hash_reference(&r, &res, "standard", &access).unwrap(),
                    "{r:?}"
                );
            }
        }
    }

    /// A write prepared before a deletion was applied (its checks passed)
    /// but logged after it: a summary of the deleted record and a
    /// correction of it. Applying them must not revive anything.
    #[test]
    fn a_write_that_raced_a_deletion_is_deleted_when_applied() {
        let db = Engram::open(
            "/race",
            Options {
                backend: Arc::new(engram_storage::MemBackend::new()),
                ..Options::default()
            },
        )
        .unwrap();
        let s = db.session(Principal::admin("t"));
        let x = s.append(vec![NewRecord::event("note", "x")]).unwrap()[0].id;
        let keep = s.append(vec![NewRecord::event("note", "keep")]).unwrap()[0].id;
        s.delete(&RecordRef::Id(x), None).unwrap();
        let frame = |r: StoredRecord| PendingFrame {
            frame_type: codec::FRAME_RECORD,
            frame_version: codec::PAYLOAD_VERSION,
            payload: codec::encode_record(&r),
        };
        let record = |rtype: RecordType, text: &str| {
            let now = db.now();
            let id = db.inner.writer.lock().ids.mint(now);
            let mut r = empty_stored(id);
            r.ingested_at_ms = now;
            r.record_type = rtype.code();
            r.tenant = "t".into();
            r.kind = "note".into();
            r.text = Some(text.into());
            r.retention_class = DEFAULT_RETENTION_CLASS.into();
            r.status = Status::Active as u8;
            r.writer_kind = WriterKind::System.code();
            r
        };
        let mut summary = record(RecordType::Summary, "summary of x");
        summary.sources = vec![x.to_bytes()];
        summary.generator = Some("g".into());
        let mut fix = record(RecordType::Event, "x corrected");
        fix.supersedes = Some(x.to_bytes());
        let (sid, fid) = (
            RecordId::from_bytes(summary.id),
            RecordId::from_bytes(fix.id),
        );
        db.inner
            .log
            .append(vec![frame(summary), frame(fix)])
            .unwrap();
        for id in [x, sid, fid] {
            assert!(
                matches!(s.get(&RecordRef::Id(id)), Err(EngineError::NotFound { .. })),
                "{id} is readable"
            );
        }
        assert!(s.get(&RecordRef::Id(keep)).is_ok());
        assert!(db.verify().unwrap().ok());
        db.close().unwrap();
    }

    fn store_with(n: usize) -> (Engram, Vec<RecordId>) {
        let db = Engram::open(
            "/inv",
            Options {
                backend: Arc::new(engram_storage::MemBackend::new()),
                ..Options::default()
            },
        )
        .unwrap();
        let s = db.session(Principal::admin("t"));
        let ids = (0..n)
            .map(|i| {
                s.append(vec![NewRecord::event("note", format!("r{i}"))])
                    .unwrap()[0]
                    .id
            })
            .collect();
        (db, ids)
    }

    #[test]
    #[should_panic(expected = "invariant violated: frame LSN")]
    fn a_frame_applied_out_of_order_stops_the_engine() {
        let (db, ids) = store_with(2);
        let mut st = db.inner.state.write();
        let m = st.meta(st.idx(ids[0]).unwrap()).clone();
        let f = db.inner.log.read(m.loc.segment, m.loc.offset).unwrap();
        let _ = apply_frame(
            &mut st,
            f.header.frame_type,
            f.header.frame_version,
            f.payload(),
            m.loc,
        );
    }

    #[test]
    fn transaction_time_going_back_on_replay_is_refused() {
        let (db, _) = store_with(1);
        let now = db.now();
        let id = db.inner.writer.lock().ids.mint(now);
        let mut r = empty_stored(id);
        r.tenant = "t".into();
        r.kind = "note".into();
        r.retention_class = DEFAULT_RETENTION_CLASS.into();
        r.ingested_at_ms = 1; // long before the stored record
        let payload = codec::encode_record(&r);
        let a = codec::view_record(&payload).unwrap();
        let mut st = db.inner.state.write();
        let loc = FrameLoc {
            segment: 1,
            offset: 0,
            lsn: st.applied_lsn + 1,
        };
        let e = st.apply_record(a, loc).unwrap_err();
        assert!(e.to_string().contains("ingested_at"), "{e}");
    }
}
