//! The wiring HTTP handlers receive: the services the server is made of, each owning its own
//! concept (shapes, Postgres access, replication progress, health, metrics, admission).

use std::sync::Arc;

use crate::admission::Admission;
use crate::config::Config;
use crate::health::HealthState;
use crate::http::compression::CompressedChunks;
use crate::metrics::Metrics;
use crate::postgres::Postgres;
use crate::progress::Progress;
use crate::shapes::Shapes;

/// The server's services.
pub struct AppState {
    /// Settings.
    pub config: Config,
    /// Every shape and its lifecycle.
    pub shapes: Arc<Shapes>,
    /// Catalog and query connections.
    pub postgres: Arc<Postgres>,
    /// The pipeline's replication positions.
    pub progress: Arc<Progress>,
    /// Start-up state for `/v1/health`.
    pub health: Arc<HealthState>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// In-flight request limits.
    pub admission: Admission,
    /// Compressed closed chunks.
    pub compressed: CompressedChunks,
}
