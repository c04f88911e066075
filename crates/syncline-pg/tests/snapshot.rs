//! Snapshots end to end: the JSON lines hold exactly the rows `SELECT … WHERE` returns, with
//! Electric's keys, and the recorded MVCC snapshot tells which transactions the rows include.

use std::collections::BTreeMap;

use serde_json::Value as Json;
use syncline_pg::catalog::load_relation;
use syncline_pg::snapshot::{RowEncoder, Snapshot, SnapshotQuery};
use syncline_pg::wire::{Mode, WireConnection};
use syncline_pg::ConnConfig;
use syncline_testkit::PgCluster;
use tokio_postgres::Client;

async fn setup() -> (PgCluster, Client, ConnConfig) {
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let config = ConnConfig::parse(&cluster.connection_string("postgres")).unwrap();
    let client = syncline_pg::connect(&config).await.unwrap();
    // The tests name their tables unqualified; Syncline's sessions search pg_catalog first.
    client
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    (cluster, client, config)
}

/// Runs the snapshot and returns its lines parsed, keyed by the returned key.
async fn snapshot_lines(config: &ConnConfig, query: &SnapshotQuery) -> BTreeMap<String, Json> {
    let mut encoder = RowEncoder::for_query(query);
    let mut conn = WireConnection::connect(config, "snapshot-test", Mode::Query)
        .await
        .unwrap();
    let mut snapshot = Snapshot::begin(&mut conn, query).await.unwrap();
    let mut lines = BTreeMap::new();
    let mut line = Vec::new();
    while snapshot
        .next_chunk(&mut |row| {
            line.clear();
            let key = String::from_utf8(encoder.encode(&row, &mut line)?.to_vec()).unwrap();
            let json: Json = serde_json::from_slice(&line).expect("valid JSON line");
            assert_eq!(
                json["key"],
                Json::String(key.clone()),
                "line carries the returned key"
            );
            lines.insert(key, json);
            Ok(())
        })
        .await
        .unwrap()
    {}
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_hold_exactly_the_matching_rows() {
    let (_cluster, client, config) = setup().await;
    client
        .batch_execute(
            "CREATE TABLE items (org text, id int, title text, done bool, tags text[], meta jsonb, at timestamptz, PRIMARY KEY (org, id));
             INSERT INTO items SELECT CASE WHEN g % 3 = 0 THEN 'a/b' ELSE 'org' END, g, 'title \"' || g || E'\"\\n', g % 2 = 0,
               ARRAY['x', 'y z'], jsonb_build_object('n', g), timestamptz '2024-01-01 00:00+00' + g * interval '1 hour'
             FROM generate_series(1, 500) g;
             INSERT INTO items VALUES ('org', 0, NULL, NULL, NULL, NULL, NULL);",
        )
        .await
        .unwrap();
    let relation = load_relation(&client, "public", "items")
        .await
        .unwrap()
        .unwrap();
    let cols = ["org", "id", "title", "done", "tags", "meta", "at"].map(String::from);
    let query = SnapshotQuery::new(&relation, Some(&cols), Some("(id % 7) <> 3".into())).unwrap();
    let lines = snapshot_lines(&config, &query).await;

    let rows = client
        .query(
            "SELECT org, id, title, done::text, tags::text, meta::text, at::text FROM items WHERE (id % 7) <> 3",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(lines.len(), rows.len());
    for r in rows {
        let (org, id): (String, i32) = (r.get(0), r.get(1));
        let key = format!(
            "\"public\".\"items\"/\"{}\"/\"{id}\"",
            org.replace('/', "//")
        );
        let line = lines
            .get(&key)
            .unwrap_or_else(|| panic!("no line for key {key}"));
        let text = |i: usize| {
            r.get::<_, Option<String>>(i)
                .map_or(Json::Null, Json::String)
        };
        let expected = serde_json::json!({
            "org": org, "id": id.to_string(), "title": text(2), "done": text(3), "tags": text(4), "meta": text(5), "at": text(6),
        });
        assert_eq!(line["value"], expected, "{key}");
        assert_eq!(
            line["headers"],
            serde_json::json!({"operation": "insert", "relation": ["public", "items"]})
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_without_primary_key_are_keyed_by_all_columns_in_name_order() {
    let (_cluster, client, config) = setup().await;
    client
        .batch_execute(
            "CREATE TABLE log (b text, a int); INSERT INTO log VALUES ('x', 1), (NULL, 2);",
        )
        .await
        .unwrap();
    let relation = load_relation(&client, "public", "log")
        .await
        .unwrap()
        .unwrap();
    let query = SnapshotQuery::new(&relation, None, None).unwrap();
    let keys: Vec<String> = snapshot_lines(&config, &query).await.into_keys().collect();
    assert_eq!(
        keys,
        [
            "\"public\".\"log\"/\"1\"/\"x\"",
            "\"public\".\"log\"/\"2\"/_"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_rows_are_electrics_exact_bytes() {
    let (_cluster, client, config) = setup().await;
    client
        .batch_execute(
            r#"CREATE TABLE "we/ird" (id text PRIMARY KEY, "q""n" text, n int);
               INSERT INTO "we/ird" VALUES ('a/1', 'say "hi"', NULL);"#,
        )
        .await
        .unwrap();
    let relation = load_relation(&client, "public", "we/ird")
        .await
        .unwrap()
        .unwrap();
    let query = SnapshotQuery::new(&relation, None, None).unwrap();
    let mut encoder = RowEncoder::for_query(&query).with_snapshot_mark(9);
    let mut conn = WireConnection::connect(&config, "snapshot-test", Mode::Query)
        .await
        .unwrap();
    let mut snapshot = Snapshot::begin(&mut conn, &query).await.unwrap();
    let mut lines = Vec::new();
    while snapshot
        .next_chunk(&mut |row| {
            let mut line = Vec::new();
            encoder.encode(&row, &mut line)?;
            lines.push(String::from_utf8(line).unwrap());
            Ok(())
        })
        .await
        .unwrap()
    {}
    assert_eq!(
        lines,
        [
            r#"{"key":"\"public\".\"we/ird\"/\"a//1\"","value":{"id":"a/1","q\"n":"say \"hi\"","n":null},"headers":{"operation":"insert","relation":["public","we/ird"],"snapshot_mark":9}}"#
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_snapshot_matches_what_the_rows_include() {
    let (_cluster, client, config) = setup().await;
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    let committed_xid: String = client
        .query_one(
            "INSERT INTO t VALUES (1) RETURNING pg_current_xact_id()::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // A transaction still open while the snapshot is taken.
    let open = syncline_pg::connect(&config).await.unwrap();
    open.batch_execute("SET search_path = public")
        .await
        .unwrap();
    open.batch_execute("BEGIN; INSERT INTO t VALUES (2)")
        .await
        .unwrap();
    let open_xid: String = open
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await
        .unwrap()
        .get(0);

    let relation = load_relation(&client, "public", "t")
        .await
        .unwrap()
        .unwrap();
    let query = SnapshotQuery::new(&relation, None, None).unwrap();
    let mut conn = WireConnection::connect(&config, "snapshot-test", Mode::Query)
        .await
        .unwrap();
    let mut snapshot = Snapshot::begin(&mut conn, &query).await.unwrap();
    let info = snapshot.info().clone();
    open.batch_execute("COMMIT").await.unwrap();
    let later_xid: String = client
        .query_one("SELECT pg_current_xact_id()::text FROM (SELECT 1) x", &[])
        .await
        .unwrap()
        .get(0);
    let mut ids = Vec::new();
    while snapshot
        .next_chunk(&mut |row| {
            ids.push(row.get(0).unwrap().to_vec());
            Ok(())
        })
        .await
        .unwrap()
    {}

    assert_eq!(
        ids,
        vec![1i32.to_be_bytes().to_vec()],
        "only the committed row is in the snapshot"
    );
    let xid32 = |s: &str| u32::try_from(s.parse::<u64>().unwrap() & 0xFFFF_FFFF).unwrap();
    assert!(info.pg_snapshot.is_visible(xid32(&committed_xid)));
    assert!(!info.pg_snapshot.is_visible(xid32(&open_xid)));
    assert!(!info.pg_snapshot.is_visible(xid32(&later_xid)));
    assert!(info.wal_lsn.0 > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subsets_come_in_postgres_order_with_their_mark() {
    let (_cluster, client, config) = setup().await;
    client
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, title text, n int);
             INSERT INTO items SELECT g, CASE WHEN g % 4 = 0 THEN NULL ELSE 't' || (g % 9) END, g % 5
             FROM generate_series(1, 300) g;",
        )
        .await
        .unwrap();
    let relation = load_relation(&client, "public", "items")
        .await
        .unwrap()
        .unwrap();
    let order = r#""public"."items"."title" DESC NULLS LAST, "n" ASC, "public"."items"."id" DESC"#;
    let query = SnapshotQuery::new(&relation, None, Some(r#""n" <> 2"#.into()))
        .unwrap()
        .ordered(Some(order.into()), Some(40), Some(25));
    let mut encoder = RowEncoder::for_query(&query).with_snapshot_mark(77);
    let mut conn = WireConnection::connect(&config, "subset-test", Mode::Query)
        .await
        .unwrap();
    let mut snapshot = Snapshot::begin(&mut conn, &query).await.unwrap();
    let mut ids = Vec::new();
    let mut line = Vec::new();
    while snapshot
        .next_chunk(&mut |row| {
            line.clear();
            encoder.encode(&row, &mut line)?;
            let json: Json = serde_json::from_slice(&line).expect("valid JSON line");
            assert_eq!(
                json["headers"],
                serde_json::json!({"operation": "insert", "relation": ["public", "items"], "snapshot_mark": 77})
            );
            ids.push(json["value"]["id"].as_str().unwrap().to_owned());
            Ok(())
        })
        .await
        .unwrap()
    {}
    let expected: Vec<String> = client
        .query(
            &format!(
                r#"SELECT id::text FROM items WHERE "n" <> 2 ORDER BY {order} LIMIT 40 OFFSET 25"#
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 40);
    assert_eq!(ids, expected);
}
