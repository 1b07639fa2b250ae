//! Taking a space's pending vectors into its graph: one slot at a time,
//! then in batches planned piece by piece (see `hnsw/batch.rs`), and the
//! counts of what waits.

use std::sync::Arc;

use engram_storage::files::SharedRows;
use parking_lot::{Mutex, RwLock};

use super::{Result, SpaceVectors, VectorSpace};
use crate::error::EngineError;
use crate::vector::distance::Metric;
use crate::vector::hnsw::{
    BATCH, BackLinks, Hnsw, HnswError, NodePlan, ReverseLink, SearchScratch, Step,
};
use crate::vector::precision::GraphPrecision;
use crate::vector::quant::Codes;

/// The graph's next batch, planned and linked piece by piece (the live
/// indexer plans one node, or makes [`LISTS_PER_TURN`] lists, per turn)
/// and committed once whole.
#[derive(Debug, Default)]
pub(super) struct BatchWork {
    /// The batch's first slot.
    start: u32,
    /// Its nodes planned so far, in slot order.
    nodes: Vec<NodePlan>,
    /// Once every node is planned: the links they add back.
    rev: Option<Vec<ReverseLink>>,
    /// How many of `rev` have their lists in `links`.
    linked: usize,
    /// The new lists so far.
    links: BackLinks,
    /// A caller is committing the batch starting here: others wait for
    /// it rather than plan the batch again.
    committing: Option<u32>,
    /// One per planning thread, kept between turns.
    scratch: Vec<SearchScratch>,
}

/// Lists the live indexer makes per turn: about the back-linking of one
/// serial insert.
const LISTS_PER_TURN: usize = 32;

impl VectorSpace {
    /// Slots not yet in the graph (searched exactly meanwhile).
    pub fn pending(&self) -> usize {
        self.pending_and_indexable().0
    }

    /// Pending slots the graph can take now: all but the last batch's
    /// while it is incomplete (see [`crate::vector::hnsw::BATCH`]).
    pub fn indexable(&self) -> usize {
        self.pending_and_indexable().1
    }

    /// Whether the graph may take a vector now, without waiting for the
    /// graph's lock: true while the indexer holds it (it is then at work
    /// here). For the commit hook, which holds the state's write lock and
    /// must not wait for the low-priority indexer.
    pub fn may_index(&self) -> bool {
        match self.hnsw.try_read() {
            Some(g) => g.indexable(self.available()) > 0,
            None => true,
        }
    }

    /// ([`VectorSpace::pending`], [`VectorSpace::indexable`]) from one
    /// look at the graph.
    pub fn pending_and_indexable(&self) -> (usize, usize) {
        let g = self.hnsw.read();
        let available = self.available();
        (
            (available - g.len()) as usize,
            g.indexable(available) as usize,
        )
    }

    /// Lets go of the planning threads' buffers but one (about 2 bytes per
    /// vector each), after a bulk build.
    pub fn trim_batch_scratch(&self) {
        self.batch.lock().scratch.truncate(1);
    }

    fn available(&self) -> u32 {
        u32::try_from(self.slot_to_idx.len()).expect("fewer slots than records")
    }

    /// Takes up to `max` pending slots into the graph, planning batches on
    /// `threads` threads (see [`crate::vector::hnsw::BATCH`]). Returns the units
    /// of work done (slots inserted or planned, runs of a batch's lists
    /// made): 0 when none can be now. With `max` below [`BATCH`] the lists are made
    /// 32 at a time (`LISTS_PER_TURN`), a turn of the live indexer.
    pub fn index_pending(&self, max: usize, threads: usize) -> Result<usize> {
        self.turn().index(
            &self.vectors(),
            |from, n, out| self.file.read_rows(from, n, out),
            max,
            threads,
        )
    }

    /// The space's graph, batch and codes (shared), with what a turn of
    /// indexing reads of the space.
    fn turn(&self) -> LiveTurn {
        LiveTurn {
            uid: self.uid,
            model: self.model.clone(),
            hnsw: self.hnsw.clone(),
            batch: self.batch.clone(),
            codes: self.codes.clone(),
            precision: self.precision,
            metric: self.internal_metric(),
            available: self.available(),
            dim: self.dim,
        }
    }

    /// What a turn of the live indexer needs of this space, to run without
    /// the lock that guards the space (the state's): the graph and the
    /// batch (shared), and `rows` brought up to the space's rows (see
    /// [`SharedRows`]). `None` when nothing is indexable.
    pub fn live_turn(&self, rows: &mut SpaceRows) -> Option<LiveTurn> {
        if self.indexable() == 0 {
            return None;
        }
        if rows.uid != self.uid {
            *rows = SpaceRows {
                uid: self.uid,
                rows: SharedRows::default(),
            };
        }
        self.file.share_into(&mut rows.rows);
        Some(self.turn())
    }
}

