//! `syncline`: the server binary.

use clap::{Parser, Subcommand};
use syncline_server::config::Config;
use tracing_subscriber::EnvFilter;

/// Syncline: a Postgres sync engine speaking ElectricSQL's HTTP shape protocol.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve shapes over HTTP: snapshot, replicate, and stream changes to clients.
    Serve(Config),
}

#[tokio::main]
async fn main() {
    let Cli {
        command: Command::Serve(config),
    } = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if config.log_format == "json" {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    match syncline_server::startup::start(config).await {
        Ok(_server) => std::future::pending::<()>().await,
        Err(e) => {
            eprintln!("syncline: {e}");
            std::process::exit(1);
        }
    }
}
