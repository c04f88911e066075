//! A 1,000,000-row transaction streams through with bounded memory: changes are delivered one
//! by one, never collected whole. Its own test binary, so the process's peak memory is its own.

use std::time::Duration;

use syncline_pg::publication::{add_table, ensure_publication};
use syncline_pg::replication::{ensure_slot, PgOutput, ReplicationStream, StreamOptions};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;

const ROWS: i64 = 1_000_000;
/// Peak memory the stream may add while decoding; the transaction's changes are ~100 MB.
const PEAK_GROWTH_BYTES_MAX: u64 = 40 << 20;

/// The process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn million_row_transaction_decodes_in_bounded_memory() {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    client
        .batch_execute("CREATE TABLE big (id bigint PRIMARY KEY, payload text)")
        .await
        .unwrap();
    ensure_publication(&client, "pub").await.unwrap();
    add_table(&client, "pub", "public", "big", false)
        .await
        .unwrap();
    ensure_slot(&config, "slot_big").await.unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO big SELECT g, repeat(md5(g::text), 2) FROM generate_series(1, {ROWS}) g"
        ))
        .await
        .unwrap();
    let before = peak_rss_bytes();

    let mut stream = ReplicationStream::start(&config, &StreamOptions::new("slot_big", "pub"))
        .await
        .unwrap();
    let (mut inserts, mut bytes, mut next_id) = (0i64, 0u64, 1i64);
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(120), stream.next())
            .await
            .expect("stream stalled")
            .unwrap();
        match msg.message {
            PgOutput::Insert { new, .. } => {
                let id: i64 = std::str::from_utf8(new.0[0].as_text().unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(id, next_id, "changes arrive in order, each once");
                next_id += 1;
                inserts += 1;
                bytes += new.0[1].as_text().unwrap().len() as u64;
            }
            PgOutput::Commit { .. } => break,
            _ => {}
        }
    }
    let growth = peak_rss_bytes().saturating_sub(before);
    assert_eq!(inserts, ROWS);
    assert_eq!(bytes, ROWS as u64 * 64);
    assert!(
        growth < PEAK_GROWTH_BYTES_MAX,
        "peak memory grew by {} MiB while streaming",
        growth >> 20
    );
    println!(
        "streamed {ROWS} rows; peak memory grew by {} MiB",
        growth >> 20
    );
}
