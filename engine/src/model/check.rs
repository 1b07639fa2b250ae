//! The model's own rules for what a record may hold: names, labels,
//! times, vectors, `data` in its stored form, and [`NewRecord::validate`]
//! (every field of a new record, before the store is asked anything).

use super::*;

/// Checks a name (tenant, principal, label, kind, ...): non-empty, at most
/// [`limits::NAME_BYTES_MAX`] bytes, no control characters, no surrounding
/// whitespace. `field` names it in the error.
pub fn check_name(field: &str, s: &str) -> Result<()> {
    if s.is_empty() {
        return Err(EngineError::invalid(field, "must not be empty"));
    }
    if s.len() > limits::NAME_BYTES_MAX {
        return Err(EngineError::LimitExceeded {
            item: None,
            what: format!("{field} length in bytes"),
            limit: limits::NAME_BYTES_MAX as u64,
            got: s.len() as u64,
        });
    }
    match name_fault(s) {
        Some(fault) => Err(EngineError::invalid(field, fault.rule())),
        None => Ok(()),
    }
}

/// What makes a string a name no record may hold, beside its length: the
/// one rule [`check_name`] applies on the write path and filters (recall,
/// the query language) apply to the values they are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameFault {
    /// A control character anywhere (a line end, a tab, NUL, ...).
    ControlCharacter,
    /// Whitespace at the start or the end.
    SurroundingWhitespace,
}

impl NameFault {
    /// The rule, as an error states it: "must not ...".
    pub fn rule(self) -> &'static str {
        match self {
            NameFault::ControlCharacter => "must not contain control characters",
            NameFault::SurroundingWhitespace => "must not start or end with whitespace",
        }
    }

    /// What the value does, as a located error states it.
    pub fn found(self) -> &'static str {
        match self {
            NameFault::ControlCharacter => "holds a control character",
            NameFault::SurroundingWhitespace => "starts or ends with whitespace",
        }
    }
}

/// The fault that keeps `s` from being a name, if any (emptiness and length
/// are the caller's: their limits differ by field).
pub fn name_fault(s: &str) -> Option<NameFault> {
    if s.chars().any(char::is_control) {
        Some(NameFault::ControlCharacter)
    } else if s.trim() != s {
        Some(NameFault::SurroundingWhitespace)
    } else {
        None
    }
}

/// Checks the free-text reason or note of a lifecycle operation: at most
/// [`limits::REASON_BYTES_MAX`] bytes. `field` names it in the error.
pub fn check_reason(field: &str, s: Option<&str>) -> Result<()> {
    match s {
        Some(r) if r.len() > limits::REASON_BYTES_MAX => Err(EngineError::invalid(
            field,
            format!(
                "longer than {} bytes ({} bytes)",
                limits::REASON_BYTES_MAX,
                r.len()
            ),
        )),
        _ => Ok(()),
    }
}

/// Checks a tenant name (an identifier: [`check_identifier`]).
pub fn check_tenant(t: &str) -> Result<()> {
    check_identifier("tenant", t)
}

/// Checks a name that decides who may see what (a tenant, a principal, an
/// access or scope label): [`check_name`]'s rules, and none of the
/// invisible formatting characters (zero-width spaces and joiners,
/// bidirectional marks, the soft hyphen, a byte-order mark), with which
/// `acme` and `acme` followed by a zero-width space would be two tenants
/// that print alike. (Content names, such as an entity's, may hold them:
/// joiners belong to some scripts and to emoji.)
pub fn check_identifier(field: &str, s: &str) -> Result<()> {
    check_name(field, s)?;
    if let Some(c) = s.chars().find(|&c| invisible_format(c)) {
        return Err(EngineError::invalid(
            field,
            format!(
                "must not contain the invisible character U+{:04X}: it would make a name that prints like another",
                c as u32
            ),
        ));
    }
    Ok(())
}

/// Unicode format characters that print as nothing (or reorder text).
fn invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

