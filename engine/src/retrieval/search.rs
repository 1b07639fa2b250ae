//! The one retrieval path: a [`SearchRequest`] names an eligibility filter,
//! any number of named retrievers (similarity, keyword, recency, graph
//! expansion), a fusion, a limit and lineage to attach. The recall request,
//! the query language and the server all compile to it.
//!
//! Order of work: eligibility bitmap (filter, `as_of`, `valid_at`) ->
//! retrievers in the order given, each restricted to the bitmap (an
//! expansion may walk through records the request's own filter leaves out,
//! never outside the session's world) -> fusion -> limit -> lineage
//! attachment (only records the principal may read) -> manifest.
//!
//! This module must never score, return or attach a record the session may
//! not read.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use roaring::RoaringBitmap;
use serde::Serialize;

use super::eligibility::{Cut, FilterExpr};
use super::{
    Candidate, Cost, FusionInput, Hit, MANIFEST_VERSION, Manifest, ManifestPrincipal, RRF_K,
    RetrieverOutput, Timings, Versions, assert_eligible, lap, us,
};
use crate::db::Session;
use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::lexical::LexicalStats;
use crate::model::{RecordRef, RecordType, check_query_vector, limits};
use crate::state::{Idx, State};

/// Largest candidate budget of one retriever.
pub const TOP_MAX: usize = 10_000;
/// Largest number of retrievers in one request.
pub const RETRIEVERS_MAX: usize = 16;
// Fusion keeps one bit per retriever in a `u32`.
const _: () = assert!(RETRIEVERS_MAX <= 32);
/// Largest number of nodes an expansion may reach.
pub const EXPAND_NODES_MAX: usize = 10_000;
/// Deepest lineage attachment.
pub const ATTACH_DEPTH_MAX: usize = 16;
/// Largest episodic window (neighbours on each side of a hit).
pub const EPISODIC_WINDOW_MAX: usize = 64;
/// Hits of each earlier retriever an implicit expansion starts from.
pub const SEEDS_FROM_HITS: usize = crate::retrieval::graph::SEEDS_FROM_HITS;

mod request;
pub use request::*;