/// The rows of the space the live indexer works on, kept between its
/// turns (see [`VectorSpace::live_turn`]): one space's at a time, so the
/// copy of rows appended since the last mapping is at most one space's.
#[derive(Debug, Default)]
pub struct SpaceRows {
    uid: u64,
    rows: SharedRows,
}

/// A turn of indexing on one space: its graph, batch and codes, each
/// behind its own lock. The live indexer runs it without the state's lock,
/// over a shared view of the rows (so appends, which need the lock to
/// write, go on meanwhile); [`VectorSpace::index_pending`] runs the same
/// turn over the space's own rows, under the state's lock.
pub struct LiveTurn {
    /// The space's identity (see `VectorSpace::uid`).
    uid: u64,
    model: String,
    hnsw: Arc<RwLock<Hnsw>>,
    batch: Arc<Mutex<BatchWork>>,
    codes: Arc<RwLock<Codes>>,
    precision: GraphPrecision,
    metric: Metric,
    available: u32,
    dim: usize,
}

impl LiveTurn {
    /// Takes up to `max` units of work (see [`VectorSpace::index_pending`])
    /// on one thread, reading vectors from `rows` (as given to
    /// [`VectorSpace::live_turn`]).
    pub fn run(&self, rows: &SpaceRows, max: usize) -> Result<usize> {
        if rows.uid != self.uid {
            return Ok(0);
        }
        let (mapped, tail) = rows.rows.flat();
        let vectors = SpaceVectors {
            mapped,
            tail,
            mapped_rows: mapped.len() / self.dim,
            dim: self.dim,
            len: self.available,
        };
        self.index(
            &vectors,
            |from, n, out| rows.rows.read_rows(from, n, out),
            max,
            1,
        )
    }

    /// Up to `max` units of work on `threads` threads, then, for a space
    /// walked over codes, the new slots' codes (here, in the background,
    /// rather than on the next query), their rows copied by `read`.
    fn index(
        &self,
        vectors: &SpaceVectors<'_>,
        read: impl FnMut(usize, usize, &mut Vec<f32>) -> engram_storage::StorageResult<usize>,
        max: usize,
        threads: usize,
    ) -> Result<usize> {
        let done = index_slots(&self.model, &self.hnsw, &self.batch, vectors, max, threads)?;
        if done > 0
            && self
                .precision
                .walks_codes(self.metric, self.hnsw.read().len())
        {
            drop(super::scan::codes_upto(&self.codes, vectors, read));
        }
        Ok(done)
    }
}

