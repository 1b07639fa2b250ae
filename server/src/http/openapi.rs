//! The OpenAPI description of the server, generated from the handlers'
//! annotations and request/response types (utoipa). It is served at
//! `/v1/openapi.json` and committed as `docs/openapi.json`; a test fails
//! when the two drift (`ENGRAM_BLESS=1` rewrites the file).
//!
//! This module must never describe an endpoint by hand: every path comes
//! from a handler's `#[utoipa::path]`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::http::routes::{admin, bulk, health, lifecycle, query, records};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Engram",
        description = "HTTP API of `engram serve`: durable, explainable memory for AI agents. Every /v1 endpoint but this document needs `Authorization: Bearer <key>`; the key decides tenant and principal. Errors: {\"error\": {\"code\", \"message\", \"details\"}}. See docs/server.md.",
        license(name = "Apache-2.0")
    ),
    paths(
        records::append,
        records::list,
        bulk::ingest,
        records::get,
        records::history,
        records::trace,
        lifecycle::correct,
        lifecycle::expire,
        lifecycle::delete,
        lifecycle::retract,
        lifecycle::review_queue,
        lifecycle::approve,
        lifecycle::reject,
        lifecycle::grant,
        lifecycle::revoke,
        lifecycle::retention,
        lifecycle::review_rule,
        lifecycle::hold,
        query::recall,
        query::query,
        query::context,
        query::eval,
        admin::stats,
        admin::verify,
        admin::backup,
        admin::compact,
        health::healthz,
        health::readyz,
        health::metrics,
        health::openapi,
    ),
    modifiers(&BearerKey, &CommonErrors),
    tags(
        (name = "records", description = "Append, bulk ingest, read and trace records"),
        (name = "lifecycle", description = "Correct, expire, delete, retract, review, access, retention, holds"),
        (name = "query", description = "Recall, context assembly, evaluation"),
        (name = "admin", description = "Store statistics, verification, backup, compaction"),
        (name = "health", description = "Liveness, readiness, metrics, this document"),
    )
)]
pub struct ApiDoc;

/// Declares the bearer API key scheme.
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("egk_<64 hex digits>")
                    .description(Some(
                        "An API key from `engram keys create`: a tenant key acts as one principal of one tenant; the store key as the store operator.",
                    ))
                    .build(),
            ),
        );
    }
}

/// Declares the answers any `/v1` operation may give besides its own
/// (docs/server.md's error table): 400, 401, 403, 429 (a full queue), 500
/// and 503 on every operation that needs a key, 413 on each of them too
/// (the body limit applies to any request, also one whose operation reads
/// no body), and 422 (`ambiguous_reference`) where the path names a record;
/// 400 on this document's own path too.
/// An operation's own description of a status is kept.
struct CommonErrors;

impl Modify for CommonErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        const COMMON: [(&str, &str, &str); 7] = [
            (
                "400",
                "BadRequest",
                "invalid_json, bad_request (a wrong shape, a query parameter the endpoint does not read, a body sent to an endpoint that reads none) or session_field (the body or the query string names tenant or principal)",
            ),
            (
                "401",
                "Unauthorized",
                "unauthorized: no key, a malformed header, an unknown or revoked key",
            ),
            (
                "403",
                "Forbidden",
                "forbidden: the authorization matrix refuses this key the operation",
            ),
            (
                "413",
                "PayloadTooLarge",
                "payload_too_large: the body is over its limit (a body sent to an operation that reads none counts too)",
            ),
            ("429", "Busy", "busy: a queue is full; Retry-After"),
            (
                "500",
                "Internal",
                "internal: details only in the server log",
            ),
            (
                "503",
                "Unavailable",
                "timeout (past the request's deadline; Retry-After) or unavailable (the store is closing or storage failed)",
            ),
        ];
        const AMBIGUOUS: (&str, &str, &str) = (
            "422",
            "UnprocessableReference",
            "ambiguous_reference (the reference is both an internal id and an external id; write id:<id> or ext:<key>), or another invalid_input of this operation",
        );
        let components = openapi.components.get_or_insert_with(Default::default);
        for (_, name, what) in COMMON.into_iter().chain([AMBIGUOUS]) {
            let answer = ResponseBuilder::new()
                .description(what)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            components.responses.insert(name.to_string(), answer.into());
        }
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                // This document, the one /v1 path without a key, answers
                // itself, and like every /v1 path refuses a query
                // parameter it does not read (400).
                if op.security.as_ref().is_none_or(|s| s.is_empty()) {
                    op.responses
                        .responses
                        .entry("400".to_string())
                        .or_insert_with(|| {
                            RefOr::Ref(Ref::new("#/components/responses/BadRequest"))
                        });
                    continue;
                }
                // a body whose every field is optional may be left out (an
                // empty body reads as `{}`)
                if ["/retract", "/approve", "/reject"]
                    .iter()
                    .any(|end| path.ends_with(end))
                {
                    if let Some(body) = op.request_body.as_mut() {
                        body.required = Some(utoipa::openapi::Required::False);
                        body.description =
                            Some("Optional: an empty body is read as {}".to_string());
                    }
                }
                for (code, name, _) in COMMON.into_iter().chain([AMBIGUOUS]) {
                    if code == "422" && !path.contains("{ref}") {
                        continue;
                    }
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| {
                            RefOr::Ref(Ref::new(format!("#/components/responses/{name}")))
                        });
                }
            }
        }
    }
}

/// The document as committed in `docs/openapi.json`.
pub fn document() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    /// The committed document is the generated one. `ENGRAM_BLESS=1`
    /// rewrites it.
    #[test]
    fn docs_openapi_json_matches_the_handlers() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
        let generated = super::document();
        if std::env::var_os("ENGRAM_BLESS").is_some() {
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "docs/openapi.json is out of date with the handlers; run \
             `ENGRAM_BLESS=1 cargo test -p engram-server openapi` and commit it"
        );
    }
}
