//! The frame: the unit the segment log stores.
//!
//! ```text
//! offset size field
//!  0     4    magic            0x4D524745 little-endian ("EGRM")
//!  4     4    payload_len      u32, bytes of payload (padding excluded)
//!  8     8    lsn              u64, log sequence number, strictly increasing
//! 16     1    frame_type       u8, meaning owned by the engine (1 = record, ...)
//! 17     1    frame_version    u8, version of the payload encoding
//! 18     2    flags            u16, bit 0 = BATCH_END (last frame of an atomic batch)
//! 20     4    durable_before   u32, segment offset known durable when this frame was written
//! 24     4    payload_crc      u32, CRC32C of the payload bytes
//! 28     4    header_crc       u32, CRC32C of bytes 0..28
//! 32     ..   payload, then zero padding up to the next multiple of 16
//! ```
//!
//! All integers are little-endian. Frames start at 16-byte aligned offsets so
//! that payloads (archived records) can be read in place from a memory map.
//! The header has its own checksum so a damaged length is never trusted;
//! `durable_before` lets recovery tell a torn tail (unsynced bytes, safe to
//! drop) from damage to bytes that were already durable (never dropped).
//!
//! This module must never do I/O.

/// A log sequence number: position of a frame in the whole log, strictly
/// increasing. Acknowledged frames keep their number forever (compaction
/// keeps the numbers); numbers of unacknowledged frames cut by recovery are
/// given out again.
pub type Lsn = u64;

/// Frame magic, the bytes "EGRM".
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"EGRM");
/// Size of the frame header.
pub const FRAME_HEADER_BYTES: usize = 32;
/// Frames start at multiples of this.
pub const FRAME_ALIGN: usize = 16;
/// Flag: last frame of an atomic batch.
pub const FLAG_BATCH_END: u16 = 1;
/// Hard ceiling for one payload (the configurable limit must stay below it).
pub const FRAME_PAYLOAD_BYTES_CEILING: usize = 256 << 20;

/// Offsets of the header fields (mirrors the table in the module doc).
pub mod offsets {
    /// magic
    pub const MAGIC: usize = 0;
    /// payload_len
    pub const PAYLOAD_LEN: usize = 4;
    /// lsn
    pub const LSN: usize = 8;
    /// frame_type
    pub const FRAME_TYPE: usize = 16;
    /// frame_version
    pub const FRAME_VERSION: usize = 17;
    /// flags
    pub const FLAGS: usize = 18;
    /// durable_before
    pub const DURABLE_BEFORE: usize = 20;
    /// payload_crc
    pub const PAYLOAD_CRC: usize = 24;
    /// header_crc
    pub const HEADER_CRC: usize = 28;
}
const _: () = assert!(offsets::HEADER_CRC + 4 == FRAME_HEADER_BYTES);
const _: () = assert!(FRAME_HEADER_BYTES.is_multiple_of(FRAME_ALIGN));

/// The engine-defined type tag of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameType(pub u8);

/// A decoded, checksum-verified frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length in bytes.
    pub payload_len: u32,
    /// Log sequence number.
    pub lsn: Lsn,
    /// Type tag.
    pub frame_type: FrameType,
    /// Payload encoding version.
    pub frame_version: u8,
    /// Flags (see [`FLAG_BATCH_END`]).
    pub flags: u16,
    /// Segment offset that was durable when the frame was written.
    pub durable_before: u32,
    /// CRC32C of the payload.
    pub payload_crc: u32,
}

impl FrameHeader {
    /// Total encoded size of the frame, padding included.
    pub fn encoded_len(&self) -> usize {
        encoded_len(self.payload_len as usize)
    }
    /// Whether this frame ends an atomic batch.
    pub fn is_batch_end(&self) -> bool {
        self.flags & FLAG_BATCH_END != 0
    }
}

