//! Running statements on a session: parse (or take the JSON form), check
//! against what the session's tenant has (its vector spaces, its embedder,
//! the engine clock), plan to the engine's request types, run them, and
//! project the results to the `RETURN` columns.
//!
//! [`QueryExt`] adds `query` and `query_ast` to `engram_engine::Session`:
//!
//! ```no_run
//! use engram_engine::{Engram, Options, Principal};
//! use engram_query::lang::{Params, QueryExt};
//!
//! let db = Engram::open("./memory", Options::default())?;
//! let me = db.session(Principal::user("tenant_42", "user_18"));
//! let out = me.query("FIND ANY MATCH 'retention policy' LIMIT 5", &Params::new())?;
//! for row in &out.rows {
//!     println!("{}", row["text"]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This module must never bypass the session: every read goes through
//! `Session::search`, `Session::trace` or `Session::get`, so tenant and
//! access rules apply exactly as to any other request.

use serde::Serialize;
use serde_json::{Map, Value, json};

use std::collections::{HashMap, HashSet, VecDeque};

use engram_engine::id::RecordId;
use engram_engine::retrieval::{Hit, Linked, Manifest};
use engram_engine::time::format_rfc3339;
use engram_engine::trace::{Trace, TraceNode};
use engram_engine::{EngineError, Record, RecordRef, Session};

use super::ast::{ReturnField, Statement, TraceDirection};
use super::check::{CheckContext, Embedder, check};
use super::error::LangError;
use super::params::{Binder, Params};
use super::plan::{Plan, plan};

