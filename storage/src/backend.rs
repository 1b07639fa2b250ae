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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

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

// ---------------------------------------------------------------------------
// Real file system
// ---------------------------------------------------------------------------

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsBackend;

#[derive(Debug)]
struct FsFile {
    file: File,
}

impl Backend for FsBackend {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(path)? {
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
            OpenMode::Create => {
                o.write(true).create(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
            OpenMode::Truncate => {
                o.write(true).create(true).truncate(true);
            }
            OpenMode::TruncatePrivate => {
                use std::os::unix::fs::OpenOptionsExt;
                o.write(true).create(true).truncate(true).mode(0o600);
            }
        }
        let file = o.open(path)?;
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

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(LockGuard(Box::new(file)))),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
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
        let m = crate::mmap::map_readonly(&self.file, total, opts.populate)?;
        Ok(Mapping::new(
            MapInner::Mmap(m),
            crate::cast::usize_from(len),
        ))
    }
}

// ---------------------------------------------------------------------------
// In-memory file system with crash simulation
// ---------------------------------------------------------------------------

/// Size of the unit a simulated power cut keeps or loses as a whole.
pub const SECTOR_BYTES: usize = 512;

/// An injected failure for [`MemBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The `n`-th write from now (0 = the next one) and every later write fail.
    FailWritesAfter(u64),
    /// The `n`-th sync from now and every later sync fail.
    FailSyncsAfter(u64),
    /// The `n`-th read from now and every later read fail (an unreadable
    /// sector).
    FailReadsAfter(u64),
    /// The `n`-th write from now lands [`MISDIRECT_BYTES`] further into the
    /// file than asked (a misdirected write), reporting success.
    MisdirectWrite(u64),
}

/// How far a misdirected write lands from where it was aimed.
pub const MISDIRECT_BYTES: u64 = 4096;

/// Called after every write with the write's sequence number (from 0).
pub type WriteHook = Arc<dyn Fn(u64) + Send + Sync>;

#[derive(Default)]
struct FaultState {
    writes_left: Option<u64>,
    syncs_left: Option<u64>,
    n_writes: u64,
    on_write: Option<WriteHook>,
    reads_left: Option<u64>,
    misdirect_in: Option<u64>,
    /// A disk of this many bytes: growing a file past it fails with
    /// ENOSPC, as a full file system does.
    capacity_bytes: Option<u64>,
    /// Bytes held by all files.
    used_bytes: u64,
}

impl FaultState {
    /// Accounts for a file growing (or shrinking) from `old` to `new`
    /// bytes; refuses growth past the capacity.
    fn resize(&mut self, old: usize, new: usize) -> io::Result<()> {
        if new > old {
            let grow = (new - old) as u64;
            if let Some(cap) = self.capacity_bytes {
                if self.used_bytes + grow > cap {
                    return Err(io::Error::from_raw_os_error(28)); // ENOSPC
                }
            }
            self.used_bytes += grow;
        } else {
            self.used_bytes = self.used_bytes.saturating_sub((old - new) as u64);
        }
        Ok(())
    }
}

impl fmt::Debug for FaultState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultState")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("used_bytes", &self.used_bytes)
            .field("writes_left", &self.writes_left)
            .field("syncs_left", &self.syncs_left)
            .field("n_writes", &self.n_writes)
            .finish()
    }
}