impl Session {
    /// Runs a search request: see the module documentation.
    pub fn search(&self, req: &SearchRequest) -> Result<SearchResponse> {
        let t_total = Instant::now();
        self.db.check_open()?;
        req.validate()?;
        let now = self.db.now();
        let st = self.db.state();
        let held = self.held_labels(&st);
        let cut = Cut {
            as_of: req.as_of,
            valid_at: req.valid_at.unwrap_or(now),
            include_historical: false,
            now,
            include_candidates: false,
        };
        // One clock read per phase: each ends where the next begins (the
        // first, eligibility, counts from the start: checks and the
        // principal's labels are part of deciding who may see what).
        let mut mark = t_total;
        let el =
            st.eligibility_cache
                .compute(&st, self.principal.tenant(), &held, &req.filter, &cut);
        let eligibility_us = lap(&mut mark);
        let mut cost = Cost::default();
        let mut outputs: Vec<RetrieverOutput> = Vec::new();
        let mut times = (0u64, 0u64, 0u64);
        let mut vector_plan = None;

        for (i, spec) in req.retrievers.iter().enumerate() {
            let out = match &spec.params {
                // Weight 0 turns a retriever off: not run, unless a later
                // EXPAND seeds from it by name (then it runs for those
                // seeds only: its hits are no results, see `active`).
                _ if !active(spec) && !seeds_later(&req.retrievers[i + 1..], &spec.name) => {
                    RetrieverOutput::skipped("weight 0: turned off")
                }
                RetrieverParams::Similar {
                    text,
                    vector,
                    model,
                    min,
                    ef,
                } => {
                    let text = text.as_deref().map(str::trim).filter(|t| !t.is_empty());
                    let (mut out, plan) = self.vector_retriever(
                        &st,
                        super::VectorQuery {
                            vector: vector.as_deref(),
                            model: model.as_deref(),
                            ef: *ef,
                            text,
                        },
                        &el,
                        spec.top,
                        &mut cost,
                    )?;
                    if let Some(m) = min {
                        out.candidates.retain(|c| c.score >= *m);
                    }
                    // Fused with other retrievers, a vector orthogonal to
                    // the query, or pointing away from it, is no match: it
                    // would otherwise take a share of the fusion (min-max
                    // gives the best of a poor lot full weight) and seed
                    // the graph. (Alone, a similarity search returns its
                    // nearest, as any vector search does, also beside
                    // retrievers weighted 0, which are as if absent; L2
                    // similarities are never above 0.)
                    if req.retrievers.iter().filter(|s| active(s)).count() > 1
                        && plan
                            .as_ref()
                            .is_some_and(|p| p.metric != crate::vector::distance::Metric::L2.name())
                    {
                        out.candidates.retain(|c| c.score > 0.0);
                    }
                    if vector_plan.is_none() {
                        vector_plan = plan.clone();
                    }
                    out.plan = plan;
                    times.0 += lap(&mut mark);
                    out
                }
                RetrieverParams::Match { text } => {
                    let out = match text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
                        Some(t) => {
                            let mut ls = LexicalStats::default();
                            let hits = st.lexical.search_with(
                                t,
                                &el.bitmap,
                                spec.top,
                                &mut ls,
                                &el.lexical_corpus,
                            );
                            cost.postings_read += ls.postings_read;
                            cost.lexical_docs_scored += ls.docs_scored;
                            RetrieverOutput::ran(
                                hits.iter()
                                    .enumerate()
                                    .map(|(i, h)| Candidate::of(&st, h.doc, i + 1, h.score as f64))
                                    .collect(),
                            )
                        }
                        None => RetrieverOutput::skipped("no query text"),
                    };
                    times.1 += lap(&mut mark);
                    out
                }
                RetrieverParams::Recent => {
                    // After an evidence retriever, recency re-orders what
                    // the retrievers before it found: their records so far,
                    // newest first (the newest of the whole eligible set
                    // are seldom among them, and would re-order nothing),
                    // and nothing when they found nothing (the graph hits
                    // after it would otherwise get recency's weight only
                    // when no text matched). Alone, or before any of them,
                    // it ranks the eligible set.
                    // (a retriever turned off, weight 0, is not one)
                    let before = &req.retrievers[..outputs.len()];
                    let after_evidence = before
                        .iter()
                        .any(|s| active(s) && is_evidence(s.params.kind()));
                    let found: RoaringBitmap;
                    let among = if after_evidence {
                        found = outputs
                            .iter()
                            .zip(before)
                            .filter(|(_, s)| active(s))
                            .flat_map(|(o, _)| o.candidates.iter().map(|c| c.idx))
                            .collect();
                        &found
                    } else {
                        &el.bitmap
                    };
                    let out = super::recency(&st, among, spec.top, &mut cost);
                    times.2 += lap(&mut mark);
                    out
                }
                RetrieverParams::Episodic(w) => {
                    let i = outputs.len();
                    let so_far = fuse(&req.retrievers[..i], &outputs, req.fusion);
                    let out = crate::retrieval::episodic::neighbours(
                        &st, &so_far, &el.bitmap, w, spec.top, &mut cost,
                    );
                    times.2 += lap(&mut mark);
                    out
                }
                RetrieverParams::Expand {
                    seeds,
                    hops,
                    via,
                    direction,
                    max_nodes,
                } => {
                    let earlier = (&req.retrievers[..outputs.len()], &outputs[..]);
                    let seed_idx = self.expansion_seeds(&st, seeds, &el.traversable, earlier);
                    let out = match seed_idx {
                        Some((s, records)) if !s.is_empty() || !records.is_empty() => {
                            // predicates the store never saw match no relation
                            let via_syms: Vec<u32> =
                                via.iter().filter_map(|p| st.strings.get(p)).collect();
                            crate::retrieval::graph::expand(
                                &st,
                                (&s, &records),
                                &crate::retrieval::graph::Walk {
                                    traversable: &el.traversable,
                                    result_set: &el.bitmap,
                                    hops: *hops,
                                    via: (!via.is_empty()).then_some(&via_syms[..]),
                                    direction: *direction,
                                    max_nodes: *max_nodes,
                                },
                                spec.top,
                                &mut cost,
                            )
                        }
                        _ => RetrieverOutput::skipped("no seed entity"),
                    };
                    times.2 += lap(&mut mark);
                    out
                }
            };
            outputs.push(RetrieverOutput {
                retriever: spec.name.as_str().into(),
                kind: spec.params.kind(),
                ..out
            });
        }
        // The invariant the whole design rests on, checked in every build
        // (a few hundred bitmap probes): nothing outside the eligibility
        // bitmap ever became a candidate.
        assert_eligible(&st, &el.bitmap, &outputs);

