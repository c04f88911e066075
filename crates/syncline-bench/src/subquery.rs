//! `subquery`: subquery shapes (`where=parent_id IN (SELECT id FROM parent WHERE …)`) on the
//! release `syncline` binary against a private cluster, each figure beside the same measurement
//! on plain shapes in the same run.
//!
//! - `move_in_visible_ms`: a live client follows `parent_id IN (SELECT id FROM parent WHERE
//!   active)`. Each round sets one parent with 100 children active and times the acknowledged
//!   commit until the client has read all 100 inserts; then sets it inactive again and waits for
//!   the move-out. Baseline, in the same rounds: the same client on `parent_id = 0`, a 100-row
//!   INSERT transaction.
//! - `route_subquery_10k_ns_per_change`: routing a child change among 10,000 shapes
//!   `parent_id IN (SELECT id FROM parent WHERE id = <k>)`, in process (`subquery_route.rs`);
//!   baseline `parent_id = <k>`.
//! - `server_cpu_ns_per_change_10k_subquery`: the same 10,000 shapes are created over HTTP
//!   (timed too, per 1,000), then one `DO` loop commits
//!   50,000 single-row INSERTs into `child` as fast as Postgres takes them: every other one
//!   touches one shape (1,000 shapes in rotation, so their logs stay open), the others none.
//!   The figure is the server's CPU time (utime + stime, `/proc`) from the first commit until a
//!   client of the last-touched shape has the last change, per change. The same stream again
//!   with 100 changes per transaction gives `…_txn100`, where the per-transaction cost weighs
//!   less. Baseline: 10,000 plain shapes `parent_id = <k>` on a server of their own, the same
//!   streams.
//! - `restore_10k_subquery_shapes_s`: that server is stopped with SIGTERM and started on the
//!   same storage; from the start until `/v1/health` says active and a request with a shape's
//!   old handle and offset answers 200. Then every 100th shape is read from its old position:
//!   the statuses and the shapes without their 50 stream rows are recorded. Baseline: the plain
//!   shapes' server, likewise.
//!
//! Each server has fresh storage and its own replication stream and runs alone (the others are
//! stopped, so none decodes the stream measured). The sessions commit with `synchronous_commit
//! = on` (free: the cluster runs with fsync off). When the server misbehaves (an error, a 409, a
//! stall), the step's error and the end of the server's log are in the JSON instead of its
//! figure.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Url;
use serde_json::{json, Map, Value};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;
use tokio::task::JoinSet;

