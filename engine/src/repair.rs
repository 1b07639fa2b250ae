//! Operator repair of a store whose log recovery refused to open: see how
//! far the log is intact and what cutting it would lose, then cut it at a
//! named LSN (the cut bytes go to `quarantine/`, never deleted).
//!
//! After the cut, derived state (which may describe records past the cut)
//! is dropped and rebuilt, and every deletion and revocation recorded in
//! `ledger.jsonl` that the shortened log no longer holds is applied again,
//! exactly as after a restore: a repair never brings back deleted content.
//!
//! This module must never cut a log without an explicit LSN from the
//! operator.

use std::path::{Path, PathBuf};

use engram_storage::StorageError;
use engram_storage::files::write_all_durable;
use engram_storage::log::repair::{self as log_repair, LogInspection};
use serde::Serialize;

use crate::db::{Engram, Options};
use crate::error::{EngineError, Result};
use crate::layout;
use crate::maintenance::{RestoreReport, read_ledger, remove_derived, render_restore_pending};

/// What [`Engram::inspect_log`] found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inspection {
    /// Segment files.
    pub segments: usize,
    /// Every LSN up to this one is intact (and ends a batch).
    pub intact_through: u64,
    /// Batch ends a cut may keep (the latest few).
    pub recent_batch_ends: Vec<u64>,
    /// The first problem after `intact_through`.
    pub problem: Option<String>,
    /// Bytes after `intact_through`.
    pub bytes_after: u64,
    /// The highest LSN seen in any intact frame (after damage too).
    pub highest_lsn_seen: u64,
    /// LSN of the last frame of the intact part (`intact_through` may be
    /// past it, by frames a compaction dropped).
    pub last_frame_lsn: u64,
    /// The highest LSN derived state proves was durable (acknowledged).
    pub durable_lsn: u64,
    /// What proves it.
    pub durable_evidence: String,
}

/// What [`Engram::repair_log`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    /// The log now ends at this LSN.
    pub kept_through: u64,
    /// Where the cut bytes went.
    pub quarantine: PathBuf,
    /// Bytes moved there.
    pub bytes_quarantined: u64,
    /// Deletions and revocations applied again from the ledger.
    pub reapplied: RestoreReport,
}

impl Engram {
    /// Reads the log of the (closed) store in `dir` and reports how far it
    /// is intact, changing nothing.
    pub fn inspect_log(dir: impl AsRef<Path>, opts: &Options) -> Result<Inspection> {
        let dir = dir.as_ref();
        crate::store_dir::prepare(opts.backend.as_ref(), dir, false, false)?;
        // (an unfinished restore is finished by the restore, not repaired)
        crate::store_dir::refuse_unfinished_restore(opts.backend.as_ref(), dir)?;
        // A store in use is refused: its active segment's tail is being
        // written (and preallocated) while it would be read, which reads
        // as damage. A lock that cannot be taken at all (read-only media,
        // where nothing writes either) does not stop the reading.
        let lock_path = layout::lock(dir);
        let _lock = match opts
            .backend
            .try_lock_store(&lock_path, false, &[&layout::log(dir)])
        {
            Ok(Some(g)) => Some(g),
            Ok(None) => {
                return Err(EngineError::Storage(StorageError::Locked {
                    path: lock_path,
                }));
            }
            Err(_) => None,
        };
        let (mut durable_lsn, mut evidence) = crate::db::durable_evidence(&opts.backend, dir);
        let LogInspection {
            n_segments,
            intact_through,
            recent_batch_ends,
            mut problem,
            bytes_after,
            highest_lsn_seen,
            last_frame_lsn,
        } = log_repair::inspect(opts.backend.as_ref(), &layout::log(dir))?;
        // A log with no segment at all, where the ledger proves operations
        // were acknowledged (every open refuses it): the loss is named,
        // and a cut at 0 accepts it (the ledger is applied again).
        if problem.is_none() {
            if let Some(ops) = crate::db::lost_log_ops(opts.backend.as_ref(), dir)? {
                problem = Some(format!(
                    "the log holds no whole segment file, but ledger.jsonl records {ops} acknowledged \
                     operation(s): the log was removed"
                ));
                if ops > durable_lsn {
                    durable_lsn = ops;
                    evidence = "ledger.jsonl";
                }
            }
        }
        Ok(Inspection {
            segments: n_segments,
            intact_through,
            recent_batch_ends,
            problem,
            bytes_after,
            highest_lsn_seen,
            last_frame_lsn,
            durable_lsn,
            durable_evidence: evidence.to_string(),
        })
    }

