//! What every part of the server shares: configuration, the store, the registry of shapes, the
//! pipeline's command channel, the Postgres connection for catalog work, and health.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use syncline_core::{Lsn, RelationDesc};
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::{ConnConfig, PgError, PgResult};
use syncline_storage::{Store, WriterOptions};
use tokio::sync::{mpsc, oneshot, AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio_postgres::Client;

use crate::config::Config;
use crate::http::admission::Admission;
use crate::metrics::Metrics;
use crate::pipeline::Command;
use crate::shape::{
    mint_handle, MetaDir, Registry, Shape, ShapeDefinition, ShapeMeta, ShapeState, SharedWriter,
};
use crate::snapshot;

/// Where the server is in its start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// Connecting, restoring shapes.
    Starting = 0,
    /// Waiting for the replication stream.
    Waiting = 1,
    /// Serving.
    Active = 2,
}

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
}

/// The shared state.
pub struct AppState {
    /// Settings.
    pub config: Config,
    /// Postgres connection settings.
    pub pg: ConnConfig,
    /// The shape logs.
    pub store: Store,
    /// The shapes' metadata.
    pub meta: MetaDir,
    /// Writer settings for new and reopened logs.
    pub writer_options: WriterOptions,
    /// Live shapes.
    pub registry: Mutex<Registry>,
    /// Commands to the pipeline.
    pub commands: mpsc::Sender<Command>,
    /// Metrics.
    pub metrics: Metrics,
    /// In-flight request limits.
    pub admission: Admission,
    /// Bounds concurrent snapshots and subset queries (each holds a Postgres connection).
    snapshot_permits: Arc<Semaphore>,
    admin: tokio::sync::Mutex<Option<Client>>,
    create_lock: tokio::sync::Mutex<()>,
    health: AtomicU8,
    last_seen_lsn: AtomicU64,
    flushed_lsn: AtomicU64,
}

impl AppState {
    /// State for `config`, sending pipeline commands to `commands`.
    pub fn new(
        config: Config,
        pg: ConnConfig,
        store: Store,
        meta: MetaDir,
        commands: mpsc::Sender<Command>,
    ) -> AppState {
        let writer_options = WriterOptions {
            chunk_bytes_max: config.chunk_bytes_threshold,
            ..WriterOptions::default()
        };
        AppState {
            metrics: Metrics::default(),
            admission: Admission::new(config.max_concurrent_requests),
            snapshot_permits: Arc::new(Semaphore::new(config.db_pool_size)),
            config,
            pg,
            store,
            meta,
            writer_options,
            registry: Mutex::new(Registry::default()),
            commands,
            admin: tokio::sync::Mutex::new(None),
            create_lock: tokio::sync::Mutex::new(()),
            health: AtomicU8::new(Health::Starting as u8),
            last_seen_lsn: AtomicU64::new(0),
            flushed_lsn: AtomicU64::new(0),
        }
    }

    /// Waits for a free snapshot connection (`ELECTRIC_DB_POOL_SIZE` bounds them); fails
    /// only when the server is shutting down.
    pub async fn snapshot_permit(&self) -> Result<OwnedSemaphorePermit, AcquireError> {
        self.snapshot_permits.clone().acquire_owned().await
    }