use crate::bench_items::ratio;
use crate::e2e::{build_server, workspace_dir, ServerProcess};
use crate::electric::{round3, Latencies};
use crate::gzip::cpu_ms;
use crate::readonly::{raise_open_files_limit, sql};
use crate::BenchResult;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Move-in rounds, each on a parent of its own.
const MOVE_ROUNDS: i64 = 30;
/// Children per moving parent, and rows of the baseline's INSERT.
const MOVE_ROWS: i64 = 100;
/// The moving parents are `MOVE_PARENT_BASE + round`.
const MOVE_PARENT_BASE: i64 = 100_000;
/// The parent of the baseline shape's rows (no such parent row).
const BASELINE_PARENT: i64 = 0;
/// The baseline's rows have ids from here.
const BASELINE_ID: i64 = 10_000_000;
/// The live client's subquery shape.
const IN_ACTIVE: &str = "parent_id IN (SELECT id FROM parent WHERE active)";
/// Shapes whose routing and restore are measured, on parents `1..=SHAPES`.
const SHAPES: i64 = 10_000;
/// Changes of each routing stream.
const CHANGES: i64 = 50_000;
/// Changes per transaction of each routing stream, in the order they run.
const PER_TXN: [i64; 2] = [1, 100];
/// Shapes the stream touches, in rotation: every `SHAPES / TOUCHED`th.
const TOUCHED: i64 = 1_000;
/// The parent of the stream's changes that touch no shape.
const UNTOUCHED_PARENT: i64 = -1;
/// The stream's rows have ids from here (deleted after each server).
const STREAM_ID: i64 = 20_000_000;
/// Shapes read after the restart (every `SHAPES / RESTORE_SAMPLE`th, all touched).
const RESTORE_SAMPLE: i64 = 100;
/// Shapes whose creation is timed together, to show whether it slows as shapes accumulate.
const CREATE_BLOCK: usize = 1_000;
/// Shapes being created at once.
const CREATE_CONCURRENCY: usize = 16;
/// Admission limits of the benchmark's servers: high enough never to turn a request away.
const ADMIT_ALL: &str = r#"{"initial":1000000,"existing":1000000}"#;
/// Pause before a timed commit, so the live request is waiting.
const SETTLE: Duration = Duration::from_millis(30);
/// How long a live client may wait for what a commit should bring.
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a restarted server may take to answer a shape.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(300);
/// Any one HTTP request's limit (the long-poll timeout is 20 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Open files wanted (each server's default open-log limit is a sixteenth).
const OPEN_FILES_WANTED: u64 = 65_536;
/// Goal for `move_in_visible_ms` (p50), printed beside the figure.
const MOVE_IN_MS_GOAL: f64 = 20.0;
/// Goal for `route_subquery_10k_ns_per_change`.
const ROUTE_NS_GOAL: f64 = 2_000.0;
/// Goal for `restore_10k_subquery_shapes_s`.
const RESTORE_S_GOAL: f64 = 2.0;

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
    let started = Instant::now();
    let routing = tokio::task::spawn_blocking(crate::subquery_route::run)
        .await?
        .map_err(|e| e.to_string())?;
    let binary = build_server(&workspace_dir()).map_err(|e| e.to_string())?;
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await?;
    let db =
        syncline_pg::connect(&ConnConfig::parse(&cluster.connection_string("postgres"))?).await?;
    sql(&db, "SET synchronous_commit = on").await?;
    sql(
        &db,
        &format!(
            "CREATE TABLE public.parent (id bigint PRIMARY KEY, active bool NOT NULL DEFAULT false);
             CREATE TABLE public.child (id bigint PRIMARY KEY, parent_id bigint NOT NULL, title text NOT NULL);
             CREATE INDEX ON public.child (parent_id);
             INSERT INTO public.parent (id) SELECT g FROM generate_series(1, {SHAPES}) g;
             INSERT INTO public.parent (id)
               SELECT {MOVE_PARENT_BASE} + g FROM generate_series(1, {MOVE_ROUNDS}) g;
             INSERT INTO public.child
               SELECT g, {MOVE_PARENT_BASE} + (g - 1) / {MOVE_ROWS} + 1, 'child ' || g
               FROM generate_series(1, {MOVE_ROUNDS} * {MOVE_ROWS}) g;"
        ),
    )
    .await?;
    sql(&db, "VACUUM ANALYZE public.parent, public.child").await?;
    let bench = Bench {
        binary,
        cluster,
        db,
        http: reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            .build()?,
    };

    eprintln!("move-ins vs plain inserts, {MOVE_ROUNDS} rounds…");
    let moves = bench.moves().await?;
    eprintln!("{SHAPES} plain shapes: create, route, restore…");
    let plain = bench.shapes(Kind::Plain).await?;
    eprintln!("{SHAPES} subquery shapes: create, route, restore…");
    let subquery = bench.shapes(Kind::Subquery).await?;

    let f = |v: &Value| v.as_f64();
    let both = |a: &Value, b: &Value| match (f(a), f(b)) {
        (Some(a), Some(b)) => ratio(a, b).into(),
        _ => Value::Null,
    };
    let meets = |v: &Value, goal: f64| f(v).map(|x| x <= goal);
    let (move_in, insert) = (&moves["move_in_ms"], &moves["plain_insert_ms"]);
    let [route, route_batched] = PER_TXN.map(|n| route_ns(&subquery, n));
    let [route_plain, route_plain_batched] = PER_TXN.map(|n| route_ns(&plain, n));
    let minus = |a: &Value, b: &Value| match (f(a), f(b)) {
        (Some(a), Some(b)) => Value::from(a - b),
        _ => Value::Null,
    };
    let restore = &subquery["restore"]["restore_s"];
    let restore_plain = &plain["restore"]["restore_s"];
    Ok(json!({
        "parameters": {
            "move_in": format!("live client on table=child&where={IN_ACTIVE}; per round UPDATE public.parent SET active = true WHERE id = <a parent with {MOVE_ROWS} children>, then back to false (move-out waited for); latency from the acknowledged commit until the client has read the answer completing the {MOVE_ROWS} inserts"),
            "move_in_baseline": format!("the same client on table=child&where=parent_id = {BASELINE_PARENT}, one {MOVE_ROWS}-row INSERT transaction per round, in the same rounds"),
            "move_rounds": MOVE_ROUNDS,
            "shapes": SHAPES,
            "subquery_shapes": "table=child&where=parent_id IN (SELECT id FROM parent WHERE id = <k>), k = 1..=10000",
            "plain_shapes": "table=child&where=parent_id = <k>, k = 1..=10000",
            "create_concurrency": CREATE_CONCURRENCY,
            "stream": format!("one DO loop of {CHANGES} INSERTs into public.child, committing after each (route_*_ns_per_change) or after every {} (*_txn{}): even i → parent_id = 1 + (i/2 % {TOUCHED}) * {} (one shape each, {TOUCHED} shapes in rotation), odd i → parent_id = {UNTOUCHED_PARENT} (no shape)", PER_TXN[1], PER_TXN[1], SHAPES / TOUCHED),
            "route": "in process (subquery_route.rs): 10,000 shapes each with its value set in the router's index, 200,000 child inserts decoded from text, each routed and its candidates' clauses evaluated against their sets; baseline the same with parent_id = <k>",
            "server_cpu": "server utime + stime (/proc/<pid>/stat) from before the first commit until a client of the last-touched shape has read the last change, divided by the changes: routing plus decoding, encoding, appending and the per-transaction flush",
            "restore": format!("SIGTERM, wait for exit, start on the same storage and port; from the start until /v1/health is active (writer) and a non-live request for shape k = {SHAPES} with its handle and offset from creation answers 200; then every {}th shape is read from its creation position", SHAPES / RESTORE_SAMPLE),
            "server": format!("target/release/syncline serve, fresh storage and replication stream per kind, --max-concurrent-requests '{ADMIT_ALL}', default open-log limit and long-poll timeout"),
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        },
        "figures": {
            "move_in_visible_ms_p50": move_in["median_ms"],
            "move_in_visible_ms_p99": move_in["p99_ms"],
            "move_in_visible_ms_max": move_in["max_ms"],
            "move_out_visible_ms_p50": moves["move_out_ms"]["median_ms"],
            "route_subquery_10k_ns_per_change": routing["subquery"]["ns_per_change"],
            "server_cpu_ns_per_change_10k_subquery": route,
            "server_cpu_extra_ns_per_change_10k_subquery": minus(route, route_plain),
            format!("server_cpu_ns_per_change_10k_subquery_txn{}", PER_TXN[1]): route_batched,
            format!("server_cpu_extra_ns_per_change_10k_subquery_txn{}", PER_TXN[1]): minus(route_batched, route_plain_batched),
            "create_10k_subquery_shapes_s": subquery["create_s"],
            "restore_10k_subquery_shapes_s": restore,
        },
        "baselines": {
            "plain_insert_visible_ms_p50": insert["median_ms"],
            "plain_insert_visible_ms_p99": insert["p99_ms"],
            "plain_insert_visible_ms_max": insert["max_ms"],
            "route_plain_10k_ns_per_change": routing["plain"]["ns_per_change"],
            "server_cpu_ns_per_change_10k_plain": route_plain,
            format!("server_cpu_ns_per_change_10k_plain_txn{}", PER_TXN[1]): route_plain_batched,
            "create_10k_plain_shapes_s": plain["create_s"],
            "restore_10k_plain_shapes_s": restore_plain,
        },
        "ratios": {
            "move_in_p50_vs_plain_insert_p50": both(&move_in["median_ms"], &insert["median_ms"]),
            "move_in_p99_vs_plain_insert_p99": both(&move_in["p99_ms"], &insert["p99_ms"]),
            "route_subquery_vs_plain": both(&routing["subquery"]["ns_per_change"], &routing["plain"]["ns_per_change"]),
            "server_cpu_subquery_vs_plain": both(route, route_plain),
            format!("server_cpu_subquery_vs_plain_txn{}", PER_TXN[1]): both(route_batched, route_plain_batched),
            "create_subquery_vs_plain": both(&subquery["create_s"], &plain["create_s"]),
            "restore_subquery_vs_plain": both(restore, restore_plain),
        },
        "goals": {
            "move_in_visible_ms_p50": format!("<= {MOVE_IN_MS_GOAL}"),
            "route_subquery_10k_ns_per_change": format!("<= {ROUTE_NS_GOAL}"),
            "restore_10k_subquery_shapes_s": format!("<= {RESTORE_S_GOAL}"),
        },
        "goals_met": {
            "move_in_visible_ms_p50": meets(&move_in["median_ms"], MOVE_IN_MS_GOAL),
            "route_subquery_10k_ns_per_change": meets(&routing["subquery"]["ns_per_change"], ROUTE_NS_GOAL),
            "restore_10k_subquery_shapes_s": meets(restore, RESTORE_S_GOAL),
        },
        "details": { "moves": moves, "plain": plain, "subquery": subquery, "routing": routing },
        "run_s": round3(started.elapsed().as_secs_f64()),
    }))
}

