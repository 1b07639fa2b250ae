//! Vector distance functions for the vector index.
//!
//! Owns: the [`Metric`] enum, its stable names, and the distance kernels
//! (AVX-512 and AVX2/FMA kernels on x86_64, `simsimd` elsewhere, and a
//! plain scalar reference used by tests).
//! Every distance follows one convention: **lower is closer**.
//!
//! Must never: allocate, panic on well-formed input, or keep state. Callers
//! pass slices of equal length; this module does not validate dimensions
//! beyond a debug assertion (the index checks them once, at its boundary).
//! Its only `unsafe` is calling the `#[target_feature]` kernels after the
//! CPU features were detected at run time.

use simsimd::SpatialSimilarity;

/// Distance function of an index. The name is part of the on-disk format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// `1 - cos(a, b)`, in `[0, 2]`. Zero vectors: distance 0 if both are
    /// zero, 1 if only one is.
    Cosine,
    /// `-dot(a, b)`: lower means a larger inner product. **May be negative.**
    /// Equivalent to cosine on L2-normalised vectors, and cheaper.
    Dot,
    /// Squared euclidean distance `sum((a_i - b_i)^2)`.
    L2,
}

impl Metric {
    /// All metrics, in their stable on-disk order (see [`Metric::code`]).
    pub const ALL: [Metric; 3] = [Metric::Cosine, Metric::Dot, Metric::L2];

    /// Stable lower-case name: `"cosine"`, `"dot"`, `"l2"`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
            Metric::L2 => "l2",
        }
    }

    /// Inverse of [`Metric::name`] (case-insensitive; also accepts `"ip"`
    /// for `Dot` and `"euclidean"` for `L2`).
    pub fn parse(s: &str) -> Option<Metric> {
        match s.to_ascii_lowercase().as_str() {
            "cosine" | "cos" => Some(Metric::Cosine),
            "dot" | "ip" | "inner_product" => Some(Metric::Dot),
            "l2" | "euclidean" | "l2sq" => Some(Metric::L2),
            _ => None,
        }
    }

    /// One-byte code used by binary encodings.
    pub fn code(self) -> u8 {
        match self {
            Metric::Cosine => 0,
            Metric::Dot => 1,
            Metric::L2 => 2,
        }
    }

    /// Inverse of [`Metric::code`].
    pub fn from_code(code: u8) -> Option<Metric> {
        Metric::ALL.get(usize::from(code)).copied()
    }
}

/// Distance between `a` and `b` under `metric` (lower is closer).
///
/// On x86_64 CPUs with AVX2 and FMA this runs the kernels below (four
/// independent 8-lane accumulators: ~2.5x faster than a single dependent
/// FMA chain at 384 dimensions, and it keeps more loads in flight when the
/// vectors come from memory); with AVX-512F, the inner product and L2 run
/// sixteen lanes wide (a recall scanning 20 vectors: 7% more queries/s,
/// docs/benchmarks.md). Elsewhere it uses `simsimd`'s run-time
/// dispatched kernels, falling back to [`distance_scalar`] if those refuse
/// the input (length mismatch). Results may differ in the last bits between
/// kernels, so graphs are bit-reproducible per CPU feature set.
#[inline]
pub fn distance(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len(), "distance over slices of unequal length");
    #[cfg(target_arch = "x86_64")]
    if let Some(d) = avx512::distance(metric, a, b) {
        return d;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(d) = avx2::distance(metric, a, b) {
        return d;
    }
    distance_simsimd(metric, a, b)
}

/// Divides every component of `v` by `d`, in place. IEEE division is
/// correctly rounded in every lane, so the result is bit for bit what a
/// scalar loop gives; on x86_64 with AVX2 it runs eight lanes at a time
/// (the build targets baseline x86_64, where the loop stays scalar).
#[inline]
pub fn div_assign(v: &mut [f32], d: f32) {
    #[cfg(target_arch = "x86_64")]
    if avx2::div_assign(v, d) {
        return;
    }
    for x in v {
        *x /= d;
    }
}

