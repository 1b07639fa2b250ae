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
    modifiers(&BearerKey),
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
