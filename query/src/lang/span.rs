//! Byte spans into a statement's text, and the line:column they start at.
//!
//! A [`Span`] is the half-open byte range `[start, end)` of a token or AST
//! node in the text it was parsed from. A statement built in code or read
//! from its JSON form carries `0..0` spans (the JSON form may omit them).
//! In JSON a span is the string `"start..end"`, which keeps snapshots short.
//!
//! This module must never hold or copy statement text: it only measures it.

use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A byte range `[start, end)` into a statement's text. Offsets are `u32`:
/// statements are at most [`super::limits::STATEMENT_BYTES_MAX`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte (`start` for an empty span).
    pub end: u32,
}

impl Span {
    /// A span from byte offsets (saturating at `u32::MAX`).
    pub fn new(start: usize, end: usize) -> Span {
        let clamp = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        Span {
            start: clamp(start),
            end: clamp(end.max(start)),
        }
    }

    /// The empty span at `offset`.
    pub fn at(offset: usize) -> Span {
        Span::new(offset, offset)
    }

    /// The smallest span covering `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// The byte range, for slicing the source.
    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    /// Whether the span covers no byte.
    pub fn is_empty(self) -> bool {
        self.end <= self.start
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

impl Serialize for Span {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || serde::de::Error::custom(format!("span '{text}' is not START..END"));
        let (a, b) = text.split_once("..").ok_or_else(bad)?;
        let start: u32 = a.parse().map_err(|_| bad())?;
        let end: u32 = b.parse().map_err(|_| bad())?;
        if end < start {
            return Err(bad());
        }
        Ok(Span { start, end })
    }
}

/// The 1-based line and column (counted in characters) of byte `offset` in
/// `source`. An offset past the end is the position just after the last
/// character; an offset inside a character is that character's position.
/// A line ends at `\n`, `\r\n` or a lone `\r` (as editors count them).
pub fn line_col(source: &str, offset: usize) -> (u32, u32) {
    let mut line = 1u32;
    let mut col = 1u32;
    let mut chars = source.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i >= offset {
            break;
        }
        if i + c.len_utf8() > offset {
            break;
        }
        let lone_cr = c == '\r' && chars.peek().is_none_or(|&(_, n)| n != '\n');
        if c == '\n' || lone_cr {
            line = line.saturating_add(1);
            col = 1;
        } else {
            col = col.saturating_add(1);
        }
    }
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_carriage_return_ends_a_line() {
        let s = "ab\rcd\r\nef";
        assert_eq!(line_col(s, 3), (2, 1));
        assert_eq!(line_col(s, 4), (2, 2));
        // `\r\n` is one line break
        assert_eq!(line_col(s, 7), (3, 1));
    }

    #[test]
    fn lines_and_columns_count_characters() {
        let s = "ab\nçd\n";
        assert_eq!(line_col(s, 0), (1, 1));
        assert_eq!(line_col(s, 2), (1, 3));
        assert_eq!(line_col(s, 3), (2, 1));
        // 'ç' is two bytes: 'd' starts at byte 5 and is the second character
        assert_eq!(line_col(s, 5), (2, 2));
        // inside 'ç'
        assert_eq!(line_col(s, 4), (2, 1));
        assert_eq!(line_col(s, 100), (3, 1));
    }

    #[test]
    fn spans_serialize_as_ranges() {
        let s = Span::new(3, 10);
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(j, "\"3..10\"");
        assert_eq!(serde_json::from_str::<Span>(&j).unwrap(), s);
        assert!(serde_json::from_str::<Span>("\"10..3\"").is_err());
        assert!(serde_json::from_str::<Span>("\"x\"").is_err());
    }
}
