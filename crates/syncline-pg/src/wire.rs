//! A minimal Postgres frontend: startup, authentication, simple queries, COPY OUT and
//! COPY BOTH, with message framing done in place on large reads.
//!
//! Used for the replication connection (tokio-postgres has no replication mode, and
//! postgres-protocol does not parse CopyBothResponse) and for snapshots, where reading the COPY
//! stream inline, without a connection task and a channel hop per row, is most of the speed.
//! Message encoding and SCRAM come from postgres-protocol. TLS (SSLRequest, then rustls) as
//! [`crate::tls`] describes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use tokio_rustls::TlsConnector;

use crate::conn::{ConnConfig, SESSION_SETTINGS};
use crate::endpoint::Endpoint;
use crate::error::{PgError, PgResult};
use crate::tls::{server_name, tls_failure, worth_retrying_without_tls, SslMode};

/// Read-buffer growth step: large reads amortize syscalls on a busy stream.
const READ_CHUNK_BYTES: usize = 256 * 1024;
/// Largest backend message accepted (Postgres caps a message at 1 GiB).
const MESSAGE_BYTES_MAX: usize = 1 << 30;

/// A byte stream to the server.
pub trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// One backend message: its type byte and body (without the length word).
#[derive(Debug)]
pub struct BackendMessage {
    /// Message type, e.g. `b'd'` for CopyData.
    pub tag: u8,
    /// Message body.
    pub body: Bytes,
}

/// Whether a connection is for logical replication or for ordinary queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `replication=database`: accepts replication commands and `START_REPLICATION`.
    Replication,
    /// An ordinary session.
    Query,
}

/// A connection to Postgres speaking the simple-query protocol.
pub struct WireConnection {
    socket: Box<dyn Socket>,
    read_buf: BytesMut,
    write_buf: BytesMut,
}

/// A row of a simple-query result: text columns, NULL as `None`.
pub type TextRow = Vec<Option<String>>;

impl WireConnection {
    /// Connects, authenticates and waits for ReadyForQuery. [`SESSION_SETTINGS`] are sent as
    /// startup parameters, so every value this connection sees is rendered under them.
    pub async fn connect(
        config: &ConnConfig,
        application_name: &str,
        mode: Mode,
    ) -> PgResult<WireConnection> {
        let endpoint = config.endpoint();
        Self::start_session(config, &endpoint, application_name, mode)
            .await
            .map_err(|cause| PgError::Connect {
                endpoint,
                cause: Box::new(cause),
            })
    }

    async fn start_session(
        config: &ConnConfig,
        endpoint: &Endpoint,
        application_name: &str,
        mode: Mode,
    ) -> PgResult<WireConnection> {
        let (host, port) = match endpoint {
            Endpoint::Unix(dir, port) => {
                let socket = UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?;
                return Self::startup(Box::new(socket), config, application_name, mode).await;
            }
            Endpoint::Tcp(host, port) => (host.as_str(), *port),
        };
        let mut tcp = tcp_connect(host, port).await?;
        let tls = config.tls();
        let Some(client) = tls.client() else {
            return Self::startup(Box::new(tcp), config, application_name, mode).await;
        };
        if !request_tls(&mut tcp).await? {
            if tls.mode().requires_tls() {
                return Err(PgError::Tls(format!(
                    "the server does not support TLS, and sslmode={} requires it",
                    tls.mode()
                )));
            }
            return Self::startup(Box::new(tcp), config, application_name, mode).await;
        }
        let over_tls = async {
            let stream = TlsConnector::from(client.clone())
                .connect(server_name(host)?, tcp)
                .await
                .map_err(|e| match tls_failure(&e) {
                    Some(message) => PgError::Tls(message),
                    None => PgError::Io(e),
                })?;
            Self::startup(Box::new(stream), config, application_name, mode).await
        }
        .await;
        match over_tls {
            Err(e) if tls.mode() == SslMode::Prefer && worth_retrying_without_tls(&e) => {
                tracing::debug!(error = %e, "session over TLS failed; trying without TLS (sslmode=prefer)");
                let tcp = tcp_connect(host, port).await?;
                Self::startup(Box::new(tcp), config, application_name, mode).await
            }
            result => result,
        }
    }

