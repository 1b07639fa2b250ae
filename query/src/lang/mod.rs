//! The query language front end: text to a typed, checked [`Statement`],
//! and back to canonical text. No store, no I/O, no clock.
//!
//! ```text
//! text --lexer--> tokens --parser--> Statement --check(ctx)--> ok | [LangError]
//!                                       |  ^
//!                              Display  v  | serde (the JSON wire form)
//!                                 canonical text / JSON
//! ```
//!
//! - [`lexer`]: tokens with byte spans; keywords are words matched by the parser;
//! - [`parser`]: recursive descent over a fixed clause order, exact
//!   `expected` lists, bounded nesting;
//! - [`ast`]: the statement types (also the JSON form) and the defaults;
//! - [`mod@check`]: meaning: names, ranges, limits, parameters, models;
//! - [`params`]: request parameters and the [`Binder`] that resolves `$name`s;
//! - [`mod@print`]: canonical text (`Display`);
//! - [`error`]: [`LangError`] with codes, rendering and JSON;
//! - [`limits`], [`span`].
//!
//! Tenant and principal never appear in a statement: they come from the
//! session that executes it. [`plan()`] compiles a checked statement to the
//! engine's request types (`SearchRequest` for `FIND`, a trace for
//! `TRACE`), and [`exec`] runs it on a session ([`QueryExt`]).
//!
//! Dependencies: none beyond the crate's (`serde`, `serde_json`,
//! `thiserror`, `engram-engine` for RFC 3339 times, record ids, the
//! tokenizer and the engine's limits). The lexer and parser are written by
//! hand: the grammar is small, and a hand-written parser gives the exact
//! expected-token lists and hints the error reports need.
//!
//! Apart from [`exec`] (which runs statements through a session), this
//! module must never open a store, read a clock or splice a parameter value
//! into text.

pub mod ast;
pub mod check;
pub mod error;
pub mod exec;
pub mod lexer;
pub mod limits;
pub mod params;
pub mod parser;
pub mod plan;
pub mod print;
pub mod span;

pub use ast::Statement;
pub use check::{CheckContext, Embedder, check};
pub use error::{ErrorKind, LangError, unplaced_error_json};
pub use exec::{QueryError, QueryExt, QueryOutput};
pub use params::{Binder, ParamValue, Params, QueryInput};
pub use parser::parse;
pub use plan::{Plan, plan};
pub use span::Span;

/// Parses and checks `text`: the statement, or every error found (parse
/// errors stop at the first; check errors are all reported), located in
/// `text`.
pub fn compile(text: &str, ctx: &CheckContext) -> Result<Statement, Vec<LangError>> {
    let stmt = parse(text).map_err(|e| vec![e])?;
    check(&stmt, ctx).map_err(|errors| {
        errors
            .into_iter()
            .map(|e| e.located(text))
            .collect::<Vec<_>>()
    })?;
    Ok(stmt)
}
