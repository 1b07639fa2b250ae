//! Bulk streaming ingest: an NDJSON request body (one record per line, the
//! ingest format without tenant), cut into atomic batches of `batch` lines
//! (default 1000), each appended once the previous one is durable, with
//! one result line per input line streamed back as NDJSON after its
//! batch's fsync, then a summary line.
//!
//! Memory stays bounded: the body is read as it arrives, a line longer
//! than `limits.bulk_line_bytes_max` is skipped (and reported), at most one
//! batch is parsed at a time, and the response channel is bounded, so a
//! client that stops reading stops the server reading its body. A batch
//! with an invalid line is rejected whole (every line of it says so) and
//! the stream goes on with the next batch; re-sending lines is idempotent
//! by external id.
//!
//! This module must never acknowledge a line before the engine returned
//! for its batch.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use engram_engine::authz::Operation;
use engram_engine::{AppendOutcome, EngineError, NewRecord};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use utoipa::IntoParams;

use crate::http::app::{Shared, run_blocking};
use crate::http::auth::Caller;
use crate::http::error::{ErrorBody, ServerError, ServerResult};
use crate::http::routes::Params;

/// Chunks of the response waiting for the client.
const RESPONSE_CHUNKS_BUFFERED: usize = 4;

/// Options of a bulk ingest.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct BulkParams {
    /// Lines per atomic batch (default limits.bulk_batch_default, at most
    /// limits.batch_records_max).
    #[param(minimum = 1)]
    pub batch: Option<usize>,
}

/// Bulk ingest: an NDJSON body of records (ingest format, no tenant), one
/// per line; atomic batches of `batch` lines; one result line per input
/// line streamed back as NDJSON after its batch is durable, then
/// `{"summary": {...}}`.
///
/// A result line is `{"line": n, "id", "external_id", "outcome", "status",
/// "lsn"}` or `{"line": n, "error": {"code", "message", "details"}}`; a
/// batch with an invalid line stores nothing (its other lines answer
/// `batch_rejected`) and the stream goes on. Blank lines and lines
/// starting with `#` or `//` are skipped. Read the response while sending: the
/// server stops reading the body when the client stops reading results.
#[utoipa::path(
    post, path = "/v1/records/bulk", tag = "records", params(BulkParams),
    request_body(content = String, description = "One record per line (ingest format, without tenant)", content_type = "application/x-ndjson"),
    responses(
        (status = 200, description = "NDJSON: one result per line, then a summary", body = String, content_type = "application/x-ndjson"),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody),
    ),
    security(("api_key" = []))
)]
pub async fn ingest(
    State(app): State<Shared>,
    caller: Caller,
    Params(p): Params<BulkParams>,
    req: Request,
) -> ServerResult<Response> {
    // decided now (a refusal is the response's status); each batch then
    // binds its own session, so a long stream never holds up online
    // compaction's swap
    drop(caller.session(&app, Operation::Append).await?);
    let max = app.cfg.limits.batch_records_max;
    let batch = p.batch.unwrap_or(app.cfg.limits.bulk_batch_default);
    if batch == 0 || batch > max {
        return Err(ServerError::invalid(
            None,
            "batch",
            format!("{batch} is out of range 1..={max}"),
        ));
    }
    // The caller extractor accepted this key: it is re-checked before each
    // batch (a key revoked during the stream ends it).
    let key = crate::http::auth::bearer(req.headers())
        .unwrap_or_default()
        .to_string();
    let (tx, rx) = mpsc::channel::<Bytes>(RESPONSE_CHUNKS_BUFFERED);
    let job = Bulk {
        app: app.clone(),
        caller,
        key,
        batch,
        tx,
        pending: Vec::with_capacity(batch.min(1024)),
        pending_bytes: 0,
        totals: Totals::default(),
        cut_line: None,
        unsent: None,
    };
    tokio::spawn(job.run(req.into_body()));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(resp)
}

#[derive(Debug, Default)]
struct Totals {
    lines: u64,
    created: u64,
    duplicates: u64,
    rejected: u64,
    batches: u64,
    batches_rejected: u64,
}

/// One line waiting for its batch.
struct Pending {
    line: usize,
    record: Result<NewRecord, ServerError>,
}

