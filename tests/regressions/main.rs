//! Regression tests, one module per area, each test named after the
//! behaviour it guarantees. Each was found by trying Engram as a careless
//! or hostile user would (damaged files, wrong directories, other
//! principals, other tenants) and failed before its fix.
//!
//! One test binary for all of them: they link the engine once.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod authz_matrix;
mod budgets;
mod cli;
mod clock;
mod damaged_log;
mod disk_full;
mod faults;
mod input;
mod metadata;
mod minor;
mod store_dir;
mod vectors;
