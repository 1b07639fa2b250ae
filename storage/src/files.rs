//! Files of derived state: whole-file snapshots replaced atomically, and
//! append-only vector files read through a memory map.
//!
//! ```text
//! derived file (snapshot) header, 48 bytes, little-endian
//! offset size field
//!  0     8    magic           chosen by the owner ("ENGRHNSW", "ENGRBM25", ...)
//!  8     4    format_version  owner's version of the body encoding
//! 12     4    reserved        zero
//! 16     8    applied_lsn     last log LSN reflected in the body
//! 24     8    body_len        bytes of body
//! 32     4    body_crc        CRC32C of the body
//! 36     8    reserved        zero
//! 44     4    header_crc      CRC32C of bytes 0..44
//! 48     ..   body (16-byte aligned)
//!
//! vector file header, 64 bytes, then rows of `dim` f32 in little-endian
//! order (the only byte order Engram builds for)
//!  0     8    magic           "ENGRVECT"
//!  8     4    format_version  1
//! 12     4    dim             u32
//! 16    44    reserved        zero
//! 60     4    header_crc      CRC32C of bytes 0..60
//! ```
//! Snapshots are written to `<name>.tmp`, synced, and renamed over the old
//! file, so a reader sees the old or the new snapshot, never a mixture.
//! Vector files are appended without fsync; they are synced before any
//! snapshot that refers to their rows is written, and a torn last row is
//! cut on open.
//!
//! This module must never decide what a snapshot means; a damaged file is
//! reported and the owner rebuilds it from the log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(not(target_endian = "little"))]
compile_error!("Engram's file formats are little-endian; big-endian targets are not supported");

use crate::aligned::AlignedBuf;
use crate::backend::{Backend, BackendFile, MapOptions, Mapping, OpenMode};
use crate::error::{StorageError, StorageResult};
use crate::frame::Lsn;

/// Size of a snapshot header.
pub const SNAPSHOT_HEADER_BYTES: usize = 48;
const _: () = assert!(SNAPSHOT_HEADER_BYTES.is_multiple_of(16));