/// The CPU per change of a kind's stream of `per_txn` changes per transaction (null if it
/// failed).
fn route_ns(kind: &Value, per_txn: i64) -> &Value {
    &kind[format!("route_txn{per_txn}").as_str()]["ns_per_change"]
}

/// The shapes whose routing and restore are measured.
#[derive(Clone, Copy)]
enum Kind {
    /// `parent_id = <k>`.
    Plain,
    /// `parent_id IN (SELECT id FROM parent WHERE id = <k>)`.
    Subquery,
}

impl Kind {
    /// Shape `k`'s where clause.
    fn where_clause(self, k: i64) -> String {
        match self {
            Kind::Plain => format!("parent_id = {k}"),
            Kind::Subquery => format!("parent_id IN (SELECT id FROM parent WHERE id = {k})"),
        }
    }

    /// The replication stream id of the kind's server.
    fn stream(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Subquery => "subquery",
        }
    }
}

/// The cluster, the server binary and the benchmark's session and connection pool.
struct Bench {
    /// The release `syncline` binary.
    binary: std::path::PathBuf,
    /// The private cluster.
    cluster: PgCluster,
    /// A session with `synchronous_commit = on` for the writes.
    db: tokio_postgres::Client,
    /// The clients' keep-alive connection pool.
    http: reqwest::Client,
}

