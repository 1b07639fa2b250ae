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

use super::limits::LINEAGE_DEPTH_MAX;
use super::span::Span;

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
pub const DEFAULT_TRACE_DEPTH: u64 = LINEAGE_DEPTH_MAX;
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
    /// Written out; each item is a string literal or a string parameter.
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

/// Units of a relative time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeUnit {
    /// Seconds.
    S,
    /// Minutes.
    M,
    /// Hours.
    H,
    /// Days (86 400 s; no calendar).
    D,
    /// Weeks (7 days).
    W,
}

impl TimeUnit {
    /// Milliseconds in one unit.
    pub fn unit_ms(self) -> i64 {
        match self {
            TimeUnit::S => 1_000,
            TimeUnit::M => 60_000,
            TimeUnit::H => 3_600_000,
            TimeUnit::D => 86_400_000,
            TimeUnit::W => 7 * 86_400_000,
        }
    }
    /// `amount` units in ms, if that fits an `i64`.
    pub fn to_ms(self, amount: u64) -> Option<i64> {
        i64::try_from(amount).ok()?.checked_mul(self.unit_ms())
    }
    /// The unit's letter.
    pub fn letter(self) -> char {
        match self {
            TimeUnit::S => 's',
            TimeUnit::M => 'm',
            TimeUnit::H => 'h',
            TimeUnit::D => 'd',
            TimeUnit::W => 'w',
        }
    }
}

/// `+` or `-` in `now - 7d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sign {
    /// Later than now.
    Plus,
    /// Earlier than now.
    Minus,
}

/// The offset of a relative time, as written (`- 7d`). In JSON, the string
/// `"-7d"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Offset {
    /// Direction.
    pub sign: Sign,
    /// How many units.
    pub amount: u64,
    /// Which unit.
    pub unit: TimeUnit,
}

impl Offset {
    /// Signed milliseconds, if they fit an `i64`.
    pub fn to_ms(self) -> Option<i64> {
        let ms = self.unit.to_ms(self.amount)?;
        Some(match self.sign {
            Sign::Plus => ms,
            Sign::Minus => -ms,
        })
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = match self.sign {
            Sign::Plus => '+',
            Sign::Minus => '-',
        };
        write!(f, "{sign}{}{}", self.amount, self.unit.letter())
    }
}

impl Serialize for Offset {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Offset {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Offset, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || serde::de::Error::custom(format!("offset '{text}' is not like -7d or +2h"));
        let mut chars = text.chars();
        let sign = match chars.next() {
            Some('+') => Sign::Plus,
            Some('-') => Sign::Minus,
            _ => return Err(bad()),
        };
        let rest = chars.as_str();
        let unit = match rest.chars().last() {
            Some('s') => TimeUnit::S,
            Some('m') => TimeUnit::M,
            Some('h') => TimeUnit::H,
            Some('d') => TimeUnit::D,
            Some('w') => TimeUnit::W,
            _ => return Err(bad()),
        };
        let digits = &rest[..rest.len() - 1];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let amount: u64 = digits.parse().map_err(|_| bad())?;
        if unit.to_ms(amount).is_none() {
            return Err(bad());
        }
        Ok(Offset { sign, amount, unit })
    }
}

mod rfc3339_ms {
    use engram_engine::time::{format_rfc3339, parse_rfc3339};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_rfc3339(*ms))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }
}

/// A point in time. In JSON: `{"time": "now", "offset": "-7d"}`,
/// `{"time": "at", "at": "2025-06-10T00:00:00Z"}`, `{"time": "param",
/// "param": "since"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "time", rename_all = "snake_case")]
pub enum TimeExpr {
    /// `now`, `now - 7d`: the engine clock at execution, plus the offset.
    Now {
        /// The offset, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        offset: Option<Offset>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
    /// An absolute time (`2025-06-10`, `'2025-06-10T09:00:00+02:00'`).
    At {
        /// Milliseconds since the epoch, UTC (RFC 3339 text in JSON).
        #[serde(rename = "at", with = "rfc3339_ms")]
        ms: i64,
        /// Where.
        #[serde(default)]
        span: Span,
    },
    /// `$name`: a parameter bound to a time or an RFC 3339 string.
    Param {
        /// The parameter's name.
        #[serde(rename = "param")]
        name: String,
        /// Where.
        #[serde(default)]
        span: Span,
    },
}

impl TimeExpr {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            TimeExpr::Now { span, .. }
            | TimeExpr::At { span, .. }
            | TimeExpr::Param { span, .. } => *span,
        }
    }
}

/// The language's record types (the engine's `RecordType`, which has no
/// `Deserialize`). Written singular or plural: `entity`, `entities`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordType {
    /// An episodic event.
    Event,
    /// An entity.
    Entity,
    /// A relation between two entities.
    Relation,
    /// A claim with provenance.
    Assertion,
    /// A summary of ordered inputs.
    Summary,
}

