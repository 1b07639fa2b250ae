//! The data model: what clients write ([`NewRecord`]) and what they read
//! back ([`Record`]), plus the limits every field is checked against.
//!
//! One record type covers the episodic log and the semantic layer, told
//! apart by [`RecordType`]:
//! - `event`: something that happened (a message, a tool result, an
//!   observation, a decision, a document, a system action);
//! - `entity`: a thing with a type, a canonical name and aliases;
//! - `relation`: a typed edge `subject -predicate-> object` between entities;
//! - `assertion`: a claim of some [`AssertionKind`] with provenance (`sources`);
//! - `summary`: a compression of an ordered list of inputs.
//!
//! Every record has a stable id, a tenant, a scope, two clocks (valid time
//! and transaction time), access labels, a writer and a retention class.
//! Semantic records additionally carry provenance and a review status.
//!
//! This module must never read or write storage; it only describes and
//! validates values.

use serde::Serialize;

use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::time::{TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS, TimestampMs, format_rfc3339};

/// Limits on every input, with a typed error past each.
mod check;
pub mod limits;

pub(crate) use check::check_time;
pub use check::{
    NameFault, canonical_data, check_identifier, check_name, check_query_vector, check_reason,
    check_tenant, check_vector, name_fault,
};

/// Version of the record schema written by this build.
pub const SCHEMA_VERSION: u16 = 1;

/// `name` with its indefinite article, for messages ("an event", "a
/// summary").
pub(crate) fn with_article(name: &str) -> String {
    let vowel = name
        .chars()
        .next()
        .is_some_and(|c| "aeiouAEIOU".contains(c));
    format!("{} {name}", if vowel { "an" } else { "a" })
}

/// Default retention class.
pub const DEFAULT_RETENTION_CLASS: &str = "standard";

/// What kind of record this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
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
    /// All types, in code order.
    pub const ALL: [RecordType; 5] = [
        RecordType::Event,
        RecordType::Entity,
        RecordType::Relation,
        RecordType::Assertion,
        RecordType::Summary,
    ];
    /// Stable numeric code (stored on disk).
    pub fn code(self) -> u8 {
        self as u8
    }
    /// From the numeric code.
    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(c as usize).copied()
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            RecordType::Event => "event",
            RecordType::Entity => "entity",
            RecordType::Relation => "relation",
            RecordType::Assertion => "assertion",
            RecordType::Summary => "summary",
        }
    }
    /// Parses the lower-case name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
    /// Whether records of this type carry provenance and review status.
    pub fn is_semantic(self) -> bool {
        self != RecordType::Event
    }
}

/// Kinds of assertion. Observations are not hypotheses: the kind is data
/// and survives summarization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AssertionKind {
    /// Something observed.
    Observation,
    /// Something suspected, not established.
    Hypothesis,
    /// Something established.
    Fact,
    /// A preference of a user.
    Preference,
    /// A knowledge note.
    Note,
    /// An instruction to the agent (procedural; needs approval when a model writes it).
    Instruction,
    /// A policy (procedural; needs approval when a model writes it).
    Policy,
    /// A procedure (procedural; needs approval when a model writes it).
    Procedure,
}

impl AssertionKind {
    /// All kinds.
    pub const ALL: [AssertionKind; 8] = [
        AssertionKind::Observation,
        AssertionKind::Hypothesis,
        AssertionKind::Fact,
        AssertionKind::Preference,
        AssertionKind::Note,
        AssertionKind::Instruction,
        AssertionKind::Policy,
        AssertionKind::Procedure,
    ];
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            AssertionKind::Observation => "observation",
            AssertionKind::Hypothesis => "hypothesis",
            AssertionKind::Fact => "fact",
            AssertionKind::Preference => "preference",
            AssertionKind::Note => "note",
            AssertionKind::Instruction => "instruction",
            AssertionKind::Policy => "policy",
            AssertionKind::Procedure => "procedure",
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
    /// Procedural memory: included in context deterministically once approved.
    pub fn is_procedural(self) -> bool {
        matches!(
            self,
            AssertionKind::Instruction | AssertionKind::Policy | AssertionKind::Procedure
        )
    }
}

