//! Operator views of a store: statistics (of the whole store, or of one
//! tenant for its admin), verification (log checksums and state-vs-log
//! agreement), lookup of a record's tenant, and the checkpoint rebuild.
//!
//! This module must never change records; the only thing it rewrites is the
//! derived state checkpoint.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::path::Path;

use engram_storage::{FrameLoc, StorageError};
use roaring::RoaringBitmap;
use serde::Serialize;

use crate::codec;
use crate::db::{Engram, Options, Session};
use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::state::{Idx, Sym};

/// Counts of one tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantStats {
    /// Records (all versions, all statuses).
    pub records: u64,
    /// By kind, of the records not deleted (a deleted record's kind is
    /// not kept, as its tombstone keeps none: it counts in `by_status` and
    /// `by_type` only, so a kind named `deleted` is only ever a kind).
    pub by_kind: BTreeMap<String, u64>,
    /// By record type.
    pub by_type: BTreeMap<String, u64>,
    /// By status.
    pub by_status: BTreeMap<String, u64>,
    /// Records out of every read for good (deleted, or past their
    /// retention period, which `by_status` still counts as they were)
    /// whose content is still in the store's files: the next compaction
    /// purges them, except those a legal hold keeps (0: nothing waits).
    pub awaiting_compaction: u64,
    /// Retention period per class set in the tenant (`engram retention`),
    /// as that command reads it (`30d`, `forever`). A class not listed
    /// is kept until deleted.
    pub retention: BTreeMap<String, String>,
    /// Scopes under legal hold (`engram hold`), sorted.
    pub holds: Vec<String>,
    /// The tenant's review rules (`engram review rule`), by assertion kind
    /// and writer kind: whether such an assertion waits for review. A pair
    /// not listed follows the default (a model's policy, instruction or
    /// procedure waits; nothing else does).
    pub review_rules: Vec<ReviewRule>,
}

/// One review rule of a tenant (see [`TenantStats::review_rules`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReviewRule {
    /// The assertion kind (`policy`, `fact`, ...).
    pub kind: String,
    /// The writer kind (`user`, `system`, `model`).
    pub writer: String,
    /// Whether such an assertion waits for review.
    pub review: bool,
}

impl TenantStats {
    /// Takes the tenant's retention periods, legal holds and review rules.
    fn policy(&mut self, t: &crate::state::TenantState) {
        self.retention = t
            .retention
            .iter()
            .map(|(class, period)| (class.clone(), crate::time::format_retention_period(*period)))
            .collect();
        self.holds = t.holds.iter().cloned().collect();
        self.review_rules = t
            .review_rules
            .iter()
            .map(|((kind, writer), &review)| ReviewRule {
                kind: kind.clone(),
                writer: writer.clone(),
                review,
            })
            .collect();
    }

    /// Counts record `idx` (`expired`: its tenant's records past their
    /// retention period, [`crate::state::State::past_retention_set`]). A
    /// deleted record counts under no kind, as its tombstone will after
    /// compaction: nothing of what it said, its kind included, shows once
    /// it is deleted.
    fn count(&mut self, st: &crate::state::State, idx: Idx, expired: &RoaringBitmap) {
        let m = st.meta(idx);
        self.records += 1;
        if !m.tombstone && st.shown_gone(idx, expired) {
            self.awaiting_compaction += 1;
        }
        if m.status != crate::model::Status::Deleted {
            let kind = st.strings.name(m.kind);
            *self.by_kind.entry(kind.to_string()).or_default() += 1;
        }
        *self.by_type.entry(m.rtype.name().to_string()).or_default() += 1;
        *self
            .by_status
            .entry(m.status.name().to_string())
            .or_default() += 1;
    }
}

/// One vector space.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpaceStats {
    /// The tenant the space belongs to (each tenant's vectors of a model
    /// are a space of their own).
    pub tenant: String,
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
    /// Bytes of int8 codes held in memory (by slot, and gathered for
    /// recently scanned sets).
    pub code_bytes: usize,
    /// What the graph walk reads now: `int8` (codes, re-ranked in full
    /// precision) or `f32`.
    pub graph_reads: &'static str,
}

