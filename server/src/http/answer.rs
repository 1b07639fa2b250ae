//! Answers held in memory until their client has read them.
//!
//! An answer is built whole (a JSON body) before its first byte is sent,
//! and stays in memory until the client has read it. The read queue
//! bounds the work of building answers, not the memory of answers waiting
//! for their clients: forty connections asking for a page of a thousand
//! large records each, and never reading, would hold gigabytes. So:
//!
//! - [`AnswerRoom`]: every answer of at least [`ANSWER_HOLD_MIN_BYTES`]
//!   takes its size from `answer_bytes_in_flight_max` until its body is
//!   dropped (its last frame taken by the connection, or the connection
//!   closed), a client address at most a quarter of it. A read's answer
//!   finds room or is dropped and answered `429 busy` (waiting for room
//!   would hold it in memory outside the bound). A write's answer is
//!   never dropped (it says what was stored: a client told to retry would
//!   store again what has no external id): it is counted even past the
//!   room, and a write is refused before it runs while the room (or its
//!   client's share) is used up, so write answers too stay bounded.
//! - `Held` hands an answer to the connection in frames copied out of
//!   it, so the answer's memory is given back as its room is, not pinned
//!   by the last frame in the connection's buffer.
//! - [`WriteStall`]: a connection whose client takes less than
//!   [`STALL_MIN_BYTES`] of its answer in `write_stall_timeout_ms` is
//!   closed, so an answer nobody reads (or reads a few bytes at a time)
//!   gives its room back.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::app::Shared;
use super::error::ServerError;

/// Answers smaller than this (64 KiB) take no room: the connection caps
/// bound them (1,024 connections of 64 KiB are 64 MiB).
pub const ANSWER_HOLD_MIN_BYTES: u64 = 64 << 10;

/// The client address a request came from (set per connection by
/// `serve`): what a client's share of the room is counted by.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub IpAddr);

/// The room for answers waiting for their clients, in KiB: a total, and a
/// quarter of it per client address.
#[derive(Debug)]
pub struct AnswerRoom {
    total_kib: usize,
    per_client_kib: usize,
    used: parking_lot::Mutex<Used>,
}

#[derive(Debug, Default)]
struct Used {
    kib: usize,
    by_client: HashMap<IpAddr, usize>,
}

impl AnswerRoom {
    /// Room for `bytes` of answers (at least 1 KiB).
    pub fn new(bytes: u64) -> AnswerRoom {
        let total_kib = usize::try_from(bytes.div_ceil(1024))
            .unwrap_or(usize::MAX)
            .max(1);
        AnswerRoom {
            total_kib,
            per_client_kib: (total_kib / 4).max(1),
            used: parking_lot::Mutex::default(),
        }
    }

    /// Whether a write from `client` may run: room is left, in all and in
    /// the client's share (its answer will be counted, whatever its size).
    pub fn open_for_write(&self, client: Option<IpAddr>) -> bool {
        let u = self.used.lock();
        u.kib < self.total_kib
            && client
                .is_none_or(|c| u.by_client.get(&c).copied().unwrap_or(0) < self.per_client_kib)
    }

    /// Takes room for an answer of `bytes` to `client`: for a read
    /// (`force` false) only if it fits, in all and in the client's share
    /// (an answer larger than either fits only when nothing else is held
    /// there); for a write (`force`) always, counted past the room.
    pub fn take(
        self: &Arc<Self>,
        client: Option<IpAddr>,
        bytes: u64,
        force: bool,
    ) -> Option<Share> {
        let kib = usize::try_from(bytes.div_ceil(1024)).unwrap_or(usize::MAX);
        let mut u = self.used.lock();
        let mine = client.map_or(0, |c| u.by_client.get(&c).copied().unwrap_or(0));
        let fits = |used: usize, cap: usize| used.saturating_add(kib) <= cap || used == 0;
        let room = fits(u.kib, self.total_kib) && fits(mine, self.per_client_kib);
        if !(force || room) {
            return None;
        }
        u.kib = u.kib.saturating_add(kib);
        if let Some(c) = client {
            *u.by_client.entry(c).or_default() += kib;
        }
        Some(Share {
            room: self.clone(),
            client,
            kib,
        })
    }

    /// KiB held now, in all.
    pub fn used_kib(&self) -> usize {
        self.used.lock().kib
    }
}