/// [`distance`] through `simsimd` only (reference for the x86 kernels, and
/// the path taken on other CPUs).
#[inline]
#[allow(clippy::cast_possible_truncation)] // simsimd reports f64; distances are f32
pub fn distance_simsimd(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    let d = match metric {
        Metric::Cosine => <f32 as SpatialSimilarity>::cos(a, b),
        Metric::Dot => <f32 as SpatialSimilarity>::dot(a, b).map(|d| -d),
        Metric::L2 => <f32 as SpatialSimilarity>::l2sq(a, b),
    };
    match d {
        Some(d) => d as f32,
        None => distance_scalar(metric, a, b),
    }
}

/// Cosine distance from the three sums, with the zero-vector conventions
/// documented on [`Metric::Cosine`].
#[inline]
#[allow(clippy::cast_possible_truncation)] // accumulated in f64, reported in f32
fn cosine_from_sums(ab: f64, a2: f64, b2: f64) -> f32 {
    if a2 == 0.0 && b2 == 0.0 {
        0.0
    } else if ab == 0.0 {
        1.0
    } else {
        (1.0 - ab / (a2 * b2).sqrt()).max(0.0) as f32
    }
}

/// Scalar reference implementation of [`distance`], accumulating in `f64`.
/// Same conventions, including the zero-vector rules of `Cosine` and the
/// clamp of cosine distance at 0. Used by tests as ground truth.
#[allow(clippy::cast_possible_truncation)] // accumulated in f64, reported in f32
pub fn distance_scalar(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    let pairs = a.iter().zip(b).map(|(&x, &y)| (f64::from(x), f64::from(y)));
    match metric {
        Metric::Dot => -pairs.map(|(x, y)| x * y).sum::<f64>() as f32,
        Metric::L2 => pairs.map(|(x, y)| (x - y) * (x - y)).sum::<f64>() as f32,
        Metric::Cosine => {
            let (mut ab, mut a2, mut b2) = (0.0f64, 0.0f64, 0.0f64);
            for (x, y) in pairs {
                ab += x * y;
                a2 += x * x;
                b2 += y * y;
            }
            cosine_from_sums(ab, a2, b2)
        }
    }
}

