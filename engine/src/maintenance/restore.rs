//! Restore: a backup's log swapped in, the ledger's later operations
//! re-applied, and a compaction (see docs/lifecycle.md "Backup and
//! restore").

use super::*;

impl Engram {
    /// Restores the (closed) store in `dir` from the backup in `src`, then
    /// re-applies every deletion and revocation of the store's ledger that
    /// the backup does not contain, and compacts. A ledger kept elsewhere
    /// can be supplied with `extra_ledger`.
    pub fn restore(
        dir: impl AsRef<Path>,
        src: impl AsRef<Path>,
        opts: &Options,
        extra_ledger: Option<&Path>,
    ) -> Result<RestoreReport> {
        let dir = dir.as_ref();
        let backend = opts.backend.clone();
        let empty = matches!(
            crate::store_dir::classify(backend.as_ref(), dir),
            Ok(crate::store_dir::DirKind::Empty)
        );
        // (a restore into a new directory cut short is one too, marked
        // unfinished until its log is in place)
        let fresh = empty || crate::store_dir::unfinished_restore(backend.as_ref(), dir);
        let mut swapped = false;
        let r = Self::restore_into(dir, src.as_ref(), opts, extra_ledger, (fresh, &mut swapped));
        // A restore into an empty directory refused before its log was
        // swapped in (a damaged backup, say) leaves nothing behind. (Not
        // one found unfinished: another restore may be filling it now, and
        // only the store's lock, which this one may not hold, tells.)
        if r.is_err() && empty && !swapped {
            let _ = crate::store_dir::remove_store_copy(backend.as_ref(), dir);
        }
        r
    }

