//! Operator views of a store: statistics (of the whole store, or of one
//! tenant for its admin), verification (log checksums and catalog-vs-log
//! agreement), lookup of a record's tenant, and the catalog rebuild.
//!
//! This module must never change records; the only thing it rewrites is the
//! derived catalog.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::Path;

use engram_storage::catalog::CatalogOp;
use engram_storage::{Catalog, SegmentLog, StorageError};
use serde::Serialize;

use crate::db::{Engram, Options, Session, catalog_ops_for, layout};
use crate::error::{EngineError, Result};
use crate::id::RecordId;

/// Counts of one tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantStats {
    /// Records (all versions, all statuses).
    pub records: u64,
    /// By kind.
    pub by_kind: BTreeMap<String, u64>,
    /// By record type.
    pub by_type: BTreeMap<String, u64>,
    /// By status.
    pub by_status: BTreeMap<String, u64>,
}

/// One vector space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpaceStats {
    /// Model id.
    pub model: String,
    /// Dimensions.
    pub dim: usize,
    /// Vectors.
    pub vectors: usize,
    /// Vectors already in the graph.
    pub indexed: usize,
    /// Whether computed by the embedder.
    pub derived: bool,
    /// Bytes of the graph (excluding vectors).
    pub graph_bytes: usize,
}

/// Store statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Records in the store.
    pub records: u64,
    /// Per tenant.
    pub tenants: BTreeMap<String, TenantStats>,
    /// Segment files.
    pub log_segments: usize,
    /// Bytes of the log.
    pub log_bytes: u64,
    /// Last LSN.
    pub last_lsn: u64,
    /// Documents in the lexical index.
    pub lexical_documents: u64,
    /// Terms in the lexical index.
    pub lexical_terms: usize,
    /// Vector spaces.
    pub vector_spaces: Vec<SpaceStats>,
    /// Records in the catalog.
    pub catalog_records: u64,
    /// Why the catalog is behind, if its thread failed (it catches up at
    /// the next open).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog_problem: Option<String>,
}

/// Counts of the session's tenant, for its admin
/// ([`Session::tenant_stats`]): nothing of any other tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantView {
    /// The tenant.
    pub tenant: String,
    /// Its records by kind, type and status (all versions, all statuses).
    #[serde(flatten)]
    pub counts: TenantStats,
    /// Its vector spaces.
    pub vector_spaces: Vec<SpaceStats>,
    /// Its vectors not yet in their graph (searched exactly meanwhile).
    pub pending_vectors: usize,
}

/// Store-wide counts cheap enough to read on every metrics scrape (no
/// walk over the records, no catalog flush).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreGauges {
    /// Records in the store (all tenants, versions and statuses).
    pub records: u64,
    /// Vectors in every space.
    pub vectors: u64,
    /// Vectors waiting for the background indexer (searched exactly
    /// meanwhile): the indexing lag.
    pub pending_vectors: u64,
    /// Vector spaces (one per tenant and model).
    pub vector_spaces: u64,
    /// Last LSN applied to the in-memory state.
    pub applied_lsn: u64,
}

