//! Printing is the inverse of parsing: for arbitrary ASTs (any shape the
//! printer accepts, literals of every kind, including quotes, newlines and
//! extreme numbers), the canonical text and the one-line text parse back to
//! the same AST, spans aside; and the JSON form reads back to the same AST.

use engram_engine::time::{TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS};
use engram_query::lang::ast::*;
use engram_query::lang::lexer::{DEFAULT_NAMES, is_keyword};
use engram_query::lang::{self, Span, Statement};
use proptest::prelude::*;
use serde_json::Value;

fn sp() -> Span {
    Span::default()
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_][a-zA-Z0-9_]{0,7}".prop_filter("keywords cannot name retrievers", |s| {
            !is_keyword(s) || DEFAULT_NAMES.contains(&s.as_str())
        }),
        prop::sample::select(DEFAULT_NAMES).prop_map(str::to_string),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z' -]{0,10}",
        "(.|\n){0,12}",
        Just("it's".to_string()),
        Just("--".to_string()),
    ]
}

fn arg_str() -> impl Strategy<Value = Arg<String>> {
    prop_oneof![
        3 => text().prop_map(Arg::lit),
        1 => name().prop_map(|name| Arg::Param { name, span: sp() }),
    ]
}

fn arg_u64() -> impl Strategy<Value = Arg<u64>> {
    prop_oneof![
        any::<u64>().prop_map(Arg::lit),
        (0u64..100).prop_map(Arg::lit),
        name().prop_map(|name| Arg::Param { name, span: sp() }),
    ]
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        (-100i32..100).prop_map(|i| f64::from(i) / 20.0),
        Just(-0.0),
    ]
}

fn arg_f64() -> impl Strategy<Value = Arg<f64>> {
    prop_oneof![
        3 => finite().prop_map(Arg::lit),
        1 => name().prop_map(|name| Arg::Param { name, span: sp() }),
    ]
}

fn spanned<T: std::fmt::Debug + Clone>(
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Spanned<T>> {
    s.prop_map(|value| Spanned::new(value, sp()))
}

fn str_list() -> impl Strategy<Value = StrList> {
    prop_oneof![
        3 => prop::collection::vec(arg_str(), 1..4).prop_map(|items| StrList::Items { items, span: sp() }),
        1 => name().prop_map(|name| StrList::Param { name, span: sp() }),
    ]
}

fn time_expr() -> impl Strategy<Value = TimeExpr> {
    let unit = prop::sample::select(vec![
        TimeUnit::S,
        TimeUnit::M,
        TimeUnit::H,
        TimeUnit::D,
        TimeUnit::W,
    ]);
    let sign = prop::sample::select(vec![Sign::Plus, Sign::Minus]);
    let offset = (sign, 0u64..1_000_000, unit).prop_map(|(sign, amount, unit)| Offset {
        sign,
        amount,
        unit,
    });
    prop_oneof![
        prop::option::of(offset).prop_map(|offset| TimeExpr::Now { offset, span: sp() }),
        (TIMESTAMP_MIN_MS..=TIMESTAMP_MAX_MS).prop_map(|ms| TimeExpr::At { ms, span: sp() }),
        (-20_000i64..20_000).prop_map(|d| TimeExpr::At {
            ms: d * 86_400_000,
            span: sp()
        }),
        name().prop_map(|name| TimeExpr::Param { name, span: sp() }),
    ]
}

fn record_type() -> impl Strategy<Value = RecordType> {
    prop::sample::select(RecordType::ALL.to_vec())
}

fn predicate() -> impl Strategy<Value = Expr> {
    let text_field = prop::sample::select(TextField::ALL.to_vec());
    let time_field = prop::sample::select(vec![TimeField::OccurredAt, TimeField::IngestedAt]);
    let op = prop::sample::select(vec![CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge]);
    prop_oneof![
        (text_field, any::<bool>(), str_list()).prop_map(|(field, negated, values)| {
            Expr::Text(TextPredicate {
                field,
                negated,
                values,
                span: sp(),
            })
        }),
        (
            any::<bool>(),
            prop::collection::vec(spanned(record_type()), 1..3)
        )
            .prop_map(|(negated, values)| {
                Expr::Record(RecordPredicate {
                    negated,
                    values,
                    span: sp(),
                })
            }),
        (
            any::<bool>(),
            prop::collection::vec(
                spanned(prop::sample::select(RecordStatus::ALL.to_vec())),
                1..3
            )
        )
            .prop_map(|(negated, values)| Expr::Status(StatusPredicate {
                negated,
                values,
                span: sp()
            })),
        (time_field, op, time_expr()).prop_map(|(field, op, value)| Expr::Time(TimePredicate {
            field,
            op,
            value,
            span: sp()
        })),
    ]
}

fn expr() -> impl Strategy<Value = Expr> {
    predicate().prop_recursive(5, 40, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4)
                .prop_map(|items| Expr::And { items, span: sp() }),
            prop::collection::vec(inner.clone(), 2..4)
                .prop_map(|items| Expr::Or { items, span: sp() }),
            inner.prop_map(|e| Expr::Not {
                operand: Box::new(e),
                span: sp()
            }),
        ]
    })
}

fn record_ref() -> impl Strategy<Value = RecordRef> {
    prop_oneof![
        arg_str().prop_map(|value| RecordRef::Id { value, span: sp() }),
        arg_str().prop_map(|value| RecordRef::External { value, span: sp() }),
    ]
}

