//! Recall requests as JSON objects (one per line in `engram recall --queries
//! FILE.jsonl`), compiled to [`RecallRequest`]s. The fields mirror the CLI
//! flags:
//!
//! A line never names a tenant or principal (`tenant` and `principal` are
//! refused): they come from the session, i.e. `--tenant` and `--principal`
//! on the command line, or the server's API key.
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `text` | string | query text |
//! | `vector` | numbers | query vector |
//! | `model` | string | vector space (optional when the store has one) |
//! | `mode` | string | `hybrid` (default), `vector`, `lexical` |
//! | `k` | integer | results (default 10) |
//! | `ef` | integer | HNSW ef_search (default 64) |
//! | `user`, `conversation`, `agent`, `label`, `kind`, `record` | string or strings | filters (OR within a field, AND across fields) |
//! | `as_of` | RFC 3339 | what the store knew then |
//! | `valid_at` | RFC 3339 | what was true then (default: now) |
//! | `include_historical` | bool | keep records whose validity ended |
//! | `occurred_after`, `occurred_before` | RFC 3339 | valid-time range |
//! | `id` | string (any other JSON value is echoed as its JSON text) | echoed back as `query_id` |
//! | `explain` | bool | return the manifest with the hits |
//! | `weights` | object | fusion weights by retriever, numbers >= 0: `vector`, `lexical`, `recency`, `graph`, `episodic` (each left out keeps its default; 0 turns a retriever off) |
//!
//! This module must never touch a store.

use engram_engine::model::RecordType;
use engram_engine::retrieval::{Filters, Mode, RecallRequest};
use engram_engine::time::parse_query_time;
use serde_json::{Map, Value};

use crate::ingest::{LineError, parse_vector};

/// Known fields.
pub const FIELDS: &[&str] = &[
    "text",
    "vector",
    "model",
    "mode",
    "k",
    "ef",
    "user",
    "conversation",
    "agent",
    "label",
    "kind",
    "record",
    "as_of",
    "valid_at",
    "include_historical",
    "occurred_after",
    "occurred_before",
    "id",
    "explain",
    "with_text",
    "weights",
];

/// The `query_id` a request's `id` is echoed as: a string as it is, any
/// other JSON value as its JSON text, null or absent as none.
pub fn recall_query_id(id: &Value) -> Option<String> {
    match id {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
}

/// One parsed request line.
#[derive(Clone, Debug, PartialEq)]
pub struct RecallLine {
    /// Line number (1-based).
    pub line: usize,
    /// Client's query id.
    pub query_id: Option<String>,
    /// The request.
    pub request: RecallRequest,
}

type R<T> = Result<T, (String, String)>;

/// Why an empty filter list is refused (a filter matches any of its
/// values, so an empty one would match nothing; the query language refuses
/// it too).
pub(crate) const EMPTY_LIST: &str =
    "an empty list matches nothing; leave the field out (or null) for no filter";

fn strs(o: &Map<String, Value>, f: &str) -> R<Vec<String>> {
    match o.get(f) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        // an empty list would read as no filter at all: a client passing an
        // empty allow-list must not get everything
        Some(Value::Array(a)) if a.is_empty() => Err((f.to_string(), EMPTY_LIST.into())),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| (f.to_string(), "expected strings".to_string()))
            })
            .collect(),
        Some(_) => Err((
            f.to_string(),
            "expected a string or a list of strings".into(),
        )),
    }
}

fn opt_str(o: &Map<String, Value>, f: &str) -> R<Option<String>> {
    match o.get(f) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err((f.to_string(), "expected a string".into())),
    }
}

fn opt_time(o: &Map<String, Value>, f: &str) -> R<Option<i64>> {
    opt_str(o, f)?
        .map(|s| parse_query_time(&s).map_err(|e| (f.to_string(), e.to_string())))
        .transpose()
}

/// A count: a JSON number counts by its value (`1e2` is 100, as in a
/// query parameter), if that is a whole number a double carries exactly.
pub(crate) fn opt_uint(o: &Map<String, Value>, f: &str) -> R<Option<usize>> {
    match o.get(f) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|x| x.fract() == 0.0 && (0.0..=crate::EXACT_WHOLE_MAX).contains(x))
                    .map(|x| x as u64)
            })
            .map(|x| Some(usize::try_from(x).unwrap_or(usize::MAX)))
            .ok_or_else(|| (f.to_string(), "expected a non-negative integer".into())),
        Some(_) => Err((f.to_string(), "expected an integer".into())),
    }
}

