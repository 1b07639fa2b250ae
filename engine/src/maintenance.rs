//! Maintenance: the review queue, the deletion/revocation ledger,
//! compaction (purging deleted bytes), backup and restore, and the
//! rebuild-and-compare check of derived state.
//!
//! - **Ledger** (`ledger.jsonl` in the data directory): a durable copy of
//!   every deletion, revocation and legal hold (placed or lifted: what
//!   compaction may purge depends on it), appended when the operation is written
//!   and reconciled with the log on every open. Restore does not replace it,
//!   so restoring an older backup can re-apply what happened after it.
//! - **Compaction** (store closed): records that are deleted (or past their
//!   class's retention period, which is first recorded as a deletion with
//!   reason `retention:<class>`) and not under a legal hold are replaced in
//!   the log by tombstones (id, tenant, type, sources, hashed external id,
//!   deleting operation): the segment is rewritten to a temporary file,
//!   synced and renamed over the old one. All derived files (the state
//!   checkpoint included) are deleted first and rebuilt from the rewritten
//!   log, so the purged
//!   content exists in no file under the data directory.
//! - **Online compaction** (store open): the same purge, built in a copy
//!   of the store while it serves and swapped in with writes and then
//!   reads paused (see `online.rs`).
//! - **Backup**: the log (each segment up to its durable end at one
//!   instant) plus settings and the ledger, into a new directory.
//! - **Restore** (store closed): the entries to re-apply (the store's
//!   ledger plus any extra one) are first written durably to
//!   `restore.pending`; then the backup's log replaces the store's; derived
//!   state is rebuilt; every entry not in the restored log is re-applied;
//!   `restore.pending` is removed; a compaction then purges what those
//!   deletions cover. If the process stops anywhere in between, the next
//!   open finds `restore.pending` and re-applies its entries before the
//!   store serves anything, so an interrupted restore never resurrects
//!   deleted or revoked content (its purge then waits for the next
//!   `compact`).
//! - **Rebuild and verify**: the deterministic parts of derived state (ids,
//!   lineage, chunk boundaries, eligibility, index membership, content keys,
//!   graph and lexical encodings, record locations, the checkpoint
//!   encoding) are listed before and
//!   after deleting and rebuilding all derived state; any difference is
//!   reported line by line.
//!
//! This module must never purge a record that is not deleted, and never
//! purge under a legal hold.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use engram_storage::files::{append_durable, read_all, write_all_durable};
use engram_storage::frame::FrameType;
use engram_storage::log::Rewrite;
use engram_storage::{Backend, SegmentLog, StorageError};
use serde::{Deserialize, Serialize};

use crate::codec::{self, StoredTombstone};
use crate::db::{Engram, Options, Session};
use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::layout;
use crate::model::{Record, RecordRef, Status};
use crate::state::{LedgerEntry, LedgerWhat, State};
use crate::store_dir::absolute;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::Storage(StorageError::io(path, e))
}

mod ledger;
mod online;
mod restore;

pub use ledger::{LedgerLine, ledger_path, read_ledger};
use ledger::{check_line, read_external_ledger};
pub(crate) use ledger::{
    check_restore_pending, ledger_not_applied, reapply_cut_ledger, render_restore_pending,
    restore_pending_damaged, resume_restore,
};
pub use online::OnlineCompaction;
pub use restore::RestoreReport;

impl Session {
    /// Review candidates of the tenant that the session may decide (a
    /// reviewer's own candidates are not in its queue), oldest first.
    pub fn review_queue(&self) -> Result<Vec<Record>> {
        self.db.check_open()?;
        let st = self.db.state();
        self.authorize(&st, crate::authz::Operation::Review, None)?;
        let Some(t) = st.tenant_sym(self.principal.tenant()) else {
            return Ok(Vec::new());
        };
        // (a tenant known only by its settings, grants or rules holds no
        // record, and has no bitmap)
        let (Some(c), Some(mine)) = (st.bm_status.get(&Status::Candidate), st.bm_tenant.get(&t))
        else {
            return Ok(Vec::new());
        };
        let held = self.held_labels(&st);
        let (expired, _) = st.past_retention_set(t, self.db.now());
        let actor = self.actor(&st);
        let mut out = Vec::new();
        for i in (c & mine).iter() {
            // what the matrix lets this principal decide: a reviewer's own
            // candidates are not its to approve, so not in its queue
            let may = crate::authz::decide(
                actor,
                crate::authz::Operation::Review,
                Some(self.target(&st, i, &held)),
            ) == crate::authz::Decision::Allow;
            if may && self.can_read_listed(&st, i, &held, &expired) {
                out.push(self.view(&st, i, &held)?);
            }
        }
        Ok(out)
    }
}