impl SpaceStats {
    fn of(sp: &crate::vector::space::VectorSpace) -> SpaceStats {
        let indexed = sp.len() - sp.pending();
        SpaceStats {
            tenant: sp.tenant.clone(),
            model: sp.model.clone(),
            dim: sp.dim,
            vectors: sp.len(),
            indexed,
            derived: sp.derived,
            graph_bytes: sp.graph_bytes(),
            code_bytes: sp.code_bytes(),
            graph_reads: if sp.walks_codes(u32::try_from(indexed).unwrap_or(u32::MAX)) {
                "int8"
            } else {
                "f32"
            },
        }
    }
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
    /// LSN of the last state checkpoint (the next open replays only the
    /// log after it).
    pub checkpoint_lsn: u64,
    /// Why the last background checkpoint failed, if it did (nothing is
    /// lost: the log is the record; the next open replays more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_problem: Option<String>,
    /// Why the background indexer stopped, if it did (its vectors are
    /// still searched exactly; reopening the store indexes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub indexer_problem: Option<String>,
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
    /// Its vectors waiting for the indexer (searched exactly meanwhile;
    /// not counting those of incomplete batches, see
    /// [`StoreGauges::unbatched_vectors`]).
    pub pending_vectors: usize,
}

/// Store-wide counts cheap enough to read on every metrics scrape (no
/// walk over the records).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreGauges {
    /// Records in the store (all tenants, versions and statuses).
    pub records: u64,
    /// Vectors in every space.
    pub vectors: u64,
    /// Vectors waiting for the background indexer (searched exactly
    /// meanwhile): the indexing lag.
    pub pending_vectors: u64,
    /// Vectors of graph batches not yet complete (at most 63 per space
    /// past 1,024 vectors): outside the graph, searched exactly, until
    /// their batch fills (see `vector::hnsw::BATCH`). Not a lag: the
    /// indexer takes them when the batch is whole.
    pub unbatched_vectors: u64,
    /// Vector spaces (one per tenant and model).
    pub vector_spaces: u64,
    /// Last LSN applied to the in-memory state.
    pub applied_lsn: u64,
    /// Whether the log writer stopped after an I/O failure: writes are
    /// refused until the store is opened again.
    pub writes_failed: bool,
}

