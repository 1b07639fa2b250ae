//! The parser: tokens to a [`Statement`], by recursive descent over a fixed
//! clause order (see `docs/query-language.md` for the grammar).
//!
//! The first error ends parsing. Its `expected` list is exact: every check
//! that fails at the current token records what it looked for, and
//! consuming a token clears the record, so the list holds everything that
//! could have come at the error's position. A hint is added when the parser
//! can tell more: a clause or option out of order or given twice, a
//! misspelt keyword.
//!
//! This module must never recurse without bound: parentheses and `NOT` are
//! counted against [`NESTING_DEPTH_MAX`] before descending, and the depth
//! of every `AND`/`OR`/`NOT` node built is checked against the same limit.
//! It never resolves parameters or checks meaning beyond syntax (that is
//! [`super::check()`]).

use engram_engine::time::parse_rfc3339_bound;

use super::ast::*;
use super::error::{ErrorKind, LangError};
use super::lexer::{DEFAULT_NAMES, Token, TokenKind, is_keyword, lex, time_error, truncated};
use super::limits::{NESTING_DEPTH_MAX, STATEMENT_BYTES_MAX};
use super::span::Span;

mod expr;
mod retriever;

/// Parses one statement. Errors are located (line and column filled in).
pub fn parse(text: &str) -> Result<Statement, LangError> {
    parse_unlocated(text).map_err(|e| e.located(text))
}

fn parse_unlocated(text: &str) -> Result<Statement, LangError> {
    if text.len() > STATEMENT_BYTES_MAX {
        return Err(LangError::new(
            ErrorKind::LimitExceeded {
                what: "statement length in bytes".into(),
                limit: STATEMENT_BYTES_MAX as u64,
                got: text.len() as u64,
            },
            Span::at(STATEMENT_BYTES_MAX),
        ));
    }
    let toks = lex(text)?;
    Parser::new(text, toks).statement()
}

type PResult<T> = Result<T, LangError>;

/// Clauses of FIND in their fixed order (for hints).
const CLAUSES: &[&str] = &[
    "FIND",
    "KIND",
    "WHERE",
    "AS OF",
    "VALID AT",
    "the retrievers",
    "FUSE",
    "WEIGHTS",
    "WITH",
    "LIMIT",
    "RETURN",
];
const C_FIND: usize = 0;
const C_KIND: usize = 1;
const C_WHERE: usize = 2;
const C_AS_OF: usize = 3;
const C_VALID_AT: usize = 4;
const C_RETRIEVERS: usize = 5;
const C_FUSE: usize = 6;
const C_WEIGHTS: usize = 7;
const C_WITH: usize = 8;
const C_LIMIT: usize = 9;
const C_RETURN: usize = 10;

const SIMILAR_OPTIONS: &[&str] = &["MODEL", "MIN", "TOP", "AS"];
const TOP_AS_OPTIONS: &[&str] = &["TOP", "AS"];
const EXPAND_OPTIONS: &[&str] = &["HOPS", "VIA", "DIRECTION", "MAX", "TOP", "AS"];
const TRACE_OPTIONS: &[&str] = &["DEPTH", "INCLUDE", "RETURN"];

const FIELD_NAMES: &[&str] = &[
    "scope.user",
    "scope.conversation",
    "scope.agent",
    "scope.label",
    "kind",
    "record",
    "status",
    "occurred_at",
    "ingested_at",
];

/// Options of the clause being parsed, in their fixed order (for hints).
struct Options {
    owner: &'static str,
    order: &'static [&'static str],
    reached: Option<usize>,
}

struct Parser<'s> {
    src: &'s str,
    toks: Vec<Token>,
    pos: usize,
    /// What the checks at the current token looked for (static text: noting
    /// costs no allocation, and most checks fail on the way to a match).
    expected: Vec<&'static str>,
    /// Parentheses and NOTs entered (recursion depth of `not_expr`).
    nesting: usize,
    /// End of the last consumed token.
    prev_end: usize,
    clause: Option<usize>,
    options: Option<Options>,
}

impl<'s> Parser<'s> {
    fn new(src: &'s str, toks: Vec<Token>) -> Self {
        Parser {
            src,
            toks,
            pos: 0,
            expected: Vec::new(),
            nesting: 0,
            prev_end: 0,
            clause: None,
            options: None,
        }
    }

    // ---- token access ----