impl FaultState {
    fn check(left: &mut Option<u64>, what: &str) -> io::Result<()> {
        match left {
            Some(0) => Err(io::Error::other(format!("injected {what} failure"))),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[derive(Debug, Default)]
struct FileState {
    /// What a reader sees now.
    data: Vec<u8>,
    /// What survives a power cut for certain.
    durable: Vec<u8>,
}

#[derive(Debug)]
struct MemFile {
    state: Mutex<FileState>,
    faults: Arc<Mutex<FaultState>>,
}

#[derive(Debug, Default)]
struct MemFs {
    files: BTreeMap<PathBuf, Arc<MemFile>>,
    /// The names as of the last `sync_dir` of their directory: what a
    /// power cut keeps for certain. A name created, replaced or removed
    /// since then survives a cut or not, at random (as on a real disk
    /// without a directory fsync). Directories themselves are durable.
    durable_names: BTreeMap<PathBuf, Arc<MemFile>>,
    dirs: BTreeSet<PathBuf>,
    /// Held locks: -1 exclusive, n > 0 shared by n holders.
    locks: BTreeMap<PathBuf, i64>,
}

/// An in-memory file system for tests; cheap to clone (clones share state).
#[derive(Clone, Debug, Default)]
pub struct MemBackend {
    fs: Arc<Mutex<MemFs>>,
    faults: Arc<Mutex<FaultState>>,
}

struct MemLock {
    fs: Arc<Mutex<MemFs>>,
    path: PathBuf,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut fs = self.fs.lock();
        if let Some(n) = fs.locks.get_mut(&self.path) {
            if *n > 1 {
                *n -= 1;
                return;
            }
        }
        fs.locks.remove(&self.path);
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl MemBackend {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms a fault; it replaces any earlier one of the same kind.
    pub fn inject(&self, fault: Fault) {
        let mut f = self.faults.lock();
        match fault {
            Fault::FailWritesAfter(n) => f.writes_left = Some(n),
            Fault::FailSyncsAfter(n) => f.syncs_left = Some(n),
            Fault::FailReadsAfter(n) => f.reads_left = Some(n),
            Fault::MisdirectWrite(n) => f.misdirect_in = Some(n),
        }
    }

    /// Removes every armed fault and the write hook (the capacity stays).
    pub fn clear_faults(&self) {
        let mut f = self.faults.lock();
        let (capacity_bytes, used_bytes) = (f.capacity_bytes, f.used_bytes);
        *f = FaultState {
            capacity_bytes,
            used_bytes,
            ..FaultState::default()
        };
    }

    /// Makes the file system this many bytes large (None: unbounded):
    /// writes and extensions past it fail with ENOSPC until space is freed
    /// or the capacity raised.
    pub fn set_capacity(&self, capacity_bytes: Option<u64>) {
        self.faults.lock().capacity_bytes = capacity_bytes;
    }

    /// Flips one bit of a file in place, durably (a bit rotted on disk).
    pub fn flip_bit(&self, path: &Path, offset: usize, bit: u8) -> bool {
        let fs = self.fs.lock();
        let Some(f) = fs.files.get(path) else {
            return false;
        };
        let mut st = f.state.lock();
        if offset >= st.data.len() {
            return false;
        }
        st.data[offset] ^= 1 << (bit % 8);
        st.durable = st.data.clone();
        true
    }

    /// Bytes held by all files.
    pub fn used_bytes(&self) -> u64 {
        self.faults.lock().used_bytes
    }

    /// Installs a hook run after every write (outside all internal locks),
    /// e.g. to take a [`MemBackend::crash_image`] between a write and its
    /// sync.
    pub fn on_write(&self, hook: WriteHook) {
        self.faults.lock().on_write = Some(hook);
    }

    /// The file system a power cut at this instant could leave behind,
    /// chosen by `seed`: synced bytes survive; each unsynced sector keeps
    /// its old or its new content; an unsynced extension is cut at a random
    /// length. Directory entries are treated as durable when made.
    pub fn crash_image(&self, seed: u64) -> MemBackend {
        let fs = self.fs.lock();
        let mut rng = SplitMix64(seed);
        let mut files = BTreeMap::new();
        let mut names: BTreeSet<&PathBuf> = fs.files.keys().collect();
        names.extend(fs.durable_names.keys());
        for path in names {
            let now = fs.files.get(path);
            let synced = fs.durable_names.get(path);
            // A name changed since its directory's last sync may or may not
            // have reached the disk.
            let file = match (now, synced) {
                (Some(a), Some(b)) if Arc::ptr_eq(a, b) => Some(a),
                (a, b) => {
                    if rng.next_u64() & 1 == 0 {
                        a
                    } else {
                        b
                    }
                }
            };
            let Some(file) = file else { continue };
            let st = file.state.lock();
            let data = torn_merge(&st.durable, &st.data, &mut rng);
            files.insert(
                path.clone(),
                Arc::new(MemFile {
                    state: Mutex::new(FileState {
                        durable: data.clone(),
                        data,
                    }),
                    faults: Arc::new(Mutex::new(FaultState::default())),
                }),
            );
        }
        let faults = Arc::new(Mutex::new(FaultState::default()));
        // New files must share the new backend's fault state.
        let files = files
            .into_iter()
            .map(|(p, f)| {
                let st = std::mem::take(&mut *f.state.lock());
                (
                    p,
                    Arc::new(MemFile {
                        state: Mutex::new(st),
                        faults: faults.clone(),
                    }),
                )
            })
            .collect::<BTreeMap<PathBuf, Arc<MemFile>>>();
        {
            let mut f = faults.lock();
            f.used_bytes = files
                .values()
                .map(|x| x.state.lock().data.len() as u64)
                .sum();
            f.capacity_bytes = self.faults.lock().capacity_bytes;
        }
        MemBackend {
            fs: Arc::new(Mutex::new(MemFs {
                durable_names: files.clone(),
                files,
                dirs: fs.dirs.clone(),
                locks: BTreeMap::new(),
            })),
            faults,
        }
    }

    /// Total bytes stored (current view), for tests.
    pub fn total_bytes(&self) -> usize {
        let fs = self.fs.lock();
        fs.files.values().map(|f| f.state.lock().data.len()).sum()
    }

    /// Direct read access to a file's current bytes, for tests.
    pub fn read_file(&self, path: &Path) -> Option<Vec<u8>> {
        let fs = self.fs.lock();
        fs.files.get(path).map(|f| f.state.lock().data.clone())
    }

    /// Direct write access (bypassing faults; durable at once), for
    /// corruption tests.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) {
        let mut fs = self.fs.lock();
        let faults = self.faults.clone();
        let f = fs
            .files
            .entry(path.to_path_buf())
            .or_insert_with(|| {
                Arc::new(MemFile {
                    state: Mutex::new(FileState::default()),
                    faults,
                })
            })
            .clone();
        fs.durable_names.insert(path.to_path_buf(), f.clone());
        let mut st = f.state.lock();
        {
            // bypasses the capacity, but keeps the count right
            let mut fa = self.faults.lock();
            let (old, new) = (st.data.len(), bytes.len());
            fa.used_bytes = (fa.used_bytes + new as u64).saturating_sub(old as u64);
        }
        st.data = bytes.to_vec();
        st.durable = bytes.to_vec();
    }
}

fn torn_merge(durable: &[u8], data: &[u8], rng: &mut SplitMix64) -> Vec<u8> {
    let (lo, hi) = if durable.len() <= data.len() {
        (durable.len(), data.len())
    } else {
        (data.len(), durable.len())
    };
    let new_len = if lo == hi {
        lo
    } else {
        lo + crate::cast::usize_from(rng.next_u64() % (hi - lo + 1) as u64)
    };
    let mut out = vec![0u8; new_len];
    let mut start = 0;
    while start < new_len {
        let end = (start + SECTOR_BYTES).min(new_len);
        let old = slice_or_zero(durable, start, end);
        let new = slice_or_zero(data, start, end);
        let pick_new = old != new && rng.next_u64() & 1 == 1;
        out[start..end].copy_from_slice(if pick_new { &new } else { &old });
        start = end;
    }
    out
}

fn slice_or_zero(bytes: &[u8], start: usize, end: usize) -> Vec<u8> {
    let mut v = vec![0u8; end - start];
    if start < bytes.len() {
        let e = end.min(bytes.len());
        v[..e - start].copy_from_slice(&bytes[start..e]);
    }
    v
}

/// A tiny deterministic generator for crash images (no dependency needed).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Backend for MemBackend {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.fs.lock();
        let mut p = path.to_path_buf();
        loop {
            fs.dirs.insert(p.clone());
            if !p.pop() || p.as_os_str().is_empty() {
                break;
            }
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let fs = self.fs.lock();
        if !fs.dirs.contains(path) {
            return Err(not_found(path));
        }
        let mut out = BTreeSet::new();
        for p in fs.files.keys() {
            if p.parent() == Some(path)
                && let Some(n) = p.file_name()
            {
                out.insert(DirEntry {
                    name: n.to_string_lossy().into_owned(),
                    is_dir: false,
                });
            }
        }
        for p in &fs.dirs {
            if p.parent() == Some(path)
                && let Some(n) = p.file_name()
            {
                out.insert(DirEntry {
                    name: n.to_string_lossy().into_owned(),
                    is_dir: true,
                });
            }
        }
        Ok(out.into_iter().collect())
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn BackendFile>> {
        let mut fs = self.fs.lock();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
            && !fs.dirs.contains(parent)
        {
            return Err(not_found(parent));
        }
        let existing = fs.files.get(path).cloned();
        let file = match (mode, existing) {
            (OpenMode::Read | OpenMode::Write, None) => return Err(not_found(path)),
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists", path.display()),
                ));
            }
            (OpenMode::Truncate | OpenMode::TruncatePrivate, Some(f)) => {
                let mut st = f.state.lock();
                let _ = self.faults.lock().resize(st.data.len(), 0);
                st.data.clear();
                drop(st);
                f
            }
            (_, Some(f)) => f,
            (_, None) => {
                let f = Arc::new(MemFile {
                    state: Mutex::new(FileState::default()),
                    faults: self.faults.clone(),
                });
                fs.files.insert(path.to_path_buf(), f.clone());
                f
            }
        };
        Ok(Arc::new(MemHandle {
            file,
            writable: mode != OpenMode::Read,
        }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let f = self
            .fs
            .lock()
            .files
            .remove(path)
            .ok_or_else(|| not_found(path))?;
        let len = f.state.lock().data.len();
        let _ = self.faults.lock().resize(len, 0);
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.fs.lock();
        let freed: usize = fs
            .files
            .iter()
            .filter(|(p, _)| p.starts_with(path))
            .map(|(_, f)| f.state.lock().data.len())
            .sum();
        let _ = self.faults.lock().resize(freed, 0);
        fs.files.retain(|p, _| !p.starts_with(path));
        // (directory removal is modelled as durable at once)
        fs.durable_names.retain(|p, _| !p.starts_with(path));
        fs.dirs.retain(|p| !p.starts_with(path));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut fs = self.fs.lock();
        if let Some(f) = fs.files.remove(from) {
            if let Some(old) = fs.files.insert(to.to_path_buf(), f) {
                let len = old.state.lock().data.len();
                let _ = self.faults.lock().resize(len, 0);
            }
            return Ok(());
        }
        if fs.dirs.contains(from) {
            let moved: Vec<(PathBuf, Arc<MemFile>)> = fs
                .files
                .iter()
                .filter(|(p, _)| p.starts_with(from))
                .map(|(p, f)| (p.clone(), f.clone()))
                .collect();
            for (p, f) in moved {
                fs.files.remove(&p);
                let rel = p.strip_prefix(from).expect("prefix checked");
                fs.files.insert(to.join(rel), f);
            }
            let dirs: Vec<PathBuf> = fs
                .dirs
                .iter()
                .filter(|p| p.starts_with(from))
                .cloned()
                .collect();
            for d in dirs {
                fs.dirs.remove(&d);
                let rel = d.strip_prefix(from).expect("prefix checked");
                fs.dirs.insert(to.join(rel));
            }
            return Ok(());
        }
        Err(not_found(from))
    }

    fn exists(&self, path: &Path) -> bool {
        let fs = self.fs.lock();
        fs.files.contains_key(path) || fs.dirs.contains(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut fs = self.fs.lock();
        if !fs.dirs.contains(path) {
            return Err(not_found(path));
        }
        fs.durable_names.retain(|p, _| p.parent() != Some(path));
        let now: Vec<(PathBuf, Arc<MemFile>)> = fs
            .files
            .iter()
            .filter(|(p, _)| p.parent() == Some(path))
            .map(|(p, f)| (p.clone(), f.clone()))
            .collect();
        fs.durable_names.extend(now);
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        let mut fs = self.fs.lock();
        if fs.locks.contains_key(path) {
            return Ok(None);
        }
        fs.locks.insert(path.to_path_buf(), -1);
        Ok(Some(LockGuard(Box::new(MemLock {
            fs: self.fs.clone(),
            path: path.to_path_buf(),
        }))))
    }

    fn try_lock_shared(&self, path: &Path) -> io::Result<Option<LockGuard>> {
        let mut fs = self.fs.lock();
        let n = fs.locks.entry(path.to_path_buf()).or_insert(0);
        if *n < 0 {
            return Ok(None);
        }
        *n += 1;
        Ok(Some(LockGuard(Box::new(MemLock {
            fs: self.fs.clone(),
            path: path.to_path_buf(),
        }))))
    }
}

#[derive(Debug)]
struct MemHandle {
    file: Arc<MemFile>,
    writable: bool,
}

impl BackendFile for MemHandle {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.state.lock().data.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FaultState::check(&mut self.file.faults.lock().reads_left, "read")?;
        let st = self.file.state.lock();
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= st.data.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past end"))?;
        buf.copy_from_slice(&st.data[start..end]);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ));
        }
        let (n, hook, offset) = {
            let mut f = self.file.faults.lock();
            FaultState::check(&mut f.writes_left, "write")?;
            f.n_writes += 1;
            let offset = match f.misdirect_in {
                Some(0) => {
                    f.misdirect_in = None;
                    offset + MISDIRECT_BYTES
                }
                Some(k) => {
                    f.misdirect_in = Some(k - 1);
                    offset
                }
                None => offset,
            };
            (f.n_writes - 1, f.on_write.clone(), offset)
        };
        {
            let mut st = self.file.state.lock();
            let start = usize::try_from(offset).map_err(io::Error::other)?;
            let end = start + buf.len();
            if st.data.len() < end {
                let mut f = self.file.faults.lock();
                if let Err(e) = f.resize(st.data.len(), end) {
                    // A full disk takes what fits, then fails (a short write).
                    let room = crate::cast::usize_from(
                        f.capacity_bytes
                            .map_or(0, |c| c.saturating_sub(f.used_bytes)),
                    );
                    let fit = (st.data.len() + room).min(end);
                    if fit > start {
                        let old = st.data.len();
                        let _ = f.resize(old, fit);
                        st.data.resize(fit.max(old), 0);
                        st.data[start..fit].copy_from_slice(&buf[..fit - start]);
                    }
                    return Err(e);
                }
                st.data.resize(end, 0);
            }
            st.data[start..end].copy_from_slice(buf);
        }
        if let Some(h) = hook {
            h(n);
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        FaultState::check(&mut self.file.faults.lock().syncs_left, "sync")?;
        let mut st = self.file.state.lock();
        st.durable = st.data.clone();
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ));
        }
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let mut st = self.file.state.lock();
        self.file.faults.lock().resize(st.data.len(), len)?;
        st.data.resize(len, 0);
        Ok(())
    }

    fn map(&self, len: u64, _opts: MapOptions) -> io::Result<Mapping> {
        FaultState::check(&mut self.file.faults.lock().reads_left, "read")?;
        let st = self.file.state.lock();
        let len = usize::try_from(len).map_err(io::Error::other)?;
        if len > st.data.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "map past end"));
        }
        Ok(Mapping::heap(&st.data[..len]))
    }
}

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
                    populate: false,
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
