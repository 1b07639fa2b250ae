//! The pretty-printer: a [`Statement`] as canonical text, one clause per
//! line (`Display`) or on one line ([`Statement::to_line`]).
//!
//! Canonical means: keywords upper case, record types plural after `FIND`
//! and singular in `WHERE`, strings in single quotes with `''` for a quote,
//! times as `YYYY-MM-DD` at midnight UTC and RFC 3339 UTC otherwise,
//! `HOPS n` for `1..n`, one-item lists without parentheses. Parsing the
//! printed text gives back the same AST (spans aside), which the
//! `lang_roundtrip` property test checks for arbitrary ASTs.
//!
//! This module must never print a value that would parse differently:
//! every literal goes through the quoting and number rules here. It
//! recurses on `WHERE` nesting, so it expects a statement that passed
//! [`super::check()`] (depth at most [`super::limits::NESTING_DEPTH_MAX`]).

use std::fmt;

use engram_engine::time::format_rfc3339;

use super::ast::*;

/// `s` as a string literal.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn number(v: f64) -> String {
    // Rust prints the shortest text that parses back to the same f64, and
    // never in exponent form, which is what the lexer reads.
    format!("{v}")
}

fn arg_str(a: &Arg<String>) -> String {
    match a {
        Arg::Lit { value, .. } => quote(value),
        Arg::Param { name, .. } => format!("${name}"),
    }
}

fn arg_f64(a: &Arg<f64>) -> String {
    match a {
        Arg::Lit { value, .. } => number(*value),
        Arg::Param { name, .. } => format!("${name}"),
    }
}

fn arg_u64(a: &Arg<u64>) -> String {
    match a {
        Arg::Lit { value, .. } => value.to_string(),
        Arg::Param { name, .. } => format!("${name}"),
    }
}

/// A time as written canonically.
pub fn time(t: &TimeExpr) -> String {
    match t {
        TimeExpr::Now { offset: None, .. } => "now".into(),
        TimeExpr::Now {
            offset: Some(o), ..
        } => {
            let sign = match o.sign {
                Sign::Plus => '+',
                Sign::Minus => '-',
            };
            format!("now {sign} {}{}", o.amount, o.unit.letter())
        }
        TimeExpr::At { ms, .. } => {
            let full = format_rfc3339(*ms);
            if ms.rem_euclid(86_400_000) == 0 {
                full[..full.len().min(10)].to_string()
            } else {
                full
            }
        }
        TimeExpr::Param { name, .. } => format!("${name}"),
    }
}

fn items(items: &[Arg<String>]) -> String {
    items.iter().map(arg_str).collect::<Vec<_>>().join(", ")
}

/// `= v` / `IN (a, b)` / `IN $p`, negated as `!=` / `NOT IN`.
fn membership(negated: bool, values: &StrList) -> String {
    let (eq, inn) = if negated {
        ("!=", "NOT IN")
    } else {
        ("=", "IN")
    };
    match values {
        StrList::Items { items: v, .. } if v.len() == 1 => format!("{eq} {}", arg_str(&v[0])),
        StrList::Items { items: v, .. } => format!("{inn} ({})", items(v)),
        StrList::Param { name, .. } => format!("{inn} ${name}"),
    }
}

fn enum_membership<T>(negated: bool, values: &[Spanned<T>], name: impl Fn(&T) -> &str) -> String {
    let (eq, inn) = if negated {
        ("!=", "NOT IN")
    } else {
        ("=", "IN")
    };
    if values.len() == 1 {
        format!("{eq} {}", name(&values[0].value))
    } else {
        let list: Vec<&str> = values.iter().map(|v| name(&v.value)).collect();
        format!("{inn} ({})", list.join(", "))
    }
}

/// A `WHERE` expression.
pub fn expr(e: &Expr) -> String {
    let wrapped = |child: &Expr, parens: bool| {
        if parens {
            format!("({})", expr(child))
        } else {
            expr(child)
        }
    };
    match e {
        Expr::Or { items, .. } => items
            .iter()
            .map(|i| wrapped(i, matches!(i, Expr::Or { .. })))
            .collect::<Vec<_>>()
            .join(" OR "),
        Expr::And { items, .. } => items
            .iter()
            .map(|i| wrapped(i, matches!(i, Expr::And { .. } | Expr::Or { .. })))
            .collect::<Vec<_>>()
            .join(" AND "),
        Expr::Not { operand, .. } => format!(
            "NOT {}",
            wrapped(
                operand,
                matches!(**operand, Expr::And { .. } | Expr::Or { .. })
            )
        ),
        Expr::Text(p) => format!("{} {}", p.field.name(), membership(p.negated, &p.values)),
        Expr::Record(p) => format!(
            "record {}",
            enum_membership(p.negated, &p.values, |t| t.name())
        ),
        Expr::Status(p) => format!(
            "status {}",
            enum_membership(p.negated, &p.values, |s| s.name())
        ),
        Expr::Time(p) => format!("{} {} {}", p.field.name(), p.op.symbol(), time(&p.value)),
    }
}

