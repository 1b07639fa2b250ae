//! The typed AST of a statement: what the parser produces, the checker
//! validates, the printer prints and the engine compiles. It is also the
//! statement's JSON wire form (serde): a program may send the JSON instead
//! of text, and it must then pass [`super::check()`] exactly as parsed text
//! does (the checker re-checks everything the parser guarantees).
//!
//! The AST records what was written: an absent clause is `None` or empty,
//! and the defaults that apply then are the `DEFAULT_*` constants below,
//! applied by whoever executes the statement. Values that may come from the
//! request are [`Arg`]s (a literal or a `$name` reference) resolved by
//! [`super::Binder`]; values are never spliced into text.
//!
//! Every node has the [`Span`] of its text (`0..0` when built in code or
//! read from JSON, where spans may be omitted). In JSON, a literal may be
//! written bare (`"min": 0.35`) or with its span (`{"lit": 0.35, "span":
//! "40..44"}`), a parameter as `{"param": "qvec"}`.
//!
//! This module must never resolve parameters, read a clock or touch a store.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::limits::TRACE_DEPTH_MAX;
use super::span::Span;

mod expr;
mod retriever;

pub use expr::*;
pub use retriever::*;

/// Results of a statement without `LIMIT`.
pub const DEFAULT_LIMIT: u64 = 10;
/// Candidates of a retriever without `TOP`, as a multiple of the limit
/// (the engine's `CANDIDATES_PER_K`), capped at [`super::limits::TOP_MAX`].
pub const DEFAULT_TOP_PER_LIMIT: u64 = engram_engine::retrieval::CANDIDATES_PER_K as u64;
/// Hops of an `EXPAND` without `HOPS`: `1..2`, the engine's graph depth.
pub const DEFAULT_HOPS: (u64, u64) = (1, engram_engine::retrieval::graph::GRAPH_DEPTH as u64);
/// Nodes an `EXPAND` without `MAX` may reach.
pub const DEFAULT_EXPANDED_NODES: u64 = 1_000;
/// `k` of `FUSE RRF` without `K` (the engine's `RRF_K`).
pub const DEFAULT_RRF_K: u64 = engram_engine::retrieval::RRF_K as u64;
/// Levels of `WITH SOURCES` / `WITH DERIVATIVES` without `DEPTH`: direct
/// sources or derivatives only.
pub const DEFAULT_ATTACH_DEPTH: u64 = 1;
/// Levels of a `TRACE` without `DEPTH`: the whole lineage up to the limit.
pub const DEFAULT_TRACE_DEPTH: u64 = TRACE_DEPTH_MAX;
/// Fields of a `FIND` without `RETURN` (`score` and `ranks` only when it
/// has retrievers; `sources`, `derivatives` when attached).
pub const DEFAULT_RETURN_FIND: &[ReturnField] = &[
    ReturnField::Id,
    ReturnField::ExternalId,
    ReturnField::Record,
    ReturnField::Kind,
    ReturnField::Status,
    ReturnField::Text,
    ReturnField::OccurredAt,
    ReturnField::Score,
    ReturnField::Ranks,
    ReturnField::Sources,
    ReturnField::Derivatives,
];
/// Fields of a `TRACE` without `RETURN`.
pub const DEFAULT_RETURN_TRACE: &[ReturnField] = &[
    ReturnField::Id,
    ReturnField::ExternalId,
    ReturnField::Record,
    ReturnField::Kind,
    ReturnField::Status,
    ReturnField::Text,
    ReturnField::OccurredAt,
    ReturnField::Depth,
];

fn is_false(b: &bool) -> bool {
    !*b
}

/// A value with the span it was written at. In JSON, `{"value": v,
/// "span": "a..b"}` or just `v`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "SpannedRepr<T>", bound(deserialize = "T: Deserialize<'de>"))]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Where it was written.
    pub span: Span,
}

#[derive(Deserialize)]
#[serde(
    untagged,
    deny_unknown_fields,
    expecting = "a value, or {\"value\": value, \"span\": \"a..b\"}"
)]
enum SpannedRepr<T> {
    Full {
        value: T,
        #[serde(default)]
        span: Span,
    },
    Bare(T),
}

impl<T> From<SpannedRepr<T>> for Spanned<T> {
    fn from(r: SpannedRepr<T>) -> Self {
        match r {
            SpannedRepr::Full { value, span } => Spanned { value, span },
            SpannedRepr::Bare(value) => Spanned {
                value,
                span: Span::default(),
            },
        }
    }
}

impl<T> Spanned<T> {
    /// `value` at `span`.
    pub fn new(value: T, span: Span) -> Self {
        Spanned { value, span }
    }
}

