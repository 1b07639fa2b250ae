//! Turning the bytes of an input file into text: UTF-8 only, with the line
//! and byte column of the first invalid sequence named, and a leading UTF-8
//! byte-order mark (which editors add) dropped.
//!
//! And the other way: text made safe to print to a terminal
//! ([`terminal_safe`]).
//!
//! This module must never guess an encoding.

use crate::ingest::LineError;

/// `text` with every character that could drive a terminal written as a
/// `\uXXXX` escape: C0 controls but newline and tab, DEL, C1 controls and
/// the line and paragraph separators (a terminal may start a new line
/// at them, so a record could print a line of its own making), and the
/// bidirectional marks, overrides and isolates (a mark reorders the text
/// around it as much as an override does). Stored text is data, never
/// terminal commands (an ESC sequence in a record could retitle or clear
/// the terminal, or reach its clipboard). The escape is JSON's: inside a
/// JSON string it means the same character, so `--json` output stays
/// equal as JSON.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    fn unsafe_char(c: char) -> bool {
        matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
            || matches!(
                c,
                '\u{200e}'
                    | '\u{200f}'
                    | '\u{061c}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202a}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}'
            )
    }
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The UTF-8 byte-order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes a whole input file (JSONL or a query) as UTF-8.
pub fn decode(bytes: &[u8]) -> Result<String, LineError> {
    if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        return Err(LineError {
            line: 1,
            field: "-".into(),
            reason:
                "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
                    .into(),
            json_at: None,
        });
    }
    let body = bytes.strip_prefix(BOM).unwrap_or(bytes);
    match std::str::from_utf8(body) {
        Ok(s) => Ok(s.to_string()),
        Err(e) => {
            let at = e.valid_up_to();
            let line = body[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = body[..at]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            Err(LineError {
                line,
                field: "-".into(),
                reason: format!(
                    "invalid UTF-8 at byte {} of the line (byte 0x{:02x}); the file must be UTF-8",
                    at - line_start + 1,
                    body[at]
                ),
                json_at: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn terminal_safe_escapes_controls_and_keeps_text() {
        let plain = "café, 東京, 🙂\ttab\nline";
        assert!(matches!(
            terminal_safe(plain),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            terminal_safe("a\u{1b}]0;x\u{7}b\rc\u{7f}\u{9b}\u{202e}\u{2066}d\u{0}"),
            "a\\u001b]0;x\\u0007b\\u000dc\\u007f\\u009b\\u202e\\u2066d\\u0000"
        );
        // the marks as well as the overrides and isolates
        assert_eq!(
            terminal_safe("a\u{200e}b\u{200f}c\u{61c}d\u{2028}e"),
            "a\\u200eb\\u200fc\\u061cd\\u2028e"
        );
        // the escape is JSON's: a JSON string stays the same string
        let json = serde_json::to_string("x\u{7f}\u{9b}\u{202e}y").unwrap();
        let back: String = serde_json::from_str(&terminal_safe(&json)).unwrap();
        assert_eq!(back, "x\u{7f}\u{9b}\u{202e}y");
    }

    use super::*;

    #[test]
    fn invalid_utf8_is_located() {
        let e = decode(b"{\"a\": 1}\n{\"b\": \"\xff\"}\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("byte 8"), "{}", e.reason);
    }

    #[test]
    fn a_bom_is_dropped_and_utf16_is_named() {
        assert_eq!(decode(b"\xEF\xBB\xBF{}\n").unwrap(), "{}\n");
        assert!(
            decode(b"\xFF\xFE{\0")
                .unwrap_err()
                .reason
                .contains("UTF-16")
        );
    }
}
