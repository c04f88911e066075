//! A private Postgres cluster with a Syncline server in this process, and HTTP helpers.

// Each test binary uses a part of these helpers.
#![allow(dead_code)]

pub mod process;
pub mod tagged;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde_json::Value;
use syncline_server::config::{Config, FollowMode, RoleSetting};
use syncline_server::health::Phase;
use syncline_server::startup::{start, Server};
use syncline_testkit::PgCluster;
use tokio_postgres::Client;

/// Longest a test's HTTP request may take, its body included: a server that stops answering
/// fails the test with a message, instead of holding the whole suite until CI's time runs out.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The HTTP client the tests use: every request bounded by [`REQUEST_TIMEOUT`].
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("an HTTP client")
}

/// A cluster, a client on it, and a server syncing it.
pub struct Fixture {
    /// Kept so the cluster lives as long as the fixture.
    pub _cluster: PgCluster,
    pub db: Client,
    pub server: Server,
    pub http: reqwest::Client,
    /// The server's storage directory.
    pub storage: tempfile::TempDir,
}

/// A response: status, headers, parsed JSON body and its length in bytes.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub len: usize,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The change messages of the body (control messages left out).
    pub fn changes(&self) -> Vec<&Value> {
        self.body
            .as_array()
            .map(|a| a.iter().filter(|m| m.get("key").is_some()).collect())
            .unwrap_or_default()
    }

    /// Control messages in order.
    pub fn controls(&self) -> Vec<&str> {
        self.body
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["headers"]["control"].as_str())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Starts a cluster, runs `setup` SQL, and starts a server with a 10,000-byte chunk threshold
/// and a 2 s long-poll timeout.
pub async fn fixture(setup: &str) -> Fixture {
    fixture_with(setup, |_| {}).await
}

/// As [`fixture`], with a chance to change the configuration.
pub async fn fixture_with(setup: &str, configure: impl FnOnce(&mut Config)) -> Fixture {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let db = cluster.connect("postgres").await;
    db.batch_execute(setup).await.unwrap();
    let storage = tempfile::tempdir().unwrap();
    let mut config = config(&cluster.connection_string("postgres"), storage.path());
    configure(&mut config);
    let server = start(config).await.expect("server starts");
    for _ in 0..300 {
        if server.state.health.status().phase == Phase::Active {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        server.state.health.status().phase,
        Phase::Active,
        "the server replicates"
    );
    Fixture {
        _cluster: cluster,
        db,
        server,
        http: http_client(),
        storage,
    }
}

impl Fixture {
    /// GET /v1/shape with a query string.
    pub async fn get(&self, query: &str) -> Reply {
        self.request(reqwest::Method::GET, query).await
    }

    /// Any method on /v1/shape.
    pub async fn request(&self, method: reqwest::Method, query: &str) -> Reply {
        let url = format!("http://{}/v1/shape?{query}", self.server.addr);
        let response = self.http.request(method, url).send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let len = text.len();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Reply {
            status,
            headers,
            body,
            len,
        }
    }

    /// Follows a shape from `-1` until up-to-date; returns the handle, the offset to continue
    /// from and every change message seen.
    pub async fn sync(&self, query: &str) -> (String, String, Vec<Value>) {
        let first = self.get(&format!("{query}&offset=-1")).await;
        assert_eq!(first.status, 200, "{}", first.body);
        let handle = first.header("electric-handle").unwrap().to_owned();
        let mut offset = first.header("electric-offset").unwrap().to_owned();
        let mut changes: Vec<Value> = first.changes().into_iter().cloned().collect();
        loop {
            let next = self
                .get(&format!("{query}&offset={offset}&handle={handle}"))
                .await;
            assert_eq!(next.status, 200, "{}", next.body);
            changes.extend(next.changes().into_iter().cloned());
            offset = next.header("electric-offset").unwrap().to_owned();
            if next.header("electric-up-to-date").is_some() {
                return (handle, offset, changes);
            }
        }
    }
}

/// The configuration tests run servers with: a 10,000-byte chunk threshold, a 2 s long-poll
/// timeout, no secret.
pub fn config(database_url: &str, storage: &std::path::Path) -> Config {
    Config {
        database_url: database_url.to_owned(),
        port: 0,
        listen_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        secret: None,
        insecure: true,
        storage_dir: storage.to_owned(),
        chunk_bytes_threshold: 10_000,
        long_poll_timeout_ms: 2_000,
        cache_max_age: 1,
        cache_stale_age: 3,
        replication_stream_id: "test".into(),
        db_pool_size: 4,
        enable_integration_testing: true,
        max_shapes: None,
        max_concurrent_requests: Default::default(),
        compaction_period_s: 600,
        prometheus_port: None,
        max_connections: None,
        open_logs_max: None,
        held_logs_max: None,
        parked_logs_max: None,
        http_idle_timeout: Duration::from_secs(60),
        tcp_send_timeout: Duration::from_secs(30),
        http_engine: http_engine(),
        idle_log_park: Duration::from_secs(60),
        role: RoleSetting::Auto,
        follow: FollowMode::Inotify,
        follow_poll_interval: Duration::from_millis(100),
        log_format: "text".into(),
    }
}

/// The HTTP engine the servers of a test use: `SYNCLINE_HTTP_ENGINE` (which spawned servers
/// read too), else the default.
pub fn http_engine() -> syncline_server::config::HttpEngine {
    std::env::var("SYNCLINE_HTTP_ENGINE")
        .ok()
        .and_then(|v| clap::ValueEnum::from_str(&v, true).ok())
        .unwrap_or_default()
}
