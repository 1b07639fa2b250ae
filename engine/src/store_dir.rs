//! The store directory: the marker file that says a directory is an Engram
//! store, what may be created where, and which files inside it are
//! Engram's own (the only ones it ever removes).
//!
//! A store directory holds `ENGRAM` (this marker: a small JSON document
//! with the store format version), `LOCK`, `log/`, `derived/`,
//! `catalog.redb`, `ledger.jsonl`, `settings.snap`, and transiently
//! `restore.pending`, `log.restore/`, `log.old/`, `quarantine/`. The
//! server keeps its API key hashes beside them in `keys.json` (with its
//! lock file `keys.json.lock`; neither is part of a backup). A backup
//! directory holds the marker, `log/`, the settings and the ledger, and
//! `backup.json` once finished (`backup.partial` until then).
//!
//! Rules:
//! - a store is created only in a missing or empty directory, and only when
//!   the caller asked for creation (`Options::create_if_missing`);
//! - a directory that holds files but no marker is not a store: nothing is
//!   written into it (a store written by a build from before the marker,
//!   recognised by its `log/00000000000000000001.seg`, gets the marker at
//!   its first writable open);
//! - removals go through [`remove_owned`], which removes only names Engram
//!   gives its files, so a file someone put inside a store survives.
//!
//! This module must never remove a file whose name Engram does not give.

use std::path::Path;

use engram_storage::files::{read_all, write_all_durable};
use engram_storage::{Backend, StorageError};

use crate::error::{EngineError, Result};

/// The file a finished backup holds (written last, `Engram::backup`).
pub const BACKUP_FILE: &str = "backup.json";
/// The file a backup holds while it is being taken (written first, removed
/// once [`BACKUP_FILE`] is durable): a directory holding it is a backup
/// cut short, which no command opens (it may still hold content deleted
/// before the backup, which the backup's own compaction purges).
pub const PARTIAL_BACKUP_FILE: &str = "backup.partial";
/// The file a restore into a new directory writes first and removes once
/// the backup's log is swapped in: a store holding it (and no
/// `restore.pending`, which the next open would finish) is a restore cut
/// short, empty or nearly so, which no command opens until a restore is
/// run into it again.
pub const PARTIAL_RESTORE_FILE: &str = "restore.partial";
/// Name of the marker file.
pub const MARKER_FILE: &str = "ENGRAM";
/// Store format version written in the marker by this build.
pub const STORE_FORMAT_VERSION: u64 = 1;

/// What a directory is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirKind {
    /// Missing, or holding nothing (a `LOCK` left by a failed create counts
    /// as nothing).
    Empty,
    /// Has the marker.
    Store,
    /// A store from before the marker (it has a first log segment).
    Unmarked,
    /// Holds something else: the first few names.
    Foreign(Vec<String>),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |e| EngineError::Storage(StorageError::io(path, e))
}

