//! Logical replication against a private cluster: every pgoutput message kind, flush positions
//! set by the caller only, and resuming after the walsender is killed (also while a replayed
//! transaction is being skipped).

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use syncline_core::{Lsn, ReplicaIdentity, Tuple, Value};
use syncline_pg::publication::{add_table, ensure_publication};
use syncline_pg::replication::{
    ensure_slot, OldRow, PgOutput, ReplicationStream, ResumingStream, StreamEvent, StreamOptions,
    StreamStatus, XLogMessage,
};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;
use tokio_postgres::Client;

const PUBLICATION: &str = "syncline_test_pub";

struct Fixture {
    cluster: PgCluster,
    client: Client,
    config: ConnConfig,
}

async fn fixture(tables: &str, slot: &str) -> Fixture {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    client.batch_execute(tables).await.unwrap();
    ensure_publication(&client, PUBLICATION).await.unwrap();
    let info = ensure_slot(&config, slot).await.unwrap();
    assert!(info.created);
    Fixture {
        cluster,
        client,
        config,
    }
}

fn text(s: &str) -> Value {
    Value::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn row(values: &[Option<&str>]) -> Tuple {
    Tuple(values.iter().map(|v| v.map_or(Value::Null, text)).collect())
}

/// Reads messages until `commits` transactions have ended; returns everything but Begin/Commit.
async fn changes(stream: &mut ReplicationStream, commits: usize) -> Vec<PgOutput> {
    let mut out = Vec::new();
    let mut seen = 0;
    while seen < commits {
        let msg = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("replication timed out")
            .unwrap();
        match msg.message {
            PgOutput::Begin { .. } => {}
            PgOutput::Commit { .. } => seen += 1,
            other => out.push(other),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decodes_every_message_kind() {
    let f = fixture(
        "CREATE TYPE color AS ENUM ('red', 'blue');
         CREATE TABLE items (id int PRIMARY KEY, name text, shade color, big text);
         CREATE TABLE other (k text PRIMARY KEY);",
        "slot_kinds",
    )
    .await;
    add_table(&f.client, PUBLICATION, "public", "items", false)
        .await
        .unwrap();
    add_table(&f.client, PUBLICATION, "public", "other", false)
        .await
        .unwrap();
    let mut stream =
        ReplicationStream::start(&f.config, &StreamOptions::new("slot_kinds", PUBLICATION))
            .await
            .unwrap();

    // A value too large and too random to compress is TOASTed out of line.
    let big: String = {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        (0..6000)
            .map(|_| char::from(rng.gen_range(b'!'..=b'~')))
            .collect()
    };
    let c = &f.client;
    c.batch_execute("INSERT INTO items VALUES (1, 'one', 'red', NULL), (2, NULL, 'blue', NULL)")
        .await
        .unwrap();
    c.execute("UPDATE items SET big = $1 WHERE id = 1", &[&big])
        .await
        .unwrap();
    c.batch_execute("UPDATE items SET name = 'uno' WHERE id = 1")
        .await
        .unwrap();
    c.batch_execute("UPDATE items SET id = 10 WHERE id = 2")
        .await
        .unwrap();
    c.batch_execute("DELETE FROM items WHERE id = 10")
        .await
        .unwrap();
    c.batch_execute("ALTER TABLE items REPLICA IDENTITY FULL")
        .await
        .unwrap();
    c.batch_execute("UPDATE items SET shade = 'blue' WHERE id = 1")
        .await
        .unwrap();
    c.batch_execute("DELETE FROM items WHERE id = 1")
        .await
        .unwrap();
    c.batch_execute("INSERT INTO other VALUES ('a'); TRUNCATE items, other RESTART IDENTITY")
        .await
        .unwrap();
    c.batch_execute(
        "SELECT pg_replication_origin_create('upstream');
         SELECT pg_replication_origin_session_setup('upstream');
         BEGIN; SELECT pg_replication_origin_xact_setup('0/AB', now()); INSERT INTO other VALUES ('from upstream'); COMMIT;
         SELECT pg_replication_origin_session_reset();",
    )
    .await
    .unwrap();

    let got = changes(&mut stream, 9).await;
    // Relation and Type messages come before a table's first change in each transaction that
    // follows a schema or cache change; check them apart from the data.
    let relations: Vec<_> = got
        .iter()
        .filter_map(|m| {
            if let PgOutput::Relation(r) = m {
                Some(r.clone())
            } else {
                None
            }
        })
        .collect();
    let color_oid = got
        .iter()
        .find_map(|m| match m {
            PgOutput::Type { oid, schema, name } if schema == "public" && name == "color" => {
                Some(*oid)
            }
            _ => None,
        })
        .expect("Type message for the enum");
    let items = relations
        .iter()
        .find(|r| r.name == "items")
        .expect("items relation");
    let cols: Vec<(&str, bool)> = items
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.is_key))
        .collect();
    assert_eq!(
        cols,
        [
            ("id", true),
            ("name", false),
            ("shade", false),
            ("big", false)
        ]
    );
    assert_eq!(
        (items.replica_identity, items.columns[2].type_oid),
        (ReplicaIdentity::Default, color_oid)
    );
    assert!(relations
        .iter()
        .any(|r| r.name == "items" && r.replica_identity == ReplicaIdentity::Full));
    let items_oid = items.oid;
    let other_oid = relations
        .iter()
        .find(|r| r.name == "other")
        .expect("other relation")
        .oid;

    let data: Vec<PgOutput> = got
        .into_iter()
        .filter(|m| !matches!(m, PgOutput::Relation(_) | PgOutput::Type { .. }))
        .collect();
    let expected = vec![
        PgOutput::Insert {
            relation: items_oid,
            new: row(&[Some("1"), Some("one"), Some("red"), None]),
        },
        PgOutput::Insert {
            relation: items_oid,
            new: row(&[Some("2"), None, Some("blue"), None]),
        },
        PgOutput::Update {
            relation: items_oid,
            old: None,
            new: row(&[Some("1"), Some("one"), Some("red"), Some(&big)]),
        },
        // The TOASTed column was not touched: pgoutput sends the unchanged-TOAST marker.
        PgOutput::Update {
            relation: items_oid,
            old: None,
            new: Tuple(vec![
                text("1"),
                text("uno"),
                text("red"),
                Value::UnchangedToast,
            ]),
        },
        PgOutput::Update {
            relation: items_oid,
            old: Some(OldRow::Key(row(&[Some("2"), None, None, None]))),
            new: row(&[Some("10"), None, Some("blue"), None]),
        },
        PgOutput::Delete {
            relation: items_oid,
            old: OldRow::Key(row(&[Some("10"), None, None, None])),
        },
        PgOutput::Update {
            relation: items_oid,
            old: Some(OldRow::Full(row(&[
                Some("1"),
                Some("uno"),
                Some("red"),
                Some(&big),
            ]))),
            new: Tuple(vec![
                text("1"),
                text("uno"),
                text("blue"),
                Value::UnchangedToast,
            ]),
        },
        PgOutput::Delete {
            relation: items_oid,
            old: OldRow::Full(row(&[Some("1"), Some("uno"), Some("blue"), Some(&big)])),
        },
        PgOutput::Insert {
            relation: other_oid,
            new: row(&[Some("a")]),
        },
        PgOutput::Truncate {
            relations: vec![items_oid, other_oid],
            cascade: false,
            restart_identity: true,
        },
        PgOutput::Origin {
            commit_lsn: Lsn(0xAB),
            name: "upstream".into(),
        },
        PgOutput::Insert {
            relation: other_oid,
            new: row(&[Some("from upstream")]),
        },
    ];
    assert_eq!(data.len(), expected.len(), "{data:#?}");
    for (got, want) in data.iter().zip(&expected) {
        assert_eq!(got, want);
    }
    drop(f.cluster);
}

async fn confirmed_flush(client: &Client, slot: &str) -> Lsn {
    let row = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_position_moves_only_when_the_caller_says() {
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY)", "slot_flush").await;
    add_table(&f.client, PUBLICATION, "public", "t", false)
        .await
        .unwrap();
    let start = confirmed_flush(&f.client, "slot_flush").await;
    let mut options = StreamOptions::new("slot_flush", PUBLICATION);
    options.status_interval = Duration::from_millis(50);
    let mut stream = ReplicationStream::start(&f.config, &options).await.unwrap();
    f.client
        .batch_execute("INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    f.client
        .batch_execute("INSERT INTO t VALUES (2)")
        .await
        .unwrap();
    let mut ends = Vec::new();
    while ends.len() < 2 {
        let msg = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("replication timed out");
        if let PgOutput::Commit { end_lsn, .. } = msg.unwrap().message {
            ends.push(end_lsn);
        }
    }
    // Received and answered keepalives, status sent many times: the slot must not move.
    for _ in 0..5 {
        stream.send_status(false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(confirmed_flush(&f.client, "slot_flush").await, start);
    stream.set_flushed(ends[0]);
    stream.send_status(true).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while confirmed_flush(&f.client, "slot_flush").await != ends[0] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "slot never reached the declared position"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A restart resumes right after the declared position: only the second transaction comes back.
    drop(stream);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = loop {
        match ReplicationStream::start(&f.config, &options).await {
            Ok(s) => break s,
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    };
    let replayed = changes(&mut again, 1).await;
    assert!(
        matches!(replayed.last(), Some(PgOutput::Insert { new, .. }) if *new == row(&[Some("2")])),
        "replayed {replayed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumes_after_walsender_is_killed_without_loss_or_duplication() {
    const TXNS: i32 = 400;
    // Mostly small transactions, with a large one now and then so kills land mid-transaction.
    let rows_in = |txn: i32| if txn % 20 == 0 { 3000 } else { 5 };
    let total_rows: i32 = (0..TXNS).map(rows_in).sum();
    let f = fixture(
        "CREATE TABLE t (id int PRIMARY KEY, txn int)",
        "slot_resume",
    )
    .await;
    add_table(&f.client, PUBLICATION, "public", "t", false)
        .await
        .unwrap();
    let mut stream = ResumingStream::start(
        f.config.clone(),
        StreamOptions::new("slot_resume", PUBLICATION),
    )
    .await
    .unwrap();

    let writer_config = f.config.clone();
    let writer = tokio::spawn(async move {
        let c = syncline_pg::connect(&writer_config).await.unwrap();
        c.batch_execute("SET search_path = public").await.unwrap();
        let mut first = 0;
        for txn in 0..TXNS {
            let last = first + rows_in(txn) - 1;
            c.execute(
                "INSERT INTO t SELECT g, $1 FROM generate_series($2::int, $3::int) g",
                &[&txn, &first, &last],
            )
            .await
            .unwrap();
            first = last + 1;
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    });
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let killer_config = f.config.clone();
    let killer_writing = writing.clone();
    let killer = tokio::spawn(async move {
        let c = syncline_pg::connect(&killer_config).await.unwrap();
        c.batch_execute("SET search_path = public").await.unwrap();
        let mut kills = 0;
        // Bounded, so the stream always gets to finish; spaced so it makes progress in between.
        while killer_writing.load(std::sync::atomic::Ordering::Relaxed) && kills < 8 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let n: i64 = c
                .query_one(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication WHERE application_name = 'syncline'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            kills += n;
        }
        kills
    });

    // Rows of committed transactions, counted per id; the open transaction's rows aside.
    let mut committed: BTreeMap<i32, u32> = BTreeMap::new();
    let mut open: Vec<i32> = Vec::new();
    let mut interrupted = 0;
    let mut commits = 0;
    while commits < TXNS {
        match tokio::time::timeout(Duration::from_secs(60), stream.next())
            .await
            .expect("stream stalled")
            .unwrap()
        {
            StreamEvent::Interrupted { .. } => {
                interrupted += 1;
                open.clear();
            }
            StreamEvent::Message(msg) => match msg.message {
                PgOutput::Insert { new, .. } => {
                    let id = std::str::from_utf8(new.0[0].as_text().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    open.push(id);
                }
                PgOutput::Commit { end_lsn, .. } => {
                    commits += 1;
                    for id in open.drain(..) {
                        *committed.entry(id).or_default() += 1;
                    }
                    // Acknowledge only now and then, so reconnects replay delivered transactions
                    // that the stream must skip.
                    if commits % 7 == 0 {
                        stream.set_flushed(end_lsn);
                    }
                }
                _ => {}
            },
        }
    }
    writer.await.unwrap();
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    let kills = killer.await.unwrap();
    assert!(
        kills >= 3 && stream.reconnects() >= 3,
        "kills {kills}, reconnects {}",
        stream.reconnects()
    );
    let duplicated: Vec<_> = committed.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        duplicated.is_empty(),
        "rows delivered more than once: {duplicated:?}"
    );
    assert_eq!(
        committed.len(),
        usize::try_from(total_rows).unwrap(),
        "rows lost"
    );
    println!(
        "kills {kills}, reconnects {}, interrupted transactions {interrupted}",
        stream.reconnects()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_while_skipping_a_replay_does_not_swallow_the_next_transaction() {
    // Large, so its replay is still being skipped when the connection is cut.
    const ROWS: i32 = 300_000;
    let f = fixture("CREATE TABLE t (id int PRIMARY KEY)", "slot_skip").await;
    add_table(&f.client, PUBLICATION, "public", "t", false)
        .await
        .unwrap();
    let mut stream = ResumingStream::start(
        f.config.clone(),
        StreamOptions::new("slot_skip", PUBLICATION),
    )
    .await
    .unwrap();
    let kill_walsender = || async {
        f.client
            .batch_execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = 'syncline'",
            )
            .await
            .unwrap();
    };
    f.client
        .execute("INSERT INTO t SELECT generate_series(1, $1)", &[&ROWS])
        .await
        .unwrap();
    let big_end = loop {
        let event = tokio::time::timeout(Duration::from_secs(120), stream.next())
            .await
            .expect("replication timed out")
            .unwrap();
        if let StreamEvent::Message(XLogMessage {
            message: PgOutput::Commit { end_lsn, .. },
            ..
        }) = event
        {
            break end_lsn;
        }
    };

    // Not acknowledged: after the cut, the transaction is replayed, and skipped.
    kill_walsender().await;
    let skipped = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
    assert!(skipped.is_err(), "delivered again: {skipped:?}");
    assert_eq!(stream.status(), StreamStatus::Connected);
    // Acknowledged mid-replay, then cut again: the next connection starts after it.
    stream.set_flushed(big_end);
    stream.send_status(true).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while confirmed_flush(&f.client, "slot_skip").await != big_end {
        assert!(tokio::time::Instant::now() < deadline, "never acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill_walsender().await;
    f.client
        .batch_execute("INSERT INTO t VALUES (-1)")
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("the transaction after the replay never came")
            .unwrap();
        match event {
            StreamEvent::Message(XLogMessage {
                message:
                    message @ (PgOutput::Begin { .. }
                    | PgOutput::Insert { .. }
                    | PgOutput::Commit { .. }),
                ..
            }) => got.push(message),
            StreamEvent::Message(_) => {}
            StreamEvent::Interrupted { .. } => panic!("nothing was open"),
        }
    }
    assert!(
        matches!(&got[1], PgOutput::Insert { new, .. } if *new == row(&[Some("-1")])),
        "{got:?}"
    );
    assert_eq!(stream.reconnects(), 2);
}
