//! Vector spaces: one per model id, each a memory-mapped vector file, the
//! slot <-> record maps, and an HNSW graph over the slots indexed so far.
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

use super::distance::{Metric, distance};
use super::hnsw::{Hnsw, HnswParams, Neighbor, SearchScratch, SearchStats, Vectors};
use crate::error::{EngineError, Result};
use crate::id::RecordId;

const SNAPSHOT_MAGIC: [u8; 8] = *b"ENGRHNSW";
const SNAPSHOT_VERSION: u32 = 1;

/// Dense record index (see `state`).
pub type Idx = u32;

/// What a space persists next to its graph, to check it still matches the log.
#[derive(Clone, Debug, PartialEq)]
struct SpaceHeader {
    model: String,
    dim: usize,
    metric: Metric,
    derived: bool,
    rows_synced: u64,
    last_row_record: [u8; 16],
}

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
    pub slot_to_idx: Vec<Idx>,
    /// record index -> slot (u32::MAX: none), grown on demand.
    idx_to_slot: Vec<u32>,
    /// Records with a vector here.
    pub members: RoaringBitmap,
    /// The graph (its own lock: the indexer inserts while readers search).
    pub hnsw: Arc<RwLock<Hnsw>>,
    /// Rows known durable (written before the last snapshot).
    rows_synced: u64,
    /// Record id of the last durable row, as persisted.
    last_row_record: [u8; 16],
}

impl std::fmt::Debug for VectorSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorSpace")
            .field("model", &self.model)
            .field("dim", &self.dim)
            .field("rows", &self.file.len())
            .finish()
    }
}

/// Directory of a space: readable model prefix, metric, dimension and a
/// hash of the model id, so two spaces never share files (a changed metric
/// or dimension gets a new directory).
fn space_dir_name(model: &str, metric: Metric, dim: usize) -> String {
    let h = crate::canonical::sha256_hex(model.as_bytes());
    let readable: String = model
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(40)
        .collect();
    format!("{readable}-{}-{dim}-{}", metric.name(), &h[..12])
}