/// Classifies `dir`. A symbolic link to a path that does not exist is an
/// error, for every caller: a store, a restore or a backup cannot be made
/// there.
pub fn classify(backend: &dyn Backend, dir: &Path) -> Result<DirKind> {
    // a link to nothing looks absent, yet nothing can be created there
    if backend.is_dangling_link(dir) {
        return Err(EngineError::invalid(
            "directory",
            format!(
                "{} is a symbolic link to a path that does not exist",
                dir.display()
            ),
        ));
    }
    if !backend.exists(dir) {
        return Ok(DirKind::Empty);
    }
    let entries = backend.list_dir(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotADirectory {
            EngineError::NotAStore {
                dir: dir.to_path_buf(),
                found: "a file, not a directory".into(),
            }
        } else {
            EngineError::Storage(StorageError::io(dir, e))
        }
    })?;
    // (every command, `verify` included, names it: a read-only open read
    // the store as one from before the marker, and a writable one failed
    // with the OS's bare "Is a directory")
    if let Some(e) = entries
        .iter()
        .find(|e| e.is_dir && (e.name == MARKER_FILE || e.name == "LOCK"))
    {
        let path = dir.join(&e.name);
        return Err(EngineError::Storage(StorageError::io(
            &path,
            std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "a directory is where this file belongs (move it away)",
            ),
        )));
    }
    // and a file where `log/` or `derived/` belongs (each may be a link
    // to a directory elsewhere: listing it follows the link)
    for e in entries
        .iter()
        .filter(|e| !e.is_dir && (e.name == "log" || e.name == "derived"))
    {
        let path = dir.join(&e.name);
        if let Err(err) = backend.list_dir(&path)
            && err.kind() == std::io::ErrorKind::NotADirectory
        {
            return Err(EngineError::Storage(StorageError::io(&path, err)));
        }
    }
    if entries.iter().any(|e| e.name == MARKER_FILE && !e.is_dir) {
        return Ok(DirKind::Store);
    }
    // (a restore into a new directory marks it before creating the store)
    let names: Vec<String> = entries
        .iter()
        .filter(|e| e.name != "LOCK" && e.name != PARTIAL_RESTORE_FILE)
        .map(|e| e.name.clone())
        .collect();
    if names.is_empty() {
        return Ok(DirKind::Empty);
    }
    if backend.exists(&dir.join("log").join(first_segment_name())) {
        return Ok(DirKind::Unmarked);
    }
    Ok(DirKind::Foreign(names.into_iter().take(5).collect()))
}

fn first_segment_name() -> String {
    engram_storage::log::segment::segment_file_name(1)
}

/// Checks the marker's format version.
pub fn check_marker(backend: &dyn Backend, dir: &Path) -> Result<()> {
    let path = dir.join(MARKER_FILE);
    let bytes = read_all(backend, &path)?.unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| EngineError::Corrupt {
            what: path.display().to_string(),
            detail: format!(
                "the store marker is not valid JSON ({e}); if this is an Engram store, \
                 write {{\"engram_store\": {STORE_FORMAT_VERSION}}} into it"
            ),
        })?;
    match v.get("engram_store").and_then(|x| x.as_u64()) {
        Some(n) if (1..=STORE_FORMAT_VERSION).contains(&n) => Ok(()),
        Some(n) => Err(EngineError::Corrupt {
            what: path.display().to_string(),
            detail: format!(
                "store format version {n}; this build reads up to {STORE_FORMAT_VERSION}: upgrade Engram"
            ),
        }),
        None => Err(EngineError::Corrupt {
            what: path.display().to_string(),
            detail: format!(
                "the store marker has no \"engram_store\" version; if this is an Engram store, \
                 write {{\"engram_store\": {STORE_FORMAT_VERSION}}} into it"
            ),
        }),
    }
}

/// Writes the marker (durably, with its directory entry).
pub fn write_marker(backend: &dyn Backend, dir: &Path) -> Result<()> {
    let body = serde_json::json!({
        "engram_store": STORE_FORMAT_VERSION,
        "about": "This directory is an Engram store. Do not edit or remove files in it by hand: use the engram command.",
    });
    write_all_durable(
        backend,
        &dir.join(MARKER_FILE),
        format!("{body:#}\n").as_bytes(),
    )?;
    backend.sync_dir(dir).map_err(io(dir))?;
    Ok(())
}

/// Makes sure `dir` is a store before it is opened: creates it when
/// `create` allows (missing or empty directory), adds the marker to an
/// unmarked store when `writable`, and refuses anything else.
pub fn prepare(backend: &dyn Backend, dir: &Path, create: bool, writable: bool) -> Result<()> {
    prepare_dir(backend, dir, (create, writable), false)
}