/// Why bytes at some offset are not a valid frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than a header remain.
    Truncated {
        /// Bytes available.
        available: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// The header is all zero bytes (preallocated or zero-filled space).
    ZeroFilled,
    /// The magic number is wrong (garbage).
    BadMagic {
        /// What was found.
        found: u32,
    },
    /// Header checksum mismatch.
    HeaderChecksum {
        /// Stored value.
        expected: u32,
        /// Computed value.
        got: u32,
    },
    /// The declared payload length exceeds the limit.
    LengthTooLarge {
        /// Declared length.
        len: u32,
    },
    /// Payload checksum mismatch.
    PayloadChecksum {
        /// Stored value.
        expected: u32,
        /// Computed value.
        got: u32,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Truncated { available, needed } => {
                write!(f, "truncated frame ({available} of {needed} bytes present)")
            }
            FrameError::ZeroFilled => f.write_str("zero-filled bytes instead of a frame header"),
            FrameError::BadMagic { found } => write!(f, "bad frame magic {found:#010x}"),
            FrameError::HeaderChecksum { expected, got } => {
                write!(
                    f,
                    "header checksum mismatch (stored {expected:#010x}, computed {got:#010x})"
                )
            }
            FrameError::LengthTooLarge { len } => write!(f, "implausible payload length {len}"),
            FrameError::PayloadChecksum { expected, got } => write!(
                f,
                "payload checksum mismatch (stored {expected:#010x}, computed {got:#010x})"
            ),
        }
    }
}

