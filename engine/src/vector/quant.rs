//! Int8 codes of vectors, for exact scans that read a quarter of the bytes.
//!
//! Owns: per-vector scalar quantization (each vector scaled by its own
//! largest component to `[-127, 127]`), the int8 inner product (`simsimd`'s
//! run-time dispatched kernels: VNNI where the CPU has it), and a bound on
//! how far the int8 estimate of an inner product can be from the true one.
//!
//! The bound is what makes the codes safe to use for *exact* results: a
//! scan estimates every eligible vector, keeps those whose upper bound
//! reaches the n-th best lower bound, and re-ranks only those with the
//! full-precision kernel. Every vector left out is provably worse than n
//! kept ones, so the top n equal a full-precision scan's, ties included,
//! whatever the data (see [`top_candidates`] and its property test).
//!
//! Why per-vector scales: no training, nothing to persist, the same codes
//! on every replay, and no component ever clipped.
//!
//! The same codes also drive graph walks ([`CodeScorer`]): there the
//! estimates only route the walk, and the caller re-ranks what it finds
//! with full-precision distances.
//!
//! Must never: decide which vectors are scanned (callers pass eligible
//! slots only).

use roaring::RoaringBitmap;
use simsimd::SpatialSimilarity;

use super::hnsw::{Scorer, Vectors};

/// Largest code magnitude.
const Q: f32 = 127.0;

/// One quantized vector's side data.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CodeMeta {
    /// The value of one code step (`max |x| / 127`; 0 for a zero vector).
    pub step: f32,
    /// Sum of the codes' magnitudes.
    pub l1: u32,
    /// Sum of the codes.
    pub sum: i32,
}

/// Quantizes `v` into `out` (same length). Returns the step and L1 norm.
///
/// Each code is `v[i] * 127 / max |v|` rounded to the nearest integer
/// (ties to even), so it is never more than half a step from the value.
/// Written in lanes of 16 with no saturating float-to-int cast, so the
/// compiler vectorizes it (a query is quantized on every scan); the tests'
/// `quantize_reference` is the same definition with the standard
/// library's rounding, and a property test holds them equal.
#[allow(clippy::cast_possible_truncation)] // codes lie in [-127, 127]
pub fn quantize(v: &[f32], out: &mut [i8]) -> CodeMeta {
    debug_assert_eq!(v.len(), out.len());
    // `a > b` selects compile to a packed max; the largest magnitude is
    // exact whatever the order it is found in.
    let mut m = [0.0f32; LANES];
    let chunks = v.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, x) in m.iter_mut().zip(c) {
            let a = x.abs();
            *m = if a > *m { a } else { *m };
        }
    }
    let max = rest
        .iter()
        .chain(&m)
        .fold(0.0f32, |m, x| if x.abs() > m { x.abs() } else { m });
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return CodeMeta::default();
    }
    let scale = Q / max;
    let (mut l1, mut sum) = ([0i32; LANES], [0i32; LANES]);
    let mut outs = out.chunks_exact_mut(LANES);
    let mut ins = v.chunks_exact(LANES);
    for (o, x) in (&mut outs).zip(&mut ins) {
        for i in 0..LANES {
            let c = round_code(x[i] * scale);
            l1[i] += c.abs();
            sum[i] += c;
            o[i] = c as i8;
        }
    }
    let (mut l1, mut sum) = (l1.iter().sum::<i32>(), sum.iter().sum::<i32>());
    for (o, x) in outs.into_remainder().iter_mut().zip(ins.remainder()) {
        let c = round_code(x * scale);
        l1 += c.abs();
        sum += c;
        *o = c as i8;
    }
    CodeMeta {
        step: max / Q,
        l1: l1.unsigned_abs(),
        sum,
    }
}

/// Lanes [`quantize`] works in.
const LANES: usize = 16;

/// `1.5 * 2^23`: a float in `[2^23, 2^24)` has a step of exactly 1, so
/// adding this to a small value rounds it to an integer (ties to even),
/// which then sits in the low bits of the sum's representation.
const ROUNDER: f32 = 12_582_912.0;

/// `y` clamped to `[-127, 127]` and rounded to the nearest integer, ties to
/// even (NaN, which checked input never holds, gives -127). No float-to-int
/// conversion, so it vectorizes.
#[inline(always)]
#[allow(clippy::cast_possible_wrap)] // both representations are below 2^31
fn round_code(y: f32) -> i32 {
    let y = if y >= -Q { y } else { -Q };
    let y = if y > Q { Q } else { y };
    (y + ROUNDER).to_bits() as i32 - ROUNDER.to_bits() as i32
}

/// [`quantize`]'s definition, one component at a time with the standard
/// library's rounding (the reference its lanes are tested against).
#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
pub fn quantize_reference(v: &[f32], out: &mut [i8]) -> CodeMeta {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        out.fill(0);
        return CodeMeta::default();
    }
    let scale = Q / max;
    let (mut l1, mut sum) = (0u32, 0i32);
    for (o, x) in out.iter_mut().zip(v) {
        let y = x * scale;
        let c = if y.is_nan() {
            -127
        } else {
            y.clamp(-Q, Q).round_ties_even() as i8
        };
        l1 += u32::from(c.unsigned_abs());
        sum += i32::from(c);
        *o = c;
    }
    CodeMeta {
        step: max / Q,
        l1,
        sum,
    }
}