/// Takes up to `max` of the pending slots among `vectors` into `hnsw`,
/// planning batches in `batch` on `threads` threads (see
/// [`VectorSpace::index_pending`]).
fn index_slots(
    model: &str,
    hnsw: &RwLock<Hnsw>,
    batch: &Mutex<BatchWork>,
    vectors: &SpaceVectors<'_>,
    max: usize,
    threads: usize,
) -> Result<usize> {
    let corrupt = |e: HnswError| EngineError::Corrupt {
        what: format!("vector index of '{model}'"),
        detail: e.to_string(),
    };
    let available = vectors.len;
    let mut done = 0;
    while done < max {
        let g = hnsw.read();
        match g.step(available) {
            Step::Done | Step::Held => break,
            Step::Serial(next) => {
                // Planned under the read lock (searches go on), linked
                // under the write lock, which is then held briefly: the
                // live indexer runs at low priority, and a search waiting
                // for it holds the state's read lock.
                let plan = {
                    let mut work = batch.lock();
                    if work.scratch.is_empty() {
                        work.scratch.push(SearchScratch::new());
                    }
                    g.plan_insert(next, vectors, &mut work.scratch[0])
                        .map_err(corrupt)?
                };
                drop(g);
                let mut g = hnsw.write();
                // Another caller may have inserted it meanwhile.
                if g.len() == next {
                    g.link_planned(plan, vectors).map_err(corrupt)?;
                }
                done += 1;
            }
            Step::Batch(range) => {
                // Planned and linked under the read lock: searches go on.
                let mut work = batch.lock();
                if work.committing == Some(range.start) {
                    // Another caller is committing this batch: give it
                    // the CPU (it may be the low-priority live indexer,
                    // which a yield would not let run).
                    drop(work);
                    drop(g);
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    continue;
                }
                if work.start != range.start {
                    let scratch = std::mem::take(&mut work.scratch);
                    *work = BatchWork {
                        start: range.start,
                        scratch,
                        ..BatchWork::default()
                    };
                }
                let threads = threads.max(1);
                if work.scratch.len() < threads {
                    work.scratch.resize_with(threads, SearchScratch::new);
                }
                let w = &mut *work;
                let planned = u32::try_from(w.nodes.len()).expect("at most BATCH nodes");
                let from = range.start + planned;
                let budget = u32::try_from(max - done).unwrap_or(u32::MAX);
                let to = range.end.min(from.saturating_add(budget));
                if from < to {
                    let nodes = g
                        .plan(from..to, vectors, &mut w.scratch[..threads])
                        .map_err(corrupt)?;
                    w.nodes.extend(nodes);
                    done += (to - from) as usize;
                }
                if w.nodes.len() < range.len() {
                    continue;
                }
                // The new lists, a few nodes' at a time when the budget
                // is a turn of the live indexer.
                let rev = w.rev.get_or_insert_with(|| Hnsw::reverse_links(&w.nodes));
                let lists = if max >= BATCH as usize {
                    usize::MAX
                } else {
                    LISTS_PER_TURN
                };
                while w.linked < rev.len() && done < max {
                    let end = Hnsw::reverse_links_end(rev, w.linked, lists);
                    let links = g
                        .back_links(
                            &w.nodes,
                            &rev[w.linked..end],
                            vectors,
                            &mut w.scratch[..threads],
                        )
                        .map_err(corrupt)?;
                    w.links.extend(links);
                    w.linked = end;
                    done += 1;
                }
                if w.linked < rev.len() {
                    continue;
                }
                let (nodes, links) = (std::mem::take(&mut w.nodes), std::mem::take(&mut w.links));
                (w.rev, w.linked, w.committing) = (None, 0, Some(range.start));
                // No lock is waited for while the batch's is held.
                drop(work);
                drop(g);
                /// Clears the batch's `committing` mark however the
                /// commit ends (a panic included), so no caller waits
                /// for it forever.
                struct Committing<'a>(&'a parking_lot::Mutex<BatchWork>, u32);
                impl Drop for Committing<'_> {
                    fn drop(&mut self) {
                        let mut work = self.0.lock();
                        if work.committing == Some(self.1) {
                            work.committing = None;
                        }
                    }
                }
                let _mark = Committing(batch, range.start);
                hnsw.write().commit(&nodes, &links).map_err(corrupt)?;
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use engram_storage::MemBackend;

    use super::*;
    use crate::vector::hnsw::HnswParams;
    use crate::vector::space::VectorSpaces;

    /// Live turns (no state lock: a shared view of the rows, topped up
    /// between turns while rows are appended and the file remaps) build the
    /// graph and the int8 codes that `index_pending` builds under the lock.
    #[test]
    fn live_turns_build_what_index_pending_builds() {
        let open = || {
            let mut v = VectorSpaces::open(
                Arc::new(MemBackend::new()),
                Path::new("/v"),
                HnswParams::default(),
                Metric::Cosine,
            )
            .unwrap();
            v.set_graph_precision(GraphPrecision::Int8);
            v
        };
        let (mut live, mut bulk) = (open(), open());
        let (dim, n) = (8, 4096 + 200);
        let vector = |i: u32| -> Vec<f32> {
            (0..dim)
                .map(|j| ((i as usize * 7919 + j * 104_729) % 997) as f32 / 997.0 - 0.5)
                .collect()
        };
        let mut rows = SpaceRows::default();
        let turn = |live: &VectorSpaces, rows: &mut SpaceRows| match live.live_turn(rows) {
            Some(t) => t.run(rows, 1).unwrap(),
            None => 0,
        };
        let mut pushed = 0;
        while pushed < n {
            for _ in 0..37.min(n - pushed) {
                let v = vector(pushed);
                live.push("t", "m", false, pushed, &v).unwrap();
                bulk.push("t", "m", false, pushed, &v).unwrap();
                pushed += 1;
            }
            for _ in 0..5 {
                turn(&live, &mut rows);
            }
        }
        while turn(&live, &mut rows) > 0 {}
        while bulk.index_pending(256, 2).unwrap() > 0 {}
        let (l, b) = (live.get("t", "m").unwrap(), bulk.get("t", "m").unwrap());
        assert_eq!(l.hnsw.read().len(), b.hnsw.read().len());
        let encode = |s: &VectorSpace| {
            let mut out = Vec::new();
            s.hnsw.read().write_to(&mut out);
            out
        };
        assert!(encode(l) == encode(b), "the graphs differ");
        let (lc, bc) = (l.codes.read(), b.codes.read());
        assert_eq!(lc.len(), n as usize);
        assert!(*lc == *bc, "the codes differ");
    }
}
