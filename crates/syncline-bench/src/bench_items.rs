//! What the Postgres scenarios (`ingest`, `e2e`) share: the `bench_items` table, its row
//! generator, and the two Postgres baselines measured on it — a raw binary COPY drained without
//! decoding, and `pg_recvlogical` receiving a transaction into a file.

use std::fmt::Display;
use std::process::Command;
use std::time::{Duration, Instant};

use syncline_core::Lsn;
use syncline_pg::snapshot::SnapshotQuery;
use syncline_pg::wire::WireConnection;
use syncline_testkit::PgCluster;
use tokio_postgres::Client;

/// The table's definition.
pub const CREATE_TABLE: &str = "CREATE TABLE public.bench_items (id bigint PRIMARY KEY, org_id int, status smallint, qty int,
    price numeric(12,2), score float8, name text, descr text, created_at timestamptz, updated_at timestamp, flag bool)";

/// Bytes `pg_recvlogical` must at least write per row for its run to count.
const RECVLOGICAL_BYTES_PER_ROW_MIN: u64 = 100;

/// An `INSERT` of `bench_items` rows `first..=last` (numbers, or SQL such as `$1::int8`);
/// `descr` is ~65 characters.
pub fn insert_rows_sql(first: impl Display, last: impl Display) -> String {
    format!(
        "INSERT INTO public.bench_items SELECT g, (g % 1000)::int, (g % 5)::smallint, ((g * 7) % 10000)::int,
           ((g % 100000) / 100.0)::numeric(12,2), random(), 'item ' || g, md5(g::text) || md5((g + 1)::text) || ' x',
           timestamptz '2024-01-01 00:00+00' + g * interval '1 second', timestamp '2024-01-01' + g * interval '1 minute', g % 2 = 0
         FROM generate_series({first}, {last}) g"
    )
}

/// The table as one line, for a scenario's parameters.
pub fn table_parameter() -> String {
    CREATE_TABLE
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Creates `bench_items` with rows `1..=rows`, frozen and analysed.
pub async fn create(client: &Client, rows: i64) -> Result<(), tokio_postgres::Error> {
    client.batch_execute(CREATE_TABLE).await?;
    eprintln!("generating {rows} rows…");
    client.batch_execute(&insert_rows_sql(1, rows)).await?;
    client
        .batch_execute("VACUUM (FREEZE, ANALYZE) public.bench_items")
        .await
}

/// The smallest of `runs`.
pub fn best(runs: &[f64]) -> f64 {
    runs.iter().copied().fold(f64::INFINITY, f64::min)
}

/// `a / b` to three decimals.
pub fn ratio(a: f64, b: f64) -> f64 {
    (a / b * 1000.0).round() / 1000.0
}

/// The raw COPY baseline: the query's COPY on `conn`, every CopyData received and dropped.
pub async fn raw_copy(
    conn: &mut WireConnection,
    query: &SnapshotQuery,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut bytes = 0usize;
    drain_copy(conn, query, &mut |data| bytes += data.len()).await?;
    if bytes == 0 {
        return Err("the raw COPY returned no data".into());
    }
    Ok(start.elapsed())
}

/// Runs the query's COPY in a snapshot transaction on `conn`, handing every CopyData to `on_data`.
pub async fn drain_copy(
    conn: &mut WireConnection,
    query: &SnapshotQuery,
    on_data: &mut impl FnMut(&[u8]),
) -> Result<(), Box<dyn std::error::Error>> {
    conn.simple_query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await?;
    conn.start_copy_out(&query.copy_sql()).await?;
    while conn
        .read_copy_data(&mut |data| {
            on_data(data);
            Ok(())
        })
        .await?
    {}
    conn.simple_query("COMMIT").await?;
    Ok(())
}

/// The pg_recvlogical baseline: times `pg_recvlogical --plugin=pgoutput` receiving everything
/// on `slot` up to `end_lsn` into a file, which must hold at least `rows` rows' worth of bytes.
pub fn pg_recvlogical(
    cluster: &PgCluster,
    slot: &str,
    publication: &str,
    end_lsn: Lsn,
    rows: i64,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let out = tempfile::NamedTempFile::new()?;
    let start = Instant::now();
    let status = Command::new(cluster.bindir().join("pg_recvlogical"))
        .args([
            "-d",
            &cluster.connection_string("postgres"),
            "-S",
            slot,
            "--start",
            "--no-loop",
        ])
        .args([
            "--plugin=pgoutput",
            "-o",
            "proto_version=1",
            "-o",
            &format!("publication_names={publication}"),
        ])
        .arg(format!("--endpos={end_lsn}"))
        .arg("-f")
        .arg(out.path())
        .status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(format!("pg_recvlogical failed: {status}").into());
    }
    let written = std::fs::metadata(out.path())?.len();
    if written < u64::try_from(rows)? * RECVLOGICAL_BYTES_PER_ROW_MIN {
        return Err(format!("pg_recvlogical wrote only {written} bytes").into());
    }
    Ok(elapsed)
}
