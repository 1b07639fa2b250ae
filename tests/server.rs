//! `engram serve` as a black box: a real server process per test (the
//! `engram` binary on 127.0.0.1, port 0, in a temporary store), driven
//! over raw HTTP/1.1.
//!
//! - `api`: every endpoint does its job; the OpenAPI document served is
//!   the committed one; SIGTERM lets a request in flight finish;
//! - `authz`: every endpoint against callers without a key, with a bad
//!   key, with another tenant's key, a user key on admin endpoints and a
//!   reader missing a label: the expected status, and bodies that reveal
//!   nothing (identical 404s for hidden and missing records);
//! - `robustness`: hostile bodies (property tests), oversized bodies, slow
//!   clients: never a 5xx from bad input, never a crash;
//! - `kill`: clients append concurrently while the server is SIGKILLed at
//!   random moments; every acknowledged append is there after a restart,
//!   and `engram verify` is clean.
//!
//! One test binary: the server is the same `engram` executable for all.

#[path = "common/mod.rs"]
mod common;
#[path = "server/harness.rs"]
mod harness;

#[path = "server/api.rs"]
mod api;
#[path = "server/authz.rs"]
mod authz;
#[path = "server/kill.rs"]
mod kill;
#[path = "server/robustness.rs"]
mod robustness;