fn bad(path: &Path, reason: impl Into<String>) -> StorageError {
    StorageError::BadDerivedFile {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

// Field offsets of the snapshot header (see the module doc).
const SNAP_MAGIC: std::ops::Range<usize> = 0..8;
const SNAP_VERSION: std::ops::Range<usize> = 8..12;
const SNAP_APPLIED_LSN: std::ops::Range<usize> = 16..24;
const SNAP_BODY_LEN: std::ops::Range<usize> = 24..32;
const SNAP_BODY_CRC: std::ops::Range<usize> = 32..36;
const SNAP_HEADER_CRC: std::ops::Range<usize> = 44..48;

fn le_u32(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(b[r].try_into().expect("4-byte field"))
}

fn le_u64(b: &[u8], r: std::ops::Range<usize>) -> u64 {
    u64::from_le_bytes(b[r].try_into().expect("8-byte field"))
}

/// Writes a snapshot atomically (temporary file, fsync, rename, dir fsync).
pub fn write_snapshot(
    backend: &dyn Backend,
    path: &Path,
    magic: [u8; 8],
    format_version: u32,
    applied_lsn: Lsn,
    body: &[u8],
) -> StorageResult<()> {
    let mut h = [0u8; SNAPSHOT_HEADER_BYTES];
    h[SNAP_MAGIC].copy_from_slice(&magic);
    h[SNAP_VERSION].copy_from_slice(&format_version.to_le_bytes());
    h[SNAP_APPLIED_LSN].copy_from_slice(&applied_lsn.to_le_bytes());
    h[SNAP_BODY_LEN].copy_from_slice(&(body.len() as u64).to_le_bytes());
    h[SNAP_BODY_CRC].copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
    let hcrc = crc32c::crc32c(&h[..SNAP_HEADER_CRC.start]);
    h[SNAP_HEADER_CRC].copy_from_slice(&hcrc.to_le_bytes());
    write_parts_durable(backend, path, &[&h, body])
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// A snapshot read back and verified.
#[derive(Debug)]
pub struct Snapshot {
    /// LSN the snapshot reflects.
    pub applied_lsn: Lsn,
    /// The body, 16-byte aligned.
    pub body: AlignedBuf,
}

/// What a snapshot's header says (its own checksum verified, the body not
/// read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// LSN the snapshot reflects.
    pub applied_lsn: Lsn,
    /// Bytes of body.
    pub body_len: u64,
    /// CRC32C of the body.
    pub body_crc: u32,
}

fn read_header(
    f: &dyn BackendFile,
    path: &Path,
    magic: [u8; 8],
    format_version: u32,
) -> StorageResult<SnapshotHeader> {
    let len = f.len().map_err(|e| StorageError::io(path, e))?;
    if len < SNAPSHOT_HEADER_BYTES as u64 {
        return Err(bad(
            path,
            format!("only {len} bytes, shorter than a header"),
        ));
    }
    let mut h = [0u8; SNAPSHOT_HEADER_BYTES];
    f.read_exact_at(&mut h, 0)
        .map_err(|e| StorageError::io(path, e))?;
    if crc32c::crc32c(&h[..SNAP_HEADER_CRC.start]) != le_u32(&h, SNAP_HEADER_CRC) {
        return Err(bad(path, "header checksum mismatch"));
    }
    if h[SNAP_MAGIC] != magic {
        return Err(bad(path, "wrong magic (not this kind of file)"));
    }
    let version = le_u32(&h, SNAP_VERSION);
    if version != format_version {
        return Err(bad(
            path,
            format!("format version {version}, this build uses {format_version}"),
        ));
    }
    let body_len = le_u64(&h, SNAP_BODY_LEN);
    if SNAPSHOT_HEADER_BYTES as u64 + body_len != len {
        return Err(bad(
            path,
            format!("body length {body_len} does not match file length {len}"),
        ));
    }
    Ok(SnapshotHeader {
        applied_lsn: le_u64(&h, SNAP_APPLIED_LSN),
        body_len,
        body_crc: le_u32(&h, SNAP_BODY_CRC),
    })
}

/// Reads and verifies a snapshot's header only (cheap: the body is not
/// read). `Ok(None)` if the file does not exist.
pub fn read_snapshot_header(
    backend: &dyn Backend,
    path: &Path,
    magic: [u8; 8],
    format_version: u32,
) -> StorageResult<Option<SnapshotHeader>> {
    if !backend.exists(path) {
        return Ok(None);
    }
    let f = backend
        .open(path, OpenMode::Read)
        .map_err(|e| StorageError::io(path, e))?;
    read_header(f.as_ref(), path, magic, format_version).map(Some)
}

/// Reads and verifies a snapshot. `Ok(None)` if the file does not exist.
pub fn read_snapshot(
    backend: &dyn Backend,
    path: &Path,
    magic: [u8; 8],
    format_version: u32,
) -> StorageResult<Option<Snapshot>> {
    if !backend.exists(path) {
        return Ok(None);
    }
    let f = backend
        .open(path, OpenMode::Read)
        .map_err(|e| StorageError::io(path, e))?;
    let h = read_header(f.as_ref(), path, magic, format_version)?;
    let mut body = AlignedBuf::zeroed(crate::cast::usize_from(h.body_len));
    f.read_exact_at(body.as_mut_slice(), SNAPSHOT_HEADER_BYTES as u64)
        .map_err(|e| StorageError::io(path, e))?;
    if crc32c::crc32c(body.as_slice()) != h.body_crc {
        return Err(bad(path, "body checksum mismatch"));
    }
    Ok(Some(Snapshot {
        applied_lsn: h.applied_lsn,
        body,
    }))
}

/// Appends `bytes` to the file at `path` (created if missing) and makes
/// them durable before returning.
pub fn append_durable(backend: &dyn Backend, path: &Path, bytes: &[u8]) -> StorageResult<()> {
    // (a file is never created through a link to nothing: outside the store)
    if backend.is_dangling_link(path) {
        return Err(StorageError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                crate::backend::DANGLING_LINK,
            ),
        ));
    }
    let existed = backend.exists(path);
    let f = backend
        .open(path, OpenMode::Create)
        .map_err(|e| StorageError::io(path, e))?;
    let len = f.len().map_err(|e| StorageError::io(path, e))?;
    f.write_all_at(bytes, len)
        .map_err(|e| StorageError::io(path, e))?;
    f.sync_data().map_err(|e| StorageError::io(path, e))?;
    // A new file's name is durable only once its directory is synced.
    if !existed {
        if let Some(dir) = parent_dir(path) {
            backend
                .sync_dir(dir)
                .map_err(|e| StorageError::io(dir, e))?;
        }
    }
    Ok(())
}

