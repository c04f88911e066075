//! A shape's initial snapshot: rows by binary COPY in a `REPEATABLE READ` transaction, written
//! to the shape log as Electric insert messages, then `snapshot-end`.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use syncline_core::{wire, LogOffset, PgSnapshot, RelationDesc};
use syncline_pg::snapshot::{RowEncoder, RowRef, Snapshot, SnapshotQuery};
use syncline_pg::{ErrorKind, PgError};
use syncline_storage::{Message, Operation, StorageError};
use tokio::sync::{mpsc, AcquireError, OwnedSemaphorePermit, Semaphore};

use crate::metrics::{Metrics, SnapshotLabels};
use crate::postgres::Postgres;
use crate::shapes::{Blame, Failure, LogMode, QueuedSnapshot, Shape, Shapes, StepError};
use crate::subquery;

/// JSON bytes buffered before they are appended to the log.
const APPEND_BATCH_BYTES: usize = 1 << 20;
/// JSON bytes after which the snapshot so far is committed and flushed, so readers can start.
const PUBLISH_BATCH_BYTES: usize = 8 << 20;
/// The application name of snapshot connections (pooled under it).
const APPLICATION_NAME: &str = "syncline-snapshot";
/// Encoded batches waiting for the log writer (bounds the memory a fast COPY can take).
const BATCHES_QUEUED_MAX: usize = 4;
/// Shapes that share one snapshot at most: each is a boolean column of its query.
const SHARED_SHAPES_MAX: usize = 256;
/// The encoded rows a shared snapshot keeps in memory at most before it writes them: past
/// it, the table's shapes take one snapshot each (streamed to the log as it is read). With
/// `ELECTRIC_DB_POOL_SIZE` snapshots at once (20 by default), 160 MiB at most in all.
const SHARED_BYTES_MAX: usize = 8 << 20;
/// Logs written from shared snapshots and made durable at once, across all of them.
const SHARED_WRITES_AT_ONCE: usize = 16;
/// Messages appended at once from a shared snapshot.
const APPEND_MESSAGES_MAX: usize = 4096;

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
    shapes: Arc<Shapes>,
    postgres: Arc<Postgres>,
    metrics: Arc<Metrics>,
    /// Permits to write a shape's log from a shared snapshot ([`SHARED_WRITES_AT_ONCE`], for
    /// every shared snapshot together: each open log takes up to six descriptors).
    shared_writes: Arc<Semaphore>,
}

impl Snapshotter {
    /// Snapshots of `shapes`, read on `postgres`'s query connections, counted in `metrics`.
    pub fn new(shapes: Arc<Shapes>, postgres: Arc<Postgres>, metrics: Arc<Metrics>) -> Self {
        Snapshotter {
            shapes,
            postgres,
            metrics,
            shared_writes: Arc::new(Semaphore::new(SHARED_WRITES_AT_ONCE)),
        }
    }
}

/// Takes the snapshot of every shape queued on `queue` (at most `ELECTRIC_DB_POOL_SIZE` at
/// once), until the queue closes and they are done. Dropping it stops every snapshot it runs
/// (this server stopped writing).
///
/// Shapes waiting for a connection when one comes free are taken together when they can share
/// one query ([`SharedKey`]): up to [`SHARED_SHAPES_MAX`] of one table read in one snapshot.
pub async fn run_queue(
    snapshotter: Snapshotter,
    mut queue: mpsc::UnboundedReceiver<QueuedSnapshot>,
) {
    let mut waiting = Waiting::default();
    let mut running = tokio::task::JoinSet::new();
    let mut permit: Option<PermitFuture> = None;
    let mut open = true;
    loop {
        if permit.is_none() && !waiting.queue.is_empty() {
            let postgres = snapshotter.postgres.clone();
            permit = Some(Box::pin(async move { postgres.query_permit().await }));
        }
        snapshotter
            .metrics
            .snapshots_waiting
            .set(i64::try_from(waiting.queue.len()).unwrap_or(i64::MAX));
        tokio::select! {
            queued = queue.recv(), if open => match queued {
                Some(queued) => waiting.queue.push_back((queued, false)),
                None => open = false,
            },
            acquired = async { permit.as_mut().expect("a permit is awaited").await }, if permit.is_some() => {
                permit = None;
                while let Ok(queued) = queue.try_recv() {
                    waiting.queue.push_back((queued, false));
                }
                let batch = waiting.next_batch();
                match acquired {
                    Ok(acquired) => {
                        running.spawn(snapshotter.clone().run(batch, acquired));
                    }
                    Err(_) => {
                        for (shape, _) in batch {
                            snapshotter.shapes.snapshot_failed(&shape, SnapshotError::Removed.failure()).await;
                        }
                    }
                }
            }
            Some(joined) = running.join_next(), if !running.is_empty() => {
                if let Ok(Some(Requeue { batch, large_table })) = joined {
                    waiting.large_tables.extend(large_table);
                    for queued in batch.into_iter().rev() {
                        waiting.queue.push_front((queued, true));
                    }
                }
            }
            else => break,
        }
    }
}

