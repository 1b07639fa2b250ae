//! Lifecycle operations: correct, expire, delete, retract a record;
//! the review queue; grants and revocations of labels and roles;
//! retention periods; legal holds. Each is a log entry, written by the
//! engine after the authorization matrix allowed it for the key's
//! principal.
//!
//! This module must never change a record itself nor decide authority: it
//! builds the engine call and maps its result.

use axum::Json;
use axum::extract::State;
use engram_engine::authz::Operation;
use engram_engine::lifecycle::OpResult;
use engram_engine::time::{parse_retention_period, parse_rfc3339};
use engram_engine::{Record, RecordRef};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::app::{Queue, Shared};
use crate::http::auth::Caller;
use crate::http::body::{JsonBody, OptionalJsonBody, RawBody, body_text, json_object};
use crate::http::error::{ErrorBody, ServerError, ServerResult};
use crate::http::routes::records::{ItemResult, parse_record};
use crate::http::routes::{Params, RefPath};

/// What a lifecycle operation did.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct OpResponse {
    /// Id of the operation (itself a record of the log).
    pub op_id: String,
    /// Its log sequence number; durable when this is sent.
    pub lsn: u64,
    /// Records whose status changed (for a delete: everything removed).
    pub affected: Vec<String>,
    /// What the operation did not change that the caller may expect it to
    /// (a revoke from a principal whose API key carries the label or role),
    /// or did that the caller may not expect (a tenant-wide revoke of a
    /// label nothing carries yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<OpResult> for OpResponse {
    fn from(r: OpResult) -> Self {
        OpResponse {
            op_id: r.op_id.to_string(),
            lsn: r.lsn,
            affected: r.affected.iter().map(ToString::to_string).collect(),
            note: r.note,
        }
    }
}

async fn op(
    app: &Shared,
    name: &'static str,
    f: impl FnOnce() -> engram_engine::Result<OpResult> + Send + 'static,
) -> ServerResult<Json<OpResponse>> {
    let r = app.run_counted(Queue::Write, name, f).await?;
    Ok(Json(r.into()))
}

/// A correction and the record it stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct CorrectResponse {
    /// The append result of the correction.
    pub result: ItemResult,
    /// The new version (docs/ingest.md); `null` when it carries a label
    /// the key does not hold (the correction is stored all the same, as
    /// `result` says).
    #[schema(value_type = Option<Object>)]
    pub record: Option<Record>,
}

/// Correct a record: the body (one record in the ingest format, without
/// tenant) supersedes it.
///
/// The correction keeps the corrected record's access labels, and its
/// scope and external id when the body gives none; `replace_access: true`
/// replaces the labels instead (dropping one needs the tenant admin).
/// History keeps both versions; derivatives of the old one go stale.
#[utoipa::path(
    post, path = "/v1/records/{ref}/correct", tag = "lifecycle",
    params(("ref" = String, Path, description = "The record to correct")),
    request_body(content = Object, description = "One record in the ingest format", content_type = "application/json"),
    responses(
        (status = 200, body = CorrectResponse),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn correct(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(target): RefPath,
    RawBody(bytes, _held): RawBody,
) -> ServerResult<Json<CorrectResponse>> {
    let session = caller.session(&app, Operation::Correct).await?;
    let text = body_text(&bytes)?;
    json_object(text)?;
    let mut rec = parse_record(text, None)?;
    let (result, record) = app
        .run_counted(Queue::Write, "correct", move || {
            let target_id = session.resolve(&target)?;
            match &rec.supersedes {
                None => rec.supersedes = Some(RecordRef::Id(target_id)),
                Some(other) if session.resolve(other)? == target_id => {}
                Some(other) => {
                    return Err(engram_engine::EngineError::invalid(
                        "supersedes",
                        format!("names {other}, not the record in the path"),
                    ));
                }
            }
            // one record, not a batch: its errors name no item
            let mut res = session.append(vec![rec]).map_err(|e| e.with_item(None))?;
            let r = res.remove(0);
            // Stored and durable from here: what follows only shows it, and
            // a version the key may not read is not shown (never an error,
            // which would read as if nothing had been stored).
            let record = session.get(&RecordRef::Id(r.id)).ok();
            Ok((r, record))
        })
        .await?;
    Ok(Json(CorrectResponse {
        result: ItemResult::new(0, result),
        record,
    }))
}

/// Body of an expiry.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpireRequest {
    /// End of validity (RFC 3339): after it the record is historical.
    pub at: String,
}

/// Set a record's end of validity: afterwards it is historical (still
/// found with `valid_at` in the past).
#[utoipa::path(
    post, path = "/v1/records/{ref}/expire", tag = "lifecycle",
    params(("ref" = String, Path, description = "The record")),
    request_body = ExpireRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "invalid_state: the record is deleted", body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn expire(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(target): RefPath,
    JsonBody(req, _held): JsonBody<ExpireRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Expire).await?;
    let at = parse_rfc3339(&req.at).map_err(|e| ServerError::invalid(None, "at", e.to_string()))?;
    op(&app, "expire", move || session.expire(&target, at)).await
}

