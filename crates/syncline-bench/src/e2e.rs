//! `e2e`: Syncline end to end — Postgres → the `syncline` server process → HTTP → the official
//! Node client `@electric-sql/client` — on the 1,000,000-row `bench_items` table.
//!
//! Everything is real and separate: a private cluster (`PgCluster`), the release server binary
//! as its own process, and Node running `client/e2e.mjs` (`@electric-sql/client` pinned in
//! `client/package-lock.json`; `npm ci` runs when `client/node_modules` is missing). The scenario
//! builds the server itself (`cargo build --release -p syncline-server`, a no-op when it is up to
//! date) and runs the `syncline` binary next to its own executable: same target directory, same
//! profile, and never a stale binary.
//!
//! Figures (each the best round, with the median beside it as `<name>_median`):
//! - `initial_sync_server_s`: from sending `offset=-1` for a fresh shape (the previous one is
//!   DELETEd) until a Rust HTTP reader following the shape gets `electric-up-to-date`. That header
//!   is the protocol's own word that the log is complete, so no server internals are needed; the
//!   reader only copies bytes and counts rows (no JSON parsing), so it takes little CPU from the
//!   server. Baseline `raw_copy_s`: the same rows by raw binary COPY, drained without decoding.
//! - `initial_sync_client_s`: a fresh Node process and a fresh shape (no cache anywhere) until
//!   the `Shape` holds every row, timed by Node from just before the `ShapeStream` is created.
//! - `txn_100k_visible_s`: from the commit of one 100,000-row INSERT transaction until the live
//!   Node client holds all of it. Baseline `pg_recvlogical_s`: `pg_recvlogical` started after the
//!   same commit, receiving that transaction into a file (as in `ingest`; unlike the server's
//!   walsender, it also reads the transaction's WAL after the commit).
//! - `txns_1000_single_row_lag_ms`: 1,000 one-row commits in a row; from the last commit until
//!   the live client has that row.
//! - `txn_100k_server_visible_s`: the server's share of `txn_100k_visible_s`, measured with the
//!   Node client stopped: from the commit until a Rust HTTP reader following the shape live
//!   (counting rows, no JSON parsing) has all of the transaction.
//!
//! Cross-process times are CLOCK_MONOTONIC on both sides (`clock_gettime` here,
//! `process.hrtime.bigint()` in Node, checked against each other at every Node start). The
//! benchmark's session commits with `synchronous_commit = on`: a commit is then flushed (free,
//! the private cluster runs with fsync off) and walsenders see it at once, as on a production
//! server, instead of up to `wal_writer_delay` later.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use syncline_core::Lsn;
use syncline_pg::catalog::load_relation;
use syncline_pg::publication::{add_table, ensure_publication};
use syncline_pg::replication::{drop_slot, ensure_slot};
use syncline_pg::snapshot::SnapshotQuery;
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_postgres::Client;

use crate::bench_items::{self, best, insert_rows_sql, pg_recvlogical, ratio, raw_copy};
use crate::BenchResult;

type Error = Box<dyn std::error::Error>;

/// Rows in the table before the live measurements.
const ROWS: i64 = 1_000_000;
/// Rows in the large transaction.
const TXN_ROWS: i64 = 100_000;
/// One-row commits per round of the lag measurement.
const SINGLE_ROW_TXNS: i64 = 1_000;
/// Rounds of the raw COPY baseline.
const RAW_COPY_ROUNDS: usize = 5;
/// Rounds of the server's initial sync.
const SERVER_SYNC_ROUNDS: usize = 5;
/// Rounds of the Node client's initial sync (the slowest measurement).
const CLIENT_SYNC_ROUNDS: usize = 3;
/// Rounds of the 100,000-row transaction, each with its pg_recvlogical baseline.
const TXN_ROUNDS: usize = 5;
/// Rounds of 1,000 one-row commits.
const SINGLE_ROW_ROUNDS: usize = 5;
/// The pinned client version (also in `client/package.json`).
const CLIENT_PACKAGE: &str = "@electric-sql/client@1.5.28";
/// Publication for the pg_recvlogical baseline.
const PUBLICATION: &str = "bench_pub";
/// How long the server may take to report itself healthy.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long any one wait for the server or the Node client may take.
const WAIT_TIMEOUT: Duration = Duration::from_secs(300);
/// Node's heap limit in MiB: the client holds 1.3 million rows as JS objects.
const NODE_HEAP_MIB: u32 = 8192;
/// What starts each change message in a response body.
const MESSAGE_START: &[u8] = b"{\"key\":";