/// What compaction did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// An unacknowledged torn tail the store's open cut first (in words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_cut: Option<String>,
    /// Records whose content was purged (now tombstones).
    pub purged: usize,
    /// Records deleted now because their retention period passed.
    pub retention_deleted: usize,
    /// Deleted records kept because of a legal hold.
    pub held: usize,
    /// Segments rewritten.
    pub segments_rewritten: usize,
    /// Log bytes before and after.
    pub log_bytes_before: u64,
    /// Log bytes after.
    pub log_bytes_after: u64,
}

fn under_hold(st: &State, idx: u32) -> bool {
    let m = st.meta(idx);
    let Some(t) = st.tenants.get(&m.tenant) else {
        return false;
    };
    if t.holds.is_empty() {
        return false;
    }
    if t.holds.contains("tenant") {
        return true;
    }
    let name = |s: Option<u32>| s.map(|x| st.strings.name(x).to_string());
    let mut keys = Vec::new();
    if let Some(u) = name(m.user) {
        keys.push(format!("user:{u}"));
    }
    if let Some(c) = name(m.conversation) {
        keys.push(format!("conversation:{c}"));
    }
    if let Some(a) = name(m.agent) {
        keys.push(format!("agent:{a}"));
    }
    for l in &m.scope_labels {
        keys.push(format!("label:{}", st.strings.name(*l)));
    }
    keys.iter().any(|k| t.holds.contains(k))
}

impl Engram {
    /// Records every retention expiry as a deletion (reason
    /// `retention:<class>`), also under a legal hold: a hold keeps the
    /// bytes (the purge leaves them, and counts them in `report.held`), not
    /// the record's eligibility, so a retention period relaxed later does
    /// not bring held, expired content back.
    fn delete_expired(&self, report: &mut CompactReport) -> Result<()> {
        let now = self.now();
        let expired: Vec<(String, RecordId, String)> = {
            let st = self.state();
            let mut v = Vec::new();
            for t in st.tenants.values() {
                for (class, period) in &t.retention {
                    let (Some(p), Some(sym)) = (period, st.strings.get(class)) else {
                        continue;
                    };
                    let Some(bm) = st.bm_retention.get(&sym) else {
                        continue;
                    };
                    let n = st.ingested_prefix(now.saturating_sub(*p));
                    for i in bm.iter().take_while(|&i| i < n) {
                        let m = st.meta(i);
                        if st.strings.name(m.tenant) == t.name && m.status != Status::Deleted {
                            v.push((t.name.clone(), m.id, class.clone()));
                        }
                    }
                }
            }
            v
        };
        for (tenant, id, class) in &expired {
            let s = self.session(crate::principal::Principal::admin(tenant.clone()));
            // A record may already be gone with an earlier one's chain.
            match s.delete_expired(*id, class) {
                Ok(_) | Err(EngineError::InvalidState { .. }) => report.retention_deleted += 1,
                Err(e) => return Err(e),
            }
        }
        // the ledger file once, for all of them (as after one operation:
        // a failure to write it leaves it lagging, and `verify` says so)
        if !expired.is_empty() {
            let synced = self.sync_ledger();
            self.ledger_lags("after retention deletions", synced.err());
        }
        Ok(())
    }
}

