//! Parameters: the values a request binds to `$name` references, and the
//! [`Binder`] that resolves an AST's [`Arg`]s and times against them.
//!
//! Values reach a statement only through here, typed: a vector is never
//! written into query text, a string is never re-lexed. From JSON, a
//! request's `params` object maps names to values:
//!
//! | JSON | [`ParamValue`] | usable as |
//! |---|---|---|
//! | string | `String` | a string; a time when it is RFC 3339; a one-item list |
//! | number | `Number` | `MIN`, a weight; `TOP`/`LIMIT` when a non-negative integer |
//! | bool | `Bool` | nothing yet (kept so requests can carry flags) |
//! | array of numbers | `Vector` | `SIMILAR TO $v` |
//! | array of strings | `List` | `IN $p`, `KIND IN $p`, `VIA $p`, `ENTITY $p` |
//!
//! [`ParamValue::Time`] is built in code (ms since the epoch). Parameters a
//! statement does not use are ignored.
//!
//! This module must never read a clock (the caller passes `now_ms`) or
//! touch a store.

use std::collections::BTreeMap;

use engram_engine::time::{
    TIMESTAMP_MAX_MS, TIMESTAMP_MIN_MS, format_rfc3339, parse_rfc3339_bound,
};
use serde::{Deserialize, Deserializer, Serialize};

use super::ast::{Arg, StrList, TimeExpr};
use super::error::{ErrorKind, LangError};
use super::limits::VECTOR_DIM_MAX;
use super::span::Span;

/// One parameter's value.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// A string.
    String(String),
    /// A number.
    Number(f64),
    /// A boolean.
    Bool(bool),
    /// A vector (finite components).
    Vector(Vec<f32>),
    /// A list of strings.
    List(Vec<String>),
    /// A time in ms since the epoch (serialized as RFC 3339).
    #[serde(serialize_with = "time_text")]
    Time(i64),
}

fn time_text<S: serde::Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ms))
}

impl ParamValue {
    /// What the value is, for error messages.
    pub fn describe(&self) -> String {
        match self {
            ParamValue::String(_) => "a string".into(),
            ParamValue::Number(n) => format!("the number {n}"),
            ParamValue::Bool(_) => "a boolean".into(),
            ParamValue::Vector(v) => format!("a vector of {} numbers", v.len()),
            ParamValue::List(l) => format!("a list of {} strings", l.len()),
            ParamValue::Time(_) => "a time".into(),
        }
    }

    /// From a JSON value (see the module table).
    pub fn from_json(v: &serde_json::Value) -> Result<ParamValue, String> {
        use serde_json::Value;
        match v {
            Value::String(s) => Ok(ParamValue::String(s.clone())),
            Value::Number(n) => n
                .as_f64()
                .filter(|f| f.is_finite())
                .map(ParamValue::Number)
                .ok_or_else(|| format!("{n} is not a finite number")),
            Value::Bool(b) => Ok(ParamValue::Bool(*b)),
            Value::Array(a) if a.iter().all(Value::is_number) && !a.is_empty() => {
                if a.len() > VECTOR_DIM_MAX {
                    return Err(format!(
                        "a vector of {} numbers is above the limit of {VECTOR_DIM_MAX} dimensions",
                        a.len()
                    ));
                }
                a.iter()
                    .enumerate()
                    .map(|(i, x)| {
                        let f = x.as_f64().unwrap_or(f64::NAN) as f32;
                        if f.is_finite() {
                            Ok(f)
                        } else {
                            Err(format!("component {i} ({x}) is not a finite 32-bit float"))
                        }
                    })
                    .collect::<Result<Vec<f32>, String>>()
                    .map(ParamValue::Vector)
            }
            Value::Array(a) if a.iter().all(Value::is_string) => Ok(ParamValue::List(
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect(),
            )),
            Value::Array(_) => {
                Err("an array must hold only numbers (a vector) or only strings (a list)".into())
            }
            Value::Null => Err("null is not a value; leave the parameter out instead".into()),
            Value::Object(_) => Err("objects are not parameter values".into()),
        }
    }
}

/// The parameters of one request, by name (without `$`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Params(BTreeMap<String, ParamValue>);