/// Review and lifecycle status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// An event (or auto-applied record) that is current.
    Active,
    /// Awaiting review; invisible to ordinary retrieval.
    Candidate,
    /// Approved by a reviewer (or auto-applied by policy).
    Approved,
    /// Rejected by a reviewer.
    Rejected,
    /// Replaced by a correction; history only.
    Superseded,
    /// Withdrawn.
    Retracted,
    /// An input changed (corrected, deleted, revoked); excluded until regenerated.
    Stale,
    /// Deleted; content is purged at the next compaction.
    Deleted,
}

impl Status {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Candidate => "candidate",
            Status::Approved => "approved",
            Status::Rejected => "rejected",
            Status::Superseded => "superseded",
            Status::Retracted => "retracted",
            Status::Stale => "stale",
            Status::Deleted => "deleted",
        }
    }
    /// Why a record of this status is out of use, as a predicate ("is a
    /// review candidate, not in use"), if it is: a candidate (not yet
    /// reviewed), a rejected or a retracted record. Nothing corrects it
    /// (a correction would make its text a superseded version, which every
    /// reader may select) and nothing new cites it.
    pub fn out_of_use(self) -> Option<&'static str> {
        match self {
            Status::Candidate => Some("is a review candidate, not in use"),
            Status::Rejected => Some("was rejected in review and is out of use"),
            Status::Retracted => Some("was retracted and is out of use"),
            _ => None,
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Status::Active,
            Status::Candidate,
            Status::Approved,
            Status::Rejected,
            Status::Superseded,
            Status::Retracted,
            Status::Stale,
            Status::Deleted,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// Who wrote a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WriterKind {
    /// A person.
    #[default]
    User,
    /// A system adapter (telemetry, importer, the operator CLI).
    System,
    /// A model (LLM extraction, agent output).
    Model,
}

impl WriterKind {
    /// Numeric code (on disk).
    pub fn code(self) -> u8 {
        self as u8
    }
    /// From the code.
    pub fn from_code(c: u8) -> Option<Self> {
        [WriterKind::User, WriterKind::System, WriterKind::Model]
            .get(c as usize)
            .copied()
    }
    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            WriterKind::User => "user",
            WriterKind::System => "system",
            WriterKind::Model => "model",
        }
    }
    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(WriterKind::User),
            "system" => Some(WriterKind::System),
            "model" => Some(WriterKind::Model),
            _ => None,
        }
    }
}

/// The principal and kind that wrote a record.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Writer {
    /// Principal id.
    pub principal: String,
    /// Writer kind.
    pub kind: WriterKind,
}

/// Where a record belongs inside its tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Scope {
    /// The user it concerns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The conversation or thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// The agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Free labels (service names, environments, projects ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

/// A vector supplied with a record.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    /// Model id: one vector space per model id.
    pub model: String,
    /// The vector.
    pub vector: Vec<f32>,
}

/// How a semantic record was derived.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Derivation {
    /// Extractor, prompt or generator version.
    pub extractor: String,
    /// Model configuration, free text (model name, temperature, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_config: Option<String>,
    /// Whether a model generated the content.
    pub generated: bool,
}

/// A reference to a record: its id, or its external id in the session's tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RecordRef {
    /// An internal id.
    Id(RecordId),
    /// A client key.
    External(String),
    /// Text that is a valid internal id and could also be an external id
    /// (from [`RecordRef::parse`] of unprefixed text). It resolves to the
    /// one record it names; when it names one record as an internal id
    /// and another as an external id, resolution refuses
    /// ([`crate::EngineError::AmbiguousReference`]): never a guess.
    IdOrExternal(String),
}

