//! # engram-query
//!
//! The text forms through which requests reach the engine: JSONL ingest
//! lines ([`ingest`]), recall requests ([`recall`]), evaluation cases
//! ([`eval`]) and the query language ([`lang`]: parse, check, print).
//! Each compiles to a plain request type of `engram-engine`; the
//! CLI, the query language and the server all go through here, so a request
//! means the same thing whichever door it came in by.
//!
//! This crate must never open a store or do I/O: it parses and validates.

pub mod eval;
pub mod ingest;
pub mod lang;
pub mod recall;
pub mod strict;
pub mod text;

pub use ingest::{IngestLine, LineError, parse_jsonl, parse_jsonl_lines, parse_line};

/// 2^53: every whole number up to it is exact in a double (a JSON number),
/// and counts are read as whole numbers only up to it.
pub(crate) const EXACT_WHOLE_MAX: f64 = 9_007_199_254_740_992.0;
pub use recall::{
    RecallLine, parse_recall_jsonl, parse_recall_line, parse_recall_lines, recall_query_id,
};

/// No input panics a parser: arbitrary text, and JSON objects made of the
/// documented field names with values of every JSON shape (so parsing gets
/// past the first field and into each field's checks), give `Ok` or a
/// `LineError` naming a line.
#[cfg(test)]
mod never_panics {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            Just(serde_json::json!(1e308)),
            ".{0,12}".prop_map(Value::String),
            "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9](\\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})"
                .prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((".{0,8}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn object(fields: &'static [&'static str]) -> impl Strategy<Value = String> {
        prop::collection::vec((prop::sample::select(fields), json_value()), 0..8).prop_map(|kv| {
            let mut m = Map::new();
            for (k, v) in kv {
                m.insert(k.to_string(), v);
            }
            Value::Object(m).to_string()
        })
    }

    proptest! {
        #[test]
        fn arbitrary_text(text in "(.{0,40}\n?){0,4}") {
            let _ = crate::parse_jsonl(&text);
            let _ = crate::parse_recall_jsonl(&text);
            let _ = crate::eval::parse_cases(&text);
        }

        #[test]
        fn ingest_objects(line in object(crate::ingest::FIELDS)) {
            match crate::parse_line(&line, 7) {
                // what the engine checks next must not panic either
                Ok(l) => { let _ = l.record.validate(); }
                Err(e) => prop_assert_eq!(e.line, 7),
            }
        }

        #[test]
        fn recall_objects(line in object(crate::recall::FIELDS)) {
            let r = crate::parse_recall_line(&line, 3);
            if let Err(e) = r {
                prop_assert_eq!(e.line, 3);
            }
        }
    }
}