    fn restore_into(
        dir: &Path,
        src: &Path,
        opts: &Options,
        extra_ledger: Option<&Path>,
        (fresh, swapped): (bool, &mut bool),
    ) -> Result<RestoreReport> {
        let backend = opts.backend.clone();
        let src_log = layout::log(src);
        if !backend.exists(src) {
            return Err(EngineError::invalid(
                "backup directory",
                format!("{} does not exist", src.display()),
            ));
        }
        if !backend.exists(&src_log) {
            return Err(EngineError::invalid(
                "backup directory",
                format!("{} holds no log/ (not an Engram backup)", src.display()),
            ));
        }
        // `backup.partial` is removed last, `backup.json` written just
        // before: with the one or without the other, the backup is partial.
        if backend.exists(&src.join(crate::store_dir::PARTIAL_BACKUP_FILE)) {
            return Err(EngineError::invalid(
                "backup directory",
                format!(
                    "{} is a backup that did not finish (it holds {}); take a new one",
                    src.display(),
                    crate::store_dir::PARTIAL_BACKUP_FILE
                ),
            ));
        }
        let manifest = src.join(crate::store_dir::BACKUP_FILE);
        let Some(bytes) = read_all(backend.as_ref(), &manifest)? else {
            return Err(EngineError::invalid(
                "backup directory",
                format!(
                    "{} has no backup.json: it is no finished backup (a store is not one: `engram backup DIR` takes one of it; a backup cut short has none either: take a new one)",
                    src.display()
                ),
            ));
        };
        let taken: BackupReport =
            serde_json::from_slice(&bytes).map_err(|e| EngineError::Corrupt {
                what: manifest.display().to_string(),
                detail: e.to_string(),
            })?;
        // The backup's settings are installed as they are: damaged, they
        // would leave a restored store no command opens.
        // (an embedder no build can make leaves it as unusable)
        if let Err(e) = crate::settings::load(backend.as_ref(), src).and_then(|s| {
            match s.and_then(|s| s.embedder) {
                Some(name) => crate::settings::embedder_by_name(&name).map(|_| ()),
                None => Ok(()),
            }
        }) {
            return Err(EngineError::invalid(
                "backup directory",
                format!(
                    "{}: {e}; nothing was changed: take a new backup, or move that file out of \
                     the backup (the restored store then keeps the embedder it is opened with)",
                    src.join("settings.snap").display()
                ),
            ));
        }
        if let Some(p) = extra_ledger {
            if backend.list_dir(p).is_ok() {
                return Err(EngineError::invalid(
                    "ledger",
                    format!(
                        "{} is a directory; name the ledger.jsonl file (of the store the backup came from)",
                        p.display()
                    ),
                ));
            }
            if p.file_name().map(|f| f != "ledger.jsonl").unwrap_or(true) {
                return Err(EngineError::invalid(
                    "ledger",
                    "the ledger file must be named ledger.jsonl",
                ));
            }
            // A ledger named on purpose must be there: an empty one would
            // let deleted records come back without a word.
            if !backend.exists(p) {
                return Err(EngineError::invalid(
                    "ledger",
                    format!("{} does not exist; nothing was changed", p.display()),
                ));
            }
        }
        // ... and must be readable, line by line, before anything changes
        let extra = match extra_ledger {
            Some(p) => {
                let lines = read_external_ledger(backend.as_ref(), p).map_err(|e| {
                    EngineError::invalid(
                        "ledger",
                        format!("{}: {e}; nothing was changed", p.display()),
                    )
                })?;
                for l in &lines {
                    check_line(l)?;
                }
                lines
            }
            None => Vec::new(),
        };
        // Restore goes into a store or an empty directory, never into a
        // directory holding anything else; it is created only now that the
        // backup and the ledger are known to be usable (a refused restore
        // leaves no new store behind).
        // A new store is marked unfinished, before it is created, until the
        // backup's log is in place: cut short before, it is refused by every
        // open instead of serving an empty store as if restored.
        let partial = dir.join(crate::store_dir::PARTIAL_RESTORE_FILE);
        if fresh {
            // (never inside another store, which the partial file would
            // then be left in)
            crate::store_dir::refuse_inside_store(
                backend.as_ref(),
                dir,
                "directory",
                "use a directory outside it",
            )?;
            backend.create_dir_all(dir).map_err(io(dir))?;
            write_all_durable(
                backend.as_ref(),
                &partial,
                b"a restore into this new store; if no restore is running, it was cut short: run it again\n",
            )?;
            backend.sync_dir(dir).map_err(io(dir))?;
        }
        crate::store_dir::prepare(backend.as_ref(), dir, true, true)?;
        // Bring the ledger file up to date with the current log (a crash
        // between a deletion and its ledger line leaves the file behind);
        // best effort: a store too damaged to open is a reason to restore.
        // (It also lists the records deleted in the store now: one written
        // and deleted after the backup is given up by nobody, and is not
        // counted below.)
        let mut deleted_now: HashSet<[u8; 16]> = HashSet::new();
        let opened = Engram::open_dir(dir, opts.clone(), crate::db::Unfinished::Restore).and_then(
            |(db, _)| {
                let st = db.state();
                deleted_now.extend(
                    st.metas
                        .iter()
                        .filter(|m| m.tombstone || m.status == Status::Deleted)
                        .map(|m| m.id.to_bytes()),
                );
                drop(st);
                db.close()
            },
        );
        // That open also finishes an earlier restore interrupted after its
        // swap; if it could not, its entries must not be lost under a new
        // restore.
        // A damaged pending file is the exception: its entries are listed
        // again below, from `ledger.jsonl` and the `--ledger` given (the
        // same sources it was written from), so this restore replaces it.
        if restore_pending_damaged(backend.as_ref(), dir) {
            let marker = layout::restore_pending(dir);
            backend.remove_file(&marker).map_err(io(&marker))?;
        } else if backend.exists(&layout::restore_pending(dir)) {
            let why = opened.err().map(|e| e.to_string()).unwrap_or_default();
            return Err(EngineError::invalid(
                "restore",
                format!(
                    "an earlier restore of {} is unfinished and opening the store could not finish it ({why}); nothing was changed",
                    dir.display()
                ),
            ));
        }
        // The ledger that survives: the store's own, plus any extra one.
        let mut ledger = read_ledger(backend.as_ref(), dir)?;
        ledger.extend(extra);
        for l in &ledger {
            check_line(l)?;
        }
        // In the order the operations were written (ids are minted in log
        // order): two ledgers merged, the store's and a `--ledger` one,
        // are re-applied as they happened, a grant after the revocation it
        // lifted, and the restored log keeps its ids in log order.
        ledger.sort_by_key(|l| l.op_id.parse::<RecordId>().ok());
        // (a line in both ledgers once: re-applying skips the second
        // anyway, and it is counted once below)
        ledger.dedup_by_key(|l| l.op_id.parse::<RecordId>().ok());
        let mut not_after_backup = 0usize;
        let (later, purged_before) = {
            let _lock = lock_dir(opts, dir)?;
            // Copy the backup's log beside the current one, then swap them
            // with renames: a crash leaves either log whole (see
            // `db::recover_log_swap`). Derived state is dropped.
            let log_dir = layout::log(dir);
            let incoming = dir.join("log.restore");
            crate::store_dir::remove_transient(backend.as_ref(), &incoming)?;
            backend.create_dir_all(&incoming).map_err(io(&incoming))?;
            for e in backend.list_dir(&src_log).map_err(io(&src_log))? {
                if e.is_dir
                    || engram_storage::log::segment::parse_segment_file_name(&e.name).is_none()
                {
                    continue;
                }
                let from = src_log.join(&e.name);
                let bytes = read_all(backend.as_ref(), &from)?.unwrap_or_default();
                write_all_durable(backend.as_ref(), &incoming.join(&e.name), &bytes)?;
            }
            // The copy must hold the whole log the backup recorded: from
            // LSN 1 up to the last LSN in backup.json.
            let checked = SegmentLog::open(backend.clone(), &incoming, opts.log.clone()).and_then(
                |(log, _)| {
                    let mut first = None;
                    log.scan(0, |f| {
                        first = Some(f.header.lsn);
                        Ok(std::ops::ControlFlow::Break(()))
                    })?;
                    let first_id = first_frame_id(&log);
                    let ids = log_ids(&log)?;
                    Ok(((first, first_id), log.last_lsn(), count_records(&log)?, ids))
                },
            );
            let backup_first = checked.as_ref().ok().and_then(|((_, id), _, _, _)| *id);
            let damage = match &checked {
                Ok((_, last, _, _)) if *last < taken.last_lsn => Some(format!(
                    "its log ends at LSN {last} but backup.json records {}",
                    taken.last_lsn
                )),
                Ok((_, last, _, _)) if *last > taken.last_lsn => Some(format!(
                    "its log holds LSNs up to {last} but backup.json records {}: \
                     backup.json does not describe this log",
                    taken.last_lsn
                )),
                Ok(((Some(first), _), _, _, _)) if *first != 1 => Some(format!(
                    "its log starts at LSN {first}: segments are missing"
                )),
                Ok((_, _, n, _)) if *n != taken.records => Some(format!(
                    "its log holds {n} record(s) but backup.json records {}: \
                     backup.json does not describe this log",
                    taken.records
                )),
                Ok(_) => None,
                Err(e) => Some(format!("its log does not open: {e}")),
            };
            if let Some(why) = damage {
                crate::store_dir::remove_transient(backend.as_ref(), &incoming)?;
                return Err(EngineError::invalid(
                    "backup directory",
                    format!("{} is damaged: {why}; nothing was changed", src.display()),
                ));
            }
            let current = SegmentLog::open_with(
                backend.clone(),
                &log_dir,
                opts.log.clone(),
                &engram_storage::log::RecoveryOptions {
                    read_only: true,
                    ..Default::default()
                },
            )
            .ok()
            .map(|(log, _)| log);
            // A backup of another store would replace this one's records
            // with a history that is not theirs: refused. Both logs begin
            // with the same frame (its id survives compaction) when the
            // backup is of this store. A store whose log cannot be read is
            // not checked (damage is a reason to restore).
            // An empty backup says nothing of whose it was: restoring it
            // over a store with records would remove them all.
            if let (Some(ours), None) = (current.as_ref().and_then(first_frame_id), backup_first) {
                crate::store_dir::remove_transient(backend.as_ref(), &incoming)?;
                return Err(EngineError::invalid(
                    "backup directory",
                    format!(
                        "{} is a backup of an empty store, and this store holds records (its \
                         log begins with {ours}); restoring it would remove them all; restore \
                         it into a new, empty directory instead; nothing was changed",
                        src.display()
                    ),
                ));
            }
            if let (Some(ours), Some(theirs)) =
                (current.as_ref().and_then(first_frame_id), backup_first)
            {
                if ours != theirs {
                    crate::store_dir::remove_transient(backend.as_ref(), &incoming)?;
                    return Err(EngineError::invalid(
                        "backup directory",
                        format!(
                            "{} is a backup of another store (its log begins with {theirs}, \
                             this store's with {ours}); restoring it would replace this \
                             store's records; restore it into a new, empty directory \
                             instead; nothing was changed",
                            src.display()
                        ),
                    ));
                }
            }
            // One read of this store's log (read only; nothing is cut):
            // - the records it had purged: the restore's compaction purges
            //   them again whatever the holds (a hold placed after the purge
            //   never kept their bytes; the backup brings them back);
            // - the records past the backup's last LSN, replaced with the
            //   rest of its log, and the operations there that the ledger
            //   does not bring back (expiries, reviews, retractions, review
            //   rules): counted, so the report says what the restore gave
            //   up (None when the log cannot be read to its end).
            let mut purged_before: HashSet<[u8; 16]> = HashSet::new();
            let later = current.and_then(|log| {
                let (mut records, mut ops) = (0u64, 0u64);
                log.scan(0, |f| {
                    let after = f.header.lsn > taken.last_lsn;
                    match f.header.frame_type {
                        codec::FRAME_TOMBSTONE => {
                            if let Ok(t) =
                                codec::read_tombstone(f.payload(), f.header.frame_version)
                            {
                                purged_before.insert(t.id);
                            }
                        }
                        codec::FRAME_RECORD if after => {
                            let deleted = codec::view_record(f.payload())
                                .is_ok_and(|a| deleted_now.contains(&a.id));
                            records += u64::from(!deleted);
                        }
                        codec::FRAME_OP if after && !in_ledger(f.payload()) => ops += 1,
                        _ => {}
                    }
                    Ok(std::ops::ControlFlow::Continue(()))
                })
                .ok()
                .map(|()| (records, ops))
            });
            // Only an operation written after the backup is re-applied:
            // ids are minted above every record and ledger operation the
            // log holds (`log_ids`), so one the backup's log lacks
            // is newer than everything it holds. An older line (edited, or
            // from another store's ledger) is left out and counted; it
            // gave a principal back a label the backup's log revoked after
            // it. (Filtered before `restore.pending` is written, so a
            // resumed restore applies the same lines.)
            if let Ok((_, _, _, (Some(newest), ops))) = &checked {
                ledger.retain(|l| {
                    let older = l
                        .op_id
                        .parse::<RecordId>()
                        .is_ok_and(|id| id <= *newest && !ops.contains(&id));
                    not_after_backup += usize::from(older);
                    !older
                });
            }
            // The outgoing log's place must be free for the swap's rename
            // (a file left there is moved back into `log/`; one whose name
            // `log/` holds too is the operator's to move).
            let old = dir.join("log.old");
            let left = crate::store_dir::clear_outgoing_log(backend.as_ref(), &old, &log_dir)?;
            if !left.is_empty() {
                crate::store_dir::remove_transient(backend.as_ref(), &incoming)?;
                return Err(EngineError::invalid(
                    "store directory",
                    format!(
                        "{} holds what the log's swap would overwrite ({}): a file Engram does \
                         not own whose name log/ holds too, a file in the directory's place, or \
                         the store's only log (a swap cut short: open the store once to put it \
                         back); move it away and restore again; the restore did not start",
                        old.display(),
                        left.join(", ")
                    ),
                ));
            }
            // What must be re-applied goes to disk before the log is
            // touched: from here on, an interrupted restore is finished by
            // the next open.
            let marker = layout::restore_pending(dir);
            *swapped = true;
            write_all_durable(
                backend.as_ref(),
                &marker,
                render_restore_pending(&ledger).as_bytes(),
            )?;
            if let Some(bytes) = read_all(backend.as_ref(), &src.join("settings.snap"))? {
                write_all_durable(backend.as_ref(), &dir.join("settings.snap"), &bytes)?;
            }
            remove_derived(backend.as_ref(), dir)?;
            if backend.exists(&log_dir) {
                backend.rename(&log_dir, &old).map_err(io(&log_dir))?;
            }
            backend.rename(&incoming, &log_dir).map_err(io(&incoming))?;
            backend.sync_dir(dir).map_err(io(dir))?;
            // (only once the swap is durable: a removal that reached the
            // disk before the rename would leave an empty store unmarked)
            if backend.exists(&partial) {
                backend.remove_file(&partial).map_err(io(&partial))?;
                backend.sync_dir(dir).map_err(io(dir))?;
            }
            // (the renamed directory's own entries too: one fsync per
            // restore, and the crash tests' simulated disk, which tracks a
            // name per file, never mixes the two logs' segments)
            backend.sync_dir(&log_dir).map_err(io(&log_dir))?;
            crate::store_dir::clear_outgoing_log(backend.as_ref(), &old, &log_dir)?;
            (later, purged_before)
        };
        // Opening finds `restore.pending` and re-applies its entries.
        let (db, opened) = Engram::open_with_report(dir, opts.clone())?;
        let mut report = opened.restore_resumed.unwrap_or_default();
        report.restored_records = db.state().len() as u64;
        report.later_records_replaced = later.map(|(records, _)| records);
        report.later_operations_replaced = later.map(|(_, ops)| ops);
        report.ledger_lines_not_after_backup = not_after_backup;
        db.close()?;
        let c = Engram::compact_with(dir, opts, Compacting::Store, &purged_before)?;
        report.purged = c.purged;
        Ok(report)
    }
}

