//! Prometheus metrics: counters and gauges the pipeline, snapshots and HTTP handlers update,
//! rendered in the text exposition format for `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels of an HTTP request count.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `GET`, `POST`, …
    pub method: String,
    /// Response status code.
    pub status: u16,
}

/// Labels of admission counts: `initial` (offset=-1) or `existing` requests.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `initial` or `existing`.
    pub kind: &'static str,
}

/// Labels of a running snapshot.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotLabels {
    /// The shape's handle.
    pub handle: String,
    /// `schema.table`.
    pub table: String,
}

/// Labels of the health gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// `starting`, `waiting`, `active` or `degraded`.
    pub status: &'static str,
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    /// HTTP responses by method and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Requests turned away with 503 because too many were in flight.
    pub admission_rejected: Family<KindLabels, Counter>,
    /// Requests in flight, by kind.
    pub admission_in_flight: Family<KindLabels, Gauge>,
    /// Live shapes.
    pub shapes: Gauge,
    /// Shape log writers open (holding their files).
    pub shape_logs_open: Gauge,
    /// Shape log writers held (files closed, lock and state kept).
    pub shape_logs_held: Gauge,
    /// Shape log writers parked (files closed and lock released, state kept).
    pub shape_logs_parked: Gauge,
    /// Responses sent gzipped.
    pub gzip_responses: Counter,
    /// gzipped responses served from the kept compressed chunks.
    pub gzip_cache_hits: Counter,
    /// 1 for the status `/v1/health` reports, 0 for the others.
    pub health: Family<StatusLabels, Gauge>,
    /// Replicated transactions processed.
    pub transactions: Counter,
    /// Row changes decoded from replication.
    pub changes: Counter,
    /// Messages appended to shape logs from replication.
    pub shape_messages: Counter,
    /// Move-in queries started for subquery shapes (Electric's
    /// `electric.subqueries.move_in_triggered.count`).
    pub move_ins: Counter,
    /// Commit LSN of the last transaction processed.
    pub processed_lsn: Gauge,
    /// LSN acknowledged to Postgres as durable.
    pub flushed_lsn: Gauge,
    /// WAL the server has decoded and sent but Syncline has not acknowledged, in bytes.
    pub unacknowledged_wal_bytes: Gauge,
    /// Time from a transaction's commit in Postgres to its processing here, in seconds.
    pub replication_lag_seconds: Gauge<f64, AtomicU64>,
    /// Duration of the pipeline's batched flushes (fsync of every touched shape log).
    pub flush_seconds: Histogram,
    /// Initial snapshots running.
    pub snapshots_running: Gauge,
    /// Initial snapshots waiting for a database connection.
    pub snapshots_waiting: Gauge,
    /// Rows written by initial snapshots.
    pub snapshot_rows: Counter,
    /// Shapes whose initial snapshot was one query shared with other shapes of their table.
    pub snapshots_shared: Counter,
    /// Rows read so far by each running snapshot.
    pub snapshot_progress_rows: Family<SnapshotLabels, Gauge>,
    /// Rows Postgres estimates the table of each running snapshot holds (`pg_class.reltuples`;
    /// absent without an estimate).
    pub snapshot_table_rows_estimated: Family<SnapshotLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("syncline"),
            requests: Family::default(),
            admission_rejected: Family::default(),
            admission_in_flight: Family::default(),
            shapes: Gauge::default(),
            shape_logs_open: Gauge::default(),
            shape_logs_held: Gauge::default(),
            shape_logs_parked: Gauge::default(),
            gzip_responses: Counter::default(),
            gzip_cache_hits: Counter::default(),
            health: Family::default(),
            transactions: Counter::default(),
            changes: Counter::default(),
            shape_messages: Counter::default(),
            move_ins: Counter::default(),
            processed_lsn: Gauge::default(),
            flushed_lsn: Gauge::default(),
            unacknowledged_wal_bytes: Gauge::default(),
            replication_lag_seconds: Gauge::default(),
            flush_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            snapshots_running: Gauge::default(),
            snapshots_waiting: Gauge::default(),
            snapshot_rows: Counter::default(),
            snapshots_shared: Counter::default(),
            snapshot_progress_rows: Family::default(),
            snapshot_table_rows_estimated: Family::default(),
        };
        metrics.register();
        metrics
    }
}

