//! Syncline's own HTTP/1.1 connection layer (`--http-engine syncline`), an alternative to
//! hyper's for the same application and the same bounds (`server.rs`).
//!
//! What it is for: a connection whose request waits (a parked long-poll) holds no buffer. The
//! request head is read into a buffer sized to what arrived, copied into the request, and the
//! buffer is freed; a response's bytes are gathered only while it is written. hyper keeps an
//! 8 KiB read buffer and an 8 KiB write buffer for every connection, waiting or not.
//!
//! What it speaks: request heads parsed by `httparse` (at most [`HEAD_BYTES_MAX`] bytes and
//! [`HEADERS_MAX`] fields: 431 past them, 400 for a malformed head), bodies by
//! `content-length` or `transfer-encoding: chunked` (read whole, up to [`BODY_BYTES_MAX`],
//! before the application sees the request; `expect: 100-continue` answered first),
//! keep-alive as HTTP/1.1 and 1.0 define it, pipelined requests answered in order. Responses
//! as hyper writes them: the application's headers in order, then `content-length` (from the
//! body's exact size) or `transfer-encoding: chunked`, then `connection` when it closes and
//! `date`. A client that closes its connection while its request waits cancels the request.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::header::{
    HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, DATE, EXPECT, TRANSFER_ENCODING,
};
use axum::http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use axum::Router;
use bytes::Bytes;
use futures_util::FutureExt;
use http_body_util::BodyExt;
use hyper::body::Body as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower::ServiceExt;

use super::connection::{ConnectionLimits, OverLimit, SendTimeout};

/// Longest request head (request line and header fields), in bytes.
pub const HEAD_BYTES_MAX: usize = 64 * 1024;
/// Most header fields in a request head.
pub const HEADERS_MAX: usize = 100;
/// Largest request body read before the application sees the request: one byte more than the
/// shape API accepts, so that it can answer 413.
pub const BODY_BYTES_MAX: usize = super::shape_api::POST_BODY_BYTES_MAX + 1;
/// Room made for each read of a request head or body.
const READ_BYTES: usize = 1024;
/// Longest line of a chunked body's framing (a chunk size, a trailer field).
const CHUNK_LINE_BYTES_MAX: usize = 4096;
/// Bytes of pipelined requests read while a response is prepared; past them reading waits.
const PIPELINED_BYTES_MAX: usize = 64 * 1024;
/// Longest wait for a client to stop sending a request body that was not read.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes of such a body read and dropped.
const LINGER_BYTES_MAX: usize = 64 << 20;
/// Response bytes gathered before they are written.
const WRITE_GATHER_BYTES: usize = 16 * 1024;

/// Serves one connection until the client closes it, it idles past the idle timeout, a request
/// asks to close it, or the server shuts down (`closing`). Whether a request is over the limit
/// is decided when it arrives, by the connections `open` then.
pub(super) async fn serve_connection(
    stream: TcpStream,
    app: Router,
    limits: ConnectionLimits,
    open: Arc<AtomicUsize>,
    mut closing: watch::Receiver<bool>,
) {
    let mut io = SendTimeout::new(stream, limits.send_timeout);
    let mut pending = Vec::new();
    loop {
        // The head and the request are scoped to this block: the connection's future then
        // keeps no room for them while the application answers (a long-poll may wait minutes).
        let (call, exchange) = {
            let waiting_idle = pending.is_empty();
            let head = tokio::select! {
                head = tokio::time::timeout(limits.idle_timeout, read_head(&mut io, &mut pending)) => head,
                () = async { drop(closing.wait_for(|c| *c).await) }, if waiting_idle => return,
            };
            let head = match head {
                Ok(Ok(Some(head))) => head,
                Ok(Err(Failure::Status(status))) => {
                    if Box::pin(refuse(&mut io, status)).await.is_ok() {
                        linger(&mut io).await;
                    }
                    return;
                }
                Err(_) | Ok(Ok(None) | Err(Failure::Gone)) => return,
            };
            let body = match read_body(&mut io, &mut pending, &head, limits.idle_timeout).await {
                Ok(body) => body,
                Err(Failure::Status(status)) => {
                    if Box::pin(refuse(&mut io, status)).await.is_ok() {
                        linger(&mut io).await;
                    }
                    return;
                }
                Err(Failure::Gone) => return,
            };
            let exchange = Exchange {
                version: head.parts.version,
                head_request: head.parts.method == Method::HEAD,
                keep_alive: head.keep_alive,
                body_read: !matches!(body, RequestBody::TooLarge),
            };
            let mut request = Request::from_parts(head.parts, body.into_body());
            if open.load(Ordering::Acquire) > limits.max_connections {
                request.extensions_mut().insert(OverLimit);
            }
            (app.clone().oneshot(request), exchange)
        };
        let response = {
            let call = std::pin::pin!(call);
            answer_or_hang_up(&mut io, &mut pending, call).await
        };
        let Some(response) = response else {
            return;
        };
        let Exchange {
            version,
            head_request,
            keep_alive,
            body_read,
        } = exchange;
        let keep_alive = keep_alive && body_read && !*closing.borrow();
        match write_response(&mut io, response, version, head_request, keep_alive).await {
            Ok(true) => {}
            Ok(false) if body_read => {
                let _ = io.shutdown().await;
                return;
            }
            Ok(false) => {
                linger(&mut io).await;
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "connection closed while writing a response");
                return;
            }
        }
        if pending.is_empty() {
            // Nothing of the next request yet: no buffer while the connection idles.
            pending = Vec::new();
        }
    }
}

