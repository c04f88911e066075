//! Running a snapshot: a `REPEATABLE READ READ ONLY` transaction that records its MVCC snapshot
//! and WAL position, then streams the rows by binary COPY.

use std::pin::Pin;

use futures_util::StreamExt;
use syncline_core::{Lsn, PgSnapshot};
use tokio_postgres::{Client, CopyOutStream};

use super::copy_binary::{CopyParser, RowRef};
use super::query::SnapshotQuery;
use crate::conn::session_settings_sql;
use crate::error::{PgError, PgResult};

/// Where a snapshot stands relative to the replication stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// `pg_current_snapshot()`: which transactions' effects the rows include.
    pub pg_snapshot: PgSnapshot,
    /// `pg_current_wal_lsn()` when the snapshot was taken.
    pub wal_lsn: Lsn,
}

/// A snapshot being streamed. Rows arrive chunk by chunk; the transaction ends with the stream.
pub struct Snapshot<'c> {
    client: &'c Client,
    info: SnapshotInfo,
    stream: Pin<Box<CopyOutStream>>,
    parser: CopyParser,
    rows: u64,
    finished: bool,
}

impl<'c> Snapshot<'c> {
    /// Opens the transaction, records its snapshot and WAL position, and starts the COPY.
    /// `client` must be idle and not inside a transaction.
    pub async fn begin(client: &'c Client, query: &SnapshotQuery) -> PgResult<Snapshot<'c>> {
        client
            .batch_execute(&format!("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; {}", session_settings_sql().replace("SET ", "SET LOCAL ")))
            .await?;
        match Self::start_copy(client, query).await {
            Ok(snapshot) => Ok(snapshot),
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                Err(e)
            }
        }
    }

    async fn start_copy(client: &'c Client, query: &SnapshotQuery) -> PgResult<Snapshot<'c>> {
        let row = client.query_one("SELECT pg_current_snapshot()::text, pg_current_wal_lsn()::text", &[]).await?;
        let snapshot: String = row.get(0);
        let lsn: String = row.get(1);
        let info = SnapshotInfo {
            pg_snapshot: snapshot.parse().map_err(|e| PgError::Protocol(format!("{e}")))?,
            wal_lsn: lsn.parse().map_err(|e| PgError::Protocol(format!("{e}")))?,
        };
        let stream = client.copy_out(&query.copy_sql()).await?;
        tracing::debug!(table = %query.table, snapshot = %info.pg_snapshot, lsn = %info.wal_lsn, "snapshot started");
        Ok(Snapshot { client, info, stream: Box::pin(stream), parser: CopyParser::new(), rows: 0, finished: false })
    }

    /// The snapshot's position.
    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }

    /// Rows delivered so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Delivers the rows of the next received chunk to `on_row`. Returns `false` once the COPY
    /// is complete and the transaction closed.
    pub async fn next_chunk(&mut self, on_row: &mut impl FnMut(RowRef<'_>) -> PgResult<()>) -> PgResult<bool> {
        if self.finished {
            return Ok(false);
        }
        match self.stream.next().await {
            Some(chunk) => {
                let chunk = chunk?;
                let rows = &mut self.rows;
                self.parser.feed(&chunk, &mut |row| {
                    *rows += 1;
                    on_row(row)
                })?;
                Ok(true)
            }
            None => {
                self.finished = true;
                self.parser.finish()?;
                self.client.batch_execute("COMMIT").await?;
                tracing::debug!(rows = self.rows, "snapshot finished");
                Ok(false)
            }
        }
    }
}