/// The whole content of a file, or None if it does not exist.
pub fn read_all(backend: &dyn Backend, path: &Path) -> StorageResult<Option<Vec<u8>>> {
    if !backend.exists(path) {
        return Ok(None);
    }
    let f = backend
        .open(path, OpenMode::Read)
        .map_err(|e| StorageError::io(path, e))?;
    let len = f.len().map_err(|e| StorageError::io(path, e))?;
    let mut buf = vec![0u8; crate::cast::usize_from(len)];
    f.read_exact_at(&mut buf, 0)
        .map_err(|e| StorageError::io(path, e))?;
    Ok(Some(buf))
}

/// Writes a whole file durably (temporary file, fsync, rename, dir fsync).
pub fn write_all_durable(backend: &dyn Backend, path: &Path, bytes: &[u8]) -> StorageResult<()> {
    write_parts_durable(backend, path, &[bytes])
}

/// [`write_all_durable`] for a file holding secrets: readable and
/// writable by its owner only (mode 0600 on a real file system) from the
/// moment it is created, so no other user can ever read it.
pub fn write_private_durable(
    backend: &dyn Backend,
    path: &Path,
    bytes: &[u8],
) -> StorageResult<()> {
    write_file_durable(backend, path, &[bytes], OpenMode::TruncatePrivate)
}

/// [`write_all_durable`] of the concatenation of `parts`, without building it.
fn write_parts_durable(backend: &dyn Backend, path: &Path, parts: &[&[u8]]) -> StorageResult<()> {
    write_file_durable(backend, path, parts, OpenMode::Truncate)
}

/// The directory holding `path`: `.` for a bare file name (whose
/// `parent()` is the empty path, which names no directory to sync).
fn parent_dir(path: &Path) -> Option<&Path> {
    path.parent().map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        }
    })
}

/// Writes `parts` to a temporary file opened with `mode`, syncs it, renames
/// it over `path` and syncs the directory.
fn write_file_durable(
    backend: &dyn Backend,
    path: &Path,
    parts: &[&[u8]],
    mode: OpenMode,
) -> StorageResult<()> {
    let tmp = tmp_path(path);
    let written = (|| {
        let f = backend
            .open(&tmp, mode)
            .map_err(|e| StorageError::io(&tmp, e))?;
        let mut at = 0u64;
        for p in parts {
            f.write_all_at(p, at)
                .map_err(|e| StorageError::io(&tmp, e))?;
            at += p.len() as u64;
        }
        f.sync_data().map_err(|e| StorageError::io(&tmp, e))
    })();
    if let Err(e) = written {
        // A half-written temporary file must not hold on to disk space
        // (a full disk is the usual reason to be here).
        let _ = backend.remove_file(&tmp);
        return Err(e);
    }
    backend
        .rename(&tmp, path)
        .map_err(|e| StorageError::io(path, e))?;
    if let Some(dir) = parent_dir(path) {
        backend
            .sync_dir(dir)
            .map_err(|e| StorageError::io(dir, e))?;
    }
    Ok(())
}

