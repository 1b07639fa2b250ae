//! Batch insertion: the graph built on several threads, the same graph
//! whatever the number of threads or the moment the work is done.
//!
//! Slots below [`SERIAL_UNTIL`] are inserted one at a time
//! ([`Hnsw::insert`]). From there on, slots go in batches of [`BATCH`] at
//! fixed boundaries (`SERIAL_UNTIL + k * BATCH`), each in three steps:
//!
//! 1. [`Hnsw::plan`]: every node of the batch finds its neighbours in the
//!    graph as it stood before the batch (the same beam search as a serial
//!    insert), plus the batch's earlier nodes, compared directly, and keeps
//!    the heuristic selection of those. Nodes are independent here, so
//!    this step (about 80% of a build) runs on as many threads as given.
//! 2. [`Hnsw::back_links`]: every node that gained a link from the batch
//!    gets its new list: the old one plus the new links, pruned by the same
//!    heuristic when over capacity. Lists are independent too (threads).
//! 3. [`Hnsw::commit`]: the new nodes and lists are written, under the
//!    caller's write lock, and the entry point moves to the highest new
//!    node.
//!
//! Steps 1 and 2 only read the graph, so searches go on meanwhile. Each
//! step is a pure function of the graph before the batch and the vectors,
//! so the result is a pure function of the vectors in slot order: what
//! `rebuild --verify` compares. The price: the slots of a batch not yet
//! complete (at most `BATCH - 1` per space) wait outside the graph, where
//! searches scan them exactly, as they do any slot not yet indexed.
//!
//! The scheme follows ParlayANN's deterministic batch insertion (Manohar
//! et al., 2024), with fixed batch sizes instead of prefix doubling and
//! the batch's earlier nodes as extra candidates.

use super::*;

/// Slots below this are inserted one at a time.
pub const SERIAL_UNTIL: u32 = 1024;
/// Slots from [`SERIAL_UNTIL`] on are inserted in batches of this many.
pub const BATCH: u32 = 64;

/// What a graph of `len` slots does next with `available` vectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Every available slot is in the graph.
    Done,
    /// Insert this one slot ([`Hnsw::insert`]).
    Serial(u32),
    /// Plan, link and commit these slots as one batch.
    Batch(std::ops::Range<u32>),
    /// The next batch is not complete: its slots wait.
    Held,
}

/// The first batch boundary at or after `len` (slots before it are
/// inserted one at a time: below [`SERIAL_UNTIL`], or left over from a
/// graph built before batches).
fn boundary(len: u32) -> u64 {
    let (len, serial, batch) = (u64::from(len), u64::from(SERIAL_UNTIL), u64::from(BATCH));
    if len <= serial {
        serial
    } else {
        serial + (len - serial).div_ceil(batch) * batch
    }
}

/// The next step for a graph of `len` slots with `available` vectors.
pub fn step(len: u32, available: u32) -> Step {
    if len >= available {
        return Step::Done;
    }
    if u64::from(len) < boundary(len) {
        return Step::Serial(len);
    }
    match len.checked_add(BATCH) {
        Some(end) if end <= available => Step::Batch(len..end),
        _ => Step::Held,
    }
}

/// How many of `available` slots a graph of `len` can take now (the rest
/// wait for their batch to fill).
pub fn indexable(len: u32, available: u32) -> u32 {
    if len >= available {
        return 0;
    }
    let b = boundary(len);
    let (len, available) = (u64::from(len), u64::from(available));
    let serial = available.min(b) - len;
    let batched = if available > b {
        (available - b) / u64::from(BATCH) * u64::from(BATCH)
    } else {
        0
    };
    u32::try_from(serial + batched).expect("at most available - len")
}

/// One node's place in a batch: its level and its own lists, by level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlan {
    slot: u32,
    level: u8,
    lists: Vec<Vec<u32>>,
}

/// Lists to replace when a batch is committed: (node, level, list).
pub type BackLinks = Vec<(u32, u8, Vec<u32>)>;

/// A link a batch adds back to a node: (level, node, from).
pub type ReverseLink = (u8, u32, u32);