impl RecordRef {
    /// Parses a reference written as text: `id:<id>` is an internal id,
    /// `ext:<text>` an external id, and unprefixed text an external id
    /// unless it is also a valid internal id (then
    /// [`RecordRef::IdOrExternal`]). An `id:` prefix on text that is not
    /// an id is an error.
    pub fn parse_text(s: &str) -> std::result::Result<RecordRef, String> {
        if let Some(rest) = s.strip_prefix("id:") {
            return rest
                .parse::<RecordId>()
                .map(RecordRef::Id)
                .map_err(|_| format!("'{rest}' after id: is not an internal id"));
        }
        if let Some(rest) = s.strip_prefix("ext:") {
            // (as `id:` with nothing after it is: no external id is empty)
            if rest.is_empty() {
                return Err("nothing after ext:: an external id is never empty".into());
            }
            return Ok(RecordRef::External(rest.to_string()));
        }
        Ok(match s.parse::<RecordId>() {
            Ok(_) => RecordRef::IdOrExternal(s.to_string()),
            Err(_) => RecordRef::External(s.to_string()),
        })
    }

    /// [`RecordRef::parse_text`], treating a malformed `id:` reference as
    /// an external id that names nothing.
    pub fn parse(s: &str) -> RecordRef {
        Self::parse_text(s).unwrap_or_else(|_| RecordRef::External(s.to_string()))
    }

    /// The internal id this reference may name.
    pub fn as_id(&self) -> Option<RecordId> {
        match self {
            RecordRef::Id(id) => Some(*id),
            RecordRef::IdOrExternal(s) => s.parse().ok(),
            RecordRef::External(_) => None,
        }
    }

    /// The external id this reference may name.
    pub fn as_external(&self) -> Option<&str> {
        match self {
            RecordRef::External(e) | RecordRef::IdOrExternal(e) => Some(e),
            RecordRef::Id(_) => None,
        }
    }
}

impl std::fmt::Display for RecordRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordRef::Id(id) => write!(f, "{id}"),
            RecordRef::External(e) => write!(f, "external id '{e}'"),
            RecordRef::IdOrExternal(s) => write!(f, "{s}"),
        }
    }
}

/// Type-specific content of a new record.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Body {
    /// An event.
    #[default]
    Event,
    /// An entity.
    Entity {
        /// Its type (person, service, customer ...).
        entity_type: String,
        /// Canonical name.
        name: String,
        /// Other names.
        aliases: Vec<String>,
    },
    /// A relation between two entities.
    Relation {
        /// Subject entity.
        subject: RecordRef,
        /// Predicate (`depends_on`, `owns` ...).
        predicate: String,
        /// Object entity.
        object: RecordRef,
    },
    /// A claim.
    Assertion {
        /// Its kind.
        kind: AssertionKind,
        /// Entity the claim is about, if any.
        subject: Option<RecordRef>,
        /// Predicate, if structured.
        predicate: Option<String>,
        /// Object value, if structured.
        object: Option<String>,
    },
    /// A summary; its inputs are the (ordered) `sources`.
    Summary {
        /// Generator version (prompt or algorithm).
        generator: String,
    },
}

impl Body {
    /// The record type of this body.
    pub fn record_type(&self) -> RecordType {
        match self {
            Body::Event => RecordType::Event,
            Body::Entity { .. } => RecordType::Entity,
            Body::Relation { .. } => RecordType::Relation,
            Body::Assertion { .. } => RecordType::Assertion,
            Body::Summary { .. } => RecordType::Summary,
        }
    }
}