pub(crate) fn check_time(field: &str, t: Option<TimestampMs>) -> Result<()> {
    if let Some(t) = t {
        if !(TIMESTAMP_MIN_MS..=TIMESTAMP_MAX_MS).contains(&t) {
            return Err(EngineError::invalid(field, "outside years 0001..9999"));
        }
    }
    Ok(())
}

pub(crate) fn check_labels(field: &str, labels: &[String]) -> Result<()> {
    if labels.len() > limits::LABELS_MAX {
        return Err(EngineError::LimitExceeded {
            item: None,
            what: format!("{field} count"),
            limit: limits::LABELS_MAX as u64,
            got: labels.len() as u64,
        });
    }
    for l in labels {
        check_name(field, l)?;
    }
    Ok(())
}

/// [`check_labels`] for labels that decide access: identifiers.
fn check_access_labels(field: &str, labels: &[String]) -> Result<()> {
    check_labels(field, labels)?;
    labels.iter().try_for_each(|l| check_identifier(field, l))
}

/// Nesting depth of a JSON value (a scalar is 0, `[]` and `{}` are 1).
fn json_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `data` in canonical form (as it is hashed and stored), refused past
/// [`limits::DATA_BYTES_MAX`]. Appends check it per record; a file's parse
/// checks it per line, so such a line fails the file before anything is
/// stored.
pub fn canonical_data(d: &serde_json::Value) -> Result<String> {
    let s = crate::canonical::to_canonical_string(d)
        .map_err(|e| EngineError::invalid("data", e.to_string()))?;
    if s.len() > limits::DATA_BYTES_MAX {
        return Err(EngineError::LimitExceeded {
            item: None,
            what: "data length in bytes (canonical JSON)".into(),
            limit: limits::DATA_BYTES_MAX as u64,
            got: s.len() as u64,
        });
    }
    Ok(s)
}

/// Checks a vector: dimension limits and finite components.
pub fn check_vector(field: &str, v: &[f32]) -> Result<()> {
    check_dims(field, v)?;
    check_finite(field, v)
}

/// Not empty and within [`limits::VECTOR_DIM_MAX`].
fn check_dims(field: &str, v: &[f32]) -> Result<()> {
    if v.is_empty() {
        return Err(EngineError::invalid(field, "vector is empty"));
    }
    if v.len() > limits::VECTOR_DIM_MAX {
        return Err(EngineError::LimitExceeded {
            item: None,
            what: format!("{field} dimensions"),
            limit: limits::VECTOR_DIM_MAX as u64,
            got: v.len() as u64,
        });
    }
    Ok(())
}

/// Every component finite, or an error naming the first that is not.
fn check_finite(field: &str, v: &[f32]) -> Result<()> {
    // One branch-free pass (it vectorizes); the position only on failure.
    if !v.iter().fold(true, |ok, x| ok & x.is_finite()) {
        let i = v.iter().position(|x| !x.is_finite()).unwrap_or(0);
        return Err(EngineError::invalid(
            field,
            format!("component {i} is {} (must be finite)", v[i]),
        ));
    }
    Ok(())
}

/// Checks a query vector: [`check_vector`], and not all zeros (a zero
/// vector has no direction to compare).
pub fn check_query_vector(field: &str, v: &[f32]) -> Result<()> {
    check_dims(field, v)?;
    // Fast path, one SIMD pass: a positive, finite sum of squares means
    // every component is finite and one is not zero. Anything else (a bad
    // component, or huge or tiny values whose squares overflow or
    // underflow) takes the exact checks, which name what is wrong.
    let sq = -crate::vector::distance::distance(crate::vector::distance::Metric::Dot, v, v);
    if sq.is_finite() && sq > 0.0 {
        return Ok(());
    }
    check_finite(field, v)?;
    if v.iter().fold(true, |zero, x| zero & (*x == 0.0)) {
        return Err(EngineError::invalid(
            field,
            "all components are zero: a zero vector has no direction to compare",
        ));
    }
    Ok(())
}

