//! The checker: everything about a statement's meaning that can be decided
//! before execution, without a store, each reported with its span.
//!
//! It runs on any [`Statement`], parsed or received as JSON, so it
//! re-checks what the parser guarantees for text (nesting, list sizes,
//! names) and then: retriever names (duplicates, unknown names in `WEIGHTS`
//! and `EXPAND FROM`, `EXPAND` cycles), ranges and limits (`TOP`, `LIMIT`,
//! `HOPS`, `MAX`, `DEPTH`, `K`, `MIN` in [-1, 1], weights >= 0), parameters
//! (bound, of the right type, times in range), `status = deleted`, `RETURN`
//! fields the statement cannot produce, and, from what the caller knows of
//! the store ([`CheckContext`]), models, vector dimensions and the embedder.
//!
//! Decisions recorded here (see `docs/query-language.md`):
//! - an empty `models` map means "not known" (model and dimension checks
//!   are skipped; the engine checks again) unless `models_known` is set; a
//!   non-empty map, or an empty one that is known, is the store's full
//!   list, and a model not in it is an error;
//! - a `FIND` with no retriever is valid (a listing, newest first); so is
//!   one whose only retriever is `RECENT`. The one retriever that can be
//!   known to produce nothing is `SIMILAR TO 'text'` with no embedder for
//!   its model, and that is an error ([`ErrorKind::NoEmbedder`]);
//! - parameters a statement does not use are ignored.
//!
//! This module must never open a store or read a clock: what it knows of
//! them comes in the [`CheckContext`].

use std::collections::{BTreeMap, HashMap};

use engram_engine::id::RecordId;
use engram_engine::lexical::{MAX_TOKEN_CHARS, tokens};
use engram_engine::model::name_fault;

use super::ast::*;
use super::error::{ErrorKind, LangError};
use super::lexer::{DEFAULT_NAMES, is_identifier, is_keyword, truncated};
use super::limits::*;
use super::params::{Binder, Params, QueryInput};
use super::span::Span;

mod retriever;

/// What the store's embedder is, as far as the caller knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Embedder {
    /// Not known: embedder checks are skipped.
    #[default]
    Unknown,
    /// The store has no embedder: `SIMILAR TO 'text'` cannot run.
    Absent,
    /// The store embeds texts into this model's space.
    Model(String),
}

/// What the checker knows besides the statement.
#[derive(Clone, Debug, Default)]
pub struct CheckContext {
    /// The request's parameters.
    pub params: Params,
    /// The store's vector spaces: model id -> dimensions. Empty means not
    /// known (model and dimension checks are skipped) unless
    /// `models_known` says the store has none.
    pub models: BTreeMap<String, usize>,
    /// Whether `models` is the store's full list even when it is empty (a
    /// store with no vector space: any `MODEL` is unknown).
    pub models_known: bool,
    /// The store's embedder.
    pub embedder: Embedder,
    /// The engine clock's reading, ms since the epoch: `now` in times.
    pub now_ms: i64,
}

impl CheckContext {
    /// A context with parameters and a clock reading; nothing known of the
    /// store.
    pub fn new(params: Params, now_ms: i64) -> CheckContext {
        CheckContext {
            params,
            now_ms,
            ..CheckContext::default()
        }
    }
    /// The binder for these parameters and this clock reading.
    pub fn binder(&self) -> Binder<'_> {
        Binder::new(&self.params, self.now_ms)
    }
}

/// Checks `stmt`; on failure, every error found, in source order (not yet
/// located: call [`LangError::located`] with the text, or use
/// [`super::compile`]).
pub fn check(stmt: &Statement, ctx: &CheckContext) -> Result<(), Vec<LangError>> {
    let mut c = Checker {
        ctx,
        bind: ctx.binder(),
        errors: Vec::new(),
        more: None,
    };
    match &stmt.body {
        Body::Find(f) => c.find(f),
        Body::Trace(t) => c.trace(t),
    }
    if c.errors.is_empty() {
        Ok(())
    } else {
        c.errors.sort_by_key(|e| (e.span().start, e.span().end));
        if let Some((n, span)) = c.more {
            c.errors.push(LangError::new(
                ErrorKind::LimitExceeded {
                    what: "errors in one statement".into(),
                    limit: ERRORS_MAX as u64,
                    got: (ERRORS_MAX + n) as u64,
                },
                span,
            ));
        }
        Err(c.errors)
    }
}