/// A record as a client submits it. Tenant and authority come from the
/// session, never from here.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewRecord {
    /// Type-specific content.
    pub body: Body,
    /// Client key, unique per tenant; makes ingest idempotent.
    pub external_id: Option<String>,
    /// Scope inside the tenant.
    pub scope: Scope,
    /// Kind: for events free text (`user_message`, `tool_result` ...); for
    /// assertions it is the assertion kind; otherwise the record type name.
    pub kind: String,
    /// Valid time of the event; defaults to the ingest clock.
    pub occurred_at: Option<TimestampMs>,
    /// Start of validity (defaults to `occurred_at`).
    pub valid_from: Option<TimestampMs>,
    /// End of validity (`current_evidence_until` for events); past it the
    /// record is historical.
    pub valid_until: Option<TimestampMs>,
    /// When the claim was last checked.
    pub last_verified_at: Option<TimestampMs>,
    /// Text payload.
    pub text: Option<String>,
    /// JSON payload.
    pub data: Option<serde_json::Value>,
    /// Retention class (default `standard`).
    pub retention_class: Option<String>,
    /// Access labels: a reader needs every one of them.
    pub access: Vec<String>,
    /// Attributed writer; honoured only from sessions allowed to attribute
    /// (system adapters and admins), otherwise the session principal writes.
    pub writer: Option<Writer>,
    /// The record this one corrects. A correction inherits the corrected
    /// record's access labels, and its scope and external id when it gives
    /// none.
    pub supersedes: Option<RecordRef>,
    /// For a correction: `access` replaces the corrected record's labels
    /// instead of adding to them. Dropping a label needs the tenant admin.
    pub replace_access: bool,
    /// Vectors.
    pub embeddings: Vec<Embedding>,
    /// Provenance of semantic records (events/records in the same tenant).
    pub sources: Vec<RecordRef>,
    /// Derivation of semantic records.
    pub derivation: Option<Derivation>,
    /// Confidence in [0, 1].
    pub confidence: Option<f32>,
}

impl NewRecord {
    /// `replace_access` on a record that corrects none, refused as
    /// (field, why): one rule for the store and for `engram ingest`, which
    /// asks it when it reads the file. Not part of `validate`: a
    /// correction command parses its body first and names its target
    /// after.
    pub fn misplaced_replace_access(&self) -> Option<(&'static str, &'static str)> {
        (self.replace_access && self.supersedes.is_none()).then_some((
            "replace_access",
            "applies to a correction only (with supersedes): a new record's access is its own `access`",
        ))
    }

    /// The bytes of its text and of its data as JSON: the bulk of its frame.
    pub fn content_bytes(&self) -> usize {
        content_bytes(self.text.as_deref(), self.data.as_ref())
    }

    /// An event with text.
    pub fn event(kind: impl Into<String>, text: impl Into<String>) -> Self {
        NewRecord {
            kind: kind.into(),
            text: Some(text.into()),
            ..NewRecord::default()
        }
    }

    /// An assertion with a statement and sources.
    pub fn assertion(
        kind: AssertionKind,
        statement: impl Into<String>,
        sources: Vec<RecordRef>,
    ) -> Self {
        NewRecord {
            body: Body::Assertion {
                kind,
                subject: None,
                predicate: None,
                object: None,
            },
            kind: kind.name().to_string(),
            text: Some(statement.into()),
            sources,
            ..NewRecord::default()
        }
    }

    /// Builder: external id.
    pub fn with_external_id(mut self, e: impl Into<String>) -> Self {
        self.external_id = Some(e.into());
        self
    }
    /// Builder: scope.
    pub fn with_scope(mut self, s: Scope) -> Self {
        self.scope = s;
        self
    }
    /// Builder: access labels.
    pub fn with_access(mut self, labels: &[&str]) -> Self {
        self.access = labels.iter().map(|s| s.to_string()).collect();
        self
    }
    /// Builder: occurred_at.
    pub fn at(mut self, ms: TimestampMs) -> Self {
        self.occurred_at = Some(ms);
        self
    }
    /// Builder: supersedes.
    pub fn superseding(mut self, r: RecordRef) -> Self {
        self.supersedes = Some(r);
        self
    }
    /// Builder: an embedding.
    pub fn with_embedding(mut self, model: impl Into<String>, vector: Vec<f32>) -> Self {
        self.embeddings.push(Embedding {
            model: model.into(),
            vector,
        });
        self
    }
}

