//! `ingest`: getting data out of Postgres.
//!
//! - Snapshot: Syncline's path (binary COPY → decode → Postgres text → one Electric JSON line
//!   per row) against the same COPY drained without decoding, on a 1,000,000-row table.
//! - Replication: one 100,000-row INSERT transaction decoded from the replication stream
//!   against `pg_recvlogical --plugin=pgoutput` receiving the same transaction into a file.
//!
//! Each side runs `ROUNDS` times, interleaved, and the best round of each is compared: the
//! best is the run least disturbed by other work on a shared machine.
//!
//! The benchmark's session commits with `synchronous_commit = on` (free: the private cluster
//! runs with fsync off). A walsender decodes only flushed WAL; with the cluster's
//! `synchronous_commit = off` the INSERT returned before its commit record was flushed, so the
//! consumer started first (always Syncline's) waited up to `wal_writer_delay` for the WAL
//! writer, and pg_recvlogical, started later, did not.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use syncline_pg::catalog::load_relation;
use syncline_pg::publication::{add_table, ensure_publication};
use syncline_pg::replication::{
    drop_slot, ensure_slot, PgOutput, ReplicationStream, StreamOptions,
};
use syncline_pg::snapshot::{RowEncoder, Snapshot, SnapshotQuery};
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;
use tokio_postgres::Client;

use crate::bench_items::{
    self, best, drain_copy, insert_rows_sql, pg_recvlogical, ratio, raw_copy,
};
use crate::BenchResult;

/// Rows in the snapshot table.
const SNAPSHOT_ROWS: i64 = 1_000_000;
/// Rows in the replicated transaction.
const TXN_ROWS: i64 = 100_000;
/// Rounds per measurement; the best of each side is compared.
const ROUNDS: usize = 5;
/// JSON bytes buffered before the sink drops them (the benchmark measures producing lines).
const SINK_BYTES_MAX: usize = 1 << 20;
const PUBLICATION: &str = "bench_pub";

/// Runs the scenario.
pub fn run() -> BenchResult {
    crate::run_on_workers(run_async())
}

async fn run_async() -> BenchResult {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await?;
    let config = ConnConfig::parse(&cluster.connection_string("postgres"))?;
    let client = syncline_pg::connect(&config).await?;
    client.batch_execute("SET synchronous_commit = on").await?;
    bench_items::create(&client, SNAPSHOT_ROWS).await?;
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);

    let relation = load_relation(&client, "public", "bench_items")
        .await?
        .ok_or("bench_items missing")?;
    let query = SnapshotQuery::new(&relation, None, None)?;
    let mut conn = WireConnection::connect(&config, "syncline-bench", Mode::Query).await?;
    // Warm the caches once so neither side pays for the first read of the table.
    raw_copy(&mut conn, &query).await?;
    let (mut raw_runs, mut snapshot_runs, mut tokio_postgres_runs) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut json_bytes = 0;
    for round in 0..ROUNDS {
        let raw = raw_copy(&mut conn, &query).await?;
        let (snap, bytes) = snapshot(&mut conn, &query).await?;
        let other = tokio_postgres_copy(&client, &query).await?;
        eprintln!("snapshot round {round}: raw COPY {raw:?}, syncline {snap:?}, tokio-postgres drain {other:?}");
        raw_runs.push(raw.as_secs_f64());
        snapshot_runs.push(snap.as_secs_f64());
        tokio_postgres_runs.push(other.as_secs_f64());
        json_bytes = bytes;
    }
    let decode_only = decode_only(&mut conn, &query).await?;
    eprintln!("decode and encode alone, from memory: {decode_only:?}");
    let raw_copy_rows_per_s = SNAPSHOT_ROWS as f64 / best(&raw_runs);
    let snapshot_rows_per_s = SNAPSHOT_ROWS as f64 / best(&snapshot_runs);
    let tokio_postgres_copy_rows_per_s = SNAPSHOT_ROWS as f64 / best(&tokio_postgres_runs);

    ensure_publication(&client, PUBLICATION).await?;
    add_table(&client, PUBLICATION, "public", "bench_items", false).await?;
    let (mut ours_runs, mut recv_runs) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let (ours, theirs) =
            replication_round(&cluster, &config, &client, i64::try_from(round)?).await?;
        eprintln!("replication round {round}: syncline {ours:?}, pg_recvlogical {theirs:?}");
        ours_runs.push(ours.as_secs_f64());
        recv_runs.push(theirs.as_secs_f64());
    }
    let replication_rows_per_s = TXN_ROWS as f64 / best(&ours_runs);
    let pg_recvlogical_rows_per_s = TXN_ROWS as f64 / best(&recv_runs);

    Ok(json!({
        "parameters": {
            "snapshot_rows": SNAPSHOT_ROWS,
            "txn_rows": TXN_ROWS,
            "rounds": ROUNDS,
            "statistic": "best of rounds, each side",
            "table": bench_items::table_parameter(),
            "postgres_version": version,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "snapshot_json_bytes": json_bytes,
            "synchronous_commit": "on (the INSERT is flushed before either consumer starts)",
        },
        "figures": {
            "snapshot_rows_per_s": snapshot_rows_per_s.round(),
            "raw_copy_rows_per_s": raw_copy_rows_per_s.round(),
            "snapshot_ratio_vs_raw_copy": ratio(snapshot_rows_per_s, raw_copy_rows_per_s),
            "tokio_postgres_copy_rows_per_s": tokio_postgres_copy_rows_per_s.round(),
            "snapshot_decode_only_rows_per_s": (SNAPSHOT_ROWS as f64 / decode_only.as_secs_f64()).round(),
            "snapshot_ratio_vs_tokio_postgres_copy": ratio(snapshot_rows_per_s, tokio_postgres_copy_rows_per_s),
            "replication_rows_per_s": replication_rows_per_s.round(),
            "pg_recvlogical_rows_per_s": pg_recvlogical_rows_per_s.round(),
            "replication_ratio_vs_pg_recvlogical": ratio(replication_rows_per_s, pg_recvlogical_rows_per_s),
        },
        "baselines": {
            "raw_copy": "COPY (SELECT every column FROM bench_items) TO STDOUT (FORMAT binary) on the same connection and reader as the snapshot, every CopyData received and dropped without decoding",
            "tokio_postgres_copy": "the same COPY drained by tokio-postgres (a second, slower reader, for reference)",
            "pg_recvlogical": "pg_recvlogical --plugin=pgoutput -o proto_version=1 --start --endpos=<commit end> -f <file>",
        },
        "goals": { "snapshot_ratio_vs_raw_copy": ">= 0.8", "replication_ratio_vs_pg_recvlogical": ">= 0.8" },
        "runs_s": {
            "raw_copy": raw_runs, "snapshot": snapshot_runs, "tokio_postgres_copy": tokio_postgres_runs, "replication": ours_runs, "pg_recvlogical": recv_runs,
        },
    }))
}

