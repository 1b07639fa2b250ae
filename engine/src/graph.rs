//! Graph expansion as a retriever.
//!
//! Seeds: entities whose canonical name or alias matches a phrase of the
//! query (1 to 4 consecutive tokens, compared token by token), plus entities
//! that the other retrievers' best hits are or talk about (an entity hit, a
//! relation's endpoints, an assertion's subject). From the seeds the
//! retriever walks typed relations breadth-first up to
//! [`GRAPH_DEPTH`] hops and returns what it reached, scored by path length
//! (`1 / (1 + hops)`): entities, the relations walked, and the assertions
//! about reached entities.
//!
//! Only eligible nodes and edges are traversed: an ineligible relation is
//! not walked and an ineligible entity is not entered, so the graph never
//! leaks across a tenant or access boundary. (The request's own filters,
//! such as "relations only", restrict what is returned, not what may be
//! walked through.)
//!
//! This module must never read record content beyond names and links.

use std::collections::{BTreeMap, VecDeque};

use roaring::RoaringBitmap;

use crate::lexical::tokens;
use crate::model::RecordType;
use crate::retrieval::{Candidate, Cost, RetrieverOutput};
use crate::state::{Idx, State};

/// Hops of expansion.
pub const GRAPH_DEPTH: usize = 2;
/// Top hits of each other retriever used as seeds.
pub const SEEDS_FROM_HITS: usize = 3;

/// The key under which entity names are indexed: tokens joined by spaces.
pub fn name_key(name: &str) -> String {
    tokens(name).join(" ")
}

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

/// The graph retriever (None when nothing in the query or the hits links
/// to an entity).
/// It walks `traversable` (eligibility without the request's own filters)
/// and returns only records in `result_set`.
pub fn graph_retriever(
    st: &State,
    text: Option<&str>,
    traversable: &RoaringBitmap,
    result_set: &RoaringBitmap,
    prior: &[RetrieverOutput],
    n: usize,
    cost: &mut Cost,
) -> Option<RetrieverOutput> {
    let eligible = traversable;
    let mut seeds: Vec<Idx> = text
        .map(|t| seeds_from_text(st, t, eligible))
        .unwrap_or_default();
    for r in prior {
        for c in r.candidates.iter().take(SEEDS_FROM_HITS) {
            let Some(i) = st.idx(c.id) else { continue };
            let m = st.meta(i);
            let linked: Vec<Idx> = match m.rtype {
                RecordType::Entity => vec![i],
                RecordType::Relation | RecordType::Assertion => {
                    [m.subject, m.object].into_iter().flatten().collect()
                }
                _ => Vec::new(),
            };
            for e in linked {
                if eligible.contains(e) && !seeds.contains(&e) {
                    seeds.push(e);
                }
            }
        }
    }
    if seeds.is_empty() {
        return None;
    }
    // breadth-first expansion over eligible relations and entities
    let mut depth: BTreeMap<Idx, usize> = BTreeMap::new();
    let mut queue = VecDeque::new();
    for &s in &seeds {
        depth.insert(s, 0);
        queue.push_back(s);
    }
    let mut reached: BTreeMap<Idx, usize> = BTreeMap::new();
    while let Some(e) = queue.pop_front() {
        let d = depth[&e];
        reached.entry(e).or_insert(d);
        cost.records_scanned += 1;
        if let Some(about) = st.about.get(&e) {
            for &a in about {
                if eligible.contains(a) {
                    reached.entry(a).or_insert(d);
                }
            }
        }
        if d >= GRAPH_DEPTH {
            continue;
        }
        if let Some(edges) = st.edges.get(&e) {
            for edge in edges {
                if !eligible.contains(edge.relation) || !eligible.contains(edge.other) {
                    continue;
                }
                reached.entry(edge.relation).or_insert(d);
                if let std::collections::btree_map::Entry::Vacant(v) = depth.entry(edge.other) {
                    v.insert(d + 1);
                    queue.push_back(edge.other);
                }
            }
        }
    }
    let mut ranked: Vec<(f64, Idx)> = reached
        .into_iter()
        .filter(|(i, _)| result_set.contains(*i))
        .map(|(i, d)| (1.0 / (1.0 + d as f64), i))
        .collect();
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| st.meta(a.1).id.cmp(&st.meta(b.1).id))
    });
    ranked.truncate(n);
    Some(RetrieverOutput {
        retriever: "graph",
        skipped: None,
        candidates: ranked
            .into_iter()
            .enumerate()
            .map(|(i, (score, idx))| Candidate {
                id: st.meta(idx).id,
                rank: i + 1,
                score,
            })
            .collect(),
    })
}