struct Bulk {
    app: Shared,
    caller: Caller,
    /// The presented key, re-authenticated for each batch.
    key: String,
    batch: usize,
    tx: mpsc::Sender<Bytes>,
    pending: Vec<Pending>,
    /// Bytes of the pending batch's lines.
    pending_bytes: u64,
    totals: Totals,
    /// The number of a line the body broke off inside, if it did.
    cut_line: Option<usize>,
    /// The first and last lines of a batch the stream ended before
    /// appending (its key revoked meanwhile, say).
    unsent: Option<(usize, usize)>,
}

/// Why a stream ended early.
enum Stop {
    /// The client went away.
    Gone,
    /// A failure of the body or the store, reported in the stream.
    Failed(ServerError),
}

/// `msg` with each "item N" / "items N and M" (positions in the batch)
/// said as the body's line numbers (`lines[N]`). Only the message's own
/// words: a quoted value (an external id `'batch item 0'`) is the client's
/// text and stays as sent, and so does "item" inside a word.
fn items_as_lines(msg: &str, lines: &[usize]) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(open) = rest.find(['\'', '"']) {
        let quote = &rest[open..open + 1];
        let Some(len) = rest[open + 1..].find(quote) else {
            break;
        };
        let close = open + 1 + len + 1;
        out.push_str(&unquoted_items_as_lines(&rest[..open], lines));
        out.push_str(&rest[open..close]);
        rest = &rest[close..];
    }
    out.push_str(&unquoted_items_as_lines(rest, lines));
    out
}

