//! A replication stream that survives dropped connections without losing or repeating a
//! transaction.
//!
//! After a reconnect Postgres resends every transaction after the slot's confirmed flush
//! position, which may include transactions this stream already delivered (the caller had not
//! made them durable yet, or had not said so). Those are skipped by commit LSN. A transaction
//! that was cut off midway is announced with [`StreamEvent::Interrupted`] and then delivered
//! again from its Begin.

use std::time::Duration;

use syncline_core::Lsn;

use super::pgoutput::PgOutput;
use super::stream::{ReplicationStream, StreamOptions, XLogMessage};
use crate::conn::ConnConfig;
use crate::error::PgResult;

/// First wait before reconnecting.
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(50);
/// Longest wait between reconnect attempts.
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(5);

/// What a [`ResumingStream`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The next message of a transaction not delivered before.
    Message(XLogMessage),
    /// The connection dropped inside the transaction `xid`: discard what was delivered of it;
    /// it will be delivered again, whole, from its Begin.
    Interrupted {
        /// The cut transaction.
        xid: u32,
    },
}

/// A [`ReplicationStream`] that reconnects on transient errors and resumes from the slot.
pub struct ResumingStream {
    config: ConnConfig,
    options: StreamOptions,
    stream: Option<ReplicationStream>,
    last_commit: Lsn,
    open_txn: Option<u32>,
    skipping: bool,
    flushed: Lsn,
    reconnects: u64,
}

impl ResumingStream {
    /// Starts streaming; the first connection's errors are returned, later ones retried.
    pub async fn start(config: ConnConfig, options: StreamOptions) -> PgResult<ResumingStream> {
        let stream = ReplicationStream::start(&config, &options).await?;
        Ok(ResumingStream {
            config,
            flushed: options.start_lsn,
            options,
            stream: Some(stream),
            last_commit: Lsn::ZERO,
            open_txn: None,
            skipping: false,
            reconnects: 0,
        })
    }

    /// The next event. Transient failures (connection lost, backend terminated, slot briefly
    /// busy) are retried with backoff; other errors are returned.
    pub async fn next(&mut self) -> PgResult<StreamEvent> {
        loop {
            let Some(stream) = self.stream.as_mut() else {
                self.reconnect().await?;
                if let Some(xid) = self.open_txn.take() {
                    return Ok(StreamEvent::Interrupted { xid });
                }
                continue;
            };
            let msg = match stream.next().await {
                Ok(msg) => msg,
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, "replication connection lost; reconnecting");
                    self.stream = None;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(msg) = self.filter(msg) {
                return Ok(StreamEvent::Message(msg));
            }
        }
    }

    /// Passes through messages of undelivered transactions and tracks transaction boundaries.
    fn filter(&mut self, msg: XLogMessage) -> Option<XLogMessage> {
        match msg.message {
            PgOutput::Begin { final_lsn, xid, .. } => {
                if final_lsn <= self.last_commit {
                    self.skipping = true;
                    return None;
                }
                self.open_txn = Some(xid);
            }
            PgOutput::Commit { commit_lsn, .. } => {
                if std::mem::take(&mut self.skipping) {
                    return None;
                }
                self.last_commit = commit_lsn;
                self.open_txn = None;
            }
            _ if self.skipping => return None,
            _ => {}
        }
        Some(msg)
    }

    async fn reconnect(&mut self) -> PgResult<()> {
        let mut delay = RECONNECT_DELAY_MIN;
        loop {
            tokio::time::sleep(delay).await;
            match ReplicationStream::start(&self.config, &self.options).await {
                Ok(mut stream) => {
                    stream.set_flushed(self.flushed);
                    self.stream = Some(stream);
                    self.reconnects += 1;
                    return Ok(());
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(error = %e, ?delay, "replication reconnect failed; retrying");
                    delay = (delay * 2).min(RECONNECT_DELAY_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Declares everything up to `lsn` durable (see [`ReplicationStream::set_flushed`]).
    pub fn set_flushed(&mut self, lsn: Lsn) {
        self.flushed = self.flushed.max(lsn);
        if let Some(stream) = self.stream.as_mut() {
            stream.set_flushed(lsn);
        }
    }

    /// Sends a standby status update now, if connected; with `reply_requested` the server
    /// answers with a keepalive that reports its decoder's position.
    pub async fn send_status(&mut self, reply_requested: bool) -> PgResult<()> {
        match self.stream.as_mut() {
            Some(stream) => stream.send_status(reply_requested).await,
            None => Ok(()),
        }
    }

    /// How many times the stream has reconnected.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// The server's WAL end as last reported (zero while disconnected).
    pub fn server_wal_end(&self) -> Lsn {
        self.stream
            .as_ref()
            .map_or(Lsn::ZERO, |s| s.server_wal_end())
    }
}