/// What a restore did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// Records in the restored log.
    pub restored_records: u64,
    /// Deletions re-applied from the ledger.
    pub deletions_reapplied: usize,
    /// Revocations re-applied from the ledger.
    pub revocations_reapplied: usize,
    /// Grants (and tenant-wide revocations lifted) re-applied from the
    /// ledger, after the revocations before them.
    #[serde(default)]
    pub grants_reapplied: usize,
    /// Legal holds placed or lifted after the backup, applied again.
    #[serde(default)]
    pub holds_reapplied: usize,
    /// Retention periods set after the backup, applied again.
    #[serde(default)]
    pub retention_reapplied: usize,
    /// Ledger deletions of records the backup does not hold.
    pub not_in_backup: usize,
    /// Ledger deletions already in effect.
    pub already_applied: usize,
    /// Records purged by the final compaction.
    pub purged: usize,
    /// Ledger entries that could not be re-applied (malformed).
    pub skipped: usize,
    /// Ledger lines left out because the backup's log lacks their
    /// operation and holds newer ones: they were not written after the
    /// backup (a line edited, or copied from another store's ledger), so
    /// there is nothing to re-apply.
    #[serde(default)]
    pub ledger_lines_not_after_backup: usize,
    /// Records the store held past the backup's last LSN (written after
    /// the backup was taken, if it is this store's): replaced by the
    /// restore. None when the store's log could not be read.
    #[serde(default)]
    pub later_records_replaced: Option<u64>,
    /// Operations the store held past the backup's last LSN that the
    /// ledger does not re-apply (expiries, reviews, retractions, review
    /// rules): given up by the restore. None when the store's log
    /// could not be read.
    #[serde(default)]
    pub later_operations_replaced: Option<u64>,
}

