//! Store operations: statistics, verification and online backup.
//!
//! The store key acts as the store operator (`Actor::Operator` of the
//! authorization matrix): store-wide statistics, verify, backup. A tenant
//! key asking for statistics gets its own tenant's counts, which the
//! matrix gives to the tenant admin only. This module must never show one
//! tenant anything of another.

use std::path::PathBuf;

use axum::Json;
use axum::extract::State;
use engram_engine::authz::Operation;
use engram_engine::maintenance::BackupReport;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::app::{Queue, Shared};
use crate::http::auth::Caller;
use crate::http::body::JsonBody;
use crate::http::error::{ErrorBody, ServerError, ServerResult};

/// Statistics: with the store key, of the whole store (per tenant, log,
/// indexes); with a tenant admin key, of its tenant only.
#[utoipa::path(
    get, path = "/v1/stats", tag = "admin",
    responses(
        (status = 200, description = "Store statistics (store key) or the tenant's counts (tenant admin)", body = Object),
        (status = 403, description = "A tenant key that is not the tenant admin", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn stats(
    State(app): State<Shared>,
    caller: Caller,
) -> ServerResult<Json<serde_json::Value>> {
    let to_json = |v: Result<serde_json::Value, serde_json::Error>| {
        v.map_err(|e| ServerError::Internal {
            detail: e.to_string(),
        })
    };
    if caller.is_operator() {
        caller.operator(Operation::StoreStats)?;
        let db = app.bind().await;
        let s = app.read(move || db.stats()).await?;
        return to_json(serde_json::to_value(s)).map(Json);
    }
    let session = caller.session(&app, Operation::TenantStats).await?;
    let s = app.read(move || session.tenant_stats()).await?;
    to_json(serde_json::to_value(s)).map(Json)
}

/// What verify found.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerifyResponse {
    /// No problem found.
    pub ok: bool,
    /// Log frames whose checksums were checked.
    pub frames: u64,
    /// Records of the log checked against the in-memory state.
    pub records: u64,
    /// Problems, one line each.
    pub problems: Vec<String>,
}

/// Check every log frame's checksums and payload, and the loaded state's records
/// and client vectors against the log, on the open store (store key).
#[utoipa::path(
    get, path = "/v1/verify", tag = "admin",
    responses((status = 200, body = VerifyResponse), (status = 403, body = ErrorBody)),
    security(("api_key" = []))
)]
pub async fn verify(
    State(app): State<Shared>,
    caller: Caller,
) -> ServerResult<Json<VerifyResponse>> {
    caller.operator(Operation::Verify)?;
    let db = app.bind().await;
    let r = app.read(move || db.verify()).await?;
    Ok(Json(VerifyResponse {
        ok: r.ok(),
        frames: r.frames,
        records: r.records,
        problems: r.problems,
    }))
}

/// Where to write a backup.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// An absolute directory on the server's machine, missing or empty,
    /// outside the store.
    pub dest: String,
}

/// What a backup wrote.
#[derive(Debug, Serialize, ToSchema)]
pub struct BackupResponse {
    /// Last log sequence number in the backup.
    pub last_lsn: u64,
    /// When it was taken (ms since the epoch).
    pub created_at_ms: i64,
    /// Records at the time.
    pub records: u64,
    /// Deleted records whose content was left out (as tombstones).
    pub purged: u64,
}

impl From<BackupReport> for BackupResponse {
    fn from(r: BackupReport) -> Self {
        BackupResponse {
            last_lsn: r.last_lsn,
            created_at_ms: r.created_at_ms,
            records: r.records,
            purged: r.purged,
        }
    }
}

/// Back up the open store (log, settings, ledger) into a new directory
/// on the server's machine (store key; one backup at a time). Writes go on
/// meanwhile. API keys are not part of a backup.
#[utoipa::path(
    post, path = "/v1/backup", tag = "admin",
    request_body = BackupRequest,
    responses(
        (status = 200, body = BackupResponse),
        (status = 403, body = ErrorBody), (status = 422, body = ErrorBody),
        (status = 429, description = "A backup or compaction is already running", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn backup(
    State(app): State<Shared>,
    caller: Caller,
    JsonBody(req, _held): JsonBody<BackupRequest>,
) -> ServerResult<Json<BackupResponse>> {
    caller.operator(Operation::Backup)?;
    if req.dest.contains('\0') {
        return Err(ServerError::invalid(
            None,
            "dest",
            "must not contain a NUL character (no file name holds one)",
        ));
    }
    let dest = PathBuf::from(&req.dest);
    if !dest.is_absolute() {
        return Err(ServerError::invalid(
            None,
            "dest",
            "must be an absolute path on the server's machine",
        ));
    }
    let db = app.bind().await;
    // (a backup runs to its end when its client goes away, and is counted)
    let r = app
        .run_counted(Queue::Backup, "backup", move || db.backup(&dest))
        .await?;
    Ok(Json(r.into()))
}

/// What a compaction did.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompactResponse {
    /// Records whose content was purged (now tombstones).
    pub purged: usize,
    /// Records deleted now because their retention period passed.
    pub retention_deleted: usize,
    /// Deleted records kept because of a legal hold.
    pub held: usize,
    /// Log segments rewritten.
    pub segments_rewritten: usize,
    /// Log bytes before.
    pub log_bytes_before: u64,
    /// Log bytes after.
    pub log_bytes_after: u64,
}

/// Compact the store while it serves (store key): records past their
/// retention period are deleted, then the content of every deleted record
/// not under a legal hold is purged from the log and from all derived
/// state. The compacted copy is built while reads and writes go on; writes
/// then pause (waiting, or 429 with `Retry-After`) until the swap, and
/// reads pause only for the swap itself. One backup or compaction at a
/// time.
#[utoipa::path(
    post, path = "/v1/compact", tag = "admin",
    responses(
        (status = 200, body = CompactResponse),
        (status = 403, body = ErrorBody),
        (status = 429, description = "A backup or compaction is already running", body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn compact(
    State(app): State<Shared>,
    caller: Caller,
    _: crate::http::body::NoBody,
) -> ServerResult<Json<CompactResponse>> {
    caller.operator(Operation::Compact)?;
    let r = app.compact().await?;
    Ok(Json(CompactResponse {
        purged: r.purged,
        retention_deleted: r.retention_deleted,
        held: r.held,
        segments_rewritten: r.segments_rewritten,
        log_bytes_before: r.log_bytes_before,
        log_bytes_after: r.log_bytes_after,
    }))
}
