//! The file-system seam: every byte Engram reads or writes goes through
//! [`Backend`] and [`BackendFile`].
//!
//! Two implementations:
//! - [`FsBackend`]: the real file system (positional reads/writes,
//!   `fdatasync`, read-only memory maps, an exclusive `flock` on the lock file);
//! - [`MemBackend`]: an in-memory file system for tests. It remembers, per
//!   file, what is *durable* (synced) and what is only *written*, and
//!   [`MemBackend::crash_image`] produces the state a power cut could leave:
//!   every 512-byte sector not yet synced independently keeps its old or new
//!   content, and the length of an unsynced extension is cut at a random
//!   point. It can also fail writes or syncs on demand ([`Fault`]).
//!
//! This module must never interpret file contents.

use std::fmt;
use std::io;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use crate::aligned::AlignedBuf;

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only; the file must exist.
    Read,
    /// Read and write; the file must exist.
    Write,
    /// Read and write; created empty if missing, never truncated.
    Create,
    /// Read and write; fails if the file exists.
    CreateNew,
    /// Read and write; created or truncated to zero length.
    Truncate,
    /// Like `Truncate`, for secrets: on a real file system the file is
    /// readable and writable by its owner only (mode 0600, also imposed on
    /// a file that already existed).
    TruncatePrivate,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// File or directory name (not the full path).
    pub name: String,
    /// Whether it is a directory.
    pub is_dir: bool,
}

/// A held exclusive lock; released on drop.
pub struct LockGuard(#[allow(dead_code)] Box<dyn Send + Sync>);

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockGuard")
    }
}

/// Why a file of a store is not created where a symbolic link to nothing
/// stands: it would be created wherever the link points, outside the
/// store.
pub(crate) const DANGLING_LINK: &str = "a symbolic link to nothing is where this file belongs \
     (a file is never created through one, outside the store): remove it";

/// The directory-level operations Engram needs.
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Lists a directory, sorted by name.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>>;
    /// Opens a file.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn BackendFile>>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory and everything under it; a missing directory is not an error.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Makes directory entries (creations, renames, removals) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (created if missing). `Ok(None)`
    /// means another holder has it.
    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>>;
    /// Takes a shared lock on `path` (readers; excludes an exclusive
    /// holder). A lock file that is missing and cannot be created (a store
    /// on read-only media) gives a guard that holds nothing: no writer can
    /// exist there either.
    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<LockGuard>>;
    /// Takes a store's lock: its lock file `path`, exclusive or `shared`,
    /// as [`Backend::try_lock`] / [`Backend::try_lock_shared`] do, and,
    /// where the backend can, the directory holding it the same way, so
    /// that removing the lock file (a cleanup script) does not let a second
    /// writer in while the first still runs; and each existing directory
    /// of `also` (the store's log, which a symbolic link may make another
    /// store's too) the same way. A lock found held may be asked again for
    /// a moment before `Ok(None)` ([`FsBackend`] waits up
    /// to 300 ms: a child process being started holds its parent's
    /// descriptors, and so its locks, until it runs its program).
    fn try_lock_store(
        &self,
        path: &Path,
        shared: bool,
        also: &[&Path],
    ) -> io::Result<Option<LockGuard>> {
        let _ = also;
        if shared {
            self.try_lock_shared(path)
        } else {
            self.try_lock(path)
        }
    }
    /// `path` with every symbolic link among its existing parts resolved
    /// (the parts that do not exist yet appended as written): where a
    /// file at `path` would really be. Without links, `path` itself.
    fn real_path(&self, path: &Path) -> std::path::PathBuf {
        path.to_path_buf()
    }
    /// Whether `path` is a symbolic link whose target does not exist
    /// ([`Backend::exists`] follows links, so it says no for one, while
    /// creating a directory there fails). Backends without links: never.
    fn is_dangling_link(&self, path: &Path) -> bool {
        let _ = path;
        false
    }
}

