//! Connections: the accept loop with a connection cap, per-connection deadlines (request head,
//! idle keep-alive), and graceful shutdown with a grace period.
//!
//! hyper's own header timeout also runs while a kept-alive connection waits for its next
//! request, so it cannot tell "slow head" from "idle between requests"; the deadlines here are
//! kept by a small wrapper around the socket that knows whether a request is in flight (then no
//! read deadline applies: an SSE stream may stay open for hours).

use crate::config::HttpSettings;
use axum::body::{Body, Bytes};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// What one connection is doing, shared by its socket wrapper and its requests.
struct Track {
    /// Requests whose response has not been fully handed to hyper yet.
    active: AtomicUsize,
    times: Mutex<Times>,
}

struct Times {
    /// Since when the connection has had nothing to do (accept, or the end of a response).
    idle_since: Instant,
    /// No request has been seen yet: the first head is due within the header timeout.
    fresh: bool,
    /// When the first byte of the next request head arrived.
    head_started: Option<Instant>,
}

impl Track {
    fn new() -> Self {
        Track {
            active: AtomicUsize::new(0),
            times: Mutex::new(Times {
                idle_since: Instant::now(),
                fresh: true,
                head_started: None,
            }),
        }
    }

    fn begin(self: &Arc<Self>) -> Active {
        self.active.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut t) = self.times.lock() {
            t.fresh = false;
            t.head_started = None;
        }
        Active(self.clone())
    }

    fn saw_bytes(&self) {
        if self.active.load(Ordering::SeqCst) == 0 {
            if let Ok(mut t) = self.times.lock() {
                t.head_started.get_or_insert_with(Instant::now);
            }
        }
    }

    /// When a read that finds nothing must give up; `None` while a request is in flight.
    fn deadline(&self, header: Duration, idle: Duration) -> Option<Instant> {
        if self.active.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let t = self.times.lock().ok()?;
        Some(match t.head_started {
            Some(start) => start + header,
            None if t.fresh => t.idle_since + header,
            None => t.idle_since + idle,
        })
    }
}

/// Held by a response body until hyper has taken all of it.
struct Active(Arc<Track>);

