//! `electric <name>`: Electric's published benchmark scenarios, run against the release
//! `syncline` binary by a load generator speaking the shape protocol ([`client`]).
//!
//! Each point of a scenario starts a fresh server process (fresh storage, its own replication
//! stream) against one private Postgres cluster holding Electric's data set: `users(id uuid
//! primary key, name text, email text)` with 500 rows. Distinct shapes that all match every
//! row are `where=name <> '<k>'` (Electric's `where=<k> = <k>` folds to one shape in Syncline,
//! see [`overlapping_where`]). The server's RSS (`VmRSS`) and CPU seconds (user + system) are
//! read from `/proc/<pid>` around each measurement. The clients run in this process on the
//! same machine, so their CPU competes with the server's: the figures are an upper bound of
//! what a remote client would see. The benchmark's sessions commit with `synchronous_commit =
//! on` (free: the cluster runs with fsync off), so walsenders see a commit at once rather than
//! up to `wal_writer_delay` later. The servers admit any number of requests at once
//! (`--max-concurrent-requests`), so the figures measure the engine, not its admission limits.
//!
//! With `--url` and `--database-url` the scenarios drive one server that is already running
//! (Syncline, or Electric itself) and the database it replicates from instead; `/proc` figures
//! are then read only with `--server-pid`. `--server-bin` runs a given `syncline` binary
//! instead of building the release one; `--smoke` runs each scenario at one tiny point.

pub(crate) mod client;
mod http_pool;
mod idle_shapes;
pub(crate) mod plot;
mod replication;
mod server_metrics;
mod single_shape;
mod unrelated_shapes;
mod waiting_clients;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::{json, Map, Value};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;
use tokio::task::JoinSet;

use crate::e2e::{build_server, workspace_dir, ServerProcess};
use crate::readonly::{raise_open_files_limit, sql};
use client::{Error, LiveMode, ShapeClient};
use http_pool::Pool;

/// Rows in `users` before any write.
const ROWS: u64 = 500;
/// Rows of the write-fanout transaction.
const FANOUT_TXN_ROWS: u64 = 50;
/// Writes timed per point of `many_shapes_one_client`.
const ONE_CLIENT_WRITES: usize = 5;
/// Admission limits of the benchmark's servers: high enough never to turn a request away.
const ADMIT_ALL: &str = r#"{"initial":1000000,"existing":1000000}"#;
/// Open files wanted for 10,000 client connections.
const OPEN_FILES_WANTED: u64 = 65_536;
/// How long any one client may take for anything.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long all live requests may take to be sent.
const LIVE_SENT_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause after the last live request was sent, so the server holds them all, plus
/// [`SETTLE_PER_REQUEST`] for each.
const SETTLE: Duration = Duration::from_millis(500);
/// Extra settling time per live request.
const SETTLE_PER_REQUEST: Duration = Duration::from_micros(500);
/// How long a server may take to be the active writer.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(30);
/// Error messages kept per point.
const ERRORS_KEPT: usize = 5;

/// Electric's scenarios that `electric` runs.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Name {
    /// C live clients on one shape, one 50-row transaction: time until every client has it.
    WriteFanout,
    /// N clients, each its own new shape, all at once: time until each is up to date.
    ConcurrentShapeCreation,
    /// N overlapping shapes with one live client each, one write affecting all of them.
    DiverseShapeFanout,
    /// N overlapping shapes, one live client on one of them, one write affecting all.
    ManyShapesOneClient,
    /// N idle shapes: RSS and disk bytes per shape, before and after a restart.
    IdleShapes,
    /// N live requests parked on one up-to-date shape: RSS per request.
    WaitingClients,
    /// One client, one shape of N rows: time until up to date.
    SingleShape,
    /// S shapes sharing no row (`=` or `ILIKE`), one live client, writes into its shape alone.
    UnrelatedShapes,
    /// S `=` shapes, a stream of changes: changes per second against `pg_recvlogical`.
    ReplicationOptimised,
    /// S `ILIKE` shapes, a stream of changes: CPU time per shape evaluation.
    ReplicationUnoptimised,
    /// Every scenario above, in that order.
    All,
}

impl Name {
    /// The scenario's name in its JSON file, `electric-<name>.json`.
    fn file_name(self) -> &'static str {
        match self {
            Name::WriteFanout => "write_fanout",
            Name::ConcurrentShapeCreation => "concurrent_shape_creation",
            Name::DiverseShapeFanout => "diverse_shape_fanout",
            Name::ManyShapesOneClient => "many_shapes_one_client",
            Name::IdleShapes => "idle_shapes",
            Name::WaitingClients => "waiting_clients",
            Name::SingleShape => "single_shape",
            Name::UnrelatedShapes => "unrelated_shapes",
            Name::ReplicationOptimised => "replication_optimised",
            Name::ReplicationUnoptimised => "replication_unoptimised",
            Name::All => "all",
        }
    }

    /// Whether the scenario's clients wait live for changes through [`users_client`]
    /// (`--sse` applies to them).
    fn has_live_clients(self) -> bool {
        matches!(
            self,
            Name::WriteFanout
                | Name::DiverseShapeFanout
                | Name::ManyShapesOneClient
                | Name::UnrelatedShapes
                | Name::WaitingClients
        )
    }

    /// Whether the scenario needs servers this run starts (it cannot use `--url`).
    fn needs_own_server(self) -> bool {
        matches!(
            self,
            Name::IdleShapes | Name::ReplicationOptimised | Name::ReplicationUnoptimised
        )
    }
}

