//! The replication stream: `START_REPLICATION`, XLogData, keepalives, standby status updates.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BufMut, Bytes};
use syncline_core::{pg_time, Lsn};
use tokio::time::Instant;

use super::pgoutput::{self, PgOutput};
use crate::conn::ConnConfig;
use crate::error::{PgError, PgResult};
use crate::wire::{parse_error, Mode, WireConnection};
use syncline_core::sql::{quote_ident, quote_literal};

/// The default longest wait between reconnect attempts of a
/// [`super::ResumingStream`].
pub const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(5);

/// What to stream and how often to report progress.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Logical replication slot (pgoutput) to stream from.
    pub slot: String,
    /// Publication whose tables are streamed.
    pub publication: String,
    /// Where to start; `0/0` (the default) means the slot's confirmed flush position.
    pub start_lsn: Lsn,
    /// How often a standby status update is sent even when the server does not ask.
    pub status_interval: Duration,
    /// `application_name` of the connection (shows in `pg_stat_replication`).
    pub application_name: String,
    /// Longest wait between reconnect attempts of a [`super::ResumingStream`] (the wait
    /// doubles per failed attempt up to this).
    pub reconnect_delay_max: Duration,
}

impl StreamOptions {
    /// Options for `slot` and `publication` with defaults: start at the slot's confirmed
    /// position, status every 10 s, reconnect delays up to [`RECONNECT_DELAY_MAX`].
    pub fn new(slot: impl Into<String>, publication: impl Into<String>) -> Self {
        StreamOptions {
            slot: slot.into(),
            publication: publication.into(),
            start_lsn: Lsn::ZERO,
            status_interval: Duration::from_secs(10),
            application_name: "syncline".into(),
            reconnect_delay_max: RECONNECT_DELAY_MAX,
        }
    }
}

/// One pgoutput message with the WAL position it was sent at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XLogMessage {
    /// Start of the WAL data this message came from.
    pub wal_start: Lsn,
    /// The decoded message.
    pub message: PgOutput,
}

/// A running logical replication stream, yielding pgoutput messages one at a time.
///
/// The flush position reported to Postgres is only ever what the caller declared with
/// [`ReplicationStream::set_flushed`]; receiving data never advances it, so the slot keeps
/// every change the caller has not made durable.
pub struct ReplicationStream {
    conn: WireConnection,
    received: Lsn,
    flushed: Lsn,
    server_wal_end: Lsn,
    status_interval: Duration,
    next_status: Instant,
}

impl ReplicationStream {
    /// Opens a replication connection and starts streaming (pgoutput, proto_version 1).
    pub async fn start(
        config: &ConnConfig,
        options: &StreamOptions,
    ) -> PgResult<ReplicationStream> {
        let mut conn =
            WireConnection::connect(config, &options.application_name, Mode::Replication).await?;
        assert!(
            !options.publication.contains('\\'),
            "the walsender's grammar has no escape strings"
        );
        let sql = format!(
            "START_REPLICATION SLOT {} LOGICAL {} (proto_version '1', publication_names {})",
            quote_ident(&options.slot),
            options.start_lsn,
            quote_literal(&quote_ident(&options.publication)),
        );
        conn.start_copy_both(&sql).await?;
        tracing::info!(slot = %options.slot, start = %options.start_lsn, "replication started");
        Ok(ReplicationStream::streaming(conn, options))
    }

    /// The stream on `conn`, which has just entered COPY BOTH mode.
    fn streaming(conn: WireConnection, options: &StreamOptions) -> ReplicationStream {
        ReplicationStream {
            conn,
            received: options.start_lsn,
            flushed: options.start_lsn,
            server_wal_end: Lsn::ZERO,
            status_interval: options.status_interval,
            next_status: Instant::now() + options.status_interval,
        }
    }

