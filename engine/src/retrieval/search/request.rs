//! The search request: its types (retrievers, fusion, lineage attachment,
//! the normalized query of the manifest) and their validation.

use super::*;

/// What kind of candidate generator a retriever is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RetrieverKind {
    /// Vector similarity.
    Similar,
    /// BM25 keyword match.
    Match,
    /// Newest first.
    Recent,
    /// Graph expansion.
    Expand,
    /// Episodic neighbourhood: the records around earlier hits in their
    /// conversation.
    Episodic,
}

impl RetrieverKind {
    /// Name used in manifests.
    pub fn name(self) -> &'static str {
        match self {
            RetrieverKind::Similar => "similar",
            RetrieverKind::Match => "match",
            RetrieverKind::Recent => "recent",
            RetrieverKind::Expand => "expand",
            RetrieverKind::Episodic => "episodic",
        }
    }
}

/// Where an expansion starts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "seed", rename_all = "snake_case")]
pub enum Seed {
    /// Entities with this canonical name or alias.
    Entity {
        /// Name.
        name: String,
    },
    /// A record: an entity itself, or the entities a relation or assertion
    /// is about.
    Record {
        /// The record.
        #[serde(serialize_with = "ser_ref")]
        reference: RecordRef,
    },
    /// The entities another retriever's candidates are or talk about.
    Retriever {
        /// Its name.
        name: String,
    },
    /// Entities named by phrases of a text.
    Text {
        /// The text.
        text: String,
    },
    /// The entities the best `n` candidates of every earlier retriever are
    /// or talk about (the recall's implicit expansion).
    EarlierHits {
        /// Candidates of each retriever.
        n: usize,
    },
}

fn ser_ref<S: serde::Serializer>(r: &RecordRef, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&r.to_string())
}

/// Which relations an expansion follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Subject to object.
    Out,
    /// Object to subject.
    In,
    /// Both.
    #[default]
    Both,
}

/// One retriever: what it does and its parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum RetrieverParams {
    /// Vector similarity, of a text (through the store's embedder) or of a
    /// vector in `model`'s space.
    Similar {
        /// Query text.
        text: Option<String>,
        /// Query vector.
        #[serde(skip)]
        vector: Option<std::sync::Arc<[f32]>>,
        /// Vector space.
        model: Option<String>,
        /// Drop candidates below this similarity.
        min: Option<f64>,
        /// ef_search.
        ef: Option<usize>,
    },
    /// BM25 over the eligible records' texts.
    Match {
        /// Query text.
        text: Option<String>,
    },
    /// Newest first by `occurred_at`.
    Recent,
    /// Graph expansion over relations.
    Expand {
        /// Where to start.
        seeds: Vec<Seed>,
        /// Hops returned, `min..=max` (0 includes the seeds).
        hops: (usize, usize),
        /// Relation predicates followed (empty: all).
        via: Vec<String>,
        /// Direction.
        direction: Direction,
        /// Nodes reached at most.
        max_nodes: usize,
    },
    /// The records around the best hits so far (the fusion of the earlier
    /// retrievers) in the same conversation, ordered by `occurred_at`:
    /// up to `window` on each side, within `max_gap_ms` of the hit, each
    /// scored `hit score x decay^distance` (the hit's score relative to the
    /// best one).
    Episodic(crate::retrieval::episodic::Window),
}

impl RetrieverParams {
    /// A copy for the manifest: the query vector is left out (the manifest
    /// records its dimensions; serialising skips it anyway).
    pub fn without_vector(&self) -> RetrieverParams {
        match self {
            RetrieverParams::Similar {
                text,
                vector: _,
                model,
                min,
                ef,
            } => RetrieverParams::Similar {
                text: text.clone(),
                vector: None,
                model: model.clone(),
                min: *min,
                ef: *ef,
            },
            other => other.clone(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> RetrieverKind {
        match self {
            RetrieverParams::Similar { .. } => RetrieverKind::Similar,
            RetrieverParams::Match { .. } => RetrieverKind::Match,
            RetrieverParams::Recent => RetrieverKind::Recent,
            RetrieverParams::Expand { .. } => RetrieverKind::Expand,
            RetrieverParams::Episodic(_) => RetrieverKind::Episodic,
        }
    }
}

/// A named retriever of a request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetrieverSpec {
    /// Name (unique in the request).
    pub name: String,
    /// Candidates it contributes at most.
    pub top: usize,
    /// Fusion weight (>= 0).
    pub weight: f64,
    /// What it does.
    #[serde(flatten)]
    pub params: RetrieverParams,
}

/// How a retriever's own scores are normalised for linear fusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    /// `(s - min) / (max - min)`; when every candidate scored the same,
    /// 1 if that score is above 0, else 0.
    MinMax,
    /// `(s - mean) / stddev`.
    ZScore,
}

/// How candidates of several retrievers become one ranking.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Fusion {
    /// Weighted reciprocal rank fusion: `sum w_r / (k + rank_r)`.
    Rrf {
        /// The constant k.
        k: f64,
    },
    /// Weighted sum of normalised scores.
    Linear {
        /// Normalisation.
        norm: Norm,
    },
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Rrf { k: RRF_K }
    }
}