/// The tombstone of every deleted record not yet purged and not under a
/// legal hold (those are counted in `report.held`), by record id. A record
/// in `purged_before` (purged in the store a restore replaced) is purged
/// whatever the holds: a hold keeps the bytes it found, and it never found
/// these.
fn purge_set(
    st: &State,
    report: &mut CompactReport,
    purged_before: &HashSet<[u8; 16]>,
) -> HashMap<[u8; 16], StoredTombstone> {
    let mut deleted_by: HashMap<u32, [u8; 16]> = HashMap::new();
    for e in &st.ledger {
        if let LedgerWhat::Delete { target, reason } = &e.what {
            if let Some(i) = st.idx(*target) {
                for v in st.deletion_set_for(i, reason.as_deref()) {
                    deleted_by.entry(v).or_insert(e.op_id.to_bytes());
                }
            }
        }
    }
    let mut purge = HashMap::new();
    for (i, m) in st.metas.iter().enumerate() {
        let i = crate::state::idx_of(i);
        if m.status != Status::Deleted || m.tombstone {
            continue;
        }
        if under_hold(st, i) && !purged_before.contains(&m.id.to_bytes()) {
            report.held += 1;
            continue;
        }
        purge.insert(
            m.id.to_bytes(),
            StoredTombstone {
                id: m.id.to_bytes(),
                tenant: st.strings.name(m.tenant).to_string(),
                record_type: m.rtype.code(),
                ingested_at_ms: m.ingested_at,
                sources: st
                    .sources
                    .get(&i)
                    .map(|v| v.iter().map(|&s| st.meta(s).id.to_bytes()).collect())
                    .unwrap_or_default(),
                external_id_sha256: m
                    .external_id
                    .as_ref()
                    .map(|e| crate::canonical::sha256(e.as_bytes())),
                deleted_by: deleted_by.get(&i).copied().unwrap_or([0; 16]),
                access: st.access_names(i),
                supersedes: m.supersedes.map(|s| st.meta(s).id.to_bytes()),
                writer: st.strings.name(m.writer).to_string(),
            },
        );
    }
    purge
}

/// What went wrong in an I/O error, in words, without the OS's error
/// number (" (os error 2)").
fn io_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(at) => s[..at].to_string(),
        None => s,
    }
}

/// Whether `path` is `dir` or below it (compared after making both
/// absolute, without requiring them to exist).
fn inside(path: &Path, dir: &Path) -> bool {
    absolute(path).starts_with(absolute(dir))
}

fn lock_dir(opts: &Options, dir: &Path) -> Result<engram_storage::backend::LockGuard> {
    let lock_path = layout::lock(dir);
    opts.backend
        .try_lock_store(&lock_path, false, &[&layout::log(dir)])
        .map_err(io(&lock_path))?
        .ok_or(EngineError::Storage(StorageError::Locked {
            path: lock_path,
        }))
}

/// The id in the first frame of `log` (a record, tombstone or operation;
/// a tombstone keeps its record's id, so compaction does not change it).
fn first_frame_id(log: &SegmentLog) -> Option<RecordId> {
    let mut id = None;
    log.scan(0, |f| {
        id = frame_id(f);
        Ok(std::ops::ControlFlow::Break(()))
    })
    .ok()?;
    id
}

/// The id a frame carries: its record's, tombstone's or operation's.
fn frame_id(f: &engram_storage::FrameRef) -> Option<RecordId> {
    let (ft, payload) = (f.header.frame_type, f.payload());
    if ft == codec::FRAME_RECORD {
        codec::view_record(payload).ok().map(|a| a.id)
    } else if ft == codec::FRAME_OP {
        codec::view_op(payload).ok().map(|a| a.id)
    } else if ft == codec::FRAME_TOMBSTONE {
        codec::read_tombstone(payload, f.header.frame_version)
            .ok()
            .map(|t| t.id)
    } else {
        None
    }
    .map(RecordId::from_bytes)
}

