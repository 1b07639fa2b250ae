//! The catalog: a redb database of identity and location, derived from the
//! log.
//!
//! Tables (ids are 16-byte big-endian record ids, so byte order is time order):
//! - `records`: id -> (segment, offset, lsn) of the frame holding the record;
//! - `tenant_records`: (tenant, id) -> () , every record of a tenant in id order;
//! - `external_ids`: (tenant, external id) -> id;
//! - `superseded_by` / `supersedes`: the two directions of correction chains;
//! - `meta`: `applied_lsn` (the last log LSN reflected here) and `format_version`.
//!
//! The catalog is updated by the log's commit hook with non-durable redb
//! commits, and made durable at checkpoints; after a crash it is simply
//! behind, and catches up by replaying the log from `applied_lsn + 1`.
//! Deleting the file loses nothing: it is rebuilt from the log.
//!
//! This module must never be the only copy of anything.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};

use crate::backend::{Backend, BackendFile, OpenMode};
use crate::error::{StorageError, StorageResult};
use crate::frame::Lsn;
use crate::log::FrameLoc;

/// A record id as the catalog stores it (big-endian u128).
pub type IdBytes = [u8; 16];

const RECORDS: TableDefinition<IdBytes, (u64, u64, u64)> = TableDefinition::new("records");
const TENANT_RECORDS: TableDefinition<(&str, IdBytes), ()> = TableDefinition::new("tenant_records");
const EXTERNAL_IDS: TableDefinition<(&str, &str), IdBytes> = TableDefinition::new("external_ids");
const SUPERSEDED_BY: TableDefinition<IdBytes, IdBytes> = TableDefinition::new("superseded_by");
const SUPERSEDES: TableDefinition<IdBytes, IdBytes> = TableDefinition::new("supersedes");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Version of the catalog's table layout.
pub const CATALOG_FORMAT_VERSION: u64 = 1;

/// One change to the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CatalogOp {
    /// A new record.
    Insert {
        /// Record id.
        id: IdBytes,
        /// Its tenant.
        tenant: String,
        /// Its client key, if any.
        external_id: Option<String>,
        /// The record it corrects, if any.
        supersedes: Option<IdBytes>,
        /// Where its frame is.
        loc: FrameLoc,
    },
    /// A record's frame moved (segment rewrite).
    Relocate {
        /// Record id.
        id: IdBytes,
        /// New location.
        loc: FrameLoc,
    },
    /// A record is gone (purged by compaction): its location and external
    /// id are removed; correction links are kept (they hold ids only).
    Remove {
        /// Record id.
        id: IdBytes,
        /// Its tenant.
        tenant: String,
        /// Its client key, if any.
        external_id: Option<String>,
    },
}

/// The catalog.
pub struct Catalog {
    /// `None` once shut down: the file is then released for good, even if
    /// handles to this catalog outlive the store that owned it.
    db: parking_lot::RwLock<Option<Database>>,
    path: PathBuf,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("path", &self.path).finish()
    }
}

/// Adapts a [`BackendFile`] to redb's storage trait, so the catalog's I/O
/// goes through the same seam as everything else.
#[derive(Debug)]
struct RedbFile(Arc<dyn BackendFile>);

impl redb::StorageBackend for RedbFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read_exact_at(out, offset)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write_all_at(data, offset)
    }
}

impl Catalog {
    /// Opens or creates the catalog file.
    pub fn open(backend: &dyn Backend, path: &Path) -> StorageResult<Catalog> {
        let file = backend
            .open(path, OpenMode::Create)
            .map_err(|e| StorageError::io(path, e))?;
        let db = Database::builder().create_with_backend(RedbFile(file))?;
        let mut tx = db.begin_write()?;
        tx.set_durability(Durability::Immediate)
            .map_err(|e| StorageError::Catalog(e.to_string()))?;
        {
            let mut meta = tx.open_table(META)?;
            let version = meta.get("format_version")?.map(|v| v.value());
            match version {
                None => {
                    meta.insert("format_version", CATALOG_FORMAT_VERSION)?;
                }
                Some(v) if v != CATALOG_FORMAT_VERSION => {
                    return Err(StorageError::Catalog(format!(
                        "catalog format {v} is not {CATALOG_FORMAT_VERSION}; rebuild it with `engram rebuild --catalog`"
                    )));
                }
                Some(_) => {}
            }
            tx.open_table(RECORDS)?;
            tx.open_table(TENANT_RECORDS)?;
            tx.open_table(EXTERNAL_IDS)?;
            tx.open_table(SUPERSEDED_BY)?;
            tx.open_table(SUPERSEDES)?;
        }
        tx.commit()?;
        Ok(Catalog {
            db: parking_lot::RwLock::new(Some(db)),
            path: path.to_path_buf(),
        })
    }

