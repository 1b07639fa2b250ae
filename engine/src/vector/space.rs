//! Vector spaces: one per (tenant, model id), each a memory-mapped vector
//! file, the slot <-> record maps, and an HNSW graph over the slots indexed
//! so far.
//!
//! Spaces are per tenant so that nothing one tenant does is visible to
//! another: a model id, a dimension or a vector count of tenant A never
//! appears in what tenant B is told (tenant B can even use the same model
//! id with another dimension), and a tenant's searches walk a graph of its
//! own vectors only.
//!
//! A space's dimension is fixed by its first vector and checked on every
//! later one. Cosine spaces store unit vectors and search with the dot
//! product (same ranking, cheaper). Slots are assigned in log order, so a
//! replay of the same log gives the same slots, and the persisted graph
//! stays valid across restarts.
//!
//! Indexing runs off the write path: `push` only appends the vector; the
//! background indexer calls [`VectorSpace::index_pending`]. Slots not yet in
//! the graph are searched exactly, so results never miss a record because
//! indexing is behind.
//!
//! This module must never decide eligibility: it receives the eligible set.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use engram_storage::Backend;
use engram_storage::files::{VectorFile, read_snapshot, write_snapshot};
use parking_lot::RwLock;
use roaring::RoaringBitmap;
use rustc_hash::FxHashMap;

use super::distance::Metric;
use super::hnsw::{Exact, Hnsw, HnswParams, Neighbor, SearchScratch, SearchStats, Vectors};
use super::quant::{CodeScorer, Codes, QueryCode, ScanCache};
use crate::error::{EngineError, Result};
use crate::id::RecordId;

mod header;
mod indexing;
pub use indexing::{LiveTurn, SpaceRows};
mod rows;
pub use rows::{normalized, row_digest, row_matches};
mod scan;
use header::{SpaceHeader, decode_header, encode_header};

use super::precision::GraphPrecision;

const SNAPSHOT_MAGIC: [u8; 8] = *b"ENGRHNSW";
/// Version 2 added the tenant (spaces of version 1 were per model for the
/// whole store; they are discarded and rebuilt from the log). Version 3
/// graphs are built in batches past their first 1,024 slots
/// ([`super::hnsw::BATCH`]); a version 2 graph, built one slot at a time,
/// is kept only up to 1,024 slots (where both builds agree), and a larger
/// one is rebuilt, so that a rebuild from the log gives the same graph.
const SNAPSHOT_VERSION: u32 = 3;
/// The last version whose graphs were built one slot at a time.
const SNAPSHOT_VERSION_SERIAL: u32 = 2;

/// Exact scans of at least this many records read int8 codes first
/// ([`VectorSpace::exact_top`]); smaller ones are not worth coding.
pub const QUANTIZED_SCAN_MIN: u64 = 128;

/// Rows read per chunk when coding a space's vectors (1.5 MiB at 384
/// dimensions).
const CODE_CHUNK_ROWS: usize = 1024;

/// Dense record index (see `state`).
pub type Idx = u32;

/// Vectors readable by slot from a space's file: the memory-mapped rows,
/// then the rows appended since the last mapping.
pub struct SpaceVectors<'a> {
    mapped: &'a [f32],
    tail: &'a [f32],
    mapped_rows: usize,
    dim: usize,
    len: u32,
}

impl Vectors for SpaceVectors<'_> {
    fn dim(&self) -> usize {
        self.dim
    }
    fn len(&self) -> u32 {
        self.len
    }
    #[inline]
    fn get(&self, slot: u32) -> &[f32] {
        let s = slot as usize;
        if s < self.mapped_rows {
            &self.mapped[s * self.dim..(s + 1) * self.dim]
        } else {
            let t = s - self.mapped_rows;
            &self.tail[t * self.dim..(t + 1) * self.dim]
        }
    }
}

/// One vector space.
pub struct VectorSpace {
    /// Tenant whose vectors these are.
    pub tenant: String,
    /// Model id.
    pub model: String,
    /// Dimensions.
    pub dim: usize,
    /// Metric.
    pub metric: Metric,
    /// Whether vectors come from the configured embedder (not the log).
    pub derived: bool,
    dir: PathBuf,
    file: VectorFile,
    /// slot -> record index.
    pub(crate) slot_to_idx: Vec<Idx>,
    /// record index -> slot. A map, not a vector indexed by record: a
    /// space holds one tenant's share of the records, and a dense vector
    /// per space sized to the store's record count cost 2 GiB over 1,000
    /// tenants at a million records.
    idx_to_slot: FxHashMap<Idx, u32>,
    /// Records with a vector here.
    pub(crate) members: RoaringBitmap,
    /// The graph (its own lock: the indexer inserts while readers search).
    pub hnsw: Arc<RwLock<Hnsw>>,
    /// The batch being planned (see [`super::hnsw::BATCH`]).
    batch: Arc<parking_lot::Mutex<indexing::BatchWork>>,
    /// Rows known durable (written before the last snapshot).
    rows_synced: u64,
    /// Record id of the last durable row, as persisted.
    last_row_record: [u8; 16],
    /// Int8 codes by slot, made on the first large exact scan or int8 walk
    /// (or by the indexer, for a space walked over codes) and extended
    /// by later ones (see [`VectorSpace::exact_top`]).
    codes: Arc<RwLock<Codes>>,
    /// Recently scanned sets' codes, gathered (see `quant::ScanCache`).
    scans: parking_lot::Mutex<ScanCache>,
    /// What the graph walk reads (set by [`VectorSpaces`]).
    precision: GraphPrecision,
    /// This space object's identity, unique in the process: with
    /// [`VectorSpace::len`] it names the space's members exactly (they are
    /// the records of `slot_to_idx`, which only grows), for memos kept
    /// outside the space.
    pub(crate) uid: u64,
}