/// Encoded size of a frame with a payload of `payload_len` bytes.
pub fn encoded_len(payload_len: usize) -> usize {
    (FRAME_HEADER_BYTES + payload_len).div_ceil(FRAME_ALIGN) * FRAME_ALIGN
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Appends one encoded frame to `out` (which must be at a 16-byte aligned
/// position relative to the segment start).
pub fn encode(
    out: &mut Vec<u8>,
    lsn: Lsn,
    frame_type: FrameType,
    frame_version: u8,
    flags: u16,
    durable_before: u32,
    payload: &[u8],
) {
    let start = out.len();
    out.resize(start + encoded_len(payload.len()), 0);
    encode_into(
        &mut out[start..],
        lsn,
        frame_type,
        frame_version,
        flags,
        durable_before,
        payload,
    );
}

/// Encodes one frame into `dst`, which must be exactly
/// `encoded_len(payload.len())` bytes long and zeroed past the payload.
pub fn encode_into(
    dst: &mut [u8],
    lsn: Lsn,
    frame_type: FrameType,
    frame_version: u8,
    flags: u16,
    durable_before: u32,
    payload: &[u8],
) {
    assert_eq!(dst.len(), encoded_len(payload.len()), "frame buffer size");
    let payload_len = u32::try_from(payload.len()).expect("payload length checked by caller");
    let h = &mut dst[..FRAME_HEADER_BYTES];
    h[offsets::MAGIC..offsets::MAGIC + 4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    h[offsets::PAYLOAD_LEN..offsets::PAYLOAD_LEN + 4].copy_from_slice(&payload_len.to_le_bytes());
    h[offsets::LSN..offsets::LSN + 8].copy_from_slice(&lsn.to_le_bytes());
    h[offsets::FRAME_TYPE] = frame_type.0;
    h[offsets::FRAME_VERSION] = frame_version;
    h[offsets::FLAGS..offsets::FLAGS + 2].copy_from_slice(&flags.to_le_bytes());
    h[offsets::DURABLE_BEFORE..offsets::DURABLE_BEFORE + 4]
        .copy_from_slice(&durable_before.to_le_bytes());
    h[offsets::PAYLOAD_CRC..offsets::PAYLOAD_CRC + 4]
        .copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let hcrc = crc32c::crc32c(&h[..offsets::HEADER_CRC]);
    h[offsets::HEADER_CRC..].copy_from_slice(&hcrc.to_le_bytes());
    dst[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + payload.len()].copy_from_slice(payload);
}

/// Decodes and verifies the header at the start of `bytes` (which may extend
/// past the frame). Does not check the payload.
pub fn decode_header(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
    decode_header_with(bytes, true)
}

/// Decodes a header this process has already verified with
/// [`decode_header`]: the magic and the length ceiling are checked as there
/// (so the length still bounds every slice taken from it), the header
/// checksum is not recomputed.
pub fn decode_verified_header(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
    decode_header_with(bytes, false)
}

fn decode_header_with(bytes: &[u8], check_crc: bool) -> Result<FrameHeader, FrameError> {
    if bytes.len() < FRAME_HEADER_BYTES {
        if !bytes.is_empty() && bytes.iter().all(|&b| b == 0) {
            return Err(FrameError::ZeroFilled);
        }
        return Err(FrameError::Truncated {
            available: bytes.len(),
            needed: FRAME_HEADER_BYTES,
        });
    }
    let h = &bytes[..FRAME_HEADER_BYTES];
    let magic = u32_at(h, offsets::MAGIC);
    if magic != FRAME_MAGIC {
        if h.iter().all(|&b| b == 0) {
            return Err(FrameError::ZeroFilled);
        }
        return Err(FrameError::BadMagic { found: magic });
    }
    if check_crc {
        let expected = u32_at(h, offsets::HEADER_CRC);
        let got = crc32c::crc32c(&h[..offsets::HEADER_CRC]);
        if expected != got {
            return Err(FrameError::HeaderChecksum { expected, got });
        }
    }
    let payload_len = u32_at(h, offsets::PAYLOAD_LEN);
    if payload_len as usize > FRAME_PAYLOAD_BYTES_CEILING {
        return Err(FrameError::LengthTooLarge { len: payload_len });
    }
    Ok(FrameHeader {
        payload_len,
        lsn: u64::from_le_bytes(
            h[offsets::LSN..offsets::LSN + 8]
                .try_into()
                .expect("8 bytes"),
        ),
        frame_type: FrameType(h[offsets::FRAME_TYPE]),
        frame_version: h[offsets::FRAME_VERSION],
        flags: u16::from_le_bytes(
            h[offsets::FLAGS..offsets::FLAGS + 2]
                .try_into()
                .expect("2 bytes"),
        ),
        durable_before: u32_at(h, offsets::DURABLE_BEFORE),
        payload_crc: u32_at(h, offsets::PAYLOAD_CRC),
    })
}

/// Decodes and fully verifies the frame at the start of `bytes`; returns the
/// header and the payload slice.
pub fn decode(bytes: &[u8]) -> Result<(FrameHeader, &[u8]), FrameError> {
    let header = decode_header(bytes)?;
    let end = FRAME_HEADER_BYTES + header.payload_len as usize;
    if bytes.len() < end {
        return Err(FrameError::Truncated {
            available: bytes.len(),
            needed: end,
        });
    }
    let payload = &bytes[FRAME_HEADER_BYTES..end];
    check_payload(&header, payload)?;
    Ok((header, payload))
}

/// Checks `payload` against the checksum its (already decoded) header
/// carries.
pub fn check_payload(header: &FrameHeader, payload: &[u8]) -> Result<(), FrameError> {
    let got = crc32c::crc32c(payload);
    if got != header.payload_crc {
        return Err(FrameError::PayloadChecksum {
            expected: header.payload_crc,
            got,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(lsn: u64, payload: &[u8], flags: u16) -> Vec<u8> {
        let mut v = Vec::new();
        encode(&mut v, lsn, FrameType(3), 2, flags, 64, payload);
        v
    }

    #[test]
    fn layout_matches_the_documented_offsets() {
        let v = one(0x0102_0304_0506_0708, b"abc", FLAG_BATCH_END);
        assert_eq!(v.len(), 48);
        assert_eq!(&v[0..4], b"EGRM");
        assert_eq!(u32_at(&v, 4), 3);
        assert_eq!(v[8], 0x08);
        assert_eq!(v[16], 3);
        assert_eq!(v[17], 2);
        assert_eq!(v[18], 1);
        assert_eq!(u32_at(&v, 20), 64);
        assert_eq!(&v[32..35], b"abc");
        assert!(v[35..].iter().all(|&b| b == 0));
    }

    #[test]
    fn zero_and_garbage_are_named() {
        assert_eq!(decode(&[0u8; 64]).unwrap_err(), FrameError::ZeroFilled);
        assert_eq!(decode(&[0u8; 7]).unwrap_err(), FrameError::ZeroFilled);
        assert!(matches!(
            decode(&[0xAB; 64]).unwrap_err(),
            FrameError::BadMagic { .. }
        ));
        assert!(matches!(
            decode(&[0xAB; 5]).unwrap_err(),
            FrameError::Truncated { .. }
        ));
    }

    #[test]
    fn a_verified_header_keeps_its_magic_and_length_checks() {
        let f = one(9, b"payload", 0);
        assert_eq!(
            decode_verified_header(&f).unwrap(),
            decode_header(&f).unwrap()
        );
        // The header checksum is what is skipped...
        let mut damaged_crc = f.clone();
        damaged_crc[offsets::HEADER_CRC] ^= 1;
        assert!(matches!(
            decode_header(&damaged_crc).unwrap_err(),
            FrameError::HeaderChecksum { .. }
        ));
        assert!(decode_verified_header(&damaged_crc).is_ok());
        // ...not the magic, nor the ceiling that bounds the payload slice.
        let mut bad_magic = f.clone();
        bad_magic[offsets::MAGIC] ^= 1;
        assert!(matches!(
            decode_verified_header(&bad_magic).unwrap_err(),
            FrameError::BadMagic { .. }
        ));
        let mut huge = f.clone();
        huge[offsets::PAYLOAD_LEN..offsets::PAYLOAD_LEN + 4]
            .copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_verified_header(&huge).unwrap_err(),
            FrameError::LengthTooLarge { .. }
        ));
        assert!(matches!(
            decode_verified_header(&f[..FRAME_HEADER_BYTES - 1]).unwrap_err(),
            FrameError::Truncated { .. }
        ));
    }

    proptest! {
        #[test]
        fn roundtrip(lsn in any::<u64>(), ty in any::<u8>(), ver in any::<u8>(), flags in any::<u16>(),
                     db in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut v = Vec::new();
            encode(&mut v, lsn, FrameType(ty), ver, flags, db, &payload);
            prop_assert_eq!(v.len() % FRAME_ALIGN, 0);
            prop_assert_eq!(v.len(), encoded_len(payload.len()));
            let (h, p) = decode(&v).unwrap();
            prop_assert_eq!(h.lsn, lsn);
            prop_assert_eq!(h.frame_type, FrameType(ty));
            prop_assert_eq!(h.frame_version, ver);
            prop_assert_eq!(h.flags, flags);
            prop_assert_eq!(h.durable_before, db);
            prop_assert_eq!(p, &payload[..]);
            prop_assert_eq!(h.encoded_len(), v.len());
        }

        #[test]
        fn any_single_bit_flip_in_header_or_payload_is_detected(
            payload in proptest::collection::vec(any::<u8>(), 1..200), bit in any::<usize>()) {
            let mut v = Vec::new();
            encode(&mut v, 7, FrameType(1), 1, FLAG_BATCH_END, 0, &payload);
            let covered = FRAME_HEADER_BYTES + payload.len();
            let bit = bit % (covered * 8);
            v[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&v).is_err());
        }

        #[test]
        fn every_truncation_is_detected(payload in proptest::collection::vec(any::<u8>(), 1..200), cut in any::<usize>()) {
            let mut v = Vec::new();
            encode(&mut v, 7, FrameType(1), 1, 0, 0, &payload);
            let cut = cut % (FRAME_HEADER_BYTES + payload.len());
            prop_assert!(decode(&v[..cut]).is_err());
        }

        #[test]
        fn decoding_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            if let Ok((h, p)) = decode(&bytes) {
                prop_assert_eq!(p.len(), h.payload_len as usize);
            }
        }
    }
}