        // fusion (the time since the last retriever, the check above included)
        let fusion = if req.retrievers.is_empty() {
            listing(&st, &el.bitmap, req.limit, &mut cost)
        } else {
            fuse(&req.retrievers, &outputs, req.fusion)
        };
        let selection: Vec<RecordId> = fusion.iter().take(req.limit).map(|f| f.id).collect();
        let mut hits = Vec::with_capacity(selection.len());
        let mut reader = self.db.frame_reader();
        // the tenant's records past their retention period, asked once
        // for every hit's attachments
        let expired = std::cell::OnceCell::new();
        // the hits' text as the answer writes it (JSON escapes counted)
        let mut answer_text_bytes = 0u64;
        for (i, f) in fusion.iter().take(req.limit).enumerate() {
            // Every fused record is a checked candidate (`assert_eligible`
            // above) or, without retrievers, a member of the bitmap.
            let idx = f.idx;
            let m = st.meta(idx);
            debug_assert!(el.bitmap.contains(idx) && m.id == f.id);
            // (past the answer's text budget, a hit comes without its text,
            // and says so: a thousand hits of a mebibyte each would need
            // gigabytes)
            let text_omitted = req.with_text && answer_text_bytes >= super::HITS_TEXT_BYTES_MAX;
            let (external_id, text) = if req.with_text && !text_omitted {
                self.db.hit_content_with(&st, idx, &mut reader)?
            } else {
                (m.external_id.clone(), None)
            };
            cost.bytes_returned += text.as_ref().map_or(0, |t| t.len() as u64);
            answer_text_bytes += text
                .as_deref()
                .map_or(0, |t| crate::model::json_text_bytes(t) as u64);
            let (sources, derivatives) = if req.attach == Attach::default() {
                (Vec::new(), Vec::new())
            } else {
                let expired = expired.get_or_init(|| self.past_retention_now(&st));
                let seen = (&held, expired);
                self.attach(
                    &st,
                    (idx, req.attach),
                    seen,
                    (req.as_of, cut.valid_at),
                    &el,
                    &mut answer_text_bytes,
                )?
            };
            let historical = el.historical.contains(idx);
            hits.push(Hit {
                rank: i + 1,
                id: m.id,
                external_id,
                score: f.score,
                record: m.rtype.name(),
                kind: st.strings.shared(m.kind),
                status: if historical {
                    "historical"
                } else {
                    el.status(&st, idx).name()
                },
                occurred_at: crate::time::Rfc3339(m.occurred_at),
                historical,
                text,
                text_omitted,
                found_by: f
                    .contributions
                    .iter()
                    .map(|(n, rk, _)| (n.clone(), *rk))
                    .collect(),
                ranks: f
                    .contributions
                    .iter()
                    .map(|(n, rk, _)| {
                        // candidates are in rank order: rank r is at r - 1
                        let score = outputs
                            .iter()
                            .find(|o| &o.retriever == n)
                            .and_then(|o| {
                                o.candidates
                                    .get(rk.wrapping_sub(1))
                                    .filter(|c| c.id == m.id)
                                    .or_else(|| o.candidates.iter().find(|c| c.id == m.id))
                            })
                            .map_or(0.0, |c| c.score);
                        super::RankInfo {
                            retriever: n.clone(),
                            rank: *rk,
                            score,
                        }
                    })
                    .collect(),
                sources,
                derivatives,
            });
        }
        let fusion_us = lap(&mut mark);