/// Refuses `dir` when it is a backup cut short (it holds
/// [`PARTIAL_BACKUP_FILE`]): every open does, and so do the commands that
/// write beside a store without opening it (`keys create`, `init`).
pub fn refuse_unfinished_backup(backend: &dyn Backend, dir: &Path) -> Result<()> {
    if backend.exists(&dir.join(PARTIAL_BACKUP_FILE)) {
        return Err(EngineError::invalid(
            "data directory",
            format!(
                "{} is a backup that did not finish (it holds {PARTIAL_BACKUP_FILE}: the backup \
                 was cut short); it is neither a store nor a backup and nothing opens it: \
                 remove the directory and take a new backup",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Refuses a store into which a restore into a new directory was cut
/// short before the backup's log was swapped in (it holds
/// [`PARTIAL_RESTORE_FILE`] and no `restore.pending`): opened, it would
/// serve an empty store as if restored. `restore` into it again finishes.
pub fn refuse_unfinished_restore(backend: &dyn Backend, dir: &Path) -> Result<()> {
    if unfinished_restore(backend, dir) {
        return Err(EngineError::invalid(
            "data directory",
            format!(
                "{} is a restore that did not finish (it holds {PARTIAL_RESTORE_FILE}: the \
                 restore into a new directory was cut short before the backup's log was in \
                 place); run `engram restore` into it again, or remove the directory",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// Refuses `dir` when it lies inside a store.
/// `what` names the directory's role and `fix` what to do instead.
pub fn refuse_inside_store(backend: &dyn Backend, dir: &Path, what: &str, fix: &str) -> Result<()> {
    match enclosing_store(backend, dir) {
        Some(outer) => Err(EngineError::invalid(
            what,
            format!(
                "{} is inside the store at {}; {fix}",
                dir.display(),
                outer.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Whether `dir` is a restore into a new directory cut short before its
/// log swap (see [`refuse_unfinished_restore`]).
pub fn unfinished_restore(backend: &dyn Backend, dir: &Path) -> bool {
    backend.exists(&dir.join(PARTIAL_RESTORE_FILE))
        && !backend.exists(&crate::layout::restore_pending(dir))
}

/// [`refuse_unfinished_backup`] and [`refuse_unfinished_restore`]: what
/// the commands that write beside a store without opening it (`keys`,
/// `init`, `repair`) check first.
pub fn refuse_unfinished(backend: &dyn Backend, dir: &Path) -> Result<()> {
    refuse_unfinished_backup(backend, dir)?;
    refuse_unfinished_restore(backend, dir)
}

/// [`prepare`], and for `Engram::backup` alone (its copy is opened to be
/// compacted before it is finished), a directory holding
/// [`PARTIAL_BACKUP_FILE`] when `unfinished_backup` is true.
pub(crate) fn prepare_dir(
    backend: &dyn Backend,
    dir: &Path,
    (create, writable): (bool, bool),
    unfinished_backup: bool,
) -> Result<()> {
    if !unfinished_backup {
        refuse_unfinished_backup(backend, dir)?;
    }
    let kind = classify(backend, dir)?;
    // A backup holds a store's marker and log, and `backup.json`: opened
    // as a store to write, one write would make it a backup no restore
    // accepts. (Read-only opens, `verify` of a backup, change nothing.)
    if writable
        && matches!(kind, DirKind::Store | DirKind::Unmarked)
        && backend.exists(&dir.join(BACKUP_FILE))
    {
        return Err(EngineError::invalid(
            "data directory",
            format!(
                "{} is a backup, not a store (it holds {BACKUP_FILE}): restore it into a store \
                 directory with `engram --data DIR restore {}`",
                dir.display(),
                dir.display()
            ),
        ));
    }
    match kind {
        DirKind::Store => check_marker(backend, dir),
        DirKind::Unmarked => {
            if writable {
                write_marker(backend, dir)?;
            }
            Ok(())
        }
        DirKind::Empty if create && writable => {
            // Not inside another store: its maintenance (compact,
            // rebuild, restore) removes what it owns under its own
            // directories, and a store there would be in its way.
            if let Some(outer) = enclosing_store(backend, dir) {
                return Err(EngineError::invalid(
                    "data directory",
                    format!(
                        "{} is inside the store at {}; create the store outside it",
                        dir.display(),
                        outer.display()
                    ),
                ));
            }
            backend.create_dir_all(dir).map_err(io(dir))?;
            write_marker(backend, dir)
        }
        DirKind::Empty => Err(EngineError::NoStore {
            dir: dir.to_path_buf(),
        }),
        DirKind::Foreign(names) => Err(EngineError::NotAStore {
            dir: dir.to_path_buf(),
            found: format!("it holds {} and no {MARKER_FILE} marker", names.join(", ")),
        }),
    }
}

/// `p` made absolute from the working directory, `.` and `..` applied
/// lexically (nothing needs to exist).
pub fn absolute(p: &Path) -> std::path::PathBuf {
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    };
    let mut out = std::path::PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The nearest directory above `dir` (made absolute, and with symbolic
/// links resolved as far as the path exists) holding a store marker, if
/// any.
fn enclosing_store(backend: &dyn Backend, dir: &Path) -> Option<std::path::PathBuf> {
    enclosing(dir, |a| backend.exists(&a.join(MARKER_FILE)))
}

/// The nearest directory above `dir` (as written, or with its links
/// resolved) for which `is` holds.
fn enclosing(dir: &Path, is: impl Fn(&Path) -> bool) -> Option<std::path::PathBuf> {
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(dir)
    };
    // the deepest part of the path that exists, with its links resolved,
    // then the rest as written
    let resolved = abs.ancestors().find_map(|a| {
        let real = std::fs::canonicalize(a).ok()?;
        Some(real.join(abs.strip_prefix(a).ok()?))
    });
    [Some(abs), resolved]
        .into_iter()
        .flatten()
        .find_map(|p| p.ancestors().skip(1).find(|a| is(a)).map(Path::to_path_buf))
}

/// The nearest directory above `dir` that is a log: segment files and
/// nothing else (beside the part of `dir` being made in it): a store's
/// `log/`, also where a link makes it live outside the store (which
/// [`refuse_inside_store`] cannot see: no marker is above it). A directory
/// holding a copied segment among other files is no log.
pub fn enclosing_log_dir(backend: &dyn Backend, dir: &Path) -> Option<std::path::PathBuf> {
    use engram_storage::log::segment::{is_rewrite_leftover, parse_segment_file_name};
    let segment = |n: &str| parse_segment_file_name(n).is_some();
    let below = |a: &Path| {
        dir.strip_prefix(a)
            .ok()
            .and_then(|r| r.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
    };
    enclosing(dir, |a| {
        backend.list_dir(a).is_ok_and(|entries| {
            entries.iter().any(|e| !e.is_dir && segment(&e.name))
                && entries.iter().all(|e| {
                    (!e.is_dir && segment(&e.name))
                        || is_rewrite_leftover(&e.name)
                        || below(a).as_deref() == Some(e.name.as_str())
                })
        })
    })
}

/// Whether `dir` can receive a new store or a copy of one (backup target):
/// missing or empty.
pub fn check_empty_target(backend: &dyn Backend, dir: &Path, what: &str) -> Result<()> {
    match classify(backend, dir) {
        Ok(DirKind::Empty) => Ok(()),
        Ok(_) => Err(EngineError::invalid(
            what,
            format!("{} exists and is not empty", dir.display()),
        )),
        // (a file where the directory would go is no store to name)
        Err(EngineError::NotAStore { dir, found }) => Err(EngineError::invalid(
            what,
            format!("{}: {found}; give a new or empty directory", dir.display()),
        )),
        Err(e) => Err(e),
    }
}

/// Whether `dir` can receive a command's output files (`engram eval
/// --out`): missing or empty (an earlier run's files would mix with the
/// new ones), and not inside a store (no command writes into a store's
/// directory but the store's own files).
pub fn check_output_dir(backend: &dyn Backend, dir: &Path, what: &str) -> Result<()> {
    check_empty_target(backend, dir, what)?;
    refuse_inside_store(backend, dir, what, "write the output outside it")
}

/// Whether Engram gives a file this name somewhere in a store (segments,
/// their rewrite temporaries, snapshots, vector files, the state checkpoint,
/// a legacy catalog, the ledger).
pub fn is_owned_name(name: &str) -> bool {
    let base = name.strip_suffix(".tmp").unwrap_or(name);
    engram_storage::log::segment::parse_segment_file_name(base).is_some()
        || matches!(
            base,
            "catalog.redb"
                | "lexical.snap"
                | "hnsw.snap"
                | "vectors.f32"
                | "space.json"
                | "checkpoint.snap"
                | "state.snap"
                | "settings.snap"
                | "ledger.jsonl"
                | "restore.pending"
                | "restore.partial"
        )
        || base.ends_with(".seg")
}

/// Removes the files Engram owns under `path` (a file or a directory tree)
/// and every directory left empty; anything else stays, and its names are
/// returned. A missing path is not an error.
pub fn remove_owned(backend: &dyn Backend, path: &Path) -> Result<Vec<String>> {
    let mut foreign = Vec::new();
    remove_owned_inner(backend, path, &mut foreign)?;
    Ok(foreign)
}

/// Clears the outgoing log of a restore's swap (`old`, `log.old/`): removes
/// what Engram owns, and moves what it does not (a file someone left in
/// `log/`, which Engram ignores there) back into `log`, where it was.
/// Returns what is left in `old` (a name `log` holds too, or a file whose
/// move failed); `old` is gone when that is empty. A `log.old/` left
/// holding a foreign file made every later restore fail its rename.
/// Without a `log`, `old` is the store's only log (a swap cut short whose
/// undoing failed): nothing is touched, and `old` is returned; so is an
/// `old` that is a file, not a directory. An `old` that is a symbolic link
/// (a `log/` that led to another disk) loses the segments where it leads
/// and then the link itself: the other files there (`lost+found`, say)
/// stay where they are.
pub fn clear_outgoing_log(backend: &dyn Backend, old: &Path, log: &Path) -> Result<Vec<String>> {
    if backend.is_dangling_link(old) {
        unlink(backend, old)?;
        return Ok(Vec::new());
    }
    if !backend.exists(old) {
        return Ok(Vec::new());
    }
    let Ok(entries) = backend.list_dir(old) else {
        return Ok(vec![old.display().to_string()]);
    };
    if !backend.exists(log) {
        return Ok(vec![old.display().to_string()]);
    }
    // `old` leading where another part of the store is (a link to the
    // log, or the log a link to it): clearing it would clear that part. A
    // link is removed, the rest left alone.
    if overlaps_another_part(backend, old) {
        if is_link(backend, old) {
            unlink(backend, old)?;
            return Ok(Vec::new());
        }
        return Ok(vec![old.display().to_string()]);
    }
    if is_link(backend, old) {
        // (segments only: a link elsewhere may lead to another store's
        // root, whose ledger and settings bear names Engram owns)
        use engram_storage::log::segment::{is_rewrite_leftover, parse_segment_file_name};
        for e in entries.iter().filter(|e| {
            !e.is_dir
                && (parse_segment_file_name(&e.name).is_some() || is_rewrite_leftover(&e.name))
        }) {
            let p = old.join(&e.name);
            backend.remove_file(&p).map_err(io(&p))?;
        }
        let real = backend.real_path(old);
        backend.sync_dir(&real).map_err(io(&real))?;
        unlink(backend, old)?;
        return Ok(Vec::new());
    }
    remove_owned(backend, old)?;
    if !backend.exists(old) {
        return Ok(Vec::new());
    }
    let mut left = Vec::new();
    for e in backend.list_dir(old).map_err(io(old))? {
        let from = old.join(&e.name);
        let to = log.join(&e.name);
        // (a move that fails, across file systems say, leaves the file in
        // `old`: named, never an error that would stop every open)
        if backend.exists(&to) || backend.rename(&from, &to).is_err() {
            left.push(from.display().to_string());
        }
    }
    backend.sync_dir(log).map_err(io(log))?;
    if left.is_empty() {
        backend.remove_dir_all(old).map_err(io(old))?;
        if let Some(parent) = old.parent() {
            backend.sync_dir(parent).map_err(io(parent))?;
        }
    }
    Ok(left)
}

/// Whether `path` is itself a symbolic link (its parent's links aside).
pub(crate) fn is_link(backend: &dyn Backend, path: &Path) -> bool {
    backend.is_dangling_link(path)
        || match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => {
                backend.real_path(path) != backend.real_path(parent).join(name)
            }
            _ => false,
        }
}

/// Removes the link `path` (not what it leads to), durably.
fn unlink(backend: &dyn Backend, path: &Path) -> Result<()> {
    backend.remove_file(path).map_err(io(path))?;
    if let Some(parent) = path.parent() {
        backend.sync_dir(parent).map_err(io(parent))?;
    }
    Ok(())
}

/// The directories of the store in `dir` that clearing one of the others
/// must never reach.
const STORE_PARTS: [&str; 5] = [
    "log",
    "derived",
    "log.restore",
    "log.old",
    "compact.staging",
];

/// Whether `path`, one of its store's directories, leads where another
/// of them is, inside it or around it, or around the store itself (a link
/// `log.old -> log`, a `log` linked into `log.restore/`, a `derived` and
/// a `log` linked to one directory): clearing it would clear that part.
pub(crate) fn overlaps_another_part(backend: &dyn Backend, path: &Path) -> bool {
    let (Some(store), Some(name)) = (path.parent(), path.file_name()) else {
        return false;
    };
    let real = backend.real_path(path);
    if backend.real_path(store).starts_with(&real) {
        return true;
    }
    STORE_PARTS
        .iter()
        .filter(|p| std::ffi::OsStr::new(p) != name)
        .map(|p| store.join(p))
        .filter(|p| backend.exists(p))
        .any(|p| {
            let other = backend.real_path(&p);
            other.starts_with(&real) || real.starts_with(&other)
        })
}

/// [`remove_owned`] for a directory Engram makes for a while and removes
/// (`log.restore/`, `compact.staging/`): a symbolic link found there is
/// none of Engram's making, and only the link is removed, never what it
/// leads to (a link to `log` would have cleared the live log); a
/// directory there that another part of the store leads into (a `log`
/// linked into it) is left alone.
pub fn remove_transient(backend: &dyn Backend, path: &Path) -> Result<Vec<String>> {
    if is_link(backend, path) {
        unlink(backend, path)?;
        return Ok(Vec::new());
    }
    if backend.exists(path) && overlaps_another_part(backend, path) {
        return Ok(vec![path.display().to_string()]);
    }
    remove_owned(backend, path)
}

/// [`remove_store_copy`] for online compaction's staging copy
/// (`compact.staging/`): a link there is only unlinked, and a directory
/// another part of the store leads into is left alone, as
/// [`remove_transient`] does.
pub fn remove_staging(backend: &dyn Backend, path: &Path) -> Result<Vec<String>> {
    if is_link(backend, path) || (backend.exists(path) && overlaps_another_part(backend, path)) {
        return remove_transient(backend, path);
    }
    remove_store_copy(backend, path)
}

/// Removes a copy of a store Engram made under `path` for its own use
/// (online compaction's staging copy, a restore's new store that did not
/// finish): its marker and lock file, then everything [`remove_owned`]
/// removes.
pub fn remove_store_copy(backend: &dyn Backend, path: &Path) -> Result<Vec<String>> {
    // (the marker, also as written before its rename: a copy cut short
    // there holds nothing else)
    for name in [MARKER_FILE, "ENGRAM.tmp", "LOCK"] {
        let p = path.join(name);
        if backend.exists(&p) {
            backend.remove_file(&p).map_err(io(&p))?;
        }
    }
    remove_owned(backend, path)
}

fn remove_owned_inner(backend: &dyn Backend, path: &Path, foreign: &mut Vec<String>) -> Result<()> {
    if !backend.exists(path) {
        return Ok(());
    }
    let entries = match backend.list_dir(path) {
        Ok(e) => e,
        Err(_) => {
            // a file
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if is_owned_name(&name) {
                backend.remove_file(path).map_err(io(path))?;
            } else {
                foreign.push(path.display().to_string());
            }
            return Ok(());
        }
    };
    for e in entries {
        let p = path.join(&e.name);
        if e.is_dir && backend.exists(&p.join(MARKER_FILE)) {
            // another store: never Engram's to remove
            foreign.push(p.display().to_string());
        } else if e.is_dir {
            remove_owned_inner(backend, &p, foreign)?;
        } else if is_owned_name(&e.name) {
            backend.remove_file(&p).map_err(io(&p))?;
        } else {
            foreign.push(p.display().to_string());
        }
    }
    if backend.list_dir(path).map_err(io(path))?.is_empty() {
        backend.remove_dir_all(path).map_err(io(path))?;
    }
    if let Some(parent) = path.parent() {
        if backend.exists(parent) {
            backend.sync_dir(parent).map_err(io(parent))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engram_storage::{MemBackend, OpenMode};
    use std::path::PathBuf;

    fn touch(b: &MemBackend, p: &str) {
        let p = PathBuf::from(p);
        b.create_dir_all(p.parent().unwrap()).unwrap();
        b.open(&p, OpenMode::Create).unwrap();
    }

    #[test]
    fn the_outgoing_log_is_cleared_only_beside_a_log() {
        let b = MemBackend::new();
        let seg = "/s/log.old/00000000000000000001.seg";
        touch(&b, seg);
        touch(&b, "/s/log.old/notes.txt");
        let (old, log) = (Path::new("/s/log.old"), Path::new("/s/log"));
        // no `log/`: `log.old/` is the store's only log, left whole
        assert_eq!(
            clear_outgoing_log(&b, old, log).unwrap(),
            vec!["/s/log.old"]
        );
        assert!(b.exists(Path::new(seg)));
        // beside a log: its segments go, the foreign file goes back
        touch(&b, "/s/log/00000000000000000001.seg");
        assert!(clear_outgoing_log(&b, old, log).unwrap().is_empty());
        assert!(!b.exists(old));
        assert!(b.exists(Path::new("/s/log/notes.txt")));
    }

    #[test]
    fn a_directory_with_other_files_is_not_a_store_and_is_left_alone() {
        let b = MemBackend::new();
        touch(&b, "/u/derived/reports/q3.txt");
        touch(&b, "/u/log/app.log");
        assert!(matches!(
            classify(&b, Path::new("/u")).unwrap(),
            DirKind::Foreign(_)
        ));
        let e = prepare(&b, Path::new("/u"), true, true).unwrap_err();
        assert!(matches!(e, EngineError::NotAStore { .. }), "{e}");
        assert!(b.exists(Path::new("/u/log/app.log")));
        assert!(!b.exists(Path::new("/u/ENGRAM")));
    }

    #[test]
    fn stores_are_created_only_when_asked_and_only_in_empty_directories() {
        let b = MemBackend::new();
        let e = prepare(&b, Path::new("/s"), false, true).unwrap_err();
        assert!(matches!(e, EngineError::NoStore { .. }), "{e}");
        assert!(!b.exists(Path::new("/s")));
        prepare(&b, Path::new("/s"), true, true).unwrap();
        assert_eq!(classify(&b, Path::new("/s")).unwrap(), DirKind::Store);
        prepare(&b, Path::new("/s"), false, false).unwrap();
    }

    /// A store inside another is refused, and removing what a store owns
    /// never reaches into another store below it (one made before the
    /// refusal existed, or by hand).
    #[test]
    fn a_store_inside_another_is_refused_and_never_removed_by_it() {
        let b = MemBackend::new();
        prepare(&b, Path::new("/s"), true, true).unwrap();
        let e = prepare(&b, Path::new("/s/derived/n"), true, true).unwrap_err();
        assert!(e.to_string().contains("inside the store at /s"), "{e}");
        assert!(!b.exists(Path::new("/s/derived/n")));
        // beside it is fine
        prepare(&b, Path::new("/t"), true, true).unwrap();
        // one made anyway survives the outer store's cleanup
        touch(&b, "/s/derived/n/ENGRAM");
        touch(&b, "/s/derived/n/log/00000000000000000001.seg");
        touch(&b, "/s/derived/state.snap");
        let left = remove_owned(&b, Path::new("/s/derived")).unwrap();
        assert_eq!(left, ["/s/derived/n"]);
        assert!(b.exists(Path::new("/s/derived/n/log/00000000000000000001.seg")));
        assert!(!b.exists(Path::new("/s/derived/state.snap")));
    }

    #[test]
    fn an_unmarked_store_gets_its_marker_at_a_writable_open() {
        let b = MemBackend::new();
        touch(&b, "/s/log/00000000000000000001.seg");
        assert_eq!(classify(&b, Path::new("/s")).unwrap(), DirKind::Unmarked);
        prepare(&b, Path::new("/s"), false, false).unwrap();
        assert_eq!(classify(&b, Path::new("/s")).unwrap(), DirKind::Unmarked);
        prepare(&b, Path::new("/s"), false, true).unwrap();
        assert_eq!(classify(&b, Path::new("/s")).unwrap(), DirKind::Store);
    }

    #[test]
    fn a_damaged_marker_is_named() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/s")).unwrap();
        b.write_file(Path::new("/s/ENGRAM"), b"{\"engram_store\": 99}");
        let e = prepare(&b, Path::new("/s"), false, true).unwrap_err();
        assert!(e.to_string().contains("upgrade Engram"), "{e}");
    }

    /// A directory where the marker or the lock file belongs, and a file
    /// where `derived/` belongs, are named by every open, a read-only one
    /// (`verify`) too: it passed them, and other commands failed with the
    /// OS's bare "Is a directory".
    #[test]
    fn a_directory_for_a_file_or_a_file_for_a_directory_is_named() {
        use engram_storage::FsBackend;
        for (name, as_dir, says) in [
            ("ENGRAM", true, "a directory is where this file belongs"),
            ("LOCK", true, "a directory is where this file belongs"),
            ("derived", false, "a file is where this directory belongs"),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let s = tmp.path();
            std::fs::create_dir_all(s.join("log")).unwrap();
            if name != "ENGRAM" {
                std::fs::write(s.join("ENGRAM"), b"{\"engram_store\": 1}").unwrap();
            }
            if as_dir {
                std::fs::create_dir(s.join(name)).unwrap();
            } else {
                std::fs::write(s.join(name), b"x").unwrap();
            }
            let e = prepare(&FsBackend, s, false, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && e.contains(name), "{name}: {e}");
        }
    }

    #[test]
    fn only_owned_files_are_removed() {
        let b = MemBackend::new();
        touch(&b, "/s/derived/lexical.snap");
        touch(&b, "/s/derived/vectors/m-cosine-3-abc/vectors.f32");
        touch(&b, "/s/derived/vectors/m-cosine-3-abc/hnsw.snap");
        touch(&b, "/s/derived/reports/q3.txt");
        let left = remove_owned(&b, Path::new("/s/derived")).unwrap();
        assert_eq!(left, vec!["/s/derived/reports/q3.txt".to_string()]);
        assert!(b.exists(Path::new("/s/derived/reports/q3.txt")));
        assert!(!b.exists(Path::new("/s/derived/lexical.snap")));
        assert!(!b.exists(Path::new("/s/derived/vectors")));
    }
}
