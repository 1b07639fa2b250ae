//! # engram-storage
//!
//! The bottom layer of Engram: everything that touches a file lives here, and
//! nothing here knows what a memory record *means*.
//!
//! It owns
//! - [`backend`]: the small file-system trait every byte goes through, with a
//!   real implementation ([`FsBackend`]) and an in-memory one ([`MemBackend`])
//!   that can simulate a power cut (unsynced sectors lost or torn) and inject
//!   I/O errors, so crash behaviour is testable without killing processes;
//! - [`frame`]: the on-disk frame (length, CRC32C, type, version, LSN, flags);
//! - [`log`]: the append-only segment log: bounded segment files, one writer
//!   thread doing group commit (one fsync per group of batches, acknowledgement
//!   only after the fsync), recovery on open that truncates a torn tail and
//!   reports exactly what it dropped, and zero-copy reads through `memmap2`;
//! - [`files`]: whole-file helpers for derived state (atomic replace with a
//!   checksummed header) and append-only fixed-width vector files that are read
//!   through a memory map.
//!
//! It must never
//! - interpret record payloads (they are opaque bytes with a type tag; the
//!   engine decodes them);
//! - acknowledge an append before the bytes are durable;
//! - truncate anything but the unacknowledged tail of the last segment.
//!
//! The byte layouts are specified in `docs/format.md`; the constants in
//! [`frame`] and [`log::segment`] mirror that document.

// Narrowing `as` casts must be shown lossless (see `engram_storage::cast`).
#![cfg_attr(
    not(test),
    warn(clippy::cast_possible_truncation, clippy::cast_possible_wrap)
)]

pub mod aligned;
pub mod backend;
pub mod cast;
pub mod error;
pub mod files;
pub mod frame;
pub mod log;
mod mmap;
pub mod oneshot;
pub mod overlay;
pub mod spin;

pub use aligned::AlignedBuf;
pub use backend::{Backend, BackendFile, FsBackend, MapOptions, Mapping, MemBackend, OpenMode};
pub use error::{StorageError, StorageResult};
pub use frame::{FrameType, Lsn};
pub use log::{
    Acknowledgements, AppendOutcome, FrameLoc, FrameRef, LogOptions, LogStats, RecoveryOptions,
    RecoveryReport, SegmentLog, Truncation, TruncationReason,
};
pub use overlay::OverlayBackend;
