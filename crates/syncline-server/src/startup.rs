//! Start-up: open storage, connect to Postgres, restore stored shapes, start the replication
//! pipeline and the HTTP server.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use syncline_pg::replication::{ensure_slot, ResumingStream, StreamOptions};
use syncline_pg::ConnConfig;
use syncline_storage::Store;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::pipeline::{Command, Pipeline};
use crate::shape::{observe_handle, MetaDir, Shape, ShapeState};
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
    tokio::spawn(Pipeline::new(state.clone(), stream, receiver).run_or_exit());
    for (shape, writer, visibility) in restored {
        let (reply, added) = oneshot::channel();
        let command = Command::AddShape {
            shape,
            writer,
            visibility,
            snapshot_done: true,
            reply,
        };
        if state.commands.send(command).await.is_err() || added.await.is_err() {
            return Err("the replication pipeline stopped during start-up".into());
        }
    }
    state.set_health(Health::Active);
    Ok(Server { state, addr })
}

type Restored = (
    Arc<Shape>,
    crate::pipeline::SharedWriter,
    Option<syncline_core::PgSnapshot>,
);

/// Reopens every stored shape whose snapshot completed; removes the rest (their clients get
/// 409 and start again).
async fn restore_shapes(state: &Arc<AppState>) -> Result<Vec<Restored>, String> {
    let metas = tokio::task::block_in_place(|| state.meta.load_all())
        .map_err(|e| format!("reading shape metadata: {e}"))?;
    let mut restored = Vec::new();
    let mut kept = HashSet::new();
    for meta in metas {
        observe_handle(&meta.handle);
        let relation = state
            .with_admin(async |c| {
                syncline_pg::catalog::load_relation_by_oid(c, meta.definition.relation_oid).await
            })
            .await
            .map_err(|e| format!("catalog: {e}"))?;
        let writer = state
            .store
            .open_writer(&meta.handle, &state.writer_options)
            .ok()
            .filter(|w| w.snapshot_complete());
        let (Some(relation), Some(writer)) = (relation, writer) else {
            tracing::info!(handle = %meta.handle, "stored shape dropped: incomplete snapshot or table gone");
            let _ = state.meta.remove(&meta.handle);
            let _ = state.store.delete_shape(&meta.handle);
            continue;
        };
        let shape = Arc::new(Shape::new(
            meta.handle.clone(),
            meta.definition.clone(),
            relation,
            ShapeState {
                durable: writer.durable_offset(),
                snapshot_done: true,
                ..ShapeState::default()
            },
        ));
        kept.insert(meta.handle.clone());
        state.registry().insert(shape.clone());
        restored.push((
            shape,
            Arc::new(Mutex::new(Some(writer))),
            meta.pg_snapshot(),
        ));
    }
    for orphan in state
        .store
        .list_shapes()
        .map_err(|e| format!("listing shape logs: {e}"))?
    {
        if !kept.contains(&orphan) {
            let _ = state.store.delete_shape(&orphan);
        }
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
