//! Errors of the query language: one type, [`LangError`], for lexing,
//! parsing, checking and binding, so a caller handles one shape.
//!
//! Each error has a stable code (`unexpected_token`, `limit_exceeded`, ...;
//! the table is in `docs/query-language.md`), a message naming what is
//! wrong, the span and line:column it points at, the tokens that would have
//! been valid there and, when there is one, a hint on how to fix it.
//! [`LangError::render`] gives a terminal report and [`LangError::to_json`]
//! the same information for programs.
//!
//! Every error is the caller's to fix: the same statement with the same
//! parameters fails the same way, so retrying is pointless.
//!
//! This module must never do I/O: reports are returned as values.

use serde::Serialize;

use super::span::{Span, line_col};

/// What went wrong, with the context a caller needs. The variant's
/// snake_case name is the stable error code.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// A character no token starts with.
    #[error("unexpected character {found:?}")]
    UnexpectedCharacter {
        /// The character.
        found: char,
    },
    /// A string literal with no closing quote.
    #[error("unterminated string")]
    UnterminatedString,
    /// A number that does not parse or does not fit.
    #[error("invalid number `{text}`: {reason}")]
    InvalidNumber {
        /// The number as written (truncated).
        text: String,
        /// Why.
        reason: String,
    },
    /// A timestamp that is not RFC 3339.
    #[error("invalid time `{text}`: {reason}")]
    InvalidTime {
        /// The time as written (truncated).
        text: String,
        /// Why.
        reason: String,
    },
    /// A duration with an unknown unit or out of range.
    #[error("invalid duration `{text}`: {reason}")]
    InvalidDuration {
        /// The duration as written (truncated).
        text: String,
        /// Why.
        reason: String,
    },
    /// A token that cannot come here.
    #[error("expected {wanted}, found {found}")]
    UnexpectedToken {
        /// What the parser was looking for.
        wanted: String,
        /// What it found.
        found: String,
    },
    /// The statement ended early.
    #[error("expected {wanted}, found the end of the statement")]
    UnexpectedEnd {
        /// What the parser was looking for.
        wanted: String,
    },
    /// A keyword used as a retriever name.
    #[error("`{name}` is a keyword and cannot name a retriever")]
    ReservedName {
        /// The name.
        name: String,
    },
    /// A name that is not an identifier (only possible in the JSON form).
    #[error(
        "`{name}` is not a valid name (ASCII letters, digits and `_`, not starting with a digit, at most 64 bytes)"
    )]
    InvalidName {
        /// The name.
        name: String,
    },
    /// A field name the language does not know (WHERE or RETURN).
    #[error("unknown field `{name}`")]
    UnknownField {
        /// The field as written.
        name: String,
    },
    /// A record type the language does not know.
    #[error("unknown record type `{name}`")]
    UnknownRecordType {
        /// The name as written.
        name: String,
    },
    /// A status the language does not know.
    #[error("unknown status `{name}`")]
    UnknownStatus {
        /// The name as written.
        name: String,
    },
    /// A clause or option given twice.
    #[error("{clause} is given twice")]
    DuplicateClause {
        /// The clause.
        clause: String,
    },
    /// A value above one of the limits in [`super::limits`].
    #[error("{what} is {got}, above the limit of {limit}")]
    LimitExceeded {
        /// What is limited.
        what: String,
        /// The limit.
        limit: u64,
        /// What the statement asked for.
        got: u64,
    },
    /// A value outside its domain (`TOP 0`, `MIN 1.5`, a negative weight).
    #[error("{what} is {got}, outside {range}")]
    OutOfRange {
        /// What.
        what: String,
        /// The value as text.
        got: String,
        /// The valid range as text.
        range: String,
    },
    /// A text that must not be empty (a query text, a name).
    #[error("{what} is empty")]
    EmptyValue {
        /// What.
        what: String,
    },
    /// A name no record may hold (a control character, spaces around it):
    /// as a filter it would match nothing.
    #[error("{what} {got} {reason}: no record has such a name")]
    BadValue {
        /// What.
        what: String,
        /// The value, quoted and escaped.
        got: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A list with no items (only possible in the JSON form).
    #[error("{what} has no items")]
    EmptyList {
        /// What.
        what: String,
    },
    /// `status = deleted`: deleted records are never selectable.
    #[error("`deleted` cannot be selected: deleted records are never returned")]
    DeletedNotAllowed,
    /// A name in `WEIGHTS` or `EXPAND FROM` that no retriever has.
    #[error("no retriever is named `{name}`")]
    UnknownRetriever {
        /// The name.
        name: String,
        /// The retrievers the statement has.
        known: Vec<String>,
    },
    /// Two retrievers with the same (possibly default) name.
    #[error("two retrievers are named `{name}`")]
    DuplicateRetriever {
        /// The name.
        name: String,
    },
    /// One retriever weighted twice.
    #[error("`{name}` is weighted twice")]
    DuplicateWeight {
        /// The name.
        name: String,
    },
    /// One field returned twice.
    #[error("`{name}` is returned twice")]
    DuplicateField {
        /// The field.
        name: String,
    },
    /// `FUSE` or `WEIGHTS` in a statement with no retriever.
    #[error("{clause} needs retrievers, and this statement has none")]
    FusionWithoutRetrievers {
        /// `FUSE` or `WEIGHTS`.
        clause: String,
    },
    /// `HOPS a..b` with `a > b`.
    #[error("hop range {min}..{max} is inverted")]
    InvertedRange {
        /// Lower end.
        min: u64,
        /// Upper end.
        max: u64,
    },
    /// An EXPAND seeded by a retriever written after it.
    #[error("EXPAND `{expand}` starts from `{seed}`, which is written after it")]
    SeedOrder {
        /// The EXPAND retriever.
        expand: String,
        /// The seed retriever.
        seed: String,
    },
    /// EXPAND retrievers seeded from each other in a loop.
    #[error("EXPAND retrievers seed each other in a cycle: {}", cycle.join(" -> "))]
    ExpandCycle {
        /// Retriever names along the cycle, the first repeated at the end.
        cycle: Vec<String>,
    },
    /// A RETURN field this statement cannot produce.
    #[error("`{field}` cannot be returned here: {reason}")]
    FieldUnavailable {
        /// The field.
        field: String,
        /// Why.
        reason: String,
    },
    /// `ID '...'` that is not an internal record id.
    #[error("'{text}' is not a record id (26 characters of Crockford base32)")]
    InvalidRecordId {
        /// The text (truncated).
        text: String,
    },
    /// `$name` with no value in the request.
    #[error("parameter ${name} is not bound")]
    UnboundParam {
        /// The parameter.
        name: String,
    },
    /// A parameter whose value has the wrong type for where it is used.
    #[error("parameter ${name} is {got}, but here it must be {expected}")]
    ParamType {
        /// The parameter.
        name: String,
        /// The type needed.
        expected: String,
        /// The value's type.
        got: String,
    },
    /// A parameter value that is malformed (non-finite vector component,
    /// mixed array, ...).
    #[error("{}", invalid_param(name, reason))]
    InvalidParam {
        /// The parameter.
        name: String,
        /// Why.
        reason: String,
    },
    /// A query vector whose length is not its model's dimension.
    #[error("the query vector has {got} dimensions, but model '{model}' has {expected}")]
    DimensionMismatch {
        /// The model (vector space).
        model: String,
        /// The model's dimensions.
        expected: usize,
        /// The vector's.
        got: usize,
    },
    /// A model the store has no vectors for.
    #[error("the store has no vector space for model '{model}'")]
    UnknownModel {
        /// The model.
        model: String,
        /// The store's models.
        available: Vec<String>,
    },
    /// A query vector without `MODEL` in a store with several spaces.
    #[error("a query vector needs MODEL: the store has several vector spaces")]
    ModelRequired {
        /// The store's models.
        available: Vec<String>,
    },
    /// Similarity by text with no embedder able to embed it.
    #[error("{reason}")]
    NoEmbedder {
        /// Why (no embedder, or one for another model).
        reason: String,
    },
}

