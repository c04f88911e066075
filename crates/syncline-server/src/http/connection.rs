//! What both HTTP/1.1 engines share (`server.rs` serves with hyper's, `http1.rs` is
//! Syncline's own): the bounds a connection is served within, the mark of a request that
//! arrived over the connection limit, and the stream whose stalled writes time out.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once (more get only health and metrics).
    pub max_connections: usize,
    /// Longest wait for a complete request head, also between requests.
    pub idle_timeout: Duration,
    /// Longest time a response write may make no progress.
    pub send_timeout: Duration,
}

/// A request's connection was accepted over the limit: only health and metrics are served.
#[derive(Debug, Clone, Copy)]
pub struct OverLimit;

/// A stream whose writes fail once they have made no progress for the send timeout.
pub(super) struct SendTimeout<S> {
    inner: S,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> SendTimeout<S> {
    pub(super) fn new(inner: S, timeout: Duration) -> Self {
        SendTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// The stream itself (reading it directly bypasses nothing: only writes are timed).
    pub(super) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// After a write that could not proceed: fails once it has waited the timeout.
    fn check_stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading the response",
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.check_stalled(cx).map(Err),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.check_stalled(cx).map(Err),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.check_stalled(cx).map(Err),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_proceeds_times_out() {
        let (client, server) = tokio::io::duplex(16);
        let mut stream = SendTimeout::new(server, Duration::from_secs(30));
        let writing = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            stream.write_all(&[0u8; 1024]).await
        });
        let error = writing.await.unwrap().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        drop(client);
    }
}