/// Runs the scenario.
pub fn run() -> BenchResult {
    crate::run_on_workers(run_async())
}

async fn run_async() -> BenchResult {
    let workspace = workspace_dir();
    let server_bin = build_server(&workspace)?;
    let client_dir = install_client()?;
    let node_version = command_output("node", &["--version"])?;

    let cluster = tokio::task::spawn_blocking(PgCluster::start).await?;
    let config = ConnConfig::parse(&cluster.connection_string("postgres"))?;
    let client = syncline_pg::connect(&config).await?;
    client.batch_execute("SET synchronous_commit = on").await?;
    bench_items::create(&client, ROWS).await?;
    ensure_publication(&client, PUBLICATION).await?;
    add_table(&client, PUBLICATION, "public", "bench_items", false).await?;
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);

    let server = ServerProcess::start(&server_bin, &cluster).await?;
    let result = measure(&cluster, &config, &client, &server, &client_dir).await;
    if result.is_err() {
        eprintln!("server log:\n{}", server.log_tail());
    }
    let m = result?;
    server.stop();

    let figure = |runs: &[f64]| round3(best(runs));
    let (server_best, raw_best) = (best(&m.server_sync), best(&m.raw_copy));
    let (txn_best, recv_best) = (best(&m.txn_visible), best(&m.recvlogical));
    let lag_best = best(&m.lag_ms);
    Ok(json!({
        "parameters": {
            "rows": ROWS,
            "txn_rows": TXN_ROWS,
            "single_row_txns": SINGLE_ROW_TXNS,
            "rounds": {
                "raw_copy": RAW_COPY_ROUNDS, "initial_sync_server": SERVER_SYNC_ROUNDS,
                "initial_sync_client": CLIENT_SYNC_ROUNDS, "txn_100k": TXN_ROUNDS,
                "txns_1000_single_row": SINGLE_ROW_ROUNDS,
            },
            "statistic": "each figure is the best round, <figure>_median the median; ratios and goals use the best rounds",
            "table": bench_items::table_parameter(),
            "shape": "table=bench_items (every column, every row)",
            "shape_json_bytes": m.shape_bytes,
            "server": "target/release/syncline serve, default chunk size (10 MiB) and long-poll timeout (20 s)",
            "client": CLIENT_PACKAGE,
            "node_version": node_version,
            "postgres_version": version,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        },
        "figures": {
            "initial_sync_server_s": figure(&m.server_sync),
            "initial_sync_server_s_median": round3(median(&m.server_sync)),
            "raw_copy_s": figure(&m.raw_copy),
            "raw_copy_s_median": round3(median(&m.raw_copy)),
            "initial_sync_server_ratio_vs_raw_copy": ratio(server_best, raw_best),
            "initial_sync_client_s": figure(&m.client_sync),
            "initial_sync_client_s_median": round3(median(&m.client_sync)),
            "txn_100k_visible_s": figure(&m.txn_visible),
            "txn_100k_visible_s_median": round3(median(&m.txn_visible)),
            "pg_recvlogical_s": figure(&m.recvlogical),
            "pg_recvlogical_s_median": round3(median(&m.recvlogical)),
            "txn_100k_ratio_vs_pg_recvlogical": ratio(txn_best, recv_best),
            "txn_100k_server_visible_s": figure(&m.txn_server_visible),
            "txn_100k_server_visible_s_median": round3(median(&m.txn_server_visible)),
            "txn_100k_server_ratio_vs_pg_recvlogical": ratio(best(&m.txn_server_visible), recv_best),
            "txns_1000_single_row_lag_ms": round3(lag_best),
            "txns_1000_single_row_lag_ms_median": round3(median(&m.lag_ms)),
            "txns_1000_commits_per_s_median": median(&m.commits_per_s).round(),
        },
        "baselines": {
            "raw_copy": "COPY (SELECT every column FROM bench_items) TO STDOUT (FORMAT binary) in a REPEATABLE READ transaction, every CopyData received and dropped without decoding",
            "pg_recvlogical": "pg_recvlogical --plugin=pgoutput -o proto_version=1 --start --endpos=<WAL insert position before the commit> -f <file>, started after the commit",
        },
        "goals": {
            "initial_sync_server_s": "<= 1.25 x raw_copy_s",
            "txn_100k_visible_s": "<= 1.25 x pg_recvlogical_s",
            "txns_1000_single_row_lag_ms": "<= 20",
        },
        "goals_met": {
            "initial_sync_server_s": server_best <= 1.25 * raw_best,
            "txn_100k_visible_s": txn_best <= 1.25 * recv_best,
            "txns_1000_single_row_lag_ms": lag_best <= 20.0,
        },
        "runs": {
            "raw_copy_s": m.raw_copy, "initial_sync_server_s": m.server_sync,
            "initial_sync_client_s": m.client_sync, "txn_100k_visible_s": m.txn_visible,
            "txn_100k_server_visible_s": m.txn_server_visible,
            "pg_recvlogical_s": m.recvlogical, "txns_1000_single_row_lag_ms": m.lag_ms,
            "txns_1000_commits_per_s": m.commits_per_s,
        },
    }))
}

