//! Start-up: the wiring. Opens storage read-only, registers the stored shapes, serves HTTP,
//! and hands the rest to [`crate::leadership`]: follow the writer, or become it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use syncline_pg::ConnConfig;
use syncline_storage::{Store, WriterOptions};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::config::{Config, RoleSetting};
use crate::health::{HealthState, Role};
use crate::http::compression::CompressedChunks;
use crate::http::connection::ConnectionLimits;
use crate::http::server::{self, default_max_connections};
use crate::metrics::Metrics;
use crate::postgres::Postgres;
use crate::progress::Progress;
use crate::shapes::{Logs, MetaDir, OpenBound, Shapes, WriterBounds};
use crate::state::AppState;

/// Longest wait at shutdown for connections to finish their last request.
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// A running server.
pub struct Server {
    /// Its services.
    pub state: Arc<AppState>,
    /// The HTTP address it listens on.
    pub addr: SocketAddr,
    /// Its role: following the writer, or writing.
    leadership: JoinHandle<()>,
    /// Open HTTP connections.
    connections: Arc<AtomicUsize>,
}

impl Server {
    /// Shuts down: stops listening, ends live requests, and, as the writer, flushes,
    /// acknowledges, closes its logs and releases the writer's lock (a standby takes over).
    /// Returns once that is done.
    /// Requests still being answered get up to [`DRAIN_MAX`] to finish.
    pub async fn shut_down(self) {
        self.state.health.stop();
        if let Err(e) = self.leadership.await {
            tracing::error!(error = %e, "shutting down failed");
        }
        let deadline = tokio::time::Instant::now() + DRAIN_MAX;
        while self.connections.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Starts everything. Returns once the server listens and the stored shapes are registered
/// (their clients are served from then on, read-only); taking the writer's lock, replicating,
/// or following another writer go on in the background (`/v1/health` says how far).
pub async fn start(config: Config) -> Result<Server, String> {
    config.validate()?;
    let pg = ConnConfig::parse(&config.database_url).map_err(|e| format!("DATABASE_URL: {e}"))?;
    let logs_dir = config.storage_dir.join("logs");
    let meta_dir = config.storage_dir.join("shapes");
    for dir in [&logs_dir, &meta_dir] {
        // Nothing is written where they exist: a standby may share them with a writer.
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("storage directory {}: {e}", dir.display()))?;
    }
    let store = Store::open_read_only(&logs_dir).map_err(|e| format!("storage directory: {e}"))?;
    let writer_options = WriterOptions {
        chunk_bytes_max: config.chunk_bytes_threshold,
        ..WriterOptions::default()
    };
    let listener =
        server::listen(SocketAddr::new(config.listen_address, config.port)).map_err(|e| {
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
    let open_files = usize::try_from(open_files_limit()).unwrap_or(usize::MAX);
    let connections = Arc::new(AtomicUsize::new(0));
    let bounds = WriterBounds {
        open: OpenBound {
            open_files,
            connections: connections.clone(),
            open_max: config.open_logs_max,
            held_max: config.held_logs_max,
        },
        parked: config.parked_logs_max.unwrap_or_else(|| {
            config
                .open_logs_max
                .unwrap_or(open_files / 16)
                .saturating_mul(PARKED_PER_OPEN_LOG)
        }),
    };
    let shapes = Arc::new(Shapes::new(
        Logs::new(store, writer_options, bounds),
        MetaDir::open_read_only(meta_dir),
        postgres.clone(),
        config.max_shapes,
    ));
    let progress = Arc::new(Progress::new(config.storage_dir.join("progress")));
    let role = match config.role {
        RoleSetting::Auto => Role::Standby,
        RoleSetting::Replica => Role::Replica,
    };
    let state = Arc::new(AppState {
        admission: Admission::new(config.max_concurrent_requests),
        config,
        shapes: shapes.clone(),
        postgres,
        progress,
        health: Arc::new(HealthState::new(role)),
        metrics: Arc::new(Metrics::default()),
        compressed: CompressedChunks::default(),
    });
    serve_http(&state, listener, connections.clone()).await?;
    tracing::info!(%addr, role = role.name(), "listening");
    shapes.follow_catalog()?;
    state.health.restored();
    tracing::info!(shapes = shapes.len(), "stored shapes registered");
    let leadership = tokio::spawn(crate::leadership::run(state.clone()));
    Ok(Server {
        state,
        addr,
        leadership,
        connections,
    })
}

/// Serves the HTTP API on `listener`, counting its open connections in `connections`, and
/// `/metrics` on its own port if one is configured.
async fn serve_http(
    state: &Arc<AppState>,
    listener: TcpListener,
    connections: Arc<AtomicUsize>,
) -> Result<(), String> {
    let config = &state.config;
    let limits = ConnectionLimits {
        max_connections: config
            .max_connections
            .unwrap_or_else(|| default_max_connections(open_files_limit())),
        idle_timeout: config.http_idle_timeout,
        send_timeout: config.tcp_send_timeout,
    };
    let health = state.health.clone();
    tokio::spawn(server::serve(
        listener,
        crate::http::router(state.clone()),
        limits,
        async move { health.wait_stopping().await },
        connections,
        {
            let shapes = state.shapes.clone();
            move || shapes.descriptors_short()
        },
        config.http_engine,
    ));
    if let Some(port) = config.prometheus_port {
        let metrics = server::listen(SocketAddr::new(config.listen_address, port))
            .map_err(|e| format!("listening on the metrics port {port}: {e}"))?;
        tokio::spawn(server::serve(
            metrics,
            crate::http::metrics_router(state.clone()),
            limits,
            std::future::pending(),
            Arc::new(AtomicUsize::new(0)),
            || (),
            config.http_engine,
        ));
    }
    Ok(())
}

/// Parked shape logs kept per open one, by default.
const PARKED_PER_OPEN_LOG: usize = 8;

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
