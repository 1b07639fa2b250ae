//! Time: the injectable engine clock and RFC 3339 timestamps.
//!
//! Engram keeps two clocks apart: *valid time* (`occurred_at`, `valid_from`,
//! `valid_until`: when something was true in the world, supplied by clients)
//! and *transaction time* (`ingested_at`: when the store learned it, read from
//! the engine's [`Clock`]). Both are stored as milliseconds since the Unix
//! epoch, UTC. Tests inject a [`ManualClock`].
//!
//! Text form: RFC 3339 with a `Z` or numeric offset, e.g.
//! `2025-03-08T10:14:21Z`, `2025-03-08T10:14:21.250+01:00`; a bare date
//! `2025-03-08` means midnight UTC. Output is always UTC with millisecond
//! precision when non-zero (`2025-03-08T10:14:21Z`, `...21.250Z`).
//!
//! This module must never read the system clock except in [`SystemClock`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since 1970-01-01T00:00:00Z.
pub type TimestampMs = i64;

/// Earliest accepted timestamp: 0001-01-01T00:00:00Z.
pub const TIMESTAMP_MIN_MS: TimestampMs = -62_135_596_800_000;
/// Latest accepted timestamp: 9999-12-31T23:59:59.999Z.
pub const TIMESTAMP_MAX_MS: TimestampMs = 253_402_300_799_999;

/// The engine clock (transaction time).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, in ms since the epoch.
    fn now_ms(&self) -> TimestampMs;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> TimestampMs {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to (tests, replayable evaluations).
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `start_ms`.
    pub fn new(start_ms: TimestampMs) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start_ms)))
    }
    /// Sets the time.
    pub fn set(&self, ms: TimestampMs) {
        self.0.store(ms, Ordering::SeqCst);
    }
    /// Moves the time forward.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> TimestampMs {
        self.0.load(Ordering::SeqCst)
    }
}

/// Why a timestamp did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseTimeError {
    /// The input (truncated).
    pub input: String,
    /// What is wrong.
    pub reason: &'static str,
}

const OUT_OF_RANGE: &str = "outside years 0001..9999";

impl fmt::Display for ParseTimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reason == OUT_OF_RANGE {
            return write!(
                f,
                "'{}' is outside years 0001..9999, where every stored time lies",
                self.input
            );
        }
        if self.reason == SUB_MS {
            // a valid timestamp, too precise for a bound
            return write!(
                f,
                "'{}' is finer than a millisecond: times are kept to the millisecond, so round the bound (e.g. 2025-03-08T10:14:21.123Z)",
                self.input
            );
        }
        write!(
            f,
            "'{}' is not an RFC 3339 timestamp ({}); expected e.g. 2025-03-08T10:14:21Z",
            self.input, self.reason
        )
    }
}

impl std::error::Error for ParseTimeError {}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    // Howard Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// The reason of a bound finer than a millisecond.
const SUB_MS: &str =
    "finer than a millisecond (times are kept to the millisecond: round the bound)";

/// [`parse_rfc3339`] for a time a query compares with (a filter's bound,
/// `AS OF`, `valid_at`): a fraction finer than a millisecond that is not
/// zero is refused. Why: Engram keeps times to the millisecond, and a bound
/// cut to it would compare wrongly (`>= 10:00:00.0001` would take a record
/// of `10:00:00.000`). Stored times keep being cut to the millisecond.
pub fn parse_rfc3339_bound(s: &str) -> Result<TimestampMs, ParseTimeError> {
    let ms = parse_rfc3339(s)?;
    let t = s.trim();
    if let Some(dot) = t.find('.') {
        let frac = t[dot + 1..].bytes().take_while(u8::is_ascii_digit);
        if frac.skip(3).any(|c| c != b'0') {
            return Err(ParseTimeError {
                input: s.chars().take(40).collect(),
                reason: SUB_MS,
            });
        }
    }
    Ok(ms)
}