/// A query's codes, ready to be compared with many vectors' codes.
#[derive(Debug)]
pub struct QueryCode {
    codes: Vec<i8>,
    /// `codes + 128` as unsigned bytes (the VNNI kernel multiplies
    /// unsigned by signed bytes).
    shifted: Vec<u8>,
    /// The query's side data.
    pub meta: CodeMeta,
    vnni: bool,
}

/// Hamming distance from `q` to each run of `q.len()` words in `bits`.
#[allow(unsafe_code)]
pub fn hamming_all(bits: &[u64], q: &[u64]) -> Vec<u32> {
    #[cfg(target_arch = "x86_64")]
    if (1..=8).contains(&q.len()) && x86::vpopcnt_available() {
        // SAFETY: the kernel needs only the target features, detected on
        // this CPU just above.
        return unsafe { x86::hamming_all_avx512(bits, q) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("popcnt") {
        // SAFETY: the kernel needs only the popcnt target feature, detected
        // on this CPU just above.
        return unsafe { x86::hamming_all(bits, q) };
    }
    hamming_portable(bits, q)
}

/// [`hamming_all`] without CPU features (x86_64's baseline has no popcnt
/// instruction; `count_ones` is then a sequence of shifts and masks).
/// A plain loop (no iterator adaptors), so that inlined into the popcnt
/// kernel every `count_ones` becomes one instruction.
#[inline(always)]
fn hamming_portable(bits: &[u64], q: &[u64]) -> Vec<u32> {
    let w = q.len().max(1);
    let mut out = Vec::with_capacity(bits.len() / w);
    let mut i = 0;
    while i + w <= bits.len() {
        let mut d = 0u32;
        let mut j = 0;
        while j < q.len() {
            d += (bits[i + j] ^ q[j]).count_ones();
            j += 1;
        }
        out.push(d);
        i += w;
    }
    out
}

/// `words` u64 words whose bit `i` is set when code `i` is positive.
pub fn sign_bits(codes: &[i8], words: usize) -> impl Iterator<Item = u64> + '_ {
    (0..words).map(move |w| {
        codes
            .iter()
            .skip(w * 64)
            .take(64)
            .enumerate()
            .fold(0u64, |acc, (b, &c)| acc | (u64::from(c > 0) << b))
    })
}

impl QueryCode {
    /// Quantizes `q`.
    pub fn new(q: &[f32]) -> QueryCode {
        let mut codes = vec![0i8; q.len()];
        let meta = quantize(q, &mut codes);
        let shifted = codes.iter().map(|&c| c.cast_unsigned() ^ 0x80).collect();
        QueryCode {
            codes,
            shifted,
            meta,
            vnni: x86::vnni_available(),
        }
    }

    /// Integer inner product with a vector's codes (`x_meta` from the same
    /// [`quantize`] call as `x`).
    #[inline]
    #[allow(unsafe_code)]
    pub fn dot(&self, x: &[i8], x_meta: CodeMeta) -> i32 {
        #[cfg(target_arch = "x86_64")]
        if self.vnni && x.len() == self.shifted.len() {
            // SAFETY: the kernel needs only the target features, which
            // `vnni_available` detected on this CPU at construction.
            let biased = unsafe { x86::dot_u8_i8(&self.shifted, x) };
            return biased - 128 * x_meta.sum;
        }
        let _ = x_meta;
        dot_i8(&self.codes, x)
    }

    /// [`QueryCode::dot`] with the codes at each of `positions` in a run
    /// of `dim`-byte codes (`meta` by position), in order; every code of
    /// the run, in order, for `None`. One call for a whole scan, so the
    /// kernel is inlined into its loop. Empty when `dim` is 0.
    #[allow(unsafe_code)]
    pub fn dots(
        &self,
        codes: &[i8],
        meta: &[CodeMeta],
        dim: usize,
        positions: Option<&[u32]>,
    ) -> Vec<i32> {
        if dim == 0 {
            return Vec::new();
        }
        let count = positions.map_or(codes.len() / dim, <[u32]>::len);
        let mut out = Vec::with_capacity(count);
        let pos = |j: usize| positions.map_or(j, |p| p[j] as usize);
        #[cfg(target_arch = "x86_64")]
        if self.vnni && dim == self.shifted.len() {
            // SAFETY: as in `dot`: `vnni_available` detected the features.
            unsafe { x86::dots_u8_i8(&self.shifted, codes, dim, positions, &mut out) };
            for (j, d) in out.iter_mut().enumerate() {
                *d -= 128 * meta[pos(j)].sum;
            }
            return out;
        }
        out.extend((0..count).map(|j| {
            let p = pos(j);
            self.dot(&codes[p * dim..(p + 1) * dim], meta[p])
        }));
        out
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_loadu_si512,
        _mm512_reduce_add_epi32, _mm512_setzero_si512,
    };

    /// Prefetch hint for every cache line of `bytes`.
    #[inline]
    #[allow(unsafe_code)]
    pub fn prefetch(bytes: &[i8]) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        for line in bytes.chunks(64) {
            // SAFETY: a prefetch is a hint that never faults, and the
            // pointer is into a live slice; SSE is in the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.as_ptr()) };
        }
    }

    /// [`super::hamming_all`] compiled with the popcnt instruction.
    #[target_feature(enable = "popcnt")]
    pub fn hamming_all(bits: &[u64], q: &[u64]) -> Vec<u32> {
        super::hamming_portable(bits, q)
    }

    /// Whether [`hamming_all_avx512`] can run here.
    pub fn vpopcnt_available() -> bool {
        std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vpopcntdq")
    }

    /// [`super::hamming_all`] for runs of 1 to 8 words (up to 512
    /// dimensions): one masked load, XOR and 8-lane popcount per item.
    ///
    /// Callers must have checked [`vpopcnt_available`] and the run length.
    #[target_feature(enable = "avx512f,avx512vpopcntdq")]
    #[allow(unsafe_code)]
    pub fn hamming_all_avx512(bits: &[u64], q: &[u64]) -> Vec<u32> {
        use std::arch::x86_64::{
            _mm512_maskz_loadu_epi64, _mm512_popcnt_epi64, _mm512_reduce_add_epi64,
            _mm512_xor_si512,
        };
        let w = q.len();
        assert!((1..=8).contains(&w), "runs of 1 to 8 words");
        #[allow(clippy::cast_possible_truncation)] // w <= 8
        let mask = ((1u16 << w) - 1) as u8;
        // SAFETY: the mask enables only the first w <= q.len() lanes, and
        // masked-off lanes are never read.
        let qv = unsafe { _mm512_maskz_loadu_epi64(mask, q.as_ptr().cast()) };
        let n = bits.len() / w;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: words i * w .. i * w + w lie within `bits` (i < n =
            // bits.len() / w); masked-off lanes are never read.
            let v = unsafe { _mm512_maskz_loadu_epi64(mask, bits.as_ptr().add(i * w).cast()) };
            let c = _mm512_reduce_add_epi64(_mm512_popcnt_epi64(_mm512_xor_si512(v, qv)));
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // <= 512
            out.push(c as u32);
        }
        out
    }

    /// Whether the AVX-512 VNNI kernel can run here.
    pub fn vnni_available() -> bool {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni")
    }

    /// [`dot_u8_i8`] of `u` with the codes at each of `positions` of a
    /// run of `dim`-byte codes (every code of the run for `None`),
    /// appended to `out`.
    ///
    /// Callers must have checked [`vnni_available`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub fn dots_u8_i8(
        u: &[u8],
        codes: &[i8],
        dim: usize,
        positions: Option<&[u32]>,
        out: &mut Vec<i32>,
    ) {
        match positions {
            Some(positions) => out.extend(positions.iter().map(|&p| {
                let p = p as usize;
                dot_u8_i8(u, &codes[p * dim..(p + 1) * dim])
            })),
            None => out.extend(codes.chunks_exact(dim).map(|x| dot_u8_i8(u, x))),
        }
    }

    /// `sum(u[i] * x[i])`, unsigned by signed bytes: 64 products per
    /// instruction, two independent accumulators.
    ///
    /// Callers must have checked [`vnni_available`] (calling it is
    /// `unsafe` for that reason only). Unequal lengths use the shorter.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[allow(unsafe_code)]
    pub fn dot_u8_i8(u: &[u8], x: &[i8]) -> i32 {
        debug_assert_eq!(u.len(), x.len());
        let n = u.len().min(x.len());
        let blocks = n / 64;
        let (mut a0, mut a1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let load = |p: *const u8, b: usize| -> __m512i {
            // SAFETY: b < blocks = n / 64, so the 64 bytes at b * 64 lie
            // within both slices; the load is unaligned.
            unsafe { _mm512_loadu_si512(p.add(b * 64).cast()) }
        };
        let (pu, px) = (u.as_ptr(), x.as_ptr().cast::<u8>());
        let mut b = 0;
        while b + 2 <= blocks {
            a0 = _mm512_dpbusd_epi32(a0, load(pu, b), load(px, b));
            a1 = _mm512_dpbusd_epi32(a1, load(pu, b + 1), load(px, b + 1));
            b += 2;
        }
        if b < blocks {
            a0 = _mm512_dpbusd_epi32(a0, load(pu, b), load(px, b));
        }
        let mut s = _mm512_reduce_add_epi32(_mm512_add_epi32(a0, a1));
        for i in blocks * 64..n {
            s += i32::from(u[i]) * i32::from(x[i]);
        }
        s
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    pub fn vnni_available() -> bool {
        false
    }
    pub fn prefetch(_: &[i8]) {}
}

/// Integer inner product of two code vectors.
#[inline]
#[allow(clippy::cast_possible_truncation)] // an integer sum below 2^31, exact in f64
pub fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    match <i8 as SpatialSimilarity>::dot(a, b) {
        Some(d) => d.round() as i32,
        None => a
            .iter()
            .zip(b)
            .map(|(x, y)| i32::from(*x) * i32::from(*y))
            .sum(),
    }
}