impl Bench {
    /// Starts a server with fresh storage on replication stream `stream` and waits until it
    /// replicates.
    async fn server(&self, stream: &str) -> Result<ServerProcess, Error> {
        let server = ServerProcess::start_with(
            &self.binary,
            &self.cluster,
            stream,
            &["--max-concurrent-requests", ADMIT_ALL],
        )
        .await
        .map_err(|e| e.to_string())?;
        wait_active(&self.http, &server.url, Instant::now() + WAIT_TIMEOUT).await?;
        Ok(server)
    }

    /// Stops `server`, drops the slots no server uses and the stream's rows.
    async fn finish(&self, server: ServerProcess) -> Result<(), Error> {
        tokio::task::block_in_place(|| server.stop());
        sql(
            &self.db,
            &format!(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE NOT active;
                 DELETE FROM public.child WHERE id > {STREAM_ID};"
            ),
        )
        .await?;
        sql(&self.db, "VACUUM ANALYZE public.child").await
    }

    /// The move-in rounds and their baseline on a server of their own.
    async fn moves(&self) -> Result<Value, Error> {
        let server = self.server("moves").await?;
        let mut m = Moves::default();
        let outcome = self.move_rounds(&server, &mut m).await;
        let mut result = json!({
            "move_in_ms_in_order": m.move_in.iter().map(|&x| round3(x)).collect::<Vec<_>>(),
            "move_in_ms": Latencies::new(m.move_in).summary(),
            "move_out_ms": Latencies::new(m.move_out).summary(),
            "plain_insert_ms": Latencies::new(m.insert).summary(),
            "unexpected_move_ins": m.unexpected.len(),
            "unexpected_move_in_messages": m.unexpected.iter().take(5).collect::<Vec<_>>(),
        });
        if let Err(e) = outcome {
            result["error"] = e.to_string().into();
            result["server_log_tail"] = server.log_tail().into();
        }
        self.finish(server).await?;
        Ok(result)
    }

