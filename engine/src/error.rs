//! The one error type of the engine.
//!
//! Each variant names what is wrong with enough context to fix it, and its
//! doc says whether to **retry**, **repair** or **give up**. Input errors
//! never leave anything half-written: a rejected batch stores nothing.

use engram_storage::StorageError;

use crate::id::RecordId;

/// Result alias.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Engine errors.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The storage layer failed. See the inner error for retry/repair advice.
    #[error(transparent)]
    Storage(#[from] StorageError),

    /// A field of a request is invalid. Give up: fix the input. `item` is
    /// the position in the batch (0-based) when the request was a batch.
    #[error("{}invalid {field}: {reason}", item.map(|i| format!("item {i}: ")).unwrap_or_default())]
    InvalidInput {
        /// Position in the batch, if any.
        item: Option<usize>,
        /// The field at fault (dotted path, e.g. `embedding.vector`).
        field: String,
        /// What is wrong.
        reason: String,
    },

    /// A value is over one of Engram's limits. Give up: shrink the input.
    #[error("{}{what} is {got}, over the limit of {limit}", item.map(|i| format!("item {i}: ")).unwrap_or_default())]
    LimitExceeded {
        /// Position in the batch, if any.
        item: Option<usize>,
        /// What was measured.
        what: String,
        /// The limit.
        limit: u64,
        /// The value found.
        got: u64,
    },

    /// No record with this id or external id is visible to the session
    /// (records of other tenants are reported exactly like missing ones).
    /// Give up.
    #[error("no record {reference} in tenant '{tenant}'")]
    NotFound {
        /// The tenant searched.
        tenant: String,
        /// The id or external id as given.
        reference: String,
    },

    /// The external id is already used for different content. Give up, or
    /// send the new content as a correction (`supersedes`). When the record
    /// holding it is one the principal cannot read, `existing` is `None` and
    /// the error says only that the key is in use: external ids are unique
    /// per tenant, so a taken key cannot be given out again, but nothing
    /// else about its holder (id, content, state) is told.
    #[error(
        "{}{}",
        item.map(|i| format!("item {i}: ")).unwrap_or_default(),
        match existing {
            Some(existing) => format!(
                "external_id '{external_id}' already names record {existing} with different content; \
                 to change it, send a correction with \"supersedes\": \"{external_id}\""
            ),
            None => format!(
                "external_id '{external_id}' is already in use in this tenant; choose another"
            ),
        }
    )]
    ExternalIdConflict {
        /// Position in the batch, if any.
        item: Option<usize>,
        /// The external id.
        external_id: String,
        /// The record holding it, when the principal may read it.
        existing: Option<RecordId>,
    },

    /// The record to correct has already been corrected. Give up, or correct
    /// the newest version instead (`by`: `None` when the principal cannot
    /// read that version, which is then not named).
    #[error(
        "{}record {target} was already superseded {}",
        item.map(|i| format!("item {i}: ")).unwrap_or_default(),
        match by {
            Some(by) => format!("by {by}; correct {by} instead"),
            None => "by a version this principal cannot read".to_string(),
        }
    )]
    AlreadySuperseded {
        /// Position in the batch, if any.
        item: Option<usize>,
        /// The record named in `supersedes`.
        target: RecordId,
        /// Its current successor, when the principal may read it.
        by: Option<RecordId>,
    },

    /// Corrections in the batch would form a cycle. Give up: fix the input.
    #[error("item {item}: supersedes chain forms a cycle ({chain})")]
    SupersedesCycle {
        /// Position in the batch.
        item: usize,
        /// The references involved.
        chain: String,
    },

    /// The session's principal may not do this. Give up, or use a principal
    /// with the right role.
    #[error("{principal} may not {action}: {reason}")]
    Forbidden {
        /// The acting principal.
        principal: String,
        /// What was attempted.
        action: String,
        /// Why it is refused.
        reason: String,
    },

    /// A vector does not match its space. Give up: fix the vector or the
    /// model id.
    #[error(
        "{}{field}: vector for model '{model}' has {got} dimensions; this store's '{model}' space has {expected}",
        item.map(|i| format!("item {i}: ")).unwrap_or_default()
    )]
    DimensionMismatch {
        /// Position in the batch, if any.
        item: Option<usize>,
        /// Field at fault.
        field: String,
        /// Model id.
        model: String,
        /// Dimension of the space.
        expected: usize,
        /// Dimension given.
        got: usize,
    },

    /// A query names a model with no vectors, or leaves the model out when
    /// several exist. Give up: pass `--model` with one of `available`.
    #[error("{reason}; vector spaces of this tenant you may read: [{}]", available.join(", "))]
    UnknownModel {
        /// What went wrong.
        reason: String,
        /// Model ids that have vectors.
        available: Vec<String>,
    },

    /// A lifecycle operation is not valid for the target's state. Give up.
    #[error("cannot {action} {target}: {reason}")]
    InvalidState {
        /// The operation.
        action: String,
        /// The record.
        target: RecordId,
        /// Why.
        reason: String,
    },

    /// Stored bytes passed their checksum but do not decode (written by an
    /// incompatible build, or a bug). Repair: restore from a backup.
    #[error("undecodable {what}: {detail}")]
    Corrupt {
        /// What failed to decode.
        what: String,
        /// Details.
        detail: String,
    },

    /// A log frame that passed its checksums could not be applied to the
    /// in-memory state: its payload does not decode as this build reads it,
    /// or applying it broke a rule of the state. The log is intact and was
    /// not changed; this is not disk damage, so restoring a backup does
    /// not help. Give up: open the store with a build that reads it, or
    /// report the frame (an engine bug).
    #[error(
        "the log frame at LSN {lsn} (segment {segment}, offset {offset}) is intact but could not be applied: {reason}; \
         nothing was changed (open the store with a build that reads it, or report it as a bug; when it is \
         the log's last batch, `engram repair --truncate-after` the LSN before it cuts it, into quarantine/)"
    )]
    Apply {
        /// Segment of the frame.
        segment: u64,
        /// Offset of the frame in its segment.
        offset: u64,
        /// Its LSN.
        lsn: u64,
        /// Why it could not be applied.
        reason: String,
    },

    /// The store is closed. Give up: reopen it.
    #[error("the store is closed")]
    Closed,

    /// There is no store in the directory, and the command does not create
    /// one. Give up: check the path, or create a store (`engram init`).
    #[error("no store at {} (create one with `engram init`, or check the path)", dir.display())]
    NoStore {
        /// The directory.
        dir: std::path::PathBuf,
    },

    /// The directory is not an Engram store, so Engram writes nothing
    /// into it. Give up: point at a store, or at an empty directory to
    /// create one.
    #[error("{} is not an Engram store: {found}; Engram will not write into it", dir.display())]
    NotAStore {
        /// The directory.
        dir: std::path::PathBuf,
        /// What was found instead.
        found: String,
    },

    /// The store was opened read-only. Give up: open it writable.
    #[error("the store was opened read-only; {action} needs a writable open")]
    ReadOnly {
        /// What was attempted.
        action: String,
    },

    /// A background worker (indexer, checkpointer) failed; the operation that
    /// reports it did not run. Repair: reopen the store (derived state is
    /// rebuilt from the log).
    #[error("background {worker} failed: {detail}; reopen the store")]
    Background {
        /// Which worker.
        worker: String,
        /// Its error.
        detail: String,
    },

    /// A reference is both an internal id and another record's external
    /// id. Give up: say which one is meant.
    #[error(
        "{}'{reference}' is both an internal id and an external id in tenant '{tenant}'; \
         write id:{reference} for the internal id or ext:{reference} for the external id",
        match (item, field) {
            (Some(i), Some(f)) => format!("item {i}: {f}: "),
            (Some(i), None) => format!("item {i}: "),
            (None, Some(f)) => format!("{f}: "),
            (None, None) => String::new(),
        }
    )]
    AmbiguousReference {
        /// Position in the batch, if any.
        item: Option<usize>,
        /// The field holding the reference (`supersedes`, `sources[2]`),
        /// when it is one of a record's.
        field: Option<String>,
        /// The tenant.
        tenant: String,
        /// The reference as given.
        reference: String,
    },
}