/// Follows the `bench_items` shape of the server at `server_url` from `position`
/// (`offset=…&handle=…`), live or not, until `electric-up-to-date` once it has received
/// `rows_wanted` rows (`u64::MAX`: any number).
async fn follow(
    http: &reqwest::Client,
    server_url: &str,
    position: String,
    live: bool,
    rows_wanted: u64,
) -> Result<Followed, Error> {
    let base = format!("{server_url}/v1/shape?table=bench_items");
    let start = Instant::now();
    let mut url = format!("{base}&{position}{}", if live { "&live=true" } else { "" });
    let (mut rows, mut bytes) = (0u64, 0u64);
    loop {
        let response = http.get(&url).send().await?;
        let status = response.status();
        let header = |name: &str| crate::electric::client::header(response.headers(), name);
        let (handle, offset) = (header("electric-handle"), header("electric-offset"));
        let up_to_date = response.headers().contains_key("electric-up-to-date");
        let body = response.bytes().await?;
        if status != 200 {
            return Err(format!("GET {url}: {status} {}", String::from_utf8_lossy(&body)).into());
        }
        rows += memchr::memmem::find_iter(&body, MESSAGE_START).count() as u64;
        bytes += body.len() as u64;
        let (Some(handle), Some(offset)) = (handle, offset) else {
            return Err(format!("GET {url}: no electric-handle or electric-offset").into());
        };
        let position = format!("offset={offset}&handle={handle}");
        if up_to_date && (rows >= rows_wanted || rows_wanted == u64::MAX) {
            return Ok(Followed {
                took: start.elapsed(),
                done_ns: monotonic_ns(),
                rows,
                bytes,
                position,
            });
        }
        let live = live || up_to_date;
        url = format!("{base}&{position}{}", if live { "&live=true" } else { "" });
    }
}

/// Where following a shape got to.
struct Followed {
    /// From the first request to the last response.
    took: Duration,
    /// CLOCK_MONOTONIC when the last response was read.
    done_ns: u64,
    /// Change messages received.
    rows: u64,
    /// Body bytes received.
    bytes: u64,
    /// `offset=…&handle=…` to continue from.
    position: String,
}

/// Every round of every measurement.
#[derive(Default)]
struct Measurements {
    raw_copy: Vec<f64>,
    server_sync: Vec<f64>,
    shape_bytes: u64,
    client_sync: Vec<f64>,
    txn_visible: Vec<f64>,
    txn_server_visible: Vec<f64>,
    recvlogical: Vec<f64>,
    lag_ms: Vec<f64>,
    commits_per_s: Vec<f64>,
}