/// Waiting for a query connection.
type PermitFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>,
>;

/// Shapes waiting for a connection, in the order they were queued.
#[derive(Default)]
struct Waiting {
    /// Each with whether it takes a snapshot alone (a shared one gave it back).
    queue: VecDeque<(QueuedSnapshot, bool)>,
    /// Tables (by OID) whose rows were too many for a shared snapshot: each of their shapes
    /// takes its own.
    large_tables: HashSet<u32>,
}

impl Waiting {
    /// The first shape waiting, with every other that can share its snapshot (up to
    /// [`SHARED_SHAPES_MAX`]), taken off the queue in queue order.
    fn next_batch(&mut self) -> Vec<QueuedSnapshot> {
        let Some(first) = self.queue.pop_front() else {
            return Vec::new();
        };
        let Some(shared) = SharedKey::of_queued(&first, &self.large_tables) else {
            return vec![first.0];
        };
        let mut batch = vec![first.0.clone()];
        let mut i = 0;
        while i < self.queue.len() && batch.len() < SHARED_SHAPES_MAX {
            if SharedKey::of_queued(&self.queue[i], &self.large_tables).as_ref() == Some(&shared) {
                batch.extend(self.queue.remove(i).map(|(queued, _)| queued));
            } else {
                i += 1;
            }
        }
        batch
    }
}

/// What shapes that share a snapshot have in common: the table as described to each (one
/// shared description), and the selected columns, so each row is one message for all of
/// them. Only shapes with a full log and no subqueries share.
#[derive(PartialEq, Eq)]
struct SharedKey<'a> {
    oid: u32,
    relation: *const RelationDesc,
    columns: &'a [String],
}

impl<'a> SharedKey<'a> {
    /// The key of a waiting shape, unless it takes a snapshot alone.
    fn of_queued(
        (queued, alone): &'a (QueuedSnapshot, bool),
        large_tables: &HashSet<u32>,
    ) -> Option<SharedKey<'a>> {
        SharedKey::of(&queued.0).filter(|k| !alone && !large_tables.contains(&k.oid))
    }

    fn of(shape: &'a Shape) -> Option<SharedKey<'a>> {
        let definition = &shape.definition;
        (definition.log == LogMode::Full && definition.subquery_tables.is_empty()).then(|| {
            SharedKey {
                oid: shape.relation.oid,
                relation: Arc::as_ptr(&shape.relation),
                columns: &definition.columns,
            }
        })
    }
}

/// Shapes a shared snapshot gave back to the queue, to take one snapshot each.
struct Requeue {
    batch: Vec<QueuedSnapshot>,
    /// The table, when its rows were too many to share ([`SHARED_BYTES_MAX`]): its shapes
    /// take one snapshot each from then on.
    large_table: Option<u32>,
}

impl Snapshotter {
    /// Takes the snapshot of `batch` (one shape, or several sharing a query) on the connection
    /// `permit` allows; on failure the shape is removed and waiting requests learn why.
    async fn run(
        self,
        batch: Vec<QueuedSnapshot>,
        permit: OwnedSemaphorePermit,
    ) -> Option<Requeue> {
        self.metrics.snapshots_running.inc();
        let requeue = if let [(shape, must_see)] = &batch[..] {
            if let Err(e) = self.take(shape, must_see, permit).await {
                self.shapes.snapshot_failed(shape, e.failure()).await;
            }
            None
        } else {
            self.run_shared(batch, permit).await
        };
        self.metrics.snapshots_running.dec();
        requeue
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
        self.finish(shape, rows, &visibility, |_| Ok(())).await
    }