/// What `verify` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Frames checked.
    pub frames: u64,
    /// Records of the log checked against the in-memory state.
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
        let st = self.state();
        let mut s = StoreStats {
            records: st.len() as u64,
            ..StoreStats::default()
        };
        let now = self.now_ms();
        let mut expired: HashMap<Sym, RoaringBitmap> = HashMap::new();
        for (idx, m) in (0..).zip(&st.metas) {
            let past = expired
                .entry(m.tenant)
                .or_insert_with(|| st.past_retention_set(m.tenant, now).0);
            s.tenants
                .entry(st.strings.name(m.tenant).to_string())
                .or_default()
                .count(&st, idx, past);
        }
        for t in st.tenants.values() {
            if !t.retention.is_empty() || !t.holds.is_empty() || !t.review_rules.is_empty() {
                s.tenants.entry(t.name.clone()).or_default().policy(t);
            }
        }
        let ls = self.log().stats();
        s.log_segments = ls.n_segments;
        s.log_bytes = ls.bytes;
        s.last_lsn = ls.last_lsn;
        s.lexical_documents = st.lexical.len();
        s.lexical_terms = st.lexical.term_count();
        for sp in st.vectors.all() {
            s.vector_spaces.push(SpaceStats::of(sp));
        }
        drop(st);
        s.checkpoint_lsn = self.checkpoint_lsn();
        s.checkpoint_problem = self.checkpoint_problem();
        s.indexer_problem = self.indexer_problem();
        Ok(s)
    }

    /// Store-wide counts for monitoring (see [`StoreGauges`]).
    pub fn gauges(&self) -> StoreGauges {
        let st = self.state();
        let spaces = st.vectors.all();
        let (pending, indexable) = st.vectors.pending_and_indexable();
        StoreGauges {
            records: st.len() as u64,
            vectors: spaces.iter().map(|s| s.len() as u64).sum(),
            pending_vectors: indexable as u64,
            unbatched_vectors: (pending - indexable) as u64,
            vector_spaces: spaces.len() as u64,
            applied_lsn: st.applied_lsn,
            writes_failed: self.log().write_failure().is_some(),
        }
    }

    /// Why the store refuses every write, if its log writer stopped after
    /// an I/O failure (a full disk, a failed fsync): reopening the store
    /// recovers the log; nothing acknowledged was lost.
    pub fn write_failure(&self) -> Option<String> {
        self.log().write_failure()
    }

    /// Why the store refuses every call, if applying a durable log frame
    /// to memory failed (a derived file that could not be written on a
    /// full disk, or with no memory left): the log holds the frame, so
    /// reopening the store recovers; nothing acknowledged was lost.
    pub fn apply_failure(&self) -> Option<String> {
        self.apply_error()
    }

    /// How long ago appends last failed for a full disk, and why, unless
    /// one succeeded since: the store goes on, and every append fails the
    /// same way until space is freed.
    pub fn disk_full(&self) -> Option<(std::time::Duration, String)> {
        self.log().disk_full()
    }

    /// Checks every frame's checksums and that its payload reads as a
    /// replay reads it (its version, its decoding, a record's `data`), and
    /// the in-memory state (loaded from a checkpoint or replayed) against
    /// the log: every record frame is a
    /// record of the state with the same tenant and location, the current
    /// holder of an external id is the one the state resolves it to, the
    /// state holds no record the log does not, and every client vector's
    /// row in its space's file holds the vector of its log frame (a row
    /// damaged in place would otherwise be searched as it is).
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = VerifyReport::default();
        // Ledger lines found damaged (still JSON, differing from the log's
        // entry) when this handle reconciled the file with the log. (Taken
        // before the state lock: reconciling takes them in that order.)
        report.problems.extend(self.ledger_sync().iter().cloned());
        if let Some(why) = self.write_failure() {
            report.problems.push(format!(
                "the log writer stopped after an I/O failure ({why}): every write is refused \
                 until the store is opened again (restart the server), which recovers the log"
            ));
        }
        if let Some(why) = self.apply_failure() {
            report.problems.push(format!(
                "applying the log to memory stopped ({why}): every call is refused until the \
                 store is opened again (restart the server), which applies the log again"
            ));
        }
        report.problems.extend(self.space_dir_problems());
        let (frames, problems) = self.log().verify()?;
        report.frames = frames;
        for p in problems {
            report.problems.push(format!(
                "log segment {} offset {}: {}",
                p.segment, p.offset, p.detail
            ));
        }
        // Read the log without holding the state lock (writers go on),
        // up to what the state has applied now.
        let upto = self.state().applied_lsn;
        let mut in_log: Vec<(RecordId, String, Option<String>, FrameLoc)> = Vec::new();
        let mut row_problems = Vec::new();
        // A frame that cannot be read is a problem to report, not a reason
        // for verify itself to fail.
        let scanned = self.log().scan(0, |f| {
            let loc = f.loc();
            if loc.lsn > upto {
                return Ok(ControlFlow::Break(()));
            }
            let bad = |e: EngineError| StorageError::CorruptLog {
                segment: loc.segment,
                offset: loc.offset,
                reason: e.to_string(),
            };
            let ft = f.header.frame_type;
            // every frame read as a replay would read it (the checkpoint
            // may cover it now; a replay without it would stop there)
            let checked = crate::state::check_frame(ft, f.header.frame_version, f.payload());
            if let Some(why) = &checked.problem {
                row_problems.push(format!(
                    "log segment {} offset {} (LSN {}): the frame's payload does not read: {why}; opening without the checkpoint, or reading the record, fails there (restore a backup, or `engram repair`)",
                    loc.segment, loc.offset, loc.lsn
                ));
                // (a record that decodes is still compared with the state)
                if checked.record.is_none() {
                    return Ok(ControlFlow::Continue(()));
                }
            }
            if let Some(a) = checked.record {
                in_log.push((
                    RecordId::from_bytes(a.id),
                    a.tenant.as_str().to_string(),
                    a.external_id.as_ref().map(|e| e.as_str().to_string()),
                    loc,
                ));
            } else if ft == codec::FRAME_TOMBSTONE {
                let a = codec::read_tombstone(f.payload(), f.header.frame_version).map_err(bad)?;
                in_log.push((RecordId::from_bytes(a.id), a.tenant, None, loc));
            } else if ft == codec::FRAME_VECTOR {
                // A vector frame follows its record's frame in one batch.
                let a = codec::view_vector(f.payload()).map_err(bad)?;
                let record = RecordId::from_bytes(a.record);
                if let Some((_, tenant, _, _)) = in_log.last().filter(|r| r.0 == record) {
                    // (a read lock per vector: writers go on between them)
                    let st = self.state();
                    let space = st.vectors.get(tenant, a.model.as_str());
                    let row = space.and_then(|s| Some((s.metric, s.vector_of(st.idx(record)?)?)));
                    if let Some((metric, row)) = row {
                        let v: Vec<f32> = a.vector.iter().map(|x| x.to_native()).collect();
                        if !crate::vector::space::row_matches(metric, &v, row) {
                            row_problems.push(format!(
                                "record {record}: its vector row in space '{}' differs from the vector in the log (LSN {}); `engram rebuild` writes it again",
                                a.model.as_str(),
                                loc.lsn
                            ));
                        }
                    }
                }
            }
            Ok(ControlFlow::Continue(()))
        });
        if let Err(e) = scanned {
            // the state cannot be checked against a log that does not read
            if !report.problems.iter().any(|p| p.contains("log segment")) {
                report.problems.push(format!("log: {e}"));
            }
            return Ok(report);
        }
        let st = self.state();
        for (id, tenant, ext, loc) in &in_log {
            report.records += 1;
            let Some(idx) = st.idx(*id) else {
                report.problems.push(format!(
                    "record {id} (LSN {}) of the log is missing from the state",
                    loc.lsn
                ));
                continue;
            };
            let m = st.meta(idx);
            let t = st.strings.name(m.tenant);
            if t != tenant {
                report.problems.push(format!(
                    "record {id}: the state says tenant '{t}', the log says '{tenant}'"
                ));
            }
            if m.loc != *loc {
                report.problems.push(format!(
                    "record {id}: the state's location {}:{} (LSN {}) differs from the log's {}:{} (LSN {})",
                    m.loc.segment, m.loc.offset, m.loc.lsn, loc.segment, loc.offset, loc.lsn
                ));
            }
            if let Some(ext) = ext {
                if m.superseded_by.is_none() && !m.tombstone {
                    let held = st
                        .tenant_sym(tenant)
                        .and_then(|s| st.tenants.get(&s))
                        .and_then(|ts| ts.external_ids.get(ext.as_str()).copied());
                    if held != Some(idx) {
                        report.problems.push(format!(
                            "record {id}: the state maps external id '{ext}' to {:?}",
                            held.map(|i| st.meta(i).id)
                        ));
                    }
                }
            }
        }
        report.problems.extend(row_problems);

        let in_state = st.metas.iter().filter(|m| m.loc.lsn <= upto).count();
        if in_state != in_log.len() {
            report.problems.push(format!(
                "the state holds {in_state} records up to LSN {upto}, the log {}",
                in_log.len()
            ));
        }
        Ok(report)
    }

    /// A file standing where a vector space's directory belongs: every
    /// writable open refuses the store, naming it, so `verify` names it
    /// too (a read-only open keeps its spaces in memory and never looks).
    fn space_dir_problems(&self) -> Vec<String> {
        let backend = self.backend();
        // the spaces the state holds (a read-only open keeps them in
        // memory): a file of another name in `derived/vectors` stops
        // nothing
        let dirs: Vec<std::path::PathBuf> = {
            let st = self.state();
            st.vectors
                .all()
                .iter()
                .map(|s| s.dir().to_path_buf())
                .collect()
        };
        dirs.into_iter()
            .filter_map(|path| match backend.list_dir(&path) {
                Err(err) if err.kind() == std::io::ErrorKind::NotADirectory => Some(format!(
                    "{}: a file is where a vector space's directory belongs; move it away, \
                     then `engram rebuild` writes the space again",
                    path.display()
                )),
                _ => None,
            })
            .collect()
    }

    /// The tenant of a record id (operator lookup across tenants).
    pub fn tenant_of(&self, id: RecordId) -> Option<String> {
        let st = self.state();
        st.idx(id)
            .map(|i| st.strings.name(st.meta(i).tenant).to_string())
    }

    /// Deletes the state checkpoint of the (closed) store in `dir` and
    /// writes it again from a replay of the whole log. Returns the number
    /// of records.
    pub fn rebuild_checkpoint(dir: impl AsRef<Path>, opts: &Options) -> Result<u64> {
        let dir = dir.as_ref();
        let backend = opts.backend.clone();
        crate::store_dir::prepare(backend.as_ref(), dir, false, true)?;
        crate::maintenance::check_replays(dir, opts)?;
        let path = crate::checkpoint::path(dir);
        crate::store_dir::remove_owned(backend.as_ref(), &path)?;
        let opts = Options {
            create_if_missing: false,
            ..opts.clone()
        };
        let db = Engram::open(dir, opts)?;
        let n = db.state().len() as u64;
        db.close()?;
        Ok(n)
    }
}