async fn measure(
    cluster: &PgCluster,
    config: &ConnConfig,
    client: &Client,
    server: &ServerProcess,
    client_dir: &Path,
) -> Result<Measurements, Error> {
    let mut m = Measurements::default();
    let http = reqwest::Client::builder().timeout(WAIT_TIMEOUT).build()?;

    let relation = load_relation(client, "public", "bench_items")
        .await?
        .ok_or("bench_items missing")?;
    let query = SnapshotQuery::new(&relation, None, None)?;
    let mut conn = WireConnection::connect(config, "syncline-bench", Mode::Query).await?;
    // Warm the caches once so neither side pays for the first read of the table.
    raw_copy(&mut conn, &query).await?;
    for round in 0..RAW_COPY_ROUNDS.max(SERVER_SYNC_ROUNDS) {
        if round < RAW_COPY_ROUNDS {
            let raw = raw_copy(&mut conn, &query).await?;
            eprintln!("raw COPY round {round}: {raw:?}");
            m.raw_copy.push(raw.as_secs_f64());
        }
        if round < SERVER_SYNC_ROUNDS {
            server.delete_shape(&http).await?;
            let Followed {
                took, rows, bytes, ..
            } = server.follow_shape(&http).await?;
            if rows != ROWS as u64 {
                return Err(format!("the server's shape held {rows} rows, not {ROWS}").into());
            }
            eprintln!("server initial sync round {round}: {took:?}, {bytes} bytes");
            m.server_sync.push(took.as_secs_f64());
            m.shape_bytes = bytes;
        }
    }
    drop(conn);

    let mut live = None;
    for round in 0..CLIENT_SYNC_ROUNDS {
        drop(live.take());
        server.delete_shape(&http).await?;
        let (node, took) = NodeClient::sync(client_dir, &server.url, ROWS).await?;
        eprintln!("client initial sync round {round}: {took:?}");
        m.client_sync.push(took.as_secs_f64());
        live = Some(node);
    }
    let mut node = live.ok_or("no client rounds")?;

    let mut rows = ROWS;
    for round in 0..TXN_ROUNDS {
        let slot = format!("bench_e2e_recvlogical_{round}");
        ensure_slot(config, &slot).await?;
        node.ask(rows + TXN_ROWS).await?;
        client.batch_execute("BEGIN").await?;
        client
            .batch_execute(&insert_rows_sql(rows + 1, rows + TXN_ROWS))
            .await?;
        // Every change of the transaction lies before this position, its commit after it.
        let before_commit: String = client
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await?
            .get(0);
        client.batch_execute("COMMIT").await?;
        let committed = monotonic_ns();
        let seen = node.seen().await?;
        rows += TXN_ROWS;
        let visible = ns_to_s(seen.saturating_sub(committed));
        let end_lsn: Lsn = before_commit.parse()?;
        let theirs = tokio::task::block_in_place(|| {
            pg_recvlogical(cluster, &slot, PUBLICATION, end_lsn, TXN_ROWS)
        })?;
        drop_slot(config, &slot).await?;
        client.batch_execute("CHECKPOINT").await?;
        eprintln!(
            "100,000-row transaction round {round}: visible in Node after {visible:.3} s, pg_recvlogical {theirs:?}"
        );
        m.txn_visible.push(visible);
        m.recvlogical.push(theirs.as_secs_f64());
    }

    let insert = client
        .prepare(&insert_rows_sql("$1::int8", "$1::int8"))
        .await?;
    for round in 0..SINGLE_ROW_ROUNDS {
        node.ask(rows + SINGLE_ROW_TXNS).await?;
        let start = Instant::now();
        for id in rows + 1..=rows + SINGLE_ROW_TXNS {
            client.execute(&insert, &[&id]).await?;
        }
        let committed = monotonic_ns();
        let commits = start.elapsed();
        let seen = node.seen().await?;
        rows += SINGLE_ROW_TXNS;
        let lag_ms = seen.saturating_sub(committed) as f64 / 1e6;
        let per_s = SINGLE_ROW_TXNS as f64 / commits.as_secs_f64();
        eprintln!("1,000 one-row commits round {round}: {commits:?} ({per_s:.0}/s), last visible after {lag_ms:.3} ms");
        m.lag_ms.push(lag_ms);
        m.commits_per_s.push(per_s);
    }
    drop(node);

    // The server's share of the large transaction: a Rust reader that only counts rows, with
    // no Node client running.
    let mut position = server.follow_shape(&http).await?.position;
    for round in 0..TXN_ROUNDS {
        let follower = {
            let (url, http, position) = (server.url.clone(), http.clone(), position.clone());
            tokio::spawn(async move {
                follow(&http, &url, position, true, TXN_ROWS as u64)
                    .await
                    .map_err(|e| e.to_string())
            })
        };
        client
            .batch_execute(&format!(
                "BEGIN; {}; COMMIT",
                insert_rows_sql(rows + 1, rows + TXN_ROWS)
            ))
            .await?;
        let committed = monotonic_ns();
        let followed = follower.await??;
        rows += TXN_ROWS;
        let visible = ns_to_s(followed.done_ns.saturating_sub(committed));
        eprintln!("100,000-row transaction round {round}: whole in a Rust HTTP reader after {visible:.3} s");
        m.txn_server_visible.push(visible);
        position = followed.position;
    }
    Ok(m)
}