/// Lineage attached to each hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Attach {
    /// Sources up to this many levels.
    pub sources: Option<usize>,
    /// Derivatives down to this many levels.
    pub derivatives: Option<usize>,
}

/// A retrieval request: the plain data every front end compiles to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchRequest {
    /// Eligibility filter (before any scoring).
    pub filter: FilterExpr,
    /// Transaction-time cut.
    pub as_of: Option<i64>,
    /// Valid-time point (default: now).
    pub valid_at: Option<i64>,
    /// Retrievers, run in this order (an expansion may use earlier ones).
    /// None: a listing of the eligible records, newest first.
    pub retrievers: Vec<RetrieverSpec>,
    /// Fusion.
    pub fusion: Fusion,
    /// Hits at most.
    pub limit: usize,
    /// Lineage to attach to each hit.
    pub attach: Attach,
    /// Read each hit's text from the log. False: hits carry no text and no
    /// frame is read (ids, external ids, scores, ranks and the manifest are
    /// the same), as a vector index answering with ids does. The query
    /// language sets it from `RETURN`.
    pub with_text: bool,
}

impl Default for SearchRequest {
    fn default() -> Self {
        SearchRequest {
            filter: FilterExpr::All,
            as_of: None,
            valid_at: None,
            retrievers: Vec::new(),
            fusion: Fusion::default(),
            limit: 10,
            attach: Attach::default(),
            with_text: true,
        }
    }
}

/// A record attached to a hit by lineage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Linked {
    /// Record id.
    pub id: RecordId,
    /// External id.
    pub external_id: Option<String>,
    /// Record type.
    pub record: &'static str,
    /// Kind.
    pub kind: String,
    /// Status.
    pub status: &'static str,
    /// Levels from the hit.
    pub depth: usize,
    /// Text (none for a tombstone).
    pub text: Option<String>,
    /// Its text left out: the answer's text budget was spent
    /// ([`crate::retrieval::HITS_TEXT_BYTES_MAX`]; read it by id).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_omitted: bool,
}

