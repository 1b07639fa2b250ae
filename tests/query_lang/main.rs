//! The query language end to end: the six acceptance examples run against
//! a fixture store with asserted results; statements equivalent to recall
//! requests return identical hits and manifests; random statements across
//! tenants and labels never return a forbidden record; `engram query` and
//! `engram shell` as a user would type them.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod equivalence;
mod examples;
mod fixture;
mod graph;
mod hostile;
mod isolation;
