//! Shapes and their lifecycle. [`Shapes`] alone creates, restores, resolves, evicts,
//! invalidates and deletes shapes; it owns the registry, the metadata, the shape logs and the
//! pipeline's command channel. The pipeline, the snapshot task and HTTP go through it.
//!
//! A shape's life (`docs/architecture.md` draws it):
//! created (metadata, empty log, routed by the pipeline) → snapshotting (queued for the
//! snapshot task) → live (snapshot durable, changes appended as they commit) → gone
//! (invalidated, evicted, deleted, or its snapshot failed: requests get 409 or the error).
//! A restart restores every stored shape whose snapshot completed as live, and removes the
//! rest.
//!
//! Until this server holds the writer's lock, `Shapes` is read-only: it registers the shapes
//! the writer made from their metadata ([`Shapes::follow_catalog`]), serves them from their
//! logs, and never writes, creates or removes a file (the store and the metadata directory
//! refuse). [`Shapes::become_writer`] takes over the files; [`Shapes::become_reader`] lets go.

mod command;
mod definition;
mod handle;
mod logs;
mod meta;
mod registry;
mod shape;
mod shared_read;
mod state;
mod writer;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

use syncline_core::{LogOffset, PgSnapshot, RelationDesc, ReplicaIdentity};
use syncline_pg::{ErrorKind, PgError};
use tokio::sync::{mpsc, oneshot};

use crate::memory;
use crate::postgres::Postgres;
pub use command::{Command, MoveInRows, MustSee, Reflected, RestoredViews, ViewTuple};
pub use definition::{LogMode, Replica, ShapeDefinition};
pub use logs::{Logs, OpenBound, WriterBounds, WriterState};
pub use meta::ShapeMeta;
pub use meta::{MetaDir, ViewRecord, META_VERSION};
use registry::Registry;
pub use shape::Shape;
pub use state::{Blame, Failure, ShapeState};
use writer::{ShapeWriter, SharedWriter};

/// How long a refusal to publish a table is remembered.
pub const PUBLISH_REFUSAL_TTL: Duration = Duration::from_secs(10);

/// First delay between checks that full shape storage takes writes again.
const WRITABLE_PROBE_DELAY_MIN: Duration = Duration::from_millis(250);
/// Longest delay between those checks.
const WRITABLE_PROBE_DELAY_MAX: Duration = Duration::from_secs(5);

/// Why a shape could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Postgres failed (catalog, publication).
    #[error("{0}")]
    Postgres(#[from] PgError),
    /// The shape log could not be created.
    #[error("{0}")]
    Storage(#[from] syncline_storage::StorageError),
    /// The metadata could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The pipeline has stopped.
    #[error("the replication pipeline is not running")]
    PipelineDown,
    /// Postgres refused to publish the table a moment ago (the refusal is remembered for
    /// [`PUBLISH_REFUSAL_TTL`], so failing requests do not keep asking).
    #[error("{0}")]
    Refused(String),
}

/// Why a snapshot step could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The metadata could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The shape is gone, or the pipeline has stopped.
    #[error("the shape was removed")]
    Removed,
}

/// Queued commands for the pipeline before senders wait.
const COMMAND_QUEUE_LEN: usize = 1024;
/// New shapes whose files are made at once. Each creation blocks a thread on a dozen file
/// operations and syncs in two shared directories; with thousands of requests creating shapes
/// together, hundreds of such threads fight over the directories' locks and the file system's
/// journal (`electric concurrent-shape-creation` at 3,650 shapes: median 7.8-9.3 s without
/// the bound, 4.9-5.4 s with it).
const CREATIONS_AT_ONCE: usize = 16;
/// Trimming writers past a bound goes this fraction of the bound below it.
const TRIM_BELOW_BOUND_DIVISOR: usize = 8;

/// What a server that became the writer starts its pipeline and snapshot queue with.
pub struct WriterStart {
    /// The stored shapes restored.
    pub restored: Vec<Restored>,
    /// Stored shapes whose metadata predates the record of their table.
    pub unrecorded: Vec<ShapeMeta>,
    /// The pipeline's commands.
    pub command_queue: mpsc::Receiver<Command>,
    /// New shapes waiting for their snapshot.
    pub snapshot_queue: mpsc::UnboundedReceiver<QueuedSnapshot>,
}

/// A new shape waiting for its snapshot, and the transactions that snapshot must see.
pub type QueuedSnapshot = (Arc<Shape>, MustSee);

/// A stored shape restored at start, with the visibility of its snapshot (the pipeline skips
/// the transactions it saw).
pub type Restored = (Arc<Shape>, Option<PgSnapshot>);

/// The lifecycle owner; see the module documentation.
pub struct Shapes {
    logs: Arc<Logs>,
    meta: MetaDir,
    postgres: Arc<Postgres>,
    registry: Mutex<Registry>,
    /// The running pipeline's commands (closed while this server is not the writer).
    commands: RwLock<mpsc::Sender<Command>>,
    /// The snapshot queue (closed while this server is not the writer).
    snapshots: RwLock<mpsc::UnboundedSender<QueuedSnapshot>>,
    /// Creations under way, by definition identity: a second request for a definition waits
    /// for the first; shapes of different definitions are made at once.
    creating: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Permits to make a new shape's files ([`CREATIONS_AT_ONCE`]).
    creating_files: tokio::sync::Semaphore,
    max_shapes: Option<usize>,
    /// Tables Postgres refused to publish, by OID: when, and why.
    publish_refusals: Mutex<HashMap<u32, (Instant, String)>>,
    /// The partitions of each partitioned table with shapes, as last seen: attaching or
    /// detaching one changes the table's rows without a word on the replication stream.
    partitions: Mutex<HashMap<u32, Vec<u32>>>,
    /// The description of each table with shapes, by OID, shared by the shapes made while
    /// the table looked the same ([`Shapes::shared_relation`]).
    relations: Mutex<HashMap<u32, Weak<RelationDesc>>>,
    /// The server's multi-threaded runtime, where [`Shapes::spawn`] runs tasks.
    runtime: tokio::runtime::Handle,
}

