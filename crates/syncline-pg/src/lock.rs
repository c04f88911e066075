//! The writer's lock: a Postgres session-level advisory lock held on a session of its own.
//!
//! Exactly one server per database and lock name holds it; it goes with the session, so a
//! holder that dies (or loses its connection) frees it for another. The key is
//! `hashtext(<name>)`, as Electric derives its own from the slot name.

use std::time::Duration;

use tokio_postgres::Client;

use crate::conn::{connect, ConnConfig};
use crate::error::{PgError, PgResult};

/// How often a server that does not hold the lock should ask for it again.
pub const LOCK_RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// How often the holder checks that its session is alive.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a heartbeat may take before the session counts as lost.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the holder looks at whether its connection closed.
const CLOSED_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// A session that holds the advisory lock of one name.
pub struct SessionLock {
    client: Client,
    name: String,
}

impl SessionLock {
    /// Opens a session and takes the lock if it is free now; `Ok(None)` when another session
    /// holds it.
    pub async fn try_acquire(config: &ConnConfig, name: &str) -> PgResult<Option<SessionLock>> {
        let client = connect(config).await?;
        // A role's or database's timeouts must not end the session that holds the lock.
        client
            .batch_execute("SET statement_timeout = 0; SET idle_session_timeout = 0")
            .await?;
        let held: bool = client
            .query_one(
                "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext($1))",
                &[&name],
            )
            .await?
            .get(0);
        Ok(held.then(|| SessionLock {
            client,
            name: name.to_owned(),
        }))
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Resolves when the session, and with it the lock, is gone (the connection closed, or a
    /// heartbeat failed or took longer than [`HEARTBEAT_TIMEOUT`]).
    pub async fn lost(&self) -> PgError {
        let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL);
        let mut closed = tokio::time::interval(CLOSED_CHECK_INTERVAL);
        loop {
            tokio::select! {
                _ = closed.tick() => {
                    if self.client.is_closed() {
                        return PgError::Closed("the lock's session ended".into());
                    }
                }
                _ = heartbeat.tick() => {
                    match tokio::time::timeout(HEARTBEAT_TIMEOUT, self.client.simple_query("")).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return e.into(),
                        Err(_) => {
                            return PgError::Closed(format!(
                                "the lock's session did not answer within {HEARTBEAT_TIMEOUT:?}"
                            ))
                        }
                    }
                }
            }
        }
    }

    /// Releases the lock and ends the session.
    pub async fn release(self) -> PgResult<()> {
        self.client
            .query_one(
                "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext($1))",
                &[&self.name],
            )
            .await?;
        Ok(())
    }
}
