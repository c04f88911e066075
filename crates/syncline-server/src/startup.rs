//! Start-up: the wiring. Opens storage, connects to Postgres, restores stored shapes, and
//! starts the replication pipeline, the snapshot queue, compaction and the HTTP server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use syncline_pg::replication::{
    ensure_slot, ResumingStream, SlotInfo, StreamOptions, StreamStatus,
};
use syncline_pg::ConnConfig;
use syncline_storage::{Store, WriterOptions};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::admission::Admission;
use crate::config::Config;
use crate::health::HealthState;
use crate::http::compression::CompressedChunks;
use crate::http::server::{self, default_max_connections, ConnectionLimits};
use crate::metrics::Metrics;
use crate::pipeline::{Pipeline, Stop};
use crate::postgres::Postgres;
use crate::progress::Progress;
use crate::shapes::{Command, Logs, MetaDir, Restored, ShapeMeta, Shapes};
use crate::snapshot::{run_queue, Snapshotter};
use crate::state::AppState;

/// Commands queued for the pipeline before senders wait.
const COMMAND_QUEUE_LEN: usize = 1024;
/// First delay before Postgres is tried again at start.
const WAIT_DELAY_MIN: Duration = Duration::from_millis(100);
/// How often the tables with shapes are checked for having been dropped and created again.
const TABLE_CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How often open shape logs past their bound are closed.
const WRITER_TRIM_INTERVAL: Duration = Duration::from_secs(1);
/// Longest delay between attempts to reach Postgres at start.
const WAIT_DELAY_MAX: Duration = Duration::from_secs(10);

/// A running server.
pub struct Server {
    /// Its services.
    pub state: Arc<AppState>,
    /// The HTTP address it listens on.
    pub addr: SocketAddr,
}

/// Starts everything. Returns once the server listens and stored shapes are restored (their
/// clients are served from then on); connecting to Postgres, waiting for it while it is
/// unreachable, and starting replication go on in the background (`/v1/health` says how far).
/// A pipeline failure that cannot be retried ends the process: on restart every shape resumes
/// from disk.
pub async fn start(config: Config) -> Result<Server, String> {
    config.validate()?;
    let pg = ConnConfig::parse(&config.database_url).map_err(|e| format!("DATABASE_URL: {e}"))?;
    let store = Store::open(config.storage_dir.join("logs"))
        .map_err(|e| format!("storage directory: {e}"))?;
    let meta = MetaDir::open(config.storage_dir.join("shapes"))
        .map_err(|e| format!("storage directory: {e}"))?;
    let writer_options = WriterOptions {
        chunk_bytes_max: config.chunk_bytes_threshold,
        ..WriterOptions::default()
    };
    let listener = TcpListener::bind((config.listen_address, config.port))
        .await
        .map_err(|e| {
            format!(
                "listening on {}:{}: {e}",
                config.listen_address, config.port
            )
        })?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let postgres = Arc::new(Postgres::new(
        pg,
        config.publication_name(),
        config.db_pool_size,
    ));
    let (commands, command_queue) = mpsc::channel(COMMAND_QUEUE_LEN);
    let (snapshots, snapshot_queue) = mpsc::unbounded_channel();
    let open_logs_max = config
        .open_logs_max
        .unwrap_or_else(|| default_open_logs_max(open_files_limit()));
    let shapes = Arc::new(Shapes::new(
        Logs::new(store, writer_options, open_logs_max),
        meta,
        postgres.clone(),
        commands,
        snapshots,
        config.max_shapes,
    ));
    let metrics = Arc::new(Metrics::default());
    let state = Arc::new(AppState {
        admission: Admission::new(config.max_concurrent_requests),
        config,
        shapes: shapes.clone(),
        postgres: postgres.clone(),
        progress: Arc::new(Progress::default()),
        health: Arc::new(HealthState::default()),
        metrics: metrics.clone(),
        compressed: CompressedChunks::default(),
    });
    serve_http(&state, listener).await?;
    tracing::info!(%addr, "listening");
    let (restored, unrecorded) = shapes.restore()?;
    state.health.restored();
    tracing::info!(shapes = restored.len(), "stored shapes restored");
    tokio::spawn(replicate(
        state.clone(),
        restored,
        unrecorded,
        command_queue,
    ));
    let snapshotter = Snapshotter {
        shapes: shapes.clone(),
        postgres,
        metrics,
    };
    tokio::spawn(run_queue(snapshotter, snapshot_queue));
    let period = std::time::Duration::from_secs(state.config.compaction_period_s);
    tokio::spawn(crate::compaction::run(shapes.clone(), period));
    tokio::spawn(shapes.clone().watch_tables(TABLE_CHECK_INTERVAL));
    tokio::spawn(shapes.watch_open_writers(WRITER_TRIM_INTERVAL));
    Ok(Server { state, addr })
}