/// A retriever or parameter name (case-sensitive identifier).
pub type Name = Spanned<String>;

/// A value written in the statement (`Lit`) or taken from the request's
/// parameters (`Param`, written `$name`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    from = "ArgRepr<T>",
    bound(deserialize = "T: Deserialize<'de>")
)]
pub enum Arg<T> {
    /// A literal.
    Lit {
        /// The value.
        #[serde(rename = "lit")]
        value: T,
        /// Where.
        span: Span,
    },
    /// `$name`.
    Param {
        /// The parameter's name (without `$`).
        #[serde(rename = "param")]
        name: String,
        /// Where (including the `$`).
        span: Span,
    },
}

#[derive(Deserialize)]
#[serde(
    untagged,
    deny_unknown_fields,
    expecting = "a literal, {\"lit\": literal, \"span\": \"a..b\"} or {\"param\": name}"
)]
enum ArgRepr<T> {
    Lit {
        lit: T,
        #[serde(default)]
        span: Span,
    },
    Param {
        param: String,
        #[serde(default)]
        span: Span,
    },
    Bare(T),
}

impl<T> From<ArgRepr<T>> for Arg<T> {
    fn from(r: ArgRepr<T>) -> Self {
        match r {
            ArgRepr::Lit { lit, span } => Arg::Lit { value: lit, span },
            ArgRepr::Param { param, span } => Arg::Param { name: param, span },
            ArgRepr::Bare(value) => Arg::Lit {
                value,
                span: Span::default(),
            },
        }
    }
}

impl<T> Arg<T> {
    /// A literal with no span.
    pub fn lit(value: T) -> Self {
        Arg::Lit {
            value,
            span: Span::default(),
        }
    }
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            Arg::Lit { span, .. } | Arg::Param { span, .. } => *span,
        }
    }
    /// The literal, if it is one.
    pub fn as_lit(&self) -> Option<&T> {
        match self {
            Arg::Lit { value, .. } => Some(value),
            Arg::Param { .. } => None,
        }
    }
}

/// A list of strings: written out (`('a', $b)`) or one parameter bound to a
/// list (`IN $users`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged, from = "StrListRepr")]
pub enum StrList {
    /// Written out; each item is a string literal or a parameter (one
    /// bound to a list is spliced in).
    Items {
        /// The items (at least one).
        items: Vec<Arg<String>>,
        /// Where (the parentheses included).
        span: Span,
    },
    /// One parameter bound to a list of strings (or to one string).
    Param {
        /// The parameter's name.
        #[serde(rename = "param")]
        name: String,
        /// Where.
        span: Span,
    },
}

#[derive(Deserialize)]
#[serde(
    untagged,
    deny_unknown_fields,
    expecting = "a list of strings or parameters, {\"items\": [...]} or {\"param\": name}"
)]
enum StrListRepr {
    Items {
        items: Vec<Arg<String>>,
        #[serde(default)]
        span: Span,
    },
    Param {
        param: String,
        #[serde(default)]
        span: Span,
    },
    Bare(Vec<Arg<String>>),
}

impl From<StrListRepr> for StrList {
    fn from(r: StrListRepr) -> Self {
        match r {
            StrListRepr::Items { items, span } => StrList::Items { items, span },
            StrListRepr::Param { param, span } => StrList::Param { name: param, span },
            StrListRepr::Bare(items) => StrList::Items {
                items,
                span: Span::default(),
            },
        }
    }
}

impl StrList {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            StrList::Items { span, .. } | StrList::Param { span, .. } => *span,
        }
    }
}

/// `SOURCES [DEPTH n]` or `DERIVATIVES [DEPTH n]` after `WITH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attach {
    /// Levels (default [`DEFAULT_ATTACH_DEPTH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<Spanned<u64>>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// Fields `RETURN` may list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnField {
    /// Internal id.
    Id,
    /// Client key.
    ExternalId,
    /// Record type.
    Record,
    /// Kind.
    Kind,
    /// Status (`historical` for ended validity).
    Status,
    /// Text.
    Text,
    /// Fused score (FIND with retrievers).
    Score,
    /// Per-retriever ranks and scores (FIND with retrievers).
    Ranks,
    /// Attached sources (FIND ... WITH SOURCES).
    Sources,
    /// Attached derivatives (FIND ... WITH DERIVATIVES).
    Derivatives,
    /// Valid time.
    OccurredAt,
    /// Transaction time.
    IngestedAt,
    /// Start of validity.
    ValidFrom,
    /// End of validity.
    ValidUntil,
    /// Scope (user, conversation, agent, labels).
    Scope,
    /// Scope labels.
    Labels,
    /// Hops from the traced record (TRACE only).
    Depth,
    /// Which way a row lies from the traced record, `source` or
    /// `derivative` (TRACE only: tells the two apart under `BOTH`).
    Side,
}

