//! Opening a store: the log's recovery, the state from its checkpoint and
//! the log after it (or the whole log), the lexical snapshot and vector
//! spaces, and finishing a restore interrupted by a crash.

use std::collections::VecDeque;

use crate::lexical::PreparedText;

use super::workers::{checkpoint_loop, indexer_loop};
use super::*;

/// The fewest frames per batch (in a group's last segment) for which a
/// group is acknowledged before it is applied, while the commit hook holds
/// the state's write lock. Below it, a writer has too little to prepare
/// for its next batch to pay for waking early and parking again on that
/// lock: sixteen single-event writers lost 4–21% of their rate when every
/// group was. Counted per batch, not per group: a server's sixteen
/// connections each appending one record and its vector (two frames) make
/// a group of 32 frames (docs/benchmarks.md, "Large batches acknowledged
/// under the lock, applied after").
const ACK_BEFORE_APPLY_MIN_FRAMES: usize = engram_storage::log::PREPARE_MIN_FRAMES;

/// Whether the batches of a group's segment hold
/// [`ACK_BEFORE_APPLY_MIN_FRAMES`] frames or more, on average.
fn large_batches(frames: &[CommittedFrame<'_>]) -> bool {
    let batches = frames.iter().filter(|f| f.header.is_batch_end()).count();
    frames.len() >= ACK_BEFORE_APPLY_MIN_FRAMES * batches.max(1)
}

/// A store cut short that an internal open lets through, which every
/// other open refuses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unfinished {
    /// Neither (every public open).
    Refused,
    /// A backup's copy being taken (`store_dir::PARTIAL_BACKUP_FILE`).
    Backup,
    /// A new store a restore is filling (`store_dir::PARTIAL_RESTORE_FILE`).
    Restore,
}

impl Engram {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Engram> {
        Self::open_with_report(dir, opts).map(|(e, _)| e)
    }

    /// Opens the store and reports what recovery did.
    pub fn open_with_report(dir: impl AsRef<Path>, opts: Options) -> Result<(Engram, OpenReport)> {
        Self::open_dir(dir.as_ref(), opts, Unfinished::Refused)
    }

