//! No input panics the front end: arbitrary text, and "token soups" built
//! from the language's own keywords, fields, literals and punctuation (which
//! get much deeper into the parser than random text). For every input that
//! parses, checking, printing and rendering do not panic either, and the
//! printed text parses back to the same AST. Deep nesting, from text or
//! JSON, is refused without exhausting the stack.

use std::collections::BTreeMap;

use engram_query::lang::{self, CheckContext, Embedder, Params, Statement};
use proptest::prelude::*;
use serde_json::Value;

const VOCABULARY: &[&str] = &[
    "EXPLAIN",
    "FIND",
    "TRACE",
    "ANY",
    "events",
    "entity",
    "summaries",
    "KIND",
    "IN",
    "NOT",
    "WHERE",
    "AND",
    "OR",
    "AS",
    "OF",
    "VALID",
    "AT",
    "SIMILAR",
    "TO",
    "MODEL",
    "MIN",
    "TOP",
    "MATCH",
    "RECENT",
    "AROUND",
    "EXPAND",
    "FROM",
    "ENTITY",
    "ID",
    "HOPS",
    "VIA",
    "DIRECTION",
    "OUT",
    "BOTH",
    "MAX",
    "FUSE",
    "RRF",
    "K",
    "LINEAR",
    "MINMAX",
    "ZSCORE",
    "WEIGHTS",
    "WITH",
    "SOURCES",
    "DERIVATIVES",
    "DEPTH",
    "LIMIT",
    "RETURN",
    "INCLUDE",
    "SUPERSEDED",
    "now",
    "scope",
    ".",
    "user",
    "label",
    "kind",
    "record",
    "status",
    "active",
    "deleted",
    "stale",
    "occurred_at",
    "ingested_at",
    "id",
    "text",
    "score",
    "sem",
    "similar",
    "(",
    ")",
    ",",
    ";",
    "=",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "-",
    "+",
    "..",
    "0",
    "1",
    "2",
    "5",
    "0.35",
    "-1",
    "99999999999999999999",
    "7d",
    "15m",
    "2025-06-10",
    "2025-06-10T09:00:00Z",
    "'x'",
    "'it''s'",
    "''",
    "'01JZ3K8Q9M6V2X4T7B5N1C0D8E'",
    "$p",
    "$qvec",
    "$k",
    "-- c\n",
    "\n",
];

fn context() -> CheckContext {
    let params = Params::from_json(
        r#"{"p": "x", "qvec": [0.1, 0.2, 0.3, 0.4], "k": 5, "l": ["a", "b"], "t": "2025-01-01"}"#,
    )
    .expect("valid params");
    let mut ctx = CheckContext::new(params, 1_749_718_800_000);
    ctx.models = BTreeMap::from([("m4".to_string(), 4), ("m8".to_string(), 8)]);
    ctx.embedder = Embedder::Model("m8".into());
    ctx
}

fn without_spans(s: &Statement) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("span");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(s).expect("an AST serializes");
    strip(&mut v);
    v
}

/// Everything after a parse must hold up too.
fn exercise(text: &str, ctx: &CheckContext) -> Result<(), TestCaseError> {
    match lang::parse(text) {
        Ok(stmt) => {
            if let Err(errors) = lang::check(&stmt, ctx) {
                for e in errors {
                    let e = e.located(text);
                    prop_assert!(e.render(text).starts_with("error["));
                    let _ = e.to_json();
                }
            }
            let printed = stmt.to_string();
            let again = lang::parse(&printed);
            prop_assert!(
                again.is_ok(),
                "{text:?} printed as {printed:?} does not parse"
            );
            prop_assert_eq!(
                without_spans(&again.expect("checked")),
                without_spans(&stmt)
            );
        }
        Err(e) => {
            prop_assert!(e.line() >= 1, "a parse error is located");
            prop_assert!(e.render(text).starts_with("error["));
            prop_assert!(e.span().end as usize <= text.len().max(e.span().start as usize));
            let _ = e.to_json();
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_text(text in "(.|\n){0,80}") {
        exercise(&text, &context())?;
    }

    #[test]
    fn token_soup(words in prop::collection::vec(prop::sample::select(VOCABULARY), 0..40)) {
        exercise(&words.join(" "), &context())?;
    }

    #[test]
    fn statements_with_a_token_soup_tail(
        prefix in prop::sample::select(vec!["FIND ANY WHERE", "FIND entities SIMILAR TO 'x'", "TRACE 'e'", "FIND ANY EXPAND FROM"]),
        words in prop::collection::vec(prop::sample::select(VOCABULARY), 0..20),
    ) {
        exercise(&format!("{prefix} {}", words.join(" ")), &context())?;
    }
}

#[test]
fn deep_nesting_is_refused_from_text() {
    for depth in [40, 1_000, 20_000] {
        for (open, close) in [("(", ")"), ("NOT (", ")"), ("NOT ", "")] {
            let text = format!(
                "FIND ANY WHERE {}kind = 'x'{}",
                open.repeat(depth),
                close.repeat(depth)
            );
            let e = lang::parse(&text).expect_err("too deep");
            assert_eq!(e.code(), "limit_exceeded", "{open} x {depth}");
        }
        let chain = format!(
            "FIND ANY WHERE kind = 'x'{}",
            " AND (kind = 'y' OR kind = 'z'".repeat(depth) + &")".repeat(depth)
        );
        assert_eq!(
            lang::parse(&chain).expect_err("too deep").code(),
            "limit_exceeded"
        );
    }
}

#[test]
fn deep_nesting_is_refused_from_json() {
    // The JSON form has no parser limit of its own: serde_json's recursion
    // limit refuses very deep input, and the checker refuses the rest.
    let leaf = r#"{"expr": "text", "field": "kind", "values": ["x"]}"#;
    for depth in [40, 100_000] {
        let filter = format!(
            "{}{leaf}{}",
            r#"{"expr": "not", "operand": "#.repeat(depth),
            "}".repeat(depth)
        );
        let json = format!(r#"{{"body": {{"statement": "find", "filter": {filter}}}}}"#);
        match serde_json::from_str::<Statement>(&json) {
            Err(_) => assert!(depth > 100, "depth {depth} should read"),
            Ok(stmt) => {
                let errors = lang::check(&stmt, &context()).expect_err("too deep");
                assert_eq!(errors[0].code(), "limit_exceeded");
            }
        }
    }
}

#[test]
fn statement_length_is_limited() {
    let text = format!(
        "FIND ANY MATCH '{}'",
        "x".repeat(lang::limits::STATEMENT_BYTES_MAX)
    );
    let e = lang::parse(&text).expect_err("too long");
    assert_eq!(e.code(), "limit_exceeded");
}
