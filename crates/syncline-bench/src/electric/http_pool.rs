//! The load generator's connection pool: hyper's HTTP/1.1 client on the scenario's runtime,
//! keep-alive, no Nagle, and a small read buffer per connection.
//!
//! The read buffer is what thousands of clients cost the load generator: hyper grows a
//! connection's buffer while reads fill it, up to about 400 KB by default, and keeps it. At
//! 3,650 connections each answered with a 118 KB snapshot that held 400 MB, every page of it
//! new to the process and zeroed by the kernel on first touch (`concurrent-shape-creation`:
//! half of the load generator's CPU). Capped at [`READ_BUFFER_MAX`], a response takes a few
//! more reads and the pages are reused.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, ACCEPT};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Errors of the load generator, which may cross tasks.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// The most a connection's read buffer grows to (hyper's floor is 8 KB).
pub(crate) const READ_BUFFER_MAX: usize = 32 * 1024;

/// Keep-alive HTTP/1.1 connections shared by a point's clients; cloning shares the pool.
#[derive(Clone)]
pub(crate) struct Pool {
    client: Client<HttpConnector, Empty<Bytes>>,
    /// How long a response's head, or any one read of its body, may take.
    timeout: Duration,
}

impl Pool {
    /// A pool whose requests fail after `timeout` without an answer or a body's next bytes.
    pub(crate) fn new(timeout: Duration) -> Pool {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .http1_max_buf_size(READ_BUFFER_MAX)
            .build(connector);
        Pool { client, timeout }
    }

    /// Sends `GET url` (with `accept` when given) and waits for the response's head.
    pub(crate) async fn get(&self, url: &str, accept: Option<&str>) -> Result<Response, Error> {
        let mut request = Request::get(url);
        if let Some(accept) = accept {
            request = request.header(ACCEPT, accept);
        }
        let response = tokio::time::timeout(
            self.timeout,
            self.client.request(request.body(Empty::new())?),
        )
        .await
        .map_err(|_| format!("GET {url}: no answer within {:?}", self.timeout))??;
        let (head, body) = response.into_parts();
        Ok(Response {
            status: head.status,
            headers: head.headers,
            body,
            timeout: self.timeout,
        })
    }
}

/// A response whose head has arrived; its body is read with [`Response::bytes`] or
/// [`Response::chunk`].
pub(crate) struct Response {
    status: StatusCode,
    headers: HeaderMap,
    body: Incoming,
    timeout: Duration,
}

impl Response {
    /// The status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    pub(crate) fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The whole body.
    pub(crate) async fn bytes(self) -> Result<Bytes, Error> {
        let collected = tokio::time::timeout(self.timeout, self.body.collect())
            .await
            .map_err(|_| format!("a response body took longer than {:?}", self.timeout))??;
        Ok(collected.to_bytes())
    }

    /// The body's next bytes; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, Error> {
        loop {
            let frame = tokio::time::timeout(self.timeout, self.body.frame())
                .await
                .map_err(|_| format!("no body bytes within {:?}", self.timeout))?;
            match frame {
                None => return Ok(None),
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}
