//! The log, crash and power-cut simulations, maintenance under power
//! cuts, the state checkpoint, and rebuild.
//!
//! One test binary per area (each links the whole engine once).

#[path = "../common/mod.rs"]
mod common;

mod checkpoint_open;
mod log_basics;
mod log_corruption;
mod log_crash_sim;
mod maintenance_crash_sim;
mod rebuild_verify;
