//! Turning the bytes of an input file into text: UTF-8 only, with the line
//! and byte column of the first invalid sequence named, and a leading UTF-8
//! byte-order mark (which editors add) dropped.
//!
//! This module must never guess an encoding.

use crate::ingest::LineError;

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