    /// Ends the snapshot of `shape`, `rows` rows seen by `visibility`, once `write` appended
    /// the rows it still holds: `snapshot-end`, durable, and the shape goes live.
    async fn finish(
        &self,
        shape: &Shape,
        rows: u64,
        visibility: &PgSnapshot,
        write: impl FnOnce(&mut syncline_storage::Writer) -> syncline_storage::Result<()>,
    ) -> Result<(), SnapshotError> {
        let mut end = vec![wire::STORED_SEPARATOR];
        end.extend_from_slice(&wire::snapshot_end(visibility));
        crate::blocking::in_place(|| {
            let mut guard = shape.writer.lock();
            let w = guard.opened().ok_or(SnapshotError::Removed)?;
            write(w)?;
            w.complete_snapshot(&Message {
                offset: LogOffset::new(0, rows),
                key: b"",
                op: Operation::Insert,
                json: &end,
            })?;
            w.flush()?;
            // As after the pipeline's use: thousands of snapshots ending together do not keep
            // more logs open than their bound.
            guard.hold_if_over_bound();
            drop(guard);
            // On this thread too: one hand-over of the runtime's thread for both.
            self.shapes.save_complete(shape, visibility)?;
            Ok::<_, SnapshotError>(())
        })?;
        tracing::info!(handle = %shape.handle, rows, "snapshot written");
        self.metrics.snapshot_rows.inc_by(rows);
        self.shapes.snapshot_done(shape).await?;
        Ok(())
    }

    /// Takes one snapshot for several shapes of one table ([`SharedKey`]): the rows any of
    /// them has are read once, into memory, then each shape's log is written from them.
    /// Nothing is written before every row was read, so when the query fails (a shape's
    /// condition may fail on some row) the shapes go back to the queue to take one snapshot
    /// each, and each learns its own outcome.
    async fn run_shared(
        &self,
        batch: Vec<QueuedSnapshot>,
        permit: OwnedSemaphorePermit,
    ) -> Option<Requeue> {
        let batch: Vec<QueuedSnapshot> = batch
            .into_iter()
            .filter(|(shape, _)| !shape.state().gone)
            .collect();
        let table = batch.first()?.0.relation.oid;
        match self.read_shared(&batch, permit).await {
            Ok(Some(rows)) => {
                self.write_shared(batch, rows).await;
                None
            }
            Ok(None) => {
                tracing::info!(table = %batch[0].0.definition.table, shapes = batch.len(), "a table's rows are too many to share a snapshot: its shapes take one each");
                Some(Requeue {
                    batch,
                    large_table: Some(table),
                })
            }
            Err(e) => {
                tracing::info!(table = %batch[0].0.definition.table, shapes = batch.len(), error = %e, "a shared snapshot failed: its shapes take one each");
                Some(Requeue {
                    batch,
                    large_table: None,
                })
            }
        }
    }

    /// Reads the rows of a shared snapshot (`None` once they pass [`SHARED_BYTES_MAX`]); the
    /// connection `permit` allows is given back as soon as they are read.
    async fn read_shared(
        &self,
        batch: &[QueuedSnapshot],
        permit: OwnedSemaphorePermit,
    ) -> Result<Option<SharedRows>, SnapshotError> {
        let first = &batch[0].0;
        let conditions: Vec<Option<&str>> = batch
            .iter()
            .map(|(shape, _)| shape.definition.where_sql.as_deref())
            .collect();
        let query = SnapshotQuery::new(&first.relation, Some(&first.definition.columns), None)?
            .shared_by(&conditions);
        let mut must_see: Vec<u32> = batch
            .iter()
            .flat_map(|(_, must_see)| must_see.iter().copied())
            .collect();
        must_see.sort_unstable();
        must_see.dedup();
        let pooled = self.postgres.query_connection(APPLICATION_NAME).await?;
        let mut conn = pooled.conn;
        let begun = Snapshot::begin_after(&mut conn, &query, &[], &must_see).await;
        // A reused connection may have broken while idle: one retry on a new one.
        let mut snapshot = match begun {
            Err(e) if pooled.reused && e.is_transient() => {
                tracing::debug!(error = %e, "an idle snapshot connection broke; connecting again");
                conn = self.postgres.new_query_connection(APPLICATION_NAME).await?;
                Snapshot::begin_after(&mut conn, &query, &[], &must_see).await?
            }
            begun => begun?,
        }
        .0;
        let mut rows = SharedRows::new(batch.len(), snapshot.info().pg_snapshot.clone());
        let mut encoder = RowEncoder::for_query(&query);
        while snapshot
            .next_chunk(&mut |row| rows.push(&query, &mut encoder, &row))
            .await?
        {
            if rows.json.len() > SHARED_BYTES_MAX {
                return Ok(None);
            }
        }
        assert!(snapshot.is_finished(), "a snapshot ends with its rows");
        drop(snapshot);
        self.postgres.reuse(APPLICATION_NAME, conn);
        drop(permit);
        tracing::debug!(table = %first.definition.table, shapes = batch.len(), rows = rows.ends.len(), "shared snapshot read");
        Ok(Some(rows))
    }