        // Facts about whole spaces count records the principal may not
        // read: only the tenant admin sees them.
        let admin = self.acts_as_admin(&st);
        let vector_spaces = st
            .vectors
            .of_tenant(self.principal.tenant())
            .filter(|s| !el.hidden_spaces.contains(&s.model))
            .map(|s| {
                let (n, indexed) = if admin {
                    (s.len() as u64, (s.len() - s.pending()) as u64)
                } else {
                    (0, 0)
                };
                (s.model.clone(), (s.dim, n, indexed))
            })
            .collect();
        if !admin {
            for p in outputs
                .iter_mut()
                .filter_map(|o| o.plan.as_mut())
                .chain(vector_plan.as_mut())
            {
                p.redact();
            }
        }
        let manifest = Manifest {
            query: normalize(req, el.filter.clone(), cut.valid_at),
            principal: ManifestPrincipal {
                tenant: self.principal.tenant_shared(),
                id: self.principal.id_shared(),
                admin,
                labels: held.into_iter().collect(),
            },
            snapshot_lsn: st.tenant(self.principal.tenant()).map_or(0, |t| t.last_lsn),
            versions: Versions {
                engine: env!("CARGO_PKG_VERSION"),
                manifest: MANIFEST_VERSION,
                tokenizer: crate::lexical::terms::TERMS_VERSION,
                vector_spaces,
                hnsw: (
                    self.db.options().hnsw.m,
                    self.db.options().hnsw.ef_construction,
                ),
                embedder: st.embedder.as_ref().map(|e| e.model_id().to_string()),
            },
            eligibility: el.steps.clone(),
            eligible: el.bitmap.len(),
            vector_plan,
            retrievers: outputs,
            fusion_method: match req.fusion {
                Fusion::Rrf { .. } => "weighted_rrf",
                Fusion::Linear { norm: Norm::MinMax } => "linear_minmax",
                Fusion::Linear { norm: Norm::ZScore } => "linear_zscore",
            },
            rrf_k: match req.fusion {
                Fusion::Rrf { k } => k,
                Fusion::Linear { .. } => 0.0,
            },
            fusion,
            selection,
            cost,
            timings: Timings {
                eligibility_us,
                vector_us: times.0,
                lexical_us: times.1,
                other_us: times.2,
                fusion_us,
                total_us: us(t_total),
            },
        };
        Ok(SearchResponse { hits, manifest })
    }

    /// Entity seeds of an expansion, and the records named as seeds that
    /// are not entities (hop 0 themselves; the walk starts from the
    /// entities they link). None: an `EarlierHits` seed found no earlier
    /// retriever output at all; the caller skips then.
    fn expansion_seeds(
        &self,
        st: &State,
        seeds: &[Seed],
        traversable: &RoaringBitmap,
        (specs, earlier): (&[RetrieverSpec], &[RetrieverOutput]),
    ) -> Option<(Vec<Idx>, Vec<Idx>)> {
        let mut out: Vec<Idx> = Vec::new();
        let mut records: Vec<Idx> = Vec::new();
        // The version of a named record that the walk may pass through:
        // itself when it may (current at the cut, or an older version the
        // request selects), otherwise the newest version of its chain that
        // may (an external id names the current version, which under `AS
        // OF` may not have existed at the cut).
        let at_cut = |i: Idx| -> Option<Idx> {
            if traversable.contains(i) {
                return Some(i);
            }
            let first = *st.chain(i).first()?;
            crate::retrieval::graph::walkable_version(st, first, traversable)
        };
        // (in the order found, each once: a membership test by bitmap, as a
        // statement may seed from ten thousand hits)
        let mut taken = RoaringBitmap::new();
        let mut add = |i: Idx, out: &mut Vec<Idx>| {
            if traversable.contains(i) && taken.insert(i) {
                out.push(i);
            }
        };
        let mut records_taken = RoaringBitmap::new();
        // a retriever named twice seeds once
        let mut retrievers_seen: Vec<&str> = Vec::new();
        // entities a record is or talks about, as they stand now (a
        // relation written about an older version leads to the current one)
        let linked = |i: Idx| -> Vec<Idx> {
            let m = st.meta(i);
            let now =
                |e: Idx| crate::retrieval::graph::walkable_version(st, e, traversable).unwrap_or(e);
            match m.rtype {
                RecordType::Entity => vec![now(i)],
                RecordType::Relation | RecordType::Assertion => [m.subject, m.object]
                    .into_iter()
                    .flatten()
                    .map(now)
                    .collect(),
                _ => Vec::new(),
            }
        };
        let tenant = st.tenant(self.principal.tenant())?;
        let tenant_sym = st.tenant_sym(self.principal.tenant());
        for s in seeds {
            match s {
                Seed::Entity { name } => {
                    if let Some(es) = tenant.entity_names.get(&crate::lexical::name_key(name)) {
                        for &e in es {
                            add(e, &mut out);
                        }
                    }
                }
                Seed::Record { reference } => {
                    // (an external id names its chain's current version,
                    // which may be hidden where the version current at an
                    // `AS OF` cut is not, behind a label a later correction
                    // added: the chain it names is found whatever the
                    // labels, and only a version the request may walk,
                    // `traversable`, is taken. An internal id names one
                    // version: never looked up past the labels, so a
                    // hidden one is told from a missing one by nothing;
                    // and text whose id reading names a record, or that
                    // reads two ways, is never a guess.)
                    let by_ext = || {
                        let e = reference.as_external()?;
                        if reference
                            .as_id()
                            .and_then(|id| st.idx_in(tenant_sym?, id))
                            .is_some()
                        {
                            return None;
                        }
                        let ext = RecordRef::External(e.to_string());
                        self.resolve_unfiltered(st, &ext).ok().and_then(at_cut)
                    };
                    let found = match self.resolve_in(st, reference) {
                        Ok(i) => at_cut(i),
                        Err(EngineError::NotFound { .. }) => by_ext(),
                        Err(_) => None,
                    };
                    if let Some(i) = found {
                        if st.meta(i).rtype == RecordType::Entity {
                            add(i, &mut out);
                        } else {
                            if records_taken.insert(i) {
                                records.push(i);
                            }
                            for e in linked(i) {
                                add(e, &mut out);
                            }
                        }
                    }
                }
                Seed::Retriever { name } => {
                    if retrievers_seen.contains(&name.as_str()) {
                        continue;
                    }
                    retrievers_seen.push(name);
                    if let Some(o) = earlier.iter().find(|o| *o.retriever == **name) {
                        for c in &o.candidates {
                            if let Some(i) = st.idx(c.id) {
                                for e in linked(i) {
                                    add(e, &mut out);
                                }
                            }
                        }
                    }
                }
                Seed::Text { text } => {
                    for e in crate::retrieval::graph::seeds_from_text(st, text, traversable) {
                        add(e, &mut out);
                    }
                }
                Seed::EarlierHits { n } => {
                    // hits of the content retrievers: recency's are only
                    // new, not about the query (a query matching nothing
                    // would otherwise expand from the newest records)
                    // (and of the retrievers turned on: a retriever
                    // weighted 0 seeds only when named)
                    let content = earlier
                        .iter()
                        .zip(specs)
                        .filter(|(o, s)| o.kind != RetrieverKind::Recent && active(s));
                    for (o, _) in content {
                        for c in o.candidates.iter().take(*n) {
                            if let Some(i) = st.idx(c.id) {
                                for e in linked(i) {
                                    add(e, &mut out);
                                }
                            }
                        }
                    }
                }
            }
        }
        Some((out, records))
    }

    /// Sources and derivatives of a hit, as far as the principal may read.
    /// Under `as_of`, only records ingested by then, with the status they
    /// had then (a record deleted since is shown deleted, without text).
    /// Their text counts in the answer's text budget (`text_bytes`, the
    /// hits' so far, as JSON writes it): past
    /// [`super::HITS_TEXT_BYTES_MAX`], a linked record comes without it
    /// (`text_omitted`).
    fn attach(
        &self,
        st: &State,
        (idx, attach): (Idx, Attach),
        (held, expired): (&BTreeSet<String>, &RoaringBitmap),
        (as_of, valid_at): (Option<i64>, i64),
        el: &super::eligibility::Eligibility,
        text_bytes: &mut u64,
    ) -> Result<(Vec<Linked>, Vec<Linked>)> {
        let mut walk = |depth_max: Option<usize>, up: bool| -> Result<Vec<Linked>> {
            let Some(depth_max) = depth_max else {
                return Ok(Vec::new());
            };
            let mut seen: BTreeMap<Idx, usize> = BTreeMap::new();
            let mut q = VecDeque::from([(idx, 0usize)]);
            while let Some((i, d)) = q.pop_front() {
                if d >= depth_max {
                    continue;
                }
                let next: Vec<Idx> = if up {
                    st.sources.get(&i).cloned().unwrap_or_default()
                } else {
                    st.dependents
                        .get(&i)
                        .map(|v| v.to_vec())
                        .unwrap_or_default()
                };
                for n in next {
                    if n == idx
                        || seen.contains_key(&n)
                        || !self.target(st, n, held).readable
                        || as_of.is_some_and(|t| st.meta(n).ingested_at > t)
                    {
                        continue;
                    }
                    seen.insert(n, d + 1);
                    q.push_back((n, d + 1));
                }
            }
            let mut out = Vec::with_capacity(seen.len());
            for (i, depth) in seen {
                let m = st.meta(i);
                let readable = self.can_read_listed(st, i, held, expired);
                let text_omitted = *text_bytes >= super::HITS_TEXT_BYTES_MAX;
                let (external_id, text) = if m.tombstone || !readable {
                    (None, None)
                } else if text_omitted {
                    (m.external_id.clone(), None)
                } else {
                    self.db.hit_content(st, i)?
                };
                *text_bytes += text
                    .as_deref()
                    .map_or(0, |t| crate::model::json_text_bytes(t) as u64);
                let external_id = external_id.as_deref().map(str::to_string);
                let (kind, status) =
                    st.shown_kind_and_status(i, el.status(st, i), (valid_at, as_of), expired);
                out.push(Linked {
                    id: m.id,
                    external_id,
                    record: m.rtype.name(),
                    kind: kind.to_string(),
                    status,
                    depth,
                    text,
                    text_omitted: text_omitted && readable && !m.tombstone,
                });
            }
            out.sort_by(|a, b| a.depth.cmp(&b.depth).then(a.id.cmp(&b.id)));
            Ok(out)
        };
        Ok((
            walk(attach.sources, true)?,
            walk(attach.derivatives, false)?,
        ))
    }
}