impl Params {
    /// No parameters.
    pub fn new() -> Params {
        Params::default()
    }
    /// Binds `name` (without `$`) to `value`, replacing an earlier value.
    pub fn insert(&mut self, name: impl Into<String>, value: ParamValue) -> &mut Params {
        self.0.insert(name.into(), value);
        self
    }
    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.0.get(name)
    }
    /// Number of parameters.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Names and values, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &ParamValue)> {
        self.0.iter()
    }
    /// From a JSON object such as `{"qvec": [0.1, 0.2], "since":
    /// "2025-03-01T00:00:00Z"}`; errors name the parameter
    /// ([`ErrorKind::InvalidParam`], no span).
    pub fn from_json(text: &str) -> Result<Params, LangError> {
        let invalid = |name: &str, reason: String| {
            LangError::new(
                ErrorKind::InvalidParam {
                    name: name.to_string(),
                    reason,
                },
                Span::default(),
            )
        };
        // Strict, as every JSON body: a parameter given twice is refused
        // (which one was meant?), not silently the last.
        let v = match crate::strict::parse(text) {
            Ok(v) => v,
            Err(Ok((path, reason))) => {
                let name = path.split(['.', '[']).next().unwrap_or("");
                return Err(invalid(name, format!("{path}: {reason}")));
            }
            Err(Err(e)) => return Err(invalid("", format!("not JSON: {e}"))),
        };
        Params::from_json_value(&v).map_err(|(name, reason)| invalid(&name, reason))
    }

    fn from_json_value(v: &serde_json::Value) -> Result<Params, (String, String)> {
        let Some(o) = v.as_object() else {
            return Err((String::new(), "parameters must be a JSON object".into()));
        };
        let mut out = Params::new();
        for (k, x) in o {
            // a name no statement can write ("", "1a", "$q") would be
            // taken and never used: refused, as the CLI's `--param` is
            if !crate::lang::lexer::is_param_name(k) {
                return Err((
                    crate::lang::lexer::truncated(k),
                    format!(
                        "{:?} is not a parameter name (a letter or _, then letters, digits \
                         or _, at most {} bytes; written without its `$`)",
                        crate::lang::lexer::truncated(k),
                        crate::lang::limits::IDENT_BYTES_MAX
                    ),
                ));
            }
            let value = ParamValue::from_json(x).map_err(|reason| (k.clone(), reason))?;
            out.insert(k.clone(), value);
        }
        Ok(out)
    }
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Params, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Params::from_json_value(&v).map_err(|(name, reason)| {
            serde::de::Error::custom(if name.is_empty() {
                format!("parameters: {reason}")
            } else {
                format!("parameter ${name}: {reason}")
            })
        })
    }
}

/// A query for `SIMILAR TO`, resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryInput {
    /// Text for the store's embedder.
    Text(String),
    /// A vector in the statement's model's space.
    Vector(Vec<f32>),
}

/// Resolves [`Arg`]s, lists and times of an AST against a request's
/// parameters and the clock reading `now_ms`. Every method fails with a
/// [`LangError`] at the reference's span: [`ErrorKind::UnboundParam`],
/// [`ErrorKind::ParamType`] or [`ErrorKind::OutOfRange`] (a time outside
/// years 1..=9999).
#[derive(Clone, Copy, Debug)]
pub struct Binder<'a> {
    params: &'a Params,
    now_ms: i64,
}

impl<'a> Binder<'a> {
    /// Binds against `params`, with `now` at `now_ms` (ms since the epoch).
    pub fn new(params: &'a Params, now_ms: i64) -> Binder<'a> {
        Binder { params, now_ms }
    }

    fn lookup(&self, name: &str, span: Span) -> Result<&'a ParamValue, LangError> {
        self.params.get(name).ok_or_else(|| {
            LangError::new(
                ErrorKind::UnboundParam {
                    name: name.to_string(),
                },
                span,
            )
            .with_hint(format!(
                "bind it: --param {name}=... (engram query), \\param {name} ... (engram shell), or {{\"{name}\": ...}} in the request's parameters (HTTP)"
            ))
        })
    }

    fn wrong(name: &str, span: Span, expected: &str, got: &ParamValue) -> LangError {
        LangError::new(
            ErrorKind::ParamType {
                name: name.to_string(),
                expected: expected.to_string(),
                got: got.describe(),
            },
            span,
        )
    }

    /// A string.
    pub fn string(&self, a: &Arg<String>) -> Result<String, LangError> {
        match a {
            Arg::Lit { value, .. } => Ok(value.clone()),
            Arg::Param { name, span } => match self.lookup(name, *span)? {
                ParamValue::String(s) => Ok(s.clone()),
                other => Err(Self::wrong(name, *span, "a string", other)),
            },
        }
    }

    /// One or more strings: a literal, or a parameter bound to a string or
    /// a list (`ENTITY $names`).
    pub fn strings_of(&self, a: &Arg<String>) -> Result<Vec<String>, LangError> {
        match a {
            Arg::Lit { value, .. } => Ok(vec![value.clone()]),
            Arg::Param { name, span } => self.list_param(name, *span),
        }
    }

