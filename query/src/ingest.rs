//! The JSONL ingest format: one JSON object per line, compiled to
//! [`NewRecord`]s. Errors name the line and the field.
//!
//! ```json
//! {"external_id": "conv_993/17", "tenant": "tenant_42",
//!  "scope": {"user": "user_18", "conversation": "conv_993"},
//!  "kind": "user_message", "occurred_at": "2025-03-08T10:14:21Z",
//!  "text": "Use the revised retention policy.", "data": {"any": "json"},
//!  "retention_class": "standard", "access": ["incident_readers"],
//!  "writer": {"principal": "user_18", "kind": "user"}, "supersedes": null}
//! ```
//!
//! Fields (all optional unless noted; `null` is the same as absent):
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `record` | string | `event` (default), `entity`, `relation`, `assertion`, `summary` |
//! | `tenant` | string | required unless given on the command line |
//! | `kind` | string | required for events; for assertions one of observation, hypothesis, fact, preference, note, instruction, policy, procedure; defaults to the record type otherwise |
//! | `external_id` | string | client key, unique per tenant (idempotent ingest) |
//! | `scope` | object | `user`, `conversation`, `agent` (strings), `labels` (strings) |
//! | `occurred_at` | RFC 3339 | valid time; defaults to the ingest clock |
//! | `valid_from`, `valid_until`, `last_verified_at` | RFC 3339 | validity; `current_evidence_until` is an alias of `valid_until` |
//! | `text` | string | text payload (events need `text` and/or `data`) |
//! | `data` | any JSON | structured payload |
//! | `retention_class` | string | default `standard` |
//! | `access` | strings | labels a reader must all hold |
//! | `writer` | object | `principal`, `kind` (`user`, `system`, `model`) |
//! | `supersedes` | string | id or external id (same tenant) of the record this corrects |
//! | `embedding` | object | `{"model": "...", "vector": [numbers]}`; or `embeddings`: a list of them |
//! | `sources` | strings | ids or external ids this record was derived from (assertions, summaries: required) |
//! | `derivation` | object | `extractor` (string), `model_config` (string), `generated` (bool) |
//! | `confidence` | number | in [0, 1] |
//! | `entity_type`, `name`, `aliases` | | entities |
//! | `subject`, `predicate`, `object` | | relations (subject/object: entity ids or external ids); assertions (object: a value) |
//! | `generator` | string | summaries: generator version |
//!
//! Unknown fields are rejected (a misspelt field would otherwise be lost
//! silently).
//!
//! This module must never touch a store; it only parses.

use engram_engine::model::{
    AssertionKind, Body, Derivation, Embedding, NewRecord, RecordRef, RecordType, Scope, Writer,
    WriterKind,
};
use engram_engine::time::parse_rfc3339;
use serde_json::{Map, Value};

/// Every field the format knows.
pub const FIELDS: &[&str] = &[
    "record",
    "tenant",
    "kind",
    "external_id",
    "scope",
    "occurred_at",
    "valid_from",
    "valid_until",
    "current_evidence_until",
    "last_verified_at",
    "text",
    "data",
    "retention_class",
    "access",
    "writer",
    "supersedes",
    "replace_access",
    "embedding",
    "embeddings",
    "sources",
    "derivation",
    "confidence",
    "entity_type",
    "name",
    "aliases",
    "subject",
    "predicate",
    "object",
    "generator",
];

/// A parse error: which line, which field, what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {}", self.fault())]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// Field at fault (`-` for the line as a whole).
    pub field: String,
    /// What is wrong.
    pub reason: String,
    /// Where in the line's text a JSON syntax error is (line, column; both
    /// 1-based), when the text is not JSON at all.
    pub json_at: Option<(usize, usize)>,
}

impl LineError {
    /// What is wrong, without the line: `field: reason`, or the reason
    /// alone for the line as a whole (`-`).
    pub fn fault(&self) -> String {
        if self.field == "-" {
            self.reason.clone()
        } else {
            format!("{}: {}", self.field, self.reason)
        }
    }
}

