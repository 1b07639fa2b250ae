//! Request bodies: read under the size limit, checked as UTF-8 and JSON
//! with the position of the first fault, and refused when they name a
//! tenant or principal.
//!
//! Typed bodies ([`JsonBody`]) are deserialized into the handlers' request
//! types with the path of a bad field (`reason`, `period`); ingest records
//! and recall requests go through `engram-query`'s parsers, which name
//! their fields the same way for every door (CLI, server).
//!
//! This module must never hold more than the configured limit of a body
//! in memory, nor log a body.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::http::app::{BodyHold, Shared};
use crate::http::error::{ServerError, ServerResult};

/// Top-level fields no request body may carry: who acts comes from the key.
pub const SESSION_FIELDS: &[&str] = &["tenant", "principal"];

/// The body limit of a route (its template, or a path without
/// parameters): bulk ingest has its own; `POST /v1/query`, `/v1/recall`
/// and `/v1/context` are questions, not data ([`READ_BODY_BYTES_MAX`]).
/// The one limit both the check of `Content-Length` (before a byte is
/// read) and the reading of a body apply.
pub fn body_limit(limits: &crate::http::config::Limits, route: &str) -> u64 {
    match route {
        crate::http::routes::BULK_ROUTE => limits.bulk_body_bytes_max,
        "/v1/query" | "/v1/recall" | "/v1/context" => {
            limits.body_bytes_max.min(READ_BODY_BYTES_MAX)
        }
        _ => limits.body_bytes_max,
    }
}

/// The body limit of a query, a recall and a context request (1 MiB): a
/// statement is at most 64 KiB and a vector at most 4,096 numbers, while
/// a parsed JSON body takes tens of times its size in memory.
pub const READ_BODY_BYTES_MAX: u64 = 1 << 20;

/// A whole request body, at most `limits.body_bytes_max` bytes, and its
/// hold on the server's room for bodies (kept until the handler returns:
/// see `app::BODIES_HELD_KIB`).
#[derive(Debug)]
pub struct RawBody(pub Bytes, pub BodyHold);

impl FromRequest<Shared> for RawBody {
    type Rejection = ServerError;

    async fn from_request(req: Request, app: &Shared) -> Result<Self, Self::Rejection> {
        let limit = body_limit(&app.cfg.limits, req.uri().path());
        let bytes = read_limited(req.into_body(), limit).await?;
        let hold = app.hold_body(bytes.len()).await;
        Ok(RawBody(bytes, hold))
    }
}

/// The body of an endpoint that reads none (`DELETE /v1/records/{ref}`,
/// whose reason goes in the query string; `POST /v1/compact`): empty, or
/// only whitespace. Anything else is refused rather than ignored (a
/// reason sent in a body would be dropped without a word).
#[derive(Debug)]
pub struct NoBody;

impl FromRequest<Shared> for NoBody {
    type Rejection = ServerError;

    async fn from_request(req: Request, app: &Shared) -> Result<Self, Self::Rejection> {
        let RawBody(bytes, _) = RawBody::from_request(req, app).await?;
        // (a byte-order mark opening a body is skipped, as by every body)
        let rest = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        if rest.iter().all(u8::is_ascii_whitespace) {
            Ok(NoBody)
        } else {
            Err(ServerError::bad_request(
                "body",
                "this endpoint reads no body (its parameters, if any, go in the query string)",
            ))
        }
    }
}

/// Reads `body` whole, refusing it past `limit` bytes (without reading
/// further).
pub async fn read_limited(body: axum::body::Body, limit: u64) -> ServerResult<Bytes> {
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, limit_usize).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ServerError::TooLarge { limit_bytes: limit })
        }
        Err(e) => Err(body_read_error(&*e)),
    }
}