    fn list_param(&self, name: &str, span: Span) -> Result<Vec<String>, LangError> {
        match self.lookup(name, span)? {
            ParamValue::List(l) => Ok(l.clone()),
            ParamValue::String(s) => Ok(vec![s.clone()]),
            // `[]` reads as an empty vector: as a list it is an empty list.
            ParamValue::Vector(v) if v.is_empty() => Ok(Vec::new()),
            other => Err(Self::wrong(name, span, "a list of strings", other)),
        }
    }

    /// The strings of a list: its items bound one by one (a parameter
    /// among them bound to a list is spliced in, as in `ENTITY ($names,
    /// 'Eve')`), or a list parameter.
    pub fn strings(&self, l: &StrList) -> Result<Vec<String>, LangError> {
        match l {
            StrList::Items { items, .. } => {
                let mut out = Vec::with_capacity(items.len());
                for a in items {
                    out.extend(self.strings_of(a)?);
                }
                Ok(out)
            }
            StrList::Param { name, span } => self.list_param(name, *span),
        }
    }

    /// A number (finite).
    pub fn number(&self, a: &Arg<f64>) -> Result<f64, LangError> {
        match a {
            Arg::Lit { value, .. } => Ok(*value),
            Arg::Param { name, span } => match self.lookup(name, *span)? {
                ParamValue::Number(n) => Ok(*n),
                other => Err(Self::wrong(name, *span, "a number", other)),
            },
        }
    }

    /// A non-negative integer.
    pub fn count(&self, a: &Arg<u64>) -> Result<u64, LangError> {
        match a {
            Arg::Lit { value, .. } => Ok(*value),
            Arg::Param { name, span } => match self.lookup(name, *span)? {
                ParamValue::Number(n)
                    if *n >= 0.0 && n.fract() == 0.0 && *n <= crate::EXACT_WHOLE_MAX =>
                {
                    Ok(*n as u64)
                }
                // (an integer past 2^53 is one, yet not exact here: its
                // range is what is wrong)
                other @ ParamValue::Number(n) if n.fract() == 0.0 && *n > 0.0 => Err(Self::wrong(
                    name,
                    *span,
                    "a non-negative integer of at most 2^53 (9007199254740992)",
                    other,
                )),
                other => Err(Self::wrong(name, *span, "a non-negative integer", other)),
            },
        }
    }

    /// A time in ms since the epoch.
    pub fn time(&self, t: &TimeExpr) -> Result<i64, LangError> {
        let (ms, span) = match t {
            TimeExpr::Now { offset, span } => {
                let off = match offset {
                    None => Some(0),
                    Some(o) => o.to_ms(),
                };
                (off.and_then(|o| self.now_ms.checked_add(o)), *span)
            }
            TimeExpr::At { ms, span } => (Some(*ms), *span),
            TimeExpr::Param { name, span } => match self.lookup(name, *span)? {
                ParamValue::Time(ms) => (Some(*ms), *span),
                ParamValue::String(s) => match parse_rfc3339_bound(s) {
                    Ok(ms) => (Some(ms), *span),
                    Err(e) => {
                        return Err(LangError::new(
                            ErrorKind::InvalidParam {
                                name: name.clone(),
                                reason: e.to_string(),
                            },
                            *span,
                        ));
                    }
                },
                other => return Err(Self::wrong(name, *span, "a time (RFC 3339 string)", other)),
            },
        };
        match ms {
            Some(ms) if (TIMESTAMP_MIN_MS..=TIMESTAMP_MAX_MS).contains(&ms) => Ok(ms),
            _ => Err(LangError::new(
                ErrorKind::OutOfRange {
                    what: "the time".into(),
                    got: match t {
                        TimeExpr::Param { name, .. } => format!("${name}"),
                        _ => format!("`{}`", super::print::time(t)),
                    },
                    range: "the years 1 to 9999".into(),
                },
                span,
            )),
        }
    }