/// [`parse_rfc3339_bound`] for a time a request compares with, inside the
/// years every stored time lies in (0001..=9999, as the query language
/// checks its times): a bound outside them is refused by name rather than
/// answered as an empty store.
pub fn parse_query_time(s: &str) -> Result<TimestampMs, ParseTimeError> {
    let ms = parse_rfc3339_bound(s)?;
    if !(TIMESTAMP_MIN_MS..=TIMESTAMP_MAX_MS).contains(&ms) {
        return Err(ParseTimeError {
            input: s.chars().take(40).collect(),
            reason: OUT_OF_RANGE,
        });
    }
    Ok(ms)
}

/// Parses an RFC 3339 timestamp (or a bare `YYYY-MM-DD`) to ms since the
/// epoch. A fraction finer than a millisecond is cut.
pub fn parse_rfc3339(s: &str) -> Result<TimestampMs, ParseTimeError> {
    let err = |reason| ParseTimeError {
        input: s.chars().take(40).collect(),
        reason,
    };
    let b = s.trim().as_bytes();
    let num = |from: usize, len: usize| -> Result<i64, ParseTimeError> {
        let part = b.get(from..from + len).ok_or(err("too short"))?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(err("expected digits"));
        }
        Ok(std::str::from_utf8(part)
            .expect("digits")
            .parse()
            .expect("digits"))
    };
    let y = num(0, 4)?;
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return Err(err("expected YYYY-MM-DD"));
    }
    let mo = num(5, 2)?;
    let d = num(8, 2)?;
    if !(1..=12).contains(&mo) {
        return Err(err("month out of range"));
    }
    if d < 1 || d > days_in_month(y, mo) {
        return Err(err("day out of range"));
    }
    let days = days_from_civil(y, mo, d);
    if b.len() == 10 {
        return Ok(days * 86_400_000);
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) {
        return Err(err("expected 'T' between date and time"));
    }
    let h = num(11, 2)?;
    let mi = num(14, 2)?;
    let sec = num(17, 2)?;
    if b.get(13) != Some(&b':') || b.get(16) != Some(&b':') {
        return Err(err("expected HH:MM:SS"));
    }
    if h > 23 || mi > 59 || sec > 60 {
        return Err(err("time out of range"));
    }
    let mut pos = 19;
    let mut ms = 0i64;
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos == start {
            return Err(err("empty fraction"));
        }
        let frac = &b[start..pos];
        for (i, &c) in frac.iter().take(3).enumerate() {
            ms += (c - b'0') as i64 * [100, 10, 1][i];
        }
    }
    let offset_min = match b.get(pos) {
        Some(b'Z' | b'z') if pos + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if pos + 6 == b.len() && b[pos + 3] == b':' => {
            let oh = num(pos + 1, 2)?;
            let om = num(pos + 4, 2)?;
            if oh > 23 || om > 59 {
                return Err(err("offset out of range"));
            }
            let o = oh * 60 + om;
            if sign == b'+' { o } else { -o }
        }
        None => return Err(err("missing time zone (use Z for UTC)")),
        _ => return Err(err("bad time zone or trailing characters")),
    };
    let sec = sec.min(59); // a leap second is folded into :59
    Ok(days * 86_400_000 + ((h * 60 + mi - offset_min) * 60 + sec) * 1000 + ms)
}

/// A time that reads as RFC 3339 UTC ([`format_rfc3339`]): kept as
/// milliseconds since the epoch and formatted only when displayed or
/// serialized (as a string), so results nobody prints format no dates.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rfc3339(pub TimestampMs);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_rfc3339(self.0))
    }
}

impl fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&format_rfc3339(self.0), f)
    }
}