    /// Runs the move-in rounds, filling `m` as they go.
    async fn move_rounds(&self, server: &ServerProcess, m: &mut Moves) -> Result<(), Error> {
        let mut moving = Follower::new(&server.url, IN_ACTIVE)?;
        let mut plain = Follower::new(&server.url, &format!("parent_id = {BASELINE_PARENT}"))?;
        moving.sync(&self.http).await?;
        plain.sync(&self.http).await?;
        for round in 1..=MOVE_ROUNDS {
            let first = BASELINE_ID + round * MOVE_ROWS;
            let insert = format!(
                "INSERT INTO public.child SELECT g, {BASELINE_PARENT}, 'plain ' || g
                 FROM generate_series({first}, {}) g",
                first + MOVE_ROWS - 1
            );
            m.insert
                .push(self.timed(&mut plain, &insert, has_all_rows).await?.0);
            let parent = MOVE_PARENT_BASE + round;
            let flip = |on| format!("UPDATE public.parent SET active = {on} WHERE id = {parent}");
            let (ms, messages) = self.timed(&mut moving, &flip(true), has_all_rows).await?;
            m.move_in.push(ms);
            if let Some(problem) = move_in_problem(&messages, parent) {
                m.unexpected.push(format!("round {round}: {problem}"));
            }
            let has_move_out =
                |read: &[Value]| read.iter().any(|msg| msg["headers"]["event"] == "move-out");
            m.move_out
                .push(self.timed(&mut moving, &flip(false), has_move_out).await?.0);
        }
        Ok(())
    }

    /// Commits `statement` while `follower` waits live; returns the milliseconds from the
    /// acknowledged commit until it has read the answer after which `done` holds, and what it
    /// read.
    async fn timed(
        &self,
        follower: &mut Follower,
        statement: &str,
        done: fn(&[Value]) -> bool,
    ) -> Result<(f64, Vec<Value>), Error> {
        let (http, mut waiting) = (self.http.clone(), follower.clone());
        let task = tokio::spawn(async move {
            let result = waiting.wait(&http, done).await;
            (waiting, result)
        });
        tokio::time::sleep(SETTLE).await;
        sql(&self.db, statement).await?;
        let committed = Instant::now();
        let (waited, result) = task.await?;
        *follower = waited;
        let (at, messages) = result?;
        Ok((ms_since(committed, at), messages))
    }

    /// Creates `SHAPES` shapes of `kind` on a server of their own, routes the stream through
    /// them and restarts the server.
    async fn shapes(&self, kind: Kind) -> Result<Value, Error> {
        let mut server = self.server(kind.stream()).await?;
        let mut result = Map::new();
        if let Err(e) = self.shape_steps(kind, &mut server, &mut result).await {
            result.insert("error".into(), e.to_string().into());
        }
        if result.keys().any(|k| k.ends_with("error")) {
            result.insert("server_log_tail".into(), server.log_tail().into());
        }
        self.finish(server).await?;
        Ok(Value::Object(result))
    }

    /// The steps of [`shapes`](Self::shapes), recorded in `out` as they finish; a failed
    /// stream is recorded as `route_txn<n>_error` and the rest still measured.
    async fn shape_steps(
        &self,
        kind: Kind,
        server: &mut ServerProcess,
        out: &mut Map<String, Value>,
    ) -> Result<(), Error> {
        let pid = server.child.id();
        let cpu_before = cpu_ms(pid).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let (followers, blocks) = self.create(kind, &server.url).await?;
        out.insert(
            "create_s".into(),
            round3(started.elapsed().as_secs_f64()).into(),
        );
        out.insert(format!("create_s_per_{CREATE_BLOCK}"), blocks.into());
        let cpu = cpu_ms(pid).map_err(|e| e.to_string())? - cpu_before;
        out.insert("create_cpu_s".into(), round3(cpu / 1000.0).into());
        eprintln!(
            "  created in {:.1} s; stream…",
            started.elapsed().as_secs_f64()
        );
        for (n, &per_txn) in PER_TXN.iter().enumerate() {
            let name = format!("route_txn{per_txn}");
            let first_id = STREAM_ID + i64::try_from(n)? * CHANGES;
            match self.route(pid, &followers, per_txn, first_id).await {
                Ok(route) => out.insert(name, route),
                Err(e) => out.insert(format!("{name}_error"), e.to_string().into()),
            };
        }
        eprintln!("  restart…");
        out.insert("restore".into(), json!({}));
        self.restore(server, &followers, &mut out["restore"]).await
    }