/// For reference: Syncline's decode and JSON encoding alone, on the COPY stream held in memory
/// (no Postgres working at the same time): the CPU cost of the snapshot path per row.
async fn decode_only(
    conn: &mut WireConnection,
    query: &SnapshotQuery,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let mut stream = Vec::new();
    drain_copy(conn, query, &mut |data| stream.extend_from_slice(data)).await?;
    let start = Instant::now();
    let mut encoder = RowEncoder::for_query(query);
    let mut parser = syncline_pg::snapshot::CopyParser::new();
    let mut sink = Vec::with_capacity(SINK_BYTES_MAX + 4096);
    let mut rows = 0;
    for piece in stream.chunks(64 * 1024) {
        parser.feed(piece, &mut |row| {
            rows += 1;
            encoder.encode(&row, &mut sink)?;
            sink.push(b'\n');
            if sink.len() >= SINK_BYTES_MAX {
                sink.clear();
            }
            Ok(())
        })?;
    }
    parser.finish()?;
    assert_eq!(rows, SNAPSHOT_ROWS);
    Ok(start.elapsed())
}

/// For reference: the same COPY drained through tokio-postgres.
async fn tokio_postgres_copy(
    client: &Client,
    query: &SnapshotQuery,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut stream = std::pin::pin!(client.copy_out(&query.copy_sql()).await?);
    let mut bytes = 0usize;
    while let Some(chunk) = stream.next().await {
        bytes += chunk?.len();
    }
    assert!(bytes > 0);
    Ok(start.elapsed())
}

/// Syncline's snapshot path: begin (snapshot + LSN), COPY, decode, one JSON line per row.
async fn snapshot(
    conn: &mut WireConnection,
    query: &SnapshotQuery,
) -> Result<(Duration, usize), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut encoder = RowEncoder::for_query(query);
    let mut snapshot = Snapshot::begin(conn, query).await?;
    let mut sink = Vec::with_capacity(SINK_BYTES_MAX + 4096);
    let mut total = 0usize;
    while snapshot
        .next_chunk(&mut |row| {
            encoder.encode(&row, &mut sink)?;
            sink.push(b'\n');
            if sink.len() >= SINK_BYTES_MAX {
                total += sink.len();
                sink.clear();
            }
            Ok(())
        })
        .await?
    {}
    assert_eq!(snapshot.rows(), SNAPSHOT_ROWS as u64);
    Ok((start.elapsed(), total + sink.len()))
}

/// One round: two fresh slots, one 100,000-row transaction, each consumer timed on it.
async fn replication_round(
    cluster: &PgCluster,
    config: &ConnConfig,
    client: &Client,
    round: i64,
) -> Result<(Duration, Duration), Box<dyn std::error::Error>> {
    let (ours, theirs) = (
        format!("bench_syncline_{round}"),
        format!("bench_recvlogical_{round}"),
    );
    ensure_slot(config, &ours).await?;
    ensure_slot(config, &theirs).await?;
    let first = SNAPSHOT_ROWS + 1 + round * TXN_ROWS;
    client
        .batch_execute(&insert_rows_sql(first, first + TXN_ROWS - 1))
        .await?;

    let start = Instant::now();
    let mut stream =
        ReplicationStream::start(config, &StreamOptions::new(&ours, PUBLICATION)).await?;
    let (mut inserts, mut value_bytes) = (0i64, 0usize);
    let end_lsn = loop {
        match stream.next().await?.message {
            PgOutput::Insert { new, .. } => {
                inserts += 1;
                value_bytes += new
                    .0
                    .iter()
                    .filter_map(|v| v.as_text())
                    .map(<[u8]>::len)
                    .sum::<usize>();
            }
            PgOutput::Commit { end_lsn, .. } => break end_lsn,
            _ => {}
        }
    };
    let ours_time = start.elapsed();
    assert_eq!(inserts, TXN_ROWS);
    assert!(value_bytes > 0);
    drop(stream);

    let theirs_time = pg_recvlogical(cluster, &theirs, PUBLICATION, end_lsn, TXN_ROWS)?;
    drop_slot(config, &ours).await?;
    drop_slot(config, &theirs).await?;
    client.batch_execute("CHECKPOINT").await?;
    Ok((ours_time, theirs_time))
}
