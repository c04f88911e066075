//! Several servers on one storage directory: how far behind the writer read-only servers
//! answer live requests, how long a takeover takes, what a rolling deploy costs clients behind
//! the repository's nginx front door (`deploy/nginx/syncline.conf`), and how many upstream
//! requests that front door lets through when 1,000 live clients wait on one shape.
//!
//! Every figure comes from the release `syncline` binary run as separate processes against a
//! private cluster; the baselines (the writer's own live answers, one server with no front
//! door) are measured in the same run. The benchmark's sessions commit with
//! `synchronous_commit = on` (free: the cluster runs with fsync off), so walsenders see a commit
//! at once rather than up to `wal_writer_delay` later.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;

use crate::bench_items::ratio;
use crate::e2e::{build_server, workspace_dir};
use crate::BenchResult;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Rows of the table the shapes are on.
const ROWS: i64 = 1_000;
/// Commits whose live answers are timed.
const LAG_COMMITS: usize = 300;
/// Pause before each timed commit, so every live request is waiting.
const LAG_PAUSE: Duration = Duration::from_millis(15);
/// The poll interval of the replica that follows by polling only.
const POLL_INTERVAL: &str = "1ms";
/// Takeovers timed after SIGTERM and after SIGKILL.
const TAKEOVER_ROUNDS: usize = 5;
/// Rounds of the rolling deploy.
const DEPLOY_ROUNDS: usize = 5;
/// Clients following the shape through nginx during the rolling deploy.
const DEPLOY_CLIENTS: usize = 20;
/// Live clients on one shape through nginx for the collapse figure.
const COLLAPSE_CLIENTS: usize = 1_000;
/// The servers' long-poll timeout, in milliseconds.
const LONG_POLL_MS: &str = "20000";
/// How long a server may take to become healthy.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// The nginx binary (Debian's nginx-light).
const NGINX: &str = "/usr/sbin/nginx";
/// Open files wanted for 1,000 client connections and their upstream twins.
const OPEN_FILES_WANTED: u64 = 16_384;

/// Runs the scenario.
pub fn run() -> BenchResult {
    raise_open_files_limit(OPEN_FILES_WANTED);
    crate::run_on_workers(async {
        run_async()
            .await
            .map_err(|e| -> Box<dyn std::error::Error> { e })
    })
}

