//! Limits of the query language: one named constant per bound, each
//! enforced with a typed error ([`super::ErrorKind::LimitExceeded`]) naming
//! the bound, its value and what the statement asked for.
//!
//! Where the engine has the same bound (`engram_engine::model::limits`),
//! the constant here is that one, so a statement that passes the checker is
//! never refused by the engine for the same reason.
//!
//! This module must never hold anything but constants.

use engram_engine::model::limits as engine;

/// Bytes of a statement's text (checked before lexing).
pub const STATEMENT_BYTES_MAX: usize = 64 << 10;
/// Nesting depth of a `WHERE` expression: a predicate is depth 1, each
/// `AND`, `OR`, `NOT` adds one, and so does each pair of parentheses
/// while parsing (the parser's recursion is bounded by this, so no input
/// overflows the stack).
pub const NESTING_DEPTH_MAX: usize = 32;
/// Predicates in one `WHERE` expression (each costs a bitmap operation).
pub const PREDICATES_MAX: usize = 256;
/// Values in one `IN (...)` list, `KIND` list or `VIA` list, literal or bound.
pub const IN_LIST_LEN_MAX: usize = 1024;
/// Retrievers in one statement (and weights, one per retriever).
pub const RETRIEVERS_MAX: usize = 16;
/// Fields in one `RETURN` list (there are fewer distinct fields than this).
pub const RETURN_FIELDS_MAX: usize = 64;
/// Errors reported for one statement: past this many the checker only
/// counts them, and the last error says how many there were.
pub const ERRORS_MAX: usize = 32;
/// Seeds of one `EXPAND` (entities, records and retrievers, after binding).
pub const SEEDS_MAX: usize = 256;
/// Candidates one retriever contributes (`TOP n`).
pub const TOP_MAX: u64 = 10_000;
/// Results of a statement (`LIMIT k`): the engine's `K_MAX`.
pub const LIMIT_MAX: u64 = engine::K_MAX as u64;
/// Hops of graph expansion (`HOPS a..b`): the engine's `GRAPH_DEPTH_MAX`.
pub const HOPS_MAX: u64 = engine::GRAPH_DEPTH_MAX as u64;
/// Nodes one `EXPAND` may reach (`MAX n`).
pub const EXPANDED_NODES_MAX: u64 = 10_000;
/// Levels of lineage attached to hits (`WITH SOURCES DEPTH n`): the
/// engine's `ATTACH_DEPTH_MAX`.
pub const ATTACH_DEPTH_MAX: u64 = engram_engine::retrieval::search::ATTACH_DEPTH_MAX as u64;
/// Levels walked by `TRACE ... DEPTH n`: the engine's `TRACE_DEPTH_MAX`, the
/// depth of `engram trace` and of the server's trace endpoint.
pub const TRACE_DEPTH_MAX: u64 = engram_engine::trace::TRACE_DEPTH_MAX as u64;
/// The constant `k` of reciprocal rank fusion (`FUSE RRF K n`).
pub const RRF_K_MAX: u64 = 10_000;
/// Bytes of a query text (`SIMILAR TO 'text'`, `MATCH 'text'`): the engine's.
pub const QUERY_TEXT_BYTES_MAX: usize = engine::QUERY_TEXT_BYTES_MAX;
/// Bytes of a name-like value (kind, scope value, label, model id,
/// relation predicate, entity name): the engine's.
pub const NAME_BYTES_MAX: usize = engine::NAME_BYTES_MAX;
/// Bytes of an external id: the engine's.
pub const EXTERNAL_ID_BYTES_MAX: usize = engine::EXTERNAL_ID_BYTES_MAX;
/// Dimensions of a vector parameter: the engine's.
pub const VECTOR_DIM_MAX: usize = engine::VECTOR_DIM_MAX;
/// Bytes of a retriever or parameter name.
pub const IDENT_BYTES_MAX: usize = 64;