/// A new space object's [`VectorSpace::uid`].
fn next_uid() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl std::fmt::Debug for VectorSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorSpace")
            .field("tenant", &self.tenant)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("rows", &self.file.len())
            .finish()
    }
}

/// Directory of a space: readable tenant and model prefixes, metric,
/// dimension and a hash of (tenant, model), so two spaces never share files
/// (a changed metric or dimension gets a new directory).
fn space_dir_name(tenant: &str, model: &str, metric: Metric, dim: usize) -> String {
    let mut key = Vec::with_capacity(tenant.len() + model.len() + 1);
    key.extend_from_slice(tenant.as_bytes());
    key.push(0);
    key.extend_from_slice(model.as_bytes());
    let h = crate::canonical::sha256_hex(&key);
    let readable = |x: &str| -> String {
        x.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(24)
            .collect()
    };
    format!(
        "{}-{}-{}-{dim}-{}",
        readable(tenant),
        readable(model),
        metric.name(),
        &h[..16]
    )
}

impl VectorSpace {
    fn internal_metric(&self) -> Metric {
        if self.metric == Metric::Cosine {
            Metric::Dot
        } else {
            self.metric
        }
    }

    /// Opens the persisted space in `dir` if it exists and is readable.
    fn open_persisted(
        backend: &dyn Backend,
        dir: &Path,
    ) -> Result<Option<(SpaceHeader, Hnsw, VectorFile)>> {
        let snap_path = dir.join("hnsw.snap");
        let (snap, serial) =
            match read_snapshot(backend, &snap_path, SNAPSHOT_MAGIC, SNAPSHOT_VERSION) {
                Ok(Some(s)) => (s, false),
                Ok(None) => return Ok(None),
                Err(_) => match read_snapshot(
                    backend,
                    &snap_path,
                    SNAPSHOT_MAGIC,
                    SNAPSHOT_VERSION_SERIAL,
                ) {
                    Ok(Some(s)) => (s, true),
                    Ok(None) | Err(_) => return Ok(None),
                },
            };
        let body = snap.body.as_slice();
        let Some((header, graph_bytes)) = decode_header(body) else {
            return Ok(None);
        };
        let Ok(mut hnsw) = Hnsw::read_from(graph_bytes) else {
            return Ok(None);
        };
        if serial && hnsw.len() > super::hnsw::SERIAL_UNTIL {
            // Past the slots where both builds agree the graph is dropped and
            // its vectors kept: the indexer builds it again in batches, as a
            // rebuild would.
            hnsw = Hnsw::new(hnsw.params(), hnsw.metric());
        }
        // Not populated yet: the space's precision, set when it is adopted,
        // decides (see `VectorSpace::set_precision`).
        let Ok(mut file) = VectorFile::open_with(backend, &dir.join("vectors.f32"), false) else {
            return Ok(None);
        };
        if (file.len() as u64) < header.rows_synced
            || file.dim() != header.dim
            || u64::from(hnsw.len()) > header.rows_synced
        {
            return Ok(None);
        }
        file.truncate(engram_storage::cast::usize_from(header.rows_synced))?;
        Ok(Some((header, hnsw, file)))
    }

    /// Creates an empty space (truncating any old files).
    #[allow(clippy::too_many_arguments)]
    fn create(
        backend: &dyn Backend,
        root: &Path,
        tenant: &str,
        model: &str,
        dim: usize,
        metric: Metric,
        derived: bool,
        params: HnswParams,
    ) -> Result<VectorSpace> {
        let dir = root.join(space_dir_name(tenant, model, metric, dim));
        backend
            .create_dir_all(&dir)
            .map_err(|e| engram_storage::StorageError::io(&dir, e))?;
        let file = VectorFile::create(backend, &dir.join("vectors.f32"), dim)?;
        let internal = if metric == Metric::Cosine {
            Metric::Dot
        } else {
            metric
        };
        Ok(VectorSpace {
            tenant: tenant.to_string(),
            model: model.to_string(),
            dim,
            metric,
            derived,
            dir,
            file,
            slot_to_idx: Vec::new(),
            idx_to_slot: FxHashMap::default(),
            members: RoaringBitmap::new(),
            hnsw: Arc::new(RwLock::new(Hnsw::new(params, internal))),
            rows_synced: 0,
            last_row_record: [0; 16],
            codes: Arc::new(RwLock::new(Codes::new(dim))),
            scans: parking_lot::Mutex::default(),
            batch: Arc::default(),
            precision: GraphPrecision::default(),
            uid: next_uid(),
        })
    }

