//! # Canonical JSON form, version 1
//!
//! Every Engram record carries a `content_sha256`: the SHA-256 digest of the
//! *canonical form* of its content, a JSON object built from the record's
//! client-supplied fields (see `docs/format.md` for which ones). The canonical form is the JSON
//! Canonicalization Scheme (JCS) of RFC 8785, applied to a parsed JSON value.
//! This section is the complete definition; [`CANONICAL_VERSION`] (currently
//! `1`) names it, and any change to the bytes produced for any input requires
//! a new version.
//!
//! ## Input
//!
//! The input is a JSON value tree: `null`, `true`, `false`, a number, a
//! string, an array, or an object (a `serde_json::Value`).
//!
//! * **Duplicate member names cannot occur.** An object holds each name at
//!   most once. When JSON text containing duplicate names is parsed into a
//!   value, the *last* occurrence wins and the earlier ones are silently
//!   dropped, so such text hashes like the text without the earlier
//!   duplicates. Clients should not send duplicate names.
//! * **Strings are sequences of Unicode scalar values** (valid UTF-8). Text
//!   containing an unpaired surrogate escape such as `"\ud800"` is rejected by
//!   the parser and never reaches canonicalization.
//! * **Numbers are IEEE-754 binary64 values ("doubles").** As RFC 8785
//!   mandates, every number is first converted to the nearest double (ties to
//!   even), whatever its written form or its in-memory integer type. The
//!   conversion from JSON text must be correctly rounded (for serde_json this
//!   requires its `float_roundtrip` feature; its default parser can be one
//!   unit in the last place off, e.g. for `333333333.33333329`). Integers
//!   of magnitude above 2^53 = 9007199254740992 therefore lose precision:
//!   `9007199254740993` canonicalizes to `9007199254740992`, and
//!   `18446744073709551615` to `18446744073709552000`. **Clients that need
//!   exact large integers (ids, counters, amounts) must send them as
//!   strings.** Different spellings of the same double are the same number:
//!   `1`, `1.0`, `1e0`, `10e-1` and `0.1e1` all canonicalize to `1`, and `-0`
//!   to `0`.
//! * **No Unicode normalization is applied.** Strings (values and member
//!   names alike) are hashed exactly as given: `"café"` written with the
//!   precomposed U+00E9 (NFC) and with `e` + U+0301 (NFD) are different
//!   strings with different hashes. Clients that want such strings to be
//!   equivalent must normalize them (for example to NFC) before sending.
//!
//! ## Output
//!
//! The canonical form is UTF-8 text (no byte-order mark) built as follows,
//! with **no whitespace** anywhere outside string contents:
//!
//! 1. **Literals**: `null`, `true`, `false`.
//! 2. **Strings**: `"`, then each character of the string, then `"`. A
//!    character is written as follows, and every other character (including
//!    `/`, DEL U+007F, U+2028, U+2029, and all non-ASCII characters) is
//!    written literally as its UTF-8 bytes:
//!
//!    | character                          | written as                 |
//!    |------------------------------------|----------------------------|
//!    | `"` U+0022                         | `\"`                       |
//!    | `\` U+005C                         | `\\`                       |
//!    | U+0008 backspace                   | `\b`                       |
//!    | U+0009 tab                         | `\t`                       |
//!    | U+000A line feed                   | `\n`                       |
//!    | U+000C form feed                   | `\f`                       |
//!    | U+000D carriage return             | `\r`                       |
//!    | any other U+0000..U+001F           | `\u00xx`, `xx` lowercase hex (e.g. `\u001f`) |
//!
//! 3. **Numbers**: the number is taken as a double `x` (see *Input*) and
//!    written exactly as ECMAScript's `Number.prototype.toString(x)` does
//!    (ECMA-262, `Number::toString`, radix 10):
//!    * if `x` is `+0` or `-0`: `0`;
//!    * if `x < 0`: `-` followed by the form of `-x`;
//!    * otherwise let `s` be the decimal digit string (k digits, no leading or
//!      trailing zero) and `n` the integer such that `s × 10^(n−k)` is the
//!      decimal value, where `k` is as small as possible such that this value
//!      converts back (round to nearest, ties to even) to exactly `x`; if
//!      several `k`-digit strings qualify, the one closest to `x` is chosen,
//!      and if two are equally close, the one whose last digit is even. Then:
//!      * `k ≤ n ≤ 21`: the `k` digits followed by `n−k` zeros
//!        (`1e20` → `100000000000000000000`, `1.2345678901234568e20` →
//!        `123456789012345680000`);
//!      * `0 < n ≤ 21`: the first `n` digits, `.`, the remaining `k−n` digits
//!        (`4.50` → `4.5`, `333333333.33333329` → `333333333.3333333`);
//!      * `−6 < n ≤ 0`: `0.`, then `−n` zeros, then the `k` digits
//!        (`2e-3` → `0.002`, `0.000001` → `0.000001`);
//!      * otherwise, exponent form: the first digit, then (only if `k > 1`)
//!        `.` and the remaining `k−1` digits, then `e`, then `+` or `-`
//!        (the sign of `n−1`; `+` for a positive exponent), then the decimal
//!        value of `|n−1|` without leading zeros (`1e21` → `1e+21`, `1e30` →
//!        `1e+30`, `1e-7` → `1e-7`, `1.5e-7` → `1.5e-7`, `5e-324` →
//!        `5e-324`, `1.7976931348623157e308` → `1.7976931348623157e+308`).
//!
//!    So an integral double below 10^21 in magnitude is written without a
//!    fraction or exponent (`1e3` → `1000`, never `1000.0`). `NaN` and the
//!    infinities have no canonical form (JSON cannot express them).
//! 4. **Arrays**: `[`, the canonical forms of the elements in their original
//!    order separated by `,`, then `]`. The empty array is `[]`.
//! 5. **Objects**: `{`, the members separated by `,`, then `}`; each member is
//!    the canonical form of its name (a string, item 2), `:`, and the
//!    canonical form of its value. The empty object is `{}`. Members are
//!    **sorted by name**, the original order being ignored, comparing names as
//!    sequences of **UTF-16 code units**, lexicographically (unsigned 16-bit
//!    comparison; a proper prefix sorts first). This is *not* UTF-8 byte or
//!    code point order: they differ when a character above U+FFFF (encoded as
//!    a surrogate pair D800..DBFF DC00..DFFF) meets one in U+E000..U+FFFF.
//!    For example `"\u{1F600}"` (D83D DE00) sorts *before* `"\u{FB33}"`
//!    (FB33), though its code point is larger. Names are compared as given,
//!    before any escaping.
//!
//! Example (RFC 8785 §3.2.2): the value of
//!
//! ```json
//! {
//!   "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
//!   "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
//!   "literals": [null, true, false]
//! }
//! ```
//!
//! has the canonical form
//!
//! ```text
//! {"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}
//! ```
//!
//! ## Limits and errors
//!
//! * **Nesting depth.** The nesting depth of a scalar is 0; that of an array
//!   or object is 1 plus the largest nesting depth of its elements or member
//!   values (so `[]` and `{}` have depth 1, `[[1]]` depth 2). A value whose
//!   depth exceeds [`DEPTH_MAX`] (64) has no canonical form:
//!   [`CanonicalError::NestingTooDeep`].
//! * **Non-finite numbers** have no canonical form:
//!   [`CanonicalError::NonFiniteNumber`]. (A `serde_json::Value` cannot
//!   normally hold one; the check is defensive.)
//!
//! An error's `path` is the RFC 6901 JSON Pointer of the offending value
//! (for `NestingTooDeep`, of the first array or object at depth 65): `""`
//! for the root, `/name` for a member, `/3` for an array element, with `~`
//! written `~0` and `/` written `~1` inside names. Members are visited in
//! canonical (sorted) order, so the error reported is the first one in the
//! canonical form.
//!
//! ## Content hash
//!
//! `content_sha256` is the SHA-256 digest (FIPS 180-4) of the UTF-8 bytes of
//! the canonical form: 32 bytes, written in hex as 64 lowercase hex digits.
//! For example the value `{"b":1,"a":[true,"x"]}` has the canonical form
//! `{"a":[true,"x"],"b":1}`, whose 22 bytes have the content hash
//! `f15ef113d6e0c876b9ea9e90ebc36ad3f8b350d44634ba2fc407e978fb8cebeb`.

