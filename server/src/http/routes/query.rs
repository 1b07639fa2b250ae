//! Reads that rank: recall, context assembly, and evaluation of recall
//! against cases, all as the key's principal.
//!
//! A recall body is the JSON object of one `engram recall --queries` line,
//! parsed by `engram_query::parse_recall_line`; eval cases are lines of
//! the `engram eval` format, parsed by `engram_query::eval`, that may not
//! name a tenant or principal. This module must never filter or rank
//! anything itself: eligibility and ranking are the engine's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Json;
use axum::extract::State;
use engram_engine::authz::Operation;
use engram_engine::context::{CONTEXT_BUDGET_BYTES_DEFAULT, Context, ContextRequest};
use engram_engine::retrieval::{Hit, Manifest};
use engram_query::eval::{CaseResult, Summary, parse_session_cases, score_resolved, summarize};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::app::Shared;
use crate::http::auth::Caller;
use crate::http::body::{JsonBody, RawBody, body_text, json_object};
use crate::http::error::{ErrorBody, ServerError, ServerResult};
use crate::http::routes::Params;
use crate::http::routes::records::line_error;

/// The answer to a recall.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecallResponse {
    /// The request's `id`, echoed.
    pub query_id: Option<String>,
    /// Hits, best first: rank, id, external_id, score, record, kind,
    /// status, occurred_at, historical, text, found_by, ranks.
    #[schema(value_type = Vec<Object>)]
    pub hits: Vec<Hit>,
    /// With `"explain": true`: the manifest (normalized query, principal,
    /// eligibility steps and counts, snapshot position, versions,
    /// candidates per retriever, fusion, cost, timings; docs/retrieval.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub manifest: Option<Manifest>,
}