    /// The space's directory (`derived/vectors/<space>`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.slot_to_idx.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.slot_to_idx.is_empty()
    }

    /// The vectors, for search.
    pub fn vectors(&self) -> SpaceVectors<'_> {
        let (mapped, tail) = self.file.flat();
        SpaceVectors {
            mapped,
            tail,
            mapped_rows: mapped.len() / self.dim,
            dim: self.dim,
            len: u32::try_from(self.slot_to_idx.len()).expect("fewer slots than records"),
        }
    }

    /// Slot of a record.
    pub fn slot_of(&self, idx: Idx) -> Option<u32> {
        self.idx_to_slot.get(&idx).copied()
    }

    /// The stored (normalised) vector of a record.
    pub fn vector_of(&self, idx: Idx) -> Option<&[f32]> {
        self.slot_of(idx).map(|s| self.file.get(s as usize))
    }

    fn assign(&mut self, idx: Idx) -> u32 {
        let slot = u32::try_from(self.slot_to_idx.len()).expect("fewer slots than records");
        self.slot_to_idx.push(idx);
        self.idx_to_slot.insert(idx, slot);
        self.members.insert(idx);
        slot
    }

    /// Appends a vector for record `idx` (already validated).
    pub fn push(&mut self, idx: Idx, vector: &[f32]) -> Result<()> {
        // The row first: a failed write leaves the slot unassigned.
        // (A row that survived from before, on replay, is not written.)
        if self.slot_to_idx.len() >= self.file.len() {
            let v = normalized(self.metric, vector);
            self.file.push(&v)?;
        }
        self.assign(idx);
        Ok(())
    }

    /// Moves rows appended since the last mapping into the mapping (so
    /// reads see one flat slice).
    pub fn remap(&mut self) -> Result<()> {
        if self.file.tail_rows() > 0 {
            self.file.set_populate(self.populates_rows());
            self.file.remap()?;
        }
        Ok(())
    }

    /// Whether the vector file's rows are faulted in when mapped: unless
    /// the graph is walked over codes (see [`VectorSpace::set_precision`]).
    fn populates_rows(&self) -> bool {
        !self.walks_codes(self.hnsw.read().len())
    }

    /// Sets what the graph walk reads. A space walked in full precision
    /// keeps its vector file's rows resident (faulted in when mapped); one
    /// walked over codes reads its rows only to code them (by copy, not
    /// through the mapping) and to re-rank `max(ef, k)` rows per query: its rows
    /// stay on disk and in the kernel's page cache (clean pages it may
    /// drop), not in memory the process must keep.
    fn set_precision(&mut self, precision: GraphPrecision) {
        self.precision = precision;
        let populate = self.populates_rows();
        let populated = self.file.set_populate(populate);
        if populate && !populated {
            // Populating is a hint: if the new mapping fails, the old one
            // stays and shows the same rows (faulted in when read).
            let _ = self.file.remap();
        }
    }

    /// Graph search restricted by `allow` (a record-index predicate).
    ///
    /// Over int8 codes (see [`GraphPrecision`]) the walk keeps its best
    /// `max(ef, k)` candidates by estimated distance, and those are
    /// re-ranked by full-precision distance: the results and their
    /// distances are full precision, only the walk's routing is not.
    pub fn graph_search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        allow: Option<&dyn Fn(Idx) -> bool>,
        scratch: &mut SearchScratch,
        stats: &mut SearchStats,
    ) -> (Vec<(Idx, f32)>, u32) {
        // The codes first, outside the graph's lock: making them may read
        // the whole file, and the indexer must not wait behind that (nor
        // every later query behind the waiting indexer). They cover every
        // slot, so every slot the graph can hold.
        let codes = (query.len() == self.dim && self.walks_codes(self.hnsw.read().len()))
            .then(|| self.codes_upto_date());
        let g = self.hnsw.read();
        let indexed = g.len();
        let vecs = self.vectors();
        let map = &self.slot_to_idx;
        let pred = allow.map(|f| move |slot: u32| f(map[slot as usize]));
        let codes = codes.filter(|c| c.len() >= indexed as usize);
        let res: Vec<Neighbor> = if let Some(codes) = codes {
            let qc = QueryCode::new(query);
            let walk = ef.max(k);
            let found = g.search_scored(
                &CodeScorer::new(&qc, &codes),
                walk,
                walk,
                pred.as_ref(),
                scratch,
                stats,
            );
            drop(codes);
            let exact = Exact {
                metric: self.internal_metric(),
                q: query,
                vectors: &vecs,
            };
            g.rerank(found, &exact, k, stats)
        } else {
            g.search(query, k, ef, &vecs, pred.as_ref(), scratch, stats)
        };
        (
            res.into_iter()
                .map(|n| (map[n.slot as usize], n.distance))
                .collect(),
            indexed,
        )
    }

    /// Whether a graph of `indexed` vectors is walked over int8 codes.
    pub fn walks_codes(&self, indexed: u32) -> bool {
        self.precision.walks_codes(self.internal_metric(), indexed)
    }

    /// The smallest set [`VectorSpace::exact_top`] scans through int8
    /// codes ([`QUANTIZED_SCAN_MIN`]); never, in an L2 space (the codes
    /// bound inner products only), whose scans and prefilter plans read
    /// the full-precision rows. The planner prices scans by it.
    pub fn scans_codes_from(&self) -> u64 {
        if self.internal_metric() == Metric::Dot {
            QUANTIZED_SCAN_MIN
        } else {
            u64::MAX
        }
    }

    /// A query vector made here (by the embedder), normalised for a
    /// cosine space and otherwise returned as it is, without a copy.
    pub fn prepare_owned(&self, q: Vec<f32>) -> Vec<f32> {
        if self.metric == Metric::Cosine {
            normalized(self.metric, &q)
        } else {
            q
        }
    }

    /// A request's query vector as the space compares it: normalised for a
    /// cosine space, otherwise borrowed as it is (no copy).
    pub fn prepare_query<'a>(&self, q: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        if self.metric == Metric::Cosine {
            std::borrow::Cow::Owned(normalized(self.metric, q))
        } else {
            std::borrow::Cow::Borrowed(q)
        }
    }

    /// Graph bytes (excluding vectors).
    pub fn graph_bytes(&self) -> usize {
        self.hnsw.read().graph_bytes()
    }

    /// Syncs the vector file and writes the graph snapshot. `id_of` maps a
    /// record index to its id (stored to check the snapshot against the log
    /// on the next open).
    pub fn checkpoint(
        &mut self,
        backend: &dyn Backend,
        id_of: &dyn Fn(Idx) -> RecordId,
    ) -> Result<()> {
        self.file.sync()?;
        self.rows_synced = self.file.len() as u64;
        self.last_row_record = self
            .slot_to_idx
            .last()
            .map(|&idx| id_of(idx).to_bytes())
            .unwrap_or([0u8; 16]);
        let header = SpaceHeader {
            tenant: self.tenant.clone(),
            model: self.model.clone(),
            dim: self.dim,
            metric: self.metric,
            derived: self.derived,
            rows_synced: self.rows_synced,
            last_row_record: self.last_row_record,
        };
        let mut body = encode_header(&header);
        self.hnsw.read().write_to(&mut body);
        write_snapshot(
            backend,
            &self.dir.join("hnsw.snap"),
            SNAPSHOT_MAGIC,
            SNAPSHOT_VERSION,
            0,
            &body,
        )?;
        Ok(())
    }
}