/// The command line of `electric`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The scenario to run.
    name: Name,
    /// Live clients per point of `write-fanout`.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
    clients: Vec<usize>,
    /// Clients (one new shape each) per point of `concurrent-shape-creation`.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
    new_shapes: Vec<usize>,
    /// Overlapping shapes (one live client each) per point of `diverse-shape-fanout`.
    #[arg(long, value_delimiter = ',', default_values_t = [50, 250, 500, 1000])]
    fanout_shapes: Vec<usize>,
    /// Overlapping shapes per point of `many-shapes-one-client`.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 500, 1500])]
    shapes: Vec<usize>,
    /// Idle shapes per point of `idle-shapes` (100000 is the headline point; it takes minutes).
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 10000])]
    idle_shapes: Vec<usize>,
    /// Parked live requests per point of `waiting-clients`.
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 10000])]
    waiting: Vec<usize>,
    /// Rows of the one shape per point of `single-shape`.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000, 1_000_000])]
    single_shape_rows: Vec<u64>,
    /// `name = '<k>'` shapes per point of `unrelated-shapes` (100000 is the headline point).
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000, 10000])]
    unrelated_eq_shapes: Vec<usize>,
    /// `name ILIKE '<k>'` shapes per point of `unrelated-shapes` (10000 is the headline point).
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000, 10000])]
    unrelated_ilike_shapes: Vec<usize>,
    /// `name = '<k>'` shapes per point of `replication-optimised`.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 1000, 10000])]
    replication_shapes: Vec<usize>,
    /// `name ILIKE '<k>'` shapes per point of `replication-unoptimised` (a point without
    /// shapes, the baseline, always runs first).
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1000])]
    replication_ilike_shapes: Vec<usize>,
    /// Row changes per load of `replication-optimised` and `replication-unoptimised`.
    #[arg(long, default_value_t = 100_000)]
    replication_changes: u64,
    /// Rows per transaction of those loads.
    #[arg(long, default_value_t = 1)]
    replication_txn_rows: u64,
    /// Live clients read server-sent events (`live_sse=true`, one response kept open) instead
    /// of long-polls. Only for the scenarios with live clients (`write-fanout`,
    /// `diverse-shape-fanout`, `many-shapes-one-client`, `unrelated-shapes`,
    /// `waiting-clients`; `all` runs those five); their results go to
    /// `electric-<name>-sse.json`.
    #[arg(long)]
    sse: bool,
    /// Drive this running server (Syncline or Electric, e.g. `http://127.0.0.1:3000`) instead
    /// of starting one per point.
    #[arg(long, requires = "database_url")]
    url: Option<String>,
    /// The database the `--url` server replicates from; the benchmark empties and refills its
    /// `public.users` (creating it if missing).
    #[arg(long, requires = "url")]
    database_url: Option<String>,
    /// The `--url` server's pid, to read its RSS and CPU time from `/proc`.
    #[arg(long, requires = "url")]
    server_pid: Option<u32>,
    /// The `syncline` binary to start, instead of building the release one.
    #[arg(long, conflicts_with = "url")]
    server_bin: Option<PathBuf>,
    /// Run each scenario at one tiny point (2 clients, 3 shapes): a check that it works.
    #[arg(long)]
    smoke: bool,
}

impl Args {
    /// Replaces every grid by one tiny point, for `--smoke`.
    fn smoke_points(&mut self) {
        self.clients = vec![2];
        self.new_shapes = vec![3];
        self.fanout_shapes = vec![3];
        self.shapes = vec![3];
        self.idle_shapes = vec![3];
        self.waiting = vec![2];
        self.single_shape_rows = vec![1000];
        self.unrelated_eq_shapes = vec![3];
        self.unrelated_ilike_shapes = vec![3];
        self.replication_shapes = vec![3];
        self.replication_ilike_shapes = vec![3];
        self.replication_changes = 1000;
    }

    /// The loads of the replication scenarios.
    fn load(&self) -> replication::Load {
        replication::Load {
            changes: self.replication_changes,
            txn_rows: self.replication_txn_rows.max(1),
        }
    }
}

/// Runs the scenarios `args` names; returns each one's file name (`electric-<name>`) and
/// result.
pub(crate) fn run(mut args: Args) -> Result<Vec<(String, Value)>, Box<dyn std::error::Error>> {
    raise_open_files_limit(OPEN_FILES_WANTED);
    if args.smoke {
        args.smoke_points();
    }
    let names: Vec<Name> = if args.name == Name::All {
        vec![
            Name::WriteFanout,
            Name::ConcurrentShapeCreation,
            Name::DiverseShapeFanout,
            Name::ManyShapesOneClient,
            Name::IdleShapes,
            Name::WaitingClients,
            Name::SingleShape,
            Name::UnrelatedShapes,
            Name::ReplicationOptimised,
            Name::ReplicationUnoptimised,
        ]
    } else {
        vec![args.name]
    };
    let names: Vec<Name> = if args.sse && args.name == Name::All {
        names.into_iter().filter(|n| n.has_live_clients()).collect()
    } else {
        names
    };
    let results = crate::run_on_workers(async move {
        run_scenarios(&args, &names)
            .await
            .map_err(|e| -> Box<dyn std::error::Error> { e })
    })?;
    let Value::Object(results) = results else {
        return Err("scenario results are an object".into());
    };
    Ok(results.into_iter().collect())
}