/// [`items_as_lines`] on text with no quoted value in it.
fn unquoted_items_as_lines(msg: &str, lines: &[usize]) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(at) = rest.find("item") {
        let before = out
            .chars()
            .last()
            .into_iter()
            .chain(rest[..at].chars().last())
            .last();
        out.push_str(&rest[..at]);
        let after = &rest[at + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '\'' || c == '"' || c == '_') {
            out.push_str("item");
            rest = after;
            continue;
        }
        let (plural, after) = match after.strip_prefix('s') {
            Some(a) => (true, a),
            None => (false, after),
        };
        let digits = |s: &str| -> Option<(usize, usize)> {
            let s2 = s.strip_prefix(' ')?;
            let n = s2.bytes().take_while(u8::is_ascii_digit).count();
            let v: usize = s2[..n].parse().ok()?;
            Some((1 + n, *lines.get(v)?))
        };
        match digits(after) {
            Some((len, first)) => {
                let mut tail = &after[len..];
                let mut said = format!("{} {first}", if plural { "lines" } else { "line" });
                if plural {
                    if let Some(and) = tail.strip_prefix(" and") {
                        if let Some((len2, second)) = digits(and) {
                            said.push_str(&format!(" and {second}"));
                            tail = &and[len2..];
                        }
                    }
                }
                out.push_str(&said);
                rest = tail;
            }
            None => {
                out.push_str("item");
                rest = &rest[at + 4..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn error_json(e: &ServerError) -> Value {
    json!({"code": e.code(), "message": e.public_message(), "details": e.details()})
}

impl Bulk {
    async fn run(mut self, body: Body) {
        let outcome = self.read_all(body).await;
        // A body that fails (cut off, idle, too large) leaves its last batch
        // unfinished: it is not appended (batches are atomic), and the
        // error line names its lines for a re-send. Earlier batches stand.
        let mut unstored = None;
        let failure = match outcome {
            Ok(()) => self.flush().await.err(),
            Err(Stop::Gone) => Some(Stop::Gone),
            Err(failed) => {
                let dropped = std::mem::take(&mut self.pending);
                let first = dropped.first().map(|p| p.line).or(self.cut_line);
                let last = self.cut_line.or(dropped.last().map(|p| p.line));
                if let (Some(first), Some(last)) = (first, last) {
                    unstored = Some((first, last));
                }
                Some(failed)
            }
        };
        // a batch the stream ended before appending is not stored either
        if let Some((from, to)) = self.unsent {
            unstored = Some(unstored.map_or((from, to), |(f, t)| (f.min(from), t.max(to))));
        }
        let unstored = unstored.map(|(from, to)| json!({"from_line": from, "to_line": to}));
        let complete = failure.is_none();
        match failure {
            Some(Stop::Gone) => return,
            Some(Stop::Failed(e)) => {
                let mut line = json!({"error": error_json(&e)});
                if let Some(u) = unstored {
                    line["not_stored"] = u;
                }
                let _ = self.send(line).await;
            }
            None => {}
        }
        let t = &self.totals;
        self.app.metrics.bulk_lines(t.lines);
        let _ = self
            .send(json!({"summary": {
                "lines": t.lines,
                "created": t.created,
                "duplicates": t.duplicates,
                "rejected": t.rejected,
                "batches": t.batches,
                "batches_rejected": t.batches_rejected,
                "complete": complete,
            }}))
            .await;
    }

    /// Reads the body line by line, flushing full batches.
    async fn read_all(&mut self, body: Body) -> Result<(), Stop> {
        let limits = self.app.cfg.limits.clone();
        let idle = Duration::from_millis(limits.body_idle_timeout_ms);
        let mut data = body.into_data_stream();
        let mut line: Vec<u8> = Vec::new();
        let mut overlong = false;
        let mut n_line = 0usize;
        let mut total_bytes = 0u64;
        loop {
            let chunk = match tokio::time::timeout(idle, data.next()).await {
                Err(_) => {
                    self.note_cut(n_line, &line, overlong);
                    return Err(Stop::Failed(ServerError::Timeout {
                        after_ms: limits.body_idle_timeout_ms,
                        idle: true,
                    }));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    self.note_cut(n_line, &line, overlong);
                    return Err(match crate::http::body::body_read_error(&e) {
                        // (nobody reads an error line)
                        ServerError::ClientClosed => Stop::Gone,
                        other => Stop::Failed(other),
                    });
                }
                Ok(Some(Ok(b))) => b,
            };
            total_bytes += chunk.len() as u64;
            if total_bytes > limits.bulk_body_bytes_max {
                // the chunk that crossed the limit is not read: the line
                // after the last whole one was (at least partly) in it
                self.cut_line = Some(n_line + 1);
                return Err(Stop::Failed(ServerError::TooLarge {
                    limit_bytes: limits.bulk_body_bytes_max,
                }));
            }
            let mut rest: &[u8] = &chunk;
            while !rest.is_empty() {
                let (part, ended) = match rest.iter().position(|&b| b == b'\n') {
                    Some(i) => (&rest[..i], true),
                    None => (rest, false),
                };
                rest = if ended { &rest[part.len() + 1..] } else { &[] };
                if !overlong {
                    if line.len() + part.len() > limits.bulk_line_bytes_max {
                        overlong = true;
                        line = Vec::new();
                    } else {
                        line.extend_from_slice(part);
                    }
                }
                if ended {
                    n_line += 1;
                    self.take_line(n_line, &line, overlong).await?;
                    line.clear();
                    overlong = false;
                }
            }
        }
        if !line.is_empty() || overlong {
            n_line += 1;
            self.take_line(n_line, &line, overlong).await?;
        }
        Ok(())
    }

    /// Notes the line the body broke off inside (after `n_line` whole
    /// lines), if part of one was read.
    fn note_cut(&mut self, n_line: usize, line: &[u8], overlong: bool) {
        if !line.is_empty() || overlong {
            self.cut_line = Some(n_line + 1);
        }
    }

    /// Parses one line into the pending batch; flushes a full batch.
    async fn take_line(&mut self, n: usize, bytes: &[u8], overlong: bool) -> Result<(), Stop> {
        let limit = self.app.cfg.limits.bulk_line_bytes_max;
        let record = if overlong {
            Err(ServerError::Invalid {
                code: "limit_exceeded",
                message: format!("line {n}: longer than the limit of {limit} bytes"),
                details: json!({"line": n, "what": "line length in bytes", "limit": limit}),
            })
        } else {
            // Invalid UTF-8 is named as in a whole body, on the body's line.
            let text = match crate::http::body::utf8(bytes) {
                Ok(t) => t,
                Err(ServerError::BadJson { column, reason, .. }) => {
                    let e = ServerError::BadJson {
                        item: None,
                        line: n,
                        column,
                        reason,
                    };
                    return self.push(n, bytes.len(), Err(e)).await;
                }
                Err(e) => return self.push(n, bytes.len(), Err(e)).await,
            };
            // a byte-order mark opening the body is taken as `engram
            // ingest` takes it in a file: skipped
            let text = if n == 1 {
                text.strip_prefix('\u{feff}').unwrap_or(text)
            } else {
                text
            };
            let t = text.trim();
            if engram_query::ingest::is_skipped_line(t) {
                return Ok(());
            }
            parse_line(t, n)
        };
        self.push(n, bytes.len(), record).await
    }

    /// Adds a line (`bytes` long) to the pending batch; flushes the batch
    /// first when the line would take its lines past
    /// `limits.body_bytes_max` bytes, and after it once the batch holds
    /// `batch` lines: a batch never holds more bytes of lines than one
    /// append request's body may (a batch of 10,000 lines of 4 MiB held
    /// 40 GiB), but for a single line (at most `bulk_line_bytes_max`).
    async fn push(
        &mut self,
        line: usize,
        bytes: usize,
        record: Result<NewRecord, ServerError>,
    ) -> Result<(), Stop> {
        if !self.pending.is_empty()
            && self.pending_bytes + bytes as u64 > self.app.cfg.limits.body_bytes_max
        {
            self.flush().await?;
        }
        self.totals.lines += 1;
        self.pending.push(Pending { line, record });
        self.pending_bytes += bytes as u64;
        if self.pending.len() >= self.batch {
            self.flush().await?;
        }
        Ok(())
    }

    /// Appends the pending batch and streams its result lines.
    async fn flush(&mut self) -> Result<(), Stop> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let first = pending[0].line;
        let bad = pending.iter().find(|p| p.record.is_err()).map(|p| p.line);
        let mut out = String::new();
        if let Some(bad) = bad {
            let rows = pending
                .into_iter()
                .map(|p| (p.line, p.record.err().map(|e| error_json(&e))))
                .collect();
            self.reject(rows, bad, &mut out);
            return self.send_text(out).await;
        }
        let lines: Vec<usize> = pending.iter().map(|p| p.line).collect();
        let records: Vec<NewRecord> = pending.into_iter().filter_map(|p| p.record.ok()).collect();
        let n = records.len();
        let range = (first, lines.last().copied().unwrap_or(first));
        // a full writer queue makes the stream wait (backpressure) rather
        // than fail half-way; an online compaction ends it (429 `busy`)
        let permit = match self.app.bulk_write_slot().await {
            Ok(p) => p,
            Err(e) => {
                self.unsent = Some(range);
                return Err(Stop::Failed(e));
            }
        };
        // the key as it stands now (a key's grant never changes: only
        // revocation ends it)
        if let Err(e) = crate::http::auth::authenticate_key(&self.app, &self.key) {
            self.unsent = Some(range);
            return Err(Stop::Failed(e));
        }
        let session = match self.caller.session(&self.app, Operation::Append).await {
            Ok(s) => s,
            Err(e) => {
                self.unsent = Some(range);
                return Err(Stop::Failed(e));
            }
        };
        let started = Instant::now();
        let r = run_blocking(move || {
            let r = session.append(records);
            drop(permit);
            Ok(r)
        })
        .await;
        let r = match r {
            Ok(r) => r,
            Err(e) => return Err(Stop::Failed(e)),
        };
        match r {
            Ok(results) => {
                self.app.metrics.append(n, started.elapsed().as_secs_f64());
                self.totals.batches += 1;
                for (line, res) in lines.iter().zip(results) {
                    match res.outcome {
                        AppendOutcome::Created => self.totals.created += 1,
                        AppendOutcome::Duplicate => self.totals.duplicates += 1,
                    }
                    let mut result = json!({
                        "line": line,
                        "id": res.id.to_string(),
                        "external_id": res.external_id,
                        "outcome": match res.outcome {
                            AppendOutcome::Created => "created",
                            AppendOutcome::Duplicate => "duplicate",
                        },
                        "status": res.status.name(),
                        "lsn": res.lsn,
                    });
                    if !res.notes.is_empty() {
                        result["notes"] = json!(res.notes);
                    }
                    push_json(&mut out, &result);
                }
                self.send_text(out).await
            }
            Err(e) => {
                let fatal = matches!(
                    e,
                    EngineError::Storage(_) | EngineError::Closed | EngineError::Background { .. }
                );
                let at = e.item().and_then(|i| lines.get(i).copied());
                let err = ServerError::from(e);
                if fatal {
                    return Err(Stop::Failed(err));
                }
                // The engine counts items of the batch; the caller sent lines.
                let mut own = error_json(&err);
                if let Some(m) = own["message"].as_str() {
                    own["message"] = Value::String(items_as_lines(m, &lines));
                }
                // (and its details name the body's line, as a line's parse
                // error does, not the position in the batch)
                if let Some(d) = own["details"].as_object_mut()
                    && let Some(i) = d.remove("item")
                {
                    let line = i.as_u64().and_then(|i| lines.get(i as usize).copied());
                    d.insert("line".into(), json!(line));
                }
                let rows = lines
                    .iter()
                    .map(|&l| (l, (at.is_none() || at == Some(l)).then(|| own.clone())))
                    .collect();
                self.reject(rows, at.unwrap_or(first), &mut out);
                self.send_text(out).await
            }
        }
    }

    /// Writes the result lines of a rejected batch: `rows` are (line, its
    /// own error); lines without one answer `batch_rejected`, naming the
    /// `culprit` line.
    fn reject(&mut self, rows: Vec<(usize, Option<Value>)>, culprit: usize, out: &mut String) {
        let first = rows.first().map_or(0, |r| r.0);
        let last = rows.last().map_or(0, |r| r.0);
        self.totals.batches_rejected += 1;
        self.totals.rejected += rows.len() as u64;
        for (line, own) in rows {
            let error = own.unwrap_or_else(|| {
                json!({
                    "code": "batch_rejected",
                    "message": format!(
                        "the batch of lines {first}..={last} was rejected because of line {culprit}; nothing of it was stored"
                    ),
                    "details": {"culprit_line": culprit, "first_line": first, "last_line": last},
                })
            });
            push_json(out, &json!({"line": line, "error": error}));
        }
    }

    async fn send(&self, v: Value) -> Result<(), Stop> {
        let mut s = String::new();
        push_json(&mut s, &v);
        self.send_text(s).await
    }

    async fn send_text(&self, s: String) -> Result<(), Stop> {
        let idle = Duration::from_millis(self.app.cfg.limits.body_idle_timeout_ms);
        match tokio::time::timeout(idle, self.tx.send(Bytes::from(s))).await {
            Ok(Ok(())) => Ok(()),
            // the client closed the response, or stopped reading it
            _ => Err(Stop::Gone),
        }
    }
}

fn push_json(out: &mut String, v: &Value) {
    out.push_str(&v.to_string());
    out.push('\n');
}

/// One NDJSON line: a record without tenant or principal.
fn parse_line(text: &str, n: usize) -> Result<NewRecord, ServerError> {
    super::records::parse_record_at(text, None, Some(n))
}

#[cfg(test)]
mod tests {
    use super::items_as_lines;

    #[test]
    fn batch_items_are_said_as_the_body_s_lines() {
        let lines = [1, 2, 4];
        assert_eq!(
            items_as_lines(
                "item 2: invalid external_id: 'd' appears twice in the batch (items 0 and 2) and item 2 does not supersede it",
                &lines
            ),
            "line 4: invalid external_id: 'd' appears twice in the batch (lines 1 and 4) and line 4 does not supersede it"
        );
        // no position, or one past the batch: left as it is
        assert_eq!(
            items_as_lines("an itemized note", &lines),
            "an itemized note"
        );
        assert_eq!(items_as_lines("item 9: x", &lines), "item 9: x");
        // a value the client wrote, quoted in the message, stays as sent
        assert_eq!(
            items_as_lines(
                "item 1: external id 'item 0' and \"item 2\" (item 2)",
                &lines
            ),
            "line 2: external id 'item 0' and \"item 2\" (line 4)"
        );
        assert_eq!(items_as_lines("subitem 1", &lines), "subitem 1");
        assert_eq!(
            items_as_lines("item 1: id 'batch item 0' (items 0 and 2)", &lines),
            "line 2: id 'batch item 0' (lines 1 and 4)"
        );
        // an unclosed quote quotes nothing
        assert_eq!(
            items_as_lines("item 1: it's (item 2)", &lines),
            "line 2: it's (line 4)"
        );
    }
}