/// What answering a request needs to know of it once the request went to the application.
struct Exchange {
    version: Version,
    head_request: bool,
    /// The request allows the connection to stay open.
    keep_alive: bool,
    /// The request's body was read whole (the connection can read the next request).
    body_read: bool,
}

/// Why a connection stops: the client went away (or sent nothing usable to answer), or its
/// request gets this status before the connection closes.
#[derive(Debug)]
enum Failure {
    Gone,
    Status(StatusCode),
}

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyLength {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head.
struct Head {
    parts: axum::http::request::Parts,
    body: BodyLength,
    keep_alive: bool,
    expect_continue: bool,
}

/// A request's body as read.
enum RequestBody {
    Empty,
    Whole(Vec<u8>),
    /// Longer than [`BODY_BYTES_MAX`]: not read; the application sees a body that fails.
    TooLarge,
}

impl RequestBody {
    fn into_body(self) -> Body {
        match self {
            RequestBody::Empty => Body::empty(),
            RequestBody::Whole(bytes) => Body::from(bytes),
            RequestBody::TooLarge => Body::from_stream(futures_util::stream::once(async {
                Err::<Bytes, io::Error>(io::Error::other("request body too large"))
            })),
        }
    }
}

/// Reads until `pending` holds a whole request head, and takes it out; `None` when the client
/// closed the connection between requests.
async fn read_head(
    io: &mut SendTimeout<TcpStream>,
    pending: &mut Vec<u8>,
) -> Result<Option<Head>, Failure> {
    loop {
        if !pending.is_empty() {
            if let Some((head, len)) = parse_head(pending)? {
                pending.drain(..len);
                return Ok(Some(head));
            }
        }
        if pending.len() >= HEAD_BYTES_MAX {
            return Err(Failure::Status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        }
        pending.reserve(READ_BYTES);
        match io.read_buf(pending).await {
            Ok(0) if pending.is_empty() => return Ok(None),
            Ok(0) | Err(_) => return Err(Failure::Gone),
            Ok(_) => {}
        }
    }
}

/// Parses the request head at the start of `buf`: the head and its length in bytes, or `None`
/// if it is not complete yet. Leading empty lines are skipped, as RFC 9112 allows.
fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, Failure> {
    let bad = || Failure::Status(StatusCode::BAD_REQUEST);
    let mut fields = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut parsed = httparse::Request::new(&mut fields);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Failure::Status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE))
        }
        Err(_) => return Err(bad()),
    };
    let method =
        Method::from_bytes(parsed.method.ok_or_else(bad)?.as_bytes()).map_err(|_| bad())?;
    let uri: Uri = parsed.path.ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let version = match parsed.version {
        Some(0) => Version::HTTP_10,
        _ => Version::HTTP_11,
    };
    let mut headers = HeaderMap::with_capacity(parsed.headers.len());
    let mut keep_alive = version == Version::HTTP_11;
    let (mut length, mut chunked, mut encoded, mut expect_continue) = (None, false, false, false);
    for field in parsed.headers.iter() {
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|_| bad())?;
        let value = HeaderValue::from_bytes(field.value).map_err(|_| bad())?;
        if name == CONTENT_LENGTH {
            let n = value
                .to_str()
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(bad)?;
            if length.is_some_and(|l| l != n) {
                return Err(bad());
            }
            length = Some(n);
        } else if name == TRANSFER_ENCODING {
            encoded = true;
            let text = value.to_str().map_err(|_| bad())?;
            chunked = text
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if name == CONNECTION {
            for token in value.to_str().unwrap_or("").split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && version == Version::HTTP_10 {
                    keep_alive = true;
                }
            }
        } else if name == EXPECT {
            expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue");
        }
        headers.append(name, value);
    }
    let body = match (encoded, chunked, length) {
        // A body framed two ways is how requests are smuggled past a proxy: refused.
        (true, _, Some(_)) | (true, false, None) => return Err(bad()),
        (true, true, None) => BodyLength::Chunked,
        (false, _, Some(0) | None) => BodyLength::None,
        (false, _, Some(n)) => BodyLength::Length(n),
    };
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = version;
    parts.headers = headers;
    Ok(Some((
        Head {
            parts,
            body,
            keep_alive,
            expect_continue,
        },
        len,
    )))
}

