//! The lexer: statement text to [`Token`]s, each with its byte span.
//!
//! Words are not classified here: keywords are matched by the parser,
//! case-insensitively, where they can occur, so field names and values
//! such as `kind` or `superseded` need no reserving. Only retriever names
//! are checked against [`KEYWORDS`].
//!
//! Literals: strings in single quotes (`''` is a quote inside), integers
//! and decimals (`60`, `0.35`; no exponent, a sign is the parser's `-`),
//! durations (`7d`: an integer and one of `s m h d w`), timestamps written
//! bare (`2025-06-10`, `2025-06-10T09:30:00Z`, RFC 3339, checked here) and
//! parameters (`$name`). Comments run from `--` to the end of the line.
//!
//! This module must never panic on any input: every byte is either part of
//! a token, skipped as space or comment, or reported as an error.

use engram_engine::time::parse_rfc3339_bound;

use super::ast::TimeUnit;
use super::error::{ErrorKind, LangError};
use super::span::Span;

/// Keywords: they cannot name a retriever (except that the default
/// names, `similar`, `match`, `recent`, `expand` and `around`, may be
/// written out).
pub const KEYWORDS: &[&str] = &[
    "ANY",
    "AND",
    "AROUND",
    "AS",
    "AT",
    "BOTH",
    "DEPTH",
    "DERIVATIVES",
    "DIRECTION",
    "ENTITY",
    "EXPAND",
    "EXPLAIN",
    "FIND",
    "FROM",
    "FUSE",
    "HOPS",
    "ID",
    "IN",
    "INCLUDE",
    "K",
    "LIMIT",
    "LINEAR",
    "MATCH",
    "MAX",
    "MIN",
    "MINMAX",
    "MODEL",
    "NOT",
    "NOW",
    "OF",
    "OR",
    "OUT",
    "RECENT",
    "RETURN",
    "RRF",
    "SIMILAR",
    "SOURCES",
    "SUPERSEDED",
    "TO",
    "TOP",
    "TRACE",
    "VALID",
    "VIA",
    "WEIGHTS",
    "WHERE",
    "WITH",
    "ZSCORE",
];

/// Default retriever names, allowed as names although they are keywords.
pub const DEFAULT_NAMES: &[&str] = &["similar", "match", "recent", "expand", "around"];

/// Whether `word` is a keyword (case-insensitive).
pub fn is_keyword(word: &str) -> bool {
    KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word))
}

/// Whether `s` is an identifier: an ASCII letter or `_`, then ASCII letters,
/// digits or `_`.
pub fn is_identifier(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Whether `s` can name a parameter: an identifier of at most
/// [`IDENT_BYTES_MAX`](crate::lang::limits::IDENT_BYTES_MAX) bytes, as
/// `$name` in a statement must be (a longer one could never be used).
pub fn is_param_name(s: &str) -> bool {
    is_identifier(s) && s.len() <= crate::lang::limits::IDENT_BYTES_MAX
}

/// What a token is.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenKind {
    /// A keyword or a name (the text is the span's).
    Word,
    /// A string literal, unescaped.
    Str(String),
    /// A number; `fraction` when it has a decimal point. The parser reads
    /// the span's text as `u64` or `f64` depending on where it stands.
    Number {
        /// Has a decimal point.
        fraction: bool,
    },
    /// A duration such as `7d`: an amount and a unit (the sign is the
    /// parser's `+` or `-`).
    Duration(u64, TimeUnit),
    /// A bare RFC 3339 timestamp, in ms since the epoch.
    Time(i64),
    /// `$name` (the name without `$`).
    Param(String),
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `,`
    Comma,
    /// `;`
    Semicolon,
    /// `.`
    Dot,
    /// `..`
    DotDot,
    /// `=`
    Eq,
    /// `!=` or `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// End of input (its span is the empty span after the last token).
    Eof,
}

/// A token and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// What it is.
    pub kind: TokenKind,
    /// Where.
    pub span: Span,
}

/// `s`, cut to 40 characters for an error message.
pub fn truncated(s: &str) -> String {
    const MAX_CHARS: usize = 40;
    if s.chars().count() > MAX_CHARS {
        let mut t: String = s.chars().take(MAX_CHARS).collect();
        t.push_str("...");
        t
    } else {
        s.to_string()
    }
}

