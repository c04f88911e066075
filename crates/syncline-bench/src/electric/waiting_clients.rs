//! `electric waiting-clients`: what a parked long-poll costs. N clients follow one up-to-date
//! shape and each parks a `live=true` request; once the server's
//! `syncline_admission_in_flight{kind="existing"}` gauge counts all N, its RSS minus that of
//! the same process with the shape up to date and no live request is divided by N. A
//! single-row insert then answers every request, which checks they were live and times the
//! fan-out. Both RSS readings are taken once the server's idle sweep has returned the heap's
//! free pages to the kernel (`--idle-log-park`, here [`IDLE_SWEEP`]): what the requests hold,
//! not what the clients' sync phase freed; the reading right after parking is kept beside it.
//! Before that, another fresh server holds N connections that sent nothing: what the
//! connection alone costs, before any request's own state. With `--sse` each client holds an
//! open SSE stream instead (the gauge counts those too).

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::client::Error;
use super::http_pool::Pool;
use super::server_metrics::{metric, open_fds};
use super::{per, pool, round3, scenario_json, users_client, Bench, LiveClients, Server};

/// The long-poll timeout of the scenario's servers: long enough that no parked request times
/// out (and comes back) while the point runs.
const LONG_POLL_TIMEOUT_MS: &str = "600000";
/// How long the gauge may take to count every parked request.
const PARKED_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the idle-connection server is left alone before its baseline is read.
const IDLE_WAIT: Duration = Duration::from_secs(2);
/// The period of the scenario's servers' idle sweep (`--idle-log-park`), which also returns
/// the heap's free pages to the kernel (the default is a minute).
const IDLE_SWEEP: &str = "5s";
/// How long the server is left alone before an RSS reading: two sweeps and a second.
const RELEASE_WAIT: Duration = Duration::from_secs(11);
/// The shape the clients wait on: empty until the point's insert (the benchmark's rows are
/// `bench <n>`), so that syncing it leaves no large responses behind in the server's memory.
const WAITING_WHERE: &str = "name LIKE 'bench %'";
/// The live requests the gauge counts.
const PARKED_GAUGE: &str = r#"syncline_admission_in_flight{kind="existing"}"#;