    fn peek_at(&self, n: usize) -> &Token {
        // The lexer always ends with Eof, so the last token is a safe default.
        let last = self.toks.len() - 1;
        &self.toks[(self.pos + n).min(last)]
    }

    fn peek(&self) -> &Token {
        self.peek_at(0)
    }

    fn text(&self, t: &Token) -> &'s str {
        self.src.get(t.span.range()).unwrap_or("")
    }

    fn word_at(&self, n: usize) -> Option<&'s str> {
        let t = self.peek_at(n);
        (t.kind == TokenKind::Word).then(|| self.text(t))
    }

    fn is_kw_at(&self, n: usize, kw: &str) -> bool {
        self.word_at(n).is_some_and(|w| w.eq_ignore_ascii_case(kw))
    }

    fn note(&mut self, what: &'static str) {
        if !self.expected.contains(&what) {
            self.expected.push(what);
        }
    }

    fn expected_list(&self) -> Vec<String> {
        self.expected.iter().map(|e| e.to_string()).collect()
    }

    fn bump(&mut self) -> Span {
        let span = self.peek().span;
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        self.prev_end = span.end as usize;
        self.expected.clear();
        span
    }

    /// Consumes keyword `kw` if it is next; otherwise records it as expected.
    fn eat_kw(&mut self, kw: &'static str) -> Option<Span> {
        if self.is_kw_at(0, kw) {
            Some(self.bump())
        } else {
            self.note(kw);
            None
        }
    }

    fn expect_kw(&mut self, kw: &'static str, wanted: &str) -> PResult<Span> {
        match self.eat_kw(kw) {
            Some(s) => Ok(s),
            None => Err(self.unexpected(wanted)),
        }
    }

    /// Consumes punctuation `kind` if it is next; otherwise records `what`.
    fn eat(&mut self, kind: TokenKind, what: &'static str) -> Option<Span> {
        if self.peek().kind == kind {
            Some(self.bump())
        } else {
            self.note(what);
            None
        }
    }

    fn expect(&mut self, kind: TokenKind, what: &'static str, wanted: &str) -> PResult<Span> {
        match self.eat(kind, what) {
            Some(s) => Ok(s),
            None => Err(self.unexpected(wanted)),
        }
    }

    fn span_from(&self, start: Span) -> Span {
        Span::new(start.start as usize, self.prev_end)
    }

    fn enter_clause(&mut self, c: usize) {
        self.clause = Some(c);
        self.options = None;
    }

    fn reached(&mut self, option_idx: usize) {
        if let Some(o) = &mut self.options {
            o.reached = Some(option_idx);
        }
    }

    // ---- errors ----

    fn describe(&self, t: &Token) -> String {
        let text = truncated(self.text(t));
        match &t.kind {
            TokenKind::Str(_) => format!("the string {text}"),
            TokenKind::Number { .. } => format!("the number {text}"),
            TokenKind::Duration(..) => format!("the duration {text}"),
            TokenKind::Time(_) => format!("the time {text}"),
            TokenKind::Param(_) => format!("the parameter {text}"),
            TokenKind::Eof => "the end of the statement".into(),
            _ => format!("`{text}`"),
        }
    }

    /// The error for the current token, with what was expected here.
    fn unexpected(&self, wanted: &str) -> LangError {
        let t = self.peek();
        let kind = if t.kind == TokenKind::Eof {
            ErrorKind::UnexpectedEnd {
                wanted: wanted.to_string(),
            }
        } else {
            ErrorKind::UnexpectedToken {
                wanted: wanted.to_string(),
                found: self.describe(t),
            }
        };
        // The word found is not among what was expected, even when a form
        // of it is (`AS name` after a retriever, not `AS OF`).
        let mut expected = self.expected_list();
        if let Some(w) = self.word_at(0) {
            expected.retain(|x| !x.eq_ignore_ascii_case(w));
        }
        let mut e = LangError::new(kind, t.span).with_expected(expected);
        if let Some(h) = self.hint() {
            e = e.with_hint(h);
        }
        e
    }

    fn clause_of(&self, word: &str) -> Option<usize> {
        let up = word.to_ascii_uppercase();
        Some(match up.as_str() {
            "FIND" => C_FIND,
            "KIND" => C_KIND,
            "WHERE" => C_WHERE,
            "AS" if self.is_kw_at(1, "OF") => C_AS_OF,
            "VALID" => C_VALID_AT,
            "SIMILAR" | "MATCH" | "RECENT" | "EXPAND" | "AROUND" => C_RETRIEVERS,
            "FUSE" => C_FUSE,
            "WEIGHTS" => C_WEIGHTS,
            "WITH" => C_WITH,
            "LIMIT" => C_LIMIT,
            "RETURN" => C_RETURN,
            _ => return None,
        })
    }

    fn hint(&self) -> Option<String> {
        let word = self.word_at(0)?;
        let up = word.to_ascii_uppercase();
        // (`AS OF` is a clause, not a retriever's `AS name`)
        let as_of = up == "AS" && self.is_kw_at(1, "OF");
        if let Some(o) = self.options.as_ref().filter(|_| !as_of) {
            if let (Some(j), Some(r)) = (o.order.iter().position(|k| *k == up), o.reached) {
                if j < r {
                    return Some(format!(
                        "{up} goes before {} in {}: its options come in the order {}",
                        o.order[r],
                        o.owner,
                        o.order.join(", ")
                    ));
                }
                if j == r {
                    return Some(format!("{} takes {up} once", o.owner));
                }
            }
        }
        if let (Some(c), Some(j)) = (self.clause, self.clause_of(word)) {
            if j < c {
                // ("the retrievers" go, a clause goes)
                let verb = if CLAUSES[j].ends_with('s') {
                    "go"
                } else {
                    "goes"
                };
                return Some(format!(
                    "{} {verb} before {}: clauses come in the order {}",
                    CLAUSES[j],
                    CLAUSES[c],
                    CLAUSES.join(", ")
                ));
            }
            if j == c && j != C_RETRIEVERS {
                return Some(format!("a statement has one {} clause", CLAUSES[j]));
            }
        }
        closest(word, &self.expected).map(|k| format!("did you mean `{k}`?"))
    }

    /// Error `kind` at `span` for the unknown `word`, with everything
    /// expected here and a "did you mean" hint when an expected word is
    /// close to it.
    fn unknown(&self, kind: ErrorKind, word: &str, span: Span) -> LangError {
        let e = LangError::new(kind, span).with_expected(self.expected_list());
        match closest(word, &self.expected) {
            Some(k) => e.with_hint(format!("did you mean `{k}`?")),
            None => e,
        }
    }

    // ---- statements ----

    fn statement(mut self) -> PResult<Statement> {
        let first = self.peek().span;
        let explain = self.eat_kw("EXPLAIN").is_some();
        let body = if let Some(s) = self.eat_kw("FIND") {
            Body::Find(self.find(s)?)
        } else if let Some(s) = self.eat_kw("TRACE") {
            Body::Trace(self.trace(s)?)
        } else {
            return Err(self.unexpected("FIND or TRACE"));
        };
        let span = self.span_from(first);
        let ended = self.eat(TokenKind::Semicolon, "`;`").is_some();
        if self.peek().kind != TokenKind::Eof {
            self.note("end of input");
            if ended {
                // A second statement: the clause-order hint would mislead.
                return Err(self.unexpected("the end of input after `;`").with_hint(
                    "one statement per request: run several with `engram shell`, which reads \
                     statements ending with `;`",
                ));
            }
            return Err(self.unexpected("the next clause or the end of the statement"));
        }
        Ok(Statement {
            explain,
            body,
            span,
        })
    }

    fn find(&mut self, start: Span) -> PResult<Find> {
        self.enter_clause(C_FIND);
        let targets = if self.eat_kw("ANY").is_some() {
            Vec::new()
        } else {
            self.record_types()?
        };
        let kinds = match self.eat_kw("KIND") {
            Some(_) => {
                self.enter_clause(C_KIND);
                Some(self.kind_list()?)
            }
            None => None,
        };
        let filter = match self.eat_kw("WHERE") {
            Some(_) => {
                self.enter_clause(C_WHERE);
                Some(self.or_expr()?.0)
            }
            None => None,
        };
        let as_of = if self.is_kw_at(0, "AS") && self.is_kw_at(1, "OF") {
            self.bump();
            self.bump();
            self.enter_clause(C_AS_OF);
            Some(self.time("a time after AS OF")?)
        } else {
            self.note("AS OF");
            None
        };
        let valid_at = if self.is_kw_at(0, "VALID") {
            self.bump();
            self.expect_kw("AT", "AT after VALID")?;
            self.enter_clause(C_VALID_AT);
            Some(self.time("a time after VALID AT")?)
        } else {
            self.note("VALID AT");
            None
        };
        let mut retrievers = Vec::new();
        loop {
            let r = if let Some(s) = self.eat_kw("SIMILAR") {
                self.similar(s)?
            } else if let Some(s) = self.eat_kw("MATCH") {
                self.match_retriever(s)?
            } else if let Some(s) = self.eat_kw("RECENT") {
                self.recent(s)?
            } else if let Some(s) = self.eat_kw("EXPAND") {
                self.expand(s)?
            } else if let Some(s) = self.eat_kw("AROUND") {
                self.around(s)?
            } else {
                break;
            };
            retrievers.push(r);
        }
        let fusion = match self.eat_kw("FUSE") {
            Some(s) => {
                self.enter_clause(C_FUSE);
                Some(self.fusion(s)?)
            }
            None => None,
        };
        let weights = match self.eat_kw("WEIGHTS") {
            Some(_) => {
                self.enter_clause(C_WEIGHTS);
                self.weights()?
            }
            None => Vec::new(),
        };
        let (mut sources, mut derivatives) = (None, None);
        if self.eat_kw("WITH").is_some() {
            self.enter_clause(C_WITH);
            loop {
                let (slot, clause) = if self.is_kw_at(0, "SOURCES") {
                    (&mut sources, "WITH SOURCES")
                } else if self.is_kw_at(0, "DERIVATIVES") {
                    (&mut derivatives, "WITH DERIVATIVES")
                } else {
                    self.note("SOURCES");
                    self.note("DERIVATIVES");
                    return Err(self.unexpected("SOURCES or DERIVATIVES after WITH"));
                };
                let kw = self.bump();
                if slot.is_some() {
                    return Err(LangError::new(
                        ErrorKind::DuplicateClause {
                            clause: clause.into(),
                        },
                        kw,
                    ));
                }
                let depth = match self.eat_kw("DEPTH") {
                    Some(_) => Some(self.integer("a number of levels after DEPTH")?),
                    None => None,
                };
                *slot = Some(Attach {
                    depth,
                    span: self.span_from(kw),
                });
                if self.eat(TokenKind::Comma, "`,`").is_none() {
                    break;
                }
            }
        }
        let limit = match self.eat_kw("LIMIT") {
            Some(_) => {
                self.enter_clause(C_LIMIT);
                Some(self.count_arg("a number of results after LIMIT")?)
            }
            None => None,
        };
        let returns = match self.eat_kw("RETURN") {
            Some(_) => {
                self.enter_clause(C_RETURN);
                self.return_fields()?
            }
            None => Vec::new(),
        };
        Ok(Find {
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
            span: self.span_from(start),
        })
    }

    fn trace(&mut self, start: Span) -> PResult<Trace> {
        let target = match self.eat_kw("ID") {
            Some(kw) => {
                let value = self.string_arg("a record id after ID")?;
                RecordRef::Id {
                    span: kw.to(value.span()),
                    value,
                }
            }
            None => {
                let value =
                    self.string_arg("the record to trace: an external id, or ID and an id")?;
                RecordRef::External {
                    span: value.span(),
                    value,
                }
            }
        };
        let direction = if let Some(s) = self.eat_kw("SOURCES") {
            Spanned::new(TraceDirection::Sources, s)
        } else if let Some(s) = self.eat_kw("DERIVATIVES") {
            Spanned::new(TraceDirection::Derivatives, s)
        } else if let Some(s) = self.eat_kw("BOTH") {
            Spanned::new(TraceDirection::Both, s)
        } else {
            return Err(self.unexpected("SOURCES, DERIVATIVES or BOTH after the traced record"));
        };
        self.options = Some(Options {
            owner: "TRACE",
            order: TRACE_OPTIONS,
            reached: None,
        });
        let depth = match self.eat_kw("DEPTH") {
            Some(_) => {
                self.reached(0);
                Some(self.integer("a number of levels after DEPTH")?)
            }
            None => None,
        };
        let include_superseded = if self.is_kw_at(0, "INCLUDE") {
            self.bump();
            self.reached(1);
            self.expect_kw("SUPERSEDED", "SUPERSEDED after INCLUDE")?;
            true
        } else {
            self.note("INCLUDE SUPERSEDED");
            false
        };
        let returns = match self.eat_kw("RETURN") {
            Some(_) => {
                self.reached(2);
                self.return_fields()?
            }
            None => Vec::new(),
        };
        Ok(Trace {
            target,
            direction,
            depth,
            include_superseded,
            returns,
            span: self.span_from(start),
        })
    }

    // ---- FIND parts ----

    fn record_types(&mut self) -> PResult<Vec<Spanned<RecordType>>> {
        let mut out = Vec::new();
        loop {
            out.push(self.record_type("a record type or ANY after FIND", true)?);
            if self.eat(TokenKind::Comma, "`,`").is_none() {
                return Ok(out);
            }
        }
    }

    /// One record type, as a word (or a string when `words_only` is false).
    fn record_type(&mut self, wanted: &str, words_only: bool) -> PResult<Spanned<RecordType>> {
        let t = self.peek().clone();
        let written = match &t.kind {
            TokenKind::Word => Some(self.text(&t).to_string()),
            TokenKind::Str(s) if !words_only => Some(s.clone()),
            _ => None,
        };
        if let Some(w) = &written {
            if let Some(rt) = RecordType::parse(w) {
                self.bump();
                return Ok(Spanned::new(rt, t.span));
            }
        }
        for rt in RecordType::ALL {
            self.note(rt.plural());
        }
        match written {
            Some(w) if t.kind != TokenKind::Word || !is_keyword(&w) => Err(self.unknown(
                ErrorKind::UnknownRecordType {
                    name: truncated(&w),
                },
                &w,
                t.span,
            )),
            _ => Err(self.unexpected(wanted)),
        }
    }

    /// After `KIND`: `'a'`, `$p`, `IN ('a', $b)`, `IN $p`.
    fn kind_list(&mut self) -> PResult<StrList> {
        if self.eat_kw("IN").is_some() {
            return self.list_after_in("a list of kinds after KIND IN");
        }
        if let TokenKind::Param(name) = &self.peek().kind {
            let name = name.clone();
            let span = self.bump();
            return Ok(StrList::Param { name, span });
        }
        let item = self.string_arg("a kind, or IN and a list of kinds, after KIND")?;
        Ok(StrList::Items {
            span: item.span(),
            items: vec![item],
        })
    }

    /// `('a', $b)` or `$p` (a list parameter).
    fn list_after_in(&mut self, wanted: &str) -> PResult<StrList> {
        if let TokenKind::Param(name) = &self.peek().kind {
            let name = name.clone();
            let span = self.bump();
            return Ok(StrList::Param { name, span });
        }
        self.note("a $parameter");
        let open = self.expect(TokenKind::LParen, "`(`", wanted)?;
        let mut items = Vec::new();
        loop {
            items.push(self.string_arg("a string or a $parameter in the list")?);
            if self.eat(TokenKind::Comma, "`,`").is_none() {
                break;
            }
        }
        self.expect(TokenKind::RParen, "`)`", "`)` to close the list")?;
        Ok(StrList::Items {
            items,
            span: self.span_from(open),
        })
    }

    /// A string literal or `$param`.
    fn string_arg(&mut self, wanted: &str) -> PResult<Arg<String>> {
        let t = self.peek().clone();
        match t.kind {
            TokenKind::Str(value) => {
                self.bump();
                Ok(Arg::Lit {
                    value,
                    span: t.span,
                })
            }
            TokenKind::Param(name) => {
                self.bump();
                Ok(Arg::Param { name, span: t.span })
            }
            _ => {
                self.note("a string");
                self.note("a $parameter");
                Err(self.unexpected(wanted))
            }
        }
    }

    /// A non-negative integer literal.
    fn integer(&mut self, wanted: &str) -> PResult<Spanned<u64>> {
        let t = self.peek().clone();
        match t.kind {
            TokenKind::Number { fraction } => {
                let text = self.text(&t);
                let invalid = |reason: &str| {
                    LangError::new(
                        ErrorKind::InvalidNumber {
                            text: truncated(text),
                            reason: reason.into(),
                        },
                        t.span,
                    )
                };
                if fraction {
                    return Err(invalid("expected an integer"));
                }
                let v: u64 = text
                    .parse()
                    .map_err(|_| invalid("too large for a 64-bit integer"))?;
                self.bump();
                Ok(Spanned::new(v, t.span))
            }
            _ => {
                self.note("an integer");
                Err(self.unexpected(wanted))
            }
        }
    }

    /// An integer literal or `$param`.
    fn count_arg(&mut self, wanted: &str) -> PResult<Arg<u64>> {
        if let TokenKind::Param(name) = &self.peek().kind {
            let name = name.clone();
            let span = self.bump();
            return Ok(Arg::Param { name, span });
        }
        self.note("a $parameter");
        let n = self.integer(wanted)?;
        Ok(Arg::Lit {
            value: n.value,
            span: n.span,
        })
    }

    /// A number (optionally negative) or `$param`.
    fn number_arg(&mut self, wanted: &str) -> PResult<Arg<f64>> {
        if let TokenKind::Param(name) = &self.peek().kind {
            let name = name.clone();
            let span = self.bump();
            return Ok(Arg::Param { name, span });
        }
        self.note("a $parameter");
        let minus = self.eat(TokenKind::Minus, "`-`");
        let t = self.peek().clone();
        if !matches!(t.kind, TokenKind::Number { .. }) {
            self.note("a number");
            return Err(self.unexpected(wanted));
        }
        let text = self.text(&t);
        let v: f64 = text.parse().unwrap_or(f64::INFINITY);
        if !v.is_finite() {
            return Err(LangError::new(
                ErrorKind::InvalidNumber {
                    text: truncated(text),
                    reason: "too large".into(),
                },
                t.span,
            ));
        }
        self.bump();
        let span = minus.map_or(t.span, |m| m.to(t.span));
        Ok(Arg::Lit {
            value: if minus.is_some() { -v } else { v },
            span,
        })
    }

    /// A time: `now`, `now - 7d`, a bare timestamp, a string, `$param`.
    fn time(&mut self, wanted: &str) -> PResult<TimeExpr> {
        let t = self.peek().clone();
        match t.kind {
            TokenKind::Word if self.is_kw_at(0, "now") => {
                self.bump();
                let sign = if self.eat(TokenKind::Minus, "`-`").is_some() {
                    Sign::Minus
                } else if self.eat(TokenKind::Plus, "`+`").is_some() {
                    Sign::Plus
                } else {
                    return Ok(TimeExpr::Now {
                        offset: None,
                        span: t.span,
                    });
                };
                let d = self.peek().clone();
                match d.kind {
                    TokenKind::Duration(amount, unit) => {
                        self.bump();
                        Ok(TimeExpr::Now {
                            offset: Some(Offset { sign, amount, unit }),
                            span: t.span.to(d.span),
                        })
                    }
                    TokenKind::Number { .. } => {
                        self.note("a duration");
                        Err(self
                            .unexpected("a duration after now")
                            .with_hint("a duration has a unit: 90s, 15m, 6h, 7d or 2w"))
                    }
                    _ => {
                        self.note("a duration");
                        Err(self.unexpected("a duration after now"))
                    }
                }
            }
            TokenKind::Time(ms) => {
                self.bump();
                Ok(TimeExpr::At { ms, span: t.span })
            }
            TokenKind::Str(s) => match parse_rfc3339_bound(&s) {
                Ok(ms) => {
                    self.bump();
                    Ok(TimeExpr::At { ms, span: t.span })
                }
                Err(e) => Err(time_error(
                    &s,
                    e.reason,
                    t.span,
                    "write a time as 2025-03-01 or 2025-03-01T09:30:00Z (RFC 3339), or now - 7d",
                )),
            },
            TokenKind::Param(name) => {
                self.bump();
                Ok(TimeExpr::Param { name, span: t.span })
            }
            _ => {
                self.note("now");
                self.note("a time");
                self.note("a $parameter");
                Err(self.unexpected(wanted))
            }
        }
    }

    fn return_fields(&mut self) -> PResult<Vec<Spanned<ReturnField>>> {
        let mut out = Vec::new();
        loop {
            let t = self.peek().clone();
            let word = self.word_at(0);
            if let Some(f) = word.and_then(ReturnField::parse) {
                self.bump();
                out.push(Spanned::new(f, t.span));
            } else {
                for f in ReturnField::ALL {
                    self.note(f.name());
                }
                return Err(match word.filter(|w| !is_keyword(w)) {
                    Some(w) => {
                        self.unknown(ErrorKind::UnknownField { name: truncated(w) }, w, t.span)
                    }
                    None => self.unexpected("a field to return"),
                });
            }
            if self.eat(TokenKind::Comma, "`,`").is_none() {
                return Ok(out);
            }
        }
    }
}