    /// The current health.
    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Relaxed) {
            0 => Health::Starting,
            1 => Health::Waiting,
            _ => Health::Active,
        }
    }

    /// Moves to another health state.
    pub fn set_health(&self, health: Health) {
        self.health.store(health as u8, Ordering::Relaxed);
    }

    /// The pipeline processed a commit at `lsn`.
    pub fn observe_lsn(&self, lsn: Lsn) {
        self.last_seen_lsn.fetch_max(lsn.0, Ordering::Relaxed);
    }

    /// The pipeline acknowledged `lsn` to Postgres.
    pub fn observe_flushed(&self, lsn: Lsn) {
        self.flushed_lsn.fetch_max(lsn.0, Ordering::Relaxed);
    }

    /// The last commit LSN the pipeline processed (`global_last_seen_lsn`).
    pub fn last_seen_lsn(&self) -> u64 {
        self.last_seen_lsn.load(Ordering::Relaxed)
    }

    /// The last LSN acknowledged to Postgres.
    pub fn flushed_lsn(&self) -> u64 {
        self.flushed_lsn.load(Ordering::Relaxed)
    }

    /// Runs `f` with the catalog connection, connecting first if needed; a failed connection
    /// is dropped so the next call reconnects.
    pub async fn with_admin<T>(&self, f: impl AsyncFnOnce(&Client) -> PgResult<T>) -> PgResult<T> {
        let mut guard = self.admin.lock().await;
        if guard.as_ref().is_none_or(Client::is_closed) {
            *guard = Some(syncline_pg::connect(&self.pg).await?);
        }
        let client = guard.as_ref().expect("connected above");
        let result = f(client).await;
        if result.is_err() && client.is_closed() {
            *guard = None;
        }
        result
    }

    /// A new query connection with Electric's session settings (text output formats, UTC),
    /// for a snapshot or a subset query.
    pub async fn query_connection(&self, application_name: &str) -> PgResult<WireConnection> {
        let mut conn = WireConnection::connect(&self.pg, application_name, Mode::Query).await?;
        conn.simple_query(&syncline_pg::conn::session_settings_sql())
            .await?;
        Ok(conn)
    }

    /// Describes `schema.table`, `None` if there is no such table.
    pub async fn load_relation(&self, schema: &str, table: &str) -> PgResult<Option<RelationDesc>> {
        self.with_admin(async |c| syncline_pg::catalog::load_relation(c, schema, table).await)
            .await
    }

    /// The live shape for `definition`, creating it (and starting its snapshot) if there is
    /// none.
    pub async fn get_or_create(
        self: &Arc<Self>,
        definition: ShapeDefinition,
        relation: RelationDesc,
    ) -> Result<Arc<Shape>, CreateError> {
        let identity = definition.identity();
        if let Some(shape) = self.registry().by_identity(&identity) {
            return Ok(shape);
        }
        let _creating = self.create_lock.lock().await;
        if let Some(shape) = self.registry().by_identity(&identity) {
            return Ok(shape);
        }
        self.evict_for_new();
        let publication = self.config.publication_name();
        self.with_admin(async |c| {
            syncline_pg::publication::add_table(
                c,
                &publication,
                &relation.schema,
                &relation.name,
                true,
            )
            .await
        })
        .await?;
        let handle = mint_handle(&identity);
        let writer = tokio::task::block_in_place(|| -> Result<_, CreateError> {
            self.meta.save(&ShapeMeta {
                handle: handle.clone(),
                definition: definition.clone(),
                relation: Some(relation.clone()),
                snapshot: None,
                snapshot_complete: false,
            })?;
            Ok(self.store.create_shape(&handle, &self.writer_options)?)
        })?;
        let shape = Arc::new(Shape::new(
            handle.clone(),
            definition,
            relation,
            SharedWriter::open(&handle, writer),
            ShapeState::default(),
        ));
        self.registry().insert(shape.clone());
        let (reply, added) = oneshot::channel();
        let command = Command::AddShape {
            shape: shape.clone(),
            reply,
        };
        if self.commands.send(command).await.is_err() || added.await.is_err() {
            self.discard_shape(&shape);
            return Err(CreateError::PipelineDown);
        }
        tracing::info!(handle = %shape.handle, table = %shape.definition.table, "shape created");
        tokio::spawn(snapshot::run(self.clone(), shape.clone()));
        Ok(shape)
    }

    /// Makes sure a shape restored at start knows where its log ends, opening its log the
    /// first time a request needs that.
    pub fn load_end(&self, shape: &Shape) -> syncline_storage::Result<()> {
        let st = shape.state();
        if st.durable.is_some() || !st.snapshot_done {
            return Ok(());
        }
        tokio::task::block_in_place(|| {
            let mut writer = shape.writer.lock();
            let durable = writer
                .get(&self.store, &self.writer_options)?
                .durable_offset();
            shape.update(|s| s.durable = s.durable.max(durable));
            Ok(())
        })
    }

    /// Removes a shape for good: gone for waiting requests, out of the pipeline, the registry,
    /// the metadata and the store.
    pub async fn delete_shape(&self, shape: &Arc<Shape>) {
        let (reply, removed) = oneshot::channel();
        let command = Command::RemoveShape {
            handle: shape.handle.clone(),
            reply,
        };
        if self.commands.send(command).await.is_ok() {
            let _ = removed.await;
        }
        self.discard_shape(shape);
    }

    /// Marks a shape gone and removes its registry entry, metadata and log (the pipeline has
    /// already let go of it, or is the caller).
    pub fn discard_shape(&self, shape: &Arc<Shape>) {
        self.registry().remove(&shape.handle);
        shape.update(|s| s.gone = true);
        tokio::task::block_in_place(|| {
            shape.writer.lock().retire();
            if let Err(e) = self.meta.remove(&shape.handle) {
                tracing::warn!(handle = %shape.handle, error = %e, "could not remove shape metadata");
            }
            if let Err(e) = self.store.delete_shape(&shape.handle) {
                tracing::warn!(handle = %shape.handle, error = %e, "could not remove shape log");
            }
        });
    }

    /// The registry, locked.
    pub fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().expect("registry lock")
    }

    /// Makes room for one more shape under `max_shapes` by dropping the oldest ones.
    fn evict_for_new(self: &Arc<Self>) {
        let Some(max) = self.config.max_shapes else {
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
            let state = self.clone();
            state.registry().remove(&shape.handle);
            shape.update(|s| s.gone = true);
            tokio::spawn(async move { state.delete_shape(&shape).await });
        }
    }
}