impl RecordType {
    /// All types.
    pub const ALL: [RecordType; 5] = [
        RecordType::Event,
        RecordType::Entity,
        RecordType::Relation,
        RecordType::Assertion,
        RecordType::Summary,
    ];
    /// Singular name (`entity`).
    pub fn name(self) -> &'static str {
        self.to_engine().name()
    }
    /// Plural name (`entities`): the canonical spelling after `FIND`.
    pub fn plural(self) -> &'static str {
        match self {
            RecordType::Event => "events",
            RecordType::Entity => "entities",
            RecordType::Relation => "relations",
            RecordType::Assertion => "assertions",
            RecordType::Summary => "summaries",
        }
    }
    /// Parses a singular or plural name, case-insensitively.
    pub fn parse(word: &str) -> Option<RecordType> {
        Self::ALL
            .into_iter()
            .find(|t| word.eq_ignore_ascii_case(t.name()) || word.eq_ignore_ascii_case(t.plural()))
    }
    /// The engine's type.
    pub fn to_engine(self) -> engram_engine::model::RecordType {
        use engram_engine::model::RecordType as E;
        match self {
            RecordType::Event => E::Event,
            RecordType::Entity => E::Entity,
            RecordType::Relation => E::Relation,
            RecordType::Assertion => E::Assertion,
            RecordType::Summary => E::Summary,
        }
    }
}

/// Statuses a statement may select (`status IN (...)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordStatus {
    /// Current versions that passed review (the engine's `active` and
    /// `approved`). The default when a statement names no status.
    Active,
    /// Versions replaced by a correction.
    Superseded,
    /// Current versions whose validity ended before `VALID AT` (the
    /// engine's `include_historical`).
    Historical,
    /// Records one of whose inputs changed, not yet regenerated.
    Stale,
    /// Never selectable: exists only so the checker can say so
    /// ([`super::ErrorKind::DeletedNotAllowed`]).
    Deleted,
}

impl RecordStatus {
    /// All names, `deleted` last.
    pub const ALL: [RecordStatus; 5] = [
        RecordStatus::Active,
        RecordStatus::Superseded,
        RecordStatus::Historical,
        RecordStatus::Stale,
        RecordStatus::Deleted,
    ];
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            RecordStatus::Active => "active",
            RecordStatus::Superseded => "superseded",
            RecordStatus::Historical => "historical",
            RecordStatus::Stale => "stale",
            RecordStatus::Deleted => "deleted",
        }
    }
    /// Parses a name, case-insensitively.
    pub fn parse(word: &str) -> Option<RecordStatus> {
        Self::ALL
            .into_iter()
            .find(|s| word.eq_ignore_ascii_case(s.name()))
    }
}

/// String-valued fields of `WHERE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TextField {
    /// `scope.user`.
    #[serde(rename = "scope.user")]
    ScopeUser,
    /// `scope.conversation`.
    #[serde(rename = "scope.conversation")]
    ScopeConversation,
    /// `scope.agent`.
    #[serde(rename = "scope.agent")]
    ScopeAgent,
    /// `scope.label`: true when the value is one of the record's scope labels.
    #[serde(rename = "scope.label")]
    ScopeLabel,
    /// `kind`.
    #[serde(rename = "kind")]
    Kind,
}

impl TextField {
    /// All, in documentation order.
    pub const ALL: [TextField; 5] = [
        TextField::ScopeUser,
        TextField::ScopeConversation,
        TextField::ScopeAgent,
        TextField::ScopeLabel,
        TextField::Kind,
    ];
    /// As written.
    pub fn name(self) -> &'static str {
        match self {
            TextField::ScopeUser => "scope.user",
            TextField::ScopeConversation => "scope.conversation",
            TextField::ScopeAgent => "scope.agent",
            TextField::ScopeLabel => "scope.label",
            TextField::Kind => "kind",
        }
    }
}

/// Time-valued fields of `WHERE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeField {
    /// Valid time: when it happened in the world.
    OccurredAt,
    /// Transaction time: when the store learned it.
    IngestedAt,
}

impl TimeField {
    /// As written.
    pub fn name(self) -> &'static str {
        match self {
            TimeField::OccurredAt => "occurred_at",
            TimeField::IngestedAt => "ingested_at",
        }
    }
}

/// Comparison of a time field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    /// `<`
    #[serde(rename = "<")]
    Lt,
    /// `<=`
    #[serde(rename = "<=")]
    Le,
    /// `>`
    #[serde(rename = ">")]
    Gt,
    /// `>=`
    #[serde(rename = ">=")]
    Ge,
}

