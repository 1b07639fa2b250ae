//! Retrieval: eligibility first, then separate candidate generators, then
//! fusion, with a manifest that explains and replays every step.
//!
//! ```text
//! request --> eligibility bitmap --> vector  (exact scan | filtered HNSW) --+
//!                               \--> lexical (BM25 over eligible docs)  ---+--> linear fusion --> top k
//!                               \--> recency (newest eligible)          ---+
//!                               \--> graph   (entity expansion; see graph)-+
//!                               \--> episodic (neighbours in time)      ---+
//! ```
//!
//! **Planner** (vector retriever; [`plan`]). Let `E` be the number of
//! eligible records that have a vector in the space and `s = E / |space|`
//! its selectivity. A cost model with measured constants compares
//! - an exact scan of the eligible vectors: full precision below 128,
//!   int8 codes with a proven error bound and full-precision re-ranking of
//!   the few that may be among the best above (exact either way), with
//! - a walk of the HNSW graph with the eligibility test *inside* the
//!   traversal: every node routes the search, only eligible nodes enter the
//!   result list; `ef` is raised for moderate selectivity (`ef / sqrt(s)`,
//!   capped at 8x) since fewer visited nodes qualify; vectors not yet in
//!   the graph (indexing runs off the write path) are scanned exactly and
//!   merged.
//!
//! The chosen plan is in the manifest.
//!
//! **Fusion** of a recall ([`RECALL_FUSION`]): linear over min-max
//! normalised scores, `score(d) = sum over retrievers r of w_r x
//! norm_r(d)`; ties broken by id (a statement may ask for weighted
//! reciprocal rank fusion instead, `FUSE RRF`). Default weights: vector
//! 1.0, lexical 1.0, episodic 0.7, graph 0.5, recency 0.1; a weight of 0
//! turns a retriever off. Recency only re-orders records that a content retriever
//! (vector, lexical, graph) found; a record found by recency alone is not
//! returned, unless no content retriever ran (recency, perhaps with the
//! episodic neighbourhood of its hits, is then what ranks).
//!
//! This module must never score a record outside the eligibility bitmap;
//! every build asserts it for every candidate list and every hit.

mod answer;
pub mod eligibility;
pub mod episodic;
pub mod graph;
pub mod plan;
pub mod search;

use std::collections::BTreeSet;
use std::time::Instant;

use roaring::RoaringBitmap;
use serde::Serialize;

use crate::db::Session;
use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::model::{check_query_vector, limits};
use crate::state::{Idx, State};
use crate::vector::hnsw::{SearchScratch, SearchStats};
pub use answer::*;
pub use eligibility::{Cut, Eligibility, FilterExpr, Filters, StatusClass, Step};
pub use search::{
    Attach, Direction, Fusion, Linked, Norm, NormalizedQuery, RetrieverKind, RetrieverParams,
    RetrieverSpec, SearchRequest, SearchResponse, Seed,
};

/// How a recall fuses its retrievers: a weighted sum of min-max
/// normalised scores (docs/retrieval.md, "Fusion", says why not RRF).
pub const RECALL_FUSION: Fusion = Fusion::Linear { norm: Norm::MinMax };

/// Bytes of text one answer's hits carry at most (16 MiB): the hits past
/// it come without their text, marked `text_omitted` (read them by id). A
/// thousand hits of a mebibyte each would otherwise need gigabytes.
pub const HITS_TEXT_BYTES_MAX: u64 = 16 << 20;
/// Default weight of the recall's episodic retriever.
pub const DEFAULT_EPISODIC_WEIGHT: f64 = 0.7;
/// Version of the manifest layout.
pub const MANIFEST_VERSION: u32 = 1;
/// Default reciprocal-rank-fusion constant.
pub const RRF_K: f64 = 60.0;
/// Default ef_search.
pub const EF_DEFAULT: usize = 64;
/// Candidates each retriever contributes to fusion, as a multiple of k.
pub const CANDIDATES_PER_K: usize = 3;

/// Which retrievers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Vector + lexical + recency (+ graph when entities match).
    #[default]
    Hybrid,
    /// Vector only.
    Vector,
    /// Lexical only.
    Lexical,
}

impl Mode {
    /// Parses `hybrid`, `vector`, `lexical`.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "hybrid" => Some(Mode::Hybrid),
            "vector" => Some(Mode::Vector),
            "lexical" => Some(Mode::Lexical),
            _ => None,
        }
    }
}