    /// Writes each shape's log from the rows of their shared snapshot, and ends it: several
    /// at once (up to [`SHARED_WRITES_AT_ONCE`] across every shared snapshot), so that their
    /// file syncs overlap.
    async fn write_shared(&self, batch: Vec<QueuedSnapshot>, rows: SharedRows) {
        // Counted before any log is written, so that it already counts a shape whose client
        // has its answer.
        self.metrics.snapshots_shared.inc_by(batch.len() as u64);
        let rows = Arc::new(rows);
        let mut writing = tokio::task::JoinSet::new();
        for (i, (shape, _)) in batch.into_iter().enumerate() {
            let permit = self
                .shared_writes
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            while writing.try_join_next().is_some() {}
            let (snapshotter, rows) = (self.clone(), rows.clone());
            writing.spawn(async move {
                snapshotter.write_one_shared(&shape, i, &rows).await;
                drop(permit);
            });
        }
        while writing.join_next().await.is_some() {}
    }

    /// Writes the log of `shape`, shape `i` of a shared snapshot, and ends it.
    async fn write_one_shared(&self, shape: &Arc<Shape>, i: usize, rows: &SharedRows) {
        let result = async {
            self.shapes
                .snapshot_started(shape, &rows.visibility, Vec::new(), Vec::new())
                .await?;
            let count = rows.of(i).count() as u64;
            self.finish(shape, count, &rows.visibility, |w| {
                let mut offsets = (0..).map(|n| LogOffset::new(0, n));
                let mut messages = Vec::with_capacity(APPEND_MESSAGES_MAX);
                let mut them = rows.of(i).peekable();
                while them.peek().is_some() {
                    messages.clear();
                    messages.extend(them.by_ref().take(APPEND_MESSAGES_MAX).map(|(key, json)| {
                        Message {
                            offset: offsets.next().expect("offsets do not end"),
                            key,
                            op: Operation::Insert,
                            json,
                        }
                    }));
                    w.append(&messages)?;
                }
                Ok(())
            })
            .await
        };
        if let Err(e) = result.await {
            self.shapes.snapshot_failed(shape, e.failure()).await;
        }
    }
}

/// The rows of a snapshot several shapes share, each encoded once, and which shapes have it.
struct SharedRows {
    /// What the snapshot saw.
    visibility: PgSnapshot,
    /// Each row's stored message line (after [`wire::STORED_SEPARATOR`]), one after another.
    json: Vec<u8>,
    /// Each row's key, one after another.
    keys: Vec<u8>,
    /// Each row's end in `keys` and in `json`.
    ends: Vec<(usize, usize)>,
    /// `words` words a row: bit `i` says whether shape `i` has it.
    shapes: Vec<u64>,
    words: usize,
}

impl SharedRows {
    fn new(shapes: usize, visibility: PgSnapshot) -> SharedRows {
        SharedRows {
            visibility,
            json: Vec::new(),
            keys: Vec::new(),
            ends: Vec::new(),
            shapes: Vec::new(),
            words: shapes.div_ceil(64),
        }
    }

    /// Adds a row of `query` (a [`SnapshotQuery::shared_by`] query), unless no shape has it.
    fn push(
        &mut self,
        query: &SnapshotQuery,
        encoder: &mut RowEncoder,
        row: &RowRef<'_>,
    ) -> Result<(), PgError> {
        let start = self.shapes.len();
        self.shapes.resize(start + self.words, 0);
        for i in 0..query.selectors.len() {
            if query.selects(row, i) {
                self.shapes[start + i / 64] |= 1 << (i % 64);
            }
        }
        if self.shapes[start..].iter().all(|&w| w == 0) {
            self.shapes.truncate(start);
            return Ok(());
        }
        self.json.push(wire::STORED_SEPARATOR);
        let key = encoder.encode(row, &mut self.json)?;
        self.keys.extend_from_slice(key);
        self.ends.push((self.keys.len(), self.json.len()));
        Ok(())
    }

    /// The key and stored line of every row shape `i` has, in order.
    fn of(&self, i: usize) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        let starts = std::iter::once((0, 0)).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .enumerate()
            .filter(move |(row, _)| self.shapes[row * self.words + word] & bit != 0)
            .map(|(_, ((key_start, json_start), &(key_end, json_end)))| {
                (
                    &self.keys[key_start..key_end],
                    &self.json[json_start..json_end],
                )
            })
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