/// Splits `src` into tokens, ending with [`TokenKind::Eof`].
pub fn lex(src: &str) -> Result<Vec<Token>, LangError> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0usize;
    let mut last_end = 0usize;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let single = |kind: TokenKind| Token {
            kind,
            span: Span::new(start, start + 1),
        };
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            // a comment runs to the end of its line (`\n`, `\r\n` or `\r`)
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' && b[i] != b'\r' {
                    i += 1;
                }
                continue;
            }
            b'\'' => {
                let (value, end) = lex_string(src, i)?;
                toks.push(Token {
                    kind: TokenKind::Str(value),
                    span: Span::new(start, end),
                });
                i = end;
            }
            b'$' => {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                let name = &src[i + 1..j];
                if !is_identifier(name) {
                    return Err(LangError::new(
                        ErrorKind::UnexpectedCharacter { found: '$' },
                        Span::new(start, j.max(start + 1)),
                    )
                    .with_hint("a parameter is `$` and a name, e.g. `$qvec`"));
                }
                // (a name is quoted by every message about it)
                if name.len() > crate::lang::limits::IDENT_BYTES_MAX {
                    return Err(LangError::new(
                        ErrorKind::LimitExceeded {
                            what: "bytes in a parameter name".into(),
                            limit: crate::lang::limits::IDENT_BYTES_MAX as u64,
                            got: name.len() as u64,
                        },
                        Span::new(start, j),
                    ));
                }
                toks.push(Token {
                    kind: TokenKind::Param(name.to_string()),
                    span: Span::new(start, j),
                });
                i = j;
            }
            b'0'..=b'9' => {
                let (tok, end) = lex_number(src, i)?;
                toks.push(tok);
                i = end;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                    j += 1;
                }
                toks.push(Token {
                    kind: TokenKind::Word,
                    span: Span::new(start, j),
                });
                i = j;
            }
            b'(' => {
                toks.push(single(TokenKind::LParen));
                i += 1;
            }
            b')' => {
                toks.push(single(TokenKind::RParen));
                i += 1;
            }
            b',' => {
                toks.push(single(TokenKind::Comma));
                i += 1;
            }
            b';' => {
                toks.push(single(TokenKind::Semicolon));
                i += 1;
            }
            b'+' => {
                toks.push(single(TokenKind::Plus));
                i += 1;
            }
            b'-' => {
                toks.push(single(TokenKind::Minus));
                i += 1;
            }
            b'.' => {
                if b.get(i + 1) == Some(&b'.') {
                    toks.push(Token {
                        kind: TokenKind::DotDot,
                        span: Span::new(start, start + 2),
                    });
                    i += 2;
                } else {
                    toks.push(single(TokenKind::Dot));
                    i += 1;
                }
            }
            b'=' => {
                if b.get(i + 1) == Some(&b'=') {
                    return Err(LangError::new(
                        ErrorKind::UnexpectedCharacter { found: '=' },
                        Span::new(start, start + 2),
                    )
                    .with_hint("compare with a single `=`"));
                }
                toks.push(single(TokenKind::Eq));
                i += 1;
            }
            b'!' => {
                if b.get(i + 1) == Some(&b'=') {
                    toks.push(Token {
                        kind: TokenKind::Ne,
                        span: Span::new(start, start + 2),
                    });
                    i += 2;
                } else {
                    return Err(LangError::new(
                        ErrorKind::UnexpectedCharacter { found: '!' },
                        Span::new(start, start + 1),
                    )
                    .with_hint("write `!=` for not equal, or NOT before a condition"));
                }
            }
            b'<' | b'>' => {
                let next = b.get(i + 1).copied();
                let (kind, len) = match (c, next) {
                    (b'<', Some(b'=')) => (TokenKind::Le, 2),
                    (b'<', Some(b'>')) => (TokenKind::Ne, 2),
                    (b'<', _) => (TokenKind::Lt, 1),
                    (_, Some(b'=')) => (TokenKind::Ge, 2),
                    _ => (TokenKind::Gt, 1),
                };
                toks.push(Token {
                    kind,
                    span: Span::new(start, start + len),
                });
                i += len;
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('\u{fffd}');
                let span = Span::new(start, start + ch.len_utf8());
                let e = LangError::new(ErrorKind::UnexpectedCharacter { found: ch }, span);
                return Err(match ch {
                    '"' => e.with_hint("strings use single quotes: 'like this'"),
                    '[' | ']' => e.with_hint(
                        "vectors are passed as parameters: write `$name` and bind it in the request",
                    ),
                    '&' | '|' => e.with_hint("combine conditions with AND, OR and NOT"),
                    '*' => e.with_hint("RETURN lists fields by name: id, text, score, ..."),
                    '#' => e.with_hint("comments start with `--`"),
                    c if c.is_alphabetic() => e.with_hint(
                        "names are ASCII letters, digits and `_`; put other text in a string",
                    ),
                    _ => e,
                });
            }
        }
        last_end = i;
    }
    toks.push(Token {
        kind: TokenKind::Eof,
        span: Span::at(last_end),
    });
    Ok(toks)
}