/// Normalises a vector for a cosine space (unit length).
pub fn normalized(metric: Metric, v: &[f32]) -> Vec<f32> {
    if metric != Metric::Cosine {
        return v.to_vec();
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n == 0.0 {
        return v.to_vec();
    }
    v.iter().map(|x| x / n).collect()
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
        let snap = match read_snapshot(backend, &snap_path, SNAPSHOT_MAGIC, SNAPSHOT_VERSION) {
            Ok(Some(s)) => s,
            Ok(None) | Err(_) => return Ok(None),
        };
        let body = snap.body.as_slice();
        let Some((header, graph_bytes)) = decode_header(body) else {
            return Ok(None);
        };
        let Ok(hnsw) = Hnsw::read_from(graph_bytes) else {
            return Ok(None);
        };
        let Ok(mut file) = VectorFile::open(backend, &dir.join("vectors.f32")) else {
            return Ok(None);
        };
        if (file.len() as u64) < header.rows_synced
            || file.dim() != header.dim
            || u64::from(hnsw.len()) > header.rows_synced
        {
            return Ok(None);
        }
        file.truncate(header.rows_synced as usize)?;
        Ok(Some((header, hnsw, file)))
    }

    /// Creates an empty space (truncating any old files).
    fn create(
        backend: &dyn Backend,
        root: &Path,
        model: &str,
        dim: usize,
        metric: Metric,
        derived: bool,
        params: HnswParams,
    ) -> Result<VectorSpace> {
        let dir = root.join(space_dir_name(model, metric, dim));
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
            model: model.to_string(),
            dim,
            metric,
            derived,
            dir,
            file,
            slot_to_idx: Vec::new(),
            idx_to_slot: Vec::new(),
            members: RoaringBitmap::new(),
            hnsw: Arc::new(RwLock::new(Hnsw::new(params, internal))),
            rows_synced: 0,
            last_row_record: [0; 16],
        })
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.slot_to_idx.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.slot_to_idx.is_empty()
    }

    /// Slots not yet in the graph.
    pub fn pending(&self) -> usize {
        self.len() - self.hnsw.read().len() as usize
    }

    /// The vectors, for search.
    pub fn vectors(&self) -> SpaceVectors<'_> {
        let (mapped, tail) = self.file.flat();
        SpaceVectors {
            mapped,
            tail,
            mapped_rows: mapped.len() / self.dim,
            dim: self.dim,
            len: self.slot_to_idx.len() as u32,
        }
    }

    /// Slot of a record.
    pub fn slot_of(&self, idx: Idx) -> Option<u32> {
        match self.idx_to_slot.get(idx as usize) {
            Some(&s) if s != u32::MAX => Some(s),
            _ => None,
        }
    }

    /// The stored (normalised) vector of a record.
    pub fn vector_of(&self, idx: Idx) -> Option<&[f32]> {
        self.slot_of(idx).map(|s| self.file.get(s as usize))
    }

    fn assign(&mut self, idx: Idx) -> u32 {
        let slot = self.slot_to_idx.len() as u32;
        self.slot_to_idx.push(idx);
        if self.idx_to_slot.len() <= idx as usize {
            self.idx_to_slot.resize(idx as usize + 1, u32::MAX);
        }
        self.idx_to_slot[idx as usize] = slot;
        self.members.insert(idx);
        slot
    }

    /// Appends a vector for record `idx` (already validated).
    pub fn push(&mut self, idx: Idx, vector: &[f32]) -> Result<()> {
        let slot = self.assign(idx);
        if (slot as usize) < self.file.len() {
            return Ok(()); // the row survived from before (replay)
        }
        let v = normalized(self.metric, vector);
        self.file.push(&v)?;
        Ok(())
    }

    /// Moves rows appended since the last mapping into the mapping (so
    /// reads see one flat slice).
    pub fn remap(&mut self) -> Result<()> {
        if self.file.tail_rows() > 0 {
            self.file.remap()?;
        }
        Ok(())
    }

    /// Inserts up to `max` pending slots into the graph. Returns how many.
    pub fn index_pending(&self, max: usize) -> Result<usize> {
        let mut done = 0;
        while done < max {
            let mut g = self.hnsw.write();
            let next = g.len();
            if next as usize >= self.slot_to_idx.len() {
                break;
            }
            g.insert(next, &self.vectors())
                .map_err(|e| EngineError::Corrupt {
                    what: format!("vector index of '{}'", self.model),
                    detail: e.to_string(),
                })?;
            done += 1;
        }
        Ok(done)
    }

    /// Exact distances from `query` to the given records (which must be members).
    pub fn exact(
        &self,
        query: &[f32],
        idxs: impl Iterator<Item = Idx>,
        stats: &mut SearchStats,
    ) -> Vec<(Idx, f32)> {
        let m = self.internal_metric();
        let (mapped, tail) = self.file.flat();
        let mapped_rows = mapped.len() / self.dim;
        let d = self.dim;
        let mut out = Vec::new();
        for idx in idxs {
            let Some(slot) = self.slot_of(idx) else {
                continue;
            };
            let s = slot as usize;
            let v = if s < mapped_rows {
                &mapped[s * d..(s + 1) * d]
            } else {
                let t = s - mapped_rows;
                &tail[t * d..(t + 1) * d]
            };
            stats.distance_computations += 1;
            out.push((idx, distance(m, query, v)));
        }
        out
    }

    /// Graph search restricted by `allow` (a record-index predicate).
    pub fn graph_search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        allow: Option<&dyn Fn(Idx) -> bool>,
        scratch: &mut SearchScratch,
        stats: &mut SearchStats,
    ) -> (Vec<(Idx, f32)>, u32) {
        let g = self.hnsw.read();
        let indexed = g.len();
        let vecs = self.vectors();
        let map = &self.slot_to_idx;
        let res: Vec<Neighbor> = match allow {
            None => g.search(
                query,
                k,
                ef,
                &vecs,
                None::<&fn(u32) -> bool>,
                scratch,
                stats,
            ),
            Some(f) => {
                let pred = |slot: u32| f(map[slot as usize]);
                g.search(query, k, ef, &vecs, Some(&pred), scratch, stats)
            }
        };
        (
            res.into_iter()
                .map(|n| (map[n.slot as usize], n.distance))
                .collect(),
            indexed,
        )
    }

    /// The metric used for query vectors (cosine queries are normalised).
    pub fn prepare_query(&self, q: &[f32]) -> Vec<f32> {
        normalized(self.metric, q)
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

fn encode_header(h: &SpaceHeader) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(h.model.len() as u32).to_le_bytes());
    out.extend_from_slice(h.model.as_bytes());
    out.extend_from_slice(&(h.dim as u32).to_le_bytes());
    out.push(h.metric.code());
    out.push(h.derived as u8);
    out.extend_from_slice(&h.rows_synced.to_le_bytes());
    out.extend_from_slice(&h.last_row_record);
    out
}

fn decode_header(b: &[u8]) -> Option<(SpaceHeader, &[u8])> {
    let n = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
    let model = std::str::from_utf8(b.get(4..4 + n)?).ok()?.to_string();
    let mut p = 4 + n;
    let dim = u32::from_le_bytes(b.get(p..p + 4)?.try_into().ok()?) as usize;
    p += 4;
    let metric = Metric::from_code(*b.get(p)?)?;
    let derived = *b.get(p + 1)? != 0;
    p += 2;
    let rows_synced = u64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?);
    p += 8;
    let last_row_record: [u8; 16] = b.get(p..p + 16)?.try_into().ok()?;
    p += 16;
    Some((
        SpaceHeader {
            model,
            dim,
            metric,
            derived,
            rows_synced,
            last_row_record,
        },
        &b[p..],
    ))
}

