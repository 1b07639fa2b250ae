//! Integer conversions the file formats rely on, in one place. Engram
//! builds only for 64-bit targets (offsets and lengths are `u64` on disk
//! and index memory as `usize`), so `u64 -> usize` is lossless; narrowing
//! conversions are checked. Elsewhere, `as` casts that could truncate or
//! wrap are refused by clippy (`cast_possible_truncation`,
//! `cast_possible_wrap`).

#[cfg(not(target_pointer_width = "64"))]
compile_error!("Engram supports 64-bit targets only (file offsets index memory as usize)");

/// A `u64` offset or length as `usize`: lossless on the 64-bit targets
/// Engram builds for.
#[inline]
#[must_use]
#[allow(clippy::cast_possible_truncation)]
pub const fn usize_from(x: u64) -> usize {
    x as usize
}

/// A length or position that a format stores in 32 bits, `None` when it
/// does not fit (the caller reports the limit it exceeds).
#[inline]
#[must_use]
pub fn u32_from(x: usize) -> Option<u32> {
    u32::try_from(x).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(usize_from(u64::MAX), usize::MAX);
        assert_eq!(u32_from(7), Some(7));
        assert_eq!(u32_from(u32::MAX as usize + 1), None);
    }
}
