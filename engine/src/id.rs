//! Record identity: stable, time-ordered 128-bit ids.
//!
//! Layout (ULID-compatible): the top 48 bits are the Unix time in
//! milliseconds at which the id was minted and the low 80 bits are random;
//! the generator never returns an id below the last one it minted or
//! observed (it adds one instead), so ids sort by creation order within a
//! store. The text form is 26 characters of
//! Crockford base32 (`0-9A-HJKMNP-TV-Z`), which sorts like the number.
//! Parsing accepts lower case and treats `I`/`L` as `1` and `O` as `0`.
//!
//! This module must never reuse or reorder ids: the generator is monotonic
//! even when the clock goes backwards.

use std::fmt;
use std::str::FromStr;

/// A record id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct RecordId(pub u128);

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Length of the text form.
pub const ID_TEXT_LEN: usize = 26;

impl RecordId {
    /// The 16 big-endian bytes (byte order = time order).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// From 16 big-endian bytes.
    pub fn from_bytes(b: [u8; 16]) -> Self {
        RecordId(u128::from_be_bytes(b))
    }

    /// Milliseconds since the Unix epoch when the id was minted.
    pub fn timestamp_ms(self) -> i64 {
        (self.0 >> 80) as i64
    }

    /// Whether `s` looks like an id (26 base32 characters).
    pub fn looks_like_id(s: &str) -> bool {
        s.len() == ID_TEXT_LEN && s.bytes().all(|b| decode_char(b).is_some())
    }
}

fn decode_char(c: u8) -> Option<u8> {
    let c = c.to_ascii_uppercase();
    Some(match c {
        b'0'..=b'9' => c - b'0',
        b'O' => 0,
        b'I' | b'L' => 1,
        b'A'..=b'H' => c - b'A' + 10,
        b'J' | b'K' => c - b'J' + 18,
        b'M' | b'N' => c - b'M' + 20,
        b'P'..=b'T' => c - b'P' + 22,
        b'V'..=b'Z' => c - b'V' + 27,
        _ => return None,
    })
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; ID_TEXT_LEN];
        let mut v = self.0;
        for slot in buf.iter_mut().rev() {
            *slot = ALPHABET[(v & 31) as usize];
            v >>= 5;
        }
        f.write_str(std::str::from_utf8(&buf).expect("ascii"))
    }
}

impl fmt::Debug for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecordId({self})")
    }
}

/// Why a string is not a record id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseIdError {
    /// The offending input (truncated).
    pub input: String,
}

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' is not a record id (26 characters of Crockford base32)",
            self.input
        )
    }
}

impl std::error::Error for ParseIdError {}

impl FromStr for RecordId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseIdError {
            input: s.chars().take(40).collect(),
        };
        if s.len() != ID_TEXT_LEN {
            return Err(err());
        }
        let bytes = s.as_bytes();
        // 26 * 5 = 130 bits: the first character may only carry 3 bits.
        let first = decode_char(bytes[0]).ok_or_else(err)?;
        if first > 7 {
            return Err(err());
        }
        let mut v: u128 = first as u128;
        for &c in &bytes[1..] {
            v = (v << 5) | decode_char(c).ok_or_else(err)? as u128;
        }
        Ok(RecordId(v))
    }
}

impl serde::Serialize for RecordId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Mints ids: monotonic per generator.
#[derive(Debug)]
pub struct IdGenerator {
    last: u128,
    rng: u64,
}

impl IdGenerator {
    /// A generator seeded from `seed` (any value; mixed with the process's
    /// randomness so two stores do not mint the same ids).
    pub fn new(seed: u64) -> Self {
        use std::hash::BuildHasher;
        let salt = std::collections::hash_map::RandomState::new().hash_one(seed);
        IdGenerator {
            last: 0,
            rng: seed ^ salt ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// A generator with no process randomness (for reproducible tests).
    pub fn deterministic(seed: u64) -> Self {
        IdGenerator {
            last: 0,
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Records that `id` exists (after replay), so later ids sort after it.
    pub fn observe(&mut self, id: RecordId) {
        self.last = self.last.max(id.0);
    }

    /// A new id for time `now_ms`, greater than every id minted or observed.
    pub fn mint(&mut self, now_ms: i64) -> RecordId {
        let ms = (now_ms.max(0) as u128) & ((1u128 << 48) - 1);
        let random = ((self.next_random() as u128) << 16 | (self.next_random() as u128 & 0xFFFF))
            & ((1u128 << 80) - 1);
        let candidate = (ms << 80) | random;
        // past the last id by a random step, not by one: a generator that
        // did not observe an id (an expiry's or a review's, not learnt at
        // open) would mint it again where both stepped from one id
        let id = if candidate > self.last {
            candidate
        } else {
            self.last.saturating_add(1 + (random >> 48))
        };
        self.last = id;
        RecordId(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_form_sorts_like_the_number_and_roundtrips() {
        let mut g = IdGenerator::deterministic(1);
        let mut prev: Option<RecordId> = None;
        for t in [5_i64, 5, 5, 4, 1_700_000_000_000, 1_700_000_000_000] {
            let id = g.mint(t);
            let s = id.to_string();
            assert_eq!(s.len(), ID_TEXT_LEN);
            assert_eq!(s.parse::<RecordId>().unwrap(), id);
            if let Some(p) = prev {
                assert!(id > p, "monotonic even when the clock goes back");
                assert!(s > p.to_string());
            }
            prev = Some(id);
        }
        let id = g.mint(1_700_000_000_123);
        assert_eq!(id.timestamp_ms(), 1_700_000_000_123);
    }

    #[test]
    fn parsing_rejects_garbage_and_accepts_lenient_spellings() {
        assert!("".parse::<RecordId>().is_err());
        assert!("8ZZZZZZZZZZZZZZZZZZZZZZZZZ".parse::<RecordId>().is_err());
        assert!("01J7X6A7YV9ZX0000000000U00".parse::<RecordId>().is_err());
        let a: RecordId = "01j7x6a7yv9zx0000000000000".parse().unwrap();
        let b: RecordId = "01J7X6A7YV9ZX0000000000000".parse().unwrap();
        let c: RecordId = "O1J7X6A7YV9ZXOOOOOOOOOOOOO".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
    }

    proptest! {
        #[test]
        fn roundtrip_any(v in any::<u128>()) {
            let id = RecordId(v);
            prop_assert_eq!(id.to_string().parse::<RecordId>().unwrap(), id);
            prop_assert_eq!(RecordId::from_bytes(id.to_bytes()), id);
        }

        #[test]
        fn order_preserved(a in any::<u128>(), b in any::<u128>()) {
            let (x, y) = (RecordId(a), RecordId(b));
            prop_assert_eq!(x.cmp(&y), x.to_string().cmp(&y.to_string()));
        }
    }
}