    /// Creates shapes `1..=SHAPES` of `kind`, `CREATE_CONCURRENCY` at a time, each read until
    /// up to date; returns their followers (shape `k` at `k - 1`) and the seconds each
    /// [`CREATE_BLOCK`] of them took.
    async fn create(&self, kind: Kind, url: &str) -> Result<(Vec<Follower>, Vec<f64>), Error> {
        let mut tasks = JoinSet::new();
        let (mut created, mut next) = (Vec::new(), 1);
        let (mut blocks, mut block_started) = (Vec::new(), Instant::now());
        loop {
            while next <= SHAPES && tasks.len() < CREATE_CONCURRENCY {
                let (k, http) = (next, self.http.clone());
                let mut follower = Follower::new(url, &kind.where_clause(k))?;
                tasks.spawn(async move {
                    follower
                        .sync(&http)
                        .await
                        .map(|_| (k, follower))
                        .map_err(|e| -> Error { format!("creating shape {k}: {e}").into() })
                });
                next += 1;
            }
            let Some(joined) = tasks.join_next().await else {
                break;
            };
            created.push(joined??);
            if created.len() % CREATE_BLOCK == 0 {
                blocks.push(round3(block_started.elapsed().as_secs_f64()));
                block_started = Instant::now();
            }
        }
        created.sort_by_key(|(k, _)| *k);
        Ok((created.into_iter().map(|(_, f)| f).collect(), blocks))
    }

    /// Commits the stream, `per_txn` changes per transaction and row ids after `first_id`, and
    /// waits until the server has processed it; returns the server's CPU per change and the
    /// times.
    async fn route(
        &self,
        pid: u32,
        followers: &[Follower],
        per_txn: i64,
        first_id: i64,
    ) -> Result<Value, Error> {
        let touched = |i: i64| 1 + (i / 2 % TOUCHED) * (SHAPES / TOUCHED);
        let mut watcher = followers[usize::try_from(touched(CHANGES) - 1)?].clone();
        let last_id = (first_id + CHANGES).to_string();
        let before = cpu_ms(pid).map_err(|e| e.to_string())?;
        let started = Instant::now();
        sql(
            &self.db,
            &format!(
                "DO $$ BEGIN FOR i IN 1..{CHANGES} LOOP
                   INSERT INTO public.child VALUES ({first_id} + i,
                     CASE WHEN i % 2 = 0 THEN 1 + (i / 2 % {TOUCHED}) * {} ELSE {UNTOUCHED_PARENT} END,
                     'stream ' || i);
                   IF i % {per_txn} = 0 THEN COMMIT; END IF;
                 END LOOP; END $$",
                SHAPES / TOUCHED
            ),
        )
        .await?;
        let committed = started.elapsed();
        watcher
            .wait(&self.http, |read| {
                read.iter().any(|m| m["value"]["id"] == last_id)
            })
            .await
            .map_err(|e| format!("waiting for the stream's last change: {e}"))?;
        let processed = started.elapsed();
        let cpu = cpu_ms(pid).map_err(|e| e.to_string())? - before;
        Ok(json!({
            "ns_per_change": (cpu * 1e6 / CHANGES as f64).round(),
            "cpu_s": round3(cpu / 1000.0),
            "committed_s": round3(committed.as_secs_f64()),
            "processed_s": round3(processed.as_secs_f64()),
            "changes_per_s_processed": (CHANGES as f64 / processed.as_secs_f64()).round(),
        }))
    }

    /// Stops the server with SIGTERM, starts it on the same storage and times it until it
    /// answers a shape at its old position; then reads a sample of shapes from theirs.
    /// Everything is recorded in `out` as it is known.
    async fn restore(
        &self,
        server: &mut ServerProcess,
        followers: &[Follower],
        out: &mut Value,
    ) -> Result<(), Error> {
        let (stopped, status) = tokio::task::block_in_place(|| server.restart(libc::SIGTERM))
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        out["signal"] = "SIGTERM".into();
        out["stop_ms"] = round3(stopped.as_secs_f64() * 1000.0).into();
        out["exit_status"] = status.to_string().into();
        let deadline = started + RESTORE_TIMEOUT;
        wait_active(&self.http, &server.url, deadline).await?;
        out["health_active_s"] = round3(started.elapsed().as_secs_f64()).into();
        let mut probe = followers[usize::try_from(SHAPES - 1)?].clone();
        loop {
            match probe.request(&self.http, false).await {
                Ok(_) => break,
                Err(e) if status_of(&e) == Some(503) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => {
                    return Err(format!(
                        "shape {SHAPES} at its old handle and offset after the restart: {e}"
                    )
                    .into())
                }
            }
        }
        out["restore_s"] = round3(started.elapsed().as_secs_f64()).into();
        let (mut statuses, mut short) = (BTreeMap::<String, u64>::new(), Vec::new());
        let expected = CHANGES / 2 / TOUCHED * i64::try_from(PER_TXN.len())?;
        for k in (1..=SHAPES).step_by(usize::try_from(SHAPES / RESTORE_SAMPLE)?) {
            let mut follower = followers[usize::try_from(k - 1)?].clone();
            let status = match follower.sync(&self.http).await {
                Ok(messages) => {
                    let rows = count(&messages, |m| m["headers"]["operation"] == "insert");
                    if rows != expected {
                        short.push(format!("shape {k}: {rows} rows"));
                    }
                    "200".to_owned()
                }
                Err(e) => status_of(&e).map_or_else(|| format!("error: {e}"), |s| s.to_string()),
            };
            *statuses.entry(status).or_default() += 1;
        }
        out["sample_statuses"] = json!(statuses);
        out["sample_shapes_without_their_rows"] = short.len().into();
        out["sample_shapes_without_their_rows_first"] =
            json!(short.iter().take(5).collect::<Vec<_>>());
        Ok(())
    }
}