/// The result of a statement: rows of the `RETURN` columns.
#[derive(Clone, Debug, Serialize)]
pub struct QueryOutput {
    /// Column names, in order.
    pub columns: Vec<String>,
    /// One object per result, keys in `columns` order.
    pub rows: Vec<Map<String, Value>>,
    /// The manifest (`EXPLAIN FIND ...` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Manifest>,
    /// The statement in canonical form.
    pub statement: String,
    /// `TRACE` only: the lineage goes on past the engine's limit of
    /// `TRACE_DEPTH_MAX` (32) hops, so rows at the limit have further
    /// records not listed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Why a statement did not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The statement is wrong (parse, check or parameter errors, located in
    /// the text when there is one). Give up: fix the statement.
    #[error("{}", render_all(errors, text.as_deref()))]
    Language {
        /// Every error found.
        errors: Vec<LangError>,
        /// The statement text, for rendering.
        text: Option<String>,
    },
    /// The engine refused or failed (see its retry advice).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

fn render_all(errors: &[LangError], source: Option<&str>) -> String {
    errors
        .iter()
        .map(|e| match source {
            Some(s) => e.render(s),
            None => e.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl QueryError {
    /// The errors as JSON objects (for programs and the server).
    pub fn to_json(&self) -> Value {
        match self {
            QueryError::Language { errors, .. } => {
                Value::Array(errors.iter().map(|e| e.to_json()).collect())
            }
            QueryError::Engine(e) => json!([super::unplaced_error_json(e.code(), &e.to_string())]),
        }
    }
}

/// `query` and `query_ast` on a session.
pub trait QueryExt {
    /// Parses, checks and runs a statement in its text form.
    fn query(&self, text: &str, params: &Params) -> Result<QueryOutput, QueryError>;
    /// [`QueryExt::query`], run as if it began with `EXPLAIN` when
    /// `explain` is set (the shell's `\explain on`): its error positions
    /// stay those of the text as written.
    fn query_explained(
        &self,
        text: &str,
        params: &Params,
        explain: bool,
    ) -> Result<QueryOutput, QueryError>;
    /// Checks and runs a statement in its JSON (AST) form.
    fn query_ast(&self, stmt: &Statement, params: &Params) -> Result<QueryOutput, QueryError>;
}

/// What the checker should know of the session's store.
fn context(s: &Session, params: &Params) -> CheckContext {
    CheckContext {
        params: params.clone(),
        models: s.vector_models(),
        models_known: true,
        embedder: match s.engram().embedder_model() {
            Some(m) => Embedder::Model(m),
            None => Embedder::Absent,
        },
        now_ms: s.engram().now_ms(),
    }
}

impl QueryExt for Session {
    fn query(&self, text: &str, params: &Params) -> Result<QueryOutput, QueryError> {
        self.query_explained(text, params, false)
    }

    fn query_explained(
        &self,
        text: &str,
        params: &Params,
        explain: bool,
    ) -> Result<QueryOutput, QueryError> {
        let lang = |errors: Vec<LangError>| QueryError::Language {
            errors,
            text: Some(text.to_string()),
        };
        let mut stmt = super::parse(text).map_err(|e| lang(vec![e]))?;
        stmt.explain |= explain;
        let ctx = context(self, params);
        check(&stmt, &ctx).map_err(|es| lang(es.into_iter().map(|e| e.located(text)).collect()))?;
        run(self, &stmt, &ctx).map_err(|e| match e {
            QueryError::Language { errors, .. } => {
                lang(errors.into_iter().map(|e| e.located(text)).collect())
            }
            other => other,
        })
    }

    fn query_ast(&self, stmt: &Statement, params: &Params) -> Result<QueryOutput, QueryError> {
        let ctx = context(self, params);
        check(stmt, &ctx).map_err(|errors| QueryError::Language { errors, text: None })?;
        run(self, stmt, &ctx)
    }
}

fn run(s: &Session, stmt: &Statement, ctx: &CheckContext) -> Result<QueryOutput, QueryError> {
    let binder = Binder::new(&ctx.params, ctx.now_ms);
    let p = plan(stmt, &binder).map_err(|e| QueryError::Language {
        errors: vec![e],
        text: None,
    })?;
    let statement = stmt.to_string();
    match p {
        Plan::Find { request, returns } => {
            let r = s.search(&request)?;
            let mut rows = Vec::with_capacity(r.hits.len());
            for h in &r.hits {
                rows.push(find_row(s, h, &returns, request.as_of)?);
            }
            Ok(QueryOutput {
                columns: returns.iter().map(|f| f.name().to_string()).collect(),
                rows,
                manifest: stmt.explain.then_some(r.manifest),
                statement,
                truncated: false,
            })
        }
        Plan::Trace {
            target,
            direction,
            depth,
            include_superseded,
            returns,
        } => {
            let t = s.trace(&target)?;
            // without INCLUDE SUPERSEDED the walk does not pass through a
            // superseded version: what only the older version came from
            // or led to is not the record's lineage
            let walked = (!include_superseded).then(|| around_current(&t));
            let mut rows = Vec::new();
            // the rows' text, as JSON writes it: past the answer's budget
            // (as a FIND's), a row's text is null
            let mut text_bytes = 0u64;
            // whether the walk the rows come from lists a record of its
            // side(s) past the engine's limit
            let max = engram_engine::trace::TRACE_DEPTH_MAX;
            let mut past_max = false;
            for n in &t.nodes {
                let side_ok = match direction {
                    TraceDirection::Sources => n.side == "upstream",
                    TraceDirection::Derivatives => n.side == "downstream",
                    TraceDirection::Both => n.side != "target",
                };
                let n_depth = match &walked {
                    Some(w) => match w.get(&n.id) {
                        Some(&d) => d,
                        None => continue,
                    },
                    None => n.depth,
                };
                if side_ok {
                    past_max |= n_depth > max;
                }
                if !side_ok || n_depth > depth {
                    continue;
                }
                let mut full = if needs_record(&returns) && n.readable {
                    s.get(&RecordRef::Id(n.id)).ok()
                } else {
                    None
                };
                if let Some(r) = full.as_mut() {
                    if text_bytes >= engram_engine::retrieval::HITS_TEXT_BYTES_MAX {
                        (r.text, r.data) = (None, None);
                    }
                    text_bytes += r.answer_bytes() as u64;
                }
                let mut row = Map::new();
                for f in &returns {
                    let v = match f {
                        ReturnField::Id => json!(n.id.to_string()),
                        ReturnField::ExternalId => json!(n.external_id),
                        ReturnField::Record => json!(n.record),
                        ReturnField::Kind => json!(n.kind),
                        ReturnField::Status => json!(n.status),
                        ReturnField::Text => json!(full.as_ref().and_then(|r| r.text.clone())),
                        ReturnField::OccurredAt => json!(n.occurred_at),
                        ReturnField::Depth => json!(n_depth),
                        ReturnField::Side => json!(if n.side == "upstream" {
                            "source"
                        } else {
                            "derivative"
                        }),
                        other => record_field(full.as_ref(), *other),
                    };
                    row.insert(f.name().to_string(), v);
                }
                rows.push(row);
            }
            Ok(QueryOutput {
                columns: returns.iter().map(|f| f.name().to_string()).collect(),
                rows,
                manifest: None,
                statement,
                // on the sides the statement lists (a smaller DEPTH is the
                // statement's own limit): the engine's walk stopped there
                // (for the walk that passes no older version: at a row of
                // the limit's depth, with a record past it that is none), or
                // that walk went past the limit among the engine's nodes
                truncated: depth >= max
                    && (past_max
                        || t.cut_at.iter().any(|c| {
                            let side = match direction {
                                TraceDirection::Sources => c.upstream,
                                TraceDirection::Derivatives => !c.upstream,
                                TraceDirection::Both => true,
                            };
                            side && match &walked {
                                None => true,
                                Some(w) => c.current && w.get(&c.from) == Some(&max),
                            }
                        })),
            })
        }
    }
}

/// The trace's records reached from its target without passing through a
/// superseded version, each with its hops on that walk (upstream along
/// sources, corrected versions and the entities a record is about;
/// downstream along derivatives and corrections; each side over its own
/// nodes, as the engine walked them). Superseded records are not in it.
fn around_current(t: &Trace) -> HashMap<RecordId, usize> {
    let nodes: HashMap<RecordId, &TraceNode> = t.nodes.iter().map(|n| (n.id, n)).collect();
    let mut up: HashMap<RecordId, Vec<RecordId>> = HashMap::new();
    let mut down: HashMap<RecordId, Vec<RecordId>> = HashMap::new();
    // (with the edges the engine's walk reached only at its limit: this
    // walk, passing no older version, may take them sooner)
    for e in t.edges.iter().chain(&t.limit_edges) {
        if e.relation == "about" {
            up.entry(e.from).or_default().push(e.to);
        } else {
            up.entry(e.to).or_default().push(e.from);
            down.entry(e.from).or_default().push(e.to);
        }
    }
    // an older version, as the engine tells it (`Trace::older`): one a
    // live correction supersedes, whatever its own status shows (past
    // retention, or deleted by it, it shows `deleted`); a deleted chain
    // shows every version as the tombstone it is, as a trace does
    let older: HashSet<RecordId> = t.older.iter().copied().collect();
    let mut out = HashMap::new();
    for (side, next) in [("upstream", &up), ("downstream", &down)] {
        let mut q = VecDeque::from([(t.target, 0usize)]);
        let mut seen = HashSet::from([t.target]);
        while let Some((at, d)) = q.pop_front() {
            for &x in next.get(&at).into_iter().flatten() {
                let Some(n) = nodes.get(&x) else { continue };
                // (a version shown `superseded` is an older one)
                if n.side != side || older.contains(&x) || !seen.insert(x) {
                    continue;
                }
                out.insert(x, d + 1);
                q.push_back((x, d + 1));
            }
        }
    }
    out
}

/// Whether a projection needs fields only the full record has.
fn needs_record(returns: &[ReturnField]) -> bool {
    returns.iter().any(|f| {
        matches!(
            f,
            ReturnField::Text
                | ReturnField::IngestedAt
                | ReturnField::ValidFrom
                | ReturnField::ValidUntil
                | ReturnField::Scope
                | ReturnField::Labels
        )
    })
}

fn record_field(r: Option<&Record>, f: ReturnField) -> Value {
    let Some(r) = r else {
        return Value::Null;
    };
    match f {
        ReturnField::IngestedAt => json!(format_rfc3339(r.ingested_at)),
        ReturnField::ValidFrom => json!(r.valid_from.map(format_rfc3339)),
        ReturnField::ValidUntil => json!(r.valid_until.map(format_rfc3339)),
        ReturnField::Scope => json!({
            "user": r.scope.user, "conversation": r.scope.conversation,
            "agent": r.scope.agent, "labels": r.scope.labels,
        }),
        ReturnField::Labels => json!(r.scope.labels),
        _ => Value::Null,
    }
}

fn linked(v: &[Linked]) -> Value {
    Value::Array(
        v.iter()
            .map(|l| {
                let mut o = json!({"id": l.id.to_string(), "external_id": l.external_id, "record": l.record,
                       "kind": l.kind, "status": l.status, "depth": l.depth, "text": l.text});
                // (past the answer's text budget: read it by id)
                if l.text_omitted {
                    o["text_omitted"] = json!(true);
                }
                o
            })
            .collect(),
    )
}

fn find_row(
    s: &Session,
    h: &Hit,
    returns: &[ReturnField],
    as_of: Option<i64>,
) -> Result<Map<String, Value>, EngineError> {
    let full = if returns.iter().any(|f| {
        matches!(
            f,
            ReturnField::IngestedAt
                | ReturnField::ValidFrom
                | ReturnField::ValidUntil
                | ReturnField::Scope
                | ReturnField::Labels
        )
    }) {
        Some(s.get_as_of(&RecordRef::Id(h.id), as_of)?)
    } else {
        None
    };
    let mut row = Map::new();
    for f in returns {
        let v = match f {
            ReturnField::Id => json!(h.id.to_string()),
            ReturnField::ExternalId => json!(h.external_id),
            ReturnField::Record => json!(h.record),
            ReturnField::Kind => json!(h.kind),
            ReturnField::Status => json!(h.status),
            ReturnField::Text => json!(h.text),
            ReturnField::Score => json!(h.score),
            ReturnField::Ranks => Value::Array(
                h.ranks
                    .iter()
                    .map(|r| json!({"retriever": r.retriever, "rank": r.rank, "score": r.score}))
                    .collect(),
            ),
            ReturnField::Sources => linked(&h.sources),
            ReturnField::Derivatives => linked(&h.derivatives),
            ReturnField::OccurredAt => json!(h.occurred_at),
            ReturnField::Depth | ReturnField::Side => Value::Null,
            other => record_field(full.as_ref(), *other),
        };
        row.insert(f.name().to_string(), v);
    }
    Ok(row)
}