fn seed() -> impl Strategy<Value = Seed> {
    prop_oneof![
        arg_str().prop_map(|name| Seed::Entity { name, span: sp() }),
        record_ref().prop_map(Seed::Record),
        name().prop_map(|n| Seed::Retriever(Spanned::new(n, sp()))),
    ]
}

fn retriever() -> impl Strategy<Value = Retriever> {
    let top = || prop::option::of(arg_u64());
    let rname = || prop::option::of(spanned(name()));
    let direction = prop::sample::select(vec![Direction::Out, Direction::In, Direction::Both]);
    prop_oneof![
        (
            arg_str(),
            prop::option::of(arg_str()),
            prop::option::of(arg_f64()),
            top(),
            rname()
        )
            .prop_map(
                |(query, model, min, top, name)| Retriever::Similar(Similar {
                    query,
                    model,
                    min,
                    top,
                    name,
                    span: sp()
                })
            ),
        (arg_str(), top(), rname()).prop_map(|(text, top, name)| Retriever::Match(Match {
            text,
            top,
            name,
            span: sp()
        })),
        (top(), rname()).prop_map(|(top, name)| Retriever::Recent(Recent {
            top,
            name,
            span: sp()
        })),
        (top(), rname()).prop_map(|(top, name)| Retriever::Around(Around {
            top,
            name,
            span: sp()
        })),
        (
            prop::collection::vec(seed(), 1..5),
            prop::option::of((0u64..6, 0u64..6)),
            prop::option::of(str_list()),
            prop::option::of(spanned(direction)),
            prop::option::of(spanned(any::<u64>())),
            top(),
            rname()
        )
            .prop_map(|(from, hops, via, direction, max, top, name)| {
                Retriever::Expand(Expand {
                    from,
                    hops: hops.map(|(min, max)| HopRange {
                        min,
                        max,
                        span: sp(),
                    }),
                    via,
                    direction,
                    max,
                    top,
                    name,
                    span: sp(),
                })
            }),
    ]
}

fn return_fields() -> impl Strategy<Value = Vec<Spanned<ReturnField>>> {
    prop::collection::vec(
        spanned(prop::sample::select(ReturnField::ALL.to_vec())),
        0..4,
    )
}

fn attach() -> impl Strategy<Value = Option<Attach>> {
    prop::option::of(
        prop::option::of(spanned(any::<u64>())).prop_map(|depth| Attach { depth, span: sp() }),
    )
}

fn find() -> impl Strategy<Value = Find> {
    let fusion = prop_oneof![
        prop::option::of(spanned(any::<u64>())).prop_map(|k| Fusion::Rrf { k, span: sp() }),
        prop::option::of(spanned(prop::sample::select(vec![
            Normalize::MinMax,
            Normalize::ZScore
        ])))
        .prop_map(|normalize| Fusion::Linear {
            normalize,
            span: sp()
        }),
    ];
    let weight = (spanned(name()), arg_f64()).prop_map(|(name, value)| Weight {
        name,
        value,
        span: sp(),
    });
    (
        (
            prop::collection::vec(spanned(record_type()), 0..3),
            prop::option::of(str_list()),
            prop::option::of(expr()),
            prop::option::of(time_expr()),
            prop::option::of(time_expr()),
        ),
        (
            prop::collection::vec(retriever(), 0..4),
            prop::option::of(fusion),
            prop::collection::vec(weight, 0..3),
        ),
        (
            attach(),
            attach(),
            prop::option::of(arg_u64()),
            return_fields(),
        ),
    )
        .prop_map(
            |(
                (targets, kinds, filter, as_of, valid_at),
                (retrievers, fusion, weights),
                (sources, derivatives, limit, returns),
            )| Find {
                targets,
                kinds,
                filter,
                as_of,
                valid_at,
                retrievers,
                fusion,
                weights,
                sources,
                derivatives,
                limit,
                returns,
                span: sp(),
            },
        )
}

fn trace() -> impl Strategy<Value = Trace> {
    let dir = prop::sample::select(vec![
        TraceDirection::Sources,
        TraceDirection::Derivatives,
        TraceDirection::Both,
    ]);
    (
        record_ref(),
        spanned(dir),
        prop::option::of(spanned(any::<u64>())),
        any::<bool>(),
        return_fields(),
    )
        .prop_map(
            |(target, direction, depth, include_superseded, returns)| Trace {
                target,
                direction,
                depth,
                include_superseded,
                returns,
                span: sp(),
            },
        )
}

fn statement() -> impl Strategy<Value = Statement> {
    (
        any::<bool>(),
        prop_oneof![3 => find().prop_map(Body::Find), 1 => trace().prop_map(Body::Trace)],
    )
        .prop_map(|(explain, body)| Statement {
            explain,
            body,
            span: sp(),
        })
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn printed_text_parses_to_the_same_ast(stmt in statement()) {
        let want = without_spans(&stmt);
        for text in [stmt.to_string(), stmt.to_line()] {
            let parsed = lang::parse(&text);
            prop_assert!(parsed.is_ok(), "{text}\n{}", parsed.as_ref().err().map(|e| e.render(&text)).unwrap_or_default());
            let parsed = parsed.expect("checked above");
            prop_assert_eq!(without_spans(&parsed), want.clone(), "{}", text);
            // canonical text is a fixed point
            prop_assert_eq!(parsed.to_string(), stmt.to_string());
        }
    }

    #[test]
    fn json_reads_back_to_the_same_ast(stmt in statement()) {
        let json = serde_json::to_string(&stmt).expect("serializes");
        let back: Statement = serde_json::from_str(&json).expect("reads back");
        prop_assert_eq!(back, stmt);
    }
}
