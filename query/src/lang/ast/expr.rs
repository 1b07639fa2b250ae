//! The `WHERE` expression of a statement: predicates on text, record
//! type, status and time, their operators and time values, and the boolean
//! expression over them.

use super::*;

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
    use engram_engine::time::{format_rfc3339, parse_rfc3339_bound};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_rfc3339(*ms))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        parse_rfc3339_bound(&text).map_err(serde::de::Error::custom)
    }
}

/// A point in time. In JSON: `{"time": "now", "offset": "-7d"}`,
/// `{"time": "at", "at": "2025-06-10T00:00:00Z"}`, `{"time": "param",
/// "param": "since"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// ([`crate::lang::ErrorKind::DeletedNotAllowed`]).
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
