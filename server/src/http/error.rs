//! The one error type of the server, and its HTTP form.
//!
//! Every failure of `engram serve` and `engram keys` is a [`ServerError`]:
//! setup failures (configuration, key file, listener) end the command;
//! request failures become one JSON shape,
//!
//! ```json
//! {"error": {"code": "invalid_input", "message": "item 2: invalid kind: ...", "details": {"item": 2, "field": "kind"}}}
//! ```
//!
//! with a status from 400/401/403/404/409/413/422/429/500/503. The mapping
//! of [`EngineError`] variants is in [`ServerError::from`] and documented in
//! `docs/server.md`.
//!
//! This module must never put a file path, a key, a request body or
//! anything of another tenant into a response: storage failures are
//! reported by kind, and the detail goes to the server log only (see
//! [`LoggedDetail`]).

use std::path::PathBuf;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use engram_engine::EngineError;
use serde_json::{Value, json};

/// Errors of the server. The doc of each variant says whether a client
/// should **retry**, **fix** its request, or whether the operator must act.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The body is not valid JSON (or a line of an NDJSON body is not).
    /// Fix the request. 400.
    #[error("{}not valid JSON at line {line} column {column}: {reason}", item_prefix(*item))]
    BadJson {
        /// Position of the element or line at fault, when the body is a batch.
        item: Option<usize>,
        /// 1-based line in the text at fault.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser says.
        reason: String,
    },
    /// The request is malformed in its shape (wrong top-level type, bad
    /// path or query parameter). Fix the request. 400.
    #[error("{}{field}: {reason}", at_prefix(*item, *line))]
    BadRequest {
        /// Position in a batch, if any.
        item: Option<usize>,
        /// Line of an NDJSON body, if any.
        line: Option<usize>,
        /// The parameter or field at fault.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The body names the tenant or the principal: they come from the API
    /// key only. Fix the request. 400.
    #[error(
        "{}{field}: a request cannot name a tenant or principal; they come from the API key",
        at_prefix(*item, *line)
    )]
    SessionField {
        /// Position in a batch, if any.
        item: Option<usize>,
        /// Line of an NDJSON body, if any.
        line: Option<usize>,
        /// `tenant` or `principal` (with its path, e.g. `scope.tenant`).
        field: String,
    },
    /// No valid API key. Fix the credentials. 401.
    #[error("{reason}")]
    Unauthorized {
        /// What is missing or wrong (never the key itself).
        reason: &'static str,
    },
    /// The authorization matrix refuses. Use a key with the right role. 403.
    #[error("{message}")]
    Forbidden {
        /// The operation refused.
        action: String,
        /// The full explanation.
        message: String,
    },
    /// No record with this reference is visible to the key: missing,
    /// another tenant's, or one the key may not read, all alike. 404.
    #[error("no such record in this tenant")]
    NotFound,
    /// No such route. 404.
    #[error("no route {method} {path}")]
    NoRoute {
        /// Method.
        method: String,
        /// Path.
        path: String,
    },
    /// The route exists for other methods (the answer's `Allow` header
    /// lists them). 405.
    #[error("method {method} not allowed on {path} (the Allow header lists the methods it takes)")]
    MethodNotAllowed {
        /// Method.
        method: String,
        /// Path.
        path: String,
    },
    /// The request conflicts with stored state (external id taken,
    /// record already corrected, lifecycle state). Do not retry as is. 409.
    #[error("{message}")]
    Conflict {
        /// `external_id_conflict`, `already_superseded` or `invalid_state`.
        code: &'static str,
        /// The engine's explanation.
        message: String,
        /// Structured context.
        details: Value,
    },
    /// The body is over its size limit. Send less, or split it. 413.
    #[error("request body is over the limit of {limit_bytes} bytes")]
    TooLarge {
        /// The limit.
        limit_bytes: u64,
    },
    /// The client went away before it sent the whole body: nobody reads
    /// the answer, which is logged with status 499 and `client_closed`, as
    /// a request dropped before its answer is.
    #[error("the client closed the connection before the end of the body")]
    ClientClosed,
    /// A field of a well-formed request is invalid. Fix it. 422.
    #[error("{message}")]
    Invalid {
        /// `invalid_input`, `limit_exceeded` or `ambiguous_reference`.
        code: &'static str,
        /// The explanation, naming item, line and field.
        message: String,
        /// Structured context (`item`, `line`, `field`, ...).
        details: Value,
    },
    /// A bounded queue is full. Retry after `retry_after_s`. 429.
    #[error(
        "too many {} in flight; retry after {retry_after_s} s",
        busy_noun(what)
    )]
    Busy {
        /// `appends`, `queries` or `backups` (backups and compactions
        /// share one slot), or `answer_bytes` (answers built and not yet
        /// read by their clients: `http::answer`).
        what: &'static str,
        /// Seconds to wait.
        retry_after_s: u64,
    },
    /// The request ran past its deadline. A write may or may not have
    /// been stored: retry (appends are idempotent by external id). 503.
    #[error("{}", if *idle {
        format!("the request body sent nothing for {after_ms} ms (body_idle_timeout_ms)")
    } else {
        format!("the request did not finish within {after_ms} ms")
    })]
    Timeout {
        /// The deadline.
        after_ms: u64,
        /// Whether it was the body falling silent, not the request's
        /// deadline, that ended it.
        idle: bool,
    },
    /// The store cannot serve (closing, storage failure). Retry later; the
    /// operator should read the server log. 503.
    #[error("{reason}")]
    Unavailable {
        /// What clients may know.
        reason: &'static str,
        /// The full error, for the server log only.
        detail: String,
    },
    /// A bug or damaged data. The operator must act (server log). 500.
    #[error("internal error; see the server log")]
    Internal {
        /// The full error, for the server log only.
        detail: String,
    },
    /// The configuration is invalid. Fix the file or the flags.
    #[error("{}: {reason}", path.display())]
    Config {
        /// The configuration file (or `--listen` for the flag).
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key file cannot be read or written, or is damaged. Fix or
    /// restore the file (keys are created again with `engram keys create`).
    #[error("key file {}: {reason}", path.display())]
    KeyFile {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A key command named something that does not exist or is not valid.
    #[error("{0}")]
    KeyUsage(String),
    /// The listener could not be set up. Choose another address.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Opening or closing the store failed (outside any request).
    #[error(transparent)]
    Engine(EngineError),
}

fn item_prefix(item: Option<usize>) -> String {
    item.map(|i| format!("item {i}: ")).unwrap_or_default()
}

fn at_prefix(item: Option<usize>, line: Option<usize>) -> String {
    match (item, line) {
        (Some(i), _) => format!("item {i}: "),
        (None, Some(l)) => format!("line {l}: "),
        (None, None) => String::new(),
    }
}

/// Result alias.
pub type ServerResult<T> = Result<T, ServerError>;

/// The error shape of every failed request.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// One error.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable code: invalid_json, bad_request, session_field, unauthorized,
    /// forbidden, not_found, no_route, method_not_allowed,
    /// external_id_conflict, already_superseded, invalid_state,
    /// payload_too_large, invalid_input, limit_exceeded,
    /// ambiguous_reference, query_error, busy, timeout, unavailable,
    /// internal; and, for a line of a bulk ingest's results only,
    /// batch_rejected (its batch was refused for another line).
    pub code: String,
    /// What is wrong, naming the item, line or field at fault.
    pub message: String,
    /// Structured context: `item`, `line`, `column`, `field`, limits.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
}

