//! The HTTP server (`engram serve`) and its API keys (`engram keys`).
//!
//! - [`serve`]: the listener, connections, signals and shutdown;
//! - [`routes`]: the endpoints and their middleware;
//! - [`app`]: shared state and the bounded queues into the engine;
//! - [`auth`]: API key to caller, and the gate into the authorization
//!   matrix (`engram_engine::authz`);
//! - [`keys`]: the key file; [`config`]: settings and limits;
//! - [`body`]: reading and checking request bodies; [`error`]: the one
//!   error type and its JSON shape; [`metrics`], [`logging`], [`openapi`].
//!
//! Invariants: tenant and principal come from the API key, never from a
//! request; what a caller may do is decided by `authz::decide` only; a
//! write is acknowledged only after the engine returned (after its fsync);
//! every queue and every body is bounded. This module must never read or
//! write a file of the store except its own key file.

pub mod answer;
pub mod app;
pub mod auth;
pub mod body;
pub mod config;
pub mod error;
pub mod keys;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod serve;