    /// [`Engram::open_with_report`], which also opens, with `unfinished`,
    /// a backup's copy before it is finished (`Engram::backup` compacts it)
    /// or a new store a restore is filling.
    pub(crate) fn open_dir(
        dir: &Path,
        opts: Options,
        unfinished: Unfinished,
    ) -> Result<(Engram, OpenReport)> {
        let dir = dir.to_path_buf();
        let real = opts.backend.clone();
        crate::store_dir::prepare_dir(
            real.as_ref(),
            &dir,
            (opts.create_if_missing, !opts.read_only),
            unfinished == Unfinished::Backup,
        )?;
        // A read-only open works through a copy-on-write overlay: it may
        // rebuild derived state in memory, and never changes a byte on disk.
        let backend: Arc<dyn Backend> = if opts.read_only {
            Arc::new(engram_storage::OverlayBackend::new(real.clone()))
        } else {
            real.clone()
        };
        let lock_path = layout::lock(&dir);
        let lock = real
            .try_lock_store(&lock_path, opts.read_only, &[&layout::log(&dir)])
            .map_err(io(&lock_path))?
            .ok_or(EngineError::Storage(StorageError::Locked {
                path: lock_path,
            }))?;
        recover_log_swap(backend.as_ref(), &dir)?;
        if unfinished != Unfinished::Restore {
            crate::store_dir::refuse_unfinished_restore(backend.as_ref(), &dir)?;
        }
        let mut report = OpenReport::default();
        // Derived state read (without changing it) before the log: what
        // it has applied was durable in the log, so recovery must not cut
        // below it.
        let (durable_lsn, durable_evidence) = durable_evidence(&backend, &dir);
        refuse_lost_log(backend.as_ref(), &dir, (durable_lsn, durable_evidence))?;
        // The lexical snapshot is decoded on a second thread while this one
        // recovers the log, opens the vector spaces and decodes the state
        // checkpoint: the two are independent, and each is a large share
        // of an open (docs/benchmarks.md, `engram bench open`).
        let lexical_path = layout::lexical(&dir);
        let (lexical_read, opened) = std::thread::scope(|sc| {
            let lexical =
                sc.spawn(|| crate::lexical::snapshot::read(backend.as_ref(), &lexical_path));
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
                let mut vectors = VectorSpaces::open(
                    backend.clone(),
                    &layout::vectors(&dir),
                    opts.hnsw,
                    opts.metric,
                )?;
                vectors.set_graph_precision(opts.graph_precision);
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
        // Used only when it names the frame this log holds at its LSN (a
        // snapshot of another store or an earlier log does not).
        let anchored = |lsn: u64, a: crate::lexical::snapshot::Anchor| {
            lsn == 0 || crate::checkpoint::anchored(&log, (a.segment, a.offset, lsn), a.payload_crc)
        };
        let (lexical, lexical_lsn) = match lexical_read {
            Some((lsn, a, Ok(ix))) if lsn <= last_lsn && anchored(lsn, a) => (ix, lsn),
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
        // An intact frame this build cannot apply is not disk damage: its
        // own error, not the log's.
        let mut not_applied = None;
        log.scan(replay_from, |f| {
            match apply_frame(
                &mut state,
                f.header.frame_type,
                f.header.frame_version,
                f.payload(),
                f.loc(),
            ) {
                Ok(()) => {
                    replayed += 1;
                    Ok(ControlFlow::Continue(()))
                }
                Err(e) => {
                    not_applied = Some(e);
                    Ok(ControlFlow::Break(()))
                }
            }
        })?;
        if let Some(e) = not_applied {
            return Err(e);
        }
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
        // the latest transaction time: of a record, or of an operation a
        // read may travel past (a status change, an expiry, a ledger
        // entry). Replay keeps an operation's time apart from the records'
        // (a record dated before an operation it follows, by a clock
        // stepped back before this rule, must still replay)
        let last_ingested_at = state.latest_transaction_time();
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
                pending_retracted: HashSet::new(),
                pending_reviewed: HashSet::new(),
                pending_expired: HashMap::new(),
                pending_deleted: HashMap::new(),
                pending_rules: HashMap::new(),
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
            bulk_indexing: Arc::default(),
            checkpointer_tx: Mutex::new(None),
            checkpointer: Mutex::new(None),
            closed: AtomicBool::new(false),
            maintenance: RwLock::new(()),
            access_ops: Mutex::new(()),
            ledger_sync: Mutex::new(Vec::new()),
        });
        Self::start_threads(&inner)?;
        let db = Engram { inner };
        // The ledger file must hold every deletion and revocation of the
        // log. One that cannot be written now for a full disk lags until
        // the next open or operation writes it (`verify` says so
        // meanwhile): a store on a full disk still opens to be read. Any
        // other failure to write it (a link to nothing, a directory in its
        // place) refuses the open, naming it.
        let (ledger, missing, written) = db.sync_ledger_counted()?;
        match written {
            Err(e @ EngineError::Storage(engram_storage::StorageError::DiskFull { .. })) => {
                db.ledger_lags("at open", Some(e));
            }
            written => written?,
        }
        if db.inner.opts.read_only {
            report.ledger_lines_missing = missing;
            report.restore_pending = backend_has_restore_pending(&db);
            if report.restore_pending {
                crate::maintenance::check_restore_pending(&db)?;
            }
            // Operations the ledger proves acknowledged that the log lost
            // (a damaged tail, whether recovery cut it or it reads as a log
            // that ended there) cannot be applied again without writing:
            // serving the state without them would show what was deleted.
            // (A pending restore is resumed by a writable open, which
            // re-applies them: the report says it is pending.)
            if !report.restore_pending {
                let missing = crate::maintenance::ledger_not_applied(&db, ledger);
                if !missing.is_empty() {
                    return Err(EngineError::ReadOnly {
                        action: format!(
                            "reading it (its log lacks {} operation(s) the ledger proves acknowledged, first: {} {}, lost with a damaged tail; a writable open applies them again)",
                            missing.len(),
                            missing[0].op,
                            missing[0].op_id
                        ),
                    });
                }
            }
        } else {
            report.restore_resumed = crate::maintenance::resume_restore(&db)?;
            // Operations the ledger proves acknowledged and the log no
            // longer holds: a tail recovery cut, but also one zeroed or cut
            // at a frame's edge (which reads as a log that ended there), or
            // segments removed by hand. (The lines are those `sync_ledger`
            // read: the file is read once per open.)
            report.ledger_reapplied = crate::maintenance::reapply_cut_ledger(&db, ledger)?;
        }
        Ok((db, report))
    }

    fn start_threads(inner: &Arc<Inner>) -> Result<()> {
        // Wake-ups for the indexer: one waiting is as good as many.
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        let hook_state = inner.state.clone();
        let hook_err = inner.apply_error.clone();
        let hook_tx = tx.clone();
        if !inner.opts.read_only {
            // What the prepare hook looked up while a large group was being
            // synced, by frame LSN, for the commit hook (both run on the
            // applier thread, prepare first). Entries of a group that never
            // became durable are dropped as older LSNs go by.
            let prepared = Arc::new(Mutex::new(VecDeque::<(u64, PreparedText)>::new()));
            let (prep_state, prep_out) = (inner.state.clone(), prepared.clone());
            let prepare = Box::new(move |frames: &[CommittedFrame<'_>]| {
                let st = prep_state.read();
                // over the cores for a large group (the caller of a large
                // batch is waiting, so its core is free)
                let done: Vec<(u64, PreparedText)> =
                    crate::split::map(frames, crate::split::SPLIT_MIN, |_, f| {
                        let (ft, v) = (f.header.frame_type, f.header.frame_version);
                        prepare_frame(&st, ft, v, f.payload, f.loc).map(|p| (f.loc.lsn, p))
                    })
                    .into_iter()
                    .flatten()
                    .collect();
                drop(st);
                prep_out.lock().extend(done);
            });
            inner.log.start_writer_prepared(
                Some(prepare),
                Box::new(move |frames: &[CommittedFrame<'_>], acks| {
                    let vectors_pending;
                    {
                        let mut ready = prepared.lock();
                        let mut st = hook_state.write();
                        // A group of large batches is acknowledged once no
                        // reader can start before it is applied: every read
                        // takes the state's lock, which this hook holds
                        // until then. Its writers prepare their next batches
                        // meanwhile. (Writers of small batches would only
                        // wake to wait for the lock: theirs is acknowledged
                        // once applied.)
                        if large_batches(frames) {
                            acks.send();
                        }
                        for f in frames {
                            while ready.front().is_some_and(|(lsn, _)| *lsn < f.loc.lsn) {
                                ready.pop_front();
                            }
                            let mine = match ready.front() {
                                Some((lsn, _)) if *lsn == f.loc.lsn => {
                                    ready.pop_front().map(|(_, p)| p)
                                }
                                _ => None,
                            };
                            if let Err(e) = apply_frame_prepared(
                                &mut st,
                                f.header.frame_type,
                                f.header.frame_version,
                                f.payload,
                                f.loc,
                                mine,
                            ) {
                                hook_err.lock().get_or_insert(e.to_string());
                            }
                        }
                        // Without waiting for a graph's lock: the indexer
                        // (low priority) may hold one, and every append
                        // waits for this hook.
                        vectors_pending = st.vectors.may_index();
                    }
                    // Wake the indexer only when there is something to index.
                    if vectors_pending {
                        let _ = hook_tx.try_send(());
                    }
                }),
            )?;
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
            let bulk = inner.bulk_indexing.clone();
            let handle = std::thread::Builder::new()
                .name("engram-indexer".into())
                .spawn(move || {
                    // A panic is recorded like an error (`stats`, `wait_indexed`),
                    // not left as a silent stop.
                    let err = ix_err.clone();
                    let run = std::panic::AssertUnwindSafe(|| indexer_loop(st, rx, ix_err, bulk));
                    if let Err(p) = std::panic::catch_unwind(run) {
                        let why = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        err.lock()
                            .get_or_insert_with(|| format!("the indexer panicked: {why}"));
                    }
                })
                .map_err(spawn_err)?;
            *inner.indexer.lock() = Some(handle);
        }
        *inner.indexer_tx.lock() = Some(tx);
        Ok(())
    }
}

/// Finishes or rolls back a restore's swap of log directories interrupted
/// by a crash: `log.restore` is the incoming copy, `log.old` the outgoing.
fn recover_log_swap(backend: &dyn Backend, dir: &Path) -> Result<()> {
    let log = layout::log(dir);
    let old = dir.join("log.old");
    let incoming = dir.join("log.restore");
    // The incoming copy is renamed to `log/` in one step: while it exists,
    // the swap has not happened and the store keeps its own log. (Only a
    // directory of Engram's making is one: a link or a file there is not.)
    let swapped =
        backend.list_dir(&incoming).is_err() || crate::store_dir::is_link(backend, &incoming);
    if !backend.exists(&log) && backend.list_dir(&old).is_ok() {
        // crashed between the two renames: put the old log back (a
        // directory: a file of that name is no log)
        backend.rename(&old, &log).map_err(io(&old))?;
    }
    // an incoming copy that never became the log is abandoned (rerun the restore)
    crate::store_dir::remove_transient(backend, &incoming)?;
    crate::store_dir::clear_outgoing_log(backend, &old, &log)?;
    // an online compaction that never swapped its copy in is abandoned
    crate::store_dir::remove_staging(backend, &layout::compact_staging(dir))?;
    // The entries a restore was to re-apply belong to the restored log only:
    // with the swap undone they must not touch the store's own log.
    let marker = layout::restore_pending(dir);
    if !swapped && backend.exists(&marker) {
        backend.remove_file(&marker).map_err(io(&marker))?;
    }
    backend.sync_dir(dir).map_err(io(dir))?;
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

/// The number of acknowledged operations `ledger.jsonl` records for a
/// store whose log holds no segment file (or only segments recovery takes
/// for a start cut short): its `log/` was removed, emptied or cut. `None` when the log has a segment, when a restore is pending
/// (a repair that cut the whole log, or a restore, re-applies the ledger
/// from `restore.pending` as the next open goes on), or when the ledger is
/// empty (a store whose creation was cut short before its first segment).
/// The one rule every open refuses by ([`refuse_lost_log`]) and
/// `engram repair` reports by.
pub(crate) fn lost_log_ops(
    backend: &dyn engram_storage::Backend,
    dir: &Path,
) -> Result<Option<u64>> {
    let log = crate::layout::log(dir);
    // A directory where a segment file belongs is named as such (the log's
    // own listing refuses it), not reported as a missing segment.
    engram_storage::log::segment::segment_numbers(backend, &log, false)?;
    // A segment counts unless recovery would remove it as a start cut
    // short (a header's length or less, and no whole header: the same
    // test), so a log whose only segments are such is as gone as one with
    // none. (A whole header with no frame is a log a repair cut to
    // nothing: the ledger may still name operations on records it no
    // longer holds.)
    let holds_frames = |name: &str| {
        let path = log.join(name);
        let Ok(f) = backend.open(&path, engram_storage::OpenMode::Read) else {
            return true;
        };
        let header = engram_storage::log::segment::SEGMENT_HEADER_BYTES;
        match f.len() {
            Ok(len) if len <= header as u64 => {
                let mut buf = vec![0u8; header];
                buf.truncate(usize::try_from(len).unwrap_or(header));
                use engram_storage::log::segment::{HeaderProblem, decode_header};
                f.read_exact_at(&mut buf, 0).is_err()
                    || !matches!(
                        decode_header(&buf),
                        Err(HeaderProblem::Incomplete | HeaderProblem::Damaged(_))
                    )
            }
            _ => true,
        }
    };
    let has_segment = backend.exists(&log)
        && backend.list_dir(&log).map_err(io(&log))?.iter().any(|e| {
            !e.is_dir
                && engram_storage::log::segment::parse_segment_file_name(&e.name).is_some()
                && holds_frames(&e.name)
        });
    if has_segment || backend.exists(&crate::layout::restore_pending(dir)) {
        return Ok(None);
    }
    let ops = crate::maintenance::read_ledger(backend, dir)?.len() as u64;
    Ok((ops > 0).then_some(ops))
}

/// Refuses a store whose log was removed while the ledger records
/// acknowledged operations ([`lost_log_ops`]): opening it would start an
/// empty log in its place (every record lost, and `verify` content with an
/// empty store). (With derived state present, the log's recovery refuses
/// it too, from the LSN the snapshots prove durable.)
fn refuse_lost_log(
    backend: &dyn engram_storage::Backend,
    dir: &Path,
    (durable_lsn, evidence): (u64, &str),
) -> Result<()> {
    let Some(ops) = lost_log_ops(backend, dir)? else {
        return Ok(());
    };
    let log = crate::layout::log(dir);
    // (derived state, when kept, knows how far the log went)
    let detail = if durable_lsn > ops {
        format!(
            "{} holds no whole segment file, but {evidence} shows LSN {durable_lsn} was durable \
             and ledger.jsonl records {ops} acknowledged operation(s)",
            log.display()
        )
    } else {
        format!(
            "{} holds no whole segment file, but ledger.jsonl records {ops} acknowledged \
             operation(s), so the log held at least {ops} frame(s)",
            log.display()
        )
    };
    Err(EngineError::Storage(StorageError::LogGap {
        first_lsn: 1,
        last_lsn: durable_lsn.max(ops),
        detail,
    }))
}

/// The highest LSN the derived state of the store in `dir` has applied
/// (and so proves was durable), and what holds it. Reads through `backend`
/// without changing anything when it is an overlay.
pub(crate) fn durable_evidence(
    backend: &std::sync::Arc<dyn engram_storage::Backend>,
    dir: &Path,
) -> (u64, &'static str) {
    // Headers only (their own checksums verified): cheap at every open.
    let ckpt = engram_storage::files::read_snapshot_header(
        backend.as_ref(),
        &crate::layout::checkpoint(dir),
        crate::checkpoint::MAGIC,
        crate::checkpoint::VERSION,
    )
    .ok()
    .flatten()
    .map_or(0, |h| h.applied_lsn);
    let lex = super::lexical_snapshot_lsn(backend.as_ref(), dir);
    if lex >= ckpt {
        (lex, "the lexical index snapshot")
    } else {
        (ckpt, "the state checkpoint")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_storage::frame::{FLAG_BATCH_END, FrameHeader};
    use engram_storage::log::FrameLoc;

    /// A segment's frames: batches of the given sizes, one after another.
    fn group(batches: &[usize]) -> Vec<CommittedFrame<'static>> {
        let mut out = Vec::new();
        for &n in batches {
            for i in 0..n {
                let lsn = out.len() as u64 + 1;
                out.push(CommittedFrame {
                    loc: FrameLoc {
                        segment: 1,
                        offset: 0,
                        lsn,
                    },
                    header: FrameHeader {
                        payload_len: 0,
                        lsn,
                        frame_type: codec::FRAME_RECORD,
                        frame_version: codec::PAYLOAD_VERSION,
                        flags: if i + 1 == n { FLAG_BATCH_END } else { 0 },
                        durable_before: 0,
                        payload_crc: 0,
                    },
                    payload: &[],
                });
            }
        }
        out
    }

    #[test]
    fn only_batches_of_32_frames_or_more_on_average_are_acknowledged_before_they_are_applied() {
        let min = ACK_BEFORE_APPLY_MIN_FRAMES;
        assert!(large_batches(&group(&[1000])));
        assert!(large_batches(&group(&[min])));
        assert!(!large_batches(&group(&[min - 1])));
        assert!(large_batches(&group(&[1000, 1000, 1000, 1000])));
        // sixteen writers' single records with their vectors: 32 frames,
        // sixteen batches
        assert!(!large_batches(&group(&[2; 16])));
        assert!(!large_batches(&group(&[1; 64])));
        // counted on average: one large batch among small ones
        assert!(large_batches(&group(&[100, 1, 1])));
        assert!(!large_batches(&group(&[40, 1, 1])));
    }
}
