//! Retrievers (`SIMILAR TO`, `MATCH`, `RECENT`, `EXPAND`, `AROUND`), their
//! seeds and hop ranges, and how their rankings are fused (`FUSE`,
//! `WEIGHTS`).

use super::*;

/// The kinds of retriever.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetrieverKind {
    /// `SIMILAR TO`: vector similarity.
    Similar,
    /// `MATCH`: BM25.
    Match,
    /// `RECENT`: newest first.
    Recent,
    /// `EXPAND FROM`: graph expansion.
    Expand,
    /// `AROUND`: the turns around the best hits so far.
    Around,
}

impl RetrieverKind {
    /// The name of an unnamed retriever of this kind.
    pub fn default_name(self) -> &'static str {
        match self {
            RetrieverKind::Similar => "similar",
            RetrieverKind::Match => "match",
            RetrieverKind::Recent => "recent",
            RetrieverKind::Expand => "expand",
            RetrieverKind::Around => "around",
        }
    }
    /// The statement keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            RetrieverKind::Similar => "SIMILAR",
            RetrieverKind::Match => "MATCH",
            RetrieverKind::Recent => "RECENT",
            RetrieverKind::Expand => "EXPAND",
            RetrieverKind::Around => "AROUND",
        }
    }
    /// Fusion weight when `WEIGHTS` does not name it: the engine's default
    /// weights (vector 1.0, lexical 1.0, recency 0.1, graph 0.5, episodic
    /// 0.7).
    pub fn default_weight(self) -> f64 {
        let w = engram_engine::retrieval::Weights::default();
        match self {
            RetrieverKind::Similar => w.vector,
            RetrieverKind::Match => w.lexical,
            RetrieverKind::Recent => w.recency,
            RetrieverKind::Expand => w.graph,
            RetrieverKind::Around => w.episodic,
        }
    }
}

/// `SIMILAR TO <text | $p> [MODEL m] [MIN x] [TOP n] [AS name]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Similar {
    /// Text (embedded by the store's embedder), or a parameter bound to a
    /// text or to a vector.
    pub query: Arg<String>,
    /// Vector space (model id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Arg<String>>,
    /// Minimum similarity in [-1, 1]; candidates below are dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Arg<f64>>,
    /// Candidate budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<Arg<u64>>,
    /// `AS name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Name>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// `MATCH <text | $p> [TOP n] [AS name]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// The query text (BM25).
    pub text: Arg<String>,
    /// Candidate budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<Arg<u64>>,
    /// `AS name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Name>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// `RECENT [TOP n] [AS name]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recent {
    /// Candidate budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<Arg<u64>>,
    /// `AS name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Name>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// A record named by id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(tag = "ref", rename_all = "snake_case")]
pub enum RecordRef {
    /// `ID '01J...'`: an internal id (26 characters of Crockford base32).
    Id {
        /// The id.
        value: Arg<String>,
        /// Where (from `ID`).
        #[serde(default)]
        span: Span,
    },
    /// `'evt_9f2'`: a client's external id in the session's tenant.
    External {
        /// The external id.
        value: Arg<String>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
}

impl RecordRef {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            RecordRef::Id { span, .. } | RecordRef::External { span, .. } => *span,
        }
    }
    /// The id or external id.
    pub fn value(&self) -> &Arg<String> {
        match self {
            RecordRef::Id { value, .. } | RecordRef::External { value, .. } => value,
        }
    }
}

/// Where an `EXPAND` starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(tag = "seed", rename_all = "snake_case")]
pub enum Seed {
    /// `ENTITY 'Acme'`: entities whose canonical name or alias is this (a
    /// parameter may be bound to one name or a list).
    Entity {
        /// The name.
        name: Arg<String>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
    /// `ID '01J...'` or `'ext_id'`: one record.
    Record(RecordRef),
    /// `sem`: the hits of the retriever of that name.
    Retriever(Name),
}

impl Seed {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            Seed::Entity { span, .. } => *span,
            Seed::Record(r) => r.span(),
            Seed::Retriever(n) => n.span,
        }
    }
}

/// `HOPS a..b` (`HOPS n` is `1..n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HopRange {
    /// Fewest hops (0 includes the seeds themselves).
    pub min: u64,
    /// Most hops.
    pub max: u64,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// Which relations `EXPAND` walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From subject to object.
    Out,
    /// From object to subject.
    In,
    /// Both ways (the default).
    Both,
}