/// The workspace root.
pub(crate) fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crate lies two levels down")
        .to_owned()
}

/// Builds the release server and returns its binary, which lies next to this executable.
pub(crate) fn build_server(workspace: &Path) -> Result<PathBuf, Error> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building the release server…");
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "syncline-server",
            "--bin",
            "syncline",
        ])
        .current_dir(workspace)
        .status()?;
    if !status.success() {
        return Err(format!("building the server failed: {status}").into());
    }
    let binary = std::env::current_exe()?.with_file_name("syncline");
    if !binary.exists() {
        return Err(format!("no server binary at {}", binary.display()).into());
    }
    Ok(binary)
}

/// The Node client's directory, with its locked dependencies installed.
fn install_client() -> Result<PathBuf, Error> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("client");
    if !dir.join("node_modules").exists() {
        eprintln!("installing the Node client (npm ci)…");
        let status = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()?;
        if !status.success() {
            return Err(format!("npm ci failed: {status}").into());
        }
    }
    Ok(dir)
}

fn command_output(program: &str, args: &[&str]) -> Result<String, Error> {
    let out = std::process::Command::new(program).args(args).output()?;
    if !out.status.success() {
        return Err(format!("{program} {args:?} failed: {}", out.status).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// CLOCK_MONOTONIC in nanoseconds: the clock Node's `process.hrtime.bigint()` reads.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).expect("the monotonic clock is not negative");
    let nanos = u64::try_from(ts.tv_nsec).expect("nanoseconds are below 10^9");
    secs * 1_000_000_000 + nanos
}

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn median(runs: &[f64]) -> f64 {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The `syncline serve` process, killed when dropped.
pub(crate) struct ServerProcess {
    pub(crate) child: std::process::Child,
    pub(crate) url: String,
    /// The command that started it, which [`restart`](Self::restart) runs again.
    command: std::process::Command,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    /// Starts the server on a free port with storage in a temp dir and waits until it is healthy.
    pub(crate) async fn start(binary: &Path, cluster: &PgCluster) -> Result<ServerProcess, Error> {
        ServerProcess::start_with(binary, cluster, "bench", &[]).await
    }

    /// Starts the server like [`start`](Self::start), on replication stream `stream_id` and
    /// with the extra command-line `flags`.
    pub(crate) async fn start_with(
        binary: &Path,
        cluster: &PgCluster,
        stream_id: &str,
        flags: &[&str],
    ) -> Result<ServerProcess, Error> {
        let dir = tempfile::Builder::new().prefix("syncline-e2e-").tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::fs::File::create(dir.path().join("server.log"))?;
        let mut command = std::process::Command::new(binary);
        command
            .arg("serve")
            .args(["--database-url", &cluster.connection_string("postgres")])
            .args(["--listen-address", "127.0.0.1", "--port", &port.to_string()])
            .arg("--storage-dir")
            .arg(dir.path().join("storage"))
            .args(["--insecure", "--enable-integration-testing"])
            .args(["--replication-stream-id", stream_id])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let server = ServerProcess {
            child: command.spawn()?,
            url: format!("http://127.0.0.1:{port}"),
            command,
            dir,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()?;
        let deadline = Instant::now() + HEALTH_TIMEOUT;
        loop {
            let health = http.get(format!("{}/v1/health", server.url)).send().await;
            if let Ok(response) = health {
                if response.status() == 200 {
                    return Ok(server);
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the server was not healthy after {HEALTH_TIMEOUT:?}:\n{}",
                    server.log_tail()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The server's storage directory.
    pub(crate) fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// The end of the server's log.
    pub(crate) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Drops the `bench_items` shape, if there is one, so the next request starts afresh.
    async fn delete_shape(&self, http: &reqwest::Client) -> Result<(), Error> {
        let response = http
            .delete(format!("{}/v1/shape?table=bench_items", self.url))
            .send()
            .await?;
        match response.status().as_u16() {
            202 | 404 => Ok(()),
            status => Err(format!("DELETE /v1/shape: {status} {}", response.text().await?).into()),
        }
    }

    /// Follows the `bench_items` shape from `offset=-1` until `electric-up-to-date`.
    async fn follow_shape(&self, http: &reqwest::Client) -> Result<Followed, Error> {
        follow(http, &self.url, "offset=-1".into(), false, u64::MAX).await
    }

    /// Stops the server with `signal` (SIGKILL if it lingers) and starts it again on the same
    /// storage and port, without waiting for it; returns how long it took to exit and how it
    /// exited.
    pub(crate) fn restart(
        &mut self,
        signal: libc::c_int,
    ) -> Result<(Duration, std::process::ExitStatus), Error> {
        let signalled = Instant::now();
        syncline_testkit::stop_process(&mut self.child, signal);
        let stopped = signalled.elapsed();
        let status = self.child.wait()?;
        self.child = self.command.spawn()?;
        Ok((stopped, status))
    }

    /// Stops the server (SIGTERM, then SIGKILL if it lingers).
    pub(crate) fn stop(mut self) {
        self.terminate();
    }

    /// Stops the server like [`stop`](Self::stop), keeping its storage until this is dropped.
    pub(crate) fn halt(&mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        syncline_testkit::stop_process(&mut self.child, libc::SIGTERM);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}

/// A Node process running `client/e2e.mjs` (one fresh `ShapeStream` + `Shape`), killed when
/// dropped.
struct NodeClient {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl NodeClient {
    /// Starts a client on `bench_items` and waits until its Shape holds `rows` rows; returns it
    /// and how long that took by Node's own clock.
    async fn sync(dir: &Path, url: &str, rows: i64) -> Result<(NodeClient, Duration), Error> {
        let spawned = monotonic_ns();
        let mut child = Command::new("node")
            .arg(format!("--max-old-space-size={NODE_HEAP_MIB}"))
            .arg("e2e.mjs")
            .args([url, "bench_items", &rows.to_string()])
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("node stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("node stdout")?).lines();
        let mut node = NodeClient {
            _child: child,
            stdin,
            stdout,
        };
        let started = node.event("started").await?;
        let received = monotonic_ns();
        let node_now = ns_field(&started, "now_ns")?;
        if !(spawned..=received).contains(&node_now) {
            return Err(format!(
                "Node's process.hrtime ({node_now}) is not this process's CLOCK_MONOTONIC ({spawned}..{received})"
            )
            .into());
        }
        let synced = node.event("synced").await?;
        let took = ns_field(&synced, "end_ns")? - ns_field(&synced, "start_ns")?;
        Ok((node, Duration::from_nanos(took)))
    }

    /// Asks to be told when the Shape holds at least `rows` rows.
    async fn ask(&mut self, rows: i64) -> Result<(), Error> {
        let line = format!("{}\n", json!({ "wait_rows": rows }));
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Waits for the answer to the oldest [`ask`](Self::ask); returns when (CLOCK_MONOTONIC ns)
    /// the Shape got there.
    async fn seen(&mut self) -> Result<u64, Error> {
        let event = self.event("rows").await?;
        ns_field(&event, "at_ns")
    }

    /// The next event, which must be `name`.
    async fn event(&mut self, name: &str) -> Result<Value, Error> {
        let line = tokio::time::timeout(WAIT_TIMEOUT, self.stdout.next_line())
            .await
            .map_err(|_| format!("no `{name}` from the Node client after {WAIT_TIMEOUT:?}"))??
            .ok_or_else(|| format!("the Node client exited before `{name}`"))?;
        let event: Value = serde_json::from_str(&line)?;
        match event["event"].as_str() {
            Some(e) if e == name => Ok(event),
            Some("error") => Err(format!("Node client: {}", event["message"]).into()),
            _ => Err(format!("Node client: expected `{name}`, got {line}").into()),
        }
    }
}

fn ns_field(event: &Value, name: &str) -> Result<u64, Error> {
    Ok(event[name]
        .as_str()
        .ok_or_else(|| format!("no {name} in {event}"))?
        .parse()?)
}