/// One parsed line.
#[derive(Clone, Debug, PartialEq)]
pub struct IngestLine {
    /// 1-based line number.
    pub line: usize,
    /// Tenant named by the line, if any.
    pub tenant: Option<String>,
    /// Whether the line has a `tenant` key at all (`null` included): a
    /// server, whose tenant is the key's, refuses the field by its name.
    pub names_tenant: bool,
    /// The record.
    pub record: NewRecord,
}

type FieldResult<T> = Result<T, (String, String)>;

fn err<T>(field: &str, reason: impl Into<String>) -> FieldResult<T> {
    Err((field.to_string(), reason.into()))
}

/// A record reference (`id:<id>`, `ext:<external id>`, or unprefixed).
fn opt_ref(o: &Map<String, Value>, f: &str) -> FieldResult<Option<RecordRef>> {
    opt_str(o, f)?
        .map(|s| RecordRef::parse_text(&s).map_err(|e| (f.to_string(), e)))
        .transpose()
}

fn opt_str(o: &Map<String, Value>, f: &str) -> FieldResult<Option<String>> {
    match o.get(f) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => err(f, format!("expected a string, found {}", kind_of(v))),
    }
}

fn opt_time(o: &Map<String, Value>, f: &str) -> FieldResult<Option<i64>> {
    match opt_str(o, f)? {
        None => Ok(None),
        Some(s) => parse_rfc3339(&s)
            .map(Some)
            .map_err(|e| (f.to_string(), e.to_string())),
    }
}

fn str_list(o: &Map<String, Value>, f: &str) -> FieldResult<Vec<String>> {
    match o.get(f) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                v => err(
                    &format!("{f}[{i}]"),
                    format!("expected a string, found {}", kind_of(v)),
                ),
            })
            .collect(),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(v) => err(
            f,
            format!("expected a list of strings, found {}", kind_of(v)),
        ),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses a JSON array of numbers as a vector (NaN/inf cannot appear in JSON;
/// values outside f32 range are rejected).
pub fn parse_vector(v: &Value, field: &str) -> Result<Vec<f32>, (String, String)> {
    let Value::Array(a) = v else {
        return err(
            field,
            format!("expected a list of numbers, found {}", kind_of(v)),
        );
    };
    a.iter()
        .enumerate()
        .map(|(i, x)| match x.as_f64() {
            Some(f) if f.is_finite() && f.abs() <= f32::MAX as f64 => Ok(f as f32),
            Some(_) => err(field, format!("component {i} is out of the f32 range")),
            None => err(
                field,
                format!("component {i} is {}, not a number", kind_of(x)),
            ),
        })
        .collect()
}

fn embedding(v: &Value, field: &str) -> FieldResult<Embedding> {
    let Value::Object(o) = v else {
        return err(
            field,
            "expected an object {\"model\": ..., \"vector\": [...]}",
        );
    };
    known_subfields(o, field, &["model", "vector"])?;
    let model = opt_str(o, "model")
        .map_err(|(f, r)| (format!("{field}.{f}"), r))?
        .ok_or_else(|| (format!("{field}.model"), "required".to_string()))?;
    let vector = parse_vector(
        o.get("vector")
            .ok_or_else(|| (format!("{field}.vector"), "required".to_string()))?,
        &format!("{field}.vector"),
    )?;
    Ok(Embedding { model, vector })
}

/// The JSON object on line `line` (shared by every JSONL form).
pub(crate) fn json_object(text: &str, line: usize) -> Result<Map<String, Value>, LineError> {
    let whole = |reason: String| LineError {
        line,
        field: "-".into(),
        reason,
        json_at: None,
    };
    match crate::strict::parse(text) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(v) => Err(whole(format!(
            "expected a JSON object, found {}",
            kind_of(&v)
        ))),
        Err(Ok((field, reason))) => Err(LineError {
            line,
            field,
            reason,
            json_at: None,
        }),
        Err(Err(e)) => Err(LineError {
            json_at: Some((e.line(), e.column())),
            ..whole(format!(
                "not valid JSON: {}",
                crate::strict::json_error_reason(&e)
            ))
        }),
    }
}

/// A field error `(field, reason)` placed on line `line`.
pub(crate) fn at_line(line: usize) -> impl Fn((String, String)) -> LineError {
    move |(field, reason)| LineError {
        line,
        field,
        reason,
        json_at: None,
    }
}