async fn run_async() -> Result<Value, Error> {
    if !Path::new(NGINX).exists() {
        return Err(format!("{NGINX} is missing: scripts/setup installs nginx-light").into());
    }
    let binary = build_server(&workspace_dir()).map_err(|e| e.to_string())?;
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await?;
    let db =
        syncline_pg::connect(&ConnConfig::parse(&cluster.connection_string("postgres"))?).await?;
    sql(&db, "SET synchronous_commit = on").await?;
    sql(
        &db,
        &format!(
            "CREATE TABLE public.items (id bigint PRIMARY KEY, title text NOT NULL);
             INSERT INTO public.items SELECT g, 'row ' || g FROM generate_series(1, {ROWS}) g;"
        ),
    )
    .await?;
    let fleet = Fleet::new(binary, cluster.connection_string("postgres"))?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;

    eprintln!("live answers: writer, inotify replica, polling replica…");
    let lag = live_lag(&fleet, &db, &http).await?;
    eprintln!("takeovers…");
    let takeover = takeovers(&fleet, &http).await?;
    eprintln!("rolling deploy behind nginx…");
    let deploy = rolling_deploy(&fleet, &http).await?;
    eprintln!("{COLLAPSE_CLIENTS} live clients behind nginx…");
    let collapse = collapse(&fleet, &db).await?;

    let writer_p50 = lag.writer.percentile(50);
    Ok(json!({
        "parameters": {
            "rows": ROWS,
            "lag_commits": LAG_COMMITS,
            "poll_interval": POLL_INTERVAL,
            "takeover_rounds": TAKEOVER_ROUNDS,
            "deploy_rounds": DEPLOY_ROUNDS,
            "deploy_clients": DEPLOY_CLIENTS,
            "collapse_clients": COLLAPSE_CLIENTS,
            "long_poll_timeout_ms": LONG_POLL_MS,
            "nginx": "deploy/nginx/syncline.conf, Debian nginx-light",
            "lag": "per commit, the replica's live answer minus the writer's live answer to the same commit (both clients waiting at once); the writer answers right after its durable flush",
            "takeover": "signal sent to the writer → the standby's /v1/health says active writer (replicating)",
        },
        "figures": {
            "replica_live_lag_ms_p50": lag.inotify.percentile(50),
            "replica_live_lag_ms_p99": lag.inotify.percentile(99),
            "replica_poll_live_lag_ms_p50": lag.poll.percentile(50),
            "replica_poll_live_lag_ms_p99": lag.poll.percentile(99),
            "writer_live_ms_p50": writer_p50,
            "writer_live_ms_p99": lag.writer.percentile(99),
            "replica_live_ms_p50": lag.inotify_live.percentile(50),
            "replica_live_ms_p99": lag.inotify_live.percentile(99),
            "replica_poll_live_ms_p50": lag.poll_live.percentile(50),
            "replica_poll_live_ms_p99": lag.poll_live.percentile(99),
            "takeover_sigterm_ms": takeover.sigterm.percentile(50),
            "takeover_sigterm_ms_max": takeover.sigterm.percentile(100),
            "takeover_kill_ms": takeover.kill.percentile(50),
            "takeover_kill_ms_max": takeover.kill.percentile(100),
            "rolling_deploy_failed_requests": deploy.failed,
            "rolling_deploy_requests": deploy.requests,
            "rolling_deploy_statuses": deploy.statuses,
            "nginx_upstream_per_client_request": collapse.upstream_per_client,
            "collapse_client_requests": collapse.client_requests,
            "collapse_upstream_requests": collapse.upstream_requests,
            "collapse_all_answered_ms": collapse.all_answered_ms,
        },
        "baselines": {
            "writer_live_ms_p50": writer_p50,
            "writer_live_ms_p99": lag.writer.percentile(99),
            "direct_requests_per_client_request": 1.0,
        },
        "ratios": {
            "replica_live_p50_vs_writer_live_p50": ratio(lag.inotify_live.percentile(50), writer_p50),
            "replica_live_p99_vs_writer_live_p99": ratio(lag.inotify_live.percentile(99), lag.writer.percentile(99)),
            "replica_poll_live_p50_vs_writer_live_p50": ratio(lag.poll_live.percentile(50), writer_p50),
            "replica_poll_live_p99_vs_writer_live_p99": ratio(lag.poll_live.percentile(99), lag.writer.percentile(99)),
            "nginx_upstream_vs_direct": collapse.upstream_per_client,
        },
    }))
}

/// Milliseconds, sorted on demand.
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, d: f64) {
        self.0.push(d);
    }

    /// The `p`th percentile (nearest rank), rounded to µs.
    fn percentile(&self, p: usize) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = (p * v.len()).div_ceil(100).clamp(1, v.len());
        (v[rank - 1] * 1000.0).round() / 1000.0
    }
}

/// Runs `text` on `db`, with Postgres's message on failure.
pub(crate) async fn sql(db: &tokio_postgres::Client, text: &str) -> Result<(), Error> {
    db.batch_execute(text)
        .await
        .map_err(|e| syncline_pg::PgError::from(e).to_string().into())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Signed milliseconds from `a` to `b`.
fn ms_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        ms(b - a)
    } else {
        -ms(a - b)
    }
}

/// `syncline serve` processes on one storage directory and stream id.
struct Fleet {
    binary: PathBuf,
    database_url: String,
    dir: tempfile::TempDir,
    started: AtomicU64,
}