impl Session {
    /// Counts of the session's tenant (records by kind, type and status;
    /// its vector spaces): what [`Engram::stats`] shows of this tenant,
    /// and nothing of any other. Needs the tenant admin.
    pub fn tenant_stats(&self) -> Result<TenantView> {
        self.db.check_open()?;
        let st = self.db.state();
        self.authorize(&st, crate::authz::Operation::TenantStats, None)?;
        let tenant = self.principal.tenant();
        let mut view = TenantView {
            tenant: tenant.to_string(),
            ..TenantView::default()
        };
        if let Some((sym, bm)) = st
            .tenant_sym(tenant)
            .and_then(|t| Some((t, st.bm_tenant.get(&t)?)))
        {
            let expired = st.past_retention_set(sym, self.db.now_ms()).0;
            for idx in bm.iter() {
                view.counts.count(&st, idx, &expired);
            }
        }
        if let Some(t) = st.tenant(tenant) {
            view.counts.policy(t);
        }
        for sp in st.vectors.of_tenant(tenant) {
            view.pending_vectors += sp.indexable();
            view.vector_spaces.push(SpaceStats::of(sp));
        }
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use crate::{EngineError, Engram, NewRecord, Options, Principal};

    #[test]
    fn stats_count_what_waits_for_compaction() {
        use crate::time::ManualClock;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_700_000_000_000);
        let opts = Options {
            clock: Arc::new(clock.clone()),
            ..Options::default()
        };
        let db = Engram::open(dir.path(), opts.clone()).unwrap();
        let admin = db.session(Principal::admin("a"));
        admin.set_retention("short", Some(5_000)).unwrap();
        let mut short = NewRecord::event("note", "short lived");
        short.retention_class = Some("short".into());
        let res = admin
            .append(vec![
                NewRecord::event("note", "kept"),
                NewRecord::event("note", "to delete"),
                short,
            ])
            .unwrap();
        let waiting = |db: &Engram| {
            let store = db.stats().unwrap().tenants["a"].awaiting_compaction;
            let tenant = db
                .session(Principal::admin("a"))
                .tenant_stats()
                .unwrap()
                .counts
                .awaiting_compaction;
            assert_eq!(store, tenant);
            store
        };
        assert_eq!(waiting(&db), 0);
        admin
            .delete(&crate::RecordRef::Id(res[1].id), None)
            .unwrap();
        assert_eq!(waiting(&db), 1);
        // past its retention period: out of every read, still on disk
        clock.advance(10_000);
        assert_eq!(waiting(&db), 2);
        db.close().unwrap();
        Engram::compact(dir.path(), &opts).unwrap();
        let db = Engram::open(dir.path(), opts).unwrap();
        assert_eq!(waiting(&db), 0);
        assert_eq!(db.stats().unwrap().tenants["a"].records, 3);
        db.close().unwrap();
    }

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

