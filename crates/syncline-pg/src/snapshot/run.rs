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

/// The first pause before taking a snapshot again that missed a transaction it must see; each
/// next one is twice as long, up to [`MUST_SEE_PAUSE_MAX`].
const MUST_SEE_PAUSE_MIN: Duration = Duration::from_millis(1);
/// The longest pause between two tries at a snapshot that sees what it must.
const MUST_SEE_PAUSE_MAX: Duration = Duration::from_millis(50);
/// How long a snapshot waits for a transaction before each warning that it still does.
const MUST_SEE_WARN_INTERVAL: Duration = Duration::from_secs(10);
/// How long a snapshot waits for a transaction at most: then it fails
/// ([`PgError::Invisible`]) rather than hold its connection for good.
const MUST_SEE_WAIT_MAX: Duration = Duration::from_secs(60);

/// Whether `snapshot` sees every transaction of `must_see`, or the first it does not.
///
/// Postgres hands a commit to logical decoding once its WAL is flushed, and shows it to other
/// sessions only afterwards (after a synchronous standby confirmed it, if one is configured). A
/// snapshot taken in between misses a transaction the replication stream already delivered,
/// and whatever reads the stream from there on never sees that transaction's changes either:
/// a snapshot that a log continues must see every transaction delivered before it.
pub fn sees_all(snapshot: &PgSnapshot, must_see: &[u32]) -> Result<(), u32> {
    match must_see.iter().find(|&&xid| !snapshot.is_visible(xid)) {
        Some(&xid) => Err(xid),
        None => Ok(()),
    }
}

/// How long a snapshot has waited for a transaction to become visible.
struct Waited {
    since: tokio::time::Instant,
    pause: Duration,
    next_warning: tokio::time::Instant,
}

impl Waited {
    fn new() -> Waited {
        let now = tokio::time::Instant::now();
        Waited {
            since: now,
            pause: MUST_SEE_PAUSE_MIN,
            next_warning: now + MUST_SEE_WARN_INTERVAL,
        }
    }

    /// Waits before the next try; warns while transaction `xid` stays invisible long, and
    /// fails once it did for [`MUST_SEE_WAIT_MAX`].
    async fn pause(&mut self, xid: u32) -> PgResult<()> {
        let now = tokio::time::Instant::now();
        if now - self.since >= MUST_SEE_WAIT_MAX {
            return Err(PgError::Invisible {
                xid,
                seconds: (now - self.since).as_secs(),
            });
        }
        if now >= self.next_warning {
            self.next_warning = now + MUST_SEE_WARN_INTERVAL;
            tracing::warn!(
                xid,
                seconds = (now - self.since).as_secs(),
                "a snapshot waits for a transaction the replication stream delivered to become visible (is a synchronous standby missing?)"
            );
        } else {
            tracing::debug!(
                xid,
                "a snapshot missed a transaction the replication stream delivered; taking it again"
            );
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(MUST_SEE_PAUSE_MAX);
        Ok(())
    }
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
        Ok(Self::begin_after(conn, query, &[], &[]).await?.0)
    }

    /// [`Snapshot::begin`], running each of `first` (SQL rendered by the server, never user
    /// text) in the same transaction before the COPY, so their rows and the snapshot's are of
    /// one instant; returns their rows as text. The snapshot sees every transaction of
    /// `must_see` (see [`sees_all`]).
    pub async fn begin_after(
        conn: &'c mut WireConnection,
        query: &SnapshotQuery,
        first: &[String],
        must_see: &[u32],
    ) -> PgResult<(Snapshot<'c>, Vec<Vec<crate::wire::TextRow>>)> {
        let table = syncline_core::sql::quote_literal(&syncline_core::sql::qualified(
            &query.schema,
            &query.table,
        ));
        let open = format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
             SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text, \
             (SELECT c.reltuples::bigint FROM pg_catalog.pg_class c \
              WHERE c.oid = pg_catalog.to_regclass({table}))::text"
        );
        let mut waited = Waited::new();
        let (rows, info) = loop {
            let rows = conn.simple_query(&open).await?;
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
            match sees_all(&info.pg_snapshot, must_see) {
                Ok(()) => break (rows, info),
                Err(xid) => {
                    conn.simple_query("ROLLBACK").await?;
                    waited.pause(xid).await?;
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_sees_what_it_must_or_names_the_first_it_misses() {
        let snapshot: PgSnapshot = "100:110:103,105".parse().unwrap();
        assert_eq!(sees_all(&snapshot, &[]), Ok(()));
        assert_eq!(sees_all(&snapshot, &[90, 99, 104, 109]), Ok(()));
        assert_eq!(
            sees_all(&snapshot, &[90, 105, 103]),
            Err(105),
            "running when taken"
        );
        assert_eq!(sees_all(&snapshot, &[90, 110]), Err(110), "committed after");
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_pauses_twice_as_long_each_time_and_gives_up_after_a_minute() {
        let start = tokio::time::Instant::now();
        let mut waited = Waited::new();
        let mut tries = 0;
        let failure = loop {
            match waited.pause(7).await {
                Ok(()) => tries += 1,
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                failure,
                PgError::Invisible {
                    xid: 7,
                    seconds: 60
                }
            ),
            "{failure}"
        );
        assert_eq!(failure.kind(), crate::ErrorKind::Unavailable);
        let elapsed = start.elapsed();
        assert!(elapsed >= MUST_SEE_WAIT_MAX, "{elapsed:?}");
        assert!(
            elapsed < MUST_SEE_WAIT_MAX + MUST_SEE_PAUSE_MAX,
            "{elapsed:?}"
        );
        // 1, 2, 4, 8, 16, 32 ms, then 50 ms pauses.
        assert_eq!(tries, 6 + (60_000 - 63) / 50 + 1);
    }
}