/// One server process, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Fleet {
    fn new(binary: PathBuf, database_url: String) -> Result<Fleet, Error> {
        Ok(Fleet {
            binary,
            database_url,
            dir: tempfile::Builder::new()
                .prefix("syncline-readonly-")
                .tempdir()?,
            started: AtomicU64::new(0),
        })
    }

    /// Starts a server in `role`, with extra flags, on `port` (a free one if `None`), and
    /// waits until it serves in that role.
    async fn start(
        &self,
        role: &str,
        flags: &[&str],
        port: Option<u16>,
        http: &reqwest::Client,
    ) -> Result<Server, Error> {
        let port = match port {
            Some(p) => p,
            None => free_port()?,
        };
        let n = self.started.fetch_add(1, Ordering::Relaxed);
        let log = self.dir.path().join(format!("server-{n}-{port}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(&self.binary)
            .arg("serve")
            .args(["--database-url", &self.database_url])
            .args(["--listen-address", "127.0.0.1", "--port", &port.to_string()])
            .arg("--storage-dir")
            .arg(self.dir.path().join("storage"))
            .args(["--insecure", "--replication-stream-id", "readonly"])
            .args(["--long-poll-timeout-ms", LONG_POLL_MS, "--role", role])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()?;
        let server = Server { child, port, log };
        let want = if role == "replica" {
            "replica"
        } else {
            "writer"
        };
        let deadline = Instant::now() + HEALTH_TIMEOUT;
        loop {
            let health = server.health(http).await;
            let role_now = health["role"].as_str().unwrap_or("");
            if health["status"] == "active"
                && (role_now == want || (want == "writer" && role_now == "standby"))
            {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server on {port} not serving: {health}\n{}",
                    server.log_tail()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Server {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn health(&self, http: &reqwest::Client) -> Value {
        let url = format!("{}/v1/health", self.url());
        match http.get(url).timeout(Duration::from_secs(1)).send().await {
            Ok(r) => r
                .text()
                .await
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    }

    /// Waits until the server is the active writer; returns when that was seen.
    async fn wait_writer(&self, http: &reqwest::Client) -> Result<Instant, Error> {
        let deadline = Instant::now() + HEALTH_TIMEOUT;
        loop {
            let health = self.health(http).await;
            if health["status"] == "active" && health["role"] == "writer" {
                return Ok(Instant::now());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "server on {} never wrote: {health}\n{}",
                    self.port,
                    self.log_tail()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pids fit pid_t");
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(pid, signal) };
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            syncline_testkit::stop_process(&mut self.child, libc::SIGKILL);
        }
    }
}

fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A shape position: handle and offset.
#[derive(Clone)]
struct Position {
    handle: String,
    offset: String,
}

/// Reads `table=items` from `-1` until up-to-date through `base`.
async fn sync(http: &reqwest::Client, base: &str) -> Result<Position, Error> {
    let mut url = format!("{base}/v1/shape?table=items&offset=-1");
    loop {
        let r = http.get(&url).send().await?;
        if r.status() != 200 {
            return Err(format!("{url}: {}", r.status()).into());
        }
        let header = |n: &str| -> Result<String, Error> {
            Ok(r.headers()
                .get(n)
                .ok_or_else(|| format!("no {n}"))?
                .to_str()?
                .to_owned())
        };
        let position = Position {
            handle: header("electric-handle")?,
            offset: header("electric-offset")?,
        };
        let done = r.headers().contains_key("electric-up-to-date");
        r.bytes().await?;
        if done {
            return Ok(position);
        }
        url = format!(
            "{base}/v1/shape?table=items&offset={}&handle={}",
            position.offset, position.handle
        );
    }
}

/// A live request from `at`: when it was answered, and where the client goes on from.
async fn live_once(
    http: &reqwest::Client,
    base: &str,
    at: &Position,
    cursor: Option<&str>,
) -> Result<(Instant, u16, Option<Position>), Error> {
    let mut url = format!(
        "{base}/v1/shape?table=items&offset={}&handle={}&live=true",
        at.offset, at.handle
    );
    if let Some(c) = cursor {
        url.push_str(&format!("&cursor={c}"));
    }
    let r = http.get(&url).send().await?;
    let answered = Instant::now();
    let status = r.status().as_u16();
    let next = match (
        r.headers().get("electric-handle"),
        r.headers().get("electric-offset"),
    ) {
        (Some(h), Some(o)) => Some(Position {
            handle: h.to_str()?.to_owned(),
            offset: o.to_str()?.to_owned(),
        }),
        _ => None,
    };
    r.bytes().await?;
    Ok((answered, status, next))
}

/// The live figures: commit → each server's answer, and each replica's answer minus the
/// writer's.
#[derive(Default)]
struct Lag {
    writer: Samples,
    inotify: Samples,
    poll: Samples,
    inotify_live: Samples,
    poll_live: Samples,
}

/// A writer, a replica following by inotify and one following by polling only; per commit,
/// one live request waits on each, and their answers are timed against the writer's.
async fn live_lag(
    fleet: &Fleet,
    db: &tokio_postgres::Client,
    http: &reqwest::Client,
) -> Result<Lag, Error> {
    let writer = fleet.start("auto", &[], None, http).await?;
    writer.wait_writer(http).await?;
    let mut at = sync(http, &writer.url()).await?;
    let inotify = fleet.start("replica", &[], None, http).await?;
    let poll = fleet
        .start(
            "replica",
            &["--follow", "poll", "--follow-poll-interval", POLL_INTERVAL],
            None,
            http,
        )
        .await?;
    let mut lag = Lag::default();
    for i in 0..LAG_COMMITS {
        let requests: Vec<_> = [&writer, &inotify, &poll]
            .iter()
            .map(|s| {
                let (http, base, at) = (http.clone(), s.url(), at.clone());
                tokio::spawn(async move { live_once(&http, &base, &at, None).await })
            })
            .collect();
        tokio::time::sleep(LAG_PAUSE).await;
        let id = ROWS + 1 + i64::try_from(i)?;
        sql(
            db,
            &format!("INSERT INTO public.items VALUES ({id}, 'live {id}')"),
        )
        .await?;
        let committed = Instant::now();
        let mut answers = Vec::new();
        for request in requests {
            let (answered, status, next) = request.await??;
            if status != 200 {
                return Err(format!("live request answered {status}").into());
            }
            answers.push((answered, next.ok_or("no position")?));
        }
        let offsets: Vec<&str> = answers.iter().map(|(_, p)| p.offset.as_str()).collect();
        if offsets.iter().any(|o| *o != offsets[0]) {
            return Err(format!("servers answered different offsets: {offsets:?}").into());
        }
        lag.writer.push(ms_between(committed, answers[0].0));
        lag.inotify.push(ms_between(answers[0].0, answers[1].0));
        lag.poll.push(ms_between(answers[0].0, answers[2].0));
        lag.inotify_live.push(ms_between(committed, answers[1].0));
        lag.poll_live.push(ms_between(committed, answers[2].0));
        at = answers.swap_remove(0).1;
    }
    Ok(lag)
}

/// The takeover figures.
struct Takeover {
    sigterm: Samples,
    kill: Samples,
}

/// A writer and a standby; the writer is stopped (SIGTERM) or killed (SIGKILL), the time until
/// the standby replicates is taken, and a new standby joins for the next round.
async fn takeovers(fleet: &Fleet, http: &reqwest::Client) -> Result<Takeover, Error> {
    let mut writer = fleet.start("auto", &[], None, http).await?;
    writer.wait_writer(http).await?;
    let mut result = Takeover {
        sigterm: Samples::default(),
        kill: Samples::default(),
    };
    for round in 0..2 * TAKEOVER_ROUNDS {
        let standby = fleet.start("auto", &[], None, http).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let kill = round >= TAKEOVER_ROUNDS;
        let signalled = Instant::now();
        writer.signal(if kill { libc::SIGKILL } else { libc::SIGTERM });
        let writing = standby.wait_writer(http).await?;
        let took = ms(writing - signalled);
        if kill {
            result.kill.push(took);
        } else {
            result.sigterm.push(took);
        }
        let _ = writer.child.wait();
        writer = standby;
    }
    Ok(result)
}

/// The rolling deploy's figures.
struct Deploy {
    requests: u64,
    failed: u64,
    statuses: BTreeMap<String, u64>,
}

/// nginx in front of a writer, a replica and the standbys a rolling deploy starts; clients
/// follow the shape live through nginx while rows are written, and each round starts a new
/// server, SIGTERMs the writer and waits for the new one to write.
async fn rolling_deploy(fleet: &Fleet, http: &reqwest::Client) -> Result<Deploy, Error> {
    let ports: Vec<u16> = (0..DEPLOY_ROUNDS + 2)
        .map(|_| free_port())
        .collect::<Result<_, _>>()?;
    let replica = fleet.start("replica", &[], Some(ports[0]), http).await?;
    let mut writer = fleet.start("auto", &[], Some(ports[1]), http).await?;
    writer.wait_writer(http).await?;
    let nginx = Nginx::start(&fleet.dir.path().join("nginx-deploy"), &ports)?;
    let front = nginx.url();
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let mut clients = Vec::new();
    for _ in 0..DEPLOY_CLIENTS {
        let (http, front, stop, statuses) =
            (http.clone(), front.clone(), stop.clone(), statuses.clone());
        clients.push(tokio::spawn(async move {
            let mut at = sync(&http, &front).await?;
            let mut cursor: Option<String> = None;
            while !stop.load(Ordering::Relaxed) {
                let url = format!(
                    "{front}/v1/shape?table=items&offset={}&handle={}&live=true{}",
                    at.offset,
                    at.handle,
                    cursor
                        .as_deref()
                        .map(|c| format!("&cursor={c}"))
                        .unwrap_or_default()
                );
                let (status, next, next_cursor) = match http.get(&url).send().await {
                    Ok(r) => {
                        let status = r.status().as_u16().to_string();
                        let h = |n: &str| {
                            r.headers()
                                .get(n)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned)
                        };
                        let next = h("electric-handle").zip(h("electric-offset"));
                        let c = h("electric-cursor");
                        let _ = r.bytes().await;
                        (status, next, c)
                    }
                    Err(e) => (format!("error: {e}"), None, None),
                };
                *statuses
                    .lock()
                    .expect("statuses")
                    .entry(status.clone())
                    .or_default() += 1;
                if let Some((handle, offset)) = next {
                    at = Position { handle, offset };
                }
                if next_cursor.is_some() {
                    cursor = next_cursor;
                }
                if status != "200" && status != "304" {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Ok::<(), Error>(())
        }));
    }
    let writes = tokio::spawn({
        let stop = stop.clone();
        let db_url = fleet.database_url.clone();
        async move {
            let db = syncline_pg::connect(&ConnConfig::parse(&db_url)?).await?;
            sql(&db, "SET synchronous_commit = on").await?;
            let mut i: i64 = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = 1 + i % ROWS;
                sql(
                    &db,
                    &format!("UPDATE public.items SET title = 'deploy {i}' WHERE id = {id}"),
                )
                .await?;
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<i64, Error>(i)
        }
    });
    for round in 0..DEPLOY_ROUNDS {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let next = fleet
            .start("auto", &[], Some(ports[2 + round]), http)
            .await?;
        writer.signal(libc::SIGTERM);
        next.wait_writer(http).await?;
        let _ = writer.child.wait();
        writer = next;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writes.await??;
    // Live requests end at the long-poll timeout at the latest.
    for client in clients {
        client.await??;
    }
    drop((replica, writer, nginx));
    eprintln!("rolling deploy: {written} transactions written");
    let statuses = Arc::try_unwrap(statuses)
        .map_err(|_| "clients still hold the statuses")?
        .into_inner()
        .map_err(|_| "statuses lock poisoned")?;
    let requests = statuses.values().sum();
    let failed = statuses
        .iter()
        .filter(|(s, _)| s.as_str() != "200" && s.as_str() != "304")
        .map(|(_, n)| n)
        .sum();
    Ok(Deploy {
        requests,
        failed,
        statuses,
    })
}

/// The front door's collapsing figures.
struct Collapse {
    client_requests: u64,
    upstream_requests: u64,
    upstream_per_client: f64,
    all_answered_ms: f64,
}

/// 1,000 clients at the same position wait on one shape through nginx; one commit answers
/// them all. Client requests and the upstream requests nginx made for them are counted from
/// its access log.
async fn collapse(fleet: &Fleet, db: &tokio_postgres::Client) -> Result<Collapse, Error> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(COLLAPSE_CLIENTS)
        .build()?;
    let writer = fleet.start("auto", &[], None, &http).await?;
    writer.wait_writer(&http).await?;
    let replica = fleet.start("replica", &[], None, &http).await?;
    let nginx = Nginx::start(
        &fleet.dir.path().join("nginx-collapse"),
        &[writer.port, replica.port],
    )?;
    let at = sync(&http, &nginx.url()).await?;
    // nginx writes a line once a response is sent: the sync's last one may still be due.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logged_before = nginx.access_lines()?.len();
    let requests: Vec<_> = (0..COLLAPSE_CLIENTS)
        .map(|_| {
            let (http, base, at) = (http.clone(), nginx.url(), at.clone());
            tokio::spawn(async move { live_once(&http, &base, &at, None).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    sql(db, "INSERT INTO public.items VALUES (1000000, 'collapse')").await?;
    let committed = Instant::now();
    let mut last = committed;
    for request in requests {
        let (answered, status, _) = request.await??;
        if status != 200 {
            return Err(format!("a live client got {status}").into());
        }
        last = last.max(answered);
    }
    // nginx writes a line once the response is sent.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lines = nginx.access_lines()?;
    let round = &lines[logged_before..];
    let client_requests = u64::try_from(round.len())?;
    let upstream_requests = u64::try_from(
        round
            .iter()
            .filter(|l| l.split('"').nth(3).is_some_and(|addr| addr != "-"))
            .count(),
    )?;
    drop((writer, replica, nginx));
    Ok(Collapse {
        client_requests,
        upstream_requests,
        upstream_per_client: (upstream_requests as f64 / client_requests as f64 * 10_000.0).round()
            / 10_000.0,
        all_answered_ms: (ms(last - committed) * 1000.0).round() / 1000.0,
    })
}

/// nginx in the foreground with the repository's configuration, killed when dropped.
struct Nginx {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx in `dir` in front of the servers on `ports`.
    fn start(dir: &Path, ports: &[u16]) -> Result<Nginx, Error> {
        std::fs::create_dir_all(dir.join("cache"))?;
        let template = std::fs::read_to_string(workspace_dir().join("deploy/nginx/syncline.conf"))?;
        let port = free_port()?;
        let upstreams: String = ports
            .iter()
            .map(|p| format!("server 127.0.0.1:{p} max_fails=0;\n    "))
            .collect();
        let site = template
            .replace("${SYNCLINE_LISTEN}", &format!("127.0.0.1:{port}"))
            .replace("${SYNCLINE_UPSTREAM_SERVERS}", &upstreams)
            .replace(
                "${SYNCLINE_CACHE_DIR}",
                &dir.join("cache").display().to_string(),
            );
        std::fs::write(dir.join("syncline.conf"), site)?;
        // SAFETY: getuid has no preconditions.
        let root = unsafe { libc::getuid() } == 0;
        let conf = format!(
            "{user}worker_processes 1;\nworker_rlimit_nofile {OPEN_FILES_WANTED};\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
             events {{ worker_connections {OPEN_FILES_WANTED}; }}\n\
             http {{\n  include {dir}/syncline.conf;\n  access_log {dir}/access.log syncline;\n  client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n\
             fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n}}\n",
            user = if root { "user root;\n" } else { "" },
            dir = dir.display()
        );
        std::fs::write(dir.join("nginx.conf"), conf)?;
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr.log"))?)
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let stderr = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
                return Err(format!("nginx did not start: {stderr}").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Nginx {
            child,
            port,
            dir: dir.to_owned(),
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn access_lines(&self) -> Result<Vec<String>, Error> {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        Ok(log.lines().map(str::to_owned).collect())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        syncline_testkit::stop_process(&mut self.child, libc::SIGQUIT);
    }
}

/// Raises the soft open-files limit to `wanted` (at most the hard limit) for thousands of
/// client connections; child processes inherit it.
pub(crate) fn raise_open_files_limit(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max.min(wanted.max(limit.rlim_cur));
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