/// Estimate of `dot(q, x)` and the largest possible error of it.
///
/// With `q = sq (q8 + g)` and `x = sx (x8 + e)`, `|g|, |e| <= 1/2` per
/// component (rounding), the error of `sq sx dot(q8, x8)` is at most
/// `sq sx (|q8|_1 / 2 + |x8|_1 / 2 + d / 4)`. A relative and an absolute
/// margin cover the float arithmetic of the scales and of the
/// full-precision kernel the estimate stands in for.
#[inline]
#[allow(clippy::cast_precision_loss)] // sums and dimensions far below 2^24
pub fn estimate(q: CodeMeta, x: CodeMeta, dot: i32, dim: usize) -> (f32, f32) {
    let s = q.step * x.step;
    let est = s * dot as f32;
    let err = s * (0.5 * (q.l1 as f32 + x.l1 as f32) + 0.25 * dim as f32);
    // |q| |x| <= sq sx 127^2 d bounds the kernel's own rounding.
    let margin = err * 1e-3 + s * Q * Q * dim as f32 * 1e-5;
    let err = err + margin;
    if !(est.is_finite() && err.is_finite()) {
        // Components near f32's limits overflow the scales' product: no
        // bound, so the vector is always re-scored in full precision
        // (a NaN bound would order below every number and prune others).
        return (0.0, f32::INFINITY);
    }
    (est, err)
}

