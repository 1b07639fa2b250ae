//! The graph's versioned binary encoding ([`Hnsw::write_to`],
//! [`Hnsw::read_from`]), checked field by field on read.

use super::*;

impl Hnsw {
    /// Appends the encoding to `out`. Little-endian:
    /// `magic[8] version:u16 metric:u8 max_level:u8 m:u32 ef_construction:u32
    /// seed:u64 dim:u32 len:u32 entry:u32 levels:[u8; len]`, then for each
    /// slot and each of its levels 0..=level: `count:u16 ids:[u32; count]`.
    /// Deterministic: equal graphs give equal bytes.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(self.metric.code());
        out.push(self.max_level);
        out.extend_from_slice(
            &u32::try_from(self.params.m)
                .expect("m <= MAX_M")
                .to_le_bytes(),
        );
        out.extend_from_slice(
            &u32::try_from(self.params.ef_construction)
                .expect("clamped by new")
                .to_le_bytes(),
        );
        out.extend_from_slice(&self.params.seed.to_le_bytes());
        for v in [self.dim, self.len(), self.entry] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.levels);
        for slot in 0..self.len() {
            for lc in 0..=self.levels[slot as usize] {
                let links = self.links(slot, lc);
                out.extend_from_slice(
                    &u16::try_from(links.len())
                        .expect("at most 2 * MAX_M links")
                        .to_le_bytes(),
                );
                for &n in links {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
    }

    /// Decodes [`Hnsw::write_to`] output. Validates everything that search
    /// relies on (ids in range, list sizes, levels, entry point), so a
    /// decoded index never panics; rejects trailing bytes. Allocation is
    /// bounded by a constant factor of `bytes.len()` (each list costs at
    /// least two input bytes), so garbled lengths cannot exhaust memory.
    pub fn read_from(bytes: &[u8]) -> Result<Hnsw, HnswError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        if r.take(8, "truncated magic")? != MAGIC {
            return Err(r.err(0, "bad magic"));
        }
        let version = r.u16()?;
        if version != VERSION {
            return Err(HnswError::UnsupportedVersion { version });
        }
        let at = r.pos;
        let metric = Metric::from_code(r.u8()?).ok_or(r.err(at, "unknown metric"))?;
        let max_level = r.u8()?;
        let at = r.pos;
        let m = r.u32()? as usize;
        if !(2..=MAX_M).contains(&m) {
            return Err(r.err(at, "m out of range"));
        }
        let at = r.pos;
        let ef_construction = r.u32()? as usize;
        if ef_construction < m {
            return Err(r.err(at, "ef_construction below m"));
        }
        let seed = r.u64()?;
        let params = HnswParams {
            m,
            ef_construction,
            seed,
        };
        let mut h = Hnsw::new(params, metric);
        h.dim = r.u32()?;
        let at = r.pos;
        let len = r.u32()?;
        let entry = r.u32()?;
        if (len == 0) != (entry == NONE) || (len == 0) != (h.dim == 0) || (len > 0 && entry >= len)
        {
            return Err(r.err(at, "inconsistent len / entry / dim"));
        }
        if len == NONE {
            return Err(r.err(at, "len out of range"));
        }
        let levels_at = r.pos;
        h.levels = r.take(len as usize, "truncated levels")?.to_vec();
        if len > 0 && h.levels[entry as usize] != max_level {
            return Err(r.err(levels_at, "entry point is not on the top level"));
        }
        if let Some(i) = h.levels.iter().position(|&l| l > max_level) {
            return Err(r.err(levels_at + i, "level above max_level"));
        }
        h.entry = entry;
        h.max_level = max_level;
        // Every list costs at least its 2-byte count: bound the total number
        // of lists by the remaining input before allocating for them.
        let lists: usize = h.levels.iter().map(|&l| 1 + l as usize).sum();
        if lists > (r.buf.len() - r.pos) / 2 {
            return Err(r.err(levels_at, "levels exceed input"));
        }
        h.level0 = vec![0; len as usize * h.stride0()];
        h.upper_at = Vec::with_capacity(len as usize);
        let mut upper_words = 0usize;
        for &l in &h.levels {
            let at = if l == 0 {
                NONE
            } else {
                u32::try_from(upper_words).map_err(|_| r.err(levels_at, "levels exceed input"))?
            };
            h.upper_at.push(at);
            upper_words += l as usize * h.stride_upper();
        }
        h.upper = vec![0; upper_words];
        let mut list = Vec::with_capacity(h.m0());
        for slot in 0..len {
            for lc in 0..=h.levels[slot as usize] {
                let at = r.pos;
                let n = r.u16()? as usize;
                let cap = if lc == 0 { h.m0() } else { m };
                if n > cap {
                    return Err(r.err(at, "neighbour list too long"));
                }
                list.clear();
                for _ in 0..n {
                    let at = r.pos;
                    let id = r.u32()?;
                    if id >= len || id == slot || h.levels[id as usize] < lc {
                        return Err(r.err(at, "bad neighbour id"));
                    }
                    list.push(id);
                }
                h.set_links(slot, lc, &list);
            }
        }
        if r.pos != r.buf.len() {
            return Err(r.err(r.pos, "trailing bytes"));
        }
        Ok(h)
    }
}

/// Bounds-checked little-endian cursor for [`Hnsw::read_from`].
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, offset: usize, reason: &'static str) -> HnswError {
        HnswError::Format { offset, reason }
    }
    fn take(&mut self, n: usize, reason: &'static str) -> Result<&'a [u8], HnswError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(HnswError::Format {
            offset: self.pos,
            reason,
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], HnswError> {
        let s = self.take(N, "truncated input")?;
        Ok(s.try_into().expect("take returned N bytes"))
    }
    fn u8(&mut self) -> Result<u8, HnswError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, HnswError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, HnswError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, HnswError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}