/// One answer's room, given back when dropped.
#[derive(Debug)]
pub struct Share {
    room: Arc<AnswerRoom>,
    client: Option<IpAddr>,
    kib: usize,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut u = self.room.used.lock();
        u.kib = u.kib.saturating_sub(self.kib);
        if let Some(c) = self.client {
            if let Some(n) = u.by_client.get_mut(&c) {
                *n = n.saturating_sub(self.kib);
                if *n == 0 {
                    u.by_client.remove(&c);
                }
            }
        }
    }
}

/// Whether the answer of `method` on `route` may be dropped for want of
/// room: a read's (asked again, it answers the same). Every other route
/// writes: its answer is never dropped, and the write is refused before
/// it runs while no room is left ([`AnswerRoom::open_for_write`]).
pub fn refusable(method: &str, route: &str) -> bool {
    method == "GET"
        || matches!(
            route,
            "/v1/recall" | "/v1/query" | "/v1/context" | "/v1/eval"
        )
}

/// The `429 busy` of a request that finds no room for answers.
pub fn busy(app: &Shared) -> Response {
    app.metrics.throttled("answer_bytes");
    ServerError::Busy {
        what: "answer_bytes",
        retry_after_s: 1,
    }
    .into_response()
}

/// `resp` holding its share of the room for answers until its body is
/// dropped; `429 busy` for a read that finds no room (see [`refusable`]).
/// A body of unknown size (a bulk ingest's streamed report) is not held.
pub fn hold(app: &Shared, resp: Response, client: Option<IpAddr>, refusable: bool) -> Response {
    let Some(bytes) = resp.body().size_hint().exact() else {
        return resp;
    };
    if bytes < ANSWER_HOLD_MIN_BYTES {
        return resp;
    }
    match app.answers.take(client, bytes, !refusable) {
        Some(share) => resp.map(|body| {
            Body::new(Held {
                body,
                pending: Bytes::new(),
                _share: share,
            })
        }),
        None => busy(app),
    }
}

/// Bytes of one frame of a held answer, copied out of it: the connection
/// buffers a few hundred KiB at most before it writes, so the answer is
/// held (and its room taken) until nearly all of it has been written.
const HELD_FRAME_BYTES: usize = 64 << 10;

/// A body holding its room for answers (see [`hold`]), handed out in
/// frames of [`HELD_FRAME_BYTES`] copied out of it (a frame sliced out of
/// it would keep the whole answer in memory until the last was written).
struct Held {
    body: Body,
    /// What the body gave and the connection has not taken yet.
    pending: Bytes,
    _share: Share,
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
                let part = Bytes::copy_from_slice(&self.pending[..n]);
                if n == self.pending.len() {
                    // (the answer's memory goes with its last frame)
                    self.pending = Bytes::new();
                } else {
                    let _ = self.pending.split_to(n);
                }
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
        // (upper first: a lower bound above the upper one panics)
        if let Some(u) = hint.upper() {
            hint.set_upper(u + pending);
        }
        hint.set_lower(hint.lower() + pending);
        hint
    }
}

/// Bytes a client must take of its answer in each `write_stall_timeout_ms`
/// while the answer waits for it (1 MiB: about 17 KiB/s over the default
/// 60 s; the kernel wakes a writer only once a good part of its socket's
/// buffer is free, so a client must read somewhat faster still): a client
/// reading a few bytes now and then would otherwise hold its answer, and
/// its room, for hours.
pub const STALL_MIN_BYTES: u64 = 1 << 20;

/// A connection that fails a write (and so is closed) once its client has
/// taken less than [`STALL_MIN_BYTES`] in `limit` while the server had
/// more to send. The clock starts at a write that cannot go on (the
/// client's window is full) and stops once everything buffered has been
/// written (a flush that completes): an idle connection, or a client that
/// keeps up, is never timed.
#[derive(Debug)]
pub struct WriteStall<S> {
    inner: S,
    limit: Duration,
    /// Since the first write that could not go on: the deadline of this
    /// window, and the bytes written in it.
    clock: Option<(Pin<Box<tokio::time::Sleep>>, u64)>,
}

