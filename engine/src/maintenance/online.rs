//! Online compaction: purging deleted content while the store serves.
//!
//! 1. Retention expiries are recorded as deletions (ordinary writes).
//! 2. Appends are paused (they wait) for the rest of the operation; reads
//!    go on against the open handle.
//! 3. The store is copied into `compact.staging/` under its directory (log,
//!    settings, ledger), and the copy is compacted exactly as offline
//!    compaction does: segments holding purged records are rewritten, and
//!    the copy's derived state (checkpoint, lexical snapshot, vector files)
//!    is rebuilt from the rewritten log.
//! 4. The swap, with reads paused by the caller's gate: the handle is
//!    closed without writing derived state (the directory lock is kept),
//!    the store's derived state is removed, the copy's segments are renamed
//!    over the store's in ascending order, then the copy's derived state is
//!    renamed into place, and the store is opened again (from the copy's
//!    checkpoint: no replay).
//!
//! A crash before the swap leaves the store as it was (the next open
//! removes the copy). A crash during it leaves each segment either original
//! or rewritten, each covering the same LSNs, and no derived state: the
//! next open replays the log, exactly as after a crash in offline
//! compaction. Nothing is appended between the copy and the swap, so the
//! copy holds every acknowledged write.

use std::path::Path;

use engram_storage::Backend;

use super::{CompactReport, purge_set, remove_derived};
use crate::db::{Engram, Options};
use crate::error::{EngineError, Result};
use crate::layout;
use crate::store_dir::{remove_staging, remove_store_copy};

/// What [`Engram::compact_online`] returns.
#[derive(Debug)]
pub struct OnlineCompaction<G> {
    /// The handle to use from now on: a new one when the store's files
    /// were swapped (the old handle is then closed), otherwise a clone of
    /// the old one.
    pub db: Engram,
    /// What was purged.
    pub report: CompactReport,
    /// The caller's read gate, still held when a swap happened: install
    /// [`OnlineCompaction::db`] before dropping it.
    pub reads_paused: Option<G>,
}

impl Engram {
    /// Compacts the open store without closing it for long: see the
    /// module documentation. `pause_reads` is called just before the swap
    /// and must return once no other thread uses this handle (for a server,
    /// a write guard on the gate every request holds); its guard comes back
    /// in the result. When nothing needs purging nothing is swapped and
    /// `pause_reads` is not called.
    ///
    /// After a swap this handle (and its sessions) answer
    /// [`EngineError::Closed`]: use the returned one. The files it opened
    /// (the log segments the compaction replaced, whose bytes hold the
    /// purged content) stay open until the last clone of it is dropped:
    /// drop every clone (a server keeps none but the one it serves from).
    pub fn compact_online<G>(
        &self,
        pause_reads: impl FnOnce() -> G,
    ) -> Result<OnlineCompaction<G>> {
        self.check_open()?;
        if self.options().read_only {
            return Err(EngineError::ReadOnly {
                action: "compaction".into(),
            });
        }
        let dir = self.dir().to_path_buf();
        let opts = self.options().clone();
        let backend = opts.backend.clone();
        let mut report = CompactReport::default();
        self.delete_expired(&mut report)?;
        let writes_paused = self.writes_exclusive();
        let purge = purge_set(&self.state(), &mut report, &Default::default());
        if purge.is_empty() {
            report.log_bytes_before = self.log().stats().bytes;
            report.log_bytes_after = report.log_bytes_before;
            return Ok(OnlineCompaction {
                db: self.clone(),
                report,
                reads_paused: None,
            });
        }
        // Build the compacted copy; reads go on meanwhile. The copy holds
        // exactly this state's log (writes are paused), so what to purge
        // is known already.
        let staging = layout::compact_staging(&dir);
        let staged = (|| -> Result<()> {
            remove_staging(backend.as_ref(), &staging)?;
            self.copy_store(backend.as_ref(), &staging)?;
            let copy_opts = Options {
                create_if_missing: false,
                ..opts.clone()
            };
            Self::purge_log(&staging, &copy_opts, &purge, &mut report, false)
        })();
        if let Err(e) = staged {
            let _ = remove_staging(backend.as_ref(), &staging);
            return Err(e);
        }
        // The swap.
        let reads_paused = pause_reads();
        let lock = self.close_for_swap();
        let swapped = swap_in(backend.as_ref(), &dir, &staging);
        drop(lock);
        drop(writes_paused);
        swapped?;
        let db = Engram::open(&dir, opts)?;
        Ok(OnlineCompaction {
            db,
            report,
            reads_paused: Some(reads_paused),
        })
    }
}

/// Replaces the store's log segments and derived state in `dir` by the
/// compacted copy's in `staging` (see the module documentation for the
/// order and why a crash anywhere leaves a store that opens).
fn swap_in(backend: &dyn Backend, dir: &Path, staging: &Path) -> Result<()> {
    let io =
        |p: &Path, e: std::io::Error| EngineError::Storage(engram_storage::StorageError::io(p, e));
    remove_derived(backend, dir)?;
    let (from, to) = (layout::log(staging), layout::log(dir));
    let mut segments: Vec<String> = backend
        .list_dir(&from)
        .map_err(|e| io(&from, e))?
        .into_iter()
        .filter(|e| !e.is_dir)
        .map(|e| e.name)
        .filter(|n| engram_storage::log::segment::parse_segment_file_name(n).is_some())
        .collect();
    // zero-padded numbers: name order is segment order
    segments.sort();
    for name in &segments {
        let (a, b) = (from.join(name), to.join(name));
        backend.rename(&a, &b).map_err(|e| io(&b, e))?;
        backend.sync_dir(&to).map_err(|e| io(&to, e))?;
    }
    let derived = layout::derived(dir);
    backend
        .rename(&layout::derived(staging), &derived)
        .map_err(|e| io(&derived, e))?;
    backend.sync_dir(dir).map_err(|e| io(dir, e))?;
    remove_store_copy(backend, staging)?;
    Ok(())
}