/// AVX2 + FMA kernels, written with `std::arch` intrinsics that are safe
/// inside `#[target_feature]` functions (loads go through `_mm256_set_ps`
/// on `&[f32; 8]`, which compiles to one unaligned `vmovups`).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Metric, cosine_from_sums};
    use std::arch::x86_64::*;

    /// `Some(distance)` if this CPU has AVX2 and FMA, else `None`.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn distance(metric: Metric, a: &[f32], b: &[f32]) -> Option<f32> {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return None;
        }
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        // SAFETY: the kernels only require the `avx2` and `fma` target
        // features, which were detected on this CPU just above; their bodies
        // contain no unsafe code.
        Some(unsafe {
            match metric {
                Metric::Dot => -dot(a, b),
                Metric::L2 => l2sq(a, b),
                Metric::Cosine => cosine(a, b),
            }
        })
    }

    /// `true` if this CPU has AVX2 and `v` was divided by `d` in place.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn div_assign(v: &mut [f32], d: f32) -> bool {
        if !is_x86_feature_detected!("avx2") {
            return false;
        }
        // SAFETY: the kernel only requires the `avx2` target feature,
        // detected on this CPU just above; its body contains no unsafe code.
        unsafe { div_assign_avx2(v, d) };
        true
    }

    /// The plain loop, compiled for AVX2: element-wise division has no
    /// order to keep, so the compiler runs it eight lanes at a time.
    #[target_feature(enable = "avx2")]
    fn div_assign_avx2(v: &mut [f32], d: f32) {
        for x in v {
            *x /= d;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn load(x: &[f32; 8]) -> __m256 {
        _mm256_set_ps(x[7], x[6], x[5], x[4], x[3], x[2], x[1], x[0])
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps::<1>(q, q)))
    }

    /// Runs `step(acc, x, y)` over 8-lane blocks of `a` and `b` with four
    /// independent accumulators (four FMA chains in flight), then returns
    /// the horizontal sum plus `tail` applied to the last `len % 8` pairs.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn fold4(
        a: &[f32],
        b: &[f32],
        step: impl Fn(__m256, __m256, __m256) -> __m256,
        tail: impl Fn(f32, f32) -> f32,
    ) -> f32 {
        let (xs, rx) = a.as_chunks::<8>();
        let (ys, ry) = b.as_chunks::<8>();
        let mut acc = [_mm256_setzero_ps(); 4];
        let (x4, x1) = xs.as_chunks::<4>();
        let (y4, y1) = ys.as_chunks::<4>();
        for (x, y) in x4.iter().zip(y4) {
            for j in 0..4 {
                acc[j] = step(load(&x[j]), load(&y[j]), acc[j]);
            }
        }
        for (x, y) in x1.iter().zip(y1) {
            acc[0] = step(load(x), load(y), acc[0]);
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        hsum(sum) + rx.iter().zip(ry).map(|(&x, &y)| tail(x, y)).sum::<f32>()
    }

    #[target_feature(enable = "avx2,fma")]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        fold4(a, b, |x, y, acc| _mm256_fmadd_ps(x, y, acc), |x, y| x * y)
    }

    #[target_feature(enable = "avx2,fma")]
    fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        let step = |x, y, acc| {
            let d = _mm256_sub_ps(x, y);
            _mm256_fmadd_ps(d, d, acc)
        };
        fold4(a, b, step, |x, y| (x - y) * (x - y))
    }

    /// The three sums of cosine in one pass (three FMA chains).
    #[target_feature(enable = "avx2,fma")]
    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let (xs, rx) = a.as_chunks::<8>();
        let (ys, ry) = b.as_chunks::<8>();
        let (mut ab, mut a2, mut b2) = (
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        for (x, y) in xs.iter().zip(ys) {
            let (x, y) = (load(x), load(y));
            ab = _mm256_fmadd_ps(x, y, ab);
            a2 = _mm256_fmadd_ps(x, x, a2);
            b2 = _mm256_fmadd_ps(y, y, b2);
        }
        let (mut tab, mut ta2, mut tb2) = (hsum(ab), hsum(a2), hsum(b2));
        for (&x, &y) in rx.iter().zip(ry) {
            tab += x * y;
            ta2 += x * x;
            tb2 += y * y;
        }
        cosine_from_sums(f64::from(tab), f64::from(ta2), f64::from(tb2))
    }
}

