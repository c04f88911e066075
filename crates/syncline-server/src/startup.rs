//! Start-up: open storage, connect to Postgres, restore stored shapes, start the replication
//! pipeline and the HTTP server.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use syncline_core::RelationDesc;
use syncline_pg::replication::{ensure_slot, ResumingStream, StreamOptions};
use syncline_pg::ConnConfig;
use syncline_storage::Store;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::pipeline::Pipeline;
use crate::shape::{observe_handle, MetaDir, Shape, ShapeState, SharedWriter};
use crate::state::{AppState, Health};

/// Commands queued for the pipeline before senders wait.
const COMMAND_QUEUE_LEN: usize = 1024;

/// A running server.
pub struct Server {
    /// Shared state.
    pub state: Arc<AppState>,
    /// The HTTP address it listens on.
    pub addr: SocketAddr,
}

/// Starts everything; returns once the server is listening and replication has started.
/// A pipeline failure that cannot be retried ends the process: on restart every shape resumes
/// from disk.
pub async fn start(config: Config) -> Result<Server, String> {
    config.validate()?;
    let pg = ConnConfig::parse(&config.database_url).map_err(|e| format!("DATABASE_URL: {e}"))?;
    let store = Store::open(config.storage_dir.join("logs"))
        .map_err(|e| format!("storage directory: {e}"))?;
    let meta = MetaDir::open(config.storage_dir.join("shapes"))
        .map_err(|e| format!("storage directory: {e}"))?;
    let listener = TcpListener::bind((config.listen_address, config.port))
        .await
        .map_err(|e| {
            format!(
                "listening on {}:{}: {e}",
                config.listen_address, config.port
            )
        })?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE_LEN);
    let state = Arc::new(AppState::new(config, pg, store, meta, commands));
    let app = crate::http::router(state.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    tracing::info!(%addr, "listening");
    if let Some(port) = state.config.prometheus_port {
        let metrics = TcpListener::bind((state.config.listen_address, port))
            .await
            .map_err(|e| format!("listening on the metrics port {port}: {e}"))?;
        let app = crate::http::metrics_router(state.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(metrics, app).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
    }

    let publication = state.config.publication_name();
    state
        .with_admin(async |c| syncline_pg::publication::ensure_publication(c, &publication).await)
        .await
        .map_err(|e| format!("publication: {e}"))?;
    let slot_name = state.config.slot_name();
    let slot = ensure_slot(&state.pg, &slot_name)
        .await
        .map_err(|e| format!("replication slot: {e}"))?;
    state.set_health(Health::Waiting);
    let restored = restore_shapes(&state).await?;
    let stream =
        ResumingStream::start(state.pg.clone(), StreamOptions::new(slot_name, publication))
            .await
            .map_err(|e| format!("replication: {e}"))?;
    tracing::info!(resume = %slot.resume_lsn, shapes = restored.len(), "replication started");
    // Everything up to the slot's confirmed position was processed before the restart.
    state.observe_lsn(slot.resume_lsn);
    // Restored shapes join the pipeline before it reads anything: the slot's replay is theirs.
    let mut pipeline = Pipeline::new(state.clone(), stream, receiver);
    for (shape, visibility) in restored {
        pipeline.add_restored(shape, visibility);
    }
    tokio::spawn(pipeline.run_or_exit());
    let period = std::time::Duration::from_secs(state.config.compaction_period_s);
    tokio::spawn(crate::compaction::run(state.clone(), period));
    state.set_health(Health::Active);
    Ok(Server { state, addr })
}

type Restored = (Arc<Shape>, Option<syncline_core::PgSnapshot>);

/// Registers every stored shape whose snapshot completed, without opening its log (that
/// happens when a change or a request first needs it); removes the rest (their clients get
/// 409 and start again). One catalog lookup per table.
async fn restore_shapes(state: &Arc<AppState>) -> Result<Vec<Restored>, String> {
    let metas = tokio::task::block_in_place(|| state.meta.load_all())
        .map_err(|e| format!("reading shape metadata: {e}"))?;
    let mut relations: HashMap<u32, Option<RelationDesc>> = HashMap::new();
    let mut restored = Vec::new();
    let mut kept = HashSet::new();
    for meta in metas {
        observe_handle(&meta.handle);
        let oid = meta.definition.relation_oid;
        if let std::collections::hash_map::Entry::Vacant(entry) = relations.entry(oid) {
            let relation = state
                .with_admin(async |c| syncline_pg::catalog::load_relation_by_oid(c, oid).await)
                .await
                .map_err(|e| format!("catalog: {e}"))?;
            entry.insert(relation);
        }
        let relation = match (&relations[&oid], &meta.relation) {
            (Some(now), Some(made_on)) if meta.snapshot_complete => {
                meta.definition.fits(made_on, now).then(|| made_on.clone())
            }
            (Some(now), None) if meta.snapshot_complete => Some(now.clone()),
            _ => None,
        };
        let Some(relation) = relation else {
            tracing::info!(handle = %meta.handle, "stored shape dropped: incomplete snapshot, or its table changed or is gone");
            tokio::task::block_in_place(|| {
                let _ = state.meta.remove(&meta.handle);
                let _ = state.store.delete_shape(&meta.handle);
            });
            continue;
        };
        let shape = Arc::new(Shape::new(
            meta.handle.clone(),
            meta.definition.clone(),
            relation,
            SharedWriter::closed(&meta.handle),
            ShapeState {
                snapshot_done: true,
                ..ShapeState::default()
            },
        ));
        kept.insert(meta.handle.clone());
        state.registry().insert(shape.clone());
        restored.push((shape, meta.pg_snapshot()));
    }
    let stored = tokio::task::block_in_place(|| state.store.list_shapes())
        .map_err(|e| format!("listing shape logs: {e}"))?;
    for orphan in stored.into_iter().filter(|h| !kept.contains(h)) {
        let _ = tokio::task::block_in_place(|| state.store.delete_shape(&orphan));
    }
    Ok(restored)
}

impl Pipeline {
    /// Runs the pipeline; if it fails for good, logs why and ends the process.
    pub async fn run_or_exit(self) {
        match self.run().await {
            Ok(()) => {}
            Err(e) => {
                tracing::error!(error = %e, "replication pipeline failed; exiting");
                std::process::exit(1);
            }
        }
    }
}