/// Why a record is deleted.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteParams {
    /// Why (recorded in the ledger).
    pub reason: Option<String>,
}

/// Delete a record, every version of its correction chain and everything
/// derived from them. They are ineligible at once; a compaction purges
/// their bytes (`POST /v1/compact` with the store key, or `engram compact`
/// on a stopped store).
#[utoipa::path(
    delete, path = "/v1/records/{ref}", tag = "lifecycle",
    params(("ref" = String, Path, description = "The record"), DeleteParams),
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "invalid_state: the record is already deleted", body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn delete(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(target): RefPath,
    Params(p): Params<DeleteParams>,
    _: crate::http::body::NoBody,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Delete).await?;
    op(&app, "delete", move || {
        session.delete(&target, p.reason.as_deref())
    })
    .await
}

/// A reason or a note.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteRequest {
    /// Why (retract) or the reviewer's note (approve, reject).
    pub reason: Option<String>,
    /// The same as `reason`, under the name a reviewer may use; give one
    /// of the two.
    pub note: Option<String>,
}

impl NoteRequest {
    /// The text given, under either name.
    fn text(self) -> ServerResult<Option<String>> {
        match (self.reason, self.note) {
            (Some(_), Some(_)) => Err(ServerError::invalid(
                None,
                "note",
                "give one of reason and note, not both",
            )),
            (r, n) => Ok(r.or(n)),
        }
    }
}

/// Withdraw a semantic record; its dependents go stale.
#[utoipa::path(
    post, path = "/v1/records/{ref}/retract", tag = "lifecycle",
    params(("ref" = String, Path, description = "The record")),
    request_body = NoteRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn retract(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(target): RefPath,
    OptionalJsonBody(req, _held): OptionalJsonBody<NoteRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Retract).await?;
    let text = req.text()?;
    op(&app, "retract", move || {
        session.retract(&target, text.as_deref())
    })
    .await
}

/// Review candidates.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReviewQueue {
    /// Candidates of the key's tenant it may read, oldest first.
    #[schema(value_type = Vec<Object>)]
    pub candidates: Vec<Record>,
}

/// The review queue of the key's tenant (needs the reviewer role).
#[utoipa::path(
    get, path = "/v1/review", tag = "lifecycle",
    responses((status = 200, body = ReviewQueue), (status = 403, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn review_queue(
    State(app): State<Shared>,
    caller: Caller,
) -> ServerResult<Json<ReviewQueue>> {
    let session = caller.session(&app, Operation::Review).await?;
    let candidates = app.read(move || session.review_queue()).await?;
    Ok(Json(ReviewQueue { candidates }))
}

/// Approve a review candidate (needs the reviewer role).
#[utoipa::path(
    post, path = "/v1/review/{ref}/approve", tag = "lifecycle",
    params(("ref" = String, Path, description = "The candidate")),
    request_body = NoteRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn approve(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(target): RefPath,
    OptionalJsonBody(req, _held): OptionalJsonBody<NoteRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Review).await?;
    let text = req.text()?;
    op(&app, "approve", move || {
        session.approve(&target, text.as_deref())
    })
    .await
}

/// Reject a review candidate (needs the reviewer role).
#[utoipa::path(
    post, path = "/v1/review/{ref}/reject", tag = "lifecycle",
    params(("ref" = String, Path, description = "The candidate")),
    request_body = NoteRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn reject(
    State(app): State<Shared>,
    caller: Caller,
    RefPath(target): RefPath,
    OptionalJsonBody(req, _held): OptionalJsonBody<NoteRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Review).await?;
    let text = req.text()?;
    op(&app, "reject", move || {
        session.reject(&target, text.as_deref())
    })
    .await
}

/// A grant or revocation. (The principal it is about is the `grantee`:
/// no body names the acting principal.)
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessRequest {
    /// The principal granted to or revoked from; without it, the label for
    /// everyone in the tenant (a tenant-wide revocation, or lifting one).
    pub grantee: Option<String>,
    /// An access label.
    pub label: Option<String>,
    /// A role: `reviewer` or `admin` (needs a grantee).
    pub role: Option<String>,
}

/// Grant a label or role (tenant admin). Applies from the next read on.
#[utoipa::path(
    post, path = "/v1/access/grant", tag = "lifecycle",
    request_body = AccessRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn grant(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(req, _held): JsonBody<AccessRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Grant).await?;
    op(&app, "grant", move || {
        session
            .grant(
                req.grantee.as_deref(),
                req.label.as_deref(),
                req.role.as_deref(),
            )
            .map_err(grantee_field)
    })
    .await
}

