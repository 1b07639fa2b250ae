//! The index's canonical binary encoding (layout in the module
//! documentation of `bm25`): written by `write_to`, read back and checked by
//! `read_from`, which refuses anything `write_to` would not have produced.

use super::*;

impl Bm25Index {
    /// Appends the index's canonical binary encoding to `out` (layout in the
    /// module documentation). The caller adds a checksum.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&TERMS_VERSION.to_le_bytes());
        out.extend_from_slice(&self.params.k1.to_bits().to_le_bytes());
        out.extend_from_slice(&self.params.b.to_bits().to_le_bytes());
        out.extend_from_slice(&self.n_docs.to_le_bytes());
        out.push(u8::from(self.last_doc.is_some()));
        out.extend_from_slice(&self.last_doc.unwrap_or(0).to_le_bytes());
        put_varint(out, self.doc_len.len() as u64);
        for &dl in &self.doc_len {
            put_varint(out, u64::from(dl));
        }
        let mut terms: Vec<(&str, u32)> =
            self.vocab.iter().map(|(t, &id)| (t.as_str(), id)).collect();
        terms.sort_unstable_by(|a, b| a.0.cmp(b.0));
        put_varint(out, terms.len() as u64);
        for (term, id) in terms {
            let p = &self.postings[id as usize];
            put_varint(out, term.len() as u64);
            out.extend_from_slice(term.as_bytes());
            put_varint(out, p.docs.serialized_size() as u64);
            p.docs
                .serialize_into(&mut *out)
                .expect("writing to a Vec<u8> cannot fail");
            put_varint(out, p.multi_docs.len() as u64);
            let mut next = 0u32;
            for (&d, &tf) in p.multi_docs.iter().zip(&p.multi_tfs) {
                put_varint(out, u64::from(d - next));
                put_varint(out, u64::from(tf - 2));
                next = d.wrapping_add(1);
            }
        }
    }

    /// Decodes an encoding produced by [`write_to`](Self::write_to).
    /// Truncated, garbled, non-canonical or inconsistent input gives a typed
    /// error; this never panics.
    pub fn read_from(bytes: &[u8]) -> Result<Bm25Index, Bm25Error> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(MAGIC.len(), "truncated magic")? != MAGIC {
            return Err(Bm25Error::Format {
                offset: 0,
                reason: "bad magic",
            });
        }
        let found = r.u32()?;
        if found != FORMAT_VERSION {
            return Err(Bm25Error::VersionMismatch {
                found,
                expected: FORMAT_VERSION,
            });
        }
        let found = r.u32()?;
        if found != TERMS_VERSION {
            return Err(Bm25Error::TokenizerVersionMismatch {
                found,
                expected: TERMS_VERSION,
            });
        }
        let at = r.pos;
        let params = Bm25Params {
            k1: f32::from_bits(r.u32()?),
            b: f32::from_bits(r.u32()?),
        };
        if !params.is_valid() {
            return Err(r.err_at(at, "invalid BM25 parameters"));
        }
        let at = r.pos;
        let n_docs = r.u64()?;
        let has_last = r.u8()?;
        let last = r.u32()?;
        let last_doc = match has_last {
            0 if last == 0 && n_docs == 0 => None,
            1 if n_docs >= 1 && n_docs <= u64::from(last) + 1 => Some(last),
            _ => return Err(r.err_at(at, "inconsistent document count")),
        };

        let at = r.pos;
        let n_lens = r.varint()?;
        let max_lens = last_doc.map_or(0, |l| u64::from(l) + 1);
        // Each length takes at least one byte: bounds the allocation.
        if n_lens > max_lens || n_lens > r.remaining() as u64 {
            return Err(r.err_at(at, "document-length count out of range"));
        }
        let mut doc_len = Vec::with_capacity(engram_storage::cast::usize_from(n_lens));
        let mut total_len = 0u64;
        for _ in 0..n_lens {
            let at = r.pos;
            let dl = u32::try_from(r.varint()?)
                .map_err(|_| r.err_at(at, "document length too large"))?;
            total_len += u64::from(dl);
            doc_len.push(dl);
        }
        // Ascending and below 2^32 (n_lens <= last doc + 1): cannot fail;
        // built in one pass (pushing one by one rescans each container).
        let nonempty = RoaringBitmap::from_sorted_iter(
            doc_len
                .iter()
                .enumerate()
                .filter(|&(_, &dl)| dl > 0)
                // below n_lens <= last document + 1 <= 2^32
                .map(|(d, _)| u32::try_from(d).expect("document ids are u32")),
        )
        .map_err(|_| r.err_at(at, "document lengths out of order"))?;
        if doc_len.last() == Some(&0) {
            return Err(r.err_at(r.pos, "trailing empty document lengths"));
        }
        if nonempty.len() > n_docs {
            return Err(r.err_at(at, "more non-empty documents than documents"));
        }

        let at = r.pos;
        let n_terms = r.varint()?;
        if n_terms > r.remaining() as u64 {
            return Err(r.err_at(at, "term count out of range"));
        }
        let mut vocab = FxHashMap::with_capacity_and_hasher(
            engram_storage::cast::usize_from(n_terms),
            Default::default(),
        );
        let mut postings = Vec::with_capacity(engram_storage::cast::usize_from(n_terms));
        let mut tf_sum = vec![0u64; doc_len.len()];
        let mut prev_term: Option<&str> = None;
        let mut scratch = Vec::new();
        let n_terms =
            u32::try_from(n_terms).map_err(|_| r.err_at(at, "term count out of range"))?;
        for id in 0..n_terms {
            let at = r.pos;
            let len = r.varint()?;
            if len == 0 || len > (4 * crate::lexical::tokenize::MAX_TOKEN_CHARS) as u64 {
                return Err(r.err_at(at, "term length out of range"));
            }
            let raw = r.take(engram_storage::cast::usize_from(len), "truncated term")?;
            let term = std::str::from_utf8(raw).map_err(|_| r.err_at(at, "term is not UTF-8"))?;
            if prev_term.is_some_and(|p| p >= term) {
                return Err(r.err_at(at, "terms not in strictly ascending order"));
            }
            if !is_token(term) {
                return Err(r.err_at(at, "term is not a token"));
            }
            prev_term = Some(term);

            let at = r.pos;
            let bm_len = r.varint()?;
            if bm_len > r.remaining() as u64 {
                return Err(r.err_at(at, "truncated postings bitmap"));
            }
            let raw = r.take(
                engram_storage::cast::usize_from(bm_len),
                "truncated postings bitmap",
            )?;
            let docs = RoaringBitmap::deserialize_from(raw)
                .map_err(|_| r.err_at(at, "malformed postings bitmap"))?;
            scratch.clear();
            docs.serialize_into(&mut scratch)
                .expect("writing to a Vec<u8> cannot fail");
            // `add` never creates run containers, so a canonical encoding has
            // none; together with the byte comparison this makes every
            // accepted bitmap exactly what `write_to` would emit.
            if scratch != raw || docs.statistics().n_run_containers != 0 {
                return Err(r.err_at(at, "non-canonical postings bitmap"));
            }
            if docs.is_empty() || !docs.is_subset(&nonempty) {
                return Err(r.err_at(at, "postings outside non-empty documents"));
            }
            let mut min_len = u32::MAX;
            for d in &docs {
                tf_sum[d as usize] += 1;
                min_len = min_len.min(doc_len[d as usize]);
            }

            let at = r.pos;
            let n_multi = r.varint()?;
            if n_multi > docs.len() {
                return Err(r.err_at(at, "more tf entries than postings"));
            }
            let mut multi_docs = Vec::with_capacity(engram_storage::cast::usize_from(n_multi));
            let mut multi_tfs = Vec::with_capacity(engram_storage::cast::usize_from(n_multi));
            let mut next = 0u64;
            for _ in 0..n_multi {
                let at = r.pos;
                let d = next.saturating_add(r.varint()?);
                let tf = r.varint()?.saturating_add(2);
                let (Ok(d), Ok(tf)) = (u32::try_from(d), u32::try_from(tf)) else {
                    return Err(r.err_at(at, "tf entry out of range"));
                };
                // below the length of `tf_sum`: checked as a subset of
                // `docs` after the loop, before any use
                if d as usize >= tf_sum.len() {
                    return Err(r.err_at(at, "tf entry for a document without the term"));
                }
                tf_sum[d as usize] += u64::from(tf) - 1;
                multi_docs.push(d);
                multi_tfs.push(tf);
                next = u64::from(d) + 1;
            }
            // ascending by construction (each delta starts past the last)
            let in_docs = RoaringBitmap::from_sorted_iter(multi_docs.iter().copied())
                .is_ok_and(|m| m.is_subset(&docs));
            if !in_docs {
                return Err(r.err_at(at, "tf entry for a document without the term"));
            }
            vocab.insert(term.to_owned(), id);
            let max_tf = multi_tfs.iter().copied().max().unwrap_or(1);
            postings.push(Postings {
                docs,
                multi_docs,
                multi_tfs,
                max_tf,
                min_len,
            });
        }
        if r.remaining() != 0 {
            return Err(r.err_at(r.pos, "trailing bytes"));
        }
        if tf_sum
            .iter()
            .zip(&doc_len)
            .any(|(&s, &dl)| s != u64::from(dl))
        {
            return Err(r.err_at(0, "term frequencies do not add up to document lengths"));
        }
        Ok(Bm25Index {
            params,
            vocab,
            postings,
            doc_len,
            nonempty,
            total_len,
            n_docs,
            last_doc,
            token_ids: Default::default(),
        })
    }
}

