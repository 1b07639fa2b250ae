//! [`CliError`]: how a command fails, and the messages it prints.

use std::path::{Path, PathBuf};

use engram_engine::EngineError;
use engram_query::lang::QueryError;
use engram_storage::StorageError;

use crate::http::error::ServerError;

/// A command failure: printed as `error: <message>` on stderr, exit code 1
/// (bad usage never gets here: clap reports it and exits 2).
///
/// The typed variants keep the error they came from as their `source`, so
/// a caller of the command functions (the demo, a test) can tell an engine
/// refusal from an unreadable file; their messages are the source's own
/// text, with the context the command adds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The engine refused or failed; the `EngineError` variant says whether
    /// to retry, fix the request, or repair the store.
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// The store at `path` could not be opened.
    #[error("cannot open store {}: {source}", .path.display())]
    Open {
        /// The store directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// A storage operation the engine does not wrap (the demo's file scan).
    #[error("{0}")]
    Storage(#[from] StorageError),
    /// An input file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another I/O failure, with the file or directory concerned when the
    /// command knows it.
    #[error("{}{source}", path_prefix(.path))]
    Io {
        /// The file or directory.
        path: Option<PathBuf>,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A query-language statement was refused (located errors, each with a
    /// caret under the text at fault) or failed in the engine.
    #[error("{}", query_error_text(.0))]
    Query(#[from] QueryError),
    /// JSON could not be written (a value serde cannot represent).
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The HTTP server or its key file failed (`engram serve`, `engram
    /// keys`); boxed, the server's error being large.
    #[error(transparent)]
    Server(Box<ServerError>),
    /// A batch of `engram ingest` refused by the engine: nothing of it was
    /// stored; the batches before it were. Its source is the engine's
    /// refusal.
    #[error(transparent)]
    BatchRejected(Box<RejectedBatch>),
    /// A plain message of the command line: bad flags, bad input files.
    #[error("{0}")]
    Message(String),
}

/// A batch of `engram ingest` the engine refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "batch of {n_lines} line(s) of tenant '{tenant}' between lines {first_line} and {last_line} rejected, nothing of it stored: {}{}",
    source_at_line(.source, .line),
    stored_before_text(.n_stored_before, .n_batches_before)
)]
pub struct RejectedBatch {
    /// Lines in the batch.
    pub n_lines: usize,
    /// The batch's tenant.
    pub tenant: String,
    /// First line of the batch in the file.
    pub first_line: usize,
    /// Last line of the batch in the file.
    pub last_line: usize,
    /// The line the engine named, if it named one.
    pub line: Option<usize>,
    /// Records stored by earlier batches (they stay stored).
    pub n_stored_before: usize,
    /// Earlier batches.
    pub n_batches_before: usize,
    /// The engine's refusal.
    #[source]
    pub source: EngineError,
}

impl From<RejectedBatch> for CliError {
    fn from(e: RejectedBatch) -> Self {
        CliError::BatchRejected(Box::new(e))
    }
}

fn query_error_text(e: &QueryError) -> String {
    match e {
        // Located errors start on their own line, under `error:`.
        QueryError::Language { .. } => format!("\n{e}"),
        other => other.to_string(),
    }
}

fn path_prefix(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

/// The engine's refusal of a batch, under the file line it names: the
/// line replaces the engine's position in the batch (`item N: `), which a
/// file's reader has no use for.
fn source_at_line(source: &EngineError, line: &Option<usize>) -> String {
    let text = source.to_string();
    match (line, source.item()) {
        (Some(l), Some(i)) => {
            let rest = text.strip_prefix(&format!("item {i}: ")).unwrap_or(&text);
            format!("line {l}: {rest}")
        }
        (Some(l), None) => format!("line {l}: {text}"),
        (None, _) => text,
    }
}

fn stored_before_text(n_stored: &usize, n_batches: &usize) -> String {
    if *n_stored > 0 {
        // batches gather one tenant's lines, so a batch sent before this
        // one may hold later lines of another tenant
        format!(
            " ({n_stored} record(s) in {n_batches} batch(es) sent before this one are in the store, \
             created by this run or already there; a batch holds one tenant's lines, so they may \
             include later lines of other tenants)"
        )
    } else {
        " (nothing was stored)".to_string()
    }
}

impl CliError {
    /// A plain message.
    pub fn msg(text: impl Into<String>) -> Self {
        CliError::Message(text.into())
    }

    /// An I/O failure concerning `path`.
    pub fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
        move |source| CliError::Io {
            path: Some(path.to_path_buf()),
            source,
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(source: std::io::Error) -> Self {
        CliError::Io { path: None, source }
    }
}

impl From<ServerError> for CliError {
    fn from(e: ServerError) -> Self {
        CliError::Server(Box::new(e))
    }
}