/// What `verify` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Frames checked.
    pub frames: u64,
    /// Records checked against the catalog.
    pub records: u64,
    /// Problems, one line each. Empty means the store is sound.
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Engram {
    /// Counts per tenant, kind, type and status; log and index sizes.
    pub fn stats(&self) -> Result<StoreStats> {
        let st = self.inner.state.read();
        let mut s = StoreStats {
            records: st.len() as u64,
            ..StoreStats::default()
        };
        for m in &st.metas {
            let t = s
                .tenants
                .entry(st.strings.name(m.tenant).to_string())
                .or_default();
            t.records += 1;
            *t.by_kind
                .entry(st.strings.name(m.kind).to_string())
                .or_default() += 1;
            *t.by_type.entry(m.rtype.name().to_string()).or_default() += 1;
            *t.by_status.entry(m.status.name().to_string()).or_default() += 1;
        }
        let ls = self.inner.log.stats();
        s.log_segments = ls.n_segments;
        s.log_bytes = ls.bytes;
        s.last_lsn = ls.last_lsn;
        s.lexical_documents = st.lexical.len();
        s.lexical_terms = st.lexical.term_count();
        for sp in st.vectors.all() {
            s.vector_spaces.push(SpaceStats {
                model: sp.model.clone(),
                dim: sp.dim,
                vectors: sp.len(),
                indexed: sp.len() - sp.pending(),
                derived: sp.derived,
                graph_bytes: sp.graph_bytes(),
            });
        }
        drop(st);
        if let Err(e) = self.flush_catalog() {
            s.catalog_problem = Some(e.to_string());
        }
        s.catalog_records = self.inner.catalog.n_records()?;
        Ok(s)
    }

    /// Store-wide counts for monitoring (see [`StoreGauges`]).
    pub fn gauges(&self) -> StoreGauges {
        let st = self.inner.state.read();
        let spaces = st.vectors.all();
        StoreGauges {
            records: st.len() as u64,
            vectors: spaces.iter().map(|s| s.len() as u64).sum(),
            pending_vectors: st.vectors.pending() as u64,
            vector_spaces: spaces.len() as u64,
            applied_lsn: st.applied_lsn,
        }
    }

    /// Every catalog entry, by record id: (tenant, location).
    pub(crate) fn catalog_by_id(
        &self,
    ) -> Result<HashMap<[u8; 16], (String, engram_storage::FrameLoc)>> {
        Ok(self
            .inner
            .catalog
            .all_records()?
            .into_iter()
            .map(|(t, id, loc)| (id, (t, loc)))
            .collect())
    }

    /// Checks every frame's checksums and the catalog against the log.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        if let Err(e) = self.flush_catalog() {
            report.problems.push(e.to_string());
        }
        let (frames, problems) = self.inner.log.verify()?;
        report.frames = frames;
        for p in problems {
            report.problems.push(format!(
                "log segment {} offset {}: {}",
                p.segment, p.offset, p.detail
            ));
        }
        let st = self.inner.state.read();
        let mut in_catalog = self.catalog_by_id()?;
        let cat_lsn = self.inner.catalog.applied_lsn()?;
        if cat_lsn < st.applied_lsn {
            report.problems.push(format!(
                "catalog is behind the log (applied LSN {cat_lsn}, log at {})",
                st.applied_lsn
            ));
        }
        for m in &st.metas {
            report.records += 1;
            let tenant = st.strings.name(m.tenant);
            match in_catalog.remove(&m.id.to_bytes()) {
                None => report.problems.push(format!(
                    "record {} (LSN {}) is missing from the catalog",
                    m.id, m.loc.lsn
                )),
                Some((t, loc)) => {
                    if t != tenant {
                        report.problems.push(format!(
                            "record {}: catalog says tenant '{t}', log says '{tenant}'",
                            m.id
                        ));
                    }
                    if loc != m.loc {
                        report.problems.push(format!(
                            "record {}: catalog location {}:{} (LSN {}) differs from the log's {}:{} (LSN {})",
                            m.id, loc.segment, loc.offset, loc.lsn, m.loc.segment, m.loc.offset, m.loc.lsn
                        ));
                    }
                    if let Some(ext) = &m.external_id {
                        if m.superseded_by.is_none() {
                            match self.inner.catalog.by_external_id(tenant, ext)? {
                                Some(id) if id == m.id.to_bytes() => {}
                                other => report.problems.push(format!(
                                    "record {}: catalog maps external id '{ext}' to {:?}",
                                    m.id,
                                    other.map(RecordId::from_bytes)
                                )),
                            }
                        }
                    }
                }
            }
        }
        for (id, (t, _)) in in_catalog {
            report.problems.push(format!(
                "catalog has record {} of tenant '{t}' that is not in the log",
                RecordId::from_bytes(id)
            ));
        }
        Ok(report)
    }

    /// The tenant of a record id (operator lookup across tenants).
    pub fn tenant_of(&self, id: RecordId) -> Option<String> {
        let st = self.inner.state.read();
        st.idx(id)
            .map(|i| st.strings.name(st.meta(i).tenant).to_string())
    }

    /// Deletes the catalog of the (closed) store in `dir` and rebuilds it
    /// from the log. Returns the number of records cataloged.
    pub fn rebuild_catalog(dir: impl AsRef<Path>, opts: &Options) -> Result<u64> {
        let dir = dir.as_ref();
        let backend = opts.backend.clone();
        crate::store_dir::prepare(backend.as_ref(), dir, false, true)?;
        crate::maintenance::check_opens(dir, opts)?;
        let lock_path = layout::lock(dir);
        let _lock = backend
            .try_lock(&lock_path)
            .map_err(|e| EngineError::Storage(StorageError::io(&lock_path, e)))?
            .ok_or(EngineError::Storage(StorageError::Locked {
                path: lock_path.clone(),
            }))?;
        let (log, _) = SegmentLog::open(backend.clone(), &layout::log(dir), opts.log.clone())?;
        let path = layout::catalog(dir);
        if backend.exists(&path) {
            backend
                .remove_file(&path)
                .map_err(|e| EngineError::Storage(StorageError::io(&path, e)))?;
        }
        let cat = Catalog::open(backend.as_ref(), &path)?;
        let mut ops: Vec<CatalogOp> = Vec::new();
        let mut n = 0u64;
        let mut last = 0;
        log.scan(0, |f| {
            catalog_ops_for(f.header.frame_type, f.payload(), f.loc(), &mut ops)?;
            last = f.header.lsn;
            if ops.len() >= 10_000 {
                n += ops.len() as u64;
                cat.apply(&ops, last, false)?;
                ops.clear();
            }
            Ok(ControlFlow::Continue(()))
        })?;
        n += ops.len() as u64;
        cat.apply(&ops, last, true)?;
        Ok(n)
    }
}