/// Refuses any key of `o` not in `fields` (a misspelt field would
/// otherwise be silently lost).
pub(crate) fn known_fields(o: &Map<String, Value>, fields: &[&str]) -> FieldResult<()> {
    match o.keys().find(|k| !fields.contains(&k.as_str())) {
        // (an empty key is named as JSON writes it)
        Some(k) => err(
            if k.is_empty() { "\"\"" } else { k },
            format!("unknown field; known fields: {}", fields.join(", ")),
        ),
        None => Ok(()),
    }
}

/// Refuses any key of the object `parent` holds that is not in `fields`,
/// named as `parent.key`.
fn known_subfields(o: &Map<String, Value>, parent: &str, fields: &[&str]) -> FieldResult<()> {
    match o.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(k) => err(
            &format!("{parent}.{k}"),
            format!("unknown field (expected {})", fields.join(", ")),
        ),
        None => Ok(()),
    }
}

/// The fields that belong to one record type only, and the types whose
/// fields they are (a field of another type is refused by name rather
/// than dropped).
const TYPE_FIELDS: &[(&str, &[RecordType])] = &[
    ("entity_type", &[RecordType::Entity]),
    ("name", &[RecordType::Entity]),
    ("aliases", &[RecordType::Entity]),
    ("subject", &[RecordType::Relation, RecordType::Assertion]),
    ("predicate", &[RecordType::Relation, RecordType::Assertion]),
    ("object", &[RecordType::Relation, RecordType::Assertion]),
    ("generator", &[RecordType::Summary]),
];

/// Parses one line. `default_tenant` is the command line's `--tenant`.
pub fn parse_line(text: &str, line: usize) -> Result<IngestLine, LineError> {
    let o = json_object(text, line)?;
    parse_object(&o)
        .map_err(at_line(line))
        .map(|(tenant, record)| IngestLine {
            line,
            tenant,
            names_tenant: o.contains_key("tenant"),
            record,
        })
}

