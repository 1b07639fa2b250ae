//! Graph expansion as a retriever.
//!
//! Seeds (chosen by `retrieval::search`): entities named in the query (a
//! phrase of 1 to 4 consecutive tokens matching a canonical name or alias,
//! compared token by token), entities named or given by id, and entities
//! that other retrievers' hits are or talk about (an entity hit, a
//! relation's endpoints, an assertion's subject). From the seeds,
//! [`expand`] walks typed relations breadth-first (within a hop range, over
//! chosen predicates, in a chosen direction, up to a node cap) and returns
//! what it reached, scored by path length (`1 / (1 + hops)`): entities, the
//! relations walked, and the assertions about reached entities. A recall's
//! implicit expansion walks up to [`GRAPH_DEPTH`] hops.
//!
//! An entity is one node across its versions: relations and assertions
//! written about an older version of an entity are walked from its current
//! version, and a relation leads to the version of the entity at its other
//! end that is current at the request's cut (now, or as of `AS OF`). Why: a correction of an entity (a fixed name, a new alias)
//! is a newer statement about the same thing; the relations about it still
//! hold, and without this a correction cut the entity off from its graph.
//!
//! Only eligible nodes and edges are traversed: an ineligible relation is
//! not walked and an ineligible entity is not entered, so the graph never
//! leaks across a tenant or access boundary. (The request's own filters,
//! such as "relations only", restrict what is returned, not what may be
//! walked through; the statuses it may select do widen what may be:
//! `Eligibility::traversable`.)
//!
//! This module must never read record content beyond names and links.

use std::collections::{BTreeMap, VecDeque};

use roaring::RoaringBitmap;

use crate::lexical::tokens;
use crate::retrieval::{Candidate, Cost, Direction, RetrieverOutput};
use crate::state::{Idx, State, Sym};

/// Hops of expansion.
pub const GRAPH_DEPTH: usize = 2;
/// Top hits of each other retriever used as seeds.
pub const SEEDS_FROM_HITS: usize = 3;

pub use crate::lexical::name_key;

/// Seeds from the query text: every phrase of 1..=4 tokens naming an entity.
pub fn seeds_from_text(st: &State, text: &str, eligible: &RoaringBitmap) -> Vec<Idx> {
    let toks = tokens(text);
    let mut out = Vec::new();
    let Some(tenant) = eligible.iter().next().map(|i| st.meta(i).tenant) else {
        return out;
    };
    let Some(t) = st.tenants.get(&tenant) else {
        return out;
    };
    for len in (1..=4).rev() {
        for w in toks.windows(len) {
            if let Some(es) = t.entity_names.get(&w.join(" ")) {
                for &e in es {
                    if eligible.contains(e) && !out.contains(&e) {
                        out.push(e);
                    }
                }
            }
        }
    }
    out
}

/// How an expansion walks.
pub struct Walk<'a> {
    /// What it may walk through (eligibility without the request's own
    /// filters).
    pub traversable: &'a RoaringBitmap,
    /// What it may return.
    pub result_set: &'a RoaringBitmap,
    /// Hops returned, `min..=max` (0: the seeds themselves).
    pub hops: (usize, usize),
    /// Relation predicates followed (None: all).
    pub via: Option<&'a [Sym]>,
    /// Which way relations are followed.
    pub direction: Direction,
    /// Nodes reached at most (seeds included).
    pub max_nodes: usize,
}

/// The newest version of `idx`'s correction chain, from `idx` on, that
/// `walkable` holds: the version current at the request's cut (under `AS
/// OF`, the one current then, not now). None when none is.
pub(crate) fn walkable_version(st: &State, idx: Idx, walkable: &RoaringBitmap) -> Option<Idx> {
    let (mut cur, mut best) = (idx, None);
    for _ in 0..=st.len() {
        if walkable.contains(cur) {
            best = Some(cur);
        }
        match st.meta(cur).superseded_by {
            Some(n) => cur = n,
            None => break,
        }
    }
    best
}

