//! A copy-on-write overlay of a backend: reads come from the base (the real
//! store), every change lands in memory. A store opened through it (with
//! its log read-only) can do everything an open does, including rebuilding
//! derived state, without changing one byte on disk: this is how `verify`
//! and other read-only commands open a store, and how a store on read-only
//! media is read.
//!
//! This module must never write, create, rename or remove anything in the
//! base backend.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::{Backend, BackendFile, DirEntry, LockGuard, MemBackend, OpenMode};

/// See the module documentation.
#[derive(Debug)]
pub struct OverlayBackend {
    base: Arc<dyn Backend>,
    upper: MemBackend,
    /// Base paths removed (or renamed away) in the overlay.
    hidden: Mutex<BTreeSet<PathBuf>>,
}

impl OverlayBackend {
    /// An overlay over `base` with no changes yet.
    pub fn new(base: Arc<dyn Backend>) -> Self {
        OverlayBackend {
            base,
            upper: MemBackend::new(),
            hidden: Mutex::new(BTreeSet::new()),
        }
    }

    fn is_hidden(&self, path: &Path) -> bool {
        self.hidden.lock().iter().any(|h| path.starts_with(h))
    }

    fn in_base(&self, path: &Path) -> bool {
        !self.is_hidden(path) && self.base.exists(path)
    }

    fn in_upper_file(&self, path: &Path) -> bool {
        self.upper.read_file(path).is_some()
    }

    /// Copies a base file into the upper layer so it can be changed there.
    fn copy_up(&self, path: &Path) -> io::Result<()> {
        let f = self.base.open(path, OpenMode::Read)?;
        let len = usize::try_from(f.len()?).map_err(io::Error::other)?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, 0)?;
        if let Some(parent) = path.parent() {
            self.upper.create_dir_all(parent)?;
        }
        self.upper.write_file(path, &buf);
        Ok(())
    }
}

impl Backend for OverlayBackend {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.hidden
            .lock()
            .retain(|h| !h.starts_with(path) && !path.starts_with(h));
        self.upper.create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out: BTreeSet<DirEntry> = BTreeSet::new();
        let mut found = false;
        if self.in_base(path) {
            found = true;
            for e in self.base.list_dir(path)? {
                if !self.is_hidden(&path.join(&e.name)) {
                    out.insert(e);
                }
            }
        }
        if self.upper.exists(path) {
            found = true;
            out.extend(self.upper.list_dir(path)?);
        }
        if !found {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", path.display()),
            ));
        }
        Ok(out.into_iter().collect())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn BackendFile>> {
        if self.in_upper_file(path) {
            return self.upper.open(path, mode);
        }
        let in_base = self.in_base(path);
        match mode {
            OpenMode::Read if in_base => self.base.open(path, OpenMode::Read),
            OpenMode::Read | OpenMode::Write if !in_base => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", path.display()),
            )),
            OpenMode::CreateNew if in_base => Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            )),
            _ => {
                if in_base {
                    self.copy_up(path)?;
                } else if let Some(parent) = path.parent() {
                    if self.in_base(parent) {
                        self.upper.create_dir_all(parent)?;
                    }
                }
                self.upper.open(path, mode)
            }
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let upper = self.in_upper_file(path);
        let base = self.in_base(path);
        if !upper && !base {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} not found", path.display()),
            ));
        }
        if upper {
            self.upper.remove_file(path)?;
        }
        if base {
            self.hidden.lock().insert(path.to_path_buf());
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.upper.remove_dir_all(path)?;
        if self.base.exists(path) {
            self.hidden.lock().insert(path.to_path_buf());
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if !self.in_upper_file(from) {
            if !self.in_base(from) {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} not found", from.display()),
                ));
            }
            self.copy_up(from)?;
        }
        if let Some(parent) = to.parent() {
            self.upper.create_dir_all(parent)?;
        }
        self.upper.rename(from, to)?;
        if self.base.exists(from) {
            self.hidden.lock().insert(from.to_path_buf());
        }
        self.hidden.lock().remove(to);
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.upper.exists(path) || self.in_base(path)
    }

    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        self.base.try_lock_shared(path)
    }

    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        self.base.try_lock_shared(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_stay_in_memory_and_reads_see_them() {
        let base = MemBackend::new();
        base.create_dir_all(Path::new("/s/log")).unwrap();
        base.write_file(Path::new("/s/log/a"), b"base");
        let ov = OverlayBackend::new(Arc::new(base.clone()));
        // a write to an existing file is copied up
        let f = ov.open(Path::new("/s/log/a"), OpenMode::Write).unwrap();
        f.write_all_at(b"BA", 0).unwrap();
        let mut buf = [0u8; 4];
        ov.open(Path::new("/s/log/a"), OpenMode::Read)
            .unwrap()
            .read_exact_at(&mut buf, 0)
            .unwrap();
        assert_eq!(&buf, b"BAse");
        assert_eq!(base.read_file(Path::new("/s/log/a")).unwrap(), b"base");
        // new files, removals and renames never reach the base
        ov.create_dir_all(Path::new("/s/derived")).unwrap();
        ov.open(Path::new("/s/derived/x"), OpenMode::Create)
            .unwrap()
            .write_all_at(b"x", 0)
            .unwrap();
        assert!(ov.exists(Path::new("/s/derived/x")));
        assert!(!base.exists(Path::new("/s/derived/x")));
        ov.remove_file(Path::new("/s/log/a")).unwrap();
        assert!(!ov.exists(Path::new("/s/log/a")));
        assert!(base.exists(Path::new("/s/log/a")));
        let names: Vec<String> = ov
            .list_dir(Path::new("/s"))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec!["derived".to_string(), "log".to_string()]);
        assert!(ov.list_dir(Path::new("/s/log")).unwrap().is_empty());
    }

    #[test]
    fn a_shared_lock_excludes_a_writer() {
        let base = MemBackend::new();
        base.create_dir_all(Path::new("/s")).unwrap();
        let ov = OverlayBackend::new(Arc::new(base.clone()));
        let shared = ov.try_lock(Path::new("/s/LOCK")).unwrap();
        assert!(shared.is_some());
        assert!(base.try_lock(Path::new("/s/LOCK")).unwrap().is_none());
        drop(shared);
        assert!(base.try_lock(Path::new("/s/LOCK")).unwrap().is_some());
    }
}
