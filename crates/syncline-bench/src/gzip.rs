//! gzip of non-live responses: bytes on the wire and the server's CPU per response, for the
//! chunks of a large shape sent as they are, gzipped the first time (compressed then), and
//! gzipped again (served from the kept compressed chunks). The baseline is the same responses
//! sent as they are, in the same run.

use std::time::Duration;

use serde_json::json;
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;

use crate::bench_items::{self, ratio};
use crate::e2e::{build_server, workspace_dir, ServerProcess};
use crate::BenchResult;

/// Rows of `bench_items`: about 4 default-size (10 MB) chunks of JSON.
const ROWS: i64 = 200_000;
/// Requests per chunk in each measured round.
const ROUNDS: u32 = 10;

type Error = Box<dyn std::error::Error>;

/// Runs the scenario.
pub fn run() -> BenchResult {
    crate::run_on_workers(run_async())
}

/// The server's CPU time so far (user + system), in milliseconds.
pub(crate) fn cpu_ms(pid: u32) -> Result<f64, Error> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .ok_or("malformed /proc stat")?
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // SAFETY: sysconf has no preconditions.
    let per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks * 1000.0 / per_s)
}

/// Bytes received and the server's CPU per request for `rounds` requests of each URL.
async fn measure(
    http: &reqwest::Client,
    pid: u32,
    urls: &[String],
    gzip: bool,
    rounds: u32,
) -> Result<(f64, f64), Error> {
    let before = cpu_ms(pid)?;
    let mut bytes = 0u64;
    for _ in 0..rounds {
        for url in urls {
            let mut request = http.get(url);
            if gzip {
                request = request.header("accept-encoding", "gzip");
            }
            let response = request.send().await?;
            let encoded = response.headers().get("content-encoding").is_some();
            if encoded != gzip {
                return Err(format!("{url}: gzip {gzip}, content-encoding {encoded}").into());
            }
            bytes += response.bytes().await?.len() as u64;
        }
    }
    let requests = f64::from(rounds) * urls.len() as f64;
    Ok((bytes as f64 / requests, (cpu_ms(pid)? - before) / requests))
}

async fn run_async() -> BenchResult {
    let server_bin = build_server(&workspace_dir())?;
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await?;
    let config = ConnConfig::parse(&cluster.connection_string("postgres"))?;
    let client = syncline_pg::connect(&config).await?;
    bench_items::create(&client, ROWS).await?;
    let server = ServerProcess::start(&server_bin, &cluster).await?;
    let pid = server.child.id();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    // The shape's chunks, by the URLs a client follows from offset=-1.
    let mut urls = Vec::new();
    let mut next = format!("{}/v1/shape?table=bench_items&offset=-1", server.url);
    loop {
        let response = http.get(&next).send().await?;
        let header = |name: &str| -> Result<String, Error> {
            Ok(response
                .headers()
                .get(name)
                .ok_or_else(|| format!("no {name}"))?
                .to_str()?
                .to_owned())
        };
        let (handle, offset) = (header("electric-handle")?, header("electric-offset")?);
        let done = response.headers().contains_key("electric-up-to-date");
        response.bytes().await?;
        if done {
            break;
        }
        urls.push(next);
        next = format!(
            "{}/v1/shape?table=bench_items&offset={offset}&handle={handle}",
            server.url
        );
    }
    let (plain_bytes, plain_cpu) = measure(&http, pid, &urls, false, ROUNDS).await?;
    let (cold_bytes, cold_cpu) = measure(&http, pid, &urls, true, 1).await?;
    let (gzip_bytes, cached_cpu) = measure(&http, pid, &urls, true, ROUNDS).await?;
    server.stop();
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    Ok(json!({
        "parameters": {
            "rows": ROWS,
            "table": bench_items::table_parameter(),
            "responses": urls.len(),
            "rounds": ROUNDS,
            "chunk_bytes_threshold": "default (10 MB)",
            "cpu": "server process user+system time (/proc), per response",
        },
        "figures": {
            "identity_bytes_per_response": round(plain_bytes),
            "gzip_bytes_per_response": round(gzip_bytes),
            "gzip_first_bytes_per_response": round(cold_bytes),
            "identity_cpu_ms_per_response": round(plain_cpu),
            "gzip_first_cpu_ms_per_response": round(cold_cpu),
            "gzip_cached_cpu_ms_per_response": round(cached_cpu),
        },
        "baselines": {
            "identity_bytes_per_response": round(plain_bytes),
            "identity_cpu_ms_per_response": round(plain_cpu),
        },
        "ratios": {
            "gzip_bytes_vs_identity": ratio(gzip_bytes, plain_bytes),
            "gzip_first_cpu_vs_identity": ratio(cold_cpu, plain_cpu),
            "gzip_cached_cpu_vs_identity": ratio(cached_cpu, plain_cpu),
        },
    }))
}