/// Builds a request from already-separated parts (shared with the CLI flags).
#[allow(clippy::too_many_arguments)]
pub fn build_request(
    text: Option<String>,
    vector: Option<Vec<f32>>,
    model: Option<String>,
    mode: Option<&str>,
    k: Option<usize>,
    ef: Option<usize>,
    filters: Filters,
    as_of: Option<i64>,
    valid_at: Option<i64>,
    include_historical: bool,
) -> Result<RecallRequest, (String, String)> {
    let mode = match mode {
        None => {
            if text.is_none() && vector.is_some() {
                Mode::Vector
            } else {
                Mode::Hybrid
            }
        }
        Some(m) => Mode::parse(m).ok_or_else(|| {
            (
                "mode".to_string(),
                format!("'{m}' is not one of hybrid, vector, lexical"),
            )
        })?,
    };
    Ok(RecallRequest {
        text,
        vector: vector.map(Into::into),
        model,
        mode,
        k: k.unwrap_or(10),
        ef,
        filters,
        as_of,
        valid_at,
        include_historical,
        ..RecallRequest::default()
    })
}

/// Parses record type names.
pub fn record_types(names: &[String]) -> Result<Vec<RecordType>, (String, String)> {
    names
        .iter()
        .map(|n| {
            RecordType::parse(n).ok_or_else(|| {
                (
                    "record".to_string(),
                    format!("'{n}' is not one of event, entity, relation, assertion, summary"),
                )
            })
        })
        .collect()
}

/// Parses one request line.
pub fn parse_recall_line(text: &str, line: usize) -> Result<RecallLine, LineError> {
    let o = crate::ingest::json_object(text, line)?;
    parse_object(&o)
        .map_err(crate::ingest::at_line(line))
        .map(|(query_id, request)| RecallLine {
            line,
            query_id,
            request,
        })
}

/// Fields a request never carries: who asks comes from the session.
pub const SESSION_FIELDS: &[&str] = &["tenant", "principal"];

fn parse_object(o: &Map<String, Value>) -> R<(Option<String>, RecallRequest)> {
    for f in SESSION_FIELDS {
        if o.contains_key(*f) {
            return Err((
                (*f).to_string(),
                "a request cannot name a tenant or principal: they come from the session \
                 (--tenant and --principal on the command line, or the server's API key)"
                    .to_string(),
            ));
        }
    }
    crate::ingest::known_fields(o, FIELDS)?;
    let vector = match o.get("vector") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_vector(v, "vector")?),
    };
    let filters = Filters {
        users: strs(o, "user")?,
        conversations: strs(o, "conversation")?,
        agents: strs(o, "agent")?,
        scope_labels: strs(o, "label")?,
        kinds: strs(o, "kind")?,
        record_types: record_types(&strs(o, "record")?)?,
        occurred_after: opt_time(o, "occurred_after")?,
        occurred_before: opt_time(o, "occurred_before")?,
    };
    let include_historical = match o.get("include_historical") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(("include_historical".into(), "expected a boolean".into())),
    };
    let query_id = o.get("id").and_then(recall_query_id);
    let explain = match o.get("explain") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(("explain".into(), "expected a boolean".into())),
    };
    let mut req = build_request(
        opt_str(o, "text")?,
        vector,
        opt_str(o, "model")?,
        opt_str(o, "mode")?.as_deref(),
        opt_uint(o, "k")?,
        opt_uint(o, "ef")?,
        filters,
        opt_time(o, "as_of")?,
        opt_time(o, "valid_at")?,
        include_historical,
    )?;
    req.explain = explain;
    req.with_text = match o.get("with_text") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(("with_text".into(), "expected a boolean".into())),
    };
    match o.get("weights") {
        None | Some(Value::Null) => {}
        Some(Value::Object(w)) => {
            for (k, v) in w {
                let x = v
                    .as_f64()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| {
                        (format!("weights.{k}"), "expected a number >= 0".to_string())
                    })?;
                let slot = match k.as_str() {
                    "vector" => &mut req.weights.vector,
                    "lexical" => &mut req.weights.lexical,
                    "recency" => &mut req.weights.recency,
                    "graph" => &mut req.weights.graph,
                    "episodic" => &mut req.weights.episodic,
                    _ => {
                        return Err((
                            format!("weights.{k}"),
                            "unknown retriever (vector, lexical, recency, graph, episodic)".into(),
                        ));
                    }
                };
                *slot = x;
            }
        }
        Some(_) => return Err(("weights".into(), "expected an object".into())),
    }
    Ok((query_id, req))
}

/// Parses a JSONL file of requests (blank and `#` lines skipped).
pub fn parse_recall_jsonl(text: &str) -> Result<Vec<RecallLine>, LineError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        out.push(parse_recall_line(t, i + 1)?);
    }
    Ok(out)
}