/// Connects to Postgres (retrying with backoff for as long as it takes), checks the restored
/// shapes against the catalog, and runs the replication pipeline. When the pipeline stops
/// because shape storage is full, waits until it takes writes again and starts a new pipeline
/// from the slot; when it fails for good, ends the process (on restart every shape resumes
/// from disk).
async fn replicate(
    state: Arc<AppState>,
    mut restored: Vec<Restored>,
    mut unrecorded: Vec<ShapeMeta>,
    mut commands: mpsc::Receiver<Command>,
) {
    loop {
        let mut backoff = Backoff::default();
        let (kept, slot, stream) = loop {
            match connect(&state, &restored, &unrecorded).await {
                Ok(connected) => break connected,
                Err(e) => {
                    let delay = backoff.next();
                    let endpoint = state.postgres.config().endpoint();
                    tracing::warn!(error = %e, postgres = ?endpoint, attempt = backoff.attempts, retry_in = ?delay, "waiting for Postgres");
                    state.health.waiting_for(e);
                    tokio::time::sleep(delay).await;
                }
            }
        };
        tracing::info!(resume = %slot.resume_lsn, shapes = kept.len(), "replication started");
        let status = stream.subscribe_status();
        // Everything up to the slot's confirmed position was processed before.
        state.progress.observe_lsn(slot.resume_lsn);
        // Stored shapes join the pipeline before it reads anything: the slot's replay is theirs.
        let mut pipeline = Pipeline::new(
            state.shapes.clone(),
            state.progress.clone(),
            state.metrics.clone(),
            stream,
            commands,
        );
        for (shape, visibility) in kept {
            pipeline.add_restored(shape, visibility);
        }
        state.health.streaming();
        let follow = tokio::spawn(follow_stream(state.clone(), status));
        let stopped = pipeline.run().await;
        follow.abort();
        match stopped {
            Ok(()) => return,
            Err(Stop::Postgres(e)) => {
                tracing::error!(error = %e, "replication pipeline failed; exiting");
                std::process::exit(1);
            }
            Err(Stop::StorageFull {
                why,
                commands: queue,
            }) => {
                tracing::error!(error = %why, "shape storage is full: replication paused, Postgres keeps the WAL; reads are still served");
                state.health.storage(Some(why));
                commands = queue;
                // Requests made for the stopped pipeline are dropped: their senders give up.
                while commands.try_recv().is_ok() {}
                state.shapes.wait_writable().await;
                tracing::info!("shape storage takes writes again; replication resumes");
                state.health.storage(None);
                restored = state.shapes.reopen_for_new_pipeline();
                unrecorded = Vec::new();
            }
        }
    }
}

/// Reports the replication stream's condition on `/v1/health` as it changes: a lost stream
/// (Postgres restarting, unreachable) is `starting` with the reason until it streams again.
async fn follow_stream(state: Arc<AppState>, mut status: watch::Receiver<StreamStatus>) {
    loop {
        let current = status.borrow_and_update().clone();
        match current {
            StreamStatus::Connected => state.health.streaming(),
            StreamStatus::Reconnecting { last_error, .. } => state
                .health
                .waiting_for(format!("replication connection lost: {last_error}")),
        }
        if status.changed().await.is_err() {
            return;
        }
    }
}

/// One attempt at what replication needs: the publication, the slot, the restored shapes
/// checked against the catalog, the stream.
async fn connect(
    state: &AppState,
    restored: &[Restored],
    unrecorded: &[ShapeMeta],
) -> Result<(Vec<Restored>, SlotInfo, ResumingStream), String> {
    let postgres = &state.postgres;
    postgres
        .ensure_publication()
        .await
        .map_err(|e| format!("publication: {e}"))?;
    let slot_name = state.config.slot_name();
    let slot = ensure_slot(postgres.config(), &slot_name)
        .await
        .map_err(|e| format!("replication slot: {e}"))?;
    let kept = state
        .shapes
        .check_restored(restored.to_vec(), unrecorded.to_vec())
        .await
        .map_err(|e| format!("catalog: {e}"))?;
    let stream = ResumingStream::start(
        postgres.config().clone(),
        StreamOptions::new(slot_name, postgres.publication().to_owned()),
    )
    .await
    .map_err(|e| format!("replication: {e}"))?;
    Ok((kept, slot, stream))
}

/// Delays between attempts to reach Postgres at start: doubling from [`WAIT_DELAY_MIN`] to
/// [`WAIT_DELAY_MAX`].
#[derive(Debug, Default)]
struct Backoff {
    attempts: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let doublings = self.attempts.min(16);
        self.attempts += 1;
        WAIT_DELAY_MIN
            .saturating_mul(1 << doublings)
            .min(WAIT_DELAY_MAX)
    }
}

/// Serves the HTTP API on `listener`, and `/metrics` on its own port if one is configured.
async fn serve_http(state: &Arc<AppState>, listener: TcpListener) -> Result<(), String> {
    let config = &state.config;
    let limits = ConnectionLimits {
        max_connections: config
            .max_connections
            .unwrap_or_else(|| default_max_connections(open_files_limit())),
        idle_timeout: config.http_idle_timeout,
        send_timeout: config.tcp_send_timeout,
    };
    tokio::spawn(server::serve(
        listener,
        crate::http::router(state.clone()),
        limits,
    ));
    if let Some(port) = config.prometheus_port {
        let metrics = TcpListener::bind((config.listen_address, port))
            .await
            .map_err(|e| format!("listening on the metrics port {port}: {e}"))?;
        tokio::spawn(server::serve(
            metrics,
            crate::http::metrics_router(state.clone()),
            limits,
        ));
    }
    Ok(())
}

/// The default bound on open shape logs for an open-files limit of `open_files`: a sixteenth
/// of it (an open log holds six descriptors), at least 16.
fn default_open_logs_max(open_files: u64) -> usize {
    usize::try_from(open_files / 16)
        .unwrap_or(usize::MAX)
        .max(16)
}

/// The process's open-files limit (soft).
fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    }
}