/// Revoke a label or role (tenant admin): from a grantee, or the label
/// from everyone in the tenant. Applies from the next read on, to
/// summaries and caches too.
#[utoipa::path(
    post, path = "/v1/access/revoke", tag = "lifecycle",
    request_body = AccessRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn revoke(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(req, _held): JsonBody<AccessRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Revoke).await?;
    let tenant = session.principal().tenant().to_string();
    let (grantee, label, role) = (req.grantee.clone(), req.label.clone(), req.role.clone());
    // A key's labels and role hold on top of the store's grants: a revoke
    // from one principal leaves what its keys carry (a tenant-wide revoke
    // of a label reaches keys too). Said beside the answer, or beside the
    // refusal of a revoke the store's grants do not hold.
    let keys_note = grantee.as_ref().and_then(|p| {
        let keys = app
            .keys
            .carrying(&tenant, p, label.as_deref(), role.as_deref());
        // (a role is granted to principals only: no tenant-wide revoke)
        let or_tenant_wide = if label.is_some() {
            ", or revoke the label tenant-wide"
        } else {
            ""
        };
        (!keys.is_empty()).then(|| {
            format!(
                "principal '{p}' still holds it through API key(s) {} (a key's labels and role \
                 hold on top of the store's grants): revoke those keys (`engram keys revoke \
                 ID`){or_tenant_wide}",
                keys.join(", ")
            )
        })
    });
    let refusal_note = keys_note.clone();
    let mut answer = op(&app, "revoke", move || {
        session
            .revoke(
                req.grantee.as_deref(),
                req.label.as_deref(),
                req.role.as_deref(),
            )
            .map_err(grantee_field)
            .map_err(|e| match (e, refusal_note) {
                (
                    engram_engine::EngineError::InvalidInput {
                        item,
                        field,
                        reason,
                    },
                    Some(note),
                ) if ["label", "role", "grantee"].contains(&field.as_str()) => {
                    engram_engine::EngineError::InvalidInput {
                        item,
                        field,
                        reason: format!("{reason}; {note}"),
                    }
                }
                (e, _) => e,
            })
    })
    .await?;
    if keys_note.is_some() {
        answer.0.note = keys_note;
    }
    Ok(answer)
}

/// The engine calls the principal a grant is about `principal`; this body
/// calls it `grantee` (`principal` is the caller's, from the key).
fn grantee_field(e: engram_engine::EngineError) -> engram_engine::EngineError {
    match e {
        engram_engine::EngineError::InvalidInput {
            item,
            field,
            reason,
        } if field == "principal" => engram_engine::EngineError::InvalidInput {
            item,
            field: "grantee".into(),
            reason,
        },
        e => e,
    }
}

/// A retention period.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetentionRequest {
    /// Retention class (e.g. `ephemeral`, `standard`, `audit`).
    pub class: String,
    /// `90s`, `15m`, `6h`, `30d`, `7y`, or `forever`.
    pub period: String,
}

/// Set the retention period of a class in the key's tenant (tenant admin).
#[utoipa::path(
    post, path = "/v1/retention", tag = "lifecycle",
    request_body = RetentionRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn retention(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(req, _held): JsonBody<RetentionRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Retention).await?;
    let period = parse_retention_period(&req.period)
        .map_err(|why| ServerError::invalid(None, "period", why))?;
    op(&app, "retention", move || {
        session.set_retention(&req.class, period)
    })
    .await
}

/// A review rule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewRuleRequest {
    /// Assertion kind: `observation`, `hypothesis`, `fact`, `preference`,
    /// `note`, `instruction`, `policy` or `procedure`.
    pub kind: String,
    /// Writer kind: `user`, `system` or `model`.
    pub writer: String,
    /// Whether such assertions wait for review (`false`: they apply at
    /// once).
    pub review: bool,
}

/// Set whether an assertion kind written by a writer kind waits for review
/// in the key's tenant (tenant admin). `GET /v1/stats` lists the rules.
#[utoipa::path(
    post, path = "/v1/review/rules", tag = "lifecycle",
    request_body = ReviewRuleRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn review_rule(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(req, _held): JsonBody<ReviewRuleRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::ReviewRule).await?;
    op(&app, "review_rule", move || {
        session.set_review_rule_named(&req.kind, &req.writer, req.review)
    })
    .await
}

/// A legal hold.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    /// `tenant`, `user:<id>`, `conversation:<id>`, `agent:<id>` or `label:<label>`.
    pub scope: String,
    /// Place (true, the default) or lift (false) the hold.
    #[serde(default = "yes")]
    pub on: bool,
}

fn yes() -> bool {
    true
}

/// Place or lift a legal hold on a scope (tenant admin): held records are
/// not purged by compaction or retention.
#[utoipa::path(
    post, path = "/v1/holds", tag = "lifecycle",
    request_body = HoldRequest,
    responses((status = 200, body = OpResponse), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn hold(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(req, _held): JsonBody<HoldRequest>,
) -> ServerResult<Json<OpResponse>> {
    let session = caller.session(&app, Operation::Hold).await?;
    op(&app, "hold", move || session.hold(&req.scope, req.on)).await
}
