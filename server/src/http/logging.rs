//! The server's log: one JSON object per line on stderr, e.g.
//!
//! ```json
//! {"ts":"2026-12-01T10:00:00.123Z","level":"info","msg":"request","request_id":"5f2a…-17","method":"POST","route":"/v1/records","status":200,"latency_us":1843}
//! ```
//!
//! Requests are logged with their id, method, route template, status and
//! latency; failures add their error code, and server-side failures the
//! full error (which may name files of the store: the log is the
//! operator's).
//!
//! This module must never be given a request body, a query string, a
//! header value or an API key to record.

use std::io::Write as _;

use engram_engine::time::{Clock, SystemClock, format_rfc3339};
use serde_json::{Map, Value};

/// Writes one log line: `level`, `msg` and `fields`.
pub fn event(level: &str, msg: &str, fields: Map<String, Value>) {
    let mut line = Map::new();
    line.insert("ts".into(), format_rfc3339(SystemClock.now_ms()).into());
    line.insert("level".into(), level.into());
    line.insert("msg".into(), msg.into());
    line.extend(fields);
    let text = Value::Object(line).to_string();
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// [`event`] with fields given as pairs.
pub fn log(level: &str, msg: &str, fields: &[(&str, Value)]) {
    event(
        level,
        msg,
        fields
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
    );
}
