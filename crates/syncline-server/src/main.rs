//! `syncline`: the server binary.

use std::io::IsTerminal;

use clap::{Parser, Subcommand};
use syncline_server::config::Config;
use tracing_subscriber::EnvFilter;

/// Syncline: a Postgres sync engine speaking ElectricSQL's HTTP shape protocol.
///
/// Clients ask for a shape (a table, a where clause, columns) at /v1/shape; Syncline snapshots
/// the matching rows, follows logical replication, and serves each shape's log by offset, live.
/// `@electric-sql/client` works against it unchanged.
#[derive(Parser)]
#[command(name = "syncline", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve shapes over HTTP: snapshot, replicate, and stream changes to clients.
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(Config),
}

/// What `syncline serve --help` ends with.
const SERVE_AFTER_HELP: &str = "\
Endpoints:
  GET|HEAD|POST|DELETE|OPTIONS /v1/shape   Electric's shape API
  GET /v1/health                           {\"status\":\"active\"|\"waiting\"|\"starting\"|\"degraded\",
                                            \"role\":\"writer\"|\"standby\"|\"replica\"}
  GET /metrics                             Prometheus metrics: on the main port with the
                                           secret, or on --prometheus-port without it
  GET /status                              a live page of charts for operators (with the
                                           secret when one is set), fed from /status/metrics

Several servers may share one storage directory and stream id: the one holding the writer's
lock (a Postgres advisory lock) replicates; the others serve existing shapes read-only and,
with --role=auto, take over when it stops (SIGTERM hands over at once) or dies.

Logging: to stderr, coloured only on a terminal. RUST_LOG, else ELECTRIC_LOG_LEVEL, sets the
level (default info); debug adds a line per request. E.g.
  RUST_LOG=info,syncline_server=debug

Example:
  DATABASE_URL=postgres://postgres@localhost/app ELECTRIC_INSECURE=true syncline serve
  curl 'http://localhost:3000/v1/shape?table=items&offset=-1'";

/// Open files allowed (soft limit) is raised to this, or to the hard limit if lower: every
/// open shape log and every connection holds descriptors.
const OPEN_FILES_WANTED: u64 = 1 << 20;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(syncline_where::IN_PLACE_THREAD_STACK_BYTES)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("syncline could not start its async runtime: {e}");
            std::process::exit(1);
        }
    }
}

/// Parses the command line, sets up logging, and serves until SIGTERM or SIGINT.
async fn run() {
    let Cli {
        command: Command::Serve(config),
    } = Cli::parse();
    let level = std::env::var("RUST_LOG")
        .or_else(|_| std::env::var("ELECTRIC_LOG_LEVEL"))
        .unwrap_or_else(|_| "info".into());
    let (filter, filter_error) = match EnvFilter::try_new(&level) {
        Ok(filter) => (filter, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if config.log_format == "json" {
        logs.json().init();
    } else {
        logs.init();
    }
    if let Some(e) = filter_error {
        tracing::warn!(level, error = %e, "invalid log level; using info");
    }
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "syncline starting");
    raise_open_files_limit();
    match syncline_server::startup::start(config).await {
        Ok(server) => {
            let signal = shutdown_signal().await;
            tracing::info!(signal, "shutting down");
            server.shut_down().await;
            tracing::info!("shut down");
        }
        Err(e) => {
            tracing::error!(error = %e, "syncline could not start");
            std::process::exit(1);
        }
    }
}

/// Waits for SIGTERM or SIGINT and names it.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for signals; stop the server with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Raises the soft limit on open files towards the hard limit ([`OPEN_FILES_WANTED`]).
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        let wanted = limit.rlim_max.min(OPEN_FILES_WANTED);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                tracing::warn!("could not raise the open files limit");
            }
        }
    }
}
