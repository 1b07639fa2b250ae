//! Who calls: the API key of a request (`Authorization: Bearer egk_…`)
//! turned into a [`Caller`], and the one gate every endpoint passes,
//! [`Caller::session`] / [`Caller::operator`], which asks
//! `engram_engine::authz::decide`.
//!
//! - The store key is the store operator ([`Actor::Operator`]): the matrix
//!   lets it do store-wide operations only.
//! - A tenant key is one principal of one tenant: store-wide operations
//!   are decided by the matrix for that principal (it refuses them); every
//!   other operation runs in a session of the key's principal, where the
//!   engine applies the matrix with the store's grants and each target.
//!
//! Tenant and principal come from the key only. This module must never
//! read them from a path, a query string or a body, never write per-endpoint
//! rules, and never log or echo a presented key.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use engram_engine::authz::{Actor, Decision, Operation, decide};
use engram_engine::principal::{ROLE_ADMIN, ROLE_REVIEWER};
use engram_engine::{Principal, Session};

use crate::http::app::{Bound, Shared};
use crate::http::error::{ServerError, ServerResult};
use crate::http::keys::Grant;

/// The authenticated caller of a request.
#[derive(Clone, Debug)]
pub enum Caller {
    /// The store key.
    Operator,
    /// A tenant key, as the engine principal it acts as.
    Tenant(Principal),
}

impl Caller {
    /// The caller as the authorization matrix sees it, for operations
    /// decided without a session (store-wide ones).
    fn actor(&self) -> Actor<'_> {
        match self {
            Caller::Operator => Actor::Operator,
            Caller::Tenant(p) => Actor::Principal {
                id: p.id(),
                kind: p.kind(),
                admin: p.is_admin() || p.credential_roles().contains(ROLE_ADMIN),
                reviewer: p.credential_roles().contains(ROLE_REVIEWER),
            },
        }
    }

    /// The matrix's answer for `op` without a target, as an error when it
    /// refuses.
    fn decide(&self, op: Operation) -> ServerResult<()> {
        match decide(self.actor(), op, None) {
            Decision::Allow => Ok(()),
            Decision::Hidden => Err(ServerError::NotFound),
            Decision::Forbidden(reason) => {
                let who = match self {
                    Caller::Operator => "the store admin key".to_string(),
                    Caller::Tenant(p) => p.to_string(),
                };
                Err(ServerError::Forbidden {
                    action: op.name().to_string(),
                    message: format!("{who} may not {}: {reason}", op.name()),
                })
            }
        }
    }

    /// Gate of a tenant operation `op`: a session of the key's principal,
    /// in which the engine decides `op` on its targets. The store key is
    /// refused by the matrix (it acts on no tenant).
    pub async fn session(&self, app: &Shared, op: Operation) -> ServerResult<Bound<Session>> {
        match self {
            Caller::Tenant(p) if !op.is_store_wide() => {
                Ok(app.bind().await.map(|db| db.session(p.clone())))
            }
            _ => {
                self.decide(op)?;
                Err(ServerError::Internal {
                    detail: format!("the matrix allowed {op:?} without a tenant"),
                })
            }
        }
    }

    /// Gate of a store-wide operation `op`: allowed to the store key only.
    pub fn operator(&self, op: Operation) -> ServerResult<()> {
        if !op.is_store_wide() {
            return Err(ServerError::Internal {
                detail: format!("{op:?} is not a store-wide operation"),
            });
        }
        self.decide(op)
    }

    /// Whether this is the store key.
    pub fn is_operator(&self) -> bool {
        matches!(self, Caller::Operator)
    }
}

/// The key a request presents, if its `Authorization` header is a bearer
/// token.
pub fn bearer(headers: &axum::http::HeaderMap) -> Result<&str, &'static str> {
    let mut all = headers.get_all(AUTHORIZATION).iter();
    let h = all
        .next()
        .ok_or("missing API key: send `Authorization: Bearer <key>`")?;
    // Two keys are no key: which one would decide is not the client's
    // (nor a proxy's) to leave open.
    if all.next().is_some() {
        return Err("malformed request: more than one Authorization header");
    }
    let v = h
        .to_str()
        .map_err(|_| "malformed Authorization header: expected `Bearer <key>`")?;
    let (scheme, key) = v
        .split_once(' ')
        .ok_or("malformed Authorization header: expected `Bearer <key>`")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("malformed Authorization header: expected `Bearer <key>`");
    }
    Ok(key.trim())
}

/// Authenticates the presented key.
pub fn authenticate(app: &Shared, parts: &Parts) -> ServerResult<Caller> {
    let key = bearer(&parts.headers).map_err(|reason| ServerError::Unauthorized { reason })?;
    authenticate_key(app, key)
}

/// The caller a key stands for now: also how a long request (a bulk
/// stream) re-checks its key, so a key revoked while it runs stops it.
pub fn authenticate_key(app: &Shared, key: &str) -> ServerResult<Caller> {
    let (found, problem) = app.keys.authenticate(key);
    if let Some(p) = problem {
        app.key_problem(p);
    }
    match found {
        Some((_, Grant::Store)) => Ok(Caller::Operator),
        Some((_, grant)) => {
            grant
                .principal()
                .map(Caller::Tenant)
                .ok_or(ServerError::Unauthorized {
                    reason: "invalid or revoked API key",
                })
        }
        None => Err(ServerError::Unauthorized {
            reason: "invalid or revoked API key",
        }),
    }
}

impl FromRequestParts<Shared> for Caller {
    type Rejection = ServerError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, Self::Rejection> {
        let caller = authenticate(app, parts)?;
        // (every `/v1` endpoint but the OpenAPI document takes a caller:
        // its query string is checked once the key is)
        crate::http::routes::check_query(parts)?;
        Ok(caller)
    }
}