/// Fusion weights.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Weights {
    /// Vector retriever.
    pub vector: f64,
    /// Lexical retriever.
    pub lexical: f64,
    /// Recency retriever.
    pub recency: f64,
    /// Graph retriever.
    pub graph: f64,
    /// Episodic-neighbourhood retriever (the turns around the best hits).
    pub episodic: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            vector: 1.0,
            lexical: 1.0,
            recency: 0.1,
            graph: 0.5,
            episodic: DEFAULT_EPISODIC_WEIGHT,
        }
    }
}

/// A retrieval request (plain data: the CLI, the query language and the
/// server all build one of these).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecallRequest {
    /// Query text.
    pub text: Option<String>,
    /// Query vector (shared: the search a recall compiles to takes it
    /// without a copy; `Vec<f32>` converts with `.into()`).
    #[serde(skip)]
    pub vector: Option<std::sync::Arc<[f32]>>,
    /// Vector space (model id); may be left out when the store has one.
    pub model: Option<String>,
    /// Retrievers.
    pub mode: Mode,
    /// Results.
    pub k: usize,
    /// ef_search (default 64).
    pub ef: Option<usize>,
    /// Filters.
    pub filters: Filters,
    /// Transaction-time cut: what the store knew then.
    pub as_of: Option<i64>,
    /// Valid-time point: what was true then (default: now).
    pub valid_at: Option<i64>,
    /// Keep records whose validity ended (labelled historical).
    pub include_historical: bool,
    /// Fusion weights.
    pub weights: Weights,
    /// Return the manifest.
    pub explain: bool,
    /// Hits carry their text (default). False: ids, scores and the
    /// manifest only, with no log read per hit ([`SearchRequest::with_text`]).
    pub with_text: bool,
}

impl Default for RecallRequest {
    fn default() -> Self {
        RecallRequest {
            text: None,
            vector: None,
            model: None,
            mode: Mode::Hybrid,
            k: 10,
            ef: None,
            filters: Filters::default(),
            as_of: None,
            valid_at: None,
            include_historical: false,
            weights: Weights::default(),
            explain: false,
            with_text: true,
        }
    }
}

impl RecallRequest {
    /// A text query.
    pub fn text(t: impl Into<String>) -> Self {
        RecallRequest {
            text: Some(t.into()),
            ..Self::default()
        }
    }
    /// A vector query.
    pub fn vector(model: Option<&str>, v: Vec<f32>) -> Self {
        RecallRequest {
            vector: Some(v.into()),
            model: model.map(str::to_string),
            mode: Mode::Vector,
            ..Self::default()
        }
    }
}