#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// Version of the canonical form defined in this module's documentation.
pub const CANONICAL_VERSION: u32 = 1;

/// Largest nesting depth of arrays and objects that has a canonical form.
pub const DEPTH_MAX: usize = 64;

/// Why a value has no canonical form.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum CanonicalError {
    /// A number is NaN or infinite. `path` is the JSON Pointer of the number.
    NonFiniteNumber { path: String },
    /// Arrays and objects are nested more than `depth_max` deep. `path` is
    /// the JSON Pointer of the first array or object beyond that depth.
    NestingTooDeep { path: String, depth_max: usize },
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanonicalError::NonFiniteNumber { path } => write!(
                f,
                "non-finite number at JSON Pointer {path:?}: canonical JSON has no form for NaN or Infinity"
            ),
            CanonicalError::NestingTooDeep { path, depth_max } => write!(
                f,
                "arrays/objects nested more than {depth_max} deep at JSON Pointer {path:?}"
            ),
        }
    }
}

impl std::error::Error for CanonicalError {}

/// Appends the canonical form of `value` to `out`.
///
/// On error, `out` is left exactly as it was on entry (nothing is appended).
pub fn write_canonical(value: &Value, out: &mut String) -> Result<(), CanonicalError> {
    let start = out.len();
    match write_value(value, 0, out) {
        Ok(()) => Ok(()),
        Err(failure) => {
            out.truncate(start);
            Err(failure.into_error())
        }
    }
}

/// Returns the canonical form of `value`.
pub fn to_canonical_string(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_canonical(value, &mut out)?;
    Ok(out)
}

/// SHA-256 digest of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = sha256(bytes);
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

/// SHA-256 digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// SHA-256 digest of the UTF-8 bytes of the canonical form of `value`.
pub fn content_sha256(value: &Value) -> Result<[u8; 32], CanonicalError> {
    let canonical = to_canonical_string(value)?;
    Ok(sha256(canonical.as_bytes()))
}

