//! A heap buffer whose first byte is 16-byte aligned, so archived records
//! can be read in place from it (the same guarantee a memory map gives).
//! Safe code only: the alignment comes from over-allocating and starting at
//! the first aligned byte.

/// Alignment guaranteed by [`AlignedBuf`].
pub const BUF_ALIGN: usize = 16;

/// A fixed-size, 16-byte aligned, zero-initialised byte buffer.
#[derive(Clone, Default)]
pub struct AlignedBuf {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> Self {
        if len == 0 {
            return Self::default();
        }
        let buf = vec![0u8; len + BUF_ALIGN - 1];
        let start = buf.as_ptr().align_offset(BUF_ALIGN);
        assert!(
            start < BUF_ALIGN,
            "align_offset on u8 pointers is always < alignment"
        );
        AlignedBuf { buf, start, len }
    }

    /// A buffer of `len` bytes pushed by `fill` onto the vector it is
    /// given, with no zeroing first (a log group of a megabyte is written
    /// once, not cleared and then written). The vector may already hold a
    /// few bytes before the buffer's start; `fill` pushes its bytes after
    /// them and reads back what it pushed at `v[v.len() - n..]`.
    ///
    /// # Panics
    /// If `fill` pushes other than exactly `len` bytes.
    pub fn filled(len: usize, fill: impl FnOnce(&mut Vec<u8>)) -> Self {
        if len == 0 {
            return Self::default();
        }
        let mut buf: Vec<u8> = Vec::with_capacity(len + BUF_ALIGN - 1);
        let start = buf.as_ptr().align_offset(BUF_ALIGN);
        assert!(
            start < BUF_ALIGN,
            "align_offset on u8 pointers is always < alignment"
        );
        buf.resize(start, 0);
        fill(&mut buf);
        assert_eq!(
            buf.len() - start,
            len,
            "AlignedBuf::filled: pushed bytes differ from the length given"
        );
        // Pushing within the capacity kept the allocation; a longer push
        // was refused above, so the start is still aligned.
        debug_assert_eq!(buf.as_ptr().wrapping_add(start).align_offset(BUF_ALIGN), 0);
        AlignedBuf { buf, start, len }
    }

    /// An aligned copy of `bytes`.
    pub fn copy_from(bytes: &[u8]) -> Self {
        let mut b = Self::zeroed(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        &self.buf[self.start..self.start + self.len]
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        &mut self.buf[self.start..self.start + self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_is_aligned_and_holds_what_was_pushed() {
        for n in [1usize, 15, 16, 17, 4096, 1 << 20] {
            let b = AlignedBuf::filled(n, |v| v.extend((0..n).map(|i| i as u8)));
            assert_eq!(b.len(), n);
            assert_eq!(b.as_slice().as_ptr().align_offset(BUF_ALIGN), 0);
            assert!(b.as_slice().iter().enumerate().all(|(i, &x)| x == i as u8));
        }
        assert!(AlignedBuf::filled(0, |_| {}).is_empty());
    }

    #[test]
    #[should_panic(expected = "pushed bytes differ")]
    fn filled_refuses_a_short_fill() {
        let _ = AlignedBuf::filled(8, |v| v.extend([1u8; 7]));
    }

    #[test]
    fn aligned_for_every_size() {
        for n in [0usize, 1, 15, 16, 17, 4096] {
            let b = AlignedBuf::copy_from(&vec![7u8; n]);
            assert_eq!(b.len(), n);
            assert!(b.as_slice().iter().all(|&x| x == 7));
            if n > 0 {
                assert_eq!(b.as_slice().as_ptr() as usize % BUF_ALIGN, 0);
            }
        }
    }
}