/// [`estimate`] of each of `dots` as (lower, upper) bounds, for vectors
/// with the given steps and L1 norms (as `f32`): the same operations in
/// the same order, written without branches so they vectorize.
#[allow(clippy::cast_precision_loss)] // as in `estimate`
fn bounds(
    q: CodeMeta,
    steps: &[f32],
    l1s: &[f32],
    dots: &[i32],
    dim: usize,
) -> (Vec<f32>, Vec<f32>) {
    let count = dots.len().min(steps.len()).min(l1s.len());
    let (ql1, d) = (q.l1 as f32, dim as f32);
    let mut lower = vec![0.0f32; count];
    let mut upper = vec![0.0f32; count];
    let rows = lower.iter_mut().zip(upper.iter_mut());
    for ((((lo, up), &step), &l1), &dot) in rows.zip(steps).zip(l1s).zip(dots) {
        let s = q.step * step;
        let est = s * dot as f32;
        let err = s * (0.5 * (ql1 + l1) + 0.25 * d);
        let margin = err * 1e-3 + s * Q * Q * d * 1e-5;
        let err = err + margin;
        let ok = est.is_finite() & err.is_finite();
        *lo = if ok { est - err } else { f32::NEG_INFINITY };
        *up = if ok { est + err } else { f32::INFINITY };
    }
    (lower, upper)
}

/// Int8 codes of a space's vectors, by slot.
#[derive(Debug, Default, PartialEq)]
pub struct Codes {
    dim: usize,
    codes: Vec<i8>,
    meta: Vec<CodeMeta>,
}

impl Codes {
    /// Empty codes for `dim`-dimensional vectors.
    pub fn new(dim: usize) -> Codes {
        Codes {
            dim,
            ..Codes::default()
        }
    }

    /// Slots coded.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether no slot is coded.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// Codes the slots from `len()` up to `vectors.len()`.
    pub fn extend(&mut self, vectors: &impl Vectors) {
        let upto = vectors.len();
        #[allow(clippy::cast_possible_truncation)] // slots are u32
        let from = self.len() as u32;
        self.reserve(upto.saturating_sub(from) as usize);
        for slot in from..upto {
            self.push(vectors.get(slot));
        }
    }

    /// Codes the next slots from `rows`: whole `dim`-component rows, the
    /// first of them slot `len()`.
    pub fn extend_rows(&mut self, rows: &[f32]) {
        let dim = self.dim.max(1);
        self.reserve(rows.len() / dim);
        for row in rows.chunks_exact(dim) {
            self.push(row);
        }
    }

    fn reserve(&mut self, rows: usize) {
        self.codes.reserve(rows * self.dim);
        self.meta.reserve(rows);
    }

    /// Codes one row as the next slot.
    fn push(&mut self, row: &[f32]) {
        let at = self.codes.len();
        self.codes.resize(at + self.dim, 0);
        self.meta.push(quantize(row, &mut self.codes[at..]));
    }

    /// The codes and side data of `slot`.
    #[inline]
    pub fn get(&self, slot: u32) -> (&[i8], CodeMeta) {
        let s = slot as usize;
        (&self.codes[s * self.dim..(s + 1) * self.dim], self.meta[s])
    }

    /// Asks the CPU to start loading `slot`'s codes (a hint; scans call it
    /// a few vectors ahead, since scattered slots defeat the hardware
    /// prefetcher and a scan would otherwise wait on memory).
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        let s = slot as usize * self.dim;
        if let Some(c) = self.codes.get(s..s + self.dim) {
            x86::prefetch(c);
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.codes.len() + self.meta.len() * std::mem::size_of::<CodeMeta>()
    }
}

/// Graph-walk distances from a query's codes to the codes of every slot
/// (inner-product spaces: the distance is minus the estimated dot
/// product). Approximate: the walk keeps more candidates than it returns,
/// and the caller re-ranks them with full-precision distances.
pub struct CodeScorer<'a> {
    q: &'a QueryCode,
    codes: &'a Codes,
}