/// One member value of an object written by [`ObjectWriter`].
#[derive(Clone, Debug)]
pub enum Member<'a> {
    /// A JSON string, escaped when written.
    Str(&'a str),
    /// A JSON string held by value (a formatted time, an id), escaped when
    /// written.
    String(String),
    /// A JSON array of strings, in the order given.
    Strs(&'a [String]),
    /// JSON text already in canonical form (a nested object built with
    /// another writer, a canonical `data` payload, a number, a boolean).
    Canonical(std::borrow::Cow<'a, str>),
}

/// Writes the canonical form of one object from borrowed parts, without
/// building a [`Value`]: members are sorted by name exactly as
/// [`write_canonical`] sorts them, and each value is written in its
/// canonical form. For the same members the bytes are identical to those of
/// `write_canonical` on the equivalent `Value` (a test proves it).
#[derive(Debug, Default)]
pub struct ObjectWriter<'a> {
    members: Vec<(&'a str, Member<'a>)>,
}

impl<'a> ObjectWriter<'a> {
    /// An empty object.
    pub fn new() -> Self {
        ObjectWriter {
            members: Vec::with_capacity(16),
        }
    }

    /// Adds a member. Names must be unique.
    pub fn member(&mut self, name: &'a str, value: Member<'a>) -> &mut Self {
        debug_assert!(
            self.members.iter().all(|(n, _)| *n != name),
            "duplicate member {name}"
        );
        self.members.push((name, value));
        self
    }

    /// Whether no member was added.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Appends the canonical form to `out`.
    pub fn write(mut self, out: &mut String) {
        self.members.sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
        out.push('{');
        for (position, (name, value)) in self.members.iter().enumerate() {
            if position > 0 {
                out.push(',');
            }
            write_string(name, out);
            out.push(':');
            match value {
                Member::Str(text) => write_string(text, out),
                Member::String(text) => write_string(text, out),
                Member::Strs(items) => {
                    out.push('[');
                    for (index, item) in items.iter().enumerate() {
                        if index > 0 {
                            out.push(',');
                        }
                        write_string(item, out);
                    }
                    out.push(']');
                }
                Member::Canonical(text) => out.push_str(text),
            }
        }
        out.push('}');
    }

    /// The canonical form as a string.
    pub fn finish(self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }
}

/// The canonical form of a finite number (`None` for NaN or infinity).
pub fn number_f64(number: f64) -> Option<String> {
    let number = Number::from_f64(number)?;
    let mut out = String::new();
    write_number(&number, &mut out).ok()?;
    Some(out)
}

// ---------------------------------------------------------------------------
// Serialization
// ---------------------------------------------------------------------------

/// One step of a JSON Pointer.
enum Segment<'a> {
    Name(&'a str),
    Index(usize),
}

enum FailureKind {
    NonFiniteNumber,
    NestingTooDeep,
}

/// An error on its way up: the path is collected while unwinding, innermost
/// segment first, so that the success path never builds paths.
struct Failure<'a> {
    kind: FailureKind,
    path_reversed: Vec<Segment<'a>>,
}

impl<'a> Failure<'a> {
    fn new(kind: FailureKind) -> Self {
        Failure {
            kind,
            path_reversed: Vec::new(),
        }
    }

    fn within(mut self, segment: Segment<'a>) -> Self {
        self.path_reversed.push(segment);
        self
    }

    fn into_error(self) -> CanonicalError {
        let mut path = String::new();
        for segment in self.path_reversed.iter().rev() {
            path.push('/');
            match segment {
                Segment::Name(name) => {
                    for c in name.chars() {
                        match c {
                            '~' => path.push_str("~0"),
                            '/' => path.push_str("~1"),
                            c => path.push(c),
                        }
                    }
                }
                Segment::Index(index) => path.push_str(&index.to_string()),
            }
        }
        match self.kind {
            FailureKind::NonFiniteNumber => CanonicalError::NonFiniteNumber { path },
            FailureKind::NestingTooDeep => CanonicalError::NestingTooDeep {
                path,
                depth_max: DEPTH_MAX,
            },
        }
    }
}

/// Writes `value`, which is enclosed by `depth` arrays/objects.
fn write_value<'a>(value: &'a Value, depth: usize, out: &mut String) -> Result<(), Failure<'a>> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => {
            write_number(number, out).map_err(|()| Failure::new(FailureKind::NonFiniteNumber))?
        }
        Value::String(string) => write_string(string, out),
        Value::Array(elements) => {
            if depth >= DEPTH_MAX {
                return Err(Failure::new(FailureKind::NestingTooDeep));
            }
            out.push('[');
            for (index, element) in elements.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(element, depth + 1, out)
                    .map_err(|failure| failure.within(Segment::Index(index)))?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            if depth >= DEPTH_MAX {
                return Err(Failure::new(FailureKind::NestingTooDeep));
            }
            write_object(members, depth, out)?;
        }
    }
    Ok(())
}

fn write_object<'a>(
    members: &'a Map<String, Value>,
    depth: usize,
    out: &mut String,
) -> Result<(), Failure<'a>> {
    let mut sorted: Vec<(&'a String, &'a Value)> = members.iter().collect();
    // Names are unique, so an unstable sort is deterministic.
    sorted.sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
    out.push('{');
    for (position, (name, value)) in sorted.into_iter().enumerate() {
        if position > 0 {
            out.push(',');
        }
        write_string(name, out);
        out.push(':');
        write_value(value, depth + 1, out)
            .map_err(|failure| failure.within(Segment::Name(name)))?;
    }
    out.push('}');
    Ok(())
}