/// Files under `dir` (recursively) whose bytes contain `needle`: the check
/// behind "deleted means gone" (used by the demo and the tests).
pub fn files_containing(
    backend: &dyn Backend,
    dir: &Path,
    needle: &[u8],
) -> StorageResult<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in backend.list_dir(&d).map_err(|e| StorageError::io(&d, e))? {
            let p = d.join(&e.name);
            if e.is_dir {
                stack.push(p);
            } else if let Some(bytes) = read_all(backend, &p)? {
                if !needle.is_empty() && bytes.windows(needle.len()).any(|w| w == needle) {
                    out.push(p);
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

// Field offsets of the vector file header (see the module doc).
const VEC_MAGIC: std::ops::Range<usize> = 0..8;
const VEC_VERSION: std::ops::Range<usize> = 8..12;
const VEC_DIM: std::ops::Range<usize> = 12..16;
const VEC_HEADER_CRC: std::ops::Range<usize> = 60..64;

/// Size of a vector file header.
pub const VECTOR_HEADER_BYTES: usize = 64;
const VECTOR_MAGIC: [u8; 8] = *b"ENGRVECT";
const VECTOR_FORMAT_VERSION: u32 = 1;
/// Vectors are read at random by graph walks: fault them in when mapped,
/// unless they are read only now and then (`populate` false), and then
/// without read-ahead.
fn map_options(populate: bool) -> MapOptions {
    MapOptions {
        reserve: 0,
        populate,
        random: !populate,
    }
}
/// Rows appended before the mapping is refreshed.
const REMAP_EVERY_ROWS: usize = 4096;

/// The floats of a vector file's mapping, past its header.
fn mapped_floats(map: &Mapping) -> Result<&[f32], String> {
    let bytes = &map[VECTOR_HEADER_BYTES.min(map.len())..];
    bytemuck::try_cast_slice(bytes).map_err(|e| format!("mapping not castable to f32: {e}"))
}

/// A vector file's rows as of a moment, readable without the file (and
/// without whatever lock guards it): the file's mapping, shared, and a copy
/// of the rows appended since it was made. Rows never change once written,
/// so the view reads what the file reads; [`VectorFile::share_into`]
/// brings it up to date, copying only rows it has not seen.
#[derive(Debug, Default)]
pub struct SharedRows {
    /// The file's count of views (see [`VectorFile::truncate`]).
    _views: Option<Arc<()>>,
    /// The file, for reads by copy ([`SharedRows::read_rows`]).
    file: Option<Arc<dyn BackendFile>>,
    path: PathBuf,
    map: Option<Arc<Mapping>>,
    mapped_rows: usize,
    tail: Vec<f32>,
    dim: usize,
}

impl SharedRows {
    /// (mapped rows, rows copied since), as [`VectorFile::flat`].
    pub fn flat(&self) -> (&[f32], &[f32]) {
        let mapped = match &self.map {
            // Checked castable when the file made the mapping.
            Some(m) => mapped_floats(m).unwrap_or(&[]),
            None => &[],
        };
        (
            &mapped[..(self.mapped_rows * self.dim).min(mapped.len())],
            &self.tail,
        )
    }

    /// Rows in the view.
    pub fn len(&self) -> usize {
        if self.dim == 0 {
            return 0;
        }
        self.mapped_rows + self.tail.len() / self.dim
    }

    /// Whether the view holds no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// As [`VectorFile::read_rows`], over the view's rows: by copy, so a
    /// mapping that is not populated stays so.
    pub fn read_rows(&self, from: usize, max: usize, out: &mut Vec<f32>) -> StorageResult<usize> {
        let Some(file) = &self.file else {
            out.clear();
            return Ok(0);
        };
        RowSource {
            file: file.as_ref(),
            path: &self.path,
            dim: self.dim,
            mapped_rows: self.mapped_rows,
            tail: &self.tail,
        }
        .read_rows(from, max, out)
    }
}

/// Rows read by copy: the first `mapped_rows` from the file, the rest
/// from `tail` (see [`VectorFile::read_rows`]).
struct RowSource<'a> {
    file: &'a dyn BackendFile,
    path: &'a Path,
    dim: usize,
    mapped_rows: usize,
    tail: &'a [f32],
}

impl RowSource<'_> {
    fn read_rows(&self, from: usize, max: usize, out: &mut Vec<f32>) -> StorageResult<usize> {
        out.clear();
        let rows = self.mapped_rows + self.tail.len() / self.dim.max(1);
        let end = rows.min(from.saturating_add(max));
        if from >= end {
            return Ok(0);
        }
        let mapped_end = end.min(self.mapped_rows);
        if from < mapped_end {
            out.resize((mapped_end - from) * self.dim, 0.0);
            let offset = (VECTOR_HEADER_BYTES + from * self.dim * 4) as u64;
            self.file
                .read_exact_at(bytemuck::cast_slice_mut(out.as_mut_slice()), offset)
                .map_err(|e| StorageError::io(self.path, e))?;
        }
        let tail_from = from.max(self.mapped_rows) - self.mapped_rows;
        let tail_end = end.max(self.mapped_rows) - self.mapped_rows;
        out.extend_from_slice(&self.tail[tail_from * self.dim..tail_end * self.dim]);
        Ok(end - from)
    }
}

/// An append-only file of fixed-dimension f32 rows, read through a memory
/// map (plus a small in-memory tail of rows appended since the last remap).
pub struct VectorFile {
    file: Arc<dyn BackendFile>,
    path: PathBuf,
    dim: usize,
    /// Shared with [`SharedRows`] views: a mapping stays valid while any
    /// view holds it (the file only grows while open).
    map: Arc<Mapping>,
    /// Held by every [`SharedRows`] view of this file: none may read a
    /// mapping the file has shrunk under.
    views: Arc<()>,
    mapped_rows: usize,
    tail: Vec<f32>,
    /// Fault the mapped rows in when mapping (see [`VectorFile::open_with`]).
    populate: bool,
}

impl std::fmt::Debug for VectorFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorFile")
            .field("path", &self.path)
            .field("dim", &self.dim)
            .field("rows", &self.len())
            .finish()
    }
}

