//! Strict JSON: the one parser every JSON line goes through. It builds the
//! same `serde_json::Value` a plain parse would, but refuses what a plain
//! parse would change silently:
//! - a key repeated in one object (a plain parse keeps the last value);
//! - an integer that a JSON number cannot carry exactly through Engram's
//!   canonical form (RFC 8785 represents numbers as IEEE doubles): beyond
//!   ±2^53 it would be stored rounded (`1234567890123456789` would come back
//!   as `1234567890123456800`). Send such values as strings. This covers
//!   integers beyond 64 bits too, which serde_json reads as doubles: the
//!   text's number literals are scanned for them first. A literal with a
//!   fraction or an exponent (`1e20`, `0.1`) is a double by its form and is
//!   stored as the nearest one, as RFC 8785 says.
//!
//! Each refusal names the field by its path (`data.ids[2]`).
//!
//! This module must never accept a document it would not return unchanged.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Largest integer magnitude a double represents exactly (2^53).
pub const SAFE_INTEGER_MAX: u64 = 1 << 53;

/// Why a document was refused: (field path, reason).
pub type Refusal = (String, String);

/// Parses `text` as JSON, refusing duplicate keys and unsafe integers.
/// `Err(Ok(refusal))`: a strictness rule; `Err(Err(e))`: not valid JSON.
pub fn parse(text: &str) -> Result<Value, Result<Refusal, serde_json::Error>> {
    let refusal = RefCell::new(None);
    let oversized = oversized_integers(text);
    let numbers = std::cell::Cell::new(0);
    let path = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(text);
    let r = Walk {
        path: &path,
        refusal: &refusal,
        numbers: Numbers {
            seen: &numbers,
            oversized: &oversized,
        },
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match r {
        Ok(v) => Ok(v),
        Err(e) => match refusal.into_inner() {
            Some(x) => Err(Ok(x)),
            None => {
                // An integer too long even for a double ("number out of
                // range"): the same refusal as any oversized integer, at
                // the value being read when the parse stopped.
                let next = numbers.get();
                match oversized.iter().find(|(at, _)| *at == next) {
                    Some((_, literal)) if e.to_string().contains("number out of range") => {
                        // (a failed parse leaves the path where it stopped)
                        let field = render(&path.borrow());
                        let reason = unsafe_integer(literal, &field);
                        Err(Ok((
                            if field.is_empty() { "-".into() } else { field },
                            reason,
                        )))
                    }
                    _ => Err(Err(e)),
                }
            }
        },
    }
}

/// What is wrong with a document the JSON parser refused, said for the
/// one who wrote it: the parser's message (with its position, which the
/// caller reports on its own terms), except where that message names the
/// parser's workings rather than the input (its depth limit, a lone
/// UTF-16 surrogate escape).
pub fn json_error_reason(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    // (the parser's position, kept last where callers look for it)
    let (what, at) = msg.split_at(msg.rfind(" at line ").unwrap_or(msg.len()));
    if what.contains("recursion limit exceeded") {
        return format!(
            "nested too deeply to read (more than 127 levels of arrays and objects){at}"
        );
    }
    if what.contains("surrogate") || what.starts_with("unexpected end of hex escape") {
        return format!(
            "{what} (an escape \\uD800 to \\uDFFF is half of a UTF-16 surrogate pair, a high one followed by a low one: write the character itself or its pair){at}"
        );
    }
    msg
}

/// Why an integer at `path` is refused (inside `data`, a payload whose
/// shape is the client's, with the way round).
fn unsafe_integer(literal: &str, path: &str) -> String {
    let bound = if literal.starts_with('-') {
        "±2^53"
    } else {
        "2^53"
    };
    let hint = if path == "data" || path.starts_with("data.") || path.starts_with("data[") {
        "; in `data`, send it as a string"
    } else {
        ""
    };
    format!(
        "integer {literal} is beyond {bound}, so a JSON number (a double) cannot carry it \
         exactly{hint}"
    )
}

/// Integer literals of `text` (outside strings) too large for 64 bits,
/// which serde_json reads as doubles, as (position among the text's number
/// literals, the literal). Empty for almost every document.
fn oversized_integers(text: &str) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut n) = (0usize, 0usize);
    while i < b.len() {
        match b[i] {
            b'"' => {
                // skip the string, escapes included
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let integer_end = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let literal = &text[start..i];
                let digits = literal.trim_start_matches('-');
                // beyond i64/u64: 20 digits or more (u64::MAX has 20)
                if integer_end == i
                    && digits.len() >= 19
                    && literal.parse::<i64>().is_err()
                    && literal.parse::<u64>().is_err()
                {
                    out.push((n, literal.to_string()));
                }
                n += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Where the walk is among the document's number literals.
#[derive(Clone, Copy)]
struct Numbers<'a> {
    seen: &'a std::cell::Cell<usize>,
    oversized: &'a [(usize, String)],
}

impl Numbers<'_> {
    /// Counts one number; the literal, when it is an oversized integer.
    fn next(&self) -> Option<&str> {
        let k = self.seen.get();
        self.seen.set(k + 1);
        self.oversized
            .binary_search_by_key(&k, |(at, _)| *at)
            .ok()
            .map(|x| self.oversized[x].1.as_str())
    }
}

/// One step of a value's path: an array index or an object key.
enum Segment {
    Index(usize),
    Key(String),
}

/// A path as refusals name it: `data.ids[2]`. A key longer than
/// [`KEY_SHOWN_MAX`] characters is cut, marked with `...`: a refusal
/// quoting a key of megabytes (several times, in its message and its
/// field) made an answer several times the body's size.
fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                match k.char_indices().nth(KEY_SHOWN_MAX) {
                    Some((cut, _)) => {
                        out.push_str(&k[..cut]);
                        out.push_str("...");
                    }
                    None => out.push_str(k),
                }
            }
        }
    }
    out
}