/// The newest id in `log` of a record, a tombstone or an operation the
/// ledger records (what an open's id generator learns from a log, so what
/// every later id is minted above), and the ids of its operations. (Not
/// an expiry's or a review's id: the generator does not learn those, and
/// with the clock set back a later deletion may sort below one.)
fn log_ids(
    log: &SegmentLog,
) -> engram_storage::StorageResult<(Option<RecordId>, BTreeSet<RecordId>)> {
    let (mut newest, mut ops) = (None, BTreeSet::new());
    log.scan(0, |f| {
        if let Some(id) = frame_id(f) {
            let is_op = f.header.frame_type == codec::FRAME_OP;
            if !is_op || restore::in_ledger(f.payload()) {
                newest = newest.max(Some(id));
            }
            if is_op {
                ops.insert(id);
            }
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    Ok((newest, ops))
}

/// Records in `log`: its record and tombstone frames (each is one record
/// of the state it replays to).
fn count_records(log: &SegmentLog) -> engram_storage::StorageResult<u64> {
    let mut n = 0u64;
    log.scan(0, |f| {
        if f.header.frame_type == codec::FRAME_RECORD
            || f.header.frame_type == codec::FRAME_TOMBSTONE
        {
            n += 1;
        }
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    Ok(n)
}

/// Removes the derived state of the store in `dir` (the state checkpoint,
/// snapshots, vector files, a legacy catalog): only files Engram names;
/// anything else stays.
pub(crate) fn remove_derived(backend: &dyn Backend, dir: &Path) -> Result<()> {
    let derived = layout::derived(dir);
    // (a `derived` linked where the log is, or around the store, would
    // take the log's segments with it)
    if backend.exists(&derived) && crate::store_dir::overlaps_another_part(backend, &derived) {
        return Err(EngineError::invalid(
            "store directory",
            format!(
                "{} leads where another part of the store is (its log, or the store itself): \
                 removing derived state there would remove that too; give derived/ a place \
                 of its own, then run the command again; nothing was changed",
                derived.display()
            ),
        ));
    }
    crate::store_dir::remove_owned(backend, &layout::legacy_catalog(dir))?;
    crate::store_dir::remove_owned(backend, &derived)?;
    backend.sync_dir(dir).map_err(io(dir))?;
    Ok(())
}

/// Checks, without changing anything, that the whole log of the store in
/// `dir` replays: opens it read-only through an overlay in which its
/// derived state is removed (so no checkpoint covers a frame that cannot
/// be applied). Run before a rebuild removes derived state for real: a log
/// that cannot be replayed keeps its checkpoint, and the store still opens.
pub(crate) fn check_replays(dir: &Path, opts: &Options) -> Result<()> {
    // A log that lacks what derived state proves acknowledged (segments
    // removed, or cut at a frame's edge) replays, but rebuilding from it
    // would discard the only evidence of the loss.
    let seen = Engram::inspect_log(dir, opts)?;
    // (held to the last frame: derived state is always taken at a frame
    // it applied, and a header's recorded end is no frame)
    if seen.problem.is_none() && seen.durable_lsn > seen.last_frame_lsn {
        return Err(EngineError::Corrupt {
            what: "the log".into(),
            detail: format!(
                "it ends at LSN {} but {} shows LSN {} was acknowledged (segment files removed, or cut at a frame's edge); rebuilding would discard that evidence: put the missing segments back, or see `engram repair`. Nothing was changed",
                seen.last_frame_lsn, seen.durable_evidence, seen.durable_lsn
            ),
        });
    }
    let overlay: std::sync::Arc<dyn Backend> =
        std::sync::Arc::new(engram_storage::OverlayBackend::new(opts.backend.clone()));
    remove_derived(overlay.as_ref(), dir)?;
    let ro = Options {
        backend: overlay,
        read_only: true,
        create_if_missing: false,
        background_indexing: false,
        ..opts.clone()
    };
    Engram::open(dir, ro)?.close()
}

/// What an open inside a compaction lets through: a backup's copy.
fn unfinished(backup_copy: bool) -> crate::db::Unfinished {
    if backup_copy {
        crate::db::Unfinished::Backup
    } else {
        crate::db::Unfinished::Refused
    }
}

/// What a compaction runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Compacting {
    /// A store (retention expiries are recorded as deletions first).
    Store,
    /// A backup's copy while it is taken (it holds the partial marker).
    BackupCopy,
}

impl Engram {
    /// Compacts the (closed) store in `dir`: see the module documentation.
    pub fn compact(dir: impl AsRef<Path>, opts: &Options) -> Result<CompactReport> {
        Self::compact_with(dir.as_ref(), opts, Compacting::Store, &HashSet::new())
    }

    /// Compaction. A store's also deletes records past their retention
    /// period first; a backup's copy is only purged of what was deleted
    /// when it was taken, and is opened while it is unfinished.
    fn compact_with(
        dir: &Path,
        opts: &Options,
        what: Compacting,
        purged_before: &HashSet<[u8; 16]>,
    ) -> Result<CompactReport> {
        let mut report = CompactReport::default();
        let copy = what == Compacting::BackupCopy;
        // 1. Record retention expiries as deletions; find what to purge.
        let purge: HashMap<[u8; 16], StoredTombstone> = {
            let (db, opened) = Engram::open_dir(dir, opts.clone(), unfinished(copy))?;
            report.tail_cut = opened.log.truncation.map(|t| t.to_string());
            if what == Compacting::Store {
                db.delete_expired(&mut report)?;
            }
            let purge = purge_set(&db.state(), &mut report, purged_before);
            db.close()?;
            purge
        };
        // Purging removes derived state, and the store then opens by a
        // replay of its whole log: a log that does not replay (a frame
        // this build cannot apply, covered by the checkpoint) is refused
        // first, with the store still opening. (A backup's copy was just
        // replayed whole by the open above: its derived state is its own.)
        if !purge.is_empty() && !copy {
            check_replays(dir, opts)?;
        }
        Self::purge_log(dir, opts, &purge, &mut report, copy)?;
        Ok(report)
    }

    /// Compaction's second half on the closed store in `dir`: the records
    /// of `purge` become tombstones in the log, and derived state is
    /// rebuilt from it.
    fn purge_log(
        dir: &Path,
        opts: &Options,
        purge: &HashMap<[u8; 16], StoredTombstone>,
        report: &mut CompactReport,
        unfinished_backup: bool,
    ) -> Result<()> {
        // 2. Rewrite the segments holding purged records. Derived state (it
        // holds the purged content too) goes first, so a crash in between
        // never leaves it behind: it is rebuilt from the log on open.
        let _lock = lock_dir(opts, dir)?;
        if !purge.is_empty() {
            remove_derived(opts.backend.as_ref(), dir)?;
        }
        let (log, _) = SegmentLog::open(opts.backend.clone(), &layout::log(dir), opts.log.clone())?;
        report.log_bytes_before = log.stats().bytes;
        if !purge.is_empty() {
            for (no, _) in log.segments() {
                let mut touches = false;
                log.scan(0, |f| {
                    if f.segment == no && f.header.frame_type == codec::FRAME_RECORD {
                        if let Ok(a) = codec::view_record(f.payload()) {
                            if purge.contains_key(&a.id) {
                                touches = true;
                                return Ok(std::ops::ControlFlow::Break(()));
                            }
                        }
                    }
                    Ok(std::ops::ControlFlow::Continue(()))
                })?;
                if !touches {
                    continue;
                }
                log.rewrite_segment(no, |f| {
                    if f.header.frame_type == codec::FRAME_VECTOR {
                        // a vector is derived from the content: it goes too
                        return match codec::view_vector(f.payload()) {
                            Ok(a) if purge.contains_key(&a.record) => Rewrite::Drop,
                            _ => Rewrite::Keep,
                        };
                    }
                    if f.header.frame_type != codec::FRAME_RECORD {
                        return Rewrite::Keep;
                    }
                    match codec::view_record(f.payload())
                        .ok()
                        .and_then(|a| purge.get(&a.id))
                    {
                        Some(t) => Rewrite::Replace {
                            frame_type: FrameType(codec::FRAME_TOMBSTONE.0),
                            frame_version: codec::TOMBSTONE_VERSION,
                            payload: codec::encode_tombstone(t),
                        },
                        None => Rewrite::Keep,
                    }
                })?;
                report.segments_rewritten += 1;
            }
            report.purged = purge.len();
        }
        report.log_bytes_after = log.stats().bytes;
        drop(log);
        drop(_lock);
        let db = Engram::open_dir(dir, opts.clone(), unfinished(unfinished_backup))?.0;
        db.close()
    }

    /// Copies the store into `dest` (through `backend`): a marker, the log
    /// (each segment up to its durable end at one instant), the settings and
    /// the ledger brought up to date first. Returns the last LSN copied.
    fn copy_store(&self, backend: &dyn Backend, dest: &Path) -> Result<u64> {
        self.sync_ledger()?;
        backend.create_dir_all(dest).map_err(io(dest))?;
        crate::store_dir::write_marker(backend, dest)?;
        // The ledger before the log: a ledger line is written only once its
        // operation is durable in the log, so every line copied now names
        // an operation the log copied next holds. (Copied after, it could
        // name a deletion made while the log was copied: opening the copy
        // would apply it again, past the LSN the backup records.) What the
        // copied log holds beyond the copied ledger, the copy's first open
        // writes into its ledger from its log.
        for name in ["settings.snap", "ledger.jsonl"] {
            if let Some(bytes) = read_all(self.backend().as_ref(), &self.dir().join(name))? {
                write_all_durable(backend, &dest.join(name), &bytes)?;
            }
        }
        Ok(self.log().copy_to(backend, &layout::log(dest))?)
    }

    /// Writes a backup of the store into `dest` (which must not exist or be
    /// empty): the log up to one instant, the settings and the ledger.
    /// The store stays open and writable meanwhile.
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<BackupReport> {
        self.check_open()?;
        let dest = dest.as_ref();
        // The copy goes to the real file system even from a read-only open
        // (whose own backend keeps changes in memory); the store's files are
        // read through the store's backend.
        let backend = self.options().backend.as_ref();
        // A restore not yet finished (a read-only open cannot finish it):
        // the log holds operations its state does not, and a copy of it
        // would be a backup no restore accepts.
        if backend.exists(&layout::restore_pending(self.dir())) {
            return Err(EngineError::invalid(
                "store",
                "a restore of this store is not finished: run any command that writes \
                 (or the same `engram restore` again), then back up",
            ));
        }
        // Whatever is wrong with the destination is the caller's to fix (a
        // file, a path under a file, a place it may not write): said as
        // invalid input, before anything is copied.
        let unusable = |e: EngineError| match e {
            EngineError::InvalidInput { .. } => e,
            other => EngineError::invalid("backup directory", other.to_string()),
        };
        crate::store_dir::check_empty_target(backend, dest, "backup directory")
            .map_err(unusable)?;
        // (through symbolic links too: a link into the store is inside it)
        // (and the store's own directories may be links elsewhere: a
        // destination inside where its log or derived state really lives
        // is inside it too)
        let real = |p: &Path| backend.real_path(&absolute(p));
        let real_dest = real(dest);
        let store_parts = [
            self.dir().to_path_buf(),
            layout::log(self.dir()),
            layout::derived(self.dir()),
        ];
        if inside(dest, self.dir()) || store_parts.iter().any(|p| inside(&real_dest, &real(p))) {
            return Err(EngineError::invalid(
                "backup directory",
                format!(
                    "{} is inside the store: a backup must live outside it",
                    dest.display()
                ),
            ));
        }
        // nor inside another store, whose maintenance removes what it
        // owns under its directories (a restore there moved the backup
        // into its `log.old/`)
        crate::store_dir::refuse_inside_store(
            backend,
            dest,
            "backup directory",
            "a backup must live outside every store",
        )?;
        // (a store's log/ may be a link to a directory elsewhere, with no
        // marker above it)
        if let Some(log) = crate::store_dir::enclosing_log_dir(backend, dest) {
            return Err(EngineError::invalid(
                "backup directory",
                format!(
                    "{} is inside {}, which holds a log's segment files (a store's log, or a \
                     backup's): a backup must live outside every store",
                    dest.display(),
                    log.display()
                ),
            ));
        }
        let created = !backend.exists(dest);
        // (an empty destination may hold a lock file or a marker of an
        // unfinished restore, which `classify` takes as empty: kept)
        let before: HashSet<String> = if created {
            HashSet::new()
        } else {
            backend
                .list_dir(dest)
                .map_err(io(dest))?
                .into_iter()
                .map(|e| e.name)
                .collect()
        };
        backend.create_dir_all(dest).map_err(|e| {
            match StorageError::io(dest, e) {
                // (no room for a directory entry: the disk's, not the path's)
                full @ StorageError::DiskFull { .. } => EngineError::Storage(full),
                StorageError::Io { source, .. } => EngineError::invalid(
                    "backup directory",
                    format!(
                        "{} cannot be created: {}",
                        dest.display(),
                        io_reason(&source)
                    ),
                ),
                other => EngineError::Storage(other),
            }
        })?;
        let taken = self.backup_into(backend, dest);
        if taken.is_err() {
            // What it wrote goes with it (on a full disk, the partial copy
            // held the space to free, and the directory it left refused
            // the retry its error asked for): the directory it created, or
            // what was not in the destination before. (A process stopped
            // meanwhile leaves it marked unfinished, `backup.partial`.)
            let _ = if created {
                backend.remove_dir_all(dest)
            } else {
                backend.list_dir(dest).and_then(|entries| {
                    entries
                        .iter()
                        .filter(|e| !before.contains(&e.name))
                        .try_for_each(|e| {
                            let p = dest.join(&e.name);
                            if e.is_dir {
                                backend.remove_dir_all(&p)
                            } else {
                                backend.remove_file(&p)
                            }
                        })
                })
            };
        }
        taken
    }

    /// [`Engram::backup`] into `dest`, an empty directory it may write.
    fn backup_into(&self, backend: &dyn Backend, dest: &Path) -> Result<BackupReport> {
        // Marked unfinished until `backup.json` is durable: a backup cut
        // short is no store and no backup (store_dir::PARTIAL_BACKUP_FILE).
        let partial = dest.join(crate::store_dir::PARTIAL_BACKUP_FILE);
        write_all_durable(
            backend,
            &partial,
            b"a backup being taken; if no backup is running, it was cut short: remove this directory\n",
        )?;
        backend.sync_dir(dest).map_err(io(dest))?;
        let _m = self.writes_pause();
        let last = self.copy_store(backend, dest)?;
        let created_at_ms = self.now();
        // Content deleted before the backup must not leave with it: the
        // copy is compacted (its deleted records become tombstones), then
        // its derived state, which held them too, is dropped.
        let copy_opts = Options {
            create_if_missing: false,
            read_only: false,
            background_indexing: false,
            ..self.options().clone()
        };
        let c = Self::compact_with(dest, &copy_opts, Compacting::BackupCopy, &HashSet::new())?;
        remove_derived(backend, dest)?;
        // Counted in the copy: records appended while it was taken are not
        // in it.
        let (copy_log, _) = SegmentLog::open(
            self.backend().clone(),
            &layout::log(dest),
            copy_opts.log.clone(),
        )?;
        let records = count_records(&copy_log)?;
        // The copy's own log is what `backup.json` describes (a restore
        // checks it runs to this LSN): the same as `last` unless opening
        // the copy appended to it.
        let last = copy_log.last_lsn().max(last);
        drop(copy_log);
        let report = BackupReport {
            last_lsn: last,
            created_at_ms,
            records,
            purged: c.purged as u64,
        };
        write_all_durable(
            backend,
            &dest.join(crate::store_dir::BACKUP_FILE),
            serde_json::to_string_pretty(&report)
                .expect("report serializes")
                .as_bytes(),
        )?;
        backend.remove_file(&partial).map_err(io(&partial))?;
        backend.sync_dir(dest).map_err(io(dest))?;
        Ok(report)
    }

    /// Lists the deterministic parts of derived state (see the module doc).
    pub fn derived_manifest(&self) -> Result<Vec<String>> {
        let st = self.state();
        let mut out = Vec::new();
        for (i, m) in st.metas.iter().enumerate() {
            let i = crate::state::idx_of(i);
            let sources: Vec<String> = st
                .sources
                .get(&i)
                .map(|v| v.iter().map(|&s| st.meta(s).id.to_string()).collect())
                .unwrap_or_default();
            let vectors: Vec<String> = st
                .vectors
                .all()
                .iter()
                .filter_map(|s| {
                    // the row's bytes too: a row damaged in place differs
                    // from the one a rebuild computes
                    let slot = s.slot_of(i)?;
                    let digest = crate::db::hex(&crate::vector::space::row_digest(s.vector_of(i)?));
                    Some(format!("{}:{slot}:{digest}", s.model))
                })
                .collect();
            let (content, chunk) = if m.tombstone {
                ("tombstone".to_string(), "-".to_string())
            } else {
                let f = self.log().read(m.loc.segment, m.loc.offset)?;
                let a = codec::view_record(f.payload())?;
                (
                    crate::db::hex(&a.content_sha256),
                    a.text
                        .as_ref()
                        .map(|t| format!("[0,{})", t.len()))
                        .unwrap_or_else(|| "-".into()),
                )
            };
            out.push(format!(
                "record {} tenant={} type={} kind={} status={} access=[{}] sources=[{}] supersedes={} superseded_by={} chunk={} content={} vectors=[{}] at={}:{}:{}",
                m.id,
                st.strings.name(m.tenant),
                m.rtype.name(),
                st.strings.name(m.kind),
                m.status.name(),
                st.access_names(i).join(","),
                sources.join(","),
                m.supersedes.map(|s| st.meta(s).id.to_string()).unwrap_or_else(|| "-".into()),
                m.superseded_by.map(|s| st.meta(s).id.to_string()).unwrap_or_else(|| "-".into()),
                chunk,
                content,
                vectors.join(","),
                m.loc.segment,
                m.loc.offset,
                m.loc.lsn,
            ));
        }
        for (t, bm) in st
            .bm_tenant
            .iter()
            .map(|(k, v)| (st.strings.name(*k).to_string(), v))
            .collect::<BTreeMap<_, _>>()
        {
            for (s, sb) in &st.bm_status {
                let n = (bm & sb).len();
                if n > 0 {
                    out.push(format!(
                        "eligibility tenant={t} status={} count={n}",
                        s.name()
                    ));
                }
            }
        }
        // The whole state as its checkpoint encodes it (sorted, so equal
        // states encode to equal bytes): a state loaded from a checkpoint
        // and the log's tail must equal the replay of the whole log.
        out.push(format!(
            "state records={} checkpoint_encoding_crc32c={:08x}",
            st.len(),
            crc32c::crc32c(&crate::checkpoint::encode(
                &st,
                &st.vectors.slots(),
                crate::checkpoint::anchor_crc(self.log(), &st)?
            ))
        ));
        let mut lex = Vec::new();
        st.lexical.write_to(&mut lex);
        out.push(format!(
            "lexical documents={} encoding_crc32c={:08x}",
            st.lexical.len(),
            crc32c::crc32c(&lex)
        ));
        for s in st.vectors.all() {
            let mut g = Vec::new();
            s.hnsw.read().write_to(&mut g);
            out.push(format!(
                "vectors model={} dim={} vectors={} indexed={} graph_crc32c={:08x}",
                s.model,
                s.dim,
                s.len(),
                s.len() - s.pending(),
                crc32c::crc32c(&g)
            ));
        }
        Ok(out)
    }

    /// Deletes all derived state of the (closed) store in `dir`, rebuilds it
    /// from the log, and (with `verify`) compares the deterministic parts
    /// before and after. Returns the differences (empty: identical).
    pub fn rebuild(dir: impl AsRef<Path>, opts: &Options, verify: bool) -> Result<RebuildReport> {
        let dir = dir.as_ref();
        let mut tail_cut = None;
        let before = if verify {
            let (db, opened) = Engram::open_with_report(dir, opts.clone())?;
            tail_cut = opened.log.truncation.map(|t| t.to_string());
            db.wait_indexed()?;
            let m = db.derived_manifest()?;
            db.close()?;
            Some(m)
        } else {
            None
        };
        check_replays(dir, opts)?;
        {
            let _lock = lock_dir(opts, dir)?;
            remove_derived(opts.backend.as_ref(), dir)?;
        }
        let started = std::time::Instant::now();
        let (db, opened) = Engram::open_with_report(dir, opts.clone())?;
        tail_cut = tail_cut.or(opened.log.truncation.map(|t| t.to_string()));
        db.wait_indexed()?;
        let after = db.derived_manifest()?;
        let records = db.state().len() as u64;
        db.close()?;
        let mut differences = Vec::new();
        if let Some(before) = before {
            let a: BTreeSet<&String> = before.iter().collect();
            let b: BTreeSet<&String> = after.iter().collect();
            for l in a.difference(&b) {
                differences.push(format!("- {l}"));
            }
            for l in b.difference(&a) {
                differences.push(format!("+ {l}"));
            }
        }
        Ok(RebuildReport {
            records,
            checked_lines: after.len(),
            seconds: started.elapsed().as_secs_f64(),
            verified: verify,
            differences,
            tail_cut,
        })
    }
}

/// What a backup wrote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupReport {
    /// Last LSN in the backup.
    pub last_lsn: u64,
    /// When it was taken (ms).
    pub created_at_ms: i64,
    /// Records at the time.
    pub records: u64,
    /// Deleted records whose content was left out (as tombstones).
    #[serde(default)]
    pub purged: u64,
}

/// What a rebuild did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RebuildReport {
    /// Records rebuilt.
    pub records: u64,
    /// Lines of the derived manifest compared.
    pub checked_lines: usize,
    /// Seconds to rebuild.
    pub seconds: f64,
    /// Whether before/after were compared.
    pub verified: bool,
    /// Differences (`-` before only, `+` after only).
    pub differences: Vec<String>,
    /// An unacknowledged torn tail the first open cut (in words).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_cut: Option<String>,
}