/// All vector spaces of a store.
pub struct VectorSpaces {
    root: PathBuf,
    backend: Arc<dyn Backend>,
    params: HnswParams,
    metric: Metric,
    precision: GraphPrecision,
    spaces: Vec<VectorSpace>,
    /// Tenant -> positions of its spaces in `spaces`, in creation order: a
    /// query finds its tenant's spaces without looking at any other
    /// tenant's (a store holds one space per tenant and model).
    by_tenant: std::collections::HashMap<String, Vec<usize>>,
    /// Persisted spaces found at open, waiting to be matched by replay.
    persisted: Vec<(SpaceHeader, Hnsw, VectorFile, PathBuf)>,
}

/// Which space: a tenant's vectors of one model.
pub type SpaceKey = (String, String);

/// A space's slot map (which record each row holds), as the state
/// checkpoint keeps it; the rows and the graph are in the space's own files.
#[derive(Clone, Debug, PartialEq)]
pub struct SpaceSlots {
    /// Tenant.
    pub tenant: String,
    /// Model id.
    pub model: String,
    /// Dimensions.
    pub dim: usize,
    /// Derived by the embedder.
    pub derived: bool,
    /// Record index of each slot.
    pub slot_to_idx: Vec<Idx>,
}

impl std::fmt::Debug for VectorSpaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.spaces.iter()).finish()
    }
}

impl VectorSpaces {
    /// Loads persisted spaces under `root` (they are matched to the log as
    /// replay pushes vectors; see [`VectorSpaces::finish_replay`]).
    pub fn open(
        backend: Arc<dyn Backend>,
        root: &Path,
        params: HnswParams,
        metric: Metric,
    ) -> Result<Self> {
        backend
            .create_dir_all(root)
            .map_err(|e| engram_storage::StorageError::io(root, e))?;
        let mut persisted = Vec::new();
        for entry in backend
            .list_dir(root)
            .map_err(|e| engram_storage::StorageError::io(root, e))?
        {
            if !entry.is_dir {
                continue;
            }
            let dir = root.join(&entry.name);
            match VectorSpace::open_persisted(backend.as_ref(), &dir)? {
                Some((h, g, f)) => persisted.push((h, g, f, dir)),
                // Unreadable, or of an older layout: derived state, rebuilt
                // from the log by the replay that follows.
                None => {
                    crate::store_dir::remove_owned(backend.as_ref(), &dir)?;
                }
            }
        }
        Ok(VectorSpaces {
            root: root.to_path_buf(),
            backend,
            params,
            metric,
            precision: GraphPrecision::default(),
            spaces: Vec::new(),
            by_tenant: std::collections::HashMap::new(),
            persisted,
        })
    }

    fn position(&self, tenant: &str, model: &str) -> Option<usize> {
        self.by_tenant
            .get(tenant)?
            .iter()
            .copied()
            .find(|&i| self.spaces[i].model == model)
    }

    /// What graph walks read, in every space (present and future).
    pub fn set_graph_precision(&mut self, precision: GraphPrecision) {
        self.precision = precision;
        for s in &mut self.spaces {
            s.set_precision(precision);
        }
    }

    /// Appends a space and indexes it under its tenant.
    fn add(&mut self, mut space: VectorSpace) {
        space.set_precision(self.precision);
        self.by_tenant
            .entry(space.tenant.clone())
            .or_default()
            .push(self.spaces.len());
        self.spaces.push(space);
    }

    /// The space of `tenant`'s vectors of `model`.
    pub fn get(&self, tenant: &str, model: &str) -> Option<&VectorSpace> {
        self.position(tenant, model).map(|i| &self.spaces[i])
    }

    /// All spaces of every tenant (operator views only; a session sees its
    /// tenant's through [`VectorSpaces::of_tenant`]).
    pub fn all(&self) -> &[VectorSpace] {
        &self.spaces
    }