impl Metrics {
    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "http_requests",
            "HTTP responses by method and status",
            self.requests.clone(),
        );
        r.register(
            "admission_rejected",
            "Requests turned away because too many were in flight",
            self.admission_rejected.clone(),
        );
        r.register(
            "admission_in_flight",
            "Requests in flight by kind",
            self.admission_in_flight.clone(),
        );
        r.register("shapes", "Live shapes", self.shapes.clone());
        r.register(
            "shape_logs_open",
            "Shape log writers open, holding their files",
            self.shape_logs_open.clone(),
        );
        r.register(
            "shape_logs_held",
            "Shape log writers held: files closed, lock and state kept",
            self.shape_logs_held.clone(),
        );
        r.register(
            "shape_logs_parked",
            "Shape log writers parked: files closed and lock released, state kept",
            self.shape_logs_parked.clone(),
        );
        r.register(
            "gzip_responses",
            "Responses sent gzipped",
            self.gzip_responses.clone(),
        );
        r.register(
            "gzip_cache_hits",
            "gzipped responses served from kept compressed chunks",
            self.gzip_cache_hits.clone(),
        );
        r.register(
            "health",
            "1 for the status /v1/health reports (starting, waiting, active, degraded)",
            self.health.clone(),
        );
        r.register(
            "replication_transactions",
            "Replicated transactions processed",
            self.transactions.clone(),
        );
        r.register(
            "replication_changes",
            "Row changes decoded from replication",
            self.changes.clone(),
        );
        r.register(
            "shape_log_messages",
            "Messages appended to shape logs from replication",
            self.shape_messages.clone(),
        );
        r.register(
            "subquery_move_ins",
            "Move-in queries started for subquery shapes",
            self.move_ins.clone(),
        );
        r.register(
            "replication_processed_lsn",
            "Commit LSN of the last transaction processed",
            self.processed_lsn.clone(),
        );
        r.register(
            "replication_flushed_lsn",
            "LSN acknowledged to Postgres as durable",
            self.flushed_lsn.clone(),
        );
        r.register(
            "replication_unacknowledged_wal_bytes",
            "WAL sent by Postgres and not yet acknowledged as durable",
            self.unacknowledged_wal_bytes.clone(),
        );
        r.register(
            "replication_lag_seconds",
            "Time from commit in Postgres to processing in Syncline",
            self.replication_lag_seconds.clone(),
        );
        r.register(
            "flush_seconds",
            "Duration of batched shape-log flushes",
            self.flush_seconds.clone(),
        );
        r.register(
            "snapshots_running",
            "Initial snapshots running",
            self.snapshots_running.clone(),
        );
        r.register(
            "snapshots_waiting",
            "Initial snapshots waiting for a database connection",
            self.snapshots_waiting.clone(),
        );
        r.register(
            "snapshot_rows",
            "Rows written by initial snapshots",
            self.snapshot_rows.clone(),
        );
        r.register(
            "snapshots_shared",
            "Shapes whose initial snapshot was one query shared with other shapes of their table",
            self.snapshots_shared.clone(),
        );
        r.register(
            "snapshot_progress_rows",
            "Rows read so far by each running snapshot",
            self.snapshot_progress_rows.clone(),
        );
        r.register(
            "snapshot_table_rows_estimated",
            "Rows Postgres estimates the table of each running snapshot holds (pg_class.reltuples)",
            self.snapshot_table_rows_estimated.clone(),
        );
    }

    /// Counts a response.
    pub fn request(&self, method: &str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                status,
            })
            .inc();
    }

    /// The metrics in Prometheus's text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// An LSN as a gauge value (LSNs stay far below 2^63 in practice).
pub fn lsn_gauge(lsn: u64) -> i64 {
    i64::try_from(lsn).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_text_format() {
        let m = Metrics::default();
        m.request("GET", 200);
        m.transactions.inc();
        let text = m.render();
        assert!(
            text.contains(r#"syncline_http_requests_total{method="GET",status="200"} 1"#),
            "{text}"
        );
        assert!(
            text.contains("syncline_replication_transactions_total 1"),
            "{text}"
        );
        assert!(text.contains("# TYPE syncline_shapes gauge"), "{text}");
    }
}