/// All vector spaces of a store.
pub struct VectorSpaces {
    root: PathBuf,
    backend: Arc<dyn Backend>,
    params: HnswParams,
    metric: Metric,
    spaces: Vec<VectorSpace>,
    /// Persisted spaces found at open, waiting to be matched by replay.
    persisted: Vec<(SpaceHeader, Hnsw, VectorFile, PathBuf)>,
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
            if let Some((h, g, f)) = VectorSpace::open_persisted(backend.as_ref(), &dir)? {
                persisted.push((h, g, f, dir));
            }
        }
        Ok(VectorSpaces {
            root: root.to_path_buf(),
            backend,
            params,
            metric,
            spaces: Vec::new(),
            persisted,
        })
    }

    /// The space of `model`.
    pub fn get(&self, model: &str) -> Option<&VectorSpace> {
        self.spaces.iter().find(|s| s.model == model)
    }

    /// All spaces.
    pub fn all(&self) -> &[VectorSpace] {
        &self.spaces
    }

    /// Model ids.
    pub fn models(&self) -> Vec<String> {
        self.spaces.iter().map(|s| s.model.clone()).collect()
    }

    /// Dimension of `model`'s space, if it exists.
    pub fn dim_of(&self, model: &str) -> Option<usize> {
        self.get(model).map(|s| s.dim)
    }

    /// Appends a vector, creating the space on first use.
    pub fn push(&mut self, model: &str, derived: bool, idx: Idx, vector: &[f32]) -> Result<()> {
        if let Some(s) = self.spaces.iter_mut().find(|s| s.model == model) {
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
            h.model == model && h.dim == vector.len() && h.metric == self.metric
        }) {
            Some(i) => {
                let (h, g, f, dir) = self.persisted.swap_remove(i);
                VectorSpace {
                    model: h.model.clone(),
                    dim: h.dim,
                    metric: h.metric,
                    derived,
                    dir,
                    file: f,
                    slot_to_idx: Vec::new(),
                    idx_to_slot: Vec::new(),
                    members: RoaringBitmap::new(),
                    hnsw: Arc::new(RwLock::new(g)),
                    rows_synced: h.rows_synced,
                    last_row_record: h.last_row_record,
                }
            }
            None => VectorSpace::create(
                self.backend.as_ref(),
                &self.root,
                model,
                vector.len(),
                self.metric,
                derived,
                self.params,
            )?,
        };
        self.spaces.push(space);
        self.spaces
            .last_mut()
            .expect("just pushed")
            .push(idx, vector)
    }

    /// Called after replay. Persisted spaces no vector of the log matched are
    /// removed. A restored space whose file or graph does not match the log
    /// (more rows than the log produced, or a different record at the last
    /// persisted row) must be rebuilt by the caller: its model id is returned.
    pub fn finish_replay(&mut self, id_of: &dyn Fn(Idx) -> RecordId) -> Result<Vec<String>> {
        for (_, _, _, dir) in self.persisted.drain(..) {
            self.backend
                .remove_dir_all(&dir)
                .map_err(|e| engram_storage::StorageError::io(&dir, e))?;
        }
        let mut stale = Vec::new();
        for s in &self.spaces {
            let too_many = s.file.len() > s.slot_to_idx.len()
                || s.hnsw.read().len() as usize > s.slot_to_idx.len();
            let mismatch = s.rows_synced > 0
                && s.slot_to_idx
                    .get(s.rows_synced as usize - 1)
                    .is_none_or(|&idx| id_of(idx).to_bytes() != s.last_row_record);
            if too_many || mismatch {
                stale.push(s.model.clone());
            }
        }
        Ok(stale)
    }

    /// Drops a space's files and state (it will be recreated by pushes).
    pub fn reset(&mut self, model: &str) -> Result<()> {
        if let Some(i) = self.spaces.iter().position(|s| s.model == model) {
            let s = self.spaces.remove(i);
            let dir = s.dir.clone();
            drop(s);
            self.backend
                .remove_dir_all(&dir)
                .map_err(|e| engram_storage::StorageError::io(&dir, e))?;
        }
        Ok(())
    }

    /// Indexes pending slots of every space, up to `max` in total.
    pub fn index_pending(&self, max: usize) -> Result<usize> {
        let mut done = 0;
        for s in &self.spaces {
            if done >= max {
                break;
            }
            done += s.index_pending(max - done)?;
        }
        Ok(done)
    }

    /// Folds appended rows of every space into its memory map.
    pub fn remap_all(&mut self) -> Result<()> {
        for s in &mut self.spaces {
            s.remap()?;
        }
        Ok(())
    }

    /// Total pending slots.
    pub fn pending(&self) -> usize {
        self.spaces.iter().map(|s| s.pending()).sum()
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