    #[test]
    fn stats_list_a_tenants_retention_and_holds_and_a_lift_names_a_placed_hold() {
        let dir = tempfile::tempdir().unwrap();
        let db = Engram::open(dir.path(), Options::default()).unwrap();
        let admin = db.session(Principal::admin("a"));
        admin.set_retention("chat", Some(30 * 86_400_000)).unwrap();
        admin.set_retention("audit", None).unwrap();
        admin.hold("user:ann", true).unwrap();
        admin.hold("tenant", true).unwrap();
        let err = admin.hold("user:bob", false).unwrap_err();
        assert!(
            matches!(&err, EngineError::InvalidInput { field, reason, .. }
                if field == "scope" && reason.contains("no legal hold is placed on 'user:bob'")),
            "{err}"
        );
        admin.hold("tenant", false).unwrap();
        // another tenant's hold is not this tenant's to lift
        db.session(Principal::admin("b"))
            .hold("user:ann", false)
            .unwrap_err();
        let view = admin.tenant_stats().unwrap();
        let want: std::collections::BTreeMap<String, String> = [
            ("audit".to_string(), "forever".to_string()),
            ("chat".to_string(), "30d".to_string()),
        ]
        .into();
        assert_eq!(view.counts.retention, want);
        assert_eq!(view.counts.holds, vec!["user:ann".to_string()]);
        // the store's stats list a tenant that has policy and no records
        let store = db.stats().unwrap();
        assert_eq!(store.tenants["a"].records, 0);
        assert_eq!(store.tenants["a"].holds, vec!["user:ann".to_string()]);
        assert!(!store.tenants.contains_key("b"));
        db.close().unwrap();
    }