/// Reads the body `head` announces out of `pending` and the connection, each read waiting at
/// most `idle`.
async fn read_body(
    io: &mut SendTimeout<TcpStream>,
    pending: &mut Vec<u8>,
    head: &Head,
    idle: Duration,
) -> Result<RequestBody, Failure> {
    if head.body == BodyLength::None {
        return Ok(RequestBody::Empty);
    }
    if let BodyLength::Length(n) = head.body {
        if n > BODY_BYTES_MAX as u64 {
            return Ok(RequestBody::TooLarge);
        }
    }
    if head.expect_continue && pending.is_empty() {
        let line: &[u8] = if head.parts.version == Version::HTTP_10 {
            b"HTTP/1.0 100 Continue\r\n\r\n"
        } else {
            b"HTTP/1.1 100 Continue\r\n\r\n"
        };
        io.write_all(line).await.map_err(|_| Failure::Gone)?;
    }
    match head.body {
        BodyLength::Length(n) => {
            let n = usize::try_from(n).expect("bounded by BODY_BYTES_MAX");
            fill(io, pending, n, idle).await?;
            if pending.len() == n {
                // The usual case: nothing after the body yet, whose bytes move, not copied.
                return Ok(RequestBody::Whole(std::mem::take(pending)));
            }
            Ok(RequestBody::Whole(pending.drain(..n).collect()))
        }
        BodyLength::Chunked => read_chunked(io, pending, idle).await,
        BodyLength::None => unreachable!("answered above"),
    }
}

/// Decodes a chunked body (RFC 9112, section 7.1); chunk extensions and trailer fields are
/// read and dropped.
async fn read_chunked(
    io: &mut SendTimeout<TcpStream>,
    pending: &mut Vec<u8>,
    idle: Duration,
) -> Result<RequestBody, Failure> {
    let bad = || Failure::Status(StatusCode::BAD_REQUEST);
    let mut body = Vec::new();
    loop {
        let line = read_line(io, pending, idle).await?;
        let size = std::str::from_utf8(&line)
            .ok()
            .and_then(|l| l.split(';').next())
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 16)
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(bad)?;
        if size == 0 {
            while !read_line(io, pending, idle).await?.is_empty() {}
            return Ok(RequestBody::Whole(body));
        }
        if body.len() as u64 + size > BODY_BYTES_MAX as u64 {
            return Ok(RequestBody::TooLarge);
        }
        let size = usize::try_from(size).expect("bounded by BODY_BYTES_MAX");
        fill(io, pending, size + 2, idle).await?;
        if &pending[size..size + 2] != b"\r\n" {
            return Err(bad());
        }
        body.extend_from_slice(&pending[..size]);
        pending.drain(..size + 2);
    }
}