/// Runs each scenario of `names` with the points of `args`, in one object keyed by file name.
async fn run_scenarios(args: &Args, names: &[Name]) -> Result<Value, Error> {
    let mut bench = Bench::start(args).await?;
    let mut results = Map::new();
    for &name in names {
        if name.needs_own_server() && bench.is_external() {
            let why = format!(
                "electric {} cannot run against --url: it starts its own servers (to restart one, or to replicate from their cluster)",
                name.file_name()
            );
            if names.len() == 1 {
                return Err(why.into());
            }
            eprintln!("skipping: {why}");
            continue;
        }
        bench.live = match (args.sse, name.has_live_clients()) {
            (true, true) => LiveMode::Sse,
            (true, false) => {
                return Err(format!(
                    "electric {} has no live clients for --sse",
                    name.file_name()
                )
                .into())
            }
            (false, _) => LiveMode::LongPoll,
        };
        eprintln!("electric {}…", name.file_name());
        let mut result = match name {
            Name::WriteFanout => write_fanout(&mut bench, &args.clients).await?,
            Name::ConcurrentShapeCreation => {
                concurrent_shape_creation(&mut bench, &args.new_shapes).await?
            }
            Name::DiverseShapeFanout => {
                diverse_shape_fanout(&mut bench, &args.fanout_shapes).await?
            }
            Name::ManyShapesOneClient => many_shapes_one_client(&mut bench, &args.shapes).await?,
            Name::IdleShapes => idle_shapes::idle_shapes(&mut bench, &args.idle_shapes).await?,
            Name::WaitingClients => {
                waiting_clients::waiting_clients(&mut bench, &args.waiting).await?
            }
            Name::SingleShape => {
                single_shape::single_shape(&mut bench, &args.single_shape_rows).await?
            }
            Name::UnrelatedShapes => {
                unrelated_shapes::unrelated_shapes(
                    &mut bench,
                    &args.unrelated_eq_shapes,
                    &args.unrelated_ilike_shapes,
                )
                .await?
            }
            Name::ReplicationOptimised => {
                replication::replication_optimised(
                    &mut bench,
                    &args.replication_shapes,
                    args.load(),
                )
                .await?
            }
            Name::ReplicationUnoptimised => {
                replication::replication_unoptimised(
                    &mut bench,
                    &args.replication_ilike_shapes,
                    args.load(),
                )
                .await?
            }
            Name::All => return Err("`all` is not one scenario".into()),
        };
        result["parameters"]["server"] = bench.describe().into();
        if !bench.samples_process() {
            without_process_figures(&mut result);
        }
        if name.has_live_clients() {
            result["parameters"]["live"] = bench.live.name().into();
        }
        let file = match bench.live {
            LiveMode::LongPoll => format!("electric-{}", name.file_name()),
            LiveMode::Sse => format!("electric-{}-sse", name.file_name()),
        };
        results.insert(file, result);
    }
    Ok(Value::Object(results))
}

/// Where the points' servers come from.
enum Target {
    /// A fresh server per point, started by this run.
    Own {
        /// The `syncline` binary.
        binary: PathBuf,
        /// The private cluster holding `users`.
        cluster: PgCluster,
    },
    /// One server already running (`--url`), replicating from `--database-url`.
    External {
        /// Its base URL.
        url: String,
        /// Its pid (`--server-pid`), for the `/proc` figures.
        pid: Option<u32>,
    },
}

/// The benchmark's database and the servers the points use.
struct Bench {
    /// Where the servers come from.
    target: Target,
    /// A session with `synchronous_commit = on` for the writes.
    db: tokio_postgres::Client,
    /// Points started so far (each own server gets its own replication stream).
    servers: u64,
    /// How the scenarios' live clients wait.
    live: LiveMode,
    /// Servers of finished points, stopped, their storage kept until the run ends: on ext4
    /// without a journal, every file created within minutes of a mass deletion first scans
    /// the inodes just freed (`recently_deleted`), so deleting one point's files would slow
    /// the next point's shape creation several times over.
    stopped: Vec<ServerProcess>,
}

/// A server of one point, with the `/proc` figures read when it became healthy.
struct Server {
    /// The process, when this run started it.
    process: Option<ServerProcess>,
    /// The server's base URL.
    url: String,
    /// Its pid, when known (for the `/proc` figures).
    pid: Option<u32>,
    /// Its figures once healthy, with no shape (zero without a pid).
    idle: ProcSample,
    /// For an external server, the point's number: [`users_client`] adds it to every where
    /// clause, so that a point never finds the shapes of an earlier one on the same server.
    point: Option<u64>,
    /// How the point's live clients wait.
    live: LiveMode,
}

