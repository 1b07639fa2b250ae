//! The one error type of the storage crate.
//!
//! Every variant carries the context a user needs to act (which file, which
//! offset, what was expected). Each variant's doc says whether the caller
//! should **retry**, **repair** or **give up**.

use std::io;
use std::path::PathBuf;

/// Result alias for storage operations.
pub type StorageResult<T> = Result<T, StorageError>;

/// Errors raised by the storage layer.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// An operating-system I/O call failed. Retry if the cause is transient
    /// (disk full, permissions fixed); the store itself is unchanged.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// File or directory the call was about.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The file system is full (ENOSPC). Nothing of the operation that
    /// hit it was stored; everything acknowledged before it is durable and
    /// readable, and writes resume once space is freed. Retry after
    /// freeing space.
    #[error(
        "no space left on the device writing {path}: nothing of this write was stored \
         (everything acknowledged before it is intact); free space and retry"
    )]
    DiskFull {
        /// File the write was for.
        path: PathBuf,
    },

    /// Another process holds the data directory. Give up, or stop the other
    /// process first.
    #[error("data directory {path} is in use by another process (it holds the store's lock)")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },

    /// A segment header is unreadable. Repair: restore the segment from a
    /// backup; the log cannot be opened past it.
    #[error(
        "segment {segment} ({path}): bad header: {reason}; its frames cannot be read without it: \
         put back the segment file from a backup, or restore the store from one"
    )]
    BadSegmentHeader {
        /// Segment number.
        segment: u64,
        /// Its file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// The segment was written by a newer format version. Give up: upgrade
    /// Engram.
    #[error(
        "segment {segment} uses log format version {found}; this build reads up to {supported} \
         (a newer Engram wrote it: open the store with that version; nothing was changed)"
    )]
    UnsupportedFormat {
        /// Segment number.
        segment: u64,
        /// Version found on disk.
        found: u16,
        /// Highest version this build understands.
        supported: u16,
    },

    /// A frame in the *middle* of the log is damaged (or an intact frame is
    /// out of place), so it is not a torn tail; nothing was changed.
    /// Repair: restore from a backup, or cut the log there with `engram
    /// repair` (`engram verify` lists every damaged frame).
    #[error(
        "segment {segment} offset {offset}: damaged log data ({reason}); nothing was changed: \
         restore from a backup, or run `engram repair` to see what cutting the log would lose"
    )]
    CorruptLog {
        /// Segment number.
        segment: u64,
        /// Byte offset of the damaged frame in its segment file.
        offset: u64,
        /// What the check found.
        reason: String,
    },

    /// Damaged data at the end of the log that something outside the log
    /// (an index snapshot, the state checkpoint) proves was durable, so
    /// it was acknowledged: cutting it would lose acknowledged records.
    /// Nothing was changed. Repair: restore from a backup, or cut the log
    /// at an LSN with `engram repair` (the cut bytes are kept in
    /// quarantine), accepting the loss it names.
    #[error(
        "segment {segment} offset {offset}: damaged log data ({reason}); LSNs {first_lsn}..={last_lsn} \
         were acknowledged ({evidence} shows LSN {last_lsn} was durable), so nothing was cut or changed; \
         restore from a backup, or run `engram repair` to see what cutting the log would lose"
    )]
    AcknowledgedDataDamaged {
        /// Segment number.
        segment: u64,
        /// Byte offset where the intact data ends.
        offset: u64,
        /// First LSN that cutting would lose.
        first_lsn: u64,
        /// Last LSN known to have been durable.
        last_lsn: u64,
        /// What the check found at `offset`.
        reason: String,
        /// What proves durability.
        evidence: String,
    },

    /// LSNs are missing from the log: a segment file is missing, or a
    /// segment was cut, or the log ends before what derived state proves
    /// was durable. Nothing was changed. Repair: put the missing segment
    /// back (from a backup), or restore from a backup.
    #[error(
        "the log is missing LSNs {first_lsn}..={last_lsn}: {detail}; nothing was changed \
         (put the missing segment files back or restore from a backup)"
    )]
    LogGap {
        /// First missing LSN.
        first_lsn: u64,
        /// Last missing LSN (as far as is known).
        last_lsn: u64,
        /// Which files or bounds show the gap.
        detail: String,
    },

    /// The log was opened read-only and cannot take appends. Give up:
    /// open it writable.
    #[error("the log was opened read-only")]
    ReadOnly,

    /// A frame is larger than the configured limit. Give up: split the
    /// record.
    #[error("frame payload of {len_bytes} bytes exceeds the limit of {limit_bytes} bytes")]
    FrameTooLarge {
        /// Payload size.
        len_bytes: usize,
        /// `frame_payload_bytes_max`.
        limit_bytes: usize,
    },

    /// An atomic batch is larger than the configured limit. Give up: use
    /// smaller batches.
    #[error(
        "batch of {n_frames} frames / {len_bytes} bytes exceeds the limit of {limit_bytes} bytes"
    )]
    BatchTooLarge {
        /// Frames in the batch.
        n_frames: usize,
        /// Total encoded size.
        len_bytes: usize,
        /// `batch_bytes_max`.
        limit_bytes: usize,
    },

    /// Log options outside the format's limits. Give up: fix the options.
    #[error("invalid log options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: String,
    },

    /// An empty batch was submitted. Give up: nothing to append.
    #[error("empty batch: an append needs at least one frame")]
    EmptyBatch,

    /// An earlier write or fsync failed, so the writer stopped accepting
    /// appends (the state of unsynced bytes is unknown after a failed
    /// fsync). Repair: reopen the store, which recovers the log.
    #[error("the log writer stopped after an I/O failure ({reason}); reopen the store to recover")]
    Poisoned {
        /// The failure that stopped the writer.
        reason: String,
    },

    /// The log was closed. Give up: reopen.
    #[error("the log is closed")]
    Closed,

    /// A location does not point at a valid frame. Repair: rebuild the
    /// state checkpoint (`engram rebuild --checkpoint`).
    #[error("no valid frame at segment {segment} offset {offset}: {reason}")]
    BadLocation {
        /// Segment number.
        segment: u64,
        /// Byte offset.
        offset: u64,
        /// What is wrong.
        reason: String,
    },

    /// A derived-state file failed its checksum or format check. Repair:
    /// delete it; it is rebuilt from the log.
    #[error("derived file {path} is damaged: {reason}")]
    BadDerivedFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl StorageError {
    /// Whether this is damage to data on disk (a failed checksum, a gap, a
    /// bad header or derived file): retrying will not help, unlike an I/O
    /// failure or a closed or busy log.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            StorageError::CorruptLog { .. }
                | StorageError::AcknowledgedDataDamaged { .. }
                | StorageError::LogGap { .. }
                | StorageError::BadSegmentHeader { .. }
                | StorageError::BadDerivedFile { .. }
                | StorageError::BadLocation { .. }
        )
    }

    /// Wraps an `io::Error` with the path it concerns (a full disk becomes
    /// [`StorageError::DiskFull`]).
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        if source.raw_os_error() == Some(28) || source.kind() == io::ErrorKind::StorageFull {
            return StorageError::DiskFull { path: path.into() };
        }
        StorageError::Io {
            path: path.into(),
            source,
        }
    }
}
