//! A shape's initial snapshot: rows by binary COPY in a `REPEATABLE READ` transaction, written
//! to the shape log as Electric insert messages, then `snapshot-end`.

use std::sync::Arc;

use syncline_core::{wire, LogOffset};
use syncline_pg::snapshot::{RowEncoder, Snapshot, SnapshotQuery};
use syncline_pg::{ErrorKind, PgError};
use syncline_storage::{Message, Operation, StorageError};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::metrics::{Metrics, SnapshotLabels};
use crate::postgres::Postgres;
use crate::shapes::{Blame, Failure, LogMode, MustSee, QueuedSnapshot, Shape, Shapes, StepError};
use crate::subquery;

/// JSON bytes buffered before they are appended to the log.
const APPEND_BATCH_BYTES: usize = 1 << 20;
/// JSON bytes after which the snapshot so far is committed and flushed, so readers can start.
const PUBLISH_BATCH_BYTES: usize = 8 << 20;
/// The application name of snapshot connections (pooled under it).
const APPLICATION_NAME: &str = "syncline-snapshot";
/// Encoded batches waiting for the log writer (bounds the memory a fast COPY can take).
const BATCHES_QUEUED_MAX: usize = 4;

/// Why a snapshot failed.
#[derive(Debug, thiserror::Error)]
enum SnapshotError {
    #[error("{0}")]
    Postgres(#[from] PgError),
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the shape was removed")]
    Removed,
}

impl SnapshotError {
    /// The failure waiting requests are told of.
    fn failure(&self) -> Failure {
        let blame = match self {
            SnapshotError::Postgres(e) => match e.kind() {
                ErrorKind::InvalidRequest => Blame::Request,
                ErrorKind::Permission | ErrorKind::UndefinedObject => Blame::Table,
                _ => Blame::Server,
            },
            _ => Blame::Server,
        };
        let message = match self {
            SnapshotError::Postgres(e) => e
                .server_message()
                .map_or_else(|| e.to_string(), str::to_owned),
            e => e.to_string(),
        };
        Failure { message, blame }
    }
}

impl From<StepError> for SnapshotError {
    fn from(e: StepError) -> Self {
        match e {
            StepError::Io(e) => SnapshotError::Io(e),
            StepError::Removed => SnapshotError::Removed,
        }
    }
}

/// Collected rows not yet appended.
#[derive(Default)]
struct Batch {
    json: Vec<u8>,
    keys: Vec<u8>,
    /// Offset, end of key in `keys`, end of JSON in `json`.
    entries: Vec<(LogOffset, usize, usize)>,
    /// Publish the snapshot so far once this batch is appended.
    publish: bool,
}

impl Batch {
    fn messages(&self) -> Vec<Message<'_>> {
        let (mut key_start, mut json_start) = (0, 0);
        self.entries
            .iter()
            .map(|&(offset, key_end, json_end)| {
                let m = Message {
                    offset,
                    key: &self.keys[key_start..key_end],
                    op: Operation::Insert,
                    json: &self.json[json_start..json_end],
                };
                (key_start, json_start) = (key_end, json_end);
                m
            })
            .collect()
    }
}

/// What a snapshot needs.
#[derive(Clone)]
pub struct Snapshotter {
    /// The shapes, told of each step.
    pub shapes: Arc<Shapes>,
    /// Query connections.
    pub postgres: Arc<Postgres>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// Takes the snapshot of every shape queued on `queue` (at most `ELECTRIC_DB_POOL_SIZE` at
/// once), until the queue closes and they are done. Dropping it stops every snapshot it runs
/// (this server stopped writing).
pub async fn run_queue(
    snapshotter: Snapshotter,
    mut queue: mpsc::UnboundedReceiver<QueuedSnapshot>,
) {
    let mut running = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            shape = queue.recv() => match shape {
                Some((shape, must_see)) => {
                    running.spawn(snapshotter.clone().run(shape, must_see));
                }
                None => break,
            },
            Some(_) = running.join_next(), if !running.is_empty() => {}
        }
    }
    while running.join_next().await.is_some() {}
}