fn validate(req: &RecallRequest) -> Result<()> {
    if req.k == 0 || req.k > limits::K_MAX {
        return Err(EngineError::invalid(
            "k",
            format!("{} is out of range 1..={}", req.k, limits::K_MAX),
        ));
    }
    if let Some(ef) = req.ef {
        if ef == 0 || ef > limits::EF_MAX {
            return Err(EngineError::invalid(
                "ef",
                format!("{ef} is out of range 1..={}", limits::EF_MAX),
            ));
        }
    }
    // An empty name matches nothing (no record is written with one): a
    // filter holding one is a mistake, not a question with no answer.
    let f = &req.filters;
    for (field, values) in [
        ("user", &f.users),
        ("conversation", &f.conversations),
        ("agent", &f.agents),
        ("label", &f.scope_labels),
        ("kind", &f.kinds),
    ] {
        if values.iter().any(|v| v.is_empty()) {
            return Err(EngineError::invalid(
                field,
                "an empty value matches nothing; leave it out",
            ));
        }
        // nor does one no record may hold (a control character, spaces
        // around it, past the length of a name)
        for v in values {
            crate::model::check_name(field, v)?;
        }
    }
    let text = req.text.as_deref().map(str::trim).filter(|t| !t.is_empty());
    if let Some(t) = &req.text {
        if t.len() > limits::QUERY_TEXT_BYTES_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "query text length in bytes".into(),
                limit: limits::QUERY_TEXT_BYTES_MAX as u64,
                got: t.len() as u64,
            });
        }
    }
    // (The search this recall compiles to checks it again; checked here
    // too, so a caller checking requests before running any, `engram
    // eval`, finds a zero vector before the first case runs.)
    if let Some(v) = &req.vector {
        check_query_vector("vector", v)?;
    }
    match req.mode {
        Mode::Lexical if text.is_none() => {
            return Err(EngineError::invalid(
                "text",
                "lexical retrieval needs a non-empty query text",
            ));
        }
        Mode::Vector if text.is_none() && req.vector.is_none() => {
            return Err(EngineError::invalid(
                "vector",
                "vector retrieval needs a query vector, or a text and a configured embedder",
            ));
        }
        Mode::Hybrid if text.is_none() && req.vector.is_none() => {
            return Err(EngineError::invalid(
                "text",
                "empty query: give a text and/or a vector",
            ));
        }
        _ => {}
    }
    // (a model is a name as a record's is: an overlong one is refused
    // before any message quotes it)
    if let Some(m) = &req.model {
        crate::model::check_name("model", m)?;
    }
    for (f, w) in [
        ("weights.vector", req.weights.vector),
        ("weights.lexical", req.weights.lexical),
        ("weights.recency", req.weights.recency),
        ("weights.graph", req.weights.graph),
        ("weights.episodic", req.weights.episodic),
    ] {
        if !w.is_finite() || !(0.0..=limits::WEIGHT_MAX).contains(&w) {
            return Err(EngineError::invalid(
                f,
                format!("must be a number in 0..={}", limits::WEIGHT_MAX),
            ));
        }
    }
    // A weight of 0 turns its retriever off; with every one off nothing
    // would rank the records.
    let w = &req.weights;
    let only = match req.mode {
        Mode::Vector => Some(("weights.vector", w.vector, "vector")),
        Mode::Lexical => Some(("weights.lexical", w.lexical, "lexical")),
        Mode::Hybrid => None,
    };
    if let Some((field, weight, name)) = only
        && weight == 0.0
    {
        return Err(EngineError::invalid(
            field,
            format!(
                "0 turns the {name} retriever off, and a {name} recall (mode {name}, or a request \
                 giving only a {}) runs no other: leave the weight out",
                if name == "vector" { "vector" } else { "text" }
            ),
        ));
    }
    // Recency, graph and episodic re-rank and widen what the content
    // retrievers find: with both of those off, nothing is found by content
    // (recency alone would list the newest records, whatever the query).
    if req.mode == Mode::Hybrid && w.vector == 0.0 && w.lexical == 0.0 {
        return Err(EngineError::invalid(
            "weights",
            "weights.vector and weights.lexical are both 0 (0 turns a retriever off): a recall \
             needs a content retriever; leave one out to keep its default, or give it a weight \
             above 0",
        ));
    }
    if let (Some(a), Some(b)) = (req.filters.occurred_after, req.filters.occurred_before) {
        if a > b {
            return Err(EngineError::invalid(
                "filters",
                "occurred_after is later than occurred_before",
            ));
        }
    }
    Ok(())
}