    /// The query of `SIMILAR TO`: text, or a parameter bound to text or to a
    /// vector.
    pub fn query(&self, a: &Arg<String>) -> Result<QueryInput, LangError> {
        match a {
            Arg::Lit { value, .. } => Ok(QueryInput::Text(value.clone())),
            Arg::Param { name, span } => match self.lookup(name, *span)? {
                ParamValue::String(s) => Ok(QueryInput::Text(s.clone())),
                ParamValue::Vector(v) => Ok(QueryInput::Vector(v.clone())),
                other => Err(Self::wrong(name, *span, "a text or a vector", other)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::ast::{Offset, Sign, TimeUnit};

    #[test]
    fn json_values_map_to_types() {
        let p = Params::from_json(
            r#"{"v": [1, 0.5], "l": ["a", "b"], "s": "x", "n": 3, "b": true, "t": "2025-03-01"}"#,
        )
        .unwrap();
        assert_eq!(p.get("v"), Some(&ParamValue::Vector(vec![1.0, 0.5])));
        assert_eq!(
            p.get("l"),
            Some(&ParamValue::List(vec!["a".into(), "b".into()]))
        );
        assert_eq!(p.get("n"), Some(&ParamValue::Number(3.0)));
        let serde: Params = serde_json::from_str(r#"{"v": [1, 0.5]}"#).unwrap();
        assert_eq!(serde.get("v"), p.get("v"));
        for bad in [
            r#"{"v": [1, "a"]}"#,
            r#"{"v": null}"#,
            r#"{"v": {"a": 1}}"#,
            r#"{"v": [1e300]}"#,
            r#"[1]"#,
            // a parameter given twice: which one was meant?
            r#"{"n": 2, "n": 3}"#,
            // names no statement can write (taken and never used before)
            r#"{"": 5}"#,
            r#"{"1a": 5}"#,
            r#"{"$n": 5}"#,
        ] {
            let e = Params::from_json(bad).unwrap_err();
            assert_eq!(e.code(), "invalid_param", "{bad}");
        }
        // the error's detail names the refused name
        let e = Params::from_json(r#"{"9bad": 5}"#).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::InvalidParam { name, .. } if name == "9bad"),
            "{e:?}"
        );
        // and the message does not write it as a parameter (`$9bad`)
        assert!(
            e.to_string()
                .starts_with("the parameters are invalid: \"9bad\" is not"),
            "{e}"
        );
        // a name past what `$name` may be (64 bytes): never usable either
        let long = format!(r#"{{"{}": 5}}"#, "x".repeat(65));
        let e = Params::from_json(&long).unwrap_err();
        assert!(e.to_string().contains("at most 64 bytes"), "{e}");
        assert!(Params::from_json(&format!(r#"{{"{}": 5}}"#, "x".repeat(64))).is_ok());
    }

    /// A parameter among a list's items bound to a list is spliced in, in
    /// every list (`KIND IN`, `VIA`, `scope.user IN`) as in `ENTITY`.
    #[test]
    fn a_list_parameter_among_items_is_spliced_in() {
        let mut p = Params::new();
        p.insert("k", ParamValue::List(vec!["note".into(), "fact".into()]))
            .insert("s", ParamValue::String("one".into()));
        let b = Binder::new(&p, 0);
        let span = Span::default();
        let l = StrList::Items {
            items: vec![
                Arg::Param {
                    name: "k".into(),
                    span,
                },
                Arg::Lit {
                    value: "x".into(),
                    span,
                },
                Arg::Param {
                    name: "s".into(),
                    span,
                },
            ],
            span,
        };
        assert_eq!(b.strings(&l).unwrap(), ["note", "fact", "x", "one"]);
    }

    #[test]
    fn binding_checks_types_and_ranges() {
        let mut p = Params::new();
        p.insert("t", ParamValue::String("2025-03-01".into()))
            .insert("k", ParamValue::Number(2.5))
            .insert("n", ParamValue::Number(7.0))
            .insert("big", ParamValue::Number(1e18));
        let b = Binder::new(&p, 1_000_000);
        let param = |name: &str| Arg::<u64>::Param {
            name: name.into(),
            span: Span::new(1, 3),
        };
        assert_eq!(b.count(&param("n")).unwrap(), 7);
        assert_eq!(b.count(&param("k")).unwrap_err().code(), "param_type");
        assert_eq!(b.count(&param("zz")).unwrap_err().code(), "unbound_param");
        // an integer too large to be exact names its range, not its kind
        let e = b.count(&param("big")).unwrap_err().to_string();
        assert!(e.contains("at most 2^53"), "{e}");
        let e = b.count(&param("k")).unwrap_err().to_string();
        assert!(!e.contains("2^53"), "{e}");
        let t = TimeExpr::Param {
            name: "t".into(),
            span: Span::default(),
        };
        assert_eq!(b.time(&t).unwrap(), 1_740_787_200_000);
        let week_ago = TimeExpr::Now {
            offset: Some(Offset {
                sign: Sign::Minus,
                amount: 1,
                unit: TimeUnit::W,
            }),
            span: Span::default(),
        };
        assert_eq!(b.time(&week_ago).unwrap(), 1_000_000 - 604_800_000);
        let far = TimeExpr::Now {
            offset: Some(Offset {
                sign: Sign::Plus,
                amount: 600_000,
                unit: TimeUnit::W,
            }),
            span: Span::default(),
        };
        assert_eq!(b.time(&far).unwrap_err().code(), "out_of_range");
    }
}
