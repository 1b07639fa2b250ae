//! Records: append a batch, list, get, history, trace.
//!
//! An append body is a JSON array of records in the ingest format
//! (`docs/ingest.md`), each parsed by `engram_query::parse_line`; the batch
//! is atomic and acknowledged after its fsync. This module must never
//! decide anything about a record: the engine validates and admits it.

use axum::Json;
use axum::extract::State;
use engram_engine::authz::Operation;
use engram_engine::time::parse_query_time;
use engram_engine::trace::Trace;
use engram_engine::{AppendOutcome, AppendResult, ListFilter, NewRecord, Record, RecordType};
use engram_query::LineError;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use crate::http::app::Shared;
use crate::http::auth::Caller;
use crate::http::body::{RawBody, SESSION_FIELDS, body_text};
use crate::http::error::{ErrorBody, ServerError, ServerResult};
use crate::http::routes::{Params, RefPath};

/// The outcome of one record of an append.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct ItemResult {
    /// Position of the record in the request (0-based).
    pub item: usize,
    /// The record's id.
    pub id: String,
    /// Its external id.
    pub external_id: Option<String>,
    /// `created`, or `duplicate`: the same external id and content were
    /// already stored, nothing was written.
    pub outcome: String,
    /// Admission status: `active`; `approved` for entities and relations;
    /// `candidate` for records needing review.
    pub status: String,
    /// Log sequence number of its frame (of the stored record for duplicates).
    pub lsn: u64,
    /// What the engine decided beyond what the record said (inherited
    /// labels, lowered access).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ItemResult {
    /// The public form of an engine result.
    pub fn new(item: usize, r: AppendResult) -> Self {
        ItemResult {
            item,
            id: r.id.to_string(),
            external_id: r.external_id,
            outcome: match r.outcome {
                AppendOutcome::Created => "created",
                AppendOutcome::Duplicate => "duplicate",
            }
            .to_string(),
            status: r.status.name().to_string(),
            lsn: r.lsn,
            notes: r.notes,
        }
    }
}

/// What an append stored: one result per record, in request order. Every
/// record is on disk when this is sent.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct AppendResponse {
    /// Records stored now.
    pub created: usize,
    /// Records already stored with the same external id and content.
    pub duplicates: usize,
    /// Per record.
    pub results: Vec<ItemResult>,
}

/// A parse error of a JSON object of the body: at batch position `item`
/// (`None`: the body is one object), or at `line` of an NDJSON body.
pub fn line_error(e: LineError, item: Option<usize>, line: Option<usize>) -> ServerError {
    if let Some((l, column)) = e.json_at {
        // Not JSON at all (nesting too deep, a number out of range, a lone
        // surrogate): the same `invalid_json` as any other syntax error.
        // On an NDJSON line the line is the body's, the column the line's.
        let reason = e
            .reason
            .strip_prefix("not valid JSON: ")
            .unwrap_or(&e.reason);
        return ServerError::BadJson {
            item,
            line: line.unwrap_or(l),
            column,
            reason: crate::http::error::strip_position(reason),
        };
    }
    if e.field == "-" {
        return ServerError::BadRequest {
            item,
            line,
            field: "body".into(),
            reason: e.reason,
        };
    }
    // top-level, or in an eval case's scope
    let bare = e.field.strip_prefix("scope.").unwrap_or(&e.field);
    if SESSION_FIELDS.contains(&bare) || bare == "tenant_id" {
        return ServerError::SessionField {
            item,
            line,
            field: e.field,
        };
    }
    match (item, line) {
        (None, Some(l)) => ServerError::Invalid {
            code: "invalid_input",
            message: format!("line {l}: invalid {}: {}", e.field, e.reason),
            details: serde_json::json!({"line": l, "field": e.field}),
        },
        _ => ServerError::invalid(item, e.field, e.reason),
    }
}

/// Parses one ingest object (the text of one array element) at position
/// `item`; it may not name a tenant or principal.
pub fn parse_record(text: &str, item: Option<usize>) -> ServerResult<NewRecord> {
    parse_record_at(text, item, None)
}

