//! [`FsBackend`]: the real file system (positional reads and writes,
//! `fdatasync`, read-only memory maps, an exclusive `flock` on the lock file).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use super::{Backend, BackendFile, DirEntry, LockGuard, MapInner, MapOptions, Mapping, OpenMode};

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsBackend;

#[derive(Debug)]
struct FsFile {
    file: File,
}

impl Backend for FsBackend {
    fn real_path(&self, path: &Path) -> std::path::PathBuf {
        // the longest existing prefix, resolved, then the rest as written
        let mut rest = Vec::new();
        let mut at = path;
        loop {
            if let Ok(real) = fs::canonicalize(at) {
                return rest.iter().rev().fold(real, |p, c| p.join(c));
            }
            match (at.parent(), at.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    at = parent;
                }
                _ => return path.to_path_buf(),
            }
        }
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        // A store's directories are its owner's alone (what they hold may
        // be deleted content until compaction): made 0700, as PostgreSQL
        // makes its data directory. A directory that exists keeps its mode.
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| {
                // the OS says "File exists" of a file, or of a link to nothing,
                // where a directory belongs
                if e.kind() == io::ErrorKind::AlreadyExists && self.is_dangling_link(path) {
                    io::Error::new(io::ErrorKind::AlreadyExists, LINK_FOR_DIR)
                } else if e.kind() == io::ErrorKind::AlreadyExists
                    && path.exists()
                    && !path.is_dir()
                {
                    io::Error::new(io::ErrorKind::AlreadyExists, FILE_FOR_DIR)
                } else {
                    e
                }
            })
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let entries = fs::read_dir(path).map_err(|e| {
            // the OS says "Not a directory" of a file where one belongs
            if e.kind() == io::ErrorKind::NotADirectory {
                io::Error::new(e.kind(), FILE_FOR_DIR)
            } else {
                e
            }
        })?;
        for entry in entries {
            let entry = entry?;
            out.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir: entry.file_type()?.is_dir(),
            });
        }
        out.sort();
        Ok(out)
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn BackendFile>> {
        let mut o = OpenOptions::new();
        o.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::Write => {
                o.write(true);
            }
            // (a file created is its owner's alone, as the directories are)
            OpenMode::Create => {
                o.write(true).create(true).mode(0o600);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true).mode(0o600);
            }
            OpenMode::Truncate => {
                o.write(true).create(true).truncate(true).mode(0o600);
            }
            OpenMode::TruncatePrivate => {
                o.write(true).create(true).truncate(true).mode(0o600);
            }
        }
        let file = o.open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::IsADirectory {
                io::Error::new(e.kind(), DIR_FOR_FILE)
            } else {
                e
            }
        })?;
        // (a directory opens for reading, and fails at the first read)
        if file.metadata()?.is_dir() {
            return Err(io::Error::new(io::ErrorKind::IsADirectory, DIR_FOR_FILE));
        }
        if mode == OpenMode::TruncatePrivate {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
        }
        Ok(Arc::new(FsFile { file }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        match fs::remove_dir_all(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn is_dangling_link(&self, path: &Path) -> bool {
        path.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            && !path.exists()
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        refuse_dangling_link(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(LockGuard(Box::new(file)))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn try_lock_store(
        &self,
        path: &Path,
        shared: bool,
        also: &[&Path],
    ) -> io::Result<Option<LockGuard>> {
        // A lock found held is asked again for a moment before the store is
        // called in use: a child process that another thread of the holder
        // is starting keeps a copy of every descriptor until it runs its
        // program (fork, then exec), so a store closed just now can look
        // held for that long.
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            if let Some(guard) = try_lock_store_once(self, path, shared, also)? {
                return Ok(Some(guard));
            }
            if start.elapsed() >= LOCK_PATIENCE {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(25));
        }
    }

    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        refuse_dangling_link(path)?;
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(path)
                {
                    Ok(f) => f,
                    // read-only media: nobody can hold a write lock here
                    Err(_) => return Ok(Some(LockGuard(Box::new(())))),
                }
            }
            Err(e) => return Err(e),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(LockGuard(Box::new(file)))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// How long a store's lock found held is asked again before the store is
/// called in use (see [`FsBackend`]'s `try_lock_store`).
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(300);

/// One attempt at a store's lock (see [`Backend::try_lock_store`]).
fn try_lock_store_once(
    fs: &FsBackend,
    path: &Path,
    shared: bool,
    also: &[&Path],
) -> io::Result<Option<LockGuard>> {
    let file_lock = if shared {
        fs.try_lock_shared(path)?
    } else {
        fs.try_lock(path)?
    };
    let Some(file_lock) = file_lock else {
        return Ok(None);
    };
    // The directory too: a lock on the file alone ends when the file is
    // removed and another opener creates a new one. And each directory
    // of `also` where it lives (opening follows links): two stores
    // whose logs lead to one directory exclude each other. A directory
    // that cannot be opened or locked for this (permissions) is left
    // out: the file lock still holds.
    let mut held: Vec<File> = Vec::new();
    for dir in path.parent().into_iter().chain(also.iter().copied()) {
        let Ok(d) = File::open(dir) else {
            continue;
        };
        let taken = if shared {
            d.try_lock_shared()
        } else {
            d.try_lock()
        };
        match taken {
            Ok(()) => held.push(d),
            Err(fs::TryLockError::WouldBlock) => return Ok(None),
            Err(fs::TryLockError::Error(_)) => {}
        }
    }
    Ok(Some(LockGuard(Box::new((file_lock, held)))))
}

impl BackendFile for FsFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn map(&self, len: u64, opts: MapOptions) -> io::Result<Mapping> {
        let file_len = self.len()?;
        if len > file_len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("cannot map {len} bytes of a {file_len}-byte file"),
            ));
        }
        let total = len.max(opts.reserve);
        if total == 0 {
            return Ok(Mapping::new(MapInner::Empty, 0));
        }
        let total =
            usize::try_from(total).map_err(|_| io::Error::other("file too large to map"))?;
        let m = crate::mmap::map_readonly(&self.file, total, opts.populate, opts.random)?;
        Ok(Mapping::new(
            MapInner::Mmap(m),
            crate::cast::usize_from(len),
        ))
    }
}