/// An open file. All offsets are absolute; there is no cursor.
pub trait BackendFile: Send + Sync + fmt::Debug {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes everything written so far durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// A read-only view of the first `len` bytes (`len <= self.len()`).
    /// `opts.reserve` asks for address space up to that many bytes, so the
    /// view can later be extended (see [`Mapping::extend_valid`]) as the
    /// file grows instead of being mapped again; `opts.populate` asks for the
    /// pages to be faulted in at once (for data read at random, like vectors).
    fn map(&self, len: u64, opts: MapOptions) -> io::Result<Mapping>;
}

/// Options of [`BackendFile::map`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapOptions {
    /// Address space to reserve (bytes); the view may grow up to it.
    pub reserve: u64,
    /// Fault the pages in at once.
    pub populate: bool,
    /// Pages are read at random, a few at a time: no read-ahead, so a
    /// page not in the page cache costs one page read. (Linux may still
    /// map cached neighbours of a faulting page into the process:
    /// fault-around.)
    pub random: bool,
}

/// A read-only view of the start of a file: a memory map for [`FsBackend`],
/// a 16-byte aligned heap copy for [`MemBackend`]. Either way the first byte
/// is aligned to at least 16 bytes, so archived records can be read in place.
///
/// The view shows `valid` bytes; a memory map may reserve more address space
/// than the file holds, and [`Mapping::extend_valid`] makes more of it
/// visible once the file has grown. Bytes past the end of the file are never
/// visible, so touching the view can never fault.
pub struct Mapping {
    inner: MapInner,
    valid: std::sync::atomic::AtomicUsize,
}

enum MapInner {
    Empty,
    Mmap(memmap2::Mmap),
    Heap(AlignedBuf),
}

impl Mapping {
    fn new(inner: MapInner, valid: usize) -> Mapping {
        Mapping {
            inner,
            valid: std::sync::atomic::AtomicUsize::new(valid),
        }
    }

    fn heap(bytes: &[u8]) -> Mapping {
        Mapping::new(MapInner::Heap(AlignedBuf::copy_from(bytes)), bytes.len())
    }

    fn full(&self) -> &[u8] {
        match &self.inner {
            MapInner::Empty => &[],
            MapInner::Mmap(m) => m,
            MapInner::Heap(b) => b.as_slice(),
        }
    }

    /// Bytes of address space this view can show.
    pub fn capacity(&self) -> usize {
        self.full().len()
    }

    /// Shows the first `len` bytes (if within capacity; never shrinks).
    /// The caller guarantees the file is at least `len` bytes long.
    /// Returns whether the view now covers `len` bytes.
    pub fn extend_valid(&self, len: usize) -> bool {
        if len > self.capacity() {
            return false;
        }
        self.valid
            .fetch_max(len, std::sync::atomic::Ordering::AcqRel);
        true
    }
}

impl Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let v = self.valid.load(std::sync::atomic::Ordering::Acquire);
        &self.full()[..v]
    }
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mapping({} bytes)", self.len())
    }
}

mod fs;
mod mem;