    /// Waits for the next pgoutput message, answering keepalives and sending periodic status
    /// updates meanwhile. Cancel-safe: dropping the future loses nothing. The server ending
    /// the stream (CommandComplete or CopyDone, as on shutdown), terminating it, or closing
    /// the socket is a transient error ([`PgError::is_transient`]).
    pub async fn next(&mut self) -> PgResult<XLogMessage> {
        loop {
            if Instant::now() >= self.next_status {
                self.send_status(false).await?;
            }
            let Some(msg) = self.conn.try_parse()? else {
                tokio::select! {
                    filled = self.conn.fill() => filled?,
                    _ = tokio::time::sleep_until(self.next_status) => {}
                }
                continue;
            };
            match msg.tag {
                b'd' => {
                    if let Some(message) = self.copy_data(msg.body).await? {
                        return Ok(message);
                    }
                }
                b'E' => return Err(parse_error(&msg.body)),
                // A walsender that is shutting down ends with CommandComplete once the client
                // has acknowledged everything sent; CopyDone also ends the stream.
                b'C' => {
                    return Err(PgError::Closed(
                        "replication ended (CommandComplete); the server is probably shutting down"
                            .into(),
                    ))
                }
                b'c' => return Err(PgError::Closed("replication ended (CopyDone)".into())),
                b'N' | b'S' => {}
                other => {
                    return Err(PgError::Protocol(format!(
                        "unexpected message '{}' in replication stream",
                        other as char
                    )))
                }
            }
        }
    }

    async fn copy_data(&mut self, mut body: Bytes) -> PgResult<Option<XLogMessage>> {
        let short = || PgError::Protocol("short replication message".into());
        match body.first() {
            Some(b'w') if body.len() >= 25 => {
                body.advance(1);
                let wal_start = Lsn(body.get_u64());
                let wal_end = Lsn(body.get_u64());
                body.advance(8);
                self.received = self.received.max(wal_start);
                self.server_wal_end = self.server_wal_end.max(wal_end);
                Ok(Some(XLogMessage {
                    wal_start,
                    message: pgoutput::decode(body)?,
                }))
            }
            Some(b'k') if body.len() >= 18 => {
                body.advance(1);
                let wal_end = Lsn(body.get_u64());
                body.advance(8);
                self.server_wal_end = self.server_wal_end.max(wal_end);
                if body.get_u8() == 1 {
                    self.send_status(false).await?;
                }
                Ok(None)
            }
            _ => Err(short()),
        }
    }

    /// Declares everything up to `lsn` durable on the caller's side. Never moves backwards.
    /// Takes effect with the next status update (periodic, requested, or [`Self::send_status`]).
    pub fn set_flushed(&mut self, lsn: Lsn) {
        self.flushed = self.flushed.max(lsn);
    }

    /// Sends a standby status update now: written = received, flushed = applied = declared.
    pub async fn send_status(&mut self, reply_requested: bool) -> PgResult<()> {
        let mut payload = Vec::with_capacity(34);
        payload.put_u8(b'r');
        payload.put_u64(self.received.max(self.flushed).0);
        payload.put_u64(self.flushed.0);
        payload.put_u64(self.flushed.0);
        payload.put_i64(pg_now_us());
        payload.put_u8(u8::from(reply_requested));
        self.conn.queue_copy_data(&payload);
        self.conn.flush().await?;
        self.next_status = Instant::now() + self.status_interval;
        Ok(())
    }

    /// The highest WAL position received.
    pub fn received(&self) -> Lsn {
        self.received
    }

    /// The flush position declared by the caller.
    pub fn flushed(&self) -> Lsn {
        self.flushed
    }

    /// The server's WAL end as of its last message (for lag reporting).
    pub fn server_wal_end(&self) -> Lsn {
        self.server_wal_end
    }
}

/// Microseconds since 2000-01-01, the clock of the replication protocol.
fn pg_now_us() -> i64 {
    pg_time::postgres_micros(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A backend message: tag, length, body.
    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.put_u32(u32::try_from(body.len() + 4).unwrap());
        out.extend_from_slice(body);
        out
    }

    fn error_response(code: &str, text: &str) -> Vec<u8> {
        let body = format!("SFATAL\0C{code}\0M{text}\0\0");
        message(b'E', body.as_bytes())
    }

    #[tokio::test]
    async fn every_way_the_server_ends_the_stream_is_transient() {
        let endings = [
            message(b'C', b"COPY 0\0"),
            message(b'c', b""),
            error_response(
                "57P01",
                "terminating connection due to administrator command",
            ),
            error_response(
                "57P02",
                "terminating connection because of crash of another server process",
            ),
            error_response("57P03", "the database system is shutting down"),
            error_response("08006", "connection failure"),
            Vec::new(),
        ];
        for ending in endings {
            let (ours, mut theirs) = tokio::io::duplex(1024);
            theirs.write_all(&ending).await.unwrap();
            drop(theirs);
            let options = StreamOptions::new("slot", "publication");
            let mut stream =
                ReplicationStream::streaming(WireConnection::new(Box::new(ours)), &options);
            let e = stream.next().await.unwrap_err();
            assert!(e.is_transient(), "{e}");
        }
    }
}