/// Parses a JSONL file of requests line by line (blank and `#` lines
/// skipped): a malformed line is an error for that line only.
pub fn parse_recall_lines(text: &str) -> Vec<Result<RecallLine, LineError>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .map(|(i, l)| parse_recall_line(l.trim(), i + 1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_line_cannot_name_who_asks() {
        for (t, f) in [
            (r#"{"text": "x", "principal": "alice"}"#, "principal"),
            (r#"{"text": "x", "tenant": "A"}"#, "tenant"),
        ] {
            let e = parse_recall_line(t, 2).unwrap_err();
            assert_eq!(e.field, f, "{e}");
            assert!(e.reason.contains("come from the session"), "{e}");
        }
    }

    #[test]
    fn with_text_defaults_to_true_and_must_be_a_boolean() {
        let text = |t: &str| parse_recall_line(t, 1).map(|l| l.request.with_text);
        assert!(text(r#"{"text": "x"}"#).unwrap());
        assert!(text(r#"{"text": "x", "with_text": null}"#).unwrap());
        assert!(!text(r#"{"text": "x", "with_text": false}"#).unwrap());
        let e = text(r#"{"text": "x", "with_text": "no"}"#).unwrap_err();
        assert_eq!(e.field, "with_text", "{e}");
    }

    #[test]
    fn one_bad_line_does_not_hide_the_others() {
        let r = parse_recall_lines("{\"text\": \"a\"}\nnot json\n\n{\"text\": \"b\"}\n");
        assert_eq!(r.len(), 3);
        assert!(r[0].is_ok() && r[1].is_err() && r[2].is_ok());
        assert_eq!(r[1].as_ref().unwrap_err().line, 2);
        assert_eq!(r[2].as_ref().unwrap().line, 4);
    }

    #[test]
    fn parses_filters_and_vectors() {
        let l = parse_recall_line(
            r#"{"text": "x", "user": ["a", "b"], "kind": "note", "k": 5, "as_of": "2025-01-01T00:00:00Z", "id": 7}"#,
            3,
        )
        .unwrap();
        assert_eq!(l.query_id.as_deref(), Some("7"));
        assert_eq!(l.request.filters.users, vec!["a", "b"]);
        assert_eq!(l.request.filters.kinds, vec!["note"]);
        assert_eq!(l.request.k, 5);
        assert!(l.request.as_of.is_some());
        let w = parse_recall_line(
            r#"{"text": "x", "weights": {"episodic": 0, "lexical": 2}}"#,
            1,
        )
        .unwrap();
        assert_eq!(
            (w.request.weights.episodic, w.request.weights.lexical),
            (0.0, 2.0)
        );
        assert_eq!(w.request.weights.vector, 1.0);
        let v = parse_recall_line(r#"{"vector": [1, 0.5], "model": "m"}"#, 1).unwrap();
        assert_eq!(v.request.mode, Mode::Vector);
        assert_eq!(&*v.request.vector.unwrap(), &[1.0, 0.5]);
    }

    #[test]
    fn a_count_counts_by_its_value() {
        for t in [r#"{"text": "x", "k": 1e2}"#, r#"{"text": "x", "k": 100.0}"#] {
            assert_eq!(parse_recall_line(t, 1).unwrap().request.k, 100, "{t}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        for (t, f) in [
            (r#"{"text": "x", "mode": "fuzzy"}"#, "mode"),
            (
                r#"{"text": "x", "weights": {"episodic": -1}}"#,
                "weights.episodic",
            ),
            (
                r#"{"text": "x", "weights": {"colour": 1}}"#,
                "weights.colour",
            ),
            (r#"{"text": "x", "weights": [1]}"#, "weights"),
            (r#"{"text": "x", "k": -1}"#, "k"),
            (r#"{"text": "x", "k": 2.5}"#, "k"),
            (r#"{"text": "x", "k": -1e2}"#, "k"),
            (r#"{"text": "x", "as_of": "soon"}"#, "as_of"),
            (r#"{"text": "x", "vector": ["a"]}"#, "vector"),
            (r#"{"text": "x", "record": "fact"}"#, "record"),
            (r#"{"text": "x", "user": []}"#, "user"),
            (r#"{"text": "x", "kind": []}"#, "kind"),
            (r#"{"txt": "x"}"#, "txt"),
        ] {
            let e = parse_recall_line(t, 9).unwrap_err();
            assert_eq!(e.field, f, "{t}: {e}");
            assert_eq!(e.line, 9);
        }
    }
}