/// What the OS calls "File exists" or "Not a directory" when a file
/// stands where a directory belongs.
const FILE_FOR_DIR: &str = "a file is where this directory belongs (move it away)";

/// What the OS calls "Is a directory" when a directory stands where a
/// file belongs.
const DIR_FOR_FILE: &str = "a directory is where this file belongs (move it away)";

/// What the OS calls "File exists" when a symbolic link to nothing stands
/// where a directory belongs (creating it would create it wherever the
/// link points).
const LINK_FOR_DIR: &str =
    "a symbolic link to nothing is where this directory belongs (move it away)";

/// A symbolic link to nothing where a store's file belongs: creating the
/// file would create it wherever the link points, outside the store.
fn refuse_dangling_link(path: &Path) -> io::Result<()> {
    if FsBackend.is_dangling_link(path) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            super::DANGLING_LINK,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the store makes is its owner's alone: directories 0700, files
    /// 0600 (the process's umask may only take more away); a directory
    /// that already exists keeps its mode.
    #[test]
    fn what_the_store_makes_only_its_owner_reads() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let theirs = tmp.path().join("data");
        fs::create_dir(&theirs).unwrap();
        fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
        let log = theirs.join("log/sub");
        FsBackend.create_dir_all(&log).unwrap();
        assert_eq!(mode(&theirs), 0o755);
        assert_eq!(mode(&theirs.join("log")), 0o700);
        assert_eq!(mode(&log), 0o700);
        for (i, m) in [
            OpenMode::Create,
            OpenMode::CreateNew,
            OpenMode::Truncate,
            OpenMode::TruncatePrivate,
        ]
        .into_iter()
        .enumerate()
        {
            let f = theirs.join(format!("f{i}"));
            FsBackend.open(&f, m).unwrap();
            assert_eq!(mode(&f), 0o600, "{f:?}");
        }
        let lock = theirs.join("LOCK");
        let _held = FsBackend.try_lock(&lock).unwrap().unwrap();
        assert_eq!(mode(&lock), 0o600);
    }

    /// A store's lock held for a moment (as a child process being started
    /// holds a copy of its holder's descriptors until it runs its program)
    /// is waited for; one held on is reported held, after the wait.
    #[test]
    fn a_store_lock_held_for_a_moment_is_waited_for() {
        let tmp = tempfile::tempdir().unwrap();
        let lock = tmp.path().join("LOCK");
        let held = FsBackend
            .try_lock_store(&lock, false, &[])
            .unwrap()
            .unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(60));
            drop(held);
        });
        let started = std::time::Instant::now();
        let again = FsBackend.try_lock_store(&lock, false, &[]).unwrap();
        assert!(
            again.is_some(),
            "a lock released after 60 ms was reported held"
        );
        release.join().unwrap();
        let waited = started.elapsed();
        assert!(waited >= std::time::Duration::from_millis(40), "{waited:?}");
        // held on: refused, once the patience is spent
        let started = std::time::Instant::now();
        assert!(
            FsBackend
                .try_lock_store(&lock, true, &[])
                .unwrap()
                .is_none()
        );
        assert!(started.elapsed() >= LOCK_PATIENCE);
    }

    #[test]
    fn a_file_where_a_directory_belongs_is_named_as_such() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("derived");
        fs::write(&p, b"").unwrap();
        let e = FsBackend.create_dir_all(&p).unwrap_err();
        assert!(
            e.to_string()
                .contains("a file is where this directory belongs"),
            "{e}"
        );
        FsBackend.create_dir_all(&tmp.path().join("a/b")).unwrap();
        let e = FsBackend.list_dir(&p).unwrap_err();
        assert!(
            e.to_string()
                .contains("a file is where this directory belongs"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_or_a_dangling_link_where_it_does_not_belong_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir(root.join("state.snap")).unwrap();
        for mode in [OpenMode::Read, OpenMode::Write, OpenMode::Truncate] {
            let e = FsBackend
                .open(&root.join("state.snap"), mode)
                .err()
                .unwrap();
            assert!(
                e.to_string()
                    .contains("a directory is where this file belongs"),
                "{mode:?}: {e}"
            );
        }
        std::os::unix::fs::symlink(root.join("missing"), root.join("derived")).unwrap();
        let e = FsBackend.create_dir_all(&root.join("derived")).unwrap_err();
        assert!(
            e.to_string()
                .contains("a symbolic link to nothing is where this directory belongs"),
            "{e}"
        );
        assert!(!root.join("missing").exists());
    }

    #[test]
    fn a_link_to_nothing_is_dangling_and_others_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir(root.join("dir")).unwrap();
        std::os::unix::fs::symlink(root.join("dir"), root.join("to-dir")).unwrap();
        std::os::unix::fs::symlink(root.join("missing"), root.join("to-missing")).unwrap();
        let b = FsBackend;
        assert!(b.is_dangling_link(&root.join("to-missing")));
        assert!(!b.exists(&root.join("to-missing")));
        for p in ["dir", "to-dir", "missing"] {
            assert!(!b.is_dangling_link(&root.join(p)), "{p}");
        }
    }

    #[test]
    fn real_path_resolves_links_in_the_part_that_exists() {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir(root.join("store")).unwrap();
        std::os::unix::fs::symlink(root.join("store"), root.join("link")).unwrap();
        let b = FsBackend;
        assert_eq!(b.real_path(&root.join("link")), root.join("store"));
        assert_eq!(
            b.real_path(&root.join("link/not/yet")),
            root.join("store/not/yet"),
            "missing parts are appended as written"
        );
        assert_eq!(b.real_path(&root.join("plain/x")), root.join("plain/x"));
    }
}
