//! # engram-query
//!
//! The text forms through which requests reach the engine: JSONL ingest
//! lines ([`ingest`]), recall requests ([`recall`]) and evaluation cases
//! ([`eval`]); later the query language. Each compiles to a plain request type of `engram-engine`; the
//! CLI, the query language and the server all go through here, so a request
//! means the same thing whichever door it came in by.
//!
//! This crate must never open a store or do I/O: it parses and validates.

pub mod eval;
pub mod ingest;
pub mod recall;

pub use ingest::{IngestLine, LineError, parse_jsonl, parse_line};
pub use recall::{RecallLine, parse_recall_jsonl, parse_recall_line};