impl Bench {
    /// Builds the server (or takes `--server-bin`) and starts the cluster, or connects to the
    /// `--url` server's database; creates `users` with its rows.
    async fn start(args: &Args) -> Result<Bench, Error> {
        let (target, database_url) = match (&args.url, &args.database_url) {
            (Some(url), Some(database_url)) => (
                Target::External {
                    url: url.trim_end_matches('/').to_owned(),
                    pid: args.server_pid,
                },
                database_url.clone(),
            ),
            _ => {
                let binary = match &args.server_bin {
                    Some(binary) => binary.clone(),
                    None => build_server(&workspace_dir()).map_err(|e| e.to_string())?,
                };
                let cluster = tokio::task::spawn_blocking(PgCluster::start).await?;
                let database_url = cluster.connection_string("postgres");
                (Target::Own { binary, cluster }, database_url)
            }
        };
        let db = syncline_pg::connect(&ConnConfig::parse(&database_url)?).await?;
        sql(&db, "SET synchronous_commit = on").await?;
        sql(
            &db,
            &format!(
                "CREATE TABLE IF NOT EXISTS public.users (id uuid PRIMARY KEY, name text, email text);
                 TRUNCATE public.users;
                 INSERT INTO public.users
                   SELECT gen_random_uuid(), 'user ' || g, 'user' || g || '@example.com'
                   FROM generate_series(1, {ROWS}) g;"
            ),
        )
        .await?;
        sql(&db, "VACUUM ANALYZE public.users").await?;
        Ok(Bench {
            target,
            db,
            servers: 0,
            live: LiveMode::LongPoll,
            stopped: Vec::new(),
        })
    }

    /// The replication stream id of the server started last (its slot is
    /// `syncline_slot_<id>`, its publication `syncline_publication_<id>`).
    fn stream_id(&self) -> String {
        format!("electric{}", self.servers)
    }

    /// Whether the points use a server this run did not start (`--url`).
    fn is_external(&self) -> bool {
        matches!(self.target, Target::External { .. })
    }

    /// Whether the server's `/proc` figures are read.
    fn samples_process(&self) -> bool {
        !matches!(self.target, Target::External { pid: None, .. })
    }

    /// The servers, as the scenario's JSON states them.
    fn describe(&self) -> String {
        match &self.target {
            Target::Own { binary, .. } => format!(
                "{} serve, fresh storage per point, --max-concurrent-requests '{ADMIT_ALL}'",
                binary.display()
            ),
            Target::External { url, pid } => format!(
                "already running at {url} (--url), for every point; a point's where clauses carry `AND email <> 'point <n>'` so that points do not share shapes; /proc figures {}",
                pid.map_or("not read".to_owned(), |pid| format!("of pid {pid}"))
            ),
        }
    }

    /// Starts a fresh server (fresh storage, its own replication stream) and waits until it is
    /// healthy.
    async fn server(&mut self) -> Result<Server, Error> {
        self.server_with(&[]).await
    }

    /// Like [`server`](Self::server), with the extra command-line `flags` (an external server
    /// runs with its own settings).
    async fn server_with(&mut self, flags: &[&str]) -> Result<Server, Error> {
        self.servers += 1;
        let (process, url, point) = match &self.target {
            Target::Own { binary, cluster } => {
                let stream = self.stream_id();
                let mut all_flags = vec!["--max-concurrent-requests", ADMIT_ALL];
                all_flags.extend_from_slice(flags);
                let process = ServerProcess::start_with(binary, cluster, &stream, &all_flags)
                    .await
                    .map_err(|e| e.to_string())?;
                let url = process.url.clone();
                (Some(process), url, None)
            }
            Target::External { url, .. } => (None, url.clone(), Some(self.servers)),
        };
        let pid = match (&process, &self.target) {
            (Some(process), _) => Some(process.child.id()),
            (None, Target::External { pid, .. }) => *pid,
            (None, Target::Own { .. }) => None,
        };
        wait_active(&url).await?;
        let idle = pid.map_or(Ok(ProcSample::default()), ProcSample::read)?;
        Ok(Server {
            process,
            url,
            pid,
            idle,
            point,
            live: self.live,
        })
    }

    /// Stops `server` if this run started it (its storage is deleted when the run ends), drops
    /// the replication slots no server uses any more (of its own cluster) and the rows the
    /// point wrote, so the next point starts from the same 500 rows.
    async fn finish(&mut self, server: Server) -> Result<(), Error> {
        let slots = match server.process {
            Some(mut process) => {
                process.halt();
                self.stopped.push(process);
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active;"
            }
            None => "",
        };
        sql(
            &self.db,
            &format!("{slots} DELETE FROM public.users WHERE name LIKE 'bench %';"),
        )
        .await
    }

    /// Inserts `rows` rows in one transaction; returns when the commit was acknowledged.
    async fn insert(&self, rows: u64) -> Result<Instant, Error> {
        sql(
            &self.db,
            &format!(
                "INSERT INTO public.users
                   SELECT gen_random_uuid(), 'bench ' || g, 'bench' || g || '@example.com'
                   FROM generate_series(1, {rows}) g"
            ),
        )
        .await?;
        Ok(Instant::now())
    }
}