impl SearchRequest {
    /// Checks limits and parameters (the query language checks them before
    /// this, with positions; a request built in code is checked here).
    pub fn validate(&self) -> Result<()> {
        let bad = |f: &str, r: String| Err(EngineError::invalid(f, r));
        if self.limit == 0 || self.limit > limits::K_MAX {
            return bad(
                "limit",
                format!("{} is out of range 1..={}", self.limit, limits::K_MAX),
            );
        }
        if self.retrievers.len() > RETRIEVERS_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "retrievers in one request".into(),
                limit: RETRIEVERS_MAX as u64,
                got: self.retrievers.len() as u64,
            });
        }
        // every retriever off: nothing would rank the hits (the query
        // checker says the same with a position)
        if !self.retrievers.is_empty() && self.retrievers.iter().all(|r| r.weight == 0.0) {
            return bad(
                "weight",
                "every retriever is weighted 0 (0 turns a retriever off), so nothing would rank \
                 the hits: give one a weight above 0"
                    .into(),
            );
        }
        for (i, r) in self.retrievers.iter().enumerate() {
            // (at most RETRIEVERS_MAX: a scan of those before it)
            if self.retrievers[..i].iter().any(|p| p.name == r.name) {
                return bad(
                    "retrievers",
                    format!("two retrievers are named '{}'", r.name),
                );
            }
            if r.top == 0 || r.top > TOP_MAX {
                return bad(
                    "top",
                    format!(
                        "{} (retriever '{}') is out of range 1..={TOP_MAX}",
                        r.top, r.name
                    ),
                );
            }
            if !(r.weight.is_finite() && (0.0..=limits::WEIGHT_MAX).contains(&r.weight)) {
                return bad(
                    "weight",
                    format!(
                        "retriever '{}': must be in 0..={}",
                        r.name,
                        limits::WEIGHT_MAX
                    ),
                );
            }
            match &r.params {
                RetrieverParams::Similar {
                    text,
                    vector,
                    min,
                    ef,
                    ..
                } => {
                    if let Some(v) = vector {
                        check_query_vector("vector", v)?;
                    }
                    if let Some(t) = text {
                        check_query_text(t)?;
                    }
                    if min.is_some_and(|m| !(-1.0..=1.0).contains(&m)) {
                        return bad("min", "must be within -1..=1".into());
                    }
                    if let Some(ef) = ef {
                        if *ef == 0 || *ef > limits::EF_MAX {
                            return bad(
                                "ef",
                                format!("{ef} is out of range 1..={}", limits::EF_MAX),
                            );
                        }
                    }
                }
                RetrieverParams::Match { text } => {
                    if let Some(t) = text {
                        check_query_text(t)?;
                    }
                }
                RetrieverParams::Recent => {}
                RetrieverParams::Episodic(crate::retrieval::episodic::Window {
                    seeds,
                    window,
                    max_gap_ms,
                    decay,
                }) => {
                    if *seeds == 0 || *seeds > TOP_MAX {
                        return bad(
                            "seeds",
                            format!(
                                "{seeds} (retriever '{}') is out of range 1..={TOP_MAX}",
                                r.name
                            ),
                        );
                    }
                    if *window == 0 || *window > EPISODIC_WINDOW_MAX {
                        return bad(
                            "window",
                            format!(
                                "{window} (retriever '{}') is out of range 1..={EPISODIC_WINDOW_MAX}",
                                r.name
                            ),
                        );
                    }
                    if *max_gap_ms < 0 {
                        return bad(
                            "max_gap_ms",
                            format!("retriever '{}': must be >= 0", r.name),
                        );
                    }
                    if !(decay.is_finite() && *decay > 0.0 && *decay <= 1.0) {
                        return bad(
                            "decay",
                            format!("retriever '{}': must be within (0, 1]", r.name),
                        );
                    }
                }
                RetrieverParams::Expand {
                    seeds,
                    hops,
                    max_nodes,
                    ..
                } => {
                    if hops.0 > hops.1 || hops.1 > limits::GRAPH_DEPTH_MAX {
                        return bad(
                            "hops",
                            format!(
                                "{}..{} (retriever '{}'): must be within 0..={}, low before high",
                                hops.0,
                                hops.1,
                                r.name,
                                limits::GRAPH_DEPTH_MAX
                            ),
                        );
                    }
                    if *max_nodes == 0 || *max_nodes > EXPAND_NODES_MAX {
                        return bad(
                            "max",
                            format!("{max_nodes} is out of range 1..={EXPAND_NODES_MAX}"),
                        );
                    }
                    for s in seeds {
                        if let Seed::Retriever { name } = s {
                            let earlier = self.retrievers[..i].iter().any(|x| &x.name == name);
                            if !earlier {
                                return bad(
                                    "seeds",
                                    format!(
                                        "retriever '{}' expands from '{name}', which is not an earlier retriever",
                                        r.name
                                    ),
                                );
                            }
                        }
                    }
                }
            }
        }
        // the years every stored time lies in (0001..9999), as the query
        // language checks its times
        crate::model::check_time("as_of", self.as_of)?;
        crate::model::check_time("valid_at", self.valid_at)?;
        for (what, d) in [
            ("sources depth", self.attach.sources),
            ("derivatives depth", self.attach.derivatives),
        ] {
            if d.is_some_and(|d| d == 0 || d > ATTACH_DEPTH_MAX) {
                return bad(what, format!("must be within 1..={ATTACH_DEPTH_MAX}"));
            }
        }
        Ok(())
    }
}

fn check_query_text(t: &str) -> Result<()> {
    if t.len() > limits::QUERY_TEXT_BYTES_MAX {
        return Err(EngineError::LimitExceeded {
            item: None,
            what: "query text length in bytes".into(),
            limit: limits::QUERY_TEXT_BYTES_MAX as u64,
            got: t.len() as u64,
        });
    }
    Ok(())
}

/// What a retriever of the manifest was asked (the normalised request).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NormalizedRetriever {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: RetrieverKind,
    /// Candidate budget.
    pub top: usize,
    /// Fusion weight.
    pub weight: f64,
    /// Query text, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its tokens (tokenizer version in `versions`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<String>,
    /// Dimensions of the query vector, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_dims: Option<usize>,
    /// Everything else the retriever was given.
    pub params: RetrieverParams,
}

/// The normalised request a manifest records.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NormalizedQuery {
    /// The eligibility filter, in its canonical form.
    pub filter: std::sync::Arc<FilterExpr>,
    /// `as_of` (RFC 3339 when shown or serialized).
    pub as_of: Option<crate::time::Rfc3339>,
    /// `valid_at` (RFC 3339 when shown or serialized).
    pub valid_at: crate::time::Rfc3339,
    /// Retrievers in order.
    pub retrievers: Vec<NormalizedRetriever>,
    /// Fusion.
    pub fusion: Fusion,
    /// Hits at most.
    pub limit: usize,
    /// Lineage attached.
    pub attach: Attach,
    /// Whether hits carry their text (shown only when they do not).
    #[serde(skip_serializing_if = "is_true")]
    pub with_text: bool,
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The answer to a search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchResponse {
    /// Hits, best first.
    pub hits: Vec<Hit>,
    /// The manifest.
    pub manifest: Manifest,
}
