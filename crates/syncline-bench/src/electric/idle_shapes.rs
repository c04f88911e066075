//! `electric idle-shapes`: what a shape costs while nobody reads it. N shapes `name = '<k>'`
//! on `users` are created as fast as a bounded number of concurrent clients can (each reads
//! its shape from `offset=-1` until up to date), then left idle; the server's RSS minus that
//! of the same process before its first shape, its open file descriptors and its storage
//! directory's size are read, and again after a restart (SIGTERM, start, active) that
//! restores every shape from storage.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::client::Error;
use super::http_pool::Pool;
use super::server_metrics::{metric, open_fds};
use super::{per, pool, round3, scenario_json, sync_all, users_client, wait_active, Bench, Server};

/// Shape requests in flight at once while creating the shapes.
const CREATE_CONCURRENCY: usize = 32;
/// How long the server is left alone before its figures are read.
const IDLE_WAIT: Duration = Duration::from_secs(3);
/// `--idle-log-park` of the servers this scenario starts: a log unwritten this long is parked,
/// within twice this, so well within [`IDLE_WAIT`] (the default, 60 s, would need a minute's
/// wait per point).
const IDLE_LOG_PARK: &str = "1s";
/// The largest grid point, the headline figure's.
const HEADLINE_SHAPES: usize = 100_000;

/// A shape of this scenario: `name = '<k>'` (no name is a bare number, so every shape is
/// empty: the figures are the cost of the shape itself, not of rows).
fn idle_where(k: usize) -> String {
    format!("name = '{k}'")
}

/// The server's figures at one moment of a point.
struct Figures {
    /// `VmRSS`, in bytes.
    rss_bytes: u64,
    /// Open file descriptors.
    fds: usize,
    /// Live shapes by the server's `syncline_shapes` gauge (`None` without it).
    shapes: Option<f64>,
}

impl Figures {
    /// Reads them off `server` after leaving it idle for [`IDLE_WAIT`].
    async fn read(server: &Server, http: &Pool) -> Result<Figures, Error> {
        tokio::time::sleep(IDLE_WAIT).await;
        Ok(Figures {
            rss_bytes: server.sample()?.rss_bytes,
            fds: open_fds(server)?,
            shapes: metric(http, server.url(), "syncline_shapes").await?,
        })
    }
}