impl serde::Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Formats ms since the epoch as RFC 3339 UTC.
pub fn format_rfc3339(ms: TimestampMs) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    if !(0..=9999).contains(&y) {
        // Outside what records may hold; the general formatter handles it.
        return if milli == 0 {
            format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
        } else {
            format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
        };
    }
    // Hot in result building: digits written directly, no format machinery.
    fn digits(out: &mut String, v: i64, n: u32) {
        for i in (0..n).rev() {
            let digit = (v / 10_i64.pow(i)) % 10;
            out.push(char::from(b'0' + digit as u8));
        }
    }
    let mut out = String::with_capacity(24);
    digits(&mut out, y, 4);
    out.push('-');
    digits(&mut out, m, 2);
    out.push('-');
    digits(&mut out, d, 2);
    out.push('T');
    digits(&mut out, h, 2);
    out.push(':');
    digits(&mut out, mi, 2);
    out.push(':');
    digits(&mut out, s, 2);
    if milli != 0 {
        out.push('.');
        digits(&mut out, milli, 3);
    }
    out.push('Z');
    out
}

/// Parses a duration like `500ms`, `90s`, `15m`, `6h`, `30d`, `2w`, `2y`
/// (365-day years). The unit is required: a bare `30` could mean
/// anything from milliseconds to days, and a retention period read in the
/// wrong unit deletes records.
pub fn parse_duration_ms(s: &str) -> Option<i64> {
    let (num, unit_ms) = duration_parts(s)?;
    num.parse::<i64>().ok()?.checked_mul(unit_ms)
}

/// A duration's digits and its unit in milliseconds, when it has that
/// form (whatever the size of the number).
fn duration_parts(s: &str) -> Option<(&str, i64)> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        "y" => 365 * 86_400_000,
        _ => return None,
    };
    (!num.is_empty()).then_some((num, unit_ms))
}

/// Whether `s` has a duration's form but its milliseconds do not fit 64
/// bits.
fn too_long(s: &str) -> bool {
    duration_parts(s).is_some() && parse_duration_ms(s).is_none()
}

/// Formats a retention period as [`parse_retention_period`] reads it:
/// the largest unit that divides it exactly (`30d`, `6h`, `90s`), or
/// `forever`. Parsing the text gives the same period back.
pub fn format_retention_period(period_ms: Option<i64>) -> String {
    let Some(ms) = period_ms else {
        return "forever".to_string();
    };
    const UNITS: [(&str, i64); 7] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ];
    let (unit, size) = UNITS
        .into_iter()
        .find(|&(_, size)| ms != 0 && ms % size == 0)
        .unwrap_or(("ms", 1));
    format!("{}{unit}", ms / size)
}

