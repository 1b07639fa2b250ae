//! The routes of `engram serve` and the middleware around them: request
//! ids, the request log and metrics, the early body-size check, and the
//! per-request deadline.
//!
//! Handlers are thin: each authenticates ([`Caller`](crate::http::auth::Caller)), passes the gate
//! for its [`Operation`](engram_engine::authz::Operation), builds one
//! engine request, runs it through a bounded queue ([`App`](crate::http::app::App)) and maps the
//! result. Endpoints, by module: [`records`] (append, bulk, get, history,
//! trace, list), [`lifecycle`] (correct, expire, delete, retract, review,
//! grant, revoke, retention, holds), [`query`] (recall, context, eval),
//! [`admin`] (stats, verify, backup, compact), [`health`] (`/healthz`, `/readyz`,
//! `/metrics`, `/v1/openapi.json`).
//!
//! This module must never hold store logic: what a request means is the
//! engine's, what a caller may do is the matrix's.

use std::time::{Duration, Instant};

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use engram_engine::RecordRef;
use serde::de::DeserializeOwned;
use serde_json::json;
use tower::ServiceBuilder;

use crate::http::app::Shared;
use crate::http::error::{ErrorCode, LoggedDetail, ServerError};
use crate::http::logging;
use crate::http::metrics::method_label;

pub mod admin;
pub mod bulk;
pub mod health;
pub mod lifecycle;
pub mod query;
pub mod records;

/// Route template of bulk ingest (it has its own body limit).
pub const BULK_ROUTE: &str = "/v1/records/bulk";

/// The endpoints that read query parameters (each through [`Params`],
/// which refuses unknown ones); any other `/v1` endpoint given a query
/// string answers 400 `bad_request`.
const TAKES_QUERY: [(&str, &str); 4] = [
    ("GET", "/v1/records"),
    ("POST", BULK_ROUTE),
    ("DELETE", "/v1/records/{ref}"),
    ("POST", "/v1/eval"),
];

/// The router of the server over `app`.
pub fn router(app: Shared) -> Router {
    let timeout_ms = app.cfg.limits.request_timeout_ms;
    let v1 = Router::new()
        .route("/v1/records", post(records::append).get(records::list))
        .route(BULK_ROUTE, post(bulk::ingest))
        .route(
            "/v1/records/{ref}",
            get(records::get).delete(lifecycle::delete),
        )
        .route("/v1/records/{ref}/history", get(records::history))
        .route("/v1/records/{ref}/trace", get(records::trace))
        .route("/v1/records/{ref}/correct", post(lifecycle::correct))
        .route("/v1/records/{ref}/expire", post(lifecycle::expire))
        .route("/v1/records/{ref}/retract", post(lifecycle::retract))
        .route("/v1/review", get(lifecycle::review_queue))
        .route("/v1/review/rules", post(lifecycle::review_rule))
        .route("/v1/review/{ref}/approve", post(lifecycle::approve))
        .route("/v1/review/{ref}/reject", post(lifecycle::reject))
        .route("/v1/access/grant", post(lifecycle::grant))
        .route("/v1/access/revoke", post(lifecycle::revoke))
        .route("/v1/retention", post(lifecycle::retention))
        .route("/v1/holds", post(lifecycle::hold))
        .route("/v1/recall", post(query::recall))
        .route("/v1/query", post(query::query))
        .route("/v1/context", post(query::context))
        .route("/v1/eval", post(query::eval))
        .route("/v1/stats", get(admin::stats))
        .route("/v1/verify", get(admin::verify))
        .route("/v1/openapi.json", get(health::openapi))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed);
    // Store maintenance takes as long as the store is big: no deadline
    // (one at a time, store key only).
    let maintenance = Router::new()
        .route("/v1/backup", post(admin::backup))
        .route("/v1/compact", post(admin::compact))
        .method_not_allowed_fallback(method_not_allowed);
    v1.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(
                move |_: tower::BoxError| async move {
                    ServerError::Timeout {
                        after_ms: timeout_ms,
                        idle: false,
                    }
                },
            ))
            .timeout(Duration::from_millis(timeout_ms)),
    )
    .merge(maintenance)
    .layer(axum::middleware::from_fn_with_state(app.clone(), observe))
    .with_state(app)
}