/// Whether `term` is exactly one token under the current tokenizer (a
/// stem is a token too: ASCII lowercase letters).
fn is_token(term: &str) -> bool {
    let t = crate::lexical::tokens(term);
    t.len() == 1 && t[0] == term
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v.to_le_bytes()[0] | 0x80);
        v >>= 7;
    }
    out.push(v.to_le_bytes()[0]);
}

/// Bounds-checked cursor over the encoding.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err_at(&self, offset: usize, reason: &'static str) -> Bm25Error {
        Bm25Error::Format { offset, reason }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, reason: &'static str) -> Result<&'a [u8], Bm25Error> {
        if n > self.remaining() {
            return Err(self.err_at(self.pos, reason));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, Bm25Error> {
        Ok(self.take(1, "unexpected end of input")?[0])
    }

    fn u32(&mut self) -> Result<u32, Bm25Error> {
        let b = self.take(4, "unexpected end of input")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, Bm25Error> {
        let b = self.take(8, "unexpected end of input")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// Unsigned LEB128, shortest form only.
    fn varint(&mut self) -> Result<u64, Bm25Error> {
        let start = self.pos;
        let mut v = 0u64;
        let mut shift = 0u32;
        loop {
            let byte = self.u8()?;
            if shift == 63 && byte > 1 {
                return Err(self.err_at(start, "varint overflows u64"));
            }
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 {
                    return Err(self.err_at(start, "non-canonical varint"));
                }
                return Ok(v);
            }
            shift += 7;
        }
    }
}