fn top_and_name(out: &mut String, top: &Option<Arg<u64>>, name: &Option<Name>) {
    if let Some(t) = top {
        out.push_str(&format!(" TOP {}", arg_u64(t)));
    }
    if let Some(n) = name {
        out.push_str(&format!(" AS {}", n.value));
    }
}

fn seeds(from: &[Seed]) -> String {
    let mut groups: Vec<String> = Vec::new();
    let mut i = 0;
    while i < from.len() {
        // Consecutive ENTITY seeds print as one group, and so do ID seeds.
        let (kw, run): (&str, Vec<&Arg<String>>) = match &from[i] {
            Seed::Entity { .. } => (
                "ENTITY",
                from[i..]
                    .iter()
                    .map_while(|s| match s {
                        Seed::Entity { name, .. } => Some(name),
                        _ => None,
                    })
                    .collect(),
            ),
            Seed::Record(RecordRef::Id { .. }) => (
                "ID",
                from[i..]
                    .iter()
                    .map_while(|s| match s {
                        Seed::Record(RecordRef::Id { value, .. }) => Some(value),
                        _ => None,
                    })
                    .collect(),
            ),
            Seed::Record(RecordRef::External { value, .. }) => {
                groups.push(arg_str(value));
                i += 1;
                continue;
            }
            Seed::Retriever(n) => {
                groups.push(n.value.clone());
                i += 1;
                continue;
            }
        };
        i += run.len();
        if run.len() == 1 {
            groups.push(format!("{kw} {}", arg_str(run[0])));
        } else {
            let list: Vec<String> = run.into_iter().map(arg_str).collect();
            groups.push(format!("{kw} ({})", list.join(", ")));
        }
    }
    groups.join(", ")
}

/// One retriever, as written.
pub fn retriever(r: &Retriever) -> String {
    let mut out;
    match r {
        Retriever::Similar(s) => {
            out = format!("SIMILAR TO {}", arg_str(&s.query));
            if let Some(m) = &s.model {
                out.push_str(&format!(" MODEL {}", arg_str(m)));
            }
            if let Some(m) = &s.min {
                out.push_str(&format!(" MIN {}", arg_f64(m)));
            }
            top_and_name(&mut out, &s.top, &s.name);
        }
        Retriever::Match(m) => {
            out = format!("MATCH {}", arg_str(&m.text));
            top_and_name(&mut out, &m.top, &m.name);
        }
        Retriever::Recent(m) | Retriever::Around(m) => {
            out = r.kind().keyword().to_string();
            top_and_name(&mut out, &m.top, &m.name);
        }
        Retriever::Expand(e) => {
            out = format!("EXPAND FROM {}", seeds(&e.from));
            if let Some(h) = &e.hops {
                if h.min == 1 {
                    out.push_str(&format!(" HOPS {}", h.max));
                } else {
                    out.push_str(&format!(" HOPS {}..{}", h.min, h.max));
                }
            }
            if let Some(v) = &e.via {
                match v {
                    // A lone `$p` would read as a list parameter: only a
                    // literal goes without parentheses.
                    StrList::Items { items: v, .. } if v.len() == 1 && v[0].as_lit().is_some() => {
                        out.push_str(&format!(" VIA {}", arg_str(&v[0])));
                    }
                    StrList::Items { items: v, .. } => {
                        out.push_str(&format!(" VIA ({})", items(v)));
                    }
                    StrList::Param { name, .. } => out.push_str(&format!(" VIA ${name}")),
                }
            }
            if let Some(d) = &e.direction {
                out.push_str(&format!(" DIRECTION {}", d.value.keyword()));
            }
            if let Some(m) = &e.max {
                out.push_str(&format!(" MAX {}", m.value));
            }
            top_and_name(&mut out, &e.top, &e.name);
        }
    }
    out
}

fn returns(fields: &[Spanned<ReturnField>]) -> Option<String> {
    (!fields.is_empty()).then(|| {
        let names: Vec<&str> = fields.iter().map(|f| f.value.name()).collect();
        format!("RETURN {}", names.join(", "))
    })
}

fn attach(word: &str, a: &Attach) -> String {
    match &a.depth {
        Some(d) => format!("{word} DEPTH {}", d.value),
        None => word.to_string(),
    }
}

fn record_ref(r: &RecordRef) -> String {
    match r {
        RecordRef::Id { value, .. } => format!("ID {}", arg_str(value)),
        RecordRef::External { value, .. } => arg_str(value),
    }
}