/// Expands from entity `seeds` over relations, breadth-first: entities
/// reached, the relations walked and the assertions about reached entities,
/// each scored by its distance (`1 / (1 + hops)`), best first, at most `n`.
/// Only traversable nodes and edges are walked; only records in the result
/// set are returned.
///
/// `seed_records` are records named as seeds that are not entities (a
/// relation, an assertion, an event): they are at hop 0 themselves, as the
/// entity seeds are, and the walk starts from the entities they link.
///
/// A record's hop is its distance from the seeds, the first at which the
/// breadth-first walk meets it: a relation met again from its far end
/// (one hop further) keeps its first hop, so `HOPS 2..2` never returns a
/// relation one hop away.
pub fn expand(
    st: &State,
    (seeds, seed_records): (&[Idx], &[Idx]),
    w: &Walk<'_>,
    n: usize,
    cost: &mut Cost,
) -> RetrieverOutput {
    let mut depth: BTreeMap<Idx, usize> = BTreeMap::new();
    let mut queue = VecDeque::new();
    for &s in seeds {
        if depth.len() >= w.max_nodes {
            break;
        }
        depth.insert(s, 0);
        queue.push_back(s);
    }
    // every record met, at the first (smallest) hop it was met at
    let mut met: BTreeMap<Idx, usize> = BTreeMap::new();
    let note = |i: Idx, d: usize, met: &mut BTreeMap<Idx, usize>| {
        met.entry(i).or_insert(d);
    };
    for &r in seed_records {
        note(r, 0, &mut met);
    }
    while let Some(e) = queue.pop_front() {
        let d = depth[&e];
        note(e, d, &mut met);
        cost.records_scanned += 1;
        // the entity's versions: what was said about any of them
        let m = st.meta(e);
        let versions = if m.supersedes.is_none() && m.superseded_by.is_none() {
            vec![e]
        } else {
            st.chain(e)
        };
        for v in &versions {
            if let Some(about) = st.about.get(v) {
                for &a in about {
                    if w.traversable.contains(a) {
                        note(a, d, &mut met);
                    }
                }
            }
        }
        if d >= w.hops.1 {
            continue;
        }
        for edges in versions.iter().filter_map(|v| st.edges.get(v)) {
            for edge in edges {
                // the entity at the other end, as it stands at the cut
                let Some(other) = walkable_version(st, edge.other, w.traversable) else {
                    continue;
                };
                let dir_ok = match w.direction {
                    Direction::Both => true,
                    Direction::Out => edge.outgoing,
                    Direction::In => !edge.outgoing,
                };
                let pred_ok = w.via.is_none_or(|via| {
                    st.meta(edge.relation)
                        .predicate
                        .is_some_and(|p| via.contains(&p))
                });
                if !dir_ok
                    || !pred_ok
                    || !w.traversable.contains(edge.relation)
                    || !w.traversable.contains(other)
                {
                    continue;
                }
                // A relation is returned only with its far end reached:
                // past `MAX n` nodes, one leading to a new node is not.
                if !depth.contains_key(&other) {
                    if depth.len() >= w.max_nodes {
                        continue;
                    }
                    depth.insert(other, d + 1);
                    queue.push_back(other);
                }
                note(edge.relation, d + 1, &mut met);
            }
        }
    }
    let mut ranked: Vec<(f64, Idx)> = met
        .into_iter()
        .filter(|&(i, d)| d >= w.hops.0 && d <= w.hops.1 && w.result_set.contains(i))
        .map(|(i, d)| (1.0 / (1.0 + d as f64), i))
        .collect();
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| st.meta(a.1).id.cmp(&st.meta(b.1).id))
    });
    ranked.truncate(n);
    RetrieverOutput::ran(
        ranked
            .into_iter()
            .enumerate()
            .map(|(i, (score, idx))| Candidate::of(st, idx, i + 1, score))
            .collect(),
    )
}