/// The eligible records newest first: a request without retrievers.
fn listing(
    st: &State,
    eligible: &RoaringBitmap,
    limit: usize,
    cost: &mut Cost,
) -> Vec<FusionInput> {
    cost.records_scanned += eligible.len();
    let mut v: Vec<(i64, RecordId, Idx)> = eligible
        .iter()
        .map(|i| (st.meta(i).occurred_at, st.meta(i).id, i))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    v.truncate(limit);
    v.into_iter()
        .map(|(_, id, idx)| FusionInput {
            id,
            contributions: super::Few::new(),
            score: 0.0,
            idx,
        })
        .collect()
}

/// Fuses the retrievers' candidates. A record found only by recency
/// retrievers is dropped when an evidence retriever (similarity, keyword
/// match, graph expansion) ran: recency re-orders evidence, it is not
/// evidence. Without one, recency is what ranks (and episodic
/// neighbourhoods grow around its hits), so its records stay.
fn fuse(specs: &[RetrieverSpec], outputs: &[RetrieverOutput], fusion: Fusion) -> Vec<FusionInput> {
    fuse_single(specs, outputs, fusion).unwrap_or_else(|| fuse_grouped(specs, outputs, fusion))
}

/// Which retrievers' records are results (bit i: retriever i; 0: all;
/// RETRIEVERS_MAX <= 32): every retriever but recency when an evidence
/// retriever ran, every one otherwise.
fn content_mask(specs: &[RetrieverSpec]) -> u32 {
    if !specs
        .iter()
        .any(|s| active(s) && is_evidence(s.params.kind()))
    {
        return 0;
    }
    specs
        .iter()
        .enumerate()
        .filter(|(_, s)| active(s) && s.params.kind() != RetrieverKind::Recent)
        .fold(0, |m, (i, _)| m | 1 << i)
}