/// Recall: eligibility first (tenant, access, scope, deletion, retention,
/// time), then vector / lexical / recency / graph / episodic retrievers,
/// fused.
///
/// The body is one recall request as in `engram recall --queries`
/// (docs/ingest.md): `text`, `vector`, `model`, `mode`, `k`, `ef`, filters
/// (`user`, `conversation`, `agent`, `label`, `kind`, `record`,
/// `occurred_after`, `occurred_before`), `as_of`, `valid_at`,
/// `include_historical`, `id`, `explain`, `with_text`, `weights` (by retriever:
/// `vector`, `lexical`, `recency`, `graph`, `episodic`). It may not name a
/// tenant or principal.
#[utoipa::path(
    post, path = "/v1/recall", tag = "query",
    request_body(content = Object, description = "One recall request (docs/ingest.md)", content_type = "application/json"),
    responses(
        (status = 200, body = RecallResponse),
        (status = 400, body = ErrorBody), (status = 422, body = ErrorBody), (status = 429, body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn recall(
    State(app): State<Shared>,
    caller: Caller,
    RawBody(bytes, _held): RawBody,
) -> ServerResult<Json<RecallResponse>> {
    let session = caller.session(&app, Operation::Read).await?;
    let text = body_text(&bytes)?;
    let given = json_object(text)?;
    let mut line =
        engram_query::parse_recall_line(text, 1).map_err(|e| line_error(e, None, None))?;
    let l = &app.cfg.limits;
    // `k` left out: the default, or the configured maximum when lower
    if given.get("k").is_none_or(serde_json::Value::is_null) {
        line.request.k = line.request.k.min(l.k_max);
    }
    if line.request.k > l.k_max {
        return Err(ServerError::invalid(
            None,
            "k",
            format!("{} is out of range 1..={}", line.request.k, l.k_max),
        ));
    }
    if let Some(t) = &line.request.text {
        if t.len() > l.query_text_bytes_max {
            return Err(ServerError::Invalid {
                code: "limit_exceeded",
                message: format!(
                    "query text length in bytes is {}, over the limit of {}",
                    t.len(),
                    l.query_text_bytes_max
                ),
                details: serde_json::json!({"field": "text", "limit": l.query_text_bytes_max, "got": t.len()}),
            });
        }
    }
    let explain = line.request.explain;
    let req = line.request;
    let r = app.read(move || session.recall(&req)).await?;
    Ok(Json(RecallResponse {
        query_id: line.query_id,
        hits: r.hits,
        manifest: explain.then_some(r.manifest),
    }))
}

/// A context request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextBody {
    /// What the model call is about.
    pub text: String,
    /// The user the call serves.
    pub user: Option<String>,
    /// The conversation being continued.
    pub conversation: Option<String>,
    /// The agent making the call.
    pub agent: Option<String>,
    /// Byte budget of the rendered text, headers included (default 8192).
    #[schema(minimum = 1)]
    pub budget_bytes: Option<usize>,
    /// Semantic items to consider (default 8).
    pub semantic_k: Option<usize>,
    /// Summaries to consider (default 3).
    pub episodic_k: Option<usize>,
    /// Recent turns to include (default 6).
    pub recent_turns: Option<usize>,
    /// Include (labelled) records whose validity ended (default true).
    pub include_historical: Option<bool>,
}

/// The working memory for one model call.
#[derive(Debug, Serialize, ToSchema)]
pub struct ContextResponse {
    /// Sections (procedural, semantic, episodic, recent) with their items,
    /// provenance and conflicts.
    #[schema(value_type = Object)]
    pub context: Context,
    /// The same, rendered as text for a prompt.
    pub rendered: String,
}

/// Assemble the working memory for one model call: approved procedural
/// rules, relevant facts with provenance, episodic summaries and recent
/// turns, within a byte budget; historical items labelled, conflicts shown.
#[utoipa::path(
    post, path = "/v1/context", tag = "query",
    request_body = ContextBody,
    responses((status = 200, body = ContextResponse), (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn context(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(b, _held): JsonBody<ContextBody>,
) -> ServerResult<Json<ContextResponse>> {
    let session = caller.session(&app, Operation::Read).await?;
    let l = &app.cfg.limits;
    let mut req = ContextRequest::new(b.text);
    req.user = b.user;
    req.conversation = b.conversation;
    req.agent = b.agent;
    // the default, or the configured maximum when that is lower
    req.budget_bytes = b
        .budget_bytes
        .unwrap_or(CONTEXT_BUDGET_BYTES_DEFAULT.min(l.context_budget_bytes_max));
    // each count given, else its default or the configured maximum when
    // that is lower (as the budget)
    let most = l.context_items_max;
    req.semantic_k = b.semantic_k.unwrap_or(req.semantic_k.min(most));
    req.episodic_k = b.episodic_k.unwrap_or(req.episodic_k.min(most));
    req.recent_turns = b.recent_turns.unwrap_or(req.recent_turns.min(most));
    if let Some(h) = b.include_historical {
        req.include_historical = h;
    }
    if req.text.len() > l.query_text_bytes_max {
        return Err(ServerError::invalid(
            None,
            "text",
            format!("over the limit of {} bytes", l.query_text_bytes_max),
        ));
    }
    if req.budget_bytes == 0 || req.budget_bytes > l.context_budget_bytes_max {
        return Err(ServerError::invalid(
            None,
            "budget_bytes",
            format!(
                "{} is out of range 1..={}",
                req.budget_bytes, l.context_budget_bytes_max
            ),
        ));
    }
    for (f, v) in [
        ("semantic_k", req.semantic_k),
        ("episodic_k", req.episodic_k),
        ("recent_turns", req.recent_turns),
    ] {
        if v > l.context_items_max {
            return Err(ServerError::invalid(
                None,
                f,
                format!("{v} is over the limit of {}", l.context_items_max),
            ));
        }
    }
    let context = app.read(move || session.context(&req)).await?;
    let rendered = context.render();
    Ok(Json(ContextResponse { context, rendered }))
}

/// Options of an evaluation.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EvalParams {
    /// Cutoff for cases that do not set their own `k` (default 10).
    #[param(minimum = 1)]
    pub k: Option<usize>,
}

/// Evaluation results.
#[derive(Debug, Serialize, ToSchema)]
pub struct EvalResponse {
    /// Means over the cases naming relevant ids (`scored`): recall@k,
    /// precision@k, MRR; the forbidden-hit rate over all cases.
    #[schema(value_type = Object)]
    pub overall: Summary,
    /// The same per slice.
    #[schema(value_type = Object)]
    pub slices: BTreeMap<String, Summary>,
    /// Per case.
    #[schema(value_type = Vec<Object>)]
    pub cases: Vec<CaseResult>,
    /// Cases whose recall failed, with the reason.
    pub errors: Vec<String>,
}

/// Evaluate recall on cases in the `engram eval` format (NDJSON body, one
/// case per line), run as the key's principal: recall@k, precision@k,
/// MRR and the forbidden-hit rate. Cases may not name a tenant or
/// principal.
#[utoipa::path(
    post, path = "/v1/eval", tag = "query", params(EvalParams),
    request_body(content = String, description = "Eval cases, one JSON object per line (docs/ingest.md)", content_type = "application/x-ndjson"),
    responses((status = 200, body = EvalResponse), (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn eval(
    State(app): State<Shared>,
    caller: Caller,
    Params(p): Params<EvalParams>,
    RawBody(bytes, _held): RawBody,
) -> ServerResult<Json<EvalResponse>> {
    let session = caller.session(&app, Operation::Read).await?;
    let l = &app.cfg.limits;
    let k_default = p.k.unwrap_or(10.min(l.k_max));
    if k_default == 0 || k_default > l.k_max {
        return Err(ServerError::invalid(
            None,
            "k",
            format!("{k_default} is out of range 1..={}", l.k_max),
        ));
    }
    let text = body_text(&bytes)?;
    let cases = parse_session_cases(text).map_err(|e| {
        let line = e.line;
        let mut err = line_error(e, None, Some(line));
        // a case refused for a field of its own (`k` 0, a bad `mode`) is
        // named by its id too, when its line holds one
        if let ServerError::Invalid { details, .. } = &mut err {
            let case_id = text
                .lines()
                .nth(line.saturating_sub(1))
                .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .and_then(|v| v.get("case_id")?.as_str().map(str::to_string));
            if let (Some(id), Some(d)) = (case_id, details.as_object_mut()) {
                d.insert("case_id".into(), id.into());
            }
        }
        err
    })?;
    if cases.is_empty() {
        return Err(ServerError::invalid(None, "body", "no cases"));
    }
    if cases.len() > l.eval_cases_max {
        return Err(ServerError::invalid(
            None,
            "body",
            format!(
                "{} cases, over the limit of {}",
                cases.len(),
                l.eval_cases_max
            ),
        ));
    }
    let k_max = l.k_max;
    // Past the request's deadline the caller has had its 503: the cases
    // left are not run, so the query slot is free again (an eval of many
    // cases at a large k costs minutes of CPU, and held its slot to the
    // end: a few such requests kept every tenant's reads out).
    let timeout_ms = l.request_timeout_ms;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
    // ... nor once its client has gone (this future dropped mid-await)
    let abandoned = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(abandoned.clone());
    let resp = app
        .read(move || {
            // Every case checked as it would run before any runs (as
            // `engram eval` does): a bad case stops the request with
            // nothing measured, naming its id and line.
            let mut requests = Vec::with_capacity(cases.len());
            for c in &cases {
                let k = if c.k_from_case {
                    c.request.k
                } else {
                    k_default
                };
                // (422 with the case's line in `details`, as a line
                // that does not parse gets)
                let bad = |field: &str, reason: String| {
                    Ok(Err(ServerError::Invalid {
                        code: "invalid_input",
                        message: format!(
                            "invalid {field}: case {} (line {}): {reason} (nothing was run)",
                            c.case_id, c.line
                        ),
                        details: serde_json::json!({
                            "line": c.line,
                            "case_id": c.case_id,
                            "field": field
                        }),
                    }))
                };
                if k == 0 || k > k_max {
                    return bad("k", format!("{k} is out of range 1..={k_max}"));
                }
                let mut req = c.request.clone();
                req.k = k;
                if let Err(e) = session.check_recall(&req) {
                    return bad("case", e.to_string());
                }
                requests.push(req);
            }
            let mut results = Vec::new();
            let mut errors = Vec::new();
            for (c, req) in cases.iter().zip(&requests) {
                if abandoned.load(Ordering::Relaxed) || std::time::Instant::now() >= deadline {
                    return Ok(Err(ServerError::Timeout {
                        after_ms: timeout_ms,
                        idle: false,
                    }));
                }
                match session.recall(req) {
                    Ok(r) => results.push(score_resolved(
                        c,
                        &crate::recall_cmd::relevant_of(&session, c),
                        req.k,
                        &r.hits,
                    )),
                    Err(e) => errors.push(format!("case {} (line {}): {e}", c.case_id, c.line)),
                }
            }
            let (overall, slices) = summarize(&results);
            Ok(Ok(EvalResponse {
                overall,
                slices,
                cases: results,
                errors,
            }))
        })
        .await??;
    Ok(Json(resp))
}

/// A query-language statement: its text or its JSON form (the AST), with
/// parameters bound to its `$name`s. Tenant and principal come from the
/// key; the body may not name them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    /// The statement text (`FIND ...` or `TRACE ...`; docs/query-language.md).
    pub query: Option<String>,
    /// The statement as its JSON form (instead of `query`).
    #[schema(value_type = Option<Object>)]
    pub ast: Option<serde_json::Value>,
    /// Parameters: `{"qvec": [0.1, ...], "since": "2025-03-01T00:00:00Z"}`.
    #[schema(value_type = Option<Object>)]
    pub params: Option<serde_json::Value>,
}

/// The rows of a statement.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueryResponse {
    /// Column names, in `RETURN` order.
    pub columns: Vec<String>,
    /// One object per result.
    #[schema(value_type = Vec<Object>)]
    pub rows: Vec<serde_json::Map<String, serde_json::Value>>,
    /// `EXPLAIN FIND ...`: the manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub manifest: Option<Manifest>,
    /// The statement in canonical form.
    pub statement: String,
    /// `TRACE` only, when true: the lineage goes on past the engine's limit
    /// of 32 hops on a side the statement lists (records further away are
    /// not listed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

fn query_error(e: engram_query::lang::QueryError) -> ServerError {
    match e {
        engram_query::lang::QueryError::Engine(e) => e.into(),
        other => {
            let errors = other.to_json();
            let first = errors.get(0).cloned().unwrap_or_default();
            ServerError::Invalid {
                code: "query_error",
                message: other.to_string(),
                details: serde_json::json!({
                    "line": first.get("line"),
                    "column": first.get("column"),
                    "expected": first.get("expected"),
                    "hint": first.get("hint"),
                    "errors": errors,
                }),
            }
        }
    }
}

/// Run a query-language statement (`FIND ...` or `TRACE ...`) as the key's
/// principal: eligibility filters before any ranking, named retrievers,
/// fusion, lineage; `EXPLAIN` adds the manifest. Send the text in `query`
/// or the JSON form in `ast`, and values in `params`.
#[utoipa::path(
    post, path = "/v1/query", tag = "query",
    request_body(content = QueryBody, content_type = "application/json"),
    responses(
        (status = 200, body = QueryResponse),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody, description = "query_error: the statement is wrong; details hold line, column, expected, hint"),
        (status = 429, body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn query(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(body, _held): JsonBody<QueryBody>,
) -> ServerResult<Json<QueryResponse>> {
    use engram_query::lang::{Params as QParams, QueryExt, Statement};
    let session = caller.session(&app, Operation::Read).await?;
    let params = match &body.params {
        None => QParams::new(),
        Some(v) => QParams::from_json(&v.to_string()).map_err(|e| {
            query_error(engram_query::lang::QueryError::Language {
                errors: vec![e],
                text: None,
            })
        })?,
    };
    let out = match (body.query, body.ast) {
        (Some(text), None) => app
            .read(move || Ok(session.query(&text, &params)))
            .await?
            .map_err(query_error)?,
        (None, Some(ast)) => {
            // (the field at fault by its path in the tree: `ast.find.limit`)
            let stmt: Statement = serde_path_to_error::deserialize(ast).map_err(|e| {
                let field = match e.path().to_string() {
                    p if p == "." => "ast".to_string(),
                    p => format!("ast.{p}"),
                };
                ServerError::invalid(None, field, e.into_inner().to_string())
            })?;
            app.read(move || Ok(session.query_ast(&stmt, &params)))
                .await?
                .map_err(query_error)?
        }
        _ => {
            return Err(ServerError::invalid(
                None,
                "query",
                "give exactly one of `query` (the statement text) and `ast` (its JSON form)",
            ));
        }
    };
    Ok(Json(QueryResponse {
        columns: out.columns,
        rows: out.rows,
        manifest: out.manifest,
        statement: out.statement,
        truncated: out.truncated,
    }))
}

/// Sets its flag when dropped: with the handler's future, so a blocking
/// loop learns that nobody waits for its answer any more.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