impl Session {
    /// Counts of the session's tenant (records by kind, type and status;
    /// its vector spaces): what [`Engram::stats`] shows of this tenant,
    /// and nothing of any other. Needs the tenant admin.
    pub fn tenant_stats(&self) -> Result<TenantView> {
        self.db.check_open()?;
        let st = self.db.inner.state.read();
        self.authorize(&st, crate::authz::Operation::TenantStats, None)?;
        let tenant = self.principal.tenant();
        let mut view = TenantView {
            tenant: tenant.to_string(),
            ..TenantView::default()
        };
        if let Some(bm) = st.tenant_sym(tenant).and_then(|t| st.bm_tenant.get(&t)) {
            for idx in bm.iter() {
                let m = st.meta(idx);
                let c = &mut view.counts;
                c.records += 1;
                *c.by_kind
                    .entry(st.strings.name(m.kind).to_string())
                    .or_default() += 1;
                *c.by_type.entry(m.rtype.name().to_string()).or_default() += 1;
                *c.by_status.entry(m.status.name().to_string()).or_default() += 1;
            }
        }
        for sp in st.vectors.of_tenant(tenant) {
            view.pending_vectors += sp.pending();
            view.vector_spaces.push(SpaceStats {
                model: sp.model.clone(),
                dim: sp.dim,
                vectors: sp.len(),
                indexed: sp.len() - sp.pending(),
                derived: sp.derived,
                graph_bytes: sp.graph_bytes(),
            });
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use crate::{EngineError, Engram, NewRecord, Options, Principal};

    #[test]
    fn tenant_stats_count_the_tenant_only_and_need_its_admin() {
        let dir = tempfile::tempdir().unwrap();
        let db = Engram::open(dir.path(), Options::default()).unwrap();
        for (tenant, n) in [("a", 2), ("b", 3)] {
            let s = db.session(Principal::user(tenant, "u"));
            let batch = (0..n)
                .map(|i| NewRecord::event("note", format!("{tenant} {i}")))
                .collect();
            s.append(batch).unwrap();
        }
        let view = db.session(Principal::admin("a")).tenant_stats().unwrap();
        assert_eq!(view.tenant, "a");
        assert_eq!(view.counts.records, 2);
        assert_eq!(view.counts.by_kind.get("note"), Some(&2));
        assert!(view.vector_spaces.is_empty());
        let empty = db.session(Principal::admin("c")).tenant_stats().unwrap();
        assert_eq!(empty.counts.records, 0);
        assert!(matches!(
            db.session(Principal::user("a", "u")).tenant_stats(),
            Err(EngineError::Forbidden { .. })
        ));
        db.close().unwrap();
    }
}