async fn no_route(req: Request) -> ServerError {
    ServerError::NoRoute {
        method: req.method().to_string(),
        path: req.uri().path().chars().take(200).collect(),
    }
}

async fn method_not_allowed(req: Request) -> ServerError {
    ServerError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.uri().path().chars().take(200).collect(),
    }
}

/// Request id, early size check, log line and metrics of every request.
/// The log line of a request whose client went away before its answer
/// (the request's future is dropped; what the engine had started, a
/// backup say, goes on to its end): status 499, as the request log
/// promises one line per request.
struct Unanswered {
    app: Shared,
    request_id: String,
    method: &'static str,
    route: String,
    started: Instant,
    armed: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let latency = self.started.elapsed();
        self.app
            .metrics
            .request(&self.route, self.method, 499, latency.as_secs_f64());
        logging::log(
            "info",
            "request",
            &[
                ("request_id", json!(self.request_id)),
                ("method", json!(self.method)),
                ("route", json!(self.route)),
                ("status", json!(499)),
                ("latency_us", json!(latency.as_micros() as u64)),
                ("error", json!("client_closed")),
            ],
        );
    }
}

async fn observe(State(app): State<Shared>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id = app.next_request_id();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let declared_len = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = crate::http::body::body_limit(&app.cfg.limits, &route);
    // (a client that goes away before its answer still gets its line)
    let mut unanswered = Unanswered {
        app: app.clone(),
        request_id: request_id.clone(),
        method,
        route: route.clone(),
        started,
        armed: true,
    };
    let client = req
        .extensions()
        .get::<crate::http::answer::Peer>()
        .map(|p| p.0);
    let refusable = crate::http::answer::refusable(method, &route);
    let coding = unsupported_coding(req.headers());
    let resp = match declared_len {
        // framing first: a coding the body is not decoded from (the HTTP
        // layer takes `gzip, chunked` as chunked and would hand on the
        // compressed bytes as the body)
        _ if coding.is_some() => ServerError::bad_request(
            "transfer-encoding",
            format!(
                "{}: send the body as it is, or chunked once",
                coding.unwrap_or_default()
            ),
        )
        .into_response(),
        // refused before a byte of the body is read
        Some(n) if n > limit => ServerError::TooLarge { limit_bytes: limit }.into_response(),
        // a write runs only while its answer will have room (its answer
        // is never dropped once it has run: `http::answer`)
        _ if !refusable && !app.answers.open_for_write(client) => crate::http::answer::busy(&app),
        _ => next.run(req).await,
    };
    // (an answer waiting for its client holds its room until read)
    let mut resp = crate::http::answer::hold(&app, resp, client, refusable);
    unanswered.armed = false;
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let status = resp.status().as_u16();
    let latency = started.elapsed();
    app.metrics
        .request(&route, method, status, latency.as_secs_f64());
    let mut fields = vec![
        ("request_id", json!(request_id)),
        ("method", json!(method)),
        ("route", json!(route)),
        ("status", json!(status)),
        ("latency_us", json!(latency.as_micros() as u64)),
    ];
    if let Some(code) = resp.extensions().get::<ErrorCode>() {
        app.metrics.rejected(code.0);
        fields.push(("error", json!(code.0)));
    }
    let level = if status >= 500 { "error" } else { "info" };
    if let Some(LoggedDetail(d)) = resp.extensions_mut().remove::<LoggedDetail>() {
        fields.push(("detail", json!(d)));
    }
    logging::log(level, "request", &fields);
    resp
}