    #[test]
    fn a_deleted_record_counts_under_no_kind_before_and_after_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let db = Engram::open(dir.path(), Options::default()).unwrap();
        let s = db.session(Principal::admin("a"));
        let r = s
            .append(vec![
                NewRecord::event("kindmark-secret", "x"),
                NewRecord::event("note", "y"),
                // a kind of that name is a kind like any other
                NewRecord::event("deleted", "z"),
            ])
            .unwrap();
        s.delete(&crate::RecordRef::Id(r[0].id), None).unwrap();
        let kinds = |db: &Engram| {
            let before = db.stats().unwrap().tenants["a"].by_kind.clone();
            let view = db.session(Principal::admin("a")).tenant_stats().unwrap();
            assert_eq!(view.counts.by_kind, before);
            before
        };
        let want: std::collections::BTreeMap<String, u64> =
            [("deleted".to_string(), 1), ("note".to_string(), 1)].into();
        assert_eq!(db.stats().unwrap().tenants["a"].by_status["deleted"], 1);
        assert_eq!(kinds(&db), want);
        db.close().unwrap();
        Engram::compact(dir.path(), &Options::default()).unwrap();
        let db = Engram::open(dir.path(), Options::default()).unwrap();
        assert_eq!(kinds(&db), want);
        db.close().unwrap();
    }
}