impl Snapshotter {
    /// Takes the snapshot (waiting for a pool slot first), seeing every transaction of
    /// `must_see`; on failure the shape is removed and waiting requests learn why.
    async fn run(self, shape: Arc<Shape>, must_see: MustSee) {
        let metrics = &self.metrics;
        metrics.snapshots_waiting.inc();
        let permit = self.postgres.query_permit().await;
        metrics.snapshots_waiting.dec();
        let result = match permit {
            Ok(permit) => {
                metrics.snapshots_running.inc();
                let result = self.take(&shape, &must_see, permit).await;
                metrics.snapshots_running.dec();
                result
            }
            Err(_) => Err(SnapshotError::Removed),
        };
        if let Err(e) = result {
            self.shapes.snapshot_failed(&shape, e.failure()).await;
        }
    }

    /// Takes the snapshot on a connection `permit` allows, given back as soon as the rows are
    /// read: closing the log and making it durable wait on the disk, not on Postgres.
    async fn take(
        &self,
        shape: &Arc<Shape>,
        must_see: &[u32],
        permit: OwnedSemaphorePermit,
    ) -> Result<(), SnapshotError> {
        let definition = &shape.definition;
        let pooled = self.postgres.query_connection(APPLICATION_NAME).await?;
        let mut conn = pooled.conn;
        let where_sql = match definition.log {
            LogMode::ChangesOnly => Some("false".to_owned()),
            LogMode::Full => definition.where_sql.clone(),
        };
        // A subquery shape's rows carry their tags, and its subqueries' rows are read in the
        // same snapshot: the value sets its log starts from.
        let filter = match definition.checked_where(&shape.relation) {
            Some(Ok(filter)) if filter.has_subqueries() => Some(filter),
            Some(Err(e)) => {
                return Err(SnapshotError::Io(std::io::Error::other(format!(
                    "the where clause no longer checks: {e}"
                ))))
            }
            _ => None,
        };
        let mut subquery_sql: Vec<String> = filter
            .iter()
            .flat_map(|f| f.subqueries().iter().map(|s| s.sql.clone()))
            .collect();
        let top = subquery_sql.len();
        let seeds = filter
            .as_ref()
            .map(subquery::nested_seeds)
            .unwrap_or_default();
        subquery_sql.extend(seeds.iter().map(|(_, sql)| sql.clone()));
        let headers = filter
            .as_ref()
            .map(|f| subquery::headers_sql(f, &subquery::tag_prefix(&shape.handle), false));
        let query = SnapshotQuery::new(&shape.relation, Some(&definition.columns), where_sql)?
            .with_headers(headers);
        let begun = Snapshot::begin_after(&mut conn, &query, &subquery_sql, must_see).await;
        // A reused connection may have broken while idle: one retry on a new one. (Not for
        // any unavailability: a commit that stayed invisible has been waited for already.)
        let (mut snapshot, mut views) = match begun {
            Err(e) if pooled.reused && e.is_transient() => {
                tracing::debug!(error = %e, "an idle snapshot connection broke; connecting again");
                conn = self.postgres.new_query_connection(APPLICATION_NAME).await?;
                Snapshot::begin_after(&mut conn, &query, &subquery_sql, must_see).await?
            }
            begun => begun?,
        };
        let seeds: Vec<_> = seeds
            .into_iter()
            .map(|(key, _)| key)
            .zip(views.split_off(top))
            .collect();
        let progress = ProgressGauges::new(&self.metrics, shape, snapshot.estimated_rows());
        let visibility = snapshot.info().pg_snapshot.clone();
        self.shapes
            .snapshot_started(shape, &visibility, views, seeds)
            .await?;

        // Rows are encoded here while a blocking thread appends the previous batches to the log.
        let (to_log, batches) = mpsc::channel(BATCHES_QUEUED_MAX);
        let log_writer = tokio::task::spawn_blocking({
            let shape = shape.clone();
            move || append_batches(&shape, batches)
        });
        let mut encoder = RowEncoder::for_query(&query);
        let mut batch = Batch::default();
        let mut rows: u64 = 0;
        let mut unpublished = 0;
        loop {
            let more = snapshot
                .next_chunk(&mut |row| {
                    let start = batch.json.len();
                    batch.json.push(b',');
                    let key = encoder.encode(&row, &mut batch.json)?;
                    batch.keys.extend_from_slice(key);
                    batch.entries.push((
                        LogOffset::new(0, rows),
                        batch.keys.len(),
                        batch.json.len(),
                    ));
                    unpublished += batch.json.len() - start;
                    rows += 1;
                    Ok(())
                })
                .await?;
            if shape.state().gone {
                return Err(SnapshotError::Removed);
            }
            progress.rows(rows);
            if batch.json.len() >= APPEND_BATCH_BYTES || !more {
                batch.publish = unpublished >= PUBLISH_BATCH_BYTES;
                if batch.publish {
                    unpublished = 0;
                }
                if to_log.send(std::mem::take(&mut batch)).await.is_err() {
                    break;
                }
            }
            if !more {
                break;
            }
        }
        drop(to_log);
        log_writer
            .await
            .map_err(|e| SnapshotError::Io(std::io::Error::other(e)))??;
        let finished = snapshot.is_finished();
        drop((snapshot, progress));
        if finished {
            self.postgres.reuse(APPLICATION_NAME, conn);
        }
        drop(permit);
        let mut end = vec![wire::STORED_SEPARATOR];
        end.extend_from_slice(&wire::snapshot_end(&visibility));
        tokio::task::block_in_place(|| {
            with_writer(shape, |w| {
                w.complete_snapshot(&Message {
                    offset: LogOffset::new(0, rows),
                    key: b"",
                    op: Operation::Insert,
                    json: &end,
                })?;
                w.flush()
            })
        })?;
        tracing::info!(handle = %shape.handle, rows, "snapshot written");
        self.metrics.snapshot_rows.inc_by(rows);
        self.shapes.snapshot_complete(shape, &visibility).await?;
        Ok(())
    }
}

