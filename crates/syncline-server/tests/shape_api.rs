//! The shape API end to end: a private Postgres, a server in this process, real HTTP.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fixture, fixture_with};
use serde_json::json;
use syncline_core::ReplicaIdentity;

const ITEMS: &str = "CREATE TABLE items (id int PRIMARY KEY, title text, flag bool, n numeric);
     INSERT INTO items VALUES (1, 'one', true, 1.5), (2, 'two/2', false, NULL), (3, 'three', NULL, 3);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_sync_then_live_changes() {
    let f = fixture(ITEMS).await;
    let first = f.get("table=items&offset=-1").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.header("electric-up-to-date").is_none());
    assert!(first.header("electric-schema").is_some());
    assert_eq!(first.controls(), vec!["snapshot-end"]);
    let rows: Vec<_> = first.changes().iter().map(|m| m["value"].clone()).collect();
    assert_eq!(
        rows,
        vec![
            json!({"id":"1","title":"one","flag":"true","n":"1.5"}),
            json!({"id":"2","title":"two/2","flag":"false","n":null}),
            json!({"id":"3","title":"three","flag":null,"n":"3"}),
        ]
    );
    assert_eq!(
        first.changes()[1]["key"],
        json!("\"public\".\"items\"/\"2\"")
    );
    assert_eq!(
        first.changes()[0]["headers"],
        json!({"operation":"insert","relation":["public","items"]})
    );
    let handle = first.header("electric-handle").unwrap().to_owned();
    let offset = first.header("electric-offset").unwrap().to_owned();

    let caught_up = f
        .get(&format!("table=items&offset={offset}&handle={handle}"))
        .await;
    assert_eq!(caught_up.status, 200);
    assert_eq!(caught_up.controls(), vec!["up-to-date"]);
    assert!(caught_up.header("electric-up-to-date").is_some());
    let offset = caught_up.header("electric-offset").unwrap().to_owned();

    let live_url = format!("table=items&offset={offset}&handle={handle}&live=true");
    let (live, ()) = tokio::join!(f.get(&live_url), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.db.batch_execute(
            "BEGIN; INSERT INTO items VALUES (4, 'four', true, 4); \
             UPDATE items SET title = 'uno' WHERE id = 1; DELETE FROM items WHERE id = 2; COMMIT;",
        )
        .await
        .unwrap();
    });
    assert_eq!(live.status, 200, "{}", live.body);
    assert!(live.header("electric-cursor").is_some());
    assert!(live.header("electric-schema").is_none());
    let changes = live.changes();
    assert_eq!(changes.len(), 3, "{}", live.body);
    assert_eq!(changes[0]["headers"]["operation"], "insert");
    assert_eq!(
        changes[0]["value"],
        json!({"id":"4","title":"four","flag":"t","n":"4"})
    );
    assert_eq!(changes[1]["headers"]["operation"], "update");
    assert_eq!(changes[1]["value"], json!({"id":"1","title":"uno"}));
    assert_eq!(changes[2]["headers"]["operation"], "delete");
    assert_eq!(changes[2]["value"], json!({"id":"2"}));
    let lsn = changes[0]["headers"]["lsn"].as_str().unwrap();
    for (i, c) in changes.iter().enumerate() {
        assert_eq!(c["headers"]["lsn"], lsn);
        assert_eq!(c["headers"]["op_position"], json!(i * 2));
        assert_eq!(c["headers"]["last"].as_bool(), (i == 2).then_some(true));
        assert!(c["headers"]["txids"][0].is_u64());
    }
    assert_eq!(live.header("electric-offset").unwrap(), format!("{lsn}_4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_clause_moves_rows_in_and_out() {
    let f = fixture(ITEMS).await;
    let query = "table=items&where=id%20%3E%20%241&params%5B1%5D=1&replica=full";
    let (handle, offset, snapshot) = f.sync(query).await;
    let ids: Vec<_> = snapshot.iter().map(|m| m["value"]["id"].clone()).collect();
    assert_eq!(ids, vec![json!("2"), json!("3")]);
    f.db.batch_execute(
        "UPDATE items SET id = 0 WHERE id = 3; UPDATE items SET id = 7 WHERE id = 1; \
         UPDATE items SET title = 'deux' WHERE id = 2;",
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut offset = offset;
    while seen.len() < 3 {
        let r = f
            .get(&format!("{query}&offset={offset}&handle={handle}&live"))
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        seen.extend(r.changes().into_iter().cloned());
        offset = r.header("electric-offset").unwrap().to_owned();
    }
    assert_eq!(seen[0]["headers"]["operation"], "delete");
    assert_eq!(seen[0]["value"]["id"], "3");
    assert_eq!(
        seen[0]["value"]["title"], "three",
        "replica=full deletes carry the row"
    );
    assert_eq!(seen[1]["headers"]["operation"], "insert");
    assert_eq!(seen[1]["value"]["id"], "7");
    assert_eq!(seen[2]["headers"]["operation"], "update");
    assert_eq!(
        seen[2]["value"],
        json!({"id":"2","title":"deux","flag":"f","n":null})
    );
    assert_eq!(seen[2]["old_value"], json!({"title":"two/2"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_and_delete_give_409_and_a_new_handle() {
    let f = fixture(ITEMS).await;
    let (handle, offset, _) = f.sync("table=items").await;
    f.db.batch_execute("TRUNCATE items").await.unwrap();
    let mut status = 200;
    let mut reply = None;
    for _ in 0..50 {
        let r = f
            .get(&format!("table=items&offset={offset}&handle={handle}&live"))
            .await;
        status = r.status;
        if status == 409 {
            reply = Some(r);
            break;
        }
    }
    assert_eq!(status, 409);
    let reply = reply.unwrap();
    assert_eq!(reply.body, json!([{"headers":{"control":"must-refetch"}}]));
    let new_handle = reply.header("electric-handle").unwrap().to_owned();
    assert_ne!(new_handle, handle);
    let stored = |handle: &str| f.storage.path().join("logs").join(handle).exists();
    assert!(stored(&new_handle));
    assert!(!stored(&handle), "the truncated shape's log is deleted");
    let (again, _, rows) = f.sync("table=items").await;
    assert_eq!(again, new_handle);
    assert!(rows.is_empty());

    let deleted = f
        .request(reqwest::Method::DELETE, &format!("handle={new_handle}"))
        .await;
    assert_eq!(deleted.status, 202);
    let after = f
        .get(&format!("table=items&offset=0_0&handle={new_handle}"))
        .await;
    assert_eq!(after.status, 409);
    assert_ne!(after.header("electric-handle").unwrap(), new_handle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_electric_errors() {
    let f = fixture(ITEMS).await;
    let r = f.get("table=nope&offset=-1").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        json!({"message":"Invalid request","errors":{"table":["Table \"public\".\"nope\" does not exist. If the table name contains capitals or special characters you must quote it."]}})
    );
    let r = f.get("table=items&offset=-1&where=1%20x%201").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["errors"]["where"],
        json!(["At location 17: syntax error at or near \"x\""])
    );
    let r = f.get("table=items&offset=-1&columns=title").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["errors"]["columns"],
        json!(["The list of columns must include all primary key columns, missing: id"])
    );
    let r = f.get("table=items&offset=abc").await;
    assert_eq!(r.body["errors"]["offset"], json!(["has invalid format"]));
    let r = f.get("table=items&offset=-1&live=true").await;
    assert_eq!(
        r.body["errors"]["live"],
        json!(["can't be true when offset == -1"])
    );
    assert_eq!(r.header("cache-control"), Some("no-store"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_close_at_the_threshold_and_offsets_resume() {
    let f = fixture(
        "CREATE TABLE big (id int PRIMARY KEY, body text);
         INSERT INTO big SELECT i, repeat('x', 200) FROM generate_series(1, 500) i;",
    )
    .await;
    let first = f.get("table=big&offset=-1").await;
    let first_rows = first.changes().len();
    assert!(
        first_rows > 10 && first_rows < 500,
        "{first_rows} rows in chunk 0"
    );
    let (_, _, all) = f.sync("table=big").await;
    assert_eq!(all.len(), 500);
    let mut ids: Vec<i64> = all
        .iter()
        .map(|m| m["value"]["id"].as_str().unwrap().parse().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, (1..=500).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_now_and_health() {
    let f = fixture(ITEMS).await;
    let r = f.get("table=items&offset=now").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.controls(), vec!["up-to-date"]);
    assert_eq!(r.header("electric-has-data"), Some("false"));
    let health = f
        .http
        .get(format!("http://{}/v1/health", f.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.text().await.unwrap(),
        r#"{"status":"active","role":"writer"}"#
    );
}

/// A subset request waits for its shape's snapshot as a first request does (at least 20 s),
/// not only for the long-poll timeout: a snapshot slower than that (here 100,000 rows against
/// a 100 ms timeout) is no reason for a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subset_request_waits_for_a_slow_snapshot() {
    let f = fixture_with(
        "CREATE TABLE items (id int PRIMARY KEY, n int);
         INSERT INTO items SELECT g, g % 3 FROM generate_series(1, 100000) g;",
        |c| c.long_poll_timeout_ms = 100,
    )
    .await;
    let started = std::time::Instant::now();
    let subset = f
        .get("table=items&offset=-1&subset__where=id%20%3C%205&subset__order_by=id")
        .await;
    assert_eq!(subset.status, 200, "{}", subset.body);
    assert_eq!(subset.body["data"].as_array().unwrap().len(), 4);
    assert!(
        started.elapsed() > Duration::from_millis(100),
        "the snapshot took longer than the long-poll timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subset_snapshots_by_get_and_post() {
    let f = fixture(
        "CREATE TABLE items (id int PRIMARY KEY, title text, n int);
         INSERT INTO items SELECT g, 't' || (g % 7), g % 3 FROM generate_series(1, 100) g;",
    )
    .await;
    let base = "table=items&log=changes_only&where=n%20%3C%3E%202";
    let (handle, _, rows) = f.sync(base).await;
    assert!(rows.is_empty(), "changes_only shapes start empty");

    let subset = f
        .get(&format!(
            "{base}&offset=-1&subset__where=id%20%3E%20%241&subset__params%5B1%5D=10\
             &subset__order_by=title%20DESC%2C%20id&subset__limit=15&subset__offset=5"
        ))
        .await;
    assert_eq!(subset.status, 200, "{}", subset.body);
    assert_eq!(subset.header("electric-snapshot"), Some("true"));
    assert_eq!(subset.header("electric-handle"), Some(handle.as_str()));
    assert_eq!(subset.header("cache-control"), Some("no-cache"));
    assert!(subset.header("electric-schema").is_some());
    assert!(subset.header("electric-offset").is_some());
    let metadata = &subset.body["metadata"];
    for field in ["xmin", "xmax", "database_lsn"] {
        assert!(
            metadata[field].as_str().unwrap().parse::<u64>().is_ok(),
            "{field}: {metadata}"
        );
    }
    let mark = metadata["snapshot_mark"].as_u64().unwrap();
    let data = subset.body["data"].as_array().unwrap();
    let ids: Vec<String> = data
        .iter()
        .map(|m| m["value"]["id"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = f
        .db
        .query(
            "SELECT id::text FROM items WHERE n <> 2 AND id > 10 ORDER BY title DESC, items.id LIMIT 15 OFFSET 5",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, expected);
    assert_eq!(
        data[0]["headers"],
        json!({"operation":"insert","relation":["public","items"],"snapshot_mark":mark})
    );

    let url = format!("http://{}/v1/shape?{base}&offset=-1", f.server.addr);
    let posted = f
        .http
        .post(&url)
        .header("content-type", "application/json")
        .body(r#"{"where":"title = $1","params":{"1":"t3"},"order_by":"id DESC","limit":2}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 200);
    assert_eq!(posted.headers()["cache-control"], "no-cache");
    let body: serde_json::Value = serde_json::from_str(&posted.text().await.unwrap()).unwrap();
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["value"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["94", "87"], "n <> 2 AND title = 't3', newest first");

    let bad = f
        .get(&format!(
            "{base}&offset=-1&subset__order_by=nope&subset__limit=1"
        ))
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.body["errors"]["subset"]["order_by"],
        json!(["At location 0: unknown reference nope"])
    );
    let bad = f
        .get(&format!(
            "{base}&offset=-1&subset__where=id%20%2F%200%20%3D%201"
        ))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(
        bad.body["errors"]["subset"]["where"],
        json!(["division by zero"])
    );
}

/// Reads server-sent events until `done` says the collected `data:` payloads are enough.
async fn read_events(
    response: &mut reqwest::Response,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut text = String::new();
    let mut events = Vec::new();
    while !done(&events) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            if let Some(data) = event.strip_prefix("data: ") {
                events.push(serde_json::from_str(data.trim_end()).unwrap());
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_batches_until_the_shape_goes() {
    let f = fixture(ITEMS).await;
    let (handle, offset, _) = f.sync("table=items").await;
    let url = format!(
        "http://{}/v1/shape?table=items&offset={offset}&handle={handle}&live=true&live_sse=true",
        f.server.addr
    );
    let mut sse = f
        .http
        .get(&url)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    assert_eq!(sse.headers()["cache-control"], "public, max-age=59");
    assert_eq!(sse.headers()["electric-offset"], offset.as_str());
    assert!(sse.headers().contains_key("electric-cursor"));

    f.db.batch_execute("INSERT INTO items VALUES (5, 'five', true, 5)")
        .await
        .unwrap();
    f.db.batch_execute(
        "UPDATE items SET title = 'cinq' WHERE id = 5; DELETE FROM items WHERE id = 1",
    )
    .await
    .unwrap();
    let ups = |e: &[serde_json::Value]| {
        e.iter()
            .filter(|m| m["headers"]["control"] == "up-to-date")
            .count()
    };
    let events = read_events(&mut sse, |e| {
        e.iter().filter(|m| m.get("key").is_some()).count() == 3 && ups(e) >= 1
    })
    .await;
    let ops: Vec<&str> = events
        .iter()
        .filter_map(|m| m["headers"]["operation"].as_str())
        .collect();
    assert_eq!(ops, ["insert", "update", "delete"]);
    let last = events.last().unwrap();
    assert_eq!(last["headers"]["control"], "up-to-date");
    let update_lsn = events[events.len() - 2]["headers"]["lsn"].as_str().unwrap();
    assert_eq!(last["headers"]["global_last_seen_lsn"], update_lsn);

    f.db.batch_execute("TRUNCATE items").await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while sse.chunk().await.unwrap().is_some() {}
    })
    .await;
    assert!(closed.is_ok(), "the stream ends when the shape goes");
    let after = f
        .get(&format!(
            "table=items&offset={offset}&handle={handle}&live=true&live_sse=true"
        ))
        .await;
    assert_eq!(after.status, 409);
}

/// The threads of this process (the test and the server in it), from `/proc`.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Hundreds of SSE streams on one shape, started at the log's end and woken by one write
/// together, each get the write, and none hands its thread over to read: the runtime starts
/// no thread per stream (it did, up to its 512 blocking threads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_woken_together_do_not_start_a_thread_each() {
    const STREAMS: usize = 300;
    let f = fixture(ITEMS).await;
    let (handle, offset, _) = f.sync("table=items").await;
    let url = format!(
        "http://{}/v1/shape?table=items&offset={offset}&handle={handle}&live=true&live_sse=true",
        f.server.addr
    );
    let before = threads();
    let mut streams = futures_util::future::join_all((0..STREAMS).map(|_| {
        f.http
            .get(&url)
            .header("accept", "text/event-stream")
            .send()
    }))
    .await;
    for stream in &streams {
        assert_eq!(stream.as_ref().unwrap().status(), 200);
    }
    f.db.batch_execute("INSERT INTO items VALUES (5, 'five', true, 5)")
        .await
        .unwrap();
    let batches = futures_util::future::join_all(streams.iter_mut().map(|stream| {
        read_events(stream.as_mut().unwrap(), |e| {
            e.iter().any(|m| m["headers"]["control"] == "up-to-date")
        })
    }))
    .await;
    for events in &batches {
        let keys: Vec<&str> = events.iter().filter_map(|m| m["key"].as_str()).collect();
        assert_eq!(keys, [r#""public"."items"/"5""#]);
    }
    let after = threads();
    assert!(
        after < before + 50,
        "{after} threads with {STREAMS} streams woken, {before} before they started"
    );
}

/// A shape deleted while its SSE streams are reading its log ends every stream as a shape
/// that is gone does (cleanly; the reconnect gets 409), never with a broken response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_reading_when_the_shape_goes_end_cleanly() {
    const ROUNDS: usize = 5;
    const STREAMS: usize = 20;
    const COMMITS: usize = 40;
    let f = fixture(ITEMS).await;
    for round in 0..ROUNDS {
        let (handle, offset, _) = f.sync("table=items").await;
        let url = format!(
            "http://{}/v1/shape?table=items&offset={offset}&handle={handle}&live=true&live_sse=true",
            f.server.addr
        );
        let streams = futures_util::future::join_all((0..STREAMS).map(|_| {
            f.http
                .get(&url)
                .header("accept", "text/event-stream")
                .send()
        }))
        .await;
        // Each commit wakes every stream to read; the truncate lands while they do.
        let mut writes: String = (0..COMMITS)
            .map(|i| {
                let id = 100 + round * COMMITS + i;
                format!("BEGIN; INSERT INTO items VALUES ({id}, 'x', true, {id}); COMMIT; ")
            })
            .collect();
        writes.push_str("TRUNCATE items");
        f.db.batch_execute(&writes).await.unwrap();
        for stream in streams {
            let mut stream = stream.unwrap();
            assert_eq!(stream.status(), 200);
            let ended = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match stream.chunk().await {
                        Ok(Some(_)) => {}
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(e),
                    }
                }
            })
            .await
            .expect("the stream ends when the shape goes");
            assert!(ended.is_ok(), "round {round}: the stream broke: {ended:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_turns_away_excess_requests_and_metrics_count_them() {
    let f = common::fixture_with(ITEMS, |c| {
        c.max_concurrent_requests = syncline_server::config::ConcurrencyLimits {
            initial: 5,
            existing: 1,
        };
    })
    .await;
    let (handle, offset, _) = f.sync("table=items").await;
    let live = format!("table=items&offset={offset}&handle={handle}&live=true");
    let (held, refused) = tokio::join!(f.get(&live), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.get(&format!("table=items&offset={offset}&handle={handle}"))
            .await
    });
    assert_eq!(held.status, 200);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.body["code"], "concurrent_request_limit_exceeded");
    assert_eq!(
        refused.body["message"],
        "Concurrent existing request limit exceeded (limit: 1), please retry"
    );
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((6..=10).contains(&retry));

    let metrics = f
        .http
        .get(format!("http://{}/metrics", f.server.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"syncline_admission_rejected_total{kind="existing"} 1"#,
        r#"syncline_http_requests_total{method="GET",status="503"} 1"#,
        "syncline_shapes 1",
        "syncline_snapshot_rows_total 3",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_pipeline_lets_postgres_release_wal_of_other_tables() {
    let f = fixture(&format!("{ITEMS} CREATE TABLE other (id int, body text);")).await;
    f.sync("table=items").await;
    f.db.batch_execute(
        "INSERT INTO other SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g",
    )
    .await
    .unwrap();
    wait_acknowledged(&f).await;
}

/// Waits until the server has acknowledged to Postgres everything written so far: every
/// change is durable in the shape logs. (The insert position: test clusters commit
/// asynchronously, so a commit may not be written yet.)
async fn wait_acknowledged(f: &common::Fixture) {
    let written: String =
        f.db.query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
    for _ in 0..100 {
        let confirmed: bool =
            f.db.query_one(
                "SELECT confirmed_flush_lsn >= $1::text::pg_lsn FROM pg_replication_slots \
                 WHERE slot_name = 'syncline_slot_test'",
                &[&written],
            )
            .await
            .unwrap()
            .get(0);
        if confirmed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the slot's confirmed position does not pass {written}");
}

/// A change to shapes nobody waits on is made durable without being written to their logs'
/// files (the flush keeps it in memory, see `Writer::set_deferring`); the next request on
/// each shape writes it first and reads it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_nobody_waits_for_is_read_by_the_next_request() {
    let f = fixture(ITEMS).await;
    // Two shapes the change reaches: their logs are flushed together, through the group journal.
    let shapes = [
        "table=items&where=id%20%3E%200",
        "table=items&where=id%20%3C%2010",
    ];
    let mut synced = Vec::new();
    for query in shapes {
        let (handle, offset, _) = f.sync(query).await;
        synced.push((query, handle, offset));
    }
    f.db.batch_execute("INSERT INTO items VALUES (5, 'five', true, 5)")
        .await
        .unwrap();
    wait_acknowledged(&f).await;
    let store = syncline_storage::Store::open_read_only(f.storage.path().join("logs")).unwrap();
    let in_files = |handle: &str| {
        store
            .open_reader(handle)
            .unwrap()
            .end()
            .unwrap()
            .last_committed
    };
    for (query, handle, offset) in &synced {
        let before = in_files(handle);
        let reply = f
            .get(&format!("{query}&offset={offset}&handle={handle}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let ids: Vec<_> = reply
            .changes()
            .iter()
            .map(|m| m["value"]["id"].clone())
            .collect();
        assert_eq!(ids, vec![json!("5")], "{}", reply.body);
        let after = in_files(handle);
        assert!(
            before < after,
            "the acknowledged change reached the files only with the request ({before:?}, then {after:?})"
        );
    }
}

/// Follows a shape live until a response other than an empty 200 arrives; returns its status.
async fn next_live_status(f: &common::Fixture, query: &str, handle: &str, offset: &str) -> u16 {
    let mut offset = offset.to_owned();
    for _ in 0..20 {
        let r = f
            .get(&format!(
                "{query}&offset={offset}&handle={handle}&live=true"
            ))
            .await;
        if r.status != 200 || !r.changes().is_empty() {
            return r.status;
        }
        offset = r.header("electric-offset").unwrap().to_owned();
    }
    panic!("no change reached {query}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_invalidate_only_the_shapes_they_touch() {
    let f = fixture(ITEMS).await;
    let named = "table=items&columns=id,title";
    let whole = "table=items";
    let by_n = "table=items&columns=id,title&where=n%20%3E%200";
    let mut shapes = Vec::new();
    for query in [named, whole, by_n] {
        let (handle, offset, _) = f.sync(query).await;
        shapes.push((query, handle, offset));
    }
    f.db.batch_execute(
        "ALTER TABLE items ADD COLUMN extra int; INSERT INTO items VALUES (10, 'ten', true, 10, 1)",
    )
    .await
    .unwrap();
    let mut statuses = Vec::new();
    for (query, handle, offset) in &shapes {
        statuses.push(next_live_status(&f, query, handle, offset).await);
    }
    assert_eq!(
        statuses,
        [200, 409, 200],
        "a new column only changes the whole-table shape"
    );

    let (named_handle, named_offset, _) = f.sync(named).await;
    let (by_n_handle, by_n_offset, _) = f.sync(by_n).await;
    f.db.batch_execute(
        "ALTER TABLE items ALTER COLUMN n TYPE bigint; INSERT INTO items VALUES (11, 'eleven', true, 11, 1)",
    )
    .await
    .unwrap();
    assert_eq!(
        next_live_status(&f, named, &named_handle, &named_offset).await,
        200
    );
    assert_eq!(
        next_live_status(&f, by_n, &by_n_handle, &by_n_offset).await,
        409,
        "retyping a where-clause column invalidates the shape"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_shapes_evicts_the_least_recently_used() {
    let f = common::fixture_with(ITEMS, |c| c.max_shapes = Some(2)).await;
    let a = "table=items&where=id%20%3D%201";
    let b = "table=items&where=id%20%3D%202";
    let (a_handle, a_offset, _) = f.sync(a).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (b_handle, b_offset, _) = f.sync(b).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    f.get(&format!("{a}&offset={a_offset}&handle={a_handle}"))
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    f.sync("table=items&where=id%20%3D%203").await;
    let a_again = f
        .get(&format!("{a}&offset={a_offset}&handle={a_handle}"))
        .await;
    assert_eq!(a_again.status, 200, "a was used after b");
    let b_again = f
        .get(&format!("{b}&offset={b_offset}&handle={b_handle}"))
        .await;
    assert_eq!(b_again.status, 409, "b was used least recently");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queryable_columns_limit_selection_and_subsets() {
    let f = fixture(ITEMS).await;
    let base = "table=items&queryable_columns=id,title";
    let (_, _, rows) = f.sync(base).await;
    assert_eq!(rows[0]["value"], json!({"id":"1","title":"one"}));

    let r = f.get(&format!("{base}&columns=id,n&offset=-1")).await;
    assert_eq!(
        r.body["errors"]["columns"],
        json!(["The following columns are not queryable: n"])
    );
    let r = f.get("table=items&queryable_columns=title&offset=-1").await;
    assert_eq!(
        r.body["errors"]["queryable_columns"],
        json!(["The list of columns must include all primary key columns, missing: id"])
    );
    let r = f
        .get(&format!("{base}&offset=-1&subset__where=n%20%3E%201"))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["errors"]["subset"]["where"],
        json!(["At location 0: unknown reference n"])
    );
    let r = f
        .get(&format!(
            "{base}&offset=-1&subset__where=title%20%3C%3E%20%27one%27&subset__order_by=id%20DESC&subset__limit=1"
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["data"][0]["value"],
        json!({"id":"3","title":"three"})
    );
}

/// Rows (id → title) after applying change messages in order.
fn apply_titles(
    rows: &mut std::collections::BTreeMap<String, String>,
    messages: &[serde_json::Value],
) {
    for m in messages {
        let id = m["value"]["id"].as_str().unwrap().to_owned();
        match m["headers"]["operation"].as_str().unwrap() {
            "delete" => {
                rows.remove(&id);
            }
            _ => {
                if let Some(title) = m["value"]["title"].as_str() {
                    rows.insert(id, title.to_owned());
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_merges_updates_and_every_reader_ends_at_the_same_state() {
    let f = common::fixture_with(
        "CREATE TABLE items (id int PRIMARY KEY, title text);
         INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c');",
        |c| c.compaction_period_s = 1,
    )
    .await;
    let query = "table=items&experimental_compaction=true";
    let (handle, early_offset, early) = f.sync(query).await;
    for i in 0..300 {
        f.db.batch_execute(&format!(
            "UPDATE items SET title = 'title {i} {}' WHERE id = {}",
            "x".repeat(60),
            i % 3 + 1
        ))
        .await
        .unwrap();
    }
    f.db.batch_execute("DELETE FROM items WHERE id = 3; INSERT INTO items VALUES (4, 'd')")
        .await
        .unwrap();
    let expected: std::collections::BTreeMap<String, String> =
        f.db.query("SELECT id::text, title FROM items", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
    // 3 snapshot rows, 300 updates, a delete and an insert.
    let changes_made = 305;
    let mut after = Vec::new();
    for _ in 0..50 {
        after = f.sync(query).await.2;
        let mut rows = std::collections::BTreeMap::new();
        apply_titles(&mut rows, &after);
        if rows == expected && after.len() < changes_made {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        after.len() < changes_made,
        "{} messages for {changes_made} changes",
        after.len()
    );
    let mut fresh = std::collections::BTreeMap::new();
    apply_titles(&mut fresh, &after);
    assert_eq!(fresh, expected, "a client starting now");

    let mut resumed = std::collections::BTreeMap::new();
    apply_titles(&mut resumed, &early);
    let mut offset = early_offset;
    loop {
        let r = f
            .get(&format!("{query}&offset={offset}&handle={handle}"))
            .await;
        assert_eq!(r.status, 200);
        let changes: Vec<serde_json::Value> = r.changes().into_iter().cloned().collect();
        apply_titles(&mut resumed, &changes);
        offset = r.header("electric-offset").unwrap().to_owned();
        if r.header("electric-up-to-date").is_some() {
            break;
        }
    }
    assert_eq!(
        resumed, expected,
        "a client resuming from before compaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_chunks_are_served_at_electrics_offsets() {
    let f = fixture("CREATE TABLE one (id int PRIMARY KEY); INSERT INTO one VALUES (1);").await;
    let first = f.get("table=one&offset=-1").await;
    assert_eq!(first.header("electric-offset"), Some("0_0"));
    assert_eq!(first.controls(), ["snapshot-end"]);
    assert!(first.header("electric-up-to-date").is_none());
    let handle = first.header("electric-handle").unwrap().to_owned();
    let etag = first.header("etag").unwrap().to_owned();
    let next = f
        .get(&format!("table=one&offset=0_0&handle={handle}"))
        .await;
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(next.header("electric-offset"), Some("0_inf"));
    assert_eq!(next.controls(), ["up-to-date"]);

    // Later changes never join the `-1` response: its bytes and etag stay the same.
    f.db.batch_execute("INSERT INTO one VALUES (2), (3)")
        .await
        .unwrap();
    let live = f
        .get(&format!("table=one&offset=0_inf&handle={handle}&live"))
        .await;
    assert_eq!(live.changes().len(), 2, "{}", live.body);
    let again = f.get("table=one&offset=-1").await;
    assert_eq!(again.header("etag"), Some(etag.as_str()));
    assert_eq!(again.body, first.body);
    let after = f
        .get(&format!("table=one&offset=0_0&handle={handle}"))
        .await;
    assert_eq!(after.changes().len(), 2, "the log follows the snapshot");
    assert_eq!(after.controls(), ["up-to-date"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_and_log_chunks_are_cut_at_the_threshold() {
    let f = fixture(
        "CREATE TABLE big (id int PRIMARY KEY, pad text);
         INSERT INTO big SELECT g, repeat('x', 80) FROM generate_series(1, 1000) g;",
    )
    .await;
    let mut reply = f.get("table=big&offset=-1").await;
    let handle = reply.header("electric-handle").unwrap().to_owned();
    let mut sizes = Vec::new();
    let mut offsets = Vec::new();
    loop {
        offsets.push(reply.header("electric-offset").unwrap().to_owned());
        if reply.controls().contains(&"snapshot-end") {
            break;
        }
        sizes.push(reply.len);
        reply = f
            .get(&format!(
                "table=big&offset={}&handle={handle}",
                offsets.last().unwrap()
            ))
            .await;
    }
    let expected: Vec<String> = (0..offsets.len()).map(|k| format!("0_{k}")).collect();
    assert_eq!(offsets, expected, "snapshot chunk k ends at 0_k");
    assert!(sizes.len() > 5);
    for size in &sizes {
        assert!(
            (10_000..12_000).contains(size),
            "chunk of {size} bytes: {sizes:?}"
        );
    }
    // The changes start a chunk of their own: the first catch-up is a full chunk too.
    f.db.batch_execute("UPDATE big SET pad = repeat('y', 80)")
        .await
        .unwrap();
    let mut offset = offsets.last().unwrap().clone();
    let mut log_sizes = Vec::new();
    while log_sizes.len() < 3 {
        let r = f
            .get(&format!("table=big&offset={offset}&handle={handle}&live"))
            .await;
        offset = r.header("electric-offset").unwrap().to_owned();
        if r.header("electric-up-to-date").is_none() {
            log_sizes.push(r.len);
        }
    }
    for size in &log_sizes {
        assert!(
            (10_000..12_000).contains(size),
            "log chunk of {size} bytes: {log_sizes:?}"
        );
    }
}

/// A short long-poll timeout does not fail an initial request whose snapshot is held up
/// (here by a lock): the request waits for the snapshot, not for the long-poll timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_held_up_longer_than_the_long_poll_timeout_is_waited_for() {
    let f = common::fixture_with(ITEMS, |c| c.long_poll_timeout_ms = 100).await;
    f.sync("table=items").await;
    f.db.batch_execute("BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let request = f.get("table=items&offset=-1&where=id%20%3E%200");
    let release = async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        f.db.batch_execute("COMMIT").await.unwrap();
    };
    let (reply, ()) = tokio::join!(request, release);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(!reply.changes().is_empty(), "{}", reply.body);
}

/// Shapes of different definitions are made at once, and concurrent requests for one
/// definition all get its one shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_make_one_shape_per_definition() {
    let f = common::fixture(
        "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 40);",
    )
    .await;
    let requests = (0..80).map(|i| {
        let f = &f;
        async move {
            let k = i % 20;
            let reply = f.get(&format!("table=t&where=id>{k}&offset=-1")).await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            (k, reply.header("electric-handle").unwrap().to_owned())
        }
    });
    let replies = futures_util::future::join_all(requests).await;
    let mut handles: std::collections::HashMap<usize, std::collections::HashSet<String>> =
        std::collections::HashMap::new();
    for (k, handle) in replies {
        handles.entry(k).or_default().insert(handle);
    }
    assert_eq!(handles.len(), 20);
    let distinct: std::collections::HashSet<&String> = handles.values().flatten().collect();
    assert_eq!(distinct.len(), 20, "one handle per definition: {handles:?}");
    for k in 0..20usize {
        let (_, _, rows) = f.sync(&format!("table=t&where=id>{k}")).await;
        assert_eq!(rows.len(), 40 - k);
    }
}

/// Shapes on one table share one description of it; a table that changed (a column made
/// nullable) gets a new one, which the shapes that still fit it follow. (The first shape on a
/// table describes it as it was before Syncline published it, with its old replica identity,
/// so the comparisons start at the second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_on_one_table_share_its_description() {
    let f = fixture(&format!(
        "{ITEMS} CREATE TABLE other (id int PRIMARY KEY, title text NOT NULL);"
    ))
    .await;
    let mut shapes = Vec::new();
    for query in [
        "table=items",
        "table=items&where=id%20%3E%201",
        "table=items&columns=id,title",
        "table=other",
        "table=other&where=id%20%3E%201",
    ] {
        let (handle, _, _) = f.sync(query).await;
        shapes.push(f.server.state.shapes.by_handle(&handle).unwrap());
    }
    let (items, other) = (&shapes[1].relation, &shapes[4].relation);
    assert!(Arc::ptr_eq(items, &shapes[2].relation));
    assert_eq!(
        (items.name.as_str(), other.name.as_str()),
        ("items", "other")
    );

    f.db.batch_execute("ALTER TABLE other ALTER COLUMN title DROP NOT NULL")
        .await
        .unwrap();
    let (handle, _, _) = f.sync("table=other&where=id%20%3E%202").await;
    let changed = f.server.state.shapes.by_handle(&handle).unwrap();
    assert!(!Arc::ptr_eq(other, &changed.relation));
    // A request for an existing shape refreshes what it describes to the new description.
    f.sync("table=other&where=id%20%3E%201").await;
    assert!(Arc::ptr_eq(&changed.relation, &shapes[4].schema_relation()));
    assert!(Arc::ptr_eq(other, &shapes[4].relation));
}

/// The first shape on a table is made before publishing sets `REPLICA IDENTITY FULL`; it then
/// holds the table's description as published, the one later shapes on the table hold (shapes
/// share a snapshot only when they hold the same description).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_shape_on_a_table_holds_its_description_as_published() {
    let f =
        fixture("CREATE TABLE t (id int PRIMARY KEY, n int); INSERT INTO t VALUES (1, 1);").await;
    let (first, _, _) = f.sync("table=t&where=n%20%3D%201").await;
    let (second, _, _) = f.sync("table=t&where=n%20%3D%202").await;
    let shapes = &f.server.state.shapes;
    let first = shapes.by_handle(&first).unwrap();
    let second = shapes.by_handle(&second).unwrap();
    assert_eq!(first.relation.replica_identity, ReplicaIdentity::Full);
    assert!(Arc::ptr_eq(&first.relation, &second.relation));
}

/// Shapes of one table waiting for a snapshot together share one query: each still gets
/// exactly the rows Postgres selects with its where clause. When one shape's condition fails
/// on a row, the shared query fails, and each shape takes its own snapshot: that one learns
/// its error, the others get their rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_waiting_together_share_a_snapshot_and_each_gets_its_rows() {
    let f = fixture_with(
        "CREATE TABLE gate (id int PRIMARY KEY);
         INSERT INTO gate VALUES (1);
         CREATE TABLE rows (id int PRIMARY KEY, n int, name text);
         INSERT INTO rows SELECT i, i % 7, CASE WHEN i % 5 = 0 THEN NULL
             WHEN i % 3 = 0 THEN 'a' || i ELSE 'b' || i END
         FROM generate_series(1, 300) i;",
        // One connection for snapshots: shapes queue behind the one running.
        |c| c.db_pool_size = 1,
    )
    .await;
    f.sync("table=gate&where=id%20%3E%200").await;
    let metrics = f.server.state.metrics.clone();
    let oracle = |w: &str| {
        let decoded = [
            ("%20", " "),
            ("%3D", "="),
            ("%3E", ">"),
            ("%3C", "<"),
            ("%25", "%"),
        ]
        .iter()
        .fold(w.to_owned(), |w, (code, text)| w.replace(code, text));
        // No where clause: every row.
        let decoded = if decoded.is_empty() {
            decoded
        } else {
            format!("({decoded}) AND")
        };
        let sql = format!("SELECT id FROM rows WHERE {decoded} true ORDER BY id");
        let db = &f.db;
        async move {
            db.query(&sql, &[])
                .await
                .unwrap()
                .iter()
                .map(|r| i64::from(r.get::<_, i32>(0)))
                .collect::<Vec<i64>>()
        }
    };

    let shared = [
        "n%20%3D%203",
        "n%20%3E%204",
        "name%20IS%20NULL",
        "name%20LIKE%20'a%25'",
        "n%20%3D%20100",
        "name%20%3D%20'b1'%20OR%20n%20%3D%200",
        "true",
        "",
    ];
    queue_behind_gate(&f, "id%20%3C%2010", "rows", &shared).await;
    assert_eq!(metrics.snapshots_shared.get(), shared.len() as u64);
    for w in shared {
        let (_, _, changes) = f.sync(&shape_query("rows", w)).await;
        assert_eq!(ids_of(&changes), oracle(w).await, "where {w}");
    }
    assert_eq!(oracle("n = 100").await, Vec::<i64>::new());
    assert!(!oracle("n = 3").await.is_empty());

    let alone = ["n%20%3D%201", "name::int%20%3E%200", "n%20%3C%203"];
    queue_behind_gate(&f, "id%20%3C%2020", "rows", &alone).await;
    assert_eq!(
        metrics.snapshots_shared.get(),
        shared.len() as u64,
        "the shared query failed: each shape took its own"
    );
    let failed = f
        .get("table=rows&offset=-1&where=name::int%20%3E%200")
        .await;
    assert_eq!(failed.status, 400, "{}", failed.body);
    assert_eq!(
        failed.body["errors"]["where"][0],
        "invalid input syntax for type integer: \"b1\""
    );
    for w in ["n%20%3D%201", "n%20%3C%203"] {
        let (_, _, changes) = f.sync(&format!("table=rows&where={w}")).await;
        assert_eq!(ids_of(&changes), oracle(w).await, "where {w}");
    }

    // The shared snapshot's shapes are live: a new row reaches the ones it is in.
    f.db.batch_execute("INSERT INTO rows VALUES (1000, 3, 'a1000')")
        .await
        .unwrap();
    wait_for_async(|| async {
        let (_, _, changes) = f.sync("table=rows&where=n%20%3D%203").await;
        ids_of(&changes).contains(&1000)
    })
    .await;
    let (_, _, changes) = f.sync("table=rows&where=n%20%3E%204").await;
    assert!(!ids_of(&changes).contains(&1000));
}

/// Shapes of a table whose rows are too many to keep in memory for a shared snapshot give
/// it up and take one snapshot each, streamed to their logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_of_a_large_table_take_one_snapshot_each() {
    let f = fixture_with(
        "CREATE TABLE gate (id int PRIMARY KEY);
         INSERT INTO gate VALUES (1);
         CREATE TABLE wide (id int PRIMARY KEY, body text);
         INSERT INTO wide SELECT i, repeat(md5(i::text), 30000) FROM generate_series(1, 40) i;",
        |c| c.db_pool_size = 1,
    )
    .await;
    f.sync("table=gate&where=id%20%3E%200").await;
    let wheres = ["id%20%3E%205", "id%20%3C%2030"];
    queue_behind_gate(&f, "id%20%3C%2010", "wide", &wheres).await;
    assert_eq!(f.server.state.metrics.snapshots_shared.get(), 0);
    for (w, rows) in wheres.iter().zip([35, 29]) {
        let (_, _, changes) = f.sync(&format!("table=wide&where={w}")).await;
        assert_eq!(ids_of(&changes).len(), rows, "where {w}");
        assert!(changes
            .iter()
            .all(|m| m["value"]["body"].as_str().unwrap().len() == 960_000));
    }
}

/// The query string of a shape of `table` with where clause `w` (none when empty).
fn shape_query(table: &str, w: &str) -> String {
    if w.is_empty() {
        format!("table={table}")
    } else {
        format!("table={table}&where={w}")
    }
}

/// The sorted ids of `changes`.
fn ids_of(changes: &[serde_json::Value]) -> Vec<i64> {
    let mut ids: Vec<i64> = changes
        .iter()
        .map(|m| m["value"]["id"].as_str().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Requests a new shape of `gate` (`gate_where`; its table published already) whose
/// snapshot waits for a lock, holding the server's one snapshot connection, then a new shape
/// of `table` for each of `wheres`; once they all wait for a snapshot, lets the lock go and
/// waits for every first answer.
async fn queue_behind_gate(f: &common::Fixture, gate_where: &str, table: &str, wheres: &[&str]) {
    let metrics = &f.server.state.metrics;
    let locker = f._cluster.connect("postgres").await;
    locker
        .batch_execute("BEGIN; LOCK TABLE gate IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let gate = f.http.get(format!(
        "http://{}/v1/shape?table=gate&offset=-1&where={gate_where}",
        f.server.addr
    ));
    let gate = tokio::spawn(gate.send());
    wait_for(|| metrics.snapshots_running.get() == 1).await;
    let mut first = tokio::task::JoinSet::new();
    for w in wheres {
        let url = format!(
            "http://{}/v1/shape?{}&offset=-1",
            f.server.addr,
            shape_query(table, w)
        );
        first.spawn(f.http.get(url).send());
    }
    let queued = i64::try_from(wheres.len()).unwrap();
    wait_for(|| metrics.snapshots_waiting.get() == queued).await;
    locker.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(gate.await.unwrap().unwrap().status(), 200);
    while let Some(sent) = first.join_next().await {
        sent.unwrap().unwrap();
    }
}

/// Waits (up to 30 s) until `done`.
async fn wait_for(done: impl Fn() -> bool) {
    wait_for_async(|| std::future::ready(done())).await;
}

/// Waits (up to 30 s) until `done` answers true.
async fn wait_for_async<F: std::future::Future<Output = bool>>(done: impl Fn() -> F) {
    for _ in 0..3000 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not done within 30 s");
}