fn invalid_param(name: &str, reason: &str) -> String {
    // (a name no statement can write is the fault itself: `$9bad`
    // would say it as one)
    if !crate::lang::lexer::is_param_name(name) {
        format!("the parameters are invalid: {reason}")
    } else {
        format!("parameter ${name} is invalid: {reason}")
    }
}

impl ErrorKind {
    /// The stable code (the variant's snake_case name).
    pub fn code(&self) -> &'static str {
        match self {
            ErrorKind::UnexpectedCharacter { .. } => "unexpected_character",
            ErrorKind::UnterminatedString => "unterminated_string",
            ErrorKind::InvalidNumber { .. } => "invalid_number",
            ErrorKind::InvalidTime { .. } => "invalid_time",
            ErrorKind::InvalidDuration { .. } => "invalid_duration",
            ErrorKind::UnexpectedToken { .. } => "unexpected_token",
            ErrorKind::UnexpectedEnd { .. } => "unexpected_end",
            ErrorKind::ReservedName { .. } => "reserved_name",
            ErrorKind::InvalidName { .. } => "invalid_name",
            ErrorKind::UnknownField { .. } => "unknown_field",
            ErrorKind::UnknownRecordType { .. } => "unknown_record_type",
            ErrorKind::UnknownStatus { .. } => "unknown_status",
            ErrorKind::DuplicateClause { .. } => "duplicate_clause",
            ErrorKind::LimitExceeded { .. } => "limit_exceeded",
            ErrorKind::OutOfRange { .. } => "out_of_range",
            ErrorKind::EmptyValue { .. } => "empty_value",
            ErrorKind::BadValue { .. } => "bad_value",
            ErrorKind::EmptyList { .. } => "empty_list",
            ErrorKind::DeletedNotAllowed => "deleted_not_allowed",
            ErrorKind::UnknownRetriever { .. } => "unknown_retriever",
            ErrorKind::DuplicateRetriever { .. } => "duplicate_retriever",
            ErrorKind::DuplicateWeight { .. } => "duplicate_weight",
            ErrorKind::DuplicateField { .. } => "duplicate_field",
            ErrorKind::FusionWithoutRetrievers { .. } => "fusion_without_retrievers",
            ErrorKind::InvertedRange { .. } => "inverted_range",
            ErrorKind::ExpandCycle { .. } => "expand_cycle",
            ErrorKind::SeedOrder { .. } => "seed_order",
            ErrorKind::FieldUnavailable { .. } => "field_unavailable",
            ErrorKind::InvalidRecordId { .. } => "invalid_record_id",
            ErrorKind::UnboundParam { .. } => "unbound_param",
            ErrorKind::ParamType { .. } => "param_type",
            ErrorKind::InvalidParam { .. } => "invalid_param",
            ErrorKind::DimensionMismatch { .. } => "dimension_mismatch",
            ErrorKind::UnknownModel { .. } => "unknown_model",
            ErrorKind::ModelRequired { .. } => "model_required",
            ErrorKind::NoEmbedder { .. } => "no_embedder",
        }
    }
}