/// Runs the points of `idle-shapes`; each is a fresh server with `n` shapes.
pub(super) async fn idle_shapes(bench: &mut Bench, points: &[usize]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    let mut errors_total = 0;
    for &n in points {
        let mut server = bench
            .server_with(&["--idle-log-park", IDLE_LOG_PARK])
            .await?;
        let http = pool();
        let storage = server.storage_dir().ok_or("no storage directory")?;
        let empty = Figures::read(&server, &http).await?;
        let empty_disk = disk_bytes(&storage)?;

        let started = Instant::now();
        let clients = (1..=n).map(|k| users_client(&http, &server, Some(&idle_where(k)), false));
        let errors = sync_all(clients, CREATE_CONCURRENCY).await?;
        let created = started.elapsed();
        let idle = Figures::read(&server, &http).await?;
        let idle_disk = disk_bytes(&storage)?;

        let signalled = Instant::now();
        server.restart().await?;
        let restarted = signalled.elapsed();
        let restored = Figures::read(&server, &http).await?;

        let rss_per_shape = per(idle.rss_bytes.saturating_sub(empty.rss_bytes), n);
        let rss_per_restored = per(restored.rss_bytes.saturating_sub(empty.rss_bytes), n);
        let disk_per_shape = per(idle_disk.saturating_sub(empty_disk), n);
        eprintln!(
            "idle_shapes {n} shapes: {rss_per_shape} B RSS per shape, {rss_per_restored} B per restored shape, {disk_per_shape} B on disk per shape, fds {} → {} → {} (restored), created in {:.1} s, {} errors",
            empty.fds,
            idle.fds,
            restored.fds,
            created.as_secs_f64(),
            errors.count
        );
        errors_total += errors.count;
        headline.insert(format!("rss_bytes_per_shape_at_{n}"), rss_per_shape.into());
        results.push(json!({
            "shapes": n,
            "errors": errors.count,
            "error_messages": errors.first,
            "shapes_created_ms": round3(created.as_secs_f64() * 1000.0),
            "shapes_per_second": round3(n as f64 / created.as_secs_f64()),
            "server_shapes_gauge": idle.shapes,
            "server_shapes_gauge_after_restart": restored.shapes,
            "rss_bytes_no_shape": empty.rss_bytes,
            "rss_bytes_idle_shapes": idle.rss_bytes,
            "rss_bytes_restored_shapes": restored.rss_bytes,
            "rss_bytes_per_shape": rss_per_shape,
            "rss_bytes_per_restored_shape": rss_per_restored,
            "open_fds_no_shape": empty.fds,
            "open_fds_idle_shapes": idle.fds,
            "open_fds_restored_shapes": restored.fds,
            "disk_bytes_no_shape": empty_disk,
            "disk_bytes_idle_shapes": idle_disk,
            "disk_bytes_per_shape": disk_per_shape,
            "restart_until_active_ms": round3(restarted.as_secs_f64() * 1000.0),
        }));
        drop(http);
        bench.finish(server).await?;
    }
    let largest = points.iter().copied().max().unwrap_or(0);
    if !points.contains(&HEADLINE_SHAPES) {
        headline.insert(
            format!("rss_bytes_per_shape_at_{HEADLINE_SHAPES}"),
            Value::Null,
        );
        headline.insert(
            "note".into(),
            format!(
                "the {HEADLINE_SHAPES}-shape point did not run (--idle-shapes {HEADLINE_SHAPES} runs it); rss_bytes_per_shape_at_{largest} is the largest point's"
            )
            .into(),
        );
    }
    if let Some(point) = results.iter().find(|p| p["shapes"] == largest) {
        headline.insert(
            format!("rss_bytes_per_restored_shape_at_{largest}"),
            point["rss_bytes_per_restored_shape"].clone(),
        );
        headline.insert(
            format!("disk_bytes_per_shape_at_{largest}"),
            point["disk_bytes_per_shape"].clone(),
        );
    }
    headline.insert("errors".into(), errors_total.into());
    Ok(scenario_json(
        headline,
        json!({
            "shapes": "where=name = '<k>', k = 1..=N: distinct shapes on users, each empty",
            "created_by": format!("{CREATE_CONCURRENCY} concurrent clients, each reading one shape from offset=-1 until up to date, then the next"),
            "idle_wait_s": IDLE_WAIT.as_secs_f64(),
            "idle_log_park": format!("--idle-log-park {IDLE_LOG_PARK} (Syncline servers this run starts)"),
            "rss_bytes_per_shape": "(VmRSS with the N shapes, idle, no client) - (VmRSS of the same process before its first shape), / N",
            "rss_bytes_per_restored_shape": "the same after SIGTERM and a start on the same storage, against the same no-shape figure",
            "disk_bytes_per_shape": "(allocated bytes of the storage directory with the N shapes - before the first) / N",
            "open_fds": "entries of /proc/<pid>/fd",
        }),
        results,
    ))
}

impl Server {
    /// Stops the server with SIGTERM and starts it again on the same storage and port; returns
    /// once it is the active writer again.
    async fn restart(&mut self) -> Result<(), Error> {
        let process = self
            .process
            .as_mut()
            .ok_or("only a server this run started can be restarted")?;
        process.restart(libc::SIGTERM).map_err(|e| e.to_string())?;
        self.pid = Some(process.child.id());
        wait_active(&self.url).await
    }
}

/// Bytes allocated on disk to the files under `dir` (what `du` counts).
fn disk_bytes(dir: &Path) -> Result<u64, Error> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        total += metadata.blocks() * 512;
        if metadata.is_dir() {
            total += disk_bytes(&entry.path())?;
        }
    }
    Ok(total)
}