impl Drop for Active {
    fn drop(&mut self) {
        if let Ok(mut t) = self.0.times.lock() {
            t.idle_since = Instant::now();
        }
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that marks its request finished when dropped.
struct Tracked {
    inner: Body,
    _active: Active,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that records when it was read to its end.
struct Consumed {
    inner: Incoming,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl http_body::Body for Consumed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.done.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The socket with read deadlines.
struct Deadlines {
    inner: TcpStream,
    track: Arc<Track>,
    header: Duration,
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    /// A write that cannot progress (a client that never reads) gives up after the idle
    /// timeout, so it does not hold a connection slot forever.
    write_sleep: Pin<Box<Sleep>>,
    write_armed: bool,
}

impl Deadlines {
    fn write_progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.write_armed = false;
            return r;
        }
        if !self.write_armed {
            self.write_sleep.as_mut().reset(Instant::now() + self.idle);
            self.write_armed = true;
        }
        match self.write_sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read the answer",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Deadlines {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.track.saw_bytes();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some(due) = this.track.deadline(this.header, this.idle) else {
                    return Poll::Pending;
                };
                if this.armed != Some(due) {
                    this.sleep.as_mut().reset(due);
                    this.armed = Some(due);
                }
                match this.sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "request head or keep-alive deadline passed",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncWrite for Deadlines {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.write_progress(cx, r)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.write_progress(cx, r)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.write_progress(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A closing connection reads (and drops) what the client still sends until the client closes,
/// gives up after `LINGER_IDLE` without a byte, and stops anyway after `LINGER_TIME` or
/// `LINGER_BYTES`, so a client that never stops sending cannot hold a connection slot.
const LINGER_IDLE: Duration = Duration::from_secs(2);
const LINGER_TIME: Duration = Duration::from_secs(10);
const LINGER_BYTES: usize = 16 << 20;

async fn serve_one(
    stream: TcpStream,
    app: axum::Router,
    http: HttpSettings,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().ok().map(|a| Peer(a.ip()));
    let track = Arc::new(Track::new());
    let header = Duration::from_secs(http.header_timeout_secs);
    let raw = Deadlines {
        inner: stream,
        track: track.clone(),
        header,
        idle: Duration::from_secs(http.idle_timeout_secs),
        sleep: Box::pin(tokio::time::sleep(Duration::from_secs(0))),
        armed: None,
        write_sleep: Box::pin(tokio::time::sleep(Duration::from_secs(0))),
        write_armed: false,
    };
    let Some(tls) = &http.tls else {
        let raw = serve_io(raw, peer, track, app, stop).await;
        linger(raw.inner).await;
        return;
    };
    // The handshake runs under the request-head deadline (and the socket's own read deadline,
    // which starts at accept): a client that is slow to handshake, or sends plain HTTP, frees
    // its connection slot as one slow to send its head would.
    let mut tls = match tokio::time::timeout(header, tls.acceptor.accept(raw)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(event = "tls_handshake_failed", error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    tls = serve_io(tls, peer, track, app, stop).await;
    // close_notify, then the TCP write side; what the client still sends is drained below.
    let _ = tokio::time::timeout(LINGER_IDLE, tls.shutdown()).await;
    let (raw, _) = tls.into_inner();
    drain(raw.inner).await;
}

/// The address a request came from, put in its extensions (the failed-token limit counts by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Peer(pub(crate) std::net::IpAddr);

/// Serves HTTP/1.1 on one connection (plain or TLS) until it ends, and hands the socket back.
async fn serve_io<S>(
    io: S,
    peer: Option<Peer>,
    track: Arc<Track>,
    app: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> S
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let (app, track) = (app.clone(), track.clone());
        // Boxed so the connection can be polled without its shutdown (which needs an `Unpin`
        // future) and hand the socket back for `linger`.
        Box::pin(async move {
            let active = track.begin();
            // An answer given before the request's body was read to its end (an early 401, 403,
            // 404 or 413) ends the connection: hyper cannot reuse it, and without saying so a
            // client would send its next request on it and read an unexpected end of stream.
            let done = Arc::new(std::sync::atomic::AtomicBool::new(
                http_body::Body::is_end_stream(req.body()),
            ));
            let mut req = req.map(|inner| {
                Body::new(Consumed {
                    inner,
                    done: done.clone(),
                })
            });
            if let Some(p) = peer {
                req.extensions_mut().insert(p);
            }
            let mut resp = match app.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            if !done.load(Ordering::Relaxed) {
                resp.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, Infallible>(resp.map(|inner| {
                Body::new(Tracked {
                    inner,
                    _active: active,
                })
            }))
        })
    });
    let mut conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, svc);
    let stop_signal = stop.wait_for(|s| *s);
    tokio::pin!(stop_signal);
    let mut stopping = false;
    // The outcome does not matter here: a connection error ends the connection like a close.
    let _ = std::future::poll_fn(|cx| {
        if !stopping && stop_signal.as_mut().poll(cx).is_ready() {
            stopping = true;
            Pin::new(&mut conn).graceful_shutdown();
        }
        conn.poll_without_shutdown(cx)
    })
    .await;
    // Bytes hyper read past the last request are dropped with it.
    conn.into_parts().io.into_inner()
}

/// Closes a connection without destroying the answer just written. An early 401/403/404/413 is
/// answered before the body is read, with the body still on its way; a socket closed with
/// unread input makes the kernel send a reset instead of an orderly end, which drops any part of
/// the answer not yet sent and fails the client's write of the rest of its request (a client
/// that writes its whole request before reading then never reads the answer). So: shut the write side (the client sees the whole answer and
/// its end), read and drop whatever still comes until the client closes (within the bounds
/// above), then close. A client that closed first costs one read that returns at once.
async fn linger(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    drain(stream).await;
}

/// The reading half of [`linger`], once the write side is shut.
async fn drain(mut stream: TcpStream) {
    let until = Instant::now() + LINGER_TIME;
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = LINGER_BYTES;
    while left > 0 {
        let due = until.min(Instant::now() + LINGER_IDLE);
        match tokio::time::timeout_at(due, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            // End of input, an error, or the time is up.
            _ => return,
        }
    }
}

/// Accepts until `shutdown` resolves (or `fatal` yields a message), at most
/// `max_connections` at a time, then lets the open connections finish for up to the grace
/// period. `stopping` is set when shutdown begins (SSE streams end with a final event on it).
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    http: HttpSettings,
    stopping: watch::Sender<bool>,
    shutdown: impl Future<Output = ()>,
    fatal: impl Future<Output = Option<String>>,
) -> Option<String> {
    let permits = Arc::new(Semaphore::new(http.max_connections));
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    tokio::pin!(fatal);
    let mut fatal_done = false;
    let mut fatal_msg = None;
    loop {
        // A slot first, then accept: over the cap, new connections wait in the kernel's backlog
        // until a slot frees (the deadlines above free slots held by idle or slow clients).
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            m = &mut fatal, if !fatal_done => {
                fatal_done = true;
                if m.is_some() { fatal_msg = m; break; }
                continue;
            }
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            m = &mut fatal, if !fatal_done => {
                fatal_done = true;
                if m.is_some() { fatal_msg = m; break; }
                continue;
            }
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let (app, http, stop) = (app.clone(), http.clone(), stopping.subscribe());
                conns.spawn(async move {
                    serve_one(stream, app, http, stop).await;
                    drop(permit);
                });
            }
            Err(e) => {
                // Out of descriptors or a transient error: back off instead of spinning.
                tracing::warn!(event = "accept_failed", error = %e, "accept failed; retrying in 100 ms");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = stopping.send(true);
    while conns.try_join_next().is_some() {}
    let grace = Duration::from_secs(http.shutdown_grace_secs);
    if !conns.is_empty() {
        tracing::info!(
            event = "shutdown_waiting",
            connections = conns.len(),
            "shutting down: waiting up to {} s for {} open connections (SSE streams were sent a shutdown event)",
            grace.as_secs(),
            conns.len()
        );
    }
    let all_done = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all_done).await.is_err() {
        tracing::warn!(
            event = "shutdown_grace_expired",
            connections = conns.len(),
            "shutdown grace period of {} s is over; closing {} connections still open",
            grace.as_secs(),
            conns.len()
        );
        conns.abort_all();
    }
    fatal_msg
}
