//! Syncline's benchmark harness.
//!
//! `cargo run --release -p syncline-bench -- <scenario>` runs one scenario and writes
//! `target/bench/<scenario>.json`: the command line, the parameters, every figure by name, the
//! baselines measured in the same run and the ratios against them. Absolute times drift on
//! shared machines; the ratios are what to compare across runs.
//!
//! `cargo run --release -p syncline-bench -- electric <name>` runs Electric's published
//! benchmark scenarios (or `all` of them) and writes `target/bench/electric-<name>.json` and
//! its plot, `electric-<name>.svg`.

mod bench_items;
mod e2e;
mod electric;
mod group_flush;
mod gzip;
mod ingest;
mod readonly;
mod route;
mod storage;
mod subquery;
mod subquery_route;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

/// The harness allocates with mimalloc. As the `electric` scenarios' load generator, glibc's
/// `malloc` spent about a third of the generator's CPU coalescing free chunks (`perf` of
/// `write-fanout` at 10,000 clients: thousands of responses freed and allocated in turn), CPU
/// the server on the same two cores then lacked. The server keeps glibc's allocator (with
/// mimalloc it took more CPU and held gigabytes); the in-process benchmarks compare their
/// baselines under this one.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs one benchmark scenario and writes its results to `target/bench/<scenario>.json`.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Args {
    /// The scenario to run.
    #[command(subcommand)]
    scenario: Scenario,
    /// Directory for the JSON results (default: the workspace's `target/bench`).
    #[arg(long, env = "SYNCLINE_BENCH_OUT", global = true)]
    out: Option<PathBuf>,
}

/// The scenarios.
#[derive(Subcommand)]
enum Scenario {
    /// Snapshot by binary COPY vs raw COPY; a 100,000-row transaction decoded vs pg_recvlogical.
    Ingest,
    /// The shape-log storage engine vs SQLite and fjall behind one trait, and raw file I/O.
    Storage,
    /// One small transaction made durable in N shape logs at once: each log's sync in turn vs
    /// all syncs issued together.
    GroupFlush,
    /// Routing a change through the shape router's indexes vs evaluating every shape.
    Route,
    /// Postgres → the server process → the Node client: initial sync and live changes.
    E2e,
    /// Several servers on one storage directory: replicas' live lag behind the writer,
    /// takeovers, a rolling deploy and request collapsing behind the nginx front door.
    Readonly,
    /// gzip of non-live responses: bytes and server CPU per response, first and cached, vs
    /// sending them as they are.
    Gzip,
    /// Subquery shapes: move-in latency, routing CPU per change and restart at 10,000 shapes,
    /// each vs plain shapes.
    Subquery,
    /// Electric's published benchmark scenarios, driven by a shape-protocol load generator;
    /// each writes `electric-<name>.json`.
    Electric(Box<electric::Args>),
}

impl Scenario {
    /// The scenario's JSON file name, without `.json` (`electric` names its own).
    fn name(&self) -> &'static str {
        match self {
            Scenario::Ingest => "ingest",
            Scenario::Storage => "storage",
            Scenario::GroupFlush => "group-flush",
            Scenario::Route => "route",
            Scenario::E2e => "e2e",
            Scenario::Gzip => "gzip",
            Scenario::Readonly => "readonly",
            Scenario::Subquery => "subquery",
            Scenario::Electric(_) => "electric",
        }
    }
}

type BenchResult = Result<serde_json::Value, Box<dyn std::error::Error>>;

/// Runs a scenario's body on a two-worker tokio runtime, on a worker (as the server's tasks
/// run), not on the runtime's outside thread.
fn run_on_workers(
    scenario: impl std::future::Future<Output = BenchResult> + Send + 'static,
) -> BenchResult {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let task = runtime.spawn(async { scenario.await.map_err(|e| e.to_string()) });
    Ok(runtime.block_on(task)??)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let name = args.scenario.name();
    let results = match args.scenario {
        Scenario::Ingest => vec![(name.to_owned(), ingest::run()?)],
        Scenario::Storage => vec![(
            name.to_owned(),
            storage::run().map_err(|e| e as Box<dyn std::error::Error>)?,
        )],
        Scenario::GroupFlush => vec![(
            name.to_owned(),
            group_flush::run().map_err(|e| e as Box<dyn std::error::Error>)?,
        )],
        Scenario::Route => vec![(
            name.to_owned(),
            route::run().map_err(|e| e as Box<dyn std::error::Error>)?,
        )],
        Scenario::E2e => vec![(name.to_owned(), e2e::run()?)],
        Scenario::Gzip => vec![(name.to_owned(), gzip::run()?)],
        Scenario::Readonly => vec![(name.to_owned(), readonly::run()?)],
        Scenario::Subquery => vec![(name.to_owned(), subquery::run()?)],
        Scenario::Electric(electric_args) => electric::run(*electric_args)?,
    };
    let command: Vec<String> = std::env::args().collect();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crate lies two levels down");
    let dir = args.out.unwrap_or_else(|| workspace.join("target/bench"));
    std::fs::create_dir_all(&dir)?;
    for (scenario, mut result) in results {
        result["scenario"] = scenario.as_str().into();
        result["command"] = format!(
            "cargo run --release -p syncline-bench -- {}",
            command[1..].join(" ")
        )
        .into();
        let path = dir.join(format!("{scenario}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&result)? + "\n")?;
        println!("{}", serde_json::to_string_pretty(&result)?);
        println!("wrote {}", path.display());
        if scenario.starts_with("electric-") {
            let svg = dir.join(format!("{scenario}.svg"));
            electric::plot::write(&svg, &result)?;
            println!("wrote {}", svg.display());
        }
    }
    Ok(())
}