/// The move-in rounds' figures, in milliseconds, and what was unexpected.
#[derive(Default)]
struct Moves {
    move_in: Vec<f64>,
    move_out: Vec<f64>,
    insert: Vec<f64>,
    unexpected: Vec<String>,
}

/// Whether `messages` hold `MOVE_ROWS` inserts.
fn has_all_rows(messages: &[Value]) -> bool {
    count(messages, |m| m["headers"]["operation"] == "insert") >= MOVE_ROWS
}

/// What is wrong with a move-in's messages, if anything: they should be the `move-in` event,
/// the `MOVE_ROWS` children of `parent` as inserts marked `is_move_in`, and `snapshot-end`.
fn move_in_problem(messages: &[Value], parent: i64) -> Option<String> {
    let parent = parent.to_string();
    let changes = count(messages, |m| m["headers"]["operation"].is_string());
    let moved = count(messages, |m| {
        m["headers"]["operation"] == "insert"
            && m["headers"]["is_move_in"] == true
            && m["value"]["parent_id"] == parent.as_str()
    });
    let event = count(messages, |m| m["headers"]["event"] == "move-in");
    let end = count(messages, |m| m["headers"]["control"] == "snapshot-end");
    (changes != MOVE_ROWS || moved != MOVE_ROWS || event != 1 || end != 1)
        .then(|| format!("{} messages: {}", messages.len(), kinds(messages)))
}

/// How many of `messages` satisfy `f`.
fn count(messages: &[Value], f: impl Fn(&Value) -> bool) -> i64 {
    i64::try_from(messages.iter().filter(|m| f(m)).count()).unwrap_or(i64::MAX)
}

/// The messages counted by kind (operation, `is_move_in`, event, control), as JSON text.
fn kinds(messages: &[Value]) -> String {
    let mut kinds = BTreeMap::<String, u64>::new();
    for m in messages {
        let h = &m["headers"];
        let kind = match (
            h["operation"].as_str(),
            h["event"].as_str(),
            h["control"].as_str(),
        ) {
            (Some(op), _, _) if h["is_move_in"] == true => format!("{op} (is_move_in)"),
            (Some(op), _, _) => op.to_owned(),
            (_, Some(event), _) => event.to_owned(),
            (_, _, Some(control)) => control.to_owned(),
            _ => m.to_string(),
        };
        *kinds.entry(kind).or_default() += 1;
    }
    json!(kinds).to_string()
}