pub use fs::FsBackend;
pub use mem::{Fault, MISDIRECT_BYTES, MemBackend, SECTOR_BYTES, SplitMix64};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_not_made_durable_by_a_directory_sync_may_be_lost() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/d")).unwrap();
        b.open(Path::new("/d/synced"), OpenMode::Create).unwrap();
        b.sync_dir(Path::new("/d")).unwrap();
        let f = b.open(Path::new("/d/new"), OpenMode::Create).unwrap();
        f.write_all_at(b"x", 0).unwrap();
        f.sync_data().unwrap(); // the bytes are durable, the name is not
        b.rename(Path::new("/d/synced"), Path::new("/d/renamed"))
            .unwrap();
        let (mut lost, mut kept, mut old_name) = (0, 0, 0);
        for seed in 0..64 {
            let img = b.crash_image(seed);
            if img.exists(Path::new("/d/new")) {
                kept += 1;
            } else {
                lost += 1;
            }
            if img.exists(Path::new("/d/synced")) {
                old_name += 1;
            }
        }
        assert!(lost > 0 && kept > 0, "lost {lost}, kept {kept}");
        assert!(old_name > 0, "an unsynced rename is sometimes undone");
        b.sync_dir(Path::new("/d")).unwrap();
        for seed in 0..16 {
            let img = b.crash_image(seed);
            assert!(img.exists(Path::new("/d/new")) && img.exists(Path::new("/d/renamed")));
            assert!(!img.exists(Path::new("/d/synced")));
        }
    }

    #[test]
    fn mem_backend_loses_only_unsynced_bytes() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/d")).unwrap();
        let f = b.open(Path::new("/d/a"), OpenMode::Create).unwrap();
        f.write_all_at(&[1u8; 1000], 0).unwrap();
        f.sync_data().unwrap();
        b.sync_dir(Path::new("/d")).unwrap();
        f.write_all_at(&[2u8; 3000], 1000).unwrap();
        for seed in 0..50 {
            let img = b.crash_image(seed);
            let bytes = img.read_file(Path::new("/d/a")).unwrap();
            assert!(bytes.len() >= 1000 && bytes.len() <= 4000, "seed {seed}");
            assert!(bytes[..1000].iter().all(|&x| x == 1), "seed {seed}");
            assert!(
                bytes[1000..].iter().all(|&x| x == 2 || x == 0),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn faults_fire_after_the_given_count() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/d")).unwrap();
        let f = b.open(Path::new("/d/a"), OpenMode::Create).unwrap();
        b.inject(Fault::FailSyncsAfter(1));
        f.sync_data().unwrap();
        assert!(f.sync_data().is_err());
        assert!(f.sync_data().is_err());
        b.clear_faults();
        f.sync_data().unwrap();
        b.inject(Fault::FailWritesAfter(0));
        assert!(f.write_all_at(b"x", 0).is_err());
    }

    #[test]
    fn lock_is_exclusive_until_dropped() {
        for backend in [
            Box::new(MemBackend::new()) as Box<dyn Backend>,
            Box::new(FsBackend),
        ] {
            let dir = tempfile::tempdir().unwrap();
            backend.create_dir_all(dir.path()).unwrap();
            let p = dir.path().join("LOCK");
            let g = backend.try_lock(&p).unwrap();
            assert!(g.is_some());
            if format!("{backend:?}").starts_with("Mem") {
                assert!(backend.try_lock(&p).unwrap().is_none());
            }
            drop(g);
            assert!(backend.try_lock(&p).unwrap().is_some());
        }
    }

    #[test]
    fn heap_mapping_is_aligned() {
        for n in [1usize, 7, 16, 1000] {
            let m = Mapping::heap(&vec![9u8; n]);
            assert_eq!(m.len(), n);
            assert_eq!(m.as_ptr() as usize % 16, 0);
        }
    }

    #[test]
    fn a_reserved_map_grows_with_its_file_without_remapping() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = FsBackend.open(&p, OpenMode::Create).unwrap();
        f.write_all_at(b"abcd", 0).unwrap();
        let m = f
            .map(
                4,
                MapOptions {
                    reserve: 1 << 20,
                    ..MapOptions::default()
                },
            )
            .unwrap();
        assert_eq!(&m[..], b"abcd");
        assert_eq!(m.capacity(), 1 << 20);
        f.write_all_at(b"efgh", 4).unwrap();
        assert!(m.extend_valid(8));
        assert_eq!(&m[..], b"abcdefgh");
        assert!(m.extend_valid(6), "never shrinks");
        assert_eq!(m.len(), 8);
        assert!(!m.extend_valid(2 << 20), "not beyond the reservation");
    }

    #[test]
    fn mem_listing_and_rename() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/d/sub")).unwrap();
        b.open(Path::new("/d/x"), OpenMode::Create).unwrap();
        let names: Vec<_> = b
            .list_dir(Path::new("/d"))
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.is_dir))
            .collect();
        assert_eq!(names, vec![("sub".into(), true), ("x".into(), false)]);
        b.rename(Path::new("/d/x"), Path::new("/d/sub/y")).unwrap();
        assert!(b.exists(Path::new("/d/sub/y")));
        assert!(!b.exists(Path::new("/d/x")));
    }
}