/// The expected word closest to `word` (case-insensitive edit distance at
/// most 1 for short words, 2 for longer ones), if any.
fn closest(word: &str, expected: &[&str]) -> Option<String> {
    if word.len() < 3 {
        return None;
    }
    let w = word.to_ascii_lowercase();
    let limit = if w.len() <= 4 { 1 } else { 2 };
    expected
        .iter()
        .filter(|e| {
            e.chars()
                .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '.')
        })
        .map(|e| (edit_distance(&w, &e.to_ascii_lowercase()), e))
        .filter(|(d, _)| *d <= limit && *d > 0)
        .min_by_key(|(d, _)| *d)
        .map(|(_, e)| e.to_string())
}

/// Levenshtein distance between `a` and `b`, in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> LangError {
        parse(src).expect_err(src)
    }

    #[test]
    fn minimal_statements() {
        let s = parse("FIND ANY").unwrap();
        let Body::Find(f) = &s.body else { panic!() };
        assert!(f.targets.is_empty() && f.retrievers.is_empty());
        let s = parse("explain trace 'evt_1' sources;").unwrap();
        assert!(s.explain);
        assert!(matches!(s.body, Body::Trace(_)));
    }

    #[test]
    fn precedence_and_chains() {
        let s = parse("FIND ANY WHERE kind = 'a' OR kind = 'b' AND NOT kind = 'c' OR kind = 'd'")
            .unwrap();
        let Body::Find(f) = s.body else { panic!() };
        let Some(Expr::Or { items, .. }) = f.filter else {
            panic!()
        };
        assert_eq!(items.len(), 3);
        let Expr::And { items: and, .. } = &items[1] else {
            panic!()
        };
        assert!(matches!(and[1], Expr::Not { .. }));
    }

    #[test]
    fn expected_lists_are_exact() {
        let e = err("FIND ANY LIMIT 5 WHERE kind = 'x'");
        assert_eq!(e.code(), "unexpected_token");
        assert_eq!(e.expected(), ["RETURN", "`;`", "end of input"]);
        assert_eq!(
            e.hint(),
            Some(
                "WHERE goes before LIMIT: clauses come in the order FIND, KIND, WHERE, AS OF, VALID AT, the retrievers, FUSE, WEIGHTS, WITH, LIMIT, RETURN"
            )
        );
        let e = err("FIND");
        assert_eq!(e.code(), "unexpected_end");
        assert_eq!(e.expected()[0], "ANY");
        let e = err("FIND ANY SIMILAR TO 'x' TOP 5 MIN 0.3");
        assert_eq!(
            e.hint(),
            Some(
                "MIN goes before TOP in SIMILAR: its options come in the order MODEL, MIN, TOP, AS"
            )
        );
        let e = err("FIND ANY LIMTI 5");
        assert_eq!(e.hint(), Some("did you mean `LIMIT`?"));
    }

    #[test]
    fn nesting_is_bounded_without_recursing_deeper() {
        let deep = format!(
            "FIND ANY WHERE {}kind = 'x'{}",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        assert_eq!(err(&deep).code(), "limit_exceeded");
        let nots = format!("FIND ANY WHERE {}kind = 'x'", "NOT ".repeat(10_000));
        assert_eq!(err(&nots).code(), "limit_exceeded");
        let ok = format!(
            "FIND ANY WHERE {}kind = 'x'",
            "NOT ".repeat(NESTING_DEPTH_MAX - 1)
        );
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn a_bracket_pair_costs_a_level_as_a_not_does() {
        let brackets = |n: usize| {
            format!(
                "FIND ANY WHERE {}kind = 'x'{}",
                "(".repeat(n),
                ")".repeat(n)
            )
        };
        let nots = |n: usize| format!("FIND ANY WHERE {}kind = 'x'", "NOT ".repeat(n));
        for (name, text) in [
            ("brackets", &brackets as &dyn Fn(usize) -> String),
            ("nots", &nots),
        ] {
            assert!(parse(&text(NESTING_DEPTH_MAX - 1)).is_ok(), "{name}");
            let e = err(&text(NESTING_DEPTH_MAX));
            assert_eq!(e.code(), "limit_exceeded", "{name}");
            assert!(e.to_string().contains("33"), "{name}: {e}");
        }
    }

    #[test]
    fn edit_distance_is_levenshtein() {
        assert_eq!(edit_distance("limti", "limit"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