/// [`parse_record`] for an array element (`item`) or an NDJSON line
/// (`line`, 1-based). A `tenant` key is refused whatever its value
/// (`null` too), as every other body refuses it.
pub fn parse_record_at(
    text: &str,
    item: Option<usize>,
    line: Option<usize>,
) -> ServerResult<NewRecord> {
    let l = engram_query::parse_line(text, line.or(item).unwrap_or(0))
        .map_err(|e| line_error(e, item, line))?;
    if l.names_tenant {
        return Err(ServerError::SessionField {
            item,
            line,
            field: "tenant".into(),
        });
    }
    Ok(l.record)
}

/// Append a batch of records.
///
/// The body is a JSON array of records in the ingest format
/// (docs/ingest.md) without `tenant`: the key's tenant and principal are
/// used. The batch is atomic: any invalid record rejects it whole (the
/// error names its `item` and `field`) and nothing is stored. The
/// response comes after the batch is durable (fsync). Re-sending records
/// with the same external ids and content is a no-op reported as
/// `duplicate`.
#[utoipa::path(
    post, path = "/v1/records", tag = "records",
    request_body(content = Vec<Object>, description = "Records in the ingest format (docs/ingest.md), without tenant", content_type = "application/json"),
    responses(
        (status = 200, description = "Every record is durable", body = AppendResponse),
        (status = 400, description = "Not a JSON array, malformed JSON, or an item names tenant/principal", body = ErrorBody),
        (status = 409, description = "External id taken by different content, record already corrected, or a correction of a deleted record (invalid_state)", body = ErrorBody),
        (status = 413, description = "Body over limits.body_bytes_max", body = ErrorBody),
        (status = 422, description = "An invalid record (details name item and field)", body = ErrorBody),
        (status = 429, description = "Writer queue full (Retry-After)", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn append(
    State(app): State<Shared>,
    caller: Caller,
    RawBody(bytes, _held): RawBody,
) -> ServerResult<Json<AppendResponse>> {
    let session = caller.session(&app, Operation::Append).await?;
    let text = body_text(&bytes)?;
    let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
        // a wrong shape is found at the first byte (`{` is not `[`); a body
        // that is not JSON at all is told so, wherever its fault is
        match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Err(syntax) if !syntax.is_data() => ServerError::bad_json(&syntax, None),
            _ if e.is_data() => {
                ServerError::bad_request("body", "expected a JSON array of records")
            }
            _ => ServerError::bad_json(&e, None),
        }
    })?;
    let max = app.cfg.limits.batch_records_max;
    if items.len() > max {
        return Err(ServerError::Invalid {
            code: "limit_exceeded",
            message: format!(
                "records in the batch is {}, over the limit of {max}",
                items.len()
            ),
            details: serde_json::json!({"what": "records in the batch", "limit": max, "got": items.len()}),
        });
    }
    let records = items
        .iter()
        .enumerate()
        .map(|(i, raw)| parse_record(raw.get(), Some(i)))
        .collect::<ServerResult<Vec<_>>>()?;
    let n = records.len();
    let results = app.append(n, move || session.append(records)).await?;
    let mut resp = AppendResponse {
        created: 0,
        duplicates: 0,
        results: Vec::with_capacity(n),
    };
    for (i, r) in results.into_iter().enumerate() {
        match r.outcome {
            AppendOutcome::Created => resp.created += 1,
            AppendOutcome::Duplicate => resp.duplicates += 1,
        }
        resp.results.push(ItemResult::new(i, r));
    }
    Ok(Json(resp))
}

/// Filters of a listing.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this record type (`event`, `entity`, `relation`, `assertion`, `summary`).
    pub record: Option<String>,
    /// Only records that occurred at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Only records that occurred at or before this time (RFC 3339).
    pub until: Option<String>,
    /// Keep superseded versions (default true).
    pub include_superseded: Option<bool>,
    /// At most this many (default 100, at most limits.list_limit_max).
    #[param(minimum = 1)]
    pub limit: Option<usize>,
    /// Only records after this log position: the `next_after_lsn` of the
    /// page before (the next page of the same listing).
    pub after_lsn: Option<u64>,
}

/// Records the key may read, in log order.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecordList {
    /// The records (see docs/ingest.md for their fields).
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<Record>,
    /// When the page is full: the `lsn` of its last record, to pass as
    /// `after_lsn` for the next page (null when this page is the last).
    pub next_after_lsn: Option<u64>,
}

