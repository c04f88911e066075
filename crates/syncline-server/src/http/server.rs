//! Serving connections: HTTP/1.1 over accepted TCP connections, bounded so that no kind of
//! client can make the server unreachable.
//!
//! - At most `max_connections` connections are served; [`RESERVED_CONNECTIONS`] more are
//!   accepted, and while more than `max_connections` are open only `/v1/health` and `/metrics`
//!   are answered (anything else gets 503, which frees the slot at once). Past those a
//!   connection waits up to [`RESERVE_WAIT`] for a slot (a health check queued behind a flood
//!   of requests that get 503 finds one), and is closed if none frees; after such a wait
//!   finds none, the reserve is held by idle or slow clients, and connections past it are
//!   closed as soon as they are accepted until a slot frees.
//! - A connection that sends no complete request head within the idle timeout is closed, also
//!   between requests (slowloris and idle keep-alive alike).
//! - A response write that makes no progress for `ELECTRIC_TCP_SEND_TIMEOUT` closes the
//!   connection (a client that stopped reading gives back its descriptor and its buffers).
//! - When the process runs out of descriptors, accept keeps working: a spare descriptor is
//!   given up to accept and close the waiting connection, so the backlog drains.

use std::fs::File;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::header::CONNECTION;
use axum::http::HeaderValue;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower::ServiceExt;

use super::connection::{ConnectionLimits, OverLimit, SendTimeout};
use crate::config::HttpEngine;

/// Connections accepted past the limit for `/v1/health` and `/metrics` only (enough that a
/// health check finds one free while a flood of connections is being turned away).
pub const RESERVED_CONNECTIONS: usize = 128;
/// Connections the kernel queues for `accept` (it caps this at `net.core.somaxconn`).
/// Thousands of clients connecting at once, as after a deploy, overflow tokio's default of
/// 1,024: the kernel then drops their handshakes, and they wait for retransmissions or fail.
const LISTEN_BACKLOG: u32 = 65_535;
/// Longest wait of a connection accepted past the reserve for a slot to free.
const RESERVE_WAIT: Duration = Duration::from_millis(250);
/// Pause after an accept error, so a persistent one does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(20);
/// Shortest interval between two log lines about accept errors.
const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Listens on `address` with a backlog of [`LISTEN_BACKLOG`].
pub fn listen(address: SocketAddr) -> io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Accepts and serves connections on `listener` with `app` for as long as the server runs.
///
/// `open` counts the connections open. When accepting finds no file descriptor free,
/// `out_of_files_now` is called (shape logs then close their idle files) and the accept is tried
/// again after a pause; if it fails again, the waiting connection is closed. Once `until`
/// resolves (shutdown), stops listening (a load balancer sends new connections to another
/// server), closes idle connections, and closes the others once their request is answered
/// (with `connection: close`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    until: impl Future<Output = ()>,
    open: Arc<AtomicUsize>,
    out_of_files_now: impl Fn(),
    engine: HttpEngine,
) {
    let (closing, closing_now) = watch::channel(false);
    let mut spare = File::open("/dev/null").ok();
    let mut last_logged: Option<Instant> = None;
    let mut shed = false;
    let freed = Arc::new(Notify::new());
    let full = limits.max_connections + RESERVED_CONNECTIONS;
    let mut reserve_held = false;
    tokio::pin!(until);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut until => {
                closing.send_replace(true);
                return;
            }
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                let out_of_files = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if last_logged.is_none_or(|t| t.elapsed() >= ACCEPT_ERROR_LOG_INTERVAL) {
                    tracing::warn!(error = %e, open = open.load(Ordering::Relaxed), "accept failed; connections past the limit are closed at once");
                    last_logged = Some(Instant::now());
                }
                if out_of_files {
                    out_of_files_now();
                    if shed && spare.take().is_some() {
                        // Freeing descriptors did not help: with the spare one free, take the
                        // waiting connection and close it.
                        drop(listener.accept().await);
                        spare = File::open("/dev/null").ok();
                    }
                    shed = true;
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        shed = false;
        let count = open.fetch_add(1, Ordering::AcqRel);
        let guard = OpenConnection {
            open: open.clone(),
            freed: freed.clone(),
        };
        if count < full {
            reserve_held = false;
        } else {
            let slot = !reserve_held
                && tokio::time::timeout(RESERVE_WAIT, slot_freed(&open, &freed, full))
                    .await
                    .is_ok();
            if !slot {
                reserve_held = true;
                drop((stream, guard));
                continue;
            }
        }
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let open = open.clone();
        let closing = closing_now.clone();
        tokio::spawn(async move {
            match engine {
                HttpEngine::Hyper => serve_connection(stream, app, limits, open, closing).await,
                HttpEngine::Syncline => {
                    super::http1::serve_connection(stream, app, limits, open, closing).await;
                }
            }
            drop(guard);
        });
    }
}

/// Counts an open connection until dropped, and then tells the accept loop.
struct OpenConnection {
    open: Arc<AtomicUsize>,
    freed: Arc<Notify>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.freed.notify_waiters();
    }
}

/// Waits until at most `full` connections are open (the one waiting counted).
async fn slot_freed(open: &AtomicUsize, freed: &Notify, full: usize) {
    loop {
        let notified = freed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if open.load(Ordering::Acquire) <= full {
            return;
        }
        notified.await;
    }
}

/// Serves one connection. Whether a request is over the limit is decided when it arrives, by
/// the connections open then, so a connection accepted during a flood is served in full once
/// the flood is gone.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    open: Arc<AtomicUsize>,
    mut closing: watch::Receiver<bool>,
) {
    let io = TokioIo::new(SendTimeout::new(stream, limits.send_timeout));
    let closing_at_answer = closing.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        if open.load(Ordering::Acquire) > limits.max_connections {
            request.extensions_mut().insert(OverLimit);
        }
        let read_to_end = Arc::new(AtomicBool::new(request.body().is_end_stream()));
        let request = request.map(|inner| TrackedBody {
            inner,
            read_to_end: read_to_end.clone(),
        });
        let app = app.clone();
        let closing = closing_at_answer.clone();
        async move {
            let mut response = app.oneshot(request).await?;
            let closing = *closing.borrow();
            if !read_to_end.load(Ordering::Acquire) || closing {
                // The rest of the body is still on the wire: the connection cannot carry another
                // request, and saying so keeps the client from sending one on it.
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(connection);
    let served = tokio::select! {
        served = connection.as_mut() => served,
        () = async { drop(closing.wait_for(|closing| *closing).await) } => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "connection closed");
    }
}

/// A request body that records whether it was read to its end.
struct TrackedBody {
    inner: Incoming,
    read_to_end: Arc<AtomicBool>,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The default connection limit for an open-files limit of `open_files`: three quarters of it,
/// the rest being left for shape logs, Postgres connections and the reserve.
pub fn default_max_connections(open_files: u64) -> usize {
    let quarter = open_files / 4;
    usize::try_from(open_files - quarter)
        .unwrap_or(usize::MAX)
        .saturating_sub(RESERVED_CONNECTIONS)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_leave_room_for_files() {
        assert_eq!(default_max_connections(1024), 768 - RESERVED_CONNECTIONS);
        assert_eq!(default_max_connections(8), 1);
        assert_eq!(
            default_max_connections(1 << 20),
            786_432 - RESERVED_CONNECTIONS
        );
    }
}