/// Whether an operation frame's payload is one the ledger records (and a
/// restore re-applies): a deletion, revocation, grant, hold or retention
/// setting.
/// An undecodable payload counts as not recorded.
pub(super) fn in_ledger(payload: &[u8]) -> bool {
    use codec::ArchivedOpBody as B;
    codec::view_op(payload).is_ok_and(|o| {
        matches!(
            o.op,
            B::Delete { .. }
                | B::Revoke { .. }
                | B::Grant { .. }
                | B::Hold { .. }
                | B::Retention { .. }
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use engram_storage::{Backend, MemBackend};

    use crate::settings::StoreSettings;
    use crate::{Engram, NewRecord, Options, Principal};

    /// A backup whose settings read well but name an embedder no build
    /// makes is refused before anything changes: installed, it left a
    /// store no command opened.
    #[test]
    fn a_backup_naming_an_unusable_embedder_is_refused() {
        let backend = Arc::new(MemBackend::new());
        let opts = Options {
            backend: backend.clone(),
            ..Options::default()
        };
        let db = Engram::open("/s", opts.clone()).unwrap();
        db.session(Principal::admin("t"))
            .append(vec![NewRecord::event("note", "x")])
            .unwrap();
        db.backup("/b").unwrap();
        db.close().unwrap();
        let bogus = StoreSettings {
            embedder: Some("bogus-embedder".into()),
        };
        crate::settings::save(backend.as_ref(), std::path::Path::new("/b"), &bogus).unwrap();
        let e = Engram::restore("/s", "/b", &opts, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("settings.snap")
                && e.contains("bogus-embedder")
                && e.contains("nothing was changed"),
            "{e}"
        );
        assert!(!backend.exists(std::path::Path::new("/s/restore.pending")));
        assert!(!backend.exists(std::path::Path::new("/s/log.restore")));
    }
}