/// Waits until the server at `url` says it is the active writer (replicating), so that no
/// shape request of a point is turned away as not ready.
async fn wait_active(url: &str) -> Result<(), Error> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let deadline = Instant::now() + ACTIVE_TIMEOUT;
    loop {
        let health: Value = match http.get(format!("{url}/v1/health")).send().await {
            Ok(r) => serde_json::from_slice(&r.bytes().await?).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        // Syncline says which role it has; Electric has one role and does not say.
        let writer = health["role"].as_str().is_none_or(|role| role == "writer");
        if health["status"] == "active" && writer {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the server at {url} was not active: {health}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl Server {
    /// The server's URL.
    fn url(&self) -> &str {
        &self.url
    }

    /// The server's `/proc` figures now (zero without a pid).
    fn sample(&self) -> Result<ProcSample, Error> {
        self.pid.map_or(Ok(ProcSample::default()), ProcSample::read)
    }

    /// The storage directory of a server this run started.
    fn storage_dir(&self) -> Option<PathBuf> {
        self.process.as_ref().map(ServerProcess::storage_dir)
    }
}

/// A process's memory and CPU time as `/proc` tells them.
#[derive(Clone, Copy, Default)]
struct ProcSample {
    /// Resident set size (`VmRSS`), in bytes.
    rss_bytes: u64,
    /// Peak resident set size (`VmHWM`), in bytes.
    peak_rss_bytes: u64,
    /// User plus system CPU time.
    cpu: Duration,
    /// Threads of the process (`Threads`).
    threads: u64,
}

impl ProcSample {
    /// Reads `/proc/<pid>/status` and `/proc/<pid>/stat`.
    fn read(pid: u32) -> Result<ProcSample, Error> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let number = |field: &str| -> Result<u64, Error> {
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))?;
            Ok(line.trim().trim_end_matches("kB").trim().parse()?)
        };
        let kib = |field: &str| -> Result<u64, Error> { Ok(number(field)? * 1024) };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command name (which may hold spaces) start at the state, field 3;
        // utime and stime are fields 14 and 15.
        let after_name = stat
            .rsplit_once(')')
            .ok_or("no command name in /proc/<pid>/stat")?
            .1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks: u64 = fields.get(11).ok_or("short stat")?.parse::<u64>()?
            + fields.get(12).ok_or("short stat")?.parse::<u64>()?;
        // SAFETY: sysconf has no preconditions.
        let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })?;
        Ok(ProcSample {
            rss_bytes: kib("VmRSS:")?,
            peak_rss_bytes: kib("VmHWM:")?,
            cpu: Duration::from_micros(ticks * 1_000_000 / per_second),
            threads: number("Threads:")?,
        })
    }

    /// CPU seconds from `earlier` to this sample.
    fn cpu_s_since(&self, earlier: &ProcSample) -> f64 {
        round3(self.cpu.saturating_sub(earlier.cpu).as_secs_f64())
    }
}

/// Milliseconds, with their order statistics.
pub(crate) struct Latencies(Vec<f64>);

impl Latencies {
    /// The samples, sorted.
    pub(crate) fn new(mut ms: Vec<f64>) -> Latencies {
        ms.sort_by(f64::total_cmp);
        Latencies(ms)
    }

    /// The `p`th percentile (nearest rank), or null without samples.
    pub(crate) fn percentile(&self, p: usize) -> Value {
        if self.0.is_empty() {
            return Value::Null;
        }
        let rank = (p * self.0.len()).div_ceil(100).clamp(1, self.0.len());
        round3(self.0[rank - 1]).into()
    }

    /// Median, p99, max and every sample, as JSON fields.
    pub(crate) fn summary(&self) -> Value {
        json!({
            "median_ms": self.percentile(50),
            "p99_ms": self.percentile(99),
            "max_ms": self.percentile(100),
            "samples_ms": self.0.iter().map(|&x| round3(x)).collect::<Vec<_>>(),
        })
    }
}

/// Errors of a point's clients: how many, and the first few messages.
#[derive(Default)]
struct Errors {
    /// Clients that failed.
    count: u64,
    /// The first [`ERRORS_KEPT`] messages.
    first: Vec<String>,
}

impl Errors {
    /// Counts `error`.
    fn push(&mut self, error: impl std::fmt::Display) {
        self.count += 1;
        if self.first.len() < ERRORS_KEPT {
            self.first.push(error.to_string());
        }
    }
}

/// A connection pool for one point's clients (see [`Pool`]).
fn pool() -> Pool {
    Pool::new(CLIENT_TIMEOUT)
}

/// Syncs every client of `clients` (from `offset=-1` until up to date, no live request), at
/// most `concurrency` at once: creates their shapes as fast as the server takes them. Returns
/// the errors of the clients that failed.
async fn sync_all(
    clients: impl IntoIterator<Item = Result<ShapeClient, Error>>,
    concurrency: usize,
) -> Result<Errors, Error> {
    let mut errors = Errors::default();
    let mut tasks = JoinSet::new();
    for client in clients {
        if tasks.len() >= concurrency {
            if let Some(joined) = tasks.join_next().await {
                if let Err(e) = joined? {
                    errors.push(e);
                }
            }
        }
        let mut client = client?;
        tasks.spawn(async move { client.sync().await.map(|_| ()) });
    }
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined? {
            errors.push(e);
        }
    }
    Ok(errors)
}

/// Distinct shapes that each hold every `users` row: `where=name <> '<k>'` (no name is a bare
/// number). Electric's `where=<k> = <k>` cannot be used: Syncline folds constants as Postgres's
/// planner does, so `<k> = <k>` is `true` for every `k` and all of them are one shape.
fn overlapping_where(k: usize) -> String {
    format!("name <> '{k}'")
}

