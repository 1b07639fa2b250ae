//! Endpoints without a tenant: liveness (`/healthz`), readiness
//! (`/readyz`), metrics (`/metrics`) and the API description
//! (`/v1/openapi.json`).
//!
//! None needs a key, except `/metrics` when `metrics_auth = "admin"`. This
//! module must never expose anything of a tenant: metrics carry no tenant,
//! principal, key or record content.

use axum::Json;
use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram_engine::authz::Operation;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::http::app::Shared;
use crate::http::auth::authenticate;
use crate::http::config::MetricsAuth;
use crate::http::error::{ErrorBody, ServerError, ServerResult};
use crate::http::openapi::ApiDoc;

/// Liveness or readiness.
#[derive(Debug, Serialize, ToSchema)]
pub struct Status {
    /// `ok` (alive) or `ready`.
    pub status: &'static str,
}

/// The process is up (no key needed).
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Status)))]
pub async fn healthz() -> Json<Status> {
    Json(Status { status: "ok" })
}

/// The store is open and the server accepts requests (no key needed); 503
/// while it shuts down, once the log writer stopped after an I/O failure
/// (writes are refused until a restart), once applying the log to memory
/// failed (every call is refused until a restart), while the key file
/// leaves no key valid (damaged, unreadable, removed), and while the disk is full (an
/// append failed for it in the last 10 s and none succeeded since).
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses((status = 200, body = Status), (status = 503, body = ErrorBody))
)]
pub async fn readyz(State(app): State<Shared>) -> ServerResult<Json<Status>> {
    if !app.is_ready() {
        return Err(ServerError::Unavailable {
            reason: "the server is shutting down",
            detail: "readyz during shutdown".into(),
        });
    }
    // a key file that leaves no key valid refuses every request: not
    // ready (a balancer would keep sending traffic to a server that
    // answers each with 401)
    if let Some(why) = app.keys.file_problem() {
        // (said in the log once, as a request's key check says it: the
        // probe may be the first to read the file since it changed)
        app.key_problem(why.clone());
        return Err(ServerError::Unavailable {
            reason: "the key file is unusable: every key is refused until it is fixed",
            detail: why,
        });
    }
    let db = app.bind().await;
    // a read of the store's state proves it is open and applying
    let (failure, full, applying) = crate::http::app::run_blocking(move || {
        db.applied_lsn();
        Ok((db.write_failure(), db.disk_full(), db.apply_failure()))
    })
    .await?;
    // nor is one that stopped applying its log (every call fails until
    // the store is opened again)
    if let Some(why) = applying {
        return Err(ServerError::Unavailable {
            reason: "the store stopped applying its log after a failure; restart the server",
            detail: why,
        });
    }
    // a store whose log writer stopped refuses every write until a restart:
    // not ready (a load balancer moves traffic, an orchestrator restarts)
    if let Some(why) = failure {
        return Err(ServerError::Unavailable {
            reason: "the store's log writer stopped after an I/O failure; restart the server",
            detail: why,
        });
    }
    // A full disk refuses every append until space is freed, but stops
    // nothing: not ready while appends keep failing for it, ready again
    // once one succeeds, or once none was tried for a while (a balancer
    // that moved the traffic away sends some back to find out).
    if let Some((ago, why)) = full
        && ago < DISK_FULL_NOT_READY
    {
        return Err(ServerError::Unavailable {
            reason: "the disk is full: every append is refused until space is freed",
            detail: why,
        });
    }
    Ok(Json(Status { status: "ready" }))
}

/// How long after an append failed for a full disk `/readyz` answers 503
/// (unless an append succeeded since).
const DISK_FULL_NOT_READY: std::time::Duration = std::time::Duration::from_secs(10);

/// Metrics in the Prometheus text format: requests and latency per route
/// template and status, append batch sizes and latency, group commits and
/// fsync time, writer queue depth, records, vectors, indexing lag,
/// lifecycle operations, rejected and throttled requests. No tenant ids.
#[utoipa::path(
    get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", body = String, content_type = "text/plain"),
        (status = 401, description = "Only with metrics_auth = \"admin\" and no key", body = ErrorBody),
        (status = 403, description = "Only with metrics_auth = \"admin\" and a tenant key (metrics need the store key)", body = ErrorBody),
    )
)]
pub async fn metrics(State(app): State<Shared>, parts: Parts) -> Response {
    // Metrics are counts of the whole store: with `metrics_auth =
    // "admin"`, the matrix's store-stats cell decides (the store key only).
    if app.cfg.metrics_auth == MetricsAuth::Admin {
        if let Err(e) = authenticate(&app, &parts).and_then(|c| c.operator(Operation::StoreStats)) {
            return e.into_response();
        }
    }
    let text = app.metrics.render(&app.snapshot());
    let mut resp = (StatusCode::OK, text).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// This API's OpenAPI 3.1 description (no key needed).
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "health",
    responses((status = 200, description = "OpenAPI document", body = Object))
)]
pub async fn openapi(_: super::QueryChecked) -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