/// What is wrong with the transfer codings of `headers`, unless they are
/// none or `chunked` alone (the HTTP layer refuses a list without
/// `chunked` last, and reads the body of one with it as chunked once,
/// whatever comes before: `gzip, chunked` or `chunked, chunked` would hand
/// on coded bytes as the body).
fn unsupported_coding(headers: &axum::http::HeaderMap) -> Option<String> {
    let codings: Vec<&str> = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .collect();
    match codings.as_slice() {
        [] => None,
        [one] if one.eq_ignore_ascii_case("chunked") => None,
        _ => Some(
            // (an empty element, which the HTTP layer refuses at the end
            // of the list, is refused anywhere)
            match codings.iter().find(|c| !c.eq_ignore_ascii_case("chunked")) {
                Some(&"") => "an empty transfer coding in the list".to_string(),
                Some(c) => format!(
                    "the coding '{}' is not supported",
                    c.chars().take(40).collect::<String>()
                ),
                None => "chunked is given more than once".to_string(),
            },
        ),
    }
}

/// A record reference from the path: an internal id, `id:<id>`,
/// `ext:<external id>`, or an external id (percent-encode `/` as `%2F`).
#[derive(Debug)]
pub struct RefPath(pub RecordRef);

impl FromRequestParts<Shared> for RefPath {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, Self::Rejection> {
        // A `%` that starts no escape is bad encoding, not part of the id
        // (the decoder would keep it as it is and answer 404).
        if !percent_escapes_well_formed(parts.uri.path()) {
            return Err(ServerError::bad_request(
                "ref",
                "a '%' not followed by two hex digits; write '%' itself as %25",
            ));
        }
        let axum::extract::Path(raw) =
            axum::extract::Path::<String>::from_request_parts(parts, app)
                .await
                .map_err(|e| ServerError::bad_request("ref", e.body_text()))?;
        RecordRef::parse_text(&raw)
            .map(RefPath)
            .map_err(|e| ServerError::bad_request("ref", e))
    }
}

/// Whether every `%` of `path` starts an escape (`%` and two hex digits).
fn percent_escapes_well_formed(path: &str) -> bool {
    let b = path.as_bytes();
    b.iter().enumerate().all(|(i, &c)| {
        c != b'%'
            || b.get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    })
}

/// `s` with its escapes decoded (each `%` starts one: see
/// [`percent_escapes_well_formed`]).
fn percent_decoded(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let byte = (b[i] == b'%')
            .then(|| b.get(i + 1..i + 3))
            .flatten()
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match byte {
            Some(x) => {
                out.push(x);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// What is wrong with the encoding of a query string, if anything: a `%`
/// that starts no escape (the decoder would keep it as it is: `kind=%ZZ`
/// listed records of a kind `%ZZ`), or escapes that decode to bytes that
/// are not UTF-8 (the decoder would put U+FFFD in their place: `kind=%FF`
/// listed records of a kind `\u{fffd}`).
fn query_encoding_fault(query: &str) -> Option<&'static str> {
    if !percent_escapes_well_formed(query) {
        return Some("a '%' not followed by two hex digits; write '%' itself as %25");
    }
    query
        .split('&')
        .flat_map(|pair| pair.split('='))
        .any(|part| std::str::from_utf8(&percent_decoded(part)).is_err())
        .then_some("percent-escapes that decode to bytes that are not UTF-8")
}

/// The query string of a `/v1` request, checked once its caller is known
/// (so a request without a key is 401, and a wrong method 405, whatever
/// its query string): a parameter naming the tenant or the principal is
/// refused as such on every endpoint, whether it reads a query string or
/// not (as in a body); any parameter of an endpoint that reads none is a
/// mistake (a misspelt one, or one that hopes to choose the tenant),
/// never silently ignored. `HEAD` reads what `GET` does.
pub(crate) fn check_query(parts: &Parts) -> Result<(), ServerError> {
    if parts.uri.query().is_none_or(str::is_empty) {
        return Ok(());
    }
    if let Some(field) = session_param(&parts.uri) {
        return Err(ServerError::SessionField {
            item: None,
            line: None,
            field,
        });
    }
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map_or("", |m| m.as_str());
    let method = match parts.method.as_str() {
        "HEAD" => "GET",
        m => m,
    };
    if TAKES_QUERY.contains(&(method, route)) {
        match query_encoding_fault(parts.uri.query().unwrap_or("")) {
            Some(fault) => Err(ServerError::bad_request("query string", fault)),
            None => Ok(()),
        }
    } else {
        Err(ServerError::bad_request(
            "query",
            "this endpoint takes no query parameters",
        ))
    }
}

/// `check_query` for an endpoint that takes no caller (the OpenAPI
/// document).
#[derive(Debug)]
pub struct QueryChecked;

impl FromRequestParts<Shared> for QueryChecked {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, _: &Shared) -> Result<Self, Self::Rejection> {
        check_query(parts).map(|()| QueryChecked)
    }
}

/// The first query parameter of `uri` that names the tenant or the
/// principal (percent-encoded or not), if any.
fn session_param(uri: &axum::http::Uri) -> Option<String> {
    let axum::extract::Query(pairs) =
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?;
    pairs
        .into_iter()
        .map(|(k, _)| k)
        .find(|k| crate::http::body::SESSION_FIELDS.contains(&k.as_str()))
}

/// Query parameters deserialized into `T`, with errors in the JSON shape.
#[derive(Debug)]
pub struct Params<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<Shared> for Params<T> {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, app)
            .await
            .map(|q| Params(q.0))
            .map_err(|e| query_param_error(&e.body_text()))
    }
}