/// A running snapshot's rows in `/metrics` (and so on `/status`), removed when it ends.
struct ProgressGauges<'a> {
    metrics: &'a Metrics,
    labels: SnapshotLabels,
}

impl<'a> ProgressGauges<'a> {
    fn new(metrics: &'a Metrics, shape: &Shape, estimated: Option<u64>) -> ProgressGauges<'a> {
        let labels = SnapshotLabels {
            handle: shape.handle.clone(),
            table: format!("{}.{}", shape.relation.schema, shape.relation.name),
        };
        if let Some(estimated) = estimated {
            metrics
                .snapshot_table_rows_estimated
                .get_or_create(&labels)
                .set(i64::try_from(estimated).unwrap_or(i64::MAX));
        }
        metrics.snapshot_progress_rows.get_or_create(&labels).set(0);
        ProgressGauges { metrics, labels }
    }

    fn rows(&self, rows: u64) {
        self.metrics
            .snapshot_progress_rows
            .get_or_create(&self.labels)
            .set(i64::try_from(rows).unwrap_or(i64::MAX));
    }
}

impl Drop for ProgressGauges<'_> {
    fn drop(&mut self) {
        self.metrics.snapshot_progress_rows.remove(&self.labels);
        self.metrics
            .snapshot_table_rows_estimated
            .remove(&self.labels);
    }
}

/// Appends batches to the shape's log as they come; publishes the snapshot so far (commit
/// and flush, so readers can start on it) after the batches that ask for it.
fn append_batches(shape: &Shape, mut batches: mpsc::Receiver<Batch>) -> Result<(), SnapshotError> {
    while let Some(batch) = batches.blocking_recv() {
        if batch.entries.is_empty() {
            continue;
        }
        with_writer(shape, |w| w.append(&batch.messages()))?;
        if batch.publish {
            let durable = with_writer(shape, |w| {
                w.commit()?;
                w.flush()
            })?;
            shape.update(|s| {
                s.durable = durable;
                s.snapshot_progress += 1;
            });
        }
    }
    Ok(())
}

fn with_writer<T>(
    shape: &Shape,
    f: impl FnOnce(&mut syncline_storage::Writer) -> syncline_storage::Result<T>,
) -> Result<T, SnapshotError> {
    let mut guard = shape.writer.lock();
    let w = guard.opened().ok_or(SnapshotError::Removed)?;
    Ok(f(w)?)
}