/// Parses a retention period: a duration with its unit
/// ([`parse_duration_ms`]), or `forever` (None). The error says what is
/// accepted.
pub fn parse_retention_period(s: &str) -> Result<Option<i64>, String> {
    if s.trim() == "forever" {
        return Ok(None);
    }
    match parse_duration_ms(s) {
        Some(ms) => Ok(Some(ms)),
        // well formed, but past what milliseconds in 64 bits hold
        None if too_long(s) => Err(format!(
            "'{s}': too long a period (at most about 292 million years); use forever to keep records for good"
        )),
        None => Err(format!(
            "'{s}': expected a number with a unit (ms, s, m, h, d, w, y), like 90s, 15m, 6h, 30d, 7y, or forever"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_query_time_outside_the_stored_years_is_refused() {
        for bad in ["0000-12-31T00:00:00Z", "0001-01-01T00:30:00+01:00"] {
            let e = parse_query_time(bad).unwrap_err().to_string();
            assert!(e.contains("outside years 0001..9999"), "{bad}: {e}");
        }
        assert_eq!(
            parse_query_time("0001-01-01T00:00:00Z"),
            Ok(TIMESTAMP_MIN_MS)
        );
        assert!(parse_query_time("9999-12-31T23:59:59.999Z").is_ok());
    }

    #[test]
    fn a_formatted_retention_period_parses_back_to_itself() {
        assert_eq!(format_retention_period(None), "forever");
        assert_eq!(format_retention_period(Some(30 * 86_400_000)), "30d");
        assert_eq!(format_retention_period(Some(14 * 86_400_000)), "2w");
        assert_eq!(format_retention_period(Some(90_000)), "90s");
        assert_eq!(format_retention_period(Some(1_500)), "1500ms");
        for ms in [1, 999, 60_000, 86_400_000, 365 * 86_400_000, i64::MAX] {
            let text = format_retention_period(Some(ms));
            assert_eq!(parse_retention_period(&text), Ok(Some(ms)), "{text}");
        }
    }

    #[test]
    fn a_kept_time_reads_and_serializes_as_its_rfc3339_text() {
        let t = Rfc3339(1_741_428_861_250);
        assert_eq!(t.to_string(), "2025-03-08T10:14:21.250Z");
        assert_eq!(format!("{t:?}"), "\"2025-03-08T10:14:21.250Z\"");
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2025-03-08T10:14:21.250Z\""
        );
    }

    #[test]
    fn a_period_too_long_says_so() {
        let e = parse_retention_period("9999999999y").unwrap_err();
        assert!(e.contains("too long a period"), "{e}");
        let e = parse_retention_period("99999999999999999999d").unwrap_err();
        assert!(e.contains("too long a period"), "{e}");
        let e = parse_retention_period("30 days").unwrap_err();
        assert!(e.contains("expected a number with a unit"), "{e}");
        assert_eq!(
            parse_retention_period("7y").unwrap(),
            Some(7 * 365 * 86_400_000)
        );
    }

    #[test]
    fn known_values() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_rfc3339("2025-03-08T10:14:21Z").unwrap(),
            1_741_428_861_000
        );
        assert_eq!(
            parse_rfc3339("2025-03-08T11:14:21.5+01:00").unwrap(),
            1_741_428_861_500
        );
        assert_eq!(parse_rfc3339("2025-03-08").unwrap(), 1_741_392_000_000);
        assert_eq!(format_rfc3339(1_741_428_861_000), "2025-03-08T10:14:21Z");
        assert_eq!(
            format_rfc3339(1_741_428_861_250),
            "2025-03-08T10:14:21.250Z"
        );
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn bad_inputs_are_named() {
        for bad in [
            "",
            "2025-13-01T00:00:00Z",
            "2025-02-30T00:00:00Z",
            "2025-03-08T10:14:21",
            "2025-03-08T25:00:00Z",
            "yesterday",
            "2025-03-08T10:14:21Zjunk",
        ] {
            let e = parse_rfc3339(bad).unwrap_err();
            assert!(e.to_string().contains("RFC 3339"), "{bad}: {e}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("90s"), Some(90_000));
        assert_eq!(parse_duration_ms("6h"), Some(21_600_000));
        assert_eq!(parse_duration_ms("2y"), Some(2 * 365 * 86_400_000));
        assert_eq!(parse_duration_ms("12ms"), Some(12));
        assert_eq!(parse_duration_ms("12"), None, "a unit is required");
        assert_eq!(parse_duration_ms("s"), None);
        assert_eq!(parse_duration_ms("6 hours"), None);
    }

    proptest! {
        #[test]
        fn format_then_parse_roundtrips(ms in TIMESTAMP_MIN_MS..TIMESTAMP_MAX_MS) {
            prop_assert_eq!(parse_rfc3339(&format_rfc3339(ms)).unwrap(), ms);
        }

        #[test]
        fn direct_formatting_matches_the_format_macro(ms in TIMESTAMP_MIN_MS..TIMESTAMP_MAX_MS) {
            let days = ms.div_euclid(86_400_000);
            let rem = ms.rem_euclid(86_400_000);
            let (y, m, d) = civil_from_days(days);
            let (h, mi, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
            let expected = if milli == 0 {
                format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
            } else {
                format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
            };
            prop_assert_eq!(format_rfc3339(ms), expected);
        }
    }
}
