//! A space's rows as stored: normalisation (cosine spaces store unit
//! vectors), and how a stored row is compared with the vector it came from.

use crate::vector::distance::{Metric, distance};

/// The first 8 bytes of the SHA-256 of a row's little-endian bytes: what
/// `verify` and the derived manifest compare rows by.
pub fn row_digest(row: &[f32]) -> [u8; 8] {
    let bytes: Vec<u8> = row.iter().flat_map(|x| x.to_le_bytes()).collect();
    let h = crate::canonical::sha256(&bytes);
    let mut out = [0u8; 8];
    out.copy_from_slice(&h[..8]);
    out
}

/// Whether `row`, as a space of `metric` stores it, holds `vector` (a
/// client's vector as its log frame has it). Exact, except that a cosine
/// space's normalisation may differ in the last bits between CPUs (its
/// length comes from the SIMD kernel): there each component of the unit
/// vector may differ by a few units in the last place.
pub fn row_matches(metric: Metric, vector: &[f32], row: &[f32]) -> bool {
    if vector.len() != row.len() {
        return false;
    }
    let want = normalized(metric, vector);
    if metric != Metric::Cosine {
        return want
            .iter()
            .zip(row)
            .all(|(a, b)| a.to_bits() == b.to_bits());
    }
    want.iter().zip(row).all(|(a, b)| (a - b).abs() <= 4e-6)
}

/// Normalises a vector for a cosine space (unit length). The length comes
/// from the SIMD dot kernel (a sequential `f32` sum does not vectorise), so
/// like distances it is bit-reproducible per CPU feature set.
pub fn normalized(metric: Metric, v: &[f32]) -> Vec<f32> {
    if metric != Metric::Cosine {
        return v.to_vec();
    }
    let n = (-distance(Metric::Dot, v, v)).max(0.0).sqrt();
    if n.is_finite() && n > 0.0 {
        let mut out = v.to_vec();
        crate::vector::distance::div_assign(&mut out, n);
        return out;
    }
    // The squares overflowed or underflowed (components near f32's limits,
    // which are finite and accepted): scale by the largest one first.
    let m = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    if m == 0.0 || !m.is_finite() {
        return v.to_vec();
    }
    let s: Vec<f32> = v.iter().map(|x| x / m).collect();
    let n = (-distance(Metric::Dot, &s, &s)).max(0.0).sqrt();
    s.iter().map(|x| x / n).collect()
}