/// An error in a statement or its parameters, located in the text. The
/// details are boxed so that a `Result<T, LangError>` stays small.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}{}", .details.kind, location(.details.line, .details.column))]
#[non_exhaustive]
pub struct LangError {
    details: Box<Details>,
}

#[derive(Clone, Debug, PartialEq)]
struct Details {
    kind: ErrorKind,
    span: Span,
    line: u32,
    column: u32,
    expected: Vec<String>,
    hint: Option<String>,
}

/// Characters of a source line shown around an error (`EXCERPT` on each
/// side of the carets, `EXCERPT * 2` carets at most): a statement of
/// megabytes on one line is not echoed whole. Returns the text shown, and
/// where the carets start and how many there are in it.
fn excerpt(text: &str, lead: usize, carets: usize) -> (String, usize, usize) {
    const EXCERPT: usize = 60;
    let len = text.chars().count();
    if len <= EXCERPT * 4 {
        return (text.to_string(), lead, carets);
    }
    let carets = carets.min(EXCERPT * 2);
    let from = lead.saturating_sub(EXCERPT);
    let to = (lead + carets + EXCERPT).min(len);
    let mut shown = String::new();
    if from > 0 {
        shown.push_str("...");
    }
    shown.extend(text.chars().skip(from).take(to - from));
    if to < len {
        shown.push_str("...");
    }
    let lead = lead - from + if from > 0 { 3 } else { 0 };
    (shown, lead, carets)
}