impl VectorFile {
    /// Creates (or truncates) a vector file of dimension `dim`.
    pub fn create(backend: &dyn Backend, path: &Path, dim: usize) -> StorageResult<VectorFile> {
        let dim32 = u32::try_from(dim).map_err(|_| bad(path, "dimension too large"))?;
        let file = backend
            .open(path, OpenMode::Truncate)
            .map_err(|e| StorageError::io(path, e))?;
        let mut h = [0u8; VECTOR_HEADER_BYTES];
        h[VEC_MAGIC].copy_from_slice(&VECTOR_MAGIC);
        h[VEC_VERSION].copy_from_slice(&VECTOR_FORMAT_VERSION.to_le_bytes());
        h[VEC_DIM].copy_from_slice(&dim32.to_le_bytes());
        let crc = crc32c::crc32c(&h[..VEC_HEADER_CRC.start]);
        h[VEC_HEADER_CRC].copy_from_slice(&crc.to_le_bytes());
        file.write_all_at(&h, 0)
            .map_err(|e| StorageError::io(path, e))?;
        Self::from_file(file, path, dim, 0, true)
    }

    /// Opens an existing vector file; a torn last row is cut off. Its rows
    /// are faulted in at once (graph walks read them at random).
    pub fn open(backend: &dyn Backend, path: &Path) -> StorageResult<VectorFile> {
        Self::open_with(backend, path, true)
    }

    /// [`VectorFile::open`], faulting the rows in only if `populate`: a
    /// file read only now and then (re-ranking a few rows per query) then
    /// stays on disk, and only the rows read become resident.
    pub fn open_with(
        backend: &dyn Backend,
        path: &Path,
        populate: bool,
    ) -> StorageResult<VectorFile> {
        let file = backend
            .open(path, OpenMode::Write)
            .map_err(|e| StorageError::io(path, e))?;
        let len = file.len().map_err(|e| StorageError::io(path, e))?;
        if len < VECTOR_HEADER_BYTES as u64 {
            return Err(bad(path, "shorter than a header"));
        }
        let mut h = [0u8; VECTOR_HEADER_BYTES];
        file.read_exact_at(&mut h, 0)
            .map_err(|e| StorageError::io(path, e))?;
        if h[VEC_MAGIC] != VECTOR_MAGIC {
            return Err(bad(path, "wrong magic"));
        }
        if crc32c::crc32c(&h[..VEC_HEADER_CRC.start]) != le_u32(&h, VEC_HEADER_CRC) {
            return Err(bad(path, "header checksum mismatch"));
        }
        let version = le_u32(&h, VEC_VERSION);
        if version != VECTOR_FORMAT_VERSION {
            return Err(bad(path, format!("unknown format version {version}")));
        }
        let dim = le_u32(&h, VEC_DIM) as usize;
        if dim == 0 {
            return Err(bad(path, "dimension 0"));
        }
        let row_bytes = (dim * 4) as u64;
        let rows = (len - VECTOR_HEADER_BYTES as u64) / row_bytes;
        let keep = VECTOR_HEADER_BYTES as u64 + rows * row_bytes;
        if keep != len {
            file.set_len(keep).map_err(|e| StorageError::io(path, e))?;
        }
        Self::from_file(file, path, dim, crate::cast::usize_from(rows), populate)
    }

    fn from_file(
        file: Arc<dyn BackendFile>,
        path: &Path,
        dim: usize,
        rows: usize,
        populate: bool,
    ) -> StorageResult<VectorFile> {
        let map = Arc::new(
            file.map(
                (VECTOR_HEADER_BYTES + rows * dim * 4) as u64,
                map_options(populate),
            )
            .map_err(|e| StorageError::io(path, e))?,
        );
        let vf = VectorFile {
            file,
            path: path.to_path_buf(),
            dim,
            map,
            views: Arc::new(()),
            mapped_rows: rows,
            tail: Vec::new(),
            populate,
        };
        // Check the cast works once, so `get` cannot fail later.
        vf.mapped_floats()?;
        Ok(vf)
    }