/// A stored record as read back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// Stable id.
    pub id: RecordId,
    /// Client key.
    pub external_id: Option<String>,
    /// Record type.
    pub record: RecordType,
    /// Tenant.
    pub tenant: String,
    /// Scope.
    pub scope: Scope,
    /// Kind.
    pub kind: String,
    /// Current status.
    pub status: Status,
    /// Whether its validity has ended (an active or approved record whose
    /// `valid_until` has passed): historical, as retrieval marks it.
    pub historical: bool,
    /// Valid time of the event.
    #[serde(serialize_with = "ser_time")]
    pub occurred_at: TimestampMs,
    /// Transaction time.
    #[serde(serialize_with = "ser_time")]
    pub ingested_at: TimestampMs,
    /// Start of validity.
    #[serde(
        serialize_with = "ser_opt_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_from: Option<TimestampMs>,
    /// End of validity (possibly set later by an expiry).
    #[serde(
        serialize_with = "ser_opt_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub valid_until: Option<TimestampMs>,
    /// Last verification.
    #[serde(
        serialize_with = "ser_opt_time",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_verified_at: Option<TimestampMs>,
    /// Text.
    pub text: Option<String>,
    /// JSON data.
    pub data: Option<serde_json::Value>,
    /// SHA-256 of the canonical content, hex.
    pub content_sha256: String,
    /// Schema version.
    pub schema_version: u16,
    /// Ingest run.
    pub ingest_run_id: RecordId,
    /// The record this one corrects.
    pub supersedes: Option<RecordId>,
    /// The record that corrects this one.
    pub superseded_by: Option<RecordId>,
    /// Retention class.
    pub retention_class: String,
    /// Access labels as written.
    pub access: Vec<String>,
    /// Effective access: own labels plus every source's (strictest of inputs).
    pub effective_access: Vec<String>,
    /// Writer.
    pub writer: Writer,
    /// Model ids of attached vectors, with dimensions.
    pub embeddings: Vec<EmbeddingInfo>,
    /// Entity type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entity_type: Option<String>,
    /// Entity name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Entity aliases.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Relation/assertion subject.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<RecordId>,
    /// Relation/assertion predicate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicate: Option<String>,
    /// Relation object entity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<RecordId>,
    /// Assertion object value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_value: Option<String>,
    /// Provenance (ordered inputs for summaries).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<RecordId>,
    /// Derivation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub derivation: Option<Derivation>,
    /// Confidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f32>,
    /// Summary generator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// Log sequence number of the record's frame.
    pub lsn: u64,
    /// Its text and data are left out of this answer: a history past its
    /// byte budget ([`crate::db::HISTORY_BYTES_MAX`]; read the version by
    /// id).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub content_omitted: bool,
}

impl Record {
    /// The bytes of its text and of its data as JSON: what dominates the
    /// size of a record in an answer.
    pub fn content_bytes(&self) -> usize {
        content_bytes(self.text.as_deref(), self.data.as_ref())
    }

    /// [`Record::content_bytes`] with its text counted as a JSON answer
    /// writes it ([`json_text_bytes`]): what a page's byte budget counts.
    pub fn answer_bytes(&self) -> usize {
        self.text.as_deref().map_or(0, json_text_bytes) + data_bytes(self.data.as_ref())
    }
}

/// The bytes of `text` inside a JSON string, as serde_json escapes it: a
/// quote, a backslash and `\b \f \n \r \t` take two bytes, every other
/// control character six (`\u0001`). What an answer carrying the text
/// costs: a mebibyte of control characters is six in JSON, and a byte
/// budget counting raw text would let an answer grow six times over it.
pub fn json_text_bytes(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// The bytes of a text and of a data value as JSON (a record's bulk, read
/// back or to be written).
fn content_bytes(text: Option<&str>, data: Option<&serde_json::Value>) -> usize {
    text.map_or(0, str::len) + data_bytes(data)
}

/// The bytes of a data value as JSON.
fn data_bytes(data: Option<&serde_json::Value>) -> usize {
    data.map_or(0, |d| serde_json::to_vec(d).map_or(0, |v| v.len()))
}

/// A vector attached to a record (the vector itself is not repeated).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EmbeddingInfo {
    /// Model id.
    pub model: String,
    /// Dimensions.
    pub dim: usize,
}