impl EngineError {
    /// The stable code of the error, the same on every surface (the
    /// server's error body, `engram query --json`): `invalid_input`,
    /// `limit_exceeded`, `not_found`, `external_id_conflict`,
    /// `already_superseded`, `invalid_state`, `forbidden`,
    /// `ambiguous_reference`, `unavailable` (closed, read-only, an I/O
    /// failure: retry later) or `internal` (damage on disk among others).
    pub fn code(&self) -> &'static str {
        use EngineError as E;
        match self {
            E::InvalidInput { .. }
            | E::DimensionMismatch { .. }
            | E::SupersedesCycle { .. }
            | E::UnknownModel { .. } => "invalid_input",
            E::LimitExceeded { .. } => "limit_exceeded",
            E::NotFound { .. } => "not_found",
            E::ExternalIdConflict { .. } => "external_id_conflict",
            E::AlreadySuperseded { .. } => "already_superseded",
            E::InvalidState { .. } => "invalid_state",
            E::Forbidden { .. } => "forbidden",
            E::AmbiguousReference { .. } => "ambiguous_reference",
            // damage on disk is not cured by retrying
            E::Storage(s) if s.is_damage() => "internal",
            E::Closed | E::ReadOnly { .. } | E::Storage(_) => "unavailable",
            _ => "internal",
        }
    }

    /// Shorthand for [`EngineError::InvalidInput`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        EngineError::InvalidInput {
            item: None,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// [`EngineError::AmbiguousReference`] for reference `r` in `tenant`,
    /// not yet placed in a batch.
    pub fn ambiguous(tenant: &str, r: &crate::model::RecordRef) -> Self {
        EngineError::AmbiguousReference {
            item: None,
            field: None,
            tenant: tenant.to_string(),
            reference: r.to_string(),
        }
    }

    /// Places an ambiguous reference at item `i`'s `field`; other errors
    /// as they are.
    pub(crate) fn placed(self, i: usize, at: &str) -> Self {
        match self {
            EngineError::AmbiguousReference {
                tenant, reference, ..
            } => EngineError::AmbiguousReference {
                item: Some(i),
                field: Some(at.to_string()),
                tenant,
                reference,
            },
            other => other,
        }
    }

    /// Attaches a batch position to errors about one item.
    pub fn at_item(self, idx: usize) -> Self {
        self.with_item(Some(idx))
    }

    /// Sets the batch position of errors about one item: `None` for a
    /// request of one record that is not a batch (a correction), whose
    /// errors should not say "item 0".
    pub fn with_item(self, idx: Option<usize>) -> Self {
        match self {
            EngineError::InvalidInput { field, reason, .. } => EngineError::InvalidInput {
                item: idx,
                field,
                reason,
            },
            EngineError::LimitExceeded {
                what, limit, got, ..
            } => EngineError::LimitExceeded {
                item: idx,
                what,
                limit,
                got,
            },
            EngineError::ExternalIdConflict {
                external_id,
                existing,
                ..
            } => EngineError::ExternalIdConflict {
                item: idx,
                external_id,
                existing,
            },
            EngineError::AlreadySuperseded { target, by, .. } => EngineError::AlreadySuperseded {
                item: idx,
                target,
                by,
            },
            EngineError::DimensionMismatch {
                field,
                model,
                expected,
                got,
                ..
            } => EngineError::DimensionMismatch {
                item: idx,
                field,
                model,
                expected,
                got,
            },
            EngineError::AmbiguousReference {
                field,
                tenant,
                reference,
                ..
            } => EngineError::AmbiguousReference {
                item: idx,
                field,
                tenant,
                reference,
            },
            other => other,
        }
    }

    /// The batch position this error is about, if any.
    pub fn item(&self) -> Option<usize> {
        match self {
            EngineError::InvalidInput { item, .. }
            | EngineError::LimitExceeded { item, .. }
            | EngineError::ExternalIdConflict { item, .. }
            | EngineError::AlreadySuperseded { item, .. }
            | EngineError::DimensionMismatch { item, .. }
            | EngineError::AmbiguousReference { item, .. } => *item,
            EngineError::SupersedesCycle { item, .. } => Some(*item),
            _ => None,
        }
    }
}