/// A string literal starting at the quote at `start`: its value and the
/// offset just past the closing quote.
fn lex_string(src: &str, start: usize) -> Result<(String, usize), LangError> {
    let mut value = String::new();
    let mut chars = src[start + 1..].char_indices().peekable();
    while let Some((off, c)) = chars.next() {
        if c == '\'' {
            if matches!(chars.peek(), Some((_, '\''))) {
                chars.next();
                value.push('\'');
                continue;
            }
            return Ok((value, start + 1 + off + 1));
        }
        value.push(c);
    }
    Err(
        LangError::new(ErrorKind::UnterminatedString, Span::new(start, src.len()))
            .with_hint("close the string with `'`; write `''` for a quote inside it"),
    )
}

/// The error for a time that does not parse: `out_of_range` for a year of
/// five digits or more (years 1 to 9999, as for year 0), `invalid_time`
/// otherwise, with `hint`.
pub(crate) fn time_error(text: &str, reason: &str, span: Span, hint: &str) -> LangError {
    let year_digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if year_digits > 4 && text.as_bytes().get(year_digits) == Some(&b'-') {
        return LangError::new(
            ErrorKind::OutOfRange {
                what: "the time".into(),
                got: format!("`{}`", truncated(text)),
                range: "the years 1 to 9999".into(),
            },
            span,
        );
    }
    LangError::new(
        ErrorKind::InvalidTime {
            text: truncated(text),
            reason: reason.to_string(),
        },
        span,
    )
    .with_hint(hint)
}

