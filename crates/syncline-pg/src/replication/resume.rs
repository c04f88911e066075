//! A replication stream that survives dropped connections without losing or repeating a
//! transaction.
//!
//! After a reconnect Postgres resends every transaction after the slot's confirmed flush
//! position, which may include transactions this stream already delivered (the caller had not
//! made them durable yet, or had not said so). Those are skipped by commit LSN. A transaction
//! that was cut off midway is announced with [`StreamEvent::Interrupted`] and then delivered
//! again from its Begin.
//!
//! Reconnecting is cancel-safe: the attempt count, the current delay, the time of the next
//! attempt and an attempt in flight live in the stream, so a caller that drops
//! [`ResumingStream::next`] (e.g. in a `select!` beside a timer) and calls it again continues
//! the same backoff rather than starting over.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rand::Rng;
use syncline_core::Lsn;
use tokio::sync::watch;
use tokio::time::Instant;

use super::pgoutput::PgOutput;
use super::stream::{ReplicationStream, StreamOptions, XLogMessage};
use crate::conn::ConnConfig;
use crate::error::{PgError, PgResult};

/// First wait before reconnecting.
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(50);
/// Shortest time between two warnings about failed reconnect attempts (after the first);
/// failures in between are logged at debug level.
const RECONNECT_WARN_INTERVAL: Duration = Duration::from_secs(30);

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

/// Whether a [`ResumingStream`] is connected, for health reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamStatus {
    /// Streaming.
    Connected,
    /// The connection was lost and is being re-established.
    Reconnecting {
        /// Attempts started since the connection was lost.
        attempt: u32,
        /// When the connection was lost.
        since: std::time::Instant,
        /// The wait before the next attempt (zero while one is in flight).
        next_delay: Duration,
        /// Why the connection was lost, or why the last attempt failed.
        last_error: String,
    },
}

/// An attempt to connect, owned by the stream so that it survives a dropped `next()`.
type Attempt = Pin<Box<dyn Future<Output = PgResult<ReplicationStream>> + Send>>;

/// Where the connection stands.
enum Link {
    /// Connected and streaming.
    Streaming(ReplicationStream),
    /// Disconnected; the next attempt starts at the given instant.
    Waiting(Instant),
    /// An attempt is in flight.
    Connecting(Attempt),
}

/// Reconnect bookkeeping since the connection was lost.
struct Backoff {
    /// Attempts started.
    attempt: u32,
    /// The delay before the next attempt, before jitter; doubles per failure up to the maximum.
    delay: Duration,
    /// When the connection was lost.
    since: std::time::Instant,
    /// When a failed attempt was last logged as a warning.
    last_warning: Option<Instant>,
}

/// A [`ReplicationStream`] that reconnects on transient errors and resumes from the slot.
pub struct ResumingStream {
    config: ConnConfig,
    options: StreamOptions,
    link: Link,
    backoff: Option<Backoff>,
    status: watch::Sender<StreamStatus>,
    last_commit: Lsn,
    open_txn: Option<u32>,
    skipping: bool,
    flushed: Lsn,
    reconnects: u64,
}

impl ResumingStream {
    /// Starts streaming; the first connection's errors are returned, later ones retried.
    pub async fn start(config: ConnConfig, options: StreamOptions) -> PgResult<ResumingStream> {
        assert!(
            options.reconnect_delay_max >= RECONNECT_DELAY_MIN,
            "the longest reconnect delay is shorter than the first"
        );
        let stream = ReplicationStream::start(&config, &options).await?;
        Ok(ResumingStream {
            config,
            flushed: options.start_lsn,
            options,
            link: Link::Streaming(stream),
            backoff: None,
            status: watch::Sender::new(StreamStatus::Connected),
            last_commit: Lsn::ZERO,
            open_txn: None,
            skipping: false,
            reconnects: 0,
        })
    }

    /// The next event. Transient failures (connection lost, server shutting down or
    /// restarting, backend terminated, slot briefly busy) are retried with delays that double
    /// up to [`StreamOptions::reconnect_delay_max`]; other errors are returned.
    ///
    /// Cancel-safe: dropping the future loses no message, and calling again continues the
    /// same backoff (and the same connection attempt, if one is in flight).
    pub async fn next(&mut self) -> PgResult<StreamEvent> {
        loop {
            match &mut self.link {
                Link::Streaming(stream) => match stream.next().await {
                    Ok(msg) => {
                        if let Some(msg) = self.filter(msg) {
                            return Ok(StreamEvent::Message(msg));
                        }
                    }
                    Err(e) if e.is_transient() => self.lost(&e),
                    Err(e) => return Err(e),
                },
                Link::Waiting(at) => {
                    tokio::time::sleep_until(*at).await;
                    self.start_attempt();
                }
                Link::Connecting(attempt) => match attempt.as_mut().await {
                    Ok(mut stream) => {
                        stream.set_flushed(self.flushed);
                        self.connected(stream);
                        if let Some(xid) = self.open_txn.take() {
                            return Ok(StreamEvent::Interrupted { xid });
                        }
                    }
                    Err(e) => {
                        let next_delay = self.schedule_attempt(&e);
                        if !e.is_transient() {
                            return Err(e);
                        }
                        self.log_failed_attempt(&e, next_delay);
                    }
                },
            }
        }
    }