impl<'a> CodeScorer<'a> {
    /// Distances from `q` to `codes`.
    pub fn new(q: &'a QueryCode, codes: &'a Codes) -> CodeScorer<'a> {
        CodeScorer { q, codes }
    }
}

impl Scorer for CodeScorer<'_> {
    #[inline(always)]
    fn dist(&self, slot: u32) -> f32 {
        let (x, meta) = self.codes.get(slot);
        #[allow(clippy::cast_precision_loss)] // |dot| <= 127^2 * dim, far below 2^24 * 2^7
        let dot = self.q.dot(x, meta) as f32;
        -(self.q.meta.step * meta.step * dot)
    }
    #[inline(always)]
    fn prefetch(&self, slot: u32) {
        self.codes.prefetch(slot);
    }
}

/// The codes of one set of records, gathered into one contiguous run so a
/// scan streams them instead of visiting scattered slots. Keyed by the
/// exact set (records never change their vector, so equal sets mean equal
/// codes).
#[derive(Debug)]
pub struct Gathered {
    key: RoaringBitmap,
    items: Vec<u32>,
    codes: Vec<i8>,
    meta: Vec<CodeMeta>,
    /// Each item's step and L1 norm (as `f32`), apart, for [`bounds`].
    steps: Vec<f32>,
    l1s: Vec<f32>,
    /// Sign bits of the codes (`words` u64 per item), for the binary
    /// prefilter.
    bits: Vec<u64>,
    words: usize,
}

impl Gathered {
    /// Gathers the codes of `slots` (item, slot) for the set `key`.
    pub fn new(key: &RoaringBitmap, slots: &[(u32, u32)], codes: &Codes) -> Gathered {
        let words = codes.dim.div_ceil(64);
        let mut g = Gathered {
            key: key.clone(),
            items: Vec::with_capacity(slots.len()),
            codes: Vec::with_capacity(slots.len() * codes.dim),
            meta: Vec::with_capacity(slots.len()),
            steps: Vec::with_capacity(slots.len()),
            l1s: Vec::with_capacity(slots.len()),
            bits: Vec::with_capacity(slots.len() * words),
            words,
        };
        for (k, &(slot, item)) in slots.iter().enumerate() {
            if let Some(&(ahead, _)) = slots.get(k + PREFETCH_AHEAD) {
                codes.prefetch(ahead);
            }
            let (c, m) = codes.get(slot);
            g.items.push(item);
            g.codes.extend_from_slice(c);
            g.meta.push(m);
            g.steps.push(m.step);
            #[allow(clippy::cast_precision_loss)] // as in `estimate`
            g.l1s.push(m.l1 as f32);
            g.bits.extend(sign_bits(c, words));
        }
        g
    }

    /// The items that may be among the `n` most similar to the query
    /// ([`top_candidates`] of every item's bounds). Also returns how many
    /// items were estimated.
    pub fn scan_top(&self, q: &QueryCode, dim: usize, n: usize) -> (Vec<Bounded<u32>>, usize) {
        (self.bounded_top(q, dim, n, None), self.items.len())
    }

    /// Like [`Gathered::scan_top`], over only the `keep` items whose sign
    /// bits differ least from the query's (Hamming distance; ties by
    /// position): an approximate plan that reads one bit per dimension of
    /// every item and the int8 codes of `keep` items. Also returns how many
    /// items were compared (all of them, by bits).
    pub fn scan_prefiltered(
        &self,
        q: &QueryCode,
        dim: usize,
        n: usize,
        keep: usize,
    ) -> (Vec<Bounded<u32>>, usize) {
        let total = self.items.len();
        if keep >= total || self.words == 0 || q.codes.len().div_ceil(64) != self.words {
            return self.scan_top(q, dim, n);
        }
        // the query's sign bits, made here: only this plan reads them
        let q_bits: Vec<u64> = sign_bits(&q.codes, self.words).collect();
        let ham = hamming_all(&self.bits, &q_bits);
        // the cut-off distance: the smallest c with at least `keep` items
        // at or below it; items at c are taken in position order
        let mut counts = vec![0usize; self.words * 64 + 1];
        for &h in &ham {
            counts[h as usize] += 1;
        }
        let (mut cut, mut below) = (0usize, 0usize);
        while cut + 1 < counts.len() && below + counts[cut] < keep {
            below += counts[cut];
            cut += 1;
        }
        let mut at_cut = keep - below;
        let mut picked = Vec::with_capacity(keep);
        for (i, &h) in ham.iter().enumerate() {
            let h = h as usize;
            if h < cut || (h == cut && at_cut > 0) {
                if h == cut {
                    at_cut -= 1;
                }
                #[allow(clippy::cast_possible_truncation)] // positions are u32 slots
                picked.push(i as u32);
            }
        }
        (self.bounded_top(q, dim, n, Some(&picked)), total)
    }