/// Compares two strings as sequences of UTF-16 code units.
///
/// UTF-8 byte order equals code point order, which equals UTF-16 order except
/// between a supplementary character (surrogate pair) and one in
/// U+E000..U+FFFF. So the first differing character decides, compared by its
/// UTF-16 encoding.
fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (a_bytes, b_bytes) = (a.as_bytes(), b.as_bytes());
    let Some(first_difference) = a_bytes.iter().zip(b_bytes).position(|(x, y)| x != y) else {
        return a_bytes.len().cmp(&b_bytes.len());
    };
    // The prefix before `first_difference` is identical, so both strings have
    // a character boundary at the same place at or before it.
    let mut start = first_difference;
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    match (a[start..].chars().next(), b[start..].chars().next()) {
        (Some(char_a), Some(char_b)) => {
            let (mut units_a, mut units_b) = ([0u16; 2], [0u16; 2]);
            let units_a: &[u16] = char_a.encode_utf16(&mut units_a);
            let units_b: &[u16] = char_b.encode_utf16(&mut units_b);
            units_a.cmp(units_b)
        }
        // Unreachable: both strings have a character at `start`.
        _ => a_bytes.cmp(b_bytes),
    }
}

/// Bytes that must be escaped inside a JSON string: controls, `"` and `\\`.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

fn write_string(string: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(string.len() + 2);
    out.push('"');
    let bytes = string.as_bytes();
    let mut copied_to = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        if !NEEDS_ESCAPE[usize::from(byte)] {
            continue;
        }
        let escape: &str = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x09 => "\\t",
            0x0a => "\\n",
            0x0c => "\\f",
            0x0d => "\\r",
            _ => "",
        };
        // Every escaped byte is ASCII, so `index` is a character boundary.
        out.push_str(&string[copied_to..index]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        } else {
            out.push_str(escape);
        }
        copied_to = index + 1;
    }
    out.push_str(&string[copied_to..]);
    out.push('"');
}

/// Integers of at most this magnitude are exact doubles and print the same
/// way as integers and as ECMAScript numbers.
const EXACT_INTEGER_MAX: u64 = 1 << 53;

fn write_number(number: &Number, out: &mut String) -> Result<(), ()> {
    // Fast path: integers that are exact doubles print as plain integers.
    // (`as_i64` covers every `u64` up to 2^53 too.)
    if let Some(integer) = number.as_i64()
        && integer.unsigned_abs() <= EXACT_INTEGER_MAX
    {
        // Writing to a `String` cannot fail.
        let _ = fmt::Write::write_fmt(out, format_args!("{integer}"));
        return Ok(());
    }
    // Everything else becomes the nearest double (`as f64` rounds to nearest,
    // ties to even, as RFC 8785 requires).
    match number.as_f64() {
        Some(x) if x.is_finite() => {
            write_es_number(x, out);
            Ok(())
        }
        _ => Err(()),
    }
}

/// A small stack buffer for Rust's float formatting (at most 25 bytes here).
struct DigitBuffer {
    bytes: [u8; 32],
    len: usize,
}

impl DigitBuffer {
    fn format(args: fmt::Arguments<'_>) -> Self {
        let mut buffer = DigitBuffer {
            bytes: [0; 32],
            len: 0,
        };
        // Cannot fail: a double formats to at most 25 bytes.
        let _ = fmt::Write::write_fmt(&mut buffer, args);
        buffer
    }