fn models_hint(available: &[String]) -> String {
    if available.is_empty() {
        return "this tenant has no vectors you can read yet, in any model".into();
    }
    let names: Vec<String> = available.iter().map(|m| format!("'{m}'")).collect();
    format!("this tenant's models you may read are {}", names.join(", "))
}

struct Checker<'a> {
    ctx: &'a CheckContext,
    bind: Binder<'a>,
    errors: Vec<LangError>,
    /// Errors found past [`ERRORS_MAX`] (not kept), and where the first was.
    more: Option<(usize, Span)>,
}

impl Checker<'_> {
    /// Whether the context's models are the store's full list.
    fn models_known(&self) -> bool {
        self.ctx.models_known || !self.ctx.models.is_empty()
    }

    /// Records an error; past [`ERRORS_MAX`] only counts it, so that no
    /// statement (a JSON form may repeat a field a million times) makes a
    /// response, or the memory to build it, grow without bound.
    fn error(&mut self, e: LangError) {
        if self.errors.len() < ERRORS_MAX {
            self.errors.push(e);
        } else {
            let (n, _) = self.more.get_or_insert((0, e.span()));
            *n += 1;
        }
    }

    fn push(&mut self, kind: ErrorKind, span: Span) {
        self.error(LangError::new(kind, span));
    }

    fn push_hint(&mut self, kind: ErrorKind, span: Span, hint: impl Into<String>) {
        self.error(LangError::new(kind, span).with_hint(hint));
    }

    /// The value, or `None` after recording the error.
    fn ok<T>(&mut self, r: Result<T, LangError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.error(e);
                None
            }
        }
    }

    /// Records that `what` is `got`, over its `limit`.
    fn over(&mut self, what: impl Into<String>, limit: u64, got: u64, span: Span) {
        self.push(
            ErrorKind::LimitExceeded {
                what: what.into(),
                limit,
                got,
            },
            span,
        );
    }

    /// `min <= v <= max`: below is out of range, above exceeds the limit.
    fn within(&mut self, what: &str, v: u64, min: u64, max: u64, span: Span) {
        if v < min {
            self.push(
                ErrorKind::OutOfRange {
                    what: what.into(),
                    got: v.to_string(),
                    range: format!("{min}..={max}"),
                },
                span,
            );
        } else if v > max {
            self.over(what, max, v, span);
        }
    }

    fn text_value(&mut self, what: &str, s: &str, bytes_max: usize, span: Span) {
        if s.trim().is_empty() {
            self.push(ErrorKind::EmptyValue { what: what.into() }, span);
        } else if s.len() > bytes_max {
            self.over(
                format!("{what} length in bytes"),
                bytes_max as u64,
                s.len() as u64,
                span,
            );
        }
    }

    /// A list of names (kinds, scope values, predicates) after binding.
    fn str_list(&mut self, l: &StrList, list_what: &str, item_what: &str) {
        let Some(values) = self.ok(self.bind.strings(l)) else {
            return;
        };
        if values.is_empty() {
            self.push(
                ErrorKind::EmptyList {
                    what: list_what.into(),
                },
                l.span(),
            );
        }
        if values.len() > IN_LIST_LEN_MAX {
            self.over(
                format!("items in {list_what}"),
                IN_LIST_LEN_MAX as u64,
                values.len() as u64,
                l.span(),
            );
        }
        match l {
            StrList::Items { items, .. } => {
                for (a, v) in items.iter().zip(&values) {
                    self.text_value(item_what, v, NAME_BYTES_MAX, a.span());
                    self.name_value(item_what, v, a.span());
                }
            }
            StrList::Param { span, .. } => {
                for v in &values {
                    self.text_value(item_what, v, NAME_BYTES_MAX, *span);
                    self.name_value(item_what, v, *span);
                }
            }
        }
    }

    /// A name no record may hold (the write path's rule: no control
    /// character, no spaces around it): as a filter it matched nothing,
    /// without a word. (Empty and overlong are `text_value`'s.)
    fn name_value(&mut self, what: &str, s: &str, span: Span) {
        if s.trim().is_empty() {
            return; // text_value's: one error for one fault
        }
        if let Some(fault) = name_fault(s) {
            self.push(
                ErrorKind::BadValue {
                    what: what.into(),
                    got: format!("{s:?}"),
                    reason: fault.found().into(),
                },
                span,
            );
        }
    }

    fn time(&mut self, t: &TimeExpr) {
        let _ = self.ok(self.bind.time(t));
    }

    fn expr(&mut self, e: &Expr) {
        let depth = e.depth();
        if depth > NESTING_DEPTH_MAX {
            self.over(
                "nesting depth of the WHERE expression",
                NESTING_DEPTH_MAX as u64,
                depth as u64,
                e.span(),
            );
            return;
        }
        let nodes = e.nodes();
        let n_predicates = nodes
            .iter()
            .filter(|n| !matches!(n, Expr::And { .. } | Expr::Or { .. } | Expr::Not { .. }))
            .count();
        if n_predicates > PREDICATES_MAX {
            self.over(
                "predicates in the WHERE expression",
                PREDICATES_MAX as u64,
                n_predicates as u64,
                e.span(),
            );
        }
        for n in nodes {
            match n {
                Expr::And { items, span } | Expr::Or { items, span } if items.is_empty() => {
                    let what = if matches!(n, Expr::And { .. }) {
                        "AND"
                    } else {
                        "OR"
                    };
                    self.push(ErrorKind::EmptyList { what: what.into() }, *span);
                }
                Expr::Text(p) => {
                    let list = format!("the values of {}", p.field.name());
                    let item = format!("a value of {}", p.field.name());
                    self.str_list(&p.values, &list, &item);
                }
                Expr::Record(p) => self.enum_list("record", &p.values, p.span),
                Expr::Status(p) => {
                    self.enum_list("status", &p.values, p.span);
                    for v in &p.values {
                        if v.value == RecordStatus::Deleted {
                            self.push_hint(
                                ErrorKind::DeletedNotAllowed,
                                v.span,
                                "select active, superseded, historical or stale; TRACE shows deleted records as tombstones",
                            );
                        }
                    }
                }
                Expr::Time(p) => self.time(&p.value),
                _ => {}
            }
        }
    }

    fn enum_list<T>(&mut self, field: &str, values: &[Spanned<T>], span: Span) {
        if values.is_empty() {
            self.push(
                ErrorKind::EmptyList {
                    what: format!("the values of {field}"),
                },
                span,
            );
        } else if values.len() > IN_LIST_LEN_MAX {
            self.over(
                format!("items in the values of {field}"),
                IN_LIST_LEN_MAX as u64,
                values.len() as u64,
                span,
            );
        }
    }

    fn name(&mut self, n: &Name) {
        let v = &n.value;
        if !is_identifier(v) {
            self.push(ErrorKind::InvalidName { name: truncated(v) }, n.span);
        } else if v.len() > IDENT_BYTES_MAX {
            self.over(
                "bytes in a retriever name",
                IDENT_BYTES_MAX as u64,
                v.len() as u64,
                n.span,
            );
        } else if is_keyword(v) && !DEFAULT_NAMES.contains(&v.as_str()) {
            self.push(ErrorKind::ReservedName { name: v.clone() }, n.span);
        }
    }

    fn find(&mut self, f: &Find) {
        if let Some(k) = &f.kinds {
            self.str_list(k, "KIND", "a kind");
        }
        if let Some(e) = &f.filter {
            self.expr(e);
        }
        if let Some(t) = &f.as_of {
            self.time(t);
        }
        if let Some(t) = &f.valid_at {
            self.time(t);
        }
        self.retrievers(f);
        self.fusion(f);
        for (a, clause) in [
            (&f.sources, "WITH SOURCES DEPTH"),
            (&f.derivatives, "WITH DERIVATIVES DEPTH"),
        ] {
            if let Some(d) = a.as_ref().and_then(|a| a.depth.as_ref()) {
                self.within(clause, d.value, 1, ATTACH_DEPTH_MAX, d.span);
            }
        }
        if let Some(l) = &f.limit {
            if let Some(k) = self.ok(self.bind.count(l)) {
                self.within("LIMIT", k, 1, LIMIT_MAX, l.span());
            }
        }
        let unavailable = |field: ReturnField| -> Option<&'static str> {
            match field {
                ReturnField::Score | ReturnField::Ranks if f.retrievers.is_empty() => {
                    Some("a FIND without retrievers lists records newest first and scores nothing")
                }
                ReturnField::Sources if f.sources.is_none() => {
                    Some("add WITH SOURCES to attach them")
                }
                ReturnField::Derivatives if f.derivatives.is_none() => {
                    Some("add WITH DERIVATIVES to attach them")
                }
                ReturnField::Depth => {
                    Some("depth is the distance from a traced record, a TRACE field")
                }
                ReturnField::Side => {
                    Some("side says which way a row lies from a traced record, a TRACE field")
                }
                _ => None,
            }
        };
        self.returns(&f.returns, unavailable);
    }

    fn returns(
        &mut self,
        fields: &[Spanned<ReturnField>],
        unavailable: impl Fn(ReturnField) -> Option<&'static str>,
    ) {
        if fields.len() > RETURN_FIELDS_MAX {
            self.over(
                "fields in RETURN",
                RETURN_FIELDS_MAX as u64,
                fields.len() as u64,
                fields[RETURN_FIELDS_MAX].span,
            );
            return;
        }
        let mut seen = Vec::new();
        for r in fields {
            if seen.contains(&r.value) {
                self.push(
                    ErrorKind::DuplicateField {
                        name: r.value.name().into(),
                    },
                    r.span,
                );
                continue;
            }
            seen.push(r.value);
            if let Some(reason) = unavailable(r.value) {
                self.push(
                    ErrorKind::FieldUnavailable {
                        field: r.value.name().into(),
                        reason: reason.into(),
                    },
                    r.span,
                );
            }
        }
    }

    fn trace(&mut self, t: &Trace) {
        let _ = self.record_ref(&t.target, false);
        if let Some(d) = &t.depth {
            self.within("TRACE DEPTH", d.value, 1, TRACE_DEPTH_MAX, d.span);
        }
        self.returns(&t.returns, |field| match field {
            ReturnField::Score | ReturnField::Ranks => Some("TRACE does not search, so nothing is scored"),
            ReturnField::Sources | ReturnField::Derivatives => Some(
                "TRACE returns the lineage itself as records; choose SOURCES, DERIVATIVES or BOTH after the record",
            ),
            _ => None,
        });
    }

    /// A record reference; `many` when a parameter may be bound to a list
    /// (EXPAND seeds), not for the one record a TRACE starts from. Returns
    /// how many records it names.
    fn record_ref(&mut self, r: &RecordRef, many: bool) -> usize {
        let bound = |c: &mut Self, value: &Arg<String>| {
            if many {
                let ids = c.ok(c.bind.strings_of(value))?;
                // (as `ENTITY ($names)` bound to `[]` is)
                if ids.is_empty() {
                    let what = match r {
                        RecordRef::Id { .. } => "ID",
                        RecordRef::External { .. } => "the external ids",
                    };
                    c.push(ErrorKind::EmptyList { what: what.into() }, value.span());
                }
                Some(ids)
            } else {
                c.ok(c.bind.string(value)).map(|s| vec![s])
            }
        };
        match r {
            RecordRef::Id { value, .. } => {
                let Some(ids) = bound(self, value) else {
                    return 0;
                };
                for id in &ids {
                    if id.parse::<RecordId>().is_err() {
                        self.push_hint(
                            ErrorKind::InvalidRecordId {
                                text: truncated(id),
                            },
                            value.span(),
                            "an external id is written without ID: 'evt_9f2'",
                        );
                    }
                }
                ids.len()
            }
            RecordRef::External { value, .. } => {
                let Some(ids) = bound(self, value) else {
                    return 0;
                };
                for id in &ids {
                    self.text_value("the external id", id, EXTERNAL_ID_BYTES_MAX, value.span());
                }
                ids.len()
            }
        }
    }
}