/// Runs `f` over `items` on `threads` threads (each with its own
/// `scratch`), returning the results in the order of `items`.
fn par_map<T: Sync, R: Send>(
    items: &[T],
    scratch: &mut [SearchScratch],
    f: impl Fn(&T, &mut SearchScratch) -> R + Sync,
) -> Vec<R> {
    let threads = scratch.len().min(items.len()).max(1);
    if threads == 1 {
        let s = &mut scratch[0];
        return items.iter().map(|x| f(x, s)).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|sc| {
        let f = &f;
        let handles: Vec<_> = items
            .chunks(chunk)
            .zip(scratch.iter_mut())
            .map(|(part, s)| sc.spawn(move || part.iter().map(|x| f(x, s)).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

impl Hnsw {
    /// The next step for this graph with `available` vectors.
    pub fn step(&self, available: u32) -> Step {
        step(self.len(), available)
    }

    /// How many of `available` slots can go into this graph now.
    pub fn indexable(&self, available: u32) -> u32 {
        indexable(self.len(), available)
    }

    /// Plans the nodes `slots` of the batch that starts at the graph's
    /// end (step 1), on one thread per `scratch`. `slots` may be part of
    /// the batch (planned piece by piece); every node is planned against
    /// the graph as it stands, which must not change before
    /// [`Hnsw::commit`].
    pub fn plan<V: Vectors + Sync>(
        &self,
        slots: std::ops::Range<u32>,
        vectors: &V,
        scratch: &mut [SearchScratch],
    ) -> Result<Vec<NodePlan>, HnswError> {
        let start = self.len();
        let Step::Batch(batch) = self.step(vectors.len()) else {
            return Err(HnswError::SlotOutOfOrder {
                expected: start,
                got: slots.start,
            });
        };
        if slots.start < batch.start || slots.end > batch.end || scratch.is_empty() {
            return Err(HnswError::SlotOutOfOrder {
                expected: batch.start,
                got: slots.start,
            });
        }
        for slot in slots.clone() {
            self.check_dim(vectors, slot)?;
        }
        let slots: Vec<u32> = slots.collect();
        Ok(par_map(&slots, scratch, |&slot, s| {
            self.plan_one(slot, start, vectors, s)
        }))
    }

    /// Step 1 for one node: beam search of the graph, then the batch's
    /// nodes `start..slot`, then the heuristic selection, per level.
    fn plan_one<V: Vectors>(
        &self,
        slot: u32,
        start: u32,
        vectors: &V,
        scratch: &mut SearchScratch,
    ) -> NodePlan {
        let q = vectors.get(slot);
        let level = self.level_for(slot);
        let mut pools = self.layer_pools(q, level, vectors, scratch);
        let mut lists = Vec::with_capacity(pools.len());
        for (lc, pool) in pools.iter_mut().enumerate() {
            for v in start..slot {
                if usize::from(self.level_for(v)) >= lc {
                    pool.push(key(distance(self.metric, q, vectors.get(v)), v));
                }
            }
            pool.sort_unstable();
            let (m, fill) = if lc == 0 {
                (self.m0(), self.m0())
            } else {
                (self.params.m, 0)
            };
            let mut out = Vec::new();
            self.select_neighbors(pool, m, fill, vectors, &mut out);
            lists.push(out);
        }
        NodePlan { slot, level, lists }
    }

    /// Step 2, first part: every link the batch `plans` (the whole batch,
    /// in slot order) adds back to a node, as `(level, node, from)`, sorted,
    /// so that each node's new links at a level are one run.
    pub fn reverse_links(plans: &[NodePlan]) -> Vec<ReverseLink> {
        let mut rev: Vec<ReverseLink> = plans
            .iter()
            .flat_map(|p| {
                p.lists.iter().enumerate().flat_map(move |(lc, l)| {
                    #[allow(clippy::cast_possible_truncation)] // levels <= MAX_LEVEL
                    l.iter().map(move |&n| (lc as u8, n, p.slot))
                })
            })
            .collect();
        rev.sort_unstable();
        rev
    }

    /// Where the run of `groups` nodes' links starting at `from` ends in
    /// `rev` (a whole number of nodes, so a caller can make the lists a
    /// few nodes at a time).
    pub fn reverse_links_end(rev: &[ReverseLink], from: usize, groups: usize) -> usize {
        let mut at = from.min(rev.len());
        for _ in 0..groups {
            let Some(&(lc, n, _)) = rev.get(at) else {
                break;
            };
            at += rev[at..]
                .iter()
                .take_while(|r| (r.0, r.1) == (lc, n))
                .count();
        }
        at
    }

    /// Step 2: the new list of every node with links in `rev` (a run of
    /// whole nodes from [`Hnsw::reverse_links`] of the whole batch
    /// `plans`), on one thread per `scratch`. A list that has room takes
    /// its new links in slot order; a full one keeps the heuristic
    /// selection of old and new, topped up on level 0 to three quarters
    /// of capacity (as [`Hnsw::insert`]'s pruning does).
    pub fn back_links<V: Vectors + Sync>(
        &self,
        plans: &[NodePlan],
        rev: &[ReverseLink],
        vectors: &V,
        scratch: &mut [SearchScratch],
    ) -> Result<BackLinks, HnswError> {
        let start = self.len();
        self.check_batch(plans)?;
        let end = u64::from(start) + plans.len() as u64;
        // a node of the graph or of the batch, with a list at level lc
        let known = |n: u32, lc: u8| {
            u64::from(n) < end
                && (n < start || usize::from(lc) < plans[(n - start) as usize].lists.len())
                && (n >= start || lc <= self.levels[n as usize])
        };
        if let Some(&(_, n, _)) = rev
            .iter()
            .find(|&&(lc, n, u)| !known(n, lc) || !known(u, lc) || u < start || n == u)
        {
            return Err(HnswError::SlotOutOfOrder {
                expected: start,
                got: n,
            });
        }
        let groups: Vec<&[ReverseLink]> = rev.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)).collect();
        let mut own = [SearchScratch::new()];
        let scratch = if scratch.is_empty() {
            &mut own[..]
        } else {
            scratch
        };
        Ok(par_map(&groups, scratch, |g, s| {
            let (lc, n) = (g[0].0, g[0].1);
            let old: &[u32] = if n >= start {
                &plans[(n - start) as usize].lists[lc as usize]
            } else {
                self.links(n, lc)
            };
            let cap = self.capacity(lc);
            let mut list: Vec<u32> = old.to_vec();
            list.extend(g.iter().map(|&(_, _, u)| u));
            if list.len() > cap {
                let nv = vectors.get(n);
                s.pool.clear();
                s.pool.extend(
                    list.iter()
                        .map(|&e| key(distance(self.metric, nv, vectors.get(e)), e)),
                );
                s.pool.sort_unstable();
                let fill = if lc == 0 { cap - cap / 4 } else { 0 };
                self.select_neighbors(&s.pool, cap, fill, vectors, &mut list);
            }
            (n, lc, list)
        }))
    }

    /// `Ok` if `plans` is a whole batch starting at the graph's end.
    fn check_batch(&self, plans: &[NodePlan]) -> Result<(), HnswError> {
        let start = self.len();
        let whole = plans.len() == BATCH as usize
            && plans
                .iter()
                .enumerate()
                .all(|(i, p)| u64::from(p.slot) == u64::from(start) + i as u64);
        if whole {
            Ok(())
        } else {
            Err(HnswError::SlotOutOfOrder {
                expected: start,
                got: plans.first().map_or(start, |p| p.slot),
            })
        }
    }

    /// Step 3: writes the batch `plans` (the whole batch, in slot order)
    /// and the lists `links` made for them by [`Hnsw::back_links`] on this
    /// same graph. Returns false, changing nothing, when the graph no
    /// longer ends where the batch starts (another caller committed it);
    /// an error, changing nothing, when `plans` is not a whole batch or a
    /// list does not fit its node (over capacity, linking the node to
    /// itself or to a node without that level).
    pub fn commit(&mut self, plans: &[NodePlan], links: &BackLinks) -> Result<bool, HnswError> {
        if plans.first().is_some_and(|p| p.slot != self.len()) {
            return Ok(false);
        }
        self.check_batch(plans)?;
        // Room for every node's upper lists, checked before anything changes.
        let upper: usize = plans
            .iter()
            .map(|p| usize::from(p.level) * self.stride_upper())
            .sum();
        if u32::try_from(self.upper.len() + upper).is_err() {
            return Err(HnswError::Full);
        }
        let total = self.levels.len() + plans.len();
        let level_of = |e: u32| match (e as usize).checked_sub(self.levels.len()) {
            None => self.levels.get(e as usize).copied(),
            Some(i) => plans.get(i).map(|p| p.level),
        };
        // a list of n at lc: within capacity, of nodes other than n that
        // have level lc
        let fits = |n: u32, lc: u8, l: &[u32]| {
            (n as usize) < total
                && l.len() <= self.capacity(lc)
                && l.iter()
                    .all(|&e| e != n && level_of(e).is_some_and(|lv| lv >= lc))
        };
        let bad = plans.iter().any(|p| {
            p.lists.len() != usize::from(p.level) + 1
                || p.lists.iter().enumerate().any(|(lc, l)| {
                    #[allow(clippy::cast_possible_truncation)] // levels <= MAX_LEVEL
                    !fits(p.slot, lc as u8, l)
                })
        }) || links
            .iter()
            .any(|(n, lc, l)| level_of(*n).is_none_or(|lv| *lc > lv) || !fits(*n, *lc, l));
        if bad {
            return Err(HnswError::Format {
                offset: 0,
                reason: "a batch's lists do not fit its nodes",
            });
        }
        for p in plans {
            self.allocate(p.slot, p.level)?;
            for (lc, l) in p.lists.iter().enumerate() {
                #[allow(clippy::cast_possible_truncation)] // levels <= MAX_LEVEL
                self.set_links(p.slot, lc as u8, l);
            }
        }
        for (n, lc, l) in links {
            self.set_links(*n, *lc, l);
        }
        for p in plans {
            if self.entry == NONE || p.level > self.max_level {
                self.entry = p.slot;
                self.max_level = p.level;
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{build, encode, random_vectors, recall};
    use super::*;

    /// Takes every slot it can, as the store does: one at a time below
    /// the first boundary, then batches planned `per_turn` nodes at a time
    /// on `threads` threads.
    fn index(h: &mut Hnsw, v: &FlatVectors, threads: usize, per_turn: u32) {
        let mut scratch: Vec<SearchScratch> = (0..threads).map(|_| SearchScratch::new()).collect();
        loop {
            match h.step(v.len()) {
                Step::Done | Step::Held => return,
                Step::Serial(s) => h.insert(s, v).unwrap(),
                Step::Batch(r) => {
                    let mut nodes = Vec::new();
                    let mut at = r.start;
                    while at < r.end {
                        let to = r.end.min(at + per_turn);
                        nodes.extend(h.plan(at..to, v, &mut scratch).unwrap());
                        at = to;
                    }
                    // the lists a few nodes at a time, as the live indexer
                    // makes them
                    let rev = Hnsw::reverse_links(&nodes);
                    let (mut links, mut at) = (Vec::new(), 0);
                    while at < rev.len() {
                        let to = Hnsw::reverse_links_end(&rev, at, per_turn as usize);
                        links.extend(h.back_links(&nodes, &rev[at..to], v, &mut scratch).unwrap());
                        at = to;
                    }
                    assert!(h.commit(&nodes, &links).unwrap());
                    assert!(!h.commit(&nodes, &links).unwrap(), "a batch commits once");
                }
            }
        }
    }

    #[test]
    fn a_batch_built_graph_is_the_same_on_any_threads_and_finds_neighbours() {
        let (n, dim) = (SERIAL_UNTIL as usize + 12 * BATCH as usize + 17, 24);
        let data = random_vectors(5, n, dim, true);
        let v = FlatVectors { data: &data, dim };
        let params = HnswParams {
            m: 8,
            ef_construction: 64,
            seed: 3,
        };
        let mut one = Hnsw::new(params, Metric::Dot);
        index(&mut one, &v, 1, BATCH);
        // the last, incomplete batch waits
        assert_eq!(one.len(), SERIAL_UNTIL + 12 * BATCH);
        assert_eq!(one.step(v.len()), Step::Held);
        assert_eq!(one.indexable(v.len()), 0);
        for (threads, per_turn) in [(2, BATCH), (3, 5), (1, 1)] {
            let mut other = Hnsw::new(params, Metric::Dot);
            index(&mut other, &v, threads, per_turn);
            assert_eq!(
                encode(&other),
                encode(&one),
                "{threads} threads, {per_turn} a turn"
            );
        }
        // As good a graph as one built a node at a time, over the same
        // slots.
        let indexed = FlatVectors {
            data: &data[..one.len() as usize * dim],
            dim,
        };
        let serial = build(&indexed, params, Metric::Dot);
        let queries = random_vectors(77, 50, dim, true);
        let (b, s) = (
            recall(&one, &indexed, &queries, 10, 48, |_| true),
            recall(&serial, &indexed, &queries, 10, 48, |_| true),
        );
        assert!(b >= s - 0.02 && b > 0.9, "batches {b}, serial {s}");
    }

    #[test]
    fn plans_are_refused_outside_the_next_batch() {
        let (n, dim) = (SERIAL_UNTIL as usize + BATCH as usize, 8);
        let data = random_vectors(9, n, dim, false);
        let v = FlatVectors { data: &data, dim };
        let mut h = Hnsw::new(HnswParams::default(), Metric::L2);
        let mut scratch = vec![SearchScratch::new()];
        // not yet at the boundary
        assert!(h.plan(0..1, &v, &mut scratch).is_err());
        for s in 0..SERIAL_UNTIL {
            h.insert(s, &v).unwrap();
        }
        let end = SERIAL_UNTIL + BATCH;
        assert!(h.plan(SERIAL_UNTIL..end + 1, &v, &mut scratch).is_err());
        assert!(h.plan(SERIAL_UNTIL..end, &v, &mut []).is_err());
        let short = FlatVectors {
            data: &data[..(n - 1) * dim],
            dim,
        };
        assert!(h.plan(SERIAL_UNTIL..end, &short, &mut scratch).is_err());
        // a plan for a graph that has moved on is not committed
        let nodes = h.plan(SERIAL_UNTIL..end, &v, &mut scratch).unwrap();
        let rev = Hnsw::reverse_links(&nodes);
        // only a whole batch is linked, and links stay inside it
        assert!(h.back_links(&nodes[1..], &rev, &v, &mut scratch).is_err());
        let outside = [(0u8, end + 5, SERIAL_UNTIL)];
        assert!(h.back_links(&nodes, &outside, &v, &mut scratch).is_err());
        let links = h.back_links(&nodes, &rev, &v, &mut []).unwrap();
        assert_eq!(links, h.back_links(&nodes, &rev, &v, &mut scratch).unwrap());
        assert!(
            !h.commit(&nodes[1..], &links).unwrap(),
            "not at the graph's end"
        );
        assert!(h.commit(&nodes[..63], &links).is_err(), "not a whole batch");
        let mut self_link = links.clone();
        self_link[0].2 = vec![self_link[0].0];
        assert!(
            h.commit(&nodes, &self_link).is_err(),
            "a node linked to itself"
        );
        // lists that do not fit their nodes are refused, changing nothing
        let before = encode(&h);
        let mut long = links.clone();
        long[0].2 = (0..200).collect();
        assert!(h.commit(&nodes, &long).is_err());
        assert_eq!(encode(&h), before);
        assert!(h.commit(&nodes, &links).unwrap());
        assert_ne!(encode(&h), before);
        assert_eq!(h.len(), end);
    }

    #[test]
    fn steps_are_serial_then_whole_batches_at_fixed_boundaries() {
        let s = SERIAL_UNTIL;
        assert_eq!(step(0, 0), Step::Done);
        assert_eq!(step(0, 5), Step::Serial(0));
        assert_eq!(step(s - 1, s + 500), Step::Serial(s - 1));
        assert_eq!(step(s, s + BATCH - 1), Step::Held);
        assert_eq!(step(s, s + BATCH), Step::Batch(s..s + BATCH));
        assert_eq!(
            step(s + BATCH, s + 3 * BATCH),
            Step::Batch(s + BATCH..s + 2 * BATCH)
        );
        // a graph built before batches ends between boundaries: one at a
        // time up to the next boundary
        assert_eq!(step(s + 5, s + 500), Step::Serial(s + 5));
        let last = s + (u32::MAX - s) / BATCH * BATCH;
        assert_eq!(step(last, u32::MAX), Step::Held);

        assert_eq!(indexable(0, 0), 0);
        assert_eq!(indexable(0, 100), 100);
        assert_eq!(indexable(0, s + BATCH - 1), s);
        assert_eq!(indexable(0, s + 2 * BATCH + 3), s + 2 * BATCH);
        assert_eq!(indexable(s + 5, s + BATCH + 10), BATCH - 5);
        assert_eq!(indexable(s + 5, s + 2 * BATCH + 10), 2 * BATCH - 5);
        assert_eq!(indexable(s + BATCH, s + BATCH + 10), 0);
        // indexable counts exactly the slots the steps take
        for (len, available) in [(0, 3000), (s - 7, s + 200), (s + 9, s + 700), (s, s)] {
            let (mut at, mut taken) = (len, 0);
            loop {
                match step(at, available) {
                    Step::Serial(_) => at += 1,
                    Step::Batch(r) => at = r.end,
                    Step::Done | Step::Held => break,
                }
                taken = at - len;
            }
            assert_eq!(indexable(len, available), taken, "{len} of {available}");
        }
    }
}