    /// [`top_candidates`] over the items at `positions` (all of them for
    /// `None`), estimated in one batch: the same bounds as [`estimate`]
    /// (the same operations in the same order, so the same bits), computed
    /// over arrays so the compiler vectorizes them (as per-item scalar code,
    /// with a heap for the threshold, they took twice the dot products'
    /// time at 200 items).
    fn bounded_top(
        &self,
        q: &QueryCode,
        dim: usize,
        n: usize,
        positions: Option<&[u32]>,
    ) -> Vec<Bounded<u32>> {
        if dim == 0 || n == 0 {
            return Vec::new();
        }
        let dots = q.dots(&self.codes, &self.meta, dim, positions);
        let picked: (Vec<f32>, Vec<f32>);
        let (steps, l1s): (&[f32], &[f32]) = match positions {
            None => (&self.steps, &self.l1s),
            Some(p) => {
                picked = p
                    .iter()
                    .map(|&i| (self.steps[i as usize], self.l1s[i as usize]))
                    .unzip();
                (&picked.0, &picked.1)
            }
        };
        let (lower, upper) = bounds(q.meta, steps, l1s, &dots, dim);
        let bounded = (0..lower.len()).map(|j| Bounded {
            item: self.items[positions.map_or(j, |p| p[j] as usize)],
            lower: lower[j],
            upper: upper[j],
        });
        top_candidates(bounded, n)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.codes.len()
            + self.meta.len() * std::mem::size_of::<CodeMeta>()
            + (self.steps.len() + self.l1s.len()) * 4
            + self.items.len() * 4
            + self.bits.len() * 8
    }
}

/// How many vectors ahead a scan over scattered slots prefetches.
pub const PREFETCH_AHEAD: usize = 8;
/// Bytes a space keeps in gathered scans at most.
pub const GATHERED_BYTES_MAX: usize = 64 << 20;

/// Recently scanned sets of a space, most recent first, within
/// [`GATHERED_BYTES_MAX`].
#[derive(Debug, Default)]
pub struct ScanCache {
    entries: Vec<std::sync::Arc<Gathered>>,
}

impl ScanCache {
    /// The gathered codes of exactly the set `key`, if kept.
    pub fn get(&mut self, key: &RoaringBitmap) -> Option<std::sync::Arc<Gathered>> {
        let len = key.len();
        let i = self
            .entries
            .iter()
            .position(|g| g.key.len() == len && g.key == *key)?;
        let g = self.entries.remove(i);
        self.entries.insert(0, g.clone());
        Some(g)
    }

    /// Keeps `g`, dropping the least recently used beyond the budget.
    pub fn put(&mut self, g: std::sync::Arc<Gathered>) {
        if g.bytes() > GATHERED_BYTES_MAX {
            return;
        }
        self.entries.insert(0, g);
        let mut total = 0;
        self.entries.retain(|e| {
            total += e.bytes();
            total <= GATHERED_BYTES_MAX
        });
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(|e| e.bytes()).sum()
    }
}

/// A candidate of a quantized scan: the bounds of its similarity.
#[derive(Clone, Copy, Debug)]
pub struct Bounded<T> {
    /// What the caller scores it by later.
    pub item: T,
    /// Lowest possible similarity.
    pub lower: f32,
    /// Highest possible similarity.
    pub upper: f32,
}