/// AVX-512 kernels for the inner product and the squared euclidean
/// distance (the metrics graphs and scans use): sixteen lanes, four
/// independent accumulators, as the AVX2 kernels with twice the width.
/// Cosine stays on the AVX2 kernel (its three sums are only computed for
/// stores that keep raw cosine vectors).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Metric;
    use std::arch::x86_64::*;

    /// `Some(distance)` if this CPU has AVX-512F and the metric has a
    /// kernel here, else `None`.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn distance(metric: Metric, a: &[f32], b: &[f32]) -> Option<f32> {
        if metric == Metric::Cosine || !is_x86_feature_detected!("avx512f") {
            return None;
        }
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        // SAFETY: the kernels only require the `avx512f` target feature,
        // which was detected on this CPU just above; their bodies contain
        // no unsafe code.
        Some(unsafe {
            if metric == Metric::Dot {
                -dot(a, b)
            } else {
                l2sq(a, b)
            }
        })
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(x: &[f32; 16]) -> __m512 {
        _mm512_set_ps(
            x[15], x[14], x[13], x[12], x[11], x[10], x[9], x[8], x[7], x[6], x[5], x[4], x[3],
            x[2], x[1], x[0],
        )
    }

    /// Runs `step(x, y, acc)` over 16-lane blocks with four independent
    /// accumulators, then returns their sum plus `tail` over the last
    /// `len % 16` pairs.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn fold4(
        a: &[f32],
        b: &[f32],
        step: impl Fn(__m512, __m512, __m512) -> __m512,
        tail: impl Fn(f32, f32) -> f32,
    ) -> f32 {
        let (xs, rx) = a.as_chunks::<16>();
        let (ys, ry) = b.as_chunks::<16>();
        let mut acc = [_mm512_setzero_ps(); 4];
        let (x4, x1) = xs.as_chunks::<4>();
        let (y4, y1) = ys.as_chunks::<4>();
        for (x, y) in x4.iter().zip(y4) {
            for j in 0..4 {
                acc[j] = step(load(&x[j]), load(&y[j]), acc[j]);
            }
        }
        for (j, (x, y)) in x1.iter().zip(y1).enumerate() {
            acc[j] = step(load(x), load(y), acc[j]);
        }
        let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(sum) + rx.iter().zip(ry).map(|(&x, &y)| tail(x, y)).sum::<f32>()
    }

    #[target_feature(enable = "avx512f")]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        fold4(a, b, |x, y, acc| _mm512_fmadd_ps(x, y, acc), |x, y| x * y)
    }

    #[target_feature(enable = "avx512f")]
    fn l2sq(a: &[f32], b: &[f32]) -> f32 {
        let step = |x, y, acc| {
            let d = _mm512_sub_ps(x, y);
            _mm512_fmadd_ps(d, d, acc)
        };
        fold4(a, b, step, |x, y| (x - y) * (x - y))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Error bound for comparing the SIMD kernel to the `f64` reference:
    /// relative to the magnitude of the terms summed (the conditioning of
    /// the sum), not to the result, which may cancel to ~0.
    fn tolerance(metric: Metric, a: &[f32], b: &[f32]) -> f64 {
        let scale: f64 = match metric {
            // Cosine is bounded; simsimd uses an approximate rsqrt plus one
            // Newton step, so allow a small absolute error.
            Metric::Cosine => return 1e-4,
            Metric::Dot => a.iter().zip(b).map(|(x, y)| f64::from((x * y).abs())).sum(),
            Metric::L2 => a.iter().zip(b).map(|(x, y)| f64::from(x * x + y * y)).sum(),
        };
        1e-5 * scale + 1e-6
    }

    fn vec_pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
        prop_oneof![
            Just(1usize),
            Just(3usize),
            Just(384usize),
            Just(1536usize),
            1usize..200
        ]
        .prop_flat_map(|dim| {
            (
                prop::collection::vec(-10.0f32..10.0, dim),
                prop::collection::vec(-10.0f32..10.0, dim),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn div_assign_is_bit_exact((a, _) in vec_pair(), d in prop_oneof![Just(3.0f32), 1e-3f32..1e3]) {
            let mut fast = a.clone();
            div_assign(&mut fast, d);
            let slow: Vec<f32> = a.iter().map(|x| x / d).collect();
            prop_assert_eq!(
                fast.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                slow.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn simd_agrees_with_scalar((a, b) in vec_pair()) {
            for metric in Metric::ALL {
                let slow = f64::from(distance_scalar(metric, &a, &b));
                let tol = tolerance(metric, &a, &b);
                for (kernel, fast) in [("dispatch", distance(metric, &a, &b)), ("simsimd", distance_simsimd(metric, &a, &b))] {
                    let fast = f64::from(fast);
                    prop_assert!(
                        (fast - slow).abs() <= tol,
                        "{kernel} {metric:?} dim={} simd={fast} scalar={slow} tol={tol}", a.len()
                    );
                }
            }
        }
    }

    #[test]
    fn conventions() {
        let a = [1.0f32, 0.0];
        let b = [0.0f32, 1.0];
        let z = [0.0f32, 0.0];
        for f in [distance, distance_simsimd, distance_scalar] {
            assert!((f(Metric::Cosine, &a, &a)).abs() < 1e-6);
            assert!((f(Metric::Cosine, &a, &b) - 1.0).abs() < 1e-6);
            assert!((f(Metric::Cosine, &a, &[-1.0, 0.0]) - 2.0).abs() < 1e-6);
            assert_eq!(f(Metric::Cosine, &z, &z), 0.0);
            assert_eq!(f(Metric::Cosine, &a, &z), 1.0);
            assert_eq!(f(Metric::Dot, &a, &a), -1.0);
            assert_eq!(f(Metric::Dot, &[2.0, 3.0], &[-1.0, 1.0]), -1.0);
            assert_eq!(f(Metric::L2, &[1.0, 2.0], &[4.0, 6.0]), 25.0);
        }
    }

    /// The AVX2 kernels run whenever the CPU has the features, agree with
    /// `simsimd` on every block/tail split, and handle unequal lengths by
    /// using the common prefix (never reading out of bounds).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_kernels_match_simsimd() {
        let have = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
        for dim in [0usize, 1, 7, 8, 9, 31, 32, 33, 63, 384, 1536] {
            let a: Vec<f32> = (0..dim).map(|i| ((i * 7919) % 13) as f32 - 6.0).collect();
            let b: Vec<f32> = (0..dim)
                .map(|i| ((i * 104_729) % 11) as f32 * 0.5 - 2.0)
                .collect();
            for metric in Metric::ALL {
                let fast = avx2::distance(metric, &a, &b);
                assert_eq!(fast.is_some(), have);
                let (fast, reference) = (fast.unwrap_or(0.0), distance_simsimd(metric, &a, &b));
                if have {
                    let tol = tolerance(metric, &a, &b) as f32;
                    assert!(
                        (fast - reference).abs() <= tol,
                        "{metric:?} dim={dim}: {fast} vs {reference}"
                    );
                }
            }
        }
        if have {
            let d = avx2::distance(Metric::Dot, &[1.0, 2.0, 3.0], &[4.0, 5.0]);
            assert_eq!(d, Some(-14.0));
        }
    }

    /// The AVX-512 kernels run whenever the CPU has AVX-512F (for the inner
    /// product and L2, never cosine), agree with `simsimd` on every
    /// block/tail split, and use the common prefix of unequal lengths.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_kernels_match_simsimd() {
        let have = is_x86_feature_detected!("avx512f");
        for dim in [0usize, 1, 15, 16, 17, 63, 64, 65, 127, 384, 1536] {
            let a: Vec<f32> = (0..dim).map(|i| ((i * 7919) % 13) as f32 - 6.0).collect();
            let b: Vec<f32> = (0..dim)
                .map(|i| ((i * 104_729) % 11) as f32 * 0.5 - 2.0)
                .collect();
            for metric in Metric::ALL {
                let fast = avx512::distance(metric, &a, &b);
                assert_eq!(fast.is_some(), have && metric != Metric::Cosine);
                if let Some(fast) = fast {
                    let reference = distance_simsimd(metric, &a, &b);
                    let tol = tolerance(metric, &a, &b) as f32;
                    assert!(
                        (fast - reference).abs() <= tol,
                        "{metric:?} dim={dim}: {fast} vs {reference}"
                    );
                    assert_eq!(distance(metric, &a, &b), fast, "dispatch takes it");
                }
            }
        }
        if have {
            let d = avx512::distance(Metric::Dot, &[1.0, 2.0, 3.0], &[4.0, 5.0]);
            assert_eq!(d, Some(-14.0));
        }
    }

    #[test]
    fn names_and_codes_round_trip() {
        for m in Metric::ALL {
            assert_eq!(Metric::parse(m.name()), Some(m));
            assert_eq!(Metric::from_code(m.code()), Some(m));
        }
        assert_eq!(Metric::parse("IP"), Some(Metric::Dot));
        assert_eq!(Metric::parse("manhattan"), None);
        assert_eq!(Metric::from_code(3), None);
    }
}