    /// The applied LSN recorded in the catalog at `path`, read without
    /// changing the file (or creating it). `Ok(None)` when there is no
    /// catalog; an error when it cannot be read without a repair (redb
    /// refuses a read-only open of a file that needs recovery).
    pub fn peek_applied_lsn(backend: &dyn Backend, path: &Path) -> StorageResult<Option<Lsn>> {
        if !backend.exists(path) {
            return Ok(None);
        }
        let file = backend
            .open(path, OpenMode::Read)
            .map_err(|e| StorageError::io(path, e))?;
        let db = Database::builder().open_read_only_with_backend(RedbFile(file))?;
        let tx = db.begin_read()?;
        let meta = match tx.open_table(META) {
            Ok(m) => m,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Some(0)),
            Err(e) => return Err(e.into()),
        };
        Ok(Some(
            meta.get("applied_lsn")?.map(|v| v.value()).unwrap_or(0),
        ))
    }

    /// The open database, or `Closed` after [`Catalog::shutdown`].
    fn db(&self) -> StorageResult<parking_lot::MappedRwLockReadGuard<'_, Database>> {
        parking_lot::RwLockReadGuard::try_map(self.db.read(), Option::as_ref)
            .map_err(|_| StorageError::Closed)
    }

    /// Closes the database file now (later calls fail with `Closed`), so
    /// that the next open of the store is the only writer of the file even
    /// while handles to this store are still alive.
    pub fn shutdown(&self) {
        drop(self.db.write().take());
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies changes and records `applied_lsn`. With `durable = false`
    /// the commit is not fsynced (a later durable commit or a replay after a
    /// crash covers it).
    pub fn apply(&self, ops: &[CatalogOp], applied_lsn: Lsn, durable: bool) -> StorageResult<()> {
        let mut tx = self.db()?.begin_write()?;
        tx.set_durability(if durable {
            Durability::Immediate
        } else {
            Durability::None
        })
        .map_err(|e| StorageError::Catalog(e.to_string()))?;
        {
            let mut records = tx.open_table(RECORDS)?;
            let mut tenant_records = tx.open_table(TENANT_RECORDS)?;
            let mut external = tx.open_table(EXTERNAL_IDS)?;
            let mut superseded_by = tx.open_table(SUPERSEDED_BY)?;
            let mut supersedes = tx.open_table(SUPERSEDES)?;
            for op in ops {
                match op {
                    CatalogOp::Insert {
                        id,
                        tenant,
                        external_id,
                        supersedes: old,
                        loc,
                    } => {
                        records.insert(id, (loc.segment, loc.offset, loc.lsn))?;
                        tenant_records.insert((tenant.as_str(), *id), ())?;
                        if let Some(ext) = external_id {
                            external.insert((tenant.as_str(), ext.as_str()), id)?;
                        }
                        if let Some(old) = old {
                            superseded_by.insert(old, id)?;
                            supersedes.insert(id, old)?;
                        }
                    }
                    CatalogOp::Relocate { id, loc } => {
                        records.insert(id, (loc.segment, loc.offset, loc.lsn))?;
                    }
                    CatalogOp::Remove {
                        id,
                        tenant,
                        external_id,
                    } => {
                        records.remove(id)?;
                        tenant_records.remove((tenant.as_str(), *id))?;
                        if let Some(ext) = external_id {
                            external.remove((tenant.as_str(), ext.as_str()))?;
                        }
                    }
                }
            }
            let mut meta = tx.open_table(META)?;
            let prev = meta.get("applied_lsn")?.map(|v| v.value()).unwrap_or(0);
            meta.insert("applied_lsn", prev.max(applied_lsn))?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Makes everything applied so far durable.
    pub fn checkpoint(&self) -> StorageResult<()> {
        self.apply(&[], 0, true)
    }

    /// The last LSN reflected in the catalog (0 if none).
    pub fn applied_lsn(&self) -> StorageResult<Lsn> {
        let tx = self.db()?.begin_read()?;
        let meta = tx.open_table(META)?;
        Ok(meta.get("applied_lsn")?.map(|v| v.value()).unwrap_or(0))
    }

    /// Where record `id` is stored.
    pub fn location(&self, id: &IdBytes) -> StorageResult<Option<FrameLoc>> {
        let tx = self.db()?.begin_read()?;
        let t = tx.open_table(RECORDS)?;
        Ok(t.get(id)?.map(|v| {
            let (segment, offset, lsn) = v.value();
            FrameLoc {
                segment,
                offset,
                lsn,
            }
        }))
    }

    /// The id a tenant's external id maps to.
    pub fn by_external_id(
        &self,
        tenant: &str,
        external_id: &str,
    ) -> StorageResult<Option<IdBytes>> {
        let tx = self.db()?.begin_read()?;
        let t = tx.open_table(EXTERNAL_IDS)?;
        Ok(t.get((tenant, external_id))?.map(|v| v.value()))
    }

    /// The record that corrects `id`, if any.
    pub fn superseded_by(&self, id: &IdBytes) -> StorageResult<Option<IdBytes>> {
        let tx = self.db()?.begin_read()?;
        let t = tx.open_table(SUPERSEDED_BY)?;
        Ok(t.get(id)?.map(|v| v.value()))
    }

    /// The record `id` corrects, if any.
    pub fn supersedes(&self, id: &IdBytes) -> StorageResult<Option<IdBytes>> {
        let tx = self.db()?.begin_read()?;
        let t = tx.open_table(SUPERSEDES)?;
        Ok(t.get(id)?.map(|v| v.value()))
    }

    /// A tenant's record ids in id (time) order, starting after `after`,
    /// at most `limit`.
    pub fn tenant_ids(
        &self,
        tenant: &str,
        after: Option<IdBytes>,
        limit: usize,
    ) -> StorageResult<Vec<IdBytes>> {
        let tx = self.db()?.begin_read()?;
        let t = tx.open_table(TENANT_RECORDS)?;
        let start = after.unwrap_or([0u8; 16]);
        let mut out = Vec::new();
        for item in t.range((tenant, start)..=(tenant, [0xFFu8; 16]))? {
            let (k, _) = item?;
            let (_, id) = k.value();
            if after == Some(id) {
                continue;
            }
            out.push(id);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Every (tenant, id, location) in the catalog, for verification.
    pub fn all_records(&self) -> StorageResult<Vec<(String, IdBytes, FrameLoc)>> {
        let tx = self.db()?.begin_read()?;
        let tr = tx.open_table(TENANT_RECORDS)?;
        let rec = tx.open_table(RECORDS)?;
        let mut out = Vec::new();
        for item in tr.iter()? {
            let (k, _) = item?;
            let (tenant, id) = k.value();
            if let Some(v) = rec.get(&id)? {
                let (segment, offset, lsn) = v.value();
                out.push((
                    tenant.to_string(),
                    id,
                    FrameLoc {
                        segment,
                        offset,
                        lsn,
                    },
                ));
            }
        }
        Ok(out)
    }

    /// Number of records with a location.
    pub fn n_records(&self) -> StorageResult<u64> {
        let tx = self.db()?.begin_read()?;
        let t = tx.open_table(RECORDS)?;
        Ok(t.len()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;

    fn id(n: u8) -> IdBytes {
        let mut b = [0u8; 16];
        b[15] = n;
        b
    }

    fn loc(n: u64) -> FrameLoc {
        FrameLoc {
            segment: 1,
            offset: 64 + n * 16,
            lsn: n,
        }
    }

    #[test]
    fn insert_lookup_list_and_remove() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/s")).unwrap();
        let c = Catalog::open(&b, Path::new("/s/catalog.redb")).unwrap();
        c.apply(
            &[
                CatalogOp::Insert {
                    id: id(1),
                    tenant: "t1".into(),
                    external_id: Some("a".into()),
                    supersedes: None,
                    loc: loc(1),
                },
                CatalogOp::Insert {
                    id: id(2),
                    tenant: "t1".into(),
                    external_id: None,
                    supersedes: Some(id(1)),
                    loc: loc(2),
                },
                CatalogOp::Insert {
                    id: id(3),
                    tenant: "t2".into(),
                    external_id: Some("a".into()),
                    supersedes: None,
                    loc: loc(3),
                },
            ],
            3,
            false,
        )
        .unwrap();
        assert_eq!(c.applied_lsn().unwrap(), 3);
        assert_eq!(c.location(&id(2)).unwrap(), Some(loc(2)));
        assert_eq!(c.by_external_id("t1", "a").unwrap(), Some(id(1)));
        assert_eq!(c.by_external_id("t2", "a").unwrap(), Some(id(3)));
        assert_eq!(c.superseded_by(&id(1)).unwrap(), Some(id(2)));
        assert_eq!(c.supersedes(&id(2)).unwrap(), Some(id(1)));
        assert_eq!(c.tenant_ids("t1", None, 10).unwrap(), vec![id(1), id(2)]);
        assert_eq!(c.tenant_ids("t1", Some(id(1)), 10).unwrap(), vec![id(2)]);
        assert_eq!(c.tenant_ids("t2", None, 10).unwrap(), vec![id(3)]);
        c.apply(
            &[CatalogOp::Remove {
                id: id(1),
                tenant: "t1".into(),
                external_id: Some("a".into()),
            }],
            4,
            true,
        )
        .unwrap();
        assert_eq!(c.location(&id(1)).unwrap(), None);
        assert_eq!(c.by_external_id("t1", "a").unwrap(), None);
        assert_eq!(c.n_records().unwrap(), 2);
    }

    #[test]
    fn non_durable_commits_are_lost_in_a_crash_but_the_catalog_still_opens() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/s")).unwrap();
        let p = Path::new("/s/catalog.redb");
        {
            let c = Catalog::open(&b, p).unwrap();
            let ins = |n: u8| CatalogOp::Insert {
                id: id(n),
                tenant: "t".into(),
                external_id: None,
                supersedes: None,
                loc: loc(n as u64),
            };
            c.apply(&[ins(1)], 1, true).unwrap();
            c.apply(&[ins(2)], 2, false).unwrap();
        }
        b.sync_dir(Path::new("/s")).unwrap();
        for seed in 0..5 {
            let img = b.crash_image(seed);
            let c = Catalog::open(&img, p).unwrap();
            let applied = c.applied_lsn().unwrap();
            assert!(applied == 1 || applied == 2, "seed {seed}: {applied}");
            assert!(c.location(&id(1)).unwrap().is_some());
        }
    }
}
