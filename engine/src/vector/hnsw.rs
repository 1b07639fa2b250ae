//! Hierarchical Navigable Small World graph (Malkov & Yashunin, 2016) over
//! vectors addressed by dense `u32` slots.
//!
//! Owns: the graph only — node levels, neighbour lists, entry point — its
//! construction (heuristic neighbour selection, bidirectional links with
//! pruning), filtered k-NN search, and its versioned binary encoding.
//!
//! Must never: own or copy the vectors (they are borrowed through
//! [`Vectors`] on every call), allocate per visited node during search,
//! panic on caller input (wrong slot, wrong dimension, garbled bytes), or
//! depend on global state: the level of a slot is a pure function of
//! `(seed, slot)`, so equal inputs give byte-identical encodings.
//!
//! Layout. Level 0 is one flat `Vec<u32>` with a fixed stride of
//! `1 + 2M` words per slot: `[count, n_0 .. n_{2M-1}]`. Slots with a level
//! above 0 (a fraction `1/M` of them) own `level` consecutive blocks of
//! `1 + M` words in a second flat array, located through `upper_at`. At
//! M = 16 that is ~142 bytes per vector.
//!
//! Construction follows hnswlib (heuristic selection, pruned back-links)
//! except on level 0, where a new node takes up to 2M diverse links and
//! lists are topped up with the closest pruned candidates (the paper's
//! `keepPrunedConnections`); see [`Hnsw::insert`] for the measured effect.
//!
//! Search cost is dominated by random reads of whole vectors. The search
//! loop therefore prefetches the next candidate's neighbour list and the
//! vectors a few neighbours ahead. Callers should keep their vectors on
//! 2 MiB pages (e.g. `madvise(MADV_HUGEPAGE)`): measured +20-25% QPS on
//! 20k x 384 vectors, from fewer TLB misses.
//!
//! Concurrency. [`Hnsw::search`] takes `&self` and may run on many threads
//! at once, each with its own [`SearchScratch`]; [`Hnsw::insert`] takes
//! `&mut self` and is serialised by the caller's write lock.

use super::distance::{Metric, distance};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

/// Read access to the vectors the graph was built over, by slot.
pub trait Vectors {
    /// Number of `f32` components per vector.
    fn dim(&self) -> usize;
    /// Number of slots available (`get` is valid for `0..len`).
    fn len(&self) -> u32;
    /// The vector stored at `slot`; `dim()` components long.
    fn get(&self, slot: u32) -> &[f32];
    /// True if there are no slots.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Row-major vectors in one contiguous slice: row `i` is
/// `data[i * dim..(i + 1) * dim]`.
#[derive(Clone, Copy, Debug)]
pub struct FlatVectors<'a> {
    pub data: &'a [f32],
    pub dim: usize,
}

impl Vectors for FlatVectors<'_> {
    #[inline]
    fn dim(&self) -> usize {
        self.dim
    }
    #[inline]
    fn len(&self) -> u32 {
        match self.dim {
            0 => 0,
            d => u32::try_from(self.data.len() / d).unwrap_or(u32::MAX),
        }
    }
    #[inline]
    fn get(&self, slot: u32) -> &[f32] {
        let start = slot as usize * self.dim;
        &self.data[start..start + self.dim]
    }
}

/// Build parameters. Part of the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HnswParams {
    /// Links per node on levels >= 1; level 0 keeps up to `2 * m`.
    /// Clamped to `[2, MAX_M]` by [`Hnsw::new`].
    pub m: usize,
    /// Beam width while inserting. Clamped to at least `m`.
    pub ef_construction: usize,
    /// Seed of the per-slot level hash.
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 16,
            ef_construction: 200,
            seed: 0x5eed,
        }
    }
}

/// One search hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbor {
    pub slot: u32,
    /// Distance to the query under the index metric (lower is closer).
    pub distance: f32,
}

/// Work counters of one or more searches; [`Hnsw::search`] adds to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Vector distance evaluations.
    pub distance_computations: u64,
    /// Nodes expanded (their neighbour lists scanned).
    pub nodes_visited: u64,
    /// Nodes close enough to enter the results but rejected by the filter
    /// (they still route the search).
    pub filtered_out: u64,
}

/// Errors of [`Hnsw::insert`] and [`Hnsw::read_from`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HnswError {
    /// Slots must be inserted densely, in order: `slot == len()`.
    SlotOutOfOrder { expected: u32, got: u32 },
    /// The vector length differs from the index dimension (fixed by the
    /// first insert).
    DimensionMismatch { expected: usize, got: usize },
    /// `vectors` has no row for the slot being inserted.
    MissingVector { slot: u32, available: u32 },
    /// The index already holds `u32::MAX` slots (that value is reserved).
    Full,
    /// The encoding was written by an unknown format version.
    UnsupportedVersion { version: u16 },
    /// The encoding is truncated or inconsistent at byte `offset`.
    Format { offset: usize, reason: &'static str },
}

impl fmt::Display for HnswError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HnswError::SlotOutOfOrder { expected, got } => {
                write!(
                    f,
                    "hnsw: slot {got} inserted out of order, expected {expected}"
                )
            }
            HnswError::DimensionMismatch { expected, got } => {
                write!(f, "hnsw: vector has dimension {got}, index has {expected}")
            }
            HnswError::MissingVector { slot, available } => {
                write!(f, "hnsw: no vector for slot {slot} ({available} available)")
            }
            HnswError::Full => write!(f, "hnsw: index is full"),
            HnswError::UnsupportedVersion { version } => {
                write!(f, "hnsw: unsupported encoding version {version}")
            }
            HnswError::Format { offset, reason } => {
                write!(f, "hnsw: malformed encoding at byte {offset}: {reason}")
            }
        }
    }
}

impl std::error::Error for HnswError {}

/// Pass as `filter` to search without one (saves a type annotation).
pub const NO_FILTER: Option<&fn(u32) -> bool> = None;

/// Largest accepted `m`.
pub const MAX_M: usize = 256;
/// Highest level a node may get.
const MAX_LEVEL: u8 = 31;
/// "No slot" sentinel (empty index entry point, no upper lists).
const NONE: u32 = u32::MAX;
const MAGIC: &[u8; 8] = b"ENGRHNSW";
const VERSION: u16 = 1;
/// Neighbour vectors prefetched ahead of the one being compared.
const PREFETCH_AHEAD: usize = 2;

// ---------------------------------------------------------------------------
// Heap keys. A (distance, slot) pair packs into one u64 whose integer order is
// distance order with ties broken by slot, so heaps compare plain integers and
// every ordering decision in the index is total and deterministic.

#[inline(always)]
fn key(d: f32, slot: u32) -> u64 {
    let b = d.to_bits();
    // Flip negatives entirely and set the sign bit of positives: the result
    // orders like the float (-0.0 sorts just below +0.0; NaN sorts last).
    let ord = if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    };
    (u64::from(ord) << 32) | u64::from(slot)
}

