//! Strict JSON: the one parser every JSON line goes through. It builds the
//! same `serde_json::Value` a plain parse would, but refuses what a plain
//! parse would change silently:
//! - a key repeated in one object (a plain parse keeps the last value);
//! - an integer that a JSON number cannot carry exactly through Engram's
//!   canonical form (RFC 8785 represents numbers as IEEE doubles): beyond
//!   ±2^53 it would be stored rounded (`1234567890123456789` would come back
//!   as `1234567890123456800`). Send such values as strings.
//!
//! Each refusal names the field by its path (`data.ids[2]`).
//!
//! This module must never accept a document it would not return unchanged.

use std::cell::RefCell;
use std::collections::HashSet;
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
    let mut de = serde_json::Deserializer::from_str(text);
    let r = Walk {
        path: String::new(),
        refusal: &refusal,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match r {
        Ok(v) => Ok(v),
        Err(e) => match refusal.into_inner() {
            Some(x) => Err(Ok(x)),
            None => Err(Err(e)),
        },
    }
}

struct Walk<'a> {
    path: String,
    refusal: &'a RefCell<Option<Refusal>>,
}

impl Walk<'_> {
    fn refuse<E: serde::de::Error>(&self, reason: String) -> E {
        let field = if self.path.is_empty() {
            "-".to_string()
        } else {
            self.path.clone()
        };
        *self.refusal.borrow_mut() = Some((field, reason.clone()));
        E::custom(reason)
    }

    fn child(&self, segment: &str, is_index: bool) -> Walk<'_> {
        let path = if is_index {
            format!("{}[{segment}]", self.path)
        } else if self.path.is_empty() {
            segment.to_string()
        } else {
            format!("{}.{segment}", self.path)
        };
        Walk {
            path,
            refusal: self.refusal,
        }
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
        if v.unsigned_abs() > SAFE_INTEGER_MAX {
            return Err(self.refuse(format!(
                "integer {v} is beyond ±2^53 and would not be stored exactly; send it as a string"
            )));
        }
        Ok(Value::from(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        if v > SAFE_INTEGER_MAX {
            return Err(self.refuse(format!(
                "integer {v} is beyond 2^53 and would not be stored exactly; send it as a string"
            )));
        }
        Ok(Value::from(v))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
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
        while let Some(v) = seq.next_element_seed(self.child(&out.len().to_string(), true))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let mut seen = HashSet::new();
        while let Some(k) = map.next_key::<String>()? {
            if !seen.insert(k.clone()) {
                return Err(self
                    .child(&k, false)
                    .refuse("the key appears twice in one object".to_string()));
            }
            let v = map.next_value_seed(self.child(&k, false))?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
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
    fn invalid_json_is_a_parse_error_not_a_refusal() {
        assert!(parse("{\"a\": ").unwrap_err().is_err());
        assert!(parse("{} x").unwrap_err().is_err());
    }
}