/// Keeps the candidates that may be among the `n` most similar: those whose
/// upper bound reaches the n-th largest lower bound, in the order given.
///
/// The threshold is found by selection over a copy of the lower bounds
/// (linear; a heap updated per item cost more than the bounds themselves
/// at a few hundred items), then one pass keeps the items that reach it.
pub fn top_candidates<T>(all: impl Iterator<Item = Bounded<T>>, n: usize) -> Vec<Bounded<T>> {
    if n == 0 {
        return Vec::new();
    }
    let mut kept: Vec<Bounded<T>> = all.collect();
    if kept.len() <= n {
        return kept;
    }
    let mut lowers: Vec<f32> = kept.iter().map(|b| b.lower).collect();
    let at = lowers.len() - n;
    let (_, &mut t, _) = lowers.select_nth_unstable_by(at, f32::total_cmp);
    kept.retain(|b| b.upper >= t);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vector::distance::{Metric, distance};
    use proptest::prelude::*;

    fn unit(v: Vec<f32>) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn bounds_that_overflow_keep_the_vector_for_rescoring() {
        // steps whose product overflows f32: no finite bound exists
        let big = CodeMeta {
            step: 3e21,
            l1: 127 * 4,
            sum: 0,
        };
        let (est, err) = estimate(big, big, 127 * 127 * 4, 4);
        assert!(est.is_finite() && err == f32::INFINITY, "{est} {err}");
        let all = vec![
            Bounded {
                item: 0,
                lower: est - err,
                upper: est + err,
            },
            Bounded {
                item: 1,
                lower: 1.0,
                upper: 2.0,
            },
        ];
        let kept: Vec<usize> = top_candidates(all.into_iter(), 1)
            .into_iter()
            .map(|b| b.item)
            .collect();
        assert_eq!(kept, vec![0, 1], "the unbounded vector is re-scored");
    }

    #[test]
    fn codes_span_the_range_and_zero_vectors_are_zero() {
        let mut out = vec![0i8; 4];
        let m = quantize(&[0.5, -0.25, 0.0, -0.5], &mut out);
        assert_eq!(out, vec![127, -64, 0, -127]);
        assert_eq!(m.l1, 127 + 64 + 127);
        assert!((m.step - 0.5 / 127.0).abs() < 1e-9);
        let z = quantize(&[0.0; 4], &mut out);
        assert_eq!((z.step, z.l1, out.clone()), (0.0, 0, vec![0; 4]));
    }

    #[test]
    fn the_int8_kernel_matches_integer_arithmetic() {
        let a: Vec<i8> = (0..384).map(|i| ((i * 37) % 255 - 127) as i8).collect();
        let b: Vec<i8> = (0..384).map(|i| ((i * 91 + 5) % 255 - 127) as i8).collect();
        let want: i32 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| i32::from(*x) * i32::from(*y))
            .sum();
        assert_eq!(dot_i8(&a, &b), want);
    }

    /// Coding rows copied in chunks gives the codes of coding them by slot.
    #[test]
    fn codes_from_copied_rows_equal_codes_by_slot() {
        let dim = 20;
        let data: Vec<f32> = (0..dim * 50)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let flat = crate::vector::hnsw::FlatVectors { data: &data, dim };
        let mut by_slot = Codes::new(dim);
        by_slot.extend(&flat);
        let mut by_rows = Codes::new(dim);
        for chunk in data.chunks(dim * 7) {
            by_rows.extend_rows(chunk);
        }
        assert_eq!(by_rows.len(), 50);
        for slot in 0..50 {
            assert_eq!(by_rows.get(slot), by_slot.get(slot), "slot {slot}");
        }
    }

    #[test]
    fn the_query_kernel_matches_integer_arithmetic() {
        for dim in [1usize, 63, 64, 65, 128, 384, 385] {
            let q: Vec<f32> = (0..dim)
                .map(|i| ((i * 31 % 17) as f32 - 8.0) / 8.0)
                .collect();
            let x: Vec<f32> = (0..dim)
                .map(|i| ((i * 7 % 23) as f32 - 11.0) / 11.0)
                .collect();
            let qc = QueryCode::new(&q);
            let mut xc = vec![0i8; dim];
            let xm = quantize(&x, &mut xc);
            let want: i32 = qc
                .codes
                .iter()
                .zip(&xc)
                .map(|(a, b)| i32::from(*a) * i32::from(*b))
                .sum();
            assert_eq!(qc.dot(&xc, xm), want, "dim {dim} (vnni: {})", qc.vnni);
            let portable = QueryCode {
                vnni: false,
                ..QueryCode::new(&q)
            };
            assert_eq!(portable.dot(&xc, xm), want, "dim {dim}, portable kernel");
        }
    }

    #[test]
    fn hamming_distances_match_a_bit_by_bit_count() {
        let q = [0xF0F0_u64, u64::MAX, 1];
        let bits = [0xF0F0_u64, u64::MAX, 1, 0, 0, 0, 0x0F0F, 0, 3];
        assert_eq!(hamming_all(&bits, &q), vec![0, 64 + 8 + 1, 8 + 8 + 64 + 1]);
        assert_eq!(hamming_portable(&bits, &q), hamming_all(&bits, &q));
    }

    #[test]
    fn every_hamming_kernel_agrees_with_the_portable_loop() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for w in 1..=10usize {
            let q: Vec<u64> = (0..w).map(|_| next()).collect();
            let bits: Vec<u64> = (0..w * 37).map(|_| next()).collect();
            let want = hamming_portable(&bits, &q);
            assert_eq!(hamming_all(&bits, &q), want, "{w} words");
            #[cfg(target_arch = "x86_64")]
            if w <= 8 && x86::vpopcnt_available() {
                // SAFETY: features detected just above.
                #[allow(unsafe_code)]
                let got = unsafe { x86::hamming_all_avx512(&bits, &q) };
                assert_eq!(got, want, "avx512, {w} words");
            }
        }
    }

    proptest! {
        /// The lane-wise quantizer gives the reference's codes and side
        /// data bit for bit, whatever the values and the length.
        #[test]
        fn quantize_equals_the_scalar_reference(
            v in prop::collection::vec(
                prop_oneof![
                    8 => -2.0f32..2.0,
                    1 => Just(0.0f32),
                    1 => Just(-0.0f32),
                    1 => prop::num::f32::ANY,
                ],
                0..100,
            ),
        ) {
            let (mut a, mut b) = (vec![0i8; v.len()], vec![0i8; v.len()]);
            let (ma, mb) = (quantize(&v, &mut a), quantize_reference(&v, &mut b));
            prop_assert_eq!(a, b);
            prop_assert_eq!(ma.step.to_bits(), mb.step.to_bits());
            prop_assert_eq!((ma.l1, ma.sum), (mb.l1, mb.sum));
        }

        /// The bound holds against the full-precision kernel.
        #[test]
        fn the_estimate_is_within_its_bound(
            q in prop::collection::vec(-1.0f32..1.0, 1..200),
            seed in any::<u64>(),
        ) {
            let dim = q.len();
            let x: Vec<f32> = (0..dim)
                .map(|i| ((seed.wrapping_mul(i as u64 + 7) >> 11) % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let (q, x) = (unit(q), unit(x));
            let (mut qc, mut xc) = (vec![0i8; dim], vec![0i8; dim]);
            let (qm, xm) = (quantize(&q, &mut qc), quantize(&x, &mut xc));
            let (est, err) = estimate(qm, xm, dot_i8(&qc, &xc), dim);
            let exact = -distance(Metric::Dot, &q, &x);
            prop_assert!((est - exact).abs() <= err, "est {est} exact {exact} err {err}");
        }

        /// The selection keeps exactly the items whose upper bound
        /// reaches the n-th largest lower bound (found here by sorting), in
        /// the order given; few distinct values make ties common.
        #[test]
        fn candidates_are_those_reaching_the_nth_lower_bound(
            bounds in prop::collection::vec((0u8..12, 0u8..6), 0..80),
            n in 1usize..20,
        ) {
            let all: Vec<Bounded<usize>> = bounds
                .iter()
                .enumerate()
                .map(|(i, &(l, w))| Bounded {
                    item: i,
                    lower: f32::from(l) - 6.0,
                    upper: f32::from(l) - 6.0 + f32::from(w),
                })
                .collect();
            let mut lowers: Vec<f32> = all.iter().map(|b| b.lower).collect();
            lowers.sort_by(|a, b| b.total_cmp(a));
            let want: Vec<usize> = match lowers.get(n - 1) {
                Some(&t) => all.iter().filter(|b| b.upper >= t).map(|b| b.item).collect(),
                None => all.iter().map(|b| b.item).collect(),
            };
            let got: Vec<usize> = top_candidates(all.into_iter(), n).into_iter().map(|b| b.item).collect();
            prop_assert_eq!(got, want);
        }

        /// A gathered scan's batched bounds are bit for bit the per-item
        /// [`estimate`]s, and it keeps what [`top_candidates`] keeps, in
        /// the same order, over every item and over a subset of positions.
        #[test]
        fn batched_bounds_equal_the_per_item_estimates(
            vs in prop::collection::vec(prop::collection::vec(-1.0f32..1.0, 70), 1..90),
            q in prop::collection::vec(-1.0f32..1.0, 70),
            n in 1usize..15,
            stride in 1usize..4,
        ) {
            let dim = 70;
            let rows: Vec<f32> = vs.iter().flat_map(|v| unit(v.clone())).collect();
            let mut codes = Codes::new(dim);
            codes.extend_rows(&rows);
            #[allow(clippy::cast_possible_truncation)]
            let slots: Vec<(u32, u32)> = (0..vs.len() as u32).map(|i| (i, 1000 + i)).collect();
            let key: RoaringBitmap = slots.iter().map(|s| s.1).collect();
            let g = Gathered::new(&key, &slots, &codes);
            let qc = QueryCode::new(&unit(q));
            #[allow(clippy::cast_possible_truncation)]
            let subset: Vec<u32> = (0..vs.len() as u32).step_by(stride).collect();
            for positions in [None, Some(subset.as_slice())] {
                let all: Vec<u32> = (0..vs.len() as u32).collect();
                let at = positions.unwrap_or(&all);
                let want: Vec<Bounded<u32>> = top_candidates(
                    at.iter().map(|&p| {
                        let (c, m) = codes.get(p);
                        let (est, err) = estimate(qc.meta, m, qc.dot(c, m), dim);
                        Bounded { item: 1000 + p, lower: est - err, upper: est + err }
                    }),
                    n,
                );
                let got = g.bounded_top(&qc, dim, n, positions);
                prop_assert_eq!(got.len(), want.len());
                for (a, b) in got.iter().zip(&want) {
                    prop_assert_eq!(a.item, b.item);
                    prop_assert_eq!(a.lower.to_bits(), b.lower.to_bits());
                    prop_assert_eq!(a.upper.to_bits(), b.upper.to_bits());
                }
            }
        }

        /// Pruning by the bounds keeps the exact top n, ties included.
        #[test]
        fn pruned_candidates_hold_the_exact_top_n(
            vs in prop::collection::vec(prop::collection::vec(-1.0f32..1.0, 24), 1..120),
            q in prop::collection::vec(-1.0f32..1.0, 24),
            n in 1usize..15,
        ) {
            let q = unit(q);
            let mut qc = vec![0i8; 24];
            let qm = quantize(&q, &mut qc);
            let mut all = Vec::new();
            let mut exact: Vec<(f32, usize)> = Vec::new();
            for (i, v) in vs.iter().enumerate() {
                let v = unit(v.clone());
                let mut c = vec![0i8; 24];
                let m = quantize(&v, &mut c);
                let (est, err) = estimate(qm, m, dot_i8(&qc, &c), 24);
                all.push(Bounded { item: i, lower: est - err, upper: est + err });
                exact.push((-distance(Metric::Dot, &q, &v), i));
            }
            let kept: std::collections::BTreeSet<usize> =
                top_candidates(all.into_iter(), n).into_iter().map(|b| b.item).collect();
            exact.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let nth = exact[(n - 1).min(exact.len() - 1)].0;
            for (s, i) in &exact {
                if *s >= nth {
                    prop_assert!(kept.contains(i), "item {i} (similarity {s}, n-th {nth}) was pruned");
                }
            }
        }
    }
}