/// The error of a body read that failed other than by its size: the
/// client gone (499), a body that ended before its declared length, or
/// malformed framing, named by the HTTP layer's own words (a bad chunk
/// size, a chunk without its line end, ...).
pub fn body_read_error(e: &(dyn std::error::Error + 'static)) -> ServerError {
    match went_away(e) {
        Some(true) => ServerError::ClientClosed,
        // (a client may half-close and still read the answer)
        Some(false) => ServerError::bad_request(
            "body",
            "the body ended before its declared length (Content-Length, or its last chunk) was read",
        ),
        None => {
            // the outer error says only that reading failed; its sources
            // say what was wrong
            let mut why = e.to_string();
            let mut at = e.source();
            while let Some(s) = at {
                let text = s.to_string();
                if !why.contains(&text) {
                    why = format!("{why}: {text}");
                }
                at = s.source();
            }
            ServerError::bad_request("body", format!("could not read the request body: {why}"))
        }
    }
}

/// Why a body read failed, when the connection is the cause: `Some(true)`
/// when it is gone (reset or aborted: nobody reads the answer),
/// `Some(false)` when it reached its end before the body's (a client that
/// half-closed may still read the answer); `None` for anything else (a
/// malformed body: a bad chunk size).
fn went_away(e: &(dyn std::error::Error + 'static)) -> Option<bool> {
    let mut at = Some(e);
    while let Some(err) = at {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_canceled())
        {
            return Some(true);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            return match io.kind() {
                K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => Some(true),
                K::UnexpectedEof => Some(false),
                _ => None,
            };
        }
        at = err.source();
    }
    None
}

/// `bytes` as UTF-8, or a 400 naming the line and column of the first
/// invalid byte.
pub fn utf8(bytes: &[u8]) -> ServerResult<&str> {
    std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        let line = 1 + good.iter().filter(|&&b| b == b'\n').count();
        let line_start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let column = 1 + String::from_utf8_lossy(&good[line_start..]).chars().count();
        ServerError::BadJson {
            item: None,
            line,
            column,
            reason: "invalid UTF-8".to_string(),
        }
    })
}

/// A whole body as text: [`utf8`], a byte-order mark opening it skipped
/// (as `engram ingest` and bulk ingest skip one; JSON parsers may ignore
/// it, RFC 8259).
pub fn body_text(bytes: &[u8]) -> ServerResult<&str> {
    let text = utf8(bytes)?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Refuses an object naming a session field, at its top level or in its
/// `scope` (where a record's or a case's scope fields go).
pub fn no_session_fields(o: &serde_json::Map<String, Value>) -> ServerResult<()> {
    let refuse = |field: String| {
        Err(ServerError::SessionField {
            item: None,
            line: None,
            field,
        })
    };
    if let Some(f) = SESSION_FIELDS.iter().find(|f| o.contains_key(**f)) {
        return refuse((*f).to_string());
    }
    if let Some(Value::Object(scope)) = o.get("scope") {
        if let Some(f) = SESSION_FIELDS.iter().find(|f| scope.contains_key(**f)) {
            return refuse(format!("scope.{f}"));
        }
    }
    Ok(())
}

/// Parses `text` as one JSON object with the strict parser every JSON line
/// goes through (`engram_query::strict`: a repeated key, or an integer a
/// JSON number cannot carry exactly, is 422 naming the field; syntax
/// errors: 400 with position; a non-object: 400; a session field: 400).
pub fn json_object(text: &str) -> ServerResult<serde_json::Map<String, Value>> {
    match engram_query::strict::parse(text) {
        Ok(Value::Object(o)) => {
            no_session_fields(&o)?;
            Ok(o)
        }
        Ok(_) => Err(ServerError::bad_request("body", "expected a JSON object")),
        Err(Ok((field, reason))) => Err(ServerError::invalid(None, field, reason)),
        Err(Err(e)) => Err(ServerError::bad_json(&e, None)),
    }
}

/// A body deserialized into `T` (a request type of a handler): JSON
/// errors are 400 with their position, field errors 422 with the field's
/// path.
#[derive(Debug)]
pub struct JsonBody<T>(pub T, pub BodyHold);

impl<T: DeserializeOwned> FromRequest<Shared> for JsonBody<T> {
    type Rejection = ServerError;

    async fn from_request(req: Request, app: &Shared) -> Result<Self, Self::Rejection> {
        let RawBody(bytes, hold) = RawBody::from_request(req, app).await?;
        parse_typed(&bytes).map(|t| JsonBody(t, hold))
    }
}

/// A body whose every field is optional, deserialized into `T` as
/// [`JsonBody`] does, except that an empty body reads as `{}` (the
/// OpenAPI document marks these bodies not required).
#[derive(Debug)]
pub struct OptionalJsonBody<T>(pub T, pub BodyHold);

impl<T: DeserializeOwned> FromRequest<Shared> for OptionalJsonBody<T> {
    type Rejection = ServerError;

    async fn from_request(req: Request, app: &Shared) -> Result<Self, Self::Rejection> {
        let RawBody(bytes, hold) = RawBody::from_request(req, app).await?;
        let empty = body_text(&bytes)?.trim().is_empty();
        parse_typed(if empty { b"{}" } else { &bytes }).map(|t| OptionalJsonBody(t, hold))
    }
}

/// See [`JsonBody`]. An empty body is not JSON (400 `invalid_json`, as
/// on every endpoint whose body is required); [`OptionalJsonBody`] reads
/// it as `{}`.
pub fn parse_typed<T: DeserializeOwned>(bytes: &[u8]) -> ServerResult<T> {
    let text = body_text(bytes)?;
    let o = json_object(text)?;
    serde_path_to_error::deserialize(Value::Object(o)).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.into_inner().to_string();
        // a missing field is named as the field, not as the object that
        // lacks it
        if let Some(name) = msg
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'))
        {
            let field = match path.as_str() {
                "." => name.to_string(),
                p => format!("{p}.{name}"),
            };
            return ServerError::invalid(None, field, "required, and missing");
        }
        let field = if path == "." { "body".into() } else { path };
        ServerError::invalid(None, field, plain_types(&msg))
    })
}