/// Characters of a key a refusal's path shows.
const KEY_SHOWN_MAX: usize = 64;

/// The walk over one document. The path of the value being read is one
/// stack the walk pushes onto and pops, shared by every level, and written
/// out only for a refusal: a copy of the path per value made a document of
/// many values under a long key cost the key's length for each of them.
#[derive(Clone, Copy)]
struct Walk<'a> {
    path: &'a RefCell<Vec<Segment>>,
    refusal: &'a RefCell<Option<Refusal>>,
    numbers: Numbers<'a>,
}

impl Walk<'_> {
    fn field(&self) -> String {
        render(&self.path.borrow())
    }

    fn refuse<E: serde::de::Error>(&self, reason: String) -> E {
        let field = self.field();
        let field = if field.is_empty() { "-".into() } else { field };
        *self.refusal.borrow_mut() = Some((field, reason.clone()));
        E::custom(reason)
    }

    /// Reads the value at `segment` with `read`; the segment is popped
    /// when it was read, and left on the path when the read failed (so a
    /// parse that stops names where).
    fn at<T, E>(
        &self,
        segment: Segment,
        read: impl FnOnce(Walk<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        self.path.borrow_mut().push(segment);
        let r = read(*self)?;
        self.path.borrow_mut().pop();
        Ok(r)
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.numbers.next();
        if v.unsigned_abs() > SAFE_INTEGER_MAX {
            return Err(self.refuse(unsafe_integer(&v.to_string(), &self.field())));
        }
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.numbers.next();
        if v > SAFE_INTEGER_MAX {
            return Err(self.refuse(unsafe_integer(&v.to_string(), &self.field())));
        }
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        if let Some(literal) = self.numbers.next() {
            return Err(self.refuse(unsafe_integer(literal, &self.field())));
        }
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| self.refuse(format!("{v} is not a finite number")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = self.at(Segment::Index(out.len()), |w| seq.next_element_seed(w))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return self.at(Segment::Key(k), |w| {
                    Err(w.refuse("the key appears twice in one object".to_string()))
                });
            }
            let v = self.at(Segment::Key(k.clone()), |w| map.next_value_seed(w))?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_parser_message_about_its_workings_says_what_is_wrong_with_the_input() {
        let why = |t: &str| match parse(t) {
            Err(Err(e)) => json_error_reason(&e),
            other => panic!("{t}: {other:?}"),
        };
        for t in [
            r#"{"text": "\ud800"}"#,
            r#"{"text": "\ud800x"}"#,
            r#"{"text": "\udc00"}"#,
        ] {
            let m = why(t);
            assert!(m.contains("surrogate pair"), "{t}: {m}");
        }
        let deep = "[".repeat(200);
        let m = why(&deep);
        assert!(
            why(r#"{"text": "\ud800"}"#).ends_with(" at line 1 column 17"),
            "{m}"
        );
        assert!(m.starts_with("nested too deeply to read"), "{m}");
        assert!(m.contains(" at line 1 column "), "{m}");
        // other messages are the parser's own
        assert!(why(r#"{"a": }"#).starts_with("expected value"));
    }

    use super::*;

    #[test]
    fn a_plain_document_is_unchanged() {
        let t = r#"{"a": [1, 2.5, "x", null, true, {"b": -9007199254740992}], "c": {}}"#;
        assert_eq!(parse(t).unwrap(), serde_json::from_str::<Value>(t).unwrap());
    }

    #[test]
    fn duplicate_keys_and_unsafe_integers_are_named() {
        let e = parse(r#"{"data": {"id": 1, "id": 2}}"#)
            .unwrap_err()
            .unwrap();
        assert_eq!(e.0, "data.id");
        let e = parse(r#"{"data": {"ids": [1, 1234567890123456789]}}"#)
            .unwrap_err()
            .unwrap();
        assert_eq!(e.0, "data.ids[1]");
        assert!(e.1.contains("send it as a string"), "{e:?}");
        let e = parse(r#"{"n": -9007199254740993}"#).unwrap_err().unwrap();
        assert_eq!(e.0, "n");
    }

    #[test]
    fn integers_beyond_64_bits_are_refused_and_doubles_are_not() {
        for (t, field) in [
            (r#"{"v": 18446744073709551616}"#, "v"),
            (
                r#"{"a": "1234567890123456789012", "v": [1.5, -9223372036854775809]}"#,
                "v[1]",
            ),
            (
                r#"{"s": "x\"y 99999999999999999999", "w": {"z": 12345678901234567890123}}"#,
                "w.z",
            ),
        ] {
            let e = parse(t).unwrap_err().unwrap();
            assert_eq!(e.0, field, "{t}");
            assert!(e.1.contains("cannot carry it exactly"), "{e:?}");
            // the way round is said only where it applies: inside `data`
            assert!(!e.1.contains("send it as a string"), "{e:?}");
        }
        // too long even for a double: the same refusal, at its field
        let huge = format!(r#"{{"a": 1, "data": {{"n": {}}}}}"#, "9".repeat(400));
        let e = parse(&huge).unwrap_err().unwrap();
        assert_eq!(e.0, "data.n");
        assert!(e.1.contains("send it as a string"), "{e:?}");
        // doubles by their form, and digits inside strings, are accepted
        for t in [
            r#"{"v": 1e20, "w": 6.02e23, "x": 0.1, "y": 18446744073709551616.0}"#,
            r#"{"s": "18446744073709551616", "t": 1e-400}"#,
        ] {
            let plain: Value = serde_json::from_str(t).unwrap();
            assert_eq!(parse(t).unwrap(), plain, "{t}");
        }
    }

    proptest::proptest! {
        /// Any integer literal parses exactly when it fits ±2^53, and is
        /// refused otherwise, whatever its size.
        #[test]
        fn every_integer_is_exact_or_refused(digits in "-?[1-9][0-9]{0,40}") {
            let t = format!("{{\"k\": [true, {digits}]}}");
            let fits = digits.parse::<i128>().is_ok_and(|v| v.unsigned_abs() <= u128::from(SAFE_INTEGER_MAX));
            match parse(&t) {
                Ok(v) => {
                    proptest::prop_assert!(fits, "{}", t);
                    proptest::prop_assert_eq!(v["k"][1].to_string(), digits);
                }
                Err(Ok((field, _))) => {
                    proptest::prop_assert!(!fits, "{}", t);
                    proptest::prop_assert_eq!(field, "k[1]");
                }
                Err(Err(e)) => proptest::prop_assert!(false, "{}: {}", t, e),
            }
        }
    }

    #[test]
    fn a_refusal_deep_among_siblings_names_its_own_path() {
        let e = parse(r#"{"a": [{"b": 1}, {"c": [1, "x", {"d": 1, "d": 2}]}], "e": 1}"#)
            .unwrap_err()
            .unwrap();
        assert_eq!(e.0, "a[1].c[2].d");
        let e = parse(r#"{"a": [[], {"b": []}, {"c": [0, 9007199254740993]}]}"#)
            .unwrap_err()
            .unwrap();
        assert_eq!(e.0, "a[2].c[1]");
        // a parse stopped by an integer too long for a double, after
        // siblings that were read whole
        let t = format!(r#"{{"a": [{{"b": [1]}}, {{"c": [{}]}}]}}"#, "9".repeat(400));
        assert_eq!(parse(&t).unwrap_err().unwrap().0, "a[1].c[0]");
        // at the top level
        assert_eq!(parse("9007199254740993").unwrap_err().unwrap().0, "-");
    }

    /// Many values under one long key (a hostile body within the size
    /// limits) cost the document's size, not the key's length for every
    /// value: a copy of the path per value took eight terabytes of copying
    /// here (38 s for an eighth of it); the walk takes well under a second.
    /// The bound below is a hundred times that, so only the quadratic walk
    /// fails it.
    #[test]
    fn a_long_key_is_cut_in_a_refusal_s_path() {
        let key = "k".repeat(100_000);
        let e = parse(&format!(r#"{{"{key}": {{"a": 1, "a": 2}}}}"#))
            .unwrap_err()
            .unwrap();
        assert_eq!(e.0, format!("{}....a", "k".repeat(KEY_SHOWN_MAX)));
        let e = parse(r#"{"data": {"é": {"x": 1, "x": 1}}}"#)
            .unwrap_err()
            .unwrap();
        assert_eq!(e.0, "data.é.x");
    }

    #[test]
    fn many_values_under_a_long_key_parse_in_linear_time() {
        let key = "k".repeat(4 << 20);
        let t = format!(r#"{{"{key}": [{}0]}}"#, "0,".repeat(2 << 20));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(parse(&t).map(|v| v[&key].as_array().map(Vec::len)));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the parse took more than 30 s");
        assert_eq!(got.unwrap(), Some((2 << 20) + 1));
    }

    #[test]
    fn invalid_json_is_a_parse_error_not_a_refusal() {
        assert!(parse("{\"a\": ").unwrap_err().is_err());
        assert!(parse("{} x").unwrap_err().is_err());
    }
}