pub(crate) fn us(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Microseconds since `mark`, which moves to now: consecutive phases
/// timed with one clock read each.
pub(crate) fn lap(mark: &mut Instant) -> u64 {
    let now = Instant::now();
    let d = now.duration_since(*mark);
    *mark = now;
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

thread_local! {
    /// Per-thread search buffers (visited marks, heaps), reused across queries.
    static SCRATCH: std::cell::RefCell<SearchScratch> = std::cell::RefCell::new(SearchScratch::new());
}

/// Top `k` of `(idx, distance)` by distance then id, as similarity-ranked candidates.
fn top_k(mut v: Vec<(Idx, f32)>, k: usize, st: &State) -> Vec<(Idx, f32)> {
    let cmp = |a: &(Idx, f32), b: &(Idx, f32)| {
        a.1.total_cmp(&b.1)
            .then_with(|| st.meta(a.0).id.cmp(&st.meta(b.0).id))
    };
    // A few dozen are sorted outright: a selection first costs more there.
    if k > 0 && v.len() > 4 * k {
        v.select_nth_unstable_by(k - 1, cmp);
        v.truncate(k);
    }
    // (the order is total: ids are unique)
    v.sort_unstable_by(cmp);
    v.truncate(k);
    v
}

impl RecallRequest {
    /// The search request this recall means: the classic filters as an
    /// expression, and the mode's retrievers under the names manifests
    /// have always used (`vector`, `lexical`, `recency`, `graph`).
    pub fn to_search(&self) -> SearchRequest {
        let text = self
            .text
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        // One retriever (vector or lexical mode) needs no extra candidates
        // for fusion to choose from.
        let top = if self.mode != Mode::Hybrid {
            self.k
        } else {
            (self.k * CANDIDATES_PER_K).max(self.k)
        };
        let mut retrievers = Vec::new();
        // In hybrid mode every retriever is there, and a weight of 0 turns
        // one off as it does in a statement (the search does not run it;
        // its manifest entry says so), so a recall and the statement that
        // says the same have the same manifest. The implicit graph
        // expansion, which no statement can name, is left out at 0. (A
        // mode naming one retriever refuses its weight at 0:
        // `check_recall`.)
        let hybrid = self.mode == Mode::Hybrid;
        if self.mode != Mode::Lexical {
            retrievers.push(RetrieverSpec {
                name: "vector".into(),
                top,
                weight: self.weights.vector,
                params: RetrieverParams::Similar {
                    // (a client's vector is what is searched: the text is
                    // the lexical retriever's, as `SIMILAR TO $v` says)
                    text: text.clone().filter(|_| self.vector.is_none()),
                    vector: self.vector.clone(),
                    model: self.model.clone(),
                    min: None,
                    ef: self.ef,
                },
            });
        }
        if self.mode != Mode::Vector {
            retrievers.push(RetrieverSpec {
                name: "lexical".into(),
                top,
                weight: self.weights.lexical,
                params: RetrieverParams::Match { text: text.clone() },
            });
        }
        if hybrid {
            retrievers.push(RetrieverSpec {
                name: "recency".into(),
                top,
                weight: self.weights.recency,
                params: RetrieverParams::Recent,
            });
        }
        if hybrid && self.weights.graph > 0.0 {
            retrievers.push(search::implicit_expansion(
                "graph",
                text.as_deref(),
                top,
                self.weights.graph,
            ));
        }
        if hybrid {
            retrievers.push(RetrieverSpec {
                name: "episodic".into(),
                top,
                weight: self.weights.episodic,
                params: RetrieverParams::Episodic(episodic::DEFAULT),
            });
        }
        SearchRequest {
            filter: FilterExpr::from_filters(&self.filters, self.include_historical),
            as_of: self.as_of,
            valid_at: self.valid_at,
            retrievers,
            fusion: RECALL_FUSION,
            limit: self.k,
            attach: Attach::default(),
            with_text: self.with_text,
        }
    }
}

impl Session {
    /// Retrieves the records most relevant to `req` among those the session
    /// may see: the search its [`RecallRequest::to_search`] means.
    pub fn recall(&self, req: &RecallRequest) -> Result<RecallResponse> {
        self.check_recall(req)?;
        self.search(&req.to_search())
    }

    /// The checks [`Session::recall`] makes before it searches: limits and
    /// parameters, a vector-mode text without an embedder, and a text with
    /// a `model` the embedder does not make. For callers
    /// that check a whole set of requests before running any (`engram
    /// eval`), or that run a request through [`Session::search`] with
    /// other settings.
    pub fn check_recall(&self, req: &RecallRequest) -> Result<()> {
        self.db.check_open()?;
        validate(req)?;
        let has_text = req.text.as_deref().is_some_and(|t| !t.trim().is_empty());
        if req.mode == Mode::Vector
            && req.vector.is_none()
            && has_text
            && self.db.options().embedder.is_none()
        {
            return Err(EngineError::invalid(
                "vector",
                "vector retrieval of a text needs a built-in embedder (none is in use for \
                 this store as opened: clients send vectors); pass a query vector, or use \
                 mode hybrid or lexical",
            ));
        }
        // A text names no vector space but the embedder's: another model
        // would leave the vector retriever with nothing to compare, and a
        // misspelt model would answer with a confident, emptier result.
        if let (None, Some(m), true, false) =
            (&req.vector, &req.model, has_text, req.mode == Mode::Lexical)
        {
            match self.db.options().embedder.as_ref() {
                Some(e) if e.model_id() == m.as_str() => {}
                Some(e) => {
                    return Err(EngineError::invalid(
                        "model",
                        format!(
                            "the store's embedder makes '{}' vectors, so a text cannot be \
                             compared in '{m}'; drop model, or pass a '{m}' query vector",
                            e.model_id()
                        ),
                    ));
                }
                None => {
                    return Err(EngineError::invalid(
                        "model",
                        format!(
                            "this store has no embedder, so a text cannot be compared in \
                             '{m}'; pass a '{m}' query vector, or drop model"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn vector_retriever(
        &self,
        st: &State,
        q: VectorQuery<'_>,
        el: &Eligibility,
        n: usize,
        cost: &mut Cost,
    ) -> Result<(RetrieverOutput, Option<VectorPlan>)> {
        let text = q.text;
        let skipped = |why: String| Ok((RetrieverOutput::skipped(why), None));
        let tenant = self.principal.tenant();
        // The tenant's spaces this principal sees, and their model ids for
        // errors.
        let shown = |s: &&crate::vector::space::VectorSpace| !el.hidden_spaces.contains(&s.model);
        let models = || {
            let mut m: Vec<String> = st
                .vectors
                .of_tenant(tenant)
                .filter(shown)
                .map(|s| s.model.clone())
                .collect();
            m.sort();
            m
        };
        // Which space, and where the query vector comes from.
        let (space, query, source) = match (q.vector, q.model) {
            (Some(v), model) => {
                let space = match model {
                    Some(m) => st.vectors.get(tenant, m).filter(shown).ok_or_else(|| {
                        EngineError::UnknownModel {
                            reason: format!("no vectors for model '{m}'"),
                            available: models(),
                        }
                    })?,
                    None => {
                        let mut spaces = st.vectors.of_tenant(tenant).filter(shown);
                        match (spaces.next(), spaces.next()) {
                            (Some(s), None) => s,
                            (None, _) => {
                                return Err(EngineError::UnknownModel {
                                    reason: "the query has a vector but the store has no vectors"
                                        .into(),
                                    available: models(),
                                });
                            }
                            (Some(_), Some(_)) => {
                                return Err(EngineError::UnknownModel {
                                    reason: "the store has several vector spaces: say which with `model`"
                                        .into(),
                                    available: models(),
                                });
                            }
                        }
                    }
                };
                if v.len() != space.dim {
                    return Err(EngineError::DimensionMismatch {
                        item: None,
                        field: "vector".into(),
                        model: space.model.clone(),
                        expected: space.dim,
                        got: v.len(),
                    });
                }
                (space, space.prepare_query(v), "request".into())
            }
            (None, _) => {
                let (Some(emb), Some(t)) = (st.embedder.as_ref(), text) else {
                    return skipped(if text.is_none() {
                        "no query vector or text".into()
                    } else {
                        "no query vector and no embedder configured".into()
                    });
                };
                if let Some(m) = q.model {
                    if m != emb.model_id() {
                        return skipped(format!(
                            "no query vector for model '{m}' (the embedder produces '{}')",
                            emb.model_id()
                        ));
                    }
                }
                // (a space of vectors this principal cannot read is told
                // apart from none at all by nothing, as with a request vector)
                let Some(space) = st.vectors.get(tenant, emb.model_id()).filter(shown) else {
                    return skipped(format!(
                        "no vectors yet for the embedder's model '{}'",
                        emb.model_id()
                    ));
                };
                (
                    space,
                    std::borrow::Cow::Owned(space.prepare_owned(emb.embed(t))),
                    emb.model_id().to_string().into(),
                )
            }
        };
        let in_space = el
            .space_shares
            .get_or_make((space.uid, space.len()), || &el.bitmap & &space.members);
        let in_space = &*in_space;
        let e = in_space.len();
        let size = space.len() as u64;
        let selectivity = if size == 0 {
            0.0
        } else {
            e as f64 / size as f64
        };
        let ef_req = q.ef.unwrap_or(EF_DEFAULT);
        let mut stats = SearchStats::default();
        let indexed_slots = space.hnsw.read().len();
        let plan = plan::plan_vector_as(
            &plan::PlanInput {
                eligible: e,
                space_size: size,
                ef: ef_req,
                n,
                ef_max: limits::EF_MAX,
                quantized_min: space.scans_codes_from(),
                dim: space.dim,
                walk_codes: space.walks_codes(indexed_slots),
            },
            &plan::COSTS,
            self.db.options().vector_plan,
        );
        // Every vector of the space is eligible: a walk needs no filter.
        let whole_space = in_space.len() == size;
        let (mut found, strategy, ef_used, unindexed) = match plan {
            plan::Plan::Exact { .. } => {
                cost.records_scanned += e;
                let r = space.exact_top(&query, in_space, n, None, &mut stats);
                (r, "exact", 0, 0)
            }
            plan::Plan::Prefiltered { keep, .. } => {
                cost.records_scanned += e;
                let r = space.exact_top(&query, in_space, n, Some(keep), &mut stats);
                (r, "prefiltered", 0, 0)
            }
            plan::Plan::Walk { ef, .. } => {
                let all = whole_space;
                let allow = |idx: Idx| in_space.contains(idx);
                let (mut r, indexed) = SCRATCH.with(|cell| {
                    let mut scratch = cell.borrow_mut();
                    if all {
                        space.graph_search(&query, n, ef, None, &mut scratch, &mut stats)
                    } else {
                        space.graph_search(&query, n, ef, Some(&allow), &mut scratch, &mut stats)
                    }
                });
                // vectors not yet in the graph: exact
                let tail: Vec<Idx> = space.slot_to_idx[indexed as usize..]
                    .iter()
                    .copied()
                    .filter(|i| in_space.contains(*i))
                    .collect();
                cost.records_scanned += tail.len() as u64;
                r.extend(space.exact(&query, tail.iter().copied(), &mut stats));
                (r, "hnsw", ef, tail.len() as u64)
            }
        };
        cost.distance_computations += stats.distance_computations;
        cost.graph_nodes_visited += stats.nodes_visited;
        found = top_k(found, n, st);
        let metric = space.metric;
        let candidates = found
            .iter()
            .enumerate()
            .map(|(i, (idx, d))| Candidate::of(st, *idx, i + 1, similarity(metric, *d) as f64))
            .collect();
        Ok((
            RetrieverOutput::ran(candidates),
            Some(VectorPlan {
                model: space.model.clone(),
                metric: metric.name(),
                eligible_in_space: e,
                space_size: Some(size),
                selectivity: Some(selectivity),
                strategy,
                reason: PlanReason {
                    eligible: e,
                    selectivity,
                    plan,
                    whole_space,
                    redacted: false,
                    forced: Some(self.db.options().vector_plan)
                        .filter(|c| *c != plan::PlanChoice::Auto),
                },
                ef_requested: ef_req,
                ef_used: Some(ef_used),
                indexed: Some(indexed_slots as u64),
                unindexed_scanned: unindexed,
                query_vector: source,
            }),
        ))
    }
}

/// Similarity shown to users from an internal distance: cosine and dot
/// spaces show the inner product, L2 the negative squared distance.
fn similarity(metric: crate::vector::distance::Metric, d: f32) -> f32 {
    use crate::vector::distance::Metric;
    match metric {
        Metric::Cosine | Metric::Dot => -d,
        Metric::L2 => -d,
    }
}

pub(crate) fn recency(
    st: &State,
    eligible: &RoaringBitmap,
    n: usize,
    cost: &mut Cost,
) -> RetrieverOutput {
    let mut scanned = 0u64;
    let v = newest(
        eligible.iter().rev().map(|i| {
            scanned += 1;
            let m = st.meta(i);
            // (no prefix maximum: no early stop, never a wrong one)
            let rest_max = st.occurred_prefix_max.get(i as usize).copied();
            (m.occurred_at, m.id, i, rest_max.unwrap_or(i64::MAX))
        }),
        n,
    );
    cost.records_scanned += scanned;
    RetrieverOutput::ran(
        v.into_iter()
            .enumerate()
            .map(|(i, (t, id, idx))| Candidate {
                id,
                rank: i + 1,
                score: t as f64,
                idx,
            })
            .collect(),
    )
}

/// The `n` largest `(occurred_at, id)` pairs, largest first, kept in a
/// bounded min-heap. Each item carries the latest time of any item that
/// can follow it (its prefix maximum, items coming newest index first):
/// once the heap is full and that is older than the heap's oldest, the
/// rest cannot enter and are never read. Records are mostly appended in
/// time order, so this reads about `n` records instead of every eligible
/// one; with times in no order it reads them all and is still exact.
/// Each item's index rides along (ids are unique, so it never decides an
/// order).
fn newest(
    items: impl Iterator<Item = (i64, RecordId, Idx, i64)>,
    n: usize,
) -> Vec<(i64, RecordId, Idx)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    if n == 0 {
        return Vec::new();
    }
    let mut heap: BinaryHeap<Reverse<(i64, RecordId, Idx)>> = BinaryHeap::with_capacity(n + 1);
    for (t, id, idx, rest_max) in items {
        if heap.len() == n && heap.peek().is_some_and(|Reverse(min)| rest_max < min.0) {
            break;
        }
        let x = (t, id, idx);
        if heap.len() < n {
            heap.push(Reverse(x));
        } else if heap.peek().is_some_and(|Reverse(min)| x > *min) {
            heap.pop();
            heap.push(Reverse(x));
        }
    }
    // Ascending by Reverse is descending by the pair.
    heap.into_sorted_vec()
        .into_iter()
        .map(|Reverse(x)| x)
        .collect()
}

/// Panics if any candidate of any retriever is outside the eligibility
/// bitmap: a forbidden record reaching ranking is a bug that must stop the
/// read, never a result.
pub(crate) fn assert_eligible(
    st: &State,
    eligible: &RoaringBitmap,
    retrievers: &[RetrieverOutput],
) {
    for r in retrievers {
        for c in &r.candidates {
            // The candidate's index is eligible and holds its id (one read
            // of the record table, no lookup by id).
            let ok = eligible.contains(c.idx)
                && (c.idx as usize) < st.len()
                && st.meta(c.idx).id == c.id;
            assert!(
                ok,
                "invariant violated: retriever {} proposed {}, which is not eligible",
                r.retriever, c.id
            );
        }
    }
}

/// Ids of a candidate list, for tests and tools.
pub fn candidate_ids(r: &RetrieverOutput) -> BTreeSet<RecordId> {
    r.candidates.iter().map(|c| c.id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_retriever_takes_k_candidates_and_hybrid_takes_more() {
        for (mode, want) in [
            (Mode::Lexical, 3),
            (Mode::Vector, 3),
            (Mode::Hybrid, 3 * CANDIDATES_PER_K),
        ] {
            let req = RecallRequest {
                mode,
                k: 3,
                ..RecallRequest::text("checkout")
            };
            let search = req.to_search();
            assert!(
                search.retrievers.iter().all(|r| r.top == want),
                "{mode:?}: {:?}",
                search.retrievers
            );
        }
    }

    /// A plan's reason is the planner's figures written out when shown,
    /// the same text serialized; redacted, it keeps only the eligible
    /// count and the strategy.
    #[test]
    fn plan_reasons_read_as_sentences_and_redaction_drops_the_figures() {
        let reason = |plan, whole_space, redacted| PlanReason {
            eligible: 20,
            selectivity: 0.001,
            plan,
            whole_space,
            redacted,
            forced: None,
        };
        let exact = plan::Plan::Exact {
            cost_ns: 2_400.0,
            walk_ns: 91_000.0,
        };
        let r = reason(exact.clone(), false, false);
        assert_eq!(
            r.to_string(),
            "20 eligible vectors, selectivity 0.0010: exact scan (estimated 2 us) over a filtered graph walk (91 us)"
        );
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::Value::String(r.to_string())
        );
        let walk = plan::Plan::Walk {
            ef: 64,
            cost_ns: 300_000.0,
            scan_ns: 900_000.0,
        };
        assert!(
            reason(walk.clone(), true, false)
                .to_string()
                .contains(": graph walk (estimated 300 us)")
        );
        assert!(
            reason(walk.clone(), false, false)
                .to_string()
                .contains("filtered graph walk with raised ef")
        );
        let pre = plan::Plan::Prefiltered {
            keep: 512,
            cost_ns: 1.0,
            scan_ns: 2.0,
            walk_ns: 3.0,
        };
        // A forced plan says so, redacted or not; a forced plan that does
        // not apply says the exact scan ran instead.
        for redacted in [false, true] {
            let forced = PlanReason {
                forced: Some(plan::PlanChoice::Walk),
                ..reason(walk.clone(), false, redacted)
            };
            assert!(
                forced
                    .to_string()
                    .ends_with("; forced by the store's vector_plan option"),
                "{forced}"
            );
            let fell_back = PlanReason {
                forced: Some(plan::PlanChoice::Prefiltered),
                ..reason(exact.clone(), false, redacted)
            };
            assert!(
                fell_back.to_string().ends_with(
                    "; the store's vector_plan option asks for prefiltered, which does not apply here"
                ),
                "{fell_back}"
            );
        }
        for (p, how) in [
            (exact, "exact scan"),
            (walk, "filtered graph walk"),
            (pre, "sign-bit prefilter, then an exact scan"),
        ] {
            assert_eq!(
                reason(p, false, true).to_string(),
                format!("20 eligible vectors: {how}")
            );
        }
    }

    #[test]
    fn a_retriever_name_compares_and_serializes_as_its_string() {
        let n = RetrieverName::from("vector");
        assert_eq!(n, "vector");
        assert_eq!(n, *"vector");
        assert_eq!(n, "vector".to_string());
        assert_eq!(n.as_str(), "vector");
        assert_eq!(format!("{n} {n:?}"), "vector \"vector\"");
        assert_eq!(serde_json::to_string(&n).unwrap(), "\"vector\"");
    }

    #[test]
    #[should_panic(expected = "invariant violated: retriever lexical proposed")]
    fn a_candidate_outside_the_eligible_set_stops_the_read() {
        let db = crate::Engram::open(
            "/el",
            crate::Options {
                backend: std::sync::Arc::new(engram_storage::MemBackend::new()),
                ..crate::Options::default()
            },
        )
        .unwrap();
        let s = db.session(crate::Principal::admin("t"));
        let id = s
            .append(vec![crate::NewRecord::event("note", "x")])
            .unwrap()[0]
            .id;
        let st = db.state();
        let out = RetrieverOutput {
            retriever: "lexical".into(),
            ..RetrieverOutput::ran(vec![Candidate {
                id,
                rank: 1,
                score: 1.0,
                idx: st.idx(id).unwrap(),
            }])
        };
        assert_eligible(&st, &RoaringBitmap::new(), &[out]);
    }

    /// A candidate whose index is eligible but holds another record stops
    /// the read too: the check ties the id to the index.
    #[test]
    #[should_panic(expected = "invariant violated: retriever vector proposed")]
    fn a_candidate_whose_index_holds_another_record_stops_the_read() {
        let db = crate::Engram::open(
            "/el2",
            crate::Options {
                backend: std::sync::Arc::new(engram_storage::MemBackend::new()),
                ..crate::Options::default()
            },
        )
        .unwrap();
        let s = db.session(crate::Principal::admin("t"));
        let ids: Vec<RecordId> = s
            .append(vec![
                crate::NewRecord::event("note", "x"),
                crate::NewRecord::event("note", "y"),
            ])
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        let st = db.state();
        let (a, b) = (st.idx(ids[0]).unwrap(), st.idx(ids[1]).unwrap());
        let eligible: RoaringBitmap = [a].into_iter().collect();
        let out = RetrieverOutput {
            retriever: "vector".into(),
            ..RetrieverOutput::ran(vec![Candidate {
                id: ids[1],
                rank: 1,
                score: 1.0,
                idx: a,
            }])
        };
        assert_ne!(a, b);
        assert_eligible(&st, &eligible, &[out]);
    }

    /// Recency over a store whose times arrive out of order, before and
    /// after a reopen from the checkpoint (which rebuilds the prefix
    /// maxima): the same records as sorting every eligible one.
    #[test]
    fn recency_matches_a_full_sort_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let expected = |st: &State, bm: &RoaringBitmap, n: usize| {
            let mut all: Vec<(i64, RecordId)> = bm
                .iter()
                .map(|i| (st.meta(i).occurred_at, st.meta(i).id))
                .collect();
            all.sort_by(|a, b| b.cmp(a));
            all.truncate(n);
            all.into_iter().map(|x| x.1).collect::<Vec<_>>()
        };
        let check = |db: &crate::Engram| {
            let st = db.state();
            let bm: RoaringBitmap = (0..st.len() as u32).collect();
            for n in [1, 5, 17, 200] {
                let got = recency(&st, &bm, n, &mut Cost::default());
                let ids: Vec<RecordId> = got.candidates.iter().map(|c| c.id).collect();
                assert_eq!(ids, expected(&st, &bm, n), "n = {n}");
            }
        };
        {
            let db = crate::Engram::open(dir.path(), crate::Options::default()).unwrap();
            let s = db.session(crate::Principal::admin("t"));
            // mostly ascending (so the early stop fires), with back-dated
            // records and one from the far future
            let records = (0..120i64)
                .map(|i| {
                    let at = match i {
                        110 => 9_000_000_000_000,
                        _ if i % 17 == 3 => 1_000,
                        _ => 1_700_000_000_000 + i * 1_000,
                    };
                    crate::NewRecord::event("note", format!("n{i}")).at(at)
                })
                .collect();
            s.append(records).unwrap();
            check(&db);
            db.close().unwrap();
        }
        let db = crate::Engram::open(dir.path(), crate::Options::default()).unwrap();
        check(&db);
    }

    proptest::proptest! {
        /// The bounded heap keeps exactly what a full sort's first `n` are,
        /// in the same order (ties on time broken by id, both descending).
        #[test]
        fn newest_is_the_head_of_a_full_sort(
            mut times in proptest::collection::vec(0i64..20, 0..200),
            n in 0usize..50,
            in_time_order in proptest::bool::ANY,
        ) {
            if in_time_order {
                times.sort_unstable();
            }
            let items: Vec<(i64, RecordId, Idx)> = times
                .iter()
                .enumerate()
                .map(|(i, &t)| (t, RecordId::from_bytes([i as u8; 16]), i as Idx))
                .collect();
            let mut want = items.clone();
            want.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
            want.truncate(n);
            // Walked newest index first, each with its prefix maximum.
            let mut max = i64::MIN;
            let prefix: Vec<i64> = items.iter().map(|x| { max = max.max(x.0); max }).collect();
            let walk = items.iter().zip(prefix).rev().map(|(&(t, id, idx), m)| (t, id, idx, m));
            proptest::prop_assert_eq!(newest(walk, n), want);
        }
    }
}
