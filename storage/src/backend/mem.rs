//! [`MemBackend`]: an in-memory file system with crash simulation (see the
//! parent module's documentation) and injected faults ([`Fault`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Backend, BackendFile, DirEntry, LockGuard, MapOptions, Mapping, OpenMode};

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

    /// Writes attempted so far on all files, those that failed for lack of
    /// room included (not those an injected fault failed).
    pub fn writes_attempted(&self) -> u64 {
        self.faults.lock().n_writes
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