fn location(line: u32, column: u32) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" at {line}:{column}")
    }
}

impl LangError {
    /// An error of `kind` at `span`, not yet located in a text.
    pub fn new(kind: ErrorKind, span: Span) -> LangError {
        LangError {
            details: Box::new(Details {
                kind,
                span,
                line: 0,
                column: 0,
                expected: Vec::new(),
                hint: None,
            }),
        }
    }

    /// With the tokens that would have been valid.
    pub fn with_expected(mut self, expected: Vec<String>) -> LangError {
        self.details.expected = expected;
        self
    }

    /// With a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> LangError {
        self.details.hint = Some(hint.into());
        self
    }

    /// Fills `line` and `column` from the text the span points into.
    pub fn located(mut self, source: &str) -> LangError {
        let (line, column) = line_col(source, self.details.span.start as usize);
        self.details.line = line;
        self.details.column = column;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.details.kind
    }

    /// Where (`0..0` for a statement that did not come from text).
    pub fn span(&self) -> Span {
        self.details.span
    }

    /// 1-based line of the span's start; 0 until located in a text.
    pub fn line(&self) -> u32 {
        self.details.line
    }

    /// 1-based column of the span's start, in characters; 0 until located.
    pub fn column(&self) -> u32 {
        self.details.column
    }

    /// Tokens that would have been valid at the span (keywords in upper
    /// case, punctuation in backquotes, other tokens described: "a string").
    pub fn expected(&self) -> &[String] {
        &self.details.expected
    }

    /// How to fix it, when the parser or checker can tell.
    pub fn hint(&self) -> Option<&str> {
        self.details.hint.as_deref()
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        self.details.kind.code()
    }

    /// The message (without location).
    pub fn message(&self) -> String {
        self.details.kind.to_string()
    }

    /// A terminal report in the style of rustc:
    ///
    /// ```text
    /// error[unexpected_token]: expected a clause or the end of the statement, found `LIMTI`
    ///  --> 3:1
    ///   |
    /// 3 | LIMTI 5
    ///   | ^^^^^
    ///   = expected: one of LIMIT, RETURN, `;`, end of input
    ///   = hint: did you mean `LIMIT`?
    /// ```
    ///
    /// The caret line covers the span on its first line (at least one
    /// caret). With an empty `source` (a statement that came as JSON) only
    /// the message and the notes are shown.
    pub fn render(&self, source: &str) -> String {
        let d = &self.details;
        let mut out = format!("error[{}]: {}\n", self.code(), d.kind);
        let mut pad = String::new();
        if !source.is_empty() {
            let mut start = (d.span.start as usize).min(source.len());
            while !source.is_char_boundary(start) {
                start -= 1;
            }
            let (line, col) = line_col(source, start);
            // (a line ends at `\n`, `\r\n` or a lone `\r`, as `line_col` counts)
            let line_start = source[..start].rfind(['\n', '\r']).map_or(0, |i| i + 1);
            let line_end = source[line_start..]
                .find(['\n', '\r'])
                .map_or(source.len(), |i| line_start + i);
            let mut end = (d.span.end as usize).clamp(start, line_end);
            while !source.is_char_boundary(end) {
                end -= 1;
            }
            // escaped as printed (`terminal_safe`), so the carets stay
            // under what they point at
            let safe = |t: &str| crate::text::terminal_safe(&t.replace('\t', " ")).into_owned();
            let text = safe(source[line_start..line_end].trim_end_matches('\r'));
            let lead = safe(&source[line_start..start]).chars().count();
            let carets = safe(&source[start..end]).chars().count().max(1);
            let (text, lead, carets) = excerpt(&text, lead, carets);
            let number = line.to_string();
            pad = " ".repeat(number.len());
            out.push_str(&format!("{pad}--> {line}:{col}\n"));
            out.push_str(&format!("{pad} |\n"));
            out.push_str(&format!("{number} | {text}\n"));
            out.push_str(&format!(
                "{pad} | {}{}\n",
                " ".repeat(lead),
                "^".repeat(carets)
            ));
        }
        if !d.expected.is_empty() {
            let list = d.expected.join(", ");
            if d.expected.len() == 1 {
                out.push_str(&format!("{pad} = expected: {list}\n"));
            } else {
                out.push_str(&format!("{pad} = expected: one of {list}\n"));
            }
        }
        if let Some(h) = &d.hint {
            out.push_str(&format!("{pad} = hint: {h}\n"));
        }
        out
    }

    /// The error as JSON for programs: `code`, `message`, `line`, `column`,
    /// `span` (`"start..end"`), `expected`, `hint` and `detail` (the
    /// variant's fields, e.g. `{"what": ..., "limit": ..., "got": ...}`).
    pub fn to_json(&self) -> serde_json::Value {
        let d = &self.details;
        let mut detail = serde_json::to_value(&d.kind).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(m) = &mut detail {
            m.remove("code");
        }
        // line 0: no place in a text (a parameter's value, the JSON form)
        let located = d.line > 0;
        serde_json::json!({
            "code": self.code(),
            "message": self.message(),
            "line": located.then_some(d.line),
            "column": located.then_some(d.column),
            "span": located.then(|| d.span.to_string()),
            "expected": d.expected,
            "hint": d.hint,
            "detail": detail,
        })
    }
}

