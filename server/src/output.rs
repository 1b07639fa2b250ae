//! Human-readable rendering of records and reports for the terminal.
//! (`--json` output is the serde form of the engine's types.)

/// What a write to a closed stdout unwinds with (caught in
/// `main_entry`, which then exits quietly with status 0).
pub struct StdoutClosed;

/// Writes one line to stdout, control characters escaped (see
/// [`terminal_safe`]). If stdout is closed (`engram log | head`), unwinds
/// to `main_entry` (dropping what the command holds: its store is closed,
/// a temporary directory removed), which exits quietly; no panic message
/// is printed.
pub fn emit(line: std::fmt::Arguments<'_>) {
    if let Err(e) = try_emit(line) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::panic::resume_unwind(Box::new(StdoutClosed));
        }
        match CHANGE_MADE.lock().take() {
            Some(done) => emit_err(format_args!(
                "error: cannot write output: {e}; the command had made its change before \
                 (it is stored and durable: {done}): do not repeat it as if it had failed"
            )),
            None => emit_err(format_args!("error: cannot write output: {e}")),
        }
        std::process::exit(1);
    }
}

/// Writes one line to stdout, flushed, like [`emit`], but returns a failure
/// (a closed stdout included) to the caller instead of ending the command:
/// for output whose loss the command must answer itself (a new key's
/// secret, shown only once).
pub fn try_emit(line: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write;
    let text = safe_line(line);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush())
}

/// What the running command changed in the store, once the change is
/// durable: said by [`emit`] if the output that reports it cannot be
/// written (`>/dev/full`), so its exit status 1 is not read as the change
/// having failed.
static CHANGE_MADE: parking_lot::Mutex<Option<String>> = parking_lot::Mutex::new(None);

/// Records that the running command made its change (`done`, e.g.
/// "deleted 3 record(s)"); see [`emit`].
pub fn change_made(done: impl Into<String>) {
    *CHANGE_MADE.lock() = Some(done.into());
}

/// Writes one line to stderr, control characters escaped (see
/// [`terminal_safe`]: a warning or an error may quote input or stored
/// text). A stderr that cannot be written (closed, `2>/dev/full`) loses
/// the line: `eprintln!` would panic, and the command would end with a
/// panic's status instead of its own.
pub fn emit_err(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let text = safe_line(line);
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// A line's text, [`terminal_safe`] (borrowed when it is a plain string
/// that needs no escape).
fn safe_line(line: std::fmt::Arguments<'_>) -> std::borrow::Cow<'static, str> {
    use std::borrow::Cow;
    match line.as_str() {
        Some(s) => terminal_safe(s),
        None => {
            let s = line.to_string();
            match terminal_safe(&s) {
                Cow::Borrowed(_) => Cow::Owned(s),
                Cow::Owned(o) => Cow::Owned(o),
            }
        }
    }
}

pub use engram_query::text::terminal_safe;

/// An error line on stderr (see [`emit_err`]).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::emit_err(format_args!($($arg)*)) };
}

/// `eprintln!` that tolerates a stderr it cannot write, its text made
/// terminal-safe (see [`emit_err`]).
#[macro_export]
macro_rules! eoutln {
    ($($arg:tt)*) => { $crate::output::emit_err(format_args!($($arg)*)) };
}

/// `println!` that tolerates a closed stdout (see [`emit`]).
#[macro_export]
macro_rules! outln {
    () => { $crate::output::emit(format_args!("")) };
    ($($arg:tt)*) => { $crate::output::emit(format_args!($($arg)*)) };
}

use engram_engine::Record;
use engram_engine::time::format_rfc3339;

/// `text` on one line: line breaks shown escaped (`\n`), so stored text
/// cannot fake a line of the output.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    let breaks = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
    if !text.contains(breaks) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if breaks(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One-line header of a record. A current record whose validity ended is
/// marked historical, as `trace` and retrieval show it.
pub fn record_header(r: &Record) -> String {
    let status = match r.valid_until {
        Some(t) if r.historical => {
            format!(
                "{}, historical since {}",
                r.status.name(),
                format_rfc3339(t)
            )
        }
        _ => r.status.name().to_string(),
    };
    let mut s = format!(
        "{}  {} {}  {}  [{status}]",
        r.id,
        r.record.name(),
        r.kind,
        format_rfc3339(r.occurred_at),
    );
    if let Some(e) = &r.external_id {
        s.push_str(&format!("  ext={e}"));
    }
    s
}

/// A record in a few indented lines.
pub fn record_block(r: &Record) -> String {
    let mut out = record_header(r);
    // every value on its one line: no field (text, a claim's object, a
    // derivation) can fake another line of the block
    let mut line = |k: &str, v: String| {
        out.push_str(&format!("\n    {k:<14}{}", one_line(&v)));
    };
    let mut scope = Vec::new();
    if let Some(u) = &r.scope.user {
        scope.push(format!("user={u}"));
    }
    if let Some(c) = &r.scope.conversation {
        scope.push(format!("conversation={c}"));
    }
    if let Some(a) = &r.scope.agent {
        scope.push(format!("agent={a}"));
    }
    if !r.scope.labels.is_empty() {
        scope.push(format!("labels={}", r.scope.labels.join(",")));
    }
    if !scope.is_empty() {
        line("scope", scope.join(" "));
    }
    if let Some(t) = &r.text {
        line("text", t.clone());
    }
    if let Some(d) = &r.data {
        line("data", d.to_string());
    }
    if let Some(n) = &r.name {
        line(
            "entity",
            format!(
                "{} ({}){}",
                n,
                r.entity_type.clone().unwrap_or_default(),
                if r.aliases.is_empty() {
                    String::new()
                } else {
                    format!(" aka {}", r.aliases.join(", "))
                }
            ),
        );
    }
    if let Some(p) = &r.predicate {
        line(
            "claim",
            format!(
                "{} -{}-> {}",
                r.subject
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                p,
                r.object
                    .map(|o| o.to_string())
                    .or_else(|| r.object_value.clone())
                    .unwrap_or_else(|| "-".into())
            ),
        );
    }
    if !r.sources.is_empty() {
        line(
            "sources",
            r.sources
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    line(
        "writer",
        format!("{} ({})", r.writer.principal, r.writer.kind.name()),
    );
    line("ingested_at", format_rfc3339(r.ingested_at));
    if let Some(v) = r.valid_from {
        line("valid_from", format_rfc3339(v));
    }
    if let Some(v) = r.valid_until {
        line("valid_until", format_rfc3339(v));
    }
    if !r.effective_access.is_empty() {
        line("access", r.effective_access.join(", "));
    }
    if r.retention_class != "standard" {
        line("retention", r.retention_class.clone());
    }
    if let Some(s) = r.supersedes {
        line("supersedes", s.to_string());
    }
    if let Some(s) = r.superseded_by {
        line("superseded_by", s.to_string());
    }
    for e in &r.embeddings {
        line("embedding", format!("{} ({} dims)", e.model, e.dim));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Line breaks of every kind are shown escaped; other text is kept.
    #[test]
    fn one_line_escapes_every_line_break_and_keeps_the_rest() {
        assert!(matches!(
            one_line("plain, café\ttab"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            one_line("a\nb\rc\u{85}d\u{2028}e\u{2029}f"),
            "a\\nb\\rc\\u{85}d\\u{2028}e\\u{2029}f"
        );
        assert_eq!(one_line("x\n    writer  admin").lines().count(), 1);
    }
}