    fn mapped_floats(&self) -> StorageResult<&[f32]> {
        mapped_floats(&self.map).map_err(|e| bad(&self.path, e))
    }

    /// Row dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.mapped_rows + self.tail.len() / self.dim
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a row; returns its index.
    pub fn push(&mut self, row: &[f32]) -> StorageResult<usize> {
        if row.len() != self.dim {
            return Err(bad(
                &self.path,
                format!(
                    "row of {} values in a file of dimension {}",
                    row.len(),
                    self.dim
                ),
            ));
        }
        let idx = self.len();
        let offset = (VECTOR_HEADER_BYTES + idx * self.dim * 4) as u64;
        let bytes: &[u8] = bytemuck::cast_slice(row);
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| StorageError::io(&self.path, e))?;
        self.tail.extend_from_slice(row);
        if self.tail.len() / self.dim >= REMAP_EVERY_ROWS {
            self.remap()?;
        }
        Ok(idx)
    }

    /// All rows as two flat slices: the mapped ones, then the in-memory
    /// tail (empty after [`VectorFile::remap`]).
    pub fn flat(&self) -> (&[f32], &[f32]) {
        let mapped = self.mapped_floats().expect("checked at open");
        (&mapped[..self.mapped_rows * self.dim], &self.tail)
    }

    /// Brings `view` up to this file's rows: it takes the current mapping
    /// (a reference, not a copy) and copies only the appended rows it does
    /// not hold yet. A view of another file is replaced whole.
    pub fn share_into(&self, view: &mut SharedRows) {
        let same_map = view.map.as_ref().is_some_and(|m| Arc::ptr_eq(m, &self.map));
        if !same_map || view.dim != self.dim {
            *view = SharedRows {
                _views: Some(self.views.clone()),
                file: Some(self.file.clone()),
                path: self.path.clone(),
                map: Some(self.map.clone()),
                mapped_rows: self.mapped_rows,
                tail: Vec::new(),
                dim: self.dim,
            };
        }
        let have = view.tail.len().min(self.tail.len());
        view.tail.extend_from_slice(&self.tail[have..]);
    }

    /// Whether later mappings fault the rows in (see
    /// [`VectorFile::open_with`]); takes effect at the next remap.
    /// Returns the previous setting.
    pub fn set_populate(&mut self, populate: bool) -> bool {
        std::mem::replace(&mut self.populate, populate)
    }

    /// Copies up to `max` rows from row `from` on into `out` (cleared
    /// first) with reads, not through the mapping, so a file that is not
    /// populated stays so. Returns the rows copied (0 past the end).
    pub fn read_rows(&self, from: usize, max: usize, out: &mut Vec<f32>) -> StorageResult<usize> {
        RowSource {
            file: self.file.as_ref(),
            path: &self.path,
            dim: self.dim,
            mapped_rows: self.mapped_rows,
            tail: &self.tail,
        }
        .read_rows(from, max, out)
    }

    /// Rows that are not yet in the mapping.
    pub fn tail_rows(&self) -> usize {
        self.tail.len() / self.dim
    }

    /// Row `idx`. Panics if out of range (callers index rows they pushed).
    pub fn get(&self, idx: usize) -> &[f32] {
        if idx < self.mapped_rows {
            let floats = self.mapped_floats().expect("checked at open");
            &floats[idx * self.dim..(idx + 1) * self.dim]
        } else {
            let t = idx - self.mapped_rows;
            &self.tail[t * self.dim..(t + 1) * self.dim]
        }
    }

    /// A mapping of the first `rows` rows (the file holds at least that many).
    fn map_rows(&self, rows: usize) -> StorageResult<Arc<Mapping>> {
        let len = (VECTOR_HEADER_BYTES + rows * self.dim * 4) as u64;
        self.file
            .map(len, map_options(self.populate))
            .map(Arc::new)
            .map_err(|e| StorageError::io(&self.path, e))
    }

    /// Moves the in-memory tail into the mapping.
    pub fn remap(&mut self) -> StorageResult<()> {
        let rows = self.len();
        self.map = self.map_rows(rows)?;
        self.mapped_rows = rows;
        self.tail.clear();
        self.mapped_floats()?;
        Ok(())
    }

    /// Cuts the file to `rows` rows.
    pub fn truncate(&mut self, rows: usize) -> StorageResult<()> {
        if rows >= self.len() {
            return Ok(());
        }
        // No mapping may outlive the bytes it shows: drop it first, and
        // refuse while a shared view (of this mapping or an older one)
        // still holds it.
        if Arc::strong_count(&self.views) > 1 {
            return Err(bad(
                &self.path,
                "cannot truncate while a shared view of its rows is held",
            ));
        }
        self.map = Arc::new(
            self.file
                .map(0, MapOptions::default())
                .map_err(|e| StorageError::io(&self.path, e))?,
        );
        self.mapped_rows = 0;
        self.tail.clear();
        self.file
            .set_len((VECTOR_HEADER_BYTES + rows * self.dim * 4) as u64)
            .map_err(|e| StorageError::io(&self.path, e))?;
        self.map = self.map_rows(rows)?;
        self.mapped_rows = rows;
        self.mapped_floats()?;
        Ok(())
    }

    /// Makes every row durable.
    pub fn sync(&self) -> StorageResult<()> {
        self.file
            .sync_data()
            .map_err(|e| StorageError::io(&self.path, e))
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FsBackend, MemBackend};

    /// A bare file name (`--key-file keys.json`) lives in `.`: its parent
    /// is the empty path, and syncing "" failed after the file was written
    /// (a key was added and never shown).
    #[test]
    fn a_bare_file_name_syncs_the_current_directory() {
        assert_eq!(parent_dir(Path::new("keys.json")), Some(Path::new(".")));
        assert_eq!(parent_dir(Path::new("a/keys.json")), Some(Path::new("a")));
        assert_eq!(parent_dir(Path::new("/keys.json")), Some(Path::new("/")));
        FsBackend
            .sync_dir(parent_dir(Path::new("x")).unwrap())
            .unwrap();
    }

    #[test]
    fn snapshot_roundtrip_and_damage() {
        let b = MemBackend::new();
        b.create_dir_all(Path::new("/d")).unwrap();
        let p = Path::new("/d/x.snap");
        assert!(read_snapshot(&b, p, *b"ENGRTEST", 1).unwrap().is_none());
        write_snapshot(&b, p, *b"ENGRTEST", 1, 77, b"hello body").unwrap();
        let s = read_snapshot(&b, p, *b"ENGRTEST", 1).unwrap().unwrap();
        assert_eq!(s.applied_lsn, 77);
        assert_eq!(s.body.as_slice(), b"hello body");
        assert!(read_snapshot(&b, p, *b"ENGRTEST", 2).is_err());
        assert!(read_snapshot(&b, p, *b"ENGROTHR", 1).is_err());
        let mut bytes = b.read_file(p).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        b.write_file(p, &bytes);
        let e = read_snapshot(&b, p, *b"ENGRTEST", 1).unwrap_err();
        assert!(e.to_string().contains("body checksum"), "{e}");
    }

    #[test]
    fn private_files_are_owner_only_even_when_replacing_a_readable_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret.json");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        // a temporary file left readable by an earlier crash
        let tmp = tmp_path(&p);
        std::fs::write(&tmp, b"stale").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private_durable(&FsBackend, &p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!tmp.exists());
    }

    /// Rows read with `read_rows` equal the rows read through the mapping,
    /// across the mapped part and the in-memory tail, on a file opened with
    /// and without populating its mapping.
    #[test]
    fn vector_rows_read_by_copy_equal_the_mapped_rows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.f32");
        let row = |i: usize| [i as f32, -(i as f32), 0.5];
        let mut f = VectorFile::create(&FsBackend, &p, 3).unwrap();
        let rows = REMAP_EVERY_ROWS + 100; // one remap, then a tail
        for i in 0..rows {
            f.push(&row(i)).unwrap();
        }
        assert!(f.tail_rows() > 0 && f.tail_rows() < rows);
        f.sync().unwrap();
        let reopened = VectorFile::open_with(&FsBackend, &p, false).unwrap();
        for file in [&f, &reopened] {
            let mut out = Vec::new();
            for (from, max) in [
                (0, 10),
                (REMAP_EVERY_ROWS - 5, 20),
                (rows - 3, 10),
                (7, rows),
            ] {
                let n = file.read_rows(from, max, &mut out).unwrap();
                assert_eq!(n, max.min(rows - from));
                let want: Vec<f32> = (from..from + n)
                    .flat_map(|i| file.get(i).to_vec())
                    .collect();
                assert_eq!(out, want, "rows {from}..+{max}");
            }
            assert_eq!(file.read_rows(rows, 5, &mut out).unwrap(), 0);
            assert!(out.is_empty());
        }
    }

    /// A shared view reads what the file reads through pushes and remaps,
    /// keeps its rows after the file remaps, and blocks a truncation.
    #[test]
    fn a_shared_view_follows_the_file_and_outlives_its_remaps() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.f32");
        let row = |i: usize| [i as f32, 1.0 - i as f32, 0.25];
        let rows_of = |v: &SharedRows| {
            let (m, t) = v.flat();
            [m, t].concat()
        };
        let mut f = VectorFile::create(&FsBackend, &p, 3).unwrap();
        let mut view = SharedRows::default();
        f.share_into(&mut view);
        assert!(view.is_empty());
        let mut pushed = 0;
        for step in [10, REMAP_EVERY_ROWS, 7, 0, REMAP_EVERY_ROWS + 3] {
            for _ in 0..step {
                f.push(&row(pushed)).unwrap();
                pushed += 1;
            }
            let before = rows_of(&view);
            f.share_into(&mut view);
            assert_eq!(view.len(), pushed);
            let want: Vec<f32> = (0..pushed).flat_map(row).collect();
            assert_eq!(rows_of(&view), want, "after {pushed} rows");
            // what the view held before is a prefix of what it holds now
            assert_eq!(&rows_of(&view)[..before.len()], &before[..]);
            // and it reads by copy what the file reads
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for (from, max) in [(0, 3), (pushed.saturating_sub(5), 10), (2, pushed)] {
                let n = view.read_rows(from, max, &mut a).unwrap();
                assert_eq!(n, f.read_rows(from, max, &mut b).unwrap());
                assert_eq!(a, b, "rows {from}..+{max}");
            }
        }
        // The file remaps; a view taken before still reads its rows.
        let old = SharedRows {
            _views: view._views.clone(),
            file: view.file.clone(),
            path: view.path.clone(),
            map: view.map.clone(),
            mapped_rows: view.mapped_rows,
            tail: view.tail.clone(),
            dim: view.dim,
        };
        f.remap().unwrap();
        assert_eq!(rows_of(&old), rows_of(&view));
        // Truncation is refused while any view is held, of the current
        // mapping or of an older one.
        f.share_into(&mut view);
        let err = f.truncate(5).unwrap_err().to_string();
        assert!(err.contains("shared view"), "{err}");
        drop(view);
        assert!(f.truncate(5).is_err());
        assert_eq!(f.len(), pushed);
        drop(old);
        f.truncate(5).unwrap();
        assert_eq!(f.len(), 5);
    }
    #[test]
    fn vector_file_append_reopen_and_torn_row() {
        for backend in [
            Box::new(MemBackend::new()) as Box<dyn Backend>,
            Box::new(FsBackend),
        ] {
            let dir = tempfile::tempdir().unwrap();
            backend.create_dir_all(dir.path()).unwrap();
            let p = dir.path().join("v.f32");
            let mut vf = VectorFile::create(backend.as_ref(), &p, 3).unwrap();
            for i in 0..5000 {
                let x = i as f32;
                assert_eq!(vf.push(&[x, x + 0.5, -x]).unwrap(), i);
            }
            assert_eq!(vf.get(4999), &[4999.0, 4999.5, -4999.0]);
            assert_eq!(vf.get(10), &[10.0, 10.5, -10.0]);
            assert!(vf.push(&[1.0]).is_err());
            vf.sync().unwrap();
            drop(vf);
            // a torn row at the end
            let f = backend.open(&p, OpenMode::Write).unwrap();
            let len = f.len().unwrap();
            f.write_all_at(&[1, 2, 3, 4, 5], len).unwrap();
            drop(f);
            let mut vf = VectorFile::open(backend.as_ref(), &p).unwrap();
            assert_eq!(vf.len(), 5000);
            assert_eq!(vf.get(1234), &[1234.0, 1234.5, -1234.0]);
            vf.truncate(40).unwrap();
            assert_eq!(vf.len(), 40);
            assert_eq!(vf.get(39), &[39.0, 39.5, -39.0]);
            assert_eq!(vf.push(&[7.0, 7.0, 7.0]).unwrap(), 40);
            assert_eq!(vf.flat().0.len() + vf.flat().1.len(), 41 * 3);
        }
    }
}