#[inline(always)]
#[allow(clippy::cast_possible_truncation)] // the low 32 bits of a key hold the slot
fn key_slot(k: u64) -> u32 {
    k as u32
}

#[inline(always)]
fn key_dist(k: u64) -> f32 {
    let ord = (k >> 32) as u32;
    f32::from_bits(if ord & 0x8000_0000 != 0 {
        ord & 0x7fff_ffff
    } else {
        !ord
    })
}

/// Hints the CPU to pull every cache line of `v` into L1. No effect on
/// program semantics; a no-op off x86_64. Vectors are fetched from memory
/// at random, so overlapping these misses with the distance computation of
/// the previous neighbours is the largest single win in search.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch<T>(v: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = v.as_ptr().cast::<i8>();
        for offset in (0..std::mem::size_of_val(v)).step_by(64) {
            // SAFETY: a prefetch never faults and never changes memory; the
            // address lies inside the live slice `v`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// splitmix64 finaliser: a fast, well-mixed 64-bit hash.
#[inline]
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Reusable per-thread search buffers. One per searching thread; reusing it
/// makes a search allocation-free apart from the returned `Vec`.
#[derive(Clone, Debug, Default)]
pub struct SearchScratch {
    /// `visited[slot] == epoch` marks a slot seen by the current search.
    visited: Vec<u16>,
    epoch: u16,
    /// Frontier, closest first.
    candidates: BinaryHeap<Reverse<u64>>,
    /// Best `ef` admitted results, worst on top.
    results: BinaryHeap<u64>,
    /// Insert-only buffers: sorted layer results, selected neighbours.
    pool: Vec<u64>,
    selected: Vec<u32>,
    /// Unvisited neighbours of the node being expanded.
    batch: Vec<u32>,
}

impl SearchScratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts a new traversal over a graph of `n` slots: O(1) except when
    /// the visited array grows or the epoch counter wraps.
    fn begin(&mut self, n: usize) {
        if self.visited.len() < n {
            self.visited.resize(n, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.visited.fill(0);
            self.epoch = 1;
        }
        self.candidates.clear();
        self.results.clear();
    }

    /// Marks `slot` visited; returns false if it already was.
    #[inline(always)]
    fn visit(&mut self, slot: u32) -> bool {
        let v = &mut self.visited[slot as usize];
        let fresh = *v != self.epoch;
        *v = self.epoch;
        fresh
    }

    /// Moves the current results into `pool`, sorted closest first.
    fn drain_sorted(&mut self) {
        self.pool.clear();
        self.pool.extend(self.results.drain());
        self.pool.sort_unstable();
    }
}

/// The HNSW graph. See the module docs for layout and thread model.
#[derive(Clone, Debug)]
pub struct Hnsw {
    params: HnswParams,
    metric: Metric,
    /// Vector dimension; 0 until the first insert.
    dim: u32,
    /// Entry point (a node of level `max_level`), `NONE` when empty.
    entry: u32,
    max_level: u8,
    /// Level of each slot.
    levels: Vec<u8>,
    /// Level-0 lists, `stride0()` words per slot: count, then neighbours.
    level0: Vec<u32>,
    /// Per slot: start in `upper` of its level-1 block, `NONE` if level 0.
    upper_at: Vec<u32>,
    /// Levels >= 1: `level` blocks of `1 + m` words per owning slot.
    upper: Vec<u32>,
    /// Insert-time scratch (not part of the encoding).
    build: SearchScratch,
}

impl Hnsw {
    /// Empty index. `params.m` is clamped to `[2, MAX_M]` and
    /// `ef_construction` to at least `m`; [`Hnsw::params`] reports the
    /// effective values.
    pub fn new(params: HnswParams, metric: Metric) -> Self {
        let m = params.m.clamp(2, MAX_M);
        let params = HnswParams {
            m,
            // stored in 32 bits
            ef_construction: params.ef_construction.max(m).min(u32::MAX as usize),
            seed: params.seed,
        };
        Hnsw {
            params,
            metric,
            dim: 0,
            entry: NONE,
            max_level: 0,
            levels: Vec::new(),
            level0: Vec::new(),
            upper_at: Vec::new(),
            upper: Vec::new(),
            build: SearchScratch::new(),
        }
    }

    pub fn params(&self) -> HnswParams {
        self.params
    }
    pub fn metric(&self) -> Metric {
        self.metric
    }
    /// Vector dimension, 0 while empty.
    pub fn dim(&self) -> usize {
        self.dim as usize
    }
    pub fn len(&self) -> u32 {
        u32::try_from(self.levels.len()).expect("insert refuses slots beyond u32::MAX - 1")
    }
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Heap bytes held by the graph structure (capacities, not lengths),
    /// excluding the vectors and the insert scratch.
    pub fn graph_bytes(&self) -> usize {
        self.levels.capacity()
            + 4 * (self.level0.capacity() + self.upper_at.capacity() + self.upper.capacity())
    }

    /// Reserves room for `additional` more slots (level-0 part).
    pub fn reserve(&mut self, additional: u32) {
        let n = additional as usize;
        self.levels.reserve_exact(n);
        self.upper_at.reserve_exact(n);
        self.level0.reserve_exact(n * self.stride0());
    }

    /// Releases spare capacity.
    pub fn shrink_to_fit(&mut self) {
        self.levels.shrink_to_fit();
        self.upper_at.shrink_to_fit();
        self.level0.shrink_to_fit();
        self.upper.shrink_to_fit();
    }

    // ---- layout helpers ---------------------------------------------------

    #[inline(always)]
    fn m0(&self) -> usize {
        2 * self.params.m
    }
    #[inline(always)]
    fn stride0(&self) -> usize {
        1 + self.m0()
    }
    #[inline(always)]
    fn stride_upper(&self) -> usize {
        1 + self.params.m
    }

    /// (is level 0, start word of the list) of `slot`'s list at `level`.
    #[inline(always)]
    fn list_start(&self, slot: u32, level: u8) -> (bool, usize) {
        if level == 0 {
            (true, slot as usize * self.stride0())
        } else {
            let base = self.upper_at[slot as usize] as usize;
            (false, base + (level as usize - 1) * self.stride_upper())
        }
    }

    /// Neighbours of `slot` at `level` (`level <= levels[slot]`).
    #[inline(always)]
    fn links(&self, slot: u32, level: u8) -> &[u32] {
        let (zero, at) = self.list_start(slot, level);
        let arr = if zero { &self.level0 } else { &self.upper };
        let n = arr[at] as usize;
        &arr[at + 1..at + 1 + n]
    }

    #[inline(always)]
    fn prefetch_links(&self, slot: u32, level: u8) {
        let (zero, at) = self.list_start(slot, level);
        let arr = if zero { &self.level0 } else { &self.upper };
        let len = if zero {
            self.stride0()
        } else {
            self.stride_upper()
        };
        if let Some(list) = arr.get(at..at + len) {
            prefetch(list);
        }
    }

    /// Replaces the list of `slot` at `level` (caller respects capacity).
    fn set_links(&mut self, slot: u32, level: u8, links: &[u32]) {
        let (zero, at) = self.list_start(slot, level);
        let arr = if zero {
            &mut self.level0
        } else {
            &mut self.upper
        };
        arr[at] = u32::try_from(links.len()).expect("at most 2 * MAX_M links");
        arr[at + 1..at + 1 + links.len()].copy_from_slice(links);
    }

    /// Level of `slot`: geometric with P(level >= l) = m^-l, drawn from
    /// splitmix64 hashes of (seed, slot) only. Integer arithmetic, so it is
    /// identical on every platform.
    fn level_for(&self, slot: u32) -> u8 {
        let m = self.params.m as u64;
        let mut h = splitmix64(self.params.seed ^ splitmix64(u64::from(slot)));
        let mut level = 0;
        while level < MAX_LEVEL && h.is_multiple_of(m) {
            level += 1;
            h = splitmix64(h);
        }
        level
    }

    /// Appends `words` zeroed words to `v`, growing capacity by at most a
    /// quarter at a time so spare capacity stays bounded (it is counted by
    /// `graph_bytes`).
    fn grow<T: Copy + Default>(v: &mut Vec<T>, words: usize) {
        if v.capacity() - v.len() < words {
            v.reserve_exact((v.len() / 4).max(words).max(64));
        }
        v.resize(v.len() + words, T::default());
    }

    // ---- insert -----------------------------------------------------------

    /// Inserts the next slot: `slot` must equal `len()` and `vectors` must
    /// hold it. On error the index is unchanged.
    pub fn insert<V: Vectors>(&mut self, slot: u32, vectors: &V) -> Result<(), HnswError> {
        if slot != self.len() {
            return Err(HnswError::SlotOutOfOrder {
                expected: self.len(),
                got: slot,
            });
        }
        if slot == NONE {
            return Err(HnswError::Full);
        }
        if slot >= vectors.len() {
            return Err(HnswError::MissingVector {
                slot,
                available: vectors.len(),
            });
        }
        let q = vectors.get(slot);
        let expected = if self.is_empty() {
            vectors.dim()
        } else {
            self.dim()
        };
        for got in [vectors.dim(), q.len()] {
            if got != expected || got == 0 || got > u32::MAX as usize {
                return Err(HnswError::DimensionMismatch { expected, got });
            }
        }
        self.dim = u32::try_from(expected).expect("checked above");

        // Allocate the node's lists.
        let level = self.level_for(slot);
        let (stride0, stride_upper) = (self.stride0(), self.stride_upper());
        Self::grow(&mut self.levels, 1);
        *self.levels.last_mut().expect("just grown") = level;
        Self::grow(&mut self.level0, stride0);
        Self::grow(&mut self.upper_at, 1);
        let at = if level > 0 {
            let at = u32::try_from(self.upper.len()).map_err(|_| HnswError::Full)?;
            Self::grow(&mut self.upper, level as usize * stride_upper);
            at
        } else {
            NONE
        };
        *self.upper_at.last_mut().expect("just grown") = at;

        if self.entry == NONE {
            self.entry = slot;
            self.max_level = level;
            return Ok(());
        }

        let mut scratch = std::mem::take(&mut self.build);
        let mut stats = SearchStats::default();
        let mut cur = self.entry;
        let mut cur_d = distance(self.metric, q, vectors.get(cur));
        scratch.begin(self.levels.len());
        scratch.visit(cur);
        for lc in (level + 1..=self.max_level).rev() {
            (cur, cur_d) = self.greedy(q, cur, cur_d, lc, vectors, &mut scratch, &mut stats);
        }
        let ef = self.params.ef_construction;
        for lc in (0..=level.min(self.max_level)).rev() {
            self.search_layer(
                q,
                cur,
                cur_d,
                ef,
                lc,
                vectors,
                NO_FILTER,
                &mut scratch,
                &mut stats,
            );
            scratch.drain_sorted();
            let closest = scratch.pool[0];
            (cur, cur_d) = (key_slot(closest), key_dist(closest));
            // Level 0 departs from hnswlib (M diverse links on every level,
            // no top-up) in two ways: like FAISS, a new node may take up to
            // 2M diverse links there, and its list is then topped up to its
            // full 2M capacity (fixed stride: no memory cost). Measured on
            // 20k x 384 text embeddings, recall@10 at ef 32 / 64 / 256 went
            // from 0.938 / 0.976 / 0.998 (hnswlib's rule, 670 / 1131 / 3340
            // distances per query) to 0.955 / 0.985 / 0.999 (746 / 1262 /
            // 3703): fewer distances at equal recall, for ~1.3x build time.
            let mut selected = std::mem::take(&mut scratch.selected);
            let (m, fill) = if lc == 0 {
                (self.m0(), self.m0())
            } else {
                (self.params.m, 0)
            };
            self.select_neighbors(&scratch.pool, m, fill, vectors, &mut selected);
            self.set_links(slot, lc, &selected);
            for &n in &selected {
                self.link_back(n, slot, lc, vectors, &mut scratch);
            }
            scratch.selected = selected;
        }
        if level > self.max_level {
            self.entry = slot;
            self.max_level = level;
        }
        self.build = scratch;
        Ok(())
    }

    /// Adds `new` to `node`'s list at `level`; when the list is full, keeps
    /// the heuristic selection of old links plus `new`.
    fn link_back<V: Vectors>(
        &mut self,
        node: u32,
        new: u32,
        level: u8,
        vectors: &V,
        scratch: &mut SearchScratch,
    ) {
        let cap = if level == 0 { self.m0() } else { self.params.m };
        let (zero, at) = self.list_start(node, level);
        let arr = if zero {
            &mut self.level0
        } else {
            &mut self.upper
        };
        let n = arr[at] as usize;
        if n < cap {
            arr[at + 1 + n] = new;
            arr[at] += 1;
            return;
        }
        let nv = vectors.get(node);
        let mut pool = std::mem::take(&mut scratch.pool);
        pool.clear();
        pool.push(key(distance(self.metric, nv, vectors.get(new)), new));
        let links = self.links(node, level);
        for (i, &e) in links.iter().enumerate() {
            if let Some(&ahead) = links.get(i + PREFETCH_AHEAD) {
                prefetch(vectors.get(ahead));
            }
            pool.push(key(distance(self.metric, nv, vectors.get(e)), e));
        }
        pool.sort_unstable();
        let mut selected = std::mem::take(&mut scratch.selected);
        // A pruned level-0 list is topped up to 3/4 of capacity only: the
        // free quarter absorbs the next back-links without another prune.
        // (Topping up to full capacity gained little recall and made every
        // later back-link prune: 2.2x the build time of no top-up.)
        let fill = if level == 0 { cap - cap / 4 } else { 0 };
        self.select_neighbors(&pool, cap, fill, vectors, &mut selected);
        self.set_links(node, level, &selected);
        scratch.pool = pool;
        scratch.selected = selected;
    }

    /// HNSW heuristic (paper Algorithm 4, hnswlib `getNeighborsByHeuristic2`):
    /// walk `sorted` (closest first) and keep a candidate only if it is
    /// closer to the base point than to every candidate already kept, up to
    /// `m`. This favours links in diverse directions, which keeps the graph
    /// navigable. Then, as the paper's `keepPrunedConnections`, top the list
    /// up to `fill` entries with the closest rejected candidates.
    fn select_neighbors<V: Vectors>(
        &self,
        sorted: &[u64],
        m: usize,
        fill: usize,
        vectors: &V,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        if sorted.len() <= m {
            out.extend(sorted.iter().map(|&k| key_slot(k)));
            return;
        }
        for (i, &k) in sorted.iter().enumerate() {
            if out.len() >= m {
                break;
            }
            if let Some(&ahead) = sorted.get(i + 1) {
                prefetch(vectors.get(key_slot(ahead)));
            }
            let (c, dc) = (key_slot(k), key_dist(k));
            let cv = vectors.get(c);
            let diverse = out
                .iter()
                .all(|&s| distance(self.metric, cv, vectors.get(s)) >= dc);
            if diverse {
                out.push(c);
            }
        }
        let diverse = out.len();
        for &k in sorted {
            if out.len() >= fill {
                break;
            }
            if !out[..diverse].contains(&key_slot(k)) {
                out.push(key_slot(k));
            }
        }
    }

    // ---- search -----------------------------------------------------------

    /// Greedy descent on one upper level: move to the closest neighbour until
    /// no neighbour is closer. Nodes already evaluated since
    /// `scratch.begin()` are skipped: they cannot beat the current best.
    #[allow(clippy::too_many_arguments)]
    fn greedy<V: Vectors>(
        &self,
        q: &[f32],
        mut cur: u32,
        mut cur_d: f32,
        level: u8,
        vectors: &V,
        scratch: &mut SearchScratch,
        stats: &mut SearchStats,
    ) -> (u32, f32) {
        let mut best = key(cur_d, cur);
        loop {
            let before = cur;
            stats.nodes_visited += 1;
            stats.distance_computations +=
                self.scan_neighbors(q, before, level, vectors, scratch, |_, n, d| {
                    let k = key(d, n);
                    if k < best {
                        (best, cur, cur_d) = (k, n, d);
                    }
                });
            if cur == before {
                return (cur, cur_d);
            }
        }
    }

    /// Marks every unvisited neighbour of `node` at `level` visited and
    /// passes it with its distance to `q` to `f`; returns how many. The
    /// vectors of the next `PREFETCH_AHEAD` neighbours stay in flight while
    /// each distance is computed, so cache misses overlap with arithmetic.
    #[inline(always)]
    fn scan_neighbors<V: Vectors>(
        &self,
        q: &[f32],
        node: u32,
        level: u8,
        vectors: &V,
        scratch: &mut SearchScratch,
        mut f: impl FnMut(&mut SearchScratch, u32, f32),
    ) -> u64 {
        let mut batch = std::mem::take(&mut scratch.batch);
        batch.clear();
        for &n in self.links(node, level) {
            if scratch.visit(n) {
                batch.push(n);
            }
        }
        for &n in batch.iter().take(PREFETCH_AHEAD) {
            prefetch(vectors.get(n));
        }
        for (i, &n) in batch.iter().enumerate() {
            if let Some(&ahead) = batch.get(i + PREFETCH_AHEAD) {
                prefetch(vectors.get(ahead));
            }
            f(scratch, n, distance(self.metric, q, vectors.get(n)));
        }
        let count = batch.len() as u64;
        scratch.batch = batch;
        count
    }

    /// Beam search of width `ef` on one level, starting at `ep`; leaves the
    /// best `ef` filter-passing nodes in `scratch.results`.
    ///
    /// Every reached node routes (enters the frontier) while it is closer
    /// than the worst admitted result or fewer than `ef` results exist; only
    /// filter-passing nodes become results. With a selective filter the
    /// result set fills slowly, so the search widens on its own, up to the
    /// whole connected graph when fewer than `ef` nodes pass.
    #[allow(clippy::too_many_arguments)]
    fn search_layer<V: Vectors, F: Fn(u32) -> bool>(
        &self,
        q: &[f32],
        ep: u32,
        ep_d: f32,
        ef: usize,
        level: u8,
        vectors: &V,
        filter: Option<&F>,
        scratch: &mut SearchScratch,
        stats: &mut SearchStats,
    ) {
        scratch.begin(self.levels.len());
        let passes = |slot: u32| filter.is_none_or(|f| f(slot));
        let ep_key = key(ep_d, ep);
        scratch.visit(ep);
        scratch.candidates.push(Reverse(ep_key));
        if passes(ep) {
            scratch.results.push(ep_key);
        } else {
            stats.filtered_out += 1;
        }
        let (mut dists, mut expanded, mut rejected) = (0u64, 0u64, 0u64);
        while let Some(Reverse(c)) = scratch.candidates.pop() {
            if scratch.results.len() >= ef && scratch.results.peek().is_some_and(|&w| c > w) {
                break;
            }
            expanded += 1;
            // The next candidate is most likely the current heap top: start
            // loading its neighbour list now.
            if let Some(&Reverse(next)) = scratch.candidates.peek() {
                self.prefetch_links(key_slot(next), level);
            }
            dists += self.scan_neighbors(q, key_slot(c), level, vectors, scratch, |s, n, d| {
                let k = key(d, n);
                let full = s.results.len() >= ef;
                if full && s.results.peek().is_some_and(|&w| k >= w) {
                    return;
                }
                s.candidates.push(Reverse(k));
                if !passes(n) {
                    rejected += 1;
                } else if full {
                    // Replace the worst result in one sift instead of push + pop.
                    if let Some(mut worst) = s.results.peek_mut() {
                        *worst = k;
                    }
                } else {
                    s.results.push(k);
                }
            });
        }
        stats.distance_computations += dists;
        stats.nodes_visited += expanded;
        stats.filtered_out += rejected;
    }

    /// The `k` nearest slots to `query` among those passing `filter` (all if
    /// `None`), closest first, ties by slot. `ef` is the beam width (raised to
    /// `k` if smaller): larger is slower and more accurate.
    ///
    /// The filter is applied inside the traversal: filtered-out nodes still
    /// route the search but are never returned. `ef` counts filter-passing
    /// results, so a filter passing a fraction `s` of slots costs on the
    /// order of `ef / s` distance computations, and the whole reachable
    /// graph when fewer than `ef` slots pass; for small eligible sets
    /// [`Hnsw::exact_search`] is cheaper and exact (measured on 20k vectors:
    /// 1861 eligible slots, exact 1861 distances vs 2718 at ef 16).
    ///
    /// `vectors` must cover every inserted slot. Returns an empty result if
    /// the index is empty, `k` is 0, `query` or `vectors` has the wrong
    /// dimension, or `vectors` is too short.
    #[allow(clippy::too_many_arguments)]
    pub fn search<V: Vectors, F: Fn(u32) -> bool>(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        vectors: &V,
        filter: Option<&F>,
        scratch: &mut SearchScratch,
        stats: &mut SearchStats,
    ) -> Vec<Neighbor> {
        if k == 0
            || self.entry == NONE
            || query.len() != self.dim()
            || vectors.dim() != self.dim()
            || vectors.len() < self.len()
        {
            return Vec::new();
        }
        let mut cur = self.entry;
        let mut cur_d = distance(self.metric, query, vectors.get(cur));
        stats.distance_computations += 1;
        scratch.begin(self.levels.len());
        scratch.visit(cur);
        for lc in (1..=self.max_level).rev() {
            (cur, cur_d) = self.greedy(query, cur, cur_d, lc, vectors, scratch, stats);
        }
        self.search_layer(
            query,
            cur,
            cur_d,
            ef.max(k),
            0,
            vectors,
            filter,
            scratch,
            stats,
        );
        scratch.drain_sorted();
        scratch
            .pool
            .iter()
            .take(k)
            .map(|&k| Neighbor {
                slot: key_slot(k),
                distance: key_dist(k),
            })
            .collect()
    }

    /// Exact k nearest among `slots`, by scanning them: the better plan when
    /// a filter admits few slots (a filtered graph search visits on the
    /// order of `ef / selectivity` nodes). Same distances, ordering and
    /// empty-result rules as [`Hnsw::search`]; slots without a vector are
    /// skipped.
    pub fn exact_search<V: Vectors>(
        &self,
        query: &[f32],
        k: usize,
        vectors: &V,
        slots: impl IntoIterator<Item = u32>,
        stats: &mut SearchStats,
    ) -> Vec<Neighbor> {
        if k == 0 || query.len() != self.dim() || vectors.dim() != self.dim() {
            return Vec::new();
        }
        let available = vectors.len().min(self.len());
        let mut best = BinaryHeap::with_capacity(k + 1);
        let mut slots = slots.into_iter().filter(|&s| s < available).peekable();
        while let Some(s) = slots.next() {
            if let Some(&next) = slots.peek() {
                prefetch(vectors.get(next));
            }
            let kk = key(distance(self.metric, query, vectors.get(s)), s);
            stats.distance_computations += 1;
            if best.len() < k {
                best.push(kk);
            } else if let Some(mut worst) = best.peek_mut().filter(|w| kk < **w) {
                *worst = kk;
            }
        }
        best.into_sorted_vec()
            .into_iter()
            .map(|kk| Neighbor {
                slot: key_slot(kk),
                distance: key_dist(kk),
            })
            .collect()
    }

    // ---- encoding ---------------------------------------------------------

    /// Appends the encoding to `out`. Little-endian:
    /// `magic[8] version:u16 metric:u8 max_level:u8 m:u32 ef_construction:u32
    /// seed:u64 dim:u32 len:u32 entry:u32 levels:[u8; len]`, then for each
    /// slot and each of its levels 0..=level: `count:u16 ids:[u32; count]`.
    /// Deterministic: equal graphs give equal bytes.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(self.metric.code());
        out.push(self.max_level);
        out.extend_from_slice(
            &u32::try_from(self.params.m)
                .expect("m <= MAX_M")
                .to_le_bytes(),
        );
        out.extend_from_slice(
            &u32::try_from(self.params.ef_construction)
                .expect("clamped by new")
                .to_le_bytes(),
        );
        out.extend_from_slice(&self.params.seed.to_le_bytes());
        for v in [self.dim, self.len(), self.entry] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.levels);
        for slot in 0..self.len() {
            for lc in 0..=self.levels[slot as usize] {
                let links = self.links(slot, lc);
                out.extend_from_slice(
                    &u16::try_from(links.len())
                        .expect("at most 2 * MAX_M links")
                        .to_le_bytes(),
                );
                for &n in links {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
    }

    /// Decodes [`Hnsw::write_to`] output. Validates everything that search
    /// relies on (ids in range, list sizes, levels, entry point), so a
    /// decoded index never panics; rejects trailing bytes. Allocation is
    /// bounded by a constant factor of `bytes.len()` (each list costs at
    /// least two input bytes), so garbled lengths cannot exhaust memory.
    pub fn read_from(bytes: &[u8]) -> Result<Hnsw, HnswError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        if r.take(8, "truncated magic")? != MAGIC {
            return Err(r.err(0, "bad magic"));
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(HnswError::UnsupportedVersion { version });
        }
        let at = r.pos;
        let metric = Metric::from_code(r.u8()?).ok_or(r.err(at, "unknown metric"))?;
        let max_level = r.u8()?;
        let at = r.pos;
        let m = r.u32()? as usize;
        if !(2..=MAX_M).contains(&m) {
            return Err(r.err(at, "m out of range"));
        }
        let at = r.pos;
        let ef_construction = r.u32()? as usize;
        if ef_construction < m {
            return Err(r.err(at, "ef_construction below m"));
        }
        let seed = r.u64()?;
        let params = HnswParams {
            m,
            ef_construction,
            seed,
        };
        let mut h = Hnsw::new(params, metric);
        h.dim = r.u32()?;
        let at = r.pos;
        let len = r.u32()?;
        let entry = r.u32()?;
        if (len == 0) != (entry == NONE) || (len == 0) != (h.dim == 0) || (len > 0 && entry >= len)
        {
            return Err(r.err(at, "inconsistent len / entry / dim"));
        }
        if len == NONE {
            return Err(r.err(at, "len out of range"));
        }
        let levels_at = r.pos;
        h.levels = r.take(len as usize, "truncated levels")?.to_vec();
        if len > 0 && h.levels[entry as usize] != max_level {
            return Err(r.err(levels_at, "entry point is not on the top level"));
        }
        if let Some(i) = h.levels.iter().position(|&l| l > max_level) {
            return Err(r.err(levels_at + i, "level above max_level"));
        }
        h.entry = entry;
        h.max_level = max_level;
        h.level0 = vec![0; len as usize * h.stride0()];
        h.upper_at = Vec::with_capacity(len as usize);
        // Every list costs at least its 2-byte count: bound the total number
        // of lists by the remaining input before allocating for them.
        let lists: usize = h.levels.iter().map(|&l| 1 + l as usize).sum();
        if lists > (r.buf.len() - r.pos) / 2 {
            return Err(r.err(levels_at, "levels exceed input"));
        }
        let mut upper_words = 0usize;
        for &l in &h.levels {
            let at = if l == 0 {
                NONE
            } else {
                u32::try_from(upper_words).map_err(|_| r.err(levels_at, "levels exceed input"))?
            };
            h.upper_at.push(at);
            upper_words += l as usize * h.stride_upper();
        }
        h.upper = vec![0; upper_words];
        let mut list = Vec::with_capacity(h.m0());
        for slot in 0..len {
            for lc in 0..=h.levels[slot as usize] {
                let at = r.pos;
                let n = r.u16()? as usize;
                let cap = if lc == 0 { h.m0() } else { m };
                if n > cap {
                    return Err(r.err(at, "neighbour list too long"));
                }
                list.clear();
                for _ in 0..n {
                    let at = r.pos;
                    let id = r.u32()?;
                    if id >= len || id == slot || h.levels[id as usize] < lc {
                        return Err(r.err(at, "bad neighbour id"));
                    }
                    list.push(id);
                }
                h.set_links(slot, lc, &list);
            }
        }
        if r.pos != r.buf.len() {
            return Err(r.err(r.pos, "trailing bytes"));
        }
        Ok(h)
    }
}

/// Bounds-checked little-endian cursor for [`Hnsw::read_from`].
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, offset: usize, reason: &'static str) -> HnswError {
        HnswError::Format { offset, reason }
    }
    fn take(&mut self, n: usize, reason: &'static str) -> Result<&'a [u8], HnswError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(HnswError::Format {
            offset: self.pos,
            reason,
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], HnswError> {
        let s = self.take(N, "truncated input")?;
        Ok(s.try_into().expect("take returned N bytes"))
    }
    fn u8(&mut self) -> Result<u8, HnswError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, HnswError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, HnswError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, HnswError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Deterministic pseudo-random vectors in [-1, 1), optionally normalised.
    fn random_vectors(seed: u64, n: usize, dim: usize, normalise: bool) -> Vec<f32> {
        let mut h = seed;
        let mut data: Vec<f32> = (0..n * dim)
            .map(|_| {
                h = splitmix64(h);
                (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        if normalise {
            for row in data.chunks_mut(dim) {
                let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|x| *x /= norm);
            }
        }
        data
    }

    fn build(vectors: &FlatVectors, params: HnswParams, metric: Metric) -> Hnsw {
        let mut h = Hnsw::new(params, metric);
        for slot in 0..vectors.len() {
            h.insert(slot, vectors).expect("in-order insert");
        }
        h
    }

    /// Exact k-NN among slots passing `filter`, same ordering rules as search.
    fn brute_force(
        v: &FlatVectors,
        metric: Metric,
        q: &[f32],
        k: usize,
        filter: impl Fn(u32) -> bool,
    ) -> Vec<u32> {
        let mut all: Vec<u64> = (0..v.len())
            .filter(|&s| filter(s))
            .map(|s| key(distance(metric, q, v.get(s)), s))
            .collect();
        all.sort_unstable();
        all.iter().take(k).map(|&k| key_slot(k)).collect()
    }

    fn search_all(h: &Hnsw, v: &FlatVectors, q: &[f32], k: usize, ef: usize) -> Vec<Neighbor> {
        let mut scratch = SearchScratch::new();
        let mut stats = SearchStats::default();
        h.search(q, k, ef, v, NO_FILTER, &mut scratch, &mut stats)
    }

    /// Mean recall@k of `h` against brute force over `queries`.
    fn recall(
        h: &Hnsw,
        v: &FlatVectors,
        queries: &[f32],
        k: usize,
        ef: usize,
        filter: impl Fn(u32) -> bool + Copy,
    ) -> f64 {
        let (mut hit, mut total) = (0usize, 0usize);
        let mut scratch = SearchScratch::new();
        let mut stats = SearchStats::default();
        for q in queries.chunks(v.dim) {
            let truth = brute_force(v, h.metric(), q, k, filter);
            let got = h.search(q, k, ef, v, Some(&filter), &mut scratch, &mut stats);
            hit += got.iter().filter(|n| truth.contains(&n.slot)).count();
            total += truth.len();
        }
        hit as f64 / total.max(1) as f64
    }

    #[test]
    fn recall_matches_brute_force() {
        let (n, dim) = (2000, 32);
        for (seed, metric) in [(1u64, Metric::Cosine), (2, Metric::Dot), (3, Metric::L2)] {
            let data = random_vectors(seed, n, dim, metric == Metric::Dot);
            let v = FlatVectors { data: &data, dim };
            let h = build(&v, HnswParams::default(), metric);
            let queries = random_vectors(seed + 100, 100, dim, metric == Metric::Dot);
            let r = recall(&h, &v, &queries, 10, 64, |_| true);
            eprintln!("seed {seed} {metric:?}: recall@10 = {r:.4}");
            assert!(r >= 0.95, "seed {seed} {metric:?}: recall@10 {r:.3} < 0.95");
        }
    }

    #[test]
    fn filtered_recall_at_30_percent() {
        let (n, dim) = (2000, 32);
        let data = random_vectors(7, n, dim, false);
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::L2);
        let queries = random_vectors(8, 100, dim, false);
        let pass = |s: u32| splitmix64(u64::from(s) ^ 99) % 10 < 3;
        let r = recall(&h, &v, &queries, 10, 64, pass);
        eprintln!("seed 7, 30% filter: recall@10 = {r:.4}");
        assert!(r >= 0.95, "seed 7: filtered recall@10 {r:.3} < 0.95");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Results only ever hold filter-passing slots; a filter passing
        /// fewer than `ef` slots makes the search exhaustive, so it returns
        /// exactly the filtered brute-force answer.
        #[test]
        fn filter_is_respected(seed in 0u64..1_000_000, kind in 0u8..4, pick in 0u32..300) {
            let (n, dim) = (300u32, 8);
            let data = random_vectors(seed, n as usize, dim, false);
            let v = FlatVectors { data: &data, dim };
            let h = build(&v, HnswParams { m: 8, ef_construction: 64, seed }, Metric::L2);
            let q = random_vectors(seed ^ 0xabc, 1, dim, false);
            let pass = move |s: u32| match kind {
                0 => false,
                1 => s == pick,
                2 => splitmix64(u64::from(s) ^ seed).is_multiple_of(2),
                _ => s % 37 == pick % 37,
            };
            let mut scratch = SearchScratch::new();
            let mut stats = SearchStats::default();
            let got = h.search(&q, 10, 32, &v, Some(&pass), &mut scratch, &mut stats);
            prop_assert!(got.iter().all(|nb| pass(nb.slot)), "seed {seed}: {got:?}");
            prop_assert!(got.windows(2).all(|w| key(w[0].distance, w[0].slot) < key(w[1].distance, w[1].slot)));
            let eligible = (0..n).filter(|&s| pass(s)).count();
            if eligible < 32 {
                let truth = brute_force(&v, Metric::L2, &q, 10, pass);
                let got: Vec<u32> = got.iter().map(|nb| nb.slot).collect();
                prop_assert_eq!(got, truth, "seed {}", seed);
            }
            if kind == 0 {
                prop_assert!(got.is_empty());
                prop_assert!(stats.filtered_out > 0);
            }
        }
    }

    #[test]
    fn exact_search_matches_brute_force() {
        let (n, dim) = (500, 8);
        let data = random_vectors(81, n, dim, false);
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::L2);
        let eligible = (0..n as u32).filter(|s| s % 7 == 3).count() as u64;
        for q in random_vectors(82, 10, dim, false).chunks(dim) {
            let pass = |s: u32| s % 7 == 3;
            let mut stats = SearchStats::default();
            let got = h.exact_search(q, 10, &v, (0..n as u32).filter(|&s| pass(s)), &mut stats);
            assert_eq!(stats.distance_computations, eligible);
            let slots: Vec<u32> = got.iter().map(|nb| nb.slot).collect();
            assert_eq!(slots, brute_force(&v, Metric::L2, q, 10, pass));
            assert!(
                got.iter()
                    .all(|nb| nb.distance == distance(Metric::L2, q, v.get(nb.slot)))
            );
            // An exhaustive graph search gives the same answer.
            let mut scratch = SearchScratch::new();
            let graph = h.search(q, 10, n, &v, Some(&pass), &mut scratch, &mut stats);
            assert_eq!(graph, got);
        }
        let mut stats = SearchStats::default();
        // Out-of-range slots are skipped; k = 0 and wrong dimensions are empty.
        let q = &data[..dim];
        assert_eq!(h.exact_search(q, 5, &v, [0, 9999], &mut stats).len(), 1);
        assert!(h.exact_search(q, 0, &v, 0..10, &mut stats).is_empty());
        assert!(h.exact_search(&q[1..], 5, &v, 0..10, &mut stats).is_empty());
    }

    #[test]
    fn edge_cases() {
        let dim = 4;
        let mut scratch = SearchScratch::new();
        let mut stats = SearchStats::default();
        let empty = Hnsw::new(HnswParams::default(), Metric::L2);
        let none = FlatVectors { data: &[], dim };
        assert!(empty.is_empty());
        assert!(search_all(&empty, &none, &[0.0; 4], 10, 10).is_empty());

        let data = random_vectors(5, 50, dim, false);
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::L2);
        assert_eq!(h.len(), 50);
        let q = &data[..dim];
        // k = 0, wrong query dimension, vectors shorter than the index.
        assert!(search_all(&h, &v, q, 0, 10).is_empty());
        assert!(search_all(&h, &v, &[0.0; 3], 5, 10).is_empty());
        let short = FlatVectors {
            data: &data[..10 * dim],
            dim,
        };
        assert!(search_all(&h, &short, q, 5, 10).is_empty());
        // k > len returns everything, sorted; the query itself is first.
        let all = search_all(&h, &v, q, 100, 10);
        assert_eq!(all.len(), 50);
        assert_eq!(all[0].slot, 0);
        assert_eq!(all[0].distance, 0.0);
        assert!(all.windows(2).all(|w| w[0].distance <= w[1].distance));
        // ef < k is raised to k.
        assert_eq!(search_all(&h, &v, q, 20, 1), search_all(&h, &v, q, 20, 20));
        assert_eq!(search_all(&h, &v, q, 20, 1).len(), 20);

        // Single element.
        let one = build(
            &FlatVectors { data: q, dim },
            HnswParams::default(),
            Metric::Dot,
        );
        let got = one.search(q, 3, 3, &v, NO_FILTER, &mut scratch, &mut stats);
        assert_eq!(
            got,
            vec![Neighbor {
                slot: 0,
                distance: distance(Metric::Dot, q, q)
            }]
        );
        assert!(got[0].distance < 0.0);
    }

    #[test]
    fn duplicate_vectors_tie_break_by_slot() {
        let dim = 8;
        // 40 copies of one vector followed by 200 random ones.
        let base = random_vectors(11, 1, dim, false);
        let mut data: Vec<f32> = base.iter().copied().cycle().take(40 * dim).collect();
        data.extend(random_vectors(12, 200, dim, false));
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::L2);
        let got = search_all(&h, &v, &base, 10, 64);
        let slots: Vec<u32> = got.iter().map(|n| n.slot).collect();
        assert_eq!(slots, (0..10).collect::<Vec<u32>>());
        assert!(got.iter().all(|n| n.distance == 0.0));
    }

    #[test]
    fn insert_errors_leave_index_unchanged() {
        let dim = 4;
        let data = random_vectors(3, 10, dim, false);
        let v = FlatVectors { data: &data, dim };
        let mut h = Hnsw::new(HnswParams::default(), Metric::L2);
        assert_eq!(
            h.insert(1, &v),
            Err(HnswError::SlotOutOfOrder {
                expected: 0,
                got: 1
            })
        );
        h.insert(0, &v).expect("slot 0");
        let before = encode(&h);
        assert_eq!(
            h.insert(0, &v),
            Err(HnswError::SlotOutOfOrder {
                expected: 1,
                got: 0
            })
        );
        let other = FlatVectors {
            data: &data,
            dim: 5,
        };
        assert_eq!(
            h.insert(1, &other),
            Err(HnswError::DimensionMismatch {
                expected: 4,
                got: 5
            })
        );
        let short = FlatVectors {
            data: &data[..dim],
            dim,
        };
        assert_eq!(
            h.insert(1, &short),
            Err(HnswError::MissingVector {
                slot: 1,
                available: 1
            })
        );
        assert_eq!(encode(&h), before);
        assert_eq!(h.len(), 1);
        let zero_dim = FlatVectors { data: &[], dim: 0 };
        let err = Hnsw::new(HnswParams::default(), Metric::L2).insert(0, &zero_dim);
        assert!(
            matches!(err, Err(HnswError::MissingVector { .. })),
            "{err:?}"
        );
        assert!(err.unwrap_err().to_string().contains("slot 0"));
    }

    fn encode(h: &Hnsw) -> Vec<u8> {
        let mut out = Vec::new();
        h.write_to(&mut out);
        out
    }

    #[test]
    fn encoding_round_trip_and_determinism() {
        let (n, dim) = (500, 16);
        let data = random_vectors(21, n, dim, true);
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::Cosine);
        let bytes = encode(&h);
        // Same inputs, same bytes; a different seed gives another graph.
        assert_eq!(
            encode(&build(&v, HnswParams::default(), Metric::Cosine)),
            bytes
        );
        let reseeded = HnswParams {
            seed: 1,
            ..HnswParams::default()
        };
        assert_ne!(encode(&build(&v, reseeded, Metric::Cosine)), bytes);

        let back = Hnsw::read_from(&bytes).expect("valid encoding");
        assert_eq!(encode(&back), bytes);
        assert_eq!(
            (back.params(), back.metric(), back.len(), back.dim()),
            (h.params(), h.metric(), h.len(), h.dim())
        );
        for q in random_vectors(22, 20, dim, true).chunks(dim) {
            assert_eq!(
                search_all(&back, &v, q, 10, 32),
                search_all(&h, &v, q, 10, 32)
            );
        }
        // A decoded index keeps accepting inserts exactly like the original.
        let more = random_vectors(23, n + 1, dim, true);
        let v2 = FlatVectors { data: &more, dim };
        let (mut a, mut b) = (h.clone(), back);
        a.insert(n as u32, &v2).expect("insert");
        b.insert(n as u32, &v2).expect("insert");
        assert_eq!(encode(&a), encode(&b));

        // Empty index round-trips too.
        let empty = Hnsw::new(HnswParams::default(), Metric::Dot);
        let e = Hnsw::read_from(&encode(&empty)).expect("empty");
        assert!(e.is_empty() && e.metric() == Metric::Dot);
    }

    #[test]
    fn rejects_every_truncation_and_bad_header() {
        let data = random_vectors(31, 120, 8, false);
        let v = FlatVectors {
            data: &data,
            dim: 8,
        };
        let bytes = encode(&build(
            &v,
            HnswParams {
                m: 4,
                ef_construction: 16,
                seed: 9,
            },
            Metric::L2,
        ));
        for cut in 0..bytes.len() {
            assert!(
                Hnsw::read_from(&bytes[..cut]).is_err(),
                "prefix {cut} accepted"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(
            Hnsw::read_from(&long),
            Err(HnswError::Format {
                reason: "trailing bytes",
                ..
            })
        ));
        let mut bad = bytes.clone();
        bad[8] = 9; // version
        assert_eq!(
            Hnsw::read_from(&bad).unwrap_err(),
            HnswError::UnsupportedVersion { version: 9 }
        );
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(matches!(
            Hnsw::read_from(&bad),
            Err(HnswError::Format { offset: 0, .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            prop_assert!(Hnsw::read_from(&bytes).is_err());
            // Behind a valid magic and version, too.
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&VERSION.to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = Hnsw::read_from(&framed);
        }

        /// Garbled valid encodings either fail cleanly or decode into an
        /// index that searches without panicking.
        #[test]
        fn garbled_encoding_never_panics(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
            let data = random_vectors(41, 60, 4, false);
            let v = FlatVectors { data: &data, dim: 4 };
            let mut bytes = encode(&build(&v, HnswParams { m: 4, ef_construction: 8, seed: 3 }, Metric::L2));
            for (at, b) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= b | 1;
            }
            if let Ok(h) = Hnsw::read_from(&bytes) {
                // Whatever was garbled (dimension, length, links), searching
                // with the original vectors must not panic.
                let got = search_all(&h, &v, &[0.5; 4], 5, 8);
                prop_assert!(got.len() <= 5);
                prop_assert!(got.iter().all(|n| n.slot < h.len()));
            }
        }
    }

    #[test]
    fn graph_memory_per_vector() {
        let (n, dim) = (4000, 8);
        let data = random_vectors(51, n, dim, false);
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::L2);
        let per = h.graph_bytes() as f64 / n as f64;
        assert!(per <= 200.0, "{per} graph bytes per vector");
        assert!(
            per >= 137.0,
            "{per}: level 0 alone needs 132 + 5 bytes per vector"
        );
    }

    #[test]
    fn levels_are_geometric_and_seeded() {
        let h = Hnsw::new(HnswParams::default(), Metric::L2);
        let n = 100_000u32;
        let upper = (0..n).filter(|&s| h.level_for(s) >= 1).count() as f64 / n as f64;
        assert!((upper - 1.0 / 16.0).abs() < 0.005, "P(level>=1) = {upper}");
        let two = (0..n).filter(|&s| h.level_for(s) >= 2).count() as f64 / n as f64;
        assert!((two - 1.0 / 256.0).abs() < 0.001, "P(level>=2) = {two}");
        let other = Hnsw::new(
            HnswParams {
                seed: 1,
                ..HnswParams::default()
            },
            Metric::L2,
        );
        assert!((0..1000).any(|s| h.level_for(s) != other.level_for(s)));
    }

    #[test]
    fn prefetch_is_a_pure_hint() {
        let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let copy = data.clone();
        for range in [0..0, 0..1, 3..19, 0..1000, 999..1000] {
            prefetch(&data[range]);
        }
        prefetch::<u32>(&[]);
        prefetch(&[0u8; 3]);
        assert_eq!(data, copy);
    }

    #[test]
    fn key_orders_like_distance_then_slot() {
        let ds = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            0.25,
            7.0,
            f32::INFINITY,
        ];
        for w in ds.windows(2) {
            assert!(key(w[0], 9) < key(w[1], 0), "{} vs {}", w[0], w[1]);
        }
        for &d in &ds {
            assert_eq!(key_dist(key(d, 5)).to_bits(), d.to_bits());
            assert!(key(d, 1) < key(d, 2));
        }
    }

    #[test]
    fn concurrent_searches_agree() {
        let (n, dim) = (1000, 16);
        let data = random_vectors(61, n, dim, false);
        let v = FlatVectors { data: &data, dim };
        let h = build(&v, HnswParams::default(), Metric::L2);
        let queries = random_vectors(62, 64, dim, false);
        let expected: Vec<_> = queries
            .chunks(dim)
            .map(|q| search_all(&h, &v, q, 10, 32))
            .collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut scratch = SearchScratch::new();
                    let mut stats = SearchStats::default();
                    for (q, want) in queries.chunks(dim).zip(&expected) {
                        let got = h.search(q, 10, 32, &v, NO_FILTER, &mut scratch, &mut stats);
                        assert_eq!(&got, want);
                    }
                    assert!(stats.distance_computations > 0 && stats.nodes_visited > 0);
                });
            }
        });
    }

    #[test]
    fn visited_epoch_wraps() {
        let data = random_vectors(71, 100, 4, false);
        let v = FlatVectors {
            data: &data,
            dim: 4,
        };
        let h = build(&v, HnswParams::default(), Metric::L2);
        let mut scratch = SearchScratch::new();
        let mut stats = SearchStats::default();
        let q = &data[..4];
        let want = h.search(q, 5, 16, &v, NO_FILTER, &mut scratch, &mut stats);
        // Stale marks from before the wrap must not hide nodes after it.
        scratch.visited.fill(1);
        scratch.epoch = u16::MAX - 1;
        for _ in 0..3 {
            assert_eq!(
                h.search(q, 5, 16, &v, NO_FILTER, &mut scratch, &mut stats),
                want
            );
        }
        // Each search takes two epochs (upper levels, level 0): it wrapped.
        assert!(scratch.epoch < 8, "epoch {}", scratch.epoch);
    }
}