/// Milliseconds from `from` to `to` (zero if `to` is earlier).
fn ms_since(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// Waits until the server at `url` says it is the active writer (replicating), until
/// `deadline`.
async fn wait_active(http: &reqwest::Client, url: &str, deadline: Instant) -> Result<(), Error> {
    loop {
        let health = match http.get(format!("{url}/v1/health")).send().await {
            Ok(r) => serde_json::from_slice(&r.bytes().await?).unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        if health["status"] == "active" && health["role"] == "writer" {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the server at {url} was not active: {health}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The status of a shape request that was not answered 200.
fn status_of(e: &Error) -> Option<u16> {
    e.downcast_ref::<Refused>().map(|r| r.status)
}

/// A shape request answered with something else than 200.
#[derive(Debug)]
struct Refused {
    /// The request.
    url: String,
    /// The answer's status.
    status: u16,
    /// The answer's body.
    body: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GET {}: {} {}", self.url, self.status, self.body)
    }
}

impl std::error::Error for Refused {}

/// One `table=child` shape followed over HTTP, whose messages are parsed.
#[derive(Clone)]
struct Follower {
    /// `<base>/v1/shape?table=child&where=…`, without a position.
    shape: Url,
    /// The shape's handle, once a server gave one.
    handle: Option<String>,
    /// Where the next request reads from.
    offset: String,
    /// The last `electric-cursor`, sent back on live requests.
    cursor: Option<String>,
}

/// One answer with status 200 (or 204).
struct Answer {
    /// Its messages.
    messages: Vec<Value>,
    /// Whether it carried `electric-up-to-date`.
    up_to_date: bool,
    /// When its body was read.
    at: Instant,
}

impl Follower {
    /// A follower of `table=child&where=<where_clause>` on the server at `base`, from
    /// `offset=-1`.
    fn new(base: &str, where_clause: &str) -> Result<Follower, Error> {
        let mut shape = Url::parse(base)?.join("v1/shape")?;
        shape
            .query_pairs_mut()
            .append_pair("table", "child")
            .append_pair("where", where_clause);
        Ok(Follower {
            shape,
            handle: None,
            offset: "-1".into(),
            cursor: None,
        })
    }

    /// Sends one request from where the follower is, live or not, and moves on to where the
    /// answer leaves it; an answer other than 200 or 204 is a [`Refused`] error.
    async fn request(&mut self, http: &reqwest::Client, live: bool) -> Result<Answer, Error> {
        let mut url = self.shape.clone();
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("offset", &self.offset);
            if let Some(handle) = &self.handle {
                query.append_pair("handle", handle);
            }
            if live {
                query.append_pair("live", "true");
                if let Some(cursor) = &self.cursor {
                    query.append_pair("cursor", cursor);
                }
            }
        }
        let response = http.get(url.clone()).send().await?;
        let status = response.status().as_u16();
        let header = |name: &str| crate::electric::client::header(response.headers(), name);
        let (handle, offset, cursor) = (
            header("electric-handle"),
            header("electric-offset"),
            header("electric-cursor"),
        );
        let up_to_date = response.headers().contains_key("electric-up-to-date");
        let body = response.bytes().await?;
        let at = Instant::now();
        match status {
            204 => {
                return Ok(Answer {
                    messages: Vec::new(),
                    up_to_date: true,
                    at,
                })
            }
            200 => {}
            _ => {
                return Err(Box::new(Refused {
                    url: url.to_string(),
                    status,
                    body: String::from_utf8_lossy(&body).into_owned(),
                }))
            }
        }
        let (Some(handle), Some(offset)) = (handle, offset) else {
            return Err(format!("GET {url}: no electric-handle or electric-offset").into());
        };
        self.handle = Some(handle);
        self.offset = offset;
        if cursor.is_some() {
            self.cursor = cursor;
        }
        Ok(Answer {
            messages: serde_json::from_slice(&body)?,
            up_to_date,
            at,
        })
    }

    /// Reads, not live, until an answer is up to date; returns the messages read.
    async fn sync(&mut self, http: &reqwest::Client) -> Result<Vec<Value>, Error> {
        let mut messages = Vec::new();
        loop {
            let answer = self.request(http, false).await?;
            messages.extend(answer.messages);
            if answer.up_to_date {
                return Ok(messages);
            }
        }
    }

    /// Follows live until `done` holds for the messages read so far at an up-to-date answer,
    /// for at most [`WAIT_TIMEOUT`]; returns when that answer was read, and the messages.
    async fn wait(
        &mut self,
        http: &reqwest::Client,
        done: impl Fn(&[Value]) -> bool,
    ) -> Result<(Instant, Vec<Value>), Error> {
        let deadline = tokio::time::Instant::now() + WAIT_TIMEOUT;
        let mut messages = Vec::new();
        loop {
            let Ok(answer) = tokio::time::timeout_at(deadline, self.request(http, true)).await
            else {
                return Err(format!(
                    "stalled: after {WAIT_TIMEOUT:?} the live client had read {} messages ({}) at offset {}",
                    messages.len(),
                    kinds(&messages),
                    self.offset
                )
                .into());
            };
            let answer = answer?;
            messages.extend(answer.messages);
            if answer.up_to_date && done(&messages) {
                return Ok((answer.at, messages));
            }
        }
    }
}