/// A client on `users`, `where=<where_clause>` when given.
fn users_client(
    http: &Pool,
    server: &Server,
    where_clause: Option<&str>,
    apply: bool,
) -> Result<ShapeClient, Error> {
    let where_clause = match (where_clause, server.point) {
        (Some(w), Some(point)) => Some(format!("({w}) AND email <> 'point {point}'")),
        (w, _) => w.map(str::to_owned),
    };
    let mut params = vec![("table", "users")];
    if let Some(w) = &where_clause {
        params.push(("where", w));
    }
    ShapeClient::new(http.clone(), server.url(), &params, server.live, apply)
}

/// Milliseconds from `from` to `to` (zero if `to` is earlier).
fn ms_since(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// Live clients that have been synced and are waiting for changes; [`LiveClients::answers`]
/// times their answers to a commit.
struct LiveClients {
    /// Each client's task: its answer once it has the changes, and the client (its
    /// connection stays open until every client has answered, as a live client's would).
    tasks: JoinSet<Result<(client::Answer, ShapeClient), Error>>,
    /// Clients that sent their first live request or failed to sync.
    ready: Arc<AtomicUsize>,
    /// Clients started.
    clients: usize,
}

impl LiveClients {
    /// Starts one task per client: each syncs, then waits live for `changes` changes.
    fn start(clients: Vec<ShapeClient>, changes: u64) -> LiveClients {
        let ready = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        let count = clients.len();
        for mut client in clients {
            let ready = ready.clone();
            tasks.spawn(async move {
                if let Err(e) = client.sync().await {
                    ready.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
                let mut first = true;
                let answer = client
                    .wait_changes(changes, || {
                        if std::mem::take(&mut first) {
                            ready.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                    .await?;
                Ok((answer, client))
            });
        }
        LiveClients {
            tasks,
            ready,
            clients: count,
        }
    }

    /// Waits until every client has sent its live request (or failed), and then a little
    /// longer so the server holds them all; returns how long until the last was sent.
    async fn wait_live(&self) -> Result<Duration, Error> {
        let start = Instant::now();
        while self.ready.load(Ordering::Relaxed) < self.clients {
            if start.elapsed() > LIVE_SENT_TIMEOUT {
                return Err(format!(
                    "{} of {} clients live after {LIVE_SENT_TIMEOUT:?}",
                    self.ready.load(Ordering::Relaxed),
                    self.clients
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let synced = start.elapsed();
        let settle = SETTLE + SETTLE_PER_REQUEST * u32::try_from(self.clients)?;
        tokio::time::sleep(settle).await;
        Ok(synced)
    }

    /// The errors of the clients that have already failed, for a point that cannot go on.
    fn failed_so_far(&mut self) -> String {
        let mut errors = Errors::default();
        while let Some(joined) = self.tasks.try_join_next() {
            match joined {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    let mut chain = e.to_string();
                    let mut source = e.source();
                    while let Some(cause) = source {
                        chain = format!("{chain}: {cause}");
                        source = cause.source();
                    }
                    errors.push(chain);
                }
                Err(e) => errors.push(e),
            }
        }
        format!("{} clients failed: {:?}", errors.count, errors.first)
    }

    /// Waits for every client after a commit acknowledged at `committed`; returns the
    /// latency of each client that got the changes and the errors of the others.
    async fn answers(mut self, committed: Instant) -> Result<(Latencies, Errors), Error> {
        let mut ms = Vec::with_capacity(self.clients);
        let mut errors = Errors::default();
        let mut answered = Vec::with_capacity(self.clients);
        while let Some(joined) = self.tasks.join_next().await {
            match joined? {
                Ok((answer, client)) => {
                    ms.push(ms_since(committed, answer.at));
                    answered.push(client);
                }
                Err(e) => errors.push(e),
            }
        }
        // Their connections close now, not while others still wait for their answer (an SSE
        // stream cannot go back to the pool).
        drop(answered);
        Ok((Latencies::new(ms), errors))
    }
}

/// Scenario 4: `clients` live clients on one shape (`table=users`); one 50-row transaction;
/// from its commit until each client has all of it.
async fn write_fanout(bench: &mut Bench, points: &[usize]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    let mut all_errors = 0;
    for &clients in points {
        let server = bench.server().await?;
        let http = pool();
        let live = LiveClients::start(
            (0..clients)
                .map(|_| users_client(&http, &server, None, false))
                .collect::<Result<_, _>>()?,
            FANOUT_TXN_ROWS,
        );
        let synced = live.wait_live().await?;
        let before = server.sample()?;
        let committed = bench.insert(FANOUT_TXN_ROWS).await?;
        let (latencies, errors) = live.answers(committed).await?;
        let after = server.sample()?;
        eprintln!(
            "write_fanout {clients} clients: p50 {} ms, p99 {} ms, max {} ms, {} errors",
            latencies.percentile(50),
            latencies.percentile(99),
            latencies.percentile(100),
            errors.count
        );
        headline.insert(format!("p99_ms_at_{clients}"), latencies.percentile(99));
        all_errors += errors.count;
        results.push(json!({
            "clients": clients,
            "latency": latencies.summary(),
            "errors": errors.count,
            "error_messages": errors.first,
            "clients_synced_and_live_ms": round3(synced.as_secs_f64() * 1000.0),
            "rss_bytes_idle": server.idle.rss_bytes,
            "rss_bytes_before_write": before.rss_bytes,
            "rss_bytes_after_write": after.rss_bytes,
            "peak_rss_bytes": after.peak_rss_bytes,
            "rss_bytes_per_waiting_client": per(before.rss_bytes.saturating_sub(server.idle.rss_bytes), clients),
            "cpu_s_sync": before.cpu_s_since(&server.idle),
            "cpu_s_write": after.cpu_s_since(&before),
            "server_threads_after_write": after.threads,
        }));
        drop(http);
        bench.finish(server).await?;
    }
    headline.insert("errors".into(), all_errors.into());
    Ok(scenario_json(
        headline,
        json!({
            "shape": "table=users (every row)",
            "txn_rows": FANOUT_TXN_ROWS,
            "clients": points,
            "latency": "from the acknowledged commit of the 50-row INSERT until the client has read the whole answer that completes it (electric-up-to-date)",
            "server_threads_after_write": "the server's threads (/proc/<pid>/status) once every client has the write",
        }),
        results,
    ))
}

/// Scenario 1: `n` clients, each its own new shape ([`overlapping_where`]), all started at once;
/// from the start until each client is up to date.
async fn concurrent_shape_creation(bench: &mut Bench, points: &[usize]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    for &n in points {
        let server = bench.server().await?;
        let http = pool();
        let clients: Vec<ShapeClient> = (1..=n)
            .map(|k| users_client(&http, &server, Some(&overlapping_where(k)), false))
            .collect::<Result<_, _>>()?;
        let load_generator = ProcSample::read(std::process::id())?;
        let mut tasks = JoinSet::new();
        let start = Instant::now();
        for mut client in clients {
            tasks.spawn(async move {
                let answer = client.sync().await?;
                let handle = client.handle().ok_or("no handle")?.to_owned();
                Ok::<_, Error>((answer.at, client.stats(), handle))
            });
        }
        let (mut ms, mut errors) = (Vec::new(), Errors::default());
        let (mut handles, mut short, mut unavailable, mut requests) = (HashSet::new(), 0, 0, 0);
        while let Some(joined) = tasks.join_next().await {
            match joined? {
                Ok((at, stats, handle)) => {
                    ms.push(ms_since(start, at));
                    if stats.changes != ROWS {
                        short += 1;
                    }
                    unavailable += stats.unavailable;
                    requests += stats.requests;
                    handles.insert(handle);
                }
                Err(e) => errors.push(e),
            }
        }
        let after = server.sample()?;
        let load_generator_cpu_s =
            ProcSample::read(std::process::id())?.cpu_s_since(&load_generator);
        let latencies = Latencies::new(ms);
        eprintln!(
            "concurrent_shape_creation {n} shapes: p50 {} ms, p99 {} ms, max {} ms, {} errors, {} clients without {ROWS} rows, {} distinct handles",
            latencies.percentile(50),
            latencies.percentile(99),
            latencies.percentile(100),
            errors.count,
            short,
            handles.len()
        );
        headline.insert(format!("p99_ms_at_{n}"), latencies.percentile(99));
        results.push(json!({
            "shapes": n,
            "up_to_date": latencies.summary(),
            "errors": errors.count,
            "error_messages": errors.first,
            "clients_without_every_row": short,
            "distinct_handles": handles.len(),
            "answers_503_or_429": unavailable,
            "requests": requests,
            "rss_bytes_idle": server.idle.rss_bytes,
            "rss_bytes_after": after.rss_bytes,
            "peak_rss_bytes": after.peak_rss_bytes,
            "rss_bytes_per_shape": per(after.rss_bytes.saturating_sub(server.idle.rss_bytes), n),
            "cpu_s": after.cpu_s_since(&server.idle),
            "load_generator_cpu_s": load_generator_cpu_s,
        }));
        drop(http);
        bench.finish(server).await?;
    }
    Ok(scenario_json(
        headline,
        json!({
            "shapes": "where=name <> '<k>', k = 1..=N: distinct shapes, each matching all 500 rows (Syncline folds Electric's <k> = <k> to true: one shape)",
            "clients": points,
            "latency": "from starting every client at once until the client's answer with electric-up-to-date was read",
        }),
        results,
    ))
}

/// Scenario 5: `n` overlapping shapes ([`overlapping_where`]), one live client each; one
/// single-row insert affecting all; from its commit until each client has it.
async fn diverse_shape_fanout(bench: &mut Bench, points: &[usize]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    for &n in points {
        let server = bench.server().await?;
        let http = pool();
        let live = LiveClients::start(
            (1..=n)
                .map(|k| users_client(&http, &server, Some(&overlapping_where(k)), false))
                .collect::<Result<_, _>>()?,
            1,
        );
        let synced = live.wait_live().await?;
        let before = server.sample()?;
        let committed = bench.insert(1).await?;
        let (latencies, errors) = live.answers(committed).await?;
        let after = server.sample()?;
        eprintln!(
            "diverse_shape_fanout {n} shapes: p50 {} ms, p99 {} ms, max {} ms, {} errors",
            latencies.percentile(50),
            latencies.percentile(99),
            latencies.percentile(100),
            errors.count
        );
        headline.insert(format!("p99_ms_at_{n}"), latencies.percentile(99));
        results.push(json!({
            "shapes": n,
            "latency": latencies.summary(),
            "errors": errors.count,
            "error_messages": errors.first,
            "shapes_created_and_live_ms": round3(synced.as_secs_f64() * 1000.0),
            "rss_bytes_idle": server.idle.rss_bytes,
            "rss_bytes_before_write": before.rss_bytes,
            "rss_bytes_after_write": after.rss_bytes,
            "peak_rss_bytes": after.peak_rss_bytes,
            "cpu_s_create": before.cpu_s_since(&server.idle),
            "cpu_s_write": after.cpu_s_since(&before),
        }));
        drop(http);
        bench.finish(server).await?;
    }
    Ok(scenario_json(
        headline,
        json!({
            "shapes": "where=name <> '<k>', k = 1..=N, one live client each",
            "write": "one single-row INSERT, in every shape",
            "latency": "from the acknowledged commit until each client has read the answer holding the row",
        }),
        results,
    ))
}

/// Scenario 6: `n` overlapping shapes ([`overlapping_where`]), one live client on the first;
/// single-row inserts affecting all, one at a time; from each commit until the client has
/// the row (checked among the rows it keeps).
async fn many_shapes_one_client(bench: &mut Bench, points: &[usize]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    for &n in points {
        let server = bench.server().await?;
        let http = pool();
        let mut watcher = users_client(&http, &server, Some(&overlapping_where(1)), true)?;
        watcher.sync().await?;
        let created = Instant::now();
        let mut tasks = JoinSet::new();
        for k in 2..=n {
            let mut client = users_client(&http, &server, Some(&overlapping_where(k)), false)?;
            tasks.spawn(async move { client.sync().await.map(|_| ()) });
        }
        while let Some(joined) = tasks.join_next().await {
            joined??;
        }
        let created = created.elapsed();
        let before = server.sample()?;
        let mut ms = Vec::new();
        for _ in 0..ONE_CLIENT_WRITES {
            let had = watcher.rows().map_or(0, |rows| rows.len());
            let wait = tokio::spawn(async move {
                let answer = watcher.wait_changes(1, || {}).await;
                (watcher, answer)
            });
            tokio::time::sleep(SETTLE).await;
            let committed = bench.insert(1).await?;
            let (back, answer) = wait.await?;
            watcher = back;
            ms.push(ms_since(committed, answer?.at));
            let has = watcher.rows().map_or(0, |rows| rows.len());
            if has != had + 1 {
                return Err(format!(
                    "the client held {has} rows after the write, not {}",
                    had + 1
                )
                .into());
            }
        }
        let after = server.sample()?;
        let in_order: Vec<f64> = ms.iter().map(|&x| round3(x)).collect();
        let latencies = Latencies::new(ms);
        eprintln!(
            "many_shapes_one_client {n} shapes: median {} ms, max {} ms",
            latencies.percentile(50),
            latencies.percentile(100),
        );
        headline.insert(format!("latency_ms_at_{n}"), latencies.percentile(50));
        results.push(json!({
            "shapes": n,
            "latency": latencies.summary(),
            "per_write_ms_in_order": in_order,
            "shapes_created_ms": round3(created.as_secs_f64() * 1000.0),
            "rss_bytes_idle": server.idle.rss_bytes,
            "rss_bytes_before_writes": before.rss_bytes,
            "rss_bytes_after_writes": after.rss_bytes,
            "peak_rss_bytes": after.peak_rss_bytes,
            "cpu_s_writes": after.cpu_s_since(&before),
        }));
        drop(http);
        bench.finish(server).await?;
    }
    Ok(scenario_json(
        headline,
        json!({
            "shapes": "where=name <> '<k>', k = 1..=N; one live client on k = 1, applying rows by key",
            "writes": ONE_CLIENT_WRITES,
            "latency": "per write, from the acknowledged commit of a single-row INSERT (in every shape) until the client has read the answer holding it; latency_ms_at_<N> is the median",
        }),
        results,
    ))
}

/// A scenario's JSON: the headline figures at the top level, then parameters and points.
fn scenario_json(mut headline: Map<String, Value>, parameters: Value, points: Vec<Value>) -> Value {
    let mut parameters = parameters;
    parameters["rows"] = ROWS.into();
    parameters["cores"] = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
        .into();
    parameters["load_generator"] = format!(
        "this process, same machine: hyper keep-alive connections (read buffers of at most {} KB) on a two-worker tokio runtime, mimalloc",
        http_pool::READ_BUFFER_MAX / 1024
    )
    .into();
    headline.insert("parameters".into(), parameters);
    headline.insert("points".into(), points.into());
    Value::Object(headline)
}

/// `result` (a [`scenario_json`]) without the `users` row count in its parameters, for a
/// scenario whose rows are in a table of its own.
fn without_users_rows(mut result: Value) -> Value {
    if let Some(parameters) = result["parameters"].as_object_mut() {
        parameters.remove("rows");
    }
    result
}

/// Replaces the `/proc` figures (`rss_bytes*`, `peak_rss_bytes*`, `cpu_s*`) of a scenario's
/// headline and points by null: they were not read (`--url` without `--server-pid`).
fn without_process_figures(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                if ["rss_bytes", "peak_rss_bytes", "cpu_s"]
                    .iter()
                    .any(|prefix| key.starts_with(prefix))
                {
                    *field = Value::Null;
                } else if key != "parameters" {
                    without_process_figures(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(without_process_figures),
        _ => {}
    }
}

/// `bytes / count`, rounded down (zero for no count).
fn per(bytes: u64, count: usize) -> u64 {
    u64::try_from(count)
        .ok()
        .and_then(|c| bytes.checked_div(c))
        .unwrap_or(0)
}

/// `x` rounded to three decimals.
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