    fn as_str(&self) -> &str {
        // Only ASCII is ever written.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for DigitBuffer {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Splits Rust's `{:e}` output `d[.ddd]e[-]x` of a positive double into its
/// significant digits and the ECMAScript `n` (decimal point position).
fn split_scientific(formatted: &str, digits: &mut [u8; 17]) -> (usize, i32) {
    let (mantissa, exponent) = formatted.split_once('e').unwrap_or((formatted, "0"));
    let mut count = 0;
    for &byte in mantissa.as_bytes() {
        if byte.is_ascii_digit() && count < digits.len() {
            digits[count] = byte;
            count += 1;
        }
    }
    let exponent: i32 = exponent.parse().unwrap_or(0);
    (count, exponent + 1)
}

/// Writes a finite double as ECMAScript `Number.prototype.toString` does.
fn write_es_number(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0');
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    let x = x.abs();

    // Rust's `{:e}` gives the shortest digit string that round-trips, which
    // fixes k. Among k-digit strings that round-trip, ECMAScript wants the
    // one closest to x, ties to even; Rust's shortest mode may round a tie
    // up (1424953923781206.25 -> ...206.3, ECMAScript: ...206.2). The
    // correctly rounded k-digit string (`{:.*e}` rounds ties to even) is the
    // closest of all; when it round-trips it is the answer.
    let shortest = DigitBuffer::format(format_args!("{x:e}"));
    let mut digits = [0u8; 17];
    let (mut k, mut n) = split_scientific(shortest.as_str(), &mut digits);
    let nearest = DigitBuffer::format(format_args!("{:.*e}", k.saturating_sub(1), x));
    if nearest.as_str() != shortest.as_str() && nearest.as_str().parse::<f64>() == Ok(x) {
        (k, n) = split_scientific(nearest.as_str(), &mut digits);
    }
    let digits = &digits[..k];
    let k = i32::try_from(k).expect("at most 17 significant digits");

    let push_digits = |out: &mut String, digits: &[u8]| {
        for &digit in digits {
            out.push(char::from(digit));
        }
    };
    if k <= n && n <= 21 {
        push_digits(out, digits);
        for _ in 0..(n - k) {
            out.push('0');
        }
    } else if 0 < n && n <= 21 {
        let (integer, fraction) = digits.split_at(n as usize);
        push_digits(out, integer);
        out.push('.');
        push_digits(out, fraction);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        for _ in 0..(-n) {
            out.push('0');
        }
        push_digits(out, digits);
    } else {
        push_digits(out, &digits[..1]);
        if k > 1 {
            out.push('.');
            push_digits(out, &digits[1..]);
        }
        out.push('e');
        // The exponent is n - 1; its sign is always written.
        out.push(if n > 0 { '+' } else { '-' });
        let _ = fmt::Write::write_fmt(out, format_args!("{}", (n - 1).unsigned_abs()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canonical(value: &Value) -> String {
        to_canonical_string(value).expect("value has a canonical form")
    }

    fn canonical_of_text(text: &str) -> String {
        canonical(&serde_json::from_str(text).expect("test JSON parses"))
    }

    fn es(x: f64) -> String {
        let mut out = String::new();
        write_es_number(x, &mut out);
        out
    }

    fn nested_arrays(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    // -- numbers ------------------------------------------------------------

    /// RFC 8785 Appendix B: IEEE-754 bit patterns and their serialization.
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let table: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            // A tie between ...206.2 and ...206.3: ECMAScript picks the even digit.
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for &(bits, expected) in table {
            let x = f64::from_bits(bits);
            assert_eq!(es(x), expected, "bits {bits:016x}");
            // The same through the public API.
            let value = Value::Number(Number::from_f64(x).expect("finite"));
            assert_eq!(canonical(&value), expected, "bits {bits:016x}");
        }
    }

    /// The canonical form is only as right as the double that the parser
    /// produced. serde_json's default float parser is *not* correctly
    /// rounded (it is off by one ulp for some inputs, e.g. RFC 8785's own
    /// `333333333.33333329`); its `float_roundtrip` feature makes it exact.
    /// Whatever crate parses event JSON must enable that feature.
    #[test]
    fn parser_is_correctly_rounded() {
        let parsed: f64 = serde_json::from_str("333333333.33333329").unwrap();
        assert_eq!(
            parsed.to_bits(),
            0x41b3de4355555555,
            "serde_json must be built with feature \"float_roundtrip\""
        );
        for text in [
            "1.715824215558641e+121",
            "-1.0701581372922237e+18",
            "2.5e-308",
        ] {
            let parsed: f64 = serde_json::from_str(text).unwrap();
            assert_eq!(parsed, text.parse::<f64>().unwrap(), "{text}");
        }
    }

    #[test]
    fn numbers_from_text() {
        let cases: &[(&str, &str)] = &[
            ("333333333.33333329", "333333333.3333333"),
            ("333333333.3333333", "333333333.3333333"),
            ("1E30", "1e+30"),
            ("1e30", "1e+30"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1e-7", "1e-7"),
            ("1.5e-7", "1.5e-7"),
            ("-1.5e-9", "-1.5e-9"),
            ("0.000000000000000000000000001", "1e-27"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345678901", "123456789012345680000"),
            ("1.2345678901234568e20", "123456789012345680000"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("1e3", "1000"),
            ("1000.0", "1000"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0", "0"),
            ("0.1", "0.1"),
            ("-0.5", "-0.5"),
            ("100", "100"),
            ("12.34", "12.34"),
            ("1", "1"),
            ("1.0", "1"),
            ("1e0", "1"),
            ("10e-1", "1"),
            ("0.1e1", "1"),
            ("1e-6", "0.000001"),
            ("1.25e-6", "0.00000125"),
            ("123e-20", "1.23e-18"),
            ("1e100", "1e+100"),
            ("-1e-100", "-1e-100"),
            ("2.5e-308", "2.5e-308"),
            ("9007199254740993", "9007199254740992"),
            ("9007199254740995", "9007199254740996"),
            ("-9007199254740993", "-9007199254740992"),
            ("18446744073709551615", "18446744073709552000"),
            ("-9223372036854775808", "-9223372036854776000"),
            ("999999999999999999999", "1e+21"),
            ("0.1234567890123456789", "0.12345678901234568"),
        ];
        for &(text, expected) in cases {
            assert_eq!(canonical_of_text(text), expected, "input {text}");
        }
    }

    #[test]
    fn integers_above_2_pow_53_are_rounded_to_doubles() {
        // Exact doubles go through the integer fast path.
        assert_eq!(canonical(&json!(9007199254740992u64)), "9007199254740992");
        assert_eq!(canonical(&json!(-9007199254740992i64)), "-9007199254740992");
        // Beyond 2^53 the nearest double (ties to even) is printed.
        assert_eq!(canonical(&json!(9007199254740993u64)), "9007199254740992");
        assert_eq!(canonical(&json!(-9007199254740993i64)), "-9007199254740992");
        assert_eq!(canonical(&json!(9007199254740995u64)), "9007199254740996");
        assert_eq!(canonical(&json!(u64::MAX)), "18446744073709552000");
        assert_eq!(canonical(&json!(i64::MIN)), "-9223372036854776000");
        assert_eq!(canonical(&json!(i64::MAX)), "9223372036854776000");
        // 2^60 is an exact double, printed in its shortest ECMAScript form.
        assert_eq!(canonical(&json!(1u64 << 60)), "1152921504606847000");
        assert_eq!(canonical(&json!(0u64)), "0");
        assert_eq!(canonical(&json!(-1i64)), "-1");
    }

    #[test]
    fn es_number_formatting_boundaries() {
        let cases: &[(f64, &str)] = &[
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (9.999999999999999e20, "999999999999999900000"),
            (1.5e21, "1.5e+21"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (1.234e-6, "0.000001234"),
            (0.5, "0.5"),
            (-0.0, "0"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (f64::EPSILON, "2.220446049250313e-16"),
            (1.0 / 3.0, "0.3333333333333333"),
            (2.0 / 3.0, "0.6666666666666666"),
            (123456.789, "123456.789"),
            (-1e300, "-1e+300"),
            (4.35, "4.35"),
            (0.3, "0.3"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for &(x, expected) in cases {
            assert_eq!(es(x), expected, "x = {x:e}");
        }
    }

    /// Outputs of V8's `String(x)` (Node.js 20) for boundary doubles.
    #[test]
    fn v8_reference_vectors() {
        let table: &[(u64, &str)] = &[
            (0x3ff0000000000001, "1.0000000000000002"),
            (0x3fefffffffffffff, "0.9999999999999999"),
            (0x0010000000000000, "2.2250738585072014e-308"),
            (0x000fffffffffffff, "2.225073858507201e-308"),
            (0x0000000000000002, "1e-323"),
            (0x0000000000000003, "1.5e-323"),
            (0x4036000000000000, "22"),
            (0x4415af1d78b58c40, "100000000000000000000"),
            (0x3e7ad7f29abcaf48, "1e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
        ];
        for &(bits, expected) in table {
            assert_eq!(es(f64::from_bits(bits)), expected, "bits {bits:016x}");
        }
    }

    #[test]
    fn non_finite_numbers_are_rejected() {
        // serde_json::Value cannot hold NaN or infinities (`json!(f64::NAN)`
        // is `null`), so exercise the number writer directly.
        for bits in [
            0x7ff8000000000000u64,
            0x7ff0000000000000,
            0xfff0000000000000,
        ] {
            let x = f64::from_bits(bits);
            assert!(Number::from_f64(x).is_none());
            assert!(!x.is_finite());
        }
        assert_eq!(json!(f64::NAN), Value::Null);
        let error = Failure::new(FailureKind::NonFiniteNumber)
            .within(Segment::Index(2))
            .within(Segment::Name("a/b~c"))
            .into_error();
        assert_eq!(
            error,
            CanonicalError::NonFiniteNumber {
                path: "/a~1b~0c/2".to_string()
            }
        );
        assert_eq!(
            error.to_string(),
            "non-finite number at JSON Pointer \"/a~1b~0c/2\": canonical JSON has no form for NaN or Infinity"
        );
    }

    // -- strings ------------------------------------------------------------

    #[test]
    fn string_escapes() {
        let mut input = String::new();
        let mut expected = String::from("\"");
        for code in 0u32..0x20 {
            input.push(char::from_u32(code).unwrap());
            expected.push_str(&match code {
                0x08 => "\\b".to_string(),
                0x09 => "\\t".to_string(),
                0x0a => "\\n".to_string(),
                0x0c => "\\f".to_string(),
                0x0d => "\\r".to_string(),
                _ => format!("\\u{code:04x}"),
            });
        }
        input.push_str("\"\\/ \u{7f}\u{80}\u{2028}\u{2029}é€😀\u{feff}\u{fffd}");
        expected.push_str("\\\"\\\\/ \u{7f}\u{80}\u{2028}\u{2029}é€😀\u{feff}\u{fffd}\"");
        assert_eq!(canonical(&Value::String(input)), expected);
        assert_eq!(canonical(&json!("\u{1f}")), "\"\\u001f\"");
        assert_eq!(canonical(&json!("\u{0}")), "\"\\u0000\"");
        assert_eq!(canonical(&json!("\u{1b}[0m")), "\"\\u001b[0m\"");
        assert_eq!(canonical(&json!("")), "\"\"");
        assert_eq!(canonical(&json!("plain")), "\"plain\"");
        // Escapes in the input text are decoded; the output uses minimal escapes.
        assert_eq!(
            canonical_of_text(r#""\u0041\/\u00e9\ud83d\ude00""#),
            "\"A/é😀\""
        );
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let text = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        assert_eq!(
            canonical_of_text(text),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn unicode_is_not_normalized() {
        let nfc = json!({"name": "caf\u{e9}"});
        let nfd = json!({"name": "cafe\u{301}"});
        assert_ne!(content_sha256(&nfc).unwrap(), content_sha256(&nfd).unwrap());
        assert_eq!(canonical(&nfd), "{\"name\":\"cafe\u{301}\"}");
    }

    // -- objects and arrays -------------------------------------------------

    /// RFC 8785 §3.2.3 sorting example.
    #[test]
    fn rfc8785_section_3_2_3_key_order() {
        let text = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        assert_eq!(
            canonical_of_text(text),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\
             \"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    #[test]
    fn keys_sort_by_utf16_not_utf8() {
        // U+10000 is D800 DC00 in UTF-16, U+E000 and U+FFFF are single units
        // above it; in UTF-8 (and code points) U+10000 sorts last.
        let value = json!({"\u{ffff}": 3, "\u{10000}": 1, "\u{e000}": 2, "\u{d7ff}": 0});
        assert_eq!(
            canonical(&value),
            "{\"\u{d7ff}\":0,\"\u{10000}\":1,\"\u{e000}\":2,\"\u{ffff}\":3}"
        );
        assert!("\u{10000}".as_bytes() > "\u{e000}".as_bytes());
        assert_eq!(cmp_utf16("\u{10000}", "\u{e000}"), Ordering::Less);
        assert_eq!(cmp_utf16("a\u{1f600}", "a\u{fb33}"), Ordering::Less);
        assert_eq!(cmp_utf16("ab", "abc"), Ordering::Less);
        assert_eq!(cmp_utf16("abc", "abc"), Ordering::Equal);
        assert_eq!(cmp_utf16("b", "abc"), Ordering::Greater);
        assert_eq!(cmp_utf16("", "a"), Ordering::Less);
        // Same lead byte, different continuation bytes.
        assert_eq!(cmp_utf16("\u{e9}", "\u{e8}"), Ordering::Greater);
        assert_eq!(cmp_utf16("\u{1f601}", "\u{1f600}"), Ordering::Greater);
        // Upper case before lower case (plain code unit order, no collation).
        let value = json!({"b": 1, "B": 2, "a": 3, "A": 4, "_": 5, "aa": 6, "": 7});
        assert_eq!(
            canonical(&value),
            r#"{"":7,"A":4,"B":2,"_":5,"a":3,"aa":6,"b":1}"#
        );
    }

    #[test]
    fn nested_and_empty_containers() {
        assert_eq!(canonical(&json!({})), "{}");
        assert_eq!(canonical(&json!([])), "[]");
        assert_eq!(canonical(&json!(null)), "null");
        assert_eq!(canonical(&json!(true)), "true");
        assert_eq!(canonical(&json!(false)), "false");
        assert_eq!(
            canonical(&json!([[], {}, [[]], {"a": {}}])),
            r#"[[],{},[[]],{"a":{}}]"#
        );
        let value = json!({
            "z": [3, 2, 1, {"y": null, "x": [true, false]}],
            "a": {"c": {"e": "f", "d": []}, "b": 1.5},
        });
        assert_eq!(
            canonical(&value),
            r#"{"a":{"b":1.5,"c":{"d":[],"e":"f"}},"z":[3,2,1,{"x":[true,false],"y":null}]}"#
        );
        // Array order is preserved, whitespace dropped.
        assert_eq!(canonical_of_text(" [ 3 , 1 ,\n\t2 ] "), "[3,1,2]");
    }

    #[test]
    fn duplicate_keys_last_wins_at_parse_time() {
        let value: Value = serde_json::from_str(r#"{"a":1,"b":2,"a":3}"#).unwrap();
        assert_eq!(canonical(&value), r#"{"a":3,"b":2}"#);
    }

    #[test]
    fn depth_limit() {
        assert_eq!(DEPTH_MAX, 64);
        assert_eq!(canonical(&json!(1)), "1");
        let deepest = nested_arrays(DEPTH_MAX);
        let text = canonical(&deepest);
        assert_eq!(text, format!("{}1{}", "[".repeat(64), "]".repeat(64)));

        let too_deep = nested_arrays(DEPTH_MAX + 1);
        let expected_path = "/0".repeat(DEPTH_MAX);
        assert_eq!(
            to_canonical_string(&too_deep),
            Err(CanonicalError::NestingTooDeep {
                path: expected_path.clone(),
                depth_max: DEPTH_MAX
            })
        );
        // Empty containers count as one level too.
        let mut empty_at_65 = json!([]);
        for _ in 0..DEPTH_MAX {
            empty_at_65 = json!({"k/~": empty_at_65});
        }
        match to_canonical_string(&empty_at_65) {
            Err(CanonicalError::NestingTooDeep { path, depth_max }) => {
                assert_eq!(path, "/k~1~0".repeat(DEPTH_MAX));
                assert_eq!(depth_max, DEPTH_MAX);
            }
            other => panic!("expected NestingTooDeep, got {other:?}"),
        }
        let mut empty_at_64 = json!({});
        for _ in 0..DEPTH_MAX - 1 {
            empty_at_64 = json!([empty_at_64]);
        }
        assert!(to_canonical_string(&empty_at_64).is_ok());

        // The first offending value in canonical order is reported.
        let value = json!({"b": nested_arrays(DEPTH_MAX), "a": [0, nested_arrays(DEPTH_MAX)]});
        match to_canonical_string(&value) {
            Err(CanonicalError::NestingTooDeep { path, .. }) => {
                assert_eq!(path, format!("/a/1{}", "/0".repeat(DEPTH_MAX - 2)));
            }
            other => panic!("expected NestingTooDeep, got {other:?}"),
        }
        let error = to_canonical_string(&too_deep).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("arrays/objects nested more than 64 deep at JSON Pointer \"{expected_path}\"")
        );
        let _: &dyn std::error::Error = &error;
    }

    #[test]
    fn write_canonical_appends_and_leaves_output_untouched_on_error() {
        let mut out = String::from("prefix:");
        write_canonical(&json!({"b": [1], "a": "x"}), &mut out).unwrap();
        assert_eq!(out, r#"prefix:{"a":"x","b":[1]}"#);
        let before = out.clone();
        let value = json!({"a": [1, 2, 3], "b": nested_arrays(DEPTH_MAX + 5)});
        assert!(write_canonical(&value, &mut out).is_err());
        assert_eq!(out, before);
    }

    // -- hashing ------------------------------------------------------------

    #[test]
    fn sha256_known_answers() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let digest = sha256(b"abc");
        assert_eq!(digest[0], 0xba);
        assert_eq!(digest[31], 0xad);
    }

    #[test]
    fn content_hash_is_hash_of_canonical_bytes() {
        assert_eq!(CANONICAL_VERSION, 1);
        let value = json!({"b": 1, "a": [true, "x"]});
        assert_eq!(canonical(&value), r#"{"a":[true,"x"],"b":1}"#);
        assert_eq!(
            content_sha256(&value).unwrap(),
            sha256(br#"{"a":[true,"x"],"b":1}"#)
        );
        // The example in the module documentation.
        assert_eq!(
            sha256_hex(canonical(&value).as_bytes()),
            "f15ef113d6e0c876b9ea9e90ebc36ad3f8b350d44634ba2fc407e978fb8cebeb"
        );
        let reordered: Value =
            serde_json::from_str("{ \"a\" : [ true , \"x\" ],\n \"b\" : 1.0 }").unwrap();
        assert_eq!(content_sha256(&value), content_sha256(&reordered));
        assert!(content_sha256(&nested_arrays(DEPTH_MAX + 1)).is_err());
    }

    // -- property tests -----------------------------------------------------

    fn finite_f64() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<u64>().prop_map(f64::from_bits),
            (0u64..(1 << 52)).prop_map(f64::from_bits), // subnormals
            any::<i64>().prop_map(|i| i as f64),
            (-1_000_000i64..1_000_000).prop_map(|i| i as f64 / 1000.0),
            any::<f64>(),
        ]
        .prop_filter("finite", |x| x.is_finite())
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-c]{0,3}",
            "[a\u{e000}\u{ffff}\u{10000}\u{1f600}~/]{0,3}",
            any::<String>(),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<u64>().prop_map(|u| json!(u)),
            finite_f64().prop_map(|x| Value::Number(Number::from_f64(x).unwrap())),
            any::<String>().prop_map(Value::String),
            "[\u{0}-\u{7f}\u{2028}é😀]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// Equality with numbers compared as doubles and member order ignored.
    fn same_value(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
            }
            _ => a == b,
        }
    }

    /// Rebuilds `value` with every object's members in a pseudo-random order.
    fn shuffle_members(value: &Value, seed: &mut u64) -> Value {
        match value {
            Value::Array(elements) => {
                Value::Array(elements.iter().map(|e| shuffle_members(e, seed)).collect())
            }
            Value::Object(members) => {
                let mut entries: Vec<(String, Value)> = members
                    .iter()
                    .map(|(k, v)| (k.clone(), shuffle_members(v, seed)))
                    .collect();
                for i in (1..entries.len()).rev() {
                    *seed ^= *seed << 13;
                    *seed ^= *seed >> 7;
                    *seed ^= *seed << 17;
                    entries.swap(i, (*seed % (i as u64 + 1)) as usize);
                }
                Value::Object(entries.into_iter().collect())
            }
            other => other.clone(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// (1) Parsing the canonical form gives back the value.
        #[test]
        fn prop_parse_of_canonical_is_same_value(value in json_value()) {
            let text = canonical(&value);
            let parsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert!(same_value(&value, &parsed), "{value:?} -> {text} -> {parsed:?}");
        }

        /// (2) Canonicalization is idempotent.
        #[test]
        fn prop_canonical_is_idempotent(value in json_value()) {
            let text = canonical(&value);
            let again = canonical(&serde_json::from_str(&text).unwrap());
            prop_assert_eq!(text, again);
        }

        /// (3) Member order and whitespace of the input text never change the hash.
        #[test]
        fn prop_member_order_and_whitespace_do_not_change_hash(
            value in json_value(),
            seed in 1u64..,
        ) {
            let hash = content_sha256(&value).unwrap();
            let shuffled = shuffle_members(&value, &mut seed.clone());
            prop_assert_eq!(content_sha256(&shuffled).unwrap(), hash);
            let compact: Value = serde_json::from_str(&serde_json::to_string(&shuffled).unwrap()).unwrap();
            prop_assert_eq!(content_sha256(&compact).unwrap(), hash);
            let pretty: Value =
                serde_json::from_str(&serde_json::to_string_pretty(&shuffled).unwrap()).unwrap();
            prop_assert_eq!(content_sha256(&pretty).unwrap(), hash);
        }

        /// (4) The ECMAScript number form round-trips, is shortest, and has
        /// the documented shape.
        #[test]
        fn prop_es_number_round_trips(x in finite_f64()) {
            let s = es(x);
            prop_assert_eq!(s.parse::<f64>().unwrap(), x, "{}", s);
            let mut via_api = String::new();
            write_canonical(&Value::Number(Number::from_f64(x).unwrap()), &mut via_api).unwrap();
            prop_assert_eq!(&via_api, &s);
            // Same number of significant digits as Rust's shortest form.
            let significant = |t: &str| {
                let mantissa = t.split('e').next().unwrap();
                mantissa.trim_start_matches(['-', '0', '.']).replace('.', "").trim_end_matches('0').len()
            };
            if x != 0.0 {
                prop_assert_eq!(significant(&s), significant(&format!("{x:e}")), "{}", s);
            }
            prop_assert!(!s.ends_with(".0") && !s.contains(".0e") && !s.contains("E"));
            prop_assert!(!s.contains("e+0") && !s.contains("e-0"));
            if x.fract() == 0.0 && x.abs() < 1e21 {
                prop_assert!(!s.contains('.') && !s.contains('e'), "{}", s);
            }
            if x != 0.0 && (x.abs() >= 1e21 || x.abs() < 1e-6) {
                prop_assert!(s.contains('e'), "{}", s);
            } else {
                prop_assert!(!s.contains('e'), "{}", s);
            }
        }

        #[test]
        fn prop_integers_print_plainly(i in -(1i64 << 53)..=(1i64 << 53)) {
            prop_assert_eq!(canonical(&json!(i)), i.to_string());
            prop_assert_eq!(es(i as f64), i.to_string());
        }

        #[test]
        fn prop_cmp_utf16_matches_encode_utf16(a in key(), b in key()) {
            prop_assert_eq!(cmp_utf16(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
            prop_assert_eq!(cmp_utf16(&b, &a), b.encode_utf16().cmp(a.encode_utf16()));
        }
    }
}