fn parse_object(o: &Map<String, Value>) -> FieldResult<(Option<String>, NewRecord)> {
    known_fields(o, FIELDS)?;
    let rtype = match opt_str(o, "record")? {
        None => RecordType::Event,
        Some(s) => RecordType::parse(&s).ok_or_else(|| {
            (
                "record".to_string(),
                format!("'{s}' is not one of event, entity, relation, assertion, summary"),
            )
        })?,
    };
    let tenant = opt_str(o, "tenant")?;
    let kind = opt_str(o, "kind")?;
    let scope = match o.get("scope") {
        None | Some(Value::Null) => Scope::default(),
        Some(Value::Object(s)) => {
            known_subfields(s, "scope", &["user", "conversation", "agent", "labels"])?;
            let sub = |f: &str| opt_str(s, f).map_err(|(_, r)| (format!("scope.{f}"), r));
            Scope {
                user: sub("user")?,
                conversation: sub("conversation")?,
                agent: sub("agent")?,
                labels: str_list(s, "labels").map_err(|(f, r)| (format!("scope.{f}"), r))?,
            }
        }
        Some(v) => return err("scope", format!("expected an object, found {}", kind_of(v))),
    };
    let valid_until = match (
        opt_time(o, "valid_until")?,
        opt_time(o, "current_evidence_until")?,
    ) {
        (Some(_), Some(_)) => {
            return err(
                "current_evidence_until",
                "give valid_until or current_evidence_until, not both",
            );
        }
        (a, b) => a.or(b),
    };
    let writer = match o.get("writer") {
        None | Some(Value::Null) => None,
        Some(Value::Object(w)) => {
            known_subfields(w, "writer", &["principal", "kind"])?;
            let principal = opt_str(w, "principal")
                .map_err(|(_, r)| ("writer.principal".to_string(), r))?
                .ok_or_else(|| ("writer.principal".to_string(), "required".to_string()))?;
            let kind = match opt_str(w, "kind").map_err(|(_, r)| ("writer.kind".to_string(), r))? {
                None => WriterKind::User,
                Some(k) => WriterKind::parse(&k).ok_or_else(|| {
                    (
                        "writer.kind".to_string(),
                        format!("'{k}' is not one of user, system, model"),
                    )
                })?,
            };
            Some(Writer { principal, kind })
        }
        Some(v) => {
            return err(
                "writer",
                format!("expected an object, found {}", kind_of(v)),
            );
        }
    };
    let mut embeddings = Vec::new();
    if let Some(v) = o.get("embedding").filter(|v| !v.is_null()) {
        embeddings.push(embedding(v, "embedding")?);
    }
    match o.get("embeddings") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, v) in a.iter().enumerate() {
                embeddings.push(embedding(v, &format!("embeddings[{i}]"))?);
            }
        }
        Some(v) => {
            return err(
                "embeddings",
                format!("expected a list, found {}", kind_of(v)),
            );
        }
    }
    let derivation = match o.get("derivation") {
        None | Some(Value::Null) => None,
        Some(Value::Object(d)) => Some(Derivation {
            extractor: {
                known_subfields(d, "derivation", &["extractor", "model_config", "generated"])?;
                opt_str(d, "extractor")
                    .map_err(|(_, r)| ("derivation.extractor".to_string(), r))?
                    .ok_or_else(|| ("derivation.extractor".to_string(), "required".to_string()))?
            },
            model_config: match d.get("model_config") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => Some(v.to_string()),
            },
            generated: match d.get("generated") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return err(
                        "derivation.generated",
                        format!("expected a boolean, found {}", kind_of(v)),
                    );
                }
            },
        }),
        Some(v) => {
            return err(
                "derivation",
                format!("expected an object, found {}", kind_of(v)),
            );
        }
    };
    let confidence = match o.get("confidence") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => Some(n.as_f64().unwrap_or(f64::NAN) as f32),
        Some(v) => {
            return err(
                "confidence",
                format!("expected a number, found {}", kind_of(v)),
            );
        }
    };
    let sources: Vec<RecordRef> = str_list(o, "sources")?
        .iter()
        .map(|s| RecordRef::parse_text(s).map_err(|e| ("sources".to_string(), e)))
        .collect::<FieldResult<_>>()?;
    let refs = |f: &str| opt_ref(o, f);
    for (f, types) in TYPE_FIELDS {
        if !types.contains(&rtype) && o.get(*f).is_some_and(|v| !v.is_null()) {
            let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
            return err(
                f,
                format!(
                    "not a field of {}s (a field of {}: set \"record\")",
                    rtype.name(),
                    names.join(" and ")
                ),
            );
        }
    }
    let body = match rtype {
        RecordType::Event => Body::Event,
        RecordType::Entity => Body::Entity {
            entity_type: opt_str(o, "entity_type")?.ok_or_else(|| {
                (
                    "entity_type".to_string(),
                    "required for entities".to_string(),
                )
            })?,
            name: opt_str(o, "name")?
                .ok_or_else(|| ("name".to_string(), "required for entities".to_string()))?,
            aliases: str_list(o, "aliases")?,
        },
        RecordType::Relation => Body::Relation {
            subject: refs("subject")?
                .ok_or_else(|| ("subject".to_string(), "required for relations".to_string()))?,
            predicate: opt_str(o, "predicate")?.ok_or_else(|| {
                (
                    "predicate".to_string(),
                    "required for relations".to_string(),
                )
            })?,
            object: refs("object")?
                .ok_or_else(|| ("object".to_string(), "required for relations".to_string()))?,
        },
        RecordType::Assertion => {
            let k = kind.clone().ok_or_else(|| {
                (
                    "kind".to_string(),
                    "required for assertions (observation, hypothesis, fact, preference, note, instruction, policy, procedure)".to_string(),
                )
            })?;
            let kind = AssertionKind::parse(&k).ok_or_else(|| {
                (
                    "kind".to_string(),
                    format!("'{k}' is not an assertion kind (observation, hypothesis, fact, preference, note, instruction, policy, procedure)"),
                )
            })?;
            let object = match o.get("object") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => Some(v.to_string()),
            };
            Body::Assertion {
                kind,
                subject: refs("subject")?,
                predicate: opt_str(o, "predicate")?,
                object,
            }
        }
        RecordType::Summary => Body::Summary {
            generator: opt_str(o, "generator")?.unwrap_or_else(|| "unspecified".to_string()),
        },
    };
    let kind = match (kind, rtype) {
        (Some(k), _) => k,
        (None, RecordType::Event) => {
            return err(
                "kind",
                "required for events (e.g. user_message, tool_result, observation)",
            );
        }
        (None, t) => t.name().to_string(),
    };
    let record = NewRecord {
        body,
        external_id: opt_str(o, "external_id")?,
        scope,
        kind,
        occurred_at: opt_time(o, "occurred_at")?,
        valid_from: opt_time(o, "valid_from")?,
        valid_until,
        last_verified_at: opt_time(o, "last_verified_at")?,
        text: opt_str(o, "text")?,
        data: o.get("data").filter(|v| !v.is_null()).cloned(),
        retention_class: opt_str(o, "retention_class")?,
        access: str_list(o, "access")?,
        writer,
        supersedes: opt_ref(o, "supersedes")?,
        replace_access: match o.get("replace_access") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err((
                    "replace_access".to_string(),
                    "expected true or false".to_string(),
                ));
            }
        },
        embeddings,
        sources,
        derivation,
        confidence,
    };
    record
        .validate()
        .and_then(|()| {
            // (data's stored form is checked too: an append would refuse
            // it after earlier batches of its file were stored)
            record.data.as_ref().map_or(Ok(()), |d| {
                engram_engine::model::canonical_data(d).map(drop)
            })
        })
        .map_err(|e| match e {
            engram_engine::EngineError::InvalidInput { field, reason, .. } => (field, reason),
            // `what` starts with the field it measures ("text length in bytes")
            engram_engine::EngineError::LimitExceeded { ref what, .. } => (
                what.split_whitespace().next().unwrap_or("-").to_string(),
                e.to_string(),
            ),
            other => ("-".to_string(), other.to_string()),
        })?;
    Ok((tenant, record))
}

