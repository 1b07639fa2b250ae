//! Exact scans of a space: full-precision distances to given records,
//! and the exact top n of a set through the int8 codes (see `quant`).

use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{CODE_CHUNK_ROWS, Idx, SpaceVectors, VectorSpace};
use crate::vector::distance::distance;
use crate::vector::hnsw::{SearchStats, Vectors};
use crate::vector::quant::{Codes, Gathered, QueryCode};

impl VectorSpace {
    /// Exact distances from `query` to the given records (which must be members).
    pub fn exact(
        &self,
        query: &[f32],
        idxs: impl Iterator<Item = Idx>,
        stats: &mut SearchStats,
    ) -> Vec<(Idx, f32)> {
        let m = self.internal_metric();
        let vectors = self.vectors();
        let mut out = Vec::with_capacity(idxs.size_hint().0);
        // (`for_each`: a bitmap's iterator folds faster than it steps)
        idxs.for_each(|idx| {
            if let Some(slot) = self.slot_of(idx) {
                stats.distance_computations += 1;
                out.push((idx, distance(m, query, vectors.get(slot))));
            }
        });
        out
    }

    /// The `n` nearest of the given records (which must be members), exact:
    /// the same records and distances as [`VectorSpace::exact`] followed by
    /// a top-n selection, ties included.
    ///
    /// From [`QUANTIZED_SCAN_MIN`](super::QUANTIZED_SCAN_MIN) records up (inner-product spaces), it
    /// reads the int8 codes (a quarter of the bytes), bounds every
    /// record's similarity, and computes full-precision distances only for
    /// the records that may be among the `n` best (see `quant`). Both
    /// estimates and re-ranked distances count as distance computations.
    ///
    /// With `prefilter: Some(keep)` (an approximate plan), only the `keep`
    /// records whose codes' sign bits are nearest the query's (Hamming
    /// distance) are estimated and re-ranked: every record costs one bit
    /// per dimension instead of a byte.
    pub fn exact_top(
        &self,
        query: &[f32],
        idxs: &RoaringBitmap,
        n: usize,
        prefilter: Option<usize>,
        stats: &mut SearchStats,
    ) -> Vec<(Idx, f32)> {
        if idxs.len() < self.scans_codes_from() {
            return self.exact(query, idxs.iter(), stats);
        }
        let qc = QueryCode::new(query);
        let cached = self.scans.lock().get(idxs);
        let gathered = match cached {
            Some(g) => g,
            None => {
                let codes = self.codes_upto_date();
                let slots: Vec<(u32, Idx)> = idxs
                    .iter()
                    .filter_map(|idx| self.slot_of(idx).map(|s| (s, idx)))
                    .collect();
                let g = Arc::new(Gathered::new(idxs, &slots, &codes));
                drop(codes);
                self.scans.lock().put(g.clone());
                g
            }
        };
        let (kept, estimated) = match prefilter {
            Some(keep) => gathered.scan_prefiltered(&qc, self.dim, n, keep),
            None => gathered.scan_top(&qc, self.dim, n),
        };
        stats.distance_computations += estimated as u64;
        self.exact(query, kept.into_iter().map(|b| b.item), stats)
    }

    /// The codes, extended to every slot first if some are missing.
    pub(super) fn codes_upto_date(&self) -> parking_lot::RwLockReadGuard<'_, Codes> {
        codes_upto(&self.codes, &self.vectors(), |from, max, out| {
            self.file.read_rows(from, max, out)
        })
    }

    /// Bytes of int8 codes held, by slot and gathered.
    pub fn code_bytes(&self) -> usize {
        self.codes.read().bytes() + self.scans.lock().bytes()
    }
}

/// `codes` extended to every slot of `vectors` first if some are missing.
/// Rows are copied in chunks by `read` rather than read through the
/// mapping, which would make every page of the file resident; the mapping
/// is the fallback if a read fails (same rows).
pub(super) fn codes_upto<'a>(
    codes: &'a parking_lot::RwLock<Codes>,
    vectors: &SpaceVectors<'_>,
    mut read: impl FnMut(usize, usize, &mut Vec<f32>) -> engram_storage::StorageResult<usize>,
) -> parking_lot::RwLockReadGuard<'a, Codes> {
    let upto = vectors.len() as usize;
    {
        let c = codes.read();
        if c.len() >= upto {
            return c;
        }
    }
    let mut w = codes.write();
    let mut rows = Vec::new();
    while w.len() < upto {
        match read(w.len(), CODE_CHUNK_ROWS.min(upto - w.len()), &mut rows) {
            Ok(n) if n > 0 => w.extend_rows(&rows),
            _ => {
                w.extend(vectors);
                break;
            }
        }
    }
    parking_lot::RwLockWriteGuard::downgrade(w)
}