impl ReturnField {
    /// All fields, in documentation order.
    pub const ALL: [ReturnField; 18] = [
        ReturnField::Id,
        ReturnField::ExternalId,
        ReturnField::Record,
        ReturnField::Kind,
        ReturnField::Status,
        ReturnField::Text,
        ReturnField::Score,
        ReturnField::Ranks,
        ReturnField::Sources,
        ReturnField::Derivatives,
        ReturnField::OccurredAt,
        ReturnField::IngestedAt,
        ReturnField::ValidFrom,
        ReturnField::ValidUntil,
        ReturnField::Scope,
        ReturnField::Labels,
        ReturnField::Depth,
        ReturnField::Side,
    ];
    /// As written.
    pub fn name(self) -> &'static str {
        match self {
            ReturnField::Id => "id",
            ReturnField::ExternalId => "external_id",
            ReturnField::Record => "record",
            ReturnField::Kind => "kind",
            ReturnField::Status => "status",
            ReturnField::Text => "text",
            ReturnField::Score => "score",
            ReturnField::Ranks => "ranks",
            ReturnField::Sources => "sources",
            ReturnField::Derivatives => "derivatives",
            ReturnField::OccurredAt => "occurred_at",
            ReturnField::IngestedAt => "ingested_at",
            ReturnField::ValidFrom => "valid_from",
            ReturnField::ValidUntil => "valid_until",
            ReturnField::Scope => "scope",
            ReturnField::Labels => "labels",
            ReturnField::Depth => "depth",
            ReturnField::Side => "side",
        }
    }
    /// Parses a name, case-insensitively.
    pub fn parse(word: &str) -> Option<ReturnField> {
        Self::ALL
            .into_iter()
            .find(|f| word.eq_ignore_ascii_case(f.name()))
    }
}

/// A search: eligibility filters, retrievers, fusion, lineage, output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Find {
    /// Record types (`FIND entities, assertions`); empty is `ANY`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<Spanned<RecordType>>,
    /// `KIND 'a'` / `KIND IN (...)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<StrList>,
    /// `WHERE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Expr>,
    /// `AS OF`: transaction-time cut (what the store knew then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<TimeExpr>,
    /// `VALID AT`: valid-time point (what was true then; default now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_at: Option<TimeExpr>,
    /// Retrievers in the order written; none makes a listing (eligible
    /// records newest first, no score).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrievers: Vec<Retriever>,
    /// `FUSE` (default RRF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fusion: Option<Fusion>,
    /// `WEIGHTS (...)`; a retriever not named keeps its kind's default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<Weight>,
    /// `WITH SOURCES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Attach>,
    /// `WITH DERIVATIVES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derivatives: Option<Attach>,
    /// `LIMIT` (default [`DEFAULT_LIMIT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Arg<u64>>,
    /// `RETURN` (default [`DEFAULT_RETURN_FIND`], less what does not apply).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returns: Vec<Spanned<ReturnField>>,
    /// Where (from `FIND`).
    #[serde(default)]
    pub span: Span,
}

/// `TOP` of a retriever that has none, in a statement returning `limit`
/// results: [`DEFAULT_TOP_PER_LIMIT`] times the limit, at most
/// [`super::limits::TOP_MAX`].
pub fn default_top(limit: u64) -> u64 {
    limit
        .saturating_mul(DEFAULT_TOP_PER_LIMIT)
        .min(super::limits::TOP_MAX)
}

impl Find {
    /// The fields each result carries: `RETURN`'s, in its order, or
    /// [`DEFAULT_RETURN_FIND`] without what this statement cannot produce
    /// (`score` and `ranks` without retrievers, `sources` and
    /// `derivatives` unless attached).
    pub fn projection(&self) -> Vec<ReturnField> {
        if !self.returns.is_empty() {
            return self.returns.iter().map(|f| f.value).collect();
        }
        DEFAULT_RETURN_FIND
            .iter()
            .copied()
            .filter(|f| match f {
                ReturnField::Score | ReturnField::Ranks => !self.retrievers.is_empty(),
                ReturnField::Sources => self.sources.is_some(),
                ReturnField::Derivatives => self.derivatives.is_some(),
                _ => true,
            })
            .collect()
    }

    /// The retriever of that (effective) name.
    pub fn retriever(&self, name: &str) -> Option<&Retriever> {
        self.retrievers.iter().find(|r| r.name() == name)
    }
    /// Whether the default `status = active` applies (no status predicate).
    pub fn default_status_applies(&self) -> bool {
        !self.filter.as_ref().is_some_and(Expr::mentions_status)
    }
}

