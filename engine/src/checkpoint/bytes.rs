//! The checkpoint's byte encoding: [`W`] appends little-endian values and
//! collections in a fixed (sorted) order, [`R`] reads them back with every
//! read bounds-checked. Only `checkpoint` uses them.

use roaring::RoaringBitmap;
use rustc_hash::FxHashMap as HashMap;

use crate::error::{EngineError, Result};
use crate::id::RecordId;
use crate::state::{Idx, Sym};

pub(super) fn corrupt(what: &str) -> EngineError {
    EngineError::Corrupt {
        what: "state checkpoint".into(),
        detail: what.to_string(),
    }
}

/// Appends little-endian values.
#[derive(Default)]
pub(super) struct W(pub(super) Vec<u8>);

impl W {
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }
    pub(super) fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }
    pub(super) fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    pub(super) fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
            None => self.u8(0),
        }
    }
    pub(super) fn opt_u32(&mut self, v: Option<u32>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u32(v);
            }
            None => self.u8(0),
        }
    }
    pub(super) fn opt_i64(&mut self, v: Option<i64>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.i64(v);
            }
            None => self.u8(0),
        }
    }
    pub(super) fn id(&mut self, id: RecordId) {
        self.0.extend_from_slice(&id.to_bytes());
    }
    pub(super) fn u32s(&mut self, v: &[u32]) {
        self.len(v.len());
        for x in v {
            self.u32(*x);
        }
    }
    pub(super) fn strs<S: AsRef<str>>(&mut self, v: impl ExactSizeIterator<Item = S>) {
        self.len(v.len());
        for s in v {
            self.str(s.as_ref());
        }
    }
    pub(super) fn bitmap(&mut self, b: &RoaringBitmap) {
        self.len(b.serialized_size());
        // writing into a Vec cannot fail
        let _ = b.serialize_into(&mut self.0);
    }
    pub(super) fn sym_bitmaps(&mut self, m: &HashMap<Sym, RoaringBitmap>) {
        let mut keys: Vec<&Sym> = m.keys().collect();
        keys.sort();
        self.len(keys.len());
        for k in keys {
            self.u32(*k);
            self.bitmap(&m[k]);
        }
    }
    pub(super) fn idx_lists(&mut self, m: &HashMap<Idx, Vec<Idx>>) {
        let mut keys: Vec<&Idx> = m.keys().collect();
        keys.sort();
        self.len(keys.len());
        for k in keys {
            self.u32(*k);
            self.u32s(&m[k]);
        }
    }
}

/// Reads what [`W`] wrote; every read is bounds-checked.
pub(super) struct R<'a> {
    pub(super) b: &'a [u8],
    pub(super) p: usize,
}

impl<'a> R<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .p
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| corrupt("truncated"))?;
        let s = &self.b[self.p..end];
        self.p = end;
        Ok(s)
    }
    pub(super) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub(super) fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    pub(super) fn len(&mut self) -> Result<usize> {
        let n = self.u64()?;
        // no collection is longer than the bytes left
        if n > (self.b.len() - self.p) as u64 * 8 + 64 {
            return Err(corrupt("implausible length"));
        }
        usize::try_from(n).map_err(|_| corrupt("length"))
    }
    /// A capacity to reserve for `n` items still to read: at most one per
    /// 8 bytes left (a damaged length, which [`R::len`] bounds only by 8
    /// items per byte, must not reserve thousands of times the file's size
    /// before the read fails; a collection with smaller items grows).
    pub(super) fn cap(&self, n: usize) -> usize {
        n.min((self.b.len() - self.p) / 8 + 1)
    }
    pub(super) fn bool(&mut self) -> Result<bool> {
        Ok(self.u8()? != 0)
    }
    pub(super) fn str(&mut self) -> Result<String> {
        let n = self.len()?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| corrupt("not UTF-8"))
    }
    pub(super) fn opt_str(&mut self) -> Result<Option<String>> {
        Ok(if self.bool()? {
            Some(self.str()?)
        } else {
            None
        })
    }
    pub(super) fn opt_u32(&mut self) -> Result<Option<u32>> {
        Ok(if self.bool()? {
            Some(self.u32()?)
        } else {
            None
        })
    }
    pub(super) fn opt_i64(&mut self) -> Result<Option<i64>> {
        Ok(if self.bool()? {
            Some(self.i64()?)
        } else {
            None
        })
    }
    pub(super) fn id(&mut self) -> Result<RecordId> {
        Ok(RecordId::from_bytes(
            self.take(16)?.try_into().expect("16 bytes"),
        ))
    }
    pub(super) fn u32s(&mut self) -> Result<Vec<u32>> {
        let n = self.len()?;
        (0..n).map(|_| self.u32()).collect()
    }
    pub(super) fn strs(&mut self) -> Result<Vec<String>> {
        let n = self.len()?;
        (0..n).map(|_| self.str()).collect()
    }
    pub(super) fn bitmap(&mut self) -> Result<RoaringBitmap> {
        let n = self.len()?;
        RoaringBitmap::deserialize_from(self.take(n)?).map_err(|_| corrupt("bitmap"))
    }
    pub(super) fn sym_bitmaps(&mut self) -> Result<HashMap<Sym, RoaringBitmap>> {
        let n = self.len()?;
        let mut m = HashMap::with_capacity_and_hasher(self.cap(n), Default::default());
        for _ in 0..n {
            let k = self.u32()?;
            m.insert(k, self.bitmap()?);
        }
        Ok(m)
    }
    pub(super) fn idx_lists(&mut self) -> Result<HashMap<Idx, Vec<Idx>>> {
        let n = self.len()?;
        let mut m = HashMap::with_capacity_and_hasher(self.cap(n), Default::default());
        for _ in 0..n {
            let k = self.u32()?;
            m.insert(k, self.u32s()?);
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_count_reserves_no_more_than_the_bytes_left_allow() {
        let mut b = Vec::new();
        b.extend_from_slice(&700u64.to_le_bytes());
        b.extend_from_slice(&[0u8; 80]);
        let mut r = R { b: &b, p: 0 };
        // 700 passes `len` (8 items per byte left, plus 64) ...
        let n = r.len().unwrap();
        assert_eq!(n, 700);
        // ... but reserves one item per 8 bytes left
        assert_eq!(r.cap(n), 11);
        assert_eq!(r.cap(3), 3);
        // and a map of that count fails on the bytes, as before
        let mut b = 700u64.to_le_bytes().to_vec();
        b.extend_from_slice(&[0u8; 80]);
        assert!(R { b: &b, p: 0 }.idx_lists().is_err());
    }
}
