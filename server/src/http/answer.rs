//! Answers held in memory until their client has read them.
//!
//! An answer is built whole (a JSON body) before its first byte is sent,
//! and stays in memory until the client has read it. The read queue
//! bounds the work of building answers, not the memory of answers waiting
//! for their clients: forty connections asking for a page of a thousand
//! large records each, and never reading, would hold gigabytes. Two
//! bounds close that:
//!
//! - [`hold`]: every answer of at least [`ANSWER_HOLD_MIN_BYTES`] takes
//!   its size from `answer_bytes_in_flight_max` (in KiB) until its body
//!   is dropped (sent, or its connection closed). Taken at once or not
//!   at all: a read's answer that finds no room is dropped and answered
//!   `429 busy` with `Retry-After` (waiting for room would hold it in
//!   memory outside the bound); a write's is sent unheld (it says what
//!   was stored), bounded by the write queue.
//! - [`WriteStall`]: a connection whose client reads nothing of its
//!   answer for `write_stall_timeout_ms` is closed, so an answer nobody
//!   reads gives its room back.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;

use super::app::Shared;
use super::error::ServerError;

/// Answers smaller than this (64 KiB) take no room: the connection caps
/// bound them (1,024 connections of 64 KiB are 64 MiB).
pub const ANSWER_HOLD_MIN_BYTES: u64 = 64 << 10;

/// Whether the answer of `method` on `route` may be dropped for want of
/// room: a read's (asked again, it answers the same). A write's answer is
/// never dropped (it says what was stored: a client told to retry would
/// store again what has no external id): without room it is sent unheld,
/// its memory bounded by the write queue.
pub fn refusable(method: &str, route: &str) -> bool {
    method == "GET"
        || matches!(
            route,
            "/v1/recall" | "/v1/query" | "/v1/context" | "/v1/eval"
        )
}

/// `resp` holding its share of the room for answers until its body is
/// dropped; when the room is full, `429 busy` for a read (the answer
/// dropped: see [`refusable`]), the answer unheld for a write. A body of
/// unknown size (a bulk ingest's streamed report) is not held.
pub fn hold(app: &Shared, resp: Response, refusable: bool) -> Response {
    let Some(bytes) = resp.body().size_hint().exact() else {
        return resp;
    };
    if bytes < ANSWER_HOLD_MIN_BYTES {
        return resp;
    }
    match app.hold_answer(bytes) {
        Some(permit) => resp.map(|body| {
            Body::new(Held {
                body,
                pending: Bytes::new(),
                _permit: permit,
            })
        }),
        None if !refusable => resp,
        None => {
            app.metrics.throttled("answer_bytes");
            ServerError::Busy {
                what: "answer_bytes",
                retry_after_s: 1,
            }
            .into_response()
        }
    }
}

/// Bytes of one frame of a held answer: the connection takes the next
/// only once it has written most of the last, so the answer (and its
/// room) is held until its client has read it, not only until the
/// connection has taken it whole into its buffer.
const HELD_FRAME_BYTES: usize = 64 << 10;

/// A body holding its room for answers (see [`hold`]), handed out in
/// frames of [`HELD_FRAME_BYTES`].
struct Held {
    body: Body,
    /// What the body gave and the connection has not taken yet.
    pending: Bytes,
    _permit: OwnedSemaphorePermit,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(HELD_FRAME_BYTES);
                let part = self.pending.split_to(n);
                return Poll::Ready(Some(Ok(Frame::data(part))));
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(other) => return Poll::Ready(Some(Ok(other))),
                },
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.body.size_hint();
        let pending = self.pending.len() as u64;
        hint.set_lower(hint.lower() + pending);
        if let Some(u) = hint.upper() {
            hint.set_upper(u + pending);
        }
        hint
    }
}

/// A connection that fails a write (and so is closed) once its client
/// has taken nothing for `limit`: a write that cannot go on (the client's
/// window is full) starts the clock, any progress stops it.
#[derive(Debug)]
pub struct WriteStall<S> {
    inner: S,
    limit: Duration,
    since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteStall<S> {
    /// `inner`, closed after `limit` without a byte taken by its client.
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteStall {
            inner,
            limit,
            since: None,
        }
    }

    /// After a write that could not go on: pending until `limit` has
    /// passed since the first of them, then the error that ends the
    /// connection.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let clock = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of its answer for {} ms (write_stall_timeout_ms)",
                    limit.as_millis()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write's outcome: progress (or an error) stops the clock.
    fn went<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(r) => {
                self.since = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.went(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.went(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.went(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.went(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A peer that reads nothing: writes stop once the pipe is full, and
    /// the stalled write fails after the limit; a peer that reads keeps
    /// the writer going past it.
    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_reads_fails_after_the_limit() {
        let (near, mut far) = tokio::io::duplex(1024);
        let mut w = WriteStall::new(near, Duration::from_secs(30));
        let chunk = vec![7u8; 4096];
        let e = w.write_all(&chunk).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("write_stall_timeout_ms"), "{e}");

        let (near, mut far2) = tokio::io::duplex(1024);
        let mut w = WriteStall::new(near, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            loop {
                // slower than the limit in all, each read well within it
                tokio::time::sleep(Duration::from_secs(10)).await;
                match far2.read(&mut buf).await.unwrap() {
                    0 => break got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        w.write_all(&chunk).await.unwrap();
        w.shutdown().await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), chunk);
        // (the first peer's end, kept open so its pipe stayed full)
        let mut rest = [0u8; 8];
        assert!(far.read(&mut rest).await.unwrap() > 0);
    }
}