/// Takes one CRLF-terminated line out of `pending` (reading more as needed), without its end.
async fn read_line(
    io: &mut SendTimeout<TcpStream>,
    pending: &mut Vec<u8>,
    idle: Duration,
) -> Result<Vec<u8>, Failure> {
    loop {
        if let Some(at) = pending.windows(2).position(|w| w == b"\r\n") {
            let line = pending[..at].to_vec();
            pending.drain(..at + 2);
            return Ok(line);
        }
        if pending.len() > CHUNK_LINE_BYTES_MAX {
            return Err(Failure::Status(StatusCode::BAD_REQUEST));
        }
        let want = pending.len() + 1;
        fill(io, pending, want, idle).await?;
    }
}

/// Reads until `pending` holds at least `len` bytes, each read waiting at most `idle`.
async fn fill(
    io: &mut SendTimeout<TcpStream>,
    pending: &mut Vec<u8>,
    len: usize,
    idle: Duration,
) -> Result<(), Failure> {
    while pending.len() < len {
        pending.reserve((len - pending.len()).clamp(READ_BYTES, 64 * 1024));
        match tokio::time::timeout(idle, io.read_buf(pending)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(Failure::Gone),
        }
    }
    Ok(())
}

/// Waits for the application's response; `None` if the client closed the connection first
/// (the request is then dropped). Bytes of a pipelined next request that arrive meanwhile are
/// kept in `pending`.
async fn answer_or_hang_up(
    io: &mut SendTimeout<TcpStream>,
    pending: &mut Vec<u8>,
    mut call: Pin<&mut impl Future<Output = Result<Response<Body>, Infallible>>>,
) -> Option<Response<Body>> {
    loop {
        if pending.len() >= PIPELINED_BYTES_MAX {
            let Ok(response) = call.await;
            return Some(response);
        }
        tokio::select! {
            answered = &mut call => {
                let Ok(response) = answered;
                return Some(response);
            }
            readable = io.get_ref().readable() => {
                if readable.is_err() {
                    return None;
                }
                pending.reserve(READ_BYTES);
                match io.get_ref().try_read_buf(pending) {
                    Ok(0) => return None,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return None,
                }
            }
        }
    }
}

/// How a response's body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length,
    Chunked,
    /// Until the connection closes (an HTTP/1.0 response of unknown length).
    Close,
}

/// Ends a connection whose request was not read whole (a body over the limit, a refused head):
/// its end is sent, and what the client still sends is read and dropped for a while (up to
/// [`LINGER`] and [`LINGER_BYTES_MAX`]), so that closing with unread bytes (which makes the
/// kernel reset the connection) does not destroy the answer before the client has read it.
async fn linger(io: &mut SendTimeout<TcpStream>) {
    if io.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut scratch = vec![0u8; 16 << 10];
    let mut dropped = 0;
    while dropped < LINGER_BYTES_MAX {
        match tokio::time::timeout_at(deadline, io.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => dropped += n,
            _ => return,
        }
    }
}

/// Writes `response` to a request of `version` (`head_request`: its body is not sent);
/// returns whether the connection may carry another request. The head is framed before the
/// future is made, so that the future (inside every connection's) has no room for it.
fn write_response(
    io: &mut SendTimeout<TcpStream>,
    response: Response<Body>,
    version: Version,
    head_request: bool,
    keep_alive: bool,
) -> impl Future<Output = io::Result<bool>> + '_ {
    write_message(io, frame_head(response, version, head_request, keep_alive))
}

/// A response's head in wire bytes, and how its body follows.
struct FramedHead {
    /// The status line and header fields, with the blank line that ends them.
    bytes: Vec<u8>,
    /// The body to send (`None`: a response to `HEAD`, or a status that has none).
    body: Option<Body>,
    framing: Framing,
    /// The connection may carry another request after this response.
    keep_alive: bool,
}