/// The error code of a failed response, for the request log and the
/// metrics.
#[derive(Clone, Copy, Debug)]
pub struct ErrorCode(pub &'static str);

/// The full text of a server-side failure, attached to the response so the
/// request log can record it; never sent to the client.
#[derive(Clone, Debug)]
pub struct LoggedDetail(pub String);

impl ServerError {
    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        use ServerError as E;
        match self {
            E::BadJson { .. } | E::BadRequest { .. } | E::SessionField { .. } => {
                StatusCode::BAD_REQUEST
            }
            E::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            E::Forbidden { .. } => StatusCode::FORBIDDEN,
            E::NotFound | E::NoRoute { .. } => StatusCode::NOT_FOUND,
            E::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            E::Conflict { .. } => StatusCode::CONFLICT,
            E::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            E::ClientClosed => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            E::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            E::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            E::Timeout { .. } | E::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            E::KeyUsage(_) => StatusCode::BAD_REQUEST,
            E::Internal { .. }
            | E::Config { .. }
            | E::KeyFile { .. }
            | E::Listen { .. }
            | E::Engine(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        use ServerError as E;
        match self {
            E::BadJson { .. } => "invalid_json",
            E::BadRequest { .. } | E::KeyUsage(_) => "bad_request",
            E::SessionField { .. } => "session_field",
            E::Unauthorized { .. } => "unauthorized",
            E::Forbidden { .. } => "forbidden",
            E::NotFound => "not_found",
            E::NoRoute { .. } => "no_route",
            E::MethodNotAllowed { .. } => "method_not_allowed",
            E::Conflict { code, .. } | E::Invalid { code, .. } => code,
            E::TooLarge { .. } => "payload_too_large",
            E::ClientClosed => "client_closed",
            E::Busy { .. } => "busy",
            E::Timeout { .. } => "timeout",
            E::Unavailable { .. } => "unavailable",
            E::Internal { .. }
            | E::Config { .. }
            | E::KeyFile { .. }
            | E::Listen { .. }
            | E::Engine(_) => "internal",
        }
    }

    /// Structured context for the client.
    pub fn details(&self) -> Value {
        use ServerError as E;
        let mut d = match self {
            E::BadJson {
                item, line, column, ..
            } => json!({"item": item, "line": line, "column": column}),
            E::BadRequest {
                item, line, field, ..
            } => json!({"item": item, "line": line, "field": field}),
            E::SessionField { item, line, field } => {
                json!({"item": item, "line": line, "field": field})
            }
            E::Forbidden { action, .. } => json!({"action": action}),
            E::Conflict { details, .. } | E::Invalid { details, .. } => details.clone(),
            E::TooLarge { limit_bytes } => json!({"limit_bytes": limit_bytes}),
            E::Busy {
                what,
                retry_after_s,
            } => json!({"queue": what, "retry_after_s": retry_after_s}),
            E::Timeout { after_ms, .. } => json!({"deadline_ms": after_ms}),
            _ => json!({}),
        };
        // Where in the request (item, line, column, field) is left out when
        // it does not apply; a documented field whose value is "none"
        // (`existing`, `by`, `hint`) stays, as `null`.
        if let Value::Object(m) = &mut d {
            m.retain(|k, v| {
                !(v.is_null() && matches!(k.as_str(), "item" | "line" | "column" | "field"))
            });
        }
        d
    }

    /// The message clients see: server-side failures are described by
    /// kind only.
    pub fn public_message(&self) -> String {
        match self {
            ServerError::Config { .. }
            | ServerError::KeyFile { .. }
            | ServerError::Listen { .. }
            | ServerError::Engine(_) => "internal error; see the server log".to_string(),
            e => e.to_string(),
        }
    }

    /// What the server log should record beyond the public message.
    fn log_detail(&self) -> Option<String> {
        match self {
            ServerError::Unavailable { detail, .. } | ServerError::Internal { detail } => {
                Some(detail.clone())
            }
            ServerError::Config { .. }
            | ServerError::KeyFile { .. }
            | ServerError::Listen { .. }
            | ServerError::Engine(_) => Some(self.to_string()),
            _ => None,
        }
    }

    /// A field error of a request (422), optionally at a batch item.
    pub fn invalid(
        item: Option<usize>,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        let field = field.into();
        let reason = reason.into();
        ServerError::Invalid {
            code: "invalid_input",
            message: format!("{}invalid {field}: {reason}", item_prefix(item)),
            details: json!({"item": item, "field": field}),
        }
    }

    /// A malformed parameter (400).
    pub fn bad_request(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ServerError::BadRequest {
            item: None,
            line: None,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A JSON syntax error of `serde_json`, at batch item `item` if any.
    pub fn bad_json(e: &serde_json::Error, item: Option<usize>) -> Self {
        let reason = strip_position(&engram_query::strict::json_error_reason(e));
        ServerError::BadJson {
            item,
            line: e.line(),
            column: e.column(),
            reason,
        }
    }

    /// Attaches a batch position to an error about one item.
    pub fn at_item(self, idx: usize) -> Self {
        match self {
            ServerError::BadJson {
                line,
                column,
                reason,
                ..
            } => ServerError::BadJson {
                item: Some(idx),
                line,
                column,
                reason,
            },
            ServerError::BadRequest {
                field,
                reason,
                line,
                ..
            } => ServerError::BadRequest {
                item: Some(idx),
                line,
                field,
                reason,
            },
            ServerError::SessionField { field, line, .. } => ServerError::SessionField {
                item: Some(idx),
                line,
                field,
            },
            other => other,
        }
    }
}

/// `serde_json` ends its messages with " at line L column C"; the position
/// is reported in fields of its own.
pub(crate) fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

impl From<EngineError> for ServerError {
    fn from(e: EngineError) -> Self {
        use EngineError as E;
        let message = e.to_string();
        let code = e.code();
        match e {
            E::InvalidInput { item, field, .. } => ServerError::Invalid {
                code,
                message,
                details: json!({"item": item, "field": field}),
            },
            E::LimitExceeded {
                item,
                what,
                limit,
                got,
            } => ServerError::Invalid {
                code,
                message,
                details: json!({"item": item, "what": what, "limit": limit, "got": got}),
            },
            E::DimensionMismatch {
                item,
                field,
                model,
                expected,
                got,
            } => ServerError::Invalid {
                code,
                message,
                details: json!({"item": item, "field": field, "model": model, "expected": expected, "got": got}),
            },
            E::SupersedesCycle { item, .. } => ServerError::Invalid {
                code,
                message,
                details: json!({"item": item, "field": "supersedes"}),
            },
            E::UnknownModel { available, .. } => ServerError::Invalid {
                code,
                message,
                details: json!({"field": "model", "available": available}),
            },
            E::AmbiguousReference {
                item,
                field,
                reference,
                ..
            } => {
                // (item and field only for a reference of a record in a
                // batch; a read's reference has neither)
                let mut details = json!({"reference": reference});
                if let Some(i) = item {
                    details["item"] = json!(i);
                }
                if let Some(f) = field {
                    details["field"] = json!(f);
                }
                ServerError::Invalid {
                    code,
                    message,
                    details,
                }
            }
            E::NotFound { .. } => ServerError::NotFound,
            E::ExternalIdConflict {
                item,
                external_id,
                existing,
            } => ServerError::Conflict {
                code,
                message,
                details: json!({"item": item, "external_id": external_id, "existing": existing.map(|e| e.to_string())}),
            },
            E::AlreadySuperseded { item, target, by } => ServerError::Conflict {
                code,
                message,
                details: json!({"item": item, "target": target.to_string(), "by": by.map(|b| b.to_string())}),
            },
            E::InvalidState { action, target, .. } => ServerError::Conflict {
                code,
                message,
                details: json!({"action": action, "target": target.to_string()}),
            },
            E::Forbidden { action, .. } => ServerError::Forbidden { action, message },
            E::Closed => ServerError::Unavailable {
                reason: "the store is closing",
                detail: message,
            },
            E::ReadOnly { .. } => ServerError::Unavailable {
                reason: "the store is read-only",
                detail: message,
            },
            // the store stopped applying its log (a derived file that could
            // not be written on a full disk, no memory left): every call
            // fails until the server is restarted, which recovers it
            E::Background { .. } => ServerError::Unavailable {
                reason: "the store stopped after a failure in the background; restart the server (nothing acknowledged is lost)",
                detail: message,
            },
            E::Storage(ref s) if s.is_damage() => ServerError::Internal { detail: message },
            E::Storage(_) => ServerError::Unavailable {
                reason: "the store could not complete the operation (storage failure); retry later",
                detail: message,
            },
            _ => ServerError::Internal { detail: message },
        }
    }
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = json!({"error": {
            "code": self.code(),
            "message": self.public_message(),
            "details": self.details(),
        }});
        let mut resp = (status, axum::Json(body)).into_response();
        let h = resp.headers_mut();
        match &self {
            ServerError::Busy { retry_after_s, .. } => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            ServerError::Timeout { .. } | ServerError::Unavailable { .. } => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(1u64));
            }
            ServerError::Unauthorized { .. } => {
                h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        resp.extensions_mut().insert(ErrorCode(self.code()));
        if let Some(d) = self.log_detail() {
            resp.extensions_mut().insert(LoggedDetail(d));
        }
        resp
    }
}

/// What a busy queue holds, in words.
fn busy_noun(queue: &str) -> &str {
    match queue {
        "backups" => "backups or compactions",
        "answer_bytes" => "bytes of answers not yet read by their clients",
        q => q,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_engine::RecordId;

    #[test]
    fn not_found_says_nothing_of_the_reference_or_tenant() {
        let a = ServerError::from(EngineError::NotFound {
            tenant: "t1".into(),
            reference: "with external id 'secret'".into(),
        });
        let b = ServerError::from(EngineError::NotFound {
            tenant: "t1".into(),
            reference: RecordId(7).to_string(),
        });
        assert_eq!(a.public_message(), b.public_message());
        assert_eq!(a.details(), b.details());
        assert_eq!(a.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn storage_failures_leak_no_path() {
        let e = ServerError::from(EngineError::Storage(engram_storage::StorageError::io(
            std::path::Path::new("/secret/dir/log/1.seg"),
            std::io::Error::other("disk on fire"),
        )));
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(!e.public_message().contains("/secret"));
        assert!(e.log_detail().unwrap().contains("/secret"));
    }

    #[test]
    fn item_errors_carry_item_and_field() {
        let e = ServerError::from(EngineError::invalid("kind", "required").at_item(3));
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.details(), json!({"item": 3, "field": "kind"}));
        assert!(e.public_message().starts_with("item 3: "));
        let j = serde_json::from_str::<Value>("[1,").unwrap_err();
        let e = ServerError::bad_json(&j, Some(2));
        assert_eq!(e.details()["line"], 1);
        // the position is said once, not repeated from serde_json's text
        assert_eq!(e.public_message().matches("line 1").count(), 1, "{e}");
    }
}