impl<S> WriteStall<S> {
    /// `inner`, closed after `limit` without [`STALL_MIN_BYTES`] taken.
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteStall {
            inner,
            limit,
            clock: None,
        }
    }

    /// After a write that could not go on: pending, with the clock
    /// running; at the end of a window, the error that ends the
    /// connection if the client took too little in it, else a new window.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        loop {
            let (deadline, taken) = self
                .clock
                .get_or_insert_with(|| (Box::pin(tokio::time::sleep(limit)), 0));
            match deadline.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if *taken >= STALL_MIN_BYTES => self.clock = None,
                Poll::Ready(()) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "the client took {taken} bytes of its answer in {} ms, under {STALL_MIN_BYTES} (write_stall_timeout_ms)",
                            limit.as_millis()
                        ),
                    )));
                }
            }
        }
    }

    /// A write's outcome: bytes written count in the window.
    fn wrote(
        &mut self,
        r: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if let Some((_, taken)) = &mut self.clock {
                    *taken += n as u64;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.stalled(cx),
        }
    }

    /// A flush's or a shutdown's outcome: done, everything is written
    /// and the clock stops.
    fn flushed(&mut self, r: Poll<io::Result<()>>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match r {
            Poll::Ready(r) => {
                self.clock = None;
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
        this.wrote(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.flushed(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.flushed(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client taking `chunk` bytes every 10 s of what is written to it
    /// (paused clock), until the writer is done; what it got.
    fn reader(mut far: tokio::io::DuplexStream, chunk: usize) -> tokio::task::JoinHandle<Vec<u8>> {
        tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = vec![0u8; chunk];
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                match far.read(&mut buf).await {
                    Ok(0) | Err(_) => break got,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
    }

    /// Nobody reading, or a client taking a few bytes now and then: the
    /// write fails after the limit; a client taking its answer slowly but
    /// above the floor gets all of it, over many limits' time.
    #[tokio::test(start_paused = true)]
    async fn a_write_its_client_does_not_take_fails_after_the_limit() {
        let answer = vec![7u8; 4 << 20];
        let limit = Duration::from_secs(30);

        let (near, _far) = tokio::io::duplex(64 << 10);
        let mut w = WriteStall::new(near, limit);
        let e = w.write_all(&answer).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("write_stall_timeout_ms"), "{e}");

        let (near, far) = tokio::io::duplex(64 << 10);
        let drip = reader(far, 1024);
        let mut w = WriteStall::new(near, limit);
        let started = tokio::time::Instant::now();
        assert!(w.write_all(&answer).await.is_err());
        assert!(started.elapsed() >= limit);
        drop(w);
        assert!(drip.await.unwrap().len() < answer.len());

        let (near, far) = tokio::io::duplex(1 << 20);
        let steady = reader(far, 512 << 10);
        let mut w = WriteStall::new(near, limit);
        let started = tokio::time::Instant::now();
        w.write_all(&answer).await.unwrap();
        w.shutdown().await.unwrap();
        assert!(started.elapsed() > limit, "{:?}", started.elapsed());
        drop(w);
        assert_eq!(steady.await.unwrap(), answer);
    }

    /// Room for reads only when it fits, in all and per client; writes
    /// always, counted; given back when dropped.
    #[test]
    fn the_room_bounds_reads_and_counts_writes() {
        let room = Arc::new(AnswerRoom::new(4 << 20));
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        // a client's share is a quarter
        let first = room.take(Some(a), 1 << 20, false).unwrap();
        assert!(room.take(Some(a), 1, false).is_none());
        assert!(!room.open_for_write(Some(a)));
        assert!(room.open_for_write(Some(b)));
        // a write is counted even past the share
        let forced = room.take(Some(a), 1 << 20, true).unwrap();
        assert_eq!(room.used_kib(), 2048);
        let others: Vec<Share> = (0..2)
            .map(|_| {
                room.take(Some(b), 1 << 20, false)
                    .unwrap_or_else(|| room.take(None, 1 << 20, false).unwrap())
            })
            .collect();
        assert_eq!(room.used_kib(), 4096);
        assert!(room.take(None, 1, false).is_none());
        assert!(!room.open_for_write(None));
        drop((first, forced, others));
        assert_eq!(room.used_kib(), 0);
        // an answer larger than the whole room fits an empty room only
        let all = room.take(None, 64 << 20, false).unwrap();
        assert!(room.take(None, 64 << 10, false).is_none());
        drop(all);
        assert!(room.take(None, 64 << 10, false).is_some());
    }
}