/// Frames `response`'s head as hyper frames it: `content-length` from an exact size hint,
/// else chunked (an HTTP/1.0 response of unknown length runs until the connection closes);
/// `connection` and `date` when the response does not set them.
fn frame_head(
    response: Response<Body>,
    version: Version,
    head_request: bool,
    mut keep_alive: bool,
) -> FramedHead {
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let bodyless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let mut out = Vec::with_capacity(256 + 48 * parts.headers.len());
    status_line(&mut out, version, status);
    let (mut framing, mut wrote_connection, mut wrote_date) = (None, false, false);
    for (name, value) in &parts.headers {
        if *name == CONTENT_LENGTH {
            if bodyless || framing.is_some() {
                continue;
            }
            framing = Some(Framing::Length);
        } else if *name == TRANSFER_ENCODING {
            continue;
        } else if *name == CONNECTION {
            wrote_connection = true;
            if value
                .to_str()
                .unwrap_or("")
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"))
            {
                keep_alive = false;
            }
        } else if *name == DATE {
            wrote_date = true;
        }
        field(&mut out, name.as_str(), value.as_bytes());
    }
    let framing = match framing {
        Some(framing) => framing,
        None if bodyless => Framing::Length,
        None => match body.size_hint().exact() {
            Some(0) => {
                if !head_request {
                    field(&mut out, "content-length", b"0");
                }
                Framing::Length
            }
            Some(n) => {
                field(
                    &mut out,
                    "content-length",
                    itoa::Buffer::new().format(n).as_bytes(),
                );
                Framing::Length
            }
            None if head_request => Framing::Length,
            None if version == Version::HTTP_10 => {
                keep_alive = false;
                Framing::Close
            }
            None => {
                field(&mut out, "transfer-encoding", b"chunked");
                Framing::Chunked
            }
        },
    };
    if !wrote_connection {
        if !keep_alive && version == Version::HTTP_11 {
            field(&mut out, "connection", b"close");
        } else if keep_alive && version == Version::HTTP_10 {
            field(&mut out, "connection", b"keep-alive");
        }
    }
    if !wrote_date {
        field(
            &mut out,
            "date",
            httpdate::fmt_http_date(SystemTime::now()).as_bytes(),
        );
    }
    out.extend_from_slice(b"\r\n");
    FramedHead {
        bytes: out,
        body: (!head_request && !bodyless).then_some(body),
        framing,
        keep_alive,
    }
}