impl Shapes {
    /// The shapes kept in `logs` and `meta`, read-only until [`Shapes::become_writer`]; past
    /// `max_shapes` the least recently used are evicted. Made on the server's multi-threaded
    /// runtime, which runs the tasks it starts.
    pub fn new(
        logs: Logs,
        meta: MetaDir,
        postgres: Arc<Postgres>,
        max_shapes: Option<usize>,
    ) -> Shapes {
        Shapes {
            logs: Arc::new(logs),
            meta,
            postgres,
            registry: Mutex::new(Registry::default()),
            commands: RwLock::new(mpsc::channel(1).0),
            snapshots: RwLock::new(mpsc::unbounded_channel().0),
            creating: Mutex::new(HashMap::new()),
            creating_files: tokio::sync::Semaphore::new(CREATIONS_AT_ONCE),
            max_shapes,
            publish_refusals: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
            relations: Mutex::new(HashMap::new()),
            runtime: tokio::runtime::Handle::current(),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().expect("registry lock")
    }

    /// Postgres access (move-in queries of subquery shapes run through it).
    pub fn postgres(&self) -> &Arc<Postgres> {
        &self.postgres
    }

    /// Records changes to a subquery shape's value sets, durably, before its log holds them.
    pub fn append_views(&self, shape: &Shape, records: &[ViewRecord]) -> std::io::Result<()> {
        self.meta.append_views(&shape.handle, records)
    }

    /// What a subquery shape's log reflects (the log ends at `log_end`): each subquery's
    /// tuples, and the transactions its moves followed. Records past the log's end are dropped
    /// from the file.
    pub fn load_views(
        &self,
        shape: &Shape,
        subqueries: usize,
        log_end: LogOffset,
    ) -> std::io::Result<Reflected> {
        let records = self.meta.load_views(&shape.handle)?;
        let mut reflected = Reflected {
            views: vec![HashSet::new(); subqueries],
            ..Reflected::default()
        };
        let mut seen = None;
        let mut kept = 0;
        for record in &records {
            if record.at > (log_end.tx, log_end.op) || record.sub >= subqueries {
                continue;
            }
            kept += 1;
            let view = &mut reflected.views[record.sub];
            for tuple in &record.remove {
                view.remove(tuple);
            }
            view.extend(record.add.iter().cloned());
            reflected.through = reflected.through.max(record.through);
            seen = record.seen.clone().or(seen);
        }
        if kept < records.len() && self.is_writer() {
            let compacted: Vec<ViewRecord> = reflected
                .views
                .iter()
                .enumerate()
                .map(|(sub, view)| ViewRecord {
                    at: (log_end.tx, log_end.op),
                    sub,
                    add: view.iter().cloned().collect(),
                    remove: Vec::new(),
                    through: reflected.through,
                    seen: seen.clone(),
                })
                .collect();
            self.meta.rewrite_views(&shape.handle, &compacted)?;
        }
        reflected.seen = match seen {
            Some(text) => Some(text.parse().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("view file snapshot {text:?}: {e}"),
                )
            })?),
            None => None,
        };
        Ok(reflected)
    }

    /// The pipeline's command channel (tasks the pipeline starts report back on it).
    pub(crate) fn commands(&self) -> mpsc::Sender<Command> {
        self.commands.read().expect("commands lock").clone()
    }

    /// The commits the pipeline processed last, which a snapshot started now must see;
    /// `None` while no pipeline runs.
    pub async fn must_see(&self) -> Option<MustSee> {
        let (reply, answer) = oneshot::channel();
        self.commands()
            .send(Command::RecentCommits { reply })
            .await
            .ok()?;
        answer.await.ok()
    }

    /// Whether this server writes the shape logs (it holds the writer's lock).
    pub fn is_writer(&self) -> bool {
        self.logs.is_writable()
    }

    /// The directory of a shape's log.
    pub fn log_dir(&self, handle: &str) -> std::path::PathBuf {
        self.logs.dir(handle)
    }

    /// Whether a shape with this handle is stored (its log exists), complete or not.
    pub fn is_stored(&self, handle: &str) -> bool {
        self.logs.exists(handle)
    }

    /// The directory of the shapes' metadata.
    pub fn meta_dir(&self) -> &std::path::Path {
        self.meta.dir()
    }

    /// Registers the stored shapes whose snapshot is complete and forgets those no longer
    /// stored (the writer deleted them: their clients get 409), reading only. How a server
    /// without the writer's lock learns what the writer made and removed.
    pub fn follow_catalog(&self) -> Result<(), String> {
        assert!(!self.is_writer(), "the writer's registry is its own");
        let mut metas: Vec<ShapeMeta> = crate::blocking::in_place(|| self.meta.load_all())
            .map_err(|e| format!("reading shape metadata: {e}"))?
            .into_iter()
            .filter(|m| m.snapshot_complete && m.version == META_VERSION && m.relation.is_some())
            .collect();
        // Oldest first: a definition's newest shape is the one registered for it.
        metas.sort_by_key(|m| handle::minted_us(&m.handle));
        let stored: HashSet<&str> = metas.iter().map(|m| m.handle.as_str()).collect();
        let forgotten: Vec<Arc<Shape>> = self
            .all()
            .into_iter()
            .filter(|s| !stored.contains(s.handle.as_str()))
            .collect();
        for shape in forgotten {
            tracing::debug!(handle = %shape.handle, "shape removed by the writer");
            self.registry().remove(&shape.handle);
            shape.update(|s| s.gone = true);
        }
        for meta in &metas {
            if self.by_handle(&meta.handle).is_none() {
                handle::observe(&meta.handle);
                let relation = meta.relation.clone().expect("filtered above");
                self.register_stored(meta, relation);
            }
        }
        Ok(())
    }

    /// Takes over the files (this server now holds the writer's lock): the store and the
    /// metadata become writable, [`Shapes::restore`] runs, and new channels to a pipeline and
    /// a snapshot queue are made. Returns what `restore` returns and the channels' receivers.
    pub fn become_writer(&self) -> Result<WriterStart, String> {
        crate::blocking::in_place(|| {
            self.logs.refresh_followed();
            self.logs.become_writer()
        })
        .map_err(|e| format!("storage directory: {e}"))?;
        self.meta.set_writable(true);
        let (commands, command_queue) = mpsc::channel(COMMAND_QUEUE_LEN);
        let (snapshots, snapshot_queue) = mpsc::unbounded_channel();
        *self.commands.write().expect("commands lock") = commands;
        *self.snapshots.write().expect("snapshots lock") = snapshots;
        let (restored, unrecorded) = self.restore()?;
        Ok(WriterStart {
            restored,
            unrecorded,
            command_queue,
            snapshot_queue,
        })
    }

    /// Lets go of the files (the writer's lock was lost; the pipeline and every snapshot have
    /// stopped): every writer is dropped without writing another byte, shapes whose snapshot
    /// had not completed are forgotten (their clients get 409), and the store and the metadata
    /// become read-only.
    pub fn become_reader(&self) {
        self.stop_writing();
        for shape in self.all() {
            shape.writer.lock().discard();
            if !shape.state().snapshot_done {
                self.registry().remove(&shape.handle);
                shape.update(|s| s.gone = true);
            }
        }
    }

    /// Hands the files over (this server shuts down; the pipeline and every snapshot have
    /// stopped): nothing opens a log any more, and every open log is closed cleanly, so the
    /// next writer opens it without recovery.
    pub fn hand_over(&self) {
        self.stop_writing();
        crate::blocking::in_place(|| {
            for shape in self.all() {
                if let Err(e) = shape.writer.lock().close() {
                    tracing::warn!(handle = %shape.handle, error = %e, "closing a shape log failed");
                }
            }
        });
    }

    /// Closes the channels to the pipeline and the snapshot queue, and makes the store and the
    /// metadata read-only: no log is opened, created or removed from now on.
    fn stop_writing(&self) {
        *self.commands.write().expect("commands lock") = mpsc::channel(1).0;
        *self.snapshots.write().expect("snapshots lock") = mpsc::unbounded_channel().0;
        self.meta.set_writable(false);
        self.logs.become_reader();
    }

    /// The live shape with this handle.
    pub fn by_handle(&self, handle: &str) -> Option<Arc<Shape>> {
        self.registry().by_handle(handle)
    }

    /// The live shape with this definition.
    pub fn by_definition(&self, definition: &ShapeDefinition) -> Option<Arc<Shape>> {
        self.registry().by_identity(&definition.identity())
    }

    /// Every live shape.
    pub fn all(&self) -> Vec<Arc<Shape>> {
        self.registry().all()
    }

    /// How many shapes are live.
    pub fn len(&self) -> usize {
        self.registry().len()
    }

    /// Whether no shape is live.
    pub fn is_empty(&self) -> bool {
        self.registry().is_empty()
    }

    /// Registers every stored shape whose snapshot completed, from disk alone, without opening
    /// their logs (that happens when a change or a request first needs it); shapes already
    /// registered (read-only, before this server became the writer) are kept as they are, so
    /// requests waiting on them go on. Removes stored shapes whose snapshot did not complete,
    /// and logs without metadata: their clients get 409 and start again. Returns the shapes
    /// restored and those whose metadata predates the record of their table, which
    /// [`Shapes::check_restored`] restores against the catalog.
    fn restore(&self) -> Result<(Vec<Restored>, Vec<ShapeMeta>), String> {
        assert!(self.is_writer(), "only the writer removes stored shapes");
        crate::blocking::in_place(|| {
            let metas = self
                .meta
                .load_all()
                .map_err(|e| format!("reading shape metadata: {e}"))?;
            let mut restored = Vec::new();
            let mut unrecorded = Vec::new();
            let mut kept = HashSet::new();
            for meta in metas {
                handle::observe(&meta.handle);
                if !meta.snapshot_complete {
                    tracing::info!(handle = %meta.handle, "stored shape dropped: its snapshot did not complete");
                    self.remove_stored(&meta.handle);
                    continue;
                }
                if meta.version < META_VERSION {
                    tracing::info!(handle = %meta.handle, version = meta.version, "stored shape dropped: written by an older Syncline whose snapshot offsets differ");
                    self.remove_stored(&meta.handle);
                    continue;
                }
                kept.insert(meta.handle.clone());
                match (self.by_handle(&meta.handle), meta.relation.clone()) {
                    (Some(shape), _) => restored.push((shape, meta.pg_snapshot())),
                    (None, Some(relation)) => restored.push(self.register_stored(&meta, relation)),
                    (None, None) => unrecorded.push(meta),
                }
            }
            for shape in self.all() {
                if !kept.contains(&shape.handle) {
                    self.registry().remove(&shape.handle);
                    shape.update(|s| s.gone = true);
                }
            }
            let stored = self
                .logs
                .list()
                .map_err(|e| format!("listing shape logs: {e}"))?;
            for orphan in stored.into_iter().filter(|h| !kept.contains(h)) {
                handle::observe(&orphan);
                tracing::info!(handle = %orphan, "shape log without metadata removed");
                self.remove_stored(&orphan);
            }
            Ok((restored, unrecorded))
        })
    }

    /// Checks restored shapes against the catalog as it is now: those whose table is gone or
    /// changed under them are invalidated; shapes whose metadata predates the record of their
    /// table are registered with the table as it is. Returns the shapes to route to. One
    /// catalog lookup per table.
    pub async fn check_restored(
        &self,
        restored: Vec<Restored>,
        unrecorded: Vec<ShapeMeta>,
    ) -> Result<Vec<Restored>, PgError> {
        let mut relations: HashMap<u32, Option<RelationDesc>> = HashMap::new();
        for oid in restored
            .iter()
            .map(|(s, _)| s.definition.relation_oid)
            .chain(unrecorded.iter().map(|m| m.definition.relation_oid))
        {
            if let std::collections::hash_map::Entry::Vacant(entry) = relations.entry(oid) {
                entry.insert(self.postgres.load_relation_by_oid(oid).await?);
            }
        }
        let mut kept = Vec::new();
        for (shape, visibility) in restored {
            let now = &relations[&shape.definition.relation_oid];
            if now
                .as_ref()
                .is_some_and(|now| shape.definition.fits(&shape.relation, now))
            {
                kept.push((shape, visibility));
            } else {
                self.invalidate(&shape, "its table changed or is gone");
            }
        }
        for meta in unrecorded {
            match &relations[&meta.definition.relation_oid] {
                Some(now) => kept.push(self.register_stored(&meta, now.clone())),
                None => {
                    tracing::info!(handle = %meta.handle, "stored shape dropped: its table is gone");
                    crate::blocking::in_place(|| self.remove_stored(&meta.handle));
                }
            }
        }
        Ok(kept)
    }

    /// Registers a stored shape made on `relation`, its log unopened.
    /// `relation`, as one copy shared by every shape whose table looks the same: thousands of
    /// shapes on one table hold one description, not one each.
    pub fn shared_relation(&self, relation: RelationDesc) -> Arc<RelationDesc> {
        let mut relations = self.relations.lock().expect("relations lock");
        if let Some(shared) = relations.get(&relation.oid).and_then(Weak::upgrade) {
            if *shared == relation {
                return shared;
            }
        }
        let shared = Arc::new(relation);
        relations.insert(shared.oid, Arc::downgrade(&shared));
        shared
    }

    fn register_stored(&self, meta: &ShapeMeta, relation: RelationDesc) -> Restored {
        let shape = Arc::new(Shape::new(
            meta.handle.clone(),
            meta.definition.clone(),
            self.shared_relation(relation),
            self.logs.clone(),
            SharedWriter::new(&meta.handle, self.logs.clone(), None),
            ShapeState {
                snapshot_done: true,
                ..ShapeState::default()
            },
        ));
        let visibility = meta.pg_snapshot();
        if let Some(v) = &visibility {
            shape.set_visibility(v.clone());
        }
        self.registry().insert(shape.clone());
        (shape, visibility)
    }

    /// The live shape for `definition`, creating it (and queueing its snapshot) if there is
    /// none.
    pub async fn get_or_create(
        self: &Arc<Self>,
        definition: ShapeDefinition,
        relation: RelationDesc,
    ) -> Result<Arc<Shape>, CreateError> {
        if let Some(shape) = self.by_definition(&definition) {
            return Ok(shape);
        }
        // Publishing is idempotent: done before the lock, so a table that cannot be published
        // never holds up the creation of other shapes.
        self.publish(&relation).await?;
        let relation = self.described_after_publishing(relation).await?;
        for table in &definition.subquery_tables {
            self.publish(table).await?;
        }
        let identity = definition.identity();
        let gate = self
            .creating
            .lock()
            .expect("creating lock")
            .entry(identity.clone())
            .or_default()
            .clone();
        let created = {
            let _creating = gate.lock().await;
            self.create(definition, relation, &identity).await
        };
        let mut creating = self.creating.lock().expect("creating lock");
        // The map's reference and this one: nobody waits on the gate any more.
        if Arc::strong_count(&gate) == 2 {
            creating.remove(&identity);
        }
        created
    }

    /// The live shape for `definition`, whose creation this caller alone runs: the one another
    /// request just made, or a new one.
    async fn create(
        self: &Arc<Self>,
        definition: ShapeDefinition,
        relation: RelationDesc,
        identity: &str,
    ) -> Result<Arc<Shape>, CreateError> {
        if let Some(shape) = self.by_definition(&definition) {
            return Ok(shape);
        }
        self.evict_for_new();
        let handle = handle::mint(identity);
        let permit = self
            .creating_files
            .acquire()
            .await
            .expect("the creation permits are never closed");
        // The log alone, not synced: the metadata is first written when the snapshot
        // completes, and a crash before then leaves a log without metadata, which restore
        // removes.
        let writer = crate::blocking::in_place(|| {
            let _permit = permit;
            self.logs.create(&handle)
        })?;
        let shape = Arc::new(Shape::new(
            handle.clone(),
            definition,
            self.shared_relation(relation),
            self.logs.clone(),
            SharedWriter::new(&handle, self.logs.clone(), Some(writer)),
            ShapeState::default(),
        ));
        self.registry().insert(shape.clone());
        let (reply, added) = oneshot::channel();
        let command = Command::AddShape {
            shape: shape.clone(),
            reply,
        };
        let must_see = match self.commands().send(command).await {
            Ok(()) => added.await.ok(),
            Err(_) => None,
        };
        let Some(must_see) = must_see else {
            self.discard(&shape);
            return Err(CreateError::PipelineDown);
        };
        tracing::info!(handle = %shape.handle, table = %shape.definition.table, "shape created");
        let queued = self
            .snapshots
            .read()
            .expect("snapshots lock")
            .send((shape.clone(), must_see));
        if queued.is_err() {
            self.delete(&shape).await;
            return Err(CreateError::PipelineDown);
        }
        Ok(shape)
    }

    /// `relation` as the catalog describes it once published. Publishing sets `REPLICA
    /// IDENTITY FULL`, so a description read before that (by the first requests on a table)
    /// is read again: every shape on the table then holds one shared description
    /// ([`Shapes::shared_relation`]), and shapes share a snapshot only when they do. A table
    /// dropped or replaced meanwhile keeps the description read before.
    async fn described_after_publishing(
        &self,
        relation: RelationDesc,
    ) -> Result<RelationDesc, CreateError> {
        if relation.replica_identity == ReplicaIdentity::Full {
            return Ok(relation);
        }
        let now = self
            .postgres
            .load_relation(&relation.schema, &relation.name)
            .await?;
        Ok(now
            .filter(|now| now.oid == relation.oid)
            .unwrap_or(relation))
    }

    /// Adds the table to the publication, or says why Postgres refused (remembered a while:
    /// requests for a table that cannot be published fail at once).
    async fn publish(&self, relation: &RelationDesc) -> Result<(), CreateError> {
        let refused = |refusals: &mut HashMap<u32, (Instant, String)>| {
            refusals.retain(|_, (at, _)| at.elapsed() < PUBLISH_REFUSAL_TTL);
            refusals.get(&relation.oid).map(|(_, why)| why.clone())
        };
        if let Some(why) = refused(&mut self.publish_refusals.lock().expect("refusals lock")) {
            return Err(CreateError::Refused(why));
        }
        match self.postgres.publish(relation).await {
            Ok(()) => {
                // Known since the table's first shape; the table checks follow changes.
                let known = self
                    .partitions
                    .lock()
                    .expect("partitions lock")
                    .contains_key(&relation.oid);
                if known {
                    return Ok(());
                }
                let partitions = self.postgres.partitions(relation.oid).await?;
                self.partitions
                    .lock()
                    .expect("partitions lock")
                    .entry(relation.oid)
                    .or_insert(partitions);
                Ok(())
            }
            Err(e) if matches!(e.kind(), ErrorKind::Unavailable) => Err(e.into()),
            Err(e) => {
                let why = format!(
                    "Syncline cannot add table {}.{} to its publication: {}",
                    relation.schema,
                    relation.name,
                    e.server_message()
                        .map_or_else(|| e.to_string(), str::to_owned)
                );
                tracing::warn!(table = %relation.name, error = %e, "table cannot be published");
                self.publish_refusals
                    .lock()
                    .expect("refusals lock")
                    .insert(relation.oid, (Instant::now(), why.clone()));
                Err(CreateError::Refused(why))
            }
        }
    }

    /// The snapshot of `shape` recorded its visibility: told to the pipeline, and kept in the
    /// metadata once the snapshot is complete (a restart skips the transactions it saw; one
    /// that finds the snapshot incomplete drops the shape, so it is not saved before).
    /// A subquery shape's snapshot also gives the rows of each subquery at that instant
    /// (`views`), the value sets its log starts from, and what seeds its nested dependencies
    /// (`seeds`).
    pub async fn snapshot_started(
        &self,
        shape: &Shape,
        visibility: &PgSnapshot,
        views: Vec<Vec<ViewTuple>>,
        seeds: Vec<(String, Vec<ViewTuple>)>,
    ) -> Result<(), StepError> {
        shape.set_visibility(visibility.clone());
        let started = Command::SnapshotStarted {
            handle: shape.handle.clone(),
            visibility: visibility.clone(),
            views,
            seeds,
        };
        self.send_step(started).await
    }

    /// The snapshot of `shape`, taken at `visibility`, is complete and durable in its log:
    /// writes its metadata (durably), so a restart resumes the shape. Blocks on file I/O: the
    /// caller is on a blocking thread. Then [`Shapes::snapshot_done`].
    pub fn save_complete(&self, shape: &Shape, visibility: &PgSnapshot) -> Result<(), StepError> {
        let meta = ShapeMeta::complete(
            &shape.handle,
            &shape.definition,
            &shape.relation,
            visibility,
        );
        self.meta.save(&meta)?;
        Ok(())
    }

    /// The snapshot of `shape` is complete and its metadata saved ([`Shapes::save_complete`]):
    /// the pipeline appends what waited and goes live.
    pub async fn snapshot_done(&self, shape: &Shape) -> Result<(), StepError> {
        let done = Command::SnapshotDone {
            handle: shape.handle.clone(),
        };
        self.send_step(done).await
    }

    /// Tells the pipeline a lifecycle step; a closed channel means the shape was removed.
    async fn send_step(&self, command: Command) -> Result<(), StepError> {
        self.commands()
            .send(command)
            .await
            .map_err(|_| StepError::Removed)
    }

    /// The snapshot of `shape` failed: waiting requests learn why, and the shape is deleted.
    pub async fn snapshot_failed(&self, shape: &Arc<Shape>, failure: Failure) {
        if shape.state().gone {
            return;
        }
        tracing::warn!(handle = %shape.handle, error = %failure.message, blame = ?failure.blame, "snapshot failed");
        shape.update(|s| s.failed = Some(failure));
        self.delete(shape).await;
    }

    /// Removes a shape for good: gone for waiting requests, out of the pipeline, the registry,
    /// the metadata and the store.
    pub async fn delete(&self, shape: &Arc<Shape>) {
        let (reply, removed) = oneshot::channel();
        let command = Command::RemoveShape {
            handle: shape.handle.clone(),
            reply,
        };
        if self.commands().send(command).await.is_ok() {
            let _ = removed.await;
        }
        self.discard(shape);
    }

    /// The pipeline let go of a shape that no longer fits its table or whose log failed: its
    /// clients get 409 and start again.
    pub fn invalidate(&self, shape: &Arc<Shape>, why: &str) {
        tracing::info!(handle = %shape.handle, table = %shape.definition.table, reason = why, "shape invalidated");
        self.discard(shape);
    }

    /// Marks a shape gone and removes its registry entry, metadata and log (the pipeline has
    /// already let go of it, or is the caller).
    fn discard(&self, shape: &Arc<Shape>) {
        assert!(self.is_writer(), "only the writer deletes shapes");
        self.registry().remove(&shape.handle);
        shape.update(|s| s.gone = true);
        crate::blocking::in_place(|| {
            shape.writer.lock().retire();
            self.remove_stored(&shape.handle);
        });
    }

    /// Removes a shape's metadata, then its log (a crash in between leaves a log without
    /// metadata, which restore removes).
    fn remove_stored(&self, handle: &str) {
        if let Err(e) = self.meta.remove(handle) {
            tracing::warn!(handle, error = %e, "could not remove shape metadata");
        }
        if let Err(e) = self.logs.delete(handle) {
            tracing::warn!(handle, error = %e, "could not remove shape log");
        }
    }

    /// Prepares every shape for a new pipeline after the last one stopped (storage paused):
    /// writers are closed, so reopening cuts each log back to its last durable commit; shapes
    /// whose snapshot had not completed are invalidated (the transactions waiting for them
    /// were lost with the pipeline). Returns the shapes to route to, as restored ones.
    pub fn reopen_for_new_pipeline(&self) -> Vec<Restored> {
        let mut kept = Vec::new();
        for shape in self.all() {
            shape.writer.lock().discard();
            if shape.state().snapshot_done {
                let visibility = shape.visibility();
                kept.push((shape, visibility));
            } else {
                self.invalidate(&shape, "its snapshot was running when shape storage failed");
            }
        }
        kept
    }

    /// Keeps the writers within their bounds: holds the least recently used open ones while
    /// more than their bound are open (a held writer keeps only its lock), parks the least
    /// recently used idle held ones while more than their bound are held (a parked writer
    /// holds no file descriptor and resumes without reading its log), and closes the least
    /// recently used parked ones while more than their bound are parked; parks every idle
    /// one when descriptors ran out ([`Logs::shed`]). Closing syncs the files written since
    /// their last sync, so this runs on the blocking pool.
    pub async fn trim_writers(self: &Arc<Self>) {
        let shed = self.logs.take_shed();
        if !shed && !self.writers_over_bound() {
            return;
        }
        let shapes = self.clone();
        let (held, parked, closed) = tokio::task::spawn_blocking(move || {
            let held = shapes.hold_writers();
            let parked = if shed {
                shapes.park_unused_writers(u64::MAX)
            } else {
                shapes.park_held_writers()
            };
            (held, parked, shapes.close_parked_writers())
        })
        .await
        .unwrap_or((0, 0, 0));
        let writers = self.writers();
        tracing::debug!(
            held,
            parked,
            closed,
            open_now = writers.open,
            held_now = writers.held,
            parked_now = writers.parked,
            "idle shape logs held, parked and closed"
        );
    }

    /// The process ran out of file descriptors: every idle open or held writer is parked soon.
    pub fn descriptors_short(&self) {
        self.logs.shed();
    }

    /// How many shape log writers are open, held and parked.
    pub fn writers(&self) -> WriterCounts {
        WriterCounts {
            open: self.logs.count(WriterState::Open),
            held: self.logs.count(WriterState::Held),
            parked: self.logs.count(WriterState::Parked),
        }
    }

    /// Whether more writers are open, held or parked than their bound.
    pub fn writers_over_bound(&self) -> bool {
        [WriterState::Open, WriterState::Held, WriterState::Parked]
            .into_iter()
            .any(|state| self.logs.over(state) > 0)
    }

    /// Whether more writers are held or parked than their bound (making room for more then
    /// takes a flush: only idle writers park or close).
    pub fn resting_writers_over_bound(&self) -> bool {
        self.logs.over(WriterState::Held) > 0 || self.logs.over(WriterState::Parked) > 0
    }

    /// Applies `act` to the writers `since` says were last used when, least recently used
    /// first, until it succeeded `over` times (plus an eighth of `bound`, so that the next
    /// writers do not each find the bound full) or every writer was tried. Returns how many
    /// times it succeeded.
    fn trim_least_recently_used(
        &self,
        over: usize,
        bound: usize,
        since: impl Fn(&ShapeWriter) -> Option<u64>,
        act: impl Fn(&mut ShapeWriter) -> bool,
    ) -> usize {
        if over == 0 {
            return 0;
        }
        let over = over + bound / TRIM_BELOW_BOUND_DIVISOR;
        let mut found: Vec<(u64, Arc<Shape>)> = self
            .all()
            .into_iter()
            .filter_map(|s| {
                let t = since(&s.writer.lock());
                t.map(|t| (t, s))
            })
            .collect();
        found.sort_by_key(|(t, _)| *t);
        let mut done = 0;
        for (_, shape) in found {
            if done == over {
                break;
            }
            let mut writer = shape.writer.lock();
            if since(&writer).is_some() && act(&mut writer) {
                done += 1;
            }
        }
        done
    }

    /// Holds the least recently used open writers, busy or idle, until the open ones are an
    /// eighth below their bound. Returns how many were held.
    pub fn hold_writers(&self) -> usize {
        self.trim_state(WriterState::Open, ShapeWriter::hold)
    }

    /// Parks the least recently used idle held writers until the held ones are an eighth
    /// below their bound, or no idle one is left. Returns how many were parked.
    pub fn park_held_writers(&self) -> usize {
        self.trim_state(WriterState::Held, ShapeWriter::park)
    }

    /// Closes the least recently used idle parked writers until the parked ones are an eighth
    /// below their bound; blocks while closing. Returns how many were closed.
    pub fn close_parked_writers(&self) -> usize {
        self.trim_state(WriterState::Parked, |writer| match writer.close_if_idle() {
            Ok(closed) => closed.is_some(),
            Err(e) => {
                tracing::warn!(handle = %writer.handle(), error = %e, "closing an idle shape log failed");
                false
            }
        })
    }

    /// [`Shapes::trim_least_recently_used`] of the writers in `state`, past its bound.
    fn trim_state(&self, state: WriterState, act: impl Fn(&mut ShapeWriter) -> bool) -> usize {
        self.trim_least_recently_used(
            self.logs.over(state),
            self.logs.bound(state),
            |writer| writer.in_state_since(state),
            act,
        )
    }

    /// Parks every open idle writer last used before `used_before` (on the logs' clock).
    /// Returns how many were parked.
    fn park_unused_writers(&self, used_before: u64) -> usize {
        self.all()
            .into_iter()
            .filter(|shape| park_if_unused(shape, used_before))
            .count()
    }

    /// Parks the writers unused since `used_before`, as [`Shapes::park_unused_writers`] does,
    /// and drops the reusable readers of shapes no request came for since `unread_since_ms`
    /// (on [`Shape::last_used`]'s clock), in one pass over the shapes. Returns how many
    /// writers were parked and how many shapes dropped readers.
    fn sweep_unused(&self, used_before: u64, unread_since_ms: u64) -> (usize, usize) {
        let (mut parked, mut unread) = (0, 0);
        for shape in self.all() {
            parked += usize::from(park_if_unused(&shape, used_before));
            unread += usize::from(shape.release_readers_unused_since(unread_since_ms));
        }
        (parked, unread)
    }

    /// Marks this server as following the shape logs' writer until the mark is dropped.
    pub fn mark_follower(&self) -> syncline_storage::Result<syncline_storage::FollowerMark> {
        self.logs.mark_follower()
    }

    /// Whether another server followed the shape logs when last looked (every sweep of
    /// [`Shapes::watch_open_writers`]): flushes then write every change to the files at once.
    pub fn followed(&self) -> bool {
        self.logs.followed()
    }

    /// Looks whether another server follows the shape logs, and if one started to, writes
    /// every change that flushes left in memory, so that it reads them too.
    fn watch_followers(&self) {
        let was = self.logs.followed();
        if self.logs.refresh_followed() && !was {
            for shape in self.all() {
                if let Err(e) = shape.write_deferred() {
                    tracing::warn!(handle = %shape.handle, error = %e, "writing a shape log's deferred changes failed");
                }
            }
        }
    }

    /// Keeps the writers within their bounds ([`Shapes::trim_writers`] as soon as one opens or
    /// parks past them, and every `period`), and every `idle` parks the writers unused since
    /// the last sweep, drops the reusable readers of shapes no request came for since then,
    /// and returns the heap's free pages to the kernel, for as long as the server runs. Every
    /// `period` it also looks whether another server follows the logs ([`Shapes::followed`]).
    pub async fn watch_open_writers(self: Arc<Self>, period: Duration, idle: Duration) {
        let mut idle_sweep = tokio::time::interval(idle);
        idle_sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        idle_sweep.tick().await;
        let mut swept_at = (self.logs.tick(), shape::now_ms());
        let mut followers = tokio::time::interval(period);
        followers.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.logs.past_bound() => {}
                () = tokio::time::sleep(period) => {}
                _ = followers.tick() => {
                    crate::blocking::in_place(|| self.watch_followers());
                }
                _ = idle_sweep.tick() => {
                    let shapes = self.clone();
                    let (unused_since, unread_since_ms) = swept_at;
                    swept_at = (self.logs.tick(), shape::now_ms());
                    let swept = tokio::task::spawn_blocking(move || {
                        let (parked, unread) =
                            shapes.sweep_unused(unused_since, unread_since_ms);
                        let started = Instant::now();
                        let trimmed = memory::release_free_heap();
                        (parked, unread, trimmed, started.elapsed())
                    })
                    .await;
                    if let Ok((parked, unread, trimmed, took)) = swept {
                        tracing::debug!(parked, unread, trimmed, ?took, "idle shapes swept");
                    }
                }
            }
            self.trim_writers().await;
        }
    }

    /// Waits until the shape logs' file system takes writes again.
    pub async fn wait_writable(&self) {
        let mut delay = WRITABLE_PROBE_DELAY_MIN;
        loop {
            match crate::blocking::in_place(|| self.logs.probe_writable()) {
                Ok(()) => return,
                Err(e) => {
                    tracing::debug!(error = %e, retry_in = ?delay, "shape storage still not writable")
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(WRITABLE_PROBE_DELAY_MAX);
        }
    }

    /// Deletes the shapes made on an earlier table of `current`'s name (it was dropped and
    /// created again): Postgres says nothing of that on the replication stream.
    pub async fn drop_recreated(&self, current: &RelationDesc) {
        if !self.is_writer()
            || !self
                .registry()
                .has_other_table(&current.schema, &current.name, current.oid)
        {
            return;
        }
        let stale: Vec<Arc<Shape>> = self
            .all()
            .into_iter()
            .filter(|s| {
                (s.relation.schema == current.schema && s.relation.name == current.name)
                    && s.relation.oid != current.oid
            })
            .collect();
        for shape in stale {
            tracing::info!(handle = %shape.handle, table = %shape.definition.table, "shape deleted: its table was dropped and created again");
            self.delete(&shape).await;
        }
    }

    /// Checks every table with shapes against the catalog: shapes of a table that was dropped
    /// and created again under its name, or of a partitioned table that gained or lost a
    /// partition, are deleted (their clients refetch).
    pub async fn check_tables(&self) -> Result<(), PgError> {
        // Every few seconds over every shape: each table's names are copied once, not once
        // per shape.
        let tables: Vec<(u32, String, String)> = {
            let shapes = self.all();
            let distinct: BTreeSet<(u32, &str, &str)> = shapes
                .iter()
                .map(|s| (s.relation.oid, &*s.relation.schema, &*s.relation.name))
                .collect();
            distinct
                .into_iter()
                .map(|(oid, schema, name)| (oid, schema.to_owned(), name.to_owned()))
                .collect()
        };
        for (oid, schema, name) in tables {
            let partitions = self.postgres.partitions(oid).await?;
            let before = self
                .partitions
                .lock()
                .expect("partitions lock")
                .insert(oid, partitions.clone());
            if before.is_some_and(|before| before != partitions) {
                for shape in self.all().into_iter().filter(|s| s.relation.oid == oid) {
                    tracing::info!(handle = %shape.handle, table = %name, "shape deleted: a partition was attached or detached");
                    self.delete(&shape).await;
                }
            }
            if let Some(now) = self.postgres.table_oid(&schema, &name).await? {
                if now != oid {
                    if let Some(current) = self.postgres.load_relation_by_oid(now).await? {
                        self.drop_recreated(&current).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks the tables with shapes every `period` ([`Shapes::check_tables`]), for as long as
    /// the server runs.
    pub async fn watch_tables(self: Arc<Self>, period: Duration) {
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = self.check_tables().await {
                tracing::debug!(error = %e, "table check failed; retried next period");
            }
        }
    }

    /// Runs `task` on the server's multi-threaded runtime, whichever runtime the caller is on:
    /// work the pipeline starts (move-in queries, dependency reads, catalog reloads) uses the
    /// shared Postgres connections, whose sockets must belong to the runtime that outlives
    /// every pipeline, and must not wait on the replication thread's own.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.spawn(task)
    }

    /// The table `oid` was described anew on the replication stream: its shapes' schema
    /// follows the catalog (a nullability change reaches `electric-schema`).
    pub fn refresh_table(self: &Arc<Self>, oid: u32) {
        let shapes = self.clone();
        self.spawn(async move {
            match shapes.postgres.load_relation_by_oid(oid).await {
                Ok(Some(now)) => {
                    let now = shapes.shared_relation(now);
                    for shape in shapes.all().iter().filter(|s| s.relation.oid == oid) {
                        shape.refresh(&now);
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, oid, "could not reload a changed table"),
            }
        });
    }

    /// Makes room for one more shape under `max_shapes` by dropping the least recently used.
    fn evict_for_new(self: &Arc<Self>) {
        let Some(max) = self.max_shapes else {
            return;
        };
        let victims = {
            let registry = self.registry();
            let mut all = registry.all();
            if all.len() < max {
                return;
            }
            all.sort_by_key(|s| s.last_used());
            all.truncate(all.len() + 1 - max.max(1));
            all
        };
        for shape in victims {
            tracing::info!(handle = %shape.handle, "shape evicted (ELECTRIC_MAX_SHAPES)");
            self.registry().remove(&shape.handle);
            shape.update(|s| s.gone = true);
            let shapes = self.clone();
            self.spawn(async move { shapes.delete(&shape).await });
        }
    }
}

/// Parks `shape`'s writer if it is open or held, idle, and was last used before `used_before`
/// (on the logs' clock); whether it parked it.
fn park_if_unused(shape: &Shape, used_before: u64) -> bool {
    let mut writer = shape.writer.lock();
    let unused = [WriterState::Open, WriterState::Held]
        .into_iter()
        .filter_map(|state| writer.in_state_since(state))
        .any(|t| t < used_before);
    unused && writer.park()
}

/// How many shape log writers are in each [`WriterState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterCounts {
    /// Open.
    pub open: usize,
    /// Held: one descriptor each, the lock.
    pub held: usize,
    /// Parked: no descriptor.
    pub parked: usize,
}