/// Whether a retriever is turned on: weight 0 turns it off (its hits are
/// no results and re-order nothing; it runs only to seed an EXPAND that
/// names it), as if the request did not hold it.
fn active(spec: &RetrieverSpec) -> bool {
    spec.weight > 0.0
}

/// Whether an EXPAND among `later` seeds from the retriever `name`.
fn seeds_later(later: &[RetrieverSpec], name: &str) -> bool {
    later.iter().any(|s| match &s.params {
        RetrieverParams::Expand { seeds, .. } => seeds
            .iter()
            .any(|seed| matches!(seed, Seed::Retriever { name: n } if n == name)),
        _ => false,
    })
}

/// Whether a retriever finds evidence (similarity, keyword match, graph
/// expansion), which recency only re-orders.
fn is_evidence(kind: RetrieverKind) -> bool {
    matches!(
        kind,
        RetrieverKind::Similar | RetrieverKind::Match | RetrieverKind::Expand
    )
}

/// [`fuse`] in general: contributions grouped by record.
fn fuse_grouped(
    specs: &[RetrieverSpec],
    outputs: &[RetrieverOutput],
    fusion: Fusion,
) -> Vec<FusionInput> {
    // (record, retriever index, rank, contribution, record index), in
    // retriever order.
    let total = outputs.iter().map(|o| o.candidates.len()).sum();
    let mut all: Vec<(RecordId, usize, usize, f64, Idx)> = Vec::with_capacity(total);
    for (ri, (spec, r)) in specs.iter().zip(outputs).enumerate() {
        if !active(spec) {
            continue;
        }
        let w = spec.weight;
        let normed: Vec<f64> = match fusion {
            Fusion::Rrf { .. } => Vec::new(),
            Fusion::Linear { norm } => normalize_scores(&r.candidates, norm, spec.params.kind()),
        };
        for (ci, c) in r.candidates.iter().enumerate() {
            let term = match fusion {
                Fusion::Rrf { k } => w / (k + c.rank as f64),
                Fusion::Linear { .. } => w * normed[ci],
            };
            all.push((c.id, ri, c.rank, term, c.idx));
        }
    }
    // By record, then retriever: each record's contributions in retriever
    // order, the order its score adds them in (a retriever names a record
    // once, so the key is unique). With one retriever's candidates, every
    // record is already alone.
    if outputs
        .iter()
        .zip(specs)
        .filter(|(o, s)| active(s) && !o.candidates.is_empty())
        .count()
        > 1
    {
        all.sort_unstable_by_key(|c| (c.0, c.1));
    }
    debug_assert!(
        all.windows(2).all(|w| (w[0].0, w[0].1) != (w[1].0, w[1].1))
            && all.iter().map(|c| c.0).collect::<BTreeSet<_>>().len()
                == all.chunk_by(|a, b| a.0 == b.0).count(),
        "a retriever proposed a record twice"
    );
    let content = content_mask(specs);
    let mut out: Vec<FusionInput> = Vec::with_capacity(all.len());
    out.extend(
        all.chunk_by(|a, b| a.0 == b.0)
            .filter(|g| content == 0 || g.iter().any(|c| content & 1 << c.1 != 0))
            .map(|g| FusionInput {
                id: g[0].0,
                contributions: g
                    .iter()
                    .map(|&(_, ri, rank, term, _)| (outputs[ri].retriever.clone(), rank, term))
                    .collect(),
                score: g.iter().fold(0.0, |s, c| s + c.3),
                idx: g[0].4,
            }),
    );
    // (stable: one retriever's candidates arrive in order, a single run)
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    out
}