    /// The spaces of one tenant.
    pub fn of_tenant<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a VectorSpace> + 'a {
        self.by_tenant
            .get(tenant)
            .into_iter()
            .flatten()
            .map(|&i| &self.spaces[i])
    }

    /// Model ids of one tenant's spaces, sorted.
    pub fn models(&self, tenant: &str) -> Vec<String> {
        let mut v: Vec<String> = self.of_tenant(tenant).map(|s| s.model.clone()).collect();
        v.sort();
        v
    }

    /// Dimension of `tenant`'s `model` space, if it exists.
    pub fn dim_of(&self, tenant: &str, model: &str) -> Option<usize> {
        self.get(tenant, model).map(|s| s.dim)
    }

    /// Appends a vector, creating the space on first use.
    pub fn push(
        &mut self,
        tenant: &str,
        model: &str,
        derived: bool,
        idx: Idx,
        vector: &[f32],
    ) -> Result<()> {
        if let Some(i) = self.position(tenant, model) {
            let s = &mut self.spaces[i];
            if s.dim != vector.len() {
                // Validated on the write path; a mismatch here means the log
                // disagrees with itself.
                return Err(EngineError::DimensionMismatch {
                    item: None,
                    field: "embedding.vector".into(),
                    model: model.into(),
                    expected: s.dim,
                    got: vector.len(),
                });
            }
            return s.push(idx, vector);
        }
        let space = match self.persisted.iter().position(|(h, ..)| {
            h.tenant == tenant
                && h.model == model
                && h.dim == vector.len()
                && h.metric == self.metric
        }) {
            Some(i) => {
                let (h, g, f, dir) = self.persisted.swap_remove(i);
                VectorSpace {
                    tenant: h.tenant.clone(),
                    model: h.model.clone(),
                    dim: h.dim,
                    metric: h.metric,
                    derived,
                    dir,
                    file: f,
                    slot_to_idx: Vec::new(),
                    idx_to_slot: FxHashMap::default(),
                    members: RoaringBitmap::new(),
                    hnsw: Arc::new(RwLock::new(g)),
                    rows_synced: h.rows_synced,
                    last_row_record: h.last_row_record,
                    codes: Arc::new(RwLock::new(Codes::new(h.dim))),
                    scans: parking_lot::Mutex::default(),
                    batch: Arc::default(),
                    precision: GraphPrecision::default(),
                    uid: next_uid(),
                }
            }
            None => VectorSpace::create(
                self.backend.as_ref(),
                &self.root,
                tenant,
                model,
                vector.len(),
                self.metric,
                derived,
                self.params,
            )?,
        };
        self.add(space);
        self.spaces
            .last_mut()
            .expect("just pushed")
            .push(idx, vector)
    }

    /// The slot maps of every space, for the state checkpoint.
    pub fn slots(&self) -> Vec<SpaceSlots> {
        self.spaces
            .iter()
            .map(|s| SpaceSlots {
                tenant: s.tenant.clone(),
                model: s.model.clone(),
                dim: s.dim,
                derived: s.derived,
                slot_to_idx: s.slot_to_idx.clone(),
            })
            .collect()
    }

    /// Takes over the persisted spaces a state checkpoint lists, with their
    /// slot maps, instead of rebuilding the maps by replay. Each must have
    /// been persisted with exactly as many rows as the map has slots and
    /// the same record at its last row (`id_of` reads the checkpoint's
    /// record table). When any does not match, nothing changes and the
    /// reason is returned: the caller replays the whole log instead.
    pub fn adopt(
        &mut self,
        slots: Vec<SpaceSlots>,
        id_of: &dyn Fn(Idx) -> Option<RecordId>,
    ) -> std::result::Result<(), String> {
        if !self.spaces.is_empty() {
            return Err("spaces already in use".into());
        }
        let mut picks = Vec::with_capacity(slots.len());
        for s in &slots {
            let Some(i) = self.persisted.iter().position(|(h, ..)| {
                h.tenant == s.tenant
                    && h.model == s.model
                    && h.dim == s.dim
                    && h.metric == self.metric
                    && h.derived == s.derived
            }) else {
                return Err(format!(
                    "vector space {} of tenant {} has no usable persisted graph (missing, damaged, or built by an older version)",
                    s.model, s.tenant
                ));
            };
            let (h, g, f, _) = &self.persisted[i];
            let last = s.slot_to_idx.last().map(|&idx| id_of(idx));
            let last_matches = match last {
                None => h.rows_synced == 0,
                Some(Some(id)) => id.to_bytes() == h.last_row_record,
                Some(None) => false,
            };
            if h.rows_synced != s.slot_to_idx.len() as u64
                || f.len() as u64 != h.rows_synced
                || u64::from(g.len()) > h.rows_synced
                || !last_matches
            {
                return Err(format!(
                    "vector space {} of tenant {} was persisted at another point ({} rows, checkpoint has {})",
                    s.model,
                    s.tenant,
                    h.rows_synced,
                    s.slot_to_idx.len()
                ));
            }
            if picks.contains(&i) {
                return Err("a vector space is listed twice".into());
            }
            picks.push(i);
        }
        // Every check passed: move the matched spaces over (highest
        // position first, so the others keep theirs).
        let mut order: Vec<(usize, usize, SpaceSlots)> = picks
            .into_iter()
            .zip(slots)
            .enumerate()
            .map(|(k, (i, s))| (i, k, s))
            .collect();
        order.sort_by_key(|o| std::cmp::Reverse(o.0));
        let mut adopted = Vec::with_capacity(order.len());
        for (i, k, s) in order {
            let (h, g, f, dir) = self.persisted.swap_remove(i);
            let mut idx_to_slot = FxHashMap::default();
            idx_to_slot.reserve(s.slot_to_idx.len());
            for (slot, &idx) in s.slot_to_idx.iter().enumerate() {
                idx_to_slot.insert(idx, u32::try_from(slot).expect("fewer slots than records"));
            }
            let members = RoaringBitmap::from_iter(s.slot_to_idx.iter().copied());
            adopted.push((
                k,
                VectorSpace {
                    tenant: s.tenant,
                    model: s.model,
                    dim: h.dim,
                    metric: h.metric,
                    derived: s.derived,
                    dir,
                    file: f,
                    slot_to_idx: s.slot_to_idx,
                    idx_to_slot,
                    members,
                    hnsw: Arc::new(RwLock::new(g)),
                    rows_synced: h.rows_synced,
                    last_row_record: h.last_row_record,
                    codes: Arc::new(RwLock::new(Codes::new(h.dim))),
                    scans: parking_lot::Mutex::default(),
                    batch: Arc::default(),
                    precision: GraphPrecision::default(),
                    uid: next_uid(),
                },
            ));
        }
        // The checkpoint's order, which is the order replay created them in.
        adopted.sort_by_key(|(k, _)| *k);
        for (_, sp) in adopted {
            self.add(sp);
        }
        Ok(())
    }

    /// Called after replay. Persisted spaces no vector of the log matched are
    /// removed. A restored space whose file or graph does not match the log
    /// (more rows than the log produced, or a different record at the last
    /// persisted row) must be rebuilt by the caller: its key is returned.
    pub fn finish_replay(&mut self, id_of: &dyn Fn(Idx) -> RecordId) -> Result<Vec<SpaceKey>> {
        for (_, _, _, dir) in self.persisted.drain(..) {
            crate::store_dir::remove_owned(self.backend.as_ref(), &dir)?;
        }
        let mut stale = Vec::new();
        for s in &self.spaces {
            let too_many = s.file.len() > s.slot_to_idx.len()
                || s.hnsw.read().len() as usize > s.slot_to_idx.len();
            let mismatch = s.rows_synced > 0
                && s.slot_to_idx
                    .get(engram_storage::cast::usize_from(s.rows_synced) - 1)
                    .is_none_or(|&idx| id_of(idx).to_bytes() != s.last_row_record);
            if too_many || mismatch {
                stale.push((s.tenant.clone(), s.model.clone()));
            }
        }
        Ok(stale)
    }

    /// Drops a space's files and state (it will be recreated by pushes).
    pub fn reset(&mut self, key: &SpaceKey) -> Result<()> {
        if let Some(i) = self.position(&key.0, &key.1) {
            let s = self.spaces.remove(i);
            let dir = s.dir.clone();
            drop(s);
            for positions in self.by_tenant.values_mut() {
                positions.retain(|&p| p != i);
                for p in positions.iter_mut() {
                    if *p > i {
                        *p -= 1;
                    }
                }
            }
            self.by_tenant.retain(|_, positions| !positions.is_empty());
            crate::store_dir::remove_owned(self.backend.as_ref(), &dir)?;
        }
        Ok(())
    }

    /// Indexes pending slots of every space, up to `max` units of work in
    /// total, on `threads` threads (see [`VectorSpace::index_pending`]).
    pub fn index_pending(&self, max: usize, threads: usize) -> Result<usize> {
        let mut done = 0;
        for s in &self.spaces {
            if done >= max {
                break;
            }
            done += s.index_pending(max - done, threads)?;
        }
        Ok(done)
    }

    /// A turn of the live indexer on the first space with indexable
    /// vectors, to run without the state's lock (see
    /// [`VectorSpace::live_turn`]).
    pub fn live_turn(&self, rows: &mut SpaceRows) -> Option<LiveTurn> {
        self.spaces.iter().find_map(|s| s.live_turn(rows))
    }

    /// Whether any graph may take a vector now (see
    /// [`VectorSpace::may_index`]): never waits for a graph's lock.
    pub fn may_index(&self) -> bool {
        self.spaces.iter().any(VectorSpace::may_index)
    }

    /// Pending slots the graphs can take now (see
    /// [`VectorSpace::indexable`]).
    pub fn indexable(&self) -> usize {
        self.spaces.iter().map(|s| s.indexable()).sum()
    }

    /// Vectors over every space, in their graphs or not.
    pub fn total(&self) -> usize {
        self.spaces.iter().map(|s| s.len()).sum()
    }

    /// (pending, indexable) over every space, each from one look at its
    /// graph.
    pub fn pending_and_indexable(&self) -> (usize, usize) {
        self.spaces
            .iter()
            .map(|s| s.pending_and_indexable())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// See [`VectorSpace::trim_batch_scratch`].
    pub fn trim_batch_scratch(&self) {
        for s in &self.spaces {
            s.trim_batch_scratch();
        }
    }

    /// Folds appended rows of every space into its memory map.
    pub fn remap_all(&mut self) -> Result<()> {
        for s in &mut self.spaces {
            s.remap()?;
        }
        Ok(())
    }

    /// Persists every space.
    pub fn checkpoint(&mut self, id_of: &dyn Fn(Idx) -> RecordId) -> Result<()> {
        let backend = self.backend.clone();
        for s in &mut self.spaces {
            s.checkpoint(backend.as_ref(), id_of)?;
        }
        Ok(())
    }

    /// Root directory of the spaces.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn vectors_near_the_limits_of_f32_normalise_to_unit_length() {
        for (v, each) in [
            (vec![3e38f32; 256], 1.0 / 16.0),
            (vec![-1e-30f32; 4], -0.5),
            (vec![0.5f32; 4], 0.5),
        ] {
            let u = normalized(Metric::Cosine, &v);
            let len: f32 = u.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((len - 1.0).abs() < 1e-5, "length {len}");
            assert!(u.iter().all(|x| (x - each).abs() < 1e-6), "{:?}", &u[..4]);
        }
        assert_eq!(normalized(Metric::Cosine, &[0.0; 3]), vec![0.0; 3]);
    }

    #[test]
    fn a_row_matches_its_vector_up_to_the_last_bits_of_a_normalisation() {
        let v = [3.0f32, 4.0, 0.0];
        let mut row = normalized(Metric::Cosine, &v);
        assert!(row_matches(Metric::Cosine, &v, &row));
        // another CPU's kernel: a unit in the last place
        row[0] = f32::from_bits(row[0].to_bits() + 1);
        assert!(row_matches(Metric::Cosine, &v, &row));
        row[1] = 0.5;
        assert!(!row_matches(Metric::Cosine, &v, &row));
        assert!(!row_matches(Metric::Cosine, &v, &row[..2]));
        // other metrics store the vector as sent: bit for bit
        assert!(row_matches(Metric::L2, &v, &v));
        let mut off = v;
        off[2] = f32::from_bits(1);
        assert!(!row_matches(Metric::L2, &v, &off));
    }

    use super::*;
    use crate::vector::distance::distance;
    use engram_storage::MemBackend;

    /// Deterministic pseudo-random unit-ish vectors in clusters, so many
    /// similarities are close (where a loose bound would show).
    fn vector(i: u32, dim: usize) -> Vec<f32> {
        let c = i % 7;
        (0..dim)
            .map(|j| {
                let h = (u64::from(i) * 2_654_435_761 + j as u64 * 40_503) % 1000;
                let centre = if (j as u32 + c).is_multiple_of(5) {
                    1.0
                } else {
                    0.0
                };
                centre + h as f32 / 5000.0
            })
            .collect()
    }

    fn cosine_spaces() -> VectorSpaces {
        VectorSpaces::open(
            Arc::new(MemBackend::new()),
            Path::new("/v"),
            HnswParams::default(),
            Metric::Cosine,
        )
        .unwrap()
    }

    fn reference(space: &VectorSpace, q: &[f32], set: &RoaringBitmap, n: usize) -> Vec<(Idx, f32)> {
        let mut all = space.exact(q, set.iter(), &mut SearchStats::default());
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// Spaces are found by tenant and model, a tenant sees only its own in
    /// creation order, and removing one keeps every other findable.
    #[test]
    fn spaces_are_found_by_tenant_and_stay_found_after_a_reset() {
        let mut spaces = cosine_spaces();
        let keys = [
            ("t1", "a"),
            ("t2", "a"),
            ("t1", "b"),
            ("t3", "c"),
            ("t2", "b"),
        ];
        for (i, (t, m)) in keys.iter().enumerate() {
            spaces
                .push(t, m, false, i as Idx, &vector(i as u32, 8))
                .unwrap();
        }
        let models = |spaces: &VectorSpaces, t: &str| -> Vec<String> {
            spaces.of_tenant(t).map(|s| s.model.clone()).collect()
        };
        assert_eq!(models(&spaces, "t1"), ["a", "b"]);
        assert_eq!(models(&spaces, "t2"), ["a", "b"]);
        assert!(models(&spaces, "nobody").is_empty());
        assert!(spaces.get("t3", "a").is_none());
        spaces.reset(&("t1".to_string(), "a".to_string())).unwrap();
        assert!(spaces.get("t1", "a").is_none());
        assert_eq!(models(&spaces, "t1"), ["b"]);
        for (t, m) in keys.iter().filter(|k| **k != ("t1", "a")) {
            let s = spaces.get(t, m).unwrap();
            assert_eq!((s.tenant.as_str(), s.model.as_str()), (*t, *m));
        }
        spaces.reset(&("t3".to_string(), "c".to_string())).unwrap();
        assert!(models(&spaces, "t3").is_empty());
        assert_eq!(spaces.get("t2", "b").unwrap().model, "b");
    }

    #[test]
    fn the_int8_scan_returns_the_exact_top_n_cached_or_not() {
        let dim = 48;
        let mut spaces = cosine_spaces();
        let n_vec = 3000u32;
        for i in 0..n_vec {
            // record indexes with gaps, as in a store with other records
            spaces
                .push("t", "m", false, i * 3 + 1, &vector(i, dim))
                .unwrap();
        }
        let space = spaces.get("t", "m").unwrap();
        let sets: Vec<RoaringBitmap> = vec![
            space.members.clone(),
            space.members.iter().filter(|i| i % 2 == 0).collect(),
            space
                .members
                .iter()
                .filter(|i| i % 5 != 0)
                .take(1500)
                .collect(),
        ];
        for (k, set) in sets.iter().enumerate() {
            assert!(
                set.len() >= QUANTIZED_SCAN_MIN,
                "set {k} must take the int8 path"
            );
            for qi in 0..20u32 {
                let q = normalized(Metric::Cosine, &vector(10_000 + qi * 13, dim));
                for n in [1, 10, 50] {
                    let want = reference(space, &q, set, n);
                    for pass in 0..2 {
                        let mut stats = SearchStats::default();
                        let mut got = space.exact_top(&q, set, n, None, &mut stats);
                        got.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                        got.truncate(n);
                        assert_eq!(got, want, "set {k}, query {qi}, n {n}, pass {pass}");
                        assert!(stats.distance_computations >= set.len());
                    }
                }
            }
        }
        assert!(space.code_bytes() > 0);
    }

    /// Only inner-product spaces scan through codes: the planner must
    /// price an L2 space's scans (and never a prefilter) at full precision.
    #[test]
    fn only_inner_product_spaces_scan_codes() {
        for (metric, from) in [
            (Metric::Cosine, QUANTIZED_SCAN_MIN),
            (Metric::Dot, QUANTIZED_SCAN_MIN),
            (Metric::L2, u64::MAX),
        ] {
            let mut spaces = VectorSpaces::open(
                Arc::new(MemBackend::new()),
                Path::new("/v"),
                HnswParams::default(),
                metric,
            )
            .unwrap();
            spaces.push("t", "m", false, 0, &vector(1, 8)).unwrap();
            assert_eq!(
                spaces.get("t", "m").unwrap().scans_codes_from(),
                from,
                "{metric:?}"
            );
        }
    }

    /// A graph snapshot of version 2 (built one slot at a time) is kept
    /// while it holds at most the 1,024 slots where both builds agree; a
    /// larger one is dropped and its vectors kept, for the indexer to build
    /// the graph again in batches.
    #[test]
    fn serially_built_graphs_are_kept_only_where_batches_agree() {
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let serial = super::super::hnsw::SERIAL_UNTIL;
        for (n, kept) in [(300u32, true), (serial, true), (serial + 64, false)] {
            let root = PathBuf::from(format!("/v{n}"));
            let mut spaces = VectorSpaces::open(
                backend.clone(),
                &root,
                HnswParams::default(),
                Metric::Cosine,
            )
            .unwrap();
            for i in 0..n {
                spaces.push("t", "m", false, i, &vector(i, 8)).unwrap();
            }
            spaces.index_pending(usize::MAX, 2).unwrap();
            assert_eq!(spaces.get("t", "m").unwrap().hnsw.read().len(), n);
            spaces
                .checkpoint(&|i| RecordId::from_bytes([i as u8; 16]))
                .unwrap();
            let dir = spaces.get("t", "m").unwrap().dir.clone();
            let path = dir.join("hnsw.snap");
            assert!(
                VectorSpace::open_persisted(backend.as_ref(), &dir)
                    .unwrap()
                    .is_some()
            );
            let snap = read_snapshot(backend.as_ref(), &path, SNAPSHOT_MAGIC, SNAPSHOT_VERSION)
                .unwrap()
                .unwrap();
            // (version, opens, graph slots kept)
            for (version, opens, graph) in [
                (SNAPSHOT_VERSION_SERIAL, true, if kept { n } else { 0 }),
                (1, false, 0),
            ] {
                write_snapshot(
                    backend.as_ref(),
                    &path,
                    SNAPSHOT_MAGIC,
                    version,
                    snap.applied_lsn,
                    snap.body.as_slice(),
                )
                .unwrap();
                let got = VectorSpace::open_persisted(backend.as_ref(), &dir).unwrap();
                assert_eq!(got.is_some(), opens, "{n} slots, version {version}");
                if let Some((header, g, file)) = got {
                    assert_eq!(g.len(), graph, "{n} slots, version {version}");
                    assert_eq!(file.len(), n as usize);
                    assert_eq!(header.rows_synced, u64::from(n));
                    assert_eq!(g.params(), HnswParams::default());
                }
            }
        }
    }

    /// A graph walk over int8 codes returns what an f32 walk of the same
    /// graph returns, nearly: its results carry full-precision distances
    /// in order, pass the filter, and find most of the exact top 10.
    #[test]
    fn an_int8_walk_reranks_in_full_precision_and_finds_the_same_neighbours() {
        let dim = 32;
        let mut spaces = VectorSpaces::open(
            Arc::new(MemBackend::new()),
            Path::new("/v"),
            HnswParams {
                ef_construction: 64,
                ..HnswParams::default()
            },
            Metric::Cosine,
        )
        .unwrap();
        spaces.set_graph_precision(GraphPrecision::Int8);
        // whole batches, so that every slot is in the graph
        let n_vec = crate::vector::hnsw::SERIAL_UNTIL + 8 * crate::vector::hnsw::BATCH;
        for i in 0..n_vec {
            spaces
                .push("t", "m", false, i * 2, &vector(i, dim))
                .unwrap();
        }
        spaces.index_pending(usize::MAX, 1).unwrap();
        let space = spaces.get("t", "m").unwrap();
        assert!(space.walks_codes(n_vec));
        let odd_slots = |idx: Idx| (idx / 2) % 2 == 1;
        let allowed: RoaringBitmap = space.members.iter().filter(|&i| odd_slots(i)).collect();
        let (mut found, mut wanted) = (0usize, 0usize);
        for qi in 0..40u32 {
            let q = normalized(Metric::Cosine, &vector(50_000 + qi * 7, dim));
            for filtered in [false, true] {
                let allow: Option<&dyn Fn(Idx) -> bool> =
                    if filtered { Some(&odd_slots) } else { None };
                let set = if filtered { &allowed } else { &space.members };
                let mut stats = SearchStats::default();
                let (got, indexed) = space.graph_search(
                    &q,
                    10,
                    64,
                    allow,
                    &mut SearchScratch::default(),
                    &mut stats,
                );
                assert_eq!(indexed, n_vec);
                assert_eq!(got.len(), 10);
                let exact = space.exact(&q, got.iter().map(|g| g.0), &mut SearchStats::default());
                assert_eq!(got, exact, "full-precision distances, query {qi}");
                assert!(got.windows(2).all(|w| (w[0].1, w[0].0) <= (w[1].1, w[1].0)));
                assert!(
                    got.iter().all(|g| set.contains(g.0)),
                    "every result passes the filter"
                );
                let truth = reference(space, &q, set, 10);
                found += got
                    .iter()
                    .filter(|g| truth.iter().any(|t| t.0 == g.0))
                    .count();
                wanted += truth.len();
            }
        }
        let recall = found as f64 / wanted as f64;
        assert!(recall >= 0.9, "recall@10 of the int8 walk: {recall}");
    }

    #[test]
    fn the_prefiltered_scan_is_deterministic_and_exact_when_it_keeps_all() {
        let dim = 64;
        let mut spaces = cosine_spaces();
        for i in 0..2000u32 {
            spaces.push("t", "m", false, i, &vector(i, dim)).unwrap();
        }
        let space = spaces.get("t", "m").unwrap();
        let set = space.members.clone();
        let mut found_any = 0;
        for qi in 0..10u32 {
            let q = normalized(Metric::Cosine, &vector(50_000 + qi, dim));
            let want = reference(space, &q, &set, 10);
            let all = space.exact_top(&q, &set, 10, Some(5000), &mut SearchStats::default());
            let mut all_sorted = all.clone();
            all_sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
            all_sorted.truncate(10);
            assert_eq!(all_sorted, want, "keeping every vector is the exact scan");
            let a = space.exact_top(&q, &set, 10, Some(200), &mut SearchStats::default());
            let b = space.exact_top(&q, &set, 10, Some(200), &mut SearchStats::default());
            assert_eq!(a, b, "same query, same answer");
            for (idx, d) in &a {
                assert!(set.contains(*idx));
                let exact = distance(Metric::Dot, &q, space.vector_of(*idx).unwrap());
                assert_eq!(*d, exact, "kept vectors carry exact distances");
            }
            found_any += a.iter().filter(|x| want.contains(x)).count();
        }
        assert!(found_any > 0, "the prefilter finds some true neighbours");
    }
}
