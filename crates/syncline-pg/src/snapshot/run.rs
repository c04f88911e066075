//! Running a snapshot: a `REPEATABLE READ READ ONLY` transaction that records its MVCC snapshot
//! and WAL position, then streams the rows by binary COPY, read inline from the socket.

use std::time::{Duration, Instant};

use syncline_core::{Lsn, PgSnapshot};

use super::copy_binary::{CopyParser, RowRef};
use super::query::SnapshotQuery;
use crate::error::{PgError, PgResult};
use crate::wire::WireConnection;

/// How often a running snapshot logs its progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Where a snapshot stands relative to the replication stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// `pg_current_snapshot()`: which transactions' effects the rows include.
    pub pg_snapshot: PgSnapshot,
    /// `pg_current_wal_insert_lsn()` when the snapshot was taken: every transaction the snapshot
    /// sees committed before it. (Not `pg_current_wal_lsn()`, the write position: with
    /// asynchronous commit, a visible transaction's commit record may lie past it.)
    pub wal_lsn: Lsn,
}

/// A snapshot being streamed. Rows arrive chunk by chunk; the transaction ends with the stream.
/// After an error the connection is in an unknown state and must be dropped.
pub struct Snapshot<'c> {
    conn: &'c mut WireConnection,
    info: SnapshotInfo,
    parser: CopyParser,
    rows: u64,
    finished: bool,
    table: String,
    /// The table's estimated rows (`pg_class.reltuples`), if Postgres has an estimate.
    estimated_rows: Option<u64>,
    started: Instant,
    next_progress: Instant,
}

impl<'c> Snapshot<'c> {
    /// Opens the transaction, records its snapshot and WAL position, and starts the COPY.
    /// `conn` must be an idle [`crate::wire::Mode::Query`] connection outside a transaction.
    pub async fn begin(
        conn: &'c mut WireConnection,
        query: &SnapshotQuery,
    ) -> PgResult<Snapshot<'c>> {
        Ok(Self::begin_after(conn, query, &[]).await?.0)
    }

    /// [`Snapshot::begin`], running each of `first` (SQL rendered by the server, never user
    /// text) in the same transaction before the COPY, so their rows and the snapshot's are of
    /// one instant; returns their rows as text.
    pub async fn begin_after(
        conn: &'c mut WireConnection,
        query: &SnapshotQuery,
        first: &[String],
    ) -> PgResult<(Snapshot<'c>, Vec<Vec<crate::wire::TextRow>>)> {
        let table = syncline_core::sql::quote_literal(&syncline_core::sql::qualified(
            &query.schema,
            &query.table,
        ));
        let rows = conn
            .simple_query(&format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
                 SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text, \
                 (SELECT c.reltuples::bigint FROM pg_catalog.pg_class c \
                  WHERE c.oid = pg_catalog.to_regclass({table}))::text"
            ))
            .await?;
        let field = |i: usize| {
            rows.first()
                .and_then(|r| r.get(i).cloned().flatten())
                .ok_or_else(|| PgError::Protocol("no snapshot row".into()))
        };
        let info = SnapshotInfo {
            pg_snapshot: field(0)?
                .parse()
                .map_err(|e| PgError::Protocol(format!("{e}")))?,
            wal_lsn: field(1)?
                .parse()
                .map_err(|e| PgError::Protocol(format!("{e}")))?,
        };
        // -1: never vacuumed or analyzed (and a partitioned table's own row): unknown.
        let estimated_rows = rows
            .first()
            .and_then(|r| r.get(2).cloned().flatten())
            .and_then(|t| t.parse::<u64>().ok());
        let mut before = Vec::with_capacity(first.len());
        for sql in first {
            before.push(conn.simple_query(sql).await?);
        }
        conn.start_copy_out(&query.copy_sql()).await?;
        tracing::debug!(table = %query.table, snapshot = %info.pg_snapshot, lsn = %info.wal_lsn, "snapshot started");
        let started = Instant::now();
        let snapshot = Snapshot {
            conn,
            info,
            parser: CopyParser::new(),
            rows: 0,
            finished: false,
            table: format!("{}.{}", query.schema, query.table),
            estimated_rows,
            started,
            next_progress: started + PROGRESS_INTERVAL,
        };
        Ok((snapshot, before))
    }

    /// The snapshot's position.
    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }

    /// Whether every row was delivered and the transaction closed: the connection is idle.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Rows delivered so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// How many rows the table holds, as Postgres estimates (`pg_class.reltuples`, kept by
    /// VACUUM and ANALYZE); `None` without an estimate. A shape with a where clause gets a part
    /// of them.
    pub fn estimated_rows(&self) -> Option<u64> {
        self.estimated_rows
    }

    /// Delivers the rows received so far to `on_row`, waiting for more if none are buffered.
    /// Returns `false` once the COPY is complete and the transaction closed.
    pub async fn next_chunk(
        &mut self,
        on_row: &mut impl FnMut(RowRef<'_>) -> PgResult<()>,
    ) -> PgResult<bool> {
        if self.finished {
            return Ok(false);
        }
        let Snapshot {
            conn, parser, rows, ..
        } = self;
        let more = conn
            .read_copy_data(&mut |data| {
                parser.feed(data, &mut |row| {
                    *rows += 1;
                    on_row(row)
                })
            })
            .await?;
        let now = Instant::now();
        if !more {
            self.finished = true;
            self.parser.finish()?;
            self.conn.simple_query("COMMIT").await?;
            tracing::info!(table = %self.table, rows = self.rows, seconds = (now - self.started).as_secs_f64(), "snapshot finished");
        } else if now >= self.next_progress {
            self.next_progress = now + PROGRESS_INTERVAL;
            let rate = self.rows as f64 / (now - self.started).as_secs_f64();
            match self.estimated_rows.filter(|&t| t > 0) {
                Some(total) => {
                    let percent = (self.rows as f64 * 100.0 / total as f64).min(100.0);
                    tracing::info!(table = %self.table, rows = self.rows, table_rows_estimated = total, percent = percent.round(), rows_per_s = rate.round(), "snapshot in progress");
                }
                None => {
                    tracing::info!(table = %self.table, rows = self.rows, rows_per_s = rate.round(), "snapshot in progress");
                }
            }
        }
        Ok(more)
    }
}