impl NewRecord {
    /// Checks every field against the model's rules and limits (not against
    /// the store: references and external ids are checked at append).
    pub fn validate(&self) -> Result<()> {
        let rt = self.body.record_type();
        if let Some(e) = &self.external_id {
            if e.is_empty() {
                return Err(EngineError::invalid("external_id", "must not be empty"));
            }
            if e.len() > limits::EXTERNAL_ID_BYTES_MAX {
                return Err(EngineError::LimitExceeded {
                    item: None,
                    what: "external_id length in bytes".into(),
                    limit: limits::EXTERNAL_ID_BYTES_MAX as u64,
                    got: e.len() as u64,
                });
            }
            if e.chars().any(char::is_control) {
                return Err(EngineError::invalid(
                    "external_id",
                    "must not contain control characters",
                ));
            }
        }
        check_name("kind", &self.kind)?;
        if let Body::Assertion { kind, .. } = &self.body {
            if self.kind != kind.name() {
                return Err(EngineError::invalid(
                    "kind",
                    format!(
                        "assertion kind is '{}' but kind says '{}'",
                        kind.name(),
                        self.kind
                    ),
                ));
            }
        }
        for (f, v) in [
            ("scope.user", &self.scope.user),
            ("scope.conversation", &self.scope.conversation),
            ("scope.agent", &self.scope.agent),
        ] {
            if let Some(v) = v {
                check_name(f, v)?;
            }
        }
        check_access_labels("scope.labels", &self.scope.labels)?;
        check_access_labels("access", &self.access)?;
        if let Some(r) = &self.retention_class {
            check_name("retention_class", r)?;
        }
        if let Some(w) = &self.writer {
            check_identifier("writer.principal", &w.principal)?;
        }
        check_time("occurred_at", self.occurred_at)?;
        check_time("valid_from", self.valid_from)?;
        check_time("valid_until", self.valid_until)?;
        check_time("last_verified_at", self.last_verified_at)?;
        // (without valid_from, the start is the earlier of occurred_at and
        // the ingestion, checked where the time of storing is known)
        if let (Some(from), Some(until)) = (self.valid_from, self.valid_until) {
            if until < from {
                return Err(EngineError::invalid(
                    "valid_until",
                    format!(
                        "{} is before the start of validity {}",
                        format_rfc3339(until),
                        format_rfc3339(from)
                    ),
                ));
            }
        }
        let has_text = self.text.as_deref().is_some_and(|t| !t.is_empty());
        if rt == RecordType::Event && !has_text && self.data.is_none() {
            return Err(EngineError::invalid(
                "text",
                "an event needs `text` and/or `data`",
            ));
        }
        if let Some(d) = &self.data {
            // The content hash nests `data` one level inside its object.
            let depth = json_depth(d);
            if depth >= crate::canonical::DEPTH_MAX {
                return Err(EngineError::LimitExceeded {
                    item: None,
                    what: "nesting depth of data".into(),
                    limit: crate::canonical::DEPTH_MAX as u64 - 1,
                    got: depth as u64,
                });
            }
        }
        if let Some(t) = &self.text {
            if t.len() > limits::TEXT_BYTES_MAX {
                return Err(EngineError::LimitExceeded {
                    item: None,
                    what: "text length in bytes".into(),
                    limit: limits::TEXT_BYTES_MAX as u64,
                    got: t.len() as u64,
                });
            }
        }
        if self.embeddings.len() > limits::EMBEDDINGS_PER_RECORD_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "embeddings per record".into(),
                limit: limits::EMBEDDINGS_PER_RECORD_MAX as u64,
                got: self.embeddings.len() as u64,
            });
        }
        for (i, e) in self.embeddings.iter().enumerate() {
            check_name("embedding.model", &e.model)?;
            check_vector("embedding.vector", &e.vector)?;
            if self.embeddings[..i].iter().any(|o| o.model == e.model) {
                return Err(EngineError::invalid(
                    "embedding.model",
                    format!("two vectors for model '{}' on one record", e.model),
                ));
            }
        }
        if let Some(c) = self.confidence {
            if !(0.0..=1.0).contains(&c) {
                return Err(EngineError::invalid("confidence", "must be within [0, 1]"));
            }
        }
        if self.sources.len() > limits::SOURCES_MAX {
            return Err(EngineError::LimitExceeded {
                item: None,
                what: "sources count".into(),
                limit: limits::SOURCES_MAX as u64,
                got: self.sources.len() as u64,
            });
        }
        match &self.body {
            Body::Event => {
                if !self.sources.is_empty() {
                    return Err(EngineError::invalid(
                        "sources",
                        "events have no sources (they are the sources); use a semantic record",
                    ));
                }
            }
            Body::Entity {
                entity_type,
                name,
                aliases,
            } => {
                check_name("entity_type", entity_type)?;
                check_name("name", name)?;
                check_labels("aliases", aliases)?;
            }
            Body::Relation { predicate, .. } => {
                check_name("predicate", predicate)?;
            }
            Body::Assertion { predicate, .. } => {
                if let Some(p) = predicate {
                    check_name("predicate", p)?;
                }
                if !has_text && predicate.is_none() {
                    return Err(EngineError::invalid(
                        "text",
                        "an assertion needs a statement (`text`) or subject/predicate/object",
                    ));
                }
                if self.sources.is_empty() {
                    return Err(EngineError::invalid(
                        "sources",
                        "an assertion needs at least one source (provenance)",
                    ));
                }
            }
            Body::Summary { generator } => {
                check_name("generator", generator)?;
                if !has_text {
                    return Err(EngineError::invalid("text", "a summary needs text"));
                }
                if self.sources.is_empty() {
                    return Err(EngineError::invalid(
                        "sources",
                        "a summary needs its ordered inputs in `sources`",
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_refuse_invisible_characters_that_content_names_may_hold() {
        for bad in [
            "acme\u{200b}",
            "ac\u{200d}me",
            "\u{feff}acme",
            "acme\u{200e}",
            "a\u{ad}cme",
            "acme\u{e0061}",
            "acme\u{e0100}",
            "acme\u{1d173}",
            "acme\u{13430}",
            "acme\u{1bca0}",
            "acme\u{110bd}",
        ] {
            let e = check_identifier("tenant", bad).unwrap_err().to_string();
            assert!(e.contains("invisible character U+"), "{bad:?}: {e}");
            assert!(check_tenant(bad).is_err());
        }
        for good in ["acme", "acmé", "アクメ", "acme-eu_1", "a cme"] {
            assert!(check_identifier("tenant", good).is_ok(), "{good:?}");
        }
        // an entity's name may hold a joiner (emoji sequences, scripts)
        assert!(check_name("name", "👨\u{200d}👩\u{200d}👧").is_ok());
        let mut r = crate::model::NewRecord::event("note", "x");
        r.access = vec!["secret\u{200b}".into()];
        assert!(r.validate().is_err(), "an access label is an identifier");
    }

    #[test]
    fn one_name_rule_for_writes_and_filters() {
        for (s, fault) in [
            ("note\n", Some(NameFault::ControlCharacter)),
            ("a\u{0}b", Some(NameFault::ControlCharacter)),
            (" note", Some(NameFault::SurroundingWhitespace)),
            ("note\u{3000}", Some(NameFault::SurroundingWhitespace)),
            ("a note", None),
            ("noté", None),
        ] {
            assert_eq!(name_fault(s), fault, "{s:?}");
            let written = check_name("kind", s);
            match fault {
                Some(f) => assert!(written.unwrap_err().to_string().contains(f.rule())),
                None => assert!(written.is_ok(), "{s:?}"),
            }
        }
    }
}