/// [`fuse`] when exactly one retriever proposed candidates and it is a
/// content retriever, or no content retriever ran: every record is alone,
/// so the fused list is that retriever's candidates with their terms, made
/// without grouping (None otherwise). The same ranking as the general path
/// (`fuse_single_is_fuse` below holds them equal).
fn fuse_single(
    specs: &[RetrieverSpec],
    outputs: &[RetrieverOutput],
    fusion: Fusion,
) -> Option<Vec<FusionInput>> {
    let mut proposing = outputs
        .iter()
        .enumerate()
        .filter(|&(i, o)| active(&specs[i]) && !o.candidates.is_empty());
    let (ri, r) = proposing.next()?;
    if proposing.next().is_some() {
        return None;
    }
    let content = content_mask(specs);
    if content != 0 && content & 1 << ri == 0 {
        return None;
    }
    debug_assert!(
        r.candidates
            .iter()
            .map(|c| c.id)
            .collect::<BTreeSet<_>>()
            .len()
            == r.candidates.len(),
        "a retriever proposed a record twice"
    );
    let w = specs[ri].weight;
    let normed = match fusion {
        Fusion::Rrf { .. } => Vec::new(),
        Fusion::Linear { norm } => normalize_scores(&r.candidates, norm, specs[ri].params.kind()),
    };
    let mut out: Vec<FusionInput> = r
        .candidates
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            let term = match fusion {
                Fusion::Rrf { k } => w / (k + c.rank as f64),
                Fusion::Linear { .. } => w * normed[ci],
            };
            FusionInput {
                id: c.id,
                contributions: super::Few::one((r.retriever.clone(), c.rank, term)),
                // the general path's sum over one contribution
                score: 0.0 + term,
                idx: c.idx,
            }
        })
        .collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    Some(out)
}