/// Parses a whole JSONL text; blank lines and lines starting with `#` or
/// `//` are skipped. Stops at the first error.
pub fn parse_jsonl(text: &str) -> Result<Vec<IngestLine>, LineError> {
    parse_jsonl_lines(text).collect()
}

/// Parses a JSONL text lazily, line by line (blank lines and lines starting
/// with `#` or `//` skipped): each item is one line's record or that line's
/// error, in file order. Unlike [`parse_jsonl`] it goes on after an error,
/// so a caller can report every malformed line (and show progress).
pub fn parse_jsonl_lines(text: &str) -> impl Iterator<Item = Result<IngestLine, LineError>> + '_ {
    text.lines().enumerate().filter_map(|(i, l)| {
        let t = l.trim();
        if is_skipped_line(t) {
            return None;
        }
        Some(parse_line(t, i + 1))
    })
}

/// Whether a (trimmed) line of ingest input holds no record: blank, or a
/// comment starting with `#` or `//`. One rule for files and for the
/// server's bulk NDJSON.
pub fn is_skipped_line(t: &str) -> bool {
    t.is_empty() || t.starts_with('#') || t.starts_with("//")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data` past its limit in stored (canonical) form fails the line
    /// itself, so a file holding it stores nothing rather than the batches
    /// before it.
    #[test]
    fn data_over_its_limit_fails_the_line() {
        let max = engram_engine::model::limits::DATA_BYTES_MAX;
        let line = |n: usize| {
            format!(
                r#"{{"tenant":"t","kind":"note","data":{{"x":"{}"}}}}"#,
                "b".repeat(n)
            )
        };
        let e = parse_line(&line(max + 10), 7).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (7, "data"), "{e}");
        assert!(e.to_string().contains("canonical JSON"), "{e}");
        parse_line(&line(max - 100), 1).expect("within the limit");
    }

    /// A misspelt field inside an object, or a field of another record
    /// type, is refused by name (it was dropped without a word: a
    /// derivation's `genrated` read as not generated).
    #[test]
    fn unknown_nested_fields_and_fields_of_another_type_are_refused() {
        let field = |l: &str| parse_line(l, 1).unwrap_err().field;
        let a = r#""tenant":"t","record":"assertion","kind":"fact","text":"a","sources":["x"]"#;
        assert_eq!(
            field(&format!(
                r#"{{{a},"derivation":{{"extractor":"e","genrated":true}}}}"#
            )),
            "derivation.genrated"
        );
        assert_eq!(
            field(r#"{"tenant":"t","kind":"k","text":"a","writer":{"principal":"p","x":1}}"#),
            "writer.x"
        );
        assert_eq!(
            field(r#"{"tenant":"t","kind":"k","text":"a","scope":{"usr":"u"}}"#),
            "scope.usr"
        );
        let e = r#""tenant":"t","record":"entity","entity_type":"service","name":"db""#;
        assert_eq!(field(&format!(r#"{{{e},"predicate":"p"}}"#)), "predicate");
        let r = r#""tenant":"t","record":"relation","subject":"a","predicate":"p","object":"b""#;
        assert_eq!(field(&format!(r#"{{{r},"name":"n"}}"#)), "name");
        assert_eq!(field(&format!(r#"{{{a},"generator":"g"}}"#)), "generator");
        assert_eq!(
            field(r#"{"tenant":"t","kind":"k","text":"a","aliases":[]}"#),
            "aliases"
        );
        // the fields of the line's own type, and null for another's, parse
        parse_line(
            &format!(r#"{{{a},"subject":"s","predicate":"p","object":"o","name":null}}"#),
            1,
        )
        .unwrap();
        parse_line(&format!(r#"{{{e},"aliases":["x"]}}"#), 1).unwrap();
        let d = parse_line(
            &format!(
                r#"{{{a},"derivation":{{"extractor":"e","model_config":"m","generated":true}}}}"#
            ),
            1,
        )
        .unwrap();
        assert!(d.record.derivation.unwrap().generated);
    }

    /// A fault of the line as a whole names no field.
    #[test]
    fn a_line_that_is_not_json_names_no_field() {
        let e = parse_line(r#"{"tenant":"t","kind":"n","data":{"a":1e400}}"#, 3).unwrap_err();
        assert_eq!(e.field, "-");
        let text = e.to_string();
        assert!(text.starts_with("line 3: not valid JSON"), "{text}");
        // (recall --queries shows the fault beside its own line number)
        assert!(e.fault().starts_with("not valid JSON"), "{}", e.fault());
    }

    #[test]
    fn the_documented_example_parses() {
        let l = r#"{"external_id": "conv_993/17", "tenant": "tenant_42", "scope": {"user": "user_18", "conversation": "conv_993"}, "kind": "user_message", "occurred_at": "2025-03-08T10:14:21Z", "text": "Use the revised retention policy.", "data": {"any": "json"}, "retention_class": "standard", "access": ["incident_readers"], "writer": {"principal": "user_18", "kind": "user"}, "supersedes": null}"#;
        let p = parse_line(l, 1).unwrap();
        assert_eq!(p.tenant.as_deref(), Some("tenant_42"));
        let r = p.record;
        assert_eq!(r.external_id.as_deref(), Some("conv_993/17"));
        assert_eq!(r.scope.conversation.as_deref(), Some("conv_993"));
        assert_eq!(r.occurred_at, Some(1_741_428_861_000));
        assert_eq!(r.access, vec!["incident_readers"]);
        assert_eq!(r.writer.unwrap().principal, "user_18");
        assert_eq!(r.supersedes, None);
        assert_eq!(r.data.unwrap()["any"], "json");
    }

    #[test]
    fn errors_name_line_and_field() {
        let cases = [
            (r#"{"tenant": "t", "text": "x"}"#, "kind"),
            (r#"{"tenant": "t", "kind": "k"}"#, "text"),
            (
                r#"{"tenant": "t", "kind": "k", "text": "x", "occurred_at": "yesterday"}"#,
                "occurred_at",
            ),
            (
                r#"{"tenant": "t", "kind": "k", "text": "x", "occured_at": "2025-01-01"}"#,
                "occured_at",
            ),
            (
                r#"{"tenant": "t", "kind": "k", "text": "x", "": 1}"#,
                "\"\"",
            ),
            (
                r#"{"tenant": "t", "kind": "k", "text": "x", "embedding": {"model": "m", "vector": [1, "a"]}}"#,
                "embedding.vector",
            ),
            (
                r#"{"tenant": "t", "kind": "k", "text": "x", "scope": {"user": 5}}"#,
                "scope.user",
            ),
            (
                r#"{"tenant": "t", "kind": "k", "text": "x", "access": "a"}"#,
                "-ok-",
            ),
            (
                r#"{"record": "assertion", "kind": "guess", "text": "x", "sources": ["a"]}"#,
                "kind",
            ),
            (
                r#"{"record": "assertion", "kind": "fact", "text": "x"}"#,
                "sources",
            ),
            (r#"[1, 2]"#, "-"),
            (r#"{"tenant": "t", "kind""#, "-"),
        ];
        // A limit on a list names the list.
        let labels: Vec<String> = (0..100).map(|i| format!("\"l{i}\"")).collect();
        let many = format!(
            r#"{{"tenant": "t", "kind": "k", "text": "x", "access": [{}]}}"#,
            labels.join(",")
        );
        let cases = cases.into_iter().chain([(many.as_str(), "access")]);
        for (text, field) in cases {
            match parse_line(text, 7) {
                Ok(_) if field == "-ok-" => {}
                Ok(r) => panic!("{text} parsed: {r:?}"),
                Err(e) => {
                    assert_eq!(e.line, 7);
                    assert_eq!(e.field, field, "{text}: {e}");
                    assert!(e.to_string().starts_with("line 7: "));
                }
            }
        }
    }

    #[test]
    fn semantic_records_parse() {
        let a = parse_line(
            r#"{"record": "assertion", "kind": "hypothesis", "text": "catalog_api caused the outage", "sources": ["ev1", "01J7X6A7YV9ZX0000000000000"], "confidence": 0.4, "derivation": {"extractor": "triage@2", "generated": true}}"#,
            1,
        )
        .unwrap()
        .record;
        assert!(matches!(
            a.body,
            Body::Assertion {
                kind: AssertionKind::Hypothesis,
                ..
            }
        ));
        assert_eq!(a.sources.len(), 2);
        // unprefixed text that is a valid id may still be an external id
        assert!(matches!(a.sources[1], RecordRef::IdOrExternal(_)));
        let p = parse_line(
            r#"{"record": "assertion", "kind": "fact", "text": "x", "sources": ["id:01J7X6A7YV9ZX0000000000000", "ext:01J7X6A7YV9ZX0000000000000"]}"#,
            1,
        )
        .unwrap()
        .record;
        assert!(matches!(p.sources[0], RecordRef::Id(_)));
        assert!(
            matches!(&p.sources[1], RecordRef::External(e) if e == "01J7X6A7YV9ZX0000000000000")
        );
        let bad =
            parse_line(r#"{"kind": "k", "text": "x", "supersedes": "id:nope"}"#, 4).unwrap_err();
        assert_eq!(bad.field, "supersedes");
        let r = parse_line(
            r#"{"record": "relation", "subject": "svc:checkout", "predicate": "depends_on", "object": "svc:catalog"}"#,
            2,
        )
        .unwrap()
        .record;
        assert_eq!(r.kind, "relation");
        assert!(matches!(r.body, Body::Relation { .. }));
    }

    #[test]
    fn jsonl_skips_blank_and_comment_lines_and_stops_at_the_first_error() {
        let text =
            "# comment\n\n{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"a\"}\n{\"tenant\":\"t\"}\n";
        let e = parse_jsonl(text).unwrap_err();
        assert_eq!(e.line, 4);
        let ok = parse_jsonl("{\"tenant\":\"t\",\"kind\":\"k\",\"text\":\"a\"}\n\n{\"tenant\":\"t\",\"kind\":\"k\",\"data\":{}}").unwrap();
        assert_eq!(ok.iter().map(|l| l.line).collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn jsonl_lines_go_on_after_an_error() {
        let text = "{\"kind\":\"k\"}\n// note\n{\"kind\":\"k\",\"text\":\"a\"}\nnot json\n";
        let items: Vec<_> = parse_jsonl_lines(text).collect();
        assert_eq!(items.len(), 3, "the comment line is skipped");
        assert_eq!(items[0].as_ref().unwrap_err().line, 1);
        assert_eq!(items[0].as_ref().unwrap_err().field, "text");
        assert_eq!(items[1].as_ref().unwrap().line, 3);
        assert_eq!(items[2].as_ref().unwrap_err().line, 4);
        assert_eq!(
            parse_jsonl(text).unwrap_err(),
            items[0].clone().unwrap_err()
        );
    }
}