/// A deserializer's message with Rust type names said in JSON's words
/// ("expected usize" -> "expected a non-negative integer").
fn plain_types(msg: &str) -> String {
    const NAMES: [(&str, &str); 8] = [
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        ("expected u32", "expected a non-negative integer"),
        ("expected u16", "expected a non-negative integer"),
        ("expected u8", "expected a non-negative integer"),
        ("expected i64", "expected an integer"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
    ];
    NAMES
        .iter()
        .fold(msg.to_string(), |m, (rust, json)| m.replace(rust, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_field_is_named_as_the_field() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Inner {
            at: String,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct B {
            at: Option<String>,
            inner: Option<Inner>,
            need: String,
        }
        let field = |body: &[u8]| match parse_typed::<B>(body).unwrap_err() {
            ServerError::Invalid {
                details, message, ..
            } => (details["field"].as_str().unwrap().to_string(), message),
            other => panic!("{other:?}"),
        };
        let (f, m) = field(br#"{}"#);
        assert_eq!(f, "need", "{m}");
        assert!(m.contains("missing"), "{m}");
        assert_eq!(field(br#"{"need": "x", "inner": {}}"#).0, "inner.at");
        assert_eq!(field(br#"{"need": 1}"#).0, "need");
    }

    #[test]
    fn type_errors_speak_json_not_rust() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct B {
            n: Option<usize>,
        }
        let e = parse_typed::<B>(br#"{"n": -1}"#).unwrap_err().to_string();
        assert!(
            e.contains("expected a non-negative integer") && !e.contains("usize"),
            "{e}"
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Req {
        reason: Option<String>,
        n: Option<u32>,
    }

    #[test]
    fn faults_are_named_with_their_position_or_field() {
        let e = parse_typed::<Req>(b"{\n  \"reason\": \"x\",\n  \"n\": }").unwrap_err();
        assert!(matches!(e, ServerError::BadJson { line: 3, .. }), "{e:?}");
        let e = parse_typed::<Req>(b"{\"n\": -1}").unwrap_err();
        assert_eq!(e.details()["field"], "n");
        assert_eq!(e.status(), 422);
        let e = parse_typed::<Req>(b"{\"reasn\": \"x\"}").unwrap_err();
        assert!(e.to_string().contains("reasn"), "{e}");
        let e = parse_typed::<Req>(b"{\"tenant\": \"t\"}").unwrap_err();
        assert!(matches!(e, ServerError::SessionField { .. }), "{e:?}");
        // in a scope too (a recall's, a record's)
        let e = parse_typed::<Req>(b"{\"scope\": {\"principal\": \"p\"}}").unwrap_err();
        assert!(
            matches!(&e, ServerError::SessionField { field, .. } if field == "scope.principal"),
            "{e:?}"
        );
        let e = parse_typed::<Req>(b"[1]").unwrap_err();
        assert_eq!(e.status(), 400);
        let e = parse_typed::<Req>(b"{\"reason\":\n\"a\xffb\"}").unwrap_err();
        assert!(
            matches!(
                e,
                ServerError::BadJson {
                    line: 2,
                    column: 3,
                    ..
                }
            ),
            "{e:?}"
        );
        // an empty body is not JSON where one is required
        assert!(matches!(
            parse_typed::<Req>(b"  ").unwrap_err(),
            ServerError::BadJson { .. }
        ));
        let deep = "[".repeat(100_000);
        assert_eq!(
            parse_typed::<Req>(deep.as_bytes()).unwrap_err().status(),
            400
        );
    }
}