/// The statement's clauses, one string each.
fn clauses(s: &Statement) -> Vec<String> {
    let mut lines = Vec::new();
    let explain = if s.explain { "EXPLAIN " } else { "" };
    match &s.body {
        Body::Find(f) => {
            let targets = if f.targets.is_empty() {
                "ANY".to_string()
            } else {
                let names: Vec<&str> = f.targets.iter().map(|t| t.value.plural()).collect();
                names.join(", ")
            };
            let mut first = format!("{explain}FIND {targets}");
            if let Some(k) = &f.kinds {
                match k {
                    StrList::Items { items: v, .. } if v.len() == 1 && v[0].as_lit().is_some() => {
                        first.push_str(&format!(" KIND {}", arg_str(&v[0])));
                    }
                    StrList::Items { items: v, .. } => {
                        first.push_str(&format!(" KIND IN ({})", items(v)));
                    }
                    StrList::Param { name, .. } => first.push_str(&format!(" KIND IN ${name}")),
                }
            }
            lines.push(first);
            if let Some(e) = &f.filter {
                lines.push(format!("WHERE {}", expr(e)));
            }
            if let Some(t) = &f.as_of {
                lines.push(format!("AS OF {}", time(t)));
            }
            if let Some(t) = &f.valid_at {
                lines.push(format!("VALID AT {}", time(t)));
            }
            lines.extend(f.retrievers.iter().map(retriever));
            match &f.fusion {
                Some(Fusion::Rrf { k: Some(k), .. }) => {
                    lines.push(format!("FUSE RRF K {}", k.value))
                }
                Some(Fusion::Rrf { k: None, .. }) => lines.push("FUSE RRF".into()),
                Some(Fusion::Linear {
                    normalize: Some(n), ..
                }) => lines.push(format!("FUSE LINEAR {}", n.value.keyword())),
                Some(Fusion::Linear {
                    normalize: None, ..
                }) => lines.push("FUSE LINEAR".into()),
                None => {}
            }
            if !f.weights.is_empty() {
                let list: Vec<String> = f
                    .weights
                    .iter()
                    .map(|w| format!("{} = {}", w.name.value, arg_f64(&w.value)))
                    .collect();
                lines.push(format!("WEIGHTS ({})", list.join(", ")));
            }
            let mut with = Vec::new();
            if let Some(a) = &f.sources {
                with.push(attach("SOURCES", a));
            }
            if let Some(a) = &f.derivatives {
                with.push(attach("DERIVATIVES", a));
            }
            if !with.is_empty() {
                lines.push(format!("WITH {}", with.join(", ")));
            }
            if let Some(l) = &f.limit {
                lines.push(format!("LIMIT {}", arg_u64(l)));
            }
            lines.extend(returns(&f.returns));
        }
        Body::Trace(t) => {
            let mut first = format!(
                "{explain}TRACE {} {}",
                record_ref(&t.target),
                t.direction.value.keyword()
            );
            if let Some(d) = &t.depth {
                first.push_str(&format!(" DEPTH {}", d.value));
            }
            if t.include_superseded {
                first.push_str(" INCLUDE SUPERSEDED");
            }
            lines.push(first);
            lines.extend(returns(&t.returns));
        }
    }
    lines
}

impl fmt::Display for Statement {
    /// One clause per line, no trailing `;`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&clauses(self).join("\n"))
    }
}

impl Statement {
    /// The canonical text on one line (for logs and manifests).
    pub fn to_line(&self) -> String {
        clauses(self).join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    #[test]
    fn prints_canonically() {
        let s = parse(
            "explain find Entity,assertion kind in ('a') where NOT (kind='x' or record in (event)) \
             and occurred_at>=now-7d similar to 'it''s' min -0.5 as sem expand from sem, entity 'a', \
             entity 'b' hops 1..2 via ('p') with derivatives, sources depth 2 return id,TEXT",
        )
        .unwrap();
        assert_eq!(
            s.to_string(),
            "EXPLAIN FIND entities, assertions KIND 'a'\n\
             WHERE NOT (kind = 'x' OR record = event) AND occurred_at >= now - 7d\n\
             SIMILAR TO 'it''s' MIN -0.5 AS sem\n\
             EXPAND FROM sem, ENTITY ('a', 'b') HOPS 2 VIA 'p'\n\
             WITH SOURCES DEPTH 2, DERIVATIVES\n\
             RETURN id, text"
        );
        assert_eq!(parse(&s.to_line()).unwrap().to_line(), s.to_line());
    }

    #[test]
    fn times_print_as_dates_at_midnight() {
        let s =
            parse("FIND ANY AS OF '2025-06-10T02:00:00+02:00' VALID AT 2025-06-10T10:00:00.250Z")
                .unwrap();
        assert_eq!(
            s.to_line(),
            "FIND ANY AS OF 2025-06-10 VALID AT 2025-06-10T10:00:00.250Z"
        );
    }
}
