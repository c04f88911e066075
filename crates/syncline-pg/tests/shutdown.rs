//! Postgres shut down (smart, fast, immediate) and restarted in place while rows are committed:
//! a `ResumingStream` reconnects every time, and its consumer ends with every committed row
//! exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use syncline_pg::publication::{add_table, ensure_publication};
use syncline_pg::replication::{ensure_slot, PgOutput, ResumingStream, StreamEvent, StreamOptions};
use syncline_pg::ConnConfig;
use syncline_testkit::{PgCluster, ShutdownMode};
use tokio::time::Instant;
use tokio_postgres::Client;

const PUBLICATION: &str = "shutdown_pub";
const SLOT: &str = "shutdown_slot";
/// The id of the row the writer commits last; the consumer stops when it has it.
const MARKER: i32 = -1;
/// Rows per transaction.
const ROWS_PER_TXN: i32 = 5;
/// Transactions per writer session: a smart shutdown waits for every session to end, so the
/// writer reconnects often.
const TXNS_PER_SESSION: u32 = 5;
/// Transactions the writer commits at least, whenever the restarts are over.
const TXNS_MIN: i32 = 200;
/// How long the whole exchange may take.
const TEST_TIMEOUT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shutdown_mode_is_survived_without_loss_or_duplication() {
    let mut cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    {
        // Dropped before the restarts: a smart shutdown would wait for this session.
        let client = syncline_pg::connect(&config).await.unwrap();
        // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
        client
            .batch_execute("SET search_path = public")
            .await
            .unwrap();
        client
            .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
            .await
            .unwrap();
        ensure_publication(&client, PUBLICATION).await.unwrap();
        add_table(&client, PUBLICATION, "public", "t", false)
            .await
            .unwrap();
    }
    ensure_slot(&config, SLOT).await.unwrap();
    let mut stream = ResumingStream::start(config.clone(), StreamOptions::new(SLOT, PUBLICATION))
        .await
        .unwrap();

    let restarts_done = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_rows(config.clone(), restarts_done.clone()));
    let controller = tokio::task::spawn_blocking({
        let restarts_done = restarts_done.clone();
        move || {
            for mode in [
                ShutdownMode::Fast,
                ShutdownMode::Smart,
                ShutdownMode::Immediate,
            ] {
                std::thread::sleep(Duration::from_millis(500));
                cluster.stop(mode);
                std::thread::sleep(Duration::from_millis(300));
                cluster.restart();
            }
            restarts_done.store(true, Ordering::SeqCst);
            cluster
        }
    });

    let committed = consume_until_marker(&mut stream).await;
    let cluster = controller.await.unwrap();
    writer.await.unwrap();
    assert!(
        stream.reconnects() >= 3,
        "reconnects {}",
        stream.reconnects()
    );
    let client = cluster.connect("postgres").await;
    let in_table: BTreeSet<i32> = client
        .query("SELECT id FROM t WHERE id <> $1", &[&MARKER])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let duplicated: Vec<_> = committed.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        duplicated.is_empty(),
        "rows delivered twice: {duplicated:?}"
    );
    let delivered: BTreeSet<i32> = committed.keys().copied().collect();
    assert_eq!(
        in_table.difference(&delivered).collect::<Vec<_>>(),
        Vec::<&i32>::new(),
        "committed rows never delivered"
    );
    assert_eq!(
        delivered.difference(&in_table).collect::<Vec<_>>(),
        Vec::<&i32>::new(),
        "delivered rows that are not in the table"
    );
    println!(
        "{} rows, reconnects {}",
        in_table.len(),
        stream.reconnects()
    );
}

/// Reads the stream as Syncline's pipeline does (a tick beside `next()`; positions acknowledged
/// after commits, and the server's position when nothing is open) until the marker row
/// arrives. Returns how often each row of a committed transaction was delivered.
async fn consume_until_marker(stream: &mut ResumingStream) -> BTreeMap<i32, u32> {
    let deadline = Instant::now() + TEST_TIMEOUT;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut committed: BTreeMap<i32, u32> = BTreeMap::new();
    let mut open: Vec<i32> = Vec::new();
    let mut in_txn = false;
    let mut commits = 0i64;
    loop {
        assert!(Instant::now() < deadline, "the marker never arrived");
        tokio::select! {
            _ = tick.tick() => {
                if !in_txn {
                    stream.set_flushed(stream.server_wal_end());
                    // Fails while reconnecting; the stream itself notices.
                    let _ = stream.send_status(true).await;
                }
            }
            event = stream.next() => match event.expect("the stream failed for good") {
                StreamEvent::Interrupted { .. } => {
                    open.clear();
                    in_txn = false;
                }
                StreamEvent::Message(msg) => match msg.message {
                    PgOutput::Begin { .. } => in_txn = true,
                    PgOutput::Insert { new, .. } => {
                        let id = std::str::from_utf8(new.0[0].as_text().unwrap())
                            .unwrap()
                            .parse()
                            .unwrap();
                        open.push(id);
                    }
                    PgOutput::Commit { end_lsn, .. } => {
                        in_txn = false;
                        commits += 1;
                        let marker = open.contains(&MARKER);
                        for id in open.drain(..).filter(|id| *id != MARKER) {
                            *committed.entry(id).or_default() += 1;
                        }
                        if marker {
                            return committed;
                        }
                        // Acknowledge only now and then, so reconnects replay transactions
                        // already delivered.
                        if commits % 3 == 0 {
                            stream.set_flushed(end_lsn);
                        }
                    }
                    _ => {}
                },
            }
        }
    }
}

/// Commits small transactions on short sessions until the restarts are over and at least
/// [`TXNS_MIN`] were attempted, then the marker. Failures (the server going away mid-statement,
/// refusing sessions while it shuts down or starts) are retried on a new session; whether a
/// failed transaction committed is for the final `SELECT` to say.
async fn write_rows(config: ConnConfig, restarts_done: Arc<AtomicBool>) {
    let mut session: Option<(Client, u32)> = None;
    let mut txn = 0;
    while !(restarts_done.load(Ordering::SeqCst) && txn >= TXNS_MIN) {
        let Some((client, used)) = session.as_mut() else {
            match syncline_pg::connect(&config).await {
                Ok(client) => session = Some((client, 0)),
                Err(e) => {
                    assert!(e.is_transient(), "{e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            continue;
        };
        let first = txn * ROWS_PER_TXN;
        txn += 1;
        let inserted = client
            .execute(
                "INSERT INTO public.t SELECT generate_series($1::int, $2::int)",
                &[&first, &(first + ROWS_PER_TXN - 1)],
            )
            .await;
        *used += 1;
        if inserted.is_err() || *used >= TXNS_PER_SESSION {
            session = None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    loop {
        let inserted = match syncline_pg::connect(&config).await {
            Ok(client) => client
                .execute("INSERT INTO public.t VALUES ($1)", &[&MARKER])
                .await
                .map_err(syncline_pg::PgError::from),
            Err(e) => Err(e),
        };
        match inserted {
            Ok(_) => return,
            Err(e) => {
                assert!(e.is_transient(), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