/// A number, duration or timestamp starting with the digit at `start`.
fn lex_number(src: &str, start: usize) -> Result<(Token, usize), LangError> {
    let b = src.as_bytes();
    let digit = |j: usize| b.get(j).is_some_and(u8::is_ascii_digit);
    // A timestamp: four digits (or more: a year past 9999, refused), '-',
    // a digit.
    let lead = (start..).take_while(|&j| digit(j)).count();
    if lead >= 4 && b.get(start + lead) == Some(&b'-') && digit(start + lead + 1) {
        let mut j = start;
        while j < b.len()
            && matches!(
                b[j],
                b'0'..=b'9' | b':' | b'.' | b'+' | b'-' | b'T' | b't' | b'Z' | b'z'
            )
        {
            j += 1;
        }
        let text = &src[start..j];
        let span = Span::new(start, j);
        return match parse_rfc3339_bound(text) {
            Ok(ms) => Ok((
                Token {
                    kind: TokenKind::Time(ms),
                    span,
                },
                j,
            )),
            Err(e) => Err(time_error(
                text,
                e.reason,
                span,
                "write a time as 2025-03-01 or 2025-03-01T09:30:00Z (RFC 3339)",
            )),
        };
    }
    let mut j = start;
    while digit(j) {
        j += 1;
    }
    let mut fraction = false;
    if b.get(j) == Some(&b'.') && digit(j + 1) {
        fraction = true;
        j += 1;
        while digit(j) {
            j += 1;
        }
    }
    // A word glued to the number: a duration, or an error.
    if b.get(j)
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
    {
        let mut k = j;
        while k < b.len() && (b[k].is_ascii_alphanumeric() || b[k] == b'_') {
            k += 1;
        }
        let text = &src[start..k];
        let span = Span::new(start, k);
        let unit = match &src[j..k] {
            "s" => Some(TimeUnit::S),
            "m" => Some(TimeUnit::M),
            "h" => Some(TimeUnit::H),
            "d" => Some(TimeUnit::D),
            "w" => Some(TimeUnit::W),
            _ => None,
        };
        let invalid = |reason: &str| {
            LangError::new(
                ErrorKind::InvalidDuration {
                    text: truncated(text),
                    reason: reason.to_string(),
                },
                span,
            )
        };
        let word = &src[j..k];
        let exponent =
            word.starts_with(['e', 'E']) && word[1..].bytes().all(|c| c.is_ascii_digit());
        let radix = &src[start..j] == "0" && word.starts_with(['x', 'X', 'b', 'B', 'o', 'O']);
        let grouped = word.starts_with('_');
        if unit.is_none() && (exponent || radix || grouped) {
            return Err(LangError::new(
                ErrorKind::InvalidNumber {
                    text: truncated(text),
                    reason: "numbers are decimal digits, without an exponent, prefix or `_`".into(),
                },
                span,
            )
            .with_hint("write the number out: 1000 rather than 1e3"));
        }
        let Some(unit) = unit else {
            // A word that starts with a digit is a duration to the lexer;
            // outside `now - ...` it is more often text left unquoted, or
            // a name (which starts with a letter).
            let after_sign = src[..start].trim_end().ends_with(['-', '+']);
            let hint = "write a duration as an integer and a unit: 90s, 15m, 6h, 7d, 2w";
            return Err(invalid("the unit must be one of s, m, h, d, w").with_hint(
                if after_sign {
                    hint.to_string()
                } else {
                    format!(
                        "{hint}; text is quoted: '{}'; a name starts with a letter",
                        truncated(text)
                    )
                },
            ));
        };
        if fraction {
            return Err(invalid("the amount must be an integer")
                .with_hint("use a smaller unit: 90m rather than 1.5h"));
        }
        let amount: u64 = src[start..j].parse().map_err(|_| invalid("too long"))?;
        if unit.to_ms(amount).is_none() {
            return Err(invalid("too long"));
        }
        return Ok((
            Token {
                kind: TokenKind::Duration(amount, unit),
                span,
            },
            k,
        ));
    }
    Ok((
        Token {
            kind: TokenKind::Number { fraction },
            span: Span::new(start, j),
        },
        j,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<TokenKind> {
        lex(s).unwrap().into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn tokens_and_spans() {
        let src = "FIND scope.user = 'it''s' -- note\n HOPS 1..2 $q 0.35 7d 2025-06-10 <> <=";
        let toks = lex(src).unwrap();
        let texts: Vec<&str> = toks.iter().map(|t| &src[t.span.range()]).collect();
        assert_eq!(
            texts,
            [
                "FIND",
                "scope",
                ".",
                "user",
                "=",
                "'it''s'",
                "HOPS",
                "1",
                "..",
                "2",
                "$q",
                "0.35",
                "7d",
                "2025-06-10",
                "<>",
                "<=",
                ""
            ]
        );
        assert_eq!(toks[5].kind, TokenKind::Str("it's".into()));
        assert_eq!(toks[13].kind, TokenKind::Time(1_749_513_600_000));
        assert_eq!(toks[14].kind, TokenKind::Ne);
        assert_eq!(toks.last().unwrap().span, Span::at(src.len()));
    }

    #[test]
    fn a_comment_ends_at_a_lone_carriage_return() {
        assert_eq!(
            kinds("LIMIT -- five\r5"),
            [
                TokenKind::Word,
                TokenKind::Number { fraction: false },
                TokenKind::Eof
            ]
        );
    }

    #[test]
    fn eof_sits_after_the_last_token_not_after_trailing_comments() {
        let toks = lex("LIMIT 5  -- five\n\n").unwrap();
        assert_eq!(toks.last().unwrap().span, Span::at(7));
    }

    #[test]
    fn numbers_ranges_and_durations() {
        assert_eq!(
            kinds("1..4"),
            [
                TokenKind::Number { fraction: false },
                TokenKind::DotDot,
                TokenKind::Number { fraction: false },
                TokenKind::Eof
            ]
        );
        assert_eq!(kinds("now - 15m")[2], TokenKind::Duration(15, TimeUnit::M));
    }

    #[test]
    fn errors_are_named() {
        for (src, code) in [
            ("\"x\"", "unexpected_character"),
            ("'open", "unterminated_string"),
            ("7days", "invalid_duration"),
            ("1e3", "invalid_number"),
            ("2.5E10", "invalid_number"),
            ("1e", "invalid_number"),
            ("0x10", "invalid_number"),
            ("0b1", "invalid_number"),
            ("0o7", "invalid_number"),
            ("1_000", "invalid_number"),
            ("10x", "invalid_duration"),
            ("1.5h", "invalid_duration"),
            ("99999999999999999999999d", "invalid_duration"),
            ("2025-13-01", "invalid_time"),
            ("$ x", "unexpected_character"),
            ("a == b", "unexpected_character"),
            ("é", "unexpected_character"),
        ] {
            let e = lex(src).unwrap_err();
            assert_eq!(e.code(), code, "{src}");
        }
    }
}