/// List records of the key's tenant that it may read, in log order.
#[utoipa::path(
    get, path = "/v1/records", tag = "records", params(ListParams),
    responses(
        (status = 200, body = RecordList),
        (status = 400, description = "Unknown or malformed parameter", body = ErrorBody),
        (status = 422, description = "Invalid parameter value", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn list(
    State(app): State<Shared>,
    caller: Caller,
    Params(p): Params<ListParams>,
) -> ServerResult<Json<RecordList>> {
    let session = caller.session(&app, Operation::Read).await?;
    let time = |f: &str, v: &Option<String>| -> ServerResult<Option<i64>> {
        v.as_deref()
            .map(|t| parse_query_time(t).map_err(|e| ServerError::invalid(None, f, e.to_string())))
            .transpose()
    };
    let max = app.cfg.limits.list_limit_max;
    let limit = p.limit.unwrap_or(100.min(max));
    if limit == 0 || limit > max {
        return Err(ServerError::invalid(
            None,
            "limit",
            format!("{limit} is out of range 1..={max}"),
        ));
    }
    let record = p
        .record
        .as_deref()
        .map(|r| {
            RecordType::parse(r).ok_or_else(|| {
                ServerError::invalid(
                    None,
                    "record",
                    format!("'{r}' is not one of event, entity, relation, assertion, summary"),
                )
            })
        })
        .transpose()?;
    let filter = ListFilter {
        since: time("since", &p.since)?,
        until: time("until", &p.until)?,
        kind: p.kind,
        record,
        include_superseded: p.include_superseded.unwrap_or(true),
        limit,
        after_lsn: p.after_lsn,
        bytes_max: LIST_PAGE_BYTES_MAX,
    };
    let (records, cut) = app.read(move || session.list_page(&filter)).await?;
    // a full page may have a next one (an empty next page ends it), and
    // so may one its bytes ended early
    let full = records.len() == limit || cut;
    let next_after_lsn = full.then(|| records.last().map(|r| r.lsn)).flatten();
    Ok(Json(RecordList {
        records,
        next_after_lsn,
    }))
}

/// A listing's page ends once its records' text and data reach this many
/// bytes (16 MiB; after at least one record), however many `limit` asks:
/// a thousand records of a mebibyte each would need gigabytes in memory.
pub const LIST_PAGE_BYTES_MAX: usize = 16 << 20;

/// Get a record.
///
/// `ref` is an internal id, `id:<id>`, `ext:<external id>`, or an external
/// id (percent-encoded). A record of another tenant, one the key may not
/// read, and a missing one are all answered with the same 404.
#[utoipa::path(
    get, path = "/v1/records/{ref}", tag = "records",
    params(("ref" = String, Path, description = "Internal id, id:<id>, ext:<external id>, or external id")),
    responses(
        (status = 200, description = "The record (docs/ingest.md)", body = Object),
        (status = 404, description = "No such record visible to the key", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn get(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(r): RefPath,
) -> ServerResult<Json<Record>> {
    let session = caller.session(&app, Operation::Read).await?;
    Ok(Json(app.read(move || session.get(&r)).await?))
}

/// Every version of a record.
#[derive(Debug, Serialize, ToSchema)]
pub struct History {
    /// Versions of the correction chain the key may read, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub versions: Vec<Record>,
}

/// Every version of a record's correction chain, oldest first.
#[utoipa::path(
    get, path = "/v1/records/{ref}/history", tag = "records",
    params(("ref" = String, Path, description = "Internal id, id:<id>, ext:<external id>, or external id")),
    responses((status = 200, body = History), (status = 404, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn history(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(r): RefPath,
) -> ServerResult<Json<History>> {
    let session = caller.session(&app, Operation::Read).await?;
    let versions = app.read(move || session.history(&r)).await?;
    Ok(Json(History { versions }))
}

/// The lineage of a record: its sources up to the events, and everything
/// built on it, as far as the key may read.
#[utoipa::path(
    get, path = "/v1/records/{ref}/trace", tag = "records",
    params(("ref" = String, Path, description = "Internal id, id:<id>, ext:<external id>, or external id")),
    responses(
        (status = 200, description = "Nodes and edges of the lineage graph", body = Object),
        (status = 404, body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn trace(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(r): RefPath,
) -> ServerResult<Json<Trace>> {
    let session = caller.session(&app, Operation::Read).await?;
    Ok(Json(app.read(move || session.trace(&r)).await?))
}
