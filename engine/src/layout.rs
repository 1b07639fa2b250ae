//! Where each file of a store lives under its directory (docs/format.md
//! §1). Paths only: nothing here touches the disk.

use std::path::{Path, PathBuf};

/// The lock file.
pub fn lock(dir: &Path) -> PathBuf {
    dir.join("LOCK")
}
/// Ledger entries an interrupted restore has yet to re-apply.
pub fn restore_pending(dir: &Path) -> PathBuf {
    dir.join("restore.pending")
}
/// Where online compaction builds the compacted copy of the store
/// before swapping it in (removed at every writable open).
pub fn compact_staging(dir: &Path) -> PathBuf {
    dir.join("compact.staging")
}
/// The segment log.
pub fn log(dir: &Path) -> PathBuf {
    dir.join("log")
}
/// The catalog of stores written before the state checkpoint replaced
/// it (removed at the first writable open).
pub fn legacy_catalog(dir: &Path) -> PathBuf {
    dir.join("catalog.redb")
}
/// Derived state root.
pub fn derived(dir: &Path) -> PathBuf {
    dir.join("derived")
}
/// Lexical snapshot.
pub fn lexical(dir: &Path) -> PathBuf {
    derived(dir).join("lexical.snap")
}
/// Vector spaces.
pub fn vectors(dir: &Path) -> PathBuf {
    derived(dir).join("vectors")
}

/// The state checkpoint.
pub fn checkpoint(dir: &Path) -> PathBuf {
    derived(dir).join("state.snap")
}