/// A retriever's own scores normalised over its candidates.
fn normalize_scores(c: &[Candidate], norm: Norm, kind: RetrieverKind) -> Vec<f64> {
    if c.is_empty() {
        return Vec::new();
    }
    let s = || c.iter().map(|x| x.score);
    match norm {
        Norm::MinMax => {
            let (lo, hi) = s().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
                (l.min(x), h.max(x))
            });
            if hi > lo {
                s().map(|x| (x - lo) / (hi - lo)).collect()
            } else {
                // Every candidate scored the same: nothing to spread. Full
                // weight if that score says something matched, none if it
                // is zero or below (vectors orthogonal to the query, or
                // pointing away, are no match however few they are).
                // Recency's score is a time, which says nothing of a match:
                // full weight whatever the date (one dated before 1970 is a
                // negative number of milliseconds).
                let matched = kind == RetrieverKind::Recent || lo > 0.0;
                vec![if matched { 1.0 } else { 0.0 }; c.len()]
            }
        }
        Norm::ZScore => {
            let n = c.len() as f64;
            let mean = s().sum::<f64>() / n;
            let sd = (s().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
            if sd > 0.0 {
                s().map(|x| (x - mean) / sd).collect()
            } else {
                vec![0.0; c.len()]
            }
        }
    }
}

fn normalize(
    req: &SearchRequest,
    filter: std::sync::Arc<FilterExpr>,
    valid_at: i64,
) -> NormalizedQuery {
    NormalizedQuery {
        filter,
        as_of: req.as_of.map(crate::time::Rfc3339),
        valid_at: crate::time::Rfc3339(valid_at),
        retrievers: req
            .retrievers
            .iter()
            .map(|r| {
                let (text, vector_dims) = match &r.params {
                    RetrieverParams::Similar { text, vector, .. } => {
                        (text.clone(), vector.as_ref().map(|v| v.len()))
                    }
                    RetrieverParams::Match { text } => (text.clone(), None),
                    _ => (None, None),
                };
                NormalizedRetriever {
                    name: r.name.clone(),
                    kind: r.params.kind(),
                    top: r.top,
                    weight: r.weight,
                    tokens: text
                        .as_deref()
                        .map(crate::lexical::terms::terms_of)
                        .unwrap_or_default(),
                    text,
                    vector_dims,
                    params: r.params.without_vector(),
                }
            })
            .collect(),
        fusion: req.fusion,
        limit: req.limit,
        attach: req.attach,
        with_text: req.with_text,
    }
}

/// Used by tests and tools: an implicit expansion like the recall's.
pub fn implicit_expansion(
    name: &str,
    text: Option<&str>,
    top: usize,
    weight: f64,
) -> RetrieverSpec {
    let mut seeds = Vec::new();
    if let Some(t) = text {
        seeds.push(Seed::Text {
            text: t.to_string(),
        });
    }
    seeds.push(Seed::EarlierHits { n: SEEDS_FROM_HITS });
    RetrieverSpec {
        name: name.to_string(),
        top,
        weight,
        params: RetrieverParams::Expand {
            seeds,
            hops: (0, crate::retrieval::graph::GRAPH_DEPTH),
            via: Vec::new(),
            direction: Direction::Both,
            max_nodes: EXPAND_NODES_MAX,
        },
    }
}

#[cfg(test)]
mod tests;