    /// The connection broke: the first attempt follows shortly.
    fn lost(&mut self, error: &PgError) {
        tracing::warn!(error = %error, next_delay = ?RECONNECT_DELAY_MIN, "replication connection lost; reconnecting");
        let since = std::time::Instant::now();
        self.backoff = Some(Backoff {
            attempt: 0,
            delay: RECONNECT_DELAY_MIN,
            since,
            last_warning: None,
        });
        self.link = Link::Waiting(Instant::now() + RECONNECT_DELAY_MIN);
        self.status.send_replace(StreamStatus::Reconnecting {
            attempt: 0,
            since,
            next_delay: RECONNECT_DELAY_MIN,
            last_error: error.to_string(),
        });
    }

    /// Starts a connection attempt, owned by the stream so that it survives a dropped
    /// [`Self::next`].
    fn start_attempt(&mut self) {
        let backoff = self.backoff.as_mut().expect("only a lost connection waits");
        backoff.attempt += 1;
        let attempt = backoff.attempt;
        let (config, options) = (self.config.clone(), self.options.clone());
        self.link = Link::Connecting(Box::pin(async move {
            ReplicationStream::start(&config, &options).await
        }));
        self.status.send_modify(|status| {
            if let StreamStatus::Reconnecting {
                attempt: a,
                next_delay,
                ..
            } = status
            {
                *a = attempt;
                *next_delay = Duration::ZERO;
            }
        });
    }

    /// An attempt failed: doubles the delay (up to the maximum), schedules the next attempt
    /// after it less up to a quarter of jitter, and returns that wait.
    fn schedule_attempt(&mut self, error: &PgError) -> Duration {
        let backoff = self
            .backoff
            .as_mut()
            .expect("only a lost connection reconnects");
        backoff.delay = (backoff.delay * 2).min(self.options.reconnect_delay_max);
        let wait = backoff.delay - rand::thread_rng().gen_range(Duration::ZERO..=backoff.delay / 4);
        self.link = Link::Waiting(Instant::now() + wait);
        self.status.send_replace(StreamStatus::Reconnecting {
            attempt: backoff.attempt,
            since: backoff.since,
            next_delay: wait,
            last_error: error.to_string(),
        });
        wait
    }

    /// Logs a failed attempt: a warning for the first, then at most one per
    /// [`RECONNECT_WARN_INTERVAL`]; debug otherwise.
    fn log_failed_attempt(&mut self, error: &PgError, next_delay: Duration) {
        let backoff = self
            .backoff
            .as_mut()
            .expect("only a lost connection reconnects");
        let now = Instant::now();
        let down_for = backoff.since.elapsed();
        let attempt = backoff.attempt;
        if backoff
            .last_warning
            .is_none_or(|t| now - t >= RECONNECT_WARN_INTERVAL)
        {
            backoff.last_warning = Some(now);
            tracing::warn!(attempt, ?next_delay, ?down_for, error = %error, "replication reconnect failed; retrying");
        } else {
            tracing::debug!(attempt, ?next_delay, ?down_for, error = %error, "replication reconnect failed; retrying");
        }
    }

    /// An attempt succeeded.
    fn connected(&mut self, stream: ReplicationStream) {
        let backoff = self
            .backoff
            .take()
            .expect("only a lost connection reconnects");
        tracing::info!(
            attempts = backoff.attempt,
            down_for = ?backoff.since.elapsed(),
            "replication reconnected"
        );
        self.link = Link::Streaming(stream);
        self.reconnects += 1;
        // A replayed transaction that was being skipped when the connection broke is either
        // replayed again from its Begin or, if acknowledged meanwhile, not at all.
        self.skipping = false;
        self.status.send_replace(StreamStatus::Connected);
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

    /// Declares everything up to `lsn` durable (see [`ReplicationStream::set_flushed`]).
    pub fn set_flushed(&mut self, lsn: Lsn) {
        self.flushed = self.flushed.max(lsn);
        if let Link::Streaming(stream) = &mut self.link {
            stream.set_flushed(lsn);
        }
    }

    /// Sends a standby status update now, if connected; with `reply_requested` the server
    /// answers with a keepalive that reports its decoder's position.
    pub async fn send_status(&mut self, reply_requested: bool) -> PgResult<()> {
        match &mut self.link {
            Link::Streaming(stream) => stream.send_status(reply_requested).await,
            Link::Waiting(_) | Link::Connecting(_) => Ok(()),
        }
    }

    /// How many times the stream has reconnected.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Whether the stream is connected or reconnecting (attempts, since when, next delay, last
    /// error).
    pub fn status(&self) -> StreamStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every change of [`Self::status`], for reporting it from another
    /// task (e.g. a health endpoint) while this stream is being read.
    pub fn subscribe_status(&self) -> watch::Receiver<StreamStatus> {
        self.status.subscribe()
    }

    /// The server's WAL end as last reported (zero while disconnected).
    pub fn server_wal_end(&self) -> Lsn {
        match &self.link {
            Link::Streaming(stream) => stream.server_wal_end(),
            Link::Waiting(_) | Link::Connecting(_) => Lsn::ZERO,
        }
    }
}
