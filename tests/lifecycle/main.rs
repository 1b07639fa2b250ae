//! The lifecycle acceptance scenarios (expire, correct, delete, revoke,
//! backup and restore, isolation) and concurrent lifecycle operations.
//!
//! One test binary per area (each links the whole engine once).

#[path = "../common/mod.rs"]
mod common;

mod backup_restore;
mod concurrent_lifecycle;
mod correct_root_cause;
mod delete_purge;
mod expire_observation;
mod injected_instruction;
mod isolation;
mod replace_dependency_map;
mod resume_after_permission_change;
mod revoke_access;