impl CmpOp {
    /// As written.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// `field = v`, `field != v`, `field IN (...)`, `field NOT IN (...)` on a
/// string field. `= v` is a one-item list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextPredicate {
    /// The field.
    pub field: TextField,
    /// `!=` or `NOT IN`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub negated: bool,
    /// The values (true when the field equals any of them).
    pub values: StrList,
    /// Where (field to last value).
    #[serde(default)]
    pub span: Span,
}

/// `record = entity`, `record IN (entity, relation)`, negatable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordPredicate {
    /// `!=` or `NOT IN`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub negated: bool,
    /// The types (at least one).
    pub values: Vec<Spanned<RecordType>>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// `status = superseded`, `status IN (active, stale)`, negatable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusPredicate {
    /// `!=` or `NOT IN`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub negated: bool,
    /// The statuses (at least one).
    pub values: Vec<Spanned<RecordStatus>>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// `occurred_at >= now - 7d`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimePredicate {
    /// The field.
    pub field: TimeField,
    /// The comparison.
    pub op: CmpOp,
    /// The time compared with.
    pub value: TimeExpr,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// A `WHERE` expression. `AND` binds tighter than `OR`; `NOT` tighter than
/// both. A chain of one operator is one node (`a AND b AND c` has three
/// items); parentheses make a nested node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "expr", rename_all = "snake_case")]
pub enum Expr {
    /// All items hold.
    And {
        /// At least two when parsed.
        items: Vec<Expr>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
    /// Any item holds.
    Or {
        /// At least two when parsed.
        items: Vec<Expr>,
        /// Where.
        #[serde(default)]
        span: Span,
    },
    /// The operand does not hold.
    Not {
        /// The negated expression.
        operand: Box<Expr>,
        /// Where (from `NOT`).
        #[serde(default)]
        span: Span,
    },
    /// A string-field predicate.
    Text(TextPredicate),
    /// A record-type predicate.
    Record(RecordPredicate),
    /// A status predicate.
    Status(StatusPredicate),
    /// A time predicate.
    Time(TimePredicate),
}

impl Expr {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            Expr::And { span, .. } | Expr::Or { span, .. } | Expr::Not { span, .. } => *span,
            Expr::Text(p) => p.span,
            Expr::Record(p) => p.span,
            Expr::Status(p) => p.span,
            Expr::Time(p) => p.span,
        }
    }

    /// The same expression at `span` (a parenthesized group covers its
    /// parentheses).
    pub fn with_span(mut self, to: Span) -> Expr {
        match &mut self {
            Expr::And { span, .. } | Expr::Or { span, .. } | Expr::Not { span, .. } => *span = to,
            Expr::Text(p) => p.span = to,
            Expr::Record(p) => p.span = to,
            Expr::Status(p) => p.span = to,
            Expr::Time(p) => p.span = to,
        }
        self
    }

    /// Every node, parents before children (iterative: no recursion on
    /// the depth of the tree).
    pub fn nodes(&self) -> Vec<&Expr> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            out.push(e);
            match e {
                Expr::And { items, .. } | Expr::Or { items, .. } => {
                    stack.extend(items.iter().rev());
                }
                Expr::Not { operand, .. } => stack.push(operand),
                _ => {}
            }
        }
        out
    }

    /// Depth of the tree: a predicate is 1, each AND, OR, NOT adds one
    /// (iterative).
    pub fn depth(&self) -> usize {
        let mut max = 0;
        let mut stack = vec![(self, 1usize)];
        while let Some((e, d)) = stack.pop() {
            max = max.max(d);
            match e {
                Expr::And { items, .. } | Expr::Or { items, .. } => {
                    stack.extend(items.iter().map(|i| (i, d + 1)));
                }
                Expr::Not { operand, .. } => stack.push((operand, d + 1)),
                _ => {}
            }
        }
        max
    }

    /// Whether a status predicate appears anywhere. When none does, the
    /// statement selects `status = active` (the default).
    pub fn mentions_status(&self) -> bool {
        self.nodes().iter().any(|e| matches!(e, Expr::Status(_)))
    }
}

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
pub struct Weight {
    /// The retriever.
    pub name: Name,
    /// The weight (finite, >= 0).
    pub value: Arg<f64>,
    /// Where.
    #[serde(default)]
    pub span: Span,
}

/// `SOURCES [DEPTH n]` or `DERIVATIVES [DEPTH n]` after `WITH`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

impl ReturnField {
    /// All fields, in documentation order.
    pub const ALL: [ReturnField; 17] = [
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
#[serde(tag = "statement", rename_all = "snake_case")]
pub enum Body {
    /// `FIND ...`.
    Find(Find),
    /// `TRACE ...`.
    Trace(Trace),
}

/// A whole statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