/// A query string's deserialization error, naming the parameter at fault
/// when the deserializer says which (`limit: invalid digit found in
/// string`), without the extractor's own wording around it. A known
/// parameter with a value of the wrong form (`limit=abc`, `batch=-1`,
/// `limit=2^64`) is a field error, 422, as is one out of its range
/// (`limit=0`): one status for a bad value, however far off it is. An
/// unknown parameter, or a query string that does not decode, is 400.
fn query_param_error(text: &str) -> ServerError {
    let text = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(text);
    match text.split_once(": ") {
        Some((name, reason))
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
        {
            if reason.starts_with("unknown field") {
                ServerError::bad_request(name, format!("not a parameter here ({reason})"))
            } else {
                ServerError::invalid(None, name, format!("not a valid value ({reason})"))
            }
        }
        _ => ServerError::bad_request("query string", text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_percent_that_starts_no_escape_is_bad_encoding() {
        for ok in ["/v1/records/a%2Fb", "/v1/records/%FF", "/v1/records/plain"] {
            assert!(percent_escapes_well_formed(ok), "{ok}");
        }
        for bad in [
            "/v1/records/%ZZ",
            "/v1/records/a%2",
            "/v1/records/%",
            "/v1/records/%g1",
        ] {
            assert!(!percent_escapes_well_formed(bad), "{bad}");
        }
    }

    #[test]
    fn a_query_string_decodes_to_utf8_or_is_refused() {
        for ok in [
            "kind=note",
            "kind=caf%C3%A9",
            "kind=%25FF",
            "a=1&b=%E2%9C%93",
            "k=+",
        ] {
            assert_eq!(query_encoding_fault(ok), None, "{ok}");
        }
        for bad in ["kind=%FF", "kind=caf%C3", "%C3=x", "a=1&b=%80"] {
            assert!(
                query_encoding_fault(bad).is_some_and(|f| f.contains("UTF-8")),
                "{bad}"
            );
        }
        assert!(query_encoding_fault("kind=%ZZ").is_some_and(|f| f.contains("%25")));
        assert_eq!(
            percent_decoded("a%2"),
            b"a%2",
            "a cut escape is kept as it is"
        );
        assert_eq!(percent_decoded("%+F%41"), b"%+FA", "no sign in an escape");
    }

    #[test]
    fn query_parameter_errors_name_the_parameter() {
        let e = query_param_error(
            "Failed to deserialize query string: limit: invalid digit found in string",
        );
        assert_eq!(
            e.to_string(),
            ServerError::invalid(
                None,
                "limit",
                "not a valid value (invalid digit found in string)"
            )
            .to_string()
        );
        assert_eq!(e.status(), axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        let e = query_param_error(
            "Failed to deserialize query string: unknown field `x`, expected `kind`",
        );
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
        // as the deserializer says it: an unknown parameter is no bad value
        let e = query_param_error(
            "Failed to deserialize query string: colour: unknown field `colour`, expected `kind`",
        );
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{e}");
        assert!(e.to_string().contains("colour"), "{e}");
        assert!(!e.to_string().contains("Failed to deserialize"), "{e}");
    }
}