    /// Starts the session on `socket`: startup message, authentication, ReadyForQuery.
    async fn startup(
        socket: Box<dyn Socket>,
        config: &ConnConfig,
        application_name: &str,
        mode: Mode,
    ) -> PgResult<WireConnection> {
        let mut conn = WireConnection::new(socket);
        let mut params = vec![
            ("user", config.user()),
            ("database", config.dbname()),
            ("application_name", application_name),
        ];
        if mode == Mode::Replication {
            params.push(("replication", "database"));
        }
        params.extend(SESSION_SETTINGS.iter().copied());
        frontend::startup_message(params, &mut conn.write_buf)?;
        conn.flush().await?;
        conn.authenticate(config).await?;
        conn.wait_ready().await?;
        Ok(conn)
    }

    /// A connection over `socket`, before the startup message.
    pub(crate) fn new(socket: Box<dyn Socket>) -> WireConnection {
        WireConnection {
            socket,
            read_buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
            write_buf: BytesMut::new(),
        }
    }

    async fn authenticate(&mut self, config: &ConnConfig) -> PgResult<()> {
        let password = || {
            config.password().ok_or_else(|| {
                PgError::Config("the server asks for a password and none was given".into())
            })
        };
        loop {
            let msg = self.expect(b'R').await?;
            let mut body = msg.body;
            match body.get_i32() {
                0 => return Ok(()),
                3 => {
                    frontend::password_message(password()?, &mut self.write_buf)?;
                    self.flush().await?;
                }
                5 => {
                    let salt: [u8; 4] = body[..4]
                        .try_into()
                        .map_err(|_| PgError::Protocol("short md5 salt".into()))?;
                    let hash = md5_hash(config.user().as_bytes(), password()?, salt);
                    frontend::password_message(hash.as_bytes(), &mut self.write_buf)?;
                    self.flush().await?;
                }
                10 => return self.scram(password()?, &body).await,
                other => {
                    return Err(PgError::Protocol(format!(
                        "unsupported authentication method {other}"
                    )))
                }
            }
        }
    }

    async fn scram(&mut self, password: &[u8], mechanisms: &[u8]) -> PgResult<()> {
        let offered = mechanisms
            .split(|&b| b == 0)
            .any(|m| m == sasl::SCRAM_SHA_256.as_bytes());
        if !offered {
            return Err(PgError::Protocol(
                "server offers no SASL mechanism this client supports".into(),
            ));
        }
        let mut scram = sasl::ScramSha256::new(password, sasl::ChannelBinding::unsupported());
        frontend::sasl_initial_response(sasl::SCRAM_SHA_256, scram.message(), &mut self.write_buf)?;
        self.flush().await?;
        let mut cont = self.expect(b'R').await?.body;
        if cont.get_i32() != 11 {
            return Err(PgError::Protocol("expected SASL continue".into()));
        }
        scram.update(&cont)?;
        frontend::sasl_response(scram.message(), &mut self.write_buf)?;
        self.flush().await?;
        let mut fin = self.expect(b'R').await?.body;
        if fin.get_i32() != 12 {
            return Err(PgError::Protocol("expected SASL final".into()));
        }
        scram.finish(&fin)?;
        let mut ok = self.expect(b'R').await?.body;
        match ok.get_i32() {
            0 => Ok(()),
            other => Err(PgError::Protocol(format!(
                "unexpected authentication message {other} after SASL"
            ))),
        }
    }

    async fn wait_ready(&mut self) -> PgResult<()> {
        loop {
            let msg = self.read_message().await?;
            if msg.tag == b'Z' {
                return Ok(());
            }
        }
    }