impl Direction {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Direction::Out => "OUT",
            Direction::In => "IN",
            Direction::Both => "BOTH",
        }
    }
}

/// `EXPAND FROM seeds [HOPS a..b] [VIA preds] [DIRECTION d] [MAX n] [TOP n] [AS name]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expand {
    /// Seeds (at least one).
    pub from: Vec<Seed>,
    /// Hop range (default [`DEFAULT_HOPS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<HopRange>,
    /// Relation predicates walked (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<StrList>,
    /// Direction (default both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Spanned<Direction>>,
    /// Cap on nodes reached (default [`DEFAULT_EXPANDED_NODES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Spanned<u64>>,
    /// Candidate budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<Arg<u64>>,
    /// `AS name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Name>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// `AROUND [TOP n] [AS name]`: the episodic neighbourhood of the best
/// hits of the retrievers before it (the engine's defaults: 5 seeds, 2
/// turns on each side, within 1 hour, decay 0.7). Its options are
/// `RECENT`'s.
pub type Around = Recent;

/// One named candidate generator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(tag = "retriever", rename_all = "snake_case")]
pub enum Retriever {
    /// `SIMILAR TO`.
    Similar(Similar),
    /// `MATCH`.
    Match(Match),
    /// `RECENT`.
    Recent(Recent),
    /// `EXPAND FROM`.
    Expand(Expand),
    /// `AROUND`.
    Around(Around),
}

impl Retriever {
    /// Which kind.
    pub fn kind(&self) -> RetrieverKind {
        match self {
            Retriever::Similar(_) => RetrieverKind::Similar,
            Retriever::Match(_) => RetrieverKind::Match,
            Retriever::Recent(_) => RetrieverKind::Recent,
            Retriever::Expand(_) => RetrieverKind::Expand,
            Retriever::Around(_) => RetrieverKind::Around,
        }
    }
    /// `AS name`, if given.
    pub fn explicit_name(&self) -> Option<&Name> {
        match self {
            Retriever::Similar(r) => r.name.as_ref(),
            Retriever::Match(r) => r.name.as_ref(),
            Retriever::Recent(r) => r.name.as_ref(),
            Retriever::Expand(r) => r.name.as_ref(),
            Retriever::Around(r) => r.name.as_ref(),
        }
    }
    /// The name fusion, `WEIGHTS` and `EXPAND FROM` use: `AS name`, or the
    /// kind's default name.
    pub fn name(&self) -> &str {
        self.explicit_name()
            .map_or(self.kind().default_name(), |n| n.value.as_str())
    }
    /// `TOP n`, if given.
    pub fn top(&self) -> Option<&Arg<u64>> {
        match self {
            Retriever::Similar(r) => r.top.as_ref(),
            Retriever::Match(r) => r.top.as_ref(),
            Retriever::Recent(r) => r.top.as_ref(),
            Retriever::Expand(r) => r.top.as_ref(),
            Retriever::Around(r) => r.top.as_ref(),
        }
    }
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            Retriever::Similar(r) => r.span,
            Retriever::Match(r) => r.span,
            Retriever::Recent(r) => r.span,
            Retriever::Expand(r) => r.span,
            Retriever::Around(r) => r.span,
        }
    }
}

/// How min-max or z-score normalises scores before `FUSE LINEAR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normalize {
    /// `(s - min) / (max - min)` per retriever (the default).
    MinMax,
    /// `(s - mean) / stddev` per retriever.
    ZScore,
}

impl Normalize {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Normalize::MinMax => "MINMAX",
            Normalize::ZScore => "ZSCORE",
        }
    }
}

/// How retrievers' candidates are combined.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Fusion {
    /// `FUSE RRF [K n]`: `sum over r of w_r / (k + rank_r)`.
    Rrf {
        /// `k` (default [`DEFAULT_RRF_K`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        k: Option<Spanned<u64>>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
    /// `FUSE LINEAR [MINMAX | ZSCORE]`: `sum over r of w_r * norm(score_r)`.
    Linear {
        /// Normalisation (default min-max).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        normalize: Option<Spanned<Normalize>>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
}

impl Fusion {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            Fusion::Rrf { span, .. } | Fusion::Linear { span, .. } => *span,
        }
    }
}

/// `name = w` in `WEIGHTS (...)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weight {
    /// The retriever.
    pub name: Name,
    /// The weight (finite, >= 0).
    pub value: Arg<f64>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}