/// Which way `TRACE` walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceDirection {
    /// Upstream: what it came from.
    Sources,
    /// Downstream: what was built on it.
    Derivatives,
    /// Both.
    Both,
}

impl TraceDirection {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            TraceDirection::Sources => "SOURCES",
            TraceDirection::Derivatives => "DERIVATIVES",
            TraceDirection::Both => "BOTH",
        }
    }
}

/// Lineage from one record, no search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trace {
    /// The record.
    pub target: RecordRef,
    /// Which way.
    pub direction: Spanned<TraceDirection>,
    /// Levels (default [`DEFAULT_TRACE_DEPTH`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<Spanned<u64>>,
    /// `INCLUDE SUPERSEDED`: also walk versions replaced by corrections.
    #[serde(default, skip_serializing_if = "is_false")]
    pub include_superseded: bool,
    /// `RETURN` (default [`DEFAULT_RETURN_TRACE`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub returns: Vec<Spanned<ReturnField>>,
    /// Where (from `TRACE`).
    #[serde(default)]
    pub span: Span,
}

impl Trace {
    /// The fields each record carries: `RETURN`'s, or [`DEFAULT_RETURN_TRACE`].
    pub fn projection(&self) -> Vec<ReturnField> {
        if self.returns.is_empty() {
            DEFAULT_RETURN_TRACE.to_vec()
        } else {
            self.returns.iter().map(|f| f.value).collect()
        }
    }
}

/// The two statement forms.
#[allow(
    clippy::large_enum_variant,
    reason = "one statement per request, never held in bulk: boxing would buy nothing"
)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(tag = "statement", rename_all = "snake_case")]
pub enum Body {
    /// `FIND ...`.
    Find(Find),
    /// `TRACE ...`.
    Trace(Trace),
}

/// A whole statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// `EXPLAIN`: return the manifest.
    #[serde(default, skip_serializing_if = "is_false")]
    pub explain: bool,
    /// The statement.
    pub body: Body,
    /// Where (the whole text but leading comments and spaces).
    #[serde(default)]
    pub span: Span,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::parse;

    fn find(text: &str) -> Find {
        match parse(text).map(|s| s.body) {
            Ok(Body::Find(f)) => f,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn projections_leave_out_what_cannot_be_produced() {
        use ReturnField as F;
        let listing = find("FIND events");
        assert_eq!(
            listing.projection(),
            [
                F::Id,
                F::ExternalId,
                F::Record,
                F::Kind,
                F::Status,
                F::Text,
                F::OccurredAt
            ]
        );
        let search = find("FIND ANY MATCH 'x' WITH SOURCES");
        assert!(
            search
                .projection()
                .ends_with(&[F::Score, F::Ranks, F::Sources])
        );
        assert_eq!(
            find("FIND ANY RETURN text, id").projection(),
            [F::Text, F::Id]
        );
    }

    #[test]
    fn json_form_takes_bare_literals_and_no_spans() {
        let json = r#"{"body": {"statement": "find", "targets": ["summary"],
            "filter": {"expr": "or", "items": [
              {"expr": "text", "field": "scope.label", "values": ["apollo"]},
              {"expr": "text", "field": "scope.conversation", "values": ["apollo"]}]},
            "valid_at": {"time": "now"},
            "retrievers": [{"retriever": "similar", "query": {"param": "qvec"},
                            "model": "text-embedding-3-small", "min": 0.35}]}}"#;
        let s: Statement = serde_json::from_str(json).unwrap();
        assert_eq!(
            s.to_line(),
            "FIND summaries WHERE scope.label = 'apollo' OR scope.conversation = 'apollo' \
             VALID AT now SIMILAR TO $qvec MODEL 'text-embedding-3-small' MIN 0.35"
        );
        let e =
            serde_json::from_str::<Statement>(r#"{"body": {"statement": "find", "limit": "ten"}}"#)
                .unwrap_err();
        assert!(e.to_string().contains(r#"{"param": name}"#), "{e}");
    }

    #[test]
    fn effective_names_and_defaults() {
        let f = find("FIND ANY MATCH 'x' SIMILAR TO 'y' AS sem RECENT");
        let names: Vec<&str> = f.retrievers.iter().map(Retriever::name).collect();
        assert_eq!(names, ["match", "sem", "recent"]);
        assert!(f.retriever("sem").is_some());
        assert!(f.default_status_applies());
        assert!(!find("FIND ANY WHERE NOT status = stale").default_status_applies());
        assert_eq!(default_top(DEFAULT_LIMIT), 30);
        assert_eq!(default_top(u64::MAX), super::super::limits::TOP_MAX);
        assert_eq!(RetrieverKind::Expand.default_weight(), 0.5);
    }
}
