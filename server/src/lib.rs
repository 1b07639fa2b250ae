//! # engram-server
//!
//! The `engram` command line: the operator's door to a store (demo, ingest,
//! reads, lifecycle operations, verification, benchmarks), and the HTTP
//! server (`engram serve`, [`http`]) with its API keys (`engram keys`). Every command compiles its arguments to the same engine
//! requests the embedded API uses; nothing here decides what a record means.
//!
//! This crate must never read or write store files directly: it goes
//! through `engram-engine`.

pub mod bench;
pub mod bench_ann;
pub mod bench_open;
pub mod bench_recall;
pub mod cli;
pub mod demo;
pub mod http;
pub mod ingest_cmd;
pub mod keys_cmd;
pub mod lifecycle_cmd;
pub mod output;
pub mod progress;
pub mod query_cmd;
pub mod recall_cmd;

/// Runs the command line with the process arguments; returns the exit code.
pub fn main_entry() -> std::process::ExitCode {
    // A closed stdout (`engram demo | head`) unwinds from the write that
    // found it (`output::emit`) to here, so that what the command holds is
    // dropped on the way (its store closed, a temporary directory removed)
    // before the quiet exit.
    match std::panic::catch_unwind(|| cli::run(std::env::args_os())) {
        Ok(code) => code,
        Err(payload) if payload.is::<output::StdoutClosed>() => std::process::ExitCode::SUCCESS,
        Err(payload) => std::panic::resume_unwind(payload),
    }
}