    /// Runs one simple-protocol statement and returns its rows as text.
    pub async fn simple_query(&mut self, sql: &str) -> PgResult<Vec<TextRow>> {
        frontend::query(sql, &mut self.write_buf)?;
        self.flush().await?;
        let mut rows = Vec::new();
        let mut failure = None;
        loop {
            let msg = match self.read_message().await {
                Ok(msg) => msg,
                Err(e @ PgError::Server { .. }) => {
                    failure = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            match msg.tag {
                b'D' => rows.push(parse_data_row(msg.body)?),
                b'Z' => return failure.map_or(Ok(rows), Err),
                _ => {}
            }
        }
    }

    /// Sends a statement that switches the connection into COPY BOTH mode and waits for it.
    pub async fn start_copy_both(&mut self, sql: &str) -> PgResult<()> {
        frontend::query(sql, &mut self.write_buf)?;
        self.flush().await?;
        self.expect(b'W').await.map(drop)
    }

    /// Starts `COPY … TO STDOUT`; the data then comes from [`Self::read_copy_data`].
    pub async fn start_copy_out(&mut self, sql: &str) -> PgResult<()> {
        frontend::query(sql, &mut self.write_buf)?;
        self.flush().await?;
        self.expect(b'H').await.map(drop)
    }

    /// Hands the body of every CopyData message already received to `on_data`, in place, then
    /// reads more from the socket. Returns `false` once the COPY has ended and the connection
    /// is ready for the next query.
    pub async fn read_copy_data(
        &mut self,
        on_data: &mut impl FnMut(&[u8]) -> PgResult<()>,
    ) -> PgResult<bool> {
        let mut pos = 0;
        let mut ended = false;
        while let Some((tag, start, end)) = frame_at(&self.read_buf, pos)? {
            match tag {
                b'd' => on_data(&self.read_buf[start..end])?,
                b'c' => ended = true,
                b'N' | b'S' => {}
                b'E' => return Err(parse_error(&self.read_buf[start..end])),
                other => {
                    return Err(PgError::Protocol(format!(
                        "unexpected message '{}' during COPY",
                        other as char
                    )))
                }
            }
            pos = end;
            if ended {
                break;
            }
        }
        self.read_buf.advance(pos);
        if ended {
            self.wait_ready_after_command().await?;
            return Ok(false);
        }
        self.fill().await?;
        Ok(true)
    }

    async fn wait_ready_after_command(&mut self) -> PgResult<()> {
        let mut failure = None;
        loop {
            match self.read_message().await {
                Ok(msg) if msg.tag == b'Z' => return failure.map_or(Ok(()), Err),
                Ok(_) => {}
                Err(e @ PgError::Server { .. }) => failure = Some(e),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads messages until one of type `tag`.
    async fn expect(&mut self, tag: u8) -> PgResult<BackendMessage> {
        loop {
            let msg = self.read_message().await?;
            if msg.tag == tag {
                return Ok(msg);
            }
            if !matches!(msg.tag, b'N' | b'S' | b'K') {
                return Err(PgError::Protocol(format!(
                    "expected message '{}', got '{}'",
                    tag as char, msg.tag as char
                )));
            }
        }
    }

    /// Reads the next message, turning ErrorResponse into an error and skipping notices and
    /// parameter-status reports.
    pub async fn read_message(&mut self) -> PgResult<BackendMessage> {
        loop {
            let msg = match self.try_parse()? {
                Some(msg) => msg,
                None => {
                    self.fill().await?;
                    continue;
                }
            };
            match msg.tag {
                b'E' => return Err(parse_error(&msg.body)),
                b'N' | b'S' => continue,
                _ => return Ok(msg),
            }
        }
    }

    /// Takes one complete message out of the read buffer, if there is one.
    pub fn try_parse(&mut self) -> PgResult<Option<BackendMessage>> {
        let Some((tag, start, end)) = frame_at(&self.read_buf, 0)? else {
            return Ok(None);
        };
        let mut frame = self.read_buf.split_to(end);
        frame.advance(start);
        Ok(Some(BackendMessage {
            tag,
            body: frame.freeze(),
        }))
    }

    /// Reads more bytes from the socket into the buffer. Cancel-safe.
    pub async fn fill(&mut self) -> PgResult<()> {
        // Room for a whole partial message (its length is known once its header is here), and
        // at least a quarter chunk so reads stay large.
        let wanted = match frame_len(&self.read_buf) {
            Some(len) if len > self.read_buf.len() => len - self.read_buf.len(),
            _ => 0,
        };
        if self.read_buf.capacity() - self.read_buf.len() < wanted.max(READ_CHUNK_BYTES / 4) {
            self.read_buf.reserve(wanted.max(READ_CHUNK_BYTES));
        }
        let n = self.socket.read_buf(&mut self.read_buf).await?;
        if n == 0 {
            return Err(PgError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            )));
        }
        Ok(())
    }

    /// Queues a CopyData message with `payload`.
    pub fn queue_copy_data(&mut self, payload: &[u8]) {
        self.write_buf.put_u8(b'd');
        let len = i32::try_from(4 + payload.len()).expect("a CopyData message is under 2 GiB");
        self.write_buf.put_i32(len);
        self.write_buf.put_slice(payload);
    }

    /// Writes everything queued. Cancel-safe: what was written leaves the queue as it goes, so
    /// a flush after a dropped one sends the rest, never a byte twice.
    pub async fn flush(&mut self) -> PgResult<()> {
        self.socket.write_all_buf(&mut self.write_buf).await?;
        self.socket.flush().await?;
        Ok(())
    }
}

async fn tcp_connect(host: &str, port: u16) -> PgResult<TcpStream> {
    let stream = TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Sends SSLRequest on `tcp` and reads the one-byte answer: whether the server agreed. Nothing
/// is read past that byte, so nothing sent in the clear can pass for data from inside TLS.
async fn request_tls(tcp: &mut TcpStream) -> PgResult<bool> {
    let mut request = BytesMut::new();
    frontend::ssl_request(&mut request);
    tcp.write_all(&request).await?;
    let mut answer = [0u8];
    tcp.read_exact(&mut answer).await?;
    match answer[0] {
        b'S' => Ok(true),
        b'N' => Ok(false),
        other => Err(PgError::Protocol(format!(
            "unexpected answer {:?} to SSLRequest",
            char::from(other)
        ))),
    }
}

/// The length of the first message in `buf` including its tag, once its header is there.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let header = buf.get(..5)?;
    Some(1 + message_len(header))
}

/// The length word of a message header (tag and length), which counts itself but not the tag.
fn message_len(header: &[u8]) -> usize {
    let word = u32::from_be_bytes(header[1..5].try_into().expect("4 bytes"));
    usize::try_from(word).expect("usize holds a u32")
}

/// The complete message at `pos` in `buf`: its tag and the byte range of its body.
fn frame_at(buf: &[u8], pos: usize) -> PgResult<Option<(u8, usize, usize)>> {
    let Some(header) = buf.get(pos..pos + 5) else {
        return Ok(None);
    };
    let len = message_len(header);
    if !(4..=MESSAGE_BYTES_MAX).contains(&len) {
        return Err(PgError::Protocol(format!("invalid message length {len}")));
    }
    let end = pos + 1 + len;
    Ok((end <= buf.len()).then_some((header[0], pos + 5, end)))
}

fn parse_data_row(mut body: Bytes) -> PgResult<TextRow> {
    let short = || PgError::Protocol("short DataRow".into());
    if body.len() < 2 {
        return Err(short());
    }
    let n = body.get_i16();
    let mut row = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for _ in 0..n {
        if body.len() < 4 {
            return Err(short());
        }
        let Ok(len) = usize::try_from(body.get_i32()) else {
            row.push(None);
            continue;
        };
        if body.len() < len {
            return Err(short());
        }
        row.push(Some(
            String::from_utf8_lossy(&body.split_to(len)).into_owned(),
        ));
    }
    Ok(row)
}

/// Turns an ErrorResponse body into [`PgError::Server`].
pub(crate) fn parse_error(body: &[u8]) -> PgError {
    let (mut code, mut message, mut detail, mut hint) = (String::new(), String::new(), None, None);
    for field in body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'C' => code = text,
            b'M' => message = text,
            b'D' => detail = Some(text),
            b'H' => hint = Some(text),
            _ => {}
        }
    }
    PgError::Server {
        code,
        message,
        detail,
        hint,
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn a_flush_after_a_dropped_one_sends_the_rest() {
        let (ours, mut theirs) = tokio::io::duplex(16);
        let mut conn = WireConnection::new(Box::new(ours));
        let payload: Vec<u8> = (0..100).collect();
        conn.queue_copy_data(&payload);
        assert!(
            conn.flush().now_or_never().is_none(),
            "the pipe takes only 16 bytes"
        );
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            theirs.read_to_end(&mut got).await.unwrap();
            got
        });
        conn.flush().await.unwrap();
        drop(conn);
        let got = reader.await.unwrap();
        let mut want = vec![b'd', 0, 0, 0, 104];
        want.extend_from_slice(&payload);
        assert_eq!(got, want);
    }
}