/// Writes a framed head and its body.
async fn write_message(io: &mut SendTimeout<TcpStream>, head: FramedHead) -> io::Result<bool> {
    let FramedHead {
        bytes: mut out,
        body,
        framing,
        keep_alive,
    } = head;
    let Some(mut body) = body else {
        io.write_all(&out).await?;
        io.flush().await?;
        return Ok(keep_alive);
    };
    loop {
        // Gathered bytes go out whenever the body has nothing more at once (a live stream's
        // events reach the client as they come).
        let frame = match body.frame().now_or_never() {
            Some(frame) => frame,
            None => {
                if !out.is_empty() {
                    io.write_all(&out).await?;
                    io.flush().await?;
                    out.clear();
                }
                body.frame().await
            }
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(io::Error::other)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        if framing == Framing::Chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        if out.len() + data.len() > WRITE_GATHER_BYTES {
            write_pair(io, &out, &data).await?;
            out.clear();
        } else {
            out.extend_from_slice(&data);
        }
        if framing == Framing::Chunked {
            out.extend_from_slice(b"\r\n");
        }
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    io.write_all(&out).await?;
    io.flush().await?;
    Ok(keep_alive && framing != Framing::Close)
}

/// Writes `first` then `second`, together (one `writev` when the socket takes both).
async fn write_pair(
    io: &mut SendTimeout<TcpStream>,
    mut first: &[u8],
    mut second: &[u8],
) -> io::Result<()> {
    while !first.is_empty() || !second.is_empty() {
        let n = io
            .write_vectored(&[io::IoSlice::new(first), io::IoSlice::new(second)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_first = n.min(first.len());
        first = &first[from_first..];
        second = &second[n - from_first..];
    }
    Ok(())
}

/// Answers a head that cannot be served with `status`, saying the connection closes (the
/// caller then lingers: the rest of the request may still be arriving). Callers box its
/// future: it is rare, and inline it would enlarge every connection's future by its size.
async fn refuse(io: &mut SendTimeout<TcpStream>, status: StatusCode) -> io::Result<bool> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    write_response(io, response, Version::HTTP_11, false, false).await
}

fn status_line(out: &mut Vec<u8>, version: Version, status: StatusCode) {
    out.extend_from_slice(if version == Version::HTTP_10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn field(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::any;
    use std::sync::atomic::AtomicBool;
    use tokio::net::TcpListener;

    /// A server on a free port whose application echoes the method, the path, the body's
    /// length and `x-test`; `/slow` waits until dropped, and says so in `dropped`.
    async fn start(dropped: Arc<AtomicBool>) -> std::net::SocketAddr {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let app = Router::new()
            .route(
                "/slow",
                any(move || async move {
                    let _flag = Flag(dropped);
                    std::future::pending::<()>().await;
                }),
            )
            .fallback(|request: Request<Body>| async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, BODY_BYTES_MAX - 1).await;
                let Ok(bytes) = bytes else {
                    return (StatusCode::PAYLOAD_TOO_LARGE, String::new());
                };
                let tag = parts
                    .headers
                    .get("x-test")
                    .map_or("", |v| v.to_str().unwrap());
                let text = format!(
                    "{} {} {} {tag}",
                    parts.method,
                    parts.uri.path(),
                    bytes.len()
                );
                (StatusCode::OK, text)
            });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = ConnectionLimits {
            max_connections: 100,
            idle_timeout: Duration::from_secs(5),
            send_timeout: Duration::from_secs(5),
        };
        tokio::spawn(async move {
            let (_closing_tx, closing) = watch::channel(false);
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (app, closing) = (app.clone(), closing.clone());
                let open = Arc::new(AtomicUsize::new(1));
                tokio::spawn(serve_connection(stream, app, limits, open, closing));
            }
        });
        address
    }

    /// Sends `request` on a new connection and reads until the server closes it or
    /// `responses` responses have arrived; returns what was read.
    async fn exchange(address: std::net::SocketAddr, request: &[u8], responses: usize) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let complete = String::from_utf8_lossy(&got).matches("HTTP/1.").count();
            let text = String::from_utf8_lossy(&got).into_owned();
            if complete >= responses && text.ends_with(&last_body_end(&text)) {
                break;
            }
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                Ok(Err(e)) => panic!("read: {e}"),
            }
        }
        String::from_utf8(got).unwrap()
    }

    /// The body the last response in `text` announces (by its `content-length`), or the whole
    /// text when it announces none: what a complete exchange ends with.
    fn last_body_end(text: &str) -> String {
        let Some(at) = text.rfind("HTTP/1.") else {
            return text.to_owned();
        };
        let last = &text[at..];
        let Some((head, body)) = last.split_once("\r\n\r\n") else {
            return "\u{0}never".to_owned();
        };
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.parse::<usize>().ok());
        match length {
            Some(n) if body.len() >= n => body[..n].to_owned(),
            Some(_) => "\u{0}never".to_owned(),
            None => body.to_owned(),
        }
    }

    #[tokio::test]
    async fn pipelined_requests_are_answered_in_order_on_one_connection() {
        let address = start(Arc::default()).await;
        let got = exchange(
            address,
            b"GET /a HTTP/1.1\r\nhost: x\r\nx-test: one\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nx-test: two\r\n\r\n",
            2,
        )
        .await;
        let first = got.find("GET /a 0 one").expect(&got);
        let second = got.find("GET /b 0 two").expect(&got);
        assert!(first < second, "{got}");
        assert_eq!(got.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{got}");
        assert!(got.contains("\r\ndate: "), "{got}");
        assert!(!got.contains("connection: close"), "{got}");
    }

    #[tokio::test]
    async fn bodies_by_length_and_chunked_are_read_whole() {
        let address = start(Arc::default()).await;
        let got = exchange(
            address,
            b"POST /p HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello\
              POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n\
              3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\ntrailer: t\r\n\r\n",
            2,
        )
        .await;
        assert!(got.contains("POST /p 5 "), "{got}");
        assert!(got.contains("POST /c 7 "), "{got}");
    }

    #[tokio::test]
    async fn expect_continue_is_answered_before_the_body_is_read() {
        let address = start(Arc::default()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(
                b"POST /e HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n",
            )
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = stream.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"HTTP/1.1 100 Continue\r\n\r\n");
        stream.write_all(b"abc").await.unwrap();
        let n = stream.read(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with("POST /e 3 "),
            "{text}"
        );
    }

    #[tokio::test]
    async fn bad_heads_get_400_or_431_and_the_connection_closes() {
        let address = start(Arc::default()).await;
        for (request, status) in [
            (
                b"GET / HTTP/1.1\r\nbad header\r\n\r\n".to_vec(),
                "400 Bad Request",
            ),
            (
                b"POST / HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\nabc"
                    .to_vec(),
                "400 Bad Request",
            ),
            (
                b"POST / HTTP/1.1\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabc".to_vec(),
                "400 Bad Request",
            ),
            (
                format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(HEAD_BYTES_MAX)).into_bytes(),
                "431 Request Header Fields Too Large",
            ),
            (
                format!(
                    "GET / HTTP/1.1\r\n{}\r\n",
                    "x-a: b\r\n".repeat(HEADERS_MAX + 1)
                )
                .into_bytes(),
                "431 Request Header Fields Too Large",
            ),
        ] {
            let got = exchange(address, &request, 1).await;
            assert!(got.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{got}");
            assert!(got.contains("connection: close\r\n"), "{got}");
        }
    }

    #[tokio::test]
    async fn head_http_1_0_and_close_are_framed_as_hyper_frames_them() {
        let address = start(Arc::default()).await;
        // The answer to HEAD says the length of the GET's body and has none: the next answer
        // follows its head at once.
        let head = exchange(
            address,
            b"HEAD /h HTTP/1.1\r\nhost: x\r\n\r\nGET /g HTTP/1.1\r\nhost: x\r\n\r\n",
            2,
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("content-length: 10\r\n"), "{head}");
        assert!(head.contains("\r\n\r\nHTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.ends_with("GET /g 0 "), "{head}");
        let old = exchange(address, b"GET /o HTTP/1.0\r\n\r\n", 1).await;
        assert!(old.starts_with("HTTP/1.0 200 OK\r\n"), "{old}");
        assert!(old.ends_with("GET /o 0 "), "{old}");
        let close = exchange(address, b"GET /c HTTP/1.1\r\nconnection: close\r\n\r\n", 1).await;
        assert!(close.contains("connection: close\r\n"), "{close}");
    }

    /// Sends `head` then `filler` more bytes as a client that does not read until it has sent
    /// everything (as hyper's and reqwest's clients do): every write must succeed, so the
    /// server read (and dropped) what it did not use instead of resetting the connection.
    /// Returns what the server answered.
    async fn send_all_then_read(
        address: std::net::SocketAddr,
        head: &[u8],
        filler: usize,
    ) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(head).await.unwrap();
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0;
        while sent < filler {
            let n = chunk.len().min(filler - sent);
            if let Err(e) = stream.write_all(&chunk[..n]).await {
                panic!("the server reset the connection after {sent} bytes: {e}");
            }
            sent += n;
        }
        stream.shutdown().await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got))
            .await
            .expect("the server closes the connection")
            .expect("the answer is read whole");
        String::from_utf8(got).unwrap()
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_not_read_and_its_answer_still_arrives() {
        let address = start(Arc::default()).await;
        let head = format!(
            "POST /big HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
            BODY_BYTES_MAX + 1
        );
        let got = send_all_then_read(address, head.as_bytes(), BODY_BYTES_MAX + 1).await;
        assert!(
            got.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
            "{got}"
        );
        assert!(got.contains("connection: close\r\n"), "{got}");
    }

    #[tokio::test]
    async fn a_refused_head_is_answered_while_the_client_still_sends_it() {
        let address = start(Arc::default()).await;
        let got = send_all_then_read(address, b"GET /", 16 << 20).await;
        assert!(
            got.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{got}"
        );
        assert!(got.contains("connection: close\r\n"), "{got}");
    }

    #[tokio::test]
    async fn a_client_that_hangs_up_cancels_its_waiting_request() {
        let dropped = Arc::new(AtomicBool::new(false));
        let address = start(dropped.clone()).await;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!dropped.load(Ordering::Acquire), "the request waits");
        drop(stream);
        for _ in 0..100 {
            if dropped.load(Ordering::Acquire) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the request still waits after its client hung up");
    }
}