fn ser_time<S: serde::Serializer>(t: &TimestampMs, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*t))
}

fn ser_opt_time<S: serde::Serializer>(
    t: &Option<TimestampMs>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&format_rfc3339(*t)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_text_bytes_counts_what_serde_json_writes() {
        for t in [
            "",
            "plain",
            "quote \" and \\",
            "\u{1}\u{1f}\n\t\r\u{8}\u{c}",
            "é 日本 \u{7f}",
        ] {
            let written = serde_json::to_string(t).unwrap().len() - 2;
            assert_eq!(json_text_bytes(t), written, "{t:?}");
        }
    }

    #[test]
    fn query_vectors_are_judged_the_same_on_the_fast_and_the_exact_path() {
        let ok = |v: &[f32]| check_query_vector("vector", v).is_ok();
        assert!(ok(&[0.5; 384]));
        assert!(ok(&[0.0, 0.0, 1.0]));
        // squares underflow to zero, yet the vector is not zero
        assert!(ok(&[1e-30; 8]));
        // squares overflow, yet every component is finite
        assert!(ok(&[1e30; 8]));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut v = vec![0.25f32; 384];
            v[200] = bad;
            let e = check_query_vector("vector", &v).unwrap_err().to_string();
            assert!(e.contains("component 200"), "{e}");
        }
        let e = check_query_vector("vector", &[0.0; 16])
            .unwrap_err()
            .to_string();
        assert!(e.contains("zero"), "{e}");
        assert!(!ok(&[]));
        assert!(!ok(&vec![1.0; limits::VECTOR_DIM_MAX + 1]));
    }

    #[test]
    fn events_need_text_or_data() {
        let mut r = NewRecord {
            kind: "user_message".into(),
            ..NewRecord::default()
        };
        assert!(r.validate().unwrap_err().to_string().contains("text"));
        r.data = Some(serde_json::json!({"a": 1}));
        r.validate().unwrap();
    }

    #[test]
    fn bad_fields_are_named() {
        let ok = NewRecord::event("user_message", "hi");
        ok.validate().unwrap();
        let cases: Vec<(NewRecord, &str)> = vec![
            (
                NewRecord {
                    kind: "".into(),
                    ..ok.clone()
                },
                "kind",
            ),
            (
                ok.clone().with_embedding("m", vec![1.0, f32::NAN]),
                "embedding.vector",
            ),
            (ok.clone().with_embedding("m", vec![]), "embedding.vector"),
            (
                NewRecord {
                    valid_until: Some(0),
                    valid_from: Some(10),
                    ..ok.clone()
                },
                "valid_until",
            ),
            (
                NewRecord {
                    access: vec!["".into()],
                    ..ok.clone()
                },
                "access",
            ),
            (
                NewRecord {
                    confidence: Some(1.5),
                    ..ok.clone()
                },
                "confidence",
            ),
            (
                NewRecord {
                    sources: vec![RecordRef::External("x".into())],
                    ..ok.clone()
                },
                "sources",
            ),
            (
                NewRecord::assertion(AssertionKind::Fact, "x", vec![]),
                "sources",
            ),
        ];
        for (r, field) in cases {
            let e = r.validate().unwrap_err();
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
    }

    #[test]
    fn names_roundtrip() {
        for t in RecordType::ALL {
            assert_eq!(RecordType::parse(t.name()), Some(t));
            assert_eq!(RecordType::from_code(t.code()), Some(t));
        }
        for k in AssertionKind::ALL {
            assert_eq!(AssertionKind::parse(k.name()), Some(k));
        }
        assert_eq!(Status::parse("stale"), Some(Status::Stale));
    }
}