/// An error with no place in a statement (its input could not be read, or
/// the engine refused it as it ran) in the shape of
/// [`LangError::to_json`]: `code` and `message`, no place (`null`),
/// nothing `expected` (`[]`), so a program reads every error of a query
/// the same way.
pub fn unplaced_error_json(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "code": code,
        "message": message,
        "line": null,
        "column": null,
        "span": null,
        "expected": [],
        "hint": null,
        "detail": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unplaced_error_has_the_fields_of_a_placed_one() {
        let placed = crate::lang::parse("FIND ANY WHERE").unwrap_err().to_json();
        let unplaced = unplaced_error_json("not_found", "no record 'x'");
        let keys = |v: &serde_json::Value| {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(keys(&placed), keys(&unplaced));
        assert_eq!(unplaced["line"], serde_json::Value::Null);
        assert_eq!(unplaced["code"], "not_found");
    }

    #[test]
    fn codes_are_the_serialized_tags() {
        let kinds = [
            ErrorKind::UnexpectedCharacter { found: '"' },
            ErrorKind::UnterminatedString,
            ErrorKind::DeletedNotAllowed,
            ErrorKind::LimitExceeded {
                what: "LIMIT".into(),
                limit: 1000,
                got: 5000,
            },
            ErrorKind::ExpandCycle {
                cycle: vec!["a".into(), "b".into(), "a".into()],
            },
            ErrorKind::NoEmbedder { reason: "x".into() },
        ];
        for k in kinds {
            let v = serde_json::to_value(&k).unwrap();
            assert_eq!(v["code"], k.code(), "{k:?}");
        }
    }

    #[test]
    fn render_points_at_the_span() {
        let src = "FIND ANY\nLIMTI 5";
        let e = LangError::new(
            ErrorKind::UnexpectedToken {
                wanted: "a clause".into(),
                found: "`LIMTI`".into(),
            },
            Span::new(9, 14),
        )
        .with_expected(vec!["LIMIT".into(), "RETURN".into()])
        .with_hint("did you mean `LIMIT`?")
        .located(src);
        assert_eq!((e.line(), e.column()), (2, 1));
        assert_eq!(
            e.render(src),
            "error[unexpected_token]: expected a clause, found `LIMTI`\n \
             --> 2:1\n  |\n2 | LIMTI 5\n  | ^^^^^\n  = expected: one of LIMIT, RETURN\n  \
             = hint: did you mean `LIMIT`?\n"
        );
        assert_eq!(e.to_string(), "expected a clause, found `LIMTI` at 2:1");
        let j = e.to_json();
        assert_eq!(j["code"], "unexpected_token");
        assert_eq!(j["line"], 2);
        assert_eq!(j["span"], "9..14");
        assert_eq!(j["detail"]["found"], "`LIMTI`");
        assert!(j["detail"].get("code").is_none());
    }

    #[test]
    fn render_survives_odd_spans() {
        let src = "é\r\nx";
        for (a, b) in [(0, 0), (1, 1), (0, 100), (50, 60), (3, 2)] {
            let e = LangError::new(ErrorKind::UnterminatedString, Span { start: a, end: b });
            let r = e.render(src);
            assert!(r.starts_with("error[unterminated_string]"), "{r}");
        }
        let e = LangError::new(ErrorKind::DeletedNotAllowed, Span::default());
        assert_eq!(
            e.render(""),
            "error[deleted_not_allowed]: `deleted` cannot be selected: deleted records are never returned\n"
        );
    }

    /// An error with no place in a text (a parameter's value, the JSON
    /// form) says so in JSON with null positions, never line 0.
    #[test]
    fn json_positions_are_null_where_an_error_has_no_place() {
        let e = LangError::new(ErrorKind::DeletedNotAllowed, Span::default());
        let j = e.to_json();
        for k in ["line", "column", "span"] {
            assert!(j[k].is_null(), "{k}: {j}");
        }
        let src = "FIND ANY LIMIT 1e3";
        let e = LangError::new(ErrorKind::UnterminatedString, Span::new(15, 18)).located(src);
        let j = e.to_json();
        assert_eq!(
            (j["line"].as_u64(), j["column"].as_u64()),
            (Some(1), Some(16)),
            "{j}"
        );
        assert_eq!(j["span"], "15..18");
    }

    #[test]
    fn render_escapes_controls_and_keeps_the_carets_under_the_span() {
        let src = "FIND ANY MATCH '\u{1b}[31m\u{1b}[31m' LIMIT 1e3";
        let at = src.find("1e3").unwrap();
        let e = LangError::new(ErrorKind::UnterminatedString, Span::new(at, at + 3)).located(src);
        let r = e.render(src);
        assert!(!r.contains('\u{1b}'), "{r}");
        let lines: Vec<&str> = r.lines().collect();
        let shown = lines[3].split_once(" | ").unwrap().1;
        let caret = lines[4].split_once(" | ").unwrap().1.find('^').unwrap();
        assert_eq!(&shown[caret..caret + 3], "1e3", "{r}");
    }

    #[test]
    fn render_shows_an_excerpt_of_a_very_long_line() {
        // a mistake in the middle of a megabyte-long line
        let src = format!(
            "FIND ANY MATCH '{}' LIMTI 5 {}",
            "a".repeat(500_000),
            "b".repeat(500_000)
        );
        let at = src.find("LIMTI").unwrap();
        let e = LangError::new(ErrorKind::UnterminatedString, Span::new(at, at + 5)).located(&src);
        let r = e.render(&src);
        assert!(r.len() < 600, "{} bytes rendered", r.len());
        let lines: Vec<&str> = r.lines().collect();
        let shown = lines[3].split_once(" | ").unwrap().1;
        let marks = lines[4].split_once(" | ").unwrap().1;
        assert!(
            shown.starts_with("...") && shown.ends_with("..."),
            "{shown}"
        );
        let caret = marks.find('^').unwrap();
        assert_eq!(&shown[caret..caret + 5], "LIMTI", "{shown}\n{marks}");
        assert_eq!(marks.trim_start().len(), 5);
        // a span over the whole line: the carets are capped too
        let e = LangError::new(ErrorKind::UnterminatedString, Span::new(0, src.len()));
        assert!(e.render(&src).len() < 600);
        // a short line is shown whole
        let e = LangError::new(ErrorKind::UnterminatedString, Span::new(0, 4));
        assert!(
            e.render("FIND ANY LIMIT 1")
                .contains("1 | FIND ANY LIMIT 1\n")
        );
    }
}