    /// Cuts the log of the (closed) store in `dir` after `keep_through` (a
    /// batch-end LSN within the intact part; see [`Engram::inspect_log`]),
    /// moving the cut bytes into `quarantine/repair-N/`, drops derived
    /// state, and opens the store once to rebuild it and re-apply the
    /// ledger's deletions and revocations that the cut removed.
    pub fn repair_log(
        dir: impl AsRef<Path>,
        opts: &Options,
        keep_through: u64,
    ) -> Result<RepairReport> {
        let dir = dir.as_ref();
        let backend = opts.backend.clone();
        crate::store_dir::prepare(backend.as_ref(), dir, false, true)?;
        // (its `restore.pending` would let an unfinished restore open as
        // an empty store: the restore is what finishes it)
        crate::store_dir::refuse_unfinished_restore(backend.as_ref(), dir)?;
        let io = |p: &Path, e| EngineError::Storage(StorageError::io(p, e));
        // The lock first: a store in use is refused with no byte changed.
        let lock_path = layout::lock(dir);
        let lock = backend
            .try_lock_store(&lock_path, false, &[&layout::log(dir)])
            .map_err(|e| io(&lock_path, e))?
            .ok_or(EngineError::Storage(StorageError::Locked {
                path: lock_path.clone(),
            }))?;
        // A cut the log does not allow is refused with nothing changed.
        // (A removed log/ is an empty log: only a cut at 0 is allowed.)
        let log_dir = layout::log(dir);
        if !backend.exists(&log_dir) {
            if keep_through > 0 {
                return Err(EngineError::invalid(
                    "truncate-after",
                    format!(
                        "{} is missing: no LSN is left to keep; only --truncate-after 0 accepts the loss",
                        log_dir.display()
                    ),
                ));
            }
            backend
                .create_dir_all(&log_dir)
                .map_err(|e| io(&log_dir, e))?;
        }
        log_repair::check_cut(backend.as_ref(), &log_dir, keep_through)?;
        let quarantine = {
            let root = dir.join("quarantine");
            backend.create_dir_all(&root).map_err(|e| io(&root, e))?;
            let n = backend.list_dir(&root).map_err(|e| io(&root, e))?.len() + 1;
            root.join(format!("repair-{n}"))
        };
        let cut = {
            let _lock = lock;
            // The ledger's deletions and revocations are applied again after
            // the cut (by the next open, even if this process stops now).
            let ledger = read_ledger(backend.as_ref(), dir)?;
            write_all_durable(
                backend.as_ref(),
                &layout::restore_pending(dir),
                render_restore_pending(&ledger).as_bytes(),
            )?;
            // Derived state goes before the log is cut: it proves LSNs
            // durable that the cut removes, and a crash between the two
            // would leave a store that refuses to open.
            remove_derived(backend.as_ref(), dir)?;
            log_repair::repair(
                backend.as_ref(),
                &layout::log(dir),
                keep_through,
                &quarantine,
            )?
        };
        let (db, opened) = Engram::open_with_report(
            dir,
            Options {
                create_if_missing: false,
                read_only: false,
                ..opts.clone()
            },
        )?;
        db.close()?;
        Ok(RepairReport {
            kept_through: cut.kept_through,
            quarantine,
            bytes_quarantined: cut.bytes_quarantined,
            reapplied: opened.restore_resumed.unwrap_or_default(),
        })
    }
}