/// Runs the points of `waiting-clients`; each is a fresh server with `n` parked requests.
pub(super) async fn waiting_clients(bench: &mut Bench, points: &[usize]) -> Result<Value, Error> {
    let mut results = Vec::new();
    let mut headline = Map::new();
    let mut errors_total = 0;
    for &n in points {
        let rss_per_connection = idle_connections_rss(bench, n).await?;
        if let Some(bytes) = rss_per_connection {
            eprintln!("waiting_clients {n} idle connections: {bytes} B RSS per connection");
            headline.insert(
                format!("rss_bytes_per_idle_connection_at_{n}"),
                bytes.into(),
            );
        }
        let server = bench
            .server_with(&[
                "--long-poll-timeout-ms",
                LONG_POLL_TIMEOUT_MS,
                "--idle-log-park",
                IDLE_SWEEP,
            ])
            .await?;
        let http = pool();
        users_client(&http, &server, Some(WAITING_WHERE), false)?
            .sync()
            .await?;
        tokio::time::sleep(RELEASE_WAIT).await;
        let baseline = server.sample()?;
        let baseline_fds = open_fds(&server).ok();

        let mut live = LiveClients::start(
            (0..n)
                .map(|_| users_client(&http, &server, Some(WAITING_WHERE), false))
                .collect::<Result<_, _>>()?,
            1,
        );
        let sent = live.wait_live().await?;
        let parked = wait_parked(&http, &server, n)
            .await
            .map_err(|e| format!("{e}; {}", live.failed_so_far()))?;
        let parked_now = server.sample()?;
        tokio::time::sleep(RELEASE_WAIT).await;
        let waiting = server.sample()?;
        let waiting_fds = open_fds(&server).ok();

        let committed = bench.insert(1).await?;
        let (latencies, errors) = live.answers(committed).await?;
        let rss_per_request = per(waiting.rss_bytes.saturating_sub(baseline.rss_bytes), n);
        let rss_per_request_parked_now =
            per(parked_now.rss_bytes.saturating_sub(baseline.rss_bytes), n);
        eprintln!(
            "waiting_clients {n} live requests: {rss_per_request} B RSS per request ({rss_per_request_parked_now} B right after parking), parked {}, fds {:?} → {:?}, {} threads, then answered p50 {} ms, p99 {} ms, {} errors",
            parked.map_or("unverified".to_owned(), |p| p.to_string()),
            baseline_fds,
            waiting_fds,
            waiting.threads,
            latencies.percentile(50),
            latencies.percentile(99),
            errors.count
        );
        errors_total += errors.count;
        headline.insert(
            format!("rss_bytes_per_request_at_{n}"),
            rss_per_request.into(),
        );
        drop(http);
        bench.finish(server).await?;
        results.push(json!({
            "clients": n,
            "parked_requests_counted_by_server": parked,
            "clients_synced_and_live_ms": round3(sent.as_secs_f64() * 1000.0),
            "rss_bytes_shape_up_to_date": baseline.rss_bytes,
            "rss_bytes_waiting": waiting.rss_bytes,
            "rss_bytes_per_request": rss_per_request,
            "rss_bytes_waiting_right_after_parking": parked_now.rss_bytes,
            "rss_bytes_per_request_right_after_parking": rss_per_request_parked_now,
            "rss_bytes_per_idle_connection": rss_per_connection,
            "peak_rss_bytes": waiting.peak_rss_bytes.max(parked_now.peak_rss_bytes),
            "open_fds_shape_up_to_date": baseline_fds,
            "open_fds_waiting": waiting_fds,
            "latency": latencies.summary(),
            "errors": errors.count,
            "error_messages": errors.first,
            "cpu_s_park": parked_now.cpu_s_since(&baseline),
            "server_threads_waiting": waiting.threads,
        }));
    }
    headline.insert("errors".into(), errors_total.into());
    Ok(scenario_json(
        headline,
        json!({
            "shape": format!("table=users&where={WAITING_WHERE}: empty until the insert, up to date"),
            "clients": points,
            "long_poll_timeout_ms": LONG_POLL_TIMEOUT_MS,
            "idle_log_park": IDLE_SWEEP,
            "rss_bytes_per_request": format!("(VmRSS with N live requests parked, each on its own keep-alive connection, counted by {PARKED_GAUGE}) - (VmRSS of the same process with the shape up to date and no live request), / N; each VmRSS read {} s after the state was reached, once the server's idle sweep (--idle-log-park {IDLE_SWEEP}) has returned the heap's free pages to the kernel", RELEASE_WAIT.as_secs()),
            "rss_bytes_per_request_right_after_parking": "the same with the VmRSS read as soon as the gauge counts N: it still holds what the N clients' sync freed",
            "rss_bytes_per_idle_connection": "measured first, on another fresh server: (VmRSS with N connections open that sent nothing, all accepted: N more descriptors) - (VmRSS before), / N; none for a server this run did not start",
            "server_threads_waiting": "the server's threads (/proc/<pid>/status) with the N requests parked",
            "latency": "then one single-row INSERT: from its acknowledged commit until each client has read the answer holding it",
        }),
        results,
    ))
}

/// What a connection that sent nothing costs a fresh server: RSS per connection with `n` of
/// them accepted (`None` for a server this run did not start: its memory is not known).
async fn idle_connections_rss(bench: &mut Bench, n: usize) -> Result<Option<u64>, Error> {
    let server = bench.server_with(&[]).await?;
    if server.pid.is_none() {
        bench.finish(server).await?;
        return Ok(None);
    }
    tokio::time::sleep(IDLE_WAIT).await;
    let before = server.sample()?;
    let base_fds = open_fds(&server)?;
    let address = server
        .url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut connections = Vec::with_capacity(n);
    for _ in 0..n {
        connections.push(tokio::net::TcpStream::connect(&address).await?);
    }
    let start = Instant::now();
    loop {
        let accepted = open_fds(&server)?.saturating_sub(base_fds);
        if accepted >= n {
            break;
        }
        if start.elapsed() > PARKED_TIMEOUT {
            let log = server
                .process
                .as_ref()
                .map(|p| p.log_tail())
                .unwrap_or_default();
            return Err(format!(
                "the server accepted {accepted} of {n} connections ({} descriptors before); its log:\n{log}",
                base_fds
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let open = server.sample()?;
    drop(connections);
    bench.finish(server).await?;
    Ok(Some(per(
        open.rss_bytes.saturating_sub(before.rss_bytes),
        n,
    )))
}

/// Waits until the server counts `n` parked live requests; returns its count, or `None` for
/// a server without the gauge (the requests were then only given time to arrive).
async fn wait_parked(http: &Pool, server: &Server, n: usize) -> Result<Option<f64>, Error> {
    let start = Instant::now();
    loop {
        let Some(count) = metric(http, server.url(), PARKED_GAUGE).await? else {
            return Ok(None);
        };
        if count >= n as f64 {
            return Ok(Some(count));
        }
        if start.elapsed() > PARKED_TIMEOUT {
            return Err(format!("the server holds {count} of {n} live requests").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
